#!/usr/bin/env bash
# Configures and builds Saturn into ${SATURN_BUILD_DIR:-build}. Extra arguments go to cmake.
# Both README commands build through here with the same options (warnings are errors, as in
# CI), so running one after the other compiles everything once.
set -euo pipefail
cd "$(dirname "$0")/.."
build="${SATURN_BUILD_DIR:-build}"
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release -DSATURN_WERROR=ON "$@"
cmake --build "$build" -j "$(nproc)"
