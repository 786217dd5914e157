// reduce binomial: each rank merges the results of its binomial subtrees (nearest first, as
// they finish first) and sends the total to its parent. ceil(log2 n) steps of the whole
// message: small messages.
#include "collectives/patterns/tree.h"
#include "collectives/reduce/reduce.h"

namespace tpcomm::coll {

void reduce_binomial(CollComm& comm, void* work, size_t count, int root, const Reducer& red,
                     const ExecParams&) {
  tree::Binomial b = tree::binomial(comm.size(), root, comm.rank());
  const size_t bytes = count * red.esize();
  Scratch tmp(b.children.empty() ? 0 : bytes);
  for (int child : b.children) {
    Request rq = comm.irecv(tmp.data(), bytes, child, 0);
    comm.wait(rq);
    red.merge(work, work, tmp.data(), count);
  }
  if (b.parent >= 0) {
    Request s = comm.isend(work, bytes, b.parent, 0);
    comm.wait(s);
  }
}

}  // namespace tpcomm::coll
