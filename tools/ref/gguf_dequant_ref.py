#!/usr/bin/env python3
"""gguf_dequant_ref.py: reference values for core/formats/gguf_quants.c from an independent
implementation, the PyPI `gguf` package's numpy dequantizers (gguf.quants.dequantize), for
every ggml type that package decodes.  tests/test_gguf_quants.c runs it and requires lmpress to
reproduce each value bit for bit.

Run (from the repository root; gguf needs only numpy; tools/test.sh unpacks it into build/pydeps):

    PYTHONPATH=build/pydeps /usr/bin/python3 tools/ref/gguf_dequant_ref.py OUTDIR

It writes into OUTDIR:
  quants.gguf  one 2-D tensor per type ("q5_0", "iq2_xxs", ...), written by gguf.GGUFWriter from
               raw block bytes: seeded random bytes in which the fields ggml reads as floats are
               set to finite values, so that nothing is NaN or infinite (fp16 scales and mins of
               both signs between 2^-16 and 4, subnormals included; MXFP4's E8M0 exponents
               0..160; NVFP4's UE4M3 scales may be any byte, all are finite); the plain F32, F16
               and BF16 tensors hold random finite values;
  quants.f32   the expected values: gguf.quants.dequantize of each tensor's bytes as GGUFReader
               reads them back, float32 little-endian, the tensors one after another;
  model.gguf / refused.gguf
               a tiny Llama model (one block, dim 256) whose seven linears are stored in seven
               of these types; in refused.gguf blk.0.ffn_up.weight is Q8_K instead (ggml's
               intermediate of its dot products, never written by llama-quantize, which lmpress
               refuses).
and prints one line per tensor of quants.gguf, in the order of quants.f32:
    tensor NAME TYPE N_ELEMENTS
The output is deterministic (fixed seed)."""
import os
import sys

import numpy as np

try:
    import gguf
    from gguf import GGMLQuantizationType as T
    from gguf.quants import dequantize
except ImportError:
    sys.exit("gguf_dequant_ref.py: the gguf package is missing (PYTHONPATH=build/pydeps, see tools/test.sh)")

# type -> byte offsets of its fp16 fields in a block (ggml-common.h's block_* structs)
HALF_FIELDS = {
    T.Q4_0: [0], T.Q4_1: [0, 2], T.Q5_0: [0], T.Q5_1: [0, 2], T.Q8_0: [0],
    T.Q2_K: [80, 82], T.Q3_K: [108], T.Q4_K: [0, 2], T.Q5_K: [0, 2], T.Q6_K: [208],
    T.IQ2_XXS: [0], T.IQ2_XS: [0], T.IQ2_S: [0], T.IQ3_XXS: [0], T.IQ3_S: [0], T.IQ1_S: [0],
    T.IQ1_M: [], T.IQ4_NL: [0], T.IQ4_XS: [0], T.TQ1_0: [52], T.TQ2_0: [64],
    T.MXFP4: [], T.NVFP4: [],
}
PLAIN = [T.F32, T.F16, T.BF16]
N_VALUES = 65536  # per tensor: 256 super-blocks, 2048 blocks of 32


def random_halves(rng, n):
    """fp16 bit patterns of finite values of both signs, 2^-16 .. 4 (some subnormal)."""
    mag = np.exp2(rng.uniform(-16, 2, n)).astype(np.float16)
    sign = np.where(rng.randint(0, 2, n) == 1, np.uint16(0x8000), np.uint16(0))
    return mag.view(np.uint16) | sign


def put_halves(blocks, offset, bits):
    blocks[:, offset] = (bits & 0xFF).astype(np.uint8)
    blocks[:, offset + 1] = (bits >> 8).astype(np.uint8)


def random_blocks(rng, qt):
    block, size = gguf.GGML_QUANT_SIZES[qt]
    nb = N_VALUES // block
    b = rng.randint(0, 256, size=(nb, size)).astype(np.uint8)
    if qt == T.F32:
        return (rng.standard_normal(nb) * 100).astype(np.float32).view(np.uint8).reshape(nb, 4)
    if qt == T.F16:
        return random_halves(rng, nb).view(np.uint8).reshape(nb, 2)
    if qt == T.BF16:
        return (rng.standard_normal(nb).astype(np.float32).view(np.uint32) >> 16).astype(np.uint16).view(np.uint8).reshape(nb, 2)
    for off in HALF_FIELDS[qt]:
        put_halves(b, off, random_halves(rng, nb))
    if qt == T.IQ1_M:  # the fp16 d is the top nibbles of the four uint16 scale words (bytes 48..55)
        h = random_halves(rng, nb)
        for k in range(4):
            b[:, 49 + 2 * k] = (b[:, 49 + 2 * k] & 0x0F) | ((((h >> (4 * k)) & 0xF) << 4).astype(np.uint8))
    if qt == T.MXFP4:  # E8M0 exponent 2^(e-128): 0 and 1 are subnormal, large ones overflow
        b[:, 0] = rng.randint(0, 161, nb).astype(np.uint8)
        b[:2, 0] = [0, 1]
    if qt == T.NVFP4:
        b[0, :4] = [0x00, 0x7F, 0x80, 0xFF]  # the zero codes and the largest scale
    return b


def tensor_shape(qt, nbytes_per_block, blocks):
    """A [rows, row bytes] view: 256 values a row for 32-value blocks, 1024 for the rest."""
    block = gguf.GGML_QUANT_SIZES[qt][0]
    cols = 1024 if block > 64 else 256
    return blocks.reshape(N_VALUES // cols, cols // block * nbytes_per_block)


def write_quants(out_dir):
    rng = np.random.RandomState(20261201)
    types = PLAIN + list(HALF_FIELDS)
    wr = gguf.GGUFWriter(os.path.join(out_dir, "quants.gguf"), "lmpress-test")
    want = {}
    for qt in types:
        b = random_blocks(rng, qt)
        raw = tensor_shape(qt, b.shape[1], b)
        name = qt.name.lower()
        wr.add_tensor(name, raw, raw_dtype=qt)
        want[name] = raw
    wr.write_header_to_file()
    wr.write_kv_data_to_file()
    wr.write_tensors_to_file()
    wr.close()
    rd = gguf.GGUFReader(os.path.join(out_dir, "quants.gguf"))
    with open(os.path.join(out_dir, "quants.f32"), "wb") as f:
        for t in rd.tensors:
            data = np.asarray(t.data).view(np.uint8).reshape(want[t.name].shape)
            if not np.array_equal(data, want[t.name]):
                sys.exit("gguf_dequant_ref.py: %s reads back different bytes" % t.name)
            vals = dequantize(data, t.tensor_type).astype("<f4").ravel()
            if vals.size != N_VALUES or not np.all(np.isfinite(vals)):
                sys.exit("gguf_dequant_ref.py: %s: %d values, not all finite" % (t.name, vals.size))
            f.write(vals.tobytes())
            print("tensor %s %s %d" % (t.name, t.tensor_type.name, vals.size))


# the tiny model's linears: name -> type (one of each family; [out, in] = [256, 256])
MODEL_LINEARS = {"attn_q": T.Q5_0, "attn_k": T.Q3_K, "attn_v": T.IQ4_NL, "attn_output": T.Q2_K,
                 "ffn_gate": T.IQ2_XXS, "ffn_up": T.IQ4_XS, "ffn_down": T.Q5_K}


def write_model(path, ffn_up_type):
    rng = np.random.RandomState(7)
    dim, vocab = 256, 16
    wr = gguf.GGUFWriter(path, "llama")
    wr.add_block_count(1)
    wr.add_embedding_length(dim)
    wr.add_feed_forward_length(dim)
    wr.add_head_count(4)
    wr.add_head_count_kv(4)
    wr.add_context_length(64)
    wr.add_layer_norm_rms_eps(1e-5)
    wr.add_tensor("token_embd.weight", (rng.standard_normal((vocab, dim)) * 0.1).astype(np.float32))
    wr.add_tensor("output_norm.weight", np.ones(dim, dtype=np.float32))
    for norm in ("attn_norm", "ffn_norm"):
        wr.add_tensor("blk.0.%s.weight" % norm, np.ones(dim, dtype=np.float32))
    for name, qt in MODEL_LINEARS.items():
        qt = ffn_up_type if name == "ffn_up" else qt
        block, size = gguf.GGML_QUANT_SIZES[qt]
        b = rng.randint(0, 256, size=(dim * dim // block, size)).astype(np.uint8)
        for off in HALF_FIELDS.get(qt, [0]):
            put_halves(b, off, np.full(b.shape[0], 0x2000, dtype=np.uint16))  # 2^-7
        wr.add_tensor("blk.0.%s.weight" % name, b.reshape(dim, -1), raw_dtype=qt)
    wr.write_header_to_file()
    wr.write_kv_data_to_file()
    wr.write_tensors_to_file()
    wr.close()


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    out_dir = sys.argv[1]
    os.makedirs(out_dir, exist_ok=True)
    write_quants(out_dir)
    write_model(os.path.join(out_dir, "model.gguf"), MODEL_LINEARS["ffn_up"])
    write_model(os.path.join(out_dir, "refused.gguf"), T.Q8_K)


if __name__ == "__main__":
    main()
