// gather linear: the root posts one receive per rank straight into the output and every
// other rank sends its block. One step; the root's link carries (n-1) blocks: large blocks.
#include <cstring>
#include <vector>

#include "collectives/gather/gather.h"

namespace tpcomm::coll {

void gather_linear(CollComm& comm, const void* input, void* output, size_t block, int root,
                   const ExecParams&) {
  const int n = comm.size(), r = comm.rank();
  if (r != root) {
    Request s = comm.isend(input, block, root, 0);
    comm.wait(s);
    return;
  }
  std::vector<Request> recvs;
  for (int i = 0; i < n; ++i) {
    if (i != root)
      recvs.push_back(comm.irecv(at(output, static_cast<size_t>(i) * block), block, i, 0));
  }
  void* mine = at(output, static_cast<size_t>(root) * block);
  if (mine != input) std::memcpy(mine, input, block);
  comm.wait_all(recvs);
}

}  // namespace tpcomm::coll
