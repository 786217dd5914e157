#!/usr/bin/env bash
# Compares tpcomm's TCPStore with PyTorch's on this machine, in the same run: bin/store_bench
# (as configured, clients of this host on the server's local socket), bin/store_bench with
# TPCOMM_STORE_LOCAL_SOCKET=0 (every client on loopback TCP, like torch), and
# the peers' torch_bench.py (store mode; python3-torch under /usr/bin/python3; in PEERS_DIR, by
# default the project's shared peers folder next to the checkout), then one table side
# by side: set+get pairs per second and barrier time for 1 and 32 clients, plus our barrier
# for 64..4096 clients.
#
#   bench/store_compare.sh [BUILD_DIR]      (default: <repo>/build)
#   REPEATS=3 bench/store_compare.sh ...    (interleaved runs: ours, ours over TCP, torch, ...)
#   TCP_TOO=0 ...                           (skip the TCP-only runs)
#
# Each cell shows the best and the median over the repeats (best = highest rate, lowest time):
# on a shared machine the best run is the one that got the cores, so compare best with best
# and median with median. Both servers run in a process of their own; clients are threads of
# one process.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(dirname "$here")
build=${1:-$root/build}
bench=$build/bin/store_bench
torch_bench=${PEERS_DIR:-$root/../shared/peers}/torch_bench.py
repeats=${REPEATS:-1}
tcp_too=${TCP_TOO:-1}

if [[ ! -x $bench ]]; then
  echo "store_compare: $bench not found; build first (cmake --build $build)" >&2
  exit 1
fi
if [[ ! -f $torch_bench ]]; then
  echo "store_compare: $torch_bench not found (set PEERS_DIR to the peers' folder)" >&2
  exit 1
fi

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

echo "# store_compare: $(date -u +%FT%TZ) on $(hostname), $(nproc) cores, load average $(cut -d' ' -f1-3 /proc/loadavg)"
for ((r = 1; r <= repeats; r++)); do
  "$bench" --benchmark_out="$tmp/ours.$r.json" --benchmark_out_format=json >"$tmp/ours.$r.txt" 2>&1 ||
    { cat "$tmp/ours.$r.txt" >&2; exit 1; }
  if [[ $tcp_too == 1 ]]; then
    TPCOMM_STORE_LOCAL_SOCKET=0 "$bench" --benchmark_filter='setget|barrier/clients:(1|32|1024)/' \
      --benchmark_out="$tmp/tcp.$r.json" --benchmark_out_format=json >"$tmp/tcp.$r.txt" 2>&1 ||
      { cat "$tmp/tcp.$r.txt" >&2; exit 1; }
  fi
  /usr/bin/python3 "$torch_bench" store --clients 1,32 >"$tmp/torch.$r.txt" 2>&1 ||
    { cat "$tmp/torch.$r.txt" >&2; exit 1; }
done
echo "# load average after: $(cut -d' ' -f1-3 /proc/loadavg)"

/usr/bin/python3 - "$tmp" "$repeats" <<'PY'
import json, os, statistics, sys

tmp, repeats = sys.argv[1], int(sys.argv[2])

def load_ours(prefix):
    out = {}  # (kind, clients) -> [values]
    for r in range(1, repeats + 1):
        path = f"{tmp}/{prefix}.{r}.json"
        if not os.path.exists(path):
            continue
        with open(path) as f:
            for b in json.load(f)["benchmarks"]:
                name = b["name"]  # setget/clients:1/iterations:1/manual_time
                kind = name.split("/")[0]
                k = int(name.split("clients:")[1].split("/")[0])
                v = b.get("pairs_per_s") if kind == "setget" else b.get("median_us")
                if v is not None:
                    out.setdefault((kind, k), []).append(float(v))
                for extra in ("cpu_us_per_pair", "server_cpu_ms_per_round", "arrival_spread_us",
                              "release_spread_us"):
                    if extra in b:
                        out.setdefault((extra, k), []).append(float(b[extra]))
    return out

ours, tcp = load_ours("ours"), load_ours("tcp")
torch = {}
for r in range(1, repeats + 1):
    with open(f"{tmp}/torch.{r}.txt") as f:
        for line in f:
            p = line.split()
            if len(p) >= 4 and p[0] == "STORE":
                torch.setdefault((p[1], int(p[2])), []).append(float(p[3]))

def stats(d, key, higher_better):
    v = d.get(key)
    if not v:
        return None
    return (max(v) if higher_better else min(v), statistics.median(v))

def fmt1(v, unit):
    if unit == "pairs":
        return f"{v:,.0f}"
    return f"{v / 1000:.2f} ms" if v >= 1000 else f"{v:.1f} us"

def fmt(s, unit):
    return "-" if s is None else f"{fmt1(s[0], unit)} / {fmt1(s[1], unit)}"

def ratio(a, b, higher_better):
    if not a or not b:
        return "-"
    r = [(x / y if higher_better else y / x) for x, y in zip(a, b)]
    return f"{r[0]:.1f}x / {r[1]:.1f}x"

rows = []
for k in (1, 32):
    rows.append((f"set+get pairs/s, {k} client{'s' if k > 1 else ''}", "pairs", ("setget", k), True))
for k in (1, 32):
    rows.append((f"barrier, {k} client{'s' if k > 1 else ''}", "us", ("barrier", k), False))
for k in (64, 256, 1024, 4096):
    if ("barrier", k) in ours:
        rows.append((f"barrier, {k} clients", "us", ("barrier", k), False))

print(f"\n| metric (best / median of {repeats}) | tpcomm | tpcomm, TCP only | torch TCPStore "
      f"| tpcomm vs torch | tpcomm TCP only vs torch |")
print("|---|---:|---:|---:|---:|---:|")
for label, unit, key, hb in rows:
    a, t, b = stats(ours, key, hb), stats(tcp, key, hb), stats(torch, key, hb)
    print(f"| {label} | {fmt(a, unit)} | {fmt(t, unit)} | {fmt(b, unit)} | {ratio(a, b, hb)} "
          f"| {ratio(t, b, hb)} |")

notes = []
for k in (1, 32):
    v = stats(ours, ("cpu_us_per_pair", k), False)
    if v is not None:
        notes.append(f"{v[1]:.1f} us CPU per pair with {k} client{'s' if k > 1 else ''}")
for key, what in ((("server_cpu_ms_per_round", 1024), "server CPU per 1024-client round"),
                  (("arrival_spread_us", 1024), "harness release of its 1024 threads"),
                  (("release_spread_us", 1024), "first to last client released")):
    v = stats(ours, key, False)
    if v is not None:
        scale = 1 if key[0] == "server_cpu_ms_per_round" else 1e-3
        notes.append(f"{what} {v[1] * scale:.1f} ms")
if notes:
    print("\ntpcomm medians (clients + server CPU, independent of machine share): " +
          "; ".join(notes))
PY
