#!/usr/bin/env bash
# README command (1): install what is missing, build, prepare the example data and train the
# example on this machine's CPU.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
scripts/build.sh
build="${SATURN_BUILD_DIR:-build}"
# Example text: the licence texts every Debian system ships (a few hundred KB of English).
"$build/saturn" data prepare --input /usr/share/common-licenses/* --output examples/data
"$build/saturn" train examples/single.yaml --run-dir runs/example
echo "[saturn] done: metrics in runs/example/jobs/*/metrics.jsonl"
