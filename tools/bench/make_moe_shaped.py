#!/usr/bin/env python3
"""make_moe_shaped.py: write a mixture-of-experts checkpoint at a real model's widths, random weights.

    python3 tools/bench/make_moe_shaped.py OUT_DIR --shape deepseek-v3 [--experts 16] [--layers 1]
    python3 tools/bench/make_moe_shaped.py OUT_DIR --shape qwen3-30b-a3b [--experts 128] [--layers 2]

For issue 37's memory benchmark (tools/bench/moe_rss.sh): a block's routed experts streamed a
group at a time (memory.expert_group_mb) must keep peak RSS the same whatever the number of
experts.  OUT_DIR gets config.json (DeepseekV3ForCausalLM or Qwen3MoeForCausalLM, the keys
transformers 5 reads), one bf16 safetensors shard per block plus one for the embedding, final
norm and head, model.safetensors.index.json, and the tiny BPE tokenizer (320 ids) of the
qwen3moe test fixture (tests/fixtures/arch/qwen3moe/hf5), so the vocabulary is small.

  deepseek-v3     DeepSeek-V3's widths: hidden 7168, moe_intermediate 2048, one shared expert,
                  top-8 of E routed experts with sigmoid scores and a selection bias (noaux_tc,
                  n_group 8, topk_group 4), multi-head latent attention with 128 heads, q_lora_rank
                  1536, kv_lora_rank 512, qk_rope 64, qk_nope 128, v_head_dim 128; every layer
                  sparse (first_k_dense_replace 0).  One expert is 3 x 7168 x 2048 = 44M
                  weights (176 MB in f32); E = 64: 5.6 GB of bf16.
  qwen3-30b-a3b   Qwen3-30B-A3B's widths: hidden 2048, moe_intermediate 768, 128 experts, top-8,
                  32 q heads and 4 kv heads of 128, q/k norms; 2 layers by default.

Every shard is written tensor by tensor (its header first), so the script holds a few of a
shape's matrices at a time (about 0.3 GB for DeepSeek-V3).  Linears ~ N(0, 1/in), norms near 1.
The routed experts are not drawn one by one (44M numbers each would take this shared 2-core
machine minutes per expert): each of gate, up and down is one random matrix, and expert e's is
that matrix with its rows rotated by a different amount (distinct weights, written at disk
speed).  What the benchmark measures (memory, time) does not depend on the values.  Needs numpy
only.
"""
import argparse
import json
import os
import shutil
import struct
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
FIXTURE = os.path.join(HERE, "..", "..", "tests", "fixtures", "arch", "qwen3moe", "hf5")
VOCAB = 320


def bf16_bytes(a):
    """float32 array -> bf16 bytes, round to nearest even (as torch's .to(bfloat16))."""
    u = np.ascontiguousarray(a, dtype=np.float32).view(np.uint32)
    rounded = (u + 0x7FFF + ((u >> 16) & 1)) >> 16
    return rounded.astype(np.uint16).tobytes()


def write_shard(path, tensors):
    """tensors: [(name, shape, make)] where make() gives the float32 array: one safetensors file of
    bf16 tensors, its header first, each tensor made and written in turn, under a temp name."""
    header, off = {}, 0
    for name, shape, _ in tensors:
        n = 2 * int(np.prod(shape))
        header[name] = {"dtype": "BF16", "shape": list(shape), "data_offsets": [off, off + n]}
        off += n
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for name, shape, make in tensors:
            a = make()
            if isinstance(a, (bytes, memoryview)):  # already bf16
                assert len(a) == 2 * int(np.prod(shape)), name
                f.write(a)
                continue
            assert a.shape == tuple(shape), (name, a.shape, shape)
            f.write(bf16_bytes(a))
    os.replace(tmp, path)
    return off


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("out")
    ap.add_argument("--shape", choices=["deepseek-v3", "qwen3-30b-a3b"], required=True)
    ap.add_argument("--experts", type=int)
    ap.add_argument("--layers", type=int)
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    ds = a.shape == "deepseek-v3"
    E = a.experts or (16 if ds else 128)
    L = a.layers or (1 if ds else 2)
    if ds and E % 8:
        sys.exit("deepseek-v3: the experts must divide into its 8 groups (n_group)")
    os.makedirs(a.out, exist_ok=True)
    rs = np.random.default_rng(a.seed)

    def linear(out_f, in_f):
        return lambda: rs.standard_normal((out_f, in_f), dtype=np.float32) * np.float32(1.0 / np.sqrt(in_f))

    def norm(n):
        return lambda: (1.0 + 0.05 * rs.standard_normal(n)).astype(np.float32)

    bases = {}

    def rotated(r, shape, k):
        """expert matrix r (gate, up, down) of one random base, rows rotated by k: bf16 bytes."""
        def make():
            if r not in bases:
                bases[r] = bf16_bytes(linear(*shape)())
            row = 2 * shape[1]
            cut = (k % shape[0]) * row
            return memoryview(bases[r][cut:] + bases[r][:cut])
        return make

    if ds:
        d, f, H, qr, kvr, rope, nope, vd = 7168, 2048, 128, 1536, 512, 64, 128, 128
        cfg = {
            "architectures": ["DeepseekV3ForCausalLM"], "model_type": "deepseek_v3",
            "attention_bias": False, "attention_dropout": 0.0, "bos_token_id": 0, "eos_token_id": 1,
            "dtype": "bfloat16", "first_k_dense_replace": 0, "head_dim": rope, "hidden_act": "silu",
            "hidden_size": d, "initializer_range": 0.02, "intermediate_size": 18432,
            "kv_lora_rank": kvr, "max_position_embeddings": 4096, "moe_intermediate_size": f,
            "n_group": 8, "n_routed_experts": E, "n_shared_experts": 1, "norm_topk_prob": True,
            "num_attention_heads": H, "num_experts_per_tok": 8, "num_hidden_layers": L,
            "num_key_value_heads": H, "num_nextn_predict_layers": 0, "pad_token_id": None,
            "pretraining_tp": 1, "q_lora_rank": qr, "qk_head_dim": nope + rope, "qk_nope_head_dim": nope,
            "qk_rope_head_dim": rope, "rms_norm_eps": 1e-06, "rope_interleave": True,
            "rope_parameters": {"rope_theta": 10000.0, "rope_type": "default"},
            "routed_scaling_factor": 2.5, "tie_word_embeddings": False, "topk_group": 4,
            "transformers_version": "5.24.0", "use_cache": True, "v_head_dim": vd, "vocab_size": VOCAB,
        }
    else:
        d, f, H, KV, hd = 2048, 768, 32, 4, 128
        cfg = {
            "architectures": ["Qwen3MoeForCausalLM"], "model_type": "qwen3_moe",
            "attention_bias": False, "attention_dropout": 0.0, "bos_token_id": 0, "eos_token_id": 1,
            "decoder_sparse_step": 1, "dtype": "bfloat16", "head_dim": hd, "hidden_act": "silu",
            "hidden_size": d, "initializer_range": 0.02, "intermediate_size": 6144,
            "max_position_embeddings": 4096, "mlp_only_layers": [], "moe_intermediate_size": f,
            "norm_topk_prob": True, "num_attention_heads": H, "num_experts_per_tok": 8,
            "num_hidden_layers": L, "num_key_value_heads": KV, "num_local_experts": E,
            "pad_token_id": None, "rms_norm_eps": 1e-06,
            "rope_parameters": {"rope_theta": 1000000.0, "rope_type": "default"},
            "router_aux_loss_coef": 0.001, "sliding_window": None, "tie_word_embeddings": False,
            "transformers_version": "5.24.0", "use_cache": True, "use_sliding_window": False,
            "vocab_size": VOCAB,
        }

    weight_map, total = {}, 0
    for b in range(L):
        p = "model.layers.%d." % b
        ts = [(p + "input_layernorm.weight", (d,), norm(d)), (p + "post_attention_layernorm.weight", (d,), norm(d))]
        if ds:
            ts += [(p + "self_attn.q_a_proj.weight", (qr, d), linear(qr, d)),
                   (p + "self_attn.q_a_layernorm.weight", (qr,), norm(qr)),
                   (p + "self_attn.q_b_proj.weight", (H * (nope + rope), qr), linear(H * (nope + rope), qr)),
                   (p + "self_attn.kv_a_proj_with_mqa.weight", (kvr + rope, d), linear(kvr + rope, d)),
                   (p + "self_attn.kv_a_layernorm.weight", (kvr,), norm(kvr)),
                   (p + "self_attn.kv_b_proj.weight", (H * (nope + vd), kvr), linear(H * (nope + vd), kvr)),
                   (p + "self_attn.o_proj.weight", (d, H * vd), linear(d, H * vd)),
                   (p + "mlp.gate.weight", (E, d), linear(E, d)),
                   (p + "mlp.gate.e_score_correction_bias", (E,),
                    lambda: (0.01 * rs.standard_normal(E)).astype(np.float32))]
            for name, shape in (("gate_proj", (f, d)), ("up_proj", (f, d)), ("down_proj", (d, f))):
                ts.append((p + "mlp.shared_experts.%s.weight" % name, shape, linear(*shape)))
        else:
            ts += [(p + "self_attn.q_proj.weight", (H * hd, d), linear(H * hd, d)),
                   (p + "self_attn.k_proj.weight", (KV * hd, d), linear(KV * hd, d)),
                   (p + "self_attn.v_proj.weight", (KV * hd, d), linear(KV * hd, d)),
                   (p + "self_attn.o_proj.weight", (d, H * hd), linear(d, H * hd)),
                   (p + "self_attn.q_norm.weight", (hd,), norm(hd)),
                   (p + "self_attn.k_norm.weight", (hd,), norm(hd)),
                   (p + "mlp.gate.weight", (E, d), linear(E, d))]
        for e in range(E):
            for r, (name, shape) in enumerate((("gate_proj", (f, d)), ("up_proj", (f, d)), ("down_proj", (d, f)))):
                ts.append((p + "mlp.experts.%d.%s.weight" % (e, name), shape, rotated(r, shape, 7 * e + 1)))
        shard = "model-%05d.safetensors" % b
        total += write_shard(os.path.join(a.out, shard), ts)
        weight_map.update({name: shard for name, _, _ in ts})
        print("block %d: %d routed experts written" % (b, E), flush=True)
    ts = [("model.embed_tokens.weight", (VOCAB, d), lambda: rs.standard_normal((VOCAB, d), dtype=np.float32)),
          ("model.norm.weight", (d,), norm(d)),
          ("lm_head.weight", (VOCAB, d), linear(VOCAB, d))]
    shard = "model-%05d.safetensors" % L
    total += write_shard(os.path.join(a.out, shard), ts)
    weight_map.update({name: shard for name, _, _ in ts})
    with open(os.path.join(a.out, "model.safetensors.index.json"), "w") as fh:
        json.dump({"metadata": {"total_size": total}, "weight_map": weight_map}, fh, indent=1)
    with open(os.path.join(a.out, "config.json"), "w") as fh:
        json.dump(cfg, fh, indent=2)
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copyfile(os.path.join(FIXTURE, name), os.path.join(a.out, name))
    print("%s: %s, %d layers of %d experts, %.2f GB of bf16" % (a.out, a.shape, L, E, total / 1e9))


if __name__ == "__main__":
    main()
