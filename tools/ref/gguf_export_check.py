#!/usr/bin/env python3
"""gguf_export_check.py: an independent check of a GGUF file lmpress exported, with the PyPI `gguf`
package (llama.cpp's gguf-py: GGUFReader and gguf.quants.dequantize), for tests/test_export_gguf.c.

    PYTHONPATH=build/pydeps python3 tools/ref/gguf_export_check.py FILE.gguf --manifest M.txt \
        [--ref-gguf SRC.gguf] [--llama2c-tok TOK.bin] [--tokenizer-from SRC.gguf] [--expect KEY=VALUE ...]

The manifest names every tensor the file must hold, one per line:
    NAME TYPE NE0 NE1 REF
TYPE is the ggml type it must have (F32, Q8_0, Q4_0, Q4_1), NE1 is 1 for a vector, and REF is a
raw little-endian f32 file (relative to the manifest's folder) of the NE1 x NE0 values lmpress
held in memory, or "=" for the tensor of the same name in --ref-gguf (dequantized by gguf-py), or
"q8_0:FILE" / "f16:FILE" for those values as gguf-py's Q8_0 quantizer / numpy's float16 store
them (an embedding exported with --embedding-type).
Each tensor, dequantized by gguf-py to f32, must equal its reference bit for bit (F32 tensors
exactly; a quantized weight may read +0 where memory held -0: the file stores the integer code 0),
and the file must hold no other tensor.

Metadata: llama.cpp's keys with the types it reads them as (llama.* counts UINT32,
layer_norm_rms_epsilon and freq_base FLOAT32, general.alignment UINT32 32), tokenizer.ggml.tokens a
STRING array as long as token_embd has rows, scores FLOAT32 and token_type INT32 arrays, merges for
a "gpt2" vocabulary; --expect KEY=VALUE compares a scalar's value as text.  --llama2c-tok: the
vocabulary is tools/ref/llama2c_to_gguf.py's rendering of that llama2.c tokenizer (same pieces,
scores, types, bos 1, eos 2).  --hf-tokenizer: the vocabulary is that tokenizer.json's as llama.cpp's
converter lays it out (tokens by id, added tokens typed CONTROL or USER_DEFINED, holes "[PADn]"
UNUSED, merges "a b").  --tokenizer-from: every tokenizer.* key of that GGUF is in the file
with the same type and bytes.  Prints "ok: ..." and exits 0, or prints every problem and exits 1."""
import argparse
import json
import os
import sys

import numpy as np
import gguf
from gguf import GGMLQuantizationType as QT
from gguf import GGUFValueType as VT

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import llama2c_to_gguf  # noqa: E402  (its vocabulary rendering, to check the exporter agrees)

problems = []


def problem(msg):
    problems.append(msg)


def raw(field):
    """The field's values as bytes, one per element (strings as their bytes)."""
    return [bytes(field.parts[i]) for i in field.data]


def scalar(field):
    v = field.parts[field.data[0]]
    if field.types[0] == VT.STRING:
        return bytes(v).decode("utf-8")
    return v[0].item()


def check_types(fields):
    want = {"general.architecture": [VT.STRING], "general.name": [VT.STRING], "general.alignment": [VT.UINT32],
            "general.file_type": [VT.UINT32], "llama.context_length": [VT.UINT32],
            "llama.embedding_length": [VT.UINT32], "llama.block_count": [VT.UINT32],
            "llama.feed_forward_length": [VT.UINT32], "llama.attention.head_count": [VT.UINT32],
            "llama.attention.head_count_kv": [VT.UINT32], "llama.attention.layer_norm_rms_epsilon": [VT.FLOAT32],
            "llama.rope.freq_base": [VT.FLOAT32], "llama.rope.dimension_count": [VT.UINT32],
            "lmpress.version": [VT.STRING], "lmpress.variant": [VT.STRING],
            "tokenizer.ggml.model": [VT.STRING], "tokenizer.ggml.tokens": [VT.ARRAY, VT.STRING]}
    optional = {"tokenizer.ggml.scores": [VT.ARRAY, VT.FLOAT32], "tokenizer.ggml.token_type": [VT.ARRAY, VT.INT32],
                "tokenizer.ggml.merges": [VT.ARRAY, VT.STRING], "tokenizer.ggml.bos_token_id": [VT.UINT32],
                "tokenizer.ggml.eos_token_id": [VT.UINT32], "tokenizer.ggml.unknown_token_id": [VT.UINT32],
                "tokenizer.ggml.add_bos_token": [VT.BOOL], "tokenizer.ggml.pre": [VT.STRING],
                "lmpress.pipeline": [VT.STRING], "lmpress.config": [VT.STRING]}
    for key, types in list(want.items()) + list(optional.items()):
        f = fields.get(key)
        if f is None:
            if key in want:
                problem("metadata %s is missing" % key)
            continue
        if list(f.types) != types:
            problem("metadata %s has type %s, llama.cpp reads %s" % (key, [t.name for t in f.types],
                                                                      [t.name for t in types]))
    if "general.architecture" in fields and scalar(fields["general.architecture"]) != "llama":
        problem("general.architecture is %r" % scalar(fields["general.architecture"]))
    if "general.alignment" in fields and scalar(fields["general.alignment"]) != 32:
        problem("general.alignment is %r" % scalar(fields["general.alignment"]))
    model = scalar(fields["tokenizer.ggml.model"]) if "tokenizer.ggml.model" in fields else None
    if model == "gpt2" and "tokenizer.ggml.merges" not in fields:
        problem('a "gpt2" vocabulary without tokenizer.ggml.merges')
    n = len(fields["tokenizer.ggml.tokens"].data) if "tokenizer.ggml.tokens" in fields else -1
    for key in ("tokenizer.ggml.scores", "tokenizer.ggml.token_type"):
        if key in fields and len(fields[key].data) != n:
            problem("%s has %d entries for %d tokens" % (key, len(fields[key].data), n))
    return n


def check_expect(fields, expects):
    for e in expects:
        key, _, want = e.partition("=")
        if key not in fields:
            problem("metadata %s is missing (expected %r)" % (key, want))
            continue
        got = scalar(fields[key])
        if isinstance(got, float):
            ok = float(want) == got
        else:
            ok = str(got) == want
        if not ok:
            problem("metadata %s = %r, expected %r" % (key, got, want))


def check_llama2c(fields, tok_path, vocab):
    tokens, scores = llama2c_to_gguf.read_tokenizer(tok_path, vocab)
    pieces, types = llama2c_to_gguf.llama_vocab(tokens)
    if scalar(fields["tokenizer.ggml.model"]) != "llama":
        problem("tokenizer.ggml.model is not llama")
    got = raw(fields["tokenizer.ggml.tokens"])
    want = [p.encode("utf-8", "surrogateescape") for p in pieces]
    if got != want:
        i = next(k for k in range(min(len(got), len(want)) + 1) if k >= len(got) or k >= len(want) or got[k] != want[k])
        problem("tokenizer.ggml.tokens differs from llama2c_to_gguf.py's at token %d" % i)
    s = np.array([v[0] for v in (fields["tokenizer.ggml.scores"].parts[i] for i in fields["tokenizer.ggml.scores"].data)],
                 dtype=np.float32)
    if s.tobytes() != np.array(scores, dtype=np.float32).tobytes():
        problem("tokenizer.ggml.scores differ from the tokenizer file's")
    t = [int(fields["tokenizer.ggml.token_type"].parts[i][0]) for i in fields["tokenizer.ggml.token_type"].data]
    if t != types:
        problem("tokenizer.ggml.token_type differs from llama2c_to_gguf.py's")
    for key, want in (("tokenizer.ggml.bos_token_id", 1), ("tokenizer.ggml.eos_token_id", 2)):
        if key not in fields or scalar(fields[key]) != want:
            problem("%s is not %d" % (key, want))


def check_hf(fields, path, vocab):
    """The vocabulary of a Hugging Face tokenizer.json as llama.cpp's converter lays it out: tokens by
    id, added special tokens CONTROL (3), other added tokens USER_DEFINED (4), ids no token has
    "[PADn]" UNUSED (5), the rest NORMAL (1); merges as "a b"."""
    with open(path, encoding="utf-8") as f:
        j = json.load(f)
    toks, types = [None] * vocab, [1] * vocab
    for s, i in j["model"]["vocab"].items():
        toks[i] = s
    for a in j.get("added_tokens") or []:
        toks[a["id"]] = a["content"]
        types[a["id"]] = 3 if a.get("special") else 4
    for i in range(vocab):
        if toks[i] is None:
            toks[i], types[i] = "[PAD%d]" % i, 5
    merges = [m if isinstance(m, str) else " ".join(m) for m in j["model"]["merges"]]
    if scalar(fields["tokenizer.ggml.model"]) != "gpt2":
        problem("tokenizer.ggml.model is not gpt2")
    if raw(fields["tokenizer.ggml.tokens"]) != [t.encode("utf-8") for t in toks]:
        problem("tokenizer.ggml.tokens differs from %s's vocabulary" % path)
    t = [int(fields["tokenizer.ggml.token_type"].parts[i][0]) for i in fields["tokenizer.ggml.token_type"].data]
    if t != types:
        problem("tokenizer.ggml.token_type differs from %s's (expected %s)" % (path, types))
    if "tokenizer.ggml.merges" not in fields or raw(fields["tokenizer.ggml.merges"]) != [m.encode("utf-8") for m in merges]:
        problem("tokenizer.ggml.merges differ from %s's" % path)


def check_tokenizer_from(fields, src_path):
    src = gguf.GGUFReader(src_path)
    n = 0
    for key, f in src.fields.items():
        if not key.startswith("tokenizer."):
            continue
        n += 1
        g = fields.get(key)
        if g is None:
            problem("tokenizer key %s of %s is missing" % (key, src_path))
        elif list(g.types) != list(f.types) or raw(g) != raw(f):
            problem("tokenizer key %s differs from %s's" % (key, src_path))
    for key in fields:
        if key.startswith("tokenizer.") and key not in src.fields:
            problem("tokenizer key %s is not in %s" % (key, src_path))
    return n


def same(a, b, quantized):
    """Bit for bit; a quantized weight's +0 stands for memory's -0."""
    if a.shape != b.shape:
        return False
    ab, bb = a.view(np.uint32), b.view(np.uint32)
    eq = ab == bb
    if quantized:
        eq |= (a == 0) & (b == 0)
    return bool(eq.all())


def check_tensors(r, manifest, ref_gguf):
    folder = os.path.dirname(os.path.abspath(manifest))
    src = {t.name: t for t in gguf.GGUFReader(ref_gguf).tensors} if ref_gguf else {}
    tensors = {t.name: t for t in r.tensors}
    listed = set()
    counts = {}
    with open(manifest) as f:
        for line in f:
            if not line.strip():
                continue
            name, typ, ne0, ne1, ref = line.split()
            ne0, ne1 = int(ne0), int(ne1)
            listed.add(name)
            t = tensors.get(name)
            if t is None:
                problem("tensor %s is missing" % name)
                continue
            if t.tensor_type.name != typ:
                problem("tensor %s is %s, expected %s" % (name, t.tensor_type.name, typ))
                continue
            ne = [int(x) for x in t.shape]
            if ne != ([ne0, ne1] if ne1 != 1 else [ne0]) and ne != [ne0, ne1]:
                problem("tensor %s has ne %s, expected [%d, %d]" % (name, ne, ne0, ne1))
                continue
            got = np.asarray(gguf.quants.dequantize(t.data, t.tensor_type), dtype=np.float32).reshape(ne1, ne0)
            if ref == "=":
                s = src.get(name)
                if s is None:
                    problem("tensor %s is not in %s" % (name, ref_gguf))
                    continue
                want = np.asarray(gguf.quants.dequantize(s.data, s.tensor_type), dtype=np.float32).reshape(ne1, ne0)
            else:
                kind, _, path = ref.rpartition(":")
                want = np.fromfile(os.path.join(folder, path), dtype="<f4").reshape(ne1, ne0)
                if kind == "q8_0":  # gguf-py's own Q8_0 quantizer, round-tripped
                    want = np.asarray(gguf.quants.dequantize(gguf.quants.quantize(want, QT.Q8_0), QT.Q8_0),
                                      dtype=np.float32).reshape(ne1, ne0)
                elif kind == "f16":
                    want = want.astype(np.float16).astype(np.float32)
            if not same(got, want, t.tensor_type != QT.F32):
                bad = np.argwhere(got.view(np.uint32) != want.view(np.uint32))[0]
                problem("tensor %s (%s): [%d, %d] reads %r, lmpress held %r" % (
                    name, typ, bad[0], bad[1], float(got[bad[0], bad[1]]), float(want[bad[0], bad[1]])))
            counts[typ] = counts.get(typ, 0) + 1
    for name in tensors:
        if name not in listed:
            problem("tensor %s is not expected" % name)
    return counts


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("file")
    ap.add_argument("--manifest", required=True)
    ap.add_argument("--ref-gguf")
    ap.add_argument("--llama2c-tok")
    ap.add_argument("--tokenizer-from")
    ap.add_argument("--hf-tokenizer")
    ap.add_argument("--expect", action="append", default=[])
    args = ap.parse_args()
    r = gguf.GGUFReader(args.file)
    fields = r.fields
    n_tokens = check_types(fields)
    emb = next((t for t in r.tensors if t.name == "token_embd.weight"), None)
    vocab = int(emb.shape[1]) if emb is not None else -1
    if n_tokens != vocab:
        problem("%d tokens for %d embedding rows" % (n_tokens, vocab))
    check_expect(fields, args.expect)
    if args.llama2c_tok:
        check_llama2c(fields, args.llama2c_tok, vocab)
    if args.hf_tokenizer:
        check_hf(fields, args.hf_tokenizer, vocab)
    n_tok_keys = check_tokenizer_from(fields, args.tokenizer_from) if args.tokenizer_from else 0
    counts = check_tensors(r, args.manifest, args.ref_gguf)
    if problems:
        for p in problems:
            print("problem:", p)
        return 1
    print("ok: %s: %d tensors (%s), %d tokens, %d metadata keys%s" % (
        args.file, len(r.tensors), ", ".join("%d %s" % (v, k) for k, v in sorted(counts.items())), n_tokens,
        len(fields), ", %d tokenizer keys as in the source" % n_tok_keys if n_tok_keys else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
