#!/usr/bin/env python3
"""gemm_shapes.py — the GEMM speed of the forward's shapes in torch or in numpy's BLAS.

Why: GPTQ's time in both lmpress and llm-compressor is mostly the calibration forward, a chain of
GEMMs. lmpress's run on OpenBLAS (Debian's libopenblas, the one numpy from Debian links too);
llm-compressor's on torch's CPU kernels (PyPI's torch: oneDNN / MKL). This times the same
products on the same thread count in each, so the ratio of the two tools can be split into "more
work" and "faster GEMMs" (docs/results.md, "Against the tools users have").

    /usr/bin/python3 tools/bench/gemm_shapes.py --lib numpy     # Debian numpy: OpenBLAS
    build/llmc-venv/bin/python tools/bench/gemm_shapes.py --lib torch

The shapes are SmolLM2-135M's linears on one 512-token window (y[T, out] = x[T, in] W^T):
q and o 576x576, k and v 192x576, gate and up 1536x576, down 576x1536; and the 128-window
Hessian X^T X over 2048 rows (576 and 1536 wide).  Each is timed best of --repeat after a warm-up.
"""
import argparse
import os
import time

SHAPES = [  # (name, M, K, N): C[M, N] = A[M, K] B[K, N]
    ("q,o 512x576x576", 512, 576, 576),
    ("k,v 512x576x192", 512, 576, 192),
    ("gate,up 512x576x1536", 512, 576, 1536),
    ("down 512x1536x576", 512, 1536, 576),
    ("X^T X 576x2048x576", 576, 2048, 576),
    ("X^T X 1536x2048x1536", 1536, 2048, 1536),
]
# how often each product runs in one block forward of SmolLM2 (q,o: 2; k,v: 2; gate,up: 2; down: 1)
FORWARD_WEIGHT = {"q,o 512x576x576": 2, "k,v 512x576x192": 2, "gate,up 512x576x1536": 2, "down 512x1536x576": 1}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--lib", choices=["torch", "numpy"], required=True)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeat", type=int, default=20)
    a = ap.parse_args()
    if a.lib == "torch":
        import torch
        torch.set_num_threads(a.threads)
        make = lambda m, k: torch.randn(m, k, dtype=torch.float32)
        mm = torch.mm
        what = f"torch {torch.__version__}, {torch.get_num_threads()} threads"
    else:
        os.environ.setdefault("OPENBLAS_NUM_THREADS", str(a.threads))
        import numpy as np
        rng = np.random.default_rng(0)
        make = lambda m, k: rng.standard_normal((m, k), dtype=np.float32)
        mm = np.dot
        what = f"numpy {np.__version__}, OPENBLAS_NUM_THREADS={os.environ['OPENBLAS_NUM_THREADS']}"
    print(f"# {what}")
    print("| product | GFLOP/s |")
    print("|---|---:|")
    fwd_flop = fwd_s = 0.0
    for name, m, k, n in SHAPES:
        x, w = make(m, k), make(k, n)
        mm(x, w)
        best = float("inf")
        for _ in range(a.repeat):
            t0 = time.perf_counter()
            mm(x, w)
            best = min(best, time.perf_counter() - t0)
        flop = 2.0 * m * k * n
        print(f"| {name} | {flop / best / 1e9:.1f} |")
        if name in FORWARD_WEIGHT:
            fwd_flop += FORWARD_WEIGHT[name] * flop
            fwd_s += FORWARD_WEIGHT[name] * best
    print(f"| a block's linears, weighted as the forward runs them | {fwd_flop / fwd_s / 1e9:.1f} |")


if __name__ == "__main__":
    main()
