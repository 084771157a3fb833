#!/usr/bin/env bash
# Installs the system and Python packages ddprun needs, and nothing that is already there.
# Idempotent and quiet when all is present. Needs root (or sudo) for apt-get.
#   scripts/setup.sh --minimal   what the main job needs: build ddprun and the worker, train
#                                (scripts/demo.sh)
#   scripts/setup.sh             everything: the minimal set plus what the tests, the packaging
#                                checks and the benchmarks use (scripts/test.sh)
set -euo pipefail

MODE=full
case "${1:-}" in
  --minimal) MODE=minimal ;;
  "") ;;
  *) echo "usage: scripts/setup.sh [--minimal]" >&2; exit 2 ;;
esac

# Build tools (Ninja: the scripts' generator; docs/packaging.md#the-first-run), the header-only
# libraries (Boost.Asio/Beast/UUID, CLI11, fmt, nlohmann/json), OpenSSL (the store's token
# HMAC, TLS to etcd), Debian's LibTorch 1.13 (CPU, Gloo) and the Fashion-MNIST data.
MINIMAL_DEB_PACKAGES=(
  build-essential cmake ninja-build pkg-config zlib1g-dev
  ccache  # every build goes through it: a machine that keeps ~/.cache/ccache rebuilds in seconds
  libboost1.81-dev libcli11-dev libfmt-dev nlohmann-json3-dev libssl-dev
  libtorch-dev libgloo-dev
  dataset-fashion-mnist
)
# The tests: doctest, Python torch 1.13 for /usr/bin/python3, a real Slurm + Open MPI for the
# cluster tests, network namespaces; man pages and packaging checks (help2man, man-db, dpkg-dev);
# benchmark tools.
FULL_DEB_PACKAGES=(
  doctest-dev python3-torch
  slurmctld slurmd slurm-client munge openmpi-bin libopenmpi-dev
  iproute2 procps
  help2man man-db dpkg-dev
  hyperfine time
  jq  # the pipelines test consumes `ddprun --events -` with jq
  elfutils prometheus  # eu-stack for native stacks of hung workers; Prometheus + promtool for the status tests
  clang-format clang-tidy  # scripts/lint.sh, which scripts/test.sh runs (docs/testing.md#style-checks)
  etcd-server etcd-client  # --rdzv_backend etcd: the tests start real etcd members on loopback
  openssl  # the etcd TLS test makes its CA and certificates with the openssl command
  chromium tmux  # the dashboard in a real headless browser, `ddprun top` in a real terminal
  debootstrap qemu-user libc6-arm64-cross zstd  # the portable artifacts' checks: a Debian 11 chroot, aarch64 under qemu
)
# torch 2.x from PyPI for the python3 on PATH (the G2 store dialect and the CUDA LibTorch build),
# and the wheel's build backend (the packaging test builds the wheel without build isolation).
TORCH2_VERSION="2.15.0"
NUMPY_VERSION="2.4.6"  # torch warns on every import without numpy
SCIKIT_BUILD_CORE_VERSION="1.1.2"  # keep equal to pyproject.toml's build-system.requires
PYSPY_VERSION="0.4.3"  # Python stacks of hung workers (docs/health.md)
PYTHON_ETCD_VERSION="0.4.5"  # torchrun's etcd-v2 backend, for the re-form bench beside ddprun on etcd

DEB_PACKAGES=("${MINIMAL_DEB_PACKAGES[@]}")
if [[ $MODE == full ]]; then DEB_PACKAGES+=("${FULL_DEB_PACKAGES[@]}"); fi

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

if [[ $MODE == minimal ]]; then exit 0; fi

PY2="${DDPRUN_PYTHON2:-python3}"
pip_install() {
  "$PY2" -m pip install -q --disable-pip-version-check --root-user-action=ignore "$@"
}
if ! "$PY2" -c "import torch, sys; sys.exit(0 if torch.__version__.split('+')[0] == '$TORCH2_VERSION' else 1)" \
    >/dev/null 2>&1; then
  echo "setup: installing torch==$TORCH2_VERSION for $(command -v "$PY2") from PyPI"
  pip_install "torch==$TORCH2_VERSION"
fi
if ! "$PY2" -c "import numpy" >/dev/null 2>&1; then
  pip_install "numpy==$NUMPY_VERSION"
fi
if ! "$PY2" -c "import scikit_build_core, sys; sys.exit(scikit_build_core.__version__ != '$SCIKIT_BUILD_CORE_VERSION')" \
    >/dev/null 2>&1; then
  echo "setup: installing scikit-build-core==$SCIKIT_BUILD_CORE_VERSION for $(command -v "$PY2") from PyPI"
  pip_install "scikit-build-core==$SCIKIT_BUILD_CORE_VERSION"
fi
if ! "$PY2" -c "import etcd" >/dev/null 2>&1; then
  echo "setup: installing python-etcd==$PYTHON_ETCD_VERSION for $(command -v "$PY2") from PyPI"
  pip_install "python-etcd==$PYTHON_ETCD_VERSION"
fi
if ! command -v py-spy >/dev/null 2>&1; then
  echo "setup: installing py-spy==$PYSPY_VERSION from PyPI"
  pip_install "py-spy==$PYSPY_VERSION"
fi
