# Sourced by the shell tests: a scratch directory removed on exit, ok/bad counters, the small
# text corpus the tests train on, and the verdict.
#   source "$(dirname "$0")/../lib.sh"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
passed=0
failed=0
ok() { echo "ok: $1"; passed=$((passed + 1)); }
bad() { echo "FAIL: $1"; failed=$((failed + 1)); }

# prepare_data SATURN COPIES [saturn data prepare options]: $work/data/{train,val}.bin from
# COPIES copies of the BSD licence text (every Debian system ships it; a tiny model learns it).
prepare_data() {
  local saturn=$1 copies=$2
  shift 2
  for _ in $(seq 1 "$copies"); do cat /usr/share/common-licenses/BSD; done >"$work/text.txt"
  "$saturn" data prepare --input "$work/text.txt" --output "$work/data" "$@" >/dev/null
}

# The last line of a test: the counts, and the exit status ctest reads.
finish() {
  echo "$passed passed, $failed failed"
  [ "$failed" -eq 0 ]
}
