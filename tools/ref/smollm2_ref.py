#!/usr/bin/env python3
"""smollm2_ref.py: an independent numpy reference forward pass of SmolLM2-135M-Instruct (the
"unmodified model" = the dequantized weights of models/cache/SmolLM2-135M-Instruct.Q4_1.gguf),
with two evaluations: WikiText-style perplexity (`ppl`) and lm-evaluation-harness's
`lambada_openai` accuracy (`lambada`).  Nothing here uses lmpress code: weights come from
llama.cpp's gguf-py (GGUFReader + gguf.quants.dequantize), the tokenizer is Hugging Face's
`tokenizers` library, the transformer is written out below in numpy following Hugging Face's
LlamaForCausalLM (modeling_llama.py).

Setup (once):

    # gguf-py (needs only numpy, which Debian's /usr/bin/python3 has)
    pip download --no-deps -d /tmp/ggufpkg gguf==0.19.0
    pip install --no-deps --target /tmp/refpy /tmp/ggufpkg/gguf-0.19.0-py3-none-any.whl
    # Hugging Face tokenizers
    pip download --no-deps --only-binary=:all: -d /tmp/wheels tokenizers
    pip install --no-deps --target /tmp/refpy /tmp/wheels/tokenizers-*.whl
    tools/fetch_smollm2.sh          # models/cache/SmolLM2-135M-Instruct.Q4_1.gguf

Usage (from the repository root):

    PY="env PYTHONPATH=/tmp/refpy /usr/bin/python3 tools/ref/smollm2_ref.py"
    $PY selftest                    # permutation, RoPE-equivalence and tokenizer checks
    $PY ppl --text data/wikitext-2/wiki.test.raw --seq-len 512 [--max-windows N] [--out F]
    $PY lambada --file data/lambada/lambada_test.jsonl [--max N] [--out F]
    (--dtype float32 runs the matmuls in float32; the default, and what the golden file uses,
     is float64 throughout)

Regenerate tests/golden/smollm2_ref.txt (float64; ~5 min alone on the 2-core dev machine,
~10 min when sharing it):

    PYTHONPATH=/tmp/refpy /usr/bin/python3 tools/ref/smollm2_ref.py golden > tests/golden/smollm2_ref.txt

which runs `ppl --text data/wikitext-2/wiki.test.raw --seq-len 512 --max-windows 8`
and `lambada --file data/lambada/lambada_test.jsonl --max 300` and prints them as
    ppl wiki.test.raw 512 max_windows=8 tokens=N windows=W scored=S nll_sum=X ppl=Y
    lambada lambada_test.jsonl max=300 correct=K passages=N acc=A
(followed by '#' comment lines with the per-passage results).

Model (all hyper-parameters are read from the GGUF metadata and checked): Llama architecture,
30 blocks, dim 576, 9 query heads / 3 KV heads (GQA: query head h uses KV head h // 3, as HF's
repeat_kv), head_dim 64, SwiGLU MLP hidden 1536 (down(silu(gate x) * up x)), vocab 49152, tied
embeddings (no output.weight: the LM head is token_embd), RMSNorm x / sqrt(mean(x^2) + eps) * w
with eps = 1e-5, RoPE theta 100000, no biases.  Weight types in the file: Q4_1 (block linears),
Q8_0 (token_embd), F32 (norms); all are dequantized with gguf.quants.dequantize.  gguf-py gives a
PyTorch-layout [out, in] array (GGUF's ne = [in, out]); load() asserts the expected (out, in)
shapes, e.g. blk.0.attn_k.weight -> (192, 576).

RoPE and the q/k permutation.  llama.cpp's convert_hf_to_gguf.py permutes the rows of attn_q and
attn_k (LlamaModel.permute: w.reshape(n_head, 2, out // n_head // 2, in).swapaxes(1, 2)
.reshape(out, in), with n_head = n_head_kv for attn_k) so that llama.cpp's "normal" RoPE, which
rotates ADJACENT pairs (x[2i], x[2i+1]) within each head, equals Hugging Face's rotate_half RoPE,
which rotates (x[i], x[i + 64/2]).  To stay independent of lmpress (which applies adjacent-pair
RoPE to the stored rows) this reference UNDOES the permutation (gguf_to_hf: reshape(n_head,
out // n_head // 2, 2, in).swapaxes(1, 2).reshape(out, in); selftest checks that it inverts
hf_to_gguf both ways) and applies HF's RoPE: inv_freq = theta ** (-arange(0, 64, 2) / 64),
freqs = pos * inv_freq, emb = concat([freqs, freqs]), q' = q * cos(emb) + rotate_half(q) *
sin(emb), rotate_half(x) = concat([-x[32:], x[:32]]).  selftest also checks numerically that this
gives the same attention scores as adjacent-pair RoPE on the stored rows.

Precision: by default everything (weights, activations, softmax, log-softmax) is float64 (the
dequantized float32 weights are exactly representable).  --dtype float32 is about 2x faster; on
the first 2 windows of wiki.test.raw its NLL sum differs from float64 in the 8th digit
(3356.30521 vs 3356.30535).  Measured on the 2-core dev machine with other jobs running
(OpenBLAS, 2 threads): ppl ~8-11 s per 512-token window in float64 (~5 s in float32), so the
full wiki.test.raw at L=512 (592 windows) takes ~1.5-2 h; lambada ~110 tokens/s (~0.7 s per
passage), so all 5153 passages take ~1-1.5 h; memory ~2 GB.

Tokenizer: a tokenizers.Tokenizer built from the GGUF vocabulary (tokenizer.ggml.tokens = the
byte-level token strings, id = position; tokenizer.ggml.merges, rank = position): BPE model (no
unk, no dropout, byte_fallback off), no normalizer, pre-tokenizer Sequence([Digits(
individual_digits=True), ByteLevel(add_prefix_space=False, use_regex=True)]), ByteLevel decoder,
the CONTROL tokens (token_type 3: <|endoftext|>, <|im_start|>, ...) registered as special added
tokens, and encode(..., add_special_tokens=False) (no BOS: tokenizer.ggml.add_bos_token is false,
and SmolLM2's HF tokenizer has no post-processor template adding tokens).

ppl protocol: the file's bytes decoded as UTF-8 and tokenized at once; floor(n / L)
non-overlapping windows of L tokens (the tail is dropped; only the first N with --max-windows);
each window is evaluated on its own from position 0 and its L - 1 next-token predictions are
scored; ppl = exp(sum NLL / number scored).  Prints {"tokens", "windows", "scored", "nll_sum",
"ppl"} as JSON.

lambada protocol (lm-evaluation-harness lambada_openai, HFLM): per JSONL line {"text": t},
context = ' '.join(t.split(' ')[:-1]), continuation = ' ' + t.split(' ')[-1]; _encode_pair moves
trailing whitespace of the context to the continuation, whole = enc(context + continuation),
ctx = enc(context), cont = whole[len(ctx):]; an empty context becomes [prefix_token_id] (HFLM:
BOS if the tokenizer has one, else EOS; never happens on LAMBADA) with cont = enc(continuation);
input = (ctx + cont)[:-1] (no truncation: passages are far below the 8192 context); the passage
is correct iff the argmax of the logits at each of the last len(cont) positions equals the
corresponding cont token.  Prints {"passages", "correct", "acc"}; --out writes one 0/1 per line.
"""
import argparse
import json
import math
import os
import sys
import time

import numpy as np

try:
    import gguf
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers
except ImportError:
    sys.exit("smollm2_ref.py: needs the gguf and tokenizers packages in PYTHONPATH; see the setup "
             "lines at the top of this file")

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
DEFAULT_MODEL = os.path.join(ROOT, "models", "cache", "SmolLM2-135M-Instruct.Q4_1.gguf")
ASSETS = os.path.join(ROOT, "data")
WIKI = os.path.join(ASSETS, "wikitext-2", "wiki.test.raw")
QCHUNK = 128   # attention query-chunk length (only changes speed, not results beyond rounding)
LAMBADA = os.path.join(ASSETS, "lambada", "lambada_test.jsonl")


def log(msg):
    print(msg, file=sys.stderr, flush=True)


# ---------------------------------------------------------------------------------------------
# q/k row permutation (llama.cpp convert_hf_to_gguf.py LlamaModel.permute) and its inverse

def hf_to_gguf(w, n_head):
    """What llama.cpp's converter does to HF's q_proj / k_proj ([out, in]) rows."""
    out = w.shape[0]
    return w.reshape(n_head, 2, out // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def gguf_to_hf(w, n_head):
    """Inverse of hf_to_gguf: back to HF's row order (RoPE pairs (i, i + head_dim/2))."""
    out = w.shape[0]
    return w.reshape(n_head, out // n_head // 2, 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


# ---------------------------------------------------------------------------------------------
# tokenizer

def gguf_strings(reader, key):
    f = reader.fields[key]
    return [bytes(f.parts[i]).decode("utf-8") for i in f.data]


def build_tokenizer(reader):
    assert reader.fields["tokenizer.ggml.model"].contents() == "gpt2"
    tokens = gguf_strings(reader, "tokenizer.ggml.tokens")
    merges = []
    for m in gguf_strings(reader, "tokenizer.ggml.merges"):
        a, b = m.split(" ")          # byte-level strings never contain a real space
        merges.append((a, b))
    tt = reader.fields["tokenizer.ggml.token_type"]
    types = [int(tt.parts[i][0]) for i in tt.data]
    vocab = {t: i for i, t in enumerate(tokens)}
    assert len(vocab) == len(tokens), "duplicate token strings"
    tok = Tokenizer(models.BPE(vocab=vocab, merges=merges, dropout=None, unk_token=None,
                               fuse_unk=False, byte_fallback=False))
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Digits(individual_digits=True),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)])
    tok.decoder = decoders.ByteLevel()
    control = [i for i, t in enumerate(types) if t == 3]
    tok.add_special_tokens([AddedToken(tokens[i], special=True, normalized=False) for i in control])
    for i in control:
        assert tok.token_to_id(tokens[i]) == i
    return tok, tokens, control


def encode(tok, text):
    return tok.encode(text, add_special_tokens=False).ids


# ---------------------------------------------------------------------------------------------
# model

class SmolLM2:
    def __init__(self, path, dtype=np.float64):
        t0 = time.time()
        r = gguf.GGUFReader(path)
        self.reader = r
        meta = {k: f.contents() for k, f in r.fields.items()
                if k.startswith("llama.") or k in ("general.architecture",
                                                   "tokenizer.ggml.bos_token_id",
                                                   "tokenizer.ggml.eos_token_id")}
        assert meta["general.architecture"] == "llama"
        self.n_layer = int(meta["llama.block_count"])
        self.dim = int(meta["llama.embedding_length"])
        self.n_head = int(meta["llama.attention.head_count"])
        self.n_kv = int(meta["llama.attention.head_count_kv"])
        self.hidden = int(meta["llama.feed_forward_length"])
        self.eps = float(meta["llama.attention.layer_norm_rms_epsilon"])
        self.theta = float(meta["llama.rope.freq_base"])
        self.hd = self.dim // self.n_head
        assert int(meta.get("llama.rope.dimension_count", self.hd)) == self.hd
        assert (self.n_layer, self.dim, self.n_head, self.n_kv, self.hidden, self.hd) == \
            (30, 576, 9, 3, 1536, 64)
        assert self.theta == 100000.0 and abs(self.eps - 1e-5) < 1e-12
        self.eps = 1e-5   # the GGUF stores the float32 rounding of 1e-5
        self.bos = meta.get("tokenizer.ggml.bos_token_id")
        self.eos = meta.get("tokenizer.ggml.eos_token_id")
        self.dtype = dtype

        tensors = {t.name: t for t in r.tensors}
        self.types = {}

        def get(name, shape):
            t = tensors[name]
            a = np.asarray(gguf.quants.dequantize(t.data, t.tensor_type), dtype=np.float32)
            # gguf-py returns PyTorch order (out, in) for GGUF ne = [in, out]: no reshape needed
            assert a.shape == tuple(shape), (name, a.shape, shape)
            self.types[name] = t.tensor_type.name
            return a.astype(dtype)

        assert "output.weight" not in tensors          # tied embeddings
        self.vocab = int(tensors["token_embd.weight"].shape[1])
        assert self.vocab == 49152
        self.embd = get("token_embd.weight", (self.vocab, self.dim))
        self.out_norm = get("output_norm.weight", (self.dim,))
        qd, kd = self.n_head * self.hd, self.n_kv * self.hd
        self.layers = []
        for i in range(self.n_layer):
            p = "blk.%d." % i
            L = {
                "attn_norm": get(p + "attn_norm.weight", (self.dim,)),
                # undo llama.cpp's q/k row permutation (see the module docstring)
                "wq": gguf_to_hf(get(p + "attn_q.weight", (qd, self.dim)), self.n_head),
                "wk": gguf_to_hf(get(p + "attn_k.weight", (kd, self.dim)), self.n_kv),
                "wv": get(p + "attn_v.weight", (kd, self.dim)),
                "wo": get(p + "attn_output.weight", (self.dim, qd)),
                "ffn_norm": get(p + "ffn_norm.weight", (self.dim,)),
                "wg": get(p + "ffn_gate.weight", (self.hidden, self.dim)),
                "wu": get(p + "ffn_up.weight", (self.hidden, self.dim)),
                "wd": get(p + "ffn_down.weight", (self.dim, self.hidden)),
            }
            self.layers.append(L)
        assert len(tensors) == 2 + 9 * self.n_layer
        self.inv_freq = self.theta ** (-np.arange(0, self.hd, 2, dtype=np.float64) / self.hd)
        log("loaded %s (%s) in %.1fs" % (os.path.basename(path), np.dtype(dtype).name, time.time() - t0))

    def rmsnorm(self, x, w):
        return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + self.eps) * w

    def rope_tables(self, pos):
        freqs = np.outer(pos.astype(np.float64), self.inv_freq)        # (N, hd/2)
        emb = np.concatenate([freqs, freqs], axis=-1)                   # (N, hd), HF layout
        return np.cos(emb).astype(self.dtype), np.sin(emb).astype(self.dtype)

    @staticmethod
    def rotate_half(x):
        h = x.shape[-1] // 2
        return np.concatenate([-x[..., h:], x[..., :h]], axis=-1)

    def apply_rope(self, x, cos, sin):
        # x: (N, heads, hd); cos/sin: (N, hd)
        return x * cos[:, None, :] + self.rotate_half(x) * sin[:, None, :]

    def hidden_states(self, seqs):
        """seqs: list of token-id sequences, each evaluated on its own from position 0 (packed
        row-wise for the linear layers; attention is per sequence, causal).  Returns the final
        RMSNorm output, shape (sum of lengths, dim), rows in sequence order."""
        lens = [len(s) for s in seqs]
        ids = np.concatenate([np.asarray(s, dtype=np.int64) for s in seqs])
        pos = np.concatenate([np.arange(n) for n in lens])
        starts = np.concatenate([[0], np.cumsum(lens)])
        N, H, KV, hd = len(ids), self.n_head, self.n_kv, self.hd
        rep = H // KV
        cos, sin = self.rope_tables(pos)
        scale = 1.0 / math.sqrt(hd)
        maxlen = max(lens)
        causal = np.triu(np.ones((maxlen, maxlen), dtype=bool), k=1)
        x = self.embd[ids]
        for L in self.layers:
            h = self.rmsnorm(x, L["attn_norm"])
            q = (h @ L["wq"].T).reshape(N, H, hd)
            k = (h @ L["wk"].T).reshape(N, KV, hd)
            v = (h @ L["wv"].T).reshape(N, KV, hd)
            q = self.apply_rope(q, cos, sin)
            k = self.apply_rope(k, cos, sin)
            att = np.empty((N, H, hd), dtype=self.dtype)
            for si, n in enumerate(lens):
                a, b = starts[si], starts[si] + n
                # query head g*rep + r uses KV head g (HF repeat_kv)
                qs = q[a:b].transpose(1, 0, 2).reshape(KV, rep, n, hd)
                ks = k[a:b].transpose(1, 0, 2)[:, None]                  # (KV, 1, n, hd)
                vs = v[a:b].transpose(1, 0, 2)[:, None]
                o = np.empty((KV, rep, n, hd), dtype=self.dtype)
                # queries in chunks of QCHUNK; chunk [c0, c1) attends to keys [0, c1) (causal)
                for c0 in range(0, n, QCHUNK):
                    c1 = min(n, c0 + QCHUNK)
                    s = (qs[:, :, c0:c1] @ ks[:, :, :c1].swapaxes(-1, -2)) * scale   # (KV, rep, c, c1)
                    s[..., causal[c0:c1, :c1]] = -np.inf
                    s -= s.max(axis=-1, keepdims=True)
                    np.exp(s, out=s)
                    s /= s.sum(axis=-1, keepdims=True)
                    o[:, :, c0:c1] = s @ vs[:, :, :c1]
                att[a:b] = o.reshape(H, n, hd).transpose(1, 0, 2)
            x = x + att.reshape(N, H * hd) @ L["wo"].T
            h = self.rmsnorm(x, L["ffn_norm"])
            g = h @ L["wg"].T
            u = h @ L["wu"].T
            silu = g * (0.5 * (1.0 + np.tanh(0.5 * g)))                  # g * sigmoid(g), stable
            x = x + (silu * u) @ L["wd"].T
        return self.rmsnorm(x, self.out_norm)

    def logits(self, h):
        return h @ self.embd.T                                            # tied LM head


def log_softmax_rows(z):
    m = z.max(axis=-1, keepdims=True)
    lse = m[:, 0] + np.log(np.exp(z - m).sum(axis=-1))
    return lse


# ---------------------------------------------------------------------------------------------
# evaluations

def run_ppl(model, tok, text_path, seq_len, max_windows=None, out=None, score_from=0):
    with open(text_path, "rb") as f:
        text = f.read().decode("utf-8")
    ids = np.asarray(encode(tok, text), dtype=np.int64)
    n = len(ids)
    W = n // seq_len
    if max_windows is not None:
        W = min(W, max_windows)
    t0 = time.time()
    nll_sum = 0.0
    scored = 0
    per_window = []
    for w in range(W):
        win = ids[w * seq_len:(w + 1) * seq_len]
        h = model.hidden_states([win[:-1]])          # position L-1's output predicts nothing
        z = model.logits(h)                           # (L-1, vocab)
        lse = log_softmax_rows(z)
        tgt = win[1:]
        nll = (lse - z[np.arange(len(tgt)), tgt])[score_from:]  # predictions from position score_from on
        tgt = tgt[score_from:]
        s = float(np.sum(nll, dtype=np.float64))
        per_window.append(s)
        nll_sum += s
        scored += len(tgt)
        if (w + 1) % 10 == 0 or w + 1 == W or w < 2:
            el = time.time() - t0
            log("ppl window %d/%d  running ppl %.6f  %.1fs (%.2fs/window, eta %.0fs)" % (
                w + 1, W, math.exp(nll_sum / scored), el, el / (w + 1), el / (w + 1) * (W - w - 1)))
    res = {"tokens": int(n), "windows": int(W), "scored": int(scored), "nll_sum": nll_sum,
           "ppl": math.exp(nll_sum / scored) if scored else float("nan"),
           "seconds": round(time.time() - t0, 1)}
    if out:
        with open(out, "w") as f:
            for w, s in enumerate(per_window):
                f.write("%d %.17g\n" % (w, s))
    return res


def lambada_requests(tok, path, max_n, prefix_id):
    reqs = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            if not line.strip():
                continue
            if max_n is not None and len(reqs) >= max_n:
                break
            t = json.loads(line)["text"]
            context = " ".join(t.split(" ")[:-1])
            continuation = " " + t.split(" ")[-1]
            n_spaces = len(context) - len(context.rstrip())
            if n_spaces > 0:
                continuation = context[-n_spaces:] + continuation
                context = context[:-n_spaces]
            if context == "":
                ctx, cont = [prefix_id], encode(tok, continuation)
            else:
                whole = encode(tok, context + continuation)
                ctx = encode(tok, context)
                cont = whole[len(ctx):]
            assert len(cont) > 0
            reqs.append((ctx, cont))
    return reqs


def run_lambada(model, tok, path, max_n=None, out=None, pack_tokens=2048):
    prefix_id = model.bos if model.bos is not None else model.eos
    reqs = lambada_requests(tok, path, max_n, prefix_id)
    t0 = time.time()
    results = [None] * len(reqs)
    i = 0
    done = 0
    total_tok = 0
    while i < len(reqs):
        batch, ntok = [], 0
        while i < len(reqs) and (not batch or ntok + len(reqs[i][0]) + len(reqs[i][1]) - 1 <= pack_tokens):
            batch.append(i)
            ntok += len(reqs[i][0]) + len(reqs[i][1]) - 1
            i += 1
        seqs = [(reqs[j][0] + reqs[j][1])[:-1] for j in batch]
        h = model.hidden_states(seqs)
        # rows predicting the continuation: the last len(cont) positions of each sequence
        rows, off = [], 0
        for j, s in zip(batch, seqs):
            nc = len(reqs[j][1])
            rows.append(np.arange(off + len(s) - nc, off + len(s)))
            off += len(s)
        z = model.logits(h[np.concatenate(rows)])
        am = z.argmax(axis=-1)
        k = 0
        for j in batch:
            nc = len(reqs[j][1])
            results[j] = int(all(int(am[k + c]) == reqs[j][1][c] for c in range(nc)))
            k += nc
        done += len(batch)
        total_tok += ntok
        el = time.time() - t0
        if done % 100 < len(batch) or done == len(reqs):
            log("lambada %d/%d  acc %.4f  %.1fs (%.0f tok/s, eta %.0fs)" % (
                done, len(reqs), sum(results[:done]) / done, el, total_tok / el,
                el / done * (len(reqs) - done)))
    correct = sum(results)
    res = {"passages": len(reqs), "correct": int(correct), "acc": correct / len(reqs),
           "seconds": round(time.time() - t0, 1)}
    if out:
        with open(out, "w") as f:
            f.write("".join("%d\n" % r for r in results))
    return res, results


# ---------------------------------------------------------------------------------------------
# self-test

def selftest(model_path):
    ok = True

    def check(cond, what):
        nonlocal ok
        print("%s %s" % ("ok  " if cond else "FAIL", what))
        ok = ok and bool(cond)

    rng = np.random.default_rng(0)
    for heads, out in ((9, 576), (3, 192)):
        w = rng.standard_normal((out, 576))
        check(np.array_equal(gguf_to_hf(hf_to_gguf(w, heads), heads), w), "gguf_to_hf(hf_to_gguf(w)) == w, %d heads" % heads)
        check(np.array_equal(hf_to_gguf(gguf_to_hf(w, heads), heads), w), "hf_to_gguf(gguf_to_hf(w)) == w, %d heads" % heads)
        check(not np.array_equal(hf_to_gguf(w, heads), w), "the permutation is not the identity, %d heads" % heads)

    m = SmolLM2(model_path)
    check(m.types["blk.0.attn_k.weight"] == "Q4_1" and m.layers[0]["wk"].shape == (192, 576), "blk.0.attn_k: Q4_1, (192, 576)")
    check(m.types["token_embd.weight"] == "Q8_0" and m.embd.shape == (49152, 576), "token_embd: Q8_0, (49152, 576)")
    check(m.types["blk.0.attn_norm.weight"] == "F32", "norms: F32")

    # RoPE equivalence: rotate_half on HF-order rows == adjacent pairs on the stored GGUF rows
    L0 = m.layers[0]
    x = rng.standard_normal((7, 576))
    pos = np.arange(7) * 13 + 5
    cos, sin = m.rope_tables(pos)
    q = m.apply_rope((x @ L0["wq"].T).reshape(7, 9, 64), cos, sin)
    k = m.apply_rope((x @ L0["wk"].T).reshape(7, 3, 64), cos, sin)

    def rope_adjacent(v):
        ang = pos[:, None] * m.inv_freq[None, :]                          # (N, hd/2)
        c, s = np.cos(ang)[:, None, :], np.sin(ang)[:, None, :]
        a, b = v[..., 0::2], v[..., 1::2]
        r = np.empty_like(v)
        r[..., 0::2] = a * c - b * s
        r[..., 1::2] = a * s + b * c
        return r
    qg = rope_adjacent((x @ hf_to_gguf(L0["wq"], 9).T).reshape(7, 9, 64))
    kg = rope_adjacent((x @ hf_to_gguf(L0["wk"], 3).T).reshape(7, 3, 64))
    s_hf = np.einsum("ihd,jhd->hij", q[:, 0::3], k)     # heads 0, 3, 6 with KV heads 0, 1, 2
    s_gg = np.einsum("ihd,jhd->hij", qg[:, 0::3], kg)
    err = np.max(np.abs(s_hf - s_gg)) / np.max(np.abs(s_hf))
    check(err < 1e-12, "HF rotate_half RoPE on unpermuted q/k == adjacent-pair RoPE on stored rows (rel err %.1e)" % err)
    check(np.allclose(q.reshape(7, 9, 2, 32).swapaxes(-1, -2).reshape(7, 9, 64), qg, rtol=0, atol=1e-9),
          "per head, HF dims (i, i+32) are GGUF dims (2i, 2i+1)")

    tok, tokens, control = build_tokenizer(m.reader)
    check(len(control) == 17 and tokens[0] == "<|endoftext|>", "17 CONTROL tokens, id 0 = <|endoftext|>")
    check(encode(tok, "Hello world") == [19556, 905], "'Hello world' -> 19556 905")
    check(encode(tok, " Hello world") == [38699, 905], "' Hello world' -> 38699 905")
    check([tokens[i] for i in encode(tok, "Hello world")] == ["Hello", "\u0120world"], "byte-level pieces Hello, Gworld")
    check(encode(tok, "3333333 33 3") == [35, 35, 35, 35, 35, 35, 35, 216, 35, 35, 216, 35], "digits split one by one")
    check(encode(tok, "<|im_start|>user\n")[0] == 1, "<|im_start|> is one special token")
    s = "naïve café 😁 \n\n\t x  y"
    check(tok.decode(encode(tok, s), skip_special_tokens=False) == s, "decode(encode(s)) == s")
    # compare with tests/golden/tokens_smollm2.txt (written by tools/ref/hf_tokenize.py) if present
    gold = os.path.join(ROOT, "tests", "golden", "tokens_smollm2.txt")
    if os.path.exists(gold):
        n = bad = 0
        for line in open(gold, encoding="utf-8"):
            p = line.split()
            if len(p) >= 5 and p[0] == "string" and p[1] == "smollm2" and p[2] == "special":
                text = "" if p[3] == "-" else bytes.fromhex(p[3]).decode("utf-8")
                n += 1
                bad += encode(tok, text) != [int(v) for v in p[5:]]
            # "file smollm2 wikitext-2/wiki.test.raw MODE COUNT HASH" (plain mode: wiki.test.raw
            # holds no special-token text, so both modes agree)
            if len(p) == 6 and p[0] == "file" and p[1] == "smollm2" and p[2] == "wikitext-2/wiki.test.raw":
                with open(WIKI, "rb") as f:
                    wid = encode(tok, f.read().decode("utf-8"))
                h = 0xcbf29ce484222325
                for b in np.asarray(wid, dtype="<u4").tobytes():
                    h = ((h ^ b) * 0x100000001b3) & 0xFFFFFFFFFFFFFFFF
                check(len(wid) == int(p[4]) and "%016x" % h == p[5],
                      "wiki.test.raw: %d tokens, FNV-1a %016x (golden %s %s)" % (len(wid), h, p[4], p[5]))
        check(n > 0 and bad == 0, "%d/%d golden strings of tokens_smollm2.txt agree" % (n - bad, n))
    print("selftest", "PASSED" if ok else "FAILED")
    return ok


# ---------------------------------------------------------------------------------------------

def main():
    ap = argparse.ArgumentParser(description="numpy reference for SmolLM2-135M-Instruct")
    ap.add_argument("--model", default=DEFAULT_MODEL)
    ap.add_argument("--dtype", choices=["float64", "float32"], default="float64")
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("ppl")
    p.add_argument("--text", required=True)
    p.add_argument("--seq-len", type=int, required=True)
    p.add_argument("--max-windows", type=int)
    p.add_argument("--out", help="per-window NLL sums, one 'window nll_sum' per line")
    p.add_argument("--score-from", type=int, default=0,
                   help="score only the predictions from this position on (llama-perplexity: seq_len/2)")
    p = sub.add_parser("lambada")
    p.add_argument("--file", default=LAMBADA)
    p.add_argument("--max", type=int)
    p.add_argument("--out", help="per-passage 0/1, one per line")
    sub.add_parser("selftest")
    sub.add_parser("golden")
    a = ap.parse_args()
    dtype = np.float64 if a.dtype == "float64" else np.float32

    if a.cmd == "selftest":
        sys.exit(0 if selftest(a.model) else 1)

    model = SmolLM2(a.model, dtype)
    tok, _, _ = build_tokenizer(model.reader)
    if a.cmd == "ppl":
        print(json.dumps(run_ppl(model, tok, a.text, a.seq_len, a.max_windows, a.out, a.score_from)), flush=True)
    elif a.cmd == "lambada":
        res, _ = run_lambada(model, tok, a.file, a.max, a.out)
        print(json.dumps(res), flush=True)
    elif a.cmd == "golden":
        pr = run_ppl(model, tok, WIKI, 512, 8)
        hr = run_ppl(model, tok, WIKI, 512, 8, score_from=256)
        lr, per = run_lambada(model, tok, LAMBADA, 300)
        print("# smollm2_ref.txt: written by `PYTHONPATH=/tmp/refpy /usr/bin/python3 tools/ref/smollm2_ref.py golden`")
        print("# (independent numpy %s reference of SmolLM2-135M-Instruct = the dequantized weights of" % a.dtype)
        print("# models/cache/SmolLM2-135M-Instruct.Q4_1.gguf; HF tokenizers; see the script's docstring).")
        print("# ppl: ppl --text data/wikitext-2/wiki.test.raw --seq-len 512 --max-windows 8")
        print("#   (tokens = whole file, no BOS; windows of 512 from position 0, 511 scored each)")
        print("# lambada: lambada --file data/lambada/lambada_test.jsonl --max 300 (lambada_openai)")
        print("ppl wiki.test.raw 512 max_windows=8 tokens=%d windows=%d scored=%d nll_sum=%.10f ppl=%.8f" % (
            pr["tokens"], pr["windows"], pr["scored"], pr["nll_sum"], pr["ppl"]))
        print("# ppl_second_half: the same windows, only predictions from position 256 on (--score-from 256,")
        print("#   llama-perplexity's way; lmpress eval --score-second-half)")
        print("ppl_second_half wiki.test.raw 512 max_windows=8 score_from=256 scored=%d nll_sum=%.10f ppl=%.8f" % (
            hr["scored"], hr["nll_sum"], hr["ppl"]))
        print("lambada lambada_test.jsonl max=300 correct=%d passages=%d acc=%.6f" % (
            lr["correct"], lr["passages"], lr["acc"]))
        print("# per-passage lambada results (1 = all continuation tokens greedy-correct), passages 0..%d:" % (len(per) - 1))
        for i in range(0, len(per), 100):
            print("# lambada_per_passage %d %s" % (i, "".join(str(r) for r in per[i:i + 100])))


if __name__ == "__main__":
    main()
