#!/usr/bin/env python3
"""llama2c_to_gguf.py: a llama2.c checkpoint (stories260K.bin + tok512.bin) written as a GGUF file
with the PyPI `gguf` package (llama.cpp's gguf-py), standing in for "another tool's file" in the
tests of external variants (tests/test_external.c).

    PYTHONPATH=build/pydeps /usr/bin/python3 tools/ref/llama2c_to_gguf.py MODEL.bin TOK.bin OUT.gguf \
        [--type F32|Q8_0] [--change-token ID TEXT] [--head-scale S] [--norm-scale S] [--weight-err FILE]

--type Q8_0 quantizes, with gguf.quants.quantize, every block linear whose input size is a multiple
of Q8_0's block of 32 (stories260K's ffn_down, 172 inputs, stays F32, as llama.cpp falls back for
such rows); embeddings and norms stay F32.  --change-token replaces one vocabulary entry, to make
a file whose vocabulary differs from the base's.  --head-scale writes an output.weight (stories260K
shares its classifier with the embedding, so the file has none otherwise) equal to the embedding
times S, and --norm-scale multiplies output_norm.weight by S: with S a power of two either scales
every logit by exactly S, so a file made with one or the other must score the same, and differently
from the base, when its own head and final norm are used.  --weight-err FILE writes, as a JSON list
in lmpress's order (per block q, k, v, o, gate, up, down), each block linear's relative weight error
||W' - W||^2 / ||W||^2 in float64, W' what the file stores (gguf.quants.dequantize of its Q8_0
codes): the golden numbers of the HTML report's error map (tests/test_report_html.c).  llama2.c and GGUF both rotate adjacent pairs
(2i, 2i+1) in RoPE, so q and k are written without any permutation."""
import argparse
import json
import struct
import sys

import numpy as np
import gguf


def read_model(path):
    with open(path, "rb") as f:
        data = f.read()
    dim, hidden, L, H, KV, vocab, seq = struct.unpack("<7i", data[:28])
    shared = vocab > 0
    vocab = abs(vocab)
    a = np.frombuffer(data, dtype="<f4", offset=28)
    kv = dim * KV // H
    hd = dim // H
    p = 0

    def take(*shape):
        nonlocal p
        n = int(np.prod(shape))
        out = a[p:p + n].reshape(shape)
        p += n
        return out

    w = {"emb": take(vocab, dim), "rms_att": take(L, dim), "wq": take(L, dim, dim), "wk": take(L, kv, dim),
         "wv": take(L, kv, dim), "wo": take(L, dim, dim), "rms_ffn": take(L, dim), "w1": take(L, hidden, dim),
         "w2": take(L, dim, hidden), "w3": take(L, hidden, dim), "rms_final": take(dim)}
    take(seq, hd // 2)  # freq_cis_real
    take(seq, hd // 2)  # freq_cis_imag
    w["cls"] = None if shared else take(vocab, dim)
    return dict(dim=dim, hidden=hidden, L=L, H=H, KV=KV, vocab=vocab, seq=seq), w


def read_tokenizer(path, vocab):
    tokens, scores = [], []
    with open(path, "rb") as f:
        f.read(4)  # max_token_length
        for _ in range(vocab):
            score, n = struct.unpack("<fi", f.read(8))
            tokens.append(f.read(n).decode("utf-8", "surrogateescape"))
            scores.append(score)
    return tokens, scores


def llama_vocab(tokens):
    """A llama2.c vocabulary as a GGUF "llama" one: its pieces and token types.  lmpress's GGUF
    exporter (core/export/gguf_tokenizer.c) makes the same choices, and
    tools/ref/gguf_export_check.py checks that it does."""
    types = []
    for i, t in enumerate(tokens):
        if i == 0:
            types.append(2)  # UNKNOWN
        elif i in (1, 2):
            types.append(3)  # CONTROL
        elif len(t) == 6 and t.startswith("<0x") and t.endswith(">"):
            types.append(6)  # BYTE
        else:
            types.append(1)  # NORMAL
    # llama2.c's tokenizer.bin holds spaces; a GGUF "llama" vocabulary holds SentencePiece's U+2581
    pieces = [t.replace(" ", "\u2581") for t in tokens]
    return pieces, types


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("tokenizer")
    ap.add_argument("out")
    ap.add_argument("--type", default="F32", choices=["F32", "Q8_0"])
    ap.add_argument("--change-token", nargs=2, metavar=("ID", "TEXT"))
    ap.add_argument("--head-scale", type=float)
    ap.add_argument("--norm-scale", type=float, default=1.0)
    ap.add_argument("--weight-err")
    args = ap.parse_args()
    h, w = read_model(args.model)
    tokens, scores = read_tokenizer(args.tokenizer, h["vocab"])
    if args.change_token:
        tokens[int(args.change_token[0])] = args.change_token[1]
    pieces, types = llama_vocab(tokens)

    wr = gguf.GGUFWriter(args.out, "llama")
    wr.add_string("general.name", "stories260K")
    wr.add_uint32("llama.block_count", h["L"])
    wr.add_uint32("llama.embedding_length", h["dim"])
    wr.add_uint32("llama.feed_forward_length", h["hidden"])
    wr.add_uint32("llama.attention.head_count", h["H"])
    wr.add_uint32("llama.attention.head_count_kv", h["KV"])
    wr.add_uint32("llama.context_length", h["seq"])
    wr.add_float32("llama.rope.freq_base", 10000.0)
    wr.add_float32("llama.attention.layer_norm_rms_epsilon", 1e-5)
    wr.add_string("tokenizer.ggml.model", "llama")
    wr.add_array("tokenizer.ggml.tokens", pieces)
    wr.add_array("tokenizer.ggml.scores", [float(s) for s in scores])
    wr.add_array("tokenizer.ggml.token_type", types)
    wr.add_uint32("tokenizer.ggml.bos_token_id", 1)
    wr.add_uint32("tokenizer.ggml.eos_token_id", 2)

    errors = {}

    def linear(name, a):
        a = np.ascontiguousarray(a, dtype=np.float32)
        stored = a
        if args.type == "Q8_0" and a.shape[1] % 32 == 0:
            q = gguf.quants.quantize(a, gguf.GGMLQuantizationType.Q8_0)
            wr.add_tensor(name, q, raw_dtype=gguf.GGMLQuantizationType.Q8_0)
            stored = gguf.quants.dequantize(q, gguf.GGMLQuantizationType.Q8_0).reshape(a.shape)
        else:
            wr.add_tensor(name, a)
        d = stored.astype(np.float64) - a.astype(np.float64)
        errors[name] = float(np.sum(d * d) / np.sum(a.astype(np.float64) ** 2))

    wr.add_tensor("token_embd.weight", np.ascontiguousarray(w["emb"]))
    for b in range(h["L"]):
        wr.add_tensor("blk.%d.attn_norm.weight" % b, np.ascontiguousarray(w["rms_att"][b]))
        wr.add_tensor("blk.%d.ffn_norm.weight" % b, np.ascontiguousarray(w["rms_ffn"][b]))
        linear("blk.%d.attn_q.weight" % b, w["wq"][b])
        linear("blk.%d.attn_k.weight" % b, w["wk"][b])
        linear("blk.%d.attn_v.weight" % b, w["wv"][b])
        linear("blk.%d.attn_output.weight" % b, w["wo"][b])
        linear("blk.%d.ffn_gate.weight" % b, w["w1"][b])
        linear("blk.%d.ffn_down.weight" % b, w["w2"][b])
        linear("blk.%d.ffn_up.weight" % b, w["w3"][b])
    wr.add_tensor("output_norm.weight", np.ascontiguousarray(w["rms_final"] * np.float32(args.norm_scale)))
    if w["cls"] is not None:
        wr.add_tensor("output.weight", np.ascontiguousarray(w["cls"]))
    elif args.head_scale is not None:
        wr.add_tensor("output.weight", np.ascontiguousarray(w["emb"] * np.float32(args.head_scale)))
    wr.write_header_to_file()
    wr.write_kv_data_to_file()
    wr.write_tensors_to_file()
    wr.close()
    if args.weight_err:
        order = ["attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate", "ffn_up", "ffn_down"]
        with open(args.weight_err, "w") as f:
            json.dump([errors["blk.%d.%s.weight" % (b, r)] for b in range(h["L"]) for r in order], f)


if __name__ == "__main__":
    sys.exit(main())
