#!/bin/bash
# tests/gpu/device-check.sh's packing (issue 35): the GPU bundle travels as one .tar.xz that fits
# the device tool's 64 MiB with the working tree. With a stand-in bundle (a script and a
# megabyte of incompressible data): `pack` writes the archive and states the sizes, `unpack`
# restores the same files, `run` unpacks when only the archive is there, a pack over the limit
# is exit 2 naming both sizes and leaves no archive, and a damaged archive is exit 2.
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
CHECK=$ROOT/tests/gpu/device-check.sh
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

export SATURN_BUNDLE_DIR=$tmp/stage/build-gpu-bundle SATURN_BUNDLE_PACKED=$tmp/bundle.tar.xz
mkdir -p "$SATURN_BUNDLE_DIR/bin" "$SATURN_BUNDLE_DIR/lib"
printf '#!/bin/sh\necho stand-in\n' >"$SATURN_BUNDLE_DIR/bin/test_gpu_ops"
chmod +x "$SATURN_BUNDLE_DIR/bin/test_gpu_ops"
head -c 1048576 /dev/urandom >"$SATURN_BUNDLE_DIR/lib/libstandin.so"
echo 0123abc >"$SATURN_BUNDLE_DIR/COMMIT"
cp -a "$SATURN_BUNDLE_DIR" "$tmp/original"

out=$(bash "$CHECK" pack 2>&1) || fail "pack: $out"
echo "$out"
[ -f "$SATURN_BUNDLE_PACKED" ] || fail "pack wrote no archive"
echo "$out" | grep -q "working tree .* of the device tool's 64.0 MiB" || fail "pack states no sizes: $out"

rm -rf "$SATURN_BUNDLE_DIR"
out=$(bash "$CHECK" unpack 2>&1) || fail "unpack: $out"
diff -r "$tmp/original" "$SATURN_BUNDLE_DIR" || fail "unpacked files differ from the bundle"
[ -x "$SATURN_BUNDLE_DIR/bin/test_gpu_ops" ] || fail "unpacked binary lost its mode"

# run: only the archive is there -> it unpacks first (then fails later without a GPU machine's
# tools, which is not this test's business: the unpack line must come first).
rm -rf "$SATURN_BUNDLE_DIR"
out=$(OUT=$tmp/out timeout 60 bash "$CHECK" run 2>&1 | head -3)
echo "$out" | grep -q "^unpack: $SATURN_BUNDLE_DIR" || fail "run did not unpack the archive: $out"

# Over the limit: exit 2, both sizes named, no archive left to carry.
out=$(SATURN_DEVICE_TOOL_LIMIT=100000 bash "$CHECK" pack 2>&1)
rc=$?
[ $rc -eq 2 ] || fail "an oversized pack gave rc $rc: $out"
echo "$out" | grep -q "too large to send: [0-9]* bytes > 100000" || fail "no sizes: $out"
[ ! -f "$SATURN_BUNDLE_PACKED" ] || fail "an oversized archive was left behind"

# A damaged archive: exit 2.
head -c 1000 /dev/urandom >"$SATURN_BUNDLE_PACKED"
out=$(bash "$CHECK" unpack 2>&1)
rc=$?
[ $rc -eq 2 ] || fail "a damaged archive gave rc $rc: $out"
echo "device-check packing: all checks passed"
