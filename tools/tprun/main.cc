// tprun: the launcher of tensorplay.distributed jobs (torchrun's flags). See
// include/tpcomm/launch.hpp; everything lives in the library so tests can call it.
#include "tpcomm/launch.hpp"

int main(int argc, char** argv) { return tpcomm::launch::main(argc, argv); }
