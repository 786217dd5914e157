#!/usr/bin/env bash
# Compares tpcomm's TCPStore with PyTorch's on this machine, in the same run: bin/store_bench
# and peers/torch_bench.py (store mode; python3-torch under /usr/bin/python3), then one table
# side by side: set+get pairs per second and barrier time for 1 and 32 clients, plus our
# barrier for 64..4096 clients.
#
#   bench/store_compare.sh [BUILD_DIR]      (default: <repo>/build)
#   REPEATS=3 bench/store_compare.sh ...    (interleaved runs; the table shows medians)
#
# Both servers run in a process of their own; clients are threads of one process.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(dirname "$here")
build=${1:-$root/build}
bench=$build/bin/store_bench
torch_bench=$root/../shared/peers/torch_bench.py
repeats=${REPEATS:-1}

if [[ ! -x $bench ]]; then
  echo "store_compare: $bench not found; build first (cmake --build $build)" >&2
  exit 1
fi
if [[ ! -f $torch_bench ]]; then
  echo "store_compare: $torch_bench not found (expected the shared peers folder next to the repo)" >&2
  exit 1
fi

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

echo "# store_compare: $(date -u +%FT%TZ) on $(hostname), $(nproc) cores, load average $(cut -d' ' -f1-3 /proc/loadavg)"
for ((r = 1; r <= repeats; r++)); do
  "$bench" --benchmark_out="$tmp/ours.$r.json" --benchmark_out_format=json >"$tmp/ours.$r.txt" 2>&1 ||
    { cat "$tmp/ours.$r.txt" >&2; exit 1; }
  /usr/bin/python3 "$torch_bench" store --clients 1,32 >"$tmp/torch.$r.txt" 2>&1 ||
    { cat "$tmp/torch.$r.txt" >&2; exit 1; }
done
echo "# load average after: $(cut -d' ' -f1-3 /proc/loadavg)"

/usr/bin/python3 - "$tmp" "$repeats" <<'PY'
import json, statistics, sys

tmp, repeats = sys.argv[1], int(sys.argv[2])
ours = {}   # (kind, clients) -> [values]
torch = {}
for r in range(1, repeats + 1):
    with open(f"{tmp}/ours.{r}.json") as f:
        for b in json.load(f)["benchmarks"]:
            name = b["name"]  # setget/clients:1/iterations:1/manual_time
            kind = name.split("/")[0]
            k = int(name.split("clients:")[1].split("/")[0])
            v = b.get("pairs_per_s") if kind == "setget" else b.get("median_us")
            if v is not None:
                ours.setdefault((kind, k), []).append(float(v))
            for extra in ("cpu_us_per_pair", "server_cpu_ms_per_round"):
                if extra in b:
                    ours.setdefault((extra, k), []).append(float(b[extra]))
    with open(f"{tmp}/torch.{r}.txt") as f:
        for line in f:
            p = line.split()
            if len(p) >= 4 and p[0] == "STORE":
                torch.setdefault((p[1], int(p[2])), []).append(float(p[3]))

def med(d, key):
    v = d.get(key)
    return statistics.median(v) if v else None

def fmt(v, unit):
    if v is None:
        return "-"
    if unit == "pairs":
        return f"{v:,.0f}"
    return f"{v / 1000:.2f} ms" if v >= 1000 else f"{v:.1f} us"

rows = []
for k in (1, 32):
    rows.append((f"set+get pairs/s, {k} client{'s' if k > 1 else ''}", "pairs",
                 med(ours, ("setget", k)), med(torch, ("setget", k)), True))
for k in (1, 32):
    rows.append((f"barrier, {k} client{'s' if k > 1 else ''} (median)", "us",
                 med(ours, ("barrier", k)), med(torch, ("barrier", k)), False))
for k in (64, 256, 1024, 4096):
    if ("barrier", k) in ours:
        rows.append((f"barrier, {k} clients (median)", "us", med(ours, ("barrier", k)), None, False))

print(f"\n| metric ({repeats} run{'s' if repeats > 1 else ''}, median) | tpcomm | torch TCPStore | tpcomm vs torch |")
print("|---|---:|---:|---:|")
for label, unit, a, b, higher_better in rows:
    ratio = "-"
    if a and b:
        ratio = f"{a / b:.1f}x" if higher_better else f"{b / a:.1f}x faster"
    print(f"| {label} | {fmt(a, unit)} | {fmt(b, unit)} | {ratio} |")

notes = []
for k in (1, 32):
    v = med(ours, ("cpu_us_per_pair", k))
    if v is not None:
        notes.append(f"{v:.1f} us CPU per pair with {k} client{'s' if k > 1 else ''}")
v = med(ours, ("server_cpu_ms_per_round", 1024))
if v is not None:
    notes.append(f"server {v:.1f} ms CPU per 1024-client barrier round")
if notes:
    print("\ntpcomm CPU cost (clients + server, independent of machine share): " + "; ".join(notes))
PY
