// bin/tprun end to end, with `sh -c` one-liners as workers: exit statuses and the summary
// line, stopping the job on a failure (grace, SIGKILL), signal forwarding, output prefixes,
// the workers' environment, log files and redirects, restarts, and command-line errors.
#include <arpa/inet.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <iostream>
#include <string>
#include <vector>

#include "launch/launch_internal.h"
#include "launch/tprun_runner.h"
#include "tpcomm/error.hpp"
#include "tpcomm/launch.hpp"

namespace tpcomm::launch {
namespace {

namespace lt = tpcomm::launch::testing;
using lt::contains;
using lt::RunResult;

// A job of n `sh -c script` workers on one node with a free port.
std::vector<std::string> job(int n, const std::string& script,
                             std::vector<std::string> flags = {}) {
  std::vector<std::string> args = {"--standalone", "--nproc-per-node", std::to_string(n)};
  args.insert(args.end(), flags.begin(), flags.end());
  args.insert(args.end(), {"sh", "-c", script});
  return args;
}

int count_lines_starting(const std::string& text, const std::string& start) {
  int n = 0;
  size_t pos = 0;
  while (pos < text.size()) {
    size_t end = text.find('\n', pos);
    if (end == std::string::npos) end = text.size();
    if (text.compare(pos, start.size(), start) == 0) ++n;
    pos = end + 1;
  }
  return n;
}

std::string describe(const RunResult& r) {
  return "status " + std::to_string(r.status) + (r.timed_out ? " (timed out)" : "") + " after " +
         std::to_string(r.seconds) + " s\n--- stdout:\n" + r.out + "--- stderr:\n" + r.err;
}

// Generous bound for "promptly" on a loaded 2-core machine; the point is "not the 1000 s
// the other workers would sleep, and not a hang".
constexpr double kSlack = 15.0;

TEST(Tprun, AllWorkersSucceed) {
  RunResult r = lt::run_tprun(job(3, "exit 0"));
  EXPECT_EQ(r.status, 0) << describe(r);
  EXPECT_EQ(r.err, "") << describe(r);
}

TEST(Tprun, FailingWorkerGivesItsExitCodeAndOneSummaryLine) {
  RunResult r = lt::run_tprun(job(3, "if [ \"$RANK\" = 1 ]; then exit 3; fi; exec sleep 1000"));
  EXPECT_EQ(r.status, 3) << describe(r);
  EXPECT_TRUE(contains(r.err, "tprun: rank 1 (local 1, pid ")) << describe(r);
  EXPECT_TRUE(contains(r.err, ") failed: exit code 3; stopped the other 2 workers\n"))
      << describe(r);
  EXPECT_EQ(count_lines_starting(r.err, "tprun:"), 1) << describe(r);
  EXPECT_LT(r.seconds, 5 + kSlack) << describe(r);
}

TEST(Tprun, KilledWorkerTakesTheJobDownPromptly) {
  RunResult r = lt::run_tprun(job(4, "if [ \"$RANK\" = 1 ]; then kill -9 $$; fi; exec sleep 1000"));
  EXPECT_EQ(r.status, 137) << describe(r);
  EXPECT_TRUE(contains(r.err, "tprun: rank 1 (local 1, pid ")) << describe(r);
  EXPECT_TRUE(contains(r.err, "failed: killed by signal 9 (SIGKILL); stopped the other 3 workers"))
      << describe(r);
  EXPECT_EQ(count_lines_starting(r.err, "tprun:"), 1) << describe(r);
  EXPECT_LT(r.seconds, 5 + kSlack) << describe(r);
  std::cout << "[ measure  ] job of 4 down " << r.seconds << " s after rank 1 was SIGKILLed\n";
}

TEST(Tprun, WorkersIgnoringSigtermGetSigkillAfterTheGrace) {
  lt::TempDir d;
  std::string script =
      "if [ \"$RANK\" != 0 ]; then trap '' TERM; touch " + d.path() +
      "/ready_$RANK; exec sleep 1000; fi; i=0; while [ ! -e " + d.path() + "/ready_1 ] || [ ! -e " +
      d.path() + "/ready_2 ]; do sleep 0.05; i=$((i+1)); [ $i -gt 1200 ] && exit 99; done; exit 5";
  RunResult r = lt::run_tprun(job(3, script), {"TPCOMM_LAUNCH_GRACE=1s"});
  EXPECT_EQ(r.status, 5) << describe(r);
  EXPECT_TRUE(contains(r.err, "failed: exit code 5; stopped the other 2 workers")) << describe(r);
  EXPECT_GE(r.seconds, 1.0) << describe(r);  // they ignored SIGTERM: only SIGKILL ended them
  EXPECT_LT(r.seconds, 1 + kSlack) << describe(r);
}

TEST(Tprun, WhatAWorkerLeavesBehindIsStoppedAndReaped) {
  lt::TempDir d;
  // Rank 0 starts a background child in its group, then fails once it is recorded.
  std::string script = "if [ \"$RANK\" = 0 ]; then sleep 1000 >/dev/null 2>&1 & echo $! > " +
                       d.file("child") + "; exit 3; fi; exec sleep 1000";
  RunResult r = lt::run_tprun(job(2, script));
  EXPECT_EQ(r.status, 3) << describe(r);
  std::string text = lt::read_file(d.file("child"));
  ASSERT_FALSE(text.empty()) << describe(r);
  pid_t child = std::stoi(text);
  // Already gone when tprun returns: tprun adopted it (child subreaper), stopped it with its
  // worker's group and reaped it, instead of leaving a zombie to whatever init there is.
  EXPECT_TRUE(kill(child, 0) != 0 && errno == ESRCH) << "pid " << child << " is still there";
}

// /proc/PID/stat state, or 0 once the process is gone.
char proc_state(pid_t pid) {
  std::string stat = lt::read_file("/proc/" + std::to_string(pid) + "/stat");
  size_t paren = stat.rfind(')');
  return paren == std::string::npos || paren + 2 >= stat.size() ? 0 : stat[paren + 2];
}

TEST(Tprun, WorkersDieWithTprunEvenOnSigkill) {
  lt::TempDir d;
  lt::TprunProcess p(job(2, "echo $$ > " + d.path() + "/pid_$RANK.tmp; mv " + d.path() +
                                "/pid_$RANK.tmp " + d.path() + "/pid_$RANK; exec sleep 1000"));
  ASSERT_TRUE(lt::wait_for_files({d.file("pid_0"), d.file("pid_1")}, std::chrono::seconds(30)));
  p.signal(SIGKILL);
  RunResult r = p.wait(std::chrono::seconds(60));
  EXPECT_EQ(r.status, 137) << describe(r);
  for (const char* name : {"pid_0", "pid_1"}) {
    pid_t pid = std::stoi(lt::read_file(d.file(name)));
    char state = 'R';
    for (int i = 0; i < 1000 && state != 0 && state != 'Z'; ++i) {
      state = proc_state(pid);
      if (state != 0 && state != 'Z') usleep(10000);
    }
    EXPECT_TRUE(state == 0 || state == 'Z') << "worker pid " << pid << " outlived tprun";
  }
}

TEST(Tprun, SigtermIsForwardedToWorkers) {
  lt::TempDir d;
  std::string script = "trap 'echo $RANK > " + d.path() + "/term_$RANK; exit 0' TERM; touch " +
                       d.path() + "/ready_$RANK; while :; do sleep 0.1; done";
  lt::TprunProcess p(job(2, script));
  ASSERT_TRUE(lt::wait_for_files({d.file("ready_0"), d.file("ready_1")}, std::chrono::seconds(30)));
  p.signal(SIGTERM);
  RunResult r = p.wait(std::chrono::seconds(60));
  EXPECT_EQ(r.status, 0) << describe(r);  // the workers' status: they exited 0
  EXPECT_EQ(lt::read_file(d.file("term_0")), "0\n") << describe(r);
  EXPECT_EQ(lt::read_file(d.file("term_1")), "1\n") << describe(r);
  EXPECT_TRUE(contains(r.err, "tprun: received SIGTERM; forwarding it to the 2 running workers"))
      << describe(r);
}

TEST(Tprun, SigintStopsWorkersAndExitsWithTheirStatus) {
  lt::TempDir d;
  lt::TprunProcess p(job(2, "touch " + d.path() + "/ready_$RANK; exec sleep 1000"));
  ASSERT_TRUE(lt::wait_for_files({d.file("ready_0"), d.file("ready_1")}, std::chrono::seconds(30)));
  p.signal(SIGINT);
  RunResult r = p.wait(std::chrono::seconds(60));
  EXPECT_EQ(r.status, 130) << describe(r);
  EXPECT_TRUE(contains(r.err, "tprun: received SIGINT")) << describe(r);
  EXPECT_TRUE(contains(r.err, "tprun: stopped on SIGINT; rank ")) << describe(r);
  EXPECT_TRUE(contains(r.err, "ended with killed by signal 2 (SIGINT)")) << describe(r);
}

TEST(Tprun, SecondSignalKillsWithoutWaitingForTheGrace) {
  lt::TempDir d;
  lt::TprunProcess p(job(2, "trap '' TERM; touch " + d.path() + "/ready_$RANK; exec sleep 1000"),
                     {"TPCOMM_LAUNCH_GRACE=300s"});
  ASSERT_TRUE(lt::wait_for_files({d.file("ready_0"), d.file("ready_1")}, std::chrono::seconds(30)));
  p.signal(SIGTERM);
  // Two signals sent back to back may merge into one; send the second once tprun has acted.
  EXPECT_TRUE(p.wait_for_stderr("tprun: received SIGTERM;", std::chrono::seconds(60)));
  p.signal(SIGTERM);
  RunResult r = p.wait(std::chrono::seconds(120));
  EXPECT_FALSE(r.timed_out) << describe(r);
  EXPECT_EQ(r.status, 137) << describe(r);
  EXPECT_TRUE(contains(r.err, "received SIGTERM again; killing the workers")) << describe(r);
}

TEST(Tprun, OutputIsPrefixedWithTheRank) {
  RunResult r = lt::run_tprun(job(2, "echo hello; echo oops >&2; printf partial"));
  EXPECT_EQ(r.status, 0) << describe(r);
  for (const char* line :
       {"[rank 0]: hello\n", "[rank 1]: hello\n", "[rank 0]: partial\n", "[rank 1]: partial\n"})
    EXPECT_TRUE(contains(r.out, line)) << line << "\n" << describe(r);
  EXPECT_TRUE(contains(r.err, "[rank 0]: oops\n")) << describe(r);
  EXPECT_TRUE(contains(r.err, "[rank 1]: oops\n")) << describe(r);
  EXPECT_FALSE(contains(r.out, "oops")) << describe(r);
}

TEST(Tprun, NoPrefix) {
  RunResult r = lt::run_tprun(job(2, "echo hello", {"--no-prefix"}));
  EXPECT_EQ(r.status, 0) << describe(r);
  EXPECT_EQ(r.out, "hello\nhello\n") << describe(r);
}

// --bind-to core: local rank i runs on the i-th usable CPU, wrapping around; without it each
// worker may use every CPU tprun may.
TEST(Tprun, BindToCorePinsEachLocalRank) {
  std::vector<int> cpus = detail::usable_cpus();
  ASSERT_FALSE(cpus.empty());
  const std::string show = "grep Cpus_allowed_list /proc/self/status | cut -f2";
  RunResult r = lt::run_tprun(job(3, show, {"--bind-to", "core"}));
  EXPECT_EQ(r.status, 0) << describe(r);
  for (int local = 0; local < 3; ++local) {
    std::string line = "[rank " + std::to_string(local) +
                       "]: " + std::to_string(cpus[static_cast<size_t>(local) % cpus.size()]) +
                       "\n";
    EXPECT_TRUE(contains(r.out, line)) << line << describe(r);
  }
  RunResult free_run = lt::run_tprun(job(1, show));
  EXPECT_EQ(free_run.status, 0) << describe(free_run);
  if (cpus.size() > 1) {
    EXPECT_FALSE(contains(free_run.out, "[rank 0]: " + std::to_string(cpus[0]) + "\n"))
        << describe(free_run);
  }
}

TEST(Tprun, WorkersSeeTheirEnvironment) {
  // Node 1 of 2 hosts no store, so the port is passed through as given.
  RunResult r = lt::run_tprun(
      {"--nnodes", "2", "--node-rank", "1", "--master-addr", "127.0.0.1", "--master-port", "1234",
       "--run-id", "myjob", "--nproc-per-node", "2", "sh", "-c",
       "echo \"R=$RANK L=$LOCAL_RANK W=$WORLD_SIZE LW=$LOCAL_WORLD_SIZE G=$GROUP_RANK "
       "GW=$GROUP_WORLD_SIZE MA=$MASTER_ADDR MP=$MASTER_PORT J=$TPCOMM_JOB_ID "
       "A=$TPCOMM_USE_AGENT_STORE RC=$TPCOMM_RESTART_COUNT X=$TPRUN_TEST_INHERITED\""},
      {"TPRUN_TEST_INHERITED=yes", "RANK=99", "TPCOMM_JOB_ID=overridden"});
  EXPECT_EQ(r.status, 0) << describe(r);
  EXPECT_TRUE(contains(r.out,
                       "[rank 2]: R=2 L=0 W=4 LW=2 G=1 GW=2 MA=127.0.0.1 MP=1234 J=myjob "
                       "A=1 RC=0 X=yes\n"))
      << describe(r);
  EXPECT_TRUE(contains(r.out,
                       "[rank 3]: R=3 L=1 W=4 LW=2 G=1 GW=2 MA=127.0.0.1 MP=1234 J=myjob "
                       "A=1 RC=0 X=yes\n"))
      << describe(r);
}

TEST(Tprun, StandaloneHostsTheStoreOnAFreePortWithARandomJobId) {
  auto run = [] {
    return lt::run_tprun(job(2, "echo \"$MASTER_PORT $TPCOMM_JOB_ID\"", {"--no-prefix"}));
  };
  RunResult a = run(), b = run();
  ASSERT_EQ(a.status, 0) << describe(a);
  ASSERT_EQ(b.status, 0) << describe(b);
  size_t nl = a.out.find('\n');
  ASSERT_NE(nl, std::string::npos) << describe(a);
  std::string first = a.out.substr(0, nl);
  EXPECT_EQ(a.out, first + "\n" + first + "\n") << "both ranks see the same values";
  int port = std::stoi(first.substr(0, first.find(' ')));
  EXPECT_GT(port, 0);
  std::string id = first.substr(first.find(' ') + 1);
  EXPECT_EQ(id.size(), 16u) << id;
  EXPECT_NE(b.out.substr(b.out.find(' ') + 1, 16), id) << "job ids are random";
}

TEST(Tprun, StorePortInUseIsAClearError) {
  int s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  ASSERT_GE(s, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(bind(s, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
  ASSERT_EQ(listen(s, 4), 0);
  socklen_t len = sizeof(a);
  getsockname(s, reinterpret_cast<sockaddr*>(&a), &len);
  std::string port = std::to_string(ntohs(a.sin_port));
  RunResult r = lt::run_tprun({"--master-port", port, "sh", "-c", "exit 0"});
  close(s);
  EXPECT_EQ(r.status, 1) << describe(r);
  EXPECT_TRUE(contains(r.err, "tprun: cannot host the job's store on 127.0.0.1:" + port))
      << describe(r);
  EXPECT_TRUE(contains(r.err, "pick another --master-port")) << describe(r);
}

TEST(Tprun, LogDirGetsEachRanksStreams) {
  lt::TempDir d;
  std::string logs = d.file("logs/deep");
  RunResult r = lt::run_tprun(job(2, "echo out$RANK; echo err$RANK >&2", {"--log-dir", logs}));
  EXPECT_EQ(r.status, 0) << describe(r);
  for (int rank : {0, 1}) {
    std::string dir = logs + "/rank_" + std::to_string(rank) + "/";
    EXPECT_EQ(lt::read_file(dir + "stdout.log"), "out" + std::to_string(rank) + "\n");
    EXPECT_EQ(lt::read_file(dir + "stderr.log"), "err" + std::to_string(rank) + "\n");
    EXPECT_TRUE(contains(r.out, "[rank " + std::to_string(rank) + "]: out")) << describe(r);
  }
}

TEST(Tprun, RedirectsSendStreamsOnlyToFiles) {
  lt::TempDir d;
  std::string script = "echo out$RANK; echo err$RANK >&2";
  RunResult r = lt::run_tprun(job(2, script, {"--log-dir", d.path(), "--redirects", "1"}));
  EXPECT_EQ(r.status, 0) << describe(r);
  EXPECT_FALSE(contains(r.out, "out0")) << describe(r);
  EXPECT_TRUE(contains(r.err, "[rank 0]: err0")) << describe(r);
  EXPECT_EQ(lt::read_file(d.path() + "/rank_0/stdout.log"), "out0\n");

  r = lt::run_tprun(job(2, script, {"--log-dir", d.path(), "--redirects", "0:3"}));
  EXPECT_FALSE(contains(r.out + r.err, "[rank 0]")) << describe(r);
  EXPECT_TRUE(contains(r.out, "[rank 1]: out1")) << describe(r);
  EXPECT_EQ(lt::read_file(d.path() + "/rank_0/stderr.log"), "err0\n");

  // --tee wins over --redirects for the streams it names.
  r = lt::run_tprun(job(2, script, {"--log-dir", d.path(), "--redirects", "3", "--tee", "1"}));
  EXPECT_TRUE(contains(r.out, "[rank 0]: out0")) << describe(r);
  EXPECT_FALSE(contains(r.err, "err0")) << describe(r);
}

TEST(Tprun, MaxRestartsRestartsAllWorkersUntilTheySucceed) {
  lt::TempDir d;
  // Each attempt: every rank counts itself; rank 1 fails (once rank 0 has counted itself,
  // a missing file counting as 0) until the third attempt.
  std::string count0 = d.file("count_0");
  std::string script = "echo x >> " + d.path() +
                       "/count_$RANK; if [ \"$TPCOMM_RESTART_COUNT\" -lt 2 ]; then "
                       "[ \"$RANK\" = 0 ] && exec sleep 1000; i=0; "
                       "while [ $(cat " +
                       count0 +
                       " 2>/dev/null | wc -l) -le $TPCOMM_RESTART_COUNT ]; do "
                       "sleep 0.05; i=$((i+1)); [ $i -gt 1200 ] && exit 99; done; exit 4; fi; "
                       "exit 0";
  RunResult r = lt::run_tprun(job(2, script, {"--max-restarts", "2"}));
  EXPECT_EQ(r.status, 0) << describe(r);
  EXPECT_EQ(lt::read_file(d.file("count_0")), "x\nx\nx\n");
  EXPECT_EQ(lt::read_file(d.file("count_1")), "x\nx\nx\n");
  EXPECT_TRUE(contains(r.err,
                       "failed: exit code 4; stopped the other worker; restarting all 2 "
                       "workers of this node (restart 1 of 2)"))
      << describe(r);
  EXPECT_TRUE(contains(r.err, "(restart 2 of 2)")) << describe(r);
}

TEST(Tprun, MaxRestartsGivesUp) {
  lt::TempDir d;
  RunResult r =
      lt::run_tprun(job(1, "echo try; exit 4", {"--max-restarts", "1", "--log-dir", d.path()}));
  EXPECT_EQ(r.status, 4) << describe(r);
  EXPECT_TRUE(contains(r.err, "restarting the worker of this node (restart 1 of 1)"))
      << describe(r);
  EXPECT_TRUE(contains(r.err, "failed: exit code 4; gave up after 1 restarts (--max-restarts 1)"))
      << describe(r);
  EXPECT_EQ(lt::read_file(d.path() + "/rank_0/stdout.log"),
            "try\n---- tprun: restart 1 ----\ntry\n");
}

TEST(Tprun, CommandLineErrorsExitTwo) {
  RunResult r = lt::run_tprun({"--nprocs", "2", "sh"});
  EXPECT_EQ(r.status, 2) << describe(r);
  EXPECT_TRUE(contains(r.err,
                       "tprun: The following argument was not expected: --nprocs (did you mean "
                       "--nproc-per-node?); run 'tprun --help' for usage\n"))
      << describe(r);
  r = lt::run_tprun({"--standalone", "no_such_program_xyz"});
  EXPECT_EQ(r.status, 2) << describe(r);
  EXPECT_TRUE(contains(r.err, "cannot run 'no_such_program_xyz': not found in PATH"))
      << describe(r);
}

TEST(Tprun, Help) {
  RunResult r = lt::run_tprun({"--help"});
  EXPECT_EQ(r.status, 0) << describe(r);
  EXPECT_TRUE(contains(r.out, "usage: tprun [options] PROGRAM [ARGS...]")) << describe(r);
}

// launch() called in-process, output into files: status, prefixes, and no child left over.
TEST(Tprun, InProcessLaunch) {
  lt::TempDir d;
  // Rank 1 fails once rank 0 has printed and finished.
  std::string script = "echo hi; if [ \"$RANK\" = 0 ]; then touch " + d.file("done0") +
                       "; exit 0; fi; i=0; while [ ! -e " + d.file("done0") +
                       " ]; do sleep 0.05; i=$((i+1)); [ $i -gt 1200 ] && exit 99; done; exit 3";
  const char* argv[] = {"tprun", "--standalone", "--nproc-per-node", "2",
                        "sh",    "-c",           script.c_str()};
  Options o = parse_args(7, argv);
  detail::UniqueFd out(::open(d.file("out").c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0644));
  detail::UniqueFd err(::open(d.file("err").c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0644));
  o.out_fd = out.get();
  o.err_fd = err.get();
  EXPECT_EQ(launch(o), 3);
  std::string text = lt::read_file(d.file("out"));
  EXPECT_TRUE(contains(text, "[rank 0]: hi\n")) << text;
  EXPECT_TRUE(contains(text, "[rank 1]: hi\n")) << text;
  EXPECT_TRUE(contains(lt::read_file(d.file("err")), "tprun: rank 1 (local 1"));
  int st;
  EXPECT_EQ(waitpid(-1, &st, WNOHANG), -1) << "a child of launch() was left unreaped";
  EXPECT_EQ(errno, ECHILD);
  // Options that parse_args would have refused are refused by launch() too.
  Options bad = o;
  bad.nproc_per_node = 0;
  EXPECT_THROW(launch(bad), InvalidArgument);
}

}  // namespace
}  // namespace tpcomm::launch
