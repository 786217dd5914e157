// The ibverbs transport (docs/ibverbs.md): one rail per NIC at equal distance (each its
// own context, PD, CQ and completion channel; rails.h), RC queue pairs per peer and rail. Messages
// land in per-QP receive rings (recv_slots with credits, Capabilities::recv_slots); put is RDMA
// WRITE WITH IMM. Connection data (QPNs, PSNs, LID, GID, MTU) goes through the transport's private
// store: connect() publishes ours and announces itself in the peer's inbox; the peer's progress()
// finds it, connects back and replies; each side reaches RTS in progress().
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
#include "transports/ibverbs/rails.h"
#include "transports/ibverbs/reg_cache.h"
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
  size_t rails_ = 1;  ///< rails of this connection: min of both ranks' rail counts
  size_t qpr_ = 1;    ///< QPs per rail (TPCOMM_IB_QPS_PER_CONNECTION)
  /// rails_ x qpr_ QPs, rail-major: QP i is on rail i / qpr_. Messages use QP 0 (rail 0).
  std::vector<ibv_qp*> qps_;
  std::vector<uint32_t> psn_;
  Block recv_, send_;
  // send staging: slots in use, oldest first (seq, slot; slot -1 for inline sends)
  std::deque<std::pair<uint64_t, int>> inflight_;
  std::vector<int> free_slots_;
  uint64_t next_seq_ = 1;
  int unsignaled_ = 0;
  int puts_in_flight_ = 0;
  uint64_t next_put_ = 0;  ///< puts so far: chooses the rail, then the QP within it
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
  const std::vector<Rail>& rails() const { return rails_; }
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
  std::string where() const;  ///< "mlx5_0:1" (rail 0), "mlx5_0:1+mlx5_1:1" with several
  std::string where(size_t rail) const { return rails_[rail].where(); }

  static constexpr size_t kMaxMessage = 65536;
  static constexpr uint32_t kSlots = 32;
  static constexpr uint32_t kPutDepth = 64;

 private:
  IbvEndpoint& make_endpoint(int peer, size_t rails,
                             std::chrono::steady_clock::time_point deadline);
  void destroy_endpoint(IbvEndpoint& ep);
  void publish(IbvEndpoint& ep);
  bool try_rtr_rts(IbvEndpoint& ep);
  void post_recv(IbvEndpoint& ep, size_t qp, uint32_t slot);
  int handle(size_t rail, const ibv_wc& wc, transport::EventSink& sink);
  void poll_connections();
  int report_failures(transport::EventSink& sink);
  void open_doorbell();
  void ring_doorbell(int peer);

  transport::TransportContext ctx_;
  Options o_;
  const VerbsLib& lib_;
  std::vector<Rail> rails_;
  int epoll_fd_ = -1;  ///< wait_fd(): the rails' completion channels and the doorbell
  int bell_fd_ = -1;   ///< doorbell: a UDP socket peers ring on connect() (bell/<rank>)
  std::unique_ptr<RegCache> cache_;
  uint32_t max_inline_ = 0;
  uint64_t job_hash_ = 0;
  std::vector<uint8_t> address_;
  std::map<int, std::unique_ptr<IbvEndpoint>> eps_;
  std::unordered_map<uint64_t, std::pair<uint64_t, IbvEndpoint*>> puts_;  // put id -> cookie
  uint64_t next_put_ = 1;
  uint32_t next_ep_id_ = 1;
  std::deque<std::pair<size_t, ibv_wc>> backlog_;      ///< (rail, wc) polled by arm()
  std::vector<std::pair<int, std::string>> failures_;  ///< to report
  size_t inbox_seen_ = 0;
  std::chrono::steady_clock::time_point next_poll_{};
};

}  // namespace tpcomm::ibv
