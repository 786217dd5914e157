// gather binomial: in virtual ranks v = rank - root, a rank collects the blocks of its
// subtree [v, v + subtree) into one buffer (its own first) and sends it to its parent in one
// message. ceil(log2 n) steps; the root then rotates the blocks into rank order. Small blocks.
#include <cstring>
#include <vector>

#include "collectives/gather/gather.h"
#include "collectives/patterns/tree.h"

namespace tpcomm::coll {

void gather_binomial(CollComm& comm, const void* input, void* output, size_t block, int root,
                     const ExecParams&) {
  const int n = comm.size();
  tree::Binomial b = tree::binomial(n, root, comm.rank());
  const size_t sub = static_cast<size_t>(b.subtree);
  if (b.parent >= 0 && b.children.empty()) {  // a leaf sends its input as is
    Request s = comm.isend(input, block, b.parent, 0);
    comm.wait(s);
    return;
  }
  // At root 0 the virtual order is the rank order: collect straight into the output.
  const bool direct = b.parent < 0 && root == 0;
  Scratch tmp(direct ? 0 : sub * block);
  uint8_t* buf = direct ? static_cast<uint8_t*>(output) : tmp.data();
  if (buf != input) std::memcpy(buf, input, block);
  std::vector<Request> recvs;
  for (size_t i = 0; i < b.children.size(); ++i) {
    size_t off = static_cast<size_t>(b.child_vranks[i] - b.vrank) * block;
    recvs.push_back(
        comm.irecv(buf + off, static_cast<size_t>(b.child_sizes[i]) * block, b.children[i], 0));
  }
  comm.wait_all(recvs);
  if (b.parent >= 0) {
    Request s = comm.isend(buf, sub * block, b.parent, 0);
    comm.wait(s);
    return;
  }
  if (!direct) {  // virtual block i belongs to rank (i + root) mod n
    size_t head = static_cast<size_t>(n - root) * block;
    std::memcpy(at(output, static_cast<size_t>(root) * block), buf, head);
    std::memcpy(output, buf + head, static_cast<size_t>(root) * block);
  }
}

}  // namespace tpcomm::coll
