// Result copies with streaming stores (core/stream_copy.h), and the barrier.
#include "collectives/shm/algos.h"
#include "core/reduce.h"
#include "core/stream_copy.h"

namespace tpcomm::coll::shm {

void copy_out(void* dst, const void* src, size_t bytes, bool stream) {
  copy_bytes(dst, src, bytes, stream);
}

bool stream_results(size_t total_bytes) {
  const size_t t = kernels::nt_threshold();
  return t != 0 && total_bytes >= t;
}

void barrier_shm(Team& t) {
  const int p = t.acquire_small("barrier");
  const uint64_t v = t.post_small(p);
  t.wait_small_all(p, v, "barrier");
}

}  // namespace tpcomm::coll::shm
