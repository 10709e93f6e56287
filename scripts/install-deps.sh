#!/usr/bin/env bash
# Installs the Debian 12 packages Saturn builds, runs and tests with — only those missing.
# Usage: scripts/install-deps.sh [--tests]   (--tests adds PyTorch, h5py, Slurm, Chromium: the
# test peers; Chromium renders `saturn report` headless; and a Python virtual environment with
# pinned `transformers`, `tokenizers` and `safetensors` wheels from PyPI for the Hugging Face
# tests, see test_venv below)
set -euo pipefail

packages=(build-essential cmake pkg-config git
  openmpi-bin libopenmpi-dev libhdf5-openmpi-dev hdf5-tools
  libglpk-dev coinor-libcbc-dev libopenblas-openmp-dev libopenblas0-openmp
  libyaml-cpp-dev nlohmann-json3-dev libcli11-dev libfmt-dev
  googletest libgtest-dev libbenchmark-dev)
if [[ "${1:-}" == "--tests" ]]; then
  # Test and benchmark peers only; the runtime never needs Python.
  packages+=(python3 python3-numpy python3-torch python3-h5py python3-venv python3-psutil
    python3-yaml python3-jinja2 slurmctld slurmd munge chromium)
fi

# The Hugging Face test peers (tests/python/test_hf_models.py): Debian has no `transformers`, so
# pinned wheels go into a virtual environment that also sees Debian's python3-torch
# (--system-site-packages), never into the system's or the user's site directory. The test
# finds it at the same path (SATURN_TEST_VENV, default ~/.cache/saturn/test-venv). The pins
# are the last transformers release line that runs on Debian 12's torch 1.13.
test_venv() {
  local venv="${SATURN_TEST_VENV:-$HOME/.cache/saturn/test-venv}"
  local pins=(transformers==4.44.2 tokenizers==0.19.1 safetensors==0.4.5 huggingface-hub==0.36.2)
  # peft and accelerate go in without their dependencies: they name torch, which pip does not
  # see in Debian's python3-torch and would fetch (gigabytes of CUDA wheels) over it.
  local no_deps=(peft==0.12.0 accelerate==0.33.0)
  if PYTHONNOUSERSITE=1 "$venv/bin/python" -c \
      'import transformers, safetensors, tokenizers, torch, peft
assert transformers.__version__ == "4.44.2" and peft.__version__ == "0.12.0"
assert torch.__file__.startswith("/usr/lib/python3/dist-packages/")' \
      2>/dev/null; then
    echo "[saturn] test venv $venv is ready"
    return
  fi
  echo "[saturn] making the test venv $venv (${pins[*]})"
  # Without PyPI (an offline machine) only the Hugging Face tests lose their peer: they fail
  # naming this command. Everything else installs and runs, so this is a warning, not an exit.
  if ! { /usr/bin/python3 -m venv --system-site-packages "$venv" &&
         PYTHONNOUSERSITE=1 "$venv/bin/pip" install --disable-pip-version-check -q "${pins[@]}" &&
         PYTHONNOUSERSITE=1 "$venv/bin/pip" install --disable-pip-version-check -q --no-deps \
           "${no_deps[@]}"; }; then
    echo "[saturn] WARNING: could not install ${pins[*]} ${no_deps[*]} into $venv (is PyPI reachable?);" \
         "the Hugging Face tests (hf_models) will fail until scripts/install-deps.sh --tests succeeds" >&2
  fi
}

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done
if [[ ${#missing[@]} -eq 0 ]]; then
  echo "[saturn] all required packages are installed"
  if [[ "${1:-}" == "--tests" ]]; then test_venv; fi
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
if [[ "${1:-}" == "--tests" ]]; then test_venv; fi
