// tpbench: collective bandwidth sweeps in the form of nccl-tests. Everything lives in the
// library (src/bench/) so that tests can call it.
#include "bench/tpbench.h"

int main(int argc, char** argv) { return tpcomm::bench::tpbench_main(argc, argv); }
