// FileStore: every operation, sharing across forked processes, torn and corrupt files, the
// reference-counted removal of the file, limits and error messages.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <thread>

#include "core/config.h"
#include "store/file_store_log.h"
#include "tpcomm/error.hpp"
#include "tpcomm/store.hpp"

namespace tpcomm {
namespace {

using namespace std::chrono_literals;
namespace fs = std::filesystem;

// Runs fn in a forked child, which exits 0 when fn returns and 1 when it throws.
pid_t spawn(const std::function<void()>& fn) {
  pid_t pid = ::fork();
  if (pid == 0) {
    int rc = 0;
    try {
      fn();
    } catch (const std::exception& e) {
      std::fprintf(stderr, "child %d: %s\n", ::getpid(), e.what());
      rc = 1;
    } catch (...) {
      rc = 1;
    }
    ::_exit(rc);
  }
  return pid;
}

// Waits for pid for up to `timeout`, then kills it. Returns the wait status.
int reap(pid_t pid, std::chrono::milliseconds timeout = 60s) {
  auto end = std::chrono::steady_clock::now() + timeout;
  int status = 0;
  while (true) {
    pid_t r = ::waitpid(pid, &status, WNOHANG);
    if (r == pid) return status;
    if (std::chrono::steady_clock::now() > end) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, &status, 0);
      ADD_FAILURE() << "child " << pid << " did not finish in time; killed";
      return status;
    }
    std::this_thread::sleep_for(2ms);
  }
}

bool exited_ok(int status) { return WIFEXITED(status) && WEXITSTATUS(status) == 0; }

Bytes read_file(const std::string& p) {
  std::ifstream f(p, std::ios::binary);
  return Bytes(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
}

void write_file(const std::string& p, const Bytes& b) {
  std::ofstream f(p, std::ios::binary | std::ios::trunc);
  f.write(reinterpret_cast<const char*>(b.data()), static_cast<std::streamsize>(b.size()));
}

uint64_t file_size(const std::string& p) { return fs::file_size(p); }

class FileStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const char* tmp = std::getenv("TMPDIR");
    std::string tmpl = std::string(tmp && *tmp ? tmp : "/tmp") + "/tpcomm-fs-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
  std::string path(const std::string& name = "store") const { return dir_ + "/" + name; }

  std::string dir_;
};

TEST_F(FileStoreTest, EveryOperation) {
  FileStore s(path());
  s.set("a", std::string_view("1"));
  EXPECT_EQ(s.get_string("a"), "1");
  s.set("a", std::string_view("2"));
  EXPECT_EQ(s.get_string("a"), "2");
  EXPECT_EQ(s.add("c", 5), 5);
  EXPECT_EQ(s.add("c", -2), 3);
  EXPECT_EQ(s.get_string("c"), "3");
  EXPECT_EQ(s.add("zero", 0), 0);
  EXPECT_EQ(s.get_string("zero"), "0");
  s.set("x", std::string_view("zz"));
  EXPECT_THROW(s.add("x", 1), StoreError);
  EXPECT_TRUE(s.check({"a", "c"}));
  EXPECT_FALSE(s.check({"a", "nope"}));
  EXPECT_TRUE(s.check({}));
  EXPECT_EQ(s.num_keys(), 4);
  EXPECT_TRUE(s.delete_key("a"));
  EXPECT_FALSE(s.delete_key("a"));
  EXPECT_FALSE(s.check({"a"}));
  EXPECT_EQ(s.num_keys(), 3);
  s.append("l", to_bytes("ab"));
  s.append("l", to_bytes("cd"));
  EXPECT_EQ(s.get_string("l"), "abcd");
  s.multi_set({"m1", "m2"}, {to_bytes("x"), to_bytes("y")});
  auto got = s.multi_get({"m2", "m1"});
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(to_string(got[0]), "y");
  EXPECT_EQ(to_string(got[1]), "x");
  EXPECT_TRUE(s.multi_get({}).empty());
  EXPECT_THROW(s.multi_set({"a"}, {}), InvalidArgument);
  s.wait({"m1", "m2"});
  s.wait({}, 1ms);
  // Binary keys and values, empty value.
  std::string bkey("k\0ey", 4);
  Bytes bval = {0, 1, 2, 255, 0};
  s.set(bkey, bval);
  EXPECT_EQ(s.get(bkey), bval);
  s.set("empty", Bytes{});
  EXPECT_TRUE(s.get("empty").empty());
}

TEST_F(FileStoreTest, CompareSetFollowsTorch) {
  FileStore s(path());
  EXPECT_EQ(to_string(s.compare_set("k", to_bytes("x"), to_bytes("y"))), "x");  // absent
  EXPECT_FALSE(s.check({"k"}));
  EXPECT_EQ(to_string(s.compare_set("k", {}, to_bytes("y"))), "y");  // absent, empty expected
  EXPECT_EQ(to_string(s.compare_set("k", to_bytes("z"), to_bytes("w"))), "y");  // mismatch
  EXPECT_EQ(to_string(s.compare_set("k", to_bytes("y"), to_bytes("w"))), "w");  // match
  EXPECT_EQ(s.get_string("k"), "w");
}

TEST_F(FileStoreTest, StateSurvivesReopen) {
  {
    FileStore s(path());
    s.set("a", std::string_view("1"));
    s.add("n", 7);
    s.append("l", to_bytes("x"));
    s.append("l", to_bytes("y"));
    s.delete_key("gone");
    s.set("gone", std::string_view("soon"));
    s.delete_key("gone");
  }
  FileStore s(path());
  EXPECT_EQ(s.get_string("a"), "1");
  EXPECT_EQ(s.get_string("n"), "7");
  EXPECT_EQ(s.get_string("l"), "xy");
  EXPECT_FALSE(s.check({"gone"}));
  EXPECT_EQ(s.num_keys(), 3);  // internal reference counts are not keys
}

TEST_F(FileStoreTest, ObjectsOfOneProcessShareTheFile) {
  FileStore a(path());
  FileStore b(path());
  a.set("k", std::string_view("v"));
  EXPECT_EQ(b.get_string("k"), "v");
  // Threads on two objects: fcntl locks do not exclude threads, the store must.
  std::vector<std::thread> ts;
  for (int t = 0; t < 4; ++t) {
    ts.emplace_back([&, t] {
      FileStore& s = (t % 2) ? a : b;
      for (int i = 0; i < 100; ++i) s.add("n", 1);
    });
  }
  for (auto& t : ts) t.join();
  EXPECT_EQ(a.get_string("n"), "400");
}

TEST_F(FileStoreTest, GetAndWaitTimeOutNamingKeysAndPath) {
  FileStore s(path());
  s.set("here", std::string_view("1"));
  s.set_timeout(50ms);
  try {
    s.get("missing");
    FAIL() << "get did not time out";
  } catch (const TimeoutError& e) {
    std::string m = e.what();
    EXPECT_NE(m.find("'missing'"), std::string::npos) << m;
    EXPECT_NE(m.find(path()), std::string::npos) << m;
  }
  try {
    s.wait({"here", "absent"}, 30ms);
    FAIL() << "wait did not time out";
  } catch (const TimeoutError& e) {
    std::string m = e.what();
    EXPECT_NE(m.find("'absent'"), std::string::npos) << m;
    EXPECT_EQ(m.find("'here'"), std::string::npos) << m;
  }
  EXPECT_THROW(s.multi_get({"here", "absent"}), TimeoutError);
}

TEST_F(FileStoreTest, WaitReleasedWhenAnotherProcessSets) {
  FileStore s(path());
  pid_t pid = spawn([&] {
    FileStore c(path());
    std::this_thread::sleep_for(100ms);
    c.set("late", std::string_view("yes"));
    c.set("late2", std::string_view("too"));
  });
  s.wait({"late", "late2"}, 60s);
  s.set_timeout(60s);
  EXPECT_EQ(s.get_string("late"), "yes");
  EXPECT_TRUE(exited_ok(reap(pid)));
}

TEST_F(FileStoreTest, WaitReleasedWhenAnotherThreadSets) {
  FileStore s(path());
  std::thread t([&] {
    std::this_thread::sleep_for(50ms);
    FileStore other(path());
    other.set("k", std::string_view("v"));
  });
  s.set_timeout(60s);
  EXPECT_EQ(s.get_string("k"), "v");
  t.join();
}

TEST_F(FileStoreTest, ConcurrentAddsAcrossProcessesAreExact) {
  constexpr int kProcs = 8, kAdds = 200;
  { FileStore init(path()); }
  std::vector<pid_t> pids;
  for (int p = 0; p < kProcs; ++p) {
    pids.push_back(spawn([&, p] {
      FileStore s(path());
      for (int i = 0; i < kAdds; ++i) s.add("counter", 1);
      s.append("log", to_bytes(std::string(1, static_cast<char>('a' + p))));
    }));
  }
  for (pid_t pid : pids) EXPECT_TRUE(exited_ok(reap(pid, 240s)));
  FileStore s(path());
  EXPECT_EQ(s.get_string("counter"), std::to_string(kProcs * kAdds));
  std::string log = s.get_string("log");
  std::sort(log.begin(), log.end());
  EXPECT_EQ(log, "abcdefgh");
}

TEST_F(FileStoreTest, LargeValueCrossesTheReadWindow) {
  Bytes big(20u << 20);
  for (size_t i = 0; i < big.size(); ++i) big[i] = static_cast<uint8_t>(i * 131 + 7);
  {
    FileStore w(path());
    w.set("small", std::string_view("1"));
    w.set("big", big);
    w.set("after", std::string_view("2"));
  }
  pid_t pid = spawn([&] {
    FileStore r(path());
    if (r.get("big") != big) throw std::runtime_error("big value differs");
    if (r.get_string("after") != "2") throw std::runtime_error("after differs");
  });
  EXPECT_TRUE(exited_ok(reap(pid, 120s)));
}

// Cuts the file at every byte of its last record: each prefix must read as the state before
// that record, and the next writer must drop the torn bytes.
TEST_F(FileStoreTest, TornLastRecordAtEveryOffsetReadsAsPreviousState) {
  uint64_t before = 0, after = 0;
  Bytes full;
  {
    FileStore s(path());
    s.set("a", std::string_view("1"));
    s.set("b", std::string_view("2"));
    before = file_size(path());
    s.multi_set({"b", "c"}, {to_bytes("22"), to_bytes("3")});
    after = file_size(path());
    full = read_file(path());
  }
  ASSERT_LT(before, after);
  for (uint64_t cut = before; cut < after; ++cut) {
    SCOPED_TRACE("cut at byte " + std::to_string(cut));
    std::string p = path("cut" + std::to_string(cut));
    write_file(p, Bytes(full.begin(), full.begin() + static_cast<long>(cut)));
    {
      // Reading alone leaves the file as it is.
      FileStore r(p);
      EXPECT_EQ(r.get_string("b"), "2");
      EXPECT_FALSE(r.check({"c"}));
      EXPECT_EQ(r.num_keys(), 2);
    }
    // The constructor wrote a record, so the torn bytes are gone: the file is
    // consistent and a fresh process sees the previous state plus new writes.
    {
      FileStore w(p);
      w.set("d", std::string_view("4"));
    }
    pid_t pid = spawn([&] {
      FileStore r(p);
      if (r.get_string("b") != "2" || r.check({"c"}) || r.get_string("d") != "4")
        throw std::runtime_error("unexpected state after a torn record");
    });
    EXPECT_TRUE(exited_ok(reap(pid)));
    fs::remove(p);
  }
}

TEST_F(FileStoreTest, ReaderIgnoresTornTailWithoutWriting) {
  {
    FileStore s(path());
    s.set("a", std::string_view("1"));
  }
  Bytes rec;
  std::string keys[] = {"b"};
  Bytes vals[] = {to_bytes("2")};
  filestore::encode_record(filestore::Op::kSet, keys, vals, &rec);
  Bytes f = read_file(path());
  f.insert(f.end(), rec.begin(), rec.begin() + 10);
  write_file(path(), f);
  pid_t pid = spawn([&] {
    // A process whose first look is a read: ignores the torn bytes.
    FileStore r(path());
    if (r.get_string("a") != "1" || r.check({"b"})) throw std::runtime_error("bad state");
  });
  EXPECT_TRUE(exited_ok(reap(pid)));
}

TEST_F(FileStoreTest, WriterKilledMidRecordLeavesReadableFile) {
  pid_t pid = spawn([&] {
    FileStore s(path());
    s.set("a", std::string_view("1"));
    // Write half of a record as a writer killed in the middle of its pwrite would.
    Bytes rec;
    std::string keys[] = {"b"};
    Bytes vals[] = {Bytes(1000, 7)};
    filestore::encode_record(filestore::Op::kSet, keys, vals, &rec);
    int fd = ::open(path().c_str(), O_WRONLY | O_APPEND);
    if (fd < 0 || ::write(fd, rec.data(), rec.size() / 2) < 0) ::_exit(3);
    ::raise(SIGKILL);
  });
  int st = reap(pid);
  ASSERT_TRUE(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL) << st;
  {
    FileStore s(path());
    EXPECT_EQ(s.get_string("a"), "1");
    EXPECT_FALSE(s.check({"b"}));
    s.set("c", std::string_view("3"));
  }
  pid = spawn([&] {
    FileStore r(path());
    if (r.get_string("c") != "3" || r.check({"b"})) throw std::runtime_error("bad state");
  });
  EXPECT_TRUE(exited_ok(reap(pid)));
}

// Writes three records, then damages the middle one in several ways.
TEST_F(FileStoreTest, CorruptMiddleRecordNamesPathAndOffset) {
  uint64_t mid_start = 0, mid_end = 0;
  Bytes good;
  {
    FileStore s(path());
    s.set("a", std::string_view("1"));
    mid_start = file_size(path());
    s.set("b", std::string_view("22222222"));
    mid_end = file_size(path());
    s.set("c", std::string_view("3"));
    good = read_file(path());
  }
  struct Damage {
    const char* name;
    uint64_t at;  // byte to flip
    const char* expect;
  } damages[] = {
      {"payload", mid_end - 2, "payload checksum"},
      {"magic", mid_start, "bad record magic"},
      {"length", mid_start + 9, "header checksum"},
  };
  for (const Damage& d : damages) {
    SCOPED_TRACE(d.name);
    Bytes b = good;
    b[d.at] ^= 0x5a;
    std::string p = path(std::string("bad-") + d.name);
    write_file(p, b);
    try {
      FileStore s(p);
      FAIL() << "corrupt file accepted";
    } catch (const StoreError& e) {
      std::string m = e.what();
      EXPECT_NE(m.find(p), std::string::npos) << m;
      EXPECT_NE(m.find("byte offset " + std::to_string(mid_start)), std::string::npos) << m;
      EXPECT_NE(m.find(d.expect), std::string::npos) << m;
      EXPECT_NE(m.find("delete the file and restart the job"), std::string::npos) << m;
    }
  }
}

TEST_F(FileStoreTest, ZeroFilledTailIsTreatedAsTorn) {
  {
    FileStore s(path());
    s.set("a", std::string_view("1"));
  }
  Bytes b = read_file(path());
  b.resize(b.size() + 100, 0);
  write_file(path(), b);
  FileStore s(path());
  EXPECT_EQ(s.get_string("a"), "1");
  s.set("b", std::string_view("2"));
  EXPECT_EQ(s.num_keys(), 2);
}

TEST_F(FileStoreTest, TruncatedHeaderIsRewritten) {
  Bytes h = filestore::encode_file_header();
  for (size_t n = 1; n < h.size(); ++n) {
    SCOPED_TRACE(n);
    std::string p = path("hdr" + std::to_string(n));
    write_file(p, Bytes(h.begin(), h.begin() + static_cast<long>(n)));
    {
      FileStore s(p);
      EXPECT_EQ(s.num_keys(), 0);
      s.set("k", std::string_view("v"));
    }
    FileStore s(p);
    EXPECT_EQ(s.get_string("k"), "v");
  }
}

TEST_F(FileStoreTest, ForeignOrDamagedHeaderIsRefused) {
  write_file(path("foreign"), to_bytes("hello, this is somebody's data file\n"));
  try {
    FileStore s(path("foreign"));
    FAIL();
  } catch (const StoreError& e) {
    std::string m = e.what();
    EXPECT_NE(m.find(path("foreign")), std::string::npos) << m;
    EXPECT_NE(m.find("not a tpcomm FileStore file"), std::string::npos) << m;
  }
  // The foreign file was not modified.
  EXPECT_EQ(to_string(read_file(path("foreign"))), "hello, this is somebody's data file\n");

  Bytes h = filestore::encode_file_header();
  h[8] = 9;  // version 9
  write_file(path("version"), h);
  try {
    FileStore s(path("version"));
    FAIL();
  } catch (const StoreError& e) {
    EXPECT_NE(std::string(e.what()).find("version 9"), std::string::npos) << e.what();
  }
  // A truncated header that is not a prefix of a valid one.
  write_file(path("short"), to_bytes("TPCOMMFS\x02"));
  EXPECT_THROW(FileStore s(path("short")), StoreError);
}

TEST_F(FileStoreTest, FileRemovedWhenLastOfWorldSizeCloses) {
  {
    auto a = std::make_unique<FileStore>(path(), 2);
    auto b = std::make_unique<FileStore>(path(), 2);
    a->set("k", std::string_view("v"));
    a.reset();
    EXPECT_TRUE(fs::exists(path()));
    b.reset();
    EXPECT_FALSE(fs::exists(path()));
  }
  // One user closing before the other opens (torch's cleanup counter): kept until both did.
  {
    { FileStore a(path(), 2); }
    EXPECT_TRUE(fs::exists(path()));
    { FileStore b(path(), 2); }
    EXPECT_FALSE(fs::exists(path()));
  }
  // Unknown world size: never removed.
  { FileStore a(path(), -1); }
  EXPECT_TRUE(fs::exists(path()));
  fs::remove(path());
}

TEST_F(FileStoreTest, FileRemovedAfterForkedWorldCloses) {
  constexpr int kWorld = 4;
  std::vector<pid_t> pids;
  for (int r = 0; r < kWorld; ++r) {
    pids.push_back(spawn([&, r] {
      FileStore s(path(), kWorld);
      s.set_timeout(60s);
      s.set("rank" + std::to_string(r), std::string_view("up"));
      std::vector<std::string> all;
      for (int i = 0; i < kWorld; ++i) all.push_back("rank" + std::to_string(i));
      s.wait(all);
      s.add("done", 1);
      s.wait({"rank0"});
    }));
  }
  for (pid_t pid : pids) EXPECT_TRUE(exited_ok(reap(pid, 120s)));
  EXPECT_FALSE(fs::exists(path()));
}

TEST_F(FileStoreTest, MissingDirectoryGivesClearError) {
  std::string p = dir_ + "/no/such/dir/store";
  try {
    FileStore s(p);
    FAIL();
  } catch (const StoreError& e) {
    std::string m = e.what();
    EXPECT_NE(m.find(p), std::string::npos) << m;
    EXPECT_NE(m.find("'" + dir_ + "/no/such/dir' does not exist"), std::string::npos) << m;
  }
  try {
    FileStore s(dir_);
    FAIL();
  } catch (const StoreError& e) {
    EXPECT_NE(std::string(e.what()).find("directory"), std::string::npos) << e.what();
  }
}

TEST_F(FileStoreTest, BadArgumentsAreRefused) {
  EXPECT_THROW(FileStore s(""), InvalidArgument);
  EXPECT_THROW(FileStore s(path(), 0), InvalidArgument);
  EXPECT_THROW(FileStore s(path(), -5), InvalidArgument);
}

TEST_F(FileStoreTest, LimitsNameTheVariable) {
  ::setenv("TPCOMM_STORE_MAX_KEY", "16", 1);
  ::setenv("TPCOMM_STORE_MAX_VALUE", "32", 1);
  config::reload();
  auto restore = [] {
    ::unsetenv("TPCOMM_STORE_MAX_KEY");
    ::unsetenv("TPCOMM_STORE_MAX_VALUE");
    config::reload();
  };
  try {
    FileStore s(path());
    std::string long_key(17, 'k');
    auto expect_limit = [](const std::function<void()>& f, const std::string& var) {
      try {
        f();
        ADD_FAILURE() << "limit " << var << " not enforced";
      } catch (const StoreError& e) {
        EXPECT_NE(std::string(e.what()).find(var), std::string::npos) << e.what();
      }
    };
    expect_limit([&] { s.set(long_key, std::string_view("v")); }, "TPCOMM_STORE_MAX_KEY=16");
    expect_limit([&] { s.get(long_key); }, "TPCOMM_STORE_MAX_KEY");
    expect_limit([&] { s.add(long_key, 1); }, "TPCOMM_STORE_MAX_KEY");
    expect_limit([&] { s.set("k", Bytes(33)); }, "TPCOMM_STORE_MAX_VALUE=32");
    expect_limit([&] { s.multi_set({"a", "b"}, {Bytes(1), Bytes(33)}); }, "TPCOMM_STORE_MAX_VALUE");
    expect_limit([&] { s.compare_set("k", {}, Bytes(33)); }, "TPCOMM_STORE_MAX_VALUE");
    s.set("k", Bytes(32));
    s.append("l", Bytes(20));
    expect_limit([&] { s.append("l", Bytes(20)); }, "TPCOMM_STORE_MAX_VALUE");
    EXPECT_EQ(s.get("l").size(), 20u);
  } catch (...) {
    restore();
    throw;
  }
  restore();
}

TEST_F(FileStoreTest, LockHeldTooLongTimesOutNamingTheHolder) {
  FileStore s(path());
  s.set_timeout(200ms);
  int ready[2];
  ASSERT_EQ(::pipe(ready), 0);
  pid_t pid = spawn([&] {
    int fd = ::open(path().c_str(), O_RDWR);
    struct flock fl {};
    fl.l_type = F_WRLCK;
    fl.l_whence = SEEK_SET;
    if (fd < 0 || ::fcntl(fd, F_SETLKW, &fl) != 0) ::_exit(2);
    char c = 1;
    if (::write(ready[1], &c, 1) != 1) ::_exit(2);
    std::this_thread::sleep_for(60s);
  });
  char c;
  if (::read(ready[0], &c, 1) != 1) {
    reap(pid, 1s);
    FAIL() << "the child could not take the lock";
  }
  try {
    s.set("k", std::string_view("v"));
    ADD_FAILURE() << "set went through a held lock";
  } catch (const TimeoutError& e) {
    EXPECT_NE(std::string(e.what()).find("process " + std::to_string(pid)), std::string::npos)
        << e.what();
  }
  ::kill(pid, SIGKILL);
  reap(pid);
  ::close(ready[0]);
  ::close(ready[1]);
  // The holder is gone: the lock is free again.
  s.set("k", std::string_view("v"));
  EXPECT_EQ(s.get_string("k"), "v");
}

}  // namespace
}  // namespace tpcomm
