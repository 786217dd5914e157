// Recursive halving (reduce-scatter) and recursive doubling (all-gather) between the
// power-of-two "new ranks" of a recursive::Fold, over a buffer whose layout assigns each
// group of new ranks [lo, hi) a contiguous element range. Rabenseifner's all_reduce runs both;
// reduce_scatter's recursive_halving runs the first.
#pragma once

#include <cstddef>
#include <functional>

#include "collectives/comm.h"
#include "collectives/patterns/recursive.h"
#include "collectives/patterns/ring.h"
#include "collectives/util.h"

namespace tpcomm::coll {

/// Element range owned by the new ranks [lo, hi).
using GroupRange = std::function<ring::Range(int lo, int hi)>;

/// Recursive halving in place over `data` (this rank takes part as new rank `new_rank`):
/// on return, range(new_rank, new_rank + 1) holds the merge of all participants' data there.
/// `tmp` must hold half of the largest range exchanged.
void halving_reduce_scatter(CollComm& comm, void* data, const recursive::Fold& fold, int new_rank,
                            const GroupRange& range, const Reducer& red, uint8_t* tmp, int tag);

/// Recursive doubling all-gather in place over `data`: range(new_rank, new_rank + 1) is valid
/// on entry; on return range(0, pof2) is.
void doubling_all_gather(CollComm& comm, void* data, const recursive::Fold& fold, int new_rank,
                         const GroupRange& range, size_t esize, int tag);

}  // namespace tpcomm::coll
