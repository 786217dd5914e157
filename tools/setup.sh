#!/usr/bin/env bash
# Installs the Debian 12 packages tpcomm needs to build and test (run as root).
#   tools/setup.sh           build + test dependencies
#   tools/setup.sh --peers   also what bench/compare.sh needs to measure the peers
#                            (torch, Gloo, Open MPI, iperf3, hyperfine)
# The CUDA toolkit and NCCL are used from /usr/local/cuda when present; nothing else is
# installed by hand.
set -euo pipefail

pkgs=(cmake ninja-build g++ clang pkg-config make
      libhwloc-dev hwloc nlohmann-json3-dev libssl-dev graphviz python3-matplotlib
      libibverbs-dev librdmacm-dev ibverbs-providers rdma-core
      libucx-dev ucx-utils
      libgtest-dev libgmock-dev googletest libbenchmark-dev libcli11-dev
      iproute2 procps python3
      python3-dev python3-venv)
if [[ "${1:-}" == "--peers" ]]; then
  pkgs+=(python3-torch libgloo-dev openmpi-bin libopenmpi-dev iperf3 hyperfine)
fi

missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]} == 0)); then
  echo "setup: all ${#pkgs[@]} packages present"
  exit 0
fi
if [[ $(id -u) -ne 0 ]]; then
  echo "setup: missing packages: ${missing[*]}; run as root (or: sudo $0 $*)" >&2
  exit 1
fi
echo "setup: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
echo "setup: done"
