#!/usr/bin/env bash
# Point-to-point comparison in one run (2 ranks on this machine): tpcomm (bin/p2p_bench over
# shm and tcp) next to memcpy, iperf3, ucx_perftest (tag_lat/tag_bw over shared memory and
# tcp) and Open MPI (ob1 with vader shared memory, ob1 with tcp). Writes raw CSV and prints a
# markdown table (the one in bench/README.md).
#
#   bench/p2p_compare.sh [BUILD_DIR]           # default: build
#   MAX=64M bench/p2p_compare.sh build-link    # smaller sweep
set -u
BUILD=${1:-build}
MAX=${MAX:-256M}
HERE=$(cd "$(dirname "$0")" && pwd)
OUT=$(mktemp -d /tmp/tpcomm-p2p-compare-XXXXXX)
trap 'rm -rf "$OUT"' EXIT
have() { command -v "$1" >/dev/null 2>&1; }
port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
maxbytes=$(python3 -c "import sys; s='$MAX'; m={'K':1<<10,'M':1<<20,'G':1<<30}; print(int(s[:-1])*m[s[-1]] if s[-1] in m else int(s))")

echo "# machine: $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg)" >&2
# tpcomm
"$BUILD/bin/p2p_bench" --csv --pin --max "$MAX" >"$OUT/tpcomm.csv" || echo "p2p_bench failed" >&2

# iperf3, 1 MiB writes, loopback: with the system's congestion control (what the peers use),
# and with reno, tpcomm's choice for same-host connections (TPCOMM_SOCKET_CONGESTION=auto).
if have iperf3; then
  for cc in system reno; do
    p=$(port)
    iperf3 -s -B 127.0.0.1 -p "$p" -1 >/dev/null 2>&1 &
    sleep 0.3
    opt=(); [ "$cc" = system ] || opt=(-C "$cc")
    iperf3 -c 127.0.0.1 -p "$p" -t 3 -l 1M "${opt[@]}" -J >"$OUT/iperf3-$cc.json" 2>/dev/null
    wait
    python3 -c "import json; d=json.load(open('$OUT/iperf3-$cc.json')); print('iperf3_1M_$cc,%.2f' % (d['end']['sum_received']['bits_per_second']/8e9))" >"$OUT/iperf3-$cc.csv" 2>/dev/null
  done
fi

# ucx_perftest
ucx() { # tls test size iters
  local p; p=$(port)
  UCX_TLS=$1 timeout 60 ucx_perftest -p "$p" >/dev/null 2>&1 &
  sleep 0.4
  local line; line=$(UCX_TLS=$1 timeout 60 ucx_perftest 127.0.0.1 -p "$p" -t "$2" -s "$3" -n "$4" -f 2>/dev/null | tail -1)
  wait
  set -- $1 $2 $3 $line
  [ $# -eq 11 ] || return
  if [ "$2" = tag_lat ]; then echo "ucx-$1,$3,$5,"; else awk -v b="$9" -v t="$1" -v s="$3" 'BEGIN{printf "ucx-%s,%s,,%.3f\n", t, s, b*1048576/1e9}'; fi
}
if have ucx_perftest; then
  for tls in sm tcp; do
    ucx $tls tag_lat 8 20000
    for s in 65536 1048576 16777216; do ucx $tls tag_bw $s $((s > 1048576 ? 200 : 3000)); done
  done >"$OUT/ucx.csv"
fi

# Open MPI
if have mpicxx && have mpirun; then
  if mpicxx -O3 -o "$OUT/mpi_p2p" "$HERE/mpi_p2p.cpp" 2>"$OUT/mpi-build.log"; then
    export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_btl_tcp_if_include=lo OMPI_MCA_oob_tcp_if_include=lo
    timeout 600 mpirun -np 2 --mca pml ob1 --mca btl self,vader "$OUT/mpi_p2p" mpi-shm "$maxbytes" >"$OUT/mpi-shm.csv" 2>/dev/null
    timeout 600 mpirun -np 2 --mca pml ob1 --mca btl self,tcp "$OUT/mpi_p2p" mpi-tcp "$maxbytes" >"$OUT/mpi-tcp.csv" 2>/dev/null
  fi
fi

python3 - "$OUT" <<'PY'
import csv, glob, os, sys
out = sys.argv[1]
rows = {}  # (who, bytes) -> (lat, bw)
memcpy = {}
for f in glob.glob(os.path.join(out, "*.csv")):
    for r in csv.reader(open(f)):
        if not r or r[0] in ("transport",):
            continue
        if r[0].startswith("iperf3_1M_"):
            rows[("iperf3", r[0][len("iperf3_1M_"):])] = ("", r[1]); continue
        who = r[0] if f.endswith(("ucx.csv", "mpi-shm.csv", "mpi-tcp.csv")) else "tpcomm-" + r[0]
        b = int(r[1]); lat = r[2] if len(r) > 2 else ""; bw = r[3] if len(r) > 3 else ""
        rows[(who, b)] = (lat, bw)
        if len(r) > 4 and r[4]: memcpy[b] = r[4]
def fmt(x):
    try: return "%.2f" % float(x)
    except: return "-"
def size(b):
    for u, n in (("GiB", 1<<30), ("MiB", 1<<20), ("KiB", 1<<10)):
        if b >= n and b % n == 0: return "%d %s" % (b // n, u)
    return "%d B" % b
whos = ["tpcomm-shm", "mpi-shm", "ucx-sm", "tpcomm-tcp", "mpi-tcp", "ucx-tcp"]
sizes = sorted({b for (w, b) in rows if w in whos and isinstance(b, int)})
print("| size | " + " | ".join("%s lat us | %s GB/s" % (w, w) for w in whos) + " | memcpy GB/s |")
print("|" + " --- |" * (2 * len(whos) + 2))
for b in sizes:
    cells = []
    for w in whos:
        lat, bw = rows.get((w, b), ("", ""))
        cells += [fmt(lat), fmt(bw)]
    print("| %s | %s | %s |" % (size(b), " | ".join(cells), fmt(memcpy.get(b, ""))))
if ("iperf3", "system") in rows:
    cc = open("/proc/sys/net/ipv4/tcp_congestion_control").read().strip()
    print("\niperf3 loopback, 1 MiB writes: %s GB/s with the system's congestion control (%s, "
          "as the peers), %s GB/s with reno (tpcomm's choice on loopback)"
          % (rows[("iperf3", "system")][1], cc, rows.get(("iperf3", "reno"), ("", "-"))[1]))
PY
