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
    # on the GPU machine:
    PYTHONPATH=python python3 apps/gemma/bench_gemma.py --manifests .gpu/gemma_manifests \
        --out bench/results/gemma.json

For every case (prefill: batch x new tokens; decode: batch x keys in the cache) it
  1. (--export-only) exports the layer kernels (twist export gemma) for both layer types at the case's shape,
     into MANIFESTS/<case>; the run on the GPU reads them from there;
  2. checks the twist model's last hidden state and logits against the reference model's on the same weights
     and inputs (relative L2 error, bf16 tolerance);
  3. times every kernel against PyTorch's code for the same op (the model's own modules and functions: the
     linears, the norms, the add, RoPE, scaled-dot-product attention, the gated activation), and reports ours /
     PyTorch's per kernel and their geometric mean over the layer's kernels (the seed reports 1.30x);
  4. sums each layer type's kernels (ours, PyTorch's) and times the whole forward pass: reference eager,
     reference under torch.compile, and the twist model.
Decoding restores the cache (DynamicCache.crop) before each timed step, outside the timed region. Timings are
triton.testing.do_bench medians. Writes the records as JSON and prints a table; exits 1 if a check failed.

Everything but measure_case() and main's GPU setup runs without torch (apps/gemma/test_bench_gemma.py).
"""
from __future__ import annotations

import argparse
import copy
import datetime
import json
import sys
from pathlib import Path

from twist import gemma

REPO = Path(__file__).resolve().parents[2]
# Relative L2 error of the hidden states and logits allowed against the reference model: bf16 storage between
# every kernel on both sides, each side rounding differently, over a few layers.
TOLERANCE = 3e-2
PREFILL = [(b, s) for b in (1, 2, 4, 8) for s in (2048, 4096, 8192)]
DECODE = [(b, keys) for b in (1, 8, 32, 64) for keys in (4096, 8192, 16384, 32768)]
QUICK_PREFILL, QUICK_DECODE = [(1, 2048)], [(8, 4096)]
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


def finish_record(r: dict, errors: dict[str, float], kernels: dict, layer_ms: dict, forward_ms: dict) -> dict:
    r["errors"] = errors
    r["ok"] = all(e <= TOLERANCE for e in errors.values())
    r["kernels"] = kernels
    r.update(kernel_summary(kernels))
    r["layer_ms"] = layer_ms
    r["forward_ms"] = forward_ms
    r["end_to_end_speedup"] = {"vs_eager": forward_ms["eager"] / forward_ms["twist"],
                               "vs_compile": forward_ms["compile"] / forward_ms["twist"]}
    return r


def format_table(records: list[dict]) -> str:
    lines = [f"{'case':<22}{'ok':>4}{'kernel geomean':>16}{'vs eager':>10}{'vs compile':>12}  slower kernels"]
    for r in records:
        lines.append(f"{r['case']:<22}{'yes' if r['ok'] else 'NO':>4}{r['geomean_speedup']:>15.2f}x"
                     f"{r['end_to_end_speedup']['vs_eager']:>9.2f}x{r['end_to_end_speedup']['vs_compile']:>11.2f}x"
                     f"  {', '.join(r['slower_than_pytorch']) or '-'}")
    return "\n".join(lines)


# --- on the GPU ----------------------------------------------------------------------------------------------

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


def kernel_timings(model, kernels: gemma.TwistKernels, shape: gemma.LayerShape, layer) -> dict[str, dict]:
    """Each twist kernel of `layer` against PyTorch's code for the same op, on the same random inputs."""
    import torch
    import torch.nn.functional as F
    from transformers.models.gemma4 import modeling_gemma4 as mg
    dims, t, attn, mlp = gemma.dims_of(model.config), layer._twist, layer.self_attn, layer.mlp
    kv, d, values_from_keys = dims.attention(t.kind)
    v_first = dims.heads + (0 if values_from_keys else kv)
    b, s, keys, rows = shape.batch, shape.tokens, shape.key_count, shape.rows
    randn = lambda *size: torch.randn(*size, device="cuda", dtype=torch.bfloat16)  # noqa: E731
    h, o = randn(rows, dims.hidden), randn(rows, dims.hidden)
    projected = randn(b, s, dims.qkv_columns(t.kind) // d, d)
    cos, sin = randn(b, s, d), randn(b, s, d)
    q, k, v = randn(b, dims.heads, s, d), randn(b, kv, keys, d), randn(b, kv, keys, d)
    g, a = randn(rows, dims.intermediate), randn(rows, dims.heads * d)
    run = lambda kernel, **x: (lambda: kernels.call(t.kind, shape, kernel, **x))  # noqa: E731
    heads = lambda x, first, count: x[:, :, first:first + count, :]  # noqa: E731
    window = attn.sliding_window
    mask = None
    if shape.phase == "prefill" or window:
        qi = torch.arange(keys - s, keys, device="cuda")[:, None]
        kj = torch.arange(keys, device="cuda")[None, :]
        mask = (kj <= qi) & ((qi - kj < window) if window else True)
    pairs = {
        "input_norm": (run("input_norm", x=h, w=layer.input_layernorm.weight), lambda: layer.input_layernorm(h)),
        "qkv": (run("qkv", A=h, B=t.qkv),
                lambda: [p(h) for p in (attn.q_proj, attn.k_proj, attn.v_proj) if p is not None]),
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
        "post_attention_norm": (run("post_attention_norm", x=o, residual=h, w_post=layer.post_attention_layernorm.weight,
                                    w_next=layer.pre_feedforward_layernorm.weight),
                                lambda: layer.pre_feedforward_layernorm(h + layer.post_attention_layernorm(o))),
        "gate_up": (run("gate_up", x=h, w=t.gate_up), lambda: mlp.act_fn(mlp.gate_proj(h)) * mlp.up_proj(h)),
        "down_proj": (run("down_proj", A=g, B=t.down), lambda: mlp.down_proj(g)),
        "post_feedforward_norm": (run("post_feedforward_norm", x=o, residual=h,
                                      w_post=layer.post_feedforward_layernorm.weight, w_next=t.next_norm.weight),
                                  lambda: t.next_norm(h + layer.post_feedforward_layernorm(o))),
    }
    return {name: {"twist_ms": bench_ms(ours), "pytorch_ms": bench_ms(theirs)} for name, (ours, theirs) in pairs.items()}


def measure_case(reference, twisted, kernels, shape: gemma.LayerShape, record: dict) -> dict:
    import torch
    from transformers import DynamicCache
    config = reference.config
    generator = torch.Generator(device="cuda").manual_seed(0)
    prompt = shape.tokens if shape.phase == "prefill" else shape.keys - 1
    ids = torch.randint(0, config.vocab_size, (shape.batch, prompt), device="cuda", generator=generator)
    step = torch.randint(0, config.vocab_size, (shape.batch, 1), device="cuda", generator=generator)
    compiled = torch.compile(reference)
    prefilled = None
    if shape.phase == "decode":
        # The reference model fills the cache, so that every model decodes the same step against the same keys
        # (and the twist model needs no kernels exported for the prompt's length).
        prefilled = DynamicCache(config=config)
        with torch.no_grad():
            reference.model(input_ids=ids, past_key_values=prefilled, use_cache=True)

    def forward(model):
        # The LM head on the last token only: [B, S, 262144] logits would outweigh the layers measured.
        last = {"logits_to_keep": 1} if hasattr(model, "lm_head") else {}
        if shape.phase == "prefill":
            return lambda: model(input_ids=ids, use_cache=False, **last), None
        cache = copy.deepcopy(prefilled)
        return (lambda: model(input_ids=step, past_key_values=cache, use_cache=True, **last),
                lambda: cache.crop(prompt))

    with torch.no_grad():
        outputs = {}
        for which, model in (("reference", reference), ("twist", twisted)):
            fn, before = forward(model)
            if before:
                before()
            outputs[which] = fn()
        errors = {"logits": relative_l2(outputs["twist"].logits, outputs["reference"].logits)}
        hidden = {}
        for which, model in (("reference", reference), ("twist", twisted)):
            fn, before = forward(model.model)
            if before:
                before()
            hidden[which] = fn().last_hidden_state
        errors["hidden_states"] = relative_l2(hidden["twist"], hidden["reference"])
        forward_ms = {}
        for which, model in (("eager", reference), ("compile", compiled), ("twist", twisted)):
            fn, before = forward(model)
            forward_ms[which] = bench_ms(fn, before)
        layer_ms, kernels_ms = {}, {}
        for layer in twisted.model.layers:
            kind = layer._twist.kind
            if kind not in kernels_ms:
                seen = gemma.layer_shape(gemma.dims_of(twisted.config), kind, shape)
                kernels_ms[kind] = kernel_timings(twisted, kernels, seen, layer)
                layer_ms[kind] = layer_kernels_ms(kernels_ms[kind])
    return finish_record(record, errors, kernels_ms, layer_ms, forward_ms)


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--twist", default=str(REPO / "build" / "release" / "apps" / "twist" / "twist"))
    p.add_argument("--manifests", default=str(REPO / ".gpu" / "gemma_manifests"))
    p.add_argument("--out", default=str(REPO / "bench" / "results" / "gemma.json"))
    p.add_argument("--layers", type=int, default=2, help="decoder layers (sliding ones, then a full one)")
    p.add_argument("--quick", action="store_true", help="one prefill and one decode case")
    p.add_argument("--export-only", action="store_true", help="export the kernels (no GPU, no torch) and stop")
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
    shapes = cases(args.quick)
    if args.export_only:
        export_all(args.twist, args.manifests, shapes)
        return 0
    import torch
    from transformers import Gemma4ForCausalLM, Gemma4TextConfig
    torch.manual_seed(0)
    config = Gemma4TextConfig(**gemma.config_kwargs("31b", layers=args.layers))
    reference = Gemma4ForCausalLM(config).to("cuda", torch.bfloat16).eval()
    twisted = copy.deepcopy(reference)
    records, date = [], datetime.date.today().isoformat()
    gpu = torch.cuda.get_device_name()
    for shape in shapes:
        kernels = gemma.TwistKernels(case_directory(args.manifests, shape), "31b", [shape])
        model = copy.deepcopy(twisted)
        gemma.swap_decoder_layers(model, kernels)
        records.append(measure_case(reference, model, kernels, shape, new_record(shape, gpu, date, args.layers)))
        print(format_table(records[-1:]), flush=True)
    Path(args.out).write_text(json.dumps(records, indent=1) + "\n")
    print(format_table(records))
    return 0 if all(r["ok"] for r in records) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
