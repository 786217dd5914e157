// Tier (c) (STYLE.md 14): an in-process transport for ranks that are threads of one process.
// It behaves like an RDMA NIC with pre-posted receive slots (recv_slots > 0), so that the
// protocol's credit-based flow control runs; it can deliver out of order and break links,
// and it counts every flow-control violation.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>
#include <vector>

namespace tpcomm::testing {

struct FakeOptions {
  uint32_t recv_slots = 4;
  size_t max_message = 4096;
  size_t max_put = SIZE_MAX;
  bool reorder = false;  ///< deliver each progress() batch in random order
  /// register_memory() throws TransportError for regions of exactly this many bytes (0: never),
  /// as a NIC that cannot pin a buffer does.
  size_t refuse_register_bytes = 0;
};

/// Registers the transport "fake" with these options (replacing an earlier registration).
void register_fake_transport(const FakeOptions& options);

/// Messages or put notifications that arrived while the receiver had no free slot for the
/// sender (must stay 0: the protocol may never exceed its credits).
std::atomic<uint64_t>& fake_credit_violations();
/// Largest number of slots one sender ever held at one receiver.
std::atomic<uint64_t>& fake_max_slots_used();

/// Breaks the link between two ranks of the most recent fake world: both sides see
/// on_peer_error at their next progress().
void fake_break_link(int a, int b);

/// Delivers `bytes` to rank `to` as a message from rank `from` of the most recent fake world,
/// as if `from`'s protocol had sent them (garbage, or a message kind the receiver cannot take).
void fake_inject(int from, int to, const std::vector<uint8_t>& bytes);

}  // namespace tpcomm::testing
