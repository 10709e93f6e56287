#!/usr/bin/env bash
# Installs the Debian 12 packages Saturn builds, runs and tests with — only those missing.
# Usage: scripts/install-deps.sh [--tests]   (--tests adds PyTorch, h5py, Slurm, Chromium: the
# test peers; Chromium renders `saturn report` headless)
set -euo pipefail

packages=(build-essential cmake pkg-config git
  openmpi-bin libopenmpi-dev libhdf5-openmpi-dev hdf5-tools
  libglpk-dev coinor-libcbc-dev libopenblas-openmp-dev libopenblas0-openmp
  libyaml-cpp-dev nlohmann-json3-dev libcli11-dev libfmt-dev
  googletest libgtest-dev libbenchmark-dev)
if [[ "${1:-}" == "--tests" ]]; then
  # Test and benchmark peers only; the runtime never needs Python.
  packages+=(python3 python3-numpy python3-torch python3-h5py slurmctld slurmd munge chromium)
fi

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done
if [[ ${#missing[@]} -eq 0 ]]; then
  echo "[saturn] all required packages are installed"
  exit 0
fi

sudo=""
if [[ $(id -u) -ne 0 ]]; then
  command -v sudo >/dev/null || { echo "[saturn] need root or sudo to install: ${missing[*]}" >&2; exit 1; }
  sudo="sudo"
fi
echo "[saturn] installing: ${missing[*]}"
$sudo apt-get update -qq
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
