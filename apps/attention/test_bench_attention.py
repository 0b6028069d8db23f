"""Tests of the parts of the attention benchmark that need no GPU and no PyTorch: reading and checking manifests
(also real ones from `twist export attention`, when the binary is built), grouping, flop and byte accounting, the
reference's slices and chunks, records, the best schedule, geometric means, tables, JSON, the arguments, and what
bench/export_attention_suite.sh asks the tool for. Run from the repository root:

    python3 -m unittest apps/attention/test_bench_attention.py
"""
import contextlib
import io
import json
import math
import os
import subprocess
import sys
import tempfile
import types
import unittest
from unittest import mock
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import bench_attention as ba  # noqa: E402
from twist.runtime import ManifestError, load_manifest  # noqa: E402  (on the path bench_gemm set)
from test_bench_support import ManifestDir  # noqa: E402  (the GEMM tests' folder of manifests)

REPO = ba.REPO
LOG2E = math.log2(math.e)


def attention_manifest(b, h, s, l, d, dtype="f16", causal=False, group=1, decode=False, split_kv=1,
                       schedule=None, label=None):
    """A manifest as `twist export attention` writes one (apps/twist/main.cpp,
    backends/cuda/program/export_program.cpp), without a real cubin."""
    op = "decode" if decode else "attention"
    schedule = schedule or f"flash_128x64_s2{f'_splitkv{split_kv}' if split_kv > 1 else ''}"
    shape = f"B{b}_H{h}_S{s}_L{l}_D{d}"
    label = label or (f"{op}_{dtype}_{shape}{'_causal' if causal else ''}{f'_gqa{group}' if group > 1 else ''}_"
                      f"{schedule}")
    hk = h // group
    scalars = [{"scalar": "H", "dtype": "i32", "value": h}, {"scalar": "B", "dtype": "i32", "value": b}]
    if not decode:
        scalars.append({"scalar": "S", "dtype": "i32", "value": s})
    scalars += [{"scalar": "L", "dtype": "i32", "value": l},
                {"scalar": "qk_scale", "dtype": "f32", "value": LOG2E / math.sqrt(d)}]
    buffers = [{"name": "Q", "dtype": dtype, "shape": [b, h, s, d], "role": "input"},
               {"name": "K", "dtype": dtype, "shape": [b, hk, l, d], "role": "input"},
               {"name": "V", "dtype": dtype, "shape": [b, hk, l, d], "role": "input"},
               {"name": "out", "dtype": dtype, "shape": [b, h, s, d], "role": "output"}]
    io_args = [{"buffer": "Q"}, {"buffer": "K"}, {"buffer": "V"}]
    if split_kv > 1:
        parts = [f"O.partial.{c}" for c in "mlo"]
        buffers += [{"name": n, "dtype": "f32", "shape": [split_kv, b, h, s, d], "role": "workspace"} for n in parts]
        kernels = [{"name": "out_parts", "cubin": f"{label}.out_parts.cubin", "grid": [1, b * hk, split_kv],
                    "block": 32, "shared_bytes": 49408, "registers": 204, "spill_bytes": 0,
                    "args": io_args + [{"buffer": n} for n in parts] + scalars},
                   {"name": "out", "cubin": f"{label}.out.cubin", "grid": [16, 1, 1], "block": 256, "shared_bytes": 0,
                    "registers": 72, "spill_bytes": 0,
                    "args": [{"buffer": n} for n in reversed(parts)] + [{"buffer": "out"}] + scalars[1::-1]}]
    else:
        kernels = [{"name": "out", "cubin": f"{label}.out.cubin", "grid": [-(-s // 128), b * h, 1], "block": 256,
                    "shared_bytes": 98304, "registers": 255, "spill_bytes": 0,
                    "args": io_args + [{"buffer": "out"}] + scalars}]
    return {"label": label, "arch": "sm_90a", "causal": "true" if causal else "false", "dtype": dtype,
            "group": str(group), "op": op, "schedule": schedule, "shape": shape, "buffers": buffers,
            "kernels": kernels}


class ProblemTest(unittest.TestCase):
    def setUp(self):
        self.dir = ManifestDir()
        self.addCleanup(self.dir.close)

    def load(self, data):
        return load_manifest(self.dir.add(data))

    def problem(self, *args, **kwargs):
        return ba.attention_problem(self.load(attention_manifest(*args, **kwargs)))

    def test_prefill_from_notes_and_buffers(self):
        p = self.problem(4, 16, 4096, 4096, 128, causal=True)
        self.assertEqual((p.op, p.family, p.dtype, p.batch, p.heads, p.queries, p.keys, p.head_dim, p.group, p.causal),
                         ("attention", "prefill", "f16", 4, 16, 4096, 4096, 128, 1, True))
        self.assertEqual(p.shape, "B4_H16_S4096_L4096_D128")
        self.assertEqual(p.name, "B4 H16 S4096 L4096 D128 causal")
        self.assertTrue(p.reference_is_causal)
        # baseline.py's count: 4 B H S L D, halved for causal; the README's 297 TFLOP/s FA2 causal figure is this
        # count over the time.
        self.assertEqual(p.flops, 4 * 4 * 16 * 4096 * 4096 * 128 * 0.5)
        self.assertEqual(p.unit, "TFLOP/s")
        self.assertAlmostEqual(p.figure(1.0), p.flops / 1e9)
        self.assertEqual(self.problem(4, 16, 4096, 4096, 128).flops, 4 * 4 * 16 * 4096 * 4096 * 128)
        self.assertEqual(self.problem(4, 16, 4096, 4096, 128, dtype="bf16").dtype, "bf16")

    def test_a_sliding_window_counts_the_pairs_it_keeps(self):
        data = attention_manifest(1, 32, 4096, 4096, 256, dtype="bf16", causal=True, group=2)
        data["window"] = "1024"
        p = ba.attention_problem(self.load(data))
        self.assertEqual((p.window, p.name), (1024, "B1 H32 S4096 L4096 D256 causal window1024 GQA2"))
        # Row i keeps min(i + 1, 1024) keys: 1024 * 1025 / 2 for the first 1024 rows, 1024 for each after.
        self.assertEqual(p.flops, 4 * 32 * 256 * (1024 * 1025 // 2 + 3072 * 1024))
        plain = attention_manifest(1, 2, 512, 512, 64)
        plain["window"] = "64"
        with self.assertRaises(ManifestError) as caught:
            ba.attention_problem(self.load(plain))
        self.assertIn("causal prefill with S == L only", str(caught.exception))

    def test_decode_counts_bytes_of_k_and_v(self):
        p = self.problem(1, 32, 1, 131072, 128, decode=True, split_kv=9)
        self.assertEqual((p.family, p.queries, p.kv_heads, p.units, p.unit), ("decode", 1, 32, 32, "TB/s"))
        self.assertEqual(p.name, "B1 H32 L131072 D128")
        self.assertEqual(p.kv_bytes, 2 * 32 * 131072 * 128 * 2)
        self.assertAlmostEqual(p.figure(1.0), p.kv_bytes / 1e9)
        # As baseline.py measured: 2 * k.numel() * 2 bytes over the time; 3.81 TB/s is 0.564 ms here.
        self.assertAlmostEqual(p.figure(p.kv_bytes / 3.81e9), 3.81)
        g = self.problem(1, 32, 1, 131072, 128, decode=True, group=4, split_kv=33)
        self.assertEqual((g.group, g.kv_heads, g.units, g.name), (4, 8, 8, "B1 H32 L131072 D128 GQA4"))
        self.assertEqual(g.kv_bytes, p.kv_bytes // 4)  # K and V have 8 heads: a quarter of the bytes
        self.assertFalse(g.reference_is_causal)

    def test_causal_decode_has_no_mask(self):
        # Bottom-right alignment keeps keys j <= 0 + L - 1 for the one query: all of them.
        p = self.problem(2, 4, 1, 3000, 128, decode=True, causal=True, split_kv=4)
        self.assertTrue(p.causal)
        self.assertFalse(p.reference_is_causal)
        self.assertEqual(p.flops, 4 * 2 * 4 * 3000 * 128)

    def assertRefused(self, data, *fragments):
        with self.assertRaises(ManifestError) as caught:
            ba.attention_problem(self.load(data))
        for f in fragments:
            self.assertIn(f, str(caught.exception))

    def test_refusals(self):
        bad = attention_manifest(1, 2, 256, 256, 64, label="a")
        bad["shape"] = "1x2x256x256x64"
        self.assertRefused(bad, "expected B<b>_H<h>_S<s>_L<l>_D<d>")
        bad = attention_manifest(1, 2, 256, 256, 64, label="b")
        bad["dtype"] = "f32"
        self.assertRefused(bad, "dtype 'f32' has no tolerance")
        bad = attention_manifest(1, 2, 256, 256, 64, label="c")
        bad["buffers"][1]["shape"] = [1, 1, 256, 64]
        self.assertRefused(bad, "buffer 'K' is input f16 [1, 1, 256, 64]", "needs input f16 [1, 2, 256, 64]")
        bad = attention_manifest(1, 2, 256, 256, 64, label="d")
        bad["buffers"][3]["dtype"] = "f32"
        self.assertRefused(bad, "buffer 'out' is output f32")
        bad = attention_manifest(1, 2, 256, 256, 64, label="e")
        bad["kernels"][0]["args"][-1]["value"] = 0.125
        self.assertRefused(bad, "qk_scale = 0.125", "1/sqrt(64)")
        bad = attention_manifest(1, 2, 256, 256, 64, label="f")
        bad["kernels"][0]["args"][-2]["value"] = 512
        self.assertRefused(bad, "passes L = 512, but the shape note says 256")
        bad = attention_manifest(1, 2, 256, 256, 64, label="g")
        bad["buffers"].append({"name": "slopes", "dtype": "f32", "shape": [2], "role": "input"})
        self.assertRefused(bad, "input 'slopes' is none of Q, K, V, out")
        self.assertRefused(attention_manifest(1, 2, 128, 256, 64, causal=True, label="h"), "causal with S = 128",
                           "bottom right")
        bad = attention_manifest(1, 2, 4, 256, 64, decode=True, label="i")
        self.assertRefused(bad, "one query per head", "S = 4")
        bad = attention_manifest(1, 6, 1, 256, 64, decode=True, group=3, label="j")
        bad["group"] = "4"
        self.assertRefused(bad, "group 4 does not divide the 6 query heads")
        bad = attention_manifest(1, 2, 256, 256, 64, label="k")
        bad["causal"] = "yes"
        self.assertRefused(bad, "expected true or false")
        bad = attention_manifest(1, 2, 256, 256, 64, label="l")
        bad["op"] = "gemm"
        self.assertRefused(bad, "op 'gemm'")
        bad = attention_manifest(1, 2, 256, 256, 64, label="m")
        del bad["buffers"][2]
        bad["kernels"][0]["args"] = [a for a in bad["kernels"][0]["args"] if a.get("buffer") != "V"]
        self.assertRefused(bad, "no buffer named 'V'")

    def test_cases_group_and_order(self):
        manifests = [self.load(attention_manifest(1, 32, 1, 131072, 128, decode=True, split_kv=9)),
                     self.load(attention_manifest(4, 16, 4096, 4096, 128, dtype="bf16")),
                     self.load(attention_manifest(4, 16, 4096, 4096, 128, causal=True)),
                     self.load(attention_manifest(4, 16, 4096, 4096, 128)),
                     self.load(attention_manifest(4, 16, 4096, 4096, 128, schedule="flash_128x32_s2")),
                     self.load(attention_manifest(1, 8, 4096, 4096, 64)),
                     self.load(attention_manifest(1, 32, 1, 131072, 128, decode=True, group=4, split_kv=33))]
        cases = ba.attention_cases(manifests)
        self.assertEqual([(c.problem.family, c.problem.name, c.problem.dtype, len(c.manifests)) for c in cases], [
            ("prefill", "B1 H8 S4096 L4096 D64", "f16", 1),
            ("prefill", "B4 H16 S4096 L4096 D128", "f16", 2),
            ("prefill", "B4 H16 S4096 L4096 D128 causal", "f16", 1),
            ("prefill", "B4 H16 S4096 L4096 D128", "bf16", 1),
            ("decode", "B1 H32 L131072 D128", "f16", 1),
            ("decode", "B1 H32 L131072 D128 GQA4", "f16", 1)])
        self.assertEqual([m.notes["schedule"] for m in cases[1].manifests], ["flash_128x64_s2", "flash_128x32_s2"])

    def test_find_and_select(self):
        self.dir.add(attention_manifest(1, 8, 4096, 4096, 64))
        self.dir.add(attention_manifest(1, 8, 1, 32768, 128, decode=True, split_kv=33))
        gemm = attention_manifest(1, 1, 1, 1, 1, label="gemm_f16_1x1x1")
        gemm["op"] = "gemm"
        self.dir.add(gemm)
        found = ba.find_attention_manifests(self.dir.path)
        self.assertEqual([m.notes["op"] for m in found], ["attention", "decode"])
        self.assertEqual([m.label for m in ba.bench_gemm.select(found, ba.re.compile("decode"))], [found[1].label])
        with self.assertRaises(ManifestError):
            ba.bench_gemm.select(found, ba.re.compile("bf16"))
        with self.assertRaises(ManifestError) as caught:
            ba.find_attention_manifests(self.dir.path / "missing")
        self.assertIn("export_attention_suite.sh", str(caught.exception))
        with tempfile.TemporaryDirectory() as empty:
            with self.assertRaises(ManifestError) as caught:
                ba.find_attention_manifests(Path(empty))
            self.assertIn("no manifests with \"op\": \"attention\" or \"decode\"", str(caught.exception))


class ReferenceTest(unittest.TestCase):
    def problem(self, b, h, s, l, d, group=1, causal=False):
        return ba.AttentionProblem("decode" if s == 1 else "attention", "f16", b, h, s, l, d, group, causal)

    def test_the_whole_suite_gets_a_full_reference_by_default(self):
        for p in (self.problem(1, 16, 16384, 16384, 128, causal=True), self.problem(2, 16, 8192, 8192, 128),
                  self.problem(4, 16, 4096, 4096, 256), self.problem(1, 32, 1, 131072, 128, group=4)):
            self.assertEqual(ba.reference_units(p, ba.DEFAULT_REFERENCE_MAX_TFLOP), list(range(p.units)), p.name)
            self.assertNotIn("slice", ba.describe_reference(p, list(range(p.units))))

    def test_slices_spread_from_first_to_last(self):
        p = self.problem(1, 16, 16384, 16384, 128)  # 0.137 TFLOP per head
        self.assertEqual(p.reference_flop_per_unit, 4 * 16384 * 16384 * 128)
        five = ba.reference_units(p, 5 * p.reference_flop_per_unit / 1e12 + 1e-9)
        self.assertEqual(five, [0, 4, 8, 11, 15])
        self.assertEqual(ba.reference_units(p, 1e-6), [0])
        self.assertEqual(ba.reference_units(p, 2 * p.reference_flop_per_unit / 1e12 + 1e-9), [0, 15])
        self.assertEqual(ba.reference_units(p, None), list(range(16)))
        self.assertIn("5 of 16 (batch, kv-head) pairs (a slice", ba.describe_reference(p, five))
        # Grouped-query: a unit is one key/value head and its `group` query heads.
        g = self.problem(2, 32, 1, 131072, 128, group=4)
        self.assertEqual((g.units, g.reference_flop_per_unit), (16, 4 * 4 * 131072 * 128))

    def test_chunks_bound_memory(self):
        p = self.problem(1, 16, 16384, 16384, 128)
        self.assertGreaterEqual(p.reference_bytes_per_unit, 16384 * 16384 * 4)  # the scores alone are 1 GiB
        self.assertEqual(ba.chunks(list(range(16)), p.reference_bytes_per_unit), [[i] for i in range(16)])
        small = self.problem(16, 16, 1024, 1024, 64)
        per = ba.REFERENCE_CHUNK_BYTES // small.reference_bytes_per_unit
        got = ba.chunks(list(range(256)), small.reference_bytes_per_unit)
        self.assertEqual(sum(got, []), list(range(256)))
        self.assertTrue(all(len(c) <= per for c in got) and len(got[0]) == per)
        self.assertEqual(ba.chunks([3, 9], 10, budget=5), [[3], [9]])

    def test_units_view_pairs_query_heads_with_their_kv_head(self):
        class Shape:
            def __init__(self, *shape):
                self.shape = shape

            def reshape(self, *shape):
                return shape

        p = self.problem(2, 32, 1, 1024, 128, group=4)
        # [B, H, S, D] as [B * H / group, group, S, D]: heads 4u .. 4u + 3 of pair u = b * 8 + h // 4 share kv head
        # u: the kernels' h / group.
        self.assertEqual(ba.by_unit(Shape(2, 32, 1, 128), p), (16, 4, 1, 128))
        self.assertEqual(ba.by_unit(Shape(2, 8, 1024, 128), p), (16, 1, 1024, 128))


def ours(label, family, name, dtype, ms, figure, status="PASS", causal=False, group=1, schedule="flash_128x64_s2"):
    unit = ba.UNITS[family]
    return {"label": label, "op": "attention" if family == "prefill" else "decode", "family": family,
            "shape": name.replace(" ", "_"), "name": name, "causal": causal, "group": group, "dtype": dtype,
            "schedule": schedule, "kernels": [{"name": "out", "registers": 255, "spill_bytes": 0}], "blocks": 2048,
            "tolerance": 2e-3, "reference": "64 of 64 (batch, kv-head) pairs", "reference_sliced": False,
            "rel_l2_error": 4e-4 if status == "PASS" else 0.9, "status": status,
            "failure": None if status == "PASS" else "relative L2 error 9.000e-01 over the tolerance 2e-03",
            "ours_ms": ms if status == "PASS" else None, "ours": figure if status == "PASS" else None, "unit": unit}


def baselines(flash, cudnn, efficient=None):
    def one(figure):
        if figure is None:
            return ba.new_baseline("unsupported", "No available kernel. Aborting execution. (Flash attention does not "
                                   "support this)")
        return ba.new_baseline("ok", None, 1.0, figure, 5e-4)
    return {"sdpa_flash": one(flash), "sdpa_cudnn": one(cudnn), "sdpa_efficient": one(efficient)}


class RecordsTest(unittest.TestCase):
    def records(self):
        gpu, date = "NVIDIA H200", "2026-12-02T10:00:00+00:00"
        out = []
        for r, b in [(ours("p1", "prefill", "B4 H16 S4096 L4096 D128", "f16", 2.0, 300.0), baselines(336.0, 586.0)),
                     (ours("p2", "prefill", "B4 H16 S4096 L4096 D128", "f16", 1.5, 400.0, schedule="flash_128x32_s2"),
                      baselines(336.0, 586.0)),
                     (ours("p3", "prefill", "B4 H16 S4096 L4096 D256", "f16", 1.0, 500.0, status="FAIL"),
                      baselines(None, 400.0)),
                     (ours("p4", "prefill", "B4 H16 S4096 L4096 D256", "f16", 3.0, 200.0, schedule="flash_128x32_s3"),
                      baselines(None, 400.0)),
                     (ours("d1", "decode", "B1 H32 L131072 D128", "f16", 0.6, 3.0), baselines(3.81, 4.30)),
                     (ours("d2", "decode", "B1 H32 L131072 D128 GQA4", "f16", 0.2, 2.0, group=4),
                      baselines(2.5, None))]:
            out += ba.make_records(r, b, gpu, date)
        ba.mark_best(out)
        return out

    def test_one_record_per_schedule_and_baseline(self):
        records = self.records()
        self.assertEqual(len(records), 18)  # 6 schedules x 3 baselines
        first = records[0]
        for key in ("shape", "dtype", "schedule", "ours", "unit", "baseline", "baseline_figure", "ratio", "gpu", "date",
                    "kernels", "rel_l2_error", "status"):
            self.assertIn(key, first)
        self.assertEqual([(r["baseline"], r["baseline_figure"]) for r in records[:3]],
                         [("sdpa_flash", 336.0), ("sdpa_cudnn", 586.0), ("sdpa_efficient", None)])
        self.assertAlmostEqual(records[0]["ratio"], 300 / 336)
        self.assertEqual(records[0]["kernels"][0]["registers"], 255)
        unsupported = records[6]
        self.assertEqual((unsupported["baseline_status"], unsupported["ratio"]), ("unsupported", None))
        self.assertIsNone(records[7]["ratio"])  # our schedule failed: no ratio even though cuDNN ran
        missing = ba.make_records(ours("x", "prefill", "B1", "f16", 1.0, 1.0), {}, "g", "d")
        self.assertEqual([r["baseline_status"] for r in missing], ["error", "error", "error"])

    def test_best_and_geometric_means(self):
        records = self.records()
        self.assertEqual({r["label"] for r in records if r["best"]}, {"p2", "p4", "d1", "d2"})
        means = ba.geomean_ratios(records)
        self.assertAlmostEqual(means["prefill"]["sdpa_flash"]["geomean"], 400 / 336)
        self.assertEqual(means["prefill"]["sdpa_flash"]["problems"], 1)  # FA2 refused D256
        self.assertAlmostEqual(means["prefill"]["sdpa_cudnn"]["geomean"], math.sqrt(400 / 586 * 200 / 400))
        self.assertAlmostEqual(means["decode"]["sdpa_flash"]["geomean"], math.sqrt(3.0 / 3.81 * 2.0 / 2.5))
        self.assertAlmostEqual(means["decode"]["sdpa_cudnn"]["geomean"], 3.0 / 4.30)
        self.assertEqual(means["decode"]["sdpa_cudnn"]["problems"], 1)
        failed_only = ba.make_records(ours("f", "decode", "B8", "f16", 1, 1, status="FAIL"), baselines(1.0, 1.0),
                                      "g", "d")
        ba.mark_best(failed_only)
        self.assertFalse(any(r["best"] for r in failed_only))
        self.assertIsNone(ba.geomean_ratios(failed_only)["decode"]["sdpa_flash"]["geomean"])
        self.assertNotIn("prefill", ba.geomean_ratios(failed_only))

    def test_table_summary_markdown_and_json(self):
        records = self.records()
        table = ba.format_table(records)
        lines = table.splitlines()
        self.assertTrue(lines[0].startswith("prefill (TFLOP/s;"))
        self.assertTrue(lines[1].startswith("problem"))
        self.assertIn("FA2", lines[1])
        self.assertIn("/cuDNN", lines[1])
        row = next(line for line in lines if "flash_128x32_s2" in line)
        self.assertIn("400.0", row)
        self.assertIn("336.0", row)
        self.assertIn("1.190", row)
        self.assertIn("0.683", row)
        self.assertTrue(row.endswith("PASS best"))
        d256 = next(line for line in lines if "flash_128x32_s3" in line)
        self.assertIn("unsup.", d256)
        self.assertIn("decode (TB/s;", table)
        self.assertIn("3.00", next(line for line in lines if line.startswith("B1 H32 L131072 D128 ")))
        self.assertIn("FAIL p3: relative L2 error", table)
        self.assertEqual(table.count("FA2 unsupported for B4 H16 S4096 L4096 D256 f16"), 1)
        summary = ba.format_summary(records, "NVIDIA H200", "2026-12-02", "python3 apps/attention/bench_attention.py d")
        self.assertIn("prefill: geometric mean", summary)
        self.assertIn("vs FA2 1.190 over 1", summary)
        self.assertIn("6 schedule(s), 1 failed (the exit status is 1)", summary)
        self.assertIn("GPU: NVIDIA H200", summary)
        self.assertIn("command: python3 apps/attention/bench_attention.py d", summary)
        markdown = ba.format_markdown(records).splitlines()
        self.assertEqual(len(markdown), 2 + 4)
        self.assertEqual(markdown[0].count("|"), markdown[1].count("|"))
        self.assertEqual(markdown[0].count("|"), markdown[2].count("|"))
        self.assertIn("| prefill | B4 H16 S4096 L4096 D128 | f16 | flash_128x32_s2 | 255 | 400.0 TFLOP/s | 336.0 |",
                      markdown[2])
        with tempfile.TemporaryDirectory() as d:
            path = Path(d) / "results" / "attention.json"
            ba.write_json(path, ba.results_json(records, {"gpu": "NVIDIA H200"}, None))
            data = json.loads(path.read_text())
        self.assertEqual(data["benchmark"], "attention")
        self.assertEqual(data["timing"], {"method": "triton.testing.do_bench", "warmup_ms": 25, "rep_ms": 100,
                                          "return_mode": "median"})
        self.assertEqual(data["baselines"]["sdpa_cudnn"], "SDPBackend.CUDNN_ATTENTION")
        self.assertEqual(len(data["records"]), 18)
        self.assertAlmostEqual(data["geomean_ratio_best"]["decode"]["sdpa_cudnn"]["geomean"], 3.0 / 4.30)

    def test_baseline_refusals(self):
        b = ba.baseline_refusal("No available kernel. Aborting execution.",
                                ["Flash attention kernel not used because:", "Flash attention does not support\n"
                                 "  head dimension 512", "Flash attention kernel not used because:"])
        self.assertEqual(b["status"], "unsupported")
        self.assertEqual(b["note"], "No available kernel. Aborting execution. (Flash attention kernel not used "
                                    "because:; Flash attention does not support head dimension 512)")
        self.assertIsNone(b["figure"])
        b = ba.baseline_refusal("cuDNN Frontend error: no execution plan\nmore lines", [])
        self.assertEqual((b["status"], b["note"]), ("error", "cuDNN Frontend error: no execution plan"))
        self.assertEqual(len(ba.baseline_refusal("x" * 1000, [])["note"]), ba.NOTE_CHARS)
        self.assertEqual(ba.baseline_refusal("", [])["note"], "(no message)")

    def test_json_refuses_nan(self):
        self.assertIsNone(ba.finite(float("nan")))
        self.assertIsNone(ba.finite(float("inf")))
        self.assertEqual(ba.finite(1e-3), 1e-3)
        with tempfile.TemporaryDirectory() as d, self.assertRaises(ValueError):
            ba.write_json(Path(d) / "x.json", {"x": float("nan")})

    def test_arguments(self):
        args = ba.parse_args([".gpu/manifests/attention", "--out", "/tmp/a.json", "--match", "decode"])
        self.assertEqual((args.manifests, args.out, args.seed), (Path(".gpu/manifests/attention"), Path("/tmp/a.json"),
                                                                 0))
        self.assertEqual(args.reference_max_tflop, ba.DEFAULT_REFERENCE_MAX_TFLOP)
        self.assertEqual(ba.parse_args(["d"]).out, REPO / "bench/results/attention.json")
        with self.assertRaises(SystemExit), contextlib.redirect_stderr(io.StringIO()) as err:
            ba.parse_args(["d", "--reference-max-tflop", "0"])
        self.assertIn("must be positive", err.getvalue())


class FakeProgram:
    """Stands in for twist.runtime.Program: `fail` is raised by run() when given."""

    def __init__(self, manifest, fail=None):
        self.manifest, self.fail = manifest, fail
        self.tensors = {b.name: mock.MagicMock(name=b.name) for b in manifest.buffers}
        self.launches = 0

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def run(self):
        if self.fail:
            raise self.fail
        return {"out": self.tensors["out"]}

    def launch(self):
        self.launches += 1


class GpuFlowTest(unittest.TestCase):
    """The GPU half's wiring, with PyTorch, Triton and the launcher replaced by mocks: what is called with what,
    and what lands in the records. The numerics themselves can only be checked on the GPU machine."""

    def setUp(self):
        self.dir = ManifestDir()
        self.addCleanup(self.dir.close)
        self.backend = None
        self.calls = []
        torch = mock.MagicMock(name="torch")
        torch.isnan.return_value.sum.return_value.item.return_value = 0
        attention = types.SimpleNamespace(SDPBackend=types.SimpleNamespace(
            MATH="MATH", FLASH_ATTENTION="FLASH_ATTENTION", CUDNN_ATTENTION="CUDNN_ATTENTION",
            EFFICIENT_ATTENTION="EFFICIENT_ATTENTION"), sdpa_kernel=self.kernel)
        functional = types.SimpleNamespace(scaled_dot_product_attention=self.sdpa)
        torch.nn.functional, torch.nn.attention = functional, attention
        modules = {"torch": torch, "torch.nn": torch.nn, "torch.nn.functional": functional,
                   "torch.nn.attention": attention}
        for patch in (mock.patch.dict(sys.modules, modules),
                      mock.patch.object(ba.bench_gemm, "relative_l2_error", return_value=3e-4),
                      mock.patch.object(ba.bench_gemm, "do_bench", return_value=0.5)):
            patch.start()
            self.addCleanup(patch.stop)

    @contextlib.contextmanager
    def kernel(self, backends):
        (self.backend,) = backends
        try:
            yield
        finally:
            self.backend = None

    def sdpa(self, q, k, v, **kwargs):
        self.calls.append((self.backend, kwargs))
        if self.backend == "CUDNN_ATTENTION":
            raise RuntimeError("No available kernel. Aborting execution.")
        return mock.MagicMock(name=f"{self.backend} out")

    def test_records_of_a_grouped_query_decode(self):
        manifests = [load_manifest(self.dir.add(attention_manifest(1, 32, 1, 131072, 128, decode=True, group=4,
                                                                   split_kv=33, schedule=s)))
                     for s in ("flash_128x32_s3_splitkv33", "flash_128x64_s3_splitkv33")]
        (case,) = ba.attention_cases(manifests)
        records = []
        sticky = ba.CudaError("cuLaunchKernel failed with CUDA_ERROR_ILLEGAL_ADDRESS", 700)
        programs = iter([lambda m: FakeProgram(m), lambda m: FakeProgram(m, fail=sticky)])
        with mock.patch.object(ba, "Program", side_effect=lambda m: next(programs)(m)), \
                contextlib.redirect_stdout(io.StringIO()) as printed, self.assertRaises(ba.CudaError):
            ba.measure_case(case, None, "NVIDIA H200", "2026-12-02", records, ba.DEFAULT_REFERENCE_MAX_TFLOP)
        # The reference: math attention on fp32 copies, 1 (batch, kv-head) pair a chunk (0.5 GiB each), no mask;
        # then each baseline with enable_gqa, the same scale and no mask.
        math_calls = [c for c in self.calls if c[0] == "MATH"]
        self.assertEqual(len(math_calls), 8)
        self.assertEqual(math_calls[0][1], {"is_causal": False, "scale": 1 / math.sqrt(128)})
        self.assertEqual([c for c in self.calls if c[0] != "MATH"], [
            ("FLASH_ATTENTION", {"is_causal": False, "scale": 1 / math.sqrt(128), "enable_gqa": True}),
            ("CUDNN_ATTENTION", {"is_causal": False, "scale": 1 / math.sqrt(128), "enable_gqa": True}),
            ("EFFICIENT_ATTENTION", {"is_causal": False, "scale": 1 / math.sqrt(128), "enable_gqa": True})])
        self.assertIn("reference: 8 of 8 (batch, kv-head) pairs", printed.getvalue())
        # Three records per schedule, the second schedule's kept although its sticky error stopped the run.
        self.assertEqual([(r["schedule"], r["baseline"]) for r in records], [
            (s, b) for s in ("flash_128x32_s3_splitkv33", "flash_128x64_s3_splitkv33")
            for b in ("sdpa_flash", "sdpa_cudnn", "sdpa_efficient")])
        ok, refused, failed = records[0], records[1], records[3]
        p = case.problem
        self.assertEqual((ok["status"], ok["ours_ms"], ok["rel_l2_error"], ok["rel_l2_error_after_timing"]),
                         ("PASS", 0.5, 3e-4, 3e-4))
        self.assertAlmostEqual(ok["ours"], p.kv_bytes / 0.5 / 1e9)
        self.assertEqual((ok["baseline_status"], ok["baseline_ms"], ok["ratio"]), ("ok", 0.5, 1.0))
        self.assertEqual((refused["baseline_status"], refused["ratio"]), ("unsupported", None))
        self.assertIn("No available kernel", refused["baseline_note"])
        self.assertEqual(failed["status"], "FAIL")
        self.assertIn("ILLEGAL_ADDRESS", failed["failure"])

    def test_causal_prefill_over_tolerance_is_not_timed(self):
        (case,) = ba.attention_cases([load_manifest(self.dir.add(attention_manifest(1, 2, 512, 512, 64,
                                                                                    causal=True)))])
        records = []
        with mock.patch.object(ba, "Program", side_effect=FakeProgram), \
                mock.patch.object(ba.bench_gemm, "relative_l2_error", side_effect=[4e-4, 4e-4, 0.3]), \
                contextlib.redirect_stdout(io.StringIO()):
            ba.measure_case(case, None, "g", "d", records, ba.DEFAULT_REFERENCE_MAX_TFLOP)
        self.assertEqual(self.calls[0], ("MATH", {"is_causal": True, "scale": 1 / 8}))
        self.assertEqual(self.calls[1], ("FLASH_ATTENTION", {"is_causal": True, "scale": 1 / 8}))
        # FA2's and MemEff's errors (cuDNN refuses), then ours: over the tolerance, so no timing and no second check.
        r = records[0]
        self.assertEqual((r["status"], r["ours_ms"], r["ratio"]), ("FAIL", None, None))
        self.assertIsNone(r["rel_l2_error_after_timing"])
        self.assertEqual(r["failure"], "relative L2 error 3.000e-01 over the tolerance 2e-03")
        self.assertEqual(r["baseline_rel_l2_error"], 4e-4)


SUITE = REPO / "bench/export_attention_suite.sh"
# A stand-in for the twist binary: records each export's flags as a JSON list in OUT_DIR.
STUB = """#!/usr/bin/env python3
import json, pathlib, sys
args = sys.argv[1:]
if args[:2] != ["export", "attention"] or "--out" not in args:
    sys.exit("twist: twist export attention needs --out DIR")
out = pathlib.Path(args[args.index("--out") + 1])
n = len(list(out.glob("*.json")))
(out / f"{n:03}.json").write_text(json.dumps(args[2:]))
print(out / f"{n:03}.json")
"""


class ExportSuiteTest(unittest.TestCase):
    """What bench/export_attention_suite.sh asks the tool for, with a stub in place of the binary."""

    def run_suite(self, out, twist):
        return subprocess.run(["bash", str(SUITE), str(out), str(twist)], capture_output=True, text=True, cwd=REPO)

    def test_exports(self):
        with tempfile.TemporaryDirectory() as d:
            stub = Path(d) / "twist"
            stub.write_text(STUB)
            stub.chmod(0o755)
            done = self.run_suite(Path(d) / "suite", stub)
            self.assertEqual(done.returncode, 0, done.stderr)
            self.assertIn("107 manifests", done.stdout)
            exports = []
            for path in sorted((Path(d) / "suite").glob("*.json")):
                flags = json.loads(path.read_text())
                values = dict(zip(flags[::2], flags[1::2]))
                exports.append(values)
            # Gemma 4's problems (bf16 with grouped-query heads) apart from the suite's.
            gemma = [e for e in exports if e.get("--group", "1") != "1" and e["--dtype"] == "bf16"]
            self.assertEqual(sorted((e["--shape"], e["--group"], e.get("--window")) for e in gemma), sorted([
                ("1x32x4096x4096x256", "2", "1024"), ("1x32x2048x2048x512", "8", None),
                ("1x32x8192x8192x512", "8", None), ("1x32x1x1024x256", "2", None), ("1x32x1x4096x512", "8", None),
                ("1x32x1x32768x512", "8", None)]))
            self.assertTrue(all(e.get("--rule") == "true" for e in gemma))
            self.assertTrue(all(e.get("--causal") == "true" and e.get("--atom") == "wgmma"
                                for e in gemma if "--decode" not in e))
            exports = [e for e in exports if e not in gemma]
            prefill = [e for e in exports if "--decode" not in e]
            decode = [e for e in exports if e.get("--decode") == "true"]
            self.assertEqual(len(prefill), 85)
            self.assertTrue(all(e.get("--atom") == "wgmma" for e in prefill))
            # The rule's tiling on a persistent grid (with a producer warpgroup) at every problem of the suite.
            persistent = [e for e in prefill if e.get("--persistent") == "true"]
            self.assertTrue(all(e.get("--rule") == "true" and e.get("--warp-specialize") == "true"
                                for e in persistent))
            self.assertEqual(sorted((e["--shape"], e["--dtype"], e["--causal"]) for e in persistent), sorted([
                ("1x8x4096x4096x64", "f16", "false"), ("4x16x4096x4096x128", "f16", "false"),
                ("4x16x4096x4096x128", "f16", "true"), ("2x16x8192x8192x128", "f16", "false"),
                ("16x16x1024x1024x64", "f16", "false"), ("1x16x16384x16384x128", "f16", "true"),
                ("4x16x4096x4096x256", "f16", "false"), ("4x16x4096x4096x128", "bf16", "false"),
                ("4x16x4096x4096x128", "bf16", "true")]))
            prefill = [e for e in prefill if e not in persistent]
            # The block order at the three causal D 128 problems: the rule's tiling in the launch order, and the
            # warp-specialized forms (the overlapped S, a producer alone) longest first.
            ordered = [e for e in prefill if "--longest-first" in e]
            per_problem = {}
            for e in ordered:
                per_problem.setdefault((e["--shape"], e["--dtype"]), []).append(
                    (e.get("--rule"), e["--longest-first"], e.get("--overlap"), e.get("--warp-specialize")))
            for problem in [("4x16x4096x4096x128", "f16"), ("1x16x16384x16384x128", "f16"),
                            ("4x16x4096x4096x128", "bf16")]:
                self.assertEqual(sorted(per_problem.pop(problem), key=str), sorted([
                    ("true", "false", None, None), (None, "true", "true", "true"), (None, "true", None, "true")],
                    key=str), problem)
            self.assertEqual(per_problem, {})
            self.assertTrue(all(e["--causal"] == "true" for e in ordered))
            prefill = [e for e in prefill if e not in ordered]
            # The delayed column products in ping-pong at every problem of the suite: D 64 on 128-key tiles, D 128
            # on 128-key tiles with 2 and 3 slots (and 176- and 160-key tiles without a causal mask), D 256 on 80-
            # and 64-key tiles.
            delayed_ping_pong = [e for e in prefill if e.get("--delay-products") == "true"
                                 and e.get("--ping-pong") == "true"]
            self.assertTrue(all(e.get("--warp-specialize") == "true" and "--rule" not in e for e in delayed_ping_pong))
            per_problem = {}
            for e in delayed_ping_pong:
                per_problem.setdefault((e["--shape"], e["--dtype"], e["--causal"]), []).append(
                    (e["--key-tile"], e.get("--stages", "2")))
            wide = [("128", "2"), ("128", "3"), ("176", "2"), ("160", "2")]
            self.assertEqual(sorted(per_problem.items()), sorted([
                (("1x8x4096x4096x64", "f16", "false"), [("128", "2")]),
                (("4x16x4096x4096x128", "f16", "false"), wide),
                (("4x16x4096x4096x128", "f16", "true"), wide[:2]),
                (("2x16x8192x8192x128", "f16", "false"), wide),
                (("16x16x1024x1024x64", "f16", "false"), [("128", "2")]),
                (("1x16x16384x16384x128", "f16", "true"), wide[:2]),
                (("4x16x4096x4096x256", "f16", "false"), [("80", "2"), ("64", "2")]),
                (("4x16x4096x4096x128", "bf16", "false"), wide),
                (("4x16x4096x4096x128", "bf16", "true"), wide[:2])]))
            prefill = [e for e in prefill if e not in delayed_ping_pong]
            # The delayed column products (on a producer warpgroup) at every problem of the suite, and on a second
            # tiling at four of them.
            delayed = [e for e in prefill if e.get("--delay-products") == "true"]
            self.assertTrue(all(e.get("--warp-specialize") == "true" and "--rule" not in e for e in delayed))
            per_problem = {}
            for e in delayed:
                per_problem.setdefault((e["--shape"], e["--dtype"], e["--causal"]), []).append(e["--key-tile"])
            self.assertEqual(sorted(per_problem.items()), sorted([
                (("1x8x4096x4096x64", "f16", "false"), ["128"]),
                (("4x16x4096x4096x128", "f16", "false"), ["128"] * 2),
                (("4x16x4096x4096x128", "f16", "true"), ["128"] * 2),
                (("2x16x8192x8192x128", "f16", "false"), ["128"] * 2),
                (("16x16x1024x1024x64", "f16", "false"), ["128"]),
                (("1x16x16384x16384x128", "f16", "true"), ["128"]),
                (("4x16x4096x4096x256", "f16", "false"), ["80", "64"]),
                (("4x16x4096x4096x128", "bf16", "false"), ["128"]),
                (("4x16x4096x4096x128", "bf16", "true"), ["128"])]))
            prefill = [e for e in prefill if e not in delayed]
            # The rule's tiling, once per problem of the suite.
            by_rule = [e for e in prefill if e.get("--rule") == "true"]
            self.assertEqual(sorted((e["--shape"], e["--dtype"], e["--causal"]) for e in by_rule), sorted([
                ("1x8x4096x4096x64", "f16", "false"), ("4x16x4096x4096x128", "f16", "false"),
                ("4x16x4096x4096x128", "f16", "true"), ("2x16x8192x8192x128", "f16", "false"),
                ("16x16x1024x1024x64", "f16", "false"), ("1x16x16384x16384x128", "f16", "true"),
                ("4x16x4096x4096x256", "f16", "false"), ("4x16x4096x4096x128", "bf16", "false"),
                ("4x16x4096x4096x128", "bf16", "true")]))
            # Beside it at five problems: the tiling before warp specialization, the warp-specialized one,
            # ping-pong (not at D 64, where it was measured behind), and the overlapped S, alone and in ping-pong
            # (not with a causal mask at D 128, where the two together spill).
            variants = [e for e in prefill if e.get("--rule") != "true"]
            per_problem = {}
            for e in variants:
                per_problem.setdefault((e["--shape"], e["--causal"]), []).append(e)
            self.assertEqual(sorted((k, len(v)) for k, v in per_problem.items()), sorted([
                (("4x16x4096x4096x128", "false"), 5), (("4x16x4096x4096x128", "true"), 4),
                (("2x16x8192x8192x128", "false"), 5), (("1x8x4096x4096x64", "false"), 4),
                (("4x16x4096x4096x256", "false"), 5)]))
            for (shape, causal), tilings in per_problem.items():
                spills_together = causal == "true" and shape.endswith("x128")
                plain = [e for e in tilings if e.get("--warp-specialize") != "true"]
                self.assertEqual(len(plain), 1, shape)  # the tiling the rule chose before
                self.assertEqual(plain[0]["--key-tile"], {"64": "64", "128": "128", "256": "64"}[shape.split("x")[-1]])
                ping_pong = [e for e in tilings if e.get("--ping-pong") == "true"]
                self.assertEqual(len(ping_pong), 1 if shape.endswith("x64") or spills_together else 2, shape)
                self.assertTrue(all(e.get("--warp-specialize") == "true" for e in ping_pong), shape)
                overlap = [e for e in tilings if e.get("--overlap") == "true"]
                self.assertEqual(len(overlap), 1 if spills_together else 2, shape)
                self.assertTrue(all(e.get("--warp-specialize") == "true" for e in overlap), shape)
                overlap_ping_pong = sum(e.get("--ping-pong") == "true" for e in overlap)
                self.assertEqual(overlap_ping_pong, 0 if spills_together else 1, shape)
            # The tiling by rule (apps::decode_tiling), at the suite's four problems and four outside them, with
            # each combine of its split.
            problems = [("1x8x1x32768x128", "1"), ("8x8x1x8192x128", "1"), ("1x32x1x131072x128", "1"),
                        ("1x32x1x131072x128", "4"), ("4x32x1x16384x128", "8"), ("16x16x1x4096x128", "1"),
                        ("1x64x1x65536x128", "8"), ("32x8x1x2048x128", "1")]
            self.assertEqual(sorted((e["--shape"], e["--group"], e["--split-combine"]) for e in decode),
                             sorted((*p, c) for p in problems for c in ("kernel", "last_block")))
            self.assertTrue(all(e.get("--rule") == "true" and e["--dtype"] == "f16" for e in decode))
            self.assertFalse(any(flag in e for e in decode for flag in ("--key-tile", "--stages", "--split-kv")))

            again = self.run_suite(Path(d) / "suite", stub)  # not empty now
            self.assertEqual(again.returncode, 2)
            self.assertIn("is not empty", again.stderr)

    def test_refuses_a_binary_without_attention(self):
        with tempfile.TemporaryDirectory() as d:
            old = Path(d) / "twist"
            old.write_text("#!/bin/sh\necho 'usage: twist demo' >&2\nexit 2\n")
            old.chmod(0o755)
            done = self.run_suite(Path(d) / "suite", old)
            self.assertEqual(done.returncode, 2)
            self.assertIn("no 'export attention' command", done.stderr)
            self.assertFalse((Path(d) / "suite").exists())
            done = self.run_suite(Path(d) / "suite", Path(d) / "missing")
            self.assertEqual(done.returncode, 2)
            self.assertIn("no twist binary", done.stderr)


def find_twist() -> Path | None:
    """$TWIST, else the first build of the tool in this checkout that has `export attention`."""
    candidates = [Path(os.environ["TWIST"])] if os.environ.get("TWIST") else [
        REPO / f"build/{b}/apps/twist/twist" for b in ("bench", "att", "release")]
    for c in candidates:
        if c.is_file():
            probe = subprocess.run([str(c), "export", "attention"], capture_output=True, text=True)
            if "needs --out" in probe.stderr:
                return c
    return None


TWIST = find_twist()


@unittest.skipUnless(TWIST, "no twist binary with `export attention` (build it, or set TWIST to one)")
class ExportedManifestTest(unittest.TestCase):
    """What `twist export attention` really writes, with the flags bench/export_attention_suite.sh passes, reads
    as the benchmark expects (NVRTC compiles the cubins without a GPU)."""

    def export(self, out, *flags):
        subprocess.run([str(TWIST), "export", "attention", *flags, "--out", str(out)], check=True, capture_output=True)

    def test_prefill_and_grouped_query_decode(self):
        with tempfile.TemporaryDirectory() as d:
            out = Path(d)
            self.export(out, "--shape", "1x2x256x256x64", "--dtype", "bf16", "--causal", "true", "--block-rows", "128",
                        "--key-tile", "64", "--stages", "2")
            self.export(out, "--shape", "2x8x1x1024x128", "--dtype", "f16", "--decode", "true", "--group", "4",
                        "--key-tile", "32", "--stages", "3", "--split-kv", "2")
            prefill, decode = ba.attention_cases(ba.find_attention_manifests(out))
            p = prefill.problem
            self.assertEqual((p.family, p.dtype, p.batch, p.heads, p.queries, p.keys, p.head_dim, p.causal, p.group),
                             ("prefill", "bf16", 1, 2, 256, 256, 64, True, 1))
            (m,) = prefill.manifests
            self.assertEqual(m.notes["schedule"], "flash_128x64_s2")
            self.assertEqual([k.name for k in m.kernels], ["out"])
            self.assertEqual(ba.blocks(m), 2 * 2)  # 256 / 128 query tiles x 2 heads
            self.assertTrue(all(k.cubin.stat().st_size > 0 for k in m.kernels))
            q = decode.problem
            self.assertEqual((q.family, q.queries, q.keys, q.group, q.kv_heads, q.units), ("decode", 1, 1024, 4, 2, 4))
            (m,) = decode.manifests
            self.assertEqual([k.name for k in m.kernels], ["out_parts", "out"])
            self.assertEqual([b.name for b in m.with_role("workspace")], ["O.partial.m", "O.partial.l", "O.partial.o"])
            self.assertEqual(m.kernels[0].grid, (1, 4, 2))  # (group rows in one atom, pairs, parts)
            records = ba.make_records(ba.new_result(q, m), baselines(1.0, 1.0), "g", "d")
            self.assertEqual(records[0]["kernels"][0]["name"], "out_parts")
            self.assertEqual(records[0]["blocks"], 8)

    def test_decode_by_rule(self):
        with tempfile.TemporaryDirectory() as d:
            out = Path(d)
            self.export(out, "--shape", "1x8x1x32768x128", "--dtype", "f16", "--decode", "true", "--rule", "true")
            (case,) = ba.attention_cases(ba.find_attention_manifests(out))
            (m,) = case.manifests
            # apps::decode_tiling: 16 rows, 32-key tiles in 7 slots, 2 blocks per SM of 2 warps, 32 parts of the keys.
            self.assertEqual(m.notes["schedule"], "flash_16x32_s7_dp2_splitkv32_b2")
            self.assertEqual([k.name for k in m.kernels], ["out_parts", "out"])
            self.assertEqual(m.kernels[0].grid, (1, 8, 32))
            self.assertEqual(m.kernels[0].block, 64)
            self.assertEqual(m.kernels[0].shared_bytes, 256 + 7 * 2 * 32 * 256)  # Q's one row, 7 slots of K and V

    def test_hopper_prefill_by_rule(self):
        with tempfile.TemporaryDirectory() as d:
            out = Path(d)
            self.export(out, "--shape", "2x4x300x300x128", "--dtype", "f16", "--causal", "true", "--atom", "wgmma",
                        "--rule", "true")
            (case,) = ba.attention_cases(ba.find_attention_manifests(out))
            (m,) = case.manifests
            # 8 heads of 3 tiles of 128 rows are fewer blocks than SMs: one warpgroup of 64 rows per block;
            # causal: the longest blocks first, the 8 rows of blocks in one group (fewer than two waves).
            self.assertEqual(m.notes["schedule"], "flash_64x128_s2_w64_wgmma_lf8")
            (k,) = m.kernels
            self.assertEqual(k.block, 128)
            self.assertEqual(sorted(k.tensor_maps), ["K_map", "Q_map", "V_map"])
            self.assertEqual(k.tensor_maps["Q_map"]["box"], [1, 1, 64, 64])
            self.assertEqual(ba.blocks(m), 5 * 8)


if __name__ == "__main__":
    unittest.main()
