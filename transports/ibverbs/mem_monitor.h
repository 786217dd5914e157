// Memory monitor for the registration cache (docs/ibverbs.md "Registration cache"): one
// userfaultfd per process, registered over the ranges the cache holds, asking for
// UFFD_FEATURE_EVENT_UNMAP | EVENT_REMOVE | EVENT_REMAP. The kernel reports every munmap (also
// glibc's internal one when free() returns a large block), brk shrink, madvise(MADV_DONTNEED /
// MADV_FREE / MADV_REMOVE) and mremap over a watched range, and the thread that changed the
// mapping waits until the event has been read. A background thread reads events and queues
// the ranges for every subscriber; a subscriber drains its queue after waiting out a read in
// progress, so an entry is gone before the call that unmapped its memory returns.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace tpcomm::ibv::memmon {

/// True when the monitor runs in this process (userfaultfd with the events above); `why` says
/// why not (kernel, permissions: /proc/sys/vm/unprivileged_userfaultfd, seccomp).
bool available(std::string* why = nullptr);

/// Watches [start, end) (page aligned, private anonymous or shmem memory, populated first):
/// true when its unmap/remove/remap events will be reported. False for memory it cannot watch
/// (file mappings, read-only memory, a range another userfaultfd holds).
bool watch(uintptr_t start, uintptr_t end);

/// A subscriber id; ranges reported from now on are queued for it.
int subscribe();
void unsubscribe(int id);

/// The ranges reported for `id` since the last call, after any read in progress finished.
std::vector<std::pair<uintptr_t, uintptr_t>> take(int id);

}  // namespace tpcomm::ibv::memmon
