"""llm.c token files for the Python tests: a header of 256 int32 (magic 20240520, version 1, the
token count), then the tokens as uint16 (runtime/data/token_file.hpp reads them)."""
import numpy as np


def write_tokens(path, tokens):
    header = np.zeros(256, dtype=np.int32)
    header[0], header[1], header[2] = 20240520, 1, len(tokens)
    with open(path, "wb") as f:
        f.write(header.tobytes())
        f.write(np.asarray(tokens, dtype=np.uint16).tobytes())
