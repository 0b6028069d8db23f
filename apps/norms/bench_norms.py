"""Row-wise ops benchmark: twist's exported softmax, LayerNorm, RMSNorm, residual add + RMSNorm and SwiGLU
kernels against PyTorch eager and torch.compile of the same op, in GB/s, and against the device-to-device copy
bandwidth measured in the same process.

    python3 apps/norms/bench_norms.py MANIFEST_DIR [--out bench/results/norms.json] [--match REGEX] [--seed 0]
                                                   [--repeats 5]

For each problem (op, dtype, rows, hidden) of the manifests that `twist export norms` wrote
(bench/export_norms_suite.sh): fresh inputs ~ N(0, 1) in the manifest's dtype (weights and biases too); the
outputs of each twist kernel of the problem (variants are manifests of other labels; poisoned with NaN first)
are checked against the op computed by PyTorch in fp32 from the same inputs, by relative L2 error. Then the
kernels, the op as a PyTorch user writes it (pytorch_op) eager and under torch.compile, and torch's copy_ of a
uint8 buffer of the same bytes (read + write) are timed in interleaved rounds (TIMING): each round times each
of them in turn, so that the GPU's drift touches all alike. Every figure is the median over the rounds, and
every ratio (x torch.compile, of copy) the median of the round-by-round ratios with its spread [min-max];
a spread that reaches across 1.0 is printed 'tie'. GB/s counts each input read once and each output written
once (the manifest's "bytes" note, which apps/norms/norms.cpp computes). Prints a table and writes the records
as JSON; exits 1 if any check failed.

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


# Each problem is timed in `repeats` rounds; a round times every kernel of it (twist's variants, PyTorch eager,
# torch.compile, the copy) one after another with triton.testing.do_bench, so that a drift of the GPU's clock
# or temperature touches all of them alike. Medians and the spread (min, max) over the rounds are reported.
TIMING = {"method": "triton.testing.do_bench, interleaved rounds", "repeats": 5, "warmup_ms": 5, "rep_ms": 25,
          "return_mode": "median"}


def do_bench(fn) -> float:
    import triton.testing
    return triton.testing.do_bench(fn, warmup=TIMING["warmup_ms"], rep=TIMING["rep_ms"],
                                   return_mode=TIMING["return_mode"])


def interleaved(timers: dict, repeats: int, bench=do_bench) -> dict[str, list[float]]:
    """Milliseconds of each of `timers` (name -> function), `repeats` rounds of each in turn."""
    times = {name: [] for name in timers}
    for _ in range(repeats):
        for name, fn in timers.items():
            times[name].append(bench(fn))
    return times


def median(values: list[float]) -> float:
    v = sorted(values)
    mid = len(v) // 2
    return v[mid] if len(v) % 2 else (v[mid - 1] + v[mid]) / 2


def spread(values: list[float]) -> dict:
    return {"median": median(values), "min": min(values), "max": max(values)}


def ratio_spread(numerators: list[float], denominators: list[float]) -> dict:
    """Round by round ratios (the rounds of both timed alike), their median and spread, and a verdict: 'tie'
    when the spread reaches across 1.0, so that a ratio within the noise is said to be one."""
    ratios = [n / d for n, d in zip(numerators, denominators)]
    r = spread(ratios)
    r["verdict"] = "tie" if r["min"] <= 1.0 <= r["max"] else ("faster" if r["min"] > 1.0 else "slower")
    return r


def new_record(p: dict, manifest: Manifest, gpu: str, date: str) -> dict:
    return {**p, "label": manifest.label, "gpu": gpu, "date": date, "status": "FAIL", "failure": None,
            "tolerance": TOLERANCES[p["dtype"]]}


def finish_record(r: dict, ours: list[float], eager: list[float], compiled: list[float], copy: list[float]) -> dict:
    """`r` with the timings of the rounds (milliseconds, round by round; `copy` for the same bytes)."""
    nbytes = r["bytes"]
    r.update(status="PASS", repeats=len(ours), ours_ms=spread(ours), eager_ms=spread(eager),
             compiled_ms=spread(compiled), copy_ms=spread(copy))
    r.update(ours_gbps=gbps(nbytes, r["ours_ms"]["median"]), eager_gbps=gbps(nbytes, r["eager_ms"]["median"]),
             compiled_gbps=gbps(nbytes, r["compiled_ms"]["median"]), copy_gbps=gbps(nbytes, r["copy_ms"]["median"]),
             vs_eager=ratio_spread(eager, ours), vs_compiled=ratio_spread(compiled, ours),
             fraction_of_copy=ratio_spread(copy, ours))
    return r


def format_ratio(r: dict) -> str:
    text = f"{r['median']:.2f} [{r['min']:.2f}-{r['max']:.2f}]"
    return text + (" tie" if r["verdict"] == "tie" else "")


def format_table(records: list[dict]) -> str:
    """One line per kernel; ratios as the median over the rounds [min-max], 'tie' where that spans 1.0."""
    head = (f"{'label':<40} {'twist GB/s':>10} {'compile':>8} {'x compile [spread]':>22} "
            f"{'of copy [spread]':>20}")
    lines = [head, "-" * len(head)]
    for r in records:
        if r["status"] != "PASS":
            lines.append(f"{r['label']:<40} FAIL: {r['failure']}")
            continue
        lines.append(f"{r['label']:<40} {r['ours_gbps']:>10.0f} {r['compiled_gbps']:>8.0f} "
                     f"{format_ratio(r['vs_compiled']):>22} {format_ratio(r['fraction_of_copy']):>20}")
    return "\n".join(lines)


def problems(manifests: list[Manifest]) -> list[list[Manifest]]:
    """The manifests grouped by problem (op, dtype, rows, hidden): a kernel and its variants, in order."""
    groups: dict[tuple, list[Manifest]] = {}
    for m in manifests:
        p = problem(m)
        groups.setdefault((p["op"], p["dtype"], p["rows"], p["hidden"]), []).append(m)
    return list(groups.values())


def measure(group: list[Manifest], generator, gpu: str, date: str) -> list[dict]:
    """Checks each kernel of one problem against PyTorch in fp32, then times them, PyTorch eager,
    torch.compile and the copy of the same bytes in interleaved rounds."""
    import contextlib
    import torch
    p = problem(group[0])
    dt = torch_dtype(p["dtype"])
    inputs = {b.name: torch.randn(b.shape, generator=generator, device="cuda", dtype=dt)
              for b in group[0].with_role("input")}
    want = reference(p["op"], inputs)
    records, timers = [], {}
    with contextlib.ExitStack() as stack:
        for manifest in group:
            r = new_record(p, manifest, gpu, date)
            records.append(r)
            try:
                program = stack.enter_context(Program(manifest))
                for name, t in inputs.items():
                    program.tensors[name].copy_(t)
                got = program.run()
                r["rel_l2_error"] = max(bench_gemm.relative_l2_error(got[name], w) for name, w in want.items())
                if not r["rel_l2_error"] <= r["tolerance"]:
                    r["failure"] = (f"relative L2 error {r['rel_l2_error']:.3e} over the tolerance "
                                    f"{r['tolerance']:.0e}")
                    continue
                timers[manifest.label] = program.launch
            except (CudaError, OutputNotWritten) as e:
                r["failure"] = str(e)
                if isinstance(e, CudaError) and e.sticky:
                    raise
        if not timers:
            return records
        pytorch_rel_l2_error = max(bench_gemm.relative_l2_error(g, want[name])
                                   for name, g in pytorch_op(p["op"], inputs).items())
        # A fresh compilation per problem: recompiling one function for every shape would hit dynamo's
        # recompile limit and fall back to eager without saying so.
        torch._dynamo.reset()
        compiled = torch.compile(pytorch_op)
        compiled(p["op"], inputs)  # compiles outside the timing
        src = torch.empty(p["bytes"] // 2, dtype=torch.uint8, device="cuda")
        dst = torch.empty_like(src)
        timers.update({"eager": lambda: pytorch_op(p["op"], inputs), "compile": lambda: compiled(p["op"], inputs),
                       "copy": lambda: dst.copy_(src)})
        times = interleaved(timers, TIMING["repeats"])
    for r in records:
        if r["label"] in times:
            r["pytorch_rel_l2_error"] = pytorch_rel_l2_error
            finish_record(r, times[r["label"]], times["eager"], times["compile"], times["copy"])
    return records


def parse_args(argv: list[str]) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("manifests")
    ap.add_argument("--out", default=str(REPO / "bench" / "results" / "norms.json"))
    ap.add_argument("--match", default="", help="only manifests whose label matches this regular expression")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--repeats", type=int, default=TIMING["repeats"], help="interleaved timing rounds per problem")
    return ap.parse_args(argv)


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    TIMING["repeats"] = args.repeats
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
    records = []
    try:
        for group in problems(manifests):
            for r in measure(group, generator, gpu, date):
                records.append(r)
                print(f"  {r['label']}: " + (f"{r['ours_gbps']:.0f} GB/s, {format_ratio(r['fraction_of_copy'])} of "
                                             f"copy, {format_ratio(r['vs_compiled'])}x torch.compile"
                                             if r["status"] == "PASS" else f"FAIL: {r['failure']}"), flush=True)
    finally:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps({"timing": TIMING, "records": records}, indent=1) + "\n")
        print(format_table(records))
        print(f"results: {args.out}")
    return 1 if any(r["status"] != "PASS" for r in records) else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
