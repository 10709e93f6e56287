#!/usr/bin/env bash
# A full disk in the middle of a checkpoint (issue 15, item 1): the run directory is a 12 MiB
# tmpfs, one job's checkpoint (20 MiB) cannot fit, the other job's can. The write's failure is
# agreed by the job's ranks and fails that job alone: no hang (the collective HDF5 close used to
# wait forever on a 2-rank job), no MPI abort (a 1-rank job used to take the run down), the
# other job finishes, summary.json is written, and the partial file's space is given back.
# Three ways: a 2-rank job; the same where the file system cannot preallocate, so the disk
# fills inside HDF5's own writes (SATURN_CKPT_TEST_NO_RESERVE); 1-rank jobs.
# The tmpfs lives in a private mount namespace (unshare -rm: no root needed where user
# namespaces are allowed); where none can be made the test is skipped (77).
# Usage: test_run_disk_full.sh SATURN_EXE
set -uo pipefail
saturn="$1"
if [ -z "${SATURN_IN_NAMESPACE:-}" ]; then
  for flags in -rm -m; do
    if unshare $flags sh -c 'd=$(mktemp -d) && mount -t tmpfs -o size=1m tmpfs "$d" && umount "$d" && rmdir "$d"' 2>/dev/null; then
      SATURN_IN_NAMESPACE=1 exec unshare $flags bash "$0" "$@"
    fi
  done
  echo "skipped: no mount namespace for a small tmpfs here (unshare -rm / -m)"
  exit 77
fi
source "$(dirname "$0")/../lib.sh"
export OMP_NUM_THREADS=1 SATURN_CALIBRATION_CACHE=none
prepare_data "$saturn" 20 || bad "data prepare"
mnt="$work/mnt"
mkdir -p "$mnt"
mount -t tmpfs -o size=12m tmpfs "$mnt" || { bad "mount tmpfs"; finish; exit; }
trap 'umount "$mnt" 2>/dev/null; rm -rf "$work"' EXIT

# big: 1.65 M parameters, 20 MiB per checkpoint with its AdamW moments; small: 0.3 MiB.
cat > "$work/two.yaml" <<YAML
name: disk-full
data: {train: $work/data/train.bin, val: $work/data/val.bin}
defaults:
  seq_len: 32
  steps: 6
  eval_every: 0
  eval_batches: 1
  checkpoint_every: 2
  seed: 3
models:
  big: {arch: gpt2, n_layer: 2, n_head: 4, d_model: 256}
  small: {arch: gpt2, n_layer: 1, n_head: 2, d_model: 32}
jobs:
  - {name: bigjob, model: big, lr: 1e-3, batch_size: 8}
  - {name: smalljob, model: small, lr: 1e-3, batch_size: 8}
# Not offload: its state lives in host memory, so the big job could take one rank below.
strategies: [ddp, fsdp, tensor, pipeline]
solver: {time_limit: 2}
YAML

# case NAME NP EXPECTED_DEVICES_OF_BIG [saturn run options]
case_run() {
  local name=$1 np=$2 devices=$3
  shift 3
  local dir="$mnt/$name"
  timeout 240 "$saturn" run "$work/two.yaml" --np "$np" --run-dir "$dir" --no-trials "$@" \
    > "$work/$name.log" 2>&1
  local rc=$?
  if [ $rc -eq 1 ]; then
    ok "$name: exit 1 (a job failed), no hang"
  else
    bad "$name: exit $rc (124: hung)"; tail -20 "$work/$name.log"
  fi
  if /usr/bin/python3 - "$dir" "$devices" <<'PY'
import json, os, sys
d, devices = sys.argv[1], int(sys.argv[2])
s = json.load(open(os.path.join(d, "summary.json")))
jobs = {j["id"]: j for j in s["jobs"]}
big, small = jobs["bigjob"], jobs["smalljob"]
assert s["exit_code"] == 1, s["exit_code"]
assert big["status"] == "failed", big
reason = big["reason"]
assert "bigjob/checkpoints/step-00000002.h5" in reason and (
    "not enough disk space" in reason or "No space left on device" in reason), reason
assert big["segments"][-1]["devices"] == devices, big["segments"]
assert small["status"] == "finished", small
assert os.path.exists(os.path.join(d, "jobs", "smalljob", "final.h5"))
left = [f for f in os.listdir(os.path.join(d, "jobs", "bigjob", "checkpoints")) if f.endswith(".tmp")]
assert not left, left
events = [json.loads(l) for l in open(os.path.join(d, "timeline.jsonl"))]
assert any(e["event"] == "failure" and e["job"] == "bigjob" for e in events)
print("bigjob failed:", reason[:160])
PY
  then
    ok "$name: the big job failed alone with the disk's reason, the small one finished, summary.json written"
  else
    bad "$name: summary"; tail -20 "$work/$name.log"
  fi
  rm -rf "$dir"
}

# 32 MiB devices: the big model needs 2 ranks (estimates: 15-32 MiB on 2, 34-38 MiB on one).
case_run np2 2 2 --device-memory 32MiB
SATURN_CKPT_TEST_NO_RESERVE=1 case_run np2-no-reserve 2 2 --device-memory 32MiB
case_run np1 1 1
finish
