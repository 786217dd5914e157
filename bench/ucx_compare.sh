#!/bin/bash
# UCX transport vs ucx_perftest in one run: tpcomm point-to-point bandwidth over the ucx
# transport beside ucx_perftest tag_bw (and ucp_put_bw) over the same UCX_TLS, 1 MiB .. 64 MiB,
# for UCX's tcp and its shared memory. Prints a markdown table (bench/README.md).
# A third column (ROTATE, below) is raw UCX receiving into as many buffers as tpcomm does.
# Each size's runs alternate one by one (a tpcomm run, then the references' runs, then the
# other way round, REPS times), and the [paired] ratio is the median over all repetitions of
# each one's own ratio, so that the machine's drift (the VM's tcp phases, which last seconds,
# the minute's memory bandwidth) falls on both sides of a pair alike.
# PUT=1 adds a second table: one-sided puts, bin/put_bench (Endpoint::put with notification into
# the peer's Transport::allocate_memory region) against ucp_put_bw (into ucp_mem_map ALLOCATE
# memory), window 32, interleaved the same way.
#
#   bench/ucx_compare.sh [BUILD_DIR]            # default: build
#   ROUNDS=3 bench/ucx_compare.sh build-ucx     # 3 interleaved rounds: best and median
#   TLSES=tcp WINDOWS=1 PUT=0 VARIANTS="- UCX_MAX_RNDV_RAILS=1" bench/ucx_compare.sh build-ucx
#   REPS=1 ...                                  # one run of each side per cell and round
#   KEEP=/tmp/runs ...                          # keep every run's figure (CSV) there
#
# VARIANTS: tpcomm runs, each with its own environment (comma-separated VAR=VALUE list, "-" for
# none), interleaved in every round; one table row per variant. They set UCX variables for
# tpcomm's processes only: ucx_perftest always runs with UCX's defaults and UCX_TLS.
#
# Like with like: both sides stream with the same number of messages in flight (WINDOWS, the
# -O of ucx_perftest; its default for tag_bw is 32): `p2p_bench --stream W` keeps W isends
# in flight and the receiver W irecvs posted, posting the next as soon as the oldest completes,
# as tag_bw does (ucp_tests.cc: wait_send_window/wait_recv_window before each post). Both time
# on the sender, from a barrier to the last completion, over about 1000 messages (tag_bw: -n
# 1000 at 1 MiB after its own warm-up of up to 10000 iterations or 100 ms, the "overall"
# bandwidth; p2p_bench: 1024 messages per sample after a warm-up window). Both use page-aligned
# 4 KiB-page buffers at 1 MiB (tag_bw's come from ucp_mem_map ALLOCATE: a sysv segment over
# shm, mmap over tcp, whose context has no sysv domain; UCX's THP method declines a size it
# would have to double); from 4 MiB up tag_bw's buffers over tcp are THP-advised (UCX_ALLOC_PRIO
# tries thp before mmap), so the script gives p2p_bench --thp there too (THP_MATCH=0: never).
# Statistics: each round runs ucx_perftest and p2p_bench REPS times each (default 5; each
# p2p_bench run reports the median of its 5 samples), alternating, and takes each side's
# median: the same treatment for both (a single process pair's figure carries the processes'
# spread, which a median of several pairs filters). tpcomm waits spin 100 us, then poll on without yielding
# while UCX moves a transfer's bytes, and with sched_yield otherwise (TPCOMM_WAIT_SPIN_US,
# Transport::transferring); ucx_perftest busy-polls. One difference cannot be removed: tag_bw posts all
# its receives into ONE buffer, while tpcomm refuses overlapping pending receives, so it
# receives into W buffers (W x size of destination memory, which copies more slowly once it
# leaves the caches). W=1 is the exact match (one send and one receive buffer on both sides).
#
# PIN=1 binds the sender of both to CPU 0 and the receiver to CPU 1 (p2p_bench --pin; taskset
# for ucx_perftest: its client sends). tag_bw never writes its send buffer: never give its
# shared-memory runs mmap buffers (UCX_ALLOC_PRIO=mmap), whose reads map the zero page.
#
# SRC: what the senders read. tag_bw never writes its send buffer; over UCX's tcp that buffer is
# an mmap (4 KiB pages, THP-advised from 2 MiB), so every read of it maps the kernel's shared
# zero page, one physical page that stays in the cache: the sender's copy into the socket took
# ~40% less CPU than from a written buffer (perf, 1 MiB: 53 against 84 us per message in
# tpcomm's sender), though the receiver's copy paces the transfer and the bandwidth moved by a
# few percent at most. Over shm its sysv segment gets real pages.
#   SRC=real (default): ucx_perftest runs with an LD_PRELOAD shim (built here with cc against
#     UCX's headers) that fills every buffer ucp_mem_map ALLOCATE gives it, so both read real
#     memory, as an application's sends do. Falls back to asis, with a note, if cc fails.
#   SRC=zero: both read the zero page over tcp: p2p_bench gets --untouched-src there.
#   SRC=asis: tag_bw's buffers as ucx_perftest leaves them (its zero page against tpcomm's
#     real data).
#
# PRIO=1 (default) runs every measured process in its own session with autogroup nice -20,
# both sides alike, so that other jobs on a shared machine disturb the ratios less (needs
# root; otherwise it runs at normal priority). PRIO=0 turns that off.
set -u
BUILD=${1:-build}
ROUNDS=${ROUNDS:-1}
WINDOWS=${WINDOWS:-"1 32"}
PRIO=${PRIO:-1}
TLSES=${TLSES:-"tcp shm"}
VARIANTS=${VARIANTS:-"-"}
PUT=${PUT:-1}
# REPS: repetitions per cell and round (PT_REPS is accepted too), each one process pair of
# every contender; a run's figure depends on its processes (their connections, where
# their pages landed) as much as on the minute, so each side's per-round figure is the median
# over REPS process pairs.
REPS=${REPS:-${PT_REPS:-5}}
THP_MATCH=${THP_MATCH:-1}
PIN=${PIN:-0}
SRC=${SRC:-real}
SIZES=${SIZES:-"1048576 4194304 16777216 67108864"}
# ROTATE=1 (default): a third reference, bin/ucx_rotate (bench/ucx_rotate.cc, built where UCX
# was found): raw UCP tag streaming like tag_bw, but with the receiver cycling over W buffers, as
# p2p_bench must (two receives posted on one buffer are an error in tpcomm). The difference
# between it and tag_bw is the receive memory's footprint alone; tpcomm against it is the
# like-for-like ratio. Beside the alias rows (below) it runs with --alias, receiving into W
# views of one memory file as p2p_bench --alias-recv does.
ROTATE=${ROTATE:-1}
# ALIAS=1 (default): at a window above 1, one more tpcomm row, "alias": p2p_bench --alias-recv,
# whose W receive buffers are W views of one memory file (distinct addresses, as tpcomm requires,
# over the same physical pages), so the receive memory's cache footprint is tag_bw's one buffer.
# It is the like-for-like ratio against tag_bw; the default row is the one against ROTATE.
ALIAS=${ALIAS:-1}
# The tpcomm variants run at window $1: VARIANTS, and "alias" (see ALIAS).
variants_for() {
  echo $VARIANTS
  [ "$ALIAS" = 1 ] && [ "$1" -gt 1 ] && echo alias
}
# KEEP=DIR: copy every run's row (DIR/*.runs: tls,window,size,GB/s,variant,round.rep) there.
KEEP=${KEEP:-}
OUT=$(mktemp -d)
trap '[ -n "$KEEP" ] && mkdir -p "$KEEP" && cp "$OUT"/*.runs "$KEEP"/ 2>/dev/null; rm -rf "$OUT"' EXIT
command -v ucx_perftest >/dev/null || { echo "ucx_perftest not found (apt install ucx-utils)"; exit 1; }
# A hugetlb pool changes the comparison: UCX's allocator takes its pages first ("huge" in
# UCX_ALLOC_PRIO), so tag_bw's buffers land on them while tpcomm's do not (shm tag_bw at 4 MiB
# then moves 32-38 GB/s from the caches, against 10-12 for tpcomm and raw UCX on a Zen 5 VM).
huge=$(awk '/^HugePages_Total/ {print $2}' /proc/meminfo 2>/dev/null)
if [ -n "$huge" ] && [ "$huge" != 0 ]; then
  echo "note: a hugetlb pool is reserved (/proc/sys/vm/nr_hugepages); ucx_perftest's buffers take"
  echo "      its pages and tpcomm's do not, so the ratios compare unlike memory"
fi
PT_ENV=()
if [ "$SRC" = real ]; then
  cat >"$OUT/touch.c" <<'EOC'
#define _GNU_SOURCE
#include <dlfcn.h>
#include <string.h>
#include <ucp/api/ucp.h>
/* ucp_mem_map, then a pattern written over what UCX allocated (ucx_compare.sh SRC=real). */
ucs_status_t ucp_mem_map(ucp_context_h c, const ucp_mem_map_params_t *p, ucp_mem_h *m) {
  static ucs_status_t (*real)(ucp_context_h, const ucp_mem_map_params_t *, ucp_mem_h *);
  if (!real) real = (ucs_status_t (*)(ucp_context_h, const ucp_mem_map_params_t *,
                                      ucp_mem_h *))dlsym(RTLD_NEXT, "ucp_mem_map");
  ucs_status_t s = real(c, p, m);
  if (s == UCS_OK && (p->field_mask & UCP_MEM_MAP_PARAM_FIELD_FLAGS) &&
      (p->flags & UCP_MEM_MAP_ALLOCATE)) {
    ucp_mem_attr_t a;
    a.field_mask = UCP_MEM_ATTR_FIELD_ADDRESS | UCP_MEM_ATTR_FIELD_LENGTH;
    if (ucp_mem_query(*m, &a) == UCS_OK) memset(a.address, 0x5a, a.length);
  }
  return s;
}
EOC
  if cc -O2 -shared -fPIC -o "$OUT/touch.so" "$OUT/touch.c" -ldl -lucp 2>"$OUT/cc.log"; then
    PT_ENV=(LD_PRELOAD="$OUT/touch.so")
  else
    echo "note: cannot build the buffer-filling shim ($(head -1 "$OUT/cc.log")); SRC=asis"
    SRC=asis
  fi
fi

prio() {
  if [ "$PRIO" = 1 ]; then
    setsid -w bash -c 'echo -20 >/proc/self/autogroup 2>/dev/null; exec "$@"' _ "$@"
  else
    "$@"
  fi
}

# perftest TLS TEST SIZE ITERS WINDOW -> GB/s (1e9 B/s); server on a random high port, retried.
perftest() {
  local tries p line
  for tries in 1 2 3 4 5; do
    p=$((20000 + RANDOM % 40000))
    local cs=() cc=()
    [ "$PIN" = 1 ] && cs=(taskset -c 1) && cc=(taskset -c 0)
    UCX_TLS=$1 prio "${cs[@]}" timeout 120 env "${PT_ENV[@]}" ucx_perftest -p "$p" >/dev/null 2>&1 &
    local srv=$!
    sleep 0.5
    line=$(UCX_TLS=$1 prio "${cc[@]}" timeout 120 env "${PT_ENV[@]}" ucx_perftest 127.0.0.1 -p "$p" \
           -t "$2" -s "$3" -n "$4" -O "$5" -f 2>/dev/null | tail -1)
    wait $srv 2>/dev/null
    set -- "$1" "$2" "$3" "$4" "$5" $line
    if [ $# -eq 13 ]; then
      awk -v b="${11}" 'BEGIN{printf "%.3f\n", b*1048576/1e9}'
      return
    fi
    set -- "$1" "$2" "$3" "$4" "$5"
  done
  echo "n/a"
}

if [ "$ROTATE" = 1 ] && [ ! -x "$BUILD/bin/ucx_rotate" ]; then
  echo "note: $BUILD/bin/ucx_rotate not built (it needs UCX's headers, libucx-dev); ROTATE=0"
  ROTATE=0
fi

# One tpcomm run over UCX_TLS $1 at window $2, size $3, variant $4 -> GB/s.
tpcomm_run() {
  local tls=$1 w=$2 s=$3 v=$4 env=() flags=() extra
  if [ "$v" = alias ]; then flags=(--alias-recv); elif [ "$v" != - ]; then
    IFS=, read -r -a env <<<"$v"
  fi
  # The page kind tag_bw's buffers get (uct_mem.c: THP when rounding up to 2 MiB does
  # not double the size, and only where no sysv domain comes first, i.e. over tcp).
  extra=("${flags[@]}")
  [ "$THP_MATCH" = 1 ] && [ "$tls" = tcp ] && [ "$s" -gt 1048576 ] && extra+=(--thp)
  [ "$PIN" = 1 ] && extra+=(--pin)
  [ "$SRC" = zero ] && [ "$tls" = tcp ] && extra+=(--untouched-src)
  csv_col 4 prio env "${env[@]}" TPCOMM_UCX_TLS=$tls timeout 300 "$BUILD/bin/p2p_bench" \
    --transport ucx --min "$s" --max "$s" --stream "$w" "${extra[@]}" --csv
}
# One ucx_rotate run (one process pair, one repetition) -> GB/s; variant "alias": its W
# receive buffers are W views of one memory file, as p2p_bench --alias-recv's are.
rotate_run() {
  local tls=$1 w=$2 s=$3 n=$4 v=$5 rp=() r
  [ "$PIN" = 1 ] && rp=(--pin)
  [ "$v" = alias ] && rp+=(--alias)
  r=$(UCX_TLS=$tls prio timeout 300 "$BUILD/bin/ucx_rotate" --size "$s" --window "$w" \
      --buffers "$w" --count "$n" --reps 1 "${rp[@]}" 2>/dev/null | sed -n 's/.*median \([0-9.]*\) GB.*/\1/p')
  echo "${r:-n/a}"
}
# One put_bench run (window 32) -> GB/s.
put_tpcomm_run() {
  local tls=$1 s=$2 pp=()
  [ "$PIN" = 1 ] && pp=(--pin)
  csv_col 5 prio env TPCOMM_UCX_TLS=$tls timeout 300 "$BUILD/bin/put_bench" --transport ucx \
    --min "$s" --max "$s" --window 32 "${pp[@]}" --csv
}
# csv_col COLUMN COMMAND...: the GB/s field of a benchmark's one --csv data row.
csv_col() {
  local col=$1 v
  shift
  v=$("$@" 2>/dev/null | awk -F, -v c="$col" 'NR>1{print $c}')
  echo "${v:-n/a}"
}

# record FILE tls w s value variant round rep: one run's row in FILE.runs.
record() { echo "$2,$3,$4,$5,${6//,/+},$7.$8" >>"$OUT/$1.runs"; }

# One size's cell at window $3 over UCX_TLS $2, round $1: REPS repetitions, each one run of
# every tpcomm variant, one of tag_bw and one of ucx_rotate, back to back in an order that
# alternates by repetition (tpcomm first in odd ones), so that each repetition's runs share
# the machine's minute and their ratio is a pair.
run_cell() {
  local round=$1 tls=$2 w=$3 s=$4 n k v
  n=$((s >= 67108864 ? 64 : s >= 16777216 ? 200 : 1000))
  for k in $(seq "$REPS"); do
    local steps=(tp ref)
    [ $(((round + k) % 2)) = 1 ] || steps=(ref tp)
    for step in "${steps[@]}"; do
      if [ "$step" = tp ]; then
        for v in $(variants_for "$w"); do
          record tpcomm "$tls" "$w" "$s" "$(tpcomm_run "$tls" "$w" "$s" "$v")" "$v" "$round" "$k"
        done
      else
        record tag "$tls" "$w" "$s" "$(perftest "$tls" tag_bw "$s" "$n" "$w")" - "$round" "$k"
        if [ "$ROTATE" = 1 ]; then
          record rot "$tls" "$w" "$s" "$(rotate_run "$tls" "$w" "$s" "$n" -)" - "$round" "$k"
          [ "$ALIAS" = 1 ] && [ "$w" -gt 1 ] && record rot "$tls" "$w" "$s" \
            "$(rotate_run "$tls" "$w" "$s" "$n" alias)" alias "$round" "$k"
        fi
      fi
    done
  done
}
# One size's one-sided puts (PUT=1): tpcomm's put_bench into the peer's allocate_memory region
# against ucp_put_bw (over tcp, where UCX emulates put, few iterations), interleaved the same way.
run_put_cell() {
  local round=$1 tls=$2 s=$3 n k
  if [ "$tls" = tcp ]; then n=$((s >= 16777216 ? 4 : 40)); else
    n=$((s >= 67108864 ? 64 : s >= 16777216 ? 200 : 1000)); fi
  for k in $(seq "$REPS"); do
    local steps=(tp ref)
    [ $(((round + k) % 2)) = 1 ] || steps=(ref tp)
    for step in "${steps[@]}"; do
      if [ "$step" = tp ]; then
        record tput "$tls" 32 "$s" "$(put_tpcomm_run "$tls" "$s")" - "$round" "$k"
      else
        record put "$tls" 32 "$s" "$(perftest "$tls" ucp_put_bw "$s" "$n" 32)" - "$round" "$k"
      fi
    done
  done
}

for round in $(seq "$ROUNDS"); do
  for tls in $TLSES; do  # UCX_TLS "shm" = posix, sysv, cma (and knem/xpmem if present)
    for w in $WINDOWS; do
      for s in $SIZES; do run_cell "$round" "$tls" "$w" "$s"; done
    done
    [ "$PUT" = 1 ] || continue
    for s in $SIZES; do run_put_cell "$round" "$tls" "$s"; done
  done
done
# Each round's figure per side: the median of its REPS runs (FILE.csv, round in field 6).
for f in tpcomm tag rot tput put; do
  [ -f "$OUT/$f.runs" ] || continue
  awk -F, '$4 ~ /^[0-9.]+$/ {split($6, r, "."); k=$1","$2","$3","$5","r[1]; n[k]++; v[k, n[k]]=$4}
    END {for (k in n) {m=n[k]; for (i=1;i<=m;i++) x[i]=v[k,i]
      for (i=2;i<=m;i++) for (j=i;j>1 && x[j-1]>x[j];j--) {y=x[j]; x[j]=x[j-1]; x[j-1]=y}
      split(k, f, ","); printf "%s,%s,%s,%s,%s,%s\n", f[1], f[2], f[3], x[int((m+1)/2)], f[4], f[5]}}' \
    "$OUT/$f.runs" >"$OUT/$f.csv"
done

stat() { # file tls window size best|median [variant] -> GB/s over rounds
  local v=${6:-}
  awk -F, -v t="$2" -v w="$3" -v s="$4" -v v="${v//,/+}" \
    '$1==t && $2==w && $3==s && $4!="n/a" && (v=="" || $5==v) {print $4}' "$1" |
    sort -g | awk -v m="$5" '{v[NR]=$1} END{if (!NR) {print "n/a"; exit}
      if (m=="best") printf "%.2f", v[NR]; else printf "%.2f", (NR%2 ? v[(NR+1)/2] : (v[NR/2]+v[NR/2+1])/2)}'
}
ratio() { awk -v a="$1" -v b="$2" 'BEGIN{if (b+0>0 && a+0>0) printf "%.0f%%", 100*a/b; else print "n/a"}'; }
# paired A.runs B.runs tls window size [variant [B's variant]] -> the median over every
# repetition of every round of (A's GB/s / B's) in that repetition (field 6: round.rep)
paired() {
  [ -f "$1" ] && [ -f "$2" ] || { echo n/a; return; }
  local v=${6:-} bv=${7:--}
  awk -F, -v t="$3" -v w="$4" -v s="$5" -v v="${v//,/+}" -v bv="$bv" '
    $1==t && $2==w && $3==s && $4!="n/a" && $4+0>0 {
      if (FILENAME==ARGV[1] && (v=="" || $5==v)) a[$6]=$4
      else if (FILENAME==ARGV[2] && $5==bv) b[$6]=$4 }
    END { n=0; for (r in a) if (r in b) x[++n]=a[r]/b[r]
      if (!n) { print "n/a"; exit }
      for (i=2;i<=n;i++) for (j=i;j>1 && x[j-1]>x[j];j--) { y=x[j]; x[j]=x[j-1]; x[j-1]=y }
      printf "%.0f%%", 100*(n%2 ? x[(n+1)/2] : (x[n/2]+x[n/2+1])/2) }' "$1" "$2"
}
echo "load: $(uptime)"
echo "senders read: SRC=$SRC"
echo
echo "| UCX_TLS | window | size | tpcomm env | tpcomm ucx GB/s best (median) | tag_bw GB/s best (median) | tpcomm / tag_bw best (median) [paired] | raw UCX into tpcomm's receive memory, GB/s best (median) | tpcomm / it best (median) [paired] |"
echo "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"
for tls in $TLSES; do
  for w in $WINDOWS; do
    for s in $SIZES; do
      for v in $(variants_for "$w"); do
        ab=$(stat "$OUT/tpcomm.csv" "$tls" "$w" "$s" best "$v")
        am=$(stat "$OUT/tpcomm.csv" "$tls" "$w" "$s" median "$v")
        bb=$(stat "$OUT/tag.csv" "$tls" "$w" "$s" best); bm=$(stat "$OUT/tag.csv" "$tls" "$w" "$s" median)
        pr=$(paired "$OUT/tpcomm.runs" "$OUT/tag.runs" "$tls" "$w" "$s" "$v")
        # Raw UCX with tpcomm's receive memory: W buffers, or W views of one for "alias".
        rv=-; [ "$v" = alias ] && rv=alias
        rb=n/a; rm=n/a
        [ -f "$OUT/rot.csv" ] && rb=$(stat "$OUT/rot.csv" "$tls" "$w" "$s" best "$rv") &&
          rm=$(stat "$OUT/rot.csv" "$tls" "$w" "$s" median "$rv")
        rp=$(paired "$OUT/tpcomm.runs" "$OUT/rot.runs" "$tls" "$w" "$s" "$v" "$rv")
        echo "| $tls | $w | $((s / 1048576)) MiB | $v | $ab ($am) | $bb ($bm) | $(ratio "$ab" "$bb") ($(ratio "$am" "$bm")) [$pr] | $rb ($rm) | $(ratio "$ab" "$rb") ($(ratio "$am" "$rm")) [$rp] |"
      done
    done
  done
done
[ "$PUT" = 1 ] || exit 0
echo
echo "One-sided put, window 32: tpcomm put_bench (Endpoint::put with its notification into the peer's"
echo "Transport::allocate_memory region) against ucx_perftest ucp_put_bw (into ucp_mem_map ALLOCATE memory)."
echo
echo "| UCX_TLS | size | tpcomm put GB/s best (median) | ucp_put_bw GB/s best (median) | tpcomm / put_bw best (median) [paired] |"
echo "| --- | --- | --- | --- | --- |"
for tls in $TLSES; do
  for s in $SIZES; do
    ab=$(stat "$OUT/tput.csv" "$tls" 32 "$s" best); am=$(stat "$OUT/tput.csv" "$tls" 32 "$s" median)
    bb=$(stat "$OUT/put.csv" "$tls" 32 "$s" best); bm=$(stat "$OUT/put.csv" "$tls" 32 "$s" median)
    pr=$(paired "$OUT/tput.runs" "$OUT/put.runs" "$tls" 32 "$s")
    echo "| $tls | $((s / 1048576)) MiB | $ab ($am) | $bb ($bm) | $(ratio "$ab" "$bb") ($(ratio "$am" "$bm")) [$pr] |"
  done
done
