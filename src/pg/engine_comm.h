// coll::CollComm over the p2p engine: what the host collective algorithms (src/collectives/)
// run on inside a ProcessGroup. One EngineComm serves one collective call.
//
// Tag space: a group's collectives use their own engine group id (GroupInfo `coll`, derived
// from the group's id), so they never match the user's point-to-point messages of any tag.
// Inside it, the engine tag is (sequence number of the call mod kSeqWindow) << 16 | the
// algorithm's tag: consecutive calls use different channels, and within a channel the
// engine's per-(group, source, tag) sequence numbers keep messages in posting order.
//
// Sizes: the engine accepts a message smaller than the receive buffer; a collective needs
// exact sizes, so a receive that got fewer bytes, or a send the receiver refused, fails with
// MismatchError naming both ranks and both sizes.
#pragma once

#include <memory>
#include <string>

#include "collectives/comm.h"
#include "p2p/engine.h"
#include "pg/flight_recorder.h"

namespace tpcomm::detail {

/// What one collective call runs over.
struct CollCall {
  std::shared_ptr<p2p::Engine> engine;
  const p2p::GroupInfo* channel = nullptr;  ///< the group's collective tag space
  std::string group_name;
  int rank = 0;                          ///< group rank
  uint64_t seq = 0;                      ///< per-group collective sequence number
  const char* op = "";                   ///< "all_reduce", ... (for messages)
  uint32_t opcode = 0;                   ///< op_code(op); 0: computed per call
  Deadline deadline;                     ///< the whole call's
  std::chrono::milliseconds timeout{0};  ///< the deadline's length (start = deadline - it)
  coll::TransportHints hints;
  std::chrono::milliseconds cancel_grace{5000};  ///< cancel of data in flight waits this long
  /// The group's store: a member whose call failed because another member is lost posts
  /// lost_key(seq) there, so that members with no link to the lost one learn of it too.
  std::shared_ptr<Store> store;
  /// The group's flight recorder (null: off); the call is recorded there.
  fr::Ring* ring = nullptr;
  /// TPCOMM_CHECK_SIGNATURE: the signature goes into the tags (false: tags carry only the
  /// sequence slot and the algorithm's tag; mismatches are then not detected).
  bool check_signature = true;
};

/// Store key (in the group's store) of the notice that collective `seq` lost a member, or
/// that its members disagree (the value then starts with kMismatchNotice).
std::string lost_key(uint64_t seq);
inline constexpr const char* kMismatchNotice = "MismatchError: ";

/// Number of distinct sequence slots in the tags (bounds the engine's channel tables).
inline constexpr uint64_t kSeqWindow = 8;
/// sign()'s count for operations whose counts may differ per rank (all_to_all): only the
/// dtype (with the operation) must agree.
inline constexpr int64_t kSignDTypeOnly = -2;
/// Largest algorithm tag the encoding holds.
inline constexpr int kMaxAlgoTag = 0xFFFF;
/// Bits 19..23 of the engine tag: the operation's code (op_code), so that the messages of
/// ranks that run different collectives at the same sequence number never match; a rank
/// that waits finds the other's messages unmatched and names both calls (MismatchError).
inline constexpr int kSigShift = 19;
inline constexpr uint32_t kSigMask = 0x1F;
inline constexpr int kArgShift = 24;
/// Small code of a collective's name (1..31; 0 for names it does not know), and back.
uint32_t op_code(const char* op);
const char* op_of_code(uint32_t code);

class EngineComm : public coll::CollComm {
 public:
  /// `call` outlives the EngineComm (the group's, updated per call under its run lock).
  explicit EngineComm(const CollCall& call) : c_(call) {
    const uint32_t code = c_.opcode ? c_.opcode : op_code(c_.op);
    if (c_.check_signature) sig_ = code << kSigShift;
    if (c_.ring) rec_ = c_.ring->begin(static_cast<uint8_t>(code), c_.seq, start_ns());
  }

  int rank() const override { return c_.rank; }
  int size() const override { return static_cast<int>(c_.channel->ranks.size()); }
  coll::Request isend(const void* buf, size_t bytes, int peer, int tag) override;
  coll::Request irecv(void* buf, size_t bytes, int peer, int tag) override;
  void wait(coll::Request& req) override;
  bool test(coll::Request& req) override;
  int wait_any(std::span<coll::Request* const> reqs) override;
  Deadline deadline() const override { return c_.deadline; }
  coll::TransportHints hints() const override { return c_.hints; }

  /// Adds what every rank must agree on (dtype, element count, root, reduce op; -1: not
  /// part of this call) to the signature in the tags, as a 7-bit hash in bits 24..30, so
  /// that calls that differ there never match either. Call before communicating.
  void sign(DType dtype, int64_t count, int root, int redop);
  /// "all_reduce #12 on group 'default_pg' (rank 0 of 4)", the prefix of every error.
  std::string where() const;
  /// Number of operations posted so far (0: the call failed before communicating).
  uint64_t posted() const { return posted_; }
  /// Marks the call completed in the flight recorder (`algo`: a static catalogue name).
  void record_done(const char* algo) {
    if (rec_) fr::Ring::end(rec_, fr::State::Completed, algo);
  }
  /// The call failed with `error`: marks it failed in the flight recorder (which dumps when
  /// the error calls for it) and, for a MismatchError, posts a notice in the group's store
  /// (lost_key) so that members that hold none of the disagreeing messages fail with the
  /// same MismatchError at their next check instead of at their deadline.
  void on_failure(std::exception_ptr error);
  /// The notice another member posted for this call (lost_key: a lost member, or a
  /// mismatch when it starts with kMismatchNotice), or "". A store that fails gives "",
  /// or a StoreError with `store_errors`.
  std::string notice(bool store_errors = false) const;

 private:
  coll::Request post(bool send, void* buf, size_t bytes, int peer, int tag);
  /// Rethrows a finished op's error with context, or a size mismatch; empties `req`.
  void finish(coll::Request& req);
  /// Throws PeerError naming the members the engine has lost, or MismatchError when a member
  /// sent messages of another collective at this call's sequence number.
  void check_members() const;
  /// The MismatchError text when unmatched messages of this call's sequence slot carry
  /// another operation's code, else "".
  std::string foreign_calls() const;
  /// "; rank 2 of the group (global rank 2) is dead: ..." for each lost member, or "".
  std::string lost_members() const;
  /// How often a long wait checks for lost members.
  static constexpr std::chrono::milliseconds kLostCheck{200};

  const CollCall& c_;
  uint64_t posted_ = 0;
  fr::Entry* rec_ = nullptr;  ///< this call's flight recorder entry (null: off)
  uint32_t sig_ = 0;          ///< op_code(c_.op) << kSigShift | argument hash << 24
  /// The arguments sign() hashed (formatted only for messages); signed_count_ < 0: none.
  DType signed_dtype_ = DType::UInt8;
  int64_t signed_count_ = -1;
  int signed_root_ = -1, signed_redop_ = -1;
  std::string signed_text() const;
  /// The call's start on the steady clock, from its deadline (no clock read).
  int64_t start_ns() const {
    if (c_.deadline.is_never() || c_.timeout.count() <= 0) return fr::Ring::steady_ns();
    return std::chrono::duration_cast<std::chrono::nanoseconds>(
               (c_.deadline.when() - c_.timeout).time_since_epoch())
        .count();
  }
};

}  // namespace tpcomm::detail
