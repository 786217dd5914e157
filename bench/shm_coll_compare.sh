#!/usr/bin/env bash
# Intra-host collectives in one run: tpcomm's HostColl (shm_direct, bin/shm_coll_bench) next
# to Open MPI over shared memory (ob1 + vader, and UCX's intra-node transports), built from the
# peers' mpi_bench.cpp in PEERS_DIR (by default the project's shared peers folder next to the
# checkout); the peers' measurement protocol, float32, 2 ranks, runs interleaved; the table is
# made by the peers' collate.py.
#
#   bench/shm_coll_compare.sh [BUILD_DIR]              # default: build
#   SIZES=8,128K,256M REPEATS=3 RT=1 bench/shm_coll_compare.sh build-shmcoll   # see RT below
#
# RT=1 runs tpcomm-shm and mpi-shm under `chrt -f 10`: on a machine shared with other jobs
# (load above the core count) the ranks otherwise spend most of the run descheduled and all
# columns measure the scheduler. Needs root (or CAP_SYS_NICE). mpi-ucx is never run under
# chrt (its ranks hung spinning at real-time priority here, starving the machine); with
# RT=1 it is skipped unless UCX=1, and then runs plainly. Every run is killed after 180 s.
set -u
BUILD=${1:-build}
SIZES=${SIZES:-8,32,128,512,2K,8K,32K,128K,512K,2M,8M,32M,128M,256M}
REPEATS=${REPEATS:-3}
NRANKS=${NRANKS:-2}
RT=${RT:-0}
UCX=${UCX:-$((1 - RT))}
HERE=$(cd "$(dirname "$0")" && pwd)
PEERS=${PEERS_DIR:-$HERE/../../shared/peers}
OUT=$(mktemp -d /tmp/tpcomm-shm-coll-compare-XXXXXX)
trap 'rm -rf "$OUT"' EXIT
have() { command -v "$1" >/dev/null 2>&1; }
pre=()
if [[ $RT == 1 ]]; then pre=(chrt -f 10); fi
export UCX_NET_DEVICES=lo OMPI_MCA_btl_tcp_if_include=lo OMPI_MCA_oob_tcp_if_include=lo
MPIRUN=(mpirun --allow-run-as-root --oversubscribe -np "$NRANKS")

echo "META load $(cut -d' ' -f1-3 /proc/loadavg) before the run, $(nproc) cores, RT=$RT" >"$OUT/meta.txt"
mpi=0
if have mpicxx && have mpirun && [[ -f $PEERS/mpi_bench.cpp ]]; then
  mpicxx -O3 -march=native -std=c++17 -o "$OUT/mpi_bench" "$PEERS/mpi_bench.cpp" && mpi=1
fi
for i in $(seq "$REPEATS"); do
  timeout -s KILL 180 "${pre[@]}" "$BUILD/bin/shm_coll_bench" --ranks "$NRANKS" --sizes "$SIZES" \
    >"$OUT/tpcomm-shm.run$i.txt" || echo "shm_coll_bench run $i failed" >&2
  if [[ $mpi == 1 ]]; then
    timeout -s KILL 180 "${pre[@]}" "${MPIRUN[@]}" --mca pml ob1 --mca btl self,vader \
      "$OUT/mpi_bench" --peer mpi-shm --sizes "$SIZES" >"$OUT/mpi-shm.run$i.txt" 2>/dev/null ||
      echo "mpi-shm run $i failed" >&2
  fi
  if [[ $mpi == 1 && $UCX == 1 ]]; then
    timeout -s KILL 180 "${MPIRUN[@]}" --mca pml ucx --mca pml_ucx_tls any \
      --mca pml_ucx_devices any -x UCX_NET_DEVICES "$OUT/mpi_bench" --peer mpi-ucx \
      --sizes "$SIZES" >"$OUT/mpi-ucx.run$i.txt" 2>/dev/null || echo "mpi-ucx run $i failed" >&2
  fi
done
echo "META load $(cut -d' ' -f1-3 /proc/loadavg) after the run" >>"$OUT/meta.txt"
if [[ -f $PEERS/collate.py ]]; then
  python3 "$PEERS/collate.py" "$OUT" "$OUT/report.md" --order tpcomm-shm,mpi-shm,mpi-ucx >/dev/null &&
    sed -n '/^## allreduce/,/^## Who wins/p' "$OUT/report.md" | sed '$d'
else
  cat "$OUT"/*.txt
fi
cat "$OUT/meta.txt"
