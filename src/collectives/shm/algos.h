// Internal to src/collectives/shm: the direct-read algorithms, one file per operation. Each
// runs on every rank of the Team with the same sizes (so every rank takes the same branch
// and posts the same phases); counts are elements, sizes bytes. Group size 1 never gets here.
#pragma once

#include <cstddef>
#include <cstdint>

#include "collectives/shm/team.h"
#include "collectives/util.h"

namespace tpcomm::coll::shm {

/// Block `i` of `count` elements cut into `n` near-equal blocks (the first count % n one
/// longer).
struct Block {
  size_t offset;
  size_t count;
};
inline Block block_of(size_t count, int n, int i) {
  const size_t base = count / static_cast<size_t>(n), rem = count % static_cast<size_t>(n);
  const size_t ui = static_cast<size_t>(i);
  return {ui * base + (ui < rem ? ui : rem), base + (ui < rem ? 1 : 0)};
}

/// Copy into a buffer nobody reads soon (the result): streaming stores when `stream`, which
/// saves the read-for-ownership of the destination on large results.
void copy_out(void* dst, const void* src, size_t bytes, bool stream);

/// Largest piece of one process_vm_readv of the single-copy paths.
inline constexpr size_t kCrossPiece = size_t{64} << 20;

/// True when results of `total_bytes` should be written with streaming stores.
bool stream_results(size_t total_bytes);

void allreduce_shm(Team& t, const void* in, void* out, size_t count, const Reducer& red);
/// allreduce_shm for a SUM of a few float32/float64/int32/int64 elements that fit the shared
/// slots, with the same steps and result; false, having done nothing, for anything else.
bool allreduce_shm_tiny(Team& t, const void* in, void* out, size_t count, DType dtype, ReduceOp op);
void broadcast_shm(Team& t, void* data, const void* root_src, size_t bytes, int root);
void allgather_shm(Team& t, const void* in, void* out, size_t bytes_per_rank);
void reduce_scatter_shm(Team& t, const void* in, void* out, size_t count_per_rank,
                        const Reducer& red);
void reduce_shm(Team& t, const void* in, void* out, size_t count, int root, const Reducer& red);
void barrier_shm(Team& t);

}  // namespace tpcomm::coll::shm
