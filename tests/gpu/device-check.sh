#!/bin/bash
# The GPU check of issue 9, in two halves.
#
#   tests/gpu/device-check.sh bundle [BUILD_DIR]
#       Here (any machine with nvcc and the project's Debian dependencies): builds the GPU tests
#       and bench_engine in BUILD_DIR (default build-gpu; sm_80 and sm_90) and gathers them with
#       the shared libraries they need into build-gpu-bundle/ (git-ignored). The GPU machine has
#       CUDA and PyTorch but not the project's dependencies (MPI, HDF5, OpenBLAS, ...), so it runs
#       what was built here. The GPU binaries use no MPI.
#
#   tests/gpu/device-check.sh run
#       On the GPU machine (device tool: command "bash tests/gpu/device-check.sh run",
#       carry ["build-gpu-bundle"], timeout_s 600): runs every GPU test with
#       SATURN_REQUIRE_GPU=1 (a skip is a failure there), then bench/engine/run_cuda.py
#       (Saturn beside PyTorch eager and torch.compile, GPT-2 124M and 350M shapes), and prints
#       one table. Logs go to $OUT when set. Meant to finish in about 5 minutes.
set -uo pipefail
cd "$(dirname "$0")/../.."
ROOT=$(pwd)
BUNDLE=$ROOT/build-gpu-bundle
mode=${1:-}

bundle() {
  local build=${1:-build-gpu}
  set -e
  export CCACHE_DIR=${CCACHE_DIR:-/work/.ccache}
  local launcher=()
  command -v ccache >/dev/null && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache
    -DCMAKE_C_COMPILER_LAUNCHER=ccache -DCMAKE_CUDA_COMPILER_LAUNCHER=ccache)
  cmake -S "$ROOT" -B "$build" -DCMAKE_BUILD_TYPE=Release -DSATURN_CUDA=ON \
    -DCMAKE_CUDA_ARCHITECTURES="80;90" "${launcher[@]}" >/dev/null
  local targets=(test_gpu_ops test_gpu_model bench_engine)
  grep -q '^SATURN_HAVE_NCCL:INTERNAL=TRUE' "$build/CMakeCache.txt" && targets+=(test_gpu_nccl)
  cmake --build "$build" -j"${JOBS:-2}" --target "${targets[@]}"
  rm -rf "$BUNDLE"
  mkdir -p "$BUNDLE/bin/real" "$BUNDLE/lib"
  for t in "${targets[@]}"; do
    local exe
    exe=$(find "$build" -type f -name "$t" -perm -u+x | head -1)
    cp "$exe" "$BUNDLE/bin/real/$t"
    # Every shared library it loads except the C runtime (the GPU machine's is newer), the
    # driver, and cuBLASLt/NCCL (hundreds of MB; the GPU machine has them, found at run time).
    ldd "$exe" | awk '/=> \//{print $3}' | while read -r lib; do
      case "$(basename "$lib")" in
        libc.so*|libm.so*|libdl.so*|libpthread.so*|librt.so*|ld-linux*|libstdc++.so*|libgcc_s.so*) ;;
        libcuda.so*|libcublasLt.so*|libcublas.so*|libnccl.so*) ;;
        *) cp -L "$lib" "$BUNDLE/lib/" ;;
      esac
    done
    # The wrapper sets the library path for this binary alone (PyTorch keeps its own).
    cat >"$BUNDLE/bin/$t" <<WRAP
#!/bin/sh
here=\$(dirname "\$0")
LD_LIBRARY_PATH="\$here/../lib\${SATURN_GPU_LIBS:+:\$SATURN_GPU_LIBS}" exec "\$here/real/$t" "\$@"
WRAP
    chmod +x "$BUNDLE/bin/$t"
  done
  git -C "$ROOT" rev-parse HEAD >"$BUNDLE/COMMIT"
  echo "bundle: $BUNDLE ($(du -sh "$BUNDLE" | cut -f1)), built from $(cat "$BUNDLE/COMMIT")"
}

# Directory holding a library, searched where CUDA and PyTorch's wheels put them.
find_lib() {
  find /usr/local/cuda/lib64 /usr/local/cuda/lib /usr/local/cuda/targets /opt /usr/lib \
    /usr/local/lib -name "$1" 2>/dev/null | head -1 | xargs -r dirname
}

run() {
  local out=${OUT:-/tmp/device-check}
  mkdir -p "$out"
  [ -x "$BUNDLE/bin/test_gpu_ops" ] || {
    echo "no bundle at $BUNDLE: run 'tests/gpu/device-check.sh bundle' first and carry build-gpu-bundle"
    exit 2
  }
  echo "# device check of $(cat "$BUNDLE/COMMIT" 2>/dev/null), $(date -u +%FT%TZ)"
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.mem --format=csv,noheader || true
  local blas nccl
  blas=$(find_lib 'libcublasLt.so.13*')
  nccl=$(find_lib 'libnccl.so.2*')
  export SATURN_GPU_LIBS="${blas}${nccl:+:$nccl}"
  echo "cuBLASLt: ${blas:-NOT FOUND}; NCCL: ${nccl:-NOT FOUND}"
  export SATURN_REQUIRE_GPU=1 OMP_NUM_THREADS=8 SATURN_SOURCE_DIR=$ROOT
  local rows=() t
  for t in test_gpu_ops test_gpu_model test_gpu_nccl; do
    if [ ! -x "$BUNDLE/bin/$t" ]; then rows+=("| $t | not built | | |"); continue; fi
    local t0=$SECONDS rc
    timeout 240 "$BUNDLE/bin/$t" >"$out/$t.log" 2>&1
    rc=$?
    local passed failed
    passed=$(grep -c '^\[       OK \]' "$out/$t.log")
    failed=$(grep -c '^\[  FAILED  \].*(' "$out/$t.log")
    rows+=("| $t | $([ $rc -eq 0 ] && echo pass || echo "FAIL (rc $rc)") | $passed ok, $failed failed | $((SECONDS - t0)) s |")
    grep -E '^\[  FAILED  \]|Failure|error' "$out/$t.log" | head -20
  done
  grep -h '\[ memory' "$out"/test_gpu_model.log 2>/dev/null
  grep -h '^step ' "$out"/test_gpu_model.log 2>/dev/null | tail -4
  local t0=$SECONDS
  PYTHONUNBUFFERED=1 timeout 360 python3 bench/engine/run_cuda.py --exe "$BUNDLE/bin/bench_engine" \
    --json "$out/bench.json" >"$out/bench.log" 2>&1
  local bench_rc=$?
  echo
  echo "| GPU test | result | cases | time |"
  echo "|---|---|---|---|"
  printf '%s\n' "${rows[@]}"
  echo "| bench (run_cuda.py) | $([ $bench_rc -eq 0 ] && echo done || echo "FAIL (rc $bench_rc)") | | $((SECONDS - t0)) s |"
  grep -v "^$" "$out/bench.log" | tail -24
}

case "$mode" in
  bundle) shift; bundle "$@" ;;
  run) run ;;
  *) echo "usage: $0 bundle [BUILD_DIR] | run"; exit 2 ;;
esac
