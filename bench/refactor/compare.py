#!/usr/bin/python3
"""Before/after a refactor: every dataset of every final.h5 of two outputs of run.sh, bit for bit.

Usage: bench/refactor/compare.py BEFORE_OUT AFTER_OUT. Compares OUT/run/jobs/*/final.h5 and
OUT/single/jobs/*/final.h5 dataset by dataset (the model and the AdamW moments), prints one line
per file and exits 1 when any dataset differs or a file is missing on one side. Needs h5py
(Debian's python3-h5py).
"""
import glob
import os
import sys

import h5py
import numpy as np


def datasets(path):
    out = {}
    with h5py.File(path, "r") as f:
        f.visititems(lambda name, obj: out.__setitem__(name, obj[()])
                     if isinstance(obj, h5py.Dataset) else None)
    return out


def main():
    before, after = sys.argv[1], sys.argv[2]
    bad = 0
    for kind in ("run", "single"):
        files = sorted(glob.glob(os.path.join(before, kind, "jobs", "*", "final.h5")))
        if not files:
            print(f"{kind}: no final.h5 in {before}")
            bad += 1
        for f in files:
            job = os.path.basename(os.path.dirname(f))
            g = os.path.join(after, kind, "jobs", job, "final.h5")
            if not os.path.exists(g):
                print(f"{kind} {job}: missing in {after}")
                bad += 1
                continue
            a, b = datasets(f), datasets(g)
            differ = [n for n in sorted(set(a) | set(b))
                      if n not in a or n not in b or a[n].tobytes() != b[n].tobytes()]
            print(f"{kind} {job}: {len(a)} datasets, "
                  + ("bit-identical" if not differ else f"{len(differ)} differ: {differ[:3]}"))
            bad += bool(differ)
    print("all bit-identical" if bad == 0 else f"{bad} files differ or are missing")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
