#!/usr/bin/env python3
"""llmc_oneshot.py — llm-compressor's side of tools/bench/peers.sh: one `oneshot` run on a
Hugging Face folder, calibrated on the same windows lmpress cuts, its time and its output.

    python llmc_oneshot.py --model BASE_HF --out OUT_DIR --text wiki.valid.tokens --windows 16 \
        --method gptq --strategy group --group-size 64 [--actorder weight|none] [--json T.json]
    python llmc_oneshot.py --model BASE_HF --method sq-w8a8 --out OUT_DIR ...
    python llmc_oneshot.py --model BASE_HF --text wiki.valid.tokens --check-ppl 2   # no oneshot

Calibration windows: the text file's bytes, decoded as UTF-8 and tokenized at once with the
folder's tokenizer.json and no special tokens (BOS only with --bos, for a tokenizer whose
convention adds one: SmolLM2's does not), cut into consecutive windows of --seq-len tokens from
the start, the tail dropped: lmpress's `calibration.sampling = "sequential"` (lmp_windows_cut).
They go to oneshot pre-tokenized, in order (shuffle_calibration_samples=False), batch size 1.

Methods (targets Linear, lm_head ignored, float32 weights unless --dtype bfloat16, torch threads
= --threads):
  gptq     GPTQModifier, int weights of --bits, symmetric, strategy channel or group
           (--group-size), actorder --actorder (llm-compressor's default is "static", an alias
           of "weight"), dampening_frac 0.01, block_size 128 (its defaults).
  sq-w8a8  SmoothQuantModifier(smoothing_strength=--alpha) then QuantizationModifier with the
           W8A8 preset: int8 symmetric per-channel weights, int8 symmetric dynamic per-token
           input activations.
  fp8-dynamic, fp8-block, nvfp4a16, nvfp4
           QuantizationModifier with compressed-tensors' preset of that name (FP8_DYNAMIC: E4M3
           weights per channel, dynamic per-token E4M3 inputs; FP8_BLOCK: E4M3 weights in 128 x 128
           blocks, dynamic E4M3 inputs per group of 128; NVFP4A16: NVFP4 weights; NVFP4: NVFP4
           weights and inputs, the inputs' global scales from the calibration windows).
  fp8-block-a16  QuantizationModifier with FP8_BLOCK's weights only (E4M3, strategy "block",
           block_structure [128, 128], min-max observer), no input quantization.
  kv-fp8   QuantizationModifier with only a kv_cache_scheme: FP8 E4M3, static, per tensor (k_scale
           and v_scale of every attention from the calibration windows), the weights left dense.
  awq      AWQModifier (its inferred Llama mappings, duo scaling, 20-point grid: llm-compressor's
           defaults) then the --quantizer (rtn: QuantizationModifier; gptq: GPTQModifier) on int
           weights of --bits, --strategy / --group-size, asymmetric with --asym.  In
           llm-compressor 0.14 AWQ is a transform: it only rescales, the modifier after it quantizes.
  spinquant  SpinQuantModifier (rotations --rotations, default R1,R2; --transform-type, default
           random-hadamard: "hadamard" cannot be built for SmolLM2's 576 = 36 x 16; fixed, not
           learned: llm-compressor refuses learnable=True) then the --quantizer.
  quip     QuIPModifier (rotations "v": an online rotation of every linear's input, its inverse
           fused into the weight; --transform-type) then the --quantizer.
  quant    the --quantizer alone (QuantizationModifier: RTN; or GPTQModifier).
  With awq, spinquant, quip and quant, --act-bits 4 (or 8) adds symmetric dynamic per-token
  int input activations to every quantized linear (W4A4).
--dequantized (with a method whose folder lmpress does not read: NVFP4) writes the model as
compressed-tensors' own forward sees it instead: every quantized linear's weight dequantized by
compressed-tensors (fake-quantized: quantize + dequantize with its qparams) and saved dense in
float32 with no quantization_config; the input quantization of NVFP4 (W4A4) is then gone, so
peers.sh uses it for NVFP4A16 only.

Printed and written to --json: seconds of the oneshot() call alone (the compression: tracing,
calibration forwards, smoothing / GPTQ, propagation), of the save, tokens, windows and the
versions of llmcompressor, torch, transformers and compressed-tensors.  --check-ppl K instead
runs the unmodified model on the first K windows and prints their perplexity: over L-1
predictions per window, as `lmpress eval --seq-len L --max-windows K` scores, and over the
second half only, as `llama-perplexity -c L --chunks K` scores; to check that the tools read the
same tokens and compute the same model.
"""
import argparse
import json
import os
import shutil
import sys
import time


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", required=True, help="Hugging Face folder of the unmodified model")
    p.add_argument("--out", help="output folder (save_pretrained)")
    p.add_argument("--text", required=True, help="calibration text file")
    p.add_argument("--windows", type=int, default=16)
    p.add_argument("--seq-len", type=int, default=512)
    p.add_argument("--bos", action="store_true", help="prepend BOS to the text's tokens")
    p.add_argument("--method", choices=["gptq", "sq-w8a8", "fp8-dynamic", "fp8-block", "fp8-block-a16", "nvfp4a16",
                                        "nvfp4", "kv-fp8", "awq", "spinquant", "quip", "quant"],
                   default="gptq")
    p.add_argument("--bits", type=int, default=4)
    p.add_argument("--strategy", choices=["channel", "group"], default="channel")
    p.add_argument("--group-size", type=int, default=64)
    p.add_argument("--actorder", choices=["weight", "none"], default="weight")
    p.add_argument("--alpha", type=float, default=0.5)
    p.add_argument("--quantizer", choices=["rtn", "gptq"], default="rtn",
                   help="awq / spinquant / quip / quant: the modifier that quantizes")
    p.add_argument("--asym", action="store_true", help="asymmetric int weights (W4A16_ASYM's grid)")
    p.add_argument("--act-bits", type=int, default=0,
                   help="int input activations, symmetric, dynamic per token (0: none)")
    p.add_argument("--rotations", default="R1,R2", help="spinquant: comma-separated R1..R4")
    p.add_argument("--transform-type", choices=["hadamard", "random-hadamard", "random-matrix"],
                   default="random-hadamard", help="spinquant / quip")
    p.add_argument("--transform-block-size", type=int, default=None, help="spinquant / quip")
    p.add_argument("--dense", action="store_true",
                   help="save_compressed=False: dense fake-quantized weights")
    p.add_argument("--dequantized", action="store_true",
                   help="save the fake-quantized weights dense, without quantization_config")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--dtype", choices=["float32", "bfloat16"], default="float32",
                   help="the model's dtype for oneshot (torch_dtype): bfloat16 is the pair of "
                        "lmpress's backend compute = \"bf16\" (peers.sh --computes)")
    p.add_argument("--json", help="write the timings and versions here")
    p.add_argument("--check-ppl", type=int, default=0, metavar="K",
                   help="only print the unmodified model's perplexity on the first K windows")
    return p.parse_args()


def versions():
    from importlib.metadata import version
    return {name: version(name) for name in ("llmcompressor", "torch", "transformers", "compressed-tensors")}


def calibration_windows(tokenizer, path, seq_len, n, bos):
    with open(path, "rb") as f:
        text = f.read().decode("utf-8")
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    if bos:
        ids = [tokenizer.bos_token_id] + ids
    avail = len(ids) // seq_len
    if avail < n:
        print(f"llmc_oneshot: {path} gives {avail} windows of {seq_len}; using {avail}", file=sys.stderr)
        n = avail
    return len(ids), [ids[i * seq_len:(i + 1) * seq_len] for i in range(n)]


def check_ppl(model, windows):
    """NLL of every window's L-1 predictions (lmpress eval), and of the second half's only:
    positions L/2 .. L-2 predicting L/2+1 .. L-1, as llama-perplexity scores a chunk."""
    import torch
    nll, half, count, count_half = 0.0, 0.0, 0, 0
    with torch.no_grad():
        for w in windows:
            x = torch.tensor([w])
            logp = torch.log_softmax(model(input_ids=x).logits[0, :-1].double(), dim=-1)
            tok = logp.gather(1, x[0, 1:, None])[:, 0]
            first = len(w) // 2
            nll -= tok.sum().item()
            half -= tok[first:].sum().item()
            count += len(w) - 1
            count_half += len(w) - 1 - first
    return nll, count, half, count_half


def quantizer_for(a):
    """--quantizer on --bits int weights (and --act-bits inputs): the modifier that quantizes
    after awq, spinquant or quip."""
    from llmcompressor.modifiers.quantization import GPTQModifier, QuantizationModifier
    weights = {"num_bits": a.bits, "type": "int", "symmetric": not a.asym, "strategy": a.strategy}
    if a.strategy == "group":
        weights["group_size"] = a.group_size
    group = {"targets": ["Linear"], "weights": weights}
    if a.act_bits:
        group["input_activations"] = {"num_bits": a.act_bits, "type": "int", "symmetric": True,
                                      "strategy": "token", "dynamic": True}
    if a.quantizer == "gptq":
        return GPTQModifier(config_groups={"group_0": group}, ignore=["lm_head"],
                            actorder=None if a.actorder == "none" else a.actorder)
    return QuantizationModifier(config_groups={"group_0": group}, ignore=["lm_head"])


def recipe_for(a):
    from llmcompressor.modifiers.quantization import GPTQModifier, QuantizationModifier
    from llmcompressor.modifiers.transform import (AWQModifier, QuIPModifier, SmoothQuantModifier,
                                                   SpinQuantModifier)
    if a.method == "awq":
        return [AWQModifier(), quantizer_for(a)]
    if a.method == "spinquant":
        return [SpinQuantModifier(rotations=a.rotations.split(","), transform_type=a.transform_type,
                                  transform_block_size=a.transform_block_size), quantizer_for(a)]
    if a.method == "quip":
        return [QuIPModifier(rotations=["v"], transform_type=a.transform_type,
                             transform_block_size=a.transform_block_size), quantizer_for(a)]
    if a.method == "quant":
        return [quantizer_for(a)]
    if a.method == "gptq":
        weights = {"num_bits": a.bits, "type": "int", "symmetric": True, "strategy": a.strategy}
        if a.strategy == "group":
            weights["group_size"] = a.group_size
        return [GPTQModifier(config_groups={"group_0": {"targets": ["Linear"], "weights": weights}},
                             ignore=["lm_head"], actorder=None if a.actorder == "none" else a.actorder)]
    if a.method == "sq-w8a8":
        return [SmoothQuantModifier(smoothing_strength=a.alpha),
                QuantizationModifier(targets="Linear", scheme="W8A8", ignore=["lm_head"])]
    if a.method == "kv-fp8":
        return [QuantizationModifier(kv_cache_scheme={"num_bits": 8, "type": "float", "strategy": "tensor",
                                                      "dynamic": False, "symmetric": True})]
    if a.method == "fp8-block-a16":
        weights = {"num_bits": 8, "type": "float", "symmetric": True, "dynamic": False, "strategy": "block",
                   "block_structure": [128, 128], "observer": "minmax"}
        return [QuantizationModifier(config_groups={"group_0": {"targets": ["Linear"], "weights": weights}},
                                     ignore=["lm_head"])]
    preset = {"fp8-dynamic": "FP8_DYNAMIC", "fp8-block": "FP8_BLOCK", "nvfp4a16": "NVFP4A16", "nvfp4": "NVFP4"}[a.method]
    return [QuantizationModifier(targets="Linear", scheme=preset, ignore=["lm_head"])]


def save_dequantized(model, out):
    """Every quantized linear's weight as compressed-tensors' forward uses it (fake_quantize with
    the module's own qparams), the quantization state removed, saved dense in float32."""
    import torch
    from compressed_tensors.quantization.lifecycle.forward import fake_quantize
    n = 0
    with torch.no_grad():
        for name, m in model.named_modules():
            scheme = getattr(m, "quantization_scheme", None)
            if scheme is None or scheme.weights is None:
                continue
            gs = getattr(m, "weight_global_scale", None)
            zp = getattr(m, "weight_zero_point", None)
            m.weight.data = fake_quantize(m.weight.data, m.weight_scale, zp, scheme.weights, global_scale=gs)
            n += 1
    from compressed_tensors.quantization import QuantizationStatus  # noqa: F401 (the state removed below)
    for _, m in model.named_modules():
        for attr in ("quantization_scheme", "quantization_status", "quantization_enabled"):
            if hasattr(m, attr):
                delattr(m, attr)
        for p in [k for k, _ in m.named_parameters(recurse=False) if k not in ("weight", "bias")]:
            delattr(m, p)
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    model.save_pretrained(out, safe_serialization=True)
    print(f"llmc_oneshot: {n} linears saved dequantized (dense float32, no quantization_config)", file=sys.stderr)


def main():
    a = parse_args()
    for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
        os.environ[var] = str(a.threads)
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    import torch
    torch.set_num_threads(a.threads)
    from transformers import AutoModelForCausalLM, AutoTokenizer

    ver = versions()
    print("llmc_oneshot: " + ", ".join(f"{k} {v}" for k, v in ver.items()) +
          f"; torch threads {torch.get_num_threads()}", file=sys.stderr)
    tokenizer = AutoTokenizer.from_pretrained(a.model)
    n_tokens, windows = calibration_windows(tokenizer, a.text, a.seq_len,
                                            a.check_ppl or a.windows, a.bos)
    print(f"llmc_oneshot: {a.text}: {n_tokens} tokens, {len(windows)} windows of {a.seq_len}, "
          f"first ids {windows[0][:6]}", file=sys.stderr)
    model = AutoModelForCausalLM.from_pretrained(a.model, dtype=getattr(torch, a.dtype))
    model.eval()

    if a.check_ppl:
        import math
        nll, count, half, count_half = check_ppl(model, windows)
        res = {"text": a.text, "tokens": n_tokens, "windows": len(windows), "scored": count,
               "ppl": math.exp(nll / count), "scored_second_half": count_half,
               "ppl_second_half": math.exp(half / count_half), "versions": ver}
        print(json.dumps(res))
        return

    from datasets import Dataset
    from llmcompressor import oneshot

    if not torch.cuda.is_available():
        # llm-compressor 0.14.0.1's AWQ pins its cached calibration inputs for faster host->GPU
        # copies (IntermediatesCache.pin_memory); without an NVIDIA driver pin_memory() raises
        # "Found no NVIDIA driver".  Pinning changes no value, so it is skipped on such a machine.
        from llmcompressor.pipelines.cache import IntermediatesCache
        IntermediatesCache.pin_memory = lambda self, *args, **kwargs: None
    ds = Dataset.from_dict({"input_ids": windows, "attention_mask": [[1] * a.seq_len for _ in windows]})
    recipe = recipe_for(a)
    t0 = time.perf_counter()
    oneshot(model=model, dataset=ds, recipe=recipe, num_calibration_samples=len(windows),
            max_seq_length=a.seq_len, shuffle_calibration_samples=False, batch_size=1)
    t1 = time.perf_counter()
    save_s = None
    if a.out:
        tmp = a.out.rstrip("/") + ".tmp"
        shutil.rmtree(tmp, ignore_errors=True)
        if a.dequantized:
            save_dequantized(model, tmp)
        else:
            model.save_pretrained(tmp, save_compressed=not a.dense)
        tokenizer.save_pretrained(tmp)
        shutil.rmtree(a.out, ignore_errors=True)
        os.rename(tmp, a.out)
        save_s = time.perf_counter() - t1
    int_weights = a.method in ("gptq", "awq", "spinquant", "quip", "quant")
    res = {"method": a.method, "strategy": a.strategy if int_weights else "channel",
           "group_size": a.group_size if int_weights and a.strategy == "group" else None,
           "actorder": a.actorder if a.method == "gptq" or (int_weights and a.quantizer == "gptq") else None,
           "quantizer": a.quantizer if int_weights and a.method != "gptq" else None,
           "bits": a.bits if int_weights else None, "asym": a.asym, "act_bits": a.act_bits,
           "recipe": [repr(m) for m in recipe],
           "windows": len(windows), "seq_len": a.seq_len, "tokens": n_tokens,
           "threads": torch.get_num_threads(), "dtype": a.dtype, "compress_s": t1 - t0, "save_s": save_s,
           "out": a.out, "versions": ver}
    print(f"llmc_oneshot: oneshot {t1 - t0:.2f} s" + (f", save {save_s:.2f} s" if save_s else ""),
          file=sys.stderr)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(res, f, indent=1)
    print(json.dumps(res))


if __name__ == "__main__":
    main()
