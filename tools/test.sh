#!/usr/bin/env bash
# The whole test suite: installs what is needed, builds with warnings as errors, runs every
# test, then builds the unit tests with AddressSanitizer + UndefinedBehaviorSanitizer (clang,
# which also builds the libFuzzer targets) and runs them, then the Python tier (.venv, the
# package, pytest over python/tests: docs/python.md), then checks that nothing was left in
# /dev/shm. Usage: tools/test.sh [--no-sanitizers]
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
jobs=$(nproc)

bash tools/setup.sh

shm_before=$(ls /dev/shm | grep -c '^tpcomm' || true)
start=$(date +%s)

echo "== build (RelWithDebInfo, -Werror) =="
# Line tables only (-g1): the same optimised code, with file:line in every backtrace; full
# debug info took a third of this build's time.
cmake -S . -B build-test -G Ninja -DTPCOMM_WERROR=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O2 -g1 -DNDEBUG" >/dev/null
cmake --build build-test -j "$jobs"
echo "== tests =="
ctest --test-dir build-test -j "$jobs" --output-on-failure --timeout 300

if [[ "${1:-}" != "--no-sanitizers" ]]; then
  # The in-process unit tests, the shared-memory transport and intra-host collectives (forked
  # ranks over mapped segments: where a wrong offset would go unnoticed) and the fuzz targets,
  # under ASan + UBSan; clang also builds the libFuzzer binaries. The other multi-rank jobs
  # (p2p, pg_coll, ucx, reliability) run in the first pass only.
  san_areas=(core store rendezvous reduce net collectives shm shm_coll)
  targets=(tpstore tpbench)  # the store tests start tpstore; tpbench_test runs bin/tpbench
  for a in "${san_areas[@]}"; do
    for f in tests/$a/*_test.cc; do targets+=("$(basename "$f" .cc)"); done
  done
  for f in tests/fuzz/*_fuzz.cc; do
    n=$(basename "$f" .cc)
    targets+=("$n" "${n}_replay")
  done
  echo "== sanitizer build (clang, address+undefined): ${#targets[@]} targets =="
  CC=clang CXX=clang++ cmake -S . -B build-asan -G Ninja -DTPCOMM_WERROR=ON \
    -DCMAKE_BUILD_TYPE=Debug -DCMAKE_CXX_FLAGS_DEBUG=-g1 -DTPCOMM_SANITIZE=address,undefined -DTPCOMM_BUILD_BENCH=OFF >/dev/null
  cmake --build build-asan -j "$jobs" --target "${targets[@]}"
  echo "== sanitizer tests =="
  labels=$(IFS='|'; echo "^(${san_areas[*]}|fuzz)\$")
  ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1 \
    LSAN_OPTIONS=suppressions=$root/tests/lsan.supp \
    ctest --test-dir build-asan -j "$jobs" --output-on-failure --timeout 900 -L "$labels"
fi

echo "== python tier =="
# .venv with pinned packages and pip install . (libtpcomm and tpcomm._C, built in build-python/),
# then pytest over python/tests, torch's distributed_test.py selection included. pytest's exit 5
# (nothing collected) fails like any other non-zero exit.
py_start=$(date +%s)
bash tools/python_env.sh --werror
TPRUN=$root/build-test/bin/tprun .venv/bin/python -m pytest -q -p no:cacheprovider python/tests
echo "== python tier passed in $(( $(date +%s) - py_start )) s =="

shm_after=$(ls /dev/shm | grep -c '^tpcomm' || true)
if ((shm_after > shm_before)); then
  echo "FAILED: the tests left $((shm_after - shm_before)) tpcomm segment(s) in /dev/shm:" >&2
  ls -la /dev/shm | grep tpcomm >&2
  exit 1
fi
echo "== all tests passed in $(( $(date +%s) - start )) s =="
