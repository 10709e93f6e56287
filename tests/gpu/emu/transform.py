#!/usr/bin/python3
"""Rewrites a CUDA kernel source for the CPU emulator (emu_cuda.hpp): every launch
`k<<<grid, block, smem, stream>>>(args);` becomes
`emu_launch(grid, block, smem, stream, "k", [&] { k(args); }, args);` (emu_cuda.hpp, which
checks that every pointer argument is device memory)
and `extern __shared__ [__align__(N)] T name[];` becomes a pointer to the emulator's dynamic shared memory.
Usage: transform.py IN.cu OUT.cpp"""
import re
import sys

src = open(sys.argv[1]).read()
launch = re.compile(r"([A-Za-z_][A-Za-z_0-9:<>]*)<<<(.*?)>>>\((.*?)\);", re.S)


def rewrite(m):
    parts = [p.strip() for p in m.group(2).split(",")]
    # grid, block[, smem[, stream]]: split on top-level commas only
    depth, cur, args = 0, "", []
    for ch in m.group(2):
        if ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
        if ch == "," and depth == 0:
            args.append(cur.strip())
            cur = ""
        else:
            cur += ch
    args.append(cur.strip())
    grid, block = args[0], args[1]
    smem = args[2] if len(args) > 2 else "0"
    stream = args[3] if len(args) > 3 else "nullptr"
    kernel_args = m.group(3).strip()
    name = m.group(1).replace('"', '')
    tail = f", {kernel_args}" if kernel_args else ""
    return (f"emu_launch(dim3({grid}), dim3({block}), {smem}, {stream}, \"{name}\", "
            f"[&] {{ {m.group(1)}({kernel_args}); }}{tail});")


out, n = launch.subn(rewrite, src)
out = re.sub(r"extern __shared__ (?:__align__\(\d+\) )?(\w+) (\w+)\[\];",
             r"\1* \2 = static_cast<\1*>(::emu::dynamic_smem());", out)
if n == 0 and "<<<" in src:
    sys.exit(f"{sys.argv[1]}: launches not rewritten")
open(sys.argv[2], "w").write(f'#line 1 "{sys.argv[1]}"\n' + out)
