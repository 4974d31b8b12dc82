#!/usr/bin/python3
"""llama2c_ref.py — an independent numpy reference for llama2.c models (stories260K).

Nothing here uses the C code: it reads the llama2.c v0 checkpoint and the llama2.c tokenizer file
itself, tokenizes with its own heap-based BPE (same result as llama2.c's O(n^2) encode()), and
runs the transformer forward over whole windows at once in float64.

Run it with Debian's /usr/bin/python3 (it has python3-numpy; the python3 first on PATH may not).

Regenerating the golden files (from the repository root):
    /usr/bin/python3 tools/ref/llama2c_ref.py tokens     > tests/golden/tokens_stories260K.txt
    /usr/bin/python3 tools/ref/llama2c_ref.py ppl-golden > tests/golden/ppl_stories260K.txt
Checks:
    /usr/bin/python3 tools/ref/llama2c_ref.py greedy | cmp - models/stories260K/reference_greedy_t0.txt
    /usr/bin/python3 tools/ref/llama2c_ref.py selftest     # heap tokenizer == naive llama2.c loop
    /usr/bin/python3 tools/ref/llama2c_ref.py lambada --max 1000 > tests/golden/lambada_stories260K.txt
Other subcommands:
    ppl MODEL TOK TEXT --seq-len L   -> {"tokens": N, "windows": W, "ppl": x}
    imatrix --calib TEXT [-c C] [--chunks N]  -> llama-imatrix's sums of x^2 per block weight (JSON)
    imatrix --calib TEXT [-c C] [--chunks N] --check FILE.gguf  (PYTHONPATH=build/pydeps: gguf-py
        reads FILE, which must be that importance matrix in llama.cpp's GGUF form)
    logits-file TEXT OUT [-c C] [--chunks N]  -> llama-perplexity's --kl-divergence-base file

LAMBADA (lm-evaluation-harness lambada_openai): per JSONL passage, context = ' '.join of all but
the last ' '-separated word, continuation = ' ' + last word; trailing whitespace of the context
moves to the continuation; whole = encode(context + continuation) and ctx = encode(context), both
with BOS (llama2.c's convention); the continuation is whole[len(ctx):]; with an empty context BOS
is the context and the continuation is encoded alone (without BOS).  Correct iff every continuation token is the argmax given the true prefix.

Evaluation protocol (ppl): the text file's bytes as they are, tokenized at once, BOS (id 1)
prepended once -> n tokens.  floor(n / L) non-overlapping windows of L tokens (the tail is
dropped); each window is evaluated on its own from position 0; the L-1 next-token predictions of
every window are scored; ppl = exp(mean NLL over all W*(L-1) scored tokens).

Token hash: FNV-1a 64-bit (offset 0xcbf29ce484222325, prime 0x100000001b3) over the id sequence,
each id as 4 bytes uint32 little-endian, BOS included.
"""
import argparse
import heapq
import json
import os
import random
import re
import struct
import sys

import numpy as np

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
MODEL_DIR = os.path.join(ROOT, "models", "stories260K")
DEFAULT_MODEL = os.path.join(MODEL_DIR, "stories260K.bin")
DEFAULT_TOK = os.path.join(MODEL_DIR, "tok512.bin")

# (name in the golden files, path relative to the repository root)
GOLDEN_TEXTS = [
    ("wiki.test.raw", "data/wikitext-2/wiki.test.raw"),
    ("tinystories-synth-eval.txt", "models/stories260K/tinystories-synth-eval.txt"),
]

# (bos, text) pairs whose full id lists go into the token golden file
GOLDEN_STRINGS = [
    (1, b""),
    (0, b""),
    (1, b"Hello world"),
    (0, b"Hello world"),
    (1, b"Once upon a time, there was a little girl named Lily. She loved to play outside."),
    (1, "naïve café, 日本語, emoji 🙂👍🏽!".encode("utf-8")),
    (1, b"bad utf8: \xff\xfe \xc3 \x80\x80\x80\x80\x80 \xe2\x82"),
    (1, b"nul\x00bytes\x00\x00end"),
    (1, b"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"),
    (1, b"   leading and trailing spaces   \n\nnew lines\tand tabs\n"),
]

FLT_NEG_1E10 = -1e10  # exactly representable in float32: llama2.c's initial best_score


# ---------------------------------------------------------------------------------------------
# Tokenizer
# ---------------------------------------------------------------------------------------------
class Tokenizer:
    def __init__(self, path, vocab_size):
        with open(path, "rb") as f:
            data = f.read()
        (self.max_token_length,) = struct.unpack_from("<i", data, 0)
        off = 4
        self.pieces, self.scores = [], []
        for _ in range(vocab_size):
            score, n = struct.unpack_from("<fi", data, off)
            off += 8
            self.pieces.append(data[off:off + n])
            self.scores.append(score)
            off += n
        self.vocab_size = vocab_size
        self.index = {}
        for i, p in enumerate(self.pieces):
            self.index.setdefault(p, i)  # a duplicated piece keeps its lowest id
        self.max_len = max(len(p) for p in self.pieces)

    def _initial(self, text, bos):
        """llama2.c: BOS, dummy " " when text is non-empty, then one token per codepoint group
        (a byte plus following continuation bytes, at most 4 bytes) or byte fallback id b+3."""
        out = [1] if bos else []
        if text:
            out.append(self.index[b" "])
        n, i, index = len(text), 0, self.index
        while i < n:
            j = i + 1
            while j < n and (text[j] & 0xC0) == 0x80 and j - i < 4:
                j += 1
            tid = index.get(text[i:j])
            if tid is not None:
                out.append(tid)
            else:
                out.extend(b + 3 for b in text[i:j])
            i = j
        return out

    def _merge_of(self, a, b):
        """(score, id) of merging tokens a, b or None when llama2.c would never pick it."""
        pa, pb = self.pieces[a], self.pieces[b]
        if len(pa) + len(pb) > self.max_len:
            return None
        tid = self.index.get(pa + pb)
        if tid is None:
            return None
        s = self.scores[tid]
        if not s > FLT_NEG_1E10:  # strict '>' against -1e10; NaN never merges
            return None
        return s, tid

    def encode(self, text, bos=True):
        """Heap over a linked list.  Heap key (-score, left position); an entry is stale unless
        its right node still follows its left node and both still hold the tokens they held when
        it was pushed."""
        tok = self._initial(text, bos)
        n = len(tok)
        nxt = list(range(1, n)) + [-1]
        prv = list(range(-1, n - 1))
        heap = []
        for i in range(n - 1):
            m = self._merge_of(tok[i], tok[i + 1])
            if m is not None:
                heap.append((-m[0], i, i + 1, tok[i], tok[i + 1], m[1]))
        heapq.heapify(heap)
        while heap:
            _, a, b, ta, tb, tid = heapq.heappop(heap)
            if nxt[a] != b or tok[a] != ta or tok[b] != tb:
                continue
            tok[a] = tid
            tok[b] = -1
            c = nxt[b]
            nxt[a] = c
            if c >= 0:
                prv[c] = a
            p = prv[a]
            if p >= 0:
                m = self._merge_of(tok[p], tid)
                if m is not None:
                    heapq.heappush(heap, (-m[0], p, a, tok[p], tid, m[1]))
            if c >= 0:
                m = self._merge_of(tid, tok[c])
                if m is not None:
                    heapq.heappush(heap, (-m[0], a, c, tid, tok[c], m[1]))
        out, i = [], (0 if n else -1)
        while i >= 0:
            out.append(tok[i])
            i = nxt[i]
        return out

    def encode_naive(self, text, bos=True):
        """llama2.c's O(n^2) loop, for selftest only."""
        tok = self._initial(text, bos)
        while True:
            best_score, best_id, best_idx = FLT_NEG_1E10, -1, -1
            for i in range(len(tok) - 1):
                tid = self.index.get(self.pieces[tok[i]] + self.pieces[tok[i + 1]])
                if tid is not None and self.scores[tid] > best_score:
                    best_score, best_id, best_idx = self.scores[tid], tid, i
            if best_idx < 0:
                return tok
            tok[best_idx:best_idx + 2] = [best_id]

    def decode(self, prev, token):
        """llama2.c decode(): strip a leading space after BOS; '<0xXX>' -> that byte."""
        piece = self.pieces[token]
        if prev == 1 and piece[:1] == b" ":
            piece = piece[1:]
        m = re.match(rb"<0x([0-9A-Fa-f]{1,2})", piece)  # sscanf(piece, "<0x%02hhX>", ...)
        if m:
            return bytes([int(m.group(1), 16)])
        return piece


def safe_piece(piece):
    """llama2.c safe_printf(): the bytes printf("%s") would write, or b'' for a lone byte that is
    neither printable nor whitespace (C locale)."""
    piece = piece.split(b"\0", 1)[0]
    if not piece:
        return b""
    if len(piece) == 1:
        b = piece[0]
        if not (0x20 <= b <= 0x7E or b in b" \t\n\v\f\r"):
            return b""
    return piece


def fnv1a64_ids(ids):
    h = 0xCBF29CE484222325
    for b in np.asarray(ids, dtype="<u4").tobytes():
        h ^= b
        h = (h * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return h


# ---------------------------------------------------------------------------------------------
# Model
# ---------------------------------------------------------------------------------------------
class Model:
    def __init__(self, path):
        with open(path, "rb") as f:
            data = f.read()
        (self.dim, self.hidden, self.n_layers, self.n_heads, self.n_kv_heads, vocab,
         self.seq_len) = struct.unpack_from("<7i", data, 0)
        self.shared = vocab > 0
        self.vocab = abs(vocab)
        self.head_size = self.dim // self.n_heads
        kv_dim = self.n_kv_heads * self.head_size
        w = np.frombuffer(data, dtype="<f4", offset=28).astype(np.float64)
        pos = 0

        def take(*shape):
            nonlocal pos
            n = int(np.prod(shape))
            if pos + n > w.size:
                raise ValueError(f"{path}: truncated checkpoint")
            a = w[pos:pos + n].reshape(shape)
            pos += n
            return a

        D, Hd, L, V = self.dim, self.hidden, self.n_layers, self.vocab
        self.emb = take(V, D)
        self.rms_att = take(L, D)
        self.wq = take(L, D, D)
        self.wk = take(L, kv_dim, D)
        self.wv = take(L, kv_dim, D)
        self.wo = take(L, D, D)
        self.rms_ffn = take(L, D)
        self.w1 = take(L, Hd, D)
        self.w2 = take(L, D, Hd)
        self.w3 = take(L, Hd, D)
        self.rms_final = take(D)
        take(self.seq_len, self.head_size // 2)  # freq_cis_real (unused: RoPE computed below)
        take(self.seq_len, self.head_size // 2)  # freq_cis_imag
        self.wcls = self.emb if self.shared else take(V, D)
        if pos != w.size:
            raise ValueError(f"{path}: {w.size - pos} unexpected trailing floats")

    @staticmethod
    def _rmsnorm(x, w):
        return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + 1e-5) * w

    def forward(self, toks, observe=None):
        """toks [B, T] int -> logits [B, T, V] (float64), every position from 0, causal.
        observe(layer, stem, x): called with each block weight's input x [B, T, in], the weight
        named by llama.cpp's GGUF stem (attn_q, attn_k, attn_v, attn_output, ffn_gate, ffn_up,
        ffn_down)."""
        seen = observe or (lambda layer, stem, x: None)
        toks = np.asarray(toks)
        B, T = toks.shape
        H, KVH, hs = self.n_heads, self.n_kv_heads, self.head_size
        x = self.emb[toks]                                          # [B, T, D]
        freq = 1.0 / 10000.0 ** (np.arange(0, hs, 2) / hs)          # [hs/2]
        ang = np.arange(T)[:, None] * freq[None, :]                 # [T, hs/2]
        cos, sin = np.cos(ang)[None, :, None, :], np.sin(ang)[None, :, None, :]

        def rope(q):  # [B, T, h, hs]: rotate adjacent pairs (2i, 2i+1) of each head
            q0, q1 = q[..., 0::2], q[..., 1::2]
            out = np.empty_like(q)
            out[..., 0::2] = q0 * cos - q1 * sin
            out[..., 1::2] = q0 * sin + q1 * cos
            return out

        causal = np.triu(np.full((T, T), -np.inf), 1)              # [T, S]: -inf above diagonal
        rep = H // KVH
        for l in range(self.n_layers):
            xb = self._rmsnorm(x, self.rms_att[l])
            for stem in ("attn_q", "attn_k", "attn_v"):
                seen(l, stem, xb)
            q = rope((xb @ self.wq[l].T).reshape(B, T, H, hs))
            k = rope((xb @ self.wk[l].T).reshape(B, T, KVH, hs))
            v = (xb @ self.wv[l].T).reshape(B, T, KVH, hs)
            k = np.repeat(k, rep, axis=2)  # query head h uses kv head h // rep
            v = np.repeat(v, rep, axis=2)
            q, k, v = q.transpose(0, 2, 1, 3), k.transpose(0, 2, 3, 1), v.transpose(0, 2, 1, 3)
            att = (q @ k) / np.sqrt(hs) + causal                    # [B, H, T, S]
            att -= att.max(axis=-1, keepdims=True)
            att = np.exp(att)
            att /= att.sum(axis=-1, keepdims=True)
            o = (att @ v).transpose(0, 2, 1, 3).reshape(B, T, self.dim)  # [B, T, H*hs]
            seen(l, "attn_output", o)
            x = x + o @ self.wo[l].T
            xb = self._rmsnorm(x, self.rms_ffn[l])
            seen(l, "ffn_gate", xb)
            seen(l, "ffn_up", xb)
            h1 = xb @ self.w1[l].T
            h3 = xb @ self.w3[l].T
            mid = h1 / (1.0 + np.exp(-h1)) * h3
            seen(l, "ffn_down", mid)
            x = x + mid @ self.w2[l].T
        x = self._rmsnorm(x, self.rms_final)
        return x @ self.wcls.T


def perplexity(model, tok, text, L, batch=16):
    if L < 2 or L > model.seq_len:
        raise ValueError(f"seq_len {L} outside 2..{model.seq_len}")
    ids = np.array(tok.encode(text, bos=True), dtype=np.int64)
    n = ids.size
    W = n // L
    wins = ids[:W * L].reshape(W, L)
    nll = 0.0
    for s in range(0, W, batch):
        w = wins[s:s + batch]
        logits = model.forward(w)[:, :-1]                           # [b, L-1, V]
        m = logits.max(axis=-1, keepdims=True)
        lse = (m[..., 0] + np.log(np.exp(logits - m).sum(axis=-1)))
        tgt = np.take_along_axis(logits, w[:, 1:, None], axis=-1)[..., 0]
        nll += float((lse - tgt).sum())
    scored = W * (L - 1)
    return n, W, float(np.exp(nll / scored)) if scored else float("nan")


# ---------------------------------------------------------------------------------------------
# Subcommands
# ---------------------------------------------------------------------------------------------
def lambada_items(tok, path, max_n):
    """[(ids, n_target)] following the harness's _encode_pair."""
    items = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            if not line.strip():
                continue
            text = json.loads(line)["text"]
            words = text.split(" ")
            context, cont = " ".join(words[:-1]), " " + words[-1]
            n_sp = len(context) - len(context.rstrip())
            if n_sp:
                cont, context = context[-n_sp:] + cont, context[:-n_sp]
            if context:
                whole = tok.encode((context + cont).encode("utf-8"), bos=True)
                ctx = tok.encode(context.encode("utf-8"), bos=True)
            else:  # the harness: [prefix token] as context, the continuation encoded alone
                whole = [1] + tok.encode(cont.encode("utf-8"), bos=False)
                ctx = [1]
            items.append((whole, len(whole) - len(ctx)))
            if max_n and len(items) >= max_n:
                break
    return items


def cmd_lambada(args):
    model = Model(args.model)
    tok = Tokenizer(args.tok, model.vocab)
    correct = 0
    items = lambada_items(tok, os.path.join(ROOT, "data", "lambada", "lambada_test.jsonl"), args.max)
    for ids, n_t in items:
        inp = ids[:-1][-model.seq_len:]
        logits = model.forward(np.array([inp]))[0]
        pred = logits[len(inp) - n_t:].argmax(axis=-1)
        correct += int(np.array_equal(pred, np.array(ids[-n_t:])))
    print("# lambada_stories260K.txt — LAMBADA (lambada_openai definition) of stories260K, first N passages")
    print("# produced by: /usr/bin/python3 tools/ref/llama2c_ref.py lambada --max %d > tests/golden/lambada_stories260K.txt" % args.max)
    print("# passages correct")
    print(len(items), correct)


def cmd_tokens(args):
    tok = Tokenizer(args.tok, args.vocab)
    w = sys.stdout.write
    w("# tokens_stories260K.txt — golden tokenizer output for models/stories260K/tok512.bin\n")
    w("# produced by: /usr/bin/python3 tools/ref/llama2c_ref.py tokens > tests/golden/tokens_stories260K.txt\n")
    w("# (an independent Python BPE implementing llama2.c encode(); not the C tokenizer)\n")
    w("# hash: FNV-1a 64-bit (offset 0xcbf29ce484222325, prime 0x100000001b3) over the id\n")
    w("#       sequence, each id as uint32 little-endian (4 bytes), BOS included when BOS=1\n")
    w("# file NAME BOS COUNT HASH    (NAME: the whole file's bytes, tokenized at once)\n")
    w("# string BOS HEXTEXT COUNT ID...   (HEXTEXT: the text's bytes in hex, '-' when empty)\n")
    for name, rel in GOLDEN_TEXTS:
        with open(os.path.join(ROOT, rel), "rb") as f:
            ids = tok.encode(f.read(), bos=True)
        w(f"file {name} 1 {len(ids)} {fnv1a64_ids(ids):016x}\n")
    for bos, s in GOLDEN_STRINGS:
        ids = tok.encode(s, bos=bool(bos))
        assert ids == tok.encode_naive(s, bos=bool(bos))
        w(" ".join(["string", str(bos), s.hex() or "-", str(len(ids))] + [str(i) for i in ids]) + "\n")


def cmd_ppl(args):
    model = Model(args.model)
    tok = Tokenizer(args.tok, model.vocab)
    with open(args.text, "rb") as f:
        n, W, ppl = perplexity(model, tok, f.read(), args.seq_len)
    print(json.dumps({"tokens": n, "windows": W, "ppl": ppl}))


def imatrix_sums(model, tok, data, C, max_chunks, batch=16):
    """llama-imatrix -f FILE -c C [--chunks N] on this model, restated from llama.cpp's
    tools/imatrix/imatrix.cpp: the file's bytes without one trailing newline (common's -f drops
    it), tokenized with BOS, cut into len // C chunks of C tokens (at most N), the first token of
    each replaced by BOS; every token of every chunk adds x^2 of each input of each block weight
    to its in_sum2 and 1 to its count.  -> (chunks, {name: (count, in_sum2 float64 [in])})."""
    if data.endswith(b"\n"):
        data = data[:-1]
    ids = np.array(tok.encode(data, bos=True), dtype=np.int64)
    k = ids.size // C
    if max_chunks > 0:
        k = min(k, max_chunks)
    chunks = ids[:k * C].reshape(k, C).copy()
    chunks[:, 0] = 1  # BOS
    sums = {}

    def observe(layer, stem, x):
        name = f"blk.{layer}.{stem}.weight"
        count, s2 = sums.get(name, (0, 0.0))
        sums[name] = (count + x.shape[0] * x.shape[1], s2 + (x * x).sum(axis=(0, 1)))

    for s in range(0, k, batch):
        model.forward(chunks[s:s + batch], observe)
    return k, sums


def check_imatrix_gguf(path, k, C, sums, rel):
    """The file at path, read with the PyPI gguf package (llama.cpp's gguf-py), is the GGUF
    imatrix llama-imatrix would write for these sums: general.type, imatrix.* metadata, one F32
    pair NAME.in_sum2 [in] + NAME.counts [1] per weight, counts exact, sums within rel."""
    import gguf
    r = gguf.GGUFReader(path)
    fields = {name: f.contents() for name, f in r.fields.items()}
    want = {"general.type": "imatrix", "imatrix.chunk_count": k, "imatrix.chunk_size": C}
    for key, value in want.items():
        if fields.get(key) != value:
            sys.exit(f"{path}: {key} is {fields.get(key)!r}, expected {value!r}")
    if len(fields.get("imatrix.datasets") or []) != 1:
        sys.exit(f"{path}: imatrix.datasets is {fields.get('imatrix.datasets')!r}, expected one name")
    tensors = {t.name: t for t in r.tensors}
    expected = {n + ".in_sum2" for n in sums} | {n + ".counts" for n in sums}
    if set(tensors) != expected:
        sys.exit(f"{path}: tensors {sorted(set(tensors) ^ expected)} differ from the weights' pairs")
    worst = 0.0
    for name, (count, s2) in sums.items():
        t_sum, t_count = tensors[name + ".in_sum2"], tensors[name + ".counts"]
        for t in (t_sum, t_count):
            if t.tensor_type != gguf.GGMLQuantizationType.F32:
                sys.exit(f"{path}: {t.name} is {t.tensor_type.name}, not F32")
        if list(t_sum.shape) != [s2.size] or list(t_count.shape) != [1]:
            sys.exit(f"{path}: {name}: shapes {list(t_sum.shape)} and {list(t_count.shape)}, "
                     f"expected [{s2.size}] and [1]")
        if float(t_count.data[0]) != count:
            sys.exit(f"{path}: {name}.counts is {float(t_count.data[0])}, expected {count}")
        got = np.asarray(t_sum.data, dtype=np.float64)
        err = float(np.max(np.abs(got - s2) / np.maximum(np.abs(s2), 1e-30)))
        worst = max(worst, err)
        if err > rel:
            sys.exit(f"{path}: {name}.in_sum2 differs by {err:.3g} (relative) from the reference")
    return worst


def cmd_imatrix(args):
    model = Model(args.model)
    tok = Tokenizer(args.tok, model.vocab)
    with open(args.calib, "rb") as f:
        k, sums = imatrix_sums(model, tok, f.read(), args.ctx, args.chunks)
    if args.check:
        worst = check_imatrix_gguf(args.check, k, args.ctx, sums, args.rel)
        print(f"{args.check}: {len(sums)} entries read by gguf-py match the reference "
              f"(largest relative difference {worst:.3g})")
        return
    print(json.dumps({"chunks": k, "chunk_size": args.ctx,
                      "entries": {name: {"count": c, "in_sum2": [float(v) for v in s2]}
                                  for name, (c, s2) in sorted(sums.items())}}))


def cmd_logits_file(args):
    """llama-perplexity -f TEXT -c C --chunks N --kl-divergence-base OUT, restated from llama.cpp's
    tools/perplexity/perplexity.cpp (perplexity() with a logits file) on this float64 forward:
    "_logits_", uint32 C, int32 vocab, int32 chunks, the int32 tokens of every chunk (as tokenized:
    BOS first in the text, not yet put at each chunk's start), then for every chunk the positions
    C/2 .. C-2 (run with BOS as each chunk's first token), each as float32 scale, float32
    min_log_prob and vocab uint16 codes of its log-softmax (padded to an even count): the logits'
    floor is max - 16, scale = (max - floor) / 65535, code = nearest(((logit - floor) / scale))."""
    model = Model(args.model)
    tok = Tokenizer(args.tok, model.vocab)
    with open(args.text, "rb") as f:
        data = f.read()
    if data.endswith(b"\n"):
        data = data[:-1]
    ids = np.array(tok.encode(data, bos=True), dtype=np.int64)
    C, V = args.ctx, model.vocab
    k = min(ids.size // C, args.chunks) if args.chunks > 0 else ids.size // C
    chunks = ids[:k * C].reshape(k, C)
    nv = 2 * ((V + 1) // 2) + 4
    first = C // 2
    with open(args.out, "wb") as f:
        f.write(b"_logits_" + struct.pack("<Iii", C, V, k))
        f.write(chunks.astype("<i4").tobytes())
        run = chunks.copy()
        run[:, 0] = 1  # BOS at each chunk's start
        for c in range(k):
            logits = model.forward(run[c:c + 1])[0].astype(np.float32)
            for t in range(first, C - 1):
                x = logits[t]
                mx = np.float32(x.max())
                floor = np.float32(max(np.float32(x.min()), mx - np.float32(16)))
                lse = np.float32(np.log(np.sum(np.exp((x - mx).astype(np.float64)))))
                scale = np.float32((mx - floor) / np.float32(65535))
                row = np.zeros(nv, dtype="<u2")
                head = np.array([scale, floor - mx - lse], dtype="<f4")
                row[:4] = np.frombuffer(head.tobytes(), dtype="<u2")
                codes = np.where(x > floor, np.rint((x - floor) / scale), 0) if scale else np.zeros(V)
                row[4:4 + V] = codes.astype("<u2")
                f.write(row.tobytes())
    print(f"{args.out}: {k} chunks of {C}, {V} tokens")


def cmd_ppl_golden(args):
    model = Model(args.model)
    tok = Tokenizer(args.tok, model.vocab)
    L = args.seq_len
    w = sys.stdout.write
    w("# ppl_stories260K.txt — reference perplexity of models/stories260K/stories260K.bin (f32 weights,\n")
    w("# float64 numpy forward) with tok512.bin\n")
    w("# produced by: /usr/bin/python3 tools/ref/llama2c_ref.py ppl-golden > tests/golden/ppl_stories260K.txt\n")
    w("# protocol: file bytes tokenized at once, BOS prepended once (tokens = n incl. BOS);\n")
    w("#   windows = floor(n/seq_len) non-overlapping windows, tail dropped, each from position 0;\n")
    w("#   seq_len-1 predictions scored per window; ppl = exp(mean NLL)\n")
    w("# name seq_len tokens windows ppl\n")
    for name, rel in GOLDEN_TEXTS:
        with open(os.path.join(ROOT, rel), "rb") as f:
            n, W, ppl = perplexity(model, tok, f.read(), L)
        w(f"{name} {L} {n} {W} {ppl:.10g}\n")


def cmd_greedy(args):
    model = Model(args.model)
    tok = Tokenizer(args.tok, model.vocab)
    steps = args.steps
    if steps <= 0 or steps > model.seq_len:
        steps = model.seq_len
    out = sys.stdout.buffer
    seq = [1]  # encode("", bos=1)
    token = 1
    for _ in range(steps):
        logits = model.forward(np.array([seq]))[0, -1]
        nxt = int(np.argmax(logits))  # temperature 0: first maximum
        if nxt == 1:
            break
        out.write(safe_piece(tok.decode(token, nxt)))
        token = nxt
        seq.append(nxt)
    out.write(b"\n")
    out.flush()


def cmd_selftest(args):
    tok = Tokenizer(args.tok, args.vocab)
    rng = random.Random(1234)
    alphabet = [b"a", b"b", b" ", b"e", b"t", b"h", b"\n", b"\xc3", b"\xa9", b"\x80", b"\xf0", b"\x00"]
    cases = [s for _, s in GOLDEN_STRINGS]
    for _ in range(300):
        k = rng.randrange(0, 60)
        if rng.random() < 0.5:
            cases.append(b"".join(rng.choice(alphabet) for _ in range(k)))
        else:
            cases.append(bytes(rng.randrange(256) for _ in range(k)))
    for s in cases:
        for bos in (True, False):
            a, b = tok.encode(s, bos), tok.encode_naive(s, bos)
            if a != b:
                sys.exit(f"MISMATCH for {s!r}: heap {a} naive {b}")
    print(f"selftest: {len(cases)} strings, heap == naive")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)

    def common(p, with_model=True):
        if with_model:
            p.add_argument("--model", default=DEFAULT_MODEL)
        p.add_argument("--tok", default=DEFAULT_TOK)

    p = sub.add_parser("tokens", help="print the golden token file")
    common(p, with_model=False)
    p.add_argument("--vocab", type=int, default=512)
    p.set_defaults(fn=cmd_tokens)

    p = sub.add_parser("ppl", help="perplexity of one text file (JSON)")
    p.add_argument("model")
    p.add_argument("tok")
    p.add_argument("text")
    p.add_argument("--seq-len", type=int, required=True)
    p.set_defaults(fn=cmd_ppl)

    p = sub.add_parser("imatrix", help="llama-imatrix's sums on a text (JSON), or --check a GGUF imatrix")
    common(p)
    p.add_argument("--calib", required=True)
    p.add_argument("-c", "--ctx", type=int, default=512)
    p.add_argument("--chunks", type=int, default=0)
    p.add_argument("--check", metavar="FILE.gguf", help="read FILE with gguf-py and compare it instead")
    p.add_argument("--rel", type=float, default=1e-4, help="--check's relative tolerance on in_sum2")
    p.set_defaults(fn=cmd_imatrix)

    p = sub.add_parser("logits-file", help="llama-perplexity's --kl-divergence-base logits file")
    common(p)
    p.add_argument("text")
    p.add_argument("out")
    p.add_argument("-c", "--ctx", type=int, default=512)
    p.add_argument("--chunks", type=int, default=0)
    p.set_defaults(fn=cmd_logits_file)

    p = sub.add_parser("ppl-golden", help="print the golden perplexity file")
    common(p)
    p.add_argument("--seq-len", type=int, default=256)
    p.set_defaults(fn=cmd_ppl_golden)

    p = sub.add_parser("greedy", help="llama2.c run -t 0.0: greedy steps from BOS")
    common(p)
    p.add_argument("--steps", type=int, default=256)
    p.set_defaults(fn=cmd_greedy)

    p = sub.add_parser("lambada", help="LAMBADA accuracy (lambada_openai definition)")
    common(p)
    p.add_argument("--max", type=int, default=1000)
    p.set_defaults(fn=cmd_lambada)

    p = sub.add_parser("selftest", help="heap tokenizer vs the naive llama2.c loop")
    common(p, with_model=False)
    p.add_argument("--vocab", type=int, default=512)
    p.set_defaults(fn=cmd_selftest)

    args = ap.parse_args()
    args.fn(args)


if __name__ == "__main__":
    main()
