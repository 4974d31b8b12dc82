#!/usr/bin/env python3
"""block_grad_ref.py: an independent float64 reference for the gradients of one transformer block
(llama or gpt2 family) and of the LM-head training losses (cross-entropy, KL to reference
logits), for the C backward pass to be tested against.

Nothing here is hand-derived: the gradients come from a small, generic, tape-based reverse-mode
automatic differentiation over numpy float64 arrays (section 1: a `Var` holds `.value` and
`.grad`; every primitive op records its parents and a local vector-Jacobian product; backward()
walks the tape in reverse topological order).  The model (section 2) is built only from those
primitives.  `selftest` checks every gradient against central finite differences (h = 1e-6,
float64) of a second, plain-numpy forward written differently (RoPE with complex numbers, GQA
with np.repeat, einsum attention), so it checks the autodiff and the forward at once.

Only numpy (Debian 12's python3-numpy 1.24, or numpy 2.x); Python 3.11.  Usage, from the
repository root:

    /usr/bin/python3 tools/ref/block_grad_ref.py grad DIR    # read DIR, write DIR/ref_*.f64
    /usr/bin/python3 tools/ref/block_grad_ref.py selftest    # finite differences etc., exit 0/1

`grad` prints one summary line and exits 0; on bad input (missing file or key, wrong file size,
unknown key, bad value, non-finite input) it prints one line to stderr naming the file or key and
exits 2.

Dump format (DIR)
-----------------
meta.txt: `key = value` lines (spaces optional; `#` starts a comment; a key may appear once).
  mode       block | head
  family     llama | gpt2                      (mode block; mode head allows only llama)
  T, dim, hidden, n_heads, n_kv_heads, head_dim          ints (mode block)
  T, dim, vocab                                          ints (mode head)
  eps        float (both modes)
  theta      float (llama blocks)
  loss       dot | mse (mode block), ce | kl (mode head)
  llama-family features (mode block; optional, the defaults first; gpt2 takes only the defaults):
  qk_norm    no | yes       per-head RMSNorm of q and k before RoPE (Qwen3): norm2_w, norm3_w
  mlp        swiglu | geglu silu(gate) * up, or gelu_tanh(gate) * up (Gemma)
  rope       theta | table  classic RoPE from theta, or a frequency table: inv_freq.f32, n_rot, mscale
  n_rot      int, even, <= head_dim (rope table): the dims of each head that turn
  mscale     float (rope table): cos and sin are multiplied by it
  post_norms no | yes       RMSNorms on attention's and the MLP's outputs before each residual add
                            (GLM-4, Gemma 2/3): the two norms after the q/k norms (norm2_w,
                            norm3_w without q/k norms, norm4_w, norm5_w with them)
  q_scale    float          q is multiplied by it after RoPE (Gemma's query_pre_attn_scalar); absent: 1
  window     int            query t attends to keys t - window < j <= t; absent: every j <= t
  softcap    float          scores (after 1/sqrt(head_dim)) through softcap tanh(s / softcap); absent: none
  Known keys that the mode does not use are accepted and ignored; any other key is an error.
Arrays: raw little-endian row-major float32 `NAME.f32`, int32 `NAME.i32`; the byte count must
match the shape exactly.  An optional array is present iff its file exists.
  q_dim = n_heads * head_dim, kv_dim = n_kv_heads * head_dim, W[out, in], linear y = x W^T + b.
  mode block, both families:
    x [T, dim]; norm0_w, norm1_w [dim]; wq [q_dim, dim], wk [kv_dim, dim], wv [kv_dim, dim],
    wo [dim, q_dim]; optional bq [q_dim], bk, bv [kv_dim], bo [dim]; wu [hidden, dim],
    wd [dim, hidden]; optional bu [hidden], bd [dim].
    llama: optional norm0_b, norm1_b [dim]; wg [hidden, dim], optional bg [hidden];
           qk_norm yes: norm2_w, norm3_w [head_dim]; rope table: inv_freq.f32 [n_rot/2] (a
           constant input: no gradient is written for it).
    gpt2:  norm0_b, norm1_b [dim] required; no wg/bg.
    loss dot: gy.f32 [T, dim], L = sum(y * gy)
    loss mse: target.f32 [T, dim], L = mean over T*dim of (y - target)^2
  mode head:
    x [T, dim], norm_w [dim], lm_head [vocab, dim]
    loss ce: targets.i32 [T] (0 <= t < vocab), L = mean_t -log_softmax(z[t])[targets[t]]
    loss kl: ref_logits.f32 [T, vocab], p = softmax(ref_logits) (a constant),
             L = mean_t sum_v p (log p - log_softmax(z[t]))
  (ref_logits.f32 is an input despite its ref_ prefix; the outputs all end in .f64.)
  A parameter file that this mode/family cannot take (wg.f32 in a gpt2 block, norm_b.f32 in
  head mode, ...) is an error; other unused .f32/.i32 files get a note on stderr.

Forward (float64 throughout; inputs are converted with astype(float64))
  llama block: RMSNorm n(x) = x / sqrt(mean_j x_j^2 + eps) * w (+ b when given, after scaling);
    xn = n0(x); q, k, v = linears of xn; RoPE on q per head and k per kv head: token t
    (position t from 0), pair i < head_dim/2, ang = t * theta^(-2i/head_dim),
    (x[2i], x[2i+1]) -> (a cos - b sin, a sin + b cos) (adjacent pairs; cos/sin are constants);
    causal attention, head h uses kv head h // (n_heads / n_kv_heads), scores / sqrt(head_dim),
    softmax over j <= t; heads concatenated -> a [T, q_dim]; x1 = x + a Wo^T + bo;
    xn2 = n1(x1); y = x1 + (silu(xn2 Wg^T + bg) * (xn2 Wu^T + bu)) Wd^T + bd, silu(z) = z s(z).
    qk_norm yes: after the linears, q and k are RMS-normalized over each head of head_dim
    (no bias, eps as the block's) times norm2_w (q) and norm3_w (k), before RoPE.
    rope table: pair i < n_rot/2 of each head turns by t * inv_freq[i] (float64), cos and sin
    times mscale; dims n_rot..head_dim-1 pass unchanged.  mlp geglu: gelu_tanh(gate) * up.
    q_scale: q times it after RoPE; window, softcap: as above; post_norms yes:
    x1 = x + n_pa(a Wo^T + bo), y = x1 + n_pm(down's output), RMSNorms without bias.
  gpt2 block: LayerNorm (x - mean) / sqrt(biased var + eps) * w + b; no RoPE; same attention;
    y = x1 + gelu(xn2 Wu^T + bu) Wd^T + bd,
    gelu(z) = 0.5 z (1 + tanh(sqrt(2/pi) (z + 0.044715 z^3))).
  head: logits z = RMSNorm(x; norm_w) lm_head^T [T, vocab].

Outputs, written into DIR (raw little-endian float64, each atomically: temp name + os.replace)
  ref_loss.f64          1 value, L
  ref_y.f64             block: y [T, dim]; head: logits z [T, vocab]
  ref_grad_NAME.f64     dL/dNAME, shape of NAME, for x and every parameter present (not for
                        gy, target, targets, ref_logits).  Stale ref_grad_*.f64 files from an
                        earlier run that this run does not write are removed.

selftest: per-primitive gradient checks (with broadcasting); hand-checked values of RoPE (angles
and pair layout: a position offset would cancel in q.k, so neither the plain forward nor finite
differences could see it; a RoPE table with partial rotary and mscale), the per-head q/k norm, the
GQA head -> kv head map, gelu and silu; then tiny seeded cases for llama and gpt2 blocks (MHA,
GQA, multi-query; biases absent, some, all; both losses; q/k norm with head_dim != dim/heads,
GeGLU, a RoPE table, all three) and the head
(ce, kl): forward against the plain-numpy forward (rel. 1e-12), every gradient entry against
central finite differences (max error / largest gradient entry of the case < 1e-6; ~1e-9 seen);
then dumps written to a temp dir and run through the `grad` command line (outputs compared with the
in-process results), and bad dumps (missing file/key, wrong size, unknown key, ...) that must exit
2. Prints one line per case and `N passed, M failed`; exit status 1 on any failure.
"""

import math
import os
import subprocess
import sys
import tempfile

import numpy as np

F64 = np.float64


# ============================================================================================
# 1. Reverse-mode automatic differentiation (generic; knows nothing about transformers)
# ============================================================================================

class Var:
    """A node of the tape: a float64 array `value`, its gradient `grad` (after backward), the
    parent nodes and a vjp closure g -> tuple of gradients (one per parent, None = skip)."""

    __slots__ = ("value", "grad", "parents", "vjp", "needs_grad")
    __array_ufunc__ = None  # ndarray (op) Var defers to Var's reflected operators

    def __init__(self, value, parents=(), vjp=None, needs_grad=False):
        self.value = np.asarray(value, dtype=F64)
        self.grad = None
        self.parents = parents
        self.vjp = vjp
        self.needs_grad = needs_grad

    shape = property(lambda self: self.value.shape)
    ndim = property(lambda self: self.value.ndim)
    T = property(lambda self: transpose(self))

    def __add__(self, o): return add(self, o)
    def __radd__(self, o): return add(o, self)
    def __sub__(self, o): return sub(self, o)
    def __rsub__(self, o): return sub(o, self)
    def __mul__(self, o): return mul(self, o)
    def __rmul__(self, o): return mul(o, self)
    def __truediv__(self, o): return div(self, o)
    def __rtruediv__(self, o): return div(o, self)
    def __neg__(self): return neg(self)
    def __matmul__(self, o): return matmul(self, o)
    def __rmatmul__(self, o): return matmul(o, self)
    def __getitem__(self, idx): return getitem(self, idx)
    def reshape(self, shape): return reshape(self, shape)
    def sum(self, axis=None, keepdims=False): return vsum(self, axis, keepdims)
    def mean(self, axis=None, keepdims=False): return mean(self, axis, keepdims)

    def backward(self, seed=None):
        """Accumulate d(self)/d(leaf) into every leaf's .grad (seed = d(final)/d(self))."""
        order, seen = [], set()
        stack = [(self, False)]
        while stack:  # iterative post-order DFS = topological order (parents first)
            node, done = stack.pop()
            if done:
                order.append(node)
                continue
            if id(node) in seen:
                continue
            seen.add(id(node))
            stack.append((node, True))
            for p in node.parents:
                if p.needs_grad and id(p) not in seen:
                    stack.append((p, False))
        grads = {id(self): np.ones_like(self.value) if seed is None else np.asarray(seed, F64)}
        for node in reversed(order):
            g = grads.pop(id(node), None)
            if g is None:
                continue
            if node.vjp is None:  # a leaf
                node.grad = g if node.grad is None else node.grad + g
                continue
            for p, gp in zip(node.parents, node.vjp(g)):
                if gp is None or not p.needs_grad:
                    continue
                gp = np.array(gp, dtype=F64)  # a private copy (never a broadcast view)
                assert gp.shape == p.value.shape, (gp.shape, p.value.shape)
                grads[id(p)] = grads[id(p)] + gp if id(p) in grads else gp


def leaf(value):
    """A differentiable input (its .grad is filled by backward)."""
    return Var(np.array(value, dtype=F64), needs_grad=True)


def const(value):
    """A constant: no gradient flows into it."""
    return value if isinstance(value, Var) else Var(value)


def detach(a):
    return Var(const(a).value)


def _op(value, parents, vjp):
    needs = any(p.needs_grad for p in parents)
    return Var(value, parents, vjp if needs else None, needs)


def _unbroadcast(g, shape):
    """Sum g down to `shape` (the adjoint of numpy broadcasting)."""
    while g.ndim > len(shape):
        g = g.sum(axis=0)
    for i, s in enumerate(shape):
        if s == 1 and g.shape[i] != 1:
            g = g.sum(axis=i, keepdims=True)
    return g


def add(a, b):
    a, b = const(a), const(b)
    return _op(a.value + b.value, (a, b),
               lambda g: (_unbroadcast(g, a.shape), _unbroadcast(g, b.shape)))


def sub(a, b):
    a, b = const(a), const(b)
    return _op(a.value - b.value, (a, b),
               lambda g: (_unbroadcast(g, a.shape), _unbroadcast(-g, b.shape)))


def mul(a, b):
    a, b = const(a), const(b)
    return _op(a.value * b.value, (a, b),
               lambda g: (_unbroadcast(g * b.value, a.shape), _unbroadcast(g * a.value, b.shape)))


def div(a, b):
    a, b = const(a), const(b)
    return _op(a.value / b.value, (a, b),
               lambda g: (_unbroadcast(g / b.value, a.shape),
                          _unbroadcast(-g * a.value / (b.value * b.value), b.shape)))


def neg(a):
    a = const(a)
    return _op(-a.value, (a,), lambda g: (-g,))


def matmul(a, b):
    a, b = const(a), const(b)
    if a.ndim != 2 or b.ndim != 2:
        raise ValueError("matmul: 2-D operands only, got %s @ %s" % (a.shape, b.shape))
    return _op(a.value @ b.value, (a, b), lambda g: (g @ b.value.T, a.value.T @ g))


def transpose(a, axes=None):
    a = const(a)
    axes = tuple(range(a.ndim))[::-1] if axes is None else tuple(axes)
    inv = tuple(int(i) for i in np.argsort(axes))
    return _op(np.transpose(a.value, axes), (a,), lambda g: (np.transpose(g, inv),))


def reshape(a, shape):
    a = const(a)
    return _op(a.value.reshape(shape), (a,), lambda g: (g.reshape(a.shape),))


def getitem(a, idx):
    """Basic slices and integer-array indices; repeated indices accumulate (np.add.at)."""
    a = const(a)

    def vjp(g):
        z = np.zeros_like(a.value)
        np.add.at(z, idx, g)
        return (z,)
    return _op(a.value[idx], (a,), vjp)


def concat(xs, axis=0):
    xs = [const(x) for x in xs]
    ax = axis % xs[0].ndim
    cuts = np.cumsum([x.shape[ax] for x in xs])[:-1]
    return _op(np.concatenate([x.value for x in xs], axis=ax), tuple(xs),
               lambda g: tuple(np.split(g, cuts, axis=ax)))


def stack(xs, axis=0):
    xs = [const(x) for x in xs]
    ax = axis % (xs[0].ndim + 1)
    return _op(np.stack([x.value for x in xs], axis=ax), tuple(xs),
               lambda g: tuple(np.take(g, i, axis=ax) for i in range(len(xs))))


def vsum(a, axis=None, keepdims=False):
    a = const(a)

    def vjp(g):
        if axis is not None and not keepdims:
            g = np.expand_dims(g, axis)
        return (np.broadcast_to(g, a.shape),)
    return _op(np.sum(a.value, axis=axis, keepdims=keepdims), (a,), vjp)


def mean(a, axis=None, keepdims=False):
    a = const(a)
    axes = range(a.ndim) if axis is None else ((axis,) if np.ndim(axis) == 0 else axis)
    n = int(np.prod([a.shape[i] for i in axes]))
    return vsum(a, axis, keepdims) * (1.0 / n)


def exp(a):
    a = const(a)
    out = np.exp(a.value)
    return _op(out, (a,), lambda g: (g * out,))


def log(a):
    a = const(a)
    return _op(np.log(a.value), (a,), lambda g: (g / a.value,))


def sqrt(a):
    a = const(a)
    out = np.sqrt(a.value)
    return _op(out, (a,), lambda g: (g / (2.0 * out),))


def tanh(a):
    a = const(a)
    out = np.tanh(a.value)
    return _op(out, (a,), lambda g: (g * (1.0 - out * out),))


def sigmoid(a):
    a = const(a)
    v = a.value
    e = np.exp(-np.abs(v))  # stable on both sides
    out = np.where(v >= 0, 1.0 / (1.0 + e), e / (1.0 + e))
    return _op(out, (a,), lambda g: (g * out * (1.0 - out),))


def where(mask, a, b):
    """mask is a constant boolean array; gradient goes to a where mask, to b elsewhere."""
    mask = np.asarray(mask, dtype=bool)
    a, b = const(a), const(b)
    return _op(np.where(mask, a.value, b.value), (a, b),
               lambda g: (_unbroadcast(np.where(mask, g, 0.0), a.shape),
                          _unbroadcast(np.where(mask, 0.0, g), b.shape)))


def max_const(a, axis=-1):
    """max over an axis (keepdims) as a constant: the softmax shift (no gradient needed)."""
    return Var(np.max(const(a).value, axis=axis, keepdims=True))


def softmax(s, axis=-1):
    e = exp(s - max_const(s, axis))
    return e / vsum(e, axis=axis, keepdims=True)


def log_softmax(z, axis=-1):
    zs = z - max_const(z, axis)
    return zs - log(vsum(exp(zs), axis=axis, keepdims=True))


# ============================================================================================
# 2. Model pieces (only the primitives above)
# ============================================================================================

def linear(x, w, b=None):
    y = x @ w.T
    return y if b is None else y + b


def rmsnorm(x, w, b, eps):
    out = x / sqrt(mean(x * x, axis=-1, keepdims=True) + eps) * w
    return out if b is None else out + b


def layernorm(x, w, b, eps):
    d = x - mean(x, axis=-1, keepdims=True)
    return d / sqrt(mean(d * d, axis=-1, keepdims=True) + eps) * w + b


def rope_cos_sin(T, head_dim, theta):
    half = head_dim // 2
    inv_freq = float(theta) ** (-2.0 * np.arange(half, dtype=F64) / head_dim)
    ang = np.arange(T, dtype=F64)[:, None] * inv_freq[None, :]  # [T, half]
    return np.cos(ang), np.sin(ang)


def rope(x, n, head_dim, theta):
    """x [T, n*head_dim]: rotate adjacent pairs (x[2i], x[2i+1]) of every head by t*freq_i."""
    T = x.shape[0]
    half = head_dim // 2
    cos, sin = rope_cos_sin(T, head_dim, theta)
    cos, sin = cos[:, None, :], sin[:, None, :]  # [T, 1, half], broadcast over heads
    xr = x.reshape((T, n, half, 2))
    a, b = xr[:, :, :, 0], xr[:, :, :, 1]
    return stack([a * cos - b * sin, a * sin + b * cos], axis=3).reshape((T, n * head_dim))


def rope_table(x, n, head_dim, inv_freq, n_rot, mscale):
    """RoPE from a frequency table (scaled RoPE, partial rotary): in each head of x [T, n*head_dim]
    the adjacent pairs (x[2i], x[2i+1]) of the first n_rot dims turn by t*inv_freq[i], cos and
    sin times mscale; dims n_rot.. pass unchanged."""
    T = x.shape[0]
    half = n_rot // 2
    ang = np.arange(T, dtype=F64)[:, None] * np.asarray(inv_freq, F64)[None, :]  # [T, half]
    cos, sin = (mscale * np.cos(ang))[:, None, :], (mscale * np.sin(ang))[:, None, :]
    x3 = x.reshape((T, n, head_dim))
    xr = x3[:, :, :n_rot].reshape((T, n, half, 2))
    a, b = xr[:, :, :, 0], xr[:, :, :, 1]
    turned = stack([a * cos - b * sin, a * sin + b * cos], axis=3).reshape((T, n, n_rot))
    if n_rot < head_dim:
        turned = concat([turned, x3[:, :, n_rot:]], axis=2)
    return turned.reshape((T, n * head_dim))


def head_rmsnorm(x, n, head_dim, w, eps):
    """RMSNorm over each head of x [T, n*head_dim] with one weight [head_dim] (Qwen3's q/k norm)."""
    T = x.shape[0]
    return rmsnorm(x.reshape((T, n, head_dim)), w, None, eps).reshape((T, n * head_dim))


def causal_attention(q, k, v, n_heads, n_kv_heads, head_dim, window=None, softcap=None):
    """window: keys t - window < j <= t only; softcap: scores through softcap tanh(s / softcap)."""
    T = q.shape[0]
    group = n_heads // n_kv_heads
    causal = np.tril(np.ones((T, T), dtype=bool))
    if window:
        causal &= ~np.tril(np.ones((T, T), dtype=bool), -window)  # j <= t - window masked
    scale = 1.0 / math.sqrt(head_dim)
    outs = []
    for h in range(n_heads):
        kh = h // group
        qh = q[:, h * head_dim:(h + 1) * head_dim]
        kk = k[:, kh * head_dim:(kh + 1) * head_dim]
        vv = v[:, kh * head_dim:(kh + 1) * head_dim]
        sc = (qh @ kk.T) * scale
        if softcap:
            sc = tanh(sc * (1.0 / softcap)) * softcap
        s = where(causal, sc, -np.inf)  # exp(-inf) = 0, no gradient
        outs.append(softmax(s, axis=-1) @ vv)
    return concat(outs, axis=1)


def silu(z):
    return z * sigmoid(z)


def gelu_tanh(z):
    c = math.sqrt(2.0 / math.pi)
    return 0.5 * z * (1.0 + tanh(c * (z + 0.044715 * (z * z * z))))


def block_forward(m, P, aux):
    """P: name -> Var (absent optional arrays are simply not in P); aux: the constant inputs
    (inv_freq).  Returns y [T, dim]."""
    g = P.get
    llama = m["family"] == "llama"
    norm = rmsnorm if llama else layernorm
    x = P["x"]
    xn = norm(x, P["norm0_w"], g("norm0_b"), m["eps"])
    q = linear(xn, P["wq"], g("bq"))
    k = linear(xn, P["wk"], g("bk"))
    v = linear(xn, P["wv"], g("bv"))
    if llama and m["qk_norm"] == "yes":
        q = head_rmsnorm(q, m["n_heads"], m["head_dim"], P["norm2_w"], m["eps"])
        k = head_rmsnorm(k, m["n_kv_heads"], m["head_dim"], P["norm3_w"], m["eps"])
    if llama and m["rope"] == "table":
        q = rope_table(q, m["n_heads"], m["head_dim"], aux["inv_freq"], m["n_rot"], m["mscale"])
        k = rope_table(k, m["n_kv_heads"], m["head_dim"], aux["inv_freq"], m["n_rot"], m["mscale"])
    elif llama:
        q = rope(q, m["n_heads"], m["head_dim"], m["theta"])
        k = rope(k, m["n_kv_heads"], m["head_dim"], m["theta"])
    if llama and "q_scale" in m:
        q = q * m["q_scale"]
    a = causal_attention(q, k, v, m["n_heads"], m["n_kv_heads"], m["head_dim"], m.get("window"), m.get("softcap"))
    post = m.get("post_norms") == "yes"
    pa, pm = post_norm_names(m) if post else (None, None)
    ao = linear(a, P["wo"], g("bo"))
    x1 = x + (rmsnorm(ao, P[pa], None, m["eps"]) if post else ao)
    xn2 = norm(x1, P["norm1_w"], g("norm1_b"), m["eps"])
    if llama:
        act = gelu_tanh if m["mlp"] == "geglu" else silu
        hmid = act(linear(xn2, P["wg"], g("bg"))) * linear(xn2, P["wu"], g("bu"))
    else:
        hmid = gelu_tanh(linear(xn2, P["wu"], g("bu")))
    mo = linear(hmid, P["wd"], g("bd"))
    return x1 + (rmsnorm(mo, P[pm], None, m["eps"]) if post else mo)


def head_forward(m, P, aux):
    return linear(rmsnorm(P["x"], P["norm_w"], None, m["eps"]), P["lm_head"])


def np_log_softmax(z):
    zs = z - z.max(axis=-1, keepdims=True)
    return zs - np.log(np.exp(zs).sum(axis=-1, keepdims=True))


def loss_of(m, y, aux):
    loss = m["loss"]
    if loss == "dot":
        return vsum(y * aux["gy"])
    if loss == "mse":
        d = y - aux["target"]
        return vsum(d * d) * (1.0 / d.value.size)
    T = y.shape[0]
    lsm = log_softmax(y, axis=-1)
    if loss == "ce":
        return -vsum(lsm[np.arange(T), aux["targets"]]) * (1.0 / T)
    if loss == "kl":
        lp_ref = np_log_softmax(aux["ref_logits"])  # a constant: no gradient into ref_logits
        p_ref = np.exp(lp_ref)
        return vsum(p_ref * (lp_ref - lsm)) * (1.0 / T)
    raise ValueError("unknown loss %r" % loss)


def compute(m, arrays, aux):
    """arrays: name -> float64 ndarray (x and parameters).  Returns (L, y, {name: grad})."""
    P = {name: leaf(a) for name, a in arrays.items()}
    y = (block_forward if m["mode"] == "block" else head_forward)(m, P, aux)
    L = loss_of(m, y, aux)
    L.backward()
    grads = {name: (v.grad if v.grad is not None else np.zeros_like(v.value))
             for name, v in P.items()}
    return float(L.value), y.value, grads


# ============================================================================================
# 3. Dump I/O
# ============================================================================================

class InputError(Exception):
    pass


INT_KEYS = ("T", "dim", "hidden", "n_heads", "n_kv_heads", "head_dim", "vocab", "n_rot", "window")
FLOAT_KEYS = ("eps", "theta", "mscale", "q_scale", "softcap")
STR_KEYS = {"mode": ("block", "head"), "family": ("llama", "gpt2"),
            "loss": ("dot", "mse", "ce", "kl"), "qk_norm": ("no", "yes"),
            "mlp": ("swiglu", "geglu"), "rope": ("theta", "table"), "post_norms": ("no", "yes")}
FEATURE_DEFAULTS = {"qk_norm": "no", "mlp": "swiglu", "rope": "theta", "post_norms": "no"}
OPTIONAL_FEATURES = ("q_scale", "window", "softcap")  # llama family only, absent by default
LOSS_AUX = {"dot": ("gy", "f32"), "mse": ("target", "f32"),
            "ce": ("targets", "i32"), "kl": ("ref_logits", "f32")}
ALL_PARAM_NAMES = ("x norm0_w norm0_b norm1_w norm1_b norm2_w norm3_w norm4_w norm5_w wq wk wv wo bq bk bv "
                   "bo wg wu wd bg bu bd norm_w norm_b lm_head inv_freq").split()


def parse_meta(path):
    if not os.path.isfile(path):
        raise InputError("%s: missing" % path)
    m = {}
    with open(path, encoding="utf-8") as f:
        for lineno, line in enumerate(f, 1):
            line = line.split("#", 1)[0].strip()
            if not line:
                continue
            if "=" not in line:
                raise InputError("%s:%d: expected `key = value`, got %r" % (path, lineno, line))
            key, val = (s.strip() for s in line.split("=", 1))
            where_ = "%s:%d: key %r" % (path, lineno, key)
            if key in m:
                raise InputError("%s: given twice" % where_)
            if key in INT_KEYS:
                try:
                    m[key] = int(val)
                except ValueError:
                    raise InputError("%s: not an int: %r" % (where_, val)) from None
                if m[key] <= 0:
                    raise InputError("%s: must be > 0, got %d" % (where_, m[key]))
            elif key in FLOAT_KEYS:
                try:
                    m[key] = float(val)
                except ValueError:
                    raise InputError("%s: not a float: %r" % (where_, val)) from None
                if not (math.isfinite(m[key]) and m[key] > 0):
                    raise InputError("%s: must be finite and > 0, got %r" % (where_, val))
            elif key in STR_KEYS:
                if val not in STR_KEYS[key]:
                    raise InputError("%s: must be one of %s, got %r"
                                     % (where_, "|".join(STR_KEYS[key]), val))
                m[key] = val
            else:
                raise InputError("%s: unknown key" % where_)
    return check_meta(m, path)


def check_meta(m, path="meta.txt"):
    def need(*keys):
        for k in keys:
            if k not in m:
                raise InputError("%s: missing key %r (mode %s)" % (path, k, m.get("mode")))
    need("mode")
    if m["mode"] == "block":
        need("family", "T", "dim", "hidden", "n_heads", "n_kv_heads", "head_dim", "eps", "loss")
        for k, v in FEATURE_DEFAULTS.items():
            if m["family"] == "gpt2" and m.get(k, v) != v:
                raise InputError("%s: key %r: %s is a llama-family feature, not gpt2's"
                                 % (path, k, m[k]))
            m.setdefault(k, v)
        for k in OPTIONAL_FEATURES:
            if m["family"] == "gpt2" and k in m:
                raise InputError("%s: key %r is a llama-family feature, not gpt2's" % (path, k))
        if m["family"] == "llama":
            need("theta")
            if m["head_dim"] % 2:
                raise InputError("%s: key 'head_dim' must be even for RoPE, got %d"
                                 % (path, m["head_dim"]))
            if m["rope"] == "table":
                need("n_rot", "mscale")
                if m["n_rot"] % 2 or m["n_rot"] > m["head_dim"]:
                    raise InputError("%s: key 'n_rot' must be even and <= head_dim (%d), got %d"
                                     % (path, m["head_dim"], m["n_rot"]))
        if m["n_heads"] % m["n_kv_heads"]:
            raise InputError("%s: key 'n_kv_heads' (%d) must divide n_heads (%d)"
                             % (path, m["n_kv_heads"], m["n_heads"]))
        if m["loss"] not in ("dot", "mse"):
            raise InputError("%s: key 'loss' must be dot|mse in mode block, got %r"
                             % (path, m["loss"]))
    else:
        need("T", "dim", "vocab", "eps", "loss")
        if m.get("family", "llama") != "llama":
            raise InputError("%s: key 'family': mode head is RMSNorm (llama) only, got %r"
                             % (path, m["family"]))
        m["family"] = "llama"
        if m["loss"] not in ("ce", "kl"):
            raise InputError("%s: key 'loss' must be ce|kl in mode head, got %r"
                             % (path, m["loss"]))
    return m


def array_specs(m):
    """[(name, shape, required)] for x and the parameters, and (name, ext, shape) of the loss."""
    T, dim = m["T"], m["dim"]
    if m["mode"] == "head":
        params = [("x", (T, dim), True), ("norm_w", (dim,), True),
                  ("lm_head", (m["vocab"], dim), True)]
        aux_shape = (T,) if m["loss"] == "ce" else (T, m["vocab"])
    else:
        hd, hid = m["head_dim"], m["hidden"]
        qd, kvd = m["n_heads"] * hd, m["n_kv_heads"] * hd
        gpt2 = m["family"] == "gpt2"
        params = [("x", (T, dim), True),
                  ("norm0_w", (dim,), True), ("norm0_b", (dim,), gpt2),
                  ("norm1_w", (dim,), True), ("norm1_b", (dim,), gpt2),
                  ("wq", (qd, dim), True), ("bq", (qd,), False),
                  ("wk", (kvd, dim), True), ("bk", (kvd,), False),
                  ("wv", (kvd, dim), True), ("bv", (kvd,), False),
                  ("wo", (dim, qd), True), ("bo", (dim,), False)]
        if not gpt2:
            params += [("wg", (hid, dim), True), ("bg", (hid,), False)]
        params += [("wu", (hid, dim), True), ("bu", (hid,), False),
                   ("wd", (dim, hid), True), ("bd", (dim,), False)]
        if m.get("qk_norm") == "yes":
            params += [("norm2_w", (hd,), True), ("norm3_w", (hd,), True)]
        if m.get("post_norms") == "yes":
            params += [(name, (dim,), True) for name in post_norm_names(m)]
        aux_shape = (T, dim)
    name, ext = LOSS_AUX[m["loss"]]
    return params, (name, ext, aux_shape)


def post_norm_names(m):
    """The post-attention and post-MLP norms' files: the two indices after the q/k norms."""
    first = 4 if m.get("qk_norm") == "yes" else 2
    return ("norm%d_w" % first, "norm%d_w" % (first + 1))


def const_specs(m):
    """[(name, shape)]: constant inputs (no gradient), all required when listed."""
    if m["mode"] == "block" and m.get("rope") == "table":
        return [("inv_freq", (m["n_rot"] // 2,))]
    return []


def read_array(d, name, ext, shape):
    path = os.path.join(d, name + "." + ext)
    dtype = np.dtype("<f4" if ext == "f32" else "<i4")
    want = int(np.prod(shape, dtype=np.int64)) * 4
    got = os.path.getsize(path)
    if got != want:
        raise InputError("%s: expected %d bytes (%s %s), got %d"
                         % (path, want, list(shape), "float32" if ext == "f32" else "int32", got))
    a = np.fromfile(path, dtype=dtype).reshape(shape)
    if ext == "f32":
        bad = int(np.count_nonzero(~np.isfinite(a)))
        if bad:
            raise InputError("%s: %d non-finite values" % (path, bad))
        return a.astype(F64)
    return a.astype(np.int64)


def read_dump(d):
    if not os.path.isdir(d):
        raise InputError("%s: not a directory" % d)
    m = parse_meta(os.path.join(d, "meta.txt"))
    params, (aux_name, aux_ext, aux_shape) = array_specs(m)
    arrays, used = {}, {aux_name + "." + aux_ext}
    for name, shape, required in params:
        path = os.path.join(d, name + ".f32")
        used.add(name + ".f32")
        if os.path.isfile(path):
            arrays[name] = read_array(d, name, "f32", shape)
        elif required:
            raise InputError("%s: missing (required for mode %s%s)"
                             % (path, m["mode"], ", family " + m["family"]
                                if m["mode"] == "block" else ""))
    aux_path = os.path.join(d, aux_name + "." + aux_ext)
    if not os.path.isfile(aux_path):
        raise InputError("%s: missing (required for loss %s)" % (aux_path, m["loss"]))
    aux = {aux_name: read_array(d, aux_name, aux_ext, aux_shape)}
    for name, shape in const_specs(m):
        path = os.path.join(d, name + ".f32")
        used.add(name + ".f32")
        if not os.path.isfile(path):
            raise InputError("%s: missing (required for rope table)" % path)
        aux[name] = read_array(d, name, "f32", shape)
    if m["loss"] == "ce":
        t = aux["targets"]
        bad = (t < 0) | (t >= m["vocab"])
        if bad.any():
            raise InputError("%s: target %d out of range [0, %d)"
                             % (aux_path, int(t[bad][0]), m["vocab"]))
    for fn in sorted(os.listdir(d)):
        stem, dot, ext = fn.rpartition(".")
        if not dot or ext not in ("f32", "i32") or fn in used:
            continue
        if stem in ALL_PARAM_NAMES:
            raise InputError("%s: not an input of mode %s%s (refusing to ignore it)"
                             % (os.path.join(d, fn), m["mode"], ", family " + m["family"]
                                if m["mode"] == "block" else ""))
        sys.stderr.write("block_grad_ref: note: ignoring %s\n" % os.path.join(d, fn))
    return m, arrays, aux


def write_f64(d, name, a):
    path = os.path.join(d, name)
    tmp = os.path.join(d, ".%s.tmp%d" % (name, os.getpid()))
    with open(tmp, "wb") as f:
        f.write(np.ascontiguousarray(a, dtype="<f8").tobytes())
    os.replace(tmp, path)


def grad_main(d):
    m, arrays, aux = read_dump(d)
    L, y, grads = compute(m, arrays, aux)
    write_f64(d, "ref_loss.f64", np.array([L]))
    write_f64(d, "ref_y.f64", y)
    written = set()
    for name, g in grads.items():
        write_f64(d, "ref_grad_%s.f64" % name, g)
        written.add("ref_grad_%s.f64" % name)
    for fn in os.listdir(d):
        if fn.startswith("ref_grad_") and fn.endswith(".f64") and fn not in written:
            os.remove(os.path.join(d, fn))
    what = "block %s" % m["family"] if m["mode"] == "block" else "head"
    print("block_grad_ref: %s loss=%s T=%d L=%.17g; wrote ref_loss, ref_y, %d ref_grad_* to %s"
          % (what, m["loss"], m["T"], L, len(grads), d))
    return 0


# ============================================================================================
# 4. selftest
# ============================================================================================

# --- a second forward, plain numpy, formulated differently on purpose --------------------------

def _np_sigmoid(z):
    return 0.5 * (1.0 + np.tanh(0.5 * z))


def plain_block(m, A, aux):
    g = A.get
    T, nh, nkv, hd = m["T"], m["n_heads"], m["n_kv_heads"], m["head_dim"]
    llama = m["family"] == "llama"

    def norm(x, w, b):
        if llama:
            r = x * (1.0 / np.sqrt(np.mean(x ** 2, axis=1, keepdims=True) + m["eps"])) * w
        else:
            r = (x - x.mean(axis=1, keepdims=True)) / np.sqrt(x.var(axis=1, keepdims=True)
                                                               + m["eps"]) * w
        return r if b is None else r + b

    def lin(x, w, b):
        return np.einsum("ti,oi->to", x, w) + (0.0 if b is None else b)

    table = m["rope"] == "table"
    n_rot = m["n_rot"] if table else hd

    def rope_c(x, n):  # complex form: (a + ib) * mscale exp(i t f_i) on the first n_rot dims
        x = x.reshape(T, n, hd).copy()
        xc = x[:, :, :n_rot].reshape(T, n, n_rot // 2, 2)
        z = xc[..., 0] + 1j * xc[..., 1]
        f = aux["inv_freq"] if table else np.exp(-np.log(m["theta"]) * np.arange(0, hd, 2) / hd)
        z = z * (m["mscale"] if table else 1.0) * np.exp(1j * np.outer(np.arange(T), f))[:, None, :]
        x[:, :, :n_rot] = np.stack([z.real, z.imag], axis=-1).reshape(T, n, n_rot)
        return x.reshape(T, n * hd)

    def head_norm(x, n, w):
        xh = x.reshape(T, n, hd)
        return (xh / np.sqrt(np.mean(xh ** 2, axis=2, keepdims=True) + m["eps"]) * w).reshape(T, n * hd)

    x = A["x"]
    xn = norm(x, A["norm0_w"], g("norm0_b"))
    q, k, v = lin(xn, A["wq"], g("bq")), lin(xn, A["wk"], g("bk")), lin(xn, A["wv"], g("bv"))
    if llama and m["qk_norm"] == "yes":
        q, k = head_norm(q, nh, A["norm2_w"]), head_norm(k, nkv, A["norm3_w"])
    if llama:
        q, k = rope_c(q, nh), rope_c(k, nkv)
    qh = q.reshape(T, nh, hd).transpose(1, 0, 2)
    kh = np.repeat(k.reshape(T, nkv, hd).transpose(1, 0, 2), nh // nkv, axis=0)
    vh = np.repeat(v.reshape(T, nkv, hd).transpose(1, 0, 2), nh // nkv, axis=0)
    s = np.einsum("htd,hjd->htj", qh, kh) / np.sqrt(hd)
    s = np.where(np.arange(T)[None, :, None] >= np.arange(T)[None, None, :], s, -np.inf)
    p = np.exp(s - s.max(axis=2, keepdims=True))
    p /= p.sum(axis=2, keepdims=True)
    a = np.einsum("htj,hjd->thd", p, vh).reshape(T, nh * hd)
    x1 = x + lin(a, A["wo"], g("bo"))
    xn2 = norm(x1, A["norm1_w"], g("norm1_b"))
    if llama:
        zg = lin(xn2, A["wg"], g("bg"))
        if m["mlp"] == "geglu":  # erf-free tanh form, written out again
            act = 0.5 * zg * (1.0 + np.tanh(np.sqrt(2.0 / np.pi) * (zg + 0.044715 * zg ** 3)))
        else:
            act = zg * _np_sigmoid(zg)
        hmid = act * lin(xn2, A["wu"], g("bu"))
    else:
        z = lin(xn2, A["wu"], g("bu"))
        hmid = 0.5 * z * (1.0 + np.tanh(np.sqrt(2.0 / np.pi) * (z + 0.044715 * z ** 3)))
    return x1 + lin(hmid, A["wd"], g("bd"))


def plain_head(m, A):
    x = A["x"]
    xn = x / np.sqrt((x * x).mean(axis=1, keepdims=True) + m["eps"]) * A["norm_w"]
    return np.einsum("td,vd->tv", xn, A["lm_head"])


def plain_loss(m, A, aux):
    y = plain_block(m, A, aux) if m["mode"] == "block" else plain_head(m, A)
    T = m["T"]
    if m["loss"] == "dot":
        L = float(np.sum(y * aux["gy"]))
    elif m["loss"] == "mse":
        L = float(np.mean((y - aux["target"]) ** 2))
    else:
        lz = y - y.max(axis=1, keepdims=True)
        lz = lz - np.log(np.exp(lz).sum(axis=1, keepdims=True))
        if m["loss"] == "ce":
            L = -float(np.mean(lz[np.arange(T), aux["targets"]]))
        else:
            r = aux["ref_logits"]
            lr = r - r.max(axis=1, keepdims=True)
            lr = lr - np.log(np.exp(lr).sum(axis=1, keepdims=True))
            L = float(np.sum(np.exp(lr) * (lr - lz)) / T)
    return L, y


# --- random cases ------------------------------------------------------------------------------

def make_case(m, biases, seed, f32=False):
    """Random inputs for meta m.  biases: set of optional names to include (or 'all')."""
    rng = np.random.default_rng(seed)
    m = check_meta(dict(m))
    params, (aux_name, _ext, aux_shape) = array_specs(m)
    A = {}
    for name, shape, required in params:
        if not required and not (biases == "all" or name in biases):
            continue
        if name == "x":
            a = rng.standard_normal(shape)
        elif name.startswith("norm") and name.endswith("_w"):
            a = 1.0 + 0.2 * rng.standard_normal(shape)
        elif len(shape) == 1:  # a bias
            a = 0.2 * rng.standard_normal(shape)
        else:  # a weight [out, in]
            a = rng.standard_normal(shape) * (1.2 / math.sqrt(shape[1]))
        A[name] = a
    if aux_name == "targets":
        aux = {aux_name: rng.integers(0, m["vocab"], size=aux_shape)}
    else:
        aux = {aux_name: rng.standard_normal(aux_shape) * (2.0 if aux_name == "ref_logits" else 1)}
    for name, shape in const_specs(m):  # a table no plain theta gives: slowed pairs
        n_rot = 2 * shape[0]
        aux[name] = (m["theta"] ** (-2.0 * np.arange(shape[0]) / n_rot)
                     / (1.0 + 0.5 * np.arange(shape[0])))
    if f32:  # what a dump can hold exactly
        A = {k: v.astype(np.float32).astype(F64) for k, v in A.items()}
        aux = {k: (v.astype(np.float32).astype(F64) if v.dtype.kind == "f" else v)
               for k, v in aux.items()}
    return m, A, aux


def rel_err(a, b, scale=None):
    scale = max(float(np.max(np.abs(b))) if scale is None else scale, 1e-300)
    return float(np.max(np.abs(a - b))) / scale


def check_model_case(label, m, biases, seed, h=1e-6, tol=1e-6):
    m, A, aux = make_case(m, biases, seed)
    L, y, grads = compute(m, A, aux)
    Lp, yp = plain_loss(m, A, aux)
    fwd = max(rel_err(y, yp), abs(L - Lp) / max(abs(Lp), 1e-300))
    if fwd > 1e-12:
        return False, "%s: forward differs from the plain-numpy forward (rel %.2e)" % (label, fwd)
    scale = max(float(np.max(np.abs(g))) for g in grads.values())
    worst, worst_name, n = 0.0, "", 0
    for name, a in A.items():
        fd = np.empty_like(a)
        for i in np.ndindex(a.shape):
            old = a[i]
            a[i] = old + h
            lp = plain_loss(m, A, aux)[0]
            a[i] = old - h
            lm = plain_loss(m, A, aux)[0]
            a[i] = old
            fd[i] = (lp - lm) / (2 * h)
        n += a.size
        e = rel_err(grads[name], fd, scale)
        if e > worst:
            worst, worst_name = e, name
    ok = worst < tol
    return ok, ("%s: %d params (%s), %d entries vs central FD: max err %.2e (%s) / max|g| %.3g"
                % (label, len(A), " ".join(A), n, worst, worst_name, scale))


def check_primitives(h=1e-6, tol=1e-7):
    """Each primitive (broadcasting included) against central finite differences."""
    rng = np.random.default_rng(7)
    r = rng.standard_normal
    pos = lambda *s: 0.5 + rng.random(s)  # noqa: E731  positive operands for log/sqrt/div
    mask = rng.random((3, 4)) < 0.5
    cases = [
        ("add bcast", [r((3, 4)), r((1, 4))], lambda a, b: a + b),
        ("add scalar-like", [r((3, 4)), r((3, 1))], lambda a, b: 2.0 + a + b),
        ("sub bcast", [r((3, 4)), r((4,))], lambda a, b: a - b - 1.5),
        ("rsub", [r((3, 4))], lambda a: 1.5 - a),
        ("mul bcast", [r((3, 4)), r((3, 1))], lambda a, b: a * b * 3.0),
        ("div bcast", [r((3, 4)), pos(4)], lambda a, b: a / b),
        ("rdiv", [pos(3, 4)], lambda a: 2.0 / a),
        ("neg", [r((3, 4))], lambda a: -a),
        ("matmul", [r((3, 5)), r((5, 4))], lambda a, b: a @ b),
        ("matmul self", [r((4, 4))], lambda a: a @ a.T),
        ("transpose 3d", [r((2, 3, 4))], lambda a: transpose(a, (2, 0, 1)).reshape((4, 6))),
        ("reshape", [r((3, 4))], lambda a: a.reshape((2, 6)) * np.arange(12.0).reshape(2, 6)),
        ("getitem slice", [r((3, 4))], lambda a: a[1:, ::2] * 2.0),
        ("getitem ints", [r((3, 4))], lambda a: a[np.array([0, 2, 2]), np.array([1, 3, 3])]),
        ("getitem ellipsis", [r((2, 3, 4))], lambda a: a[..., 1] * a[..., 2]),
        ("concat", [r((3, 2)), r((3, 4))], lambda a, b: concat([a, b, a], axis=1)),
        ("stack", [r((3, 4)), r((3, 4))], lambda a, b: stack([a, b * b], axis=-1)),
        ("sum axis", [r((3, 4))], lambda a: vsum(a, axis=0) * np.arange(4.0)),
        ("sum keepdims", [r((3, 4))], lambda a: a * vsum(a, axis=-1, keepdims=True)),
        ("sum all", [r((3, 4))], lambda a: vsum(a * a)),
        ("mean", [r((3, 4))], lambda a: a - mean(a, axis=1, keepdims=True)),
        ("exp", [r((3, 4))], lambda a: exp(a)),
        ("log", [pos(3, 4)], lambda a: log(a)),
        ("sqrt", [pos(3, 4)], lambda a: sqrt(a)),
        ("tanh", [r((3, 4))], lambda a: tanh(a)),
        ("sigmoid", [3 * r((3, 4))], lambda a: sigmoid(a)),
        ("where", [r((3, 4)), r((1, 4))], lambda a, b: where(mask, a * a, b)),
        ("where -inf softmax", [r((3, 4))], lambda a: softmax(where(mask | (np.arange(4) == 0),
                                                                    a, -np.inf))),
        ("softmax", [r((3, 4))], lambda a: softmax(a, axis=0)),
        ("log_softmax", [r((3, 4))], lambda a: log_softmax(a)),
        ("reuse", [r((3, 4))], lambda a: a * a + exp(a) * a - a),
    ]
    results = []
    for label, vals, f in cases:
        leaves = [leaf(v) for v in vals]
        out = f(*leaves)
        w = r(out.shape)  # L = sum(out * w): a random cotangent
        vsum(out * w).backward()

        def lossf():
            return float(np.sum(f(*[Var(v) for v in vals]).value * w))
        worst = 0.0
        for v, lf in zip(vals, leaves):
            fd = np.empty_like(v)
            for i in np.ndindex(v.shape):
                old = v[i]
                v[i] = old + h
                lp = lossf()
                v[i] = old - h
                lm = lossf()
                v[i] = old
                fd[i] = (lp - lm) / (2 * h)
            g = lf.grad if lf.grad is not None else np.zeros_like(v)
            worst = max(worst, rel_err(g, fd, max(float(np.max(np.abs(fd))), 1.0)))
        results.append((worst < tol, "primitive %-18s max err %.2e" % (label, worst)))
    return results


def check_known_values():
    """A few hand-checked values of the forward pieces."""
    out = []
    # RoPE: head_dim 4, theta 100: pair 0 turns by t rad, pair 1 by t/10 rad
    x = np.tile(np.array([1.0, 0.0, 0.0, 2.0]), (3, 1))
    r = rope(Var(x), 1, 4, 100.0).value
    want = np.array([[math.cos(t), math.sin(t), -2 * math.sin(t / 10), 2 * math.cos(t / 10)]
                     for t in range(3)])
    out.append((rel_err(r, want, 1.0) < 1e-15, "known RoPE adjacent pairs, t*theta^(-2i/hd)"))
    # causal attention: token 0 sees only itself; GQA maps heads 0,1 -> kv 0 and 2,3 -> kv 1
    rng = np.random.default_rng(3)
    q, k, v = rng.standard_normal((3, 8)), rng.standard_normal((3, 4)), rng.standard_normal((3, 4))
    a = causal_attention(Var(q), Var(k), Var(v), 4, 2, 2).value
    want0 = np.concatenate([v[0, 0:2], v[0, 0:2], v[0, 2:4], v[0, 2:4]])
    s = q[2, 6:8] @ k[:, 2:4].T / math.sqrt(2)
    p = np.exp(s - s.max()) / np.exp(s - s.max()).sum()
    ok = rel_err(a[0], want0, 1.0) < 1e-15 and rel_err(a[2, 6:8], p @ v[:, 2:4], 1.0) < 1e-14
    out.append((ok, "known attention: causal row 0, GQA head 3 -> kv head 1"))
    # RoPE table: head_dim 4, n_rot 2, inv_freq [0.5], mscale 2: pair 0 turns by t/2, scaled by
    # 2; dims 2, 3 pass unchanged
    x = np.tile(np.array([1.0, 0.0, 3.0, 4.0]), (3, 1))
    r = rope_table(Var(x), 1, 4, np.array([0.5]), 2, 2.0).value
    want = np.array([[2 * math.cos(t / 2), 2 * math.sin(t / 2), 3.0, 4.0] for t in range(3)])
    out.append((rel_err(r, want, 1.0) < 1e-15, "known RoPE table: partial rotary, mscale"))
    # q/k norm: each head of width 2 normalized on its own, weight [2] shared by the heads
    x = np.array([[3.0, 4.0, 0.0, 2.0]])
    r = head_rmsnorm(Var(x), 2, 2, Var(np.array([1.0, 10.0])), 0.0).value
    want = np.array([[3 / math.sqrt(12.5), 40 / math.sqrt(12.5), 0.0, 10 * math.sqrt(2.0)]])
    out.append((rel_err(r, want, 1.0) < 1e-14, "known q/k norm: per head, one weight"))
    # gelu(1) (tanh form) and silu(1)
    ge = float(gelu_tanh(Var(1.0)).value)
    si = float(silu(Var(1.0)).value)
    ok = abs(ge - 0.8411919906082768) < 1e-15 and abs(si - 1 / (1 + math.exp(-1))) < 1e-16
    out.append((ok, "known gelu_tanh(1) = %.16g, silu(1) = %.16g" % (ge, si)))
    return out


def write_dump(d, m, A, aux, extra_meta=""):
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "meta.txt"), "w") as f:
        f.write("# written by block_grad_ref.py selftest\n")
        for k, v in m.items():
            f.write("%s = %r\n" % (k, v) if isinstance(v, float) else "%s=%s\n" % (k, v))
        f.write(extra_meta)
    for name, a in A.items():
        a.astype("<f4").tofile(os.path.join(d, name + ".f32"))
    for name, a in aux.items():
        if a.dtype.kind == "f":
            a.astype("<f4").tofile(os.path.join(d, name + ".f32"))
        else:
            a.astype("<i4").tofile(os.path.join(d, name + ".i32"))


def run_cli(*args):
    p = subprocess.run([sys.executable, os.path.abspath(__file__)] + list(args),
                       capture_output=True, text=True)
    return p.returncode, p.stdout, p.stderr


def check_cli_roundtrip(label, m, biases, seed, tmp):
    m, A, aux = make_case(m, biases, seed, f32=True)
    d = os.path.join(tmp, label.replace(" ", "_"))
    write_dump(d, m, A, aux)
    with open(os.path.join(d, "ref_grad_stale.f64"), "wb") as f:
        f.write(b"\0" * 8)
    rc, so, se = run_cli("grad", d)
    if rc != 0:
        return False, "%s: grad exited %d: %s" % (label, rc, (se or so).strip())
    L, y, grads = compute(m, A, aux)
    rd = lambda fn: np.fromfile(os.path.join(d, fn), dtype="<f8")  # noqa: E731
    errs = [abs(rd("ref_loss.f64")[0] - L) / abs(L), rel_err(rd("ref_y.f64").reshape(y.shape), y)]
    for name, g in grads.items():
        errs.append(rel_err(rd("ref_grad_%s.f64" % name).reshape(g.shape), g))
    files = sorted(fn for fn in os.listdir(d) if fn.startswith("ref_") and fn.endswith(".f64"))
    want = sorted(["ref_loss.f64", "ref_y.f64"] + ["ref_grad_%s.f64" % n for n in grads])
    ok = files == want and max(errs) < 1e-13
    return ok, ("%s: `grad DIR` wrote %d files%s, max rel diff vs in-process %.1e"
                % (label, len(files), "" if files == want else " (expected %s)" % want, max(errs)))


def check_cli_errors(tmp):
    base = dict(mode="block", family="llama", T=3, dim=4, hidden=6, n_heads=2, n_kv_heads=1,
                head_dim=2, eps=1e-5, theta=10000.0, loss="dot")
    out = []

    head = dict(mode="head", T=3, dim=4, vocab=5, eps=1e-5, loss="ce")

    def case(label, mutate, expect, meta=base):
        m, A, aux = make_case(meta, (), 11, f32=True)
        d = os.path.join(tmp, "err_" + label.replace(" ", "_"))
        extra = mutate(d, m, A, aux)
        extra = extra if isinstance(extra, str) else ""
        write_dump(d, m, A, aux, extra)
        rc, so, se = run_cli("grad", d)
        lines = se.strip().splitlines()
        ok = rc == 2 and len(lines) == 1 and expect in lines[0] and \
            not os.path.exists(os.path.join(d, "ref_loss.f64"))
        out.append((ok, "bad dump (%s): exit %d, stderr %r" % (label, rc, se.strip())))

    case("missing file", lambda d, m, A, aux: A.pop("wk"), "wk.f32: missing")
    case("wrong size", lambda d, m, A, aux: A.__setitem__("wv", A["wv"][:1]),
         "wv.f32: expected 32 bytes")
    case("unknown key", lambda d, m, A, aux: "n_layers = 3\n", "'n_layers': unknown key")
    case("missing key", lambda d, m, A, aux: m.pop("theta"), "missing key 'theta'")
    def llama_dump_as_gpt2(d, m, A, aux):  # gpt2 meta, norm biases given, wg.f32 left over
        m["family"] = "gpt2"
        A["norm0_b"], A["norm1_b"] = A["norm0_w"] - 1.0, A["norm1_w"] - 1.0
    case("gpt2 with wg", llama_dump_as_gpt2, "wg.f32: not an input")
    case("missing gy", lambda d, m, A, aux: aux.pop("gy"), "gy.f32: missing")
    table = dict(base, rope="table", n_rot=2, mscale=1.0)
    case("missing inv_freq", lambda d, m, A, aux: aux.pop("inv_freq"), "inv_freq.f32: missing",
         meta=table)
    case("n_rot odd", lambda d, m, A, aux: m.__setitem__("n_rot", 1), "key 'n_rot' must be even",
         meta=table)
    case("qk norm missing", lambda d, m, A, aux: A.pop("norm3_w"), "norm3_w.f32: missing",
         meta=dict(base, qk_norm="yes"))
    case("nan input", lambda d, m, A, aux: A["x"].__setitem__((1, 2), np.nan),
         "x.f32: 1 non-finite values")
    case("target out of range", lambda d, m, A, aux: aux["targets"].__setitem__(2, 5),
         "targets.i32: target 5 out of range [0, 5)", meta=head)
    case("head with norm_b", lambda d, m, A, aux: A.__setitem__("norm_b", A["norm_w"]),
         "norm_b.f32: not an input of mode head", meta=head)
    case("bad loss for mode", lambda d, m, A, aux: "loss = ce\n" if m.pop("loss") else "",
         "key 'loss' must be dot|mse in mode block")
    rc, so, se = run_cli("grad", os.path.join(tmp, "no_such_dir"))
    out.append((rc == 2 and "not a directory" in se,
                "bad dump (no dir): exit %d, stderr %r" % (rc, se.strip())))
    return out


def selftest():
    print("block_grad_ref selftest: numpy %s, python %s" % (np.__version__, sys.version.split()[0]))
    L4 = dict(mode="block", family="llama", T=5, dim=6, hidden=10, n_heads=4, n_kv_heads=2,
              head_dim=4, eps=1e-5, theta=10000.0, loss="dot")
    G2 = dict(L4, family="gpt2")
    del G2["theta"]
    H = dict(mode="head", T=4, dim=6, vocab=9, eps=1e-5, loss="ce")
    model_cases = [
        ("llama GQA 4/2 dot, no biases", L4, ()),
        ("llama MQA 4/1 mse, all biases, theta 10", dict(L4, n_kv_heads=1, theta=10.0,
                                                         loss="mse"), "all"),
        ("llama MHA 2/2 dot, qkv biases", dict(L4, n_heads=2, n_kv_heads=2, theta=3.0),
         ("bq", "bk", "bv")),
        ("llama GQA 4/2 mse, norm+mlp biases", dict(L4, T=3, theta=50.0, loss="mse"),
         ("norm0_b", "norm1_b", "bg", "bu", "bd", "bo")),
        ("llama q/k norm, head_dim 2x dim/heads, dot", dict(L4, head_dim=4, n_heads=3, n_kv_heads=1,
                                                             qk_norm="yes"), ()),
        ("llama q/k norm GQA mse, all biases", dict(L4, head_dim=6, qk_norm="yes", loss="mse"), "all"),
        ("llama GeGLU dot, mlp biases", dict(L4, mlp="geglu"), ("bg", "bu", "bd")),
        ("llama RoPE table n_rot 2 of 4, mscale 1.2", dict(L4, rope="table", n_rot=2, mscale=1.2), ()),
        ("llama all features mse", dict(L4, head_dim=8, qk_norm="yes", mlp="geglu", rope="table",
                                        n_rot=4, mscale=0.9, loss="mse"), ("bq", "bk")),
        ("gpt2 MHA 2/2 dot, all biases", dict(G2, n_heads=2, n_kv_heads=2), "all"),
        ("gpt2 GQA 4/2 mse, no linear biases", dict(G2, loss="mse"), ()),
        ("gpt2 T=1 dot, all biases", dict(G2, T=1, n_heads=2, n_kv_heads=1), "all"),
        ("head ce", H, ()),
        ("head kl", dict(H, loss="kl"), ()),
        ("head ce T=1 vocab 3", dict(H, T=1, vocab=3), ()),
    ]
    results = check_primitives() + check_known_values()
    for i, (label, m, biases) in enumerate(model_cases):
        try:
            results.append(check_model_case(label, m, biases, seed=100 + i))
        except Exception as e:  # report and go on
            results.append((False, "%s: %s: %s" % (label, type(e).__name__, e)))
    with tempfile.TemporaryDirectory(prefix="block_grad_ref.") as tmp:
        results.append(check_cli_roundtrip("cli llama GQA mse biases", dict(L4, loss="mse"),
                                           ("bq", "bk", "bv", "bo", "norm1_b"), 201, tmp))
        results.append(check_cli_roundtrip("cli gpt2 dot", G2, "all", 202, tmp))
        results.append(check_cli_roundtrip(
            "cli llama features", dict(L4, head_dim=4, qk_norm="yes", mlp="geglu", rope="table",
                                       n_rot=2, mscale=1.2), (), 205, tmp))
        results.append(check_cli_roundtrip("cli head ce", H, (), 203, tmp))
        results.append(check_cli_roundtrip("cli head kl", dict(H, loss="kl"), (), 204, tmp))
        results += check_cli_errors(tmp)
    nfail = 0
    for ok, msg in results:
        nfail += not ok
        print("%s %s" % ("ok  " if ok else "FAIL", msg))
    print("%d passed, %d failed" % (len(results) - nfail, nfail))
    return 1 if nfail else 0


def main(argv):
    usage = "usage: block_grad_ref.py grad DIR | selftest  (see the module docstring)"
    if len(argv) == 2 and argv[1] == "selftest":
        return selftest()
    if len(argv) == 3 and argv[1] == "grad":
        try:
            return grad_main(argv[2])
        except InputError as e:
            sys.stderr.write("block_grad_ref: error: %s\n" % e)
            return 2
    sys.stderr.write(usage + "\n")
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
