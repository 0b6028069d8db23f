"""GEMM benchmark: twist's exported kernels against torch.matmul (cuBLAS), in one process, on the same inputs,
timed the same way (triton.testing.do_bench medians, as ../shared/device/baseline.py measured the ceilings).

    python3 apps/gemm/bench_gemm.py MANIFEST_DIR [--out bench/results/gemm.json] [--match REGEX] [--seed 0]

For each (shape, dtype) among the manifests with "op": "gemm": fresh A, B ~ N(0, 1) in the input dtype; each
schedule's output (poisoned with NaN first) is checked against torch.matmul of the same inputs in fp32 by
relative L2 error, then timed, then checked again on what the timed launches left; cuBLAS is timed once per
case. Prints a table and writes a JSON record per schedule; exits 1 if any check failed.

Everything but measure_case and main's GPU setup runs without torch (apps/gemm/test_bench_support.py).
"""
from __future__ import annotations

import argparse
import datetime
import json
import math
import re
import shlex
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "python"))  # the twist package, for its runtime
from twist.runtime import (CudaError, Manifest, ManifestError, OutputNotWritten, Program,  # noqa: E402
                           find_manifests, torch_dtype)

REPO = Path(__file__).resolve().parents[2]
# Relative L2 error allowed against the fp32 product, by output dtype: a few units of the output's rounding
# (2^-11 for f16, 2^-8 for bf16) on top of the accumulation's, and for f32 the accumulation order alone.
TOLERANCES = {"f16": 2e-3, "bf16": 1e-2, "f32": 1e-4}
TIMING = {"method": "triton.testing.do_bench", "warmup_ms": 25, "rep_ms": 100, "return_mode": "median"}
# Problems with M at most this are memory-bound (the time is reading B once), so they are also judged by
# bandwidth: the bytes they must move (A and B read once, out written once) per second, against the HBM read
# bandwidth measured in the same run (measure_hbm_read_bandwidth).
MEMORY_BOUND_M = 64
ELEMENT_BYTES = {"f16": 2, "bf16": 2, "f32": 4}
# A read-only kernel over a tensor far larger than L2: torch.sum of HBM_PROBE_BYTES of f32.
HBM_PROBE_BYTES = 4 << 30


@dataclass(frozen=True)
class GemmProblem:
    m: int
    n: int
    k: int
    dtype: str   # of A and B
    output: str  # of out

    @property
    def shape(self) -> str:
        return f"{self.m}x{self.n}x{self.k}"

    def tflops(self, ms: float) -> float:
        return 2 * self.m * self.n * self.k / ms / 1e9

    @property
    def memory_bound(self) -> bool:
        return self.m <= MEMORY_BOUND_M

    @property
    def bytes_moved(self) -> int:
        """The least any GEMM kernel must move: A and B read once, out written once."""
        return ((self.m * self.k + self.k * self.n) * ELEMENT_BYTES[self.dtype]
                + self.m * self.n * ELEMENT_BYTES[self.output])

    def gbps(self, ms: float) -> float:
        return self.bytes_moved / ms / 1e6


@dataclass
class GemmCase:
    problem: GemmProblem
    manifests: list[Manifest] = field(default_factory=list)


def gemm_problem(manifest: Manifest) -> GemmProblem:
    """The GEMM a manifest computes, from its "shape" note, checked against its buffers A[M, K], B[K, N] and
    out[M, N] (the names apps/gemm/gemm.cpp gives them)."""
    where = str(manifest.path)
    shape = manifest.notes.get("shape", "")
    if not re.fullmatch(r"\d+x\d+x\d+", shape):
        raise ManifestError(f"{where}: the \"shape\" note is '{shape}', expected MxNxK; export it with "
                            "twist export gemm")
    m, n, k = (int(e) for e in shape.split("x"))
    a, b, out = manifest.buffer("A"), manifest.buffer("B"), manifest.buffer("out")
    for buffer, role, want in ((a, "input", (m, k)), (b, "input", (k, n)), (out, "output", (m, n))):
        if buffer.shape != want or buffer.role != role:
            raise ManifestError(f"{where}: buffer '{buffer.name}' is {buffer.role} {list(buffer.shape)}, but a "
                                f"{shape} GEMM needs {role} {list(want)}")
    if a.dtype != b.dtype:
        raise ManifestError(f"{where}: A is {a.dtype} but B is {b.dtype}; the benchmark feeds both one dtype")
    if out.dtype not in TOLERANCES:
        raise ManifestError(f"{where}: output dtype {out.dtype} has no tolerance (known: {', '.join(TOLERANCES)})")
    return GemmProblem(m, n, k, a.dtype, out.dtype)


def gemm_cases(manifests: list[Manifest]) -> list[GemmCase]:
    """Manifests grouped by problem; problems by dtype, then M, N, K; schedules in the order given."""
    cases: dict[GemmProblem, GemmCase] = {}
    for manifest in manifests:
        problem = gemm_problem(manifest)
        cases.setdefault(problem, GemmCase(problem)).manifests.append(manifest)
    return sorted(cases.values(), key=lambda c: (c.problem.dtype, c.problem.m, c.problem.n, c.problem.k))


def kernel_resources(manifest: Manifest) -> list[dict]:
    return [{"name": k.name, "registers": k.registers, "spill_bytes": k.spill_bytes} for k in manifest.kernels]


def new_record(problem: GemmProblem, manifest: Manifest, gpu: str, date: str) -> dict:
    return {
        "label": manifest.label, "shape": problem.shape, "m": problem.m, "n": problem.n, "k": problem.k,
        "dtype": problem.dtype, "output_dtype": problem.output,
        "schedule": manifest.notes.get("schedule", manifest.label),
        "accumulation": manifest.notes.get("accumulation", "f32"), "kernels": kernel_resources(manifest),
        "tolerance": TOLERANCES[problem.output], "rel_l2_error": None, "rel_l2_error_after_timing": None,
        "status": "FAIL", "failure": None, "ours_ms": None, "ours_tflops": None, "cublas_ms": None,
        "cublas_tflops": None, "cublas_rel_l2_error": None, "ratio": None, "best": False, "gpu": gpu, "date": date,
        "chosen_by": manifest.notes.get("chosen_by", "flags"), "memory_bound": problem.memory_bound,
        "bytes_moved": problem.bytes_moved, "ours_gbps": None, "cublas_gbps": None, "ours_hbm_fraction": None,
        "modeled_us": modeled_us(manifest),
    }


def modeled_us(manifest: Manifest) -> float | None:
    """What the schedule rule's cost model expects of the schedule (apps/gemm/gemm_rule.h, hopper_plan_of), where
    twist export wrote it: the measurement beside it is what the model is refitted to."""
    note = manifest.notes.get("modeled_us")
    return None if note is None else float(note)


def add_bandwidth(r: dict, problem: GemmProblem, hbm_read_gbps: float | None) -> None:
    """For a memory-bound problem's timed record: its bandwidth and cuBLAS's, and ours as a fraction of HBM's."""
    if not problem.memory_bound or r["ours_ms"] is None:
        return
    r["ours_gbps"] = problem.gbps(r["ours_ms"])
    r["cublas_gbps"] = problem.gbps(r["cublas_ms"])
    if hbm_read_gbps:
        r["ours_hbm_fraction"] = r["ours_gbps"] / hbm_read_gbps


def mark_best(records: list[dict]) -> None:
    """Marks, per (shape, dtype), the fastest schedule that passed; a failed schedule is never best."""
    best: dict[tuple, dict] = {}
    for r in records:
        r["best"] = False
        if r["status"] == "PASS" and r["ours_tflops"] is not None:
            key = (r["shape"], r["dtype"])
            if key not in best or r["ours_tflops"] > best[key]["ours_tflops"]:
                best[key] = r
    for r in best.values():
        r["best"] = True


def geometric_mean(values: list[float]) -> float | None:
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else None


def geomean_ratios(records: list[dict]) -> dict:
    """Geometric means of ours / cuBLAS over the best schedule of each (shape, dtype): per dtype (None where none
    passed) and overall."""
    best = [r for r in records if r["best"]]
    dtypes = sorted({r["dtype"] for r in records})
    means = {d: geometric_mean([r["ratio"] for r in best if r["dtype"] == d]) for d in dtypes}
    means["all"] = geometric_mean([r["ratio"] for r in best])
    return means


def _number(value: float | None, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def format_table(records: list[dict]) -> str:
    header = ("shape", "dtype", "schedule", "regs", "spill", "rel. L2 err", "ours us", "modeled us", "ours TFLOP/s",
              "cuBLAS TFLOP/s", "ratio", "ours GB/s (of HBM)", "cuBLAS GB/s", "")
    rows = [header]
    for r in records:
        regs = "/".join(str(k["registers"]) for k in r["kernels"])
        spill = "/".join(str(k["spill_bytes"]) for k in r["kernels"])
        mark = r["status"] + (" best" if r["best"] else "") + (" (rule)" if r.get("chosen_by") == "rule" else "")
        bandwidth = _number(r.get("ours_gbps"), ".0f")
        if r.get("ours_hbm_fraction") is not None:
            bandwidth += f" ({r['ours_hbm_fraction']:.0%})"
        ours_us = None if r.get("ours_ms") is None else r["ours_ms"] * 1e3
        rows.append((r["shape"], r["dtype"], r["schedule"], regs, spill, _number(r["rel_l2_error"], ".2e"),
                     _number(ours_us, ".1f"), _number(r.get("modeled_us"), ".1f"), _number(r["ours_tflops"], ".1f"), _number(r["cublas_tflops"], ".1f"), _number(r["ratio"], ".3f"),
                     bandwidth, _number(r.get("cublas_gbps"), ".0f"), mark))
    widths = [max(len(row[c]) for row in rows) for c in range(len(header))]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip() for row in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    for r in records:
        if r["failure"]:
            lines.append(f"FAIL {r['label']}: {r['failure']}")
    return "\n".join(lines)


def format_summary(records: list[dict], gpu: str, date: str, command: str, hbm_read_gbps: float | None = None) -> str:
    means = geomean_ratios(records)
    parts = [f"{d} {_number(v, '.3f')}" for d, v in means.items() if d != "all"]
    failed = sum(r["status"] != "PASS" for r in records)
    return "\n".join([
        "geometric mean of ours / cuBLAS, over the best passing schedule per shape and dtype: "
        + ", ".join(parts + [f"all {_number(means['all'], '.3f')}"]),
        f"{len(records)} schedule(s), {failed} failed" + (" (the exit status is 1)" if failed else ""),
        f"HBM read bandwidth measured in this run: {_number(hbm_read_gbps, '.0f')} GB/s (GB/s columns: M <= "
        f"{MEMORY_BOUND_M}, A and B read once and out written once)",
        f"GPU: {gpu}", f"date: {date}", f"command: {command}",
    ])


def results_json(records: list[dict], environment: dict, aborted: str | None) -> dict:
    return {"benchmark": "gemm", **environment, "timing": TIMING, "tolerances": TOLERANCES,
            "geomean_ratio_best": geomean_ratios(records), "aborted": aborted, "records": records}


def write_json(path: Path, data: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=1) + "\n")


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(description="twist GEMM kernels (exported manifests) against torch.matmul (cuBLAS)")
    p.add_argument("manifests", type=Path, help="directory of manifests from `twist export gemm`")
    p.add_argument("--out", type=Path, default=REPO / "bench/results/gemm.json", help="the JSON results file")
    p.add_argument("--match", type=re.compile, default=None, help="only manifests whose label matches this regex")
    p.add_argument("--seed", type=int, default=0, help="seed of the random inputs")
    return p.parse_args(argv)


def select(manifests: list[Manifest], match: re.Pattern | None) -> list[Manifest]:
    chosen = [m for m in manifests if match is None or match.search(m.label)]
    if not chosen:
        raise ManifestError(f"no manifest label matches --match {match.pattern!r}")
    return chosen


# --- on the GPU -----------------------------------------------------------------------------------------------

def relative_l2_error(got, want) -> float:
    import torch
    got, want = got.double(), want.double()
    return (torch.linalg.vector_norm(got - want) / torch.linalg.vector_norm(want)).item()


def do_bench(fn) -> float:
    import triton.testing
    return triton.testing.do_bench(fn, warmup=TIMING["warmup_ms"], rep=TIMING["rep_ms"],
                                   return_mode=TIMING["return_mode"])


def check_and_time(manifest: Manifest, a, b, reference, r: dict) -> str | None:
    """Runs one schedule on A and B, checks it, times it and checks what the timed launches left, filling in
    `r`; returns why it failed, or None."""
    import torch
    with Program(manifest) as program:
        program.tensors["A"].copy_(a)
        program.tensors["B"].copy_(b)
        r["rel_l2_error"] = relative_l2_error(program.run()["out"], reference)
        if not r["rel_l2_error"] <= r["tolerance"]:
            return f"relative L2 error {r['rel_l2_error']:.3e} over the tolerance {r['tolerance']:.0e}"
        r["ours_ms"] = do_bench(program.launch)
        torch.cuda.synchronize()
        # The timed launches ran without poisoning; what they left must be the same product.
        r["rel_l2_error_after_timing"] = relative_l2_error(program.tensors["out"], reference)
        if not r["rel_l2_error_after_timing"] <= r["tolerance"]:
            return (f"after timing, relative L2 error {r['rel_l2_error_after_timing']:.3e} over the tolerance "
                    f"{r['tolerance']:.0e}: the result of repeated launches differs from the first")
    return None


def measure_hbm_read_bandwidth() -> float:
    """GB/s of torch.sum over HBM_PROBE_BYTES of f32, far more than L2 holds: a read-only stream of HBM."""
    import torch
    x = torch.ones(HBM_PROBE_BYTES // 4, device="cuda", dtype=torch.float32)
    ms = do_bench(lambda: x.sum())
    del x
    torch.cuda.empty_cache()
    return HBM_PROBE_BYTES / ms / 1e6


def measure_case(case: GemmCase, generator, gpu: str, date: str, records: list[dict],
                 tolerance: Callable[[Manifest, GemmProblem], float] | None = None,
                 hbm_read_gbps: float | None = None) -> None:
    """Appends one record per schedule to `records` as it goes, so that they outlive an exception. A schedule
    that fails (a launch error, a NaN left, an error over its tolerance: TOLERANCES by output dtype unless
    `tolerance` says otherwise) is recorded as FAIL and not timed; a sticky CUDA error is raised, since nothing
    after it can run."""
    import torch
    p = case.problem
    dt = torch_dtype(p.dtype)
    a = torch.randn((p.m, p.k), generator=generator, device="cuda", dtype=dt)
    b = torch.randn((p.k, p.n), generator=generator, device="cuda", dtype=dt)
    reference = torch.matmul(a.float(), b.float())
    cublas_error = relative_l2_error(torch.matmul(a, b), reference)
    cublas_ms = do_bench(lambda: torch.matmul(a, b))
    for manifest in case.manifests:
        r = new_record(p, manifest, gpu, date)
        if tolerance:
            r["tolerance"] = tolerance(manifest, p)
        r.update(cublas_ms=cublas_ms, cublas_tflops=p.tflops(cublas_ms), cublas_rel_l2_error=cublas_error)
        records.append(r)
        try:
            r["failure"] = check_and_time(manifest, a, b, reference, r)
        except (CudaError, OutputNotWritten) as e:
            r["failure"] = str(e)
            if isinstance(e, CudaError) and e.sticky:
                raise
        if r["failure"]:
            print(f"  {r['label']}: FAIL: {r['failure']}", flush=True)
            continue
        r.update(status="PASS", ours_tflops=p.tflops(r["ours_ms"]), ratio=cublas_ms / r["ours_ms"])
        add_bandwidth(r, p, hbm_read_gbps)
        print(f"  {r['label']}: error {r['rel_l2_error']:.2e}, {r['ours_tflops']:.1f} TFLOP/s, cuBLAS "
              f"{r['cublas_tflops']:.1f}", flush=True)


def set_matmul_precision() -> None:
    """As baseline.py, cuBLAS may not reduce fp16 products in fp16; and the fp32 reference must be IEEE fp32, not
    TF32, whose 10-bit mantissas err by as much as f16's own rounding (what the f16 tolerance is made of)."""
    import torch
    matmul = torch.backends.cuda.matmul
    matmul.allow_fp16_reduced_precision_reduction = False
    if hasattr(matmul, "fp32_precision"):  # PyTorch >= 2.9 deprecates allow_tf32 for this
        matmul.fp32_precision = "ieee"
    else:
        matmul.allow_tf32 = False


def environment(gpu: str, date: str) -> dict:
    import torch
    import triton
    return {"gpu": gpu, "date": date, "command": shlex.join(sys.orig_argv), "torch": torch.__version__,
            "triton": triton.__version__, "cuda": torch.version.cuda}


def measure_all(cases: list, announce: Callable[[object], str], measure: Callable[[object, list[dict]], None],
                save: Callable[[list[dict], str | None], None], report: Callable[[list[dict]], None]) -> list[dict]:
    """Measures every case into one list of records, saving them after each case (so that a crash later keeps
    them) and once more at the end with the reason the run stopped, if something stopped it; `report` prints
    whatever was measured, also then. The benchmarks' common driver loop."""
    records: list[dict] = []
    aborted = None
    try:
        for case in cases:
            print(announce(case), flush=True)
            measure(case, records)
            save(records, None)
    except Exception as e:
        aborted = f"{type(e).__name__}: {e}"
        raise
    finally:
        save(records, aborted)
        report(records)
    return records


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    cases = gemm_cases(select(find_manifests(args.manifests, "gemm"), args.match))
    import torch
    if not torch.cuda.is_available():
        print("bench_gemm: no CUDA device visible to PyTorch; run this on the GPU machine", file=sys.stderr)
        return 2
    set_matmul_precision()
    gpu = torch.cuda.get_device_name()
    date = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
    env = environment(gpu, date)
    hbm_read_gbps = measure_hbm_read_bandwidth()
    env.update(hbm_read_gbps=hbm_read_gbps, hbm_read_method=f"torch.sum over {HBM_PROBE_BYTES >> 30} GiB of f32")
    generator = torch.Generator(device="cuda").manual_seed(args.seed)

    def save(records: list[dict], aborted: str | None) -> None:
        mark_best(records)
        write_json(args.out, results_json(records, env, aborted))

    def report(records: list[dict]) -> None:
        print(format_table(records))
        print(format_summary(records, gpu, date, env["command"], hbm_read_gbps))
        print(f"results: {args.out}")

    records = measure_all(cases, lambda case: f"{case.problem.shape} {case.problem.dtype}: "
                          f"{len(case.manifests)} schedule(s)",
                          lambda case, records: measure_case(case, generator, gpu, date, records,
                                                             hbm_read_gbps=hbm_read_gbps), save, report)
    return 1 if any(r["status"] != "PASS" for r in records) else 0


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv[1:]))
    except ManifestError as e:
        print(f"bench_gemm: {e}", file=sys.stderr)
        sys.exit(2)
