#!/usr/bin/env bash
# The README's first command: install what is needed, build, and run the main job, a 2-rank
# tpbench sweep on this machine.
#   tools/quickstart.sh [extra tpbench arguments]
# Today tpbench's two ranks are threads of one process over the in-process communicator
# (tpbench --threads 2); once the collectives are bound to the process group the same sweep
# runs as two processes under tprun.
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/setup.sh
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build -j "$(nproc)"
echo "== tpbench: 2 ranks, default sweep =="
exec build/bin/tpbench --threads 2 "$@"
