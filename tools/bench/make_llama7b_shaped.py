#!/usr/bin/env python3
"""make_llama7b_shaped.py: write a Llama-2-7B-shaped checkpoint with random weights.

    python3 tools/bench/make_llama7b_shaped.py OUT_DIR [--layers 32] [--dim 4096] [--hidden 11008]
                                                       [--heads 32] [--vocab 32000] [--seed 0]

OUT_DIR gets config.json (LlamaForCausalLM), model.safetensors.index.json with one bf16 shard per
block (plus one for the embedding, final norm and head) and tokenizer.json.  With the defaults it
is Llama-2-7B's shape: 6.74e9 parameters, 13.5 GB.  The shards are written one at a time
(numpy holds one block), so the script itself needs about 2 GB of memory.

The weights are random but scaled like a trained model's: every linear ~ N(0, 1/in) (outputs of
unit size for unit inputs), norms near 1.  A few channels of the residual stream are made large
(the "massive activations" of trained LLMs, tens to hundreds of times the others): the embedding
carries them, and the norms' weights amplify them, so that the inputs of q/k/v and gate/up have
outlier channels and activation quantization without smoothing visibly suffers.

The tokenizer is GPT-2's byte-level BPE (data/gpt2-tokenizer, MIT licence) cut to the first
`vocab` ids: the 256 byte tokens and the merges whose result has an id below `vocab` (a merge's
parts always come before it, so the cut vocabulary is closed).  Needs numpy only.
"""
import argparse
import json
import os
import struct
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
GPT2 = os.path.join(HERE, "..", "..", "data", "gpt2-tokenizer")


def bf16_bytes(a):
    """float32 array -> bf16 bytes, round to nearest even (as torch's .to(bfloat16))."""
    u = np.ascontiguousarray(a, dtype=np.float32).view(np.uint32)
    rounded = (u + 0x7FFF + ((u >> 16) & 1)) >> 16
    return rounded.astype(np.uint16).tobytes()


def write_shard(path, tensors):
    """tensors: [(name, shape, bf16 bytes)] -> one safetensors file, written under a temp name."""
    header, off = {}, 0
    for name, shape, data in tensors:
        header[name] = {"dtype": "BF16", "shape": list(shape), "data_offsets": [off, off + len(data)]}
        off += len(data)
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for _, _, data in tensors:
            f.write(data)
    os.replace(tmp, path)


def tokenizer_json(vocab_size):
    with open(os.path.join(GPT2, "encoder.json"), encoding="utf-8") as f:
        enc = json.load(f)
    with open(os.path.join(GPT2, "vocab.bpe"), encoding="utf-8") as f:
        lines = [l.rstrip("\n") for l in f if l.strip() and not l.startswith("#version")]
    vocab = {tok: i for tok, i in enc.items() if i < vocab_size}
    merges = []
    for line in lines:
        a, b = line.split(" ")
        if a + b in vocab and a in vocab and b in vocab:
            merges.append(line)
    if len(vocab) != vocab_size:
        sys.exit("GPT-2's vocabulary has %d ids below %d" % (len(vocab), vocab_size))
    return {
        "version": "1.0", "truncation": None, "padding": None, "added_tokens": [],
        "normalizer": None,
        "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True},
        "post_processor": None,
        "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True},
        "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": "",
                  "end_of_word_suffix": "", "fuse_unk": False, "byte_fallback": False,
                  "vocab": vocab, "merges": merges},
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("out")
    ap.add_argument("--layers", type=int, default=32)
    ap.add_argument("--dim", type=int, default=4096)
    ap.add_argument("--hidden", type=int, default=11008)
    ap.add_argument("--heads", type=int, default=32)
    ap.add_argument("--vocab", type=int, default=32000)
    ap.add_argument("--seq-len", type=int, default=4096)
    ap.add_argument("--outliers", type=int, default=4, help="massive residual channels")
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    d, f, L, V = a.dim, a.hidden, a.layers, a.vocab
    if d % a.heads or V > 50257 or V < 256:
        sys.exit("dim must divide by heads; vocab must be in [256, 50257] (GPT-2's tokenizer)")
    os.makedirs(a.out, exist_ok=True)
    rs = np.random.default_rng(a.seed)
    outl = rs.choice(d, size=min(a.outliers, d), replace=False)

    def linear(out_f, in_f):
        return rs.standard_normal((out_f, in_f), dtype=np.float32) * np.float32(1.0 / np.sqrt(in_f))

    def norm_w():
        w = (1.0 + 0.05 * rs.standard_normal(d)).astype(np.float32)
        w[outl] *= 8.0   # the norms pass the massive channels on to q/k/v and gate/up
        return w

    weight_map, total = {}, 0
    for b in range(L):
        p = "model.layers.%d." % b
        ts = []
        for name, shape in (("self_attn.q_proj", (d, d)), ("self_attn.k_proj", (d, d)),
                            ("self_attn.v_proj", (d, d)), ("self_attn.o_proj", (d, d)),
                            ("mlp.gate_proj", (f, d)), ("mlp.up_proj", (f, d)), ("mlp.down_proj", (d, f))):
            w = linear(*shape)
            if name == "mlp.down_proj":   # trained models write into the massive channels from down_proj
                w[outl] *= 4.0
            ts.append((p + name + ".weight", shape, bf16_bytes(w)))
        ts.append((p + "input_layernorm.weight", (d,), bf16_bytes(norm_w())))
        ts.append((p + "post_attention_layernorm.weight", (d,), bf16_bytes(norm_w())))
        fn = "model-%05d-of-%05d.safetensors" % (b + 1, L + 1)
        write_shard(os.path.join(a.out, fn), ts)
        for name, shape, data in ts:
            weight_map[name] = fn
            total += len(data)
        print("block %d/%d written" % (b + 1, L), flush=True)
    emb = rs.standard_normal((V, d), dtype=np.float32) * np.float32(0.02)
    emb[:, outl] = np.float32(1.0) + np.float32(0.1) * rs.standard_normal((V, len(outl)), dtype=np.float32)
    head = linear(V, d)
    fw = np.ones(d, dtype=np.float32)
    fw[outl] = 0.05   # the final norm damps the massive channels, as trained models' do
    ts = [("model.embed_tokens.weight", (V, d), bf16_bytes(emb)), ("model.norm.weight", (d,), bf16_bytes(fw)),
          ("lm_head.weight", (V, d), bf16_bytes(head))]
    fn = "model-%05d-of-%05d.safetensors" % (L + 1, L + 1)
    write_shard(os.path.join(a.out, fn), ts)
    for name, shape, data in ts:
        weight_map[name] = fn
        total += len(data)
    cfg = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": d,
           "intermediate_size": f, "num_hidden_layers": L, "num_attention_heads": a.heads,
           "num_key_value_heads": a.heads, "vocab_size": V, "max_position_embeddings": a.seq_len,
           "rms_norm_eps": 1e-5, "rope_theta": 10000.0, "hidden_act": "silu", "tie_word_embeddings": False,
           "torch_dtype": "bfloat16", "bos_token_id": None, "eos_token_id": None}
    for name, obj in (("config.json", cfg),
                      ("model.safetensors.index.json", {"metadata": {"total_size": total}, "weight_map": weight_map}),
                      ("tokenizer.json", tokenizer_json(V))):
        with open(os.path.join(a.out, name) + ".tmp", "w", encoding="utf-8") as fo:
            json.dump(obj, fo, ensure_ascii=False)
        os.replace(os.path.join(a.out, name) + ".tmp", os.path.join(a.out, name))
    print("%s: %d layers, dim %d, hidden %d, vocab %d, %.2f GB of bf16" % (a.out, L, d, f, V, total / 1e9))


if __name__ == "__main__":
    main()
