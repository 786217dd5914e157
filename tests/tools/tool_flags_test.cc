// Every flag and alias the tools accept, run through the installed programs: each spelling is
// taken (exit status other than 2, with the effect it should have), an unknown flag or a bad
// value is a usage error (status 2, one line naming it plus the --help hint), and no tool ends
// in an abort. tprun's spellings are torchrun's; tpbench's are nccl-tests'.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "common/shell.h"

namespace {

std::string bin(const std::string& tool) {
  std::string path = TPCOMM_TEST_BIN_DIR;
  path += '/';
  path += tool;
  return path;
}

using Result = tpcomm::testing::ShellResult;
using tpcomm::testing::has;

Result sh(const std::string& cmd) { return tpcomm::testing::run_shell(cmd, 120); }

Result tool(const std::string& name, const std::string& args) { return sh(bin(name) + " " + args); }

// A usage error: exit status 2, the tool's name first, the hint, and no crash.
void expect_usage_error(const Result& r, const std::string& name, const std::string& part) {
  EXPECT_EQ(r.status, 2) << r.out;
  EXPECT_TRUE(has(r.out, name + ": ")) << r.out;
  EXPECT_TRUE(has(r.out, part)) << r.out;
  EXPECT_TRUE(has(r.out, name + " --help")) << r.out;
  EXPECT_FALSE(has(r.out, "terminate called")) << r.out;
}

// ---- tprun: torchrun's flags, dash and underscore spellings, --flag=value, abbreviations ----

TEST(ToolFlags, TprunAcceptsEveryFlagAndAlias) {
  // Each line is one accepted spelling; the program (true) runs on every worker.
  const std::vector<std::string> lines = {
      "--nproc-per-node 2",
      "--nproc_per_node=2",
      "--nproc 2",
      "--nproc-per-node cpu",
      "--nnodes 1",
      "--nnodes=1:1",
      "--node-rank 0",
      "--node_rank=0",
      "--master-addr 127.0.0.1 --master-port 0",
      "--master_addr=127.0.0.1 --master_port=0",
      "--standalone",
      "--max-restarts 1",
      "--max_restarts=0",
      "--log-dir $D --redirects 3",
      "--log_dir=$D --tee 1",
      "--log-dir $D --redirects 0:1",
      "--rdzv-endpoint 127.0.0.1:0",
      "--rdzv_endpoint=127.0.0.1:0",
      "--rdzv-backend c10d --master-port 0",
      "--rdzv_backend=static --master-port 0",
      "--rdzv-id j --master-port 0",
      "--run-id j --master-port 0",
      "--run_id=j --master-port 0",
      "--job-id j --master-port 0",
      "--no-prefix --master-port 0",
      "--bind-to core --master-port 0",
      "--bind_to=none --master-port 0",
      "--store 127.0.0.1:1",  // an external store: `true` never connects to it
  };
  for (const std::string& l : lines) {
    std::string port = l.find("--store") == std::string::npos ? " --master-port 0 " : " ";
    Result r = sh("D=$(mktemp -d) && " + bin("tprun") + port + l +
                  " true; rc=$?; rm -rf \"$D\"; exit $rc");
    EXPECT_EQ(r.status, 0) << l << "\n" << r.out;
  }
  for (const char* help : {"-h", "--help"}) {
    Result r = tool("tprun", help);
    EXPECT_EQ(r.status, 0) << r.out;
    for (const char* flag :
         {"--nproc-per-node", "--nnodes", "--node-rank", "--master-addr", "--master-port",
          "--standalone", "--max-restarts", "--log-dir", "--redirects", "--tee", "--rdzv-endpoint",
          "--rdzv-backend", "--rdzv-id", "--run-id", "--job-id", "--no-prefix", "--bind-to",
          "--store", "--version"})
      EXPECT_TRUE(has(r.out, flag)) << flag << "\n" << r.out;
  }
}

TEST(ToolFlags, TprunRefusesUnknownFlagsAndBadValues) {
  expect_usage_error(tool("tprun", "--nprocs 2 true"), "tprun", "--nprocs");
  expect_usage_error(tool("tprun", "--nproc-per-node two true"), "tprun", "two");
  expect_usage_error(tool("tprun", "--master-port 70000 true"), "tprun", "70000");
  expect_usage_error(tool("tprun", "--bind-to socket true"), "tprun", "socket");
}

// ---- tpbench ----

TEST(ToolFlags, TpbenchAcceptsEveryFlagAndAlias) {
  // nccl-tests' letters and long names with nccl-tests' meanings, and tpcomm's long options.
  const std::string sweep = " -b 8 -e 8 -n 1 -w 0";
  const std::vector<std::string> lines = {
      "-b 8 -e 16 -f 2",
      "--minbytes 8 --maxbytes 16 --stepfactor 2",
      "--minbytes=8 --maxbytes=16 --stepfactor=2",
      "-b 8 -e 24 -i 8",
      "--stepbytes 8 -b 8 -e 24",
      "-d float" + sweep,
      "--datatype=int32" + sweep,
      "-o max" + sweep,
      "--op prod" + sweep,
      "--redop=min" + sweep,
      "-r 1 --collective broadcast" + sweep,
      "--root 1 --collective=reduce" + sweep,
      "-n 1 -w 0 -b 8 -e 8",
      "--iters 1 --warmup_iters 0 -b 8 -e 8",
      "-m 2" + sweep,
      "--agg_iters 2" + sweep,
      "-a 0" + sweep,
      "--average 3" + sweep,
      "-c 0" + sweep,
      "--check 1" + sweep,
      "-z 1" + sweep,
      "--blocking 0" + sweep,
      "-g 1" + sweep,
      "--ngpus 1" + sweep,
      "--samples 2" + sweep,
      "--algo ring" + sweep,
      "--algorithm ring" + sweep,
      "--transport local" + sweep,
      "--slice 4K" + sweep,
      "--json" + sweep,
      "--csv" + sweep,
      "--thp 0" + sweep,
      "--device cpu" + sweep,
      "--device=cpu" + sweep,
      "--iter 1 --warm 0 -b 8 -e 8",  // getopt_long's abbreviations
  };
  for (const std::string& l : lines) {
    for (const char* threads : {"-t 2 ", "--nthreads 2 ", "--threads=2 "}) {
      Result r = tool("tpbench", threads + l);
      EXPECT_EQ(r.status, 0) << threads << l << "\n" << r.out;
      EXPECT_TRUE(has(r.out, "0 OK") || has(r.out, "\"wrong\": 0\n}") || has(r.out, "op,size"))
          << l << "\n"
          << r.out;
    }
  }
  for (const char* help : {"-h", "--help"}) {
    Result r = tool("tpbench", help);
    EXPECT_EQ(r.status, 0) << r.out;
    for (const char* flag : {"-b,--minbytes",
                             "-e,--maxbytes",
                             "-f,--stepfactor",
                             "-i,--stepbytes",
                             "--collective",
                             "-o,--op,--redop",
                             "-d,--datatype",
                             "-r,--root",
                             "-n,--iters",
                             "-w,--warmup_iters",
                             "-m,--agg_iters",
                             "-a,--average",
                             "-c,--check",
                             "-z,--blocking",
                             "-t,--nthreads,--threads",
                             "-g,--ngpus",
                             "--samples",
                             "--algo,--algorithm",
                             "--transport",
                             "--slice",
                             "--json",
                             "--csv",
                             "--out",
                             "--thp",
                             "--device",
                             "--version"})
      EXPECT_TRUE(has(r.out, flag)) << flag << "\n" << r.out;
  }
  // The links are tpbench under nccl-tests' names.
  for (const char* link :
       {"all_reduce_perf", "all_gather_perf", "broadcast_perf", "reduce_perf",
        "reduce_scatter_perf", "alltoall_perf", "gather_perf", "scatter_perf", "sendrecv_perf"}) {
    Result r = tool(link, "--version");
    EXPECT_EQ(r.status, 0) << r.out;
    EXPECT_TRUE(has(r.out, std::string(link) + " (tpcomm ")) << r.out;
  }
}

TEST(ToolFlags, TpbenchRefusesUnknownAndUnsupportedFlags) {
  expect_usage_error(tool("tpbench", "-x 1"), "tpbench", "-x");
  expect_usage_error(tool("all_reduce_perf", "-G 1"), "all_reduce_perf",
                     "-G,--cudagraph (nccl-tests' CUDA graphs) is not supported");
  expect_usage_error(tool("tpbench", "-o allreduce"), "tpbench", "'allreduce' is not a reduction");
  expect_usage_error(tool("tpbench", "-d uint64"), "tpbench", "'uint64' is not a dtype");
}

// ---- tpinfo ----

TEST(ToolFlags, TpinfoAcceptsEveryFlag) {
  EXPECT_EQ(tool("tpinfo", "").status, 0);
  EXPECT_EQ(tool("tpinfo", "--json").status, 0);
  Result md = tool("tpinfo", "--vars-markdown");
  EXPECT_EQ(md.status, 0) << md.out;
  EXPECT_TRUE(has(md.out, "| `TPCOMM_TIMEOUT` |")) << md.out;
  // A file or directory that is not there: the flag is taken, the run fails (1, not 2).
  for (const char* a : {"--topo /nonexistent.xml", "--topo=/nonexistent.xml",
                        "--json --topo /nonexistent.xml", "--trace /nonexistent-dir"}) {
    Result r = tool("tpinfo", a);
    EXPECT_EQ(r.status, 1) << a << "\n" << r.out;
  }
  // --links outside a job: taken, then env:// finds no MASTER_ADDR (1).
  Result links = sh("env -u MASTER_ADDR -u MASTER_PORT -u WORLD_SIZE -u RANK " + bin("tpinfo") +
                    " --links --timeout 5 --bytes 64");
  EXPECT_EQ(links.status, 1) << links.out;
  EXPECT_TRUE(has(links.out, "MASTER_ADDR")) << links.out;
  for (const char* help : {"-h", "--help"}) {
    Result r = tool("tpinfo", help);
    EXPECT_EQ(r.status, 0) << r.out;
    for (const char* flag :
         {"--topo", "--json", "--vars-markdown", "--links", "--timeout", "--bytes", "--trace"})
      EXPECT_TRUE(has(r.out, flag)) << flag << "\n" << r.out;
  }
}

// ---- tpstore ----

TEST(ToolFlags, TpstoreAcceptsEveryFlag) {
  // Runs until SIGINT: the listening line, then the stop line, status 0.
  Result r = sh("F=$(mktemp); " + bin("tpstore") +
                " --host 127.0.0.1 --port 0 --job-id j --world-size 1 >$F 2>&1 & p=$!; "
                "for i in $(seq 600); do grep -q listening $F && break; sleep 0.1; done; "
                "kill -INT $p; wait $p; rc=$?; cat $F; rm -f $F; exit $rc");
  EXPECT_EQ(r.status, 0) << r.out;
  EXPECT_TRUE(has(r.out, "tpstore listening on 127.0.0.1:")) << r.out;
  EXPECT_TRUE(has(r.out, "tpstore stopping (SIGINT)")) << r.out;
  for (const char* help : {"-h", "--help"}) {
    Result h = tool("tpstore", help);
    EXPECT_EQ(h.status, 0) << h.out;
    for (const char* flag : {"--host", "--port", "--job-id", "--world-size"})
      EXPECT_TRUE(has(h.out, flag)) << flag << "\n" << h.out;
  }
}

}  // namespace
