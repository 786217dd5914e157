#!/usr/bin/env bash
# The README's first command: install what is needed, build, and run the main job, a 2-rank
# tpbench sweep on this machine.
#   tools/quickstart.sh [extra tpbench arguments]
# The two ranks are two processes launched by tprun, meeting through env:// and running the
# collectives of a process group over the transport tprun's host gives them (shared memory
# here; add `-t tcp` for TCP), each bound to its own CPU as mpirun binds (--bind-to core).
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/setup.sh
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build -j "$(nproc)"
echo "== tpbench: 2 ranks, default sweep =="
exec build/bin/tprun --nproc-per-node 2 --bind-to core build/bin/tpbench "$@"
