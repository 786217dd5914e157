// all_gather Bruck: a rank keeps the blocks it has in rotated order (its own first); at step
// k it sends what it holds (up to 2^k blocks) to rank - 2^k and appends what rank + 2^k
// sends. After ceil(log2 n) steps it holds all n blocks, rotated by its rank, and one local
// rotation puts them in rank order. Fewest steps for any n: small messages.
#include <algorithm>
#include <cstring>

#include "collectives/allgather/allgather.h"
#include "collectives/patterns/schedules.h"

namespace tpcomm::coll {

void allgather_bruck(CollComm& comm, const void* input, void* output, size_t block,
                     const ExecParams&) {
  const int n = comm.size(), r = comm.rank();
  uint8_t* out = static_cast<uint8_t*>(output);
  if (out != input) std::memmove(out, input, block);
  size_t have = 1;
  for (const schedule::BruckStep& s : schedule::bruck(n, r)) {
    size_t bytes = static_cast<size_t>(s.blocks) * block;
    Request rq = comm.irecv(out + have * block, bytes, s.from, 0);
    Request sq = comm.isend(out, bytes, s.to, 0);
    comm.wait(rq);
    comm.wait(sq);
    have += static_cast<size_t>(s.blocks);
  }
  // Position i holds block (r + i) mod n: rotate right by r blocks.
  std::rotate(out, out + static_cast<size_t>(n - r) * block, out + static_cast<size_t>(n) * block);
}

}  // namespace tpcomm::coll
