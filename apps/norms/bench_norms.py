"""Row-wise ops benchmark: twist's exported softmax, LayerNorm, RMSNorm, residual add + RMSNorm and SwiGLU
kernels against PyTorch eager and torch.compile of the same op, in GB/s, and against the device-to-device copy
bandwidth measured in the same process.

    python3 apps/norms/bench_norms.py MANIFEST_DIR [--out bench/results/norms.json] [--match REGEX] [--seed 0]

For each manifest that `twist export norms` wrote (bench/export_norms_suite.sh): fresh inputs ~ N(0, 1) in the
manifest's dtype (weights and biases too); twist's outputs (poisoned with NaN first) are checked against the op
computed by PyTorch in fp32 from the same inputs, by relative L2 error; then twist, and the op as a PyTorch user
writes it (pytorch_op) eager and under torch.compile, are timed the same way (triton.testing.do_bench medians). GB/s counts each input read once and each output
written once (the manifest's "bytes" note, which apps/norms/norms.cpp computes); the copy bandwidth is that of
torch's copy_ of a buffer of the same size (read + write). PyTorch's timings are taken once per problem (op,
dtype, shape) and shared by the manifests of other labels for it (variants of one kernel). Prints a table and writes the records as JSON;
exits 1 if any check failed.

Everything but measure() and main's GPU setup runs without torch (apps/norms/test_bench_norms.py).
"""
from __future__ import annotations

import argparse
import datetime
import json
import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "gemm"))  # the GEMM benchmark's helpers

import bench_gemm  # noqa: E402
from twist.runtime import (CudaError, Manifest, ManifestError, OutputNotWritten, Program,  # noqa: E402
                           load_manifest, torch_dtype)  # (on the path bench_gemm set)

REPO = Path(__file__).resolve().parents[2]
OPS = ("softmax", "layernorm", "rmsnorm", "add_rmsnorm", "swiglu")
EPS = 1e-6  # as `twist export norms` builds them
# Relative L2 error allowed against the fp32 computation: a few units of the output's rounding.
TOLERANCES = {"f16": 2e-3, "bf16": 1.6e-2}


def norm_manifests(directory: str | Path) -> list[Manifest]:
    """Every manifest in `directory` of one of OPS, in order of op, dtype and shape."""
    directory = Path(directory)
    if not directory.is_dir():
        raise ManifestError(f"{directory} is not a directory; export the manifests first (bench/export_norms_suite.sh)")
    manifests = [m for m in (load_manifest(p) for p in sorted(directory.glob("*.json"))) if m.notes.get("op") in OPS]
    return sorted(manifests, key=lambda m: (m.notes["op"], m.notes["dtype"], int(m.notes["rows"]),
                                            int(m.notes["hidden"])))


def problem(manifest: Manifest) -> dict:
    """What a manifest computes, from its notes, checked against its buffers."""
    notes = manifest.notes
    rows, hidden, dtype, op = int(notes["rows"]), int(notes["hidden"]), notes["dtype"], notes["op"]
    x = manifest.buffer("x")
    want_cols = 2 * hidden if op == "swiglu" else hidden
    if list(x.shape) != [rows, want_cols] or x.dtype != dtype:
        raise ValueError(f"{manifest.path}: input x is {x.dtype}{x.shape}, but the notes say {dtype}[{rows}, "
                         f"{want_cols}]")
    return {"op": op, "dtype": dtype, "rows": rows, "hidden": hidden, "bytes": int(notes["bytes"])}


def gbps(nbytes: int, ms: float) -> float:
    return nbytes / ms / 1e6


def reference(op: str, inputs: dict):
    """The op in PyTorch: eager when called plainly, and what torch.compile compiles. Arithmetic in fp32."""
    import torch
    x = inputs["x"].float()
    hidden = x.shape[-1] // 2 if op == "swiglu" else x.shape[-1]
    dtype = inputs["x"].dtype
    if op == "softmax":
        return {"softmax": torch.softmax(x, dim=-1).to(dtype)}
    if op == "layernorm":
        y = torch.nn.functional.layer_norm(x, (hidden,), inputs["w"].float(), inputs["b"].float(), EPS)
        return {"layernorm": y.to(dtype)}
    if op == "rmsnorm":
        y = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + EPS) * inputs["w"].float()
        return {"rmsnorm": y.to(dtype)}
    if op == "add_rmsnorm":
        h = (x + inputs["residual"].float()).to(dtype)
        hf = h.float()
        y = hf * torch.rsqrt(hf.pow(2).mean(-1, keepdim=True) + EPS) * inputs["w"].float()
        return {"add_rmsnorm.0": h, "add_rmsnorm.1": y.to(dtype)}
    if op == "swiglu":
        gate, up = x[:, :hidden], x[:, hidden:]
        return {"swiglu": (torch.nn.functional.silu(gate) * up).to(dtype)}
    raise ValueError(f"unknown op {op}")


def rms_norm(x, w):
    """torch.nn.functional.rms_norm (PyTorch 2.4 on), or the composite LLM code wrote before it."""
    import torch
    if hasattr(torch.nn.functional, "rms_norm"):
        return torch.nn.functional.rms_norm(x, (x.shape[-1],), w, EPS)
    xf = x.float()
    return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + EPS)).to(x.dtype) * w


def pytorch_op(op: str, inputs: dict):
    """The op as a PyTorch user writes it, timed eager and under torch.compile: the library's fused kernels where
    there are (softmax, layer_norm and rms_norm compute in fp32 inside), the usual composite otherwise."""
    import torch
    f = torch.nn.functional
    x = inputs["x"]
    hidden = x.shape[-1] // 2 if op == "swiglu" else x.shape[-1]
    if op == "softmax":
        return {"softmax": torch.softmax(x, dim=-1)}
    if op == "layernorm":
        return {"layernorm": f.layer_norm(x, (hidden,), inputs["w"], inputs["b"], EPS)}
    if op == "rmsnorm":
        return {"rmsnorm": rms_norm(x, inputs["w"])}
    if op == "add_rmsnorm":
        h = x + inputs["residual"]
        return {"add_rmsnorm.0": h, "add_rmsnorm.1": rms_norm(h, inputs["w"])}
    if op == "swiglu":
        return {"swiglu": f.silu(x[:, :hidden]) * x[:, hidden:]}
    raise ValueError(f"unknown op {op}")


def new_record(p: dict, manifest: Manifest, gpu: str, date: str) -> dict:
    return {**p, "label": manifest.label, "gpu": gpu, "date": date, "status": "FAIL", "failure": None,
            "tolerance": TOLERANCES[p["dtype"]]}


def finish_record(r: dict, ours_ms: float, eager_ms: float, compiled_ms: float, copy_gbps: float) -> dict:
    r.update(status="PASS", ours_ms=ours_ms, eager_ms=eager_ms, compiled_ms=compiled_ms,
             ours_gbps=gbps(r["bytes"], ours_ms), eager_gbps=gbps(r["bytes"], eager_ms),
             compiled_gbps=gbps(r["bytes"], compiled_ms), copy_gbps=copy_gbps,
             vs_eager=eager_ms / ours_ms, vs_compiled=compiled_ms / ours_ms,
             fraction_of_copy=gbps(r["bytes"], ours_ms) / copy_gbps)
    return r


def format_table(records: list[dict]) -> str:
    head = (f"{'op':<12} {'dtype':<5} {'rows x hidden':>14} {'twist GB/s':>10} {'eager':>8} {'compile':>8} "
            f"{'x eager':>8} {'x compile':>9} {'of copy':>8}")
    lines = [head, "-" * len(head)]
    for r in records:
        shape = f"{r['rows']}x{r['hidden']}"
        if r["status"] != "PASS":
            lines.append(f"{r['op']:<12} {r['dtype']:<5} {shape:>14} FAIL: {r['failure']}")
            continue
        lines.append(f"{r['op']:<12} {r['dtype']:<5} {shape:>14} {r['ours_gbps']:>10.0f} {r['eager_gbps']:>8.0f} "
                     f"{r['compiled_gbps']:>8.0f} {r['vs_eager']:>8.2f} {r['vs_compiled']:>9.2f} "
                     f"{r['fraction_of_copy']:>7.0%}")
    return "\n".join(lines)


def measure(manifest: Manifest, generator, gpu: str, date: str, copy_cache: dict, pytorch_cache: dict) -> dict:
    import torch
    p = problem(manifest)
    r = new_record(p, manifest, gpu, date)
    dt = torch_dtype(p["dtype"])
    inputs = {b.name: torch.randn(b.shape, generator=generator, device="cuda", dtype=dt)
              for b in manifest.with_role("input")}
    want = reference(p["op"], inputs)
    try:
        with Program(manifest) as program:
            for name, t in inputs.items():
                program.tensors[name].copy_(t)
            got = program.run()
            r["rel_l2_error"] = max(bench_gemm.relative_l2_error(got[name], w) for name, w in want.items())
            if not r["rel_l2_error"] <= r["tolerance"]:
                r["failure"] = f"relative L2 error {r['rel_l2_error']:.3e} over the tolerance {r['tolerance']:.0e}"
                return r
            ours_ms = bench_gemm.do_bench(program.launch)
    except (CudaError, OutputNotWritten) as e:
        r["failure"] = str(e)
        if isinstance(e, CudaError) and e.sticky:
            raise
        return r
    key = (p["op"], p["dtype"], p["rows"], p["hidden"])
    if key not in pytorch_cache:  # measured once per problem, shared by its variants (kernels of other labels)
        pytorch_rel_l2_error = max(bench_gemm.relative_l2_error(g, want[name])
                                   for name, g in pytorch_op(p["op"], inputs).items())
        eager_ms = bench_gemm.do_bench(lambda: pytorch_op(p["op"], inputs))
        # A fresh compilation per problem: recompiling one function for every shape would hit dynamo's
        # recompile limit and fall back to eager without saying so.
        torch._dynamo.reset()
        fn = torch.compile(pytorch_op)
        fn(p["op"], inputs)  # compiles outside the timing
        pytorch_cache[key] = (pytorch_rel_l2_error, eager_ms, bench_gemm.do_bench(lambda: fn(p["op"], inputs)))
    r["pytorch_rel_l2_error"], eager_ms, compiled_ms = pytorch_cache[key]
    half = p["bytes"] // 2
    if half not in copy_cache:
        src = torch.empty(half, dtype=torch.uint8, device="cuda")
        dst = torch.empty_like(src)
        copy_cache[half] = gbps(2 * half, bench_gemm.do_bench(lambda: dst.copy_(src)))
    return finish_record(r, ours_ms, eager_ms, compiled_ms, copy_cache[half])


def parse_args(argv: list[str]) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("manifests")
    ap.add_argument("--out", default=str(REPO / "bench" / "results" / "norms.json"))
    ap.add_argument("--match", default="", help="only manifests whose label matches this regular expression")
    ap.add_argument("--seed", type=int, default=0)
    return ap.parse_args(argv)


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    manifests = [m for m in norm_manifests(args.manifests) if re.search(args.match, m.label)]
    if not manifests:
        print(f"bench_norms: no norm manifests in {args.manifests} (bench/export_norms_suite.sh writes them)",
              file=sys.stderr)
        return 2
    import torch
    if not torch.cuda.is_available():
        print("bench_norms: no CUDA device visible to PyTorch; run this on the GPU machine", file=sys.stderr)
        return 2
    gpu = torch.cuda.get_device_name()
    date = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
    generator = torch.Generator(device="cuda").manual_seed(args.seed)
    records, copy_cache, pytorch_cache = [], {}, {}
    try:
        for m in manifests:
            records.append(measure(m, generator, gpu, date, copy_cache, pytorch_cache))
            r = records[-1]
            print(f"  {m.label}: " + (f"{r['ours_gbps']:.0f} GB/s ({r['fraction_of_copy']:.0%} of copy), "
                                      f"{r['vs_compiled']:.2f}x torch.compile" if r["status"] == "PASS"
                                      else f"FAIL: {r['failure']}"), flush=True)
    finally:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps({"records": records}, indent=1) + "\n")
        print(format_table(records))
        print(f"results: {args.out}")
    return 1 if any(r["status"] != "PASS" for r in records) else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
