#!/usr/bin/env bash
# Installs the build tree into a temporary prefix and builds tests/consumer/main.cc with nothing
# but `pkg-config --cflags --libs tpcomm`, then runs it.
# Usage: pkgconfig_run.sh BUILD_DIR CONSUMER_SRC VERSION
set -euo pipefail
build=$1
src=$2
version=$3
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cmake --install "$build" --prefix "$tmp/prefix" >/dev/null
pc=$(find "$tmp/prefix" -name tpcomm.pc -path '*/pkgconfig/*')
[[ -n $pc ]] || { echo "tpcomm.pc was not installed under $tmp/prefix" >&2; exit 1; }
export PKG_CONFIG_PATH=$(dirname "$pc")
got=$(pkg-config --modversion tpcomm)
[[ $got == "$version" ]] || { echo "pkg-config says tpcomm $got, expected $version" >&2; exit 1; }
read -r -a flags <<<"$(pkg-config --cflags --libs tpcomm)"
echo "pkg-config --cflags --libs tpcomm: ${flags[*]}"
"${CXX:-c++}" -std=c++20 -o "$tmp/consumer" "$src/main.cc" "${flags[@]}"
LD_LIBRARY_PATH="$(pkg-config --variable=libdir tpcomm):${LD_LIBRARY_PATH:-}" "$tmp/consumer"
