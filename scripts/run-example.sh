#!/usr/bin/env bash
# README command (1): install what is missing, build, prepare the example data and run the
# example sweep on 4 local CPU ranks.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
scripts/build.sh
build="${SATURN_BUILD_DIR:-build}"
# Example text: the licence texts every Debian system ships (a few hundred KB of English).
"$build/saturn" data prepare --input /usr/share/common-licenses/* --output examples/data
# The example sweep on 4 local ranks: profiles, plan, every job trained, summary.json.
rm -rf runs/example-sweep
"$build/saturn" run examples/sweep.yaml --np 4 --run-dir runs/example-sweep
echo "[saturn] done: runs/example-sweep/summary.json, per-job metrics in runs/example-sweep/jobs/*/metrics.jsonl"
