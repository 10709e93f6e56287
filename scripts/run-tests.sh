#!/usr/bin/env bash
# README command (2), also what CI runs: install what is missing (with the test peers), build
# with warnings as errors, run every test.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh --tests
scripts/build.sh
build="${SATURN_BUILD_DIR:-build}"
ctest --test-dir "$build" --output-on-failure -j "$(nproc)" --timeout 900
