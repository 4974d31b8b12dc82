#!/usr/bin/env python3
"""llmc_gptq_block_check.py: llm-compressor's own GPTQ on FP8 E4M3 weights in blocks, for
tests/test_gptq.c (fp8_block_matches_llm_compressor).

    python tools/ref/llmc_gptq_block_check.py ROWS COLS BLOCK SCALE_DTYPE W.f32 H.f32 OUT.f32 SCALES.f32

W.f32 holds the weight [ROWS, COLS] and H.f32 the Hessian [COLS, COLS] (little-endian f32,
row-major).  As llm-compressor 0.14 runs GPTQ with the preset FP8_BLOCK (strategy "block",
block_structure [BLOCK, BLOCK]): the weight observer's qparams from W as given (min-max of each
tile, W zero-padded to whole tiles: observers/helpers.py; compressed-tensors' calculate_qparams,
scales in SCALE_DTYPE: f32, f16 or bf16), then modifiers/gptq/gptq_quantize.py quantize_weight
(blocksize 128, dampening 0.01, no activation order), which quantizes column j of row r on tile
(r // BLOCK, j // BLOCK) (helpers.py column_scale_window).  OUT.f32 receives the quantized
weight, SCALES.f32 the tiles' scales [ceil(ROWS/BLOCK), ceil(COLS/BLOCK)] as f32.

Needs torch, compressed-tensors and llm-compressor (LMP_LLMC_PYTHON: e.g. the venv
tools/bench/peers.sh makes)."""
import sys

import numpy as np
import torch
from compressed_tensors.quantization import QuantizationArgs, QuantizationStrategy, QuantizationType
from compressed_tensors.quantization.utils import calculate_qparams, maybe_pad_tensor_for_block_quant
from llmcompressor.modifiers.gptq.gptq_quantize import quantize_weight

DTYPES = {"f32": None, "f16": torch.float16, "bf16": torch.bfloat16}


def main():
    if len(sys.argv) != 9:
        sys.exit(__doc__)
    rows, cols, block, sdt = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
    W = torch.from_numpy(np.fromfile(sys.argv[5], dtype="<f4").reshape(rows, cols).copy())
    H = torch.from_numpy(np.fromfile(sys.argv[6], dtype="<f4").reshape(cols, cols).copy())
    args = QuantizationArgs(num_bits=8, type=QuantizationType.FLOAT, strategy=QuantizationStrategy.BLOCK,
                            symmetric=True, block_structure=[block, block], scale_dtype=DTYPES[sdt])
    p = maybe_pad_tensor_for_block_quant(W, (block, block))
    nbr, nbc = p.shape[0] // block, p.shape[1] // block
    tiles = p.reshape(nbr, block, nbc, block).transpose(1, 2).reshape(nbr, nbc, block * block)
    scale, zp = calculate_qparams(tiles.amin(dim=-1), tiles.amax(dim=-1), args)
    Q, _, fallback = quantize_weight(W.unsqueeze(0).clone(), H.unsqueeze(0).clone(), scale.unsqueeze(0),
                                     zp.unsqueeze(0), None, args, blocksize=128, percdamp=0.01)
    if bool(fallback.any()):
        sys.exit("llmc_gptq_block_check: llm-compressor fell back to RTN (H not positive definite)")
    Q[0].to(torch.float32).numpy().astype("<f4").tofile(sys.argv[7])
    scale.to(torch.float32).numpy().astype("<f4").tofile(sys.argv[8])
    import compressed_tensors
    import llmcompressor
    print("ok: llm-compressor %s, compressed-tensors %s, torch %s: GPTQ FP8 E4M3 %d x %d in %d x %d blocks (%s "
          "scales)" % (llmcompressor.__version__, compressed_tensors.__version__, torch.__version__, rows, cols, block,
                       block, sdt))


if __name__ == "__main__":
    main()
