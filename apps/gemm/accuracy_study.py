"""The accumulation study: how far f16 and hybrid accumulation (f16 mma partials promoted into f32 every N
k-steps) land from f32 accumulation, as K grows, and what each costs in time.

    python3 apps/gemm/accuracy_study.py STUDY_DIR [--timing TIMING_DIR] [--trials 20] [--seed 0]
                                        [--out bench/results/accumulation.json]

STUDY_DIR holds GEMM manifests with f16 inputs and f32 output (so that the output's rounding does not hide the
accumulation's), one per (K, strategy); the "accumulation" note (f32, f16, hybrid:N) names the strategy. Each
trial draws fresh A, B ~ N(0, 1) in f16, shared by every strategy of that K (so that their errors can also be
compared trial by trial), and measures each result's relative L2 error against A.double() @ B.double(), an fp64
product of the same f16-rounded operands. Reported per (K, strategy): the mean error and its standard error; per
K and strategy other than f32: the difference from f32 in units of the combined standard error
sqrt(SE_s^2 + SE_f32^2), and the paired difference (mean of the per-trial differences over its standard error).

TIMING_DIR, if given, holds manifests of one large shape (e.g. 4096^3, f16 output), one per strategy: each is
checked and timed against torch.matmul as bench_gemm.py does (f16 and hybrid against a looser bound).

Everything but run_study, run_timing and main's GPU setup runs without torch (apps/gemm/test_bench_support.py).
"""
from __future__ import annotations

import argparse
import datetime
import math
import re
import statistics
import sys
from contextlib import ExitStack
from pathlib import Path

from bench_gemm import (REPO, TIMING, TOLERANCES, GemmProblem, environment, gemm_cases, gemm_problem, measure_case,
                        relative_l2_error, set_matmul_precision, write_json)
from twist.runtime import CudaError, Manifest, ManifestError, OutputNotWritten, Program, find_manifests  # noqa: E402  (on the path bench_gemm set)

BASELINE = "f32"
# In the timing runs, only f32 accumulation is held to the output's tolerance; f16 and hybrid accumulation are
# what the study measures, so there they only have to be plainly a GEMM: f16 accumulation over K = 4096 errs by
# about 1e-2, a kernel that computes something else by about 1.
SANITY_BOUND = 5e-2


def strategy_of(manifest: Manifest) -> str:
    s = manifest.notes.get("accumulation", "")
    if s in ("f32", "f16") or re.fullmatch(r"hybrid:[1-9]\d*", s):
        return s
    raise ManifestError(f"{manifest.path}: the \"accumulation\" note is '{s}', expected f32, f16 or hybrid:N; "
                        "export it again with twist export gemm --accumulation")


def strategy_order(strategy: str) -> tuple[int, int]:
    """f32 first (the baseline), then f16, then hybrid by how often it promotes."""
    if strategy.startswith("hybrid:"):
        return (2, int(strategy.split(":")[1]))
    return (0 if strategy == BASELINE else 1, 0)


def study_grid(manifests: list[Manifest]) -> dict[GemmProblem, dict[str, Manifest]]:
    """The study's manifests by problem (in increasing K) and strategy (f32 first); each problem needs f32."""
    grid: dict[GemmProblem, dict[str, Manifest]] = {}
    for m in manifests:
        p, s = gemm_problem(m), strategy_of(m)
        if (p.dtype, p.output) != ("f16", "f32"):
            raise ManifestError(f"{m.path}: a study manifest needs f16 inputs and an f32 output, not {p.dtype} -> "
                                f"{p.output} (export with --dtype f16 --output f32)")
        by_strategy = grid.setdefault(p, {})
        if s in by_strategy:
            raise ManifestError(f"{m.path} and {by_strategy[s].path} are both {s} at {p.shape}; keep one")
        by_strategy[s] = m
    for p, by_strategy in grid.items():
        if BASELINE not in by_strategy:
            raise ManifestError(f"the study has no {BASELINE} manifest at {p.shape}, the baseline the others are "
                                "compared with; export one")
    return {p: dict(sorted(grid[p].items(), key=lambda e: strategy_order(e[0])))
            for p in sorted(grid, key=lambda p: (p.m, p.n, p.k))}


def mean_and_sem(values: list[float]) -> tuple[float, float]:
    if len(values) < 2:
        raise ValueError(f"a standard error needs at least 2 trials, got {len(values)}")
    return statistics.fmean(values), statistics.stdev(values) / math.sqrt(len(values))


def _ratio(numerator: float, denominator: float) -> float | None:
    """numerator / denominator, or None where it is undefined (no spread at all), so that JSON stays standard."""
    if denominator > 0:
        return numerator / denominator
    return 0.0 if numerator == 0 else None


def compare(errors: list[float], baseline: list[float]) -> dict:
    """Where one strategy's errors land relative to the baseline's, from trials on the same inputs: trial i of
    both saw the same A and B. The paired difference uses the trials both have (a run cut short may leave the
    strategies of its last K one trial apart)."""
    mean, sem = mean_and_sem(errors)
    base_mean, base_sem = mean_and_sem(baseline)
    combined = math.hypot(sem, base_sem)
    both = min(len(errors), len(baseline))
    paired_mean, paired_sem = mean_and_sem([e - b for e, b in zip(errors[:both], baseline[:both])])
    z = _ratio(mean - base_mean, combined)
    return {"diff": mean - base_mean, "combined_se": combined, "z": z,
            "within_one_se": None if z is None else abs(z) <= 1,
            "paired_mean_diff": paired_mean, "paired_sem": paired_sem, "paired_z": _ratio(paired_mean, paired_sem)}


def study_rows(grid: dict[GemmProblem, dict[str, Manifest]], errors: dict[str, list[float]],
               failures: dict[str, str]) -> list[dict]:
    """One row per (problem, strategy), by manifest label in `errors` / `failures`; rows other than f32's
    carry the comparison with f32 when both have their trials."""
    rows = []
    for p, by_strategy in grid.items():
        base = errors.get(by_strategy[BASELINE].label)
        for s, m in by_strategy.items():
            e = errors.get(m.label)
            row = {"m": p.m, "n": p.n, "k": p.k, "strategy": s, "label": m.label, "trials": len(e or []),
                   "mean": None, "sem": None, "vs_f32": None, "failure": failures.get(m.label), "errors": e}
            if e and not row["failure"]:
                row["mean"], row["sem"] = mean_and_sem(e)
                if s != BASELINE and base and not failures.get(by_strategy[BASELINE].label):
                    row["vs_f32"] = compare(e, base)
            rows.append(row)
    return rows


def _number(value: float | None, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def _table(header: tuple[str, ...], rows: list[tuple[str, ...]]) -> str:
    widths = [max(len(r[c]) for r in [header] + rows) for c in range(len(header))]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(r, widths)).rstrip() for r in [header] + rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def format_study(rows: list[dict]) -> str:
    header = ("M x N x K", "strategy", "trials", "mean rel. L2 err", "SEM", "vs f32 (SE)", "paired (SE)", "")
    cells = []
    for r in rows:
        v = r["vs_f32"] or {}
        verdict = "" if not v or v["within_one_se"] is None else (
            "within 1 SE of f32" if v["within_one_se"] else "beyond 1 SE of f32")
        cells.append((f"{r['m']}x{r['n']}x{r['k']}", r["strategy"], str(r["trials"]), _number(r["mean"], ".4e"),
                      _number(r["sem"], ".2e"), _number(v.get("z"), "+.2f"), _number(v.get("paired_z"), "+.2f"),
                      "FAIL" if r["failure"] else verdict))
    return "\n".join([_table(header, cells)] + [f"FAIL {r['label']}: {r['failure']}" for r in rows if r["failure"]])


def format_timing(rows: list[dict]) -> str:
    header = ("shape", "strategy", "regs", "spill", "rel. L2 err", "bound", "ours TFLOP/s", "cuBLAS TFLOP/s", "ratio",
              "")
    cells = [(r["shape"], r["accumulation"], "/".join(str(k["registers"]) for k in r["kernels"]),
              "/".join(str(k["spill_bytes"]) for k in r["kernels"]), _number(r["rel_l2_error"], ".2e"),
              format(r["tolerance"], ".0e"), _number(r["ours_tflops"], ".1f"),
              _number(r["cublas_tflops"], ".1f"), _number(r["ratio"], ".3f"), r["status"]) for r in rows]
    return "\n".join([_table(header, cells)] + [f"FAIL {r['label']}: {r['failure']}" for r in rows if r["failure"]])


def timing_bound(strategy: str, output: str) -> float:
    return TOLERANCES[output] if strategy == BASELINE else SANITY_BOUND


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(description="accuracy (and cost) of f32, f16 and hybrid accumulation in twist GEMMs")
    p.add_argument("manifests", type=Path, help="directory of study manifests (f16 inputs, f32 output)")
    p.add_argument("--timing", type=Path, default=None, help="directory of manifests to time, one per strategy")
    p.add_argument("--trials", type=int, default=20, help="trials per K (fresh inputs each); at least 2")
    p.add_argument("--seed", type=int, default=0, help="seed of the random inputs")
    p.add_argument("--out", type=Path, default=REPO / "bench/results/accumulation.json", help="the JSON results file")
    args = p.parse_args(argv)
    if args.trials < 2:
        p.error(f"--trials {args.trials}: a standard error needs at least 2 trials")
    return args


def results_json(env: dict, args: argparse.Namespace, rows: list[dict], timing: list[dict],
                 aborted: str | None) -> dict:
    return {"benchmark": "accumulation", **env, "trials": args.trials, "seed": args.seed,
            "reference": "A.double() @ B.double() on the GPU, from the same f16 operands",
            "timing_method": TIMING, "sanity_bound": SANITY_BOUND, "aborted": aborted, "study": rows,
            "timed": timing}


# --- on the GPU -----------------------------------------------------------------------------------------------

def run_study(grid: dict[GemmProblem, dict[str, Manifest]], trials: int, generator, errors: dict[str, list[float]],
              failures: dict[str, str]) -> None:
    """Fills `errors` (per manifest label, one per trial) and `failures` as it goes; a strategy that fails stops
    there, the others go on; a sticky CUDA error is raised."""
    import torch
    for p, by_strategy in grid.items():
        print(f"study {p.shape}: {', '.join(by_strategy)}", flush=True)
        with ExitStack() as stack:
            programs = {}
            for m in by_strategy.values():
                try:
                    programs[m.label] = stack.enter_context(Program(m))
                except CudaError as e:
                    failures[m.label] = str(e)
                    if e.sticky:
                        raise
            for _ in range(trials):
                a = torch.randn((p.m, p.k), generator=generator, device="cuda", dtype=torch.float16)
                b = torch.randn((p.k, p.n), generator=generator, device="cuda", dtype=torch.float16)
                reference = a.double() @ b.double()
                for label, program in programs.items():
                    if label in failures:
                        continue
                    try:
                        program.tensors["A"].copy_(a)
                        program.tensors["B"].copy_(b)
                        errors.setdefault(label, []).append(relative_l2_error(program.run()["out"], reference))
                    except (CudaError, OutputNotWritten) as e:
                        failures[label] = str(e)
                        if isinstance(e, CudaError) and e.sticky:
                            raise


def run_timing(manifests: list[Manifest], generator, gpu: str, date: str, records: list[dict]) -> None:
    """Appends one record per manifest to `records`, as bench_gemm.py measures a GEMM, but with each strategy's
    timing_bound as its tolerance."""
    for case in gemm_cases(manifests):
        case.manifests.sort(key=lambda m: strategy_order(strategy_of(m)))
        print(f"timing {case.problem.shape}: {', '.join(strategy_of(m) for m in case.manifests)}", flush=True)
        measure_case(case, generator, gpu, date, records,
                     tolerance=lambda m, p: timing_bound(strategy_of(m), p.output))


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    grid = study_grid(find_manifests(args.manifests, "gemm"))
    timed = find_manifests(args.timing, "gemm") if args.timing else []
    for m in timed:
        strategy_of(m)  # refuse a timing manifest without a strategy before any GPU time is spent
    import torch
    if not torch.cuda.is_available():
        print("accuracy_study: no CUDA device visible to PyTorch; run this on the GPU machine", file=sys.stderr)
        return 2
    set_matmul_precision()
    gpu = torch.cuda.get_device_name()
    env = environment(gpu, datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"))
    generator = torch.Generator(device="cuda").manual_seed(args.seed)
    errors: dict[str, list[float]] = {}
    failures: dict[str, str] = {}
    timing: list[dict] = []
    aborted = None
    try:
        run_study(grid, args.trials, generator, errors, failures)
        run_timing(timed, generator, gpu, env["date"], timing)
    except Exception as e:
        aborted = f"{type(e).__name__}: {e}"
        raise
    finally:
        # A study cut short by an error keeps the trials it had; rows with fewer than 2 have no statistics.
        rows = study_rows(grid, {k: v for k, v in errors.items() if len(v) >= 2}, failures)
        write_json(args.out, results_json(env, args, rows, timing, aborted))
        print(format_study(rows))
        if timing:
            print(format_timing(timing))
        print(f"f16 inputs ~ N(0, 1), f32 output, {args.trials} trials per K on shared inputs; reference: fp64 "
              "product of the same f16 operands. 'vs f32' is (mean - mean_f32) / sqrt(SE^2 + SE_f32^2); 'paired' "
              "is the mean per-trial difference over its standard error.")
        print(f"GPU: {gpu}\ndate: {env['date']}\ncommand: {env['command']}\nresults: {args.out}")
    failed = bool(failures) or any(r["status"] != "PASS" for r in timing)
    return 1 if failed else 0


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv[1:]))
    except ManifestError as e:
        print(f"accuracy_study: {e}", file=sys.stderr)
        sys.exit(2)
