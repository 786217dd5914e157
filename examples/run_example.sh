#!/usr/bin/env bash
# Runs one example under tprun and checks it: exit status 0 and every expected line (extended
# regular expressions) present in its output. Usage: run_example.sh TPRUN NPROC BINARY REGEX...
set -uo pipefail
tprun=$1 nproc=$2 bin=$3
shift 3
out=$(timeout 100 "$tprun" --standalone --nproc-per-node "$nproc" "$bin" 2>&1)
rc=$?
echo "$out"
if ((rc != 0)); then
  echo "FAILED: the job exited with status $rc" >&2
  exit 1
fi
for want in "$@"; do
  if ! grep -Eq -- "$want" <<<"$out"; then
    echo "FAILED: no line matches '$want'" >&2
    exit 1
  fi
done
echo "ok: $(basename "$bin") printed all $# expected lines"
