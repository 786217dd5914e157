// The loopback verbs test device (tests/ibverbs_device/fake_verbs.h) is strict where HCAs are:
// QP state rules and attribute masks, lkey/rkey checks with access flags and bounds, receiver
// not ready with RNR retry, PSN and GID mismatches, completion order with selective
// signaling, immediate data, CQ overrun, completion channel, and a peer process killed.
// Loaded through the transport's own loader (transports/ibverbs/verbs_lib.h).
#include <arpa/inet.h>
#include <dlfcn.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <thread>
#include <vector>

#include "transports/ibverbs/verbs_lib.h"

namespace tpcomm::testing {
namespace {

const char* kLib = TPCOMM_TEST_BIN_DIR "/libtpcomm_fake_verbs.so";

const ibv::VerbsLib& lib() { return ibv::load_verbs(kLib); }

struct QpOpts {
  uint32_t timeout = 14, retry = 7, rnr_retry = 7, min_rnr = 12;
  int access = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE;
  int cqe = 256;
  uint32_t max_send_wr = 64, max_inline = 64;
};

// One side: context, PD, CQ, RC QP in INIT, and a registered 2 MiB buffer.
struct Side {
  const ibv::VerbsLib& L = lib();
  ibv_context* ctx = nullptr;
  ibv_pd* pd = nullptr;
  ibv_comp_channel* ch = nullptr;
  ibv_cq* cq = nullptr;
  ibv_qp* qp = nullptr;
  std::vector<uint8_t> buf = std::vector<uint8_t>(2 << 20);
  ibv_mr* mr = nullptr;
  ibv_gid gid{};
  QpOpts o;

  explicit Side(QpOpts opts = {}, int mr_access = -1) : o(opts) {
    int n = 0;
    ibv_device** l = L.get_device_list(&n);
    ctx = L.open_device(l[0]);
    L.free_device_list(l);
    pd = L.alloc_pd(ctx);
    ch = L.create_comp_channel(ctx);
    cq = L.create_cq(ctx, o.cqe, this, ch, 0);
    ibv_qp_init_attr ia{};
    ia.send_cq = ia.recv_cq = cq;
    ia.qp_type = IBV_QPT_RC;
    ia.cap = {o.max_send_wr, 64, 4, 4, o.max_inline};
    qp = L.create_qp(pd, &ia);
    mr = L.reg_mr(pd, buf.data(), buf.size(),
                  mr_access >= 0 ? mr_access : IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
    L.query_gid(ctx, 1, 1, &gid);  // RoCE v2, IPv4-mapped
  }
  ~Side() {
    if (qp) L.destroy_qp(qp);
    if (mr) L.dereg_mr(mr);
    L.destroy_cq(cq);
    L.destroy_comp_channel(ch);
    L.dealloc_pd(pd);
    L.close_device(ctx);
  }
  int init() {
    ibv_qp_attr a{};
    a.qp_state = IBV_QPS_INIT;
    a.port_num = 1;
    a.qp_access_flags = static_cast<unsigned>(o.access);
    return L.modify_qp(qp, &a,
                       IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS);
  }
  ibv_qp_attr rtr_attr(uint32_t qpn, const ibv_gid& dgid, uint32_t psn) const {
    ibv_qp_attr a{};
    a.qp_state = IBV_QPS_RTR;
    a.path_mtu = IBV_MTU_1024;
    a.dest_qp_num = qpn;
    a.rq_psn = psn;
    a.max_dest_rd_atomic = 1;
    a.min_rnr_timer = static_cast<uint8_t>(o.min_rnr);
    a.ah_attr.is_global = 1;
    a.ah_attr.grh.dgid = dgid;
    a.ah_attr.grh.sgid_index = 1;
    a.ah_attr.grh.hop_limit = 1;
    a.ah_attr.port_num = 1;
    return a;
  }
  static constexpr int kRtrMask = IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
                                  IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER;
  static constexpr int kRtsMask = IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
                                  IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC;
  int rtr(uint32_t qpn, const ibv_gid& dgid, uint32_t psn) {
    ibv_qp_attr a = rtr_attr(qpn, dgid, psn);
    return L.modify_qp(qp, &a, kRtrMask);
  }
  int rts(uint32_t psn) {
    ibv_qp_attr a{};
    a.qp_state = IBV_QPS_RTS;
    a.sq_psn = psn;
    a.timeout = static_cast<uint8_t>(o.timeout);
    a.retry_cnt = static_cast<uint8_t>(o.retry);
    a.rnr_retry = static_cast<uint8_t>(o.rnr_retry);
    a.max_rd_atomic = 1;
    return L.modify_qp(qp, &a, kRtsMask);
  }
  int post_recv(uint64_t id, size_t off, uint32_t len) {
    ibv_sge s{reinterpret_cast<uint64_t>(buf.data() + off), len, mr->lkey};
    ibv_recv_wr w{};
    w.wr_id = id;
    w.sg_list = &s;
    w.num_sge = 1;
    ibv_recv_wr* bad = nullptr;
    return ibv_post_recv(qp, &w, &bad);
  }
  int post(uint64_t id, ibv_wr_opcode op, size_t off, uint32_t len, uint64_t raddr = 0,
           uint32_t rkey = 0, uint32_t imm = 0, unsigned flags = IBV_SEND_SIGNALED,
           uint32_t lkey = 0) {
    ibv_sge s{reinterpret_cast<uint64_t>(buf.data() + off), len, lkey ? lkey : mr->lkey};
    ibv_send_wr w{};
    w.wr_id = id;
    w.sg_list = &s;
    w.num_sge = 1;
    w.opcode = op;
    w.send_flags = flags;
    w.imm_data = htonl(imm);
    w.wr.rdma.remote_addr = raddr;
    w.wr.rdma.rkey = rkey;
    ibv_send_wr* bad = nullptr;
    return ibv_post_send(qp, &w, &bad);
  }
  uint64_t addr(size_t off = 0) { return reinterpret_cast<uint64_t>(buf.data() + off); }
  // Waits (10 s at most) for `n` completions.
  std::vector<ibv_wc> wait(size_t n) {
    std::vector<ibv_wc> out;
    auto end = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (out.size() < n && std::chrono::steady_clock::now() < end) {
      ibv_wc wc[16];
      int k = ibv_poll_cq(cq, 16, wc);
      if (k < 0) break;
      out.insert(out.end(), wc, wc + k);
      if (k == 0) std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
    return out;
  }
};

// Connects a and b (PSNs 100 and 200).
void connect(Side& a, Side& b) {
  ASSERT_EQ(a.init(), 0);
  ASSERT_EQ(b.init(), 0);
  ASSERT_EQ(a.rtr(b.qp->qp_num, b.gid, 200), 0);
  ASSERT_EQ(b.rtr(a.qp->qp_num, a.gid, 100), 0);
  ASSERT_EQ(a.rts(100), 0);
  ASSERT_EQ(b.rts(200), 0);
}

std::string st(const ibv_wc& wc) { return lib().wc_status_str(wc.status); }

TEST(FakeDevice, ListsOneRoCEPortWithGidTypes) {
  auto ports = ibv::list_ports(lib());
  ASSERT_EQ(ports.size(), 1u);
  EXPECT_EQ(ports[0].device, "tpfake0");
  EXPECT_TRUE(ports[0].roce());
  EXPECT_EQ(ports[0].attr.state, IBV_PORT_ACTIVE);
  EXPECT_EQ(ports[0].attr.active_mtu, IBV_MTU_1024);
  EXPECT_DOUBLE_EQ(ibv::port_gbps(ports[0].attr), 100.0);
  Side s;
  ASSERT_NE(lib().query_gid_ex, nullptr);
  ibv_gid_entry e{};
  ASSERT_EQ(lib().query_gid_ex(s.ctx, 1, 1, &e, 0, sizeof(e)), 0);
  EXPECT_EQ(e.gid_type, IBV_GID_TYPE_ROCE_V2);
  ASSERT_EQ(lib().query_gid_ex(s.ctx, 1, 0, &e, 0, sizeof(e)), 0);
  EXPECT_EQ(e.gid_type, IBV_GID_TYPE_ROCE_V1);
  EXPECT_NE(lib().query_gid_ex(s.ctx, 1, 3, &e, 0, sizeof(e)), 0);
}

TEST(FakeDevice, QpStateMachineRefusesWrongTransitionsAndEarlyPosts) {
  Side a, b;
  EXPECT_EQ(a.post_recv(1, 0, 64), EINVAL) << "receive posted in RESET";
  EXPECT_EQ(a.post(1, IBV_WR_SEND, 0, 8), EINVAL) << "send posted in RESET";
  EXPECT_EQ(a.rtr(b.qp->qp_num, b.gid, 0), EINVAL) << "RESET -> RTR";
  ibv_qp_attr bad{};
  bad.qp_state = IBV_QPS_INIT;
  bad.port_num = 1;
  EXPECT_EQ(a.L.modify_qp(a.qp, &bad, IBV_QP_STATE | IBV_QP_PORT), EINVAL) << "INIT w/o pkey";
  ASSERT_EQ(a.init(), 0);
  ASSERT_EQ(b.init(), 0);
  EXPECT_EQ(a.post_recv(1, 0, 64), 0) << "receives may be posted in INIT";
  EXPECT_EQ(a.post(1, IBV_WR_SEND, 0, 8), EINVAL) << "send posted in INIT";
  EXPECT_EQ(a.rts(0), EINVAL) << "INIT -> RTS";
  ibv_qp_attr r = a.rtr_attr(b.qp->qp_num, b.gid, 0);
  EXPECT_EQ(a.L.modify_qp(a.qp, &r, Side::kRtrMask & ~IBV_QP_MIN_RNR_TIMER), EINVAL);
  r.path_mtu = IBV_MTU_4096;
  EXPECT_EQ(a.L.modify_qp(a.qp, &r, Side::kRtrMask), EINVAL) << "MTU above the active MTU";
  r = a.rtr_attr(b.qp->qp_num, b.gid, 0);
  r.ah_attr.is_global = 0;
  EXPECT_EQ(a.L.modify_qp(a.qp, &r, Side::kRtrMask), EINVAL) << "RoCE needs the GRH";
  r = a.rtr_attr(0xfffff0, b.gid, 0);
  EXPECT_EQ(a.L.modify_qp(a.qp, &r, Side::kRtrMask), EINVAL) << "no such QP";
  ASSERT_EQ(a.rtr(b.qp->qp_num, b.gid, 0), 0);
  EXPECT_EQ(a.post(1, IBV_WR_SEND, 0, 8), EINVAL) << "send posted in RTR";
  ibv_qp_attr t{};
  t.qp_state = IBV_QPS_RTS;
  t.retry_cnt = 7;
  EXPECT_EQ(a.L.modify_qp(a.qp, &t, IBV_QP_STATE | IBV_QP_RETRY_CNT), EINVAL) << "RTS w/o PSN";
  EXPECT_EQ(a.rts(0), 0);
  EXPECT_EQ(a.post(1, IBV_WR_RDMA_READ, 0, 8), EINVAL) << "RDMA read is not emulated";
}

TEST(FakeDevice, SendWithImmediateAndInline) {
  Side a, b;
  connect(a, b);
  ASSERT_EQ(b.post_recv(7, 4096, 1024), 0);
  ASSERT_EQ(b.post_recv(8, 8192, 1024), 0);
  std::memcpy(a.buf.data(), "hello verbs", 12);
  ASSERT_EQ(a.post(1, IBV_WR_SEND_WITH_IMM, 0, 12, 0, 0, 0xabcdef01), 0);
  std::memcpy(a.buf.data() + 64, "inline", 7);
  ASSERT_EQ(a.post(2, IBV_WR_SEND, 64, 7, 0, 0, 0, IBV_SEND_SIGNALED | IBV_SEND_INLINE), 0);
  std::memset(a.buf.data() + 64, 0, 7);  // inline data was copied at post time
  auto rc = b.wait(2);
  ASSERT_EQ(rc.size(), 2u);
  EXPECT_EQ(rc[0].wr_id, 7u);
  EXPECT_EQ(rc[0].status, IBV_WC_SUCCESS) << st(rc[0]);
  EXPECT_EQ(rc[0].opcode, IBV_WC_RECV);
  EXPECT_EQ(rc[0].byte_len, 12u);
  EXPECT_TRUE(rc[0].wc_flags & IBV_WC_WITH_IMM);
  EXPECT_EQ(ntohl(rc[0].imm_data), 0xabcdef01u);
  EXPECT_EQ(rc[0].qp_num, b.qp->qp_num);
  EXPECT_EQ(rc[0].src_qp, a.qp->qp_num);
  EXPECT_STREQ(reinterpret_cast<char*>(b.buf.data() + 4096), "hello verbs");
  EXPECT_FALSE(rc[1].wc_flags & IBV_WC_WITH_IMM);
  EXPECT_STREQ(reinterpret_cast<char*>(b.buf.data() + 8192), "inline");
  auto sc = a.wait(2);
  ASSERT_EQ(sc.size(), 2u);
  EXPECT_EQ(sc[0].opcode, IBV_WC_SEND);
  EXPECT_EQ(sc[1].wr_id, 2u);
  EXPECT_EQ(a.post(3, IBV_WR_SEND, 0, 65, 0, 0, 0, IBV_SEND_INLINE), EINVAL)
      << "inline above max_inline_data";
}

TEST(FakeDevice, WriteWithImmediateLandsBeforeItsCompletion) {
  Side a, b;
  connect(a, b);
  for (size_t i = 0; i < (1 << 20); ++i) a.buf[i] = static_cast<uint8_t>(i * 7 + 3);
  ASSERT_EQ(b.post_recv(5, 0, 0), 0);
  ASSERT_EQ(a.post(1, IBV_WR_RDMA_WRITE_WITH_IMM, 0, 1 << 20, b.addr(4096), b.mr->rkey, 42), 0);
  auto rc = b.wait(1);
  ASSERT_EQ(rc.size(), 1u);
  EXPECT_EQ(rc[0].status, IBV_WC_SUCCESS) << st(rc[0]);
  EXPECT_EQ(rc[0].opcode, IBV_WC_RECV_RDMA_WITH_IMM);
  EXPECT_EQ(rc[0].byte_len, 1u << 20);
  EXPECT_EQ(ntohl(rc[0].imm_data), 42u);
  EXPECT_EQ(std::memcmp(a.buf.data(), b.buf.data() + 4096, 1 << 20), 0);
  auto sc = a.wait(1);
  ASSERT_EQ(sc.size(), 1u);
  EXPECT_EQ(sc[0].opcode, IBV_WC_RDMA_WRITE);
}

TEST(FakeDevice, WrongRkeyIsRemoteAccessErrorAndFlushesTheRest) {
  Side a, b;
  connect(a, b);
  ASSERT_EQ(a.post(1, IBV_WR_RDMA_WRITE, 0, 64, b.addr(), b.mr->rkey + 256), 0);
  ASSERT_EQ(a.post(2, IBV_WR_RDMA_WRITE, 0, 64, b.addr(), b.mr->rkey), 0);
  auto sc = a.wait(2);
  ASSERT_EQ(sc.size(), 2u);
  EXPECT_EQ(sc[0].wr_id, 1u);
  EXPECT_EQ(sc[0].status, IBV_WC_REM_ACCESS_ERR) << st(sc[0]);
  EXPECT_EQ(st(sc[0]), "remote access error");
  EXPECT_EQ(sc[1].status, IBV_WC_WR_FLUSH_ERR) << st(sc[1]);
  ibv_qp_attr qa{};
  ibv_qp_init_attr ia{};
  ASSERT_EQ(a.L.query_qp(a.qp, &qa, IBV_QP_STATE, &ia), 0);
  EXPECT_EQ(qa.qp_state, IBV_QPS_ERR);
  ASSERT_EQ(a.post(3, IBV_WR_RDMA_WRITE, 0, 64, b.addr(), b.mr->rkey, 0, 0), 0);
  sc = a.wait(1);
  ASSERT_EQ(sc.size(), 1u) << "posts in the error state are flushed";
  EXPECT_EQ(sc[0].status, IBV_WC_WR_FLUSH_ERR);
}

TEST(FakeDevice, RemoteAccessNeedsFlagAndBounds) {
  {
    Side a, b(QpOpts{}, IBV_ACCESS_LOCAL_WRITE);  // region without REMOTE_WRITE
    connect(a, b);
    ASSERT_EQ(a.post(1, IBV_WR_RDMA_WRITE, 0, 64, b.addr(), b.mr->rkey), 0);
    auto sc = a.wait(1);
    ASSERT_EQ(sc.size(), 1u);
    EXPECT_EQ(sc[0].status, IBV_WC_REM_ACCESS_ERR) << st(sc[0]);
  }
  {
    Side a, b;
    connect(a, b);
    ASSERT_EQ(a.post(1, IBV_WR_RDMA_WRITE, 0, 4096, b.addr(b.buf.size() - 100), b.mr->rkey), 0);
    auto sc = a.wait(1);
    ASSERT_EQ(sc.size(), 1u);
    EXPECT_EQ(sc[0].status, IBV_WC_REM_ACCESS_ERR) << "past the region's end: " << st(sc[0]);
  }
  {
    QpOpts no_remote;
    no_remote.access = IBV_ACCESS_LOCAL_WRITE;  // the QP refuses remote writes
    Side a, b(no_remote);
    connect(a, b);
    ASSERT_EQ(a.post(1, IBV_WR_RDMA_WRITE, 0, 64, b.addr(), b.mr->rkey), 0);
    auto sc = a.wait(1);
    ASSERT_EQ(sc.size(), 1u);
    EXPECT_EQ(sc[0].status, IBV_WC_REM_ACCESS_ERR) << st(sc[0]);
  }
  Side a;
  EXPECT_EQ(a.L.reg_mr(a.pd, a.buf.data(), 64, IBV_ACCESS_REMOTE_WRITE), nullptr)
      << "REMOTE_WRITE without LOCAL_WRITE";
}

TEST(FakeDevice, BadLkeyIsLocalProtectionError) {
  Side a, b;
  connect(a, b);
  ASSERT_EQ(a.post(1, IBV_WR_RDMA_WRITE, 0, 64, b.addr(), b.mr->rkey, 0, IBV_SEND_SIGNALED,
                   a.mr->lkey ^ 0x100),
            0);
  auto sc = a.wait(1);
  ASSERT_EQ(sc.size(), 1u);
  EXPECT_EQ(sc[0].status, IBV_WC_LOC_PROT_ERR) << st(sc[0]);
}

TEST(FakeDevice, SendLongerThanTheReceiveFails) {
  Side a, b;
  connect(a, b);
  ASSERT_EQ(b.post_recv(1, 0, 16), 0);
  ASSERT_EQ(a.post(1, IBV_WR_SEND, 0, 64), 0);
  auto sc = a.wait(1);
  ASSERT_EQ(sc.size(), 1u);
  EXPECT_EQ(sc[0].status, IBV_WC_REM_INV_REQ_ERR) << st(sc[0]);
  auto rc = b.wait(1);
  ASSERT_EQ(rc.size(), 1u);
  EXPECT_EQ(rc[0].status, IBV_WC_LOC_LEN_ERR) << st(rc[0]);
}

TEST(FakeDevice, ReceiverNotReadyRetriesThenFails) {
  QpOpts o;
  o.rnr_retry = 2;
  o.min_rnr = 14;  // 1.28 ms per attempt
  Side a(o), b(o);
  connect(a, b);
  ASSERT_EQ(a.post(1, IBV_WR_SEND, 0, 8), 0);
  auto sc = a.wait(1);
  ASSERT_EQ(sc.size(), 1u);
  EXPECT_EQ(sc[0].status, IBV_WC_RNR_RETRY_EXC_ERR) << st(sc[0]);
}

TEST(FakeDevice, ReceiverNotReadyWithInfiniteRetryWaitsForTheReceive) {
  Side a, b;  // rnr_retry 7
  connect(a, b);
  ASSERT_EQ(b.post_recv(0, 0, 0), 0);
  ASSERT_EQ(a.post(1, IBV_WR_RDMA_WRITE_WITH_IMM, 0, 8, b.addr(), b.mr->rkey, 1), 0);
  ASSERT_EQ(a.post(2, IBV_WR_RDMA_WRITE_WITH_IMM, 0, 8, b.addr(), b.mr->rkey, 2), 0);
  EXPECT_EQ(b.wait(1).size(), 1u);
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_EQ(a.wait(1).size(), 1u) << "only the first write is acknowledged";
  ASSERT_EQ(b.post_recv(0, 0, 0), 0);
  auto rc = b.wait(1);
  ASSERT_EQ(rc.size(), 1u);
  EXPECT_EQ(ntohl(rc[0].imm_data), 2u);
  auto sc = a.wait(1);
  ASSERT_EQ(sc.size(), 1u);
  EXPECT_EQ(sc[0].status, IBV_WC_SUCCESS) << st(sc[0]);
}

TEST(FakeDevice, CompletionsInOrderWithSelectiveSignaling) {
  Side a, b;
  connect(a, b);
  std::vector<uint64_t> expect;
  for (uint64_t i = 0; i < 40; ++i) {
    bool sig = i % 4 == 3;
    if (sig) expect.push_back(i);
    uint32_t len = (i % 3 == 0) ? 40000 : 100;  // multi-fragment writes between small ones
    ASSERT_EQ(
        a.post(i, IBV_WR_RDMA_WRITE, 0, len, b.addr(), b.mr->rkey, 0, sig ? IBV_SEND_SIGNALED : 0),
        0);
    if (i % 16 == 15) a.wait(0);
  }
  auto sc = a.wait(expect.size());
  ASSERT_EQ(sc.size(), expect.size());
  for (size_t i = 0; i < sc.size(); ++i) {
    EXPECT_EQ(sc[i].wr_id, expect[i]);
    EXPECT_EQ(sc[i].status, IBV_WC_SUCCESS) << st(sc[i]);
  }
}

TEST(FakeDevice, SendQueueDepthIsEnforced) {
  QpOpts o;
  o.max_send_wr = 4;
  Side a(o), b;
  connect(a, b);
  for (int i = 0; i < 4; ++i) ASSERT_EQ(a.post(i, IBV_WR_SEND, 0, 8), 0);  // RNR: stay queued
  EXPECT_EQ(a.post(9, IBV_WR_SEND, 0, 8), ENOMEM);
}

TEST(FakeDevice, CqOverrunFailsPolling) {
  QpOpts o;
  o.cqe = 2;
  Side a(o), b;
  connect(a, b);
  for (int i = 0; i < 3; ++i)
    ASSERT_EQ(a.post(i, IBV_WR_RDMA_WRITE, 0, 8, b.addr(), b.mr->rkey), 0);
  int rc = 0;
  auto end = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (rc >= 0 && std::chrono::steady_clock::now() < end) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    ibv_wc wc[1];
    rc = ibv_poll_cq(a.cq, 0, wc);  // poll nothing: let the CQ fill
  }
  EXPECT_LT(rc, 0) << "three completions into a CQ of two";
}

TEST(FakeDevice, PsnOrGidMismatchIsRetryExceeded) {
  {
    Side a, b;
    ASSERT_EQ(a.init(), 0);
    ASSERT_EQ(b.init(), 0);
    ASSERT_EQ(a.rtr(b.qp->qp_num, b.gid, 200), 0);
    ASSERT_EQ(b.rtr(a.qp->qp_num, a.gid, 555), 0);  // a will send from PSN 100
    ASSERT_EQ(a.rts(100), 0);
    ASSERT_EQ(b.rts(200), 0);
    ASSERT_EQ(a.post(1, IBV_WR_RDMA_WRITE, 0, 8, b.addr(), b.mr->rkey), 0);
    auto sc = a.wait(1);
    ASSERT_EQ(sc.size(), 1u);
    EXPECT_EQ(sc[0].status, IBV_WC_RETRY_EXC_ERR) << st(sc[0]);
  }
  {
    Side a, b;
    ASSERT_EQ(a.init(), 0);
    ASSERT_EQ(b.init(), 0);
    ibv_gid v1{};
    b.L.query_gid(b.ctx, 1, 0, &v1);  // b's RoCE v1 GID, but a sends RoCE v2
    ASSERT_EQ(a.rtr(b.qp->qp_num, v1, 200), 0);
    ASSERT_EQ(b.rtr(a.qp->qp_num, a.gid, 100), 0);
    ASSERT_EQ(a.rts(100), 0);
    ASSERT_EQ(a.post(1, IBV_WR_RDMA_WRITE, 0, 8, b.addr(), b.mr->rkey), 0);
    auto sc = a.wait(1);
    ASSERT_EQ(sc.size(), 1u);
    EXPECT_EQ(sc[0].status, IBV_WC_RETRY_EXC_ERR) << st(sc[0]);
  }
}

TEST(FakeDevice, CompletionChannelWakesAfterNotify) {
  Side a, b;
  connect(a, b);
  ASSERT_EQ(ibv_req_notify_cq(b.cq, 0), 0);
  ASSERT_EQ(b.post_recv(3, 0, 64), 0);
  ASSERT_EQ(a.post(1, IBV_WR_SEND, 0, 8), 0);
  pollfd p{b.ch->fd, POLLIN, 0};
  ASSERT_EQ(poll(&p, 1, 10000), 1);
  ibv_cq* cq = nullptr;
  void* cctx = nullptr;
  ASSERT_EQ(b.L.get_cq_event(b.ch, &cq, &cctx), 0);
  EXPECT_EQ(cq, b.cq);
  EXPECT_EQ(cctx, &b);
  b.L.ack_cq_events(cq, 1);
  EXPECT_EQ(b.wait(1).size(), 1u);
}

TEST(FakeDevice, ForcedQpErrorFlushes) {
  using ForceFn = int (*)(uint32_t);
  lib();
  void* h = dlopen(kLib, RTLD_NOW | RTLD_NOLOAD);
  ASSERT_NE(h, nullptr);
  auto force = reinterpret_cast<ForceFn>(dlsym(h, "tpfake_force_qp_error"));
  ASSERT_NE(force, nullptr);
  Side a, b;
  connect(a, b);
  ASSERT_EQ(b.post_recv(3, 0, 64), 0);
  EXPECT_EQ(force(b.qp->qp_num), 1);
  auto rc = b.wait(1);
  ASSERT_EQ(rc.size(), 1u);
  EXPECT_EQ(rc[0].status, IBV_WC_WR_FLUSH_ERR);
  dlclose(h);
}

// Two processes: the child writes 1 MiB with immediate into the parent, then is killed; the
// parent's next write fails with retry-exceeded once the child's HCA stops answering.
TEST(FakeDevice, AcrossProcessesAndAKilledPeer) {
  int up[2], down[2];
  ASSERT_EQ(pipe(up), 0);
  ASSERT_EQ(pipe(down), 0);
  struct Info {
    uint32_t qpn;
    ibv_gid gid;
    uint64_t addr;
    uint32_t rkey;
  };
  pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    close(up[0]);
    close(down[1]);
    int rc = 1;
    {
      Side c;
      Info mine{c.qp->qp_num, c.gid, c.addr(), c.mr->rkey}, peer{};
      if (write(up[1], &mine, sizeof(mine)) == sizeof(mine) &&
          read(down[0], &peer, sizeof(peer)) == sizeof(peer) && c.init() == 0 &&
          c.rtr(peer.qpn, peer.gid, 100) == 0 && c.rts(200) == 0) {
        for (size_t i = 0; i < (1 << 20); ++i) c.buf[i] = static_cast<uint8_t>(i ^ (i >> 8));
        if (c.post(1, IBV_WR_RDMA_WRITE_WITH_IMM, 0, 1 << 20, peer.addr, peer.rkey, 77) == 0) {
          auto wc = c.wait(1);
          rc = (wc.size() == 1 && wc[0].status == IBV_WC_SUCCESS) ? 0 : 2;
        }
      }
      char x = static_cast<char>(rc);
      (void)!write(up[1], &x, 1);
      pause();  // killed here
    }
    _exit(rc);
  }
  close(up[1]);
  close(down[0]);
  Side p;
  Info peer{}, mine{p.qp->qp_num, p.gid, p.addr(), p.mr->rkey};
  ASSERT_EQ(read(up[0], &peer, sizeof(peer)), static_cast<ssize_t>(sizeof(peer)));
  ASSERT_EQ(p.init(), 0);
  ASSERT_EQ(p.rtr(peer.qpn, peer.gid, 200), 0);
  ASSERT_EQ(p.rts(100), 0);
  ASSERT_EQ(p.post_recv(9, 0, 0), 0);
  ASSERT_EQ(write(down[1], &mine, sizeof(mine)), static_cast<ssize_t>(sizeof(mine)));
  auto rc = p.wait(1);
  char child_rc = 9;
  EXPECT_EQ(read(up[0], &child_rc, 1), 1);
  EXPECT_EQ(child_rc, 0);
  ASSERT_EQ(rc.size(), 1u);
  EXPECT_EQ(rc[0].opcode, IBV_WC_RECV_RDMA_WITH_IMM);
  EXPECT_EQ(ntohl(rc[0].imm_data), 77u);
  bool same = true;
  for (size_t i = 0; i < (1 << 20) && same; ++i)
    same = p.buf[i] == static_cast<uint8_t>(i ^ (i >> 8));
  EXPECT_TRUE(same);
  kill(pid, SIGKILL);
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  ASSERT_EQ(p.post(2, IBV_WR_RDMA_WRITE, 0, 8, peer.addr, peer.rkey), 0);
  auto sc = p.wait(1);  // timeout 14: 67 ms * 8 tries
  ASSERT_EQ(sc.size(), 1u);
  EXPECT_EQ(sc[0].status, IBV_WC_RETRY_EXC_ERR) << st(sc[0]);
  close(up[0]);
  close(down[1]);
}

}  // namespace
}  // namespace tpcomm::testing
