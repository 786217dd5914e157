#!/usr/bin/env bash
# The GPU check: what only a real GPU and driver can prove, in at most 5 minutes on one GPU.
# It runs the CUDA tests (tests/cuda, the same programs CI runs over the fake driver) against
# the real driver (TPCOMM_CUDA_LIB=libcuda.so.1) and prints one table with a PASS/FAIL line per
# check, then the overall verdict. Checks that only the fake driver can make skip themselves.
#
#   tools/gpu_check.sh [--fake] [BUILD_DIR]   (default: build-gpu; configured and built if needed)
#
# --fake runs the same checks over tpcomm's fake driver: a dry run of this script (CI keeps it
# working), never a GPU result. Exit status: 0 when every check passed, 1 otherwise, 2 when
# there is no usable GPU.
set -uo pipefail
cd "$(dirname "$0")/.."
fake=0
if [[ "${1:-}" == "--fake" ]]; then
  fake=1
  shift
fi
build=${1:-build-gpu}
jobs=$(nproc)
start=$(date +%s)

# The checks: name, test program (in $build/tests), what it proves.
checks=(
  "driver-status|driver_status_test|driver loads lazily, one cuInit from 8 threads; stub and missing library say 'no driver'; tpinfo"
  "contract|contract_test|driver contract: contexts, copies, memsets, pointer attributes, streams, events, capture, module load and launch"
  "memory-kinds|memory_kind_test|pointer kinds (host, pinned, device, managed), the allocation cache, mislabelled tensors"
  "kernels|reduce_device_test|every kernel x dtype x op against the host reference, odd length, misaligned offsets"
  "ipc|ipc_test|2 processes on one GPU: legacy handle at an interior offset, VMM POSIX fd, a peer exiting with the mapping"
  "tensor-check|tensor_check_test|CUDA tensors through a 2-rank group: refused before any communication, group usable"
  "tpbench|tpbench_cuda_test|tpbench --device cuda under tprun: allreduce (2 ranks, shm), every op and dtype (3 ranks, tcp), #wrong 0"
  "staging|staging_test|every operation on CUDA tensors staged over tcp (2, 3 ranks), shm (2, 4), ucx (2, 4) on one GPU: results vs the host path, the user stream, capture refused"
)

programs=()
for c in "${checks[@]}"; do
  IFS='|' read -r _ prog _ <<<"$c"
  programs+=("$prog")
done

mkdir -p "$build"
if [[ ! -f "$build/CMakeCache.txt" ]]; then
  cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DTPCOMM_WITH_CUDA=ON \
    -DTPCOMM_BUILD_BENCH=OFF >"$build/gpu_check.configure.log" 2>&1 ||
    { echo "gpu_check: configure failed (see $build/gpu_check.configure.log)"; exit 1; }
fi
cmake --build "$build" -j"$jobs" --target tpinfo tprun tpbench "${programs[@]}" \
  >"$build/gpu_check.build.log" 2>&1 ||
  { echo "gpu_check: build failed (see $build/gpu_check.build.log)";
    tail -20 "$build/gpu_check.build.log"; exit 1; }

export TPCOMM_CUDA_LIB=libcuda.so.1
if [[ $fake -eq 1 ]]; then
  export TPCOMM_CUDA_LIB=$PWD/$build/bin/fake_cuda/libcuda.so.1
  echo "== DRY RUN over tpcomm's fake driver: not a GPU result"
fi
echo "== versions"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1 |
  sed 's/^/  gpu: /'
/usr/local/cuda/bin/nvcc --version 2>/dev/null | tail -1 | sed 's/^/  nvcc: /'
info=$("$build/bin/tpinfo" 2>&1)
sed -n '1p;/^CUDA$/,/^$/p' <<<"$info" | sed 's/^/  /'
if ! grep -q '^  tensors ' <<<"$info"; then
  echo "gpu_check: no usable CUDA driver here (see the CUDA section above)"
  exit 2
fi
if [[ $fake -eq 0 ]] && grep -q "fake driver" <<<"$info"; then
  echo "gpu_check: TPCOMM_CUDA_LIB resolves to tpcomm's fake driver, not a GPU"
  exit 2
fi

printf '\n%-14s %-6s %7s  %s\n' "check" "result" "seconds" "what"
results=()
failed=0
for c in "${checks[@]}"; do
  IFS='|' read -r name prog what <<<"$c"
  t0=$(date +%s.%N)
  log="$build/gpu_check.$name.log"
  if timeout 120 "$build/tests/$prog" >"$log" 2>&1; then
    result=PASS
  else
    result=FAIL
    failed=1
  fi
  secs=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
  skipped=$(grep -c '^\[  SKIPPED \]' "$log" || true)
  note="$what"
  [[ "$skipped" -gt 0 ]] && note="$note [$skipped fake-only test lines skipped]"
  printf '%-14s %-6s %7s  %s\n' "$name" "$result" "$secs" "$note"
  results+=("$result $name")
done

echo
for r in "${results[@]}"; do echo "$r"; done
echo "gpu_check: $(( $(date +%s) - start )) s in all; logs in $build/gpu_check.*.log"
if [[ $failed -ne 0 ]]; then
  echo "FAIL"
  for c in "${checks[@]}"; do
    IFS='|' read -r name _ _ <<<"$c"
    grep -h -A8 'Failure\|FAILED' "$build/gpu_check.$name.log" 2>/dev/null | head -30
  done
  exit 1
fi
echo "PASS"
