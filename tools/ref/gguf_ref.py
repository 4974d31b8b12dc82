#!/usr/bin/env python3
"""gguf_ref.py: golden files for core/formats/gguf.c from an independent reference, the PyPI `gguf`
package (llama.cpp's own gguf-py: GGUFWriter, GGUFReader, gguf.quants.quantize/dequantize).

Setup (no network beyond the already-downloaded wheel; gguf needs only numpy, which Debian's
/usr/bin/python3 has):

    pip install --quiet --no-deps --target /tmp/refpy /tmp/ggufpkg/gguf-0.19.0-py3-none-any.whl
    # (the wheel itself: pip download --no-deps gguf==0.19.0 -d /tmp/ggufpkg)

Regenerate the golden files (from the repository root):

    # (a)+(b) tests/golden/dequant_fixture.gguf and tests/golden/dequant_fixture.txt
    PYTHONPATH=/tmp/refpy /usr/bin/python3 tools/ref/gguf_ref.py fixture

    # (c) tests/golden/smollm2_dequant.txt (needs the model: tools/fetch_smollm2.sh)
    PYTHONPATH=/tmp/refpy /usr/bin/python3 tools/ref/gguf_ref.py smollm2

Both are deterministic (fixed numpy seeds), so rerunning gives identical files.  tests/test_gguf.c
reads them and requires core/formats/gguf.c to reproduce every value bit for bit (the sums to 1e-6).

fixture: a small GGUF v3 file written by gguf.GGUFWriter (default alignment 32) with one tensor
of each type core/formats/gguf.c dequantizes.  Q8_0, Q4_0, Q4_1 and BF16 bytes come from
gguf.quants.quantize of seeded random data (with a zero row, an outlier row and a constant
row); F16 and F32 hold hand-picked special values (signed zeros, subnormals, infinities, quiet
NaNs, the largest finite values) plus random ones; Q4_K and Q6_K have no numpy quantizer, so
their blocks are random bytes with sane fp16 scale fields.  Expected values are
gguf.quants.dequantize of the tensor bytes as GGUFReader reads them back from the file.

dequant_fixture.txt format ('#' lines are comments; values are float32 bit patterns in hex,
so NaNs and signed zeros are exact):
    tensor NAME TYPE N_ELEMENTS N_DIMS NE0 [NE1 ...]      (ne[0] fastest, as in GGUF)
    then N_ELEMENTS hex words, 8 per line

seeds DIR: two small extra seed inputs for the fuzzer (tests/fuzz/README.md): every metadata
value type, general.alignment = 64, one small tensor of each dequantizable type plus an I8 one
(parsed, not dequantized); written as v3 and, with the version field patched (the layouts are
identical), as v2.  Not golden files: nothing is compared against them.

smollm2: for a few tensors of models/cache/SmolLM2-135M-Instruct.Q4_1.gguf, one line each:
    tensor NAME TYPE N_ELEMENTS SUM V0 ... V7
SUM is the float64 sum of all dequantized values (%.17g), V0..V7 the first 8 values as hex
float32 bit patterns.
"""
import os
import sys

import numpy as np

try:
    import gguf
    from gguf import GGMLQuantizationType as T
    from gguf.quants import dequantize, quantize
except ImportError:
    sys.exit("gguf_ref.py: the gguf package is missing; see the setup lines at the top of this file")

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
GOLDEN = os.path.join(ROOT, "tests", "golden")
FIXTURE = os.path.join(GOLDEN, "dequant_fixture.gguf")
FIXTURE_TXT = os.path.join(GOLDEN, "dequant_fixture.txt")
SMOLLM2 = os.path.join(ROOT, "models", "cache", "SmolLM2-135M-Instruct.Q4_1.gguf")
SMOLLM2_TXT = os.path.join(GOLDEN, "smollm2_dequant.txt")
SMOLLM2_TENSORS = [
    "token_embd.weight",       # Q8_0
    "blk.0.attn_norm.weight",  # F32
    "blk.0.attn_q.weight",     # Q4_1
    "blk.0.ffn_down.weight",   # Q4_1
    "blk.29.ffn_up.weight",    # Q4_1
    "output_norm.weight",      # F32
]


def hexbits(a):
    return ["%08x" % int(u) for u in np.ascontiguousarray(a, dtype=np.float32).view(np.uint32).ravel()]


def f16_bits(bits):
    return np.array(bits, dtype=np.uint16).view(np.float16)


def block_rows(rng, rows, cols):
    """Random weights with awkward rows: all zero, one large outlier, constant (Q4_1 d = 0)."""
    w = (rng.standard_normal((rows, cols)) * 0.05).astype(np.float32)
    w[1, :] = 0.0
    w[2, 5] = 3.5
    w[3, :32] = -0.25
    return w


def fixture():
    rng = np.random.RandomState(20240611)
    tensors = []  # (name, qtype, numpy shape [.., ne1, ne0], uint8 bytes or typed array)

    for name, qt in (("q8_0", T.Q8_0), ("q4_0", T.Q4_0), ("q4_1", T.Q4_1)):
        w = block_rows(rng, 4, 64)
        tensors.append((name, qt, w.shape, quantize(w, qt)))

    # BF16 through gguf's own (round-to-nearest-even, NaN-quieting) converter, specials included
    b = (rng.standard_normal(64) * 10).astype(np.float32)
    b[:8] = [0.0, -0.0, np.inf, -np.inf, np.nan, 1e-40, -3.0e38, 1.0]
    tensors.append(("bf16", T.BF16, (2, 32), quantize(b.reshape(2, 32), T.BF16)))

    # F16: every class of half-precision value
    special = [0x0000, 0x8000, 0x0001, 0x8001, 0x03ff, 0x0400, 0x3c00, 0xbc00, 0x7bff, 0xfbff,
               0x7c00, 0xfc00, 0x7e00, 0xfe00, 0x7e01, 0x3555]
    h = np.concatenate([f16_bits(special), (rng.standard_normal(48) * 4).astype(np.float16)])
    tensors.append(("f16", T.F16, (64,), h))

    f = (rng.standard_normal(64) * 100).astype(np.float32)
    f[:8] = np.array([0x00000000, 0x80000000, 0x00000001, 0x7f7fffff, 0x7f800000, 0xff800000,
                      0x7fc00000, 0x3f800000], dtype=np.uint32).view(np.float32)
    tensors.append(("f32", T.F32, (2, 32), f.reshape(2, 32)))

    # K-quants: random payload bytes, fp16 scales set to small positive values
    qk = rng.randint(0, 256, size=(2, 144)).astype(np.uint8)
    for i in range(2):
        qk[i, 0:2] = np.array([0.0123 * (i + 1)], dtype=np.float16).view(np.uint8)  # d
        qk[i, 2:4] = np.array([0.0045 * (i + 1)], dtype=np.float16).view(np.uint8)  # dmin
    tensors.append(("q4_k", T.Q4_K, (2, 256), qk))
    q6 = rng.randint(0, 256, size=(2, 210)).astype(np.uint8)
    for i in range(2):
        q6[i, 208:210] = np.array([0.0021 * (i + 1)], dtype=np.float16).view(np.uint8)  # d
    tensors.append(("q6_k", T.Q6_K, (2, 256), q6))

    w = gguf.GGUFWriter(FIXTURE, "lmpress-test")
    w.add_string("general.name", "dequant fixture")
    w.add_uint32("test.count", 7)
    w.add_float32("test.scale", 0.5)
    w.add_array("test.words", ["alpha", "beta", "gamma"])
    for name, qt, shape, data in tensors:
        if data.dtype == np.uint8:
            w.add_tensor(name, data, raw_shape=data.shape, raw_dtype=qt)
        else:
            w.add_tensor(name, data)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()

    # Expected values from the bytes as written, read back by gguf's reader.
    r = gguf.GGUFReader(FIXTURE)
    out = ["# dequant_fixture.txt: written by tools/ref/gguf_ref.py fixture (gguf %s, numpy %s)."
           % (getattr(gguf, "__version__", "0.19.0"), np.__version__),
           "# Expected dequantized values of tests/golden/dequant_fixture.gguf as float32 bits.",
           "# tensor NAME TYPE N_ELEMENTS N_DIMS NE0 [NE1 ...], then the values 8 per line."]
    for t in r.tensors:
        vals = dequantize(t.data, t.tensor_type).astype(np.float32).ravel()
        ne = [int(x) for x in t.shape]  # GGUFReader's shape is GGUF order: ne[0] first
        assert vals.size == int(np.prod(ne)), (t.name, vals.size, ne)
        out.append("tensor %s %s %d %d %s" % (t.name, t.tensor_type.name, vals.size, len(ne),
                                               " ".join(str(x) for x in ne)))
        bits = hexbits(vals)
        out += [" ".join(bits[i:i + 8]) for i in range(0, len(bits), 8)]
    with open(FIXTURE_TXT, "w") as fp:
        fp.write("\n".join(out) + "\n")
    print("wrote %s (%d bytes) and %s" % (FIXTURE, os.path.getsize(FIXTURE), FIXTURE_TXT))


def smollm2():
    if not os.path.exists(SMOLLM2):
        sys.exit("gguf_ref.py: %s is missing: run tools/fetch_smollm2.sh" % SMOLLM2)
    r = gguf.GGUFReader(SMOLLM2)
    by_name = {t.name: t for t in r.tensors}
    out = ["# smollm2_dequant.txt: written by tools/ref/gguf_ref.py smollm2 (gguf-py dequantize).",
           "# tensor NAME TYPE N_ELEMENTS SUM(float64 of all values) FIRST_8_VALUES(float32 bits)"]
    for name in SMOLLM2_TENSORS:
        t = by_name[name]
        vals = dequantize(t.data, t.tensor_type).astype(np.float32).ravel()
        s = float(np.sum(vals.astype(np.float64)))
        out.append("tensor %s %s %d %.17g %s" % (name, t.tensor_type.name, vals.size, s,
                                                  " ".join(hexbits(vals[:8]))))
        out.append("#   first values: %s" % " ".join("%.9g" % v for v in vals[:8]))
    with open(SMOLLM2_TXT, "w") as fp:
        fp.write("\n".join(out) + "\n")
    print("wrote %s" % SMOLLM2_TXT)


def seeds(outdir):
    os.makedirs(outdir, exist_ok=True)
    rng = np.random.RandomState(7)
    path = os.path.join(outdir, "seed_v3_align64.gguf")
    w = gguf.GGUFWriter(path, "llama")
    w.add_custom_alignment(64)
    w.add_uint8("s.u8", 200)
    w.add_int8("s.i8", -100)
    w.add_uint16("s.u16", 60000)
    w.add_int16("s.i16", -30000)
    w.add_uint32("s.u32", 4000000000)
    w.add_int32("s.i32", -2000000000)
    w.add_float32("s.f32", 0.25)
    w.add_bool("s.bool", True)
    w.add_string("s.str", "hello")
    w.add_uint64("s.u64", 2 ** 63 + 5)
    w.add_int64("s.i64", -(2 ** 62))
    w.add_float64("s.f64", 1e-300)
    w.add_array("a.str", ["a", "bc", ""])
    w.add_array("a.i32", [1, -2, 3])
    w.add_array("a.f32", [0.5, 1.5])
    for name, qt in (("q8_0", T.Q8_0), ("q4_0", T.Q4_0), ("q4_1", T.Q4_1), ("bf16", T.BF16)):
        x = rng.standard_normal((2, 32)).astype(np.float32)
        w.add_tensor(name, quantize(x, qt), raw_shape=quantize(x, qt).shape, raw_dtype=qt)
    w.add_tensor("f16", rng.standard_normal(8).astype(np.float16))
    w.add_tensor("f32", rng.standard_normal(8).astype(np.float32))
    w.add_tensor("i8", np.arange(8, dtype=np.int8))
    w.add_tensor("q4_k", rng.randint(0, 256, size=(1, 144)).astype(np.uint8), raw_shape=(1, 144),
                 raw_dtype=T.Q4_K)
    w.add_tensor("q6_k", rng.randint(0, 256, size=(1, 210)).astype(np.uint8), raw_shape=(1, 210),
                 raw_dtype=T.Q6_K)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    data = bytearray(open(path, "rb").read())
    data[4:8] = (2).to_bytes(4, "little")
    with open(os.path.join(outdir, "seed_v2_align64.gguf"), "wb") as fp:
        fp.write(data)
    print("wrote 2 seeds (%d bytes each) into %s" % (len(data), outdir))


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "seeds":
        seeds(sys.argv[2])
    elif len(sys.argv) == 2 and sys.argv[1] in ("fixture", "smollm2"):
        {"fixture": fixture, "smollm2": smollm2}[sys.argv[1]]()
    else:
        sys.exit("usage: gguf_ref.py fixture|smollm2|seeds DIR   (see the top of this file)")
