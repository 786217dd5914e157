// broadcast ring: a chain root -> root+1 -> ... -> root-1 carrying the message in slices;
// each rank forwards a slice as soon as it has it, so after the pipeline fills every link
// is busy: time ~ (n - 2 + slices) x slice time. For large messages.
#include "collectives/patterns/ring.h"

#include <algorithm>
#include <vector>

#include "collectives/broadcast/broadcast.h"

namespace tpcomm::coll {

void broadcast_ring(CollComm& comm, void* data, size_t bytes, int root, const ExecParams& params) {
  const int n = comm.size();
  const int v = ring::mod(comm.rank() - root, n);
  const int prev = v == 0 ? -1 : ring::mod(comm.rank() - 1, n);
  const int next = v == n - 1 ? -1 : ring::mod(comm.rank() + 1, n);
  const size_t S = ring::num_slices(bytes, params.slice_bytes);
  const size_t W = std::min<size_t>(S, static_cast<size_t>(std::max(1, params.window)));
  auto range = [&](size_t j) { return ring::part(bytes, S, j); };
  std::vector<Request> recvs(W), sends;
  auto post_recv = [&](size_t j) {
    ring::Range r = range(j);
    recvs[j % W] = comm.irecv(at(data, r.offset), r.count, prev, 0);
  };
  if (prev >= 0) {
    for (size_t j = 0; j < W; ++j) post_recv(j);
  }
  for (size_t j = 0; j < S; ++j) {
    if (prev >= 0) {
      comm.wait(recvs[j % W]);
      if (j + W < S) post_recv(j + W);
    }
    if (next >= 0) {
      ring::Range r = range(j);
      sends.push_back(comm.isend(at(data, r.offset), r.count, next, 0));
    }
  }
  comm.wait_all(sends);
}

}  // namespace tpcomm::coll
