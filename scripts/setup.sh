#!/usr/bin/env bash
# Installs every system and Python package ddprun needs, and nothing that is already there.
# Idempotent and quiet when all is present. Needs root (or sudo) for apt-get.
set -euo pipefail

# Debian packages: build toolchain deps, LibTorch 1.13 (CPU, Gloo), Python torch 1.13 for /usr/bin/python3,
# the Fashion-MNIST data, a real Slurm + Open MPI for the cluster tests, and the benchmark tools.
DEB_PACKAGES=(
  build-essential cmake pkg-config zlib1g-dev
  libboost1.81-all-dev libcli11-dev libfmt-dev nlohmann-json3-dev doctest-dev libssl-dev
  python3-torch libtorch-dev libgloo-dev
  dataset-fashion-mnist
  slurmctld slurmd slurm-client munge openmpi-bin libopenmpi-dev
  iproute2 procps hyperfine time
  elfutils prometheus  # eu-stack for native stacks of hung workers; Prometheus + promtool for the status tests
)
# torch 2.x from PyPI for the python3 on PATH (the G2 store dialect and the CUDA LibTorch build).
TORCH2_VERSION="2.15.0"
NUMPY_VERSION="2.4.6"  # torch warns on every import without numpy
PYSPY_VERSION="0.4.3"  # Python stacks of hung workers (docs/health.md)

SUDO=""
if [[ $(id -u) -ne 0 ]]; then SUDO="sudo"; fi

missing=()
for p in "${DEB_PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done
if ((${#missing[@]})); then
  echo "setup: installing Debian packages: ${missing[*]}"
  $SUDO apt-get update -qq
  # slurmctld/slurmd postinst scripts try to start services; there is no init system here, and
  # the project starts its own daemons, so tell invoke-rc.d not to.
  DEBIAN_FRONTEND=noninteractive RUNLEVEL=1 $SUDO apt-get install -y -qq --no-install-recommends \
    "${missing[@]}" >/dev/null
fi

PY2="${DDPRUN_PYTHON2:-python3}"
if ! "$PY2" -c "import torch, sys; sys.exit(0 if torch.__version__.split('+')[0] == '$TORCH2_VERSION' else 1)" \
    >/dev/null 2>&1; then
  echo "setup: installing torch==$TORCH2_VERSION for $(command -v "$PY2") from PyPI"
  "$PY2" -m pip install -q --disable-pip-version-check --root-user-action=ignore "torch==$TORCH2_VERSION"
fi
if ! "$PY2" -c "import numpy" >/dev/null 2>&1; then
  "$PY2" -m pip install -q --disable-pip-version-check --root-user-action=ignore "numpy==$NUMPY_VERSION"
fi
if ! command -v py-spy >/dev/null 2>&1; then
  echo "setup: installing py-spy==$PYSPY_VERSION from PyPI"
  "$PY2" -m pip install -q --disable-pip-version-check --root-user-action=ignore "py-spy==$PYSPY_VERSION"
fi
