#!/usr/bin/python3
"""`saturn ckpt export --format safetensors` read back without the safetensors package: the
8-byte little-endian header length, the JSON header (dtype F32, shape, data_offsets, and
__metadata__ of strings), the Hugging Face names in the checkpoint, contiguous offsets, and the
values written (a checkpoint with known values from ckpt_tool). If the safetensors package is
importable, it must load the file too.

Usage: test_safetensors_export.py SATURN_EXE CKPT_TOOL
Exits 77 (ctest: skipped) when numpy is absent.
"""
import json
import os
import struct
import subprocess
import sys
import tempfile

try:
    import numpy as np
except ImportError as e:  # pragma: no cover
    print(f"SKIPPED: numpy not importable by {sys.executable}: {e}")
    sys.exit(77)


def known(kind, tensor, n, gen):
    flat = np.arange(n, dtype=np.int64)
    k = (tensor * 7919 + flat * 31 + kind * 1000003 + gen * 7) % 65521
    return (k / 65521.0 - 0.5).astype(np.float32)


def read_safetensors(path):
    with open(path, "rb") as f:
        blob = f.read()
    (n,) = struct.unpack("<Q", blob[:8])
    header = json.loads(blob[8:8 + n].decode("utf-8"))
    assert (8 + n) % 8 == 0, "data must start 8-byte aligned"
    return header, blob[8 + n:]


def main():
    saturn, tool = sys.argv[1], sys.argv[2]
    passed = 0
    with tempfile.TemporaryDirectory() as tmp:
        for gen, arch in enumerate(("gpt2", "llama"), start=5):
            h5 = os.path.join(tmp, f"{arch}.h5")
            out = os.path.join(tmp, f"{arch}.safetensors")
            subprocess.run([tool, "write-known", h5, arch, str(gen)], check=True, timeout=60)
            subprocess.run([saturn, "ckpt", "export", h5, "--format", "safetensors", "-o", out],
                           check=True, timeout=60)
            header, data = read_safetensors(out)
            meta = header.pop("__metadata__")
            assert all(isinstance(v, str) for v in meta.values()) and meta["step"] == str(gen), meta
            # Tensor order in the file = the model layout order, which known() indexes by.
            tensors = sorted(header.items(), key=lambda kv: kv[1]["data_offsets"][0])
            end = 0
            for t, (name, info) in enumerate(tensors):
                assert info["dtype"] == "F32", info
                b, e = info["data_offsets"]
                count = int(np.prod(info["shape"])) if info["shape"] else 1
                assert b == end and e - b == 4 * count, (name, info)
                end = e
                arr = np.frombuffer(data[b:e], dtype="<f4").reshape(info["shape"])
                want = known(0, t, count, gen).reshape(info["shape"])
                assert np.array_equal(arr.view(np.uint32), want.view(np.uint32)), name
            assert end == len(data), (end, len(data))
            assert not any(n.startswith("optimizer") for n in header)
            first = "transformer.wte.weight" if arch == "gpt2" else "model.embed_tokens.weight"
            assert tensors[0][0] == first, tensors[0][0]
            print(f"ok: {arch}: {len(tensors)} tensors, names/shapes/offsets/values as written")
            passed += 1
            try:
                from safetensors.numpy import load_file
            except ImportError:
                continue
            loaded = load_file(out)
            assert sorted(loaded) == sorted(header), "safetensors package disagrees on names"
            print(f"ok: {arch}: the safetensors package loads it")
            passed += 1
    print(f"{passed} passed, 0 failed")


if __name__ == "__main__":
    main()
