// scatter linear: the root sends every rank its block directly. One step: large blocks.
#include <cstring>
#include <vector>

#include "collectives/scatter/scatter.h"

namespace tpcomm::coll {

void scatter_linear(CollComm& comm, const void* input, void* output, size_t block, int root,
                    const ExecParams&) {
  const int n = comm.size(), r = comm.rank();
  if (r != root) {
    Request rq = comm.irecv(output, block, root, 0);
    comm.wait(rq);
    return;
  }
  std::vector<Request> sends;
  for (int i = 0; i < n; ++i) {
    if (i != root)
      sends.push_back(comm.isend(at(input, static_cast<size_t>(i) * block), block, i, 0));
  }
  const void* mine = at(input, static_cast<size_t>(root) * block);
  if (mine != output) std::memcpy(output, mine, block);
  comm.wait_all(sends);
}

}  // namespace tpcomm::coll
