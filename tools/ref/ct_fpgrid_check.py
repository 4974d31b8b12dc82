#!/usr/bin/env python3
"""ct_fpgrid_check.py: compressed-tensors' own floating-point quantizers on a matrix, for
tests/test_fpgrid.c.

    python3 tools/ref/ct_fpgrid_check.py FORMAT GRAN GROUP SCALE_DTYPE ROWS COLS IN.f32 DEQ.f32 SCALES.f32
    python3 tools/ref/ct_fpgrid_check.py CASES.txt     (one such argument list per line: one torch start)

FORMAT is fp8_e4m3, fp8_e5m2, nvfp4, mxfp4 or mxfp8; GRAN tensor, channel, group or block (fp8
only: the others are groups of 16 / 32); GROUP the group size for GRAN group, the side of the
GROUP x GROUP tiles for GRAN block (compressed-tensors' strategy "block", block_structure [GROUP,
GROUP]: W zero-padded to whole tiles as llm-compressor's observer and compressed-tensors'
_process_block pad it, so ROWS and COLS need not be multiples of GROUP); SCALE_DTYPE f32, f16 or bf16
(fp8 only: the dtype the scales are rounded to).  IN.f32 holds ROWS x COLS little-endian floats,
row-major, the weight in f32.  compressed-tensors (PyPI, 0.20.1) computes every slice's scale
from its min and max as llm-compressor's observer hands them over (calculate_qparams, with
generate_gparam's global scale for nvfp4), then fake_quantize quantizes and dequantizes the
weight; DEQ.f32 receives the dequantized weight, SCALES.f32 the scales in storage order (nvfp4:
the E4M3 group scales as f32, then the global scale; mx: 2^(e-127)).

Activations: FORMAT act_fp8_static, act_fp8_token, act_nvfp4 or act_mxfp4 (GRAN, GROUP and
SCALE_DTYPE unused) treats IN.f32 as the input X [ROWS tokens, COLS] of a linear, as compressed-
tensors' forward_quantize does for the presets FP8 (static per tensor: calculate_qparams of X's own
min and max, the calibration), FP8_DYNAMIC (per token: compute_dynamic_scales_and_zp on [1, T, C]),
NVFP4 (dynamic local groups of 16 with the global scale generate_gparam makes of X) and MXFP4
(dynamic groups of 32); SCALES.f32 then holds the static scale (fp8) or the global scale (nvfp4),
or nothing.

fp8_e5m2: compressed-tensors has no E5M2 weight scheme (its 8-bit float is always E4M3); the
same steps are run with torch's float8_e5m2 cast and max 57344, which is what the format's
library (torch) rounds to.  Needs torch and compressed-tensors (LMP_CT_PYTHON)."""
import sys

import numpy as np
import torch
from compressed_tensors.quantization import QuantizationArgs, QuantizationStrategy, QuantizationType
from compressed_tensors.quantization.lifecycle.forward import fake_quantize
from compressed_tensors.quantization.utils import calculate_qparams, generate_gparam

DTYPES = {"f32": None, "f16": torch.float16, "bf16": torch.bfloat16}


def slices_minmax(t, strategy, group):
    """Per-slice min and max, shaped as calculate_qparams expects them for the strategy."""
    rows, cols = t.shape
    if strategy == "block":
        # llm-compressor's observers/helpers.py flatten_for_calibration: pad, then one row per tile
        from compressed_tensors.quantization.utils import maybe_pad_tensor_for_block_quant
        p = maybe_pad_tensor_for_block_quant(t, (group, group))
        nbr, nbc = p.shape[0] // group, p.shape[1] // group
        b = p.reshape(nbr, group, nbc, group).transpose(1, 2).reshape(nbr, nbc, group * group)
        return b.amin(dim=-1), b.amax(dim=-1)
    if strategy == "tensor":
        return t.amin().reshape(1), t.amax().reshape(1)
    if strategy == "channel":
        return t.amin(dim=1, keepdim=True), t.amax(dim=1, keepdim=True)
    g = t.reshape(rows, cols // group, group)
    return g.amin(dim=-1), g.amax(dim=-1)


def one(argv):
    fmt, gran, group, sdt = argv[1], argv[2], int(argv[3]), argv[4]
    rows, cols = int(argv[5]), int(argv[6])
    x = np.fromfile(argv[7], dtype="<f4")
    if x.size != rows * cols:
        sys.exit("ct_fpgrid_check: %s holds %d floats, expected %d" % (argv[7], x.size, rows * cols))
    t = torch.from_numpy(x.reshape(rows, cols).copy())
    if fmt.startswith("act_"):
        return one_act(fmt, t, argv)
    gscale = None
    if fmt in ("fp8_e4m3", "fp8_e5m2"):
        strategy = {"tensor": QuantizationStrategy.TENSOR, "channel": QuantizationStrategy.CHANNEL,
                    "group": QuantizationStrategy.GROUP, "block": QuantizationStrategy.BLOCK}[gran]
        args = QuantizationArgs(num_bits=8, type=QuantizationType.FLOAT, strategy=strategy, symmetric=True,
                                group_size=group if gran == "group" else None,
                                block_structure=[group, group] if gran == "block" else None, scale_dtype=DTYPES[sdt])
    elif fmt == "nvfp4":
        gran, group = "group", 16
        args = QuantizationArgs(num_bits=4, type=QuantizationType.FLOAT, strategy=QuantizationStrategy.TENSOR_GROUP,
                                symmetric=True, group_size=16, scale_dtype=torch.float8_e4m3fn)
        gscale = generate_gparam(t.amin(), t.amax())
    elif fmt in ("mxfp4", "mxfp8"):
        gran, group = "group", 32
        args = QuantizationArgs(num_bits=4 if fmt == "mxfp4" else 8, type=QuantizationType.FLOAT,
                                strategy=QuantizationStrategy.GROUP, symmetric=True, group_size=32,
                                scale_dtype=torch.uint8, zp_dtype=torch.uint8)
    else:
        sys.exit("ct_fpgrid_check: unknown format %s" % fmt)
    mn, mx = slices_minmax(t, gran, group)
    if fmt == "fp8_e5m2":
        # E4M3's steps with E5M2's range and cast (compressed-tensors has no E5M2 scheme), its zero
        # point 0 added as fake_quantize adds it
        amax = torch.max(mn.clamp(max=0).abs(), mx.clamp(min=0))
        scale = amax / 57344.0
        if DTYPES[sdt] is not None:
            scale = scale.to(DTYPES[sdt]).to(torch.float32)
        eps = torch.finfo(DTYPES[sdt] or torch.float32).eps
        scale = torch.where(scale == 0, torch.tensor(eps), scale)
        if gran == "block":  # each tile's scale over its elements (the padding is cut off)
            s = scale.repeat_interleave(group, 0).repeat_interleave(group, 1)[:rows, :cols]
            xx = t
        else:
            s = scale if gran != "group" else scale.unsqueeze(-1)
            xx = t if gran != "group" else t.reshape(rows, cols // group, group)
        q = torch.clamp(xx / s + 0.0, -57344.0, 57344.0).to(torch.float8_e5m2).to(torch.float32)
        y = (q * s).reshape(rows, cols)
    else:
        scale, zp = calculate_qparams(mn, mx, args, global_scale=gscale)
        y = fake_quantize(t, scale, zp, args, global_scale=gscale)
    y.reshape(-1).numpy().astype("<f4").tofile(argv[8])
    sc = scale.to(torch.float32).reshape(-1)
    if gscale is not None:
        sc = torch.cat([sc, gscale.to(torch.float32).reshape(-1)])
    sc.numpy().astype("<f4").tofile(argv[9])
    print("ok: compressed-tensors %s, %s %s/%d %s, %d x %d, %d scales" % (
        __import__("compressed_tensors").__version__, fmt, gran, group, sdt, rows, cols, sc.numel()))


def one_act(fmt, t, argv):
    from compressed_tensors.quantization.quant_args import DynamicType
    from compressed_tensors.quantization.utils import compute_dynamic_scales_and_zp
    F = QuantizationType.FLOAT
    sc = torch.zeros(0)
    x3 = t.unsqueeze(0)  # [batch 1, T, C], as a linear's input arrives
    if fmt == "act_fp8_static":
        args = QuantizationArgs(num_bits=8, type=F, strategy=QuantizationStrategy.TENSOR, symmetric=True, dynamic=False)
        scale, zp = calculate_qparams(t.amin().reshape(1), t.amax().reshape(1), args)
        y = fake_quantize(x3, scale, zp, args)
        sc = scale
    elif fmt == "act_fp8_token":
        args = QuantizationArgs(num_bits=8, type=F, strategy=QuantizationStrategy.TOKEN, symmetric=True, dynamic=True)
        scale, zp = compute_dynamic_scales_and_zp(x3, args, module=None)
        y = fake_quantize(x3, scale, zp, args)
    elif fmt == "act_nvfp4":
        args = QuantizationArgs(num_bits=4, type=F, strategy=QuantizationStrategy.TENSOR_GROUP, symmetric=True,
                                dynamic=DynamicType.LOCAL, group_size=16, scale_dtype=torch.float8_e4m3fn)
        gscale = generate_gparam(t.amin(), t.amax())
        scale, zp = compute_dynamic_scales_and_zp(x3, args, module=None, global_scale=gscale)
        y = fake_quantize(x3, scale, zp, args, global_scale=gscale)
        sc = gscale
    elif fmt == "act_mxfp4":
        args = QuantizationArgs(num_bits=4, type=F, strategy=QuantizationStrategy.GROUP, symmetric=True, dynamic=True,
                                group_size=32, scale_dtype=torch.uint8, zp_dtype=torch.uint8)
        scale, zp = compute_dynamic_scales_and_zp(x3, args, module=None)
        y = fake_quantize(x3, scale, zp, args)
    else:
        sys.exit("ct_fpgrid_check: unknown format %s" % fmt)
    y.reshape(-1).numpy().astype("<f4").tofile(argv[8])
    sc.to(torch.float32).reshape(-1).numpy().astype("<f4").tofile(argv[9])
    print("ok: compressed-tensors %s, %s on %d x %d" % (__import__("compressed_tensors").__version__, fmt, *t.shape))


def main():
    if len(sys.argv) == 2:
        with open(sys.argv[1]) as f:
            for line in f:
                if line.strip():
                    one([sys.argv[0]] + line.split())
    elif len(sys.argv) == 10:
        one(sys.argv)
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main()
