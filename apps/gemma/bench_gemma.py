"""Gemma 4 decoder layers on twist against PyTorch: transformers' Gemma4ForCausalLM at the 31B text
configuration (twist.gemma.config_kwargs: hidden 5376, 32 heads of 256 in sliding layers, 4 KV heads of 512
in full ones, ...) with a few decoder layers covering both attention types and random bf16 weights, built
offline; a copy of it with every decoder layer's forward swapped onto twist's kernels (twist.gemma).

As the other benchmarks (bench/README.md): export here, where the tool is built (NVRTC; no GPU), then run on
the GPU machine (the `device` tool with carry [".gpu"]), from the repository root (--quick: one prefill and one
decode case, in both steps):

    cmake --build --preset release --target twist
    PYTHONPATH=python python3 apps/gemma/bench_gemma.py --export-only --twist build/release/apps/twist/twist \
        --manifests .gpu/gemma_manifests
    # on the GPU machine (no .device-runtime/enter.sh: torch must load its own CUDA libraries):
    PYTHONPATH=python python3 apps/gemma/bench_gemma.py --manifests .gpu/gemma_manifests \
        --out bench/results/gemma.json
    PYTHONPATH=python compute-sanitizer --tool memcheck --error-exitcode 3 python3 apps/gemma/bench_gemma.py \
        --manifests .gpu/gemma_manifests --phase decode --sanitize

--no-compile leaves torch.compile out (on the H200 it compiled the 2-layer forward in 17 s at prefill B1 S2048
and 6 s at decode B8 L4096, each decoder layer in 2 s; --quick with it, after compute-sanitizer over the decode
case's kernels, ran in 78 s); --phase
keeps the cases of one phase; --sanitize runs every kernel once on random inputs and nothing else, for
compute-sanitizer.

For every case (prefill: batch x new tokens; decode: batch x keys in the cache) it
  1. (--export-only) exports the layer kernels (twist export gemma) for both layer types at the case's shape,
     into MANIFESTS/<case>; the run on the GPU reads them from there;
  2. checks the twist model's last hidden state and logits against the exact model (the reference in f32) on
     the same weights and inputs: within SLACK times the error transformers' bf16 model has (relative L2),
     and each kernel against PyTorch's code for the same op on the same random inputs (KERNEL_TOLERANCE);
  3. times every kernel against PyTorch's code for the same op (the model's own modules and functions: the
     linears, the norms, the add, RoPE, scaled-dot-product attention, the gated activation), and reports ours /
     PyTorch's per kernel and their geometric mean over the layer's kernels (the seed reports 1.30x);
  4. sums each layer type's kernels (ours, PyTorch's), and times one decoder layer of each type (called with
     the arguments the forward pass gives it) and the whole forward pass: reference eager, reference under
     torch.compile (its first call's compilation recorded apart), and the twist model.
Decoding starts each timed step from a fresh copy of the filled cache, made outside the timed region. Timings are
triton.testing.do_bench medians. Writes the records as JSON and prints a table; exits 1 if a check failed.

The records, summaries and tables run without torch (apps/gemma/test_bench_gemma.py); measure_case() runs on
the CPU with a PyTorch stand-in for the kernels and for the timer (python/tests/test_gemma_swap.py).
"""
from __future__ import annotations

import argparse
import copy
import datetime
import json
import math
import sys
import traceback
from pathlib import Path

from twist import gemma

REPO = Path(__file__).resolve().parents[2]
# The twist model's hidden states and logits must be as close to the exact model's (the reference in f32) as
# transformers' bf16 model is, within this factor: both store bf16 between kernels, rounding at different points.
SLACK = 1.5
# Each kernel against PyTorch's code for the same op on the same inputs: both round their outputs to bf16
# (relative L2 error; half a bf16 ulp is 2^-9).
KERNEL_TOLERANCE = 2e-2
# The issue's grid (prefill: batch 1 to 8 x 2048 to 8192 tokens; decode: batch 1 to 64 x 4096 to 32768 keys
# in the cache) by its corners and its middle: each case compiles the reference for torch.compile anew.
PREFILL = [(1, 2048), (1, 8192), (4, 4096), (8, 2048), (8, 8192)]
DECODE = [(1, 4096), (1, 32768), (8, 16384), (64, 4096), (64, 32768)]
QUICK_PREFILL, QUICK_DECODE = [(1, 2048)], [(8, 4096)]
# Decoding's cache is filled by prefills of at most this many tokens: at batch 64 x 32768 keys one prefill of
# the whole prompt would hold 2M tokens' activations (the f32 model's MLP alone 180 GB).
CACHE_FILL_CHUNK = 4096
# The PyTorch code each twist kernel replaces (what PyTorch runs for the same op, in the model's own code).
PYTORCH_EQUIVALENT = {
    "input_norm": "input_layernorm",
    "qkv": "q_proj, k_proj, v_proj",
    "q_norm_rope": "q_norm, apply_rotary_pos_emb, transpose",
    "k_norm_rope": "k_norm, apply_rotary_pos_emb, transpose",
    "v_norm": "v_norm, transpose",
    "attention": "scaled_dot_product_attention (GQA, causal or sliding mask)",
    "o_proj": "o_proj",
    "post_attention_norm": "post_attention_layernorm, add, pre_feedforward_layernorm",
    "gate_up": "gate_proj, up_proj, gelu_tanh(gate) * up",
    "down_proj": "down_proj",
    "post_feedforward_norm": "post_feedforward_layernorm, add, next input_layernorm",
}


def cases(quick: bool) -> list[gemma.LayerShape]:
    prefill, decode = (QUICK_PREFILL, QUICK_DECODE) if quick else (PREFILL, DECODE)
    return ([gemma.LayerShape("prefill", batch=b, tokens=s) for b, s in prefill]
            + [gemma.LayerShape("decode", batch=b, keys=k) for b, k in decode])


def case_name(shape: gemma.LayerShape) -> str:
    return f"{shape.phase} B{shape.batch} " + (f"S{shape.tokens}" if shape.phase == "prefill" else f"L{shape.keys}")


def kernel_summary(kernels: dict[str, dict[str, float]]) -> dict:
    """Per layer type and kernel, {"twist_ms", "pytorch_ms"}: the speedups (PyTorch / ours), their geometric
    mean, and the kernels slower than PyTorch's."""
    speedups = {f"{layer}/{k}": t["pytorch_ms"] / t["twist_ms"] for layer, per in kernels.items()
                for k, t in per.items()}
    return {"speedup": speedups, "geomean_speedup": gemma.geometric_mean(speedups.values()),
            "slower_than_pytorch": sorted(k for k, v in speedups.items() if v < 1)}


def layer_kernels_ms(kernels: dict[str, dict[str, float]]) -> dict[str, float]:
    """One layer's time as the sum of its kernels' medians, ours and PyTorch's code for the same ops (the
    transposes and the cache update between them, which both sides run, are not counted)."""
    return {"twist": sum(t["twist_ms"] for t in kernels.values()),
            "pytorch": sum(t["pytorch_ms"] for t in kernels.values())}


def new_record(shape: gemma.LayerShape, gpu: str, date: str, layers: int) -> dict:
    return {"case": case_name(shape), "phase": shape.phase, "batch": shape.batch, "tokens": shape.tokens,
            "keys": shape.key_count, "config": "31b", "layers": layers, "gpu": gpu, "date": date}


def finish_record(r: dict, errors: dict[str, float], reference_errors: dict[str, float], kernels: dict,
                  kernel_errors: dict, layer_ms: dict, forward_ms: dict, layer_forward_ms: dict | None = None,
                  compile_s: dict | None = None) -> dict:
    """`errors` and `reference_errors`: the twist model's and the bf16 reference's against the exact model;
    `kernel_errors`: per layer type and kernel, ours against PyTorch's code for the same op; `forward_ms` (the
    forward pass) and `layer_forward_ms` (per layer type, one decoder layer's call) have "eager", "twist" and,
    unless torch.compile was left out, "compile"; `compile_s`: what torch.compile's first calls took."""
    r["errors"], r["reference_errors"], r["kernel_errors"] = errors, reference_errors, kernel_errors
    r["kernels_over_tolerance"] = sorted(f"{layer}/{k}" for layer, per in kernel_errors.items()
                                         for k, e in per.items() if not e <= KERNEL_TOLERANCE)
    r["ok"] = (all(errors[k] <= SLACK * reference_errors[k] for k in errors)
               and not r["kernels_over_tolerance"])
    r["kernels"] = kernels
    r.update(kernel_summary(kernels))
    r["layer_ms"] = layer_ms
    r["forward_ms"] = forward_ms
    r["end_to_end_speedup"] = speedups_of(forward_ms)
    r["layer_forward_ms"] = layer_forward_ms or {}
    r["layer_speedup"] = {kind: speedups_of(ms) for kind, ms in r["layer_forward_ms"].items()}
    r["compile_s"] = compile_s or {}
    return r


def speedups_of(ms: dict[str, float]) -> dict[str, float]:
    """{"eager": .., "compile": .., "twist": ..} milliseconds as {"vs_eager": eager / twist, ...}."""
    return {f"vs_{which}": t / ms["twist"] for which, t in ms.items() if which != "twist"}


def format_table(records: list[dict]) -> str:
    lines = [f"{'case':<22}{'ok':>4}{'error':>8}{'bf16 ref':>9}{'worst kernel':>26}{'kernel geomean':>16}"
             f"{'vs eager':>10}{'vs compile':>12}  per layer (vs eager / vs compile)  slower kernels"]
    for r in records:
        worst = max(((e, f"{layer}/{k}") for layer, per in r["kernel_errors"].items() for k, e in per.items()),
                    key=lambda pair: math.inf if math.isnan(pair[0]) else pair[0])
        speedup = r["end_to_end_speedup"]
        compiled = f"{speedup['vs_compile']:>11.2f}x" if "vs_compile" in speedup else f"{'-':>12}"
        per_layer = ", ".join(f"{kind} {s['vs_eager']:.2f}x / " + (f"{s['vs_compile']:.2f}x" if "vs_compile" in s
                                                                   else "-")
                              for kind, s in r.get("layer_speedup", {}).items()) or "-"
        lines.append(f"{r['case']:<22}{'yes' if r['ok'] else 'NO':>4}{r['errors']['hidden_states']:>8.4f}"
                     f"{r['reference_errors']['hidden_states']:>9.4f}{worst[1]:>18} {worst[0]:.4f}"
                     f"{r['geomean_speedup']:>15.2f}x{speedup['vs_eager']:>9.2f}x{compiled}"
                     f"  {per_layer}  {', '.join(r['slower_than_pytorch']) or '-'}")
    return "\n".join(lines)


# --- on the GPU (and, with a CPU stand-in for the kernels and for the timer, python/tests/test_gemma_swap.py) --

def relative_l2(got, want) -> float:
    import torch
    got, want = got.float(), want.float()
    return float(torch.linalg.vector_norm(got - want) / torch.linalg.vector_norm(want))


def bench_ms(fn, before=None) -> float:
    """Median milliseconds of fn(); `before` (untimed) runs ahead of every call."""
    import torch
    import triton.testing
    if before is None:
        return float(triton.testing.do_bench(fn, return_mode="median"))
    times = []
    for _ in range(25):
        before()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end))
    return sorted(times)[len(times) // 2]


def build_models(layers: int, device: str = "cuda", config: str = "31b", **overrides) -> dict:
    """The reference model with random weights in bf16 (the twist model's copy), and the same model in f32, the
    exact one: its weights and buffers (the rotary frequencies, the embedding's scale, which transformers keeps
    in the model's dtype) hold the bf16 model's values, so that the two differ by their arithmetic alone.
    transformers initializes the norms' weights to 1; they are drawn from U(0.5, 1.5) instead, as a trained
    model's are not 1, and a kernel that ignored one would pass."""
    import torch
    from transformers import Gemma4ForCausalLM, Gemma4TextConfig
    torch.manual_seed(0)
    with torch.device(device):
        model = Gemma4ForCausalLM(Gemma4TextConfig(**gemma.config_kwargs(config, layers=layers), **overrides))
        with torch.no_grad():
            for name, parameter in model.named_parameters():
                if "norm" in name:
                    parameter.uniform_(0.5, 1.5)
    bf16 = model.to(torch.bfloat16).eval()
    return {"exact": copy.deepcopy(bf16).float(), "bf16": bf16}


def kernel_pairs(model, kernels, shape: gemma.LayerShape, layer) -> dict[str, tuple]:
    """Per twist kernel of `layer`: (ours, PyTorch's code for the same op), both callables on the same random
    inputs, returning the same tensors (the residual norms both their outputs)."""
    import torch
    import torch.nn.functional as F
    from transformers.models.gemma4 import modeling_gemma4 as mg
    dims, t, attn, mlp = gemma.dims_of(model.config), layer._twist, layer.self_attn, layer.mlp
    kv, d, values_from_keys = dims.attention(t.kind)
    v_first = dims.heads + (0 if values_from_keys else kv)
    b, s, keys, rows = shape.batch, shape.tokens, shape.key_count, shape.rows
    device = layer.input_layernorm.weight.device
    generator = torch.Generator(device=device).manual_seed(1)
    randn = lambda *size: torch.randn(*size, device=device, dtype=torch.bfloat16, generator=generator)  # noqa: E731
    h, o = randn(rows, dims.hidden), randn(rows, dims.hidden)
    projected = randn(b, s, dims.qkv_columns(t.kind) // d, d)
    # Rotary tables as the model's: cos^2 + sin^2 = 1.
    angles = torch.rand(b, s, d, device=device, generator=generator) * 2 * torch.pi
    cos, sin = angles.cos().to(torch.bfloat16), angles.sin().to(torch.bfloat16)
    q, k, v = randn(b, dims.heads, s, d), randn(b, kv, keys, d), randn(b, kv, keys, d)
    g, a = randn(rows, dims.intermediate), randn(rows, dims.heads * d)
    run = lambda kernel, **x: (lambda: kernels.call(t.kind, shape, kernel, **x))  # noqa: E731
    heads = lambda x, first, count: x[:, :, first:first + count, :]  # noqa: E731
    window = attn.sliding_window
    qi = torch.arange(keys - s, keys, device=device)[:, None]
    kj = torch.arange(keys, device=device)[None, :]
    mask = (kj <= qi) & ((qi - kj < window) if window else True)

    def residual_norm(post, next_norm):
        def pytorch():
            summed = h + post(o)
            return summed, next_norm(summed)
        return pytorch
    return {
        "input_norm": (run("input_norm", x=h, w=layer.input_layernorm.weight), lambda: layer.input_layernorm(h)),
        "qkv": (run("qkv", A=h, B=t.qkv),
                lambda: torch.cat([p(h) for p in (attn.q_proj, attn.k_proj, attn.v_proj) if p is not None], -1)),
        "q_norm_rope": (run("q_norm_rope", x=projected, w=attn.q_norm.weight, cos=cos, sin=sin),
                        lambda: mg.apply_rotary_pos_emb(attn.q_norm(heads(projected, 0, dims.heads)), cos, sin,
                                                        unsqueeze_dim=2).transpose(1, 2).contiguous()),
        "k_norm_rope": (run("k_norm_rope", x=projected, w=attn.k_norm.weight, cos=cos, sin=sin),
                        lambda: mg.apply_rotary_pos_emb(attn.k_norm(heads(projected, dims.heads, kv)), cos, sin,
                                                        unsqueeze_dim=2).transpose(1, 2).contiguous()),
        "v_norm": (run("v_norm", x=projected),
                   lambda: attn.v_norm(heads(projected, v_first, kv)).transpose(1, 2).contiguous()),
        "attention": (run("attention", Q=q, K=k, V=v),
                      lambda: F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=1.0, enable_gqa=True)),
        "o_proj": (run("o_proj", A=a, B=t.o), lambda: attn.o_proj(a)),
        "post_attention_norm": (run("post_attention_norm", x=o, residual=h,
                                    w_post=layer.post_attention_layernorm.weight,
                                    w_next=layer.pre_feedforward_layernorm.weight),
                                residual_norm(layer.post_attention_layernorm, layer.pre_feedforward_layernorm)),
        "gate_up": (run("gate_up", A=h, B=t.gate_up), lambda: mlp.act_fn(mlp.gate_proj(h)) * mlp.up_proj(h)),
        "down_proj": (run("down_proj", A=g, B=t.down), lambda: mlp.down_proj(g)),
        "post_feedforward_norm": (run("post_feedforward_norm", x=o, residual=h,
                                      w_post=layer.post_feedforward_layernorm.weight, w_next=t.next_norm.weight),
                                  residual_norm(layer.post_feedforward_layernorm, t.next_norm)),
    }


def kernel_error(ours, theirs) -> float:
    """The relative L2 error of our kernel's output(s) against PyTorch's for the same op (the worst output)."""
    ours, theirs = ours(), theirs()
    if not isinstance(ours, tuple):
        ours, theirs = (ours,), (theirs,)
    return max(relative_l2(a, b) for a, b in zip(ours, theirs))


def first_call_s(fn, before=None) -> float:
    """Seconds of fn()'s first call (torch.compile's compilation), which the timer's warm-up would hide."""
    import time
    import torch
    if before:
        before()
    start = time.perf_counter()
    fn()
    torch.cuda.synchronize() if torch.cuda.is_available() else None
    return time.perf_counter() - start


def release_compile_workers() -> None:
    """Shuts down torch.compile's pool of compile worker processes, which outlives the compilation. In the H200
    run of 2026-12-03 18:43 the decode case's small kernels (ours and PyTorch's, launch-bound) measured 4 to 8
    times slower after the prefill case had compiled than in a run without torch.compile: the idle pool is the
    suspect, so the next case's timings start without it (a later compilation starts a new one)."""
    from torch._inductor import async_compile
    async_compile.shutdown_compile_workers()


def layer_calls(model, run) -> dict[str, tuple[int, tuple, dict]]:
    """Per layer type, the first decoder layer of that type in `model` and the arguments `run()` (a forward pass)
    calls it with; a cache among them is copied as it was then, as the layer's call appends to it."""
    calls = {}

    def capture(index):
        def hook(module, args, kwargs):
            kind = gemma.LAYER_TYPES[module.self_attn.layer_type]
            if kind not in calls:
                calls[kind] = (index, args, {k: copy.deepcopy(v) if k == "past_key_values" else v
                                             for k, v in kwargs.items()})
        return hook
    hooks = [layer.register_forward_pre_hook(capture(i), with_kwargs=True)
             for i, layer in enumerate(model.model.layers)]
    try:
        run()
    finally:
        for h in hooks:
            h.remove()
    return calls


def measure_case(models: dict, twisted, kernels, shape: gemma.LayerShape, record: dict, timer=bench_ms,
                 compile_reference: bool = True, compiler=None) -> dict:
    """Checks the twist model against the reference on one case, then times the kernels, one decoder layer of
    each type and the forward passes with `timer(fn, before)` (torch.compile's by `compiler`, torch.compile
    unless given). The exact model (f32) is the yardstick: the twist model must be within SLACK of its error as
    transformers' bf16 model has it."""
    import torch
    compiler = compiler or torch.compile
    from transformers import DynamicCache
    reference, exact = models["bf16"], models["exact"]
    config = reference.config
    device = reference.lm_head.weight.device
    generator = torch.Generator(device=device).manual_seed(0)
    prompt = shape.tokens if shape.phase == "prefill" else shape.keys - 1
    ids = torch.randint(0, config.vocab_size, (shape.batch, prompt), device=device, generator=generator)
    step = torch.randint(0, config.vocab_size, (shape.batch, 1), device=device, generator=generator)
    prefilled = {}
    if shape.phase == "decode":
        # Each reference fills its cache, the twist model decodes from the bf16 one's: every model decodes the
        # same step against the same keys (and the twist model needs no kernels for the prompt's length).
        for which in ("exact", "bf16"):
            prefilled[which] = DynamicCache(config=config)
            with torch.no_grad():
                for first in range(0, prompt, CACHE_FILL_CHUNK):
                    models[which].model(input_ids=ids[:, first:first + CACHE_FILL_CHUNK],
                                        past_key_values=prefilled[which], use_cache=True)

    def forward(model, cache_of="bf16"):
        """(fn, before): one forward pass, and what restores its cache before it (decoding)."""
        # The LM head on the last token only: [B, S, 262144] logits would outweigh the layers measured.
        last = {"logits_to_keep": 1} if hasattr(model, "lm_head") else {}
        if shape.phase == "prefill":
            return lambda: model(input_ids=ids, use_cache=False, **last), None
        state = {}

        def restore():  # a fresh copy of the filled cache: decoding appends to it
            state["cache"] = copy.deepcopy(prefilled[cache_of])
        return lambda: model(input_ids=step, past_key_values=state["cache"], use_cache=True, **last), restore

    def output(model, cache_of, field):
        fn, before = forward(model, cache_of)
        if before:
            before()
        return getattr(fn(), field)

    with torch.no_grad():
        errors, reference_errors, against_reference = {}, {}, {}
        for field, name, base in (("logits", "logits", lambda m: m), ("last_hidden_state", "hidden_states",
                                                                       lambda m: m.model)):
            want = output(base(exact), "exact", field)
            ours, reference_output = output(base(twisted), "bf16", field), output(base(reference), "bf16", field)
            errors[name] = relative_l2(ours, want)
            reference_errors[name] = relative_l2(reference_output, want)
            against_reference[name] = relative_l2(ours, reference_output)
        record["errors_against_bf16_reference"] = against_reference
        print(f"{record['case']}: relative L2 error against the exact model, twist {errors}, bf16 reference "
              f"{reference_errors}; twist against the bf16 reference {against_reference}", flush=True)
        # The kernels first, then eager and twist, torch.compile last: each stage printed as it is measured, so
        # that a run cut short (compilation takes the longest) keeps what came before.
        layer_ms, kernels_ms, kernel_errors = {}, {}, {}
        for layer in twisted.model.layers:
            kind = layer._twist.kind
            if kind not in kernels_ms:
                seen = gemma.layer_shape(gemma.dims_of(twisted.config), kind, shape)
                pairs = kernel_pairs(twisted, kernels, seen, layer)
                kernel_errors[kind] = {name: kernel_error(*pair) for name, pair in pairs.items()}
                kernels_ms[kind] = {name: {"twist_ms": timer(ours), "pytorch_ms": timer(theirs)}
                                    for name, (ours, theirs) in pairs.items()}
                layer_ms[kind] = layer_kernels_ms(kernels_ms[kind])
        print(f"{record['case']}: kernels (ms) {kernels_ms}, errors {kernel_errors}", flush=True)
        # One decoder layer of each type, called as the forward pass calls it (the twist layer then normalizes
        # its own input: the forward pass has the previous layer's residual norm do that).
        fn, before = forward(reference)
        if before:
            before()
        calls = layer_calls(reference, fn)
        layer_runs = {}
        for kind, (index, args, kwargs) in calls.items():
            cache = kwargs.get("past_key_values")

            def restore(kwargs=kwargs, cache=cache):
                if cache is not None:
                    kwargs["past_key_values"] = copy.deepcopy(cache)
            layer_runs[kind] = (index, lambda layer, args=args, kwargs=kwargs: (lambda: layer(*args, **kwargs)),
                                restore)
        forward_ms, layer_forward_ms, compile_s = {}, {kind: {} for kind in layer_runs}, {}
        for which, model in (("eager", reference), ("twist", twisted)):
            forward_ms[which] = timer(*forward(model))
            for kind, (index, call, restore) in layer_runs.items():
                layer_forward_ms[kind][which] = timer(call(model.model.layers[index]), restore)
        gemma.clear_stashes(twisted)
        print(f"{record['case']}: forward (ms) {forward_ms}, one layer (ms) {layer_forward_ms}", flush=True)
        if compile_reference:
            compiled = compiler(reference)
            compile_s["forward"] = first_call_s(*forward(compiled))
            forward_ms["compile"] = timer(*forward(compiled))
            for kind, (index, call, restore) in layer_runs.items():
                layer = compiler(reference.model.layers[index])
                compile_s[f"{kind} layer"] = first_call_s(call(layer), restore)
                layer_forward_ms[kind]["compile"] = timer(call(layer), restore)
            print(f"{record['case']}: torch.compile forward (ms) {forward_ms['compile']}, one layer (ms) "
                  f"{ {kind: ms['compile'] for kind, ms in layer_forward_ms.items()} }, compiling (s) {compile_s}",
                  flush=True)
            release_compile_workers()
    return finish_record(record, errors, reference_errors, kernels_ms, kernel_errors, layer_ms, forward_ms,
                         layer_forward_ms, compile_s)


def sanitize_kernels(kernels: gemma.TwistKernels) -> None:
    """Runs every kernel of the case once on random inputs of its manifest's shapes and waits for it: what
    compute-sanitizer checks (--sanitize), without the models."""
    import torch
    generator = torch.Generator(device="cuda").manual_seed(0)
    for (layer, shape), manifests in kernels.manifests.items():
        for name, manifest in manifests.items():
            inputs = {b.name: torch.randn(b.shape, device="cuda", generator=generator).to(torch.bfloat16)
                      for b in manifest.with_role("input")}
            kernels.call(layer, shape, name, **inputs)
            torch.cuda.synchronize()
            print(f"ran {manifest.label}", flush=True)


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--twist", default=str(REPO / "build" / "release" / "apps" / "twist" / "twist"))
    p.add_argument("--manifests", default=str(REPO / ".gpu" / "gemma_manifests"))
    p.add_argument("--out", default=str(REPO / "bench" / "results" / "gemma.json"))
    p.add_argument("--layers", type=int, default=2, help="decoder layers (sliding ones, then a full one)")
    p.add_argument("--quick", action="store_true", help="one prefill and one decode case")
    p.add_argument("--phase", choices=("prefill", "decode"), help="only the cases of this phase")
    p.add_argument("--no-compile", action="store_true", help="leave torch.compile out (it compiles for a minute "
                   "or more per case)")
    p.add_argument("--export-only", action="store_true", help="export the kernels (no GPU, no torch) and stop")
    p.add_argument("--sanitize", action="store_true", help="only run every kernel once on random inputs, under "
                   "compute-sanitizer: no models, no timing")
    return p.parse_args(argv)


def case_directory(manifests: str | Path, shape: gemma.LayerShape) -> Path:
    return Path(manifests) / case_name(shape).replace(" ", "_")


def export_all(twist: str, manifests: str | Path, shapes: list[gemma.LayerShape]) -> None:
    dims = gemma.CONFIGS["31b"]
    for shape in shapes:
        for layer in ("sliding", "full"):
            print(f"exporting {layer} {case_name(shape)}", flush=True)
            gemma.export_layer_kernels(twist, case_directory(manifests, shape), "31b", layer,
                                       gemma.layer_shape(dims, layer, shape))


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    shapes = [shape for shape in cases(args.quick) if args.phase in (None, shape.phase)]
    if args.export_only:
        export_all(args.twist, args.manifests, shapes)
        return 0
    import torch
    if args.sanitize:
        for shape in shapes:
            sanitize_kernels(gemma.TwistKernels(case_directory(args.manifests, shape), "31b", [shape]))
        return 0
    models = build_models(args.layers)
    records, failures, date = [], [], datetime.date.today().isoformat()
    gpu = torch.cuda.get_device_name()
    for shape in shapes:
        try:
            kernels = gemma.TwistKernels(case_directory(args.manifests, shape), "31b", [shape])
            model = copy.deepcopy(models["bf16"])
            gemma.swap_decoder_layers(model, kernels)
            records.append(measure_case(models, model, kernels, shape, new_record(shape, gpu, date, args.layers),
                                        compile_reference=not args.no_compile))
            del model
        except Exception as error:  # the other cases still run, unless the CUDA context is lost
            traceback.print_exc()
            failures.append(f"{case_name(shape)}: {error}")
            if getattr(error, "sticky", False):
                break
            continue
        # After every case, so that a run cut short keeps what it measured.
        Path(args.out).write_text(json.dumps(records, indent=1) + "\n")
        print(format_table(records[-1:]), flush=True)
    print(format_table(records))
    for failure in failures:
        print(f"FAILED {failure}")
    return 0 if records and not failures and all(r["ok"] for r in records) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
