// all_gather by direct reads. Chunked: each rank copies its block (chunk by chunk) into its
// staging; every rank then copies every block from its owner's staging into its output.
// Single copy (TPCOMM_SHM_COLL_CMA=on, or auto up to a few MiB per block): each rank
// publishes its input's address, reads every peer's block straight from the peer's input with
// process_vm_readv, posts that it is done, and returns once every peer has posted the same
// (its input is no longer read).
#include <cstring>

#include "collectives/shm/algos.h"
#include "core/cross_memory.h"
#include "tpcomm/error.hpp"

namespace tpcomm::coll::shm {

namespace {
constexpr const char* kOp = "all_gather";

void allgather_cross(Team& t, const uint8_t* in, uint8_t* out, size_t m, bool in_place,
                     bool stream) {
  const int n = t.size(), me = t.rank();
  const int h = t.acquire_buf(kOp);
  *t.desc(me, h) = StepDesc{reinterpret_cast<uint64_t>(in), 1};
  const uint64_t v = t.post();
  t.release_buf(h);
  if (!in_place) copy_out(out + me * m, in, m, stream);
  int err = 0, failed = -1;
  for (int i = 1; i < n && err == 0; ++i) {
    const int r = (me + i) % n;
    t.wait_peer(r, v, kOp);
    err = xmem::cross_memory_read(static_cast<pid_t>(t.pid(r)), out + r * m, t.desc(r, h)->addr, m,
                                  kCrossPiece);
    if (err != 0) failed = r;
  }
  // Our input may be reused once every peer has read it.
  t.wait_all(t.post(), kOp);
  if (err != 0) {
    throw TransportError("shm_direct all_gather: rank " + std::to_string(me) + " could not read " +
                         std::to_string(m) + " bytes from rank " + std::to_string(failed) +
                         " (pid " + std::to_string(t.pid(failed)) + ") with process_vm_readv: " +
                         std::strerror(err) + "; TPCOMM_SHM_COLL_CMA=off keeps to staging copies");
  }
}

}  // namespace

void allgather_shm(Team& t, const void* in_v, void* out_v, size_t m) {
  const int n = t.size(), me = t.rank();
  const auto* in = static_cast<const uint8_t*>(in_v);
  auto* out = static_cast<uint8_t*>(out_v);
  const bool in_place = in == out + me * m;
  const bool stream = stream_results(m * static_cast<size_t>(n));
  if (m <= kSmallBytes) {
    const int p = t.acquire_small(kOp);
    std::memcpy(t.small_payload(me, p), in, m);
    const uint64_t v = t.post_small(p);
    if (!in_place) std::memcpy(out + me * m, in, m);
    for (int i = 1; i < n; ++i) {
      const int r = (me + i) % n;
      t.wait_small(r, p, v, kOp);
      std::memcpy(out + r * m, t.small_payload(r, p), m);
    }
    return;
  }
  // Reading a peer's large block with process_vm_readv cost as much CPU time per byte as the
  // two staging copies on the development VM (page pinning); blocks up to a few MiB are read
  // directly in auto mode too (Team::cross_direct).
  if (t.cross_direct(m)) {
    allgather_cross(t, in, out, m, in_place, stream);
    return;
  }
  const size_t chunk = t.chunk_for(m);
  for (size_t off = 0; off < m; off += chunk) {
    const size_t c = std::min(chunk, m - off);
    const int h = t.acquire_buf(kOp);
    std::memcpy(t.staging(me, h), in + off, c);
    const uint64_t v = t.post();
    t.release_buf(h);
    // Our own block from the staging copy (in cache), not from the input again.
    if (!in_place) copy_out(out + me * m + off, t.staging(me, h), c, stream);
    for (int i = 1; i < n; ++i) {
      const int r = (me + i) % n;
      t.wait_peer(r, v, kOp);
      copy_out(out + r * m + off, t.staging(r, h), c, stream);
    }
  }
}

}  // namespace tpcomm::coll::shm
