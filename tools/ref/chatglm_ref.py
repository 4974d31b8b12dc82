#!/usr/bin/env python3
"""chatglm_ref.py — the reference for ChatGLM2/3 (THUDM's ChatGLMModel, issue 40), which transformers
has no class for: a float64 numpy forward written from the published modeling code (THUDM's
modeling_chatglm.py: GLMBlock, SelfAttention, CoreAttention, MLP, RotaryEmbedding,
apply_rotary_pos_emb), and the tiny random fixture tests/fixtures/arch/chatglm2/ it gives golden
log-probabilities for.  numpy only: runs with Debian's /usr/bin/python3 (numpy 1.24) and with a
venv's numpy alike.

  chatglm_ref.py make  [--converter DIR] [--python PY]   (re)make tests/fixtures/arch/chatglm2/
  chatglm_ref.py check [FIXTURE]                         rerun the forward, compare with the golden
  chatglm_ref.py llamacpp --logits FILE [FIXTURE]        compare with llama.cpp's own log-probs of
                                                         model.gguf (FILE from llama-perplexity -m
                                                         model.gguf -f TEXT -c 48 --kl-divergence-base FILE)

make writes, in tests/fixtures/arch/chatglm2/:
  hf/config.json         ChatGLMConfig's keys as THUDM's config.json files spell them
  hf/model.safetensors   F32 tensors under the published names (transformer.embedding.word_embeddings,
                         transformer.encoder.layers.N.self_attention.query_key_value, ...,
                         transformer.output_layer, and the buffer transformer.rotary_pos_emb.inv_freq
                         that THUDM's checkpoints carry), written here with numpy (no safetensors
                         package): an 8-byte header length, the JSON header, the raw bytes
  hf/tokenizer.json, hf/tokenizer_config.json   (only with --converter) a tiny byte-level BPE vocabulary
                         for llama.cpp's converter: THUDM's own tokenizer is remote code
                         (tokenization_chatglm.py, SentencePiece), not on PyPI, so the converter's
                         ChatGLM path for files without "THUDM/chatglm3-6b" in _name_or_path (the one
                         GLM-4-9B-chat takes: AutoTokenizer + get_vocab_base) is fed a tokenizer.json
                         like tools/ref/arch_fixtures.py's "glm" fixture's; the token ids are random,
                         so the vocabulary matters to the converter only
  model.gguf             (only with --converter) convert_hf_to_gguf.py --outtype f32 of hf/, GGUF arch
                         "chatglm" (q, k, v kept fused as attn_qkv)
  tokens.txt             T seeded random ids
  logprobs.f64           log_softmax of this forward's logits, float64 [T, V] little-endian, row t after
                         tokens[0..t]
  meta.txt               the shapes, seed, numpy version, the logits' spread, the GGUF's keys

check reloads hf/ (and model.gguf when gguf-py is importable: the converter's tensors mapped back to
the published names must equal hf/'s bit for bit) and reruns the forward: max |difference| against
logprobs.f64 must be <= 1e-12.  Where torch and transformers are importable (the arch venv) it also
runs transformers' GlmForCausalLM, GLM-4's class of the same block, on these weights renamed (q, k,
v cut from query_key_value; dense_h_to_4h as gate_up_proj), in float64: <= 1e-5, since transformers'
RMSNorm casts to float32 and its rotary table is float32 whatever the model's dtype (2.6e-6 here;
the control below shows that a wrong block moves the log-probs by 100 times more).  A control perturbs each weight matrix by 0.1 % and reports the
smallest change it makes to the log-probs (must exceed 1e-5 relative, so lmpress's 1e-5 tolerance
catches it).

The forward (float64 throughout; the model's own code rounds to its torch_dtype, which a float64
run does not):
  x = word_embeddings[tokens]
  per layer:  h = RMSNorm(x) = x / sqrt(mean(x^2) + eps) * w            (rmsnorm true)
              qkv = h Wqkv^T + bqkv; q, k, v = split [heads*hd, groups*hd, groups*hd]  (multi-query)
              q, k: rotary on the first hd/2 dims as interleaved pairs (2i, 2i+1):
                  theta_i = 1 / (10000 rope_ratio)^(2i / (hd/2)),  angle = t theta_i
                  (a, b) -> (a cos - b sin, b cos + a sin); the other hd/2 dims pass
              k, v of group g serve heads g*(heads/groups) ... ; scores q k^T / sqrt(hd), causal,
              softmax; ctx = probs v; x = x + ctx Wdense^T
              h = RMSNorm(x); u = h Wh4h^T; a, b = chunk(u, 2); x = x + (silu(a) * b) W4hh^T
  final RMSNorm (post_layer_norm), logits = x Woutput^T
(apply_query_key_layer_scaling divides by the layer number and multiplies back: the same in float64.)
"""
import argparse
import json
import os
import shutil
import struct
import subprocess
import sys

import numpy as np

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
FIXTURE = os.path.join(ROOT, "tests", "fixtures", "arch", "chatglm2")
SEED = 4001
T = 48
V = 320            # the converter's tokenizer: 256 bytes + merges + the specials below
SPECIALS = ["<|endoftext|>", "[MASK]", "[gMASK]", "[sMASK]", "<sop>", "<eop>", "<|user|>"]
EXACT = 1e-12

# ChatGLM2-6B's config.json keys at a tiny size: 2 kv groups of 4 heads (multi-query as
# ChatGLM2/3), q, k, v biases, no other bias, RMSNorms, and rope_ratio 2 (ChatGLM3-6B-32k's key,
# here small enough that every rotary pair still turns within 48 positions).
CONFIG = {
    "_name_or_path": "lmpress/chatglm2-tiny-random",
    "model_type": "chatglm",
    "architectures": ["ChatGLMModel"],
    "add_bias_linear": False,
    "add_qkv_bias": True,
    "apply_query_key_layer_scaling": True,
    "apply_residual_connection_post_layernorm": False,
    "attention_dropout": 0.0,
    "attention_softmax_in_fp32": True,
    "bias_dropout_fusion": True,
    "ffn_hidden_size": 128,
    "fp32_residual_connection": False,
    "hidden_dropout": 0.0,
    "hidden_size": 64,
    "kv_channels": 16,
    "layernorm_epsilon": 1e-05,
    "multi_query_attention": True,
    "multi_query_group_num": 2,
    "num_attention_heads": 4,
    "num_layers": 2,
    "original_rope": True,
    "padded_vocab_size": V,
    # ChatGLMConfig sets vocab_size = padded_vocab_size, so a config it saves has both; llama.cpp's
    # converter reads hparams["vocab_size"] whatever it then uses
    "vocab_size": V,
    "post_layer_norm": True,
    "rmsnorm": True,
    "rope_ratio": 2.0,
    "seq_length": 256,
    "tie_word_embeddings": False,
    "torch_dtype": "float32",
    "use_cache": True,
    "eos_token_id": 0,
    "pad_token_id": 0,
}


# ---- safetensors, numpy only ------------------------------------------------------------------

def st_write(path, tensors):
    header, offset, blobs = {"__metadata__": {"format": "pt"}}, 0, []
    for name in sorted(tensors):
        a = np.ascontiguousarray(tensors[name], dtype="<f4")
        header[name] = {"dtype": "F32", "shape": list(a.shape), "data_offsets": [offset, offset + a.nbytes]}
        offset += a.nbytes
        blobs.append(a.tobytes())
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for b in blobs:
            f.write(b)
    os.replace(tmp, path)


def st_read(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        if info["dtype"] != "F32":
            raise SystemExit(f"chatglm_ref: {path}: {name} is {info['dtype']}, only F32 is read here")
        a, b = info["data_offsets"]
        out[name] = np.frombuffer(data[a:b], dtype="<f4").reshape(info["shape"]).astype(np.float64)
    return out


# ---- the forward ------------------------------------------------------------------------------

def refuse(cfg):
    """What THUDM's code would do otherwise than this forward."""
    need = dict(multi_query_attention=True, rmsnorm=True, add_bias_linear=False, post_layer_norm=True,
                apply_residual_connection_post_layernorm=False)
    for k, v in need.items():
        if cfg.get(k, v) != v:
            raise SystemExit(f"chatglm_ref: {k} = {cfg[k]} is not what this reference implements ({v})")
    if cfg.get("pre_seq_len") is not None or cfg.get("quantization_bit", 0):
        raise SystemExit("chatglm_ref: pre_seq_len / quantization_bit are not implemented here")


def rms_norm(x, w, eps):
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * w


def rotary(x, cos, sin):
    """x [T, heads, hd]: THUDM's apply_rotary_pos_emb with rot_dim = 2 * cos.shape[1]."""
    rot = 2 * cos.shape[1]
    a, b = x[..., 0:rot:2], x[..., 1:rot:2]
    c, s = cos[:, None, :], sin[:, None, :]
    out = x.copy()
    out[..., 0:rot:2] = a * c - b * s
    out[..., 1:rot:2] = b * c + a * s
    return out


def forward(cfg, w, tokens):
    refuse(cfg)
    H, L = cfg["hidden_size"], cfg["num_layers"]
    nh, hd = cfg["num_attention_heads"], cfg.get("kv_channels") or cfg["hidden_size"] // cfg["num_attention_heads"]
    ng, eps = cfg["multi_query_group_num"], cfg["layernorm_epsilon"]
    P = "transformer.encoder.layers."
    # RotaryEmbedding(rotary_dim // 2).forward_impl(seq, n_elem = rotary_dim // 2, base = 10000 rope_ratio)
    n_elem = hd // 2
    base = 10000.0 * cfg.get("rope_ratio", 1)
    theta = 1.0 / base ** (np.arange(0, n_elem, 2, dtype=np.float64) / n_elem)
    ang = np.outer(np.arange(len(tokens), dtype=np.float64), theta)
    cos, sin = np.cos(ang), np.sin(ang)
    x = w["transformer.embedding.word_embeddings.weight"][tokens]
    Tn = len(tokens)
    mask = np.triu(np.ones((Tn, Tn), dtype=bool), 1)
    for i in range(L):
        p = P + str(i) + "."
        h = rms_norm(x, w[p + "input_layernorm.weight"], eps)
        qkv = h @ w[p + "self_attention.query_key_value.weight"].T
        if cfg.get("add_qkv_bias", False):
            qkv = qkv + w[p + "self_attention.query_key_value.bias"]
        q = qkv[:, :nh * hd].reshape(Tn, nh, hd)
        k = qkv[:, nh * hd:(nh + ng) * hd].reshape(Tn, ng, hd)
        v = qkv[:, (nh + ng) * hd:].reshape(Tn, ng, hd)
        q, k = rotary(q, cos, sin), rotary(k, cos, sin)
        k = np.repeat(k, nh // ng, axis=1)   # unsqueeze(-2).expand: head j reads group j // (nh / ng)
        v = np.repeat(v, nh // ng, axis=1)
        s = np.einsum("thd,shd->hts", q, k) / np.sqrt(hd)
        s[:, mask] = -np.inf
        s = np.exp(s - s.max(axis=-1, keepdims=True))
        s /= s.sum(axis=-1, keepdims=True)
        ctx = np.einsum("hts,shd->thd", s, v).reshape(Tn, nh * hd)
        x = x + ctx @ w[p + "self_attention.dense.weight"].T
        h = rms_norm(x, w[p + "post_attention_layernorm.weight"], eps)
        u = h @ w[p + "mlp.dense_h_to_4h.weight"].T
        a, b = u[:, :u.shape[1] // 2], u[:, u.shape[1] // 2:]
        x = x + (a / (1 + np.exp(-a)) * b) @ w[p + "mlp.dense_4h_to_h.weight"].T
    x = rms_norm(x, w["transformer.encoder.final_layernorm.weight"], eps)
    logits = x @ w["transformer.output_layer.weight"].T
    m = logits.max(axis=-1, keepdims=True)
    return logits - m - np.log(np.exp(logits - m).sum(axis=-1, keepdims=True)), logits


# ---- the fixture ------------------------------------------------------------------------------

def random_weights(cfg, rng):
    H, L, F = cfg["hidden_size"], cfg["num_layers"], cfg["ffn_hidden_size"]
    nh, hd, ng = cfg["num_attention_heads"], cfg["kv_channels"], cfg["multi_query_group_num"]
    Vv = cfg["padded_vocab_size"]
    lin = lambda o, i: rng.normal(0, 1 / np.sqrt(i), (o, i))          # noqa: E731
    gain = lambda: 1 + rng.normal(0, 0.15, H)                         # noqa: E731
    w = {"transformer.embedding.word_embeddings.weight": rng.normal(0, 0.35, (Vv, H))}
    for i in range(L):
        p = f"transformer.encoder.layers.{i}."
        w[p + "input_layernorm.weight"] = gain()
        w[p + "self_attention.query_key_value.weight"] = lin((nh + 2 * ng) * hd, H)
        w[p + "self_attention.query_key_value.bias"] = rng.normal(0, 0.1, (nh + 2 * ng) * hd)
        w[p + "self_attention.dense.weight"] = lin(H, nh * hd)
        w[p + "post_attention_layernorm.weight"] = gain()
        w[p + "mlp.dense_h_to_4h.weight"] = lin(2 * F, H)
        w[p + "mlp.dense_4h_to_h.weight"] = lin(H, F)
    w["transformer.encoder.final_layernorm.weight"] = gain()
    w["transformer.output_layer.weight"] = rng.normal(0, 0.35, (Vv, H))
    # the buffer THUDM's checkpoints carry: RotaryEmbedding(kv_channels // 2).inv_freq (base 10000,
    # whatever rope_ratio: forward_impl recomputes theta from the base and never reads it)
    dim = hd // 2
    w["transformer.rotary_pos_emb.inv_freq"] = 1.0 / 10000 ** (np.arange(0, dim, 2) / dim)
    # F32 is what is stored; the forward reads it back as float64
    return {k: v.astype(np.float32) for k, v in w.items()}


CONVERT_WRAPPER = r'''
import sys
conv_dir, argv = sys.argv[1], sys.argv[2:]
sys.path.insert(0, conv_dir)
sys.path.insert(1, conv_dir + "/gguf-py")
import convert_hf_to_gguf as conv
from conversion import base
# a tiny trained vocabulary never hashes like a real one: name the pre-tokenizer GLM-4's, as
# arch_fixtures.py does for its glm fixture (the ids in tokens.txt are random anyway)
base.TextModel.get_vocab_base_pre = lambda self, tokenizer: "glm4"
sys.argv = ["convert_hf_to_gguf.py"] + argv
conv.main()
'''


def convert(conv_dir, python, hf, out):
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import arch_fixtures   # make_bpe_tokenizer: tokenizers + transformers (the venv)
    arch_fixtures.make_bpe_tokenizer(dict(regex=arch_fixtures.RE_LLAMA3, specials=SPECIALS), V, hf)
    wrapper = os.path.join(os.path.dirname(out), ".convert_wrapper.py")
    with open(wrapper, "w") as f:
        f.write(CONVERT_WRAPPER)
    r = subprocess.run([python, wrapper, conv_dir, "--outtype", "f32", "--outfile", out + ".tmp", hf],
                       capture_output=True, text=True)
    os.unlink(wrapper)
    if r.returncode != 0:
        sys.stderr.write(r.stdout[-3000:] + r.stderr[-6000:])
        raise SystemExit("chatglm_ref: convert_hf_to_gguf.py failed")
    os.replace(out + ".tmp", out)


def gguf_tensors(path, conv_dir):
    """model.gguf read by gguf-py, its names mapped back to the published ones."""
    sys.path.insert(0, os.path.join(conv_dir, "gguf-py") if conv_dir else "")
    import gguf
    rd = gguf.GGUFReader(path)
    names = {"token_embd": "transformer.embedding.word_embeddings", "output_norm": "transformer.encoder.final_layernorm",
             "output": "transformer.output_layer"}
    blk = {"attn_norm": "input_layernorm", "attn_qkv": "self_attention.query_key_value",
           "attn_output": "self_attention.dense", "ffn_norm": "post_attention_layernorm",
           "ffn_up": "mlp.dense_h_to_4h", "ffn_down": "mlp.dense_4h_to_h"}
    out, keys = {}, {}
    for t in rd.tensors:
        stem, kind = t.name.rsplit(".", 1)
        if stem.startswith("blk."):
            _, i, part = stem.split(".", 2)
            hf = f"transformer.encoder.layers.{i}.{blk[part]}"
        else:
            hf = names[stem]
        out[f"{hf}.{kind}"] = np.array(t.data, dtype=np.float64).reshape([int(d) for d in reversed(t.shape)])
    arch = rd.fields["general.architecture"].contents()
    for k, fld in rd.fields.items():
        if k.startswith(arch + ".") or k in ("tokenizer.ggml.model", "tokenizer.ggml.pre"):
            keys[k] = fld.contents()
    return out, keys, arch


def make(conv_dir, python):
    tmp = FIXTURE + ".tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    hf = os.path.join(tmp, "hf")
    os.makedirs(hf)
    rng = np.random.default_rng(SEED)
    w = random_weights(CONFIG, rng)
    tokens = rng.integers(0, V, T)
    with open(os.path.join(hf, "config.json"), "w") as f:
        json.dump(CONFIG, f, indent=2)
        f.write("\n")
    st_write(os.path.join(hf, "model.safetensors"), w)
    w64 = st_read(os.path.join(hf, "model.safetensors"))
    lp, logits = forward(CONFIG, w64, tokens)
    with open(os.path.join(tmp, "tokens.txt"), "w") as f:
        f.write(" ".join(str(int(t)) for t in tokens) + "\n")
    lp.astype("<f8").tofile(os.path.join(tmp, "logprobs.f64"))
    meta = [f"name chatglm2", f"T {T}", f"V {V}", f"seed {SEED}", "class ChatGLMModel (THUDM's remote code)",
            "model_type chatglm", "reference tools/ref/chatglm_ref.py (numpy float64 forward from THUDM's "
            "modeling_chatglm.py)", f"numpy {np.__version__}",
            "logprobs.f64 little-endian float64 [T, V], log_softmax of the reference's logits",
            f"logit_std_mean {logits.std(axis=-1).mean():.4f}",
            f"logprob_spread_mean {(lp.max(axis=-1) - lp.min(axis=-1)).mean():.4f}"]
    if conv_dir:
        gg = os.path.join(tmp, "model.gguf")
        convert(conv_dir, python or sys.executable, hf, gg)
        _, keys, arch = gguf_tensors(gg, conv_dir)
        meta.append(f"gguf_arch {arch}")
        meta += [f"gguf {k} = {v}" for k, v in sorted(keys.items())]
    shutil.rmtree(FIXTURE, ignore_errors=True)
    os.replace(tmp, FIXTURE)
    with open(os.path.join(FIXTURE, "meta.txt"), "w") as f:
        f.write("\n".join(meta) + "\n")
    print(f"chatglm_ref: wrote {FIXTURE} (logit std {logits.std(axis=-1).mean():.3f})")


def glm_cross_check(cfg, w, tokens, gold):
    """A second, independent forward where torch and transformers are importable: transformers'
    GlmForCausalLM (GLM-4-9B's class: the same block, q, k, v and gate_up under other names,
    partial_rotary_factor 0.5 over interleaved pairs) loaded with these weights, in float64.
    Skipped (True) without them."""
    try:
        import torch
        from transformers import GlmConfig, GlmForCausalLM
    except ImportError:
        print("chatglm_ref: torch/transformers not importable: the GlmForCausalLM cross-check is skipped")
        return True
    nh, hd, ng = cfg["num_attention_heads"], cfg["kv_channels"], cfg["multi_query_group_num"]
    gc = GlmConfig(vocab_size=cfg["padded_vocab_size"], hidden_size=cfg["hidden_size"],
                   intermediate_size=cfg["ffn_hidden_size"], num_hidden_layers=cfg["num_layers"],
                   num_attention_heads=nh, num_key_value_heads=ng, head_dim=hd,
                   rms_norm_eps=cfg["layernorm_epsilon"], attention_bias=cfg["add_qkv_bias"],
                   max_position_embeddings=cfg["seq_length"], tie_word_embeddings=False, pad_token_id=0,
                   rope_parameters=dict(rope_type="default", rope_theta=10000.0 * cfg.get("rope_ratio", 1),
                                        partial_rotary_factor=0.5))
    gc._attn_implementation = "eager"
    m = GlmForCausalLM(gc).to(torch.float64).eval()
    sd = {"model.embed_tokens.weight": w["transformer.embedding.word_embeddings.weight"],
          "model.norm.weight": w["transformer.encoder.final_layernorm.weight"],
          "lm_head.weight": w["transformer.output_layer.weight"]}
    for i in range(cfg["num_layers"]):
        p, q = f"transformer.encoder.layers.{i}.", f"model.layers.{i}."
        qkv, b = w[p + "self_attention.query_key_value.weight"], w[p + "self_attention.query_key_value.bias"]
        cut = [0, nh * hd, (nh + ng) * hd, (nh + 2 * ng) * hd]
        for j, n in enumerate("qkv"):
            sd[q + f"self_attn.{n}_proj.weight"] = qkv[cut[j]:cut[j + 1]]
            sd[q + f"self_attn.{n}_proj.bias"] = b[cut[j]:cut[j + 1]]
        sd[q + "self_attn.o_proj.weight"] = w[p + "self_attention.dense.weight"]
        sd[q + "input_layernorm.weight"] = w[p + "input_layernorm.weight"]
        sd[q + "post_attention_layernorm.weight"] = w[p + "post_attention_layernorm.weight"]
        sd[q + "mlp.gate_up_proj.weight"] = w[p + "mlp.dense_h_to_4h.weight"]
        sd[q + "mlp.down_proj.weight"] = w[p + "mlp.dense_4h_to_h.weight"]
    missing, unexpected = m.load_state_dict({k: torch.from_numpy(np.ascontiguousarray(v)) for k, v in sd.items()},
                                            strict=False)
    if missing or unexpected:
        print(f"chatglm_ref: GlmForCausalLM state dict: missing {missing}, unexpected {unexpected}")
        return False
    with torch.no_grad():
        lp = torch.log_softmax(m(torch.tensor(tokens)[None]).logits[0], -1).numpy()
    d = float(np.abs(lp - gold).max())
    print(f"chatglm_ref: transformers' GlmForCausalLM on the same weights vs logprobs.f64: max|d| = {d:.3e} "
          f"{'ok' if d <= 1e-5 else 'FAIL'} (<= 1e-5: its RMSNorm and rotary table run in float32 in a "
          f"float64 model)")
    return d <= 1e-5


def check(folder, conv_dir):
    with open(os.path.join(folder, "hf", "config.json")) as f:
        cfg = json.load(f)
    tokens = np.array(open(os.path.join(folder, "tokens.txt")).read().split(), dtype=np.int64)
    gold = np.fromfile(os.path.join(folder, "logprobs.f64"), dtype="<f8").reshape(len(tokens), -1)
    w = st_read(os.path.join(folder, "hf", "model.safetensors"))
    lp, _ = forward(cfg, w, tokens)
    d = float(np.abs(lp - gold).max())
    ok = d <= EXACT
    print(f"chatglm_ref: hf/ forward vs logprobs.f64: max|d| = {d:.3e} {'ok' if ok else 'FAIL'}")
    gg = os.path.join(folder, "model.gguf")
    if os.path.exists(gg):
        try:
            g, keys, _ = gguf_tensors(gg, conv_dir)
        except ImportError:
            print("chatglm_ref: gguf-py not importable (--converter DIR): model.gguf not checked")
        else:
            same = set(g) == set(w) - {"transformer.rotary_pos_emb.inv_freq"} and all(
                np.array_equal(g[k], w[k]) for k in g)
            theta = keys.get("chatglm.rope.freq_base")
            print(f"chatglm_ref: model.gguf tensors equal hf/'s: {same}; rope.freq_base {theta}, "
                  f"rope.dimension_count {keys.get('chatglm.rope.dimension_count')}")
            ok &= same and theta == 10000 * cfg.get("rope_ratio", 1)
    ok &= glm_cross_check(cfg, w, tokens, gold)
    # control: 0.1 % on each matrix must move the log-probs by more than 1e-5 relative
    rng = np.random.default_rng(1)
    worst = np.inf
    for k in sorted(w):
        if w[k].ndim != 2:
            continue
        w2 = dict(w)
        w2[k] = w[k] * (1 + 1e-3 * rng.normal(size=w[k].shape))
        rel = float(np.abs(forward(cfg, w2, tokens)[0] - gold).max() / np.abs(gold).max())
        worst = min(worst, rel)
    print(f"chatglm_ref: control: the smallest relative change from a 0.1 % perturbation of one matrix: "
          f"{worst:.2e} ({'ok' if worst > 1e-5 else 'FAIL'}: must exceed 1e-5)")
    ok &= worst > 1e-5
    return 0 if ok else 1


def llamacpp_check(folder, logits_path):
    """llama.cpp's own forward against this one: the log-probabilities llama-perplexity
    --kl-divergence-base FILE saved for model.gguf (16-bit codes: log p = scale q + min, min at
    most 16 below the largest), and this forward run on the file's chunks (no BOS: the converter
    writes add_bos_token false for chatglm).  Entries at the clamp (q = 0) are left out; the rest
    must agree within the code's step (scale) plus 1e-4."""
    with open(os.path.join(folder, "hf", "config.json")) as f:
        cfg = json.load(f)
    w = st_read(os.path.join(folder, "hf", "model.safetensors"))
    raw = open(logits_path, "rb").read()
    if raw[:8] != b"_logits_":
        raise SystemExit(f"chatglm_ref: {logits_path} is not a llama-perplexity logits file")
    n_ctx, n_vocab, n_chunk = struct.unpack_from("<Iii", raw, 8)
    tokens = np.frombuffer(raw, dtype="<i4", count=n_chunk * n_ctx, offset=20).reshape(n_chunk, n_ctx)
    nv = 2 * ((n_vocab + 1) // 2) + 4
    rows = n_ctx - 1 - n_ctx // 2
    data = np.frombuffer(raw, dtype="<u2", offset=20 + 4 * n_chunk * n_ctx).reshape(n_chunk, rows, nv)
    worst, worst_step, n = 0.0, 0.0, 0
    for c in range(n_chunk):
        lp, _ = forward(cfg, w, tokens[c])
        for r in range(rows):
            scale, lo = np.frombuffer(data[c, r, :4].tobytes(), dtype="<f4")
            q = data[c, r, 4:4 + n_vocab].astype(np.float64)
            base = scale * q + lo
            keep = q > 0
            d = np.abs(base[keep] - lp[n_ctx // 2 + r][keep])
            n += int(keep.sum())
            if d.max() > worst:
                worst, worst_step = float(d.max()), float(scale)
    ok = worst <= worst_step + 1e-4
    print(f"chatglm_ref: llama.cpp's log-probs ({logits_path}: {n_chunk} chunks of {n_ctx}, {n} unclamped entries) vs "
          f"this forward: max|d| = {worst:.3e} (the 16-bit code's step there {worst_step:.2e}) "
          f"{'ok' if ok else 'FAIL'}")
    return 0 if ok else 1


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("mode", choices=["make", "check", "llamacpp"])
    ap.add_argument("fixture", nargs="?", default=FIXTURE)
    ap.add_argument("--converter", help="llama.cpp's vendor folder (convert_hf_to_gguf.py, gguf-py)")
    ap.add_argument("--python", help="the interpreter that runs the converter (default: this one)")
    ap.add_argument("--logits", help="llamacpp: the file llama-perplexity --kl-divergence-base wrote for model.gguf")
    a = ap.parse_args()
    conv = os.path.abspath(a.converter) if a.converter else None
    if a.mode == "make":
        make(conv, a.python)
        return 0
    if a.mode == "llamacpp":
        if not a.logits:
            raise SystemExit("chatglm_ref: llamacpp needs --logits FILE")
        return llamacpp_check(a.fixture, a.logits)
    return check(a.fixture, conv)


if __name__ == "__main__":
    sys.exit(main())
