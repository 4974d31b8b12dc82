#!/usr/bin/env python3
"""nf4_check.py: bitsandbytes' own NF4 quantizer on a matrix, for tests/test_nf4.c.

    python3 tools/ref/nf4_check.py ROWS COLS IN.f32 DEQ.f32 ABSMAX.f32

IN.f32 holds ROWS x COLS little-endian floats, row-major.  bitsandbytes.functional.quantize_4bit
(quant_type "nf4", blocksize 64, compress_statistics False: the f32 abs-max of each block of 64
consecutive values kept as it is) quantizes them on the CPU and dequantize_4bit reads them back;
DEQ.f32 receives the dequantized matrix, ABSMAX.f32 the abs-max of every block.  Needs torch and
bitsandbytes (the interpreter in LMP_CT_PYTHON: `pip install bitsandbytes` beside torch)."""
import sys

import numpy as np
import torch
import bitsandbytes.functional as F


def main():
    rows, cols = int(sys.argv[1]), int(sys.argv[2])
    x = np.fromfile(sys.argv[3], dtype="<f4")
    if x.size != rows * cols:
        sys.exit("nf4_check: %s holds %d floats, expected %d" % (sys.argv[3], x.size, rows * cols))
    t = torch.from_numpy(x.reshape(rows, cols).copy())
    q, state = F.quantize_4bit(t, blocksize=64, quant_type="nf4", compress_statistics=False)
    y = F.dequantize_4bit(q, state)
    y.reshape(-1).numpy().astype("<f4").tofile(sys.argv[4])
    state.absmax.reshape(-1).numpy().astype("<f4").tofile(sys.argv[5])
    print("ok: bitsandbytes %s, %d x %d, %d blocks" % (__import__("bitsandbytes").__version__, rows, cols,
                                                      state.absmax.numel()))


if __name__ == "__main__":
    main()
