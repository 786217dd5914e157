// broadcast binomial: the root sends to ranks at virtual distance n/2, n/4, ..., 1, and each
// receiver forwards the whole message into its own subtree. ceil(log2 n) steps of the whole
// message: the latency-optimal choice for small messages.
#include <vector>

#include "collectives/broadcast/broadcast.h"
#include "collectives/patterns/tree.h"

namespace tpcomm::coll {

void broadcast_binomial(CollComm& comm, void* data, size_t bytes, int root, const ExecParams&) {
  tree::Binomial b = tree::binomial(comm.size(), root, comm.rank());
  if (b.parent >= 0) {
    Request rq = comm.irecv(data, bytes, b.parent, 0);
    comm.wait(rq);
  }
  std::vector<Request> sends;
  for (size_t i = b.children.size(); i-- > 0;) {  // farthest (largest subtree) first
    sends.push_back(comm.isend(data, bytes, b.children[i], 0));
  }
  comm.wait_all(sends);
}

}  // namespace tpcomm::coll
