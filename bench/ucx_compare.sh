#!/bin/bash
# UCX transport vs ucx_perftest in one run (issue 9): tpcomm point-to-point bandwidth over the
# ucx transport (bin/p2p_bench --transport ucx) beside ucx_perftest tag_bw and ucp_put_bw over
# the same UCX_TLS, 1 MiB .. 64 MiB, for UCX's tcp and its shared memory. Prints a markdown
# table (the one in bench/RESULTS.md, section "UCX").
#
#   bench/ucx_compare.sh [BUILD_DIR]            # default: build
#   ROUNDS=3 bench/ucx_compare.sh build-ucx     # best of 3 interleaved rounds (loaded machine)
set -u
BUILD=${1:-build}
ROUNDS=${ROUNDS:-1}
SIZES="1048576 4194304 16777216 67108864"
OUT=$(mktemp -d)
trap 'rm -rf "$OUT"' EXIT
command -v ucx_perftest >/dev/null || { echo "ucx_perftest not found (apt install ucx-utils)"; exit 1; }

# perftest TLS TEST SIZE ITERS -> GB/s (1e9 B/s); server on a random high port, retried.
perftest() {
  local tries p line
  for tries in 1 2 3 4 5; do
    p=$((20000 + RANDOM % 40000))
    UCX_TLS=$1 timeout 120 ucx_perftest -p "$p" >/dev/null 2>&1 &
    local srv=$!
    sleep 0.5
    line=$(UCX_TLS=$1 timeout 120 ucx_perftest 127.0.0.1 -p "$p" -t "$2" -s "$3" -n "$4" -f \
           2>/dev/null | tail -1)
    wait $srv 2>/dev/null
    set -- "$1" "$2" "$3" "$4" $line
    if [ $# -eq 12 ]; then
      awk -v b="${10}" 'BEGIN{printf "%.3f\n", b*1048576/1e9}'
      return
    fi
    set -- "$1" "$2" "$3" "$4"
  done
  echo "n/a"
}

for round in $(seq "$ROUNDS"); do
  for tls in tcp shm; do  # UCX_TLS "shm" = posix, sysv, cma (and knem/xpmem if present)
    TPCOMM_UCX_TLS=$tls "$BUILD/bin/p2p_bench" --transport ucx --min 1M --max 64M --csv \
      2>/dev/null | awk -F, -v t="$tls" 'NR>1{print t","$2","$4}' >>"$OUT/tpcomm.csv"
    for s in $SIZES; do
      n=$((s >= 16777216 ? 40 : 400))
      echo "$tls,$s,$(perftest "$tls" tag_bw "$s" "$n")" >>"$OUT/tag.csv"
      # put_bw is slow where UCX emulates it (tcp: ~0.01-0.2 GB/s): few iterations.
      echo "$tls,$s,$(perftest "$tls" ucp_put_bw "$s" $((s >= 16777216 ? 4 : 40)))" >>"$OUT/put.csv"
    done
  done
done

best() { # file tls size -> best GB/s over rounds
  awk -F, -v t="$1" -v s="$2" '$1==t && $2==s && $3!="n/a" {if ($3>m) m=$3} END{printf "%.2f", m}' "$3"
}
echo "load: $(uptime)"
echo
echo "| UCX_TLS | size | tpcomm ucx GB/s | perftest tag_bw GB/s | perftest ucp_put_bw GB/s | tpcomm / tag_bw |"
echo "| --- | --- | --- | --- | --- | --- |"
for tls in tcp shm; do
  for s in $SIZES; do
    a=$(best "$tls" "$s" "$OUT/tpcomm.csv"); b=$(best "$tls" "$s" "$OUT/tag.csv")
    c=$(best "$tls" "$s" "$OUT/put.csv")
    r=$(awk -v a="$a" -v b="$b" 'BEGIN{if (b>0) printf "%.0f%%", 100*a/b; else print "n/a"}')
    echo "| $tls | $((s / 1048576)) MiB | $a | $b | $c | $r |"
  done
done
