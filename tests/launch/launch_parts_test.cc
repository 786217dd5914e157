// tprun's parts on their own: line forwarding, environment merging, program lookup, exit
// status wording.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sched.h>
#include <signal.h>
#include <unistd.h>

#include <string>
#include <vector>

#include "launch/launch_internal.h"
#include "launch/tprun_runner.h"
#include "tpcomm/error.hpp"

namespace tpcomm::launch::detail {
namespace {

using testing::read_file;
using testing::TempDir;

// A file to forward into, read back afterwards.
struct Sink {
  TempDir dir;
  std::string path = dir.file("sink");
  UniqueFd fd{::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644)};
  std::string text() const { return read_file(path); }
};

TEST(LaunchParts, ForwarderPrefixesWholeLines) {
  Sink console, file;
  LineForwarder f("[rank 3]: ", console.fd.get(), file.fd.get());
  f.feed("hel", 3);
  EXPECT_EQ(console.text(), "");  // no partial lines on the console
  f.feed("lo\nwor", 6);
  EXPECT_EQ(console.text(), "[rank 3]: hello\n");
  f.feed("ld\n\nlast", 8);
  EXPECT_EQ(console.text(), "[rank 3]: hello\n[rank 3]: world\n[rank 3]: \n");
  f.finish();
  EXPECT_EQ(console.text(), "[rank 3]: hello\n[rank 3]: world\n[rank 3]: \n[rank 3]: last\n");
  // The file gets the bytes exactly as written.
  EXPECT_EQ(file.text(), "hello\nworld\n\nlast");
}

TEST(LaunchParts, ForwarderWithoutPrefixOrConsole) {
  Sink console;
  LineForwarder a("", console.fd.get(), -1);
  a.feed("x\ny", 3);
  a.finish();
  EXPECT_EQ(console.text(), "x\ny\n");
  LineForwarder none("[rank 0]: ", -1, -1);
  none.feed("ignored\n", 8);
  none.finish();
}

TEST(LaunchParts, ForwarderCutsOverlongLines) {
  Sink console;
  LineForwarder f("> ", console.fd.get(), -1);
  std::string big(LineForwarder::kMaxLine + 10, 'a');
  f.feed(big.data(), big.size());
  // Written out at once (memory stays bounded) rather than held for a newline.
  EXPECT_EQ(console.text(), "> " + big + "\n");
  f.feed("tail\n", 5);
  f.finish();
  EXPECT_EQ(console.text(), "> " + big + "\n> tail\n");
}

TEST(LaunchParts, ForwarderSurvivesAClosedConsole) {
  int fds[2];
  ASSERT_EQ(pipe2(fds, O_CLOEXEC), 0);
  close(fds[0]);
  struct sigaction ign {
  }, old{};
  ign.sa_handler = SIG_IGN;
  sigaction(SIGPIPE, &ign, &old);
  LineForwarder f("p ", fds[1], -1);
  f.feed("a\nb\n", 4);  // EPIPE: dropped, no crash
  f.feed("c\n", 2);
  f.finish();
  sigaction(SIGPIPE, &old, nullptr);
  close(fds[1]);
}

TEST(LaunchParts, MergeEnvReplacesAndAdds) {
  auto env = merge_env({"A=1", "RANK=9", "B=x=y"}, {"RANK=0", "C=3"});
  EXPECT_EQ(env, (std::vector<std::string>{"A=1", "B=x=y", "RANK=0", "C=3"}));
}

TEST(LaunchParts, FindProgram) {
  EXPECT_EQ(find_program("sh", "/nonexistent:/bin:/usr/bin"), "/bin/sh");
  EXPECT_EQ(find_program("/bin/sh", ""), "/bin/sh");
  try {
    find_program("no_such_program_xyz", "/bin:/usr/bin");
    FAIL();
  } catch (const InvalidArgument& e) {
    std::string m = e.what();
    EXPECT_NE(m.find("cannot run 'no_such_program_xyz': not found in PATH (/bin:/usr/bin)"),
              std::string::npos)
        << m;
  }
  try {
    find_program("/tmp", "");
    FAIL();
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("it is a directory"), std::string::npos) << e.what();
  }
  TempDir d;
  std::string plain = d.file("plain");
  UniqueFd fd(::open(plain.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0644));
  try {
    find_program(plain, "");
    FAIL();
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("not executable"), std::string::npos) << e.what();
  }
}

TEST(LaunchParts, ExitStatusWording) {
  EXPECT_EQ((ExitStatus{false, 3, false}).describe(), "exit code 3");
  EXPECT_EQ((ExitStatus{false, 3, false}).shell_status(), 3);
  EXPECT_EQ((ExitStatus{true, SIGKILL, false}).describe(), "killed by signal 9 (SIGKILL)");
  EXPECT_EQ((ExitStatus{true, SIGKILL, false}).shell_status(), 137);
  EXPECT_EQ((ExitStatus{true, SIGSEGV, true}).describe(),
            "killed by signal 11 (SIGSEGV), core dumped");
  EXPECT_TRUE((ExitStatus{false, 0, false}).ok());
  EXPECT_EQ(signal_name(SIGTERM), "SIGTERM");
}

TEST(LaunchParts, RandomJobIdsDiffer) {
  std::string a = random_job_id(), b = random_job_id();
  EXPECT_EQ(a.size(), 16u);
  EXPECT_NE(a, b);
}

TEST(LaunchParts, WorkerRunsInItsOwnGroupAndIsReaped) {
  Worker w(0, 0, "/bin/sh", {"sh", "-c", "echo out; echo err >&2; exit 4"}, {"PATH=/bin"});
  EXPECT_EQ(getpgid(w.pid()), w.pid());
  for (int i = 0; i < 1000 && !w.check_exit(); ++i) usleep(10000);
  ASSERT_TRUE(w.exited());
  EXPECT_EQ(w.status().describe(), "exit code 4");
  char buf[16];
  EXPECT_EQ(read(w.out().get(), buf, sizeof(buf)), 4);
  EXPECT_EQ(std::string(buf, 4), "out\n");
  w.reap();
  EXPECT_EQ(kill(w.pid(), 0), -1);  // gone, not a zombie
}

TEST(LaunchParts, WorkerDestructorKillsAndReaps) {
  pid_t pid;
  {
    Worker w(0, 0, "/bin/sh", {"sh", "-c", "sleep 1000"}, {"PATH=/bin:/usr/bin"});
    pid = w.pid();
  }
  EXPECT_EQ(kill(pid, 0), -1);
}

TEST(LaunchParts, WorkerStartFailureNamesRank) {
  try {
    Worker w(0, 5, "/nonexistent/prog", {"prog"}, {});
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("cannot start rank 5"), std::string::npos) << e.what();
  }
}

// A CPU outside the allowed set (--bind-to core only picks allowed ones; the machine's set
// may shrink under a cgroup): a clear error naming the rank and the CPU, nothing left running.
TEST(LaunchParts, WorkerPinFailureNamesRankAndCpu) {
  try {
    Worker w(0, 3, "/bin/sh", {"sh", "-c", "exit 0"}, {}, CPU_SETSIZE - 1);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(
        std::string(e.what()).find("cannot pin rank 3 to CPU " + std::to_string(CPU_SETSIZE - 1)),
        std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace tpcomm::launch::detail
