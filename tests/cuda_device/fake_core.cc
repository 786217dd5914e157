// The fake driver's initialisation, devices, contexts, streams, events and capture, error
// names and cuGetProcAddress (see fake_cuda.h).
#include <sys/resource.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "cuda_device/fake_cuda.h"
#include "cuda_device/fake_internal.h"

namespace fake {

State& st() {
  static State* s = new State;  // never destroyed: worker threads may outlive static teardown
  return *s;
}

Stream::Stream(Context* c, bool is_legacy) : ctx(c), legacy(is_legacy) {
  worker = std::thread([this] {
    std::unique_lock<std::mutex> lock(mu);
    for (;;) {
      cv.wait(lock, [&] { return stop || !q.empty(); });
      if (q.empty()) return;
      auto op = std::move(q.front());
      q.pop_front();
      lock.unlock();
      {
        std::unique_lock<std::mutex> hold(st().hold_mu);
        st().hold_cv.wait(hold, [] { return !st().held; });
      }
      if (int us = st().delay_us; us > 0)
        std::this_thread::sleep_for(std::chrono::microseconds(us));
      op();
      lock.lock();
      ++done;
      cv.notify_all();
    }
  });
}

Stream::~Stream() {
  {
    std::lock_guard<std::mutex> lock(mu);
    stop = true;
    cv.notify_all();
  }
  worker.join();
}

void Stream::push(std::function<void()> op) {
  std::lock_guard<std::mutex> lock(mu);
  if (capture != CU_STREAM_CAPTURE_STATUS_NONE) {  // captured into the graph, not run
    ++captured_ops;
    return;
  }
  q.push_back(std::move(op));
  ++enqueued;
  cv.notify_all();
}

void Stream::wait_idle() {
  std::unique_lock<std::mutex> lock(mu);
  const uint64_t target = enqueued;
  cv.wait(lock, [&] { return done >= target; });
}

bool Stream::idle() {
  std::lock_guard<std::mutex> lock(mu);
  return done == enqueued;
}

CUresult need_context() {
  if (!st().initialized) return CUDA_ERROR_NOT_INITIALIZED;
  if (current == nullptr || current->refs <= 0) return CUDA_ERROR_INVALID_CONTEXT;
  return CUDA_SUCCESS;
}

bool stream_live(Stream* s) {
  for (auto& c : st().contexts)
    if (c.refs > 0 && (c.legacy == s || c.streams.count(s))) return true;
  return false;
}

Stream* resolve_stream(CUstream s) {
  if (s == nullptr || s == CU_STREAM_LEGACY || s == CU_STREAM_PER_THREAD)
    return current ? current->legacy : nullptr;
  auto* p = reinterpret_cast<Stream*>(s);
  std::lock_guard<std::mutex> lock(st().mu);
  return stream_live(p) ? p : nullptr;
}

void sync_all_streams() {
  std::vector<Stream*> all;
  {
    std::lock_guard<std::mutex> lock(st().mu);
    for (auto& c : st().contexts) {
      if (c.refs <= 0) continue;
      all.push_back(c.legacy);
      all.insert(all.end(), c.streams.begin(), c.streams.end());
    }
  }
  for (Stream* s : all) s->wait_idle();
}

namespace {

int env_int(const char* name, int def) {
  const char* v = std::getenv(name);  // the fake's own knobs: it is a test double
  return v && *v ? std::atoi(v) : def;
}

struct Event {
  Context* ctx = nullptr;
  std::mutex mu;
  std::condition_variable cv;
  uint64_t recorded = 0, completed = 0;
};

Event* event_of(CUevent e) {
  std::lock_guard<std::mutex> lock(st().mu);
  return st().events.count(e) ? reinterpret_cast<Event*>(e) : nullptr;
}

}  // namespace

}  // namespace fake

using namespace fake;

extern "C" {

int tpcomm_fake_cuda_version(void) { return 1; }
void tpcomm_fake_cuda_set_delay_us(int us) { st().delay_us = us; }
void tpcomm_fake_cuda_hold(int on) {
  std::lock_guard<std::mutex> lock(st().hold_mu);
  st().held = on != 0;
  st().hold_cv.notify_all();
}
void tpcomm_fake_cuda_set_reuse(int on) {
  std::lock_guard<std::mutex> lock(st().mu);
  st().reuse = on != 0;
}
static std::atomic<int> g_init_calls{0};
int tpcomm_fake_cuda_init_calls(void) { return g_init_calls.load(); }

CUresult CUDAAPI cuInit(unsigned int flags) {
  g_init_calls.fetch_add(1);
  if (flags != 0) return CUDA_ERROR_INVALID_VALUE;
  State& s = st();
  std::lock_guard<std::mutex> lock(s.mu);
  if (s.initialized) return CUDA_SUCCESS;
  s.ndevices = env_int("FAKE_CUDA_DEVICES", 2);
  s.delay_us = env_int("FAKE_CUDA_DELAY_US", 0);
  s.reuse = env_int("FAKE_CUDA_REUSE_ADDRESSES", 0) != 0;
  if (s.ndevices <= 0) return CUDA_ERROR_NO_DEVICE;
  s.contexts = std::vector<Context>(static_cast<size_t>(s.ndevices));
  for (int i = 0; i < s.ndevices; ++i) s.contexts[static_cast<size_t>(i)].device = i;
  // Legacy allocations keep their memfd open (IPC export): allow many of them.
  rlimit rl{};
  if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
    rl.rlim_cur = rl.rlim_max;
    setrlimit(RLIMIT_NOFILE, &rl);
  }
  s.initialized = true;
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuDriverGetVersion(int* v) {
  if (v == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *v = CUDA_VERSION;
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuGetErrorName(CUresult r, const char** out) {
  if (out == nullptr) return CUDA_ERROR_INVALID_VALUE;
  // clang-format off
  switch (r) {
#define N(x) case x: *out = #x; return CUDA_SUCCESS;
    N(CUDA_SUCCESS)
    N(CUDA_ERROR_INVALID_VALUE)
    N(CUDA_ERROR_OUT_OF_MEMORY)
    N(CUDA_ERROR_NOT_INITIALIZED)
    N(CUDA_ERROR_NO_DEVICE)
    N(CUDA_ERROR_INVALID_DEVICE)
    N(CUDA_ERROR_INVALID_IMAGE)
    N(CUDA_ERROR_INVALID_CONTEXT)
    N(CUDA_ERROR_ALREADY_MAPPED)
    N(CUDA_ERROR_INVALID_HANDLE)
    N(CUDA_ERROR_NOT_FOUND)
    N(CUDA_ERROR_NOT_READY)
    N(CUDA_ERROR_ILLEGAL_STATE)
    N(CUDA_ERROR_NOT_SUPPORTED)
    N(CUDA_ERROR_NOT_PERMITTED)
    N(CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED)
    N(CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED)
    N(CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED)
    N(CUDA_ERROR_STREAM_CAPTURE_INVALIDATED)
    N(CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES)
    N(CUDA_ERROR_STUB_LIBRARY)
#undef N
      // clang-format on
    default:
      *out = nullptr;
      return CUDA_ERROR_INVALID_VALUE;
  }
}

CUresult CUDAAPI cuGetErrorString(CUresult r, const char** out) {
  const char* name = nullptr;
  CUresult e = cuGetErrorName(r, &name);
  if (e != CUDA_SUCCESS) return e;
  *out = "reported by tpcomm's fake CUDA driver";
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuDeviceGetCount(int* n) {
  if (!st().initialized) return CUDA_ERROR_NOT_INITIALIZED;
  if (n == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *n = st().ndevices;
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuDeviceGet(CUdevice* d, int ordinal) {
  if (!st().initialized) return CUDA_ERROR_NOT_INITIALIZED;
  if (d == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (ordinal < 0 || ordinal >= st().ndevices) return CUDA_ERROR_INVALID_DEVICE;
  *d = ordinal;
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuDeviceGetName(char* name, int len, CUdevice d) {
  if (!st().initialized) return CUDA_ERROR_NOT_INITIALIZED;
  if (d < 0 || d >= st().ndevices) return CUDA_ERROR_INVALID_DEVICE;
  if (name == nullptr || len <= 0) return CUDA_ERROR_INVALID_VALUE;
  std::snprintf(name, static_cast<size_t>(len), "tpcomm fake CUDA device %d", d);
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuDeviceGetAttribute(int* v, CUdevice_attribute a, CUdevice d) {
  if (!st().initialized) return CUDA_ERROR_NOT_INITIALIZED;
  if (d < 0 || d >= st().ndevices) return CUDA_ERROR_INVALID_DEVICE;
  if (v == nullptr) return CUDA_ERROR_INVALID_VALUE;
  switch (a) {
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR:
      *v = 9;
      break;
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR:
      *v = 0;
      break;
    case CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT:
      *v = 4;
      break;
    case CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK:
      *v = 1024;
      break;
    case CU_DEVICE_ATTRIBUTE_WARP_SIZE:
      *v = 32;
      break;
    case CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING:
      *v = 1;
      break;
    case CU_DEVICE_ATTRIBUTE_PCI_BUS_ID:
      *v = 0x10 + d;
      break;
    case CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID:
      *v = 0;
      break;
    case CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID:
      *v = 0;
      break;
    case CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED:
      *v = 1;
      break;
    case CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED:
      *v = 1;
      break;
    case CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED:
      *v = 0;
      break;
    case CU_DEVICE_ATTRIBUTE_MANAGED_MEMORY:
      *v = 1;
      break;
    default:
      return CUDA_ERROR_INVALID_VALUE;
  }
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuDevicePrimaryCtxRetain(CUcontext* ctx, CUdevice d) {
  if (!st().initialized) return CUDA_ERROR_NOT_INITIALIZED;
  if (d < 0 || d >= st().ndevices) return CUDA_ERROR_INVALID_DEVICE;
  if (ctx == nullptr) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard<std::mutex> lock(st().mu);
  Context& c = st().contexts[static_cast<size_t>(d)];
  if (c.refs++ == 0) c.legacy = new Stream(&c, true);
  *ctx = reinterpret_cast<CUcontext>(&c);
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuDevicePrimaryCtxRelease(CUdevice d) {
  if (!st().initialized) return CUDA_ERROR_NOT_INITIALIZED;
  if (d < 0 || d >= st().ndevices) return CUDA_ERROR_INVALID_DEVICE;
  Stream* legacy = nullptr;
  std::set<Stream*> streams;
  {
    std::lock_guard<std::mutex> lock(st().mu);
    Context& c = st().contexts[static_cast<size_t>(d)];
    if (c.refs <= 0) return CUDA_ERROR_INVALID_CONTEXT;
    if (--c.refs > 0) return CUDA_SUCCESS;
    legacy = c.legacy;
    streams.swap(c.streams);
    c.legacy = nullptr;
    // The context's device allocations go with it, as the driver's do.
    for (auto it = st().regions.begin(); it != st().regions.end();) {
      if (it->second.ctx == &c && it->second.kind == Kind::Device && !it->second.vmm)
        it = st().regions.erase(it);
      else
        ++it;
    }
  }
  for (Stream* s : streams) delete s;
  delete legacy;
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuCtxSetCurrent(CUcontext ctx) {
  if (!st().initialized) return CUDA_ERROR_NOT_INITIALIZED;
  if (ctx == nullptr) {
    current = nullptr;
    return CUDA_SUCCESS;
  }
  std::lock_guard<std::mutex> lock(st().mu);
  for (auto& c : st().contexts) {
    if (reinterpret_cast<CUcontext>(&c) == ctx) {
      if (c.refs <= 0) return CUDA_ERROR_INVALID_CONTEXT;
      current = &c;
      return CUDA_SUCCESS;
    }
  }
  return CUDA_ERROR_INVALID_CONTEXT;
}

CUresult CUDAAPI cuCtxGetCurrent(CUcontext* ctx) {
  if (!st().initialized) return CUDA_ERROR_NOT_INITIALIZED;
  if (ctx == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *ctx = reinterpret_cast<CUcontext>(current);
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuCtxGetDevice(CUdevice* d) {
  if (CUresult r = need_context(); r != CUDA_SUCCESS) return r;
  if (d == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *d = current->device;
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuCtxSynchronize(void) {
  if (CUresult r = need_context(); r != CUDA_SUCCESS) return r;
  std::vector<Stream*> all;
  {
    std::lock_guard<std::mutex> lock(st().mu);
    all.push_back(current->legacy);
    all.insert(all.end(), current->streams.begin(), current->streams.end());
  }
  for (Stream* s : all) s->wait_idle();
  return CUDA_SUCCESS;
}

// ---- streams ----

CUresult CUDAAPI cuStreamCreate(CUstream* out, unsigned int flags) {
  if (CUresult r = need_context(); r != CUDA_SUCCESS) return r;
  if (out == nullptr || (flags & ~CU_STREAM_NON_BLOCKING) != 0) return CUDA_ERROR_INVALID_VALUE;
  auto* s = new Stream(current, false);
  std::lock_guard<std::mutex> lock(st().mu);
  current->streams.insert(s);
  *out = reinterpret_cast<CUstream>(s);
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuStreamDestroy(CUstream h) {
  if (CUresult r = need_context(); r != CUDA_SUCCESS) return r;
  auto* s = reinterpret_cast<Stream*>(h);
  {
    std::lock_guard<std::mutex> lock(st().mu);
    if (h == nullptr || !stream_live(s) || s->legacy) return CUDA_ERROR_INVALID_HANDLE;
    s->ctx->streams.erase(s);
  }
  delete s;  // the work already queued completes first
  return CUDA_SUCCESS;
}

namespace {
CUresult capture_guard(Stream* s, bool invalidate) {
  std::lock_guard<std::mutex> lock(s->mu);
  if (s->capture == CU_STREAM_CAPTURE_STATUS_NONE) return CUDA_SUCCESS;
  if (invalidate) s->capture = CU_STREAM_CAPTURE_STATUS_INVALIDATED;
  return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
}
}  // namespace

CUresult CUDAAPI cuStreamSynchronize(CUstream h) {
  if (CUresult r = need_context(); r != CUDA_SUCCESS) return r;
  Stream* s = resolve_stream(h);
  if (s == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  if (CUresult r = capture_guard(s, true); r != CUDA_SUCCESS) return r;
  s->wait_idle();
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuStreamQuery(CUstream h) {
  if (CUresult r = need_context(); r != CUDA_SUCCESS) return r;
  Stream* s = resolve_stream(h);
  if (s == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  if (CUresult r = capture_guard(s, true); r != CUDA_SUCCESS) return r;
  return s->idle() ? CUDA_SUCCESS : CUDA_ERROR_NOT_READY;
}

CUresult CUDAAPI cuStreamIsCapturing(CUstream h, CUstreamCaptureStatus* status) {
  if (CUresult r = need_context(); r != CUDA_SUCCESS) return r;
  Stream* s = resolve_stream(h);
  if (s == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  if (status == nullptr) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard<std::mutex> lock(s->mu);
  *status = s->capture;
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuStreamBeginCapture(CUstream h, CUstreamCaptureMode mode) {
  if (CUresult r = need_context(); r != CUDA_SUCCESS) return r;
  Stream* s = resolve_stream(h);
  if (s == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  if (s->legacy) return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
  std::lock_guard<std::mutex> lock(s->mu);
  if (s->capture != CU_STREAM_CAPTURE_STATUS_NONE) return CUDA_ERROR_ILLEGAL_STATE;
  s->capture = CU_STREAM_CAPTURE_STATUS_ACTIVE;
  s->captured_ops = 0;
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuStreamEndCapture(CUstream h, CUgraph* graph) {
  if (CUresult r = need_context(); r != CUDA_SUCCESS) return r;
  Stream* s = resolve_stream(h);
  if (s == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  if (graph == nullptr) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard<std::mutex> lock(s->mu);
  if (s->capture == CU_STREAM_CAPTURE_STATUS_NONE) return CUDA_ERROR_ILLEGAL_STATE;
  const bool invalid = s->capture == CU_STREAM_CAPTURE_STATUS_INVALIDATED;
  s->capture = CU_STREAM_CAPTURE_STATUS_NONE;
  if (invalid) return CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
  *graph = reinterpret_cast<CUgraph>(new uint64_t(s->captured_ops));
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuGraphDestroy(CUgraph g) {
  if (g == nullptr) return CUDA_ERROR_INVALID_VALUE;
  delete reinterpret_cast<uint64_t*>(g);
  return CUDA_SUCCESS;
}

// ---- events ----

CUresult CUDAAPI cuEventCreate(CUevent* out, unsigned int flags) {
  if (CUresult r = need_context(); r != CUDA_SUCCESS) return r;
  if (out == nullptr) return CUDA_ERROR_INVALID_VALUE;
  auto* e = new Event;
  e->ctx = current;
  std::lock_guard<std::mutex> lock(st().mu);
  *out = reinterpret_cast<CUevent>(e);
  st().events.insert(*out);
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuEventDestroy(CUevent h) {
  if (CUresult r = need_context(); r != CUDA_SUCCESS) return r;
  Event* e = event_of(h);
  if (e == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  {
    std::lock_guard<std::mutex> lock(st().mu);
    st().events.erase(h);
  }
  // A record still queued refers to it: keep it until every stream passed it.
  sync_all_streams();
  delete e;
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuEventRecord(CUevent h, CUstream hs) {
  if (CUresult r = need_context(); r != CUDA_SUCCESS) return r;
  Event* e = event_of(h);
  Stream* s = resolve_stream(hs);
  if (e == nullptr || s == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  uint64_t gen;
  {
    std::lock_guard<std::mutex> lock(e->mu);
    gen = ++e->recorded;
  }
  s->push([e, gen] {
    std::lock_guard<std::mutex> lock(e->mu);
    if (gen > e->completed) e->completed = gen;
    e->cv.notify_all();
  });
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuEventQuery(CUevent h) {
  if (CUresult r = need_context(); r != CUDA_SUCCESS) return r;
  Event* e = event_of(h);
  if (e == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  std::lock_guard<std::mutex> lock(e->mu);
  return e->completed >= e->recorded ? CUDA_SUCCESS : CUDA_ERROR_NOT_READY;
}

CUresult CUDAAPI cuEventSynchronize(CUevent h) {
  if (CUresult r = need_context(); r != CUDA_SUCCESS) return r;
  Event* e = event_of(h);
  if (e == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  std::unique_lock<std::mutex> lock(e->mu);
  const uint64_t target = e->recorded;
  e->cv.wait(lock, [&] { return e->completed >= target; });
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuStreamWaitEvent(CUstream hs, CUevent h, unsigned int flags) {
  if (CUresult r = need_context(); r != CUDA_SUCCESS) return r;
  Event* e = event_of(h);
  Stream* s = resolve_stream(hs);
  if (e == nullptr || s == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  uint64_t target;
  {
    std::lock_guard<std::mutex> lock(e->mu);
    target = e->recorded;
  }
  s->push([e, target] {
    std::unique_lock<std::mutex> lock(e->mu);
    e->cv.wait(lock, [&] { return e->completed >= target; });
  });
  return CUDA_SUCCESS;
}

}  // extern "C"
