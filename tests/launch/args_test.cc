// tprun's command line: every flag, both spellings, Slurm/mpirun defaults, and the message of
// each error.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <initializer_list>
#include <string>
#include <vector>

#include "core/config.h"
#include "tpcomm/error.hpp"
#include "tpcomm/launch.hpp"

namespace tpcomm::launch {
namespace {

Options parse(std::initializer_list<const char*> args) {
  std::vector<const char*> argv = {"tprun"};
  argv.insert(argv.end(), args.begin(), args.end());
  return parse_args(static_cast<int>(argv.size()), argv.data());
}

// The InvalidArgument message of a bad command line ("" if it parsed).
std::string error_of(std::initializer_list<const char*> args) {
  try {
    parse(args);
  } catch (const InvalidArgument& e) {
    return e.what();
  }
  return "";
}

#define EXPECT_ERROR(ARGS, PART)                                          \
  do {                                                                    \
    std::string msg_ = error_of ARGS;                                     \
    EXPECT_NE(msg_.find(PART), std::string::npos) << "message: " << msg_; \
    EXPECT_NE(msg_.find("tprun --help"), std::string::npos) << msg_;      \
  } while (0)

// Sets (or unsets, with nullptr) variables for one test; restores them afterwards.
class ScopedEnv {
 public:
  ScopedEnv(std::initializer_list<std::pair<const char*, const char*>> vars) {
    for (auto [k, v] : vars) {
      names_.push_back(k);
      if (v)
        setenv(k, v, 1);
      else
        unsetenv(k);
    }
    config::reload();
  }
  ~ScopedEnv() {
    for (const char* k : names_) unsetenv(k);
    config::reload();
  }

 private:
  std::vector<const char*> names_;
};

TEST(LaunchArgs, Defaults) {
  Options o = parse({"train", "--lr", "3"});
  EXPECT_EQ(o.nproc_per_node, 1);
  EXPECT_EQ(o.nnodes, 1);
  EXPECT_EQ(o.node_rank, 0);
  EXPECT_EQ(o.master_addr, "127.0.0.1");
  EXPECT_EQ(o.master_port, 29500);
  EXPECT_EQ(o.max_restarts, 0);
  EXPECT_TRUE(o.prefix_output);
  EXPECT_EQ(o.grace, std::chrono::seconds(5));
  EXPECT_EQ(o.program, "train");
  EXPECT_EQ(o.args, (std::vector<std::string>{"--lr", "3"}));
}

TEST(LaunchArgs, EveryFlagBothForms) {
  Options o = parse({"--nproc-per-node",
                     "4",
                     "--nnodes=3",
                     "--node_rank",
                     "2",
                     "--master-addr",
                     "10.0.0.1",
                     "--master_port=1234",
                     "--max-restarts",
                     "2",
                     "--log-dir",
                     "/l",
                     "--redirects",
                     "3",
                     "--tee=1",
                     "--run-id",
                     "job7",
                     "--no-prefix",
                     "prog",
                     "a",
                     "--nnodes",
                     "9"});
  EXPECT_EQ(o.nproc_per_node, 4);
  EXPECT_EQ(o.nnodes, 3);
  EXPECT_EQ(o.node_rank, 2);
  EXPECT_EQ(o.master_addr, "10.0.0.1");
  EXPECT_EQ(o.master_port, 1234);
  EXPECT_EQ(o.max_restarts, 2);
  EXPECT_EQ(o.log_dir, "/l");
  EXPECT_EQ(o.redirects, Streams::Both);
  EXPECT_EQ(o.tee, Streams::Out);
  EXPECT_EQ(o.job_id, "job7");
  EXPECT_FALSE(o.prefix_output);
  EXPECT_EQ(o.program, "prog");
  // Everything after the program is the program's, even when it looks like a flag.
  EXPECT_EQ(o.args, (std::vector<std::string>{"a", "--nnodes", "9"}));
}

TEST(LaunchArgs, BindTo) {
  EXPECT_FALSE(parse({"p"}).bind_to_core);
  EXPECT_TRUE(parse({"--bind-to", "core", "p"}).bind_to_core);
  EXPECT_FALSE(parse({"--bind_to=none", "p"}).bind_to_core);
  EXPECT_ERROR(({"--bind-to", "socket", "p"}), "--bind-to: socket not in {core,none}");
}

TEST(LaunchArgs, UnderscoreSpellingsAndAliases) {
  Options o = parse({"--nproc_per_node=2", "--max_restarts=1", "--job-id", "j", "p"});
  EXPECT_EQ(o.nproc_per_node, 2);
  EXPECT_EQ(o.max_restarts, 1);
  EXPECT_EQ(o.job_id, "j");
  EXPECT_EQ(parse({"--rdzv-id", "r", "p"}).job_id, "r");
  EXPECT_EQ(parse({"--rdzv_backend=c10d", "p"}).program, "p");
}

TEST(LaunchArgs, UnambiguousAbbreviations) {
  Options o = parse({"--nproc", "2", "--max-r=1", "--node_r", "0", "p"});
  EXPECT_EQ(o.nproc_per_node, 2);
  EXPECT_EQ(o.max_restarts, 1);
  EXPECT_ERROR(({"--n", "2", "p"}),
               "ambiguous option '--n' (--nproc-per-node, --nnodes, --node-rank, --no-prefix)");
  EXPECT_ERROR(({"--r=x", "p"}), "ambiguous option '--r' (--rdzv-endpoint, --rdzv-backend");
}

TEST(LaunchArgs, DoubleDashEndsOptions) {
  Options o = parse({"--nproc-per-node", "2", "--", "--weird-program", "-x"});
  EXPECT_EQ(o.program, "--weird-program");
  EXPECT_EQ(o.args, (std::vector<std::string>{"-x"}));
}

TEST(LaunchArgs, Standalone) {
  Options o = parse({"--standalone", "--nproc-per-node", "3", "p"});
  EXPECT_TRUE(o.standalone);
  EXPECT_EQ(o.nnodes, 1);
  EXPECT_EQ(o.master_port, 0);
  EXPECT_EQ(o.master_addr, "127.0.0.1");
  EXPECT_ERROR(({"--standalone", "--nnodes", "2", "p"}), "--standalone runs one node");
}

TEST(LaunchArgs, RdzvEndpoint) {
  Options o = parse({"--rdzv-endpoint", "node0:4567", "p"});
  EXPECT_EQ(o.master_addr, "node0");
  EXPECT_EQ(o.master_port, 4567);
  o = parse({"--rdzv-endpoint=[::1]:99", "p"});
  EXPECT_EQ(o.master_addr, "::1");
  EXPECT_EQ(o.master_port, 99);
  o = parse({"--rdzv-endpoint", "hostonly", "p"});
  EXPECT_EQ(o.master_addr, "hostonly");
  EXPECT_EQ(o.master_port, 29500);
  EXPECT_ERROR(({"--rdzv-endpoint", "h:70000", "p"}), "port in 0..65535");
  EXPECT_ERROR(({"--rdzv-endpoint", ":12", "p"}), "has no host");
  EXPECT_ERROR(({"--rdzv-endpoint", "[::1:12", "p"}), "unclosed '['");
  EXPECT_ERROR(({"--rdzv-endpoint", "a:1", "--master-addr", "b", "p"}), "disagrees");
}

TEST(LaunchArgs, PerRankStreams) {
  Options o = parse(
      {"--nproc-per-node", "3", "--log-dir", "d", "--redirects", "0:1,2:3", "--tee", "1:2", "p"});
  EXPECT_EQ(o.redirects, Streams::None);
  ASSERT_EQ(o.redirects_per_rank.size(), 2u);
  EXPECT_EQ(o.redirects_per_rank.at(0), Streams::Out);
  EXPECT_EQ(o.redirects_per_rank.at(2), Streams::Both);
  EXPECT_EQ(o.tee_per_rank.at(1), Streams::Err);
  EXPECT_ERROR(({"--log-dir", "d", "--redirects", "0:1,5:1", "p"}),
               "local rank 5 is out of range for --nproc-per-node 1");
  EXPECT_ERROR(({"--log-dir", "d", "--redirects", "0:1,x", "p"}), "is not LOCAL_RANK:STREAMS");
  EXPECT_ERROR(({"--log-dir", "d", "--tee", "0:7", "p"}), "is not one of 0 (none)");
}

TEST(LaunchArgs, NprocCpuAndElasticForm) {
  EXPECT_GE(parse({"--nproc-per-node", "cpu", "p"}).nproc_per_node, 1);
  EXPECT_EQ(parse({"--nnodes", "2:2", "p"}).nnodes, 2);
  EXPECT_ERROR(({"--nnodes", "1:4", "p"}), "elastic node ranges are not supported");
  EXPECT_ERROR(({"--nproc-per-node", "gpu", "p"}), "does not count GPUs");
}

TEST(LaunchArgs, Help) {
  EXPECT_TRUE(parse({"-h"}).help);
  EXPECT_TRUE(parse({"--help"}).help);
  EXPECT_TRUE(parse({"--nproc-per-node", "2", "--help"}).help);
  EXPECT_TRUE(parse({"--version"}).version);
  std::string u = usage("tprun");
  for (const char* flag : {"--nproc-per-node", "--nnodes", "--node-rank", "--master-addr",
                           "--master-port", "--standalone", "--max-restarts", "--log-dir",
                           "--redirects", "--tee", "--rdzv-endpoint", "--rdzv-backend", "--run-id",
                           "--rdzv-id", "--job-id", "--no-prefix", "--bind-to", "--version"})
    EXPECT_NE(u.find(flag), std::string::npos) << flag;
}

TEST(LaunchArgs, Errors) {
  EXPECT_ERROR(({"--nprocs", "2", "p"}),
               "tprun: The following argument was not expected: --nprocs (did you mean "
               "--nproc-per-node?)");
  EXPECT_ERROR(({"-n", "2", "p"}), "The following argument was not expected: -n");
  EXPECT_ERROR(({"--nproc-per-node"}), "--nproc-per-node: 1 required N missing");
  EXPECT_ERROR(({"--nproc-per-node="}), "--nproc-per-node: 1 required N missing");
  EXPECT_ERROR(({"--nproc-per-node", "0", "p"}), "--nproc-per-node '0' is not a positive number");
  EXPECT_ERROR(({"--nproc-per-node", "two", "p"}), "'two'");
  EXPECT_ERROR(({"--nnodes", "-1", "p"}), "--nnodes '-1' is not a positive number of nodes");
  EXPECT_ERROR(({"--node-rank", "x", "p"}), "--node-rank: Value x not in range 0 to 1048576");
  EXPECT_ERROR(({"--nnodes", "2", "--node-rank", "2", "p"}),
               "--node-rank 2 is out of range for 2 nodes (node ranks are 0..1)");
  EXPECT_ERROR(({"--master-port", "65536", "p"}),
               "--master-port: Value 65536 not in range 0 to 65535");
  EXPECT_ERROR(({"--nnodes", "2", "--master-port", "0", "p"}), "works only on one node");
  EXPECT_ERROR(({"--max-restarts", "-2", "p"}),
               "--max-restarts: Value -2 not in range 0 to 1048576");
  EXPECT_ERROR(({"--redirects", "4", "--log-dir", "d", "p"}), "--redirects '4' is not one of");
  EXPECT_ERROR(({"--redirects", "3", "p"}), "give --log-dir");
  EXPECT_ERROR(({"--tee", "3", "p"}), "give --log-dir");
  EXPECT_ERROR(({"--no-prefix=maybe", "p"}), "Could not convert: --no-prefix = maybe");
  EXPECT_ERROR(({"--rdzv-backend", "etcd", "p"}), "--rdzv-backend: etcd not in {c10d,static}");
  EXPECT_ERROR(({"--nproc-per-node", "2"}), "no program to run");
  EXPECT_ERROR(({}), "no program to run");
}

TEST(LaunchArgs, SlurmDefaults) {
  ScopedEnv env({{"SLURM_NNODES", "4"}, {"SLURM_NODEID", "3"}, {"SLURM_JOB_ID", "777"}});
  Options o = parse({"p"});
  EXPECT_EQ(o.nnodes, 4);
  EXPECT_EQ(o.node_rank, 3);
  EXPECT_EQ(o.job_id, "slurm-777");
  // Flags win over the environment.
  o = parse({"--nnodes", "5", "--node-rank", "1", "--run-id", "x", "p"});
  EXPECT_EQ(o.nnodes, 5);
  EXPECT_EQ(o.node_rank, 1);
  EXPECT_EQ(o.job_id, "x");
  // --standalone ignores them.
  o = parse({"--standalone", "p"});
  EXPECT_EQ(o.nnodes, 1);
  EXPECT_EQ(o.node_rank, 0);
}

TEST(LaunchArgs, MpiDefaultsAndPrecedence) {
  ScopedEnv env({{"OMPI_COMM_WORLD_SIZE", "2"},
                 {"OMPI_COMM_WORLD_RANK", "1"},
                 {"SLURM_NNODES", "8"},
                 {"SLURM_NODEID", "7"}});
  Options o = parse({"p"});
  EXPECT_EQ(o.nnodes, 2);
  EXPECT_EQ(o.node_rank, 1);
}

TEST(LaunchArgs, PmiDefaults) {
  ScopedEnv env({{"PMI_SIZE", "3"}, {"PMI_RANK", "2"}});
  Options o = parse({"p"});
  EXPECT_EQ(o.nnodes, 3);
  EXPECT_EQ(o.node_rank, 2);
}

TEST(LaunchArgs, EnvironmentNodeRankOutOfRangeNamesTheVariable) {
  ScopedEnv env({{"SLURM_NNODES", "2"}, {"SLURM_NODEID", "1"}});
  EXPECT_ERROR(({"--nnodes", "1", "p"}), "SLURM_NODEID=1");
}

TEST(LaunchArgs, MalformedEnvironmentValueIsAConfigError) {
  ScopedEnv env({{"SLURM_NNODES", "many"}, {"SLURM_NODEID", "0"}});
  try {
    parse({"p"});
    FAIL() << "expected ConfigError";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("SLURM_NNODES='many'"), std::string::npos) << e.what();
  }
}

TEST(LaunchArgs, JobIdAndGraceFromEnvironment) {
  ScopedEnv env({{"TPCOMM_JOB_ID", "fromenv"}, {"TPCOMM_LAUNCH_GRACE", "250ms"}});
  Options o = parse({"p"});
  EXPECT_EQ(o.job_id, "fromenv");
  EXPECT_EQ(o.grace, std::chrono::milliseconds(250));
}

TEST(LaunchArgs, MalformedGraceIsAConfigError) {
  ScopedEnv env({{"TPCOMM_LAUNCH_GRACE", "soon"}});
  EXPECT_THROW(parse({"p"}), ConfigError);
}

}  // namespace
}  // namespace tpcomm::launch
