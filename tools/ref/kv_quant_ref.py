#!/usr/bin/env python3
"""kv_quant_ref.py: the KV cache's quantization as compressed-tensors simulates it, for
tests/test_kv_cache.c (lmpress's core/model/kv_quant.c must equal it bit for bit).

    python3 tools/ref/kv_quant_ref.py [--numpy] CASES.txt

Each line of CASES.txt is one case:

    TYPE GRAN SCALES T H HD CAL_K.f32 CAL_V.f32 K.f32 V.f32 OUT_K.f32 OUT_V.f32 OUT_SCALES.f32

TYPE fp8_e4m3, int8 or int4; GRAN tensor or head (compressed-tensors' strategy "tensor" or
"attn_head") or token (each token's HD values of one head, dynamic only: QuaRot's and SpinQuant's
4-bit cache); SCALES static or dynamic.  The .f32 files hold T x (H * HD) little-endian floats, token-major,
head h in columns [h * HD, (h + 1) * HD): K after RoPE and V as attention reads them.  Static
scales come from CAL_K / CAL_V (the calibration's K and V: their min and max per slice through
calculate_qparams, as llm-compressor's observer hands them to it); K and V are then quantized and
dequantized with them, the zero point absent (the attention module's k_scale and v_scale).
Dynamic scales come from K and V themselves (compute_dynamic_scales_and_zp, whose zero point 0 is
added).  OUT_SCALES gets the K scales then the V scales (nothing for dynamic).

Default: compressed-tensors 0.20.1 itself (QuantizationArgs, calculate_qparams, fake_quantize,
compute_dynamic_scales_and_zp) on tensors shaped as transformers hands them over, [1, H, T, HD];
needs torch and compressed-tensors (LMP_CT_PYTHON).  compressed-tensors refuses dynamic attn_head
("Dynamic quantization is only supported for ...") and has no per-token-and-head KV strategy: those
cases are written by --numpy alone.

--numpy: the same formulas written out with numpy only (Debian's python3-numpy), independently of
torch: scale = amax / 448, amax / 127.5 or amax / 7.5 (f32 eps for 0), x / scale in f32, clamp,
then E4M3's nearest value (ties to the even mantissa) from a table of all 127 non-negative finite
codes, or np.rint (half to even) within [-128, 127] or [-8, 7]; times scale in f32."""
import sys

import numpy as np

F32_EPS = np.float32(np.finfo(np.float32).eps)


def e4m3_table():
    """All finite non-negative E4M3 (fn) values, ascending: codes 0x00..0x7E."""
    vals = []
    for code in range(0x7F):
        e, m = code >> 3, code & 7
        vals.append(m / 8.0 * 2.0 ** -6 if e == 0 else (1 + m / 8.0) * 2.0 ** (e - 7))
    return np.array(vals, dtype=np.float64)


E4M3 = e4m3_table()


def e4m3_round(q):
    """q (f32 array, already in [-448, 448]) to the nearest E4M3 value, ties to the even code."""
    a = np.abs(q.astype(np.float64))
    hi = np.searchsorted(E4M3, a, side="left").clip(0, len(E4M3) - 1)
    lo = (hi - 1).clip(0, None)
    dlo, dhi = a - E4M3[lo], E4M3[hi] - a
    pick = np.where(dlo < dhi, lo, np.where(dhi < dlo, hi, np.where(lo % 2 == 0, lo, hi)))
    r = E4M3[pick].astype(np.float32)
    return np.where(np.signbit(q), -r, r).astype(np.float32)


INT_RANGE = {"int8": (-128.0, 127.0), "int4": (-8.0, 7.0)}


def np_scale(kind, amax):
    s = (amax / np.float32({"fp8_e4m3": 448.0, "int8": 127.5, "int4": 7.5}[kind])).astype(np.float32)
    return np.where(s == 0, F32_EPS, s).astype(np.float32)


def np_fake(kind, x, s, add_zero):
    q = (x / s).astype(np.float32)
    if add_zero:
        q = (q + np.float32(0.0)).astype(np.float32)
    if kind == "fp8_e4m3":
        r = e4m3_round(np.clip(q, np.float32(-448.0), np.float32(448.0)))
    else:
        lo, hi = INT_RANGE[kind]
        r = np.rint(np.clip(q, np.float32(lo), np.float32(hi))).astype(np.float32)
    return (r * s).astype(np.float32)


def np_case(kind, gran, scales, cal, x):
    """x, cal: [H, T, HD] f32.  Returns (dequantized [H, T, HD], scales or None)."""
    H = x.shape[0]
    src = x if scales == "dynamic" else cal
    if gran == "token":  # [H, T, 1]: each token's head_dim values
        sb = np_scale(kind, np.abs(src).max(axis=2, keepdims=True).astype(np.float32))
        return np_fake(kind, x, sb, True), None
    amax = np.abs(src).reshape(H, -1).max(axis=1) if gran == "head" else np.abs(src).max().reshape(1)
    s = np_scale(kind, amax.astype(np.float32))
    sb = s.reshape(-1, 1, 1) if gran == "head" else s.reshape(1, 1, 1)
    return np_fake(kind, x, sb, scales == "dynamic"), (None if scales == "dynamic" else s)


def ct_case(kind, gran, scales, cal, x):
    import torch
    from compressed_tensors.quantization import QuantizationArgs
    from compressed_tensors.quantization.lifecycle.forward import fake_quantize
    from compressed_tensors.quantization.utils import calculate_qparams, compute_dynamic_scales_and_zp

    args = QuantizationArgs(num_bits=4 if kind == "int4" else 8, type="float" if kind == "fp8_e4m3" else "int",
                            strategy="attn_head" if gran == "head" else "tensor", symmetric=True,
                            dynamic=scales == "dynamic")
    t = torch.from_numpy(x.copy()).unsqueeze(0)  # [1, H, T, HD]
    if scales == "dynamic":
        s, zp = compute_dynamic_scales_and_zp(value=t, args=args, module=torch.nn.Module())
        return fake_quantize(x=t, scale=s, zero_point=zp, args=args)[0].numpy(), None
    c = torch.from_numpy(cal.copy()).unsqueeze(0)
    if gran == "head":  # the observer's per-head min and max, shaped as k_scale: [H, 1, 1]
        mn, mx = c.amin(dim=(0, 2, 3)).reshape(-1, 1, 1), c.amax(dim=(0, 2, 3)).reshape(-1, 1, 1)
    else:
        mn, mx = c.amin().reshape(1), c.amax().reshape(1)
    s, _ = calculate_qparams(mn, mx, args)
    out = fake_quantize(x=t, scale=s, zero_point=None, args=args)[0].numpy()
    return out, s.reshape(-1).numpy().astype(np.float32)


def load(path, T, H, HD):
    a = np.fromfile(path, dtype="<f4")
    if a.size != T * H * HD:
        sys.exit("kv_quant_ref: %s holds %d floats, expected %d" % (path, a.size, T * H * HD))
    return a.reshape(T, H, HD).transpose(1, 0, 2).copy()  # [H, T, HD]


def one(fields, use_numpy):
    kind, gran, scales = fields[0], fields[1], fields[2]
    T, H, HD = int(fields[3]), int(fields[4]), int(fields[5])
    cal_k, cal_v, k, v = (load(p, T, H, HD) for p in fields[6:10])
    ref = np_case if use_numpy or gran == "token" or (scales == "dynamic" and gran == "head") else ct_case
    out_scales = []
    for x, cal, dst in ((k, cal_k, fields[10]), (v, cal_v, fields[11])):
        y, s = ref(kind, gran, scales, cal, x)
        np.ascontiguousarray(y.transpose(1, 0, 2), dtype="<f4").tofile(dst)
        if s is not None:
            out_scales.append(np.asarray(s, dtype="<f4"))
    (np.concatenate(out_scales) if out_scales else np.zeros(0, "<f4")).astype("<f4").tofile(fields[12])
    return "%s %s %s: %s" % (kind, gran, scales, "numpy" if ref is np_case else "compressed-tensors")


def main():
    argv = sys.argv[1:]
    use_numpy = bool(argv) and argv[0] == "--numpy"
    if use_numpy:
        argv = argv[1:]
    if len(argv) != 1:
        sys.exit(__doc__)
    with open(argv[0]) as f:
        for line in f:
            if line.strip():
                print(one(line.split(), use_numpy))


if __name__ == "__main__":
    main()
