// scatter binomial: in virtual ranks v = rank - root, a rank receives the blocks of its
// subtree [v, v + subtree) in one message from its parent, keeps its own (the first) and
// sends each child the blocks of the child's subtree. ceil(log2 n) steps: small blocks.
#include <cstring>
#include <vector>

#include "collectives/patterns/tree.h"
#include "collectives/scatter/scatter.h"

namespace tpcomm::coll {

void scatter_binomial(CollComm& comm, const void* input, void* output, size_t block, int root,
                      const ExecParams&) {
  const int n = comm.size();
  tree::Binomial b = tree::binomial(n, root, comm.rank());
  const size_t sub = static_cast<size_t>(b.subtree);
  if (b.parent >= 0 && b.children.empty()) {  // a leaf receives its block as is
    Request rq = comm.irecv(output, block, b.parent, 0);
    comm.wait(rq);
    return;
  }
  const uint8_t* buf = nullptr;
  Scratch tmp;
  if (b.parent < 0) {
    if (root == 0) {  // virtual order is rank order
      buf = static_cast<const uint8_t*>(input);
    } else {  // virtual block i is rank (i + root) mod n's
      tmp = Scratch(static_cast<size_t>(n) * block);
      size_t head = static_cast<size_t>(n - root) * block;
      std::memcpy(tmp.data(), at(input, static_cast<size_t>(root) * block), head);
      std::memcpy(tmp.data() + head, input, static_cast<size_t>(root) * block);
      buf = tmp.data();
    }
  } else {
    tmp = Scratch(sub * block);
    Request rq = comm.irecv(tmp.data(), sub * block, b.parent, 0);
    comm.wait(rq);
    buf = tmp.data();
  }
  std::vector<Request> sends;
  for (size_t i = b.children.size(); i-- > 0;) {  // largest subtree first
    size_t off = static_cast<size_t>(b.child_vranks[i] - b.vrank) * block;
    sends.push_back(
        comm.isend(buf + off, static_cast<size_t>(b.child_sizes[i]) * block, b.children[i], 0));
  }
  if (buf != output) std::memcpy(output, buf, block);
  comm.wait_all(sends);
}

}  // namespace tpcomm::coll
