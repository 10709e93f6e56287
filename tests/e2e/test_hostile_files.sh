#!/usr/bin/env bash
# Nothing a user owns is overwritten, nothing hangs on a hostile file (issue 28): the Hugging
# Face import and export, `-o` of every command that writes a file, and the files Saturn reads,
# each built by hand here. Every refusal is exit 2 naming the file, within a time bound (FIFOs
# would block forever), and leaves what was there as it was.
#  1. ckpt export --format hf: a directory holding another model is refused (--force replaces
#     it); an earlier export is replaced whole; -o equal to or inside --from is refused; --from
#     missing, or of another model, is refused before anything is written; a failure part-way
#     leaves the target as it was and no staging directory behind.
#  2. -o of report, ckpt export --format safetensors and ckpt import, and data prepare's
#     train.bin: a FIFO, a symbolic link and a directory are refused and left as they were.
#  3. Shapes beyond the limits in config.json (n_layer 10^9 under a 3 GB address-space cap,
#     n_embd 10^9): exit 2 at once from ckpt import and from `saturn train` with `from:`.
#  4. Corrupt safetensors (overlapping offsets, trailing bytes, NUL padding, a name twice) and
#     non-finite weights: exit 2 from ckpt import and `saturn train` with `from:`.
#  5. Broken directories: config.json a directory or a FIFO, model.safetensors a directory or a
#     FIFO, a missing shard, a shard that is a directory or a symbolic-link loop: exit 2.
# Usage: test_hostile_files.sh SATURN_EXE
set -uo pipefail
saturn="$1"
py=/usr/bin/python3
source "$(dirname "$0")/../lib.sh"
export OMP_NUM_THREADS=1 SATURN_CALIBRATION_CACHE=none

# expect2 NAME PATTERN CMD...: CMD exits 2 within 60 s and its output holds PATTERN.
expect2() {
  local name=$1 pattern=$2
  shift 2
  local out rc
  out=$(timeout 60 "$@" 2>&1)
  rc=$?
  if [ $rc -eq 2 ] && grep -qF -- "$pattern" <<<"$out"; then
    ok "$name"
  else
    bad "$name: exit $rc, expected 2 with '$pattern'"
    tail -3 <<<"$out"
  fi
}
# snapshot DIR: names, types and contents of everything under DIR (to compare before/after).
snapshot() {
  (cd "$1" && find . -printf '%p %y %l\n' | sort && find . -type f -exec sha256sum {} + | sort)
}
no_staging() {  # no staging directory left beside $1
  ! ls -a "$(dirname "$1")" | grep -q "saturn-staging"
}

prepare_data "$saturn" 20 || bad "data prepare"
cat >"$work/w.yaml" <<YAML
name: hostile
data: {train: $work/data/train.bin, val: $work/data/val.bin}
defaults: {seq_len: 32, steps: 2, eval_batches: 1, batch_size: 4, seed: 1}
models:
  g: {arch: gpt2, n_layer: 1, n_head: 2, d_model: 32}
  l: {arch: llama, n_layer: 1, n_head: 2, d_model: 32, d_ff: 64}
jobs:
  - {name: g, model: g, lr: 1e-3}
  - {name: l, model: l, lr: 1e-3}
YAML
for j in g l; do
  "$saturn" train "$work/w.yaml" --job $j --run-dir "$work/run" --quiet || bad "train $j"
done
G="$work/run/jobs/g/final.h5"
L="$work/run/jobs/l/final.h5"
"$saturn" ckpt export "$G" --format hf -o "$work/hf" >/dev/null 2>&1 && ok "export a model to start from" ||
  bad "export $G"
"$saturn" ckpt export "$L" --format hf -o "$work/hf-llama" >/dev/null 2>&1 || bad "export $L"

# --- 1. ckpt export --format hf ---------------------------------------------------------------
# Another model's directory: shards, an index, a README of the user's.
F="$work/foreign"
mkdir -p "$F"
echo '{"architectures": ["GPT2LMHeadModel"], "n_layer": 48}' >"$F/config.json"
for k in 1 2; do head -c 4096 /dev/urandom >"$F/model-0000$k-of-00002.safetensors"; done
echo '{"weight_map": {}}' >"$F/model.safetensors.index.json"
echo "my notes" >"$F/README.md"
before=$(snapshot "$F")
expect2 "export into another model's directory: refused" "not an earlier export of Saturn's" \
  "$saturn" ckpt export "$G" --format hf -o "$F"
[ "$(snapshot "$F")" == "$before" ] && no_staging "$F" && ok "that directory is untouched" ||
  bad "the foreign directory changed"
if "$saturn" ckpt export "$G" --format hf -o "$F" --force >/dev/null 2>&1 &&
  [ "$(ls "$F" | sort | tr '\n' ' ')" == "config.json generation_config.json model.safetensors " ]; then
  ok "--force replaces it with the export alone"
else
  bad "--force: $(ls "$F" | tr '\n' ' ')"
fi
# An earlier export, sharded, replaced whole by an unsharded one: no stale shard or index.
"$saturn" ckpt export "$G" --format hf -o "$work/again" --max-shard-size 4KiB >/dev/null 2>&1 || bad "sharded export"
n_shards=$(ls "$work/again" | grep -c '^model-')
if "$saturn" ckpt export "$G" --format hf -o "$work/again" >/dev/null 2>&1 &&
  [ "$(ls "$work/again" | sort | tr '\n' ' ')" == "config.json generation_config.json model.safetensors " ] &&
  [ "$n_shards" -gt 1 ]; then
  ok "an earlier export ($n_shards shards + index) is replaced whole, without --force"
else
  bad "re-export over an earlier export: $(ls "$work/again" | tr '\n' ' ')"
fi
before=$(snapshot "$work/hf")
expect2 "-o equal to --from: refused" "which an export never writes into" \
  "$saturn" ckpt export "$G" --format hf -o "$work/hf" --from "$work/hf"
expect2 "-o inside --from: refused" "is inside --from" \
  "$saturn" ckpt export "$G" --format hf -o "$work/hf/sub" --from "$work/hf"
[ "$(snapshot "$work/hf")" == "$before" ] && ok "--from untouched" || bad "--from changed"
expect2 "--from a missing directory: refused" "is not a directory" \
  "$saturn" ckpt export "$G" --format hf -o "$work/out-missing" --from "$work/nothing-here"
[ ! -e "$work/out-missing" ] && ok "... before anything was written" || bad "--from missing: output written"
expect2 "--from another model: refused" "not the model the checkpoint was trained from" \
  "$saturn" ckpt export "$G" --format hf -o "$work/out-other" --from "$work/hf-llama"
[ ! -e "$work/out-other" ] && ok "... before anything was written" || bad "--from another model: output written"
# A failure after the weights are staged (a tokenizer file of --from that is a FIFO) leaves an
# earlier export in place as it was.
cp -r "$work/hf" "$work/origin"
mkfifo "$work/origin/tokenizer.json"
"$saturn" ckpt export "$G" --format hf -o "$work/target" >/dev/null 2>&1 || bad "export to target"
before=$(snapshot "$work/target")
expect2 "a failure part-way (--from's tokenizer.json is a FIFO): exit 2 naming it" "tokenizer.json: is a FIFO" \
  "$saturn" ckpt export "$G" --format hf -o "$work/target" --from "$work/origin"
[ "$(snapshot "$work/target")" == "$before" ] && no_staging "$work/target" &&
  ok "... the earlier export is as it was, no staging directory left" || bad "failed export changed the target"

# --- 2. -o that is not a regular file ----------------------------------------------------------
mkfifo "$work/fifo"
ln -s /proc/self/fd/1 "$work/link"
mkdir "$work/adir"
expect2 "ckpt export safetensors -o FIFO: refused" "is a FIFO" \
  "$saturn" ckpt export "$G" --format safetensors -o "$work/fifo"
expect2 "ckpt export safetensors -o symlink: refused" "is a symbolic link" \
  "$saturn" ckpt export "$G" --format safetensors -o "$work/link"
expect2 "ckpt import -o FIFO: refused" "is a FIFO" "$saturn" ckpt import "$work/hf" -o "$work/fifo"
expect2 "ckpt import -o symlink: refused" "is a symbolic link" "$saturn" ckpt import "$work/hf" -o "$work/link"
expect2 "ckpt import -o directory: refused" "is a directory" "$saturn" ckpt import "$work/hf" -o "$work/adir"
mkdir "$work/prepared" && mkfifo "$work/prepared/train.bin"
expect2 "data prepare with DIR/train.bin a FIFO: refused" "train.bin: is a FIFO" \
  "$saturn" data prepare --input "$work/text.txt" --output "$work/prepared"
[ -p "$work/prepared/train.bin" ] && [ ! -e "$work/prepared/val.bin" ] &&
  ok "... and nothing written there" || bad "data prepare replaced train.bin or wrote val.bin"
[ -p "$work/fifo" ] && [ -L "$work/link" ] && [ "$(readlink "$work/link")" == /proc/self/fd/1 ] &&
  [ -d "$work/adir" ] && ok "the FIFO, the link and the directory are as they were" ||
  bad "an -o target was replaced"

# --- 3. shapes beyond the limits ---------------------------------------------------------------
# with_config DIR PY-EXPR: a copy of $work/hf (or hf-llama) whose config.json is changed by
# PY-EXPR on the dict c.
with_config() {
  rm -rf "$1"
  cp -r "$2" "$1"
  $py - "$1/config.json" "$3" <<'PY'
import json, sys
c = json.load(open(sys.argv[1]))
exec(sys.argv[2])
json.dump(c, open(sys.argv[1], "w"))
PY
}
with_config "$work/deep" "$work/hf-llama" 'c["num_hidden_layers"] = 10**9'
expect2 "num_hidden_layers 10^9 under a 3 GB cap: exit 2 at once" "num_hidden_layers: 1000000000 is out of range" \
  bash -c "ulimit -v 3000000; exec \"$saturn\" ckpt import \"$work/deep\" -o \"$work/deep.h5\""
with_config "$work/wide" "$work/hf" 'c["n_embd"] = 10**9; c.pop("n_inner")'
expect2 "n_embd 10^9: the field named, no overflow" "n_embd: 1000000000 is out of range" \
  "$saturn" ckpt import "$work/wide" -o "$work/wide.h5"
# from_workload DIR: a workload fine-tuning the model in DIR.
from_workload() {
  sed "s|^  g: {arch: gpt2.*|  g: {from: $1}|; /^  l: /d; /name: l,/d" "$work/w.yaml" >"$work/from.yaml"
}
from_workload "$work/deep"
expect2 "train with from: num_hidden_layers 10^9 under a 3 GB cap: exit 2" "out of range" \
  bash -c "ulimit -v 3000000; exec \"$saturn\" train \"$work/from.yaml\" --run-dir \"$work/r-deep\""

# --- 4. corrupt safetensors, non-finite weights ------------------------------------------------
# corrupt DIR HOW: a copy of $work/hf whose model.safetensors is rewritten (HOW: overlap,
# trailing, nul, twice, nan, inf16).
corrupt() {
  rm -rf "$1"
  cp -r "$work/hf" "$1"
  $py - "$1/model.safetensors" "$2" <<'PY'
import json, struct, sys
path, how = sys.argv[1], sys.argv[2]
raw = open(path, "rb").read()
n = struct.unpack("<Q", raw[:8])[0]
header, data = json.loads(raw[8:8 + n]), bytearray(raw[8 + n:])
names = sorted((k for k in header if k != "__metadata__"), key=lambda k: header[k]["data_offsets"][0])
first, second = header[names[0]], header[names[1]]
text = None
if how == "overlap":  # the second tensor shares the first's last 4 bytes; the data is 4 shorter
    for k in names[1:]:
        b, e = header[k]["data_offsets"]
        header[k]["data_offsets"] = [b - 4, e - 4]
    del data[-4:]
elif how == "trailing":
    data += b"\0" * 8
elif how == "nul":
    text = json.dumps(header).encode() + b"\0" * 8
elif how == "twice":
    body = json.dumps(header)[1:]
    text = ('{"' + names[0] + '": ' + json.dumps(first) + ", " + body).encode()
elif how == "nan":
    b = first["data_offsets"][0]
    data[b:b + 4] = struct.pack("<f", float("nan"))
if text is None:
    text = json.dumps(header).encode()
text += b" " * (-len(text) % 8)
open(path, "wb").write(struct.pack("<Q", len(text)) + text + bytes(data))
print(names[0])
PY
}
for how in overlap trailing nul twice; do
  corrupt "$work/bad-$how" $how >/dev/null
  case $how in
    overlap) pattern="overlap the tensor before it" ;;
    trailing) pattern="bytes after the last tensor's data" ;;
    nul) pattern="NUL byte" ;;
    twice) pattern="twice" ;;
  esac
  expect2 "ckpt import of a safetensors file with $how: exit 2" "$pattern" \
    "$saturn" ckpt import "$work/bad-$how" -o "$work/bad-$how.h5"
done
tensor=$(corrupt "$work/bad-nan" nan)
expect2 "ckpt import of a NaN weight: exit 2 naming the tensor" "tensor '$tensor' holds a non-finite value" \
  "$saturn" ckpt import "$work/bad-nan" -o "$work/bad-nan.h5"
[ ! -e "$work/bad-nan.h5" ] && ok "... no checkpoint written" || bad "a checkpoint of a NaN weight was written"
from_workload "$work/bad-nan"
expect2 "train with from: a NaN weight: exit 2 before training" "tensor '$tensor' holds a non-finite value" \
  "$saturn" train "$work/from.yaml" --run-dir "$work/r-nan"
[ ! -e "$work/r-nan/jobs/g/metrics.jsonl" ] && ok "... nothing trained" || bad "trained from a NaN weight"
from_workload "$work/bad-overlap"
expect2 "train with from: overlapping offsets: exit 2" "overlap the tensor before it" \
  "$saturn" train "$work/from.yaml" --run-dir "$work/r-overlap"

# --- 5. broken directories --------------------------------------------------------------------
broken() {  # broken DIR: a fresh copy of $work/hf at DIR
  rm -rf "$1"
  cp -r "$work/hf" "$1"
}
broken "$work/cfg-dir" && rm "$work/cfg-dir/config.json" && mkdir "$work/cfg-dir/config.json"
expect2 "config.json a directory: exit 2 naming it" "config.json: is a directory" \
  "$saturn" ckpt import "$work/cfg-dir" -o "$work/x.h5"
broken "$work/cfg-fifo" && rm "$work/cfg-fifo/config.json" && mkfifo "$work/cfg-fifo/config.json"
expect2 "config.json a FIFO: exit 2 at once" "config.json: is a FIFO" \
  "$saturn" ckpt import "$work/cfg-fifo" -o "$work/x.h5"
from_workload "$work/cfg-fifo"
expect2 "train with from: config.json a FIFO: exit 2 at once" "config.json: is a FIFO" \
  "$saturn" train "$work/from.yaml" --run-dir "$work/r-fifo"
broken "$work/st-dir" && rm "$work/st-dir/model.safetensors" && mkdir "$work/st-dir/model.safetensors"
expect2 "model.safetensors a directory: exit 2" "model.safetensors: is a directory" \
  "$saturn" ckpt import "$work/st-dir" -o "$work/x.h5"
broken "$work/st-fifo" && rm "$work/st-fifo/model.safetensors" && mkfifo "$work/st-fifo/model.safetensors"
expect2 "model.safetensors a FIFO: exit 2 at once" "model.safetensors: is a FIFO" \
  "$saturn" ckpt import "$work/st-fifo" -o "$work/x.h5"
"$saturn" ckpt export "$G" --format hf -o "$work/sharded" --max-shard-size 4KiB >/dev/null 2>&1 || bad "sharded export"
shard=$(ls "$work/sharded" | grep '^model-' | head -1)
for kind in missing directory loop; do
  rm -rf "$work/shard-$kind"
  cp -r "$work/sharded" "$work/shard-$kind"
  rm "$work/shard-$kind/$shard"
  case $kind in
    missing) pattern="$shard: does not exist" ;;
    directory) mkdir "$work/shard-$kind/$shard"; pattern="$shard: is a directory" ;;
    loop) ln -s "$shard" "$work/shard-$kind/$shard"; pattern="$shard: is a symbolic-link loop" ;;
  esac
  expect2 "a shard that is $kind: exit 2 naming it" "$pattern" \
    "$saturn" ckpt import "$work/shard-$kind" -o "$work/x.h5"
done
cp "$work/hf/model.safetensors" "$work/sharded/"
expect2 "both model.safetensors and an index: exit 2" "ambiguous" \
  "$saturn" ckpt import "$work/sharded" -o "$work/x.h5"
[ ! -e "$work/x.h5" ] && ok "no checkpoint written by any refused import" || bad "x.h5 written"
finish
