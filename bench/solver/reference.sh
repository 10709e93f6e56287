#!/usr/bin/env bash
# Saturn against an exact reference (OR-Tools CP-SAT) on generated one- and two-node instances
# of 12-24 jobs. Benchmark only: OR-Tools is never a dependency of Saturn.
#
#   bench/solver/reference.sh [BUILD_DIR] [OUT_DIR]
#     env: CPSAT_LIMIT (default 120: CP-SAT's deterministic time, its own work measure, about
#          seconds of one core; a wall-clock limit of 900 s stays as a safety net), so that the
#          reference does not weaken when the machine is loaded; CPSAT_WORKERS (default 1);
#          LIMITS (Saturn's time limits in seconds, default 10); PYTHON (an interpreter that can
#          import ortools; without one, OR-Tools is installed into BUILD_DIR/reference-venv).
# CP-SAT results are kept in OUT_DIR (NAME.cpsat.json, with wall, CPU and deterministic time)
# and reused; delete them to solve again.
set -euo pipefail
build=${1:-build}
out=${2:-$build/reference}
here=$(cd "$(dirname "$0")" && pwd)
python=${PYTHON:-python3}
if ! "$python" -c "import ortools" 2>/dev/null; then
  # Never into the user's site-packages (pip --user): packages there shadow the system's for
  # every Python program of that user (a user-site numpy broke Debian's h5py and torch). A venv
  # in the build directory holds OR-Tools for this benchmark alone.
  venv=$build/reference-venv
  if ! "$venv/bin/python" -c "import ortools" 2>/dev/null; then
    echo "[reference] OR-Tools is not importable by $python; installing it into $venv"
    python3 -m venv "$venv"
    "$venv/bin/python" -m pip install --quiet ortools
  fi
  python=$venv/bin/python
fi
"$build/bench/solver/bench_solver" --write-instances "$out"
for f in "$out"/*.json; do
  case $f in *.cpsat.json) continue ;; esac
  name=$(basename "$f" .json)
  [[ -e "$out/$name.cpsat.json" ]] && continue
  "$python" "$here/cpsat_reference.py" "$out" --only "$name" --time-limit 900 \
    --deterministic "${CPSAT_LIMIT:-120}" --workers "${CPSAT_WORKERS:-1}"
done
"$build/bench/solver/bench_solver" --reference "$out" --limits "${LIMITS:-10}"
