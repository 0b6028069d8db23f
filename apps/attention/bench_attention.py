"""Attention benchmark: twist's exported attention kernels (prefill and decode) against PyTorch's SDPA with the
FlashAttention-2 and cuDNN backends, in one process, on the same inputs, timed the same way
(triton.testing.do_bench medians, as ../shared/device/baseline.py measured the ceilings).

    python3 apps/attention/bench_attention.py MANIFEST_DIR [--out bench/results/attention.json] [--match REGEX]
                                              [--seed 0] [--reference-max-tflop 8]

For each problem among the manifests with "op": "attention" (prefill) or "decode": fresh Q, K, V ~ N(0, 1) in the
manifest's dtype (Q [B, H, S, D], K and V [B, H / group, L, D]); each schedule's output (poisoned with NaN first)
is checked against PyTorch's math attention in fp32 by relative L2 error, then timed, then checked again on what
the timed launches left; each SDPA backend is timed once per problem, and one that refuses the problem is
reported as unsupported. Prints a table, geometric means of the ratios per family and baseline, and writes one
JSON record per schedule and baseline; exits 1 if any check failed.

Semantics the reference must share with our kernels (apps/attention/attention.h): the softmax scale is
1 / sqrt(D) (the manifests' qk_scale scalar is log2(e) / sqrt(D) because the kernels work in base 2); the causal
mask keeps key j for query i when j <= i + L - S (aligned at the bottom right), which is PyTorch's is_causal when
S == L and no mask at all when S == 1; query head h reads key/value head h / group. A sliding window (the
manifest's "window" note, W: Gemma's sliding layers) keeps only keys j > i + L - S - W besides, given to the
reference and to SDPA as an explicit boolean mask (which FlashAttention-2's backend refuses).

Everything but the functions under "on the GPU" runs without torch (apps/attention/test_bench_attention.py).
"""
from __future__ import annotations

import argparse
import datetime
import json
import math
import re
import sys
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "gemm"))  # the launcher and the GEMM benchmark

import bench_gemm  # noqa: E402
from twist.runtime import (CudaError, Manifest, ManifestError, OutputNotWritten, Program,  # noqa: E402
                           load_manifest, torch_dtype)  # (on the path bench_gemm set)

REPO = Path(__file__).resolve().parents[2]
OPS = {"attention": "prefill", "decode": "decode"}  # the manifest's "op" note -> the benchmark's family
FAMILIES = ("prefill", "decode")
# Relative L2 error allowed against fp32 math attention, by output dtype (as the GPU tests of attention).
TOLERANCES = {"f16": 2e-3, "bf16": 1e-2}
DTYPE_BYTES = {"f16": 2, "bf16": 2}
TIMING = bench_gemm.TIMING
# (record name, column title, torch.nn.attention.SDPBackend member)
# Memory-efficient attention runs the problems the others refuse (head dimensions above 256, explicit masks).
BASELINES = (("sdpa_flash", "FA2", "FLASH_ATTENTION"), ("sdpa_cudnn", "cuDNN", "CUDNN_ATTENTION"),
             ("sdpa_efficient", "MemEff", "EFFICIENT_ATTENTION"))
UNITS = {"prefill": "TFLOP/s", "decode": "TB/s"}
# The fp32 reference is computed over (batch, key/value head) pairs in chunks of at most this many bytes of
# scores, fp32 K and V (expanded to the group) and fp32 Q and output, so that no shape needs more memory.
REFERENCE_CHUNK_BYTES = 1 << 30
DEFAULT_REFERENCE_MAX_TFLOP = 8.0
SHAPE_NOTE = re.compile(r"B(\d+)_H(\d+)_S(\d+)_L(\d+)_D(\d+)")


@dataclass(frozen=True)
class AttentionProblem:
    op: str  # "attention" or "decode"
    dtype: str
    batch: int
    heads: int    # query heads
    queries: int  # S (1 when decoding)
    keys: int     # L
    head_dim: int
    group: int    # query heads per key/value head
    causal: bool
    window: int | None = None  # keys j > i + L - S - window only (a sliding window)

    @property
    def family(self) -> str:
        return OPS[self.op]

    @property
    def kv_heads(self) -> int:
        return self.heads // self.group

    @property
    def units(self) -> int:
        """(batch, key/value head) pairs: what the reference may be computed on a subset of."""
        return self.batch * self.kv_heads

    @property
    def shape(self) -> str:
        return f"B{self.batch}_H{self.heads}_S{self.queries}_L{self.keys}_D{self.head_dim}"

    @property
    def name(self) -> str:
        sizes = (f"B{self.batch} H{self.heads} L{self.keys} D{self.head_dim}" if self.family == "decode" else
                 f"B{self.batch} H{self.heads} S{self.queries} L{self.keys} D{self.head_dim}")
        return (sizes + (" causal" if self.causal else "") + (f" window{self.window}" if self.window else "")
                + (f" GQA{self.group}" if self.group > 1 else ""))

    @property
    def reference_is_causal(self) -> bool:
        """PyTorch's is_causal (aligned at the top left) for our bottom-right mask: the same mask when S == L; when
        S == 1 ours keeps every key (j <= L - 1), so no mask. Other S with a causal mask are refused when read."""
        return self.causal and self.queries == self.keys and self.queries > 1

    @property
    def flops(self) -> float:
        """4 B H S L D (two products of 2 S L D each), halved under a causal mask, as baseline.py counts; under a
        sliding window, 4 B H D times the (query, key) pairs the window keeps (causal, S == L)."""
        if self.window:
            w, s = min(self.window, self.queries), self.queries
            pairs = w * (w + 1) // 2 + (s - w) * w  # row i keeps min(i + 1, w) keys
            return 4 * self.batch * self.heads * pairs * self.head_dim
        return 4 * self.batch * self.heads * self.queries * self.keys * self.head_dim * (
            0.5 if self.reference_is_causal else 1.0)

    @property
    def kv_bytes(self) -> int:
        """The bytes of K and V: what decoding must read, once."""
        return 2 * self.batch * self.kv_heads * self.keys * self.head_dim * DTYPE_BYTES[self.dtype]

    @property
    def unit(self) -> str:
        return UNITS[self.family]

    def figure(self, ms: float) -> float:
        """TFLOP/s for prefill, TB/s of K and V read for decode."""
        return (self.flops if self.family == "prefill" else self.kv_bytes) / ms / 1e9

    @property
    def reference_flop_per_unit(self) -> float:
        # The math backend computes every score, masked or not.
        return 4 * self.group * self.queries * self.keys * self.head_dim

    @property
    def reference_bytes_per_unit(self) -> int:
        s, l, d, g = self.queries, self.keys, self.head_dim, self.group
        return 4 * g * (s * l + 2 * l * d + 2 * s * d)

    def sort_key(self) -> tuple:
        return (FAMILIES.index(self.family), list(TOLERANCES).index(self.dtype), self.head_dim, self.batch * self.heads
                * self.queries * self.keys, self.causal, self.group, self.batch)


@dataclass
class AttentionCase:
    problem: AttentionProblem
    manifests: list[Manifest] = field(default_factory=list)


def _int_note(manifest: Manifest, key: str, default: str | None = None) -> int:
    text = manifest.notes.get(key, default)
    if text is None or not re.fullmatch(r"\d+", text):
        raise ManifestError(f"{manifest.path}: the \"{key}\" note is {text!r}, expected a positive integer; export it "
                            "with twist export attention")
    return int(text)


def attention_problem(manifest: Manifest) -> AttentionProblem:
    """The attention a manifest computes, from its notes (op, dtype, shape BxHxSxLxD as B.._H.._S.._L.._D..,
    causal, group), checked against its buffers Q, K, V, out (the names apps/attention/attention.cpp gives them)
    and its scalars."""
    where = str(manifest.path)
    op = manifest.notes.get("op")
    if op not in OPS:
        raise ManifestError(f"{where}: op {op!r} is not attention or decode")
    shape = manifest.notes.get("shape", "")
    match = SHAPE_NOTE.fullmatch(shape)
    if not match:
        raise ManifestError(f"{where}: the \"shape\" note is '{shape}', expected B<b>_H<h>_S<s>_L<l>_D<d>; export it "
                            "with twist export attention")
    b, h, s, l, d = (int(e) for e in match.groups())
    dtype = manifest.notes.get("dtype", "")
    if dtype not in TOLERANCES:
        raise ManifestError(f"{where}: dtype '{dtype}' has no tolerance (known: {', '.join(TOLERANCES)})")
    causal_note = manifest.notes.get("causal", "false")
    if causal_note not in ("true", "false"):
        raise ManifestError(f"{where}: the \"causal\" note is '{causal_note}', expected true or false")
    causal = causal_note == "true"
    group = _int_note(manifest, "group", "1")
    if group < 1 or h % group:
        raise ManifestError(f"{where}: group {group} does not divide the {h} query heads")
    if min(b, h, s, l, d) < 1:
        raise ManifestError(f"{where}: shape {shape} has an empty dimension")
    if op == "decode" and s != 1:
        raise ManifestError(f"{where}: a decode manifest has one query per head, but its shape says S = {s}")
    if causal and s not in (1, l):
        raise ManifestError(f"{where}: causal with S = {s} and L = {l}: our mask is aligned at the bottom right, "
                            "PyTorch's is_causal at the top left, and they agree only for S == L (or S == 1, no mask)")
    window = None
    if "window" in manifest.notes:
        window = _int_note(manifest, "window")
        if not (causal and s == l and window >= 1):
            raise ManifestError(f"{where}: a window of {window} is benchmarked on causal prefill with S == L only "
                                f"(this manifest: causal {causal}, S = {s}, L = {l})")
    p = AttentionProblem(op, dtype, b, h, s, l, d, group, causal, window)
    q_shape, kv_shape = (b, h, s, d), (b, p.kv_heads, l, d)
    want = {"Q": ("input", q_shape), "K": ("input", kv_shape), "V": ("input", kv_shape), "out": ("output", q_shape)}
    for name, (role, dims) in want.items():
        buffer = manifest.buffer(name)
        if buffer.role != role or buffer.shape != dims or buffer.dtype != dtype:
            raise ManifestError(f"{where}: buffer '{name}' is {buffer.role} {buffer.dtype} {list(buffer.shape)}, but "
                                f"{p.name} in {dtype} needs {role} {dtype} {list(dims)}")
    for buffer in manifest.buffers:
        if buffer.role != "workspace" and buffer.name not in want:
            raise ManifestError(f"{where}: {buffer.role} '{buffer.name}' is none of Q, K, V, out; the benchmark has "
                                "nothing to give it (ALiBi slopes and other variants are not benchmarked)")
    sizes = {"B": b, "H": h, "S": s, "L": l}
    scale = math.log2(math.e) / math.sqrt(d)
    for kernel in manifest.kernels:
        for arg in kernel.args:
            value = getattr(arg, "value", None)
            if value is None:
                continue
            if arg.name in sizes and value != sizes[arg.name]:
                raise ManifestError(f"{where}: kernel '{kernel.name}' passes {arg.name} = {value}, but the shape note "
                                    f"says {sizes[arg.name]}")
            if arg.name == "qk_scale" and not math.isclose(value, scale, rel_tol=1e-6):
                raise ManifestError(f"{where}: kernel '{kernel.name}' passes qk_scale = {value}, but the benchmark's "
                                    f"reference uses the softmax scale 1/sqrt({d}), which in base 2 is qk_scale = "
                                    f"log2(e)/sqrt({d}) = {scale}")
    return p


def attention_cases(manifests: list[Manifest]) -> list[AttentionCase]:
    """Manifests grouped by problem; prefill before decode, f16 before bf16, then by size; schedules as given."""
    cases: dict[AttentionProblem, AttentionCase] = {}
    for manifest in manifests:
        problem = attention_problem(manifest)
        cases.setdefault(problem, AttentionCase(problem)).manifests.append(manifest)
    return sorted(cases.values(), key=lambda c: c.problem.sort_key())


def find_attention_manifests(directory: Path) -> list[Manifest]:
    """Every manifest in `directory` whose "op" is attention or decode, by file name. Any .json there must be a
    manifest."""
    if not directory.is_dir():
        raise ManifestError(f"{directory} is not a directory; export the manifests first "
                            "(bench/export_attention_suite.sh)")
    found = [m for m in (load_manifest(p) for p in sorted(directory.glob("*.json"))) if m.notes.get("op") in OPS]
    if not found:
        raise ManifestError(f"{directory} holds no manifests with \"op\": \"attention\" or \"decode\"; export them "
                            "first (bench/export_attention_suite.sh)")
    return found


def reference_units(problem: AttentionProblem, max_tflop: float | None) -> list[int]:
    """The (batch, key/value head) pairs, as indices b * kv_heads + kv_head, that the fp32 reference covers: all
    of them unless that would be more than max_tflop of reference work; then as many as fit (at least one),
    spread evenly from the first to the last, so that the ends of the grid are checked."""
    n = problem.units
    if max_tflop is None:
        return list(range(n))
    fit = max(1, int(max_tflop * 1e12 // problem.reference_flop_per_unit))
    if fit >= n:
        return list(range(n))
    if fit == 1:
        return [0]
    return sorted({round(i * (n - 1) / (fit - 1)) for i in range(fit)})


def chunks(indices: list[int], unit_bytes: int, budget: int = REFERENCE_CHUNK_BYTES) -> list[list[int]]:
    """`indices` in consecutive runs of at most budget // unit_bytes (at least 1) each."""
    size = max(1, budget // unit_bytes)
    return [indices[i:i + size] for i in range(0, len(indices), size)]


def describe_reference(problem: AttentionProblem, indices: list[int]) -> str:
    what = f"{len(indices)} of {problem.units} (batch, kv-head) pairs"
    return what if len(indices) == problem.units else f"{what} (a slice: the full fp32 reference is too much work)"


def kernel_resources(manifest: Manifest) -> list[dict]:
    return [{"name": k.name, "registers": k.registers, "spill_bytes": k.spill_bytes, "grid": list(k.grid),
             "block": k.block, "shared_bytes": k.shared_bytes} for k in manifest.kernels]


def blocks(manifest: Manifest) -> int:
    """Blocks of the first (main) kernel: with 132 SMs, what says whether the grid fills the machine."""
    g = manifest.kernels[0].grid
    return g[0] * g[1] * g[2]


def finite(value: float | None) -> float | None:
    """None for a value that standard JSON cannot hold (NaN, inf)."""
    return value if value is None or math.isfinite(value) else None


def new_result(problem: AttentionProblem, manifest: Manifest) -> dict:
    """Our side of one schedule's records, before it runs."""
    return {
        "label": manifest.label, "op": problem.op, "family": problem.family, "shape": problem.shape,
        "name": problem.name, "batch": problem.batch, "heads": problem.heads, "kv_heads": problem.kv_heads,
        "queries": problem.queries, "keys": problem.keys, "head_dim": problem.head_dim, "group": problem.group,
        "causal": problem.causal, "window": problem.window, "dtype": problem.dtype, "schedule": manifest.notes.get("schedule", manifest.label),
        "kernels": kernel_resources(manifest), "blocks": blocks(manifest), "tolerance": TOLERANCES[problem.dtype],
        "reference": None, "reference_sliced": None, "rel_l2_error": None, "rel_l2_error_after_timing": None,
        "status": "FAIL", "failure": None, "ours_ms": None, "ours": None, "unit": problem.unit,
    }


def new_baseline(status: str = "unsupported", note: str | None = None, ms: float | None = None,
                 figure: float | None = None, rel_l2_error: float | None = None) -> dict:
    """One SDPA backend's result for a problem: status "ok", "unsupported" (it refused the problem) or "error"."""
    return {"status": status, "note": note, "ms": ms, "figure": figure, "rel_l2_error": rel_l2_error}


NOTE_CHARS = 400


def baseline_refusal(error: str, warned: list[str]) -> dict:
    """A backend's result when its first call raised `error` after warning `warned`: "unsupported" when SDPA found
    no kernel for the problem (the warnings say why), "error" for anything else. The note is one line, cut short."""
    status = "unsupported" if "No available kernel" in error else "error"
    first = error.strip().splitlines()[0] if error.strip() else "(no message)"
    reasons = "; ".join(dict.fromkeys(" ".join(w.split()) for w in warned if w.strip()))
    note = first + (f" ({reasons})" if reasons else "")
    return new_baseline(status, note if len(note) <= NOTE_CHARS else note[:NOTE_CHARS - 3] + "...")


def make_records(ours: dict, baselines: dict[str, dict], gpu: str, date: str) -> list[dict]:
    """One record per baseline for one schedule, each carrying our side whole; ratio = ours / baseline (figures),
    None unless both ran."""
    records = []
    for name, _, _ in BASELINES:
        b = baselines.get(name) or new_baseline("error", "not measured")
        ratio = None
        if ours["status"] == "PASS" and b["status"] == "ok" and ours["ours"] and b["figure"]:
            ratio = ours["ours"] / b["figure"]
        records.append({**ours, "baseline": name, "baseline_status": b["status"], "baseline_note": b["note"],
                        "baseline_ms": b["ms"], "baseline_figure": b["figure"],
                        "baseline_rel_l2_error": b["rel_l2_error"], "ratio": ratio, "best": False, "gpu": gpu,
                        "date": date})
    return records


def case_key(r: dict) -> tuple:
    return (r["op"], r["shape"], r["dtype"], r["causal"], r.get("window"), r["group"])


def mark_best(records: list[dict]) -> None:
    """Marks, per problem, every record of the fastest schedule that passed; a failed schedule is never best."""
    best: dict[tuple, dict] = {}
    for r in records:
        r["best"] = False
        if r["status"] == "PASS" and r["ours_ms"] is not None:
            key = case_key(r)
            if key not in best or r["ours_ms"] < best[key]["ours_ms"]:
                best[key] = r
    labels = {r["label"] for r in best.values()}
    for r in records:
        r["best"] = r["label"] in labels and r["status"] == "PASS"


def geomean_ratios(records: list[dict]) -> dict:
    """Per family and baseline: the geometric mean of ours / baseline over the best schedule of each problem the
    baseline ran (None where there is none), and how many problems it is over."""
    out = {}
    for family in FAMILIES:
        if not any(r["family"] == family for r in records):
            continue
        out[family] = {}
        for name, _, _ in BASELINES:
            ratios = [r["ratio"] for r in records if r["family"] == family and r["baseline"] == name and r["best"]
                      and r["ratio"] is not None]
            out[family][name] = {"geomean": bench_gemm.geometric_mean(ratios), "problems": len(ratios)}
    return out


def _number(value: float | None, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def _schedules(records: list[dict]) -> list[dict]:
    """One row per schedule (records come in runs of one per baseline), with each baseline's record by name."""
    rows: dict[str, dict] = {}
    for r in records:
        row = rows.setdefault(r["label"], {"r": r, "baselines": {}})
        row["baselines"][r["baseline"]] = r
    return list(rows.values())


def _baseline_cell(r: dict | None, field_name: str, spec: str) -> str:
    if r is None:
        return "-"
    if r["baseline_status"] != "ok":
        return "unsup." if r["baseline_status"] == "unsupported" else "error"
    return _number(r[field_name], spec)


def format_table(records: list[dict]) -> str:
    lines = []
    for family in FAMILIES:
        rows = [row for row in _schedules(records) if row["r"]["family"] == family]
        if not rows:
            continue
        unit = UNITS[family]
        header = (("problem", "dtype", "schedule", "blocks", "regs", "spill", "rel. L2 err", f"ours {unit}")
                  + tuple(title for _, title, _ in BASELINES) + tuple(f"/{title}" for _, title, _ in BASELINES)
                  + ("",))
        table = [header]
        for row in rows:
            r = row["r"]
            regs = "/".join(str(k["registers"]) for k in r["kernels"])
            spill = "/".join(str(k["spill_bytes"]) for k in r["kernels"])
            figures = tuple(_baseline_cell(row["baselines"].get(n), "baseline_figure", ".2f" if family == "decode"
                                           else ".1f") for n, _, _ in BASELINES)
            ratios = tuple(_baseline_cell(row["baselines"].get(n), "ratio", ".3f") for n, _, _ in BASELINES)
            mark = r["status"] + (" best" if r["best"] else "")
            table.append((r["name"], r["dtype"], r["schedule"], str(r["blocks"]), regs, spill,
                          _number(r["rel_l2_error"], ".2e"), _number(r["ours"], ".2f" if family == "decode" else ".1f"))
                         + figures + ratios + (mark,))
        widths = [max(len(row[c]) for row in table) for c in range(len(header))]
        text = ["  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip() for row in table]
        text.insert(1, "  ".join("-" * w for w in widths))
        lines += [f"{family} ({unit}; ratios are ours / baseline, above 1 means ours is faster)"] + text + [""]
    notes = []
    seen = set()
    for row in _schedules(records):
        r = row["r"]
        if r["failure"]:
            notes.append(f"FAIL {r['label']}: {r['failure']}")
        if r["reference_sliced"] and (case_key(r), "ref") not in seen:
            seen.add((case_key(r), "ref"))
            notes.append(f"note: {r['name']} {r['dtype']}: reference on {r['reference']}")
        for name, title, _ in BASELINES:
            b = row["baselines"].get(name)
            if b and b["baseline_status"] != "ok" and (case_key(r), name) not in seen:
                seen.add((case_key(r), name))
                notes.append(f"{title} {b['baseline_status']} for {r['name']} {r['dtype']}: {b['baseline_note']}")
    return "\n".join(lines + notes).rstrip()


def format_summary(records: list[dict], gpu: str, date: str, command: str) -> str:
    means = geomean_ratios(records)
    lines = []
    for family, per_baseline in means.items():
        parts = [f"vs {title} {_number(per_baseline[name]['geomean'], '.3f')} over {per_baseline[name]['problems']}"
                 for name, title, _ in BASELINES]
        lines.append(f"{family}: geometric mean of ours / baseline over the best passing schedule per problem: "
                     + ", ".join(parts))
    schedules = _schedules(records)
    failed = sum(row["r"]["status"] != "PASS" for row in schedules)
    lines += [f"{len(schedules)} schedule(s), {failed} failed" + (" (the exit status is 1)" if failed else ""),
              f"GPU: {gpu}", f"date: {date}", f"command: {command}"]
    return "\n".join(lines)


def format_markdown(records: list[dict]) -> str:
    """The best schedule per problem as rows of RESULTS.md's attention table."""
    lines = ["| family | problem | dtype | best schedule | regs | ours | " + " | ".join(t for _, t, _ in BASELINES)
             + " | " + " | ".join(f"ours / {t}" for _, t, _ in BASELINES) + " |",
             "| --- " * (6 + 2 * len(BASELINES)) + "|"]
    for row in _schedules(records):
        r = row["r"]
        if not r["best"]:
            continue
        spec = ".2f" if r["family"] == "decode" else ".1f"
        figures = [_baseline_cell(row["baselines"].get(n), "baseline_figure", spec) for n, _, _ in BASELINES]
        ratios = [_baseline_cell(row["baselines"].get(n), "ratio", ".3f") for n, _, _ in BASELINES]
        regs = "/".join(str(k["registers"]) for k in r["kernels"])
        lines.append(f"| {r['family']} | {r['name']} | {r['dtype']} | {r['schedule']} | {regs} | "
                     f"{_number(r['ours'], spec)} {r['unit']} | " + " | ".join(figures) + " | " + " | ".join(ratios)
                     + " |")
    return "\n".join(lines)


REFERENCE_METHOD = ("torch.nn.functional.scaled_dot_product_attention on fp32 copies under "
                    "sdpa_kernel([SDPBackend.MATH]), IEEE fp32 matmuls (no TF32), scale 1/sqrt(D), is_causal for a "
                    "causal mask with S == L (an explicit boolean mask with a sliding window), K and V heads expanded "
                    "with repeat_interleave(group, dim=1)")


def results_json(records: list[dict], environment: dict, aborted: str | None) -> dict:
    return {"benchmark": "attention", **environment, "timing": TIMING, "tolerances": TOLERANCES,
            "reference": REFERENCE_METHOD, "baselines": {name: f"SDPBackend.{member}" for name, _, member in BASELINES},
            "geomean_ratio_best": geomean_ratios(records), "aborted": aborted, "records": records}


def write_json(path: Path, data: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=1, allow_nan=False) + "\n")


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(description="twist attention kernels (exported manifests) against SDPA's "
                                            "FlashAttention-2 and cuDNN backends")
    p.add_argument("manifests", type=Path, help="directory of manifests from bench/export_attention_suite.sh")
    p.add_argument("--out", type=Path, default=REPO / "bench/results/attention.json", help="the JSON results file")
    p.add_argument("--match", type=re.compile, default=None, help="only manifests whose label matches this regex")
    p.add_argument("--seed", type=int, default=0, help="seed of the random inputs")
    p.add_argument("--reference-max-tflop", type=float, default=DEFAULT_REFERENCE_MAX_TFLOP,
                   help="most fp32 reference work per problem (TFLOP, masked scores included); above it the reference "
                        "covers an evenly spread slice of (batch, kv-head) pairs and the output says so")
    args = p.parse_args(argv)
    if not args.reference_max_tflop > 0:
        p.error("--reference-max-tflop must be positive")
    return args


# --- on the GPU -----------------------------------------------------------------------------------------------

def by_unit(t, problem: AttentionProblem):
    """A [B, H, S, D] or [B, H / group, L, D] tensor as [(batch, kv-head) pairs, heads of the pair, rows, D]."""
    return t.reshape(problem.units, t.shape[1] // problem.kv_heads, t.shape[2], t.shape[3])


def mask_arguments(problem: AttentionProblem, device) -> dict:
    """SDPA's mask arguments for the problem: is_causal, or with a window an explicit [S, L] mask (True keeps)."""
    import torch
    if not problem.window:
        return {"is_causal": problem.reference_is_causal}
    i = torch.arange(problem.queries, device=device)[:, None] + (problem.keys - problem.queries)
    j = torch.arange(problem.keys, device=device)[None, :]
    return {"attn_mask": (j <= i) & (j > i - problem.window)}


def math_reference(problem: AttentionProblem, q, k, v, indices: list[int]):
    """fp32 math attention on the (batch, kv-head) pairs `indices`: [len(indices), group, S, D], in chunks."""
    import torch
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel
    qu, ku, vu = by_unit(q, problem), by_unit(k, problem), by_unit(v, problem)
    parts = []
    for chunk in chunks(indices, problem.reference_bytes_per_unit):
        idx = torch.tensor(chunk, device=q.device)
        qc = qu.index_select(0, idx).float()
        kc = ku.index_select(0, idx).float().repeat_interleave(problem.group, dim=1)
        vc = vu.index_select(0, idx).float().repeat_interleave(problem.group, dim=1)
        with sdpa_kernel([SDPBackend.MATH]):
            parts.append(F.scaled_dot_product_attention(qc, kc, vc, **mask_arguments(problem, q.device),
                                                        scale=1 / math.sqrt(problem.head_dim)))
        del qc, kc, vc
    return torch.cat(parts)


def on_units(out, problem: AttentionProblem, indices: list[int]):
    import torch
    return by_unit(out, problem).index_select(0, torch.tensor(indices, device=out.device))


def context_alive() -> bool:
    import torch
    try:
        torch.cuda.synchronize()
        return True
    except Exception:
        return False


def measure_baseline(member: str, problem: AttentionProblem, q, k, v, reference, indices) -> dict:
    """Times one SDPA backend on the problem; "unsupported" if it refuses it ("No available kernel"), "error" for
    any other failure that leaves the CUDA context usable."""
    import torch
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel
    kwargs = {**mask_arguments(problem, q.device), "scale": 1 / math.sqrt(problem.head_dim)}
    if problem.group > 1:
        kwargs["enable_gqa"] = True  # K and V keep their H / group heads: the backend must read them as they are

    def fn():
        return F.scaled_dot_product_attention(q, k, v, **kwargs)

    with warnings.catch_warnings(record=True) as caught, sdpa_kernel([getattr(SDPBackend, member)]):
        warnings.simplefilter("always")
        try:
            out = fn()
            torch.cuda.synchronize()
        except RuntimeError as e:
            if not context_alive():
                raise
            torch.cuda.empty_cache()
            return baseline_refusal(str(e) or type(e).__name__, [str(w.message) for w in caught])
        error = bench_gemm.relative_l2_error(on_units(out, problem, indices), reference)
        del out
        ms = bench_gemm.do_bench(fn)
    note = None
    if not error <= TOLERANCES[problem.dtype]:
        note = f"its own relative L2 error {error:.2e} is over the tolerance"
    return new_baseline("ok", note, ms, problem.figure(ms), finite(error))


def check_and_time(manifest: Manifest, problem: AttentionProblem, q, k, v, reference, indices, r: dict) -> str | None:
    """Runs one schedule, checks it, times it and checks what the timed launches left, filling in `r`; returns
    why it failed, or None."""
    import torch
    with Program(manifest) as program:
        for name, t in (("Q", q), ("K", k), ("V", v)):
            program.tensors[name].copy_(t)
        out = program.run()["out"]  # poisons outputs and workspaces, raises OutputNotWritten on any NaN left
        r["rel_l2_error"] = finite(error := bench_gemm.relative_l2_error(on_units(out, problem, indices), reference))
        if not error <= r["tolerance"]:
            return f"relative L2 error {error:.3e} over the tolerance {r['tolerance']:.0e}"
        r["ours_ms"] = bench_gemm.do_bench(program.launch)
        torch.cuda.synchronize()
        out = program.tensors["out"]
        nans = int(torch.isnan(out).sum().item())
        if nans:
            return f"after timing, the output holds {nans} NaN(s) of {out.numel()}"
        r["rel_l2_error_after_timing"] = finite(
            error := bench_gemm.relative_l2_error(on_units(out, problem, indices), reference))
        if not error <= r["tolerance"]:
            return (f"after timing, relative L2 error {error:.3e} over the tolerance {r['tolerance']:.0e}: the "
                    "result of repeated launches differs from the first")
    return None


def measure_case(case: AttentionCase, generator, gpu: str, date: str, records: list[dict],
                 max_tflop: float | None) -> None:
    """Appends the records of each schedule to `records` as it goes, so that they outlive an exception. A schedule
    that fails (a launch error, a NaN left, an error over its tolerance) is recorded as FAIL and not timed; a
    sticky CUDA error is raised, since nothing after it can run."""
    import torch
    p = case.problem
    dt = torch_dtype(p.dtype)
    q = torch.randn((p.batch, p.heads, p.queries, p.head_dim), generator=generator, device="cuda", dtype=dt)
    k = torch.randn((p.batch, p.kv_heads, p.keys, p.head_dim), generator=generator, device="cuda", dtype=dt)
    v = torch.randn((p.batch, p.kv_heads, p.keys, p.head_dim), generator=generator, device="cuda", dtype=dt)
    indices = reference_units(p, max_tflop)
    started = time.perf_counter()
    reference = math_reference(p, q, k, v, indices)
    torch.cuda.synchronize()
    described = describe_reference(p, indices)
    print(f"  reference: {described}, {time.perf_counter() - started:.1f} s", flush=True)
    baselines = {}
    for name, title, member in BASELINES:
        baselines[name] = b = measure_baseline(member, p, q, k, v, reference, indices)
        shown = f"{b['figure']:.2f} {p.unit}" if b["status"] == "ok" else f"{b['status']}: {b['note']}"
        print(f"  {title}: {shown}" + (f" ({b['note']})" if b["status"] == "ok" and b["note"] else ""), flush=True)
    for manifest in case.manifests:
        r = new_result(p, manifest)
        r.update(reference=described, reference_sliced=len(indices) < p.units)
        try:
            r["failure"] = check_and_time(manifest, p, q, k, v, reference, indices, r)
        except (CudaError, OutputNotWritten) as e:
            r["failure"] = str(e)
            if isinstance(e, CudaError) and e.sticky:
                records.extend(make_records(r, baselines, gpu, date))
                raise
        except Exception as e:  # not a kernel's failure (out of memory, a bug here): recorded, and the run stops
            r["failure"] = f"{type(e).__name__}: {e}"
            records.extend(make_records(r, baselines, gpu, date))
            raise
        if r["failure"]:
            r["ours_ms"] = None
            print(f"  {r['label']}: FAIL: {r['failure']}", flush=True)
        else:
            r.update(status="PASS", ours=p.figure(r["ours_ms"]))
            print(f"  {r['label']}: error {r['rel_l2_error']:.2e}, {r['ours']:.2f} {p.unit}", flush=True)
        records.extend(make_records(r, baselines, gpu, date))
    del q, k, v, reference
    torch.cuda.empty_cache()


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    cases = attention_cases(bench_gemm.select(find_attention_manifests(args.manifests), args.match))
    try:
        import torch
    except ImportError as e:
        print(f"bench_attention: {e}; run this on the GPU machine, where PyTorch and Triton are", file=sys.stderr)
        return 2
    if not torch.cuda.is_available():
        print("bench_attention: no CUDA device visible to PyTorch; run this on the GPU machine", file=sys.stderr)
        return 2
    bench_gemm.set_matmul_precision()
    gpu = torch.cuda.get_device_name()
    date = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
    env = bench_gemm.environment(gpu, date)
    env["cudnn"] = torch.backends.cudnn.version()
    generator = torch.Generator(device="cuda").manual_seed(args.seed)

    def save(records: list[dict], aborted: str | None) -> None:
        mark_best(records)
        write_json(args.out, results_json(records, env, aborted))

    def report(records: list[dict]) -> None:
        print(format_table(records))
        print(format_summary(records, gpu, date, env["command"]))
        print("rows for bench/RESULTS.md:")
        print(format_markdown(records))
        print(f"results: {args.out}")

    records = bench_gemm.measure_all(
        cases, lambda case: f"{case.problem.family} {case.problem.name} {case.problem.dtype}: "
        f"{len(case.manifests)} schedule(s)",
        lambda case, records: measure_case(case, generator, gpu, date, records, args.reference_max_tflop), save,
        report)
    return 1 if any(r["status"] != "PASS" for r in records) else 0


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv[1:]))
    except ManifestError as e:
        print(f"bench_attention: {e}", file=sys.stderr)
        sys.exit(2)
