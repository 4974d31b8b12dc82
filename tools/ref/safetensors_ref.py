#!/usr/bin/python3
"""safetensors_ref.py — writes the safetensors test fixtures by hand, independently of the C code.

No torch or safetensors package is used: the files are laid out here with struct + json from the
format's description (uint64 little-endian header length N, N bytes of JSON header padded with
spaces, then the data section; "data_offsets" relative to the data section), and the expected
f32 values come from numpy (numpy's own float16 -> float32 conversion; bfloat16 values are
built as float32 numbers whose low 16 bits are zero, so the bf16 bits are their top half).

Regenerating the fixtures (from the repository root; Debian's /usr/bin/python3 has numpy):
    /usr/bin/python3 tools/ref/safetensors_ref.py
which rewrites tests/golden/safetensors/ :
    single/model.safetensors                         F32, F16, BF16, a scalar, an empty and an
                                                     I8 tensor, __metadata__; header keys in a
                                                     different order from the data layout
    sharded/model.safetensors.index.json             {"metadata": ..., "weight_map": ...}
    sharded/model-0000{1,2}-of-00002.safetensors     two shards; the second one's header is not
                                                     padded, so its data is not 4-byte aligned
    expected.txt                                     what tests/test_safetensors.c checks

expected.txt format ('#' lines are comments):
    checkpoint DIR N_TENSORS
    tensor DIR NAME DTYPE SHARD_FILE NDIM DIM... NUMEL
    then, for F32/F16/BF16 tensors only, NUMEL lines "BITS VALUE": BITS the expected float32
    bit pattern (8 hex digits, compared exactly), VALUE numpy's repr, for people only.
The output is deterministic (fixed values and a fixed RandomState seed).
"""
import json
import os
import struct
import sys

import numpy as np

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
OUT = os.path.join(ROOT, "tests", "golden", "safetensors")


def f16_from_bits(bits):
    return np.array(bits, dtype=np.uint16).view(np.float16)


def bf16_from_f32(values):
    """float32 values that bf16 represents exactly -> (uint16 bits, the float32 values)."""
    f = np.array(values, dtype=np.float32)
    u = f.view(np.uint32)
    assert np.all((u & 0xFFFF) == 0), "value not exactly representable in bfloat16"
    return (u >> 16).astype(np.uint16), f


class T:
    """One tensor: name, dtype string, shape, raw little-endian bytes, expected float32 or None."""

    def __init__(self, name, dtype, shape, raw, expect):
        self.name, self.dtype, self.shape, self.raw, self.expect = name, dtype, list(shape), raw, expect


def t_f32(name, shape, values):
    a = np.array(values, dtype=np.float32).reshape(shape)
    return T(name, "F32", shape, a.astype("<f4").tobytes(), a.astype(np.float32).ravel())


def t_f16(name, shape, bits):
    h = f16_from_bits(bits).reshape(shape)
    return T(name, "F16", shape, h.astype("<f2").tobytes(), h.astype(np.float32).ravel())


def t_bf16(name, shape, values):
    bits, f = bf16_from_f32(values)
    return T(name, "BF16", shape, bits.reshape(shape).astype("<u2").tobytes(), f.ravel())


def write_file(path, tensors, metadata=None, header_order=None, pad=True):
    """Data laid out in list order; header keys in header_order (default: list order)."""
    entries, off, data = {}, 0, b""
    for t in tensors:
        entries[t.name] = {"dtype": t.dtype, "shape": t.shape, "data_offsets": [off, off + len(t.raw)]}
        off += len(t.raw)
        data += t.raw
    header = {}
    if metadata is not None:
        header["__metadata__"] = metadata
    for name in header_order or [t.name for t in tensors]:
        header[name] = entries[name]
    h = json.dumps(header, separators=(",", ":")).encode()
    if pad:  # the reference writer pads the header with spaces to a multiple of 8
        h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        f.write(data)


def bits_of(f):
    return int(np.array([f], dtype=np.float32).view(np.uint32)[0])


def main():
    rs = np.random.RandomState(20240611)
    f32_vals = [0.0, -0.0, 1.5, -3.25e-3, 3.4028235e38, np.float32(1e-45), np.inf, np.nan]
    f16_bits = [0x0000, 0x8000, 0x3C00, 0xC000, 0x3555, 0x7BFF, 0xFBFF, 0x0400,  # 0,-0,1,-2,~1/3,max,-max,min normal
                0x0001, 0x03FF, 0x8200, 0x0155, 0x7C00, 0xFC00, 0x7E00, 0xFE01]  # subnormals, inf, -inf, NaNs
    bf16_vals = [0.0, -0.0, 1.0, -3.0, 2.0 ** -133, (2 - 2.0 ** -7) * 2.0 ** 127, np.inf, -np.inf,
                 np.float32(np.nan)]
    # random bf16: random float32 with the low half cleared
    rnd = (rs.standard_normal(128).astype(np.float32).view(np.uint32) & 0xFFFF0000).view(np.float32)
    single = [
        t_f16("h.f16", [4, 4], f16_bits),
        t_f32("w.f32", [2, 4], f32_vals),
        t_bf16("b.bf16", [3, 3], bf16_vals),
        t_bf16("big.bf16", [16, 8], rnd),
        t_f32("scalar", [], [42.0]),
        t_f32("empty", [0, 4], []),
        T("i8", "I8", [4], bytes([1, 255, 127, 128]), None),
    ]
    os.makedirs(os.path.join(OUT, "single"), exist_ok=True)
    os.makedirs(os.path.join(OUT, "sharded"), exist_ok=True)
    write_file(os.path.join(OUT, "single", "model.safetensors"), single,
               metadata={"format": "pt", "writer": "safetensors_ref.py"},
               header_order=sorted(t.name for t in single))

    shard1 = [
        t_bf16("model.embed.weight", [4, 4], (rs.standard_normal(16).astype(np.float32).view(np.uint32)
                                              & 0xFFFF0000).view(np.float32)),
        t_f16("model.layers.0.w", [2, 5], list(rs.randint(0, 0x7C00, 10))),
    ]
    shard2 = [
        t_f32("model.layers.1.w", [3, 2], rs.standard_normal(6)),
        t_f16("lm_head.weight", [4, 2], [0x3C00, 0xBC00, 0x0001, 0x8001, 0x3800, 0x4000, 0x7BFF, 0x0200]),
    ]
    names = ["model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"]
    write_file(os.path.join(OUT, "sharded", names[0]), shard1, metadata={"format": "pt"})
    write_file(os.path.join(OUT, "sharded", names[1]), shard2, metadata={"format": "pt"}, pad=False)
    weight_map = {t.name: names[0] for t in shard1}
    weight_map.update({t.name: names[1] for t in shard2})
    total = sum(len(t.raw) for t in shard1 + shard2)
    with open(os.path.join(OUT, "sharded", "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {"total_size": total},
                   "weight_map": dict(sorted(weight_map.items()))}, f, indent=2)
        f.write("\n")

    out = [f"# safetensors fixtures, written by tools/ref/safetensors_ref.py (numpy {np.__version__}); "
           "do not edit.",
           "# Rerun: /usr/bin/python3 tools/ref/safetensors_ref.py   (format: see its docstring)"]
    for ckpt, groups in (("single", [("model.safetensors", single)]),
                         ("sharded", [(names[0], shard1), (names[1], shard2)])):
        out.append(f"checkpoint {ckpt} {sum(len(g) for _, g in groups)}")
        for shard, ts in groups:
            for t in ts:
                numel = int(np.prod(t.shape, dtype=np.int64))
                dims = " ".join(str(d) for d in t.shape)
                out.append(f"tensor {ckpt} {t.name} {t.dtype} {shard} {len(t.shape)}"
                           + (f" {dims}" if dims else "") + f" {numel}")
                if t.expect is not None:
                    assert len(t.expect) == numel
                    for v in t.expect:
                        out.append(f"{bits_of(v):08x} {np.float32(v)!r}")
    with open(os.path.join(OUT, "expected.txt"), "w") as f:
        f.write("\n".join(out) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
