#!/usr/bin/env bash
# Trains bench/refactor/sweep10.yaml with one build of Saturn: the whole sweep under
# `saturn run --np 4` (OUT/run) and every job alone on one device with `saturn train`
# (OUT/single), for compare.py. Usage: bench/refactor/run.sh SATURN_EXE OUT_DIR
set -euo pipefail
saturn=$(realpath "$1")
out=$2
here=$(cd "$(dirname "$0")" && pwd)
rm -rf "$out"
mkdir -p "$out"
for _ in $(seq 1 40); do cat /usr/share/common-licenses/BSD; done >"$out/text.txt"
"$saturn" data prepare --input "$out/text.txt" --output "$out/data" >/dev/null
cp "$here/sweep10.yaml" "$out/w.yaml"
cd "$out"
# One BLAS thread per rank, as the single-device runs: the products are then the same.
export OMP_NUM_THREADS=1 SATURN_CALIBRATION_CACHE=none
"$saturn" run w.yaml --np 4 --run-dir run --quick-calibration >run.log 2>&1
for job in $(ls run/jobs); do
  "$saturn" train w.yaml --job "$job" --run-dir single --quiet >>single.log 2>&1
done
echo "trained $(ls run/jobs | wc -l) jobs under saturn run and saturn train in $out"
