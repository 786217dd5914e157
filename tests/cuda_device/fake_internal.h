// State shared by the fake driver's files (see fake_cuda.h).
#pragma once

#include <cuda.h>

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

namespace fake {

struct Context;

/// A FIFO worker thread.
struct Stream {
  Context* ctx = nullptr;
  bool legacy = false;
  std::mutex mu;
  std::condition_variable cv;
  std::deque<std::function<void()>> q;
  uint64_t enqueued = 0, done = 0;
  bool stop = false;
  CUstreamCaptureStatus capture = CU_STREAM_CAPTURE_STATUS_NONE;
  uint64_t captured_ops = 0;
  std::thread worker;

  explicit Stream(Context* c, bool is_legacy);
  ~Stream();  // drains, then joins
  void push(std::function<void()> op);
  void wait_idle();
  bool idle();
};

struct Context {
  int device = 0;
  int refs = 0;  // primary context: alive while refs > 0
  Stream* legacy = nullptr;
  std::set<Stream*> streams;
};

enum class Kind { Device, PinnedHost, Registered, Managed };

/// A range of addresses the fake knows.
struct Region {
  uintptr_t base = 0;
  size_t size = 0;
  Kind kind = Kind::Device;
  int device = 0;
  Context* ctx = nullptr;
  uint64_t id = 0;
  char* alias = nullptr;   // where the bytes are (host kinds: the base itself)
  size_t map_size = 0;     // bytes mapped at alias (device kinds)
  int memfd = -1;          // legacy device allocation: exported by IPC handles
  uint64_t nonce = 0;      // names the memfd ("fakecuda-d<dev>-<nonce>")
  bool imported = false;   // opened from a peer's IPC handle
  bool vmm = false;        // mapped with cuMemMap
  bool accessible = true;  // VMM: after cuMemSetAccess
  uint64_t handle = 0;     // VMM: the allocation handle mapped here
};

/// A VMM physical allocation (cuMemCreate / cuMemImportFromShareableHandle).
struct Handle {
  int memfd = -1;
  char* alias = nullptr;
  size_t size = 0;
  int device = 0;
  bool exportable = false;
  int refs = 1;  // the handle itself + each mapping
};

struct State {
  std::mutex mu;
  bool initialized = false;
  int ndevices = 2;
  std::atomic<int> delay_us{0};
  /// tpcomm_fake_cuda_hold: while set, no stream starts an operation (tests that check what
  /// has not run yet, without counting on time).
  std::mutex hold_mu;
  std::condition_variable hold_cv;
  bool held = false;
  bool reuse = false;
  uintptr_t arena = 0, arena_size = 0, arena_next = 0;
  std::multimap<size_t, uintptr_t> freed;    // size -> base, for FAKE_CUDA_REUSE_ADDRESSES
  std::map<uintptr_t, Region> regions;       // by base
  std::map<uintptr_t, size_t> reservations;  // VMM address reservations
  std::set<Handle*> handles;
  /// IPC handles opened in this process, by nonce: where, by which context, how many times.
  struct Opened {
    uintptr_t base = 0;
    Context* ctx = nullptr;
    int refs = 0;
  };
  std::map<uint64_t, Opened> opened;
  std::vector<Context> contexts;
  uint64_t next_id = 1;
  std::set<CUevent> events;
};

State& st();
thread_local inline Context* current = nullptr;

constexpr size_t kGranularity = 2u << 20;
constexpr size_t kPage = 4096;

inline size_t round_up(size_t n, size_t a) { return (n + a - 1) / a * a; }

/// The region holding [p, p + n), or nullptr. Caller holds st().mu.
Region* find(uintptr_t p, size_t n);
/// True when p lies in the device arena (live or freed device memory).
bool in_arena(uintptr_t p);
/// Where host code may touch [p, p + n): the alias for device memory, p for host memory;
/// nullptr for freed or foreign device addresses, out-of-bounds ranges, and VMM mappings
/// without access. `want_device`: 1 must be device (or managed), 0 must be host, -1 either.
char* view(uintptr_t p, size_t n, int want_device);
/// Reserves `size` bytes of device addresses (aligned to `align`). Caller holds st().mu.
uintptr_t reserve_addresses(size_t size, size_t align);
/// A new memfd of `size` bytes named for device `dev` and `nonce`, mapped at *alias.
int make_memfd(size_t size, int dev, uint64_t nonce, char** alias);

/// The current context, checked: CUDA_SUCCESS, NOT_INITIALIZED or INVALID_CONTEXT.
CUresult need_context();
/// The stream `s` stands for (0, CU_STREAM_LEGACY, CU_STREAM_PER_THREAD: the current context's
/// legacy stream), or nullptr when it is not a live stream.
Stream* resolve_stream(CUstream s);
/// Waits for every stream of every context (cuMemFree's implicit synchronisation).
void sync_all_streams();
bool stream_live(Stream* s);

}  // namespace fake
