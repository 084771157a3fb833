#!/usr/bin/env bash
# The main job: installs what is missing, builds, and trains the Fashion-MNIST CNN with 2 CPU processes
# under ddprun (Gloo), 2 epochs (the worker's default). Extra arguments go to the worker
# (e.g. --epochs 1).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
scripts/setup.sh
scripts/build.sh
exec build/bin/ddprun --nproc_per_node=2 build/bin/worker "$@"
