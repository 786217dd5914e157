// The shm transport between real processes (fork): messages and a 64 MiB put across address
// spaces, the fall-back when the kernel refuses cross-memory access, kill -9 of a peer (the
// survivor is told, nothing is left in /dev/shm), and eight ranks that sleep instead of
// spinning while they wait.
#include <fcntl.h>
#include <poll.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/time.h>

#include <cstring>
#include <fstream>
#include <sstream>

#include "core/log.h"
#include "shm/shm_test_util.h"

namespace tpcomm::transport::shm_test {
namespace {

class ShmProcessTest : public ShmTest {};

// Blocks on the transport's wait_fd (arm, poll) until pred() holds; false at the deadline.
bool wait_blocking(Transport& t, Sink& s, const std::function<bool()>& pred,
                   std::chrono::milliseconds timeout = 20s) {
  auto end = Clock::now() + timeout;
  while (!pred()) {
    if (Clock::now() > end) return false;
    if (t.progress(s) > 0) continue;
    if (!t.arm()) continue;
    pollfd pf{t.wait_fd(), POLLIN, 0};
    ::poll(&pf, 1, 100);
  }
  return true;
}

std::string read_file(const std::string& path) {
  std::ifstream f(path);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// The child (rank 1) connects to the parent (rank 0), echoes messages, and puts 64 MiB into
// the parent's buffer when asked.
TEST_F(ShmProcessTest, MessagesAndLargePutAcrossProcesses) {
  Pipe to_child, to_parent;
  const size_t kBig = 64 << 20;
  pid_t pid = spawn([&]() -> bool {
    auto t = make_shm(1, 2);
    Sink s;
    to_parent.write_blob(t->address());
    auto addr = to_child.read_blob();
    auto key_bytes = to_child.read_blob();
    if (addr.empty() || key_bytes.size() != sizeof(RemoteKey)) return false;
    RemoteKey key;
    std::memcpy(&key, key_bytes.data(), sizeof key);
    Endpoint& ep = t->connect(0, addr, Clock::now() + 20s);
    std::vector<uint8_t> src(kBig);
    for (size_t i = 0; i < kBig; ++i) src[i] = pattern(5, i);
    auto mr = t->register_memory(src.data(), src.size(), Device::cpu());
    // Echo 100 messages, then put.
    size_t echoed = 0;
    s.on_msg = [&](std::span<const uint8_t> d) {
      iovec v{const_cast<uint8_t*>(d.data()), d.size()};
      if (ep.send({&v, 1}) == PostStatus::Ok) ++echoed;
    };
    if (!wait_blocking(*t, s, [&] { return echoed == 100; })) return false;
    while (ep.put(*mr, 0, key, 0, kBig, 0xABCD, 1) == PostStatus::NoResource) t->progress(s);
    return wait_blocking(*t, s, [&] { return s.done.size() == 1 && s.done[0].second; }) &&
           wait_blocking(*t, s, [&] { return !s.errors.empty(); });  // the parent closes
  });
  auto t = make_shm(0, 2);
  Sink s;
  std::vector<uint8_t> dst(kBig, 0);
  auto mr = t->register_memory(dst.data(), dst.size(), Device::cpu());
  RemoteKey key = mr->remote_key();
  auto addr = to_parent.read_blob();
  ASSERT_FALSE(addr.empty());
  to_child.write_blob(t->address());
  to_child.write_blob(
      {reinterpret_cast<uint8_t*>(&key), reinterpret_cast<uint8_t*>(&key) + sizeof key});
  Endpoint& ep = t->connect(1, addr, Clock::now() + 20s);
  ASSERT_TRUE(wait_blocking(*t, s, [&] { return ep.ready(); }));
  for (uint32_t i = 0; i < 100; ++i) {
    std::vector<uint8_t> m(i * 100 + 1, static_cast<uint8_t>(i));
    iovec v{m.data(), m.size()};
    while (ep.send({&v, 1}) != PostStatus::Ok) t->progress(s);
    ASSERT_TRUE(wait_blocking(*t, s, [&] { return s.messages.size() == i + 1; }));
    EXPECT_EQ(s.messages[i], m);
  }
  bool checked = false;
  s.on_arrived = [&](uint32_t imm) {
    EXPECT_EQ(imm, 0xABCDu);
    for (size_t i = 0; i < kBig; i += 4093) ASSERT_EQ(dst[i], pattern(5, i)) << i;
    EXPECT_EQ(dst[kBig - 1], pattern(5, kBig - 1));
    checked = true;
  };
  ASSERT_TRUE(wait_blocking(*t, s, [&] { return checked; }));
  t.reset();
  int st = reap(pid);
  EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0) << st;
}

// The parent forbids being traced (not dumpable) and the child drops root if it has it: the
// child's cross-memory probe is refused, it says why in its log, and its put still arrives
// through the ring.
TEST_F(ShmProcessTest, RefusedCrossMemoryAccessFallsBackWithALoggedReason) {
  Pipe to_child, to_parent;
  const size_t kLen = (3 << 20) + 5;
  std::string log_path = "/tmp/tpcomm-shm-test-" + std::to_string(::getpid()) + ".log";
  pid_t pid = spawn([&]() -> bool {
    if (::geteuid() == 0) {
      if (::setresgid(65534, 65534, 65534) != 0 || ::setresuid(65534, 65534, 65534) != 0) {
        std::fprintf(stderr, "cannot drop root\n");
        return false;
      }
    }
    set_env("TPCOMM_DEBUG", "warn");
    set_env("TPCOMM_DEBUG_SUBSYS", "shm");
    set_env("TPCOMM_DEBUG_FILE", log_path.c_str());
    log::reload();
    auto t = make_shm(1, 2);
    Sink s;
    to_parent.write_blob(t->address());
    auto addr = to_child.read_blob();
    auto key_bytes = to_child.read_blob();
    if (addr.empty() || key_bytes.size() != sizeof(RemoteKey)) return false;
    RemoteKey key;
    std::memcpy(&key, key_bytes.data(), sizeof key);
    Endpoint& ep = t->connect(0, addr, Clock::now() + 20s);
    std::vector<uint8_t> src(kLen);
    for (size_t i = 0; i < kLen; ++i) src[i] = pattern(8, i);
    auto mr = t->register_memory(src.data(), src.size(), Device::cpu());
    if (!wait_blocking(*t, s, [&] { return ep.ready(); })) return false;
    while (ep.put(*mr, 0, key, 0, kLen, 77, 1) == PostStatus::NoResource) t->progress(s);
    if (!wait_blocking(*t, s, [&] { return !s.done.empty(); }) || !s.done[0].second) {
      return false;
    }
    // Now the other way: the parent may write into us, but we cannot pull from it, so the
    // parent copies a large put alone.
    std::vector<uint8_t> back(kLen, 0);
    auto bmr = t->register_memory(back.data(), back.size(), Device::cpu());
    RemoteKey bkey = bmr->remote_key();
    to_parent.write_blob(
        {reinterpret_cast<uint8_t*>(&bkey), reinterpret_cast<uint8_t*>(&bkey) + sizeof bkey});
    if (!wait_blocking(*t, s, [&] { return !s.arrived.empty(); })) return false;
    if (s.arrived[0] != 88 || back != src) return false;
    return wait_blocking(*t, s, [&] { return !s.errors.empty(); });
  });
  ASSERT_EQ(::prctl(PR_SET_DUMPABLE, 0), 0);
  auto t = make_shm(0, 2);
  Sink s;
  std::vector<uint8_t> dst(kLen, 0);
  auto mr = t->register_memory(dst.data(), dst.size(), Device::cpu());
  RemoteKey key = mr->remote_key();
  auto addr = to_parent.read_blob();
  ASSERT_FALSE(addr.empty());
  to_child.write_blob(t->address());
  to_child.write_blob(
      {reinterpret_cast<uint8_t*>(&key), reinterpret_cast<uint8_t*>(&key) + sizeof key});
  t->connect(1, addr, Clock::now() + 20s);
  bool ok = wait_blocking(*t, s, [&] { return !s.arrived.empty(); });
  ::prctl(PR_SET_DUMPABLE, 1);
  ASSERT_TRUE(ok);
  EXPECT_EQ(s.arrived[0], 77u);
  for (size_t i = 0; i < kLen; ++i) ASSERT_EQ(dst[i], pattern(8, i)) << i;
  auto bkey_bytes = to_parent.read_blob();
  ASSERT_EQ(bkey_bytes.size(), sizeof(RemoteKey));
  RemoteKey bkey;
  std::memcpy(&bkey, bkey_bytes.data(), sizeof bkey);
  Endpoint& ep = t->connect(1, addr, Clock::now() + 20s);
  while (ep.put(*mr, 0, bkey, 0, kLen, 88, 2) == PostStatus::NoResource) t->progress(s);
  ASSERT_TRUE(wait_blocking(*t, s, [&] { return !s.done.empty(); }));
  EXPECT_TRUE(s.done[0].second);
  t.reset();
  int st = reap(pid);
  EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0) << st;
  std::string log = read_file(log_path);
  ::unlink(log_path.c_str());
  EXPECT_NE(log.find("cross-memory writes refused"), std::string::npos) << log;
  EXPECT_NE(log.find("Operation not permitted"), std::string::npos) << log;
  EXPECT_NE(log.find("copying through the shared ring"), std::string::npos) << log;
}

// kill -9 of a connected peer: the survivor, asleep on wait_fd, hears of it within seconds,
// with the rank and pid; later posts fail; nothing is left in /dev/shm (the fixture checks).
TEST_F(ShmProcessTest, KilledPeerIsReportedAndLeavesNothingBehind) {
  for (bool sleeping : {true, false}) {
    Pipe to_child, to_parent;
    pid_t pid = spawn([&]() -> bool {
      auto t = make_shm(1, 2);
      Sink s;
      to_parent.write_blob(t->address());
      auto addr = to_child.read_blob();
      Endpoint& ep = t->connect(0, addr, Clock::now() + 20s);
      if (!wait_blocking(*t, s, [&] { return ep.ready(); })) return false;
      uint8_t x = 1;
      iovec v{&x, 1};
      while (ep.send({&v, 1}) != PostStatus::Ok) t->progress(s);
      wait_blocking(
          *t, s, [] { return false; }, 60s);  // until killed
      return true;
    });
    auto t = make_shm(0, 2);
    Sink s;
    auto addr = to_parent.read_blob();
    ASSERT_FALSE(addr.empty());
    to_child.write_blob(t->address());
    Endpoint& ep = t->connect(1, addr, Clock::now() + 20s);
    ASSERT_TRUE(wait_blocking(*t, s, [&] { return ep.ready() && s.messages.size() == 1; }));
    std::vector<uint8_t> buf(4096);
    auto mr = t->register_memory(buf.data(), buf.size(), Device::cpu());
    RemoteKey fake = mr->remote_key();  // any key: the put must not be attempted
    ::kill(pid, SIGKILL);
    int st = reap(pid);
    EXPECT_TRUE(WIFSIGNALED(st));
    auto start = Clock::now();
    bool told = sleeping ? wait_blocking(
                               *t, s, [&] { return !s.errors.empty(); }, 10s)
                         : pump(
                               {{t.get(), &s}}, [&] { return !s.errors.empty(); }, 10s);
    ASSERT_TRUE(told) << "the survivor was not told of the dead peer";
    EXPECT_LT(Clock::now() - start, 5s);
    EXPECT_EQ(s.errors[0].first, 1);
    const std::string& m = s.errors[0].second;
    EXPECT_NE(m.find("rank 1"), std::string::npos) << m;
    EXPECT_NE(m.find("pid " + std::to_string(pid)), std::string::npos) << m;
    EXPECT_NE(m.find("was killed"), std::string::npos) << m;
    uint8_t x = 0;
    iovec v{&x, 1};
    EXPECT_EQ(ep.send({&v, 1}), PostStatus::PeerFailed);
    EXPECT_EQ(ep.put(*mr, 0, fake, 0, 1, 0, 0), PostStatus::PeerFailed);
    for (int i = 0; i < 10; ++i) t->progress(s);
    EXPECT_EQ(s.errors.size(), 1u) << "reported once";
  }
}

// A peer killed in the middle of a staged put (no cross-memory access, so the put needs both
// ends): a surviving sender gets the put failed and the peer named; a surviving receiver,
// which drained what was staged, is told too, and nothing waits forever.
TEST_F(ShmProcessTest, PeerKilledDuringAStagedPutIsReported) {
  set_env("TPCOMM_SHM_CMA", "0");
  set_env("TPCOMM_SHM_STAGE_SIZE", "1M");
  set_env("TPCOMM_SHM_STAGE_CHUNK", "256K");
  const size_t kLen = 16 << 20;
  for (bool parent_sends : {true, false}) {
    SCOPED_TRACE(parent_sends ? "receiver killed" : "sender killed");
    Pipe to_child, to_parent;
    pid_t pid = spawn([&]() -> bool {
      auto t = make_shm(1, 2);
      Sink s;
      std::vector<uint8_t> buf(kLen, 7);
      auto mr = t->register_memory(buf.data(), buf.size(), Device::cpu());
      RemoteKey key = mr->remote_key();
      to_parent.write_blob(t->address());
      to_parent.write_blob(
          {reinterpret_cast<uint8_t*>(&key), reinterpret_cast<uint8_t*>(&key) + sizeof key});
      auto addr = to_child.read_blob();
      auto peer_key = to_child.read_blob();
      if (addr.empty() || peer_key.size() != sizeof(RemoteKey)) return false;
      Endpoint& ep = t->connect(0, addr, Clock::now() + 20s);
      if (!wait_blocking(*t, s, [&] { return ep.ready(); })) return false;
      if (!parent_sends) {
        std::memcpy(&key, peer_key.data(), sizeof key);
        // Fills the staging area in the post, then stops progressing.
        while (ep.put(*mr, 0, key, 0, kLen, 9, 1) == PostStatus::NoResource) t->progress(s);
      }
      to_parent.write_blob({1});
      ::pause();  // until killed: never drains, never fills again
      return true;
    });
    auto t = make_shm(0, 2);
    Sink s;
    std::vector<uint8_t> buf(kLen, 3);
    auto mr = t->register_memory(buf.data(), buf.size(), Device::cpu());
    RemoteKey key = mr->remote_key();
    auto addr = to_parent.read_blob();
    auto child_key = to_parent.read_blob();
    ASSERT_FALSE(addr.empty());
    ASSERT_EQ(child_key.size(), sizeof(RemoteKey));
    to_child.write_blob(t->address());
    to_child.write_blob(
        {reinterpret_cast<uint8_t*>(&key), reinterpret_cast<uint8_t*>(&key) + sizeof key});
    Endpoint& ep = t->connect(1, addr, Clock::now() + 20s);
    ASSERT_TRUE(wait_blocking(*t, s, [&] { return ep.ready(); }));
    ASSERT_EQ(to_parent.read_blob(), std::vector<uint8_t>{1});
    if (parent_sends) {
      std::memcpy(&key, child_key.data(), sizeof key);
      ASSERT_EQ(ep.put(*mr, 0, key, 0, kLen, 9, 1), PostStatus::Ok);
    } else {
      // What was staged arrives; the rest never comes.
      ASSERT_TRUE(pump({{t.get(), &s}}, [&] { return buf[(1 << 20) - 1] == 7; }));
    }
    for (int i = 0; i < 50; ++i) t->progress(s);
    EXPECT_TRUE(s.done.empty() && s.arrived.empty()) << "the put cannot complete";
    ::kill(pid, SIGKILL);
    int st = reap(pid);
    EXPECT_TRUE(WIFSIGNALED(st));
    ASSERT_TRUE(wait_blocking(
        *t, s, [&] { return !s.errors.empty() && (!parent_sends || !s.done.empty()); }, 10s))
        << "the survivor was not told";
    const std::string& m = s.errors[0].second;
    EXPECT_NE(m.find("rank 1"), std::string::npos) << m;
    EXPECT_NE(m.find("pid " + std::to_string(pid)), std::string::npos) << m;
    if (parent_sends) {
      EXPECT_EQ(s.done[0], std::make_pair(uint64_t{1}, false)) << "the put fails";
    }
    EXPECT_TRUE(s.arrived.empty());
  }
}

// The killed peer had forked a child that inherited its sockets (as a data-loader worker
// would): the sockets stay open, yet the survivor is told, through the peer's pidfd.
TEST_F(ShmProcessTest, KilledPeerIsReportedEvenWhenItsChildHoldsTheSockets) {
  ::prctl(PR_SET_CHILD_SUBREAPER, 1);  // the orphaned worker becomes ours to reap
  Pipe to_child, to_parent;
  pid_t pid = spawn([&]() -> bool {
    auto t = make_shm(1, 2);
    Sink s;
    to_parent.write_blob(t->address());
    auto addr = to_child.read_blob();
    Endpoint& ep = t->connect(0, addr, Clock::now() + 20s);
    if (!wait_blocking(*t, s, [&] { return ep.ready(); })) return false;
    pid_t worker = ::fork();
    if (worker == 0) {
      ::sleep(30);  // holds the inherited sockets open; killed by the test
      ::_exit(0);
    }
    uint32_t w = static_cast<uint32_t>(worker);
    to_parent.write_blob({reinterpret_cast<uint8_t*>(&w), reinterpret_cast<uint8_t*>(&w) + 4});
    wait_blocking(
        *t, s, [] { return false; }, 60s);  // until killed
    return true;
  });
  auto t = make_shm(0, 2);
  Sink s;
  auto addr = to_parent.read_blob();
  ASSERT_FALSE(addr.empty());
  to_child.write_blob(t->address());
  Endpoint& ep = t->connect(1, addr, Clock::now() + 20s);
  ASSERT_TRUE(wait_blocking(*t, s, [&] { return ep.ready(); }));
  auto wb = to_parent.read_blob();
  ASSERT_EQ(wb.size(), 4u);
  pid_t worker;
  std::memcpy(&worker, wb.data(), 4);
  ::kill(pid, SIGKILL);
  reap(pid);
  bool told = wait_blocking(
      *t, s, [&] { return !s.errors.empty(); }, 10s);
  ::kill(worker, SIGKILL);
  reap(worker);
  ASSERT_TRUE(told) << "the survivor was not told of the dead peer";
  EXPECT_NE(s.errors[0].second.find("pid " + std::to_string(pid)), std::string::npos)
      << s.errors[0].second;
  EXPECT_NE(s.errors[0].second.find("its process exited"), std::string::npos) << s.errors[0].second;
}

// Eight ranks in a token ring, each blocking in poll() on its wait_fd between turns: the
// whole job must use far less CPU than eight spinning processes would.
TEST_F(ShmProcessTest, EightRanksSleepWhileWaiting) {
  constexpr int kRanks = 8;
  constexpr int kRounds = 20;
  std::vector<std::unique_ptr<Pipe>> addr_pipes(kRanks), book_pipes(kRanks);
  for (int i = 0; i < kRanks; ++i) {
    addr_pipes[i] = std::make_unique<Pipe>();
    book_pipes[i] = std::make_unique<Pipe>();
  }
  std::vector<pid_t> pids;
  for (int r = 0; r < kRanks; ++r) {
    pids.push_back(spawn([&, r]() -> bool {
      auto t = make_shm(r, kRanks);
      Sink s;
      addr_pipes[r]->write_blob(t->address());
      auto next_addr = book_pipes[r]->read_blob();
      if (next_addr.empty()) return false;
      int next = (r + 1) % kRanks;
      Endpoint& ep = t->connect(next, next_addr, Clock::now() + 30s);
      if (!wait_blocking(
              *t, s, [&] { return ep.ready(); }, 30s))
        return false;
      for (int round = 0; round < kRounds; ++round) {
        if (r == 0) {
          std::this_thread::sleep_for(20ms);  // the others wait meanwhile
          iovec v{&round, sizeof round};
          while (ep.send({&v, 1}) != PostStatus::Ok) t->progress(s);
          if (!wait_blocking(*t, s, [&] { return s.messages.size() == size_t(round + 1); }))
            return false;
        } else {
          if (!wait_blocking(*t, s, [&] { return s.messages.size() == size_t(round + 1); }))
            return false;
          iovec v{s.messages.back().data(), s.messages.back().size()};
          while (ep.send({&v, 1}) != PostStatus::Ok) t->progress(s);
        }
      }
      return true;  // what we sent stays readable in our ring after we exit
    }));
  }
  std::vector<std::vector<uint8_t>> addrs(kRanks);
  for (int r = 0; r < kRanks; ++r) {
    addrs[r] = addr_pipes[r]->read_blob(30s);
    ASSERT_FALSE(addrs[r].empty()) << r;
  }
  for (int r = 0; r < kRanks; ++r) book_pipes[r]->write_blob(addrs[(r + 1) % kRanks]);
  auto start = Clock::now();
  rusage before{};
  ::getrusage(RUSAGE_CHILDREN, &before);
  bool all_ok = true;
  for (pid_t p : pids) {
    int st = reap(p, 120s);
    all_ok = all_ok && WIFEXITED(st) && WEXITSTATUS(st) == 0;
  }
  EXPECT_TRUE(all_ok);
  double wall = std::chrono::duration<double>(Clock::now() - start).count();
  rusage after{};
  ::getrusage(RUSAGE_CHILDREN, &after);
  auto secs = [](const timeval& tv) { return tv.tv_sec + tv.tv_usec / 1e6; };
  double cpu =
      secs(after.ru_utime) + secs(after.ru_stime) - secs(before.ru_utime) - secs(before.ru_stime);
  // Eight spinning ranks would burn about 2 cores x wall (the machine's whole budget).
  EXPECT_LT(cpu, 0.5 * wall) << "cpu " << cpu << " s over " << wall << " s of wall time";
}

}  // namespace
}  // namespace tpcomm::transport::shm_test
