#!/usr/bin/env bash
# Makes the Python virtual environment .venv at the repository root: pinned build tools
# (nanobind, scikit-build-core), numpy, pytest, and torch's CPU-usable wheel for tpcomm.torch
# and torch's own distributed tests. torch is installed without its dependency list (which
# pulls several GB of CUDA wheels): the few it needs are named here. About one minute and
# 2 GB. Then installs this repository's package into it (pip install .).
#   tools/python_env.sh            make or refresh .venv, install the package
#   tools/python_env.sh --no-pkg   only the dependencies
#   tools/python_env.sh --werror   the package built with warnings as errors (CI)
set -euo pipefail
cd "$(dirname "$0")/.."

if [[ ! -x .venv/bin/python ]]; then
  python3 -m venv .venv
fi
pip=(.venv/bin/pip install -q --disable-pip-version-check)
"${pip[@]}" --no-deps torch==2.15.0 nvidia-nccl-cu13==2.30.7 nvidia-cusparselt-cu13==0.8.1 \
  nvidia-nvshmem-cu13==3.7.2 nvidia-cufile==1.17.1.22 \
  numpy==2.4.6 sympy==1.14.0 mpmath==1.4.1 networkx==3.6.1 jinja2==3.1.6 markupsafe==3.0.4 \
  fsspec==2026.9.0 filelock==4.3.2 typing-extensions==4.16.0
"${pip[@]}" nanobind==3.1.0 scikit-build-core==1.1.2 pytest==9.2.0 pytest-timeout==2.4.0 \
  expecttest==0.3.0 hypothesis==6.170.27
if [[ "${1:-}" != "--no-pkg" ]]; then
  extra=()
  [[ "${1:-}" == "--werror" ]] && extra=(-C cmake.define.TPCOMM_WERROR=ON)
  # ccache, when installed, keeps rebuilds of the package cheap.
  if command -v ccache >/dev/null && [[ -z "${CMAKE_CXX_COMPILER_LAUNCHER:-}" ]]; then
    export CMAKE_CXX_COMPILER_LAUNCHER=ccache CMAKE_C_COMPILER_LAUNCHER=ccache
  fi
  # No build isolation: the pinned nanobind and scikit-build-core above build it, offline.
  "${pip[@]}" --no-build-isolation "${extra[@]}" .
fi
echo "python_env: $(.venv/bin/python -c 'import sys; print(sys.version.split()[0])') in .venv"
