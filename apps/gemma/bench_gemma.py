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
case's kernels, ran in 78 s); --phase keeps the cases of one phase, --case names the cases to run
(decode_B64_L32768; repeatable); --budget-s starts no case that a case as long as the longest so far
would carry past that many seconds (one GPU call: 180) and reports the cases left out as failed; --sanitize
runs every kernel once on random inputs and nothing else, for compute-sanitizer.

For every case (prefill: batch x new tokens; decode: batch x keys in the cache) it
  1. (--export-only) exports the layer kernels (twist export gemma) for both layer types at the case's shape,
     into MANIFESTS/<case>; the run on the GPU reads them from there;
  2. checks the twist model's last hidden state and logits against the exact model (the reference in f32) on
     the same weights and inputs, on the batch's first checked_batch() sequences: within SLACK times the error
     transformers' bf16 model has (relative L2); and each kernel against PyTorch's code for the same op
     (KERNEL_TOLERANCE);
  3. times every kernel against PyTorch's code for the same op as the eager layer runs it (PYTORCH_EQUIVALENT;
     attention: the layer's own attention function on the arguments the eager layer gives it, captured from
     that call, so SDPA takes the layer's path; the record's pytorch_baselines names it), and reports ours /
     PyTorch's per kernel and their geometric mean over the layer's kernels (the seed reports 1.30x); the
     projections also by their kernels' device time (the profiler's) beside the GEMM rule's modeled time;
  4. sums each layer type's kernels (ours, PyTorch's), and times one decoder layer of each type (called with
     the arguments the forward pass gives it) and the whole forward pass: reference eager, reference under
     torch.compile (its first call's compilation recorded apart), and the twist model; profiles_ms holds the
     CUDA kernels of one call of each layer and of PyTorch's attention, by device time.
Decoding starts each timed step from a fresh copy of the filled cache, made outside the timed region. Timings are
triton.testing.do_bench medians. Each case builds its twist model and caches and frees them; what PyTorch cannot
fit in the GPU's memory is recorded (out_of_memory: PyTorch's message, the bytes asked for and held) and left out
of the ratios, and each record has its peak_allocated_bytes. Writes the records as JSON and prints a table;
exits 1 if a check failed.

The records, summaries and tables run without torch (apps/gemma/test_bench_gemma.py); measure_case() runs on
the CPU with a PyTorch stand-in for the kernels and for the timer (python/tests/test_gemma_swap.py).
"""
from __future__ import annotations

import argparse
import copy
import datetime
import gc
import json
import math
import sys
import time
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
# The references fill a decoding case's cache in calls of at most this many rows (batch x tokens), a few
# sequences at a time (checked_batch): at batch 64 x 32768 keys one prefill of the whole prompt would hold 2M
# tokens' activations (the f32 model's MLP alone 180 GB), and transformers' SDPA path repeats the full layers'
# 4 KV heads to 32 (repeat_kv: heads of 512 are past SDPA's GQA support), 8 times the cache, for every call.
CACHE_FILL_ROWS = 4096
# The exact model (f32) and the bf16 reference are checked against on the first sequences of the batch only,
# at most this many tokens (prefill) or keys (decode) in all: the sequences of a batch are independent, and at
# B8 S8192 the f32 model's attention takes SDPA's math path, whose [B, 32, S, S] f32 scores alone are 64 GiB
# (the grid run of 2026-12-03 20:05 ran out of memory there).
CHECK_TOKENS = 16384
# The PyTorch code each twist kernel replaces (what PyTorch runs for the same op, in the model's own code).
PYTORCH_EQUIVALENT = {
    "input_norm": "input_layernorm (Gemma4RMSNorm)",
    "qkv": "q_proj, k_proj, v_proj: three nn.Linear calls (cuBLAS), as the layer makes them",
    "q_norm_rope": "q_norm on q_proj's output viewed as heads, apply_rotary_pos_emb, transpose (a view, as the "
                   "layer leaves it)",
    "k_norm_rope": "k_norm on k_proj's output viewed as heads, apply_rotary_pos_emb, transpose (a view)",
    "v_norm": "v_norm on v_proj's (full layers: k_proj's) output viewed as heads, transpose (a view)",
    "attention": "the layer's own attention function, captured from the call the eager layer makes (its "
                 "attn_implementation, mask, scaling and sliding window; pytorch_baselines names it per layer type), "
                 "with its output as the layer reshapes it; ours: the attention kernel and the transpose to "
                 "[B*S, H*D] that the twist layer makes",
    "o_proj": "o_proj (nn.Linear)",
    "post_attention_norm": "post_attention_layernorm, add, pre_feedforward_layernorm",
    "gate_up": "gate_proj, up_proj, gelu_tanh(gate) * up",
    "down_proj": "down_proj (nn.Linear)",
    "post_feedforward_norm": "post_feedforward_layernorm, add, next input_layernorm",
}
# The kernels whose manifests carry the GEMM rule's modeled time (twist export gemma, modeled_us).
PROJECTIONS = ("qkv", "o_proj", "gate_up", "down_proj")


def cases(quick: bool) -> list[gemma.LayerShape]:
    prefill, decode = (QUICK_PREFILL, QUICK_DECODE) if quick else (PREFILL, DECODE)
    return ([gemma.LayerShape("prefill", batch=b, tokens=s) for b, s in prefill]
            + [gemma.LayerShape("decode", batch=b, keys=k) for b, k in decode])


def case_name(shape: gemma.LayerShape) -> str:
    return f"{shape.phase} B{shape.batch} " + (f"S{shape.tokens}" if shape.phase == "prefill" else f"L{shape.keys}")


def next_case_fits(elapsed_s: float, longest_case_s: float, budget_s: float | None) -> bool:
    """Whether to start another case within the run's time budget (--budget-s; None: no budget): only if a case
    as long as the longest so far would still end within it. Cases differ by minutes (torch.compile, the
    reference's cache fill), so the longest so far is the estimate that keeps a GPU call inside its limit."""
    return budget_s is None or elapsed_s + longest_case_s <= budget_s


def kernel_summary(kernels: dict[str, dict[str, float]]) -> dict:
    """Per layer type and kernel, {"twist_ms", "pytorch_ms"}: the speedups (PyTorch / ours), their geometric
    mean, and the kernels slower than PyTorch's. A kernel whose PyTorch code ran out of memory (pytorch_ms None)
    has no speedup and is listed apart."""
    speedups = {f"{layer}/{k}": t["pytorch_ms"] / t["twist_ms"] for layer, per in kernels.items()
                for k, t in per.items() if t["pytorch_ms"] is not None and t["twist_ms"] is not None}
    return {"speedup": speedups,
            "geomean_speedup": gemma.geometric_mean(speedups.values()) if speedups else None,
            "slower_than_pytorch": sorted(k for k, v in speedups.items() if v < 1),
            "unmeasured": sorted(f"{layer}/{k}" for layer, per in kernels.items() for k in per
                                 if f"{layer}/{k}" not in speedups)}


def layer_kernels_ms(kernels: dict[str, dict[str, float]]) -> dict[str, float | None]:
    """One layer's time as the sum of its kernels' medians, ours and PyTorch's code for the same ops (the
    cache update between them, which both sides run, is not counted); None for a side with a kernel that
    could not run."""
    def total(side):
        times = [t[side] for t in kernels.values()]
        return None if any(v is None for v in times) else sum(times)
    return {"twist": total("twist_ms"), "pytorch": total("pytorch_ms")}


def new_record(shape: gemma.LayerShape, gpu: str, date: str, layers: int) -> dict:
    return {"case": case_name(shape), "phase": shape.phase, "batch": shape.batch, "tokens": shape.tokens,
            "keys": shape.key_count, "config": "31b", "layers": layers, "gpu": gpu, "date": date}


def finish_record(r: dict, errors: dict[str, float], reference_errors: dict[str, float], kernels: dict,
                  kernel_errors: dict, layer_ms: dict, forward_ms: dict, layer_forward_ms: dict | None = None,
                  compile_s: dict | None = None) -> dict:
    """`errors` and `reference_errors`: the twist model's and the bf16 reference's against the exact model;
    `kernel_errors`: per layer type and kernel, ours against PyTorch's code for the same op (None where
    PyTorch's ran out of memory); `forward_ms` (the forward pass) and `layer_forward_ms` (per layer type, one
    decoder layer's call) have "eager", "twist" and, unless torch.compile was left out, "compile" (None where
    it ran out of memory); `compile_s`: what torch.compile's first calls took."""
    r["errors"], r["reference_errors"], r["kernel_errors"] = errors, reference_errors, kernel_errors
    r["kernels_over_tolerance"] = sorted(f"{layer}/{k}" for layer, per in kernel_errors.items()
                                         for k, e in per.items() if e is not None and not e <= KERNEL_TOLERANCE)
    r["kernels_unchecked"] = sorted(f"{layer}/{k}" for layer, per in kernel_errors.items()
                                    for k, e in per.items() if e is None)
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


def speedups_of(ms: dict[str, float | None]) -> dict[str, float]:
    """{"eager": .., "compile": .., "twist": ..} milliseconds as {"vs_eager": eager / twist, ...}, leaving out
    what did not run (None)."""
    if ms.get("twist") is None:
        return {}
    return {f"vs_{which}": t / ms["twist"] for which, t in ms.items() if which != "twist" and t is not None}


def format_table(records: list[dict]) -> str:
    def ratio(value, width):
        return f"{value:>{width - 1}.2f}x" if value is not None else f"{'-':>{width}}"
    lines = [f"{'case':<22}{'ok':>4}{'error':>8}{'bf16 ref':>9}{'worst kernel':>26}{'kernel geomean':>16}"
             f"{'vs eager':>10}{'vs compile':>12}  per layer (vs eager / vs compile)  slower kernels"]
    for r in records:
        checked = [(e, f"{layer}/{k}") for layer, per in r["kernel_errors"].items() for k, e in per.items()
                   if e is not None]
        worst = max(checked, key=lambda pair: math.inf if math.isnan(pair[0]) else pair[0])
        speedup = r["end_to_end_speedup"]
        per_layer = ", ".join(f"{kind} " + (f"{s['vs_eager']:.2f}x" if "vs_eager" in s else "-") + " / "
                              + (f"{s['vs_compile']:.2f}x" if "vs_compile" in s else "-")
                              for kind, s in r.get("layer_speedup", {}).items()) or "-"
        lines.append(f"{r['case']:<22}{'yes' if r['ok'] else 'NO':>4}{r['errors']['hidden_states']:>8.4f}"
                     f"{r['reference_errors']['hidden_states']:>9.4f}{worst[1]:>18} {worst[0]:.4f}"
                     f"{ratio(r['geomean_speedup'], 16)}{ratio(speedup.get('vs_eager'), 10)}"
                     f"{ratio(speedup.get('vs_compile'), 12)}"
                     f"  {per_layer}  {', '.join(r['slower_than_pytorch']) or '-'}")
        if r.get("out_of_memory"):
            lines.append(f"{'':<22}out of memory: " + "; ".join(f"{what}: {why}"
                                                                for what, why in r["out_of_memory"].items()))
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


class _AttentionCaptured(Exception):
    """Stops the eager layer at its attention call, once the call's arguments are recorded."""


class _AttentionCapture:
    """Stands in for transformers' ALL_ATTENTION_FUNCTIONS in modeling_gemma4 while one eager layer runs: the
    attention function the layer looks up (by its config's attn_implementation) is recorded with the arguments
    the layer passes it, and the layer stops there (before attention: a call PyTorch cannot fit in memory is
    not made)."""

    def __init__(self, functions):
        self.functions, self.call = functions, None

    def get_interface(self, name, default):
        function = self.functions.get_interface(name, default)

        def capture(module, query, key, value, attention_mask, **kwargs):
            self.call = (function, module, query, key, value, attention_mask, kwargs)
            raise _AttentionCaptured
        return capture


def captured_attention_call(layer, args, kwargs) -> tuple:
    """(function, module, query, key, value, mask, kwargs): the attention call the eager decoder layer `layer`
    makes on its arguments (a cache among them is appended to: pass a copy)."""
    from transformers.models.gemma4 import modeling_gemma4 as mg
    functions = mg.ALL_ATTENTION_FUNCTIONS
    capture = _AttentionCapture(functions)
    mg.ALL_ATTENTION_FUNCTIONS = capture
    try:
        layer(*args, **kwargs)
    except _AttentionCaptured:
        pass
    finally:
        mg.ALL_ATTENTION_FUNCTIONS = functions
    if capture.call is None:
        raise RuntimeError(f"layer {layer.self_attn.layer_idx} made no attention call: transformers' "
                           "Gemma4TextAttention no longer looks up ALL_ATTENTION_FUNCTIONS")
    return capture.call


def describe_attention_call(call) -> str:
    """What PyTorch's attention baseline is: the function, its implementation, and the arguments that choose
    SDPA's path (a mask or is_causal, GQA by repeat_kv beyond head dim 256)."""
    function, module, query, key, value, mask, kwargs = call
    if mask is not None:
        masking = f"a {str(mask.dtype).removeprefix('torch.')} mask {tuple(mask.shape)}"
    else:  # transformers' SDPA path asks for is_causal where there is no mask and more than one query
        masking = "no mask (is_causal)" if query.shape[2] > 1 else "no mask (one query, every key)"
    return (f"{function.__module__}.{function.__name__} (attn_implementation "
            f"'{module.config._attn_implementation}'): query {tuple(query.shape)}, key and value {tuple(key.shape)}"
            f", {masking}, scaling {kwargs.get('scaling')}, sliding_window {kwargs.get('sliding_window')}")


def kernel_pairs(model, kernels, shape: gemma.LayerShape, layer, attention_call) -> dict[str, tuple]:
    """Per twist kernel of `layer`: (ours, PyTorch's code for the same op as the eager layer runs it), both
    callables on the same inputs, returning the same values (the residual norms both their outputs; qkv the
    three projections). Attention runs on the query, keys and values the eager layer passed its attention
    function (`attention_call`, captured_attention_call), the other kernels on random inputs."""
    import torch
    from transformers.models.gemma4 import modeling_gemma4 as mg
    dims, t, attn, mlp = gemma.dims_of(model.config), layer._twist, layer.self_attn, layer.mlp
    kv, d, values_from_keys = dims.attention(t.kind)
    v_first = dims.heads + (0 if values_from_keys else kv)
    b, s, rows = shape.batch, shape.tokens, shape.rows
    device = layer.input_layernorm.weight.device
    generator = torch.Generator(device=device).manual_seed(1)
    randn = lambda *size: torch.randn(*size, device=device, dtype=torch.bfloat16, generator=generator)  # noqa: E731
    h, o = randn(rows, dims.hidden), randn(rows, dims.hidden)
    projected = randn(b, s, dims.qkv_columns(t.kind) // d, d)
    # The eager layer's projections are three tensors, each viewed as heads.
    q_heads = projected[:, :, :dims.heads].contiguous()
    k_heads = projected[:, :, dims.heads:dims.heads + kv].contiguous()
    v_heads = projected[:, :, v_first:v_first + kv].contiguous()
    # Rotary tables as the model's: cos^2 + sin^2 = 1.
    angles = torch.rand(b, s, d, device=device, generator=generator) * 2 * torch.pi
    cos, sin = angles.cos().to(torch.bfloat16), angles.sin().to(torch.bfloat16)
    g, a = randn(rows, dims.intermediate), randn(rows, dims.heads * d)
    run = lambda kernel, **x: (lambda: kernels.call(t.kind, shape, kernel, **x))  # noqa: E731
    function, module, query, key, value, mask, attention_kwargs = attention_call
    # Ours reads them contiguous, as the twist layer produces them.
    q, k, v = (x.contiguous() for x in (query, key, value))
    projections = [p for p in (attn.q_proj, attn.k_proj, attn.v_proj) if p is not None]
    widths = [p.out_features for p in projections]

    def residual_norm(post, next_norm):
        def pytorch():
            summed = h + post(o)
            return summed, next_norm(summed)
        return pytorch

    def rope(norm, x):
        return lambda: mg.apply_rotary_pos_emb(norm(x), cos, sin, unsqueeze_dim=2).transpose(1, 2)
    return {
        "input_norm": (run("input_norm", x=h, w=layer.input_layernorm.weight), lambda: layer.input_layernorm(h)),
        "qkv": (lambda: tuple(kernels.call(t.kind, shape, "qkv", A=h, B=t.qkv).split(widths, -1)),
                lambda: tuple(p(h) for p in projections)),
        "q_norm_rope": (run("q_norm_rope", x=projected, w=attn.q_norm.weight, cos=cos, sin=sin),
                        rope(attn.q_norm, q_heads)),
        "k_norm_rope": (run("k_norm_rope", x=projected, w=attn.k_norm.weight, cos=cos, sin=sin),
                        rope(attn.k_norm, k_heads)),
        "v_norm": (run("v_norm", x=projected), lambda: attn.v_norm(v_heads).transpose(1, 2)),
        "attention": (lambda: kernels.call(t.kind, shape, "attention", Q=q, K=k, V=v).transpose(1, 2)
                      .reshape(rows, -1),
                      lambda: function(module, query, key, value, mask, **attention_kwargs)[0].reshape(rows, -1)),
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


def layer_calls(model, run, cache=None) -> dict[str, tuple[int, tuple, dict]]:
    """Per layer type, the first decoder layer of that type in `model` and the arguments `run()` (a forward pass)
    calls it with. The pass appends to its cache: the calls take `cache` in its place, the cache the pass
    started from (a layer's call sees the entries of the layers before it appended to, but reads only its own)."""
    calls = {}

    def capture(index):
        def hook(module, args, kwargs):
            kind = gemma.LAYER_TYPES[module.self_attn.layer_type]
            if kind not in calls:
                calls[kind] = (index, args, {k: cache if k == "past_key_values" else v for k, v in kwargs.items()})
        return hook
    hooks = [layer.register_forward_pre_hook(capture(i), with_kwargs=True)
             for i, layer in enumerate(model.model.layers)]
    try:
        run()
    finally:
        for h in hooks:
            h.remove()
    return calls


def checked_batch(shape: gemma.LayerShape) -> int:
    """How many of the case's sequences are checked against the exact model and the bf16 reference
    (CHECK_TOKENS); the decoding caches are filled that many sequences at a time."""
    return max(1, min(shape.batch, CHECK_TOKENS // shape.key_count))


def filled_cache(model, ids, config):
    """A DynamicCache after `model` read `ids` ([sequences, prompt]) in calls of at most CACHE_FILL_ROWS rows."""
    from transformers import DynamicCache
    cache = DynamicCache(config=config)
    chunk = max(1, CACHE_FILL_ROWS // ids.shape[0])
    for first in range(0, ids.shape[1], chunk):
        model.model(input_ids=ids[:, first:first + chunk], past_key_values=cache, use_cache=True)
    return cache


def batch_concatenated(caches):
    """One cache holding the sequences of `caches` (DynamicCaches of the same layers and length) one after the
    other; the first cache becomes it."""
    import torch
    merged = caches[0]
    for i, layer in enumerate(merged.layers):
        layer.keys = torch.cat([c.layers[i].keys for c in caches])
        layer.values = torch.cat([c.layers[i].values for c in caches])
    return merged


def unless_out_of_memory(what: str, fn, out_of_memory: dict):
    """fn()'s value, or None where it ran out of GPU memory: `out_of_memory[what]` then says what it asked for
    (PyTorch's message: the allocation, the capacity, what was held) and what this process held."""
    import torch
    try:
        return fn()
    except torch.cuda.OutOfMemoryError as error:
        out_of_memory[what] = (f"{str(error).splitlines()[0]} [allocated by this process at the failure: "
                               f"{torch.cuda.memory_allocated()} bytes]")
    import gc
    gc.collect()
    torch.cuda.empty_cache()
    return None


def kernel_profile(fn, before=None, top: int = 10) -> dict[str, float]:
    """The CUDA kernels one call of fn() runs, the longest `top` by their total milliseconds: which path PyTorch
    took (e.g. SDPA's memory-efficient kernel or its math path). Empty without a GPU."""
    import torch
    if not torch.cuda.is_available():
        return {}
    from torch.profiler import ProfilerActivity, profile
    if before:
        before()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as profiler:
        fn()
        torch.cuda.synchronize()
    kernels = sorted(((e.self_device_time_total / 1e3, e.key) for e in profiler.key_averages()
                      if e.self_device_time_total > 0), reverse=True)
    return {name[:120]: round(ms, 4) for ms, name in kernels[:top]}


def measure_case(models: dict, twisted, kernels, shape: gemma.LayerShape, record: dict, timer=bench_ms,
                 compile_reference: bool = True, compiler=None) -> dict:
    """Checks the twist model against the reference on one case, then times the kernels, one decoder layer of
    each type and the forward passes with `timer(fn, before)` (torch.compile's by `compiler`, torch.compile
    unless given). The exact model (f32) is the yardstick: on the first checked_batch(shape) sequences, the
    twist model must be within SLACK of its error as transformers' bf16 model has it. What PyTorch cannot fit in
    the GPU's memory is recorded (record["out_of_memory"]) and left out of the ratios."""
    import torch
    compiler = compiler or torch.compile
    reference, exact = models["bf16"], models["exact"]
    config = reference.config
    device = reference.lm_head.weight.device
    generator = torch.Generator(device=device).manual_seed(0)
    prompt = shape.tokens if shape.phase == "prefill" else shape.keys - 1
    ids = torch.randint(0, config.vocab_size, (shape.batch, prompt), device=device, generator=generator)
    step = torch.randint(0, config.vocab_size, (shape.batch, 1), device=device, generator=generator)
    checked = record["checked_sequences"] = checked_batch(shape)
    out_of_memory = record.setdefault("out_of_memory", {})
    guarded = lambda what, fn: unless_out_of_memory(what, fn, out_of_memory)  # noqa: E731
    caches = {}
    if shape.phase == "decode":
        # The bf16 reference fills the batch's cache `checked` sequences at a time; the twist model decodes from
        # it, the references from their own caches of the checked sequences: every model decodes the same step
        # against the same keys, and the twist model needs no kernels for the prompt's length.
        with torch.no_grad():
            groups = [filled_cache(reference, ids[first:first + checked], config)
                      for first in range(0, shape.batch, checked)]
            caches["exact"] = filled_cache(exact, ids[:checked], config)
        caches["bf16"] = copy.deepcopy(groups[0]) if len(groups) > 1 else groups[0]
        caches["batch"] = batch_concatenated(groups)
        del groups

    def forward(model, cache=None, sequences=None):
        """(fn, before): one forward pass over the first `sequences` sequences (all of them by default), and
        what restores its cache before it (decoding)."""
        # The LM head on the last token only: [B, S, 262144] logits would outweigh the layers measured.
        last = {"logits_to_keep": 1} if hasattr(model, "lm_head") else {}
        if shape.phase == "prefill":
            x = ids[:sequences]
            return lambda: model(input_ids=x, use_cache=False, **last), None
        x, state = step[:sequences], {}

        def restore():  # a fresh copy of the filled cache (decoding appends to it), the last one dropped first
            state["cache"] = None
            state["cache"] = copy.deepcopy(cache)
        return lambda: model(input_ids=x, past_key_values=state["cache"], use_cache=True, **last), restore

    def output(model, cache, field, sequences=None):
        fn, before = forward(model, cache, sequences)
        if before:
            before()
        return getattr(fn(), field)[:checked]

    with torch.no_grad():
        errors, reference_errors, against_reference = {}, {}, {}
        for field, name, base in (("logits", "logits", lambda m: m), ("last_hidden_state", "hidden_states",
                                                                       lambda m: m.model)):
            want = output(base(exact), caches.get("exact"), field, checked)
            reference_output = output(base(reference), caches.get("bf16"), field, checked)
            ours = output(base(twisted), caches.get("batch"), field)
            errors[name] = relative_l2(ours, want)
            reference_errors[name] = relative_l2(reference_output, want)
            against_reference[name] = relative_l2(ours, reference_output)
        for which in ("exact", "bf16"):
            caches.pop(which, None)
        record["errors_against_bf16_reference"] = against_reference
        print(f"{record['case']}: relative L2 error against the exact model ({checked} sequences), twist "
              f"{errors}, bf16 reference {reference_errors}; twist against the bf16 reference {against_reference}",
              flush=True)
        # One decoder layer of each type, with the arguments the forward pass gives it (taken from the twist
        # model's pass, which fits in memory where the reference's may not; the layers' arguments are the
        # model's, and the twist layer then normalizes its own input).
        fn, before = forward(twisted, caches.get("batch"))
        if before:
            before()
        calls = layer_calls(twisted, fn, caches.get("batch"))
        del fn, before
        gemma.clear_stashes(twisted)
        layer_runs = {}
        for kind, (index, args, kwargs) in calls.items():
            def restore(kwargs=kwargs, cache=caches.get("batch")):
                # A fresh copy of the filled cache for this call, every other call's copy dropped first (at
                # B64 L32768 each is 17 GB).
                if cache is not None:
                    for _, _, others in calls.values():
                        others["past_key_values"] = None
                    kwargs["past_key_values"] = copy.deepcopy(cache)
            layer_runs[kind] = (index, lambda layer, args=args, kwargs=kwargs: (lambda: layer(*args, **kwargs)),
                                restore)
        # The kernels, each against PyTorch's code as the eager layer runs it, attention on the arguments the
        # eager layer gives its attention function.
        layer_ms, kernels_ms, kernel_errors, baselines, profiles = {}, {}, {}, dict(PYTORCH_EQUIVALENT), {}
        for kind, (index, call, restore) in layer_runs.items():
            restore()
            attention_call = captured_attention_call(reference.model.layers[index], *calls[kind][1:])
            restore()
            baselines[f"{kind}/attention"] = describe_attention_call(attention_call)
            seen = gemma.layer_shape(gemma.dims_of(twisted.config), kind, shape)
            pairs = kernel_pairs(twisted, kernels, seen, twisted.model.layers[index], attention_call)
            del attention_call
            kernel_errors[kind] = {name: guarded(f"{kind}/{name} (PyTorch's, to check ours)",
                                                 lambda pair=pair: kernel_error(*pair))
                                   for name, pair in pairs.items()}
            kernels_ms[kind] = {name: {"twist_ms": timer(ours),
                                       "pytorch_ms": guarded(f"{kind}/{name} (PyTorch's)", lambda f=theirs: timer(f))}
                                for name, (ours, theirs) in pairs.items()}
            # The projections' kernels on the device alone (the profiler's kernel times, without the launches
            # that bound the timer's figure where a kernel takes tens of microseconds), beside what the GEMM rule
            # modeled for the plan it picked.
            manifests = getattr(kernels, "manifests", {}).get((kind, seen), {})
            for name in PROJECTIONS:
                times = kernels_ms[kind][name]
                for side, fn in (("twist", pairs[name][0]), ("pytorch", pairs[name][1])):
                    profile = guarded(f"{kind}/{name} ({side}, profiled)", lambda f=fn: kernel_profile(f))
                    times[f"{side}_device_ms"] = sum(profile.values()) if profile else None
                if name in manifests and "modeled_us" in manifests[name].notes:
                    times["modeled_ms"] = float(manifests[name].notes["modeled_us"]) / 1e3
                    times["schedule"] = manifests[name].notes.get("schedule")
            profiles[f"{kind}/attention PyTorch"] = guarded(f"{kind}/attention (profiled)",
                                                            lambda f=pairs["attention"][1]: kernel_profile(f))
            del pairs
            layer_ms[kind] = layer_kernels_ms(kernels_ms[kind])
        record["pytorch_baselines"] = baselines
        print(f"{record['case']}: kernels (ms) {kernels_ms}, errors {kernel_errors}", flush=True)
        forward_ms, layer_forward_ms, compile_s = {}, {kind: {} for kind in layer_runs}, {}
        for which, model in (("eager", reference), ("twist", twisted)):
            forward_ms[which] = guarded(f"{which} forward", lambda: timer(*forward(model, caches.get("batch"))))
            for kind, (index, call, restore) in layer_runs.items():
                layer = model.model.layers[index]
                layer_forward_ms[kind][which] = guarded(f"{which} {kind} layer",
                                                        lambda: timer(call(layer), restore))
                # Where the layer's time goes: its kernels, once (why a layer is slower than its kernels say).
                profiles[f"{kind} layer {which}"] = guarded(f"{which} {kind} layer (profiled)",
                                                           lambda: kernel_profile(call(layer), restore))
        gemma.clear_stashes(twisted)
        record["profiles_ms"] = profiles
        print(f"{record['case']}: forward (ms) {forward_ms}, one layer (ms) {layer_forward_ms}", flush=True)
        if compile_reference:
            # Dynamo's caches outlive a case: without a reset, the cases after the eighth shape hit its
            # recompile limit and run the model eagerly under the name of torch.compile (seen on the H200,
            # 2026-12-04: B1 S8192's "compiled" forward slower than eager, its layers "compiled" in 0.04 s).
            torch._dynamo.reset()
            compiled = compiler(reference)
            compile_s["forward"] = guarded("compile forward (first call)",
                                           lambda: first_call_s(*forward(compiled, caches.get("batch"))))
            forward_ms["compile"] = guarded("compile forward", lambda: timer(*forward(compiled, caches.get("batch"))))
            for kind, (index, call, restore) in layer_runs.items():
                layer = compiler(reference.model.layers[index])
                compile_s[f"{kind} layer"] = guarded(f"compile {kind} layer (first call)",
                                                     lambda: first_call_s(call(layer), restore))
                layer_forward_ms[kind]["compile"] = guarded(f"compile {kind} layer", lambda: timer(call(layer), restore))
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
    p.add_argument("--case", action="append", type=parse_case, help="a case to run, in the order given, as its "
                   "directory is named (prefill_B8_S8192, decode_B64_L32768); repeat for several; any batch, "
                   "tokens and keys")
    p.add_argument("--no-compile", action="store_true", help="leave torch.compile out (it compiles for a minute "
                   "or more per case)")
    p.add_argument("--budget-s", type=float, help="start no case that would end past this many seconds from the "
                   "start, by the longest case so far (next_case_fits); the cases left out are reported as failed")
    p.add_argument("--export-only", action="store_true", help="export the kernels (no GPU, no torch) and stop")
    p.add_argument("--sanitize", action="store_true", help="only run every kernel once on random inputs, under "
                   "compute-sanitizer: no models, no timing")
    return p.parse_args(argv)


def parse_case(name: str) -> gemma.LayerShape:
    """A case named as case_directory names it: prefill_B<batch>_S<tokens> or decode_B<batch>_L<keys>."""
    import re
    match = re.fullmatch(r"(prefill)_B(\d+)_S(\d+)|(decode)_B(\d+)_L(\d+)", name)
    if not match:
        raise argparse.ArgumentTypeError(f"case '{name}': name it prefill_B<batch>_S<tokens> or "
                                         "decode_B<batch>_L<keys>, e.g. prefill_B8_S8192, decode_B64_L32768")
    if match.group(1):
        return gemma.LayerShape("prefill", batch=int(match.group(2)), tokens=int(match.group(3)))
    return gemma.LayerShape("decode", batch=int(match.group(5)), keys=int(match.group(6)))


def case_directory(manifests: str | Path, shape: gemma.LayerShape) -> Path:
    return Path(manifests) / case_name(shape).replace(" ", "_")


def export_all(twist: str, manifests: str | Path, shapes: list[gemma.LayerShape]) -> None:
    dims = gemma.CONFIGS["31b"]
    for shape in shapes:
        for layer in ("sliding", "full"):
            seen = gemma.layer_shape(dims, layer, shape)
            print(f"exporting {layer} {case_name(shape)}", flush=True)
            gemma.export_layer_kernels(twist, case_directory(manifests, shape), "31b", layer, seen)


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    shapes = [shape for shape in (args.case or cases(args.quick)) if args.phase in (None, shape.phase)]
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
    started, longest_case_s = time.monotonic(), 0.0
    for shape in shapes:
        if not next_case_fits(time.monotonic() - started, longest_case_s, args.budget_s):
            failures.append(f"{case_name(shape)}: not run: the time budget of {args.budget_s:g} s would be spent "
                            f"(longest case so far {longest_case_s:.0f} s); run it with --case")
            continue
        case_started = time.monotonic()
        # Each case builds what it needs (the twist model, its caches) and frees it: the grid's large cases need
        # the GPU's memory to themselves.
        torch.cuda.reset_peak_memory_stats()
        record = new_record(shape, gpu, date, args.layers)
        try:
            kernels = gemma.TwistKernels(case_directory(args.manifests, shape), "31b", [shape])
            model = copy.deepcopy(models["bf16"])
            gemma.swap_decoder_layers(model, kernels)
            records.append(measure_case(models, model, kernels, shape, record,
                                        compile_reference=not args.no_compile))
        except Exception as error:  # the other cases still run, unless the CUDA context is lost
            traceback.print_exc()
            failures.append(f"{case_name(shape)}: {error} (peak allocated {torch.cuda.max_memory_allocated()} "
                            f"bytes of {torch.cuda.get_device_properties(0).total_memory})")
            if getattr(error, "sticky", False):
                break
            continue
        finally:
            model = kernels = None
            gc.collect()
            torch.cuda.empty_cache()
            record["peak_allocated_bytes"] = torch.cuda.max_memory_allocated()
            record["device_bytes"] = torch.cuda.get_device_properties(0).total_memory
            longest_case_s = max(longest_case_s, time.monotonic() - case_started)  # failed cases took time too
        # After every case, so that a run cut short keeps what it measured.
        Path(args.out).write_text(json.dumps(records, indent=1) + "\n")
        print(format_table(records[-1:]), flush=True)
    print(format_table(records))
    for failure in failures:
        print(f"FAILED {failure}")
    return 0 if records and not failures and all(r["ok"] for r in records) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
