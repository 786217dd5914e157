// The ibverbs transport (issue 8, docs/ibverbs.md): one port, one PD, one CQ with a completion
// channel, RC queue pairs per peer. Messages land in per-QP receive rings (recv_slots with
// credits, Capabilities::recv_slots); put is RDMA WRITE WITH IMM. Connection data (QPNs, PSNs,
// LID, GID, MTU) goes through the transport's private store: connect() publishes ours and
// announces itself in the peer's inbox; the peer's progress() finds it, connects back and
// replies; each side reaches RTS in progress().
#pragma once

#include <chrono>
#include <deque>
#include <map>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "tpcomm/transport/transport.hpp"
#include "transports/ibverbs/options.h"
#include "transports/ibverbs/verbs_lib.h"

namespace tpcomm::ibv {

class IbvTransport;

/// One registered block (bounce buffers, send staging), deregistered with it.
struct Block {
  std::vector<uint8_t> mem;
  ibv_mr* mr = nullptr;
};

class IbvEndpoint : public transport::Endpoint {
 public:
  IbvEndpoint(IbvTransport* t, int peer, uint32_t id) : t_(t), peer_(peer), id_(id) {}
  int peer() const override { return peer_; }
  bool ready() const override { return state_ == State::Ready; }
  [[nodiscard]] transport::PostStatus send(std::span<const iovec> iov) override;
  [[nodiscard]] transport::PostStatus put(const transport::MemoryRegion& src, size_t src_offset,
                                          const transport::RemoteKey& dst, size_t dst_offset,
                                          size_t length, uint32_t imm, uint64_t cookie) override;

  enum class State { Init, Rts, Ready, Failed };
  IbvTransport* t_;
  int peer_;
  uint32_t id_;
  State state_ = State::Init;
  std::chrono::steady_clock::time_point deadline_;
  std::vector<ibv_qp*> qps_;
  std::vector<uint32_t> psn_;
  Block recv_, send_;
  // send staging: slots in use, oldest first (seq, slot; slot -1 for inline sends)
  std::deque<std::pair<uint64_t, int>> inflight_;
  std::vector<int> free_slots_;
  uint64_t next_seq_ = 1;
  int unsignaled_ = 0;
  int puts_in_flight_ = 0;
  size_t next_put_qp_ = 0;
  std::string failure_;
};

class IbvTransport : public transport::Transport {
 public:
  IbvTransport(const transport::TransportContext& ctx, const Options& o);
  ~IbvTransport() override;

  const char* name() const override { return "ibverbs"; }
  transport::Capabilities capabilities() const override;
  std::vector<uint8_t> address() const override { return address_; }
  transport::Endpoint& connect(int peer, std::span<const uint8_t> peer_address,
                               std::chrono::steady_clock::time_point deadline) override;
  std::unique_ptr<transport::MemoryRegion> register_memory(void* addr, size_t length,
                                                           tpcomm::Device device) override;
  int progress(transport::EventSink& sink) override;
  int wait_fd() const override;
  bool arm() override;

  // Used by the endpoints.
  const VerbsLib& lib() const { return lib_; }
  ibv_pd* pd() const { return pd_; }
  size_t max_message() const { return kMaxMessage; }
  uint32_t slots() const { return kSlots; }
  uint32_t max_inline() const { return max_inline_; }
  uint32_t put_depth() const { return kPutDepth; }
  /// Records a put's cookie under a new id (its wr_id); drop_put undoes it.
  uint64_t add_put(uint64_t cookie, IbvEndpoint* ep) {
    uint64_t id = next_put_++;
    puts_[id] = {cookie, ep};
    return id;
  }
  void drop_put(uint64_t id) { puts_.erase(id); }
  /// Marks `ep` failed with `reason` (reported once from progress()).
  void fail(IbvEndpoint& ep, const std::string& reason);
  std::string where() const;  ///< "mlx5_0:1"

  static constexpr size_t kMaxMessage = 65536;
  static constexpr uint32_t kSlots = 32;
  static constexpr uint32_t kPutDepth = 64;

 private:
  IbvEndpoint& make_endpoint(int peer, std::chrono::steady_clock::time_point deadline);
  void publish(IbvEndpoint& ep);
  bool try_rtr_rts(IbvEndpoint& ep);
  void post_recv(IbvEndpoint& ep, size_t qp, uint32_t slot);
  int handle(const ibv_wc& wc, transport::EventSink& sink);
  void poll_connections();
  int report_failures(transport::EventSink& sink);

  transport::TransportContext ctx_;
  Options o_;
  const VerbsLib& lib_;
  PortInfo port_;
  ibv_context* ctx_v_ = nullptr;
  ibv_pd* pd_ = nullptr;
  ibv_comp_channel* channel_ = nullptr;
  ibv_cq* cq_ = nullptr;
  int cqe_ = 0;
  ibv_gid gid_{};
  int gid_index_ = 0;
  uint32_t max_inline_ = 0;
  uint64_t job_hash_ = 0;
  std::vector<uint8_t> address_;
  std::map<int, std::unique_ptr<IbvEndpoint>> eps_;
  std::unordered_map<uint32_t, std::pair<IbvEndpoint*, size_t>> by_qpn_;
  std::unordered_map<uint64_t, std::pair<uint64_t, IbvEndpoint*>> puts_;  // put id -> cookie
  uint64_t next_put_ = 1;
  uint32_t next_ep_id_ = 1;
  std::deque<ibv_wc> backlog_;  ///< polled by arm(), handled by the next progress()
  std::vector<std::pair<int, std::string>> failures_;  ///< to report
  size_t inbox_seen_ = 0;
  std::chrono::steady_clock::time_point next_poll_{};
};

}  // namespace tpcomm::ibv
