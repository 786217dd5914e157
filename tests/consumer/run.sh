#!/usr/bin/env bash
# Installs the build tree into a temporary prefix, builds tests/consumer against it with
# find_package(tpcomm), and runs the result; checks the installed nccl-tests names run tpbench.
# Usage: run.sh BUILD_DIR CONSUMER_SRC
set -euo pipefail
build=$1
src=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cmake --install "$build" --prefix "$tmp/prefix" >/dev/null
cmake -S "$src" -B "$tmp/build" -DCMAKE_PREFIX_PATH="$tmp/prefix" >/dev/null
cmake --build "$tmp/build" >/dev/null
LD_LIBRARY_PATH="$tmp/prefix/lib:${LD_LIBRARY_PATH:-}" "$tmp/build/consumer"
for name in all_reduce_perf all_gather_perf broadcast_perf reduce_perf reduce_scatter_perf \
            alltoall_perf gather_perf scatter_perf sendrecv_perf; do
  [[ $(readlink "$tmp/prefix/bin/$name") == tpbench ]] || { echo "no link $name -> tpbench"; exit 1; }
done
LD_LIBRARY_PATH="$tmp/prefix/lib:${LD_LIBRARY_PATH:-}" "$tmp/prefix/bin/all_reduce_perf" --version
