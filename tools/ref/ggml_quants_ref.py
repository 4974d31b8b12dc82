#!/usr/bin/env python3
"""ggml_quants_ref.py — GGUF Q8_0 / Q4_0 / Q4_1 / Q5_0 / Q5_1 as the PyPI `gguf` package quantizes them.

gguf-py's quants.py ports ggml's reference quantizers (ggml-quants.c quantize_row_q8_0_ref,
quantize_row_q4_0_ref, quantize_row_q4_1_ref, quantize_row_q5_0_ref, quantize_row_q5_1_ref) to numpy; this script runs them so that
tests/test_quant_gguf.c can require lmpress's CPU choose_weight_grid + apply_weight_grid to give
the same blocks and the same dequantized weights, bit for bit.  Nothing here re-derives the
formulas: the blocks and their dequantization are gguf's own.

  ggml_quants_ref.py cases DIR
      writes DIR/input.f32, a deterministic [rows, 64] f32 matrix (random rows at several
      magnitudes, and rows with exact zeros, magnitude ties, rounding ties, constant rows, values
      that overflow or underflow an fp16 scale, f32 subnormals), DIR/shape.txt ("rows cols"),
      for each format F in q8_0 q4_0 q4_1 q5_0 q5_1: DIR/F.bin (the file's blocks) and DIR/F.deq
      (their dequantization, f32); and DIR/fp16_in.f32 / DIR/fp16_out.f32: f32 values around
      every half's value and its midpoints to its neighbours, and random bit patterns, with
      numpy's f32 -> float16 -> f32 round trip of each (the rounding of a GGUF scale).
  ggml_quants_ref.py quantize F IN ROWS COLS OUT
      the same for a given raw f32 matrix IN: OUT.bin and OUT.deq.

Run with PYTHONPATH pointing at the unpacked gguf wheel (tools/test.sh puts it in build/pydeps).
"""
import os
import sys

import numpy as np
from gguf.constants import GGMLQuantizationType
from gguf.quants import dequantize, quantize

FORMATS = {"q8_0": GGMLQuantizationType.Q8_0, "q4_0": GGMLQuantizationType.Q4_0,
           "q4_1": GGMLQuantizationType.Q4_1, "q5_0": GGMLQuantizationType.Q5_0,
           "q5_1": GGMLQuantizationType.Q5_1}


def cases() -> np.ndarray:
    """Rows of two 32-wide blocks each; RandomState's stream is the same in every numpy."""
    rs = np.random.RandomState(20261124)
    rows = []
    for scale in (1.0, 0.02, 3.0, 100.0, 1e-3, 1e-5, 3e4):
        for _ in range(4):
            rows.append(rs.standard_normal(64) * scale)
    rows.append(np.zeros(64))                              # all-zero blocks: d = 0, id = 0
    r = rs.standard_normal(64) * 0.5                       # Q4_0: equal magnitudes, +first / -first
    r[3], r[20] = 2.0, -2.0
    r[32 + 5], r[32 + 9] = -1.5, 1.5
    rows.append(r)
    rows.append(np.concatenate([[127.0], np.arange(31) * 4 - 59.5, [-127.0], np.arange(31) * 2 - 29.5]))  # Q8_0 d = 1: x.5 ties
    rows.append(np.concatenate([np.arange(32) * 0.5 - 8.0, np.arange(32) * 15 / 31]))  # Q4 ties
    rows.append(np.concatenate([np.full(32, 0.3), np.full(32, -7.25)]))   # constant: Q4_1 d = 0
    rows.append(np.concatenate([rs.standard_normal(32) * 2e7, rs.standard_normal(32) * 6e5]))  # fp16 inf
    rows.append(np.concatenate([rs.standard_normal(32) * 1e-6, rs.standard_normal(32) * 3e-9]))  # subnormal d
    # f32 subnormals.  No block of -0.0 only: there ggml's loop keeps its initial max = +0
    # (d = +0/-8 = -0) where gguf-py's argmax takes the -0 (d = +0): a zero of the other sign,
    # on which lmpress follows ggml.
    rows.append(np.concatenate([rs.standard_normal(32) * 1e-39, rs.standard_normal(32) * 1e-42]))
    r = rs.standard_normal(64) * 4.0                        # one outlier per block
    r[7], r[40] = 90.0, -75.0
    rows.append(r)
    return np.array(rows, dtype=np.float32)


def fp16_cases() -> np.ndarray:
    rs = np.random.RandomState(7)
    h = np.arange(65536, dtype=np.uint32).astype(np.uint16).view(np.float16).astype(np.float32).view(np.uint32)
    # h + 0x1000 is the midpoint to the next half for normal halves; +-1 ulp of f32 around both
    near = [h, h + 1, h - 1, h + 0x1000, h + 0xFFF, h + 0x1001]
    return np.concatenate(near + [rs.randint(0, 2**32, size=200000, dtype=np.uint64).astype(np.uint32)]).view(np.float32)


def run(fmt: str, w: np.ndarray, out: str) -> None:
    q = quantize(w, FORMATS[fmt])
    d = dequantize(q, FORMATS[fmt]).astype(np.float32, copy=False)
    assert d.shape == w.shape, (d.shape, w.shape)
    np.ascontiguousarray(q).tofile(out + ".bin")
    np.ascontiguousarray(d).tofile(out + ".deq")


def main() -> int:
    if len(sys.argv) == 3 and sys.argv[1] == "cases":
        out = sys.argv[2]
        os.makedirs(out, exist_ok=True)
        w = cases()
        w.tofile(os.path.join(out, "input.f32"))
        with open(os.path.join(out, "shape.txt"), "w") as f:
            f.write("%d %d\n" % w.shape)
        with np.errstate(all="ignore"):  # the overflow rows give inf scales, as in ggml
            for fmt in FORMATS:
                run(fmt, w, os.path.join(out, fmt))
            x = fp16_cases()
            x.tofile(os.path.join(out, "fp16_in.f32"))
            x.astype(np.float16).astype(np.float32).tofile(os.path.join(out, "fp16_out.f32"))
        return 0
    if len(sys.argv) == 7 and sys.argv[1] == "quantize" and sys.argv[2] in FORMATS:
        rows, cols = int(sys.argv[4]), int(sys.argv[5])
        w = np.fromfile(sys.argv[3], dtype=np.float32).reshape(rows, cols)
        with np.errstate(all="ignore"):
            run(sys.argv[2], w, sys.argv[6])
        return 0
    sys.stderr.write(__doc__)
    return 2


if __name__ == "__main__":
    sys.exit(main())
