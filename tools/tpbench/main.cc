// tpbench: collective bandwidth sweeps in the form of nccl-tests. Its code is the tpcomm_bench
// library (src/bench/) so that tests can call it.
#include "bench/tpbench.h"

int main(int argc, char** argv) { return tpcomm::bench::tpbench_main(argc, argv); }
