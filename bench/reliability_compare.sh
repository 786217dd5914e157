#!/usr/bin/env bash
# Cost of the flight recorder and the collective signatures on 8-byte all_reduce (the budget:
# under 2 %): interleaved tprun + tpbench runs with both on (the default) and both off
# (TPCOMM_FLIGHT_RECORDER=0 TPCOMM_CHECK_SIGNATURE=0), over shm (shm_direct) and tcp; prints
# the median and best of the out-of-place and in-place times per configuration.
#   bench/reliability_compare.sh [BUILD_DIR] [RUNS]     (default: build, 10)
set -euo pipefail
build=${1:-build}
runs=${2:-10}
bin=$build/bin
[[ -x $bin/tpbench && -x $bin/tprun ]] || { echo "no $bin/tpbench or $bin/tprun" >&2; exit 2; }
out=$(mktemp)
trap 'rm -f "$out"' EXIT
echo "# $(date -u '+%F %T') UTC, load: $(cut -d' ' -f1-3 /proc/loadavg)"
for t in shm tcp; do
  targ=()
  [[ $t == tcp ]] && targ=(--transport tcp)
  for ((i = 1; i <= runs; i++)); do
    for cfg in on off; do
      envs=()
      [[ $cfg == off ]] && envs=(TPCOMM_FLIGHT_RECORDER=0 TPCOMM_CHECK_SIGNATURE=0)
      line=$(env "${envs[@]}" timeout 300 "$bin/tprun" --nproc-per-node 2 "$bin/tpbench" \
        --collective all_reduce -a 3 -b 8 -e 8 -n 20000 -w 2000 "${targ[@]}" 2>&1 | grep '^\[rank 0\]: *8 ' || true)
      # columns after the prefix: size count type redop root time algbw busbw wrong time ...
      read -r -a f <<<"${line#*]:}"
      [[ ${#f[@]} -ge 10 ]] && echo "$t $cfg ${f[5]} ${f[9]}" >>"$out"
    done
  done
done
echo "# load after: $(cut -d' ' -f1-3 /proc/loadavg)"
python3 - "$out" <<'EOF'
import statistics, sys
rows = {}
for line in open(sys.argv[1]):
    t, cfg, oop, inp = line.split()
    rows.setdefault((t, cfg), []).append((float(oop), float(inp)))
print("| transport | recorder + signature | runs | out of place: median (best) us | in place: median (best) us |")
print("|---|---|---|---|---|")
for (t, cfg), v in sorted(rows.items()):
    o = [x[0] for x in v]; i = [x[1] for x in v]
    print(f"| {t} | {cfg} | {len(v)} | {statistics.median(o):.2f} ({min(o):.2f}) | "
          f"{statistics.median(i):.2f} ({min(i):.2f}) |")
EOF
