#!/usr/bin/env bash
# tpcomm beside the peers in one run: tpbench under tprun (2 ranks, float32) over shm and over
# tcp, next to Open MPI (shared memory, tcp, UCX) and Gloo (tcp) built from the peers'
# benchmark programs in PEERS_DIR (mpi_bench.cpp, gloo_bench.cpp, launch_gloo.sh, collate.py;
# by default the project's shared peers folder next to the checkout), all following the
# peers' measurement protocol; runs of the columns are interleaved, and collate.py prints one
# table per operation (allreduce, broadcast, allgather) with tpcomm as new columns.
#
#   bench/compare.sh [BUILD_DIR]                       # default: build
#   SIZES=8,128K,256M REPEATS=3 bench/compare.sh build
#   PLOT=sweep.png bench/compare.sh build              # picture: default compare.png, PLOT= none
#
# tpcomm's columns come from `tpbench --csv` (nccl-tests busbw) with the same buffers as the
# peers' calls: all_reduce and all_gather out of place (MPI_Allreduce and MPI_Allgather take a
# send and a receive buffer, as gloo's do), broadcast in place (MPI_Bcast and gloo::broadcast
# have one buffer, the root's being the source; tpbench's out-of-place broadcast adds a copy at
# the root that no peer makes). The runs use the peers' schedule (warm-up, median of timed
# samples); each run is killed after 300 s. Peers that cannot be built here are left out with a
# note. Beside the table, tools/tpplot draws busbw and time against size for every column into
# $PLOT (the median of the repeats per size).
set -u
BUILD=${1:-build}
SIZES=${SIZES:-8,128,2K,32K,128K,512K,2M,8M,32M,256M}
REPEATS=${REPEATS:-3}
OPS=${OPS:-allreduce,broadcast,allgather}
PLOT=${PLOT-compare.png}
# mpirun binds each of its 2 ranks to a core by default; tprun does when asked. BIND= (empty)
# leaves tpcomm's ranks to the scheduler, as torchrun does.
BIND=${BIND---bind-to core}
HERE=$(cd "$(dirname "$0")" && pwd)
PEERS=${PEERS_DIR:-$HERE/../../shared/peers}
OUT=$(mktemp -d /tmp/tpcomm-compare-XXXXXX)
trap 'rm -rf "$OUT"' EXIT
have() { command -v "$1" >/dev/null 2>&1; }
export UCX_NET_DEVICES=lo OMPI_MCA_btl_tcp_if_include=lo OMPI_MCA_oob_tcp_if_include=lo
export GLOO_SOCKET_IFNAME=lo
MPIRUN=(mpirun --allow-run-as-root --oversubscribe -np 2)

bytes() {  # 8 -> 8, 128K -> 131072, 256M -> 268435456
  local s=$1
  case $s in
    *K) echo $((${s%K} << 10)) ;; *M) echo $((${s%M} << 20)) ;; *G) echo $((${s%G} << 30)) ;;
    *) echo "$s" ;;
  esac
}

# The peers' schedule (peers::schedule_for in $PEERS/bench_common.h) as tpbench flags:
# warm-up calls, timed samples (a barrier, then a batch of calls) and the batch; the median
# sample is reported, as for every peer.
schedule() {  # bytes -> "-w W --samples S -n B"
  local b=$1
  if ((b <= 64 << 10)); then echo "-w 10 --samples 15 -n 20"
  elif ((b <= 2 << 20)); then echo "-w 5 --samples 11 -n 5"
  elif ((b <= 32 << 20)); then echo "-w 2 --samples 9 -n 1"
  elif ((b <= 256 << 20)); then echo "-w 1 --samples 5 -n 1"
  else echo "-w 1 --samples 3 -n 1"; fi
}

# One tpbench sweep per op and size list, printed as the peers' "PEER OP BYTES TIME ALGBW BUSBW".
tpcomm_run() {  # transport peer-name
  local t=$1 name=$2 op s
  for op in ${OPS//,/ }; do
    for s in ${SIZES//,/ }; do
      s=$(bytes "$s")
      timeout -s KILL 300 "$BUILD/bin/tprun" --standalone --nproc-per-node 2 $BIND \
        "$BUILD/bin/tpbench" --transport "$t" --collective "$op" -a 3 -b "$s" -e "$s" $(schedule "$s") --csv 2>/dev/null |
        sed 's/^\[rank 0\]: //' | awk -F, -v peer="$name" \
          '$1 != "op" && NF > 10 {
             c = ($1 == "broadcast") ? 12 : 8   # in place where the peers call is (MPI_Bcast)
             printf "%s %s %s %s %s %s\n", peer, $1, $2, $c, $(c + 1), $(c + 2) }'
    done
  done
}

echo "META load $(cut -d' ' -f1-3 /proc/loadavg) before the run, $(nproc) cores" >"$OUT/meta.txt"
mpi=0 gloo=0
if have mpicxx && have mpirun && [[ -f $PEERS/mpi_bench.cpp ]]; then
  mpicxx -O3 -march=native -std=c++17 -o "$OUT/mpi_bench" "$PEERS/mpi_bench.cpp" && mpi=1
fi
if [[ -f $PEERS/gloo_bench.cpp ]] &&
   g++ -O3 -march=native -std=c++17 -o "$OUT/gloo_bench" "$PEERS/gloo_bench.cpp" -lgloo -lpthread \
     2>"$OUT/gloo-build.log"; then
  gloo=1
fi
((mpi)) || echo "META Open MPI left out (mpicxx/mpirun or mpi_bench.cpp missing)" >>"$OUT/meta.txt"
((gloo)) || echo "META Gloo left out (libgloo-dev or gloo_bench.cpp missing)" >>"$OUT/meta.txt"

for i in $(seq "$REPEATS"); do
  tpcomm_run shm tpcomm-shm >"$OUT/tpcomm-shm.run$i.txt"
  tpcomm_run tcp tpcomm-tcp >"$OUT/tpcomm-tcp.run$i.txt"
  if ((mpi)); then
    timeout -s KILL 300 "${MPIRUN[@]}" --mca pml ob1 --mca btl self,vader "$OUT/mpi_bench" \
      --peer mpi-shm --sizes "$SIZES" --ops "$OPS" >"$OUT/mpi-shm.run$i.txt" 2>/dev/null
    timeout -s KILL 300 "${MPIRUN[@]}" --mca pml ob1 --mca btl self,tcp "$OUT/mpi_bench" \
      --peer mpi-tcp --sizes "$SIZES" --ops "$OPS" >"$OUT/mpi-tcp.run$i.txt" 2>/dev/null
    timeout -s KILL 300 "${MPIRUN[@]}" --mca pml ucx -x UCX_NET_DEVICES "$OUT/mpi_bench" \
      --peer mpi-ucx --sizes "$SIZES" --ops "$OPS" >"$OUT/mpi-ucx.run$i.txt" 2>/dev/null
  fi
  if ((gloo)); then
    GLOO_BENCH=$OUT/gloo_bench timeout -s KILL 300 bash "$PEERS/launch_gloo.sh" 2 --peer gloo-tcp \
      --sizes "$SIZES" --ops "$OPS" >"$OUT/gloo-tcp.run$i.txt" 2>/dev/null
  fi
done
echo "META load $(cut -d' ' -f1-3 /proc/loadavg) after the run" >>"$OUT/meta.txt"
order=tpcomm-shm,mpi-shm,mpi-ucx,tpcomm-tcp,mpi-tcp,gloo-tcp
if [[ -f $PEERS/collate.py ]] &&
   python3 "$PEERS/collate.py" "$OUT" "$OUT/report.md" --order "$order" >/dev/null 2>&1; then
  sed -n '/^## \(allreduce\|broadcast\|allgather\)$/,/^## Who wins/p' "$OUT/report.md" | sed '$d'
else
  cat "$OUT"/*.txt
fi
if [[ -n $PLOT ]]; then
  if "$HERE/../tools/tpplot" -o "$PLOT" --title "tpcomm beside its peers, 2 ranks on $(hostname)" \
       "$OUT"/*.run*.txt >/dev/null 2>"$OUT/tpplot.err"; then
    echo "META plot (busbw and time against size): $PLOT" >>"$OUT/meta.txt"
  else
    echo "META no plot: $(tail -1 "$OUT/tpplot.err")" >>"$OUT/meta.txt"
  fi
fi
cat "$OUT/meta.txt"
