#!/usr/bin/python3
"""hf_fixtures.py — Hugging Face checkpoint fixtures for tests/test_model_hf.c, made independently
of the C code (numpy only: no torch, transformers or safetensors package).

Safetensors files are written by hand with struct + json from the format's description: uint64
little-endian header length N, N bytes of JSON header padded with spaces to a multiple of 8, then
the data section, tensors back to back, "data_offsets" relative to the data section.

Every forward here follows the Hugging Face modelling code's conventions, NOT lmpress's:
  * Llama family (LlamaForCausalLM, Qwen2ForCausalLM): RoPE "rotate-half", i.e. within each head
    the pairs (i, i + head_dim/2) rotate by the angle pos * theta^(-2i/head_dim); RMSNorm
    x / sqrt(mean(x^2) + eps) * w; GQA (query head h reads kv head h // (heads/kv_heads));
    SwiGLU silu(x Wg^T) * (x Wu^T); causal softmax attention scaled by 1/sqrt(head_dim).
  * GPT-2: learned positions, LayerNorm with bias, Conv1D linears y = x W + b with W stored
    [in, out], a fused c_attn [d, 3d] whose output columns are q | k | v, "gelu_new" (tanh) GELU,
    logits = ln_f(x) wte^T (tied head).
All arithmetic is float64.

Parts (run from anywhere; Debian's /usr/bin/python3 has numpy):

  /usr/bin/python3 tools/ref/hf_fixtures.py stories260K [OUT_DIR]
      (a) converts models/stories260K/stories260K.bin (llama2.c v0) into a LlamaForCausalLM
      folder (config.json + model.safetensors, F32, tied embeddings: no lm_head.weight) in OUT_DIR
      (default build/fixtures/stories260K-hf under the repository root; about 1 MB, so it is not
      kept in the repository: tests/test_model_hf.c runs this part at test time).  llama2.c's
      RoPE rotates ADJACENT pairs (2i, 2i+1), Hugging Face's rotates (i, i + hd/2), so the rows
      of wq and wk are permuted inside each head: HF row i = llama2.c row 2i, HF row i + hd/2 =
      llama2.c row 2i + 1 (llama2.c's export.py permute_reverse; llama.cpp's converter undoes
      it).  As a self-check it runs llama2.c's own forward (adjacent pairs) on the .bin and the
      HF forward (rotate-half) on the converted tensors over a 64-token window and requires them
      to agree (they are the same function, so the difference is float64 rounding).

  PYTHONPATH=DIR_WITH_gguf /usr/bin/python3 tools/ref/hf_fixtures.py smollm2 [OUT_DIR]
      (a') SmolLM2-135M-Instruct's GGUF (models/cache/, tools/fetch_smollm2.sh) dequantized by the
      PyPI `gguf` package and written as a LlamaForCausalLM folder, F32 (540 MB; default
      build/fixtures/smollm2-hf), q/k rows back in rotate-half order.  tools/test.sh installs
      `gguf` into build/pydeps; tests/test_model_hf.c compares both loaders' logits.

  /usr/bin/python3 tools/ref/hf_fixtures.py gpt2 [OUT_DIR]
      (b) a tiny randomly initialised GPT2LMHeadModel (n_embd 32, n_layer 2, n_head 4, vocab 96,
      n_positions 64, n_inner null = 4*n_embd; numpy RandomState(0), weights ~ N(0, 0.2), norm
      gains 1 + N(0, 0.2)) in the layout of the real "gpt2" model.safetensors: keys without a
      "transformer." prefix ("wte.weight", "h.0.attn.c_attn.weight"), no lm_head.weight, and the
      attn.bias causal-mask buffers [1, 1, n_positions, n_positions] that loaders must ignore.
      Most tensors are F32; the c_fc weights are F16 and h.1.attn.c_proj.weight is BF16 (values
      drawn, then rounded to those types, and the forward uses the rounded values) so the
      conversions are exercised.  Writes OUT_DIR (default tests/golden/gpt2-tiny) config.json,
      model.safetensors and logits.txt.

  /usr/bin/python3 tools/ref/hf_fixtures.py qwen2 [OUT_DIR]
      (c) a tiny randomly initialised Qwen2ForCausalLM (hidden 32, 4 heads, 2 kv heads, head_dim
      8, intermediate 64, 2 layers, vocab 96, rope_theta 1e6, rms_norm_eps 1e-6; RandomState(1);
      q/k/v biases ~ N(0, 0.2); untied lm_head.weight), all BF16 (Qwen2's own dtype), sharded in
      two files with model.safetensors.index.json.  Writes OUT_DIR (default
      tests/golden/qwen2-tiny) config.json, the shards, the index and logits.txt.  This checks the
      q/k row permutation together with the bias permutation.

  /usr/bin/python3 tools/ref/hf_fixtures.py all
      (b) and (c) into their default folders ((a) is made at test time).

logits.txt: '#' lines are comments; "tokens N id0 id1 ...", "vocab V", then N lines of V logits
(%.9e), row t being the logits after tokens[0..t].  The output is deterministic.
"""
import json
import os
import struct
import sys

import numpy as np

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
SMOLLM2_GGUF = os.path.join(ROOT, "models", "cache", "SmolLM2-135M-Instruct.Q4_1.gguf")
STORIES_BIN = os.path.join(ROOT, "models", "stories260K", "stories260K.bin")

# ---- safetensors writing ------------------------------------------------------------------


class Tensor:
    """name, safetensors dtype, shape, raw little-endian bytes, and the float64 values it holds."""

    def __init__(self, name, dtype, values):
        values = np.asarray(values, dtype=np.float64)
        self.name, self.dtype, self.shape = name, dtype, list(values.shape)
        f32 = values.astype(np.float32)
        if dtype == "F32":
            self.raw, exact = f32.astype("<f4").tobytes(), f32
        elif dtype == "F16":
            h = f32.astype(np.float16)
            self.raw, exact = h.astype("<f2").tobytes(), h.astype(np.float32)
        elif dtype == "BF16":
            # round to nearest even on the top 16 bits of the float32 pattern
            u = f32.view(np.uint32).astype(np.uint64)
            u = (u + 0x7FFF + ((u >> 16) & 1)) >> 16
            bits = u.astype(np.uint16)
            self.raw = bits.astype("<u2").tobytes()
            exact = (bits.astype(np.uint32) << 16).view(np.float32)
        else:
            raise ValueError(dtype)
        self.values = exact.astype(np.float64).reshape(values.shape)


def write_safetensors(path, tensors, metadata=None):
    header, off = {}, 0
    for t in tensors:
        header[t.name] = {"dtype": t.dtype, "shape": t.shape, "data_offsets": [off, off + len(t.raw)]}
        off += len(t.raw)
    header["__metadata__"] = metadata or {"format": "pt"}
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for t in tensors:
            f.write(t.raw)
    return off


def write_json(path, obj):
    with open(path, "w") as f:
        json.dump(obj, f, indent=2)
        f.write("\n")


def write_logits(path, what, tokens, logits):
    with open(path, "w") as f:
        f.write("# %s\n# written by tools/ref/hf_fixtures.py (numpy float64 forward); see its docstring\n" % what)
        f.write("tokens %d %s\n" % (len(tokens), " ".join(str(int(t)) for t in tokens)))
        f.write("vocab %d\n" % logits.shape[1])
        for row in logits:
            f.write(" ".join("%.9e" % v for v in row) + "\n")


# ---- forwards (Hugging Face conventions) -----------------------------------------------------


def rmsnorm(x, w, eps):
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * w


def layernorm(x, w, b, eps):
    mu = x.mean(axis=-1, keepdims=True)
    var = ((x - mu) ** 2).mean(axis=-1, keepdims=True)
    return (x - mu) / np.sqrt(var + eps) * w + b


def gelu_tanh(x):
    return 0.5 * x * (1.0 + np.tanh(np.sqrt(2.0 / np.pi) * (x + 0.044715 * x ** 3)))


def causal_attention(q, k, v):
    """q [T, H, hd], k/v [T, KV, hd] -> [T, H*hd]; query head h reads kv head h // (H/KV)."""
    T, H, hd = q.shape
    rep = H // k.shape[1]
    k, v = np.repeat(k, rep, axis=1), np.repeat(v, rep, axis=1)
    s = np.einsum("thd,shd->hts", q, k) / np.sqrt(hd)
    s = np.where(np.tril(np.ones((T, T), dtype=bool))[None], s, -np.inf)
    s = np.exp(s - s.max(axis=-1, keepdims=True))
    p = s / s.sum(axis=-1, keepdims=True)
    return np.einsum("hts,shd->thd", p, v).reshape(T, H * hd)


def rope_rotate_half(x, theta):
    """Hugging Face's apply_rotary_pos_emb on x [T, H, hd]: pairs (i, i + hd/2)."""
    T, _, hd = x.shape
    inv = theta ** (-np.arange(0, hd, 2, dtype=np.float64) / hd)
    ang = np.arange(T, dtype=np.float64)[:, None] * inv[None, :]
    cos = np.concatenate([np.cos(ang), np.cos(ang)], axis=-1)[:, None, :]
    sin = np.concatenate([np.sin(ang), np.sin(ang)], axis=-1)[:, None, :]
    rot = np.concatenate([-x[..., hd // 2:], x[..., : hd // 2]], axis=-1)
    return x * cos + rot * sin


def rope_adjacent(x, theta):
    """llama2.c's RoPE on x [T, H, hd]: pairs (2i, 2i + 1)."""
    T, _, hd = x.shape
    inv = theta ** (-np.arange(0, hd, 2, dtype=np.float64) / hd)
    ang = np.arange(T, dtype=np.float64)[:, None, None] * inv[None, None, :]
    c, s = np.cos(ang), np.sin(ang)
    x0, x1 = x[..., 0::2], x[..., 1::2]
    out = np.empty_like(x)
    out[..., 0::2] = x0 * c - x1 * s
    out[..., 1::2] = x0 * s + x1 * c
    return out


def llama_hf_forward(cfg, W, tokens):
    """LlamaForCausalLM / MistralForCausalLM / Qwen2ForCausalLM logits [T, vocab]; W maps HF names
    to float64 arrays (q/k/v biases used when present)."""
    d, H = cfg["hidden_size"], cfg["num_attention_heads"]
    KV = cfg.get("num_key_value_heads", H)
    hd, eps, theta = d // H, cfg["rms_norm_eps"], cfg.get("rope_theta", 10000.0)
    T = len(tokens)
    x = W["model.embed_tokens.weight"][tokens]
    for l in range(cfg["num_hidden_layers"]):
        p = "model.layers.%d." % l

        def lin(name, h):
            y = h @ W[p + name + ".weight"].T
            return y + W[p + name + ".bias"] if p + name + ".bias" in W else y

        h = rmsnorm(x, W[p + "input_layernorm.weight"], eps)
        q = lin("self_attn.q_proj", h).reshape(T, H, hd)
        k = lin("self_attn.k_proj", h).reshape(T, KV, hd)
        v = lin("self_attn.v_proj", h).reshape(T, KV, hd)
        q, k = rope_rotate_half(q, theta), rope_rotate_half(k, theta)
        x = x + lin("self_attn.o_proj", causal_attention(q, k, v))
        h = rmsnorm(x, W[p + "post_attention_layernorm.weight"], eps)
        g, u = lin("mlp.gate_proj", h), lin("mlp.up_proj", h)
        x = x + lin("mlp.down_proj", g / (1.0 + np.exp(-g)) * u)
    x = rmsnorm(x, W["model.norm.weight"], eps)
    head = W.get("lm_head.weight", W["model.embed_tokens.weight"])
    return x @ head.T


def gpt2_forward(cfg, W, tokens):
    """GPT2LMHeadModel logits [T, vocab]; W maps unprefixed HF names to float64 arrays."""
    d, H = cfg["n_embd"], cfg["n_head"]
    eps, T = cfg["layer_norm_epsilon"], len(tokens)
    x = W["wte.weight"][tokens] + W["wpe.weight"][:T]
    for l in range(cfg["n_layer"]):
        p = "h.%d." % l

        def conv1d(name, h):  # transformers' Conv1D: W is [in, out]
            return h @ W[p + name + ".weight"] + W[p + name + ".bias"]

        h = layernorm(x, W[p + "ln_1.weight"], W[p + "ln_1.bias"], eps)
        qkv = conv1d("attn.c_attn", h)
        q, k, v = (qkv[:, i * d:(i + 1) * d].reshape(T, H, d // H) for i in range(3))
        x = x + conv1d("attn.c_proj", causal_attention(q, k, v))
        h = layernorm(x, W[p + "ln_2.weight"], W[p + "ln_2.bias"], eps)
        x = x + conv1d("mlp.c_proj", gelu_tanh(conv1d("mlp.c_fc", h)))
    x = layernorm(x, W["ln_f.weight"], W["ln_f.bias"], eps)
    return x @ W["wte.weight"].T


# ---- (a) stories260K -> LlamaForCausalLM ------------------------------------------------------


def read_llama2c(path):
    with open(path, "rb") as f:
        data = f.read()
    dim, hidden, L, H, KV, vocab, seq_len = struct.unpack("<7i", data[:28])
    assert vocab > 0, "expected a shared classifier (positive vocab_size)"
    a = np.frombuffer(data, dtype="<f4", offset=28).astype(np.float64)
    hd = dim // H
    kvd = KV * hd
    shapes = [("tok", (vocab, dim)), ("rms_att", (L, dim)), ("wq", (L, dim, dim)), ("wk", (L, kvd, dim)),
              ("wv", (L, kvd, dim)), ("wo", (L, dim, dim)), ("rms_ffn", (L, dim)), ("w1", (L, hidden, dim)),
              ("w2", (L, dim, hidden)), ("w3", (L, hidden, dim)), ("rms_final", (dim,)),
              ("freq", (seq_len, hd))]
    w, off = {}, 0
    for name, shape in shapes:
        n = int(np.prod(shape))
        w[name] = a[off:off + n].reshape(shape)
        off += n
    assert off == a.size, "file size does not match the header (not a v0 checkpoint with a shared classifier?)"
    hp = dict(dim=dim, hidden=hidden, L=L, H=H, KV=KV, vocab=vocab, seq_len=seq_len)
    return hp, w


def llama2c_forward(hp, w, tokens, eps=1e-5, theta=10000.0):
    """llama2.c run.c's forward (adjacent-pair RoPE) over a whole window."""
    d, H, KV, T = hp["dim"], hp["H"], hp["KV"], len(tokens)
    hd = d // H
    x = w["tok"][tokens]
    for l in range(hp["L"]):
        h = rmsnorm(x, w["rms_att"][l], eps)
        q = rope_adjacent((h @ w["wq"][l].T).reshape(T, H, hd), theta)
        k = rope_adjacent((h @ w["wk"][l].T).reshape(T, KV, hd), theta)
        v = (h @ w["wv"][l].T).reshape(T, KV, hd)
        x = x + causal_attention(q, k, v) @ w["wo"][l].T
        h = rmsnorm(x, w["rms_ffn"][l], eps)
        g, u = h @ w["w1"][l].T, h @ w["w3"][l].T
        x = x + (g / (1.0 + np.exp(-g)) * u) @ w["w2"][l].T
    return rmsnorm(x, w["rms_final"], eps) @ w["tok"].T


def adjacent_to_rotate_half(wt, n_heads):
    """Rows of a llama2.c q/k weight [n_heads*hd, in] in HF order: within each head, HF row i =
    row 2i and HF row i + hd/2 = row 2i + 1 (llama2.c export.py's permute_reverse)."""
    rows, cols = wt.shape
    hd = rows // n_heads
    return wt.reshape(n_heads, hd // 2, 2, cols).transpose(0, 2, 1, 3).reshape(rows, cols)


def window_tokens(n, vocab, seed):
    return np.random.RandomState(seed).randint(0, vocab, size=n)


def part_stories(out_dir):
    hp, w = read_llama2c(STORIES_BIN)
    os.makedirs(out_dir, exist_ok=True)
    cfg = {
        "architectures": ["LlamaForCausalLM"], "model_type": "llama",
        "hidden_size": hp["dim"], "intermediate_size": hp["hidden"], "num_hidden_layers": hp["L"],
        "num_attention_heads": hp["H"], "num_key_value_heads": hp["KV"], "vocab_size": hp["vocab"],
        "max_position_embeddings": hp["seq_len"], "rms_norm_eps": 1e-5, "rope_theta": 10000.0,
        "rope_scaling": None, "hidden_act": "silu", "tie_word_embeddings": True,
        "attention_bias": False, "torch_dtype": "float32",
        "bos_token_id": 1, "eos_token_id": 2,
    }
    ts = [Tensor("model.embed_tokens.weight", "F32", w["tok"])]
    for l in range(hp["L"]):
        p = "model.layers.%d." % l
        ts += [Tensor(p + "input_layernorm.weight", "F32", w["rms_att"][l]),
               Tensor(p + "self_attn.q_proj.weight", "F32", adjacent_to_rotate_half(w["wq"][l], hp["H"])),
               Tensor(p + "self_attn.k_proj.weight", "F32", adjacent_to_rotate_half(w["wk"][l], hp["KV"])),
               Tensor(p + "self_attn.v_proj.weight", "F32", w["wv"][l]),
               Tensor(p + "self_attn.o_proj.weight", "F32", w["wo"][l]),
               Tensor(p + "post_attention_layernorm.weight", "F32", w["rms_ffn"][l]),
               Tensor(p + "mlp.gate_proj.weight", "F32", w["w1"][l]),
               Tensor(p + "mlp.up_proj.weight", "F32", w["w3"][l]),
               Tensor(p + "mlp.down_proj.weight", "F32", w["w2"][l])]
    ts.append(Tensor("model.norm.weight", "F32", w["rms_final"]))
    # Self-check: the HF-convention forward on the converted tensors is llama2.c's forward.
    tokens = window_tokens(64, hp["vocab"], 260)
    ref = llama2c_forward(hp, w, tokens)
    hf = llama_hf_forward(cfg, {t.name: t.values for t in ts}, tokens)
    rel = np.abs(ref - hf).max() / np.abs(ref).max()
    if not rel < 1e-12:
        sys.exit("hf_fixtures.py: self-check failed: converted model differs from llama2.c by %.3g" % rel)
    write_json(os.path.join(out_dir, "config.json"), cfg)
    write_safetensors(os.path.join(out_dir, "model.safetensors"), ts)
    print("stories260K -> %s (self-check: max rel diff %.3g)" % (out_dir, rel))


# ---- (a') SmolLM2: the GGUF's dequantized weights as a Hugging Face folder -----------------


def part_smollm2(out_dir):
    """SmolLM2-135M-Instruct (models/cache/*.Q4_1.gguf, from tools/fetch_smollm2.sh) written as a
    LlamaForCausalLM folder in F32.  Needs the PyPI `gguf` package (its reader and dequantizer,
    not lmpress's).  llama.cpp's converter stored attn_q/attn_k with adjacent-pair rows; they are
    turned back into Hugging Face's rotate-half order here (the inverse of its permute)."""
    import gguf
    from gguf.quants import dequantize
    r = gguf.GGUFReader(SMOLLM2_GGUF)

    def field(key):
        f = r.fields[key]
        return f.parts[f.data[0]][0]

    def tensor(name):
        t = next(t for t in r.tensors if t.name == name)
        a = dequantize(t.data, t.tensor_type).astype(np.float32)
        shape = [int(x) for x in reversed(t.shape)]  # ne = [in, out] -> [out, in]
        return a.reshape(shape)

    L, d, H = int(field("llama.block_count")), int(field("llama.embedding_length")), int(field("llama.attention.head_count"))
    KV, F = int(field("llama.attention.head_count_kv")), int(field("llama.feed_forward_length"))
    emb = tensor("token_embd.weight")
    cfg = {
        "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": d,
        "intermediate_size": F, "num_hidden_layers": L, "num_attention_heads": H,
        "num_key_value_heads": KV, "vocab_size": emb.shape[0],
        "max_position_embeddings": int(field("llama.context_length")),
        "rms_norm_eps": float(field("llama.attention.layer_norm_rms_epsilon")),
        "rope_theta": float(field("llama.rope.freq_base")), "rope_scaling": None,
        "hidden_act": "silu", "tie_word_embeddings": True, "torch_dtype": "float32",
    }
    ts = [Tensor("model.embed_tokens.weight", "F32", emb)]
    names = {"self_attn.q_proj": "attn_q", "self_attn.k_proj": "attn_k", "self_attn.v_proj": "attn_v",
             "self_attn.o_proj": "attn_output", "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up",
             "mlp.down_proj": "ffn_down"}
    for l in range(L):
        p, g = "model.layers.%d." % l, "blk.%d." % l
        ts.append(Tensor(p + "input_layernorm.weight", "F32", tensor(g + "attn_norm.weight")))
        ts.append(Tensor(p + "post_attention_layernorm.weight", "F32", tensor(g + "ffn_norm.weight")))
        for hf, gg in names.items():
            w = tensor(g + gg + ".weight")
            if gg in ("attn_q", "attn_k"):
                w = adjacent_to_rotate_half(w, H if gg == "attn_q" else KV)
            ts.append(Tensor(p + hf + ".weight", "F32", w))
    ts.append(Tensor("model.norm.weight", "F32", tensor("output_norm.weight")))
    os.makedirs(out_dir, exist_ok=True)
    write_json(os.path.join(out_dir, "config.json"), cfg)
    write_safetensors(os.path.join(out_dir, "model.safetensors"), ts)
    print("SmolLM2 -> %s" % out_dir)


# ---- (b) tiny GPT-2 -------------------------------------------------------------------------


def part_gpt2(out_dir):
    rs = np.random.RandomState(0)
    d, L, H, V, P = 32, 2, 4, 96, 64
    f = 4 * d
    cfg = {
        "architectures": ["GPT2LMHeadModel"], "model_type": "gpt2", "activation_function": "gelu_new",
        "n_embd": d, "n_layer": L, "n_head": H, "n_inner": None, "n_positions": P, "n_ctx": P,
        "vocab_size": V, "layer_norm_epsilon": 1e-5, "scale_attn_weights": True,
        "scale_attn_by_inverse_layer_idx": False, "reorder_and_upcast_attn": False,
        "tie_word_embeddings": True, "bos_token_id": V - 1, "eos_token_id": V - 1,
    }

    def n(*shape):
        return rs.normal(0.0, 0.2, size=shape)

    mask = np.tril(np.ones((P, P)))[None, None]
    ts = [Tensor("wte.weight", "F32", n(V, d)), Tensor("wpe.weight", "F32", n(P, d))]
    for l in range(L):
        p = "h.%d." % l
        ts += [Tensor(p + "ln_1.weight", "F32", 1.0 + n(d)), Tensor(p + "ln_1.bias", "F32", n(d)),
               Tensor(p + "attn.bias", "F32", mask),
               Tensor(p + "attn.c_attn.weight", "F32", n(d, 3 * d)), Tensor(p + "attn.c_attn.bias", "F32", n(3 * d)),
               Tensor(p + "attn.c_proj.weight", "BF16" if l == 1 else "F32", n(d, d)),
               Tensor(p + "attn.c_proj.bias", "F32", n(d)),
               Tensor(p + "ln_2.weight", "F32", 1.0 + n(d)), Tensor(p + "ln_2.bias", "F32", n(d)),
               Tensor(p + "mlp.c_fc.weight", "F16", n(d, f)), Tensor(p + "mlp.c_fc.bias", "F32", n(f)),
               Tensor(p + "mlp.c_proj.weight", "F32", n(f, d)), Tensor(p + "mlp.c_proj.bias", "F32", n(d))]
    ts += [Tensor("ln_f.weight", "F32", 1.0 + n(d)), Tensor("ln_f.bias", "F32", n(d))]
    tokens = window_tokens(16, V, 2)
    logits = gpt2_forward(cfg, {t.name: t.values for t in ts}, tokens)
    os.makedirs(out_dir, exist_ok=True)
    write_json(os.path.join(out_dir, "config.json"), cfg)
    write_safetensors(os.path.join(out_dir, "model.safetensors"), ts)
    write_logits(os.path.join(out_dir, "logits.txt"), "tiny random GPT2LMHeadModel (tests/golden/gpt2-tiny)",
                 tokens, logits)
    print("gpt2-tiny -> %s" % out_dir)


# ---- (c) tiny Qwen2 -------------------------------------------------------------------------


def part_qwen2(out_dir):
    rs = np.random.RandomState(1)
    d, L, H, KV, f, V, P = 32, 2, 4, 2, 64, 96, 64
    hd = d // H
    cfg = {
        "architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", "hidden_act": "silu",
        "hidden_size": d, "intermediate_size": f, "num_hidden_layers": L, "num_attention_heads": H,
        "num_key_value_heads": KV, "max_position_embeddings": P, "vocab_size": V,
        "rms_norm_eps": 1e-6, "rope_theta": 1000000.0, "rope_scaling": None,
        "sliding_window": 32, "use_sliding_window": False, "max_window_layers": L,
        "tie_word_embeddings": False, "torch_dtype": "bfloat16", "bos_token_id": 0, "eos_token_id": 1,
    }

    def n(*shape):
        return rs.normal(0.0, 0.2, size=shape)

    ts = [Tensor("model.embed_tokens.weight", "BF16", n(V, d))]
    for l in range(L):
        p = "model.layers.%d." % l
        ts += [Tensor(p + "input_layernorm.weight", "BF16", 1.0 + n(d)),
               Tensor(p + "self_attn.q_proj.weight", "BF16", n(H * hd, d)),
               Tensor(p + "self_attn.q_proj.bias", "BF16", n(H * hd)),
               Tensor(p + "self_attn.k_proj.weight", "BF16", n(KV * hd, d)),
               Tensor(p + "self_attn.k_proj.bias", "BF16", n(KV * hd)),
               Tensor(p + "self_attn.v_proj.weight", "BF16", n(KV * hd, d)),
               Tensor(p + "self_attn.v_proj.bias", "BF16", n(KV * hd)),
               Tensor(p + "self_attn.o_proj.weight", "BF16", n(d, H * hd)),
               Tensor(p + "post_attention_layernorm.weight", "BF16", 1.0 + n(d)),
               Tensor(p + "mlp.gate_proj.weight", "BF16", n(f, d)),
               Tensor(p + "mlp.up_proj.weight", "BF16", n(f, d)),
               Tensor(p + "mlp.down_proj.weight", "BF16", n(d, f))]
    ts += [Tensor("model.norm.weight", "BF16", 1.0 + n(d)), Tensor("lm_head.weight", "BF16", n(V, d))]
    tokens = window_tokens(16, V, 3)
    logits = llama_hf_forward(cfg, {t.name: t.values for t in ts}, tokens)
    os.makedirs(out_dir, exist_ok=True)
    write_json(os.path.join(out_dir, "config.json"), cfg)
    # Two shards: layer 0 and the embeddings in the first, the rest in the second.
    shards = [("model-00001-of-00002.safetensors", [t for t in ts if t.name.startswith(("model.embed", "model.layers.0."))]),
              ("model-00002-of-00002.safetensors", [])]
    shards[1] = (shards[1][0], [t for t in ts if t not in shards[0][1]])
    total, weight_map = 0, {}
    for fname, part in shards:
        total += write_safetensors(os.path.join(out_dir, fname), part)
        weight_map.update({t.name: fname for t in part})
    write_json(os.path.join(out_dir, "model.safetensors.index.json"),
               {"metadata": {"total_size": total}, "weight_map": dict(sorted(weight_map.items()))})
    write_logits(os.path.join(out_dir, "logits.txt"), "tiny random Qwen2ForCausalLM (tests/golden/qwen2-tiny)",
                 tokens, logits)
    print("qwen2-tiny -> %s" % out_dir)


def main(argv):
    parts = {"stories260K": (part_stories, os.path.join(ROOT, "build", "fixtures", "stories260K-hf")),
             "gpt2": (part_gpt2, os.path.join(ROOT, "tests", "golden", "gpt2-tiny")),
             "qwen2": (part_qwen2, os.path.join(ROOT, "tests", "golden", "qwen2-tiny")),
             "smollm2": (part_smollm2, os.path.join(ROOT, "build", "fixtures", "smollm2-hf"))}
    if len(argv) == 2 and argv[1] == "all":
        for name in ("gpt2", "qwen2"):
            parts[name][0](parts[name][1])
        return 0
    if len(argv) not in (2, 3) or argv[1] not in parts:
        sys.stderr.write(__doc__)
        return 2
    fn, default = parts[argv[1]]
    fn(argv[2] if len(argv) == 3 else default)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
