#!/usr/bin/env python3
"""arch_ref_check.py — check that tests/fixtures/arch/*/ (made by arch_fixtures.py) are what they
claim, independently of lmpress.  Run it through `tools/ref/arch_fixtures.sh --check [NAME ...]`
(the pinned venvs), or by hand:

  build/arch-venv/bin/python tools/ref/arch_ref_check.py --converter build/arch-llamacpp/src \
      [--python4 build/arch-venv4/bin/python] [NAME ...]

For each fixture, against logprobs.f64 (max |difference| over all T x V entries; must be <= 1e-12):
  hf5   transformers 5 reloads hf5/ in float64 and reruns the forward; the same for each second
        golden meta.txt lists ("extra" lines: logprobs_gguf.f64, logprobs_short.f64) with its
        config overrides;
  hf4   transformers 4 (the --python4 interpreter, a subprocess) reloads hf4/ and reruns it (not
        for HF4_CANNOT's fixtures, which transformers 4 cannot run in float64: the reason is printed);
  gguf  gguf-py (the converter's own) reads model.gguf; its tensors are mapped back to the HF names
        (gguf.get_tensor_name_map) with the converter's documented transforms undone (Llama's q/k
        row permutation, Gemma's norm + 1, GPT-2's transposes, stacked experts split per expert,
        deepseek2's attn_k_b / attn_v_b joined into kv_b_proj); each tensor must equal hf5's bit
        for bit, and the forward of transformers 5 on those tensors (from_pretrained of a folder
        holding them with the config the GGUF was converted from: hf5's plus FIXTURES' gguf_config)
        must reproduce the golden (the fixture's gguf_golden where that config is another model,
        DeepSeek-V2's logprobs_gguf.f64; else logprobs.f64).
        The GGUF hyper-parameters are printed.  Where the GGUF has rope_freqs (llama3 RoPE), the
        plain frequencies divided by it must equal transformers' scaled ones (1e-6 relative).
  control  a 0.1 % perturbation of one weight matrix (w *= 1 + 1e-3 * N(0, 1), elementwise, seeded),
        for every matrix of the model in turn: the smallest resulting change of the log-probs,
        max|d| / max|logprobs|, must exceed 1e-5 (so a 1e-5 relative tolerance catches any such
        error).  Also reported: max|d| and max(|d| / max(|logprob|, 1)) for that matrix.
Exit status 0 when every check passes, 1 otherwise.
"""
import argparse
import json
import os
import re
import subprocess
import tempfile
import sys

import numpy as np

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
FIX_ROOT = os.path.join(ROOT, "tests", "fixtures", "arch")
EXACT = 1e-12
# GPT-J's modelling computes its attention scores in float32 even in a float64 model (query and key
# cast .to(torch.float32), in transformers 4 and 5 alike), so the two versions' goldens differ by that
# f32 rounding (7.9e-7 here), far below lmpress's 1e-5 but not exact.
HF4_TOLERANCE = {"gptj": 1e-6}
CONTROL_MIN = 1e-5
# fixtures transformers 4 cannot run in float64 (the hf4 check is skipped, saying why)
HF4_CANNOT = {
    # DeepseekV2Attention (4.57.6) scales the scores by qk_head_dim^-0.5 only, without YaRN's softmax
    # mscale^2 (1.2056 here; DeepSeek's code and transformers 5 have it): hf4/ is 3.75 off.  With the
    # factor multiplied in by hand (a one-off check, 2026-11-29) it is 4.2e-6 off: its router runs in
    # float32 whatever the model's dtype.
    "deepseek_v2": "transformers 4's DeepseekV2Attention lacks YaRN's softmax mscale^2 (3.75 off; "
                   "4.2e-6 with it supplied: its router runs in float32)",
    # DeepseekV3MoE.moe (4.57.6) accumulates into a tensor of the router's dtype, float32 whatever the
    # model's (the router casts to float32): index_add_ of the float64 expert outputs fails
    "deepseek_v3": "transformers 4's DeepseekV3MoE accumulates the experts in the router's float32 "
                   "(index_add_ of float64 into float32 fails)",
}


def read_meta(folder):
    meta = {}
    with open(os.path.join(folder, "meta.txt")) as f:
        for line in f:
            k, _, v = line.rstrip("\n").partition(" ")
            meta.setdefault(k, v)
    return meta


def read_fixture(folder):
    meta = read_meta(folder)
    T, V = int(meta["T"]), int(meta["V"])
    with open(os.path.join(folder, "tokens.txt")) as f:
        tokens = [int(x) for x in f.read().split()]
    lp = np.fromfile(os.path.join(folder, "logprobs.f64"), dtype="<f8")
    if len(tokens) != T or lp.size != T * V:
        raise SystemExit(f"{folder}: tokens.txt has {len(tokens)} ids, logprobs.f64 {lp.size} values; meta says T {T}, V {V}")
    return meta, tokens, lp.reshape(T, V)


def forward(model, tokens):
    import torch
    with torch.no_grad():
        logits = model(torch.tensor([tokens], dtype=torch.long)).logits[0]
    return torch.log_softmax(logits.double(), dim=-1).numpy()


def experts_kwargs(folder):
    """As arch_fixtures.py golden_logprobs: a mixture of experts runs its experts one by one in
    float64 (transformers 5's default grouped_mm kernel takes no float64)."""
    with open(os.path.join(folder, "config.json")) as f:
        return {"experts_implementation": "eager"} if "experts" in f.read() else {}


def load_hf(folder, **overrides):
    import torch
    from transformers import AutoModelForCausalLM
    m = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float64, attn_implementation="eager",
                                             **experts_kwargs(folder), **overrides)
    return m.eval()


def worker(folder, tokens_path, out_path):
    """Run in the transformers 4 interpreter: reload folder, write float64 log-probs."""
    import torch
    import transformers
    from transformers import AutoModelForCausalLM
    with open(tokens_path) as f:
        tokens = [int(x) for x in f.read().split()]
    m = AutoModelForCausalLM.from_pretrained(folder, torch_dtype=torch.float64, attn_implementation="eager").eval()
    np.ascontiguousarray(forward(m, tokens), dtype="<f8").tofile(out_path)
    print(transformers.__version__)


# ---- GGUF -> HF names ---------------------------------------------------------------------------


def unpermute_llama(w, n_head):
    """Inverse of the converter's LlamaModel.permute (rotate-half rows -> interleaved rows)."""
    shape = w.shape
    return w.reshape(n_head, shape[0] // n_head // 2, 2, *shape[1:]).swapaxes(1, 2).reshape(shape)


def gguf_state_dict(gguf_path, conv_dir, hf_tensors, cfg):
    """HF name -> numpy array, from the GGUF, the converter's transforms undone; plus the GGUF
    tensors that have no HF counterpart (rope_freqs, rope factors) and the reader."""
    sys.path.insert(0, os.path.join(conv_dir, "gguf-py"))
    import gguf
    rd = gguf.GGUFReader(gguf_path)
    arch_name = rd.fields["general.architecture"].contents()
    arch = next(a for a, n in gguf.MODEL_ARCH_NAMES.items() if n == arch_name)
    n_layer = cfg.get("num_hidden_layers", cfg.get("n_layer"))
    tmap = gguf.get_tensor_name_map(arch, n_layer)
    by_name = {t.name: t for t in rd.tensors}
    out, used = {}, set()
    n_head = cfg.get("num_attention_heads", cfg.get("n_head"))
    n_kv = cfg.get("num_key_value_heads", n_head)
    if arch_name == "falcon":   # FalconAttention: one kv head for a multi-query model, whatever num_kv_heads says
        n_kv = 1 if cfg.get("multi_query", True) and not cfg.get("new_decoder_architecture") else \
            cfg.get("num_kv_heads", n_head) if cfg.get("new_decoder_architecture") else n_head
    for hf_name in hf_tensors:
        if arch_name == "deepseek2" and hf_name.endswith(".self_attn.kv_b_proj.weight"):
            out[hf_name] = deepseek2_kv_b(hf_name, tmap, by_name, used, cfg, gguf_path)
            continue
        # the converter takes "transformer." off Bloom's names before mapping them
        mapped = hf_name.replace("transformer.", "", 1) if arch_name == "bloom" else hf_name
        # as the converter's ModelBase.modify_tensors: the selection bias as a ".bias" (exp_probs_b.bias)
        mapped = re.sub(r"e_score_correction_bias$", "e_score_correction.bias", mapped)
        expert = None
        g = tmap.get_name(mapped, try_suffixes=(".weight", ".bias"))
        m = re.match(r"(.*\.experts\.)(\d+)\.(\w+\.weight)$", mapped)
        if g is None and m:
            # the converter stacks the experts into one [experts, rows, cols] tensor (ffn_*_exps)
            expert = int(m.group(2))
            g = tmap.get_name(m.group(1) + m.group(3), try_suffixes=(".weight",))
        if g is None or g not in by_name:
            raise SystemExit(f"{gguf_path}: no GGUF tensor for {hf_name} (mapped to {g})")
        used.add(g)
        t = by_name[g]
        a = np.array(t.data, dtype=np.float32).reshape([int(x) for x in reversed(t.shape)])
        if expert is not None:
            a = a[expert]
        if arch_name in ("llama", "olmo") and hf_name.endswith("q_proj.weight"):
            a = unpermute_llama(a, n_head)
        elif arch_name in ("llama", "olmo") and hf_name.endswith("k_proj.weight"):
            a = unpermute_llama(a, n_kv)
        elif arch_name == "falcon" and ".query_key_value." in hf_name:
            # the converter's "jploski" layout: [kv groups][G q heads, k, v][hd] rows as [q; k; v]
            G, hd = n_head // n_kv, a.shape[0] // (n_head + 2 * n_kv)
            rest = a.shape[1:]
            q = a[:n_head * hd].reshape((n_kv, G, hd) + rest)
            k = a[n_head * hd:(n_head + n_kv) * hd].reshape((n_kv, 1, hd) + rest)
            v = a[(n_head + n_kv) * hd:].reshape((n_kv, 1, hd) + rest)
            a = np.concatenate([q, k, v], axis=1).reshape(a.shape)
        elif arch_name in ("gptneox", "bloom") and ".query_key_value." in hf_name:
            # the converter regroups GPT-NeoX's and Bloom's per-head [heads][q, k, v][hd] rows as [q; k; v]
            a = np.ascontiguousarray(a.reshape((3, n_head, -1) + a.shape[1:]).swapaxes(0, 1)).reshape(a.shape)
        elif arch_name.startswith("gemma") and hf_name.endswith("norm.weight"):
            a = a - np.float32(1.0)
        elif arch_name == "gpt2" and hf_name.endswith((".c_attn.weight", ".c_proj.weight", ".c_fc.weight")):
            a = a.T
        out[hf_name] = np.ascontiguousarray(a)
    extra = {n: np.array(t.data) for n, t in by_name.items() if n not in used}
    return out, extra, rd, arch_name


def deepseek2_kv_b(hf_name, tmap, by_name, used, cfg, gguf_path):
    """kv_b_proj [heads * (nope + v), kv_lora] from llama.cpp's split of it (convert_hf_to_gguf.py
    DeepseekV2Model.modify_tensors, for MLA's absorption): per head its k rows transposed as
    attn_k_b (ne {nope, kv_lora, heads}: numpy [heads, kv_lora, nope]) and its v rows as attn_v_b
    (ne {kv_lora, v, heads}: numpy [heads, v, kv_lora]).  Undone: k_b transposed back, each head's
    rows [k nope; v], the heads stacked."""
    parts = []
    for which in ("k_b_proj", "v_b_proj"):
        g = tmap.get_name(hf_name.replace("kv_b_proj", which), try_suffixes=(".weight",))
        if g is None or g not in by_name:
            raise SystemExit(f"{gguf_path}: no GGUF tensor for {hf_name} ({which} mapped to {g})")
        used.add(g)
        t = by_name[g]
        parts.append(np.array(t.data, dtype=np.float32).reshape([int(x) for x in reversed(t.shape)]))
    k_b, v_b = parts
    heads, nope, v = cfg["num_key_value_heads"], cfg["qk_nope_head_dim"], cfg["v_head_dim"]
    if k_b.shape != (heads, cfg["kv_lora_rank"], nope) or v_b.shape != (heads, v, cfg["kv_lora_rank"]):
        raise SystemExit(f"{gguf_path}: {hf_name}: attn_k_b {k_b.shape} / attn_v_b {v_b.shape} do not fit "
                         f"{heads} heads, nope {nope}, v {v}, kv_lora {cfg['kv_lora_rank']}")
    kv = np.concatenate([k_b.transpose(0, 2, 1), v_b], axis=1)
    return kv.reshape(heads * (nope + v), cfg["kv_lora_rank"])


def gguf_hparams(rd, arch):
    out = {}
    for k, fld in rd.fields.items():
        if k.startswith(arch + "."):
            try:
                out[k[len(arch) + 1:]] = fld.contents()
            except Exception:   # noqa: BLE001 - report only
                out[k[len(arch) + 1:]] = "?"
    return out


def fixture_spec(name):
    """The fixture's entry in arch_fixtures.py FIXTURES ({} for a variant made from another)."""
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from arch_fixtures import FIXTURES
    return FIXTURES.get(name, {})


def load_gguf_tensors_as_hf(sd, cfg, dtypes):
    """transformers' model (float64, eager) of the config cfg with the tensors sd, through
    from_pretrained of a temporary folder (config.json + model.safetensors in hf5/'s dtypes)."""
    from safetensors.numpy import save_file
    with tempfile.TemporaryDirectory(prefix="arch_ref_check.") as tmp:
        with open(os.path.join(tmp, "config.json"), "w") as f:
            json.dump(cfg, f)
        save_file({k: np.ascontiguousarray(v.astype(dtypes[k])) for k, v in sd.items()},
                  os.path.join(tmp, "model.safetensors"), metadata={"format": "pt"})
        return load_hf(tmp)


# ---- checks -------------------------------------------------------------------------------------


def check_fixture(name, conv_dir, python4):
    import torch
    from safetensors.numpy import load_file
    folder = os.path.join(FIX_ROOT, name)
    meta, tokens, gold = read_fixture(folder)
    hf5 = os.path.join(folder, "hf5")
    with open(os.path.join(hf5, "config.json")) as f:
        cfg = json.load(f)
    ok = True
    res = {}

    model = load_hf(hf5)
    d = float(np.abs(forward(model, tokens) - gold).max())
    res["hf5"] = d
    ok &= d <= EXACT

    # second goldens (meta.txt "extra FILE [n, V] ...; overrides JSON; ..."): same check
    res["extra"] = {}
    with open(os.path.join(folder, "meta.txt")) as f:
        for line in f:
            if not line.startswith("extra "):
                continue
            fn = line.split()[1]
            n = int(line.split("[", 1)[1].split(",", 1)[0])
            overrides = json.loads(line.split("; overrides ", 1)[1].split(";", 1)[0])
            m2 = load_hf(hf5, **overrides)
            g2 = np.fromfile(os.path.join(folder, fn), dtype="<f8").reshape(n, -1)
            d2 = float(np.abs(forward(m2, tokens[:n]) - g2).max())
            res["extra"][fn] = d2
            ok &= d2 <= EXACT

    if python4 and name in HF4_CANNOT:
        res["hf4_skipped"] = HF4_CANNOT[name]
    elif python4:
        tmp = os.path.join(folder, ".check4.f64")
        r = subprocess.run([python4, os.path.abspath(__file__), "--worker", os.path.join(folder, "hf4"),
                            os.path.join(folder, "tokens.txt"), tmp], capture_output=True, text=True)
        if r.returncode != 0:
            print(f"  {name}: transformers 4 failed on hf4/:\n{r.stderr[-3000:]}")
            res["hf4"] = float("nan")
            ok = False
        else:
            lp4 = np.fromfile(tmp, dtype="<f8").reshape(gold.shape)
            d = float(np.abs(lp4 - gold).max())
            res["hf4"] = d
            res["hf4_version"] = r.stdout.strip().splitlines()[-1]
            ok &= d <= HF4_TOLERANCE.get(name, EXACT)
        if os.path.exists(tmp):
            os.unlink(tmp)

    hf_tensors = load_file(os.path.join(hf5, "model.safetensors"))
    if not os.path.exists(os.path.join(folder, "model.gguf")):   # HF only (see arch_fixtures.py FIXTURES)
        res.update(gguf_weights=float("nan"), gguf=float("nan"), gguf_extra={}, gguf_hparams={})
        return control(model, tokens, ok, res, meta)
    sd, extra, rd, arch = gguf_state_dict(os.path.join(folder, "model.gguf"), conv_dir, hf_tensors, cfg)
    wdiff = max(float(np.abs(sd[k].astype(np.float64) - hf_tensors[k].astype(np.float64)).max()) for k in hf_tensors)
    res["gguf_weights"] = wdiff
    ok &= wdiff == 0.0
    # transformers loads the GGUF's tensors itself (from_pretrained of a folder holding them under
    # hf5/'s names), so that names it renames or fuses on loading (per-expert weights into
    # experts.gate_up_proj) are loaded too, not silently skipped.  The folder's config.json is the
    # one the GGUF was converted from (hf5/'s plus the fixture's gguf_config); where that copy is
    # another model (gguf_golden with gguf_config: DeepSeek-V2, what llama.cpp can run), its
    # forward is compared with that golden, else with logprobs.f64.
    spec = fixture_spec(name)
    gcfg = dict(cfg, **spec.get("gguf_config", {}))
    ggold, ggold_name = gold, "logprobs.f64"
    if spec.get("gguf_config") and spec.get("gguf_golden"):
        ggold_name = spec["gguf_golden"][0]
        ggold = np.fromfile(os.path.join(folder, ggold_name), dtype="<f8").reshape(gold.shape)
    g = load_gguf_tensors_as_hf(sd, gcfg, {k: v.dtype for k, v in hf_tensors.items()})
    d = float(np.abs(forward(g, tokens) - ggold).max())
    res["gguf"] = d
    res["gguf_golden"] = ggold_name
    ok &= d <= EXACT
    res["gguf_extra"] = {k: np.round(v.astype(np.float64), 6).tolist() for k, v in extra.items()}
    if "rope_freqs.weight" in extra:
        # llama3 RoPE in the GGUF is a divisor per frequency: it must turn the plain frequencies
        # theta^(-2i/d) into transformers' scaled ones (F32 storage: relative 1e-6)
        rp = cfg["rope_parameters"]
        hd = cfg.get("head_dim") or cfg["hidden_size"] // cfg["num_attention_heads"]
        plain = rp["rope_theta"] ** (-np.arange(0, hd, 2, dtype=np.float64) / hd)
        hf_inv = model.model.rotary_emb.inv_freq.double().numpy()
        rel = float(np.abs(plain / extra["rope_freqs.weight"].astype(np.float64) / hf_inv - 1).max())
        res["rope_freqs_rel"] = rel
        ok &= rel <= 1e-6
    res["gguf_hparams"] = gguf_hparams(rd, arch)
    return control(model, tokens, ok, res, meta)


def control(model, tokens, ok, res, meta):
    """The perturbation control (see the module doc) on the hf5 model; returns check_fixture's triple."""
    import torch
    rng = np.random.default_rng(12345)
    base = forward(model, tokens)
    scale = float(np.abs(base).max())
    worst = None
    for pname, p in sorted(model.named_parameters()):
        if p.dim() != 2:
            continue
        saved = p.detach().clone()
        with torch.no_grad():
            p.mul_(1.0 + 1e-3 * torch.from_numpy(rng.standard_normal(tuple(p.shape))))
        dd = np.abs(forward(model, tokens) - base)
        with torch.no_grad():
            p.copy_(saved)
        rel = float(dd.max()) / scale
        if worst is None or rel < worst[1]:
            worst = (pname, rel, float(dd.max()), float((dd / np.maximum(np.abs(base), 1.0)).max()))
    res["control"] = worst
    ok &= worst[1] > CONTROL_MIN
    return ok, res, meta


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "--worker":
        worker(*sys.argv[2:5])
        return
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--converter", required=True, help="vendor/llama.cpp of the llama-cpp-python sdist (for gguf-py)")
    ap.add_argument("--python4", help="a python with transformers 4 (skip the hf4 check without it)")
    ap.add_argument("names", nargs="*")
    a = ap.parse_args()
    names = a.names or sorted(n for n in os.listdir(FIX_ROOT) if os.path.isfile(os.path.join(FIX_ROOT, n, "meta.txt")))
    python4 = a.python4 if a.python4 and os.path.exists(a.python4) else None
    if not python4:
        print("arch_ref_check: no transformers 4 interpreter: hf4/ not checked")
    all_ok = True
    for n in names:
        ok, r, meta = check_fixture(n, os.path.abspath(a.converter), python4)
        all_ok &= ok
        c = r["control"]
        print(f"{'ok  ' if ok else 'FAIL'} {n:11s} T {meta['T']} V {meta['V']}: max|d| hf5 {r['hf5']:.3g}"
              + (f", hf4 {r['hf4']:.3g} (transformers {r.get('hf4_version', '?')})" if "hf4" in r else "")
              + (f", hf4 not run ({r['hf4_skipped']})" if "hf4_skipped" in r else "")
              + "".join(f", {fn} {v:.3g}" for fn, v in r["extra"].items())
              + (f", gguf weights {r['gguf_weights']:.3g}, gguf forward {r['gguf']:.3g}"
                 + (f" (vs {r['gguf_golden']})" if r.get("gguf_golden", "logprobs.f64") != "logprobs.f64" else "")
                 if r["gguf_hparams"]
                 else ", no GGUF")
              + f"; control: weakest matrix {c[0]}: max|d|/max|lp| {c[1]:.3g} (max|d| {c[2]:.3g},"
              + f" max|d|/max(|lp|,1) {c[3]:.3g})")
        hp = r["gguf_hparams"]
        print("     gguf: " + ", ".join(f"{k}={v}" for k, v in sorted(hp.items())
                                         if not (isinstance(v, list) and len(v) > 8)))
        for k, v in r["gguf_extra"].items():
            print(f"     gguf tensor {k} (no HF weight): {v}")
        if "rope_freqs_rel" in r:
            print(f"     rope_freqs: theta^(-2i/d) / rope_freqs = transformers' inv_freq to {r['rope_freqs_rel']:.3g} relative")
    print("arch_ref_check: " + ("all checks passed" if all_ok else "SOME CHECKS FAILED"))
    sys.exit(0 if all_ok else 1)


if __name__ == "__main__":
    main()
