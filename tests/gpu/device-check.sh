#!/bin/bash
# The GPU check (issues 9 and 17), in two halves.
#
#   tests/gpu/device-check.sh bundle [BUILD_DIR]
#       Here (any machine with nvcc and the project's Debian dependencies): builds the GPU tests
#       bench_engine and saturn in BUILD_DIR (default build-gpu; sm_80 and sm_90) and gathers them
#       with the shared libraries they need into build-gpu-bundle/ (git-ignored). The GPU machine
#       has CUDA and PyTorch but not the project's dependencies (MPI, HDF5, GLPK, OpenBLAS, ...),
#       so it runs what was built here; Open MPI's runtime (mpirun, its plugins and help files,
#       PMIx, hwloc, libevent: the files of the installed Debian packages) travels too, relocated
#       with OPAL_PREFIX, for the sweep's `saturn run --np 4`. Then packs it (below).
#
#   tests/gpu/device-check.sh pack | unpack
#       The bundle (over 100 MB) travels packed: build-gpu-bundle.tar.xz (git-ignored, ~25 MB).
#       `pack` writes it and fails (exit 2, with the sizes) when it and the working tree the device
#       tool sends with it would exceed the tool's 64 MiB; `unpack` restores build-gpu-bundle/.
#       `bundle` packs; `run` unpacks when it finds only the packed file.
#
#   tests/gpu/device-check.sh run
#       On the GPU machine (device tool: command "bash tests/gpu/device-check.sh run",
#       carry ["build-gpu-bundle.tar.xz"], timeout_s 600): runs every GPU test with
#       SATURN_REQUIRE_GPU=1 (a skip is a failure there); then tests/gpu/device_check_sweep.py:
#       `saturn run --device cuda --np 4 --oversubscribe-devices` of a 6-job sweep of
#       GPT-2-124M-class models (4 ranks share the one GPU; jobs whose ranks share a GPU use the
#       staged MPI data communicator, since NCCL refuses two ranks of a communicator on one GPU),
#       with tokens/s and peak memory per job and strategy; then bench/engine/run_cuda.py (Saturn
#       beside PyTorch eager and torch.compile, GPT-2 124M and 350M shapes). Writes one report,
#       $OUT/device-check-report.md (logs beside it), and prints it. Before the sweep: ldd of
#       the binaries, compute-sanitizer (racecheck, synccheck, memcheck, initcheck) on samples
#       of the op tests and the linear tests under CUBLASLT_LOG_LEVEL=2 (sanitize_rows).
#       Typically under 8 minutes; every step has its own bound.
set -uo pipefail
cd "$(dirname "$0")/../.."
ROOT=$(pwd)
# The overrides are for tests/gpu/test_device_check_pack.sh (a stand-in bundle).
BUNDLE=${SATURN_BUNDLE_DIR:-$ROOT/build-gpu-bundle}
PACKED=${SATURN_BUNDLE_PACKED:-$ROOT/build-gpu-bundle.tar.xz}
# What the device tool sends at most: the working tree and the carried paths together.
DEVICE_TOOL_LIMIT=${SATURN_DEVICE_TOOL_LIMIT:-$((64 * 1024 * 1024))}
mode=${1:-}

mib() { awk -v b="$1" 'BEGIN { printf "%.1f MiB", b / 1048576 }'; }

# build-gpu-bundle/ -> build-gpu-bundle.tar.xz, checked against the device tool's limit.
pack() {
  [ -x "$BUNDLE/bin/test_gpu_ops" ] || {
    echo "pack: no bundle at $BUNDLE (run 'tests/gpu/device-check.sh bundle')"
    return 2
  }
  tar -C "$(dirname "$BUNDLE")" -cf - "$(basename "$BUNDLE")" | xz -T2 -6 >"$PACKED.tmp" &&
    mv "$PACKED.tmp" "$PACKED" || {
    rm -f "$PACKED.tmp"
    echo "pack: could not write $PACKED"
    return 2
  }
  local packed tree total raw
  packed=$(stat -c %s "$PACKED")
  raw=$(du -sb "$BUNDLE" | cut -f1)
  # The files the device tool sends besides: tracked, and untracked but not ignored.
  tree=$(cd "$ROOT" && git ls-files -co --exclude-standard -z | du --files0-from=- -cb 2>/dev/null |
    tail -1 | cut -f1)
  total=$((packed + tree))
  echo "pack: $PACKED $(mib "$packed") (unpacked $(mib "$raw")) + working tree $(mib "$tree") = $(mib "$total") of the device tool's $(mib "$DEVICE_TOOL_LIMIT")"
  if [ "$total" -gt "$DEVICE_TOOL_LIMIT" ]; then
    echo "pack: too large to send: $total bytes > $DEVICE_TOOL_LIMIT (leave bench or test binaries out, or strip them)"
    rm -f "$PACKED"
    return 2
  fi
}

# build-gpu-bundle.tar.xz -> build-gpu-bundle/ (replacing what was there).
unpack() {
  [ -f "$PACKED" ] || {
    echo "unpack: no $PACKED"
    return 2
  }
  rm -rf "$BUNDLE"
  mkdir -p "$(dirname "$BUNDLE")"
  xz -dc "$PACKED" | tar -C "$(dirname "$BUNDLE")" -xf - || {
    echo "unpack: $PACKED is damaged"
    return 2
  }
  [ -x "$BUNDLE/bin/test_gpu_ops" ] || {
    echo "unpack: $PACKED holds no bin/test_gpu_ops under $(basename "$BUNDLE")/"
    return 2
  }
  echo "unpack: $BUNDLE ($(du -sh "$BUNDLE" | cut -f1)) from $PACKED"
}

bundle() {
  local build=${1:-build-gpu}
  set -e
  export CCACHE_DIR=${CCACHE_DIR:-/work/.ccache}
  local launcher=()
  command -v ccache >/dev/null && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache
    -DCMAKE_C_COMPILER_LAUNCHER=ccache -DCMAKE_CUDA_COMPILER_LAUNCHER=ccache)
  cmake -S "$ROOT" -B "$build" -DCMAKE_BUILD_TYPE=Release -DSATURN_CUDA=ON \
    -DCMAKE_CUDA_ARCHITECTURES="80;90" "${launcher[@]}" >/dev/null
  local targets=(test_gpu_ops test_gpu_model bench_engine saturn)
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
LD_LIBRARY_PATH="\$here/../lib\${SATURN_GPU_LIBS:+:\$SATURN_GPU_LIBS}\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH}" exec "\$here/real/$t" "\$@"
WRAP
    chmod +x "$BUNDLE/bin/$t"
  done
  bundle_mpi
  git -C "$ROOT" rev-parse HEAD >"$BUNDLE/COMMIT"
  echo "bundle: $BUNDLE ($(du -sh "$BUNDLE" | cut -f1)), built from $(cat "$BUNDLE/COMMIT")"
  pack
}

# Open MPI's runtime as the Debian packages installed here hold it, under $BUNDLE/mpi (the GPU
# machine has no MPI). Only regular files under /usr and /etc; documentation is left out.
bundle_mpi() {
  local pkgs=(openmpi-bin libopenmpi3 openmpi-common libpmix2 libhwloc15 libevent-core-2.1-7
    libevent-pthreads-2.1-7)
  mkdir -p "$BUNDLE/mpi"
  dpkg -L "${pkgs[@]}" | grep -E '^/(usr|etc)/' | grep -v -E '^/usr/share/(doc|man|lintian)/' |
    while read -r f; do
      if [ -f "$f" ] || [ -L "$f" ]; then
        mkdir -p "$BUNDLE/mpi$(dirname "$f")"
        cp -P "$f" "$BUNDLE/mpi$f"
      fi
    done
  # mpirun itself is a Debian alternative (/etc/alternatives), not a file of the packages.
  ln -sf orterun "$BUNDLE/mpi/usr/bin/mpirun"
}

# The environment that makes the carried Open MPI work from $BUNDLE/mpi.
use_bundled_mpi() {
  local m=$BUNDLE/mpi
  if command -v mpirun >/dev/null && [ ! -d "$m" ]; then return; fi
  export OPAL_PREFIX=$m/usr PATH=$m/usr/bin:$PATH
  export LD_LIBRARY_PATH=$m/usr/lib/x86_64-linux-gnu:$m/usr/lib/x86_64-linux-gnu/openmpi/lib:$m/usr/lib/x86_64-linux-gnu/pmix2/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  export OMPI_MCA_mca_base_component_path=$m/usr/lib/x86_64-linux-gnu/openmpi/lib/openmpi3
  export PMIX_MCA_mca_base_component_path=$m/usr/lib/x86_64-linux-gnu/pmix2/lib/pmix
  # Shared memory and TCP only: the GPU machine is one node.
  export OMPI_MCA_btl=self,vader,tcp OMPI_MCA_pml=ob1 OMPI_MCA_btl_vader_single_copy_mechanism=none
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
}

# Directory holding a library, searched where CUDA and PyTorch's wheels put them.
find_lib() {
  find /usr/local/cuda/lib64 /usr/local/cuda/lib /usr/local/cuda/targets /opt /usr/lib \
    /usr/local/lib -name "$1" 2>/dev/null | head -1 | xargs -r dirname
}

# What a GPU must confirm that the emulator cannot (issue 35), each bounded to 60 s and reported
# as a row: compute-sanitizer's racecheck and synccheck on the attention kernels (shared-memory
# hazards, barriers), memcheck and initcheck on a sample of every op; cuBLASLt's own log of the
# linear tests (CUBLASLT_LOG_LEVEL=2: a refused epilogue or algorithm shows there). Skipped with
# the reason where the machine has no sanitizer.
sanitize_rows() {
  local out=$1 san rc t0 summary
  local real=$BUNDLE/bin/real/test_gpu_ops
  local libs="$BUNDLE/lib${SATURN_GPU_LIBS:+:$SATURN_GPU_LIBS}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  local attention='GpuOps.AttentionIsCausal:GpuOps.SlidingWindowIgnoresKeysOutsideIt:GpuOps.GroupedQueryAttentionBackwardIsDeterministic'
  local ops='GpuOps.Embedding:GpuOps.EmbeddingOfPackedRecords:GpuOps.RotaryOfPackedRecords:GpuOps.RmsNorm:GpuOps.LayerNorm:GpuOps.Elementwise:GpuOps.CrossEntropyFused:GpuOps.SoftcappedCrossEntropy:GpuOps.AdamWMatchesCpu:GpuOps.LinearMisalignedEpiloguePointers:GpuOps.AttentionIsCausal'
  san=$(command -v compute-sanitizer || ls /usr/local/cuda*/bin/compute-sanitizer 2>/dev/null | head -1)
  if [ -z "$san" ]; then
    echo "| compute-sanitizer | skipped: not found (PATH, /usr/local/cuda*/bin) | | |"
  else
    local spec tool filter
    for spec in "racecheck:$attention" "synccheck:$attention" "memcheck:$ops" "initcheck:$ops"; do
      tool=${spec%%:*}
      filter=${spec#*:}
      t0=$SECONDS
      LD_LIBRARY_PATH=$libs timeout 60 "$san" --tool "$tool" --error-exitcode 3 "$real" \
        --gtest_filter="$filter" >"$out/sanitizer-$tool.log" 2>&1
      rc=$?
      summary=$(grep -h "ERROR SUMMARY" "$out/sanitizer-$tool.log" | tail -1)
      case $rc in
        0) echo "| compute-sanitizer $tool | clean | ${summary:-no summary} | $((SECONDS - t0)) s |" ;;
        3) echo "| compute-sanitizer $tool | ERRORS (sanitizer-$tool.log) | $summary | $((SECONDS - t0)) s |" ;;
        124) echo "| compute-sanitizer $tool | timed out (60 s) | ${summary:-} | 60 s |" ;;
        *) echo "| compute-sanitizer $tool | FAIL (rc $rc): $(grep -m1 -i -E 'error|not supported' "$out/sanitizer-$tool.log" | cut -c1-80) | | $((SECONDS - t0)) s |" ;;
      esac
    done
  fi
  t0=$SECONDS
  CUBLASLT_LOG_LEVEL=2 CUBLASLT_LOG_FILE="$out/cublaslt-%i.log" LD_LIBRARY_PATH=$libs \
    timeout 60 "$real" --gtest_filter='GpuOps.Linear*:GpuOps.Gemm*' >"$out/cublaslt-tests.log" 2>&1
  rc=$?
  local lines errors
  lines=$(cat "$out"/cublaslt-*[0-9].log 2>/dev/null | wc -l)
  errors=$(cat "$out"/cublaslt-*[0-9].log 2>/dev/null | grep -c -i -E '\[error\]|failed|not supported')
  echo "| linear tests, CUBLASLT_LOG_LEVEL=2 | $([ $rc -eq 0 ] && echo pass || echo "FAIL (rc $rc)") | $lines log lines, $errors error lines | $((SECONDS - t0)) s |"
  # NCCL refuses two ranks of one communicator on one GPU: a rank killed mid-collective (the
  # survivor ending within SATURN_NCCL_TIMEOUT_S) is checked on the emulator's fake NCCL only
  # (test_emulated_nccl_failure_np2).
  echo "| NCCL 2 ranks, one killed | not run: this check has no multi-GPU case yet ($(nvidia-smi -L 2>/dev/null | wc -l) GPU(s) here); the emulator's injected-failure test covers the logic | | |"
}

run() {
  local out=${OUT:-/tmp/device-check}
  mkdir -p "$out"
  if [ ! -x "$BUNDLE/bin/test_gpu_ops" ] && [ -f "$PACKED" ]; then unpack || exit 2; fi
  [ -x "$BUNDLE/bin/test_gpu_ops" ] || {
    echo "no bundle at $BUNDLE: run 'tests/gpu/device-check.sh bundle' first and carry build-gpu-bundle.tar.xz"
    exit 2
  }
  local report=$out/device-check-report.md
  exec > >(tee "$report") 2>&1
  echo "# device check of $(cat "$BUNDLE/COMMIT" 2>/dev/null), $(date -u +%FT%TZ)"
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.mem --format=csv,noheader || true

  local blas nccl
  blas=$(find_lib 'libcublasLt.so.13*')
  nccl=$(find_lib 'libnccl.so.2*')
  export SATURN_GPU_LIBS="${blas}${nccl:+:$nccl}"
  echo "cuBLASLt: ${blas:-NOT FOUND}; NCCL: ${nccl:-NOT FOUND}"
  echo "ldd, libraries not found (none listed: all found):"
  for t in "$BUNDLE"/bin/real/*; do
    LD_LIBRARY_PATH="$BUNDLE/lib${SATURN_GPU_LIBS:+:$SATURN_GPU_LIBS}" ldd "$t" 2>&1 |
      grep "not found" | sed "s|^|  $(basename "$t"): |"
  done
  export SATURN_REQUIRE_GPU=1 OMP_NUM_THREADS=8 SATURN_SOURCE_DIR=$ROOT
  local rows=() t
  for t in test_gpu_ops test_gpu_model test_gpu_nccl; do
    if [ ! -x "$BUNDLE/bin/$t" ]; then rows+=("| $t | not built | | |"); continue; fi
    local t0=$SECONDS rc
    timeout 150 "$BUNDLE/bin/$t" >"$out/$t.log" 2>&1
    rc=$?
    local passed failed
    passed=$(grep -c '^\[       OK \]' "$out/$t.log")
    failed=$(grep -c '^\[  FAILED  \].*(' "$out/$t.log")
    rows+=("| $t | $([ $rc -eq 0 ] && echo pass || echo "FAIL (rc $rc)") | $passed ok, $failed failed | $((SECONDS - t0)) s |")
    grep -E '^\[  FAILED  \]|Failure|error' "$out/$t.log" | head -20
  done
  mapfile -t -O "${#rows[@]}" rows < <(sanitize_rows "$out")
  grep -h '\[ memory' "$out"/test_gpu_model.log 2>/dev/null
  grep -h '^step ' "$out"/test_gpu_model.log 2>/dev/null | tail -4
  local t0=$SECONDS
  (use_bundled_mpi
   PYTHONUNBUFFERED=1 python3 tests/gpu/device_check_sweep.py --saturn "$BUNDLE/bin/saturn" --np 4 \
     --scale 124m --out "$out/sweep" --timeout 180 >"$out/sweep.log" 2>&1)
  local sweep_rc=$? sweep_s=$((SECONDS - t0))
  t0=$SECONDS
  PYTHONUNBUFFERED=1 timeout 150 python3 bench/engine/run_cuda.py --exe "$BUNDLE/bin/bench_engine" \
    --json "$out/bench.json" >"$out/bench.log" 2>&1
  local bench_rc=$?
  echo
  echo "| GPU test | result | cases | time |"
  echo "|---|---|---|---|"
  printf '%s\n' "${rows[@]}"
  echo "| sweep (device_check_sweep.py) | $([ $sweep_rc -eq 0 ] && echo pass || echo "FAIL (rc $sweep_rc)") | | $sweep_s s |"
  echo "| bench (run_cuda.py) | $([ $bench_rc -eq 0 ] && echo done || echo "FAIL (rc $bench_rc)") | | $((SECONDS - t0)) s |"
  echo
  cat "$out/sweep/sweep-table.md" 2>/dev/null || tail -20 "$out/sweep.log"
  echo
  grep -v "^$" "$out/bench.log" | tail -24
}

case "$mode" in
  bundle) shift; bundle "$@" ;;
  pack) pack ;;
  unpack) unpack ;;
  run) run ;;
  *) echo "usage: $0 bundle [BUILD_DIR] | pack | unpack | run"; exit 2 ;;
esac
