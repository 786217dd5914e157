#!/usr/bin/env bash
# TPCOMM_WITH_<DEP>=ON must stop the configure step, naming the dependency, when it is missing;
# AUTO must go on without it. The dependency is hidden by pointing header searches at an empty
# root. Usage: with_on_missing.sh SOURCE_DIR BINARY_DIR
set -uo pipefail
src=$1 bin=$2
dir=$(mktemp -d "$bin/with_on_missing.XXXXXX")
trap 'rm -rf "$dir"' EXIT
# OpenSSL (required, not the dependency under test) is named by its cache variable, which
# the hidden header search would otherwise miss.
hide=(-DCMAKE_FIND_ROOT_PATH=/nonexistent -DCMAKE_FIND_ROOT_PATH_MODE_INCLUDE=ONLY
      -DOPENSSL_INCLUDE_DIR=/usr/include
      -DTPCOMM_BUILD_TESTS=OFF -DTPCOMM_BUILD_BENCH=OFF -DTPCOMM_BUILD_TOOLS=OFF)
out=$(cmake -S "$src" -B "$dir/on" -G Ninja -DTPCOMM_WITH_IBVERBS=ON -DTPCOMM_WITH_UCX=OFF \
      "${hide[@]}" 2>&1)
rc=$?
if ((rc == 0)); then
  echo "FAILED: configure succeeded with TPCOMM_WITH_IBVERBS=ON and no verbs headers"
  echo "$out"
  exit 1
fi
if ! grep -q "TPCOMM_WITH_IBVERBS=ON but it was not found" <<<"$out"; then
  echo "FAILED: the error does not name the option:"
  echo "$out"
  exit 1
fi
out=$(cmake -S "$src" -B "$dir/auto" -G Ninja -DTPCOMM_WITH_IBVERBS=AUTO -DTPCOMM_WITH_UCX=OFF \
      "${hide[@]}" 2>&1)
if (($? != 0)); then
  echo "FAILED: AUTO without the dependency must configure:"
  echo "$out"
  exit 1
fi
if ! grep -Eiq "ibverbs.*(not found|off)" <<<"$out"; then
  echo "FAILED: the configure summary does not say ibverbs is left out:"
  echo "$out"
  exit 1
fi
echo "ok: ON fails naming the option; AUTO configures and reports ibverbs as left out"
