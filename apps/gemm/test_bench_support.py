"""Tests of the parts of the GEMM benchmark scripts that need no GPU and no PyTorch: reading and checking
manifests, packing kernel arguments, grouping, the best schedule and geometric means, tables, JSON and the
accumulation study's statistics. Run from the repository root: python3 -m unittest apps/gemm/test_bench_support.py
"""
import contextlib
import ctypes
import io
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import unittest
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the scripts import each other as top-level modules

import accuracy_study  # noqa: E402
import bench_gemm  # noqa: E402
from twist.runtime import (BufferArg, CudaError, ManifestError, ScalarArg, describe_cuda_failure,  # noqa: E402
                           find_manifests, kernel_parameters, load_manifest, parse_manifest)


def gemm_manifest(m, n, k, dtype="f16", output=None, schedule="mma_128x128x32_w64x64_s3_cpasync", accumulation="f32",
                  label=None, split_k=False):
    """A manifest as `twist export gemm` writes one (backends/cuda/program/export_program.cpp), without a real cubin."""
    output = output or dtype
    label = label or f"gemm_{dtype}_{m}x{n}x{k}_{schedule}"
    sizes = [{"scalar": "N", "dtype": "i32", "value": n}, {"scalar": "M", "dtype": "i32", "value": m},
             {"scalar": "K", "dtype": "i32", "value": k}]
    buffers = [{"name": "A", "dtype": dtype, "shape": [m, k], "role": "input"},
               {"name": "B", "dtype": dtype, "shape": [k, n], "role": "input"},
               {"name": "out", "dtype": output, "shape": [m, n], "role": "output"}]
    kernels = [{"name": "out", "cubin": f"{label}.out.cubin", "grid": [2, 2, 1], "block": 128, "shared_bytes": 49152,
                "registers": 239, "spill_bytes": 0,
                "args": [{"buffer": "A"}, {"buffer": "B"}, {"buffer": "out"}] + sizes}]
    if split_k:
        buffers.append({"name": "C.partial.sum", "dtype": "f32", "shape": [8, m, n], "role": "workspace"})
        kernels = [{"name": "out_parts", "cubin": f"{label}.out_parts.cubin", "grid": [64, 1, 8], "block": 128,
                    "shared_bytes": 24576, "registers": 93, "spill_bytes": 0,
                    "args": [{"buffer": "A"}, {"buffer": "B"}, {"buffer": "C.partial.sum"}] + sizes},
                   {"name": "out", "cubin": f"{label}.out.cubin", "grid": [16, 1, 1], "block": 256, "shared_bytes": 0,
                    "registers": 20, "spill_bytes": 0,
                    "args": [{"buffer": "C.partial.sum"}, {"buffer": "out"}, sizes[1], sizes[0]]}]
    return {"label": label, "arch": "sm_90a", "accumulation": accumulation, "dtype": dtype, "op": "gemm",
            "output": output, "schedule": schedule, "shape": f"{m}x{n}x{k}", "buffers": buffers, "kernels": kernels}


class ManifestDir:
    """A temporary folder of manifests, each with placeholder cubin files (their bytes are never read here)."""

    def __init__(self):
        self._tmp = tempfile.TemporaryDirectory()
        self.path = Path(self._tmp.name)

    def add(self, data, cubins=True):
        if cubins:
            for k in data["kernels"]:
                (self.path / k["cubin"]).write_bytes(b"\x7fELF placeholder")
        path = self.path / f"{data['label']}.json"
        path.write_text(json.dumps(data))
        return path

    def close(self):
        self._tmp.cleanup()


class ManifestTest(unittest.TestCase):
    def setUp(self):
        self.dir = ManifestDir()
        self.addCleanup(self.dir.close)

    def test_reads_what_twist_export_writes(self):
        m = load_manifest(self.dir.add(gemm_manifest(256, 128, 512, split_k=True)))
        self.assertEqual(m.label, "gemm_f16_256x128x512_mma_128x128x32_w64x64_s3_cpasync")
        self.assertEqual(m.arch, "sm_90a")
        self.assertEqual(m.notes["op"], "gemm")
        self.assertEqual(m.notes["shape"], "256x128x512")
        self.assertEqual(m.buffer("A").shape, (256, 512))
        self.assertEqual([b.name for b in m.with_role("workspace")], ["C.partial.sum"])
        parts, combine = m.kernels
        self.assertEqual(parts.cubin, self.dir.path / f"{m.label}.out_parts.cubin")
        self.assertEqual(parts.grid, (64, 1, 8))
        self.assertEqual((combine.block, combine.shared_bytes, combine.registers), (256, 0, 20))
        self.assertEqual(parts.args[:3], (BufferArg("A"), BufferArg("B"), BufferArg("C.partial.sum")))
        self.assertEqual(parts.args[3], ScalarArg("N", "i32", 128))

    def assertRefused(self, data, *fragments, cubins=True):
        with self.assertRaises(ManifestError) as caught:
            load_manifest(self.dir.add(data, cubins=cubins))
        for f in fragments:
            self.assertIn(f, str(caught.exception))

    def test_refuses_what_cannot_be_launched(self):
        data = gemm_manifest(64, 64, 64)
        self.assertRefused(data, "does not exist", "export the manifest again", cubins=False)
        bad = gemm_manifest(64, 64, 64)
        bad["buffers"][0]["dtype"] = "f8"
        self.assertRefused(bad, "buffers[0]", "unknown dtype 'f8'")
        bad = gemm_manifest(64, 64, 64)
        bad["kernels"][0]["args"][0] = {"buffer": "X"}
        self.assertRefused(bad, "kernels[0] ('out'): args[0]", "buffer 'X'")
        bad = gemm_manifest(64, 64, 64)
        bad["kernels"][0]["args"][3]["value"] = 2.5
        self.assertRefused(bad, "scalar 'N' is i32", "2.5")
        bad = gemm_manifest(64, 64, 64)
        bad["kernels"][0]["args"][3]["value"] = 2**31
        self.assertRefused(bad, "not a 32-bit integer")
        bad = gemm_manifest(64, 64, 64)
        bad["kernels"][0]["grid"] = [2, 2]
        self.assertRefused(bad, "grid [2, 2]")
        bad = gemm_manifest(64, 64, 64)
        bad["kernels"][0]["block"] = True
        self.assertRefused(bad, "field 'block' is True, expected int")
        bad = gemm_manifest(64, 64, 64)
        del bad["kernels"][0]["shared_bytes"]
        self.assertRefused(bad, "missing field 'shared_bytes'")
        bad = gemm_manifest(64, 64, 64)
        bad["buffers"][2]["role"] = "scratch"
        self.assertRefused(bad, "role 'scratch'")
        bad = gemm_manifest(64, 64, 64)
        bad["buffers"].append(dict(bad["buffers"][0]))
        self.assertRefused(bad, "declared twice")
        bad = gemm_manifest(64, 64, 64)
        bad["kernels"] = []
        self.assertRefused(bad, "no kernels")

    def test_not_json(self):
        path = self.dir.path / "notes.json"
        path.write_text("label: x")
        with self.assertRaises(ManifestError) as caught:
            load_manifest(path)
        self.assertIn("is not JSON", str(caught.exception))

    def test_find_by_op(self):
        self.dir.add(gemm_manifest(64, 64, 64))
        other = gemm_manifest(32, 32, 32)
        other["op"] = "softmax"
        self.dir.add(other)
        self.assertEqual([m.label for m in find_manifests(self.dir.path, "gemm")],
                         ["gemm_f16_64x64x64_mma_128x128x32_w64x64_s3_cpasync"])
        with self.assertRaises(ManifestError) as caught:
            find_manifests(self.dir.path, "attention")
        self.assertIn("no manifests with \"op\": \"attention\"", str(caught.exception))
        with self.assertRaises(ManifestError):
            find_manifests(self.dir.path / "missing", "gemm")


class KernelParametersTest(unittest.TestCase):
    def test_pointers_and_scalars_in_manifest_order(self):
        data = gemm_manifest(16, 32, 48)
        data["kernels"][0]["args"] += [{"scalar": "alpha", "dtype": "f32", "value": 0.5},
                                       {"scalar": "eps", "dtype": "f64", "value": 1e-300}]
        with tempfile.TemporaryDirectory() as d:
            (Path(d) / data["kernels"][0]["cubin"]).write_bytes(b"")
            kernel = parse_manifest(data, Path(d) / "m.json").kernels[0]
        packed = kernel_parameters(kernel, {"A": 0x7F0000001000, "B": 0x7F0000002000, "out": 2**63 + 16})

        def read(i, ctype):
            return ctypes.cast(packed.array[i], ctypes.POINTER(ctype)).contents.value

        self.assertEqual(len(packed.array), 8)
        self.assertEqual([read(i, ctypes.c_uint64) for i in range(3)], [0x7F0000001000, 0x7F0000002000, 2**63 + 16])
        self.assertEqual([read(i, ctypes.c_int32) for i in range(3, 6)], [32, 16, 48])
        self.assertEqual(read(6, ctypes.c_float), 0.5)
        self.assertEqual(read(7, ctypes.c_double), 1e-300)

    def test_cuda_failure_message(self):
        text = describe_cuda_failure("cuLaunchKernel", 700, "CUDA_ERROR_ILLEGAL_ADDRESS", "an illegal memory access",
                                     "launching kernel 'out' of gemm_x")
        self.assertIn("cuLaunchKernel failed with CUDA_ERROR_ILLEGAL_ADDRESS (700", text)
        self.assertIn("kernel 'out' of gemm_x", text)
        self.assertIn("unusable", text)
        self.assertTrue(CudaError(text, 700).sticky)
        self.assertFalse(CudaError("x", 1).sticky)
        self.assertNotIn("unusable", describe_cuda_failure("cuModuleLoadData", 209, "CUDA_ERROR_NO_BINARY_FOR_GPU",
                                                           "no kernel image", "loading"))


def record(shape, dtype, schedule, ours, cublas, status="PASS"):
    return {"label": f"{shape}_{dtype}_{schedule}", "shape": shape, "dtype": dtype, "schedule": schedule,
         "kernels": [{"name": "out", "registers": 239, "spill_bytes": 0}], "rel_l2_error": 3e-4, "status": status,
         "failure": None if status == "PASS" else "relative L2 error 1 over the tolerance 2e-03",
         "ours_tflops": ours if status == "PASS" else None, "cublas_tflops": cublas,
         "ratio": ours / cublas if status == "PASS" else None, "best": False}


class BenchGemmTest(unittest.TestCase):
    def setUp(self):
        self.dir = ManifestDir()
        self.addCleanup(self.dir.close)

    def load(self, data):
        return load_manifest(self.dir.add(data))

    def test_problem_from_notes_and_buffers(self):
        p = bench_gemm.gemm_problem(self.load(gemm_manifest(16, 15360, 3840, "bf16")))
        self.assertEqual((p.m, p.n, p.k, p.dtype, p.output, p.shape),
                         (16, 15360, 3840, "bf16", "bf16", "16x15360x3840"))
        self.assertAlmostEqual(p.tflops(1.0), 2 * 16 * 15360 * 3840 / 1e9)

    def test_problem_refuses_inconsistent_manifests(self):
        bad = gemm_manifest(64, 32, 16)
        bad["buffers"][1]["shape"] = [32, 16]
        with self.assertRaises(ManifestError) as caught:
            bench_gemm.gemm_problem(self.load(bad))
        self.assertIn("buffer 'B' is input [32, 16], but a 64x32x16 GEMM needs input [16, 32]", str(caught.exception))
        bad = gemm_manifest(64, 32, 16, label="noshape")
        bad["shape"] = "64x32"
        with self.assertRaises(ManifestError):
            bench_gemm.gemm_problem(self.load(bad))
        with self.assertRaises(ManifestError) as caught:
            bench_gemm.gemm_problem(self.load(gemm_manifest(64, 32, 16, output="f64", label="f64out")))
        self.assertIn("no tolerance", str(caught.exception))

    def test_cases_group_schedules(self):
        manifests = [self.load(gemm_manifest(1024, 1024, 1024)),
                     self.load(gemm_manifest(1024, 1024, 1024, schedule="mma_128x256x32_w64x64_s4_cpasync")),
                     self.load(gemm_manifest(1024, 1024, 1024, "bf16")),
                     self.load(gemm_manifest(1, 4096, 4096, split_k=True))]
        cases = bench_gemm.gemm_cases(manifests)
        self.assertEqual([(c.problem.shape, c.problem.dtype, len(c.manifests)) for c in cases],
                         [("1024x1024x1024", "bf16", 1), ("1x4096x4096", "f16", 1), ("1024x1024x1024", "f16", 2)])
        self.assertEqual(bench_gemm.TOLERANCES[cases[0].problem.output], 1e-2)

    def test_new_record_carries_the_manifests_resources(self):
        m = self.load(gemm_manifest(1, 4096, 4096, split_k=True, schedule="mma_64x64x32_w32x32_s3_cpasync_splitk8"))
        r = bench_gemm.new_record(bench_gemm.gemm_problem(m), m, "NVIDIA H200", "2026-12-02T10:00:00+00:00")
        self.assertEqual(r["kernels"], [{"name": "out_parts", "registers": 93, "spill_bytes": 0},
                                        {"name": "out", "registers": 20, "spill_bytes": 0}])
        self.assertEqual((r["status"], r["tolerance"], r["gpu"]), ("FAIL", 2e-3, "NVIDIA H200"))
        self.assertEqual(r["schedule"], "mma_64x64x32_w32x32_s3_cpasync_splitk8")
        self.assertIsNone(r["modeled_us"])  # the rule's cost model describes Hopper tilings only

    def test_new_record_carries_the_rules_modeled_time(self):
        data = gemm_manifest(1024, 1024, 1024, schedule="wgmma_64x128x64_wg1_s4_tma_ws_p132")
        data["modeled_us"] = "12.1"
        m = self.load(data)
        r = bench_gemm.new_record(bench_gemm.gemm_problem(m), m, "NVIDIA H200", "d")
        self.assertEqual(r["modeled_us"], 12.1)
        r.update(status="PASS", ours_ms=0.0118, ours_tflops=182.0, cublas_tflops=230.0, ratio=0.79)
        row = bench_gemm.format_table([r]).splitlines()[2]
        self.assertEqual(row.split()[6:9], ["11.8", "12.1", "182.0"])

    def test_best_and_geometric_means(self):
        records = [record("4096x4096x4096", "f16", "a", 400, 680), record("4096x4096x4096", "f16", "b", 500, 680),
                   record("4096x4096x4096", "f16", "c", 900, 680, status="FAIL"),
                   record("1x4096x4096", "f16", "a", 2, 4), record("4096x4096x4096", "bf16", "a", 360, 720),
                   record("1x4096x4096", "bf16", "a", 1, 4, status="FAIL")]
        bench_gemm.mark_best(records)
        self.assertEqual([r["best"] for r in records], [False, True, False, True, True, False])
        means = bench_gemm.geomean_ratios(records)
        self.assertAlmostEqual(means["f16"], math.sqrt(500 / 680 * 0.5))
        self.assertAlmostEqual(means["bf16"], 0.5)
        self.assertAlmostEqual(means["all"], (500 / 680 * 0.5 * 0.5) ** (1 / 3))
        self.assertIsNone(bench_gemm.geometric_mean([]))

    def test_table_summary_and_json(self):
        records = [record("4096x4096x4096", "f16", "mma_a", 400, 680),
                   record("1x4096x4096", "bf16", "mma_b", 1, 4, status="FAIL")]
        bench_gemm.mark_best(records)
        table = bench_gemm.format_table(records)
        lines = table.splitlines()
        self.assertTrue(lines[0].startswith("shape"))
        self.assertIn("4096x4096x4096  f16", lines[2])
        self.assertIn("400.0", lines[2])
        self.assertIn("0.588", lines[2])
        self.assertTrue(lines[2].endswith("PASS best"))
        self.assertIn("FAIL 1x4096x4096_bf16_mma_b: relative L2 error", table)
        summary = bench_gemm.format_summary(records, "NVIDIA H200", "2026-12-02", "python3 apps/gemm/bench_gemm.py d")
        self.assertIn("best passing schedule per shape and dtype", summary)
        self.assertIn("f16 0.588", summary)
        self.assertIn("bf16 -", summary)
        self.assertIn("1 failed", summary)
        self.assertIn("command: python3 apps/gemm/bench_gemm.py d", summary)
        with tempfile.TemporaryDirectory() as d:
            path = Path(d) / "results" / "gemm.json"
            bench_gemm.write_json(path, bench_gemm.results_json(records, {"gpu": "NVIDIA H200"}, None))
            data = json.loads(path.read_text())
        self.assertEqual(data["benchmark"], "gemm")
        self.assertEqual(data["timing"]["return_mode"], "median")
        self.assertEqual(data["records"][0]["kernels"][0]["registers"], 239)
        self.assertAlmostEqual(data["geomean_ratio_best"]["all"], 400 / 680)

    def test_arguments(self):
        args = bench_gemm.parse_args([".gpu/manifests/gemm", "--match", "f16_4096", "--out", "/tmp/g.json"])
        self.assertEqual(args.manifests, Path(".gpu/manifests/gemm"))
        self.assertEqual(args.out, Path("/tmp/g.json"))
        self.assertEqual(args.seed, 0)
        m = [self.load(gemm_manifest(4096, 4096, 4096)), self.load(gemm_manifest(1024, 1024, 1024))]
        self.assertEqual([x.label for x in bench_gemm.select(m, args.match)], [m[0].label])
        self.assertEqual(bench_gemm.parse_args(["d"]).out, bench_gemm.REPO / "bench/results/gemm.json")
        with self.assertRaises(ManifestError):
            bench_gemm.select(m, bench_gemm.re.compile("bf16"))


class MeasureAllTest(unittest.TestCase):
    """The driver loop both benchmarks share: records saved after every case and at the end, the report printed
    even when a case raises, and the reason saved with what was measured before it."""

    def run_cases(self, cases):
        saves, reports = [], []

        def measure(case, records):
            if case == "bad":
                raise RuntimeError("launch failed")
            records.append({"case": case})

        with contextlib.redirect_stdout(io.StringIO()) as printed:
            try:
                records = bench_gemm.measure_all(cases, lambda c: f"case {c}", measure,
                                                 lambda r, aborted: saves.append((len(r), aborted)),
                                                 lambda r: reports.append(len(r)))
            except RuntimeError:
                records = None
        return records, saves, reports, printed.getvalue()

    def test_every_case_saved_then_reported(self):
        records, saves, reports, printed = self.run_cases(["a", "b"])
        self.assertEqual(records, [{"case": "a"}, {"case": "b"}])
        self.assertEqual(saves, [(1, None), (2, None), (2, None)])
        self.assertEqual(reports, [2])
        self.assertEqual(printed, "case a\ncase b\n")

    def test_a_failing_case_is_saved_as_the_reason_and_raised(self):
        records, saves, reports, _ = self.run_cases(["a", "bad", "c"])
        self.assertIsNone(records)  # raised
        self.assertEqual(saves, [(1, None), (1, "RuntimeError: launch failed")])
        self.assertEqual(reports, [1])


class AccuracyStudyTest(unittest.TestCase):
    def setUp(self):
        self.dir = ManifestDir()
        self.addCleanup(self.dir.close)

    def study(self, k, strategy):
        return load_manifest(self.dir.add(gemm_manifest(256, 256, k, "f16", "f32", accumulation=strategy,
                                                        label=f"acc_{k}_{strategy.replace(':', '')}")))

    def test_grid_orders_k_and_strategies(self):
        manifests = [self.study(k, s) for k in (1024, 256) for s in ("hybrid:8", "f16", "hybrid:2", "f32")]
        grid = accuracy_study.study_grid(manifests)
        self.assertEqual([p.k for p in grid], [256, 1024])
        self.assertEqual(list(next(iter(grid.values()))), ["f32", "f16", "hybrid:2", "hybrid:8"])

    def test_grid_refusals(self):
        with self.assertRaises(ManifestError) as caught:
            accuracy_study.study_grid([self.study(256, "f16")])
        self.assertIn("no f32 manifest at 256x256x256", str(caught.exception))
        wrong = load_manifest(self.dir.add(gemm_manifest(256, 256, 256, "f16", "f16", label="f16out")))
        with self.assertRaises(ManifestError) as caught:
            accuracy_study.study_grid([wrong])
        self.assertIn("--dtype f16 --output f32", str(caught.exception))
        twice = [self.study(256, "f32"), load_manifest(self.dir.add(
            gemm_manifest(256, 256, 256, "f16", "f32", label="again")))]
        with self.assertRaises(ManifestError) as caught:
            accuracy_study.study_grid(twice)
        self.assertIn("both f32", str(caught.exception))
        old = gemm_manifest(256, 256, 256, "f16", "f32", label="old")
        old["accumulation"] = "hybrid(f16 promoted to f32 every 4 k-steps)"
        with self.assertRaises(ManifestError) as caught:
            accuracy_study.strategy_of(load_manifest(self.dir.add(old)))
        self.assertIn("expected f32, f16 or hybrid:N", str(caught.exception))

    def test_statistics(self):
        mean, sem = accuracy_study.mean_and_sem([1.0, 2.0, 3.0, 4.0])
        self.assertEqual(mean, 2.5)
        self.assertAlmostEqual(sem, statistics.stdev([1, 2, 3, 4]) / 2)
        with self.assertRaises(ValueError):
            accuracy_study.mean_and_sem([1.0])
        base = [1.0, 2.0, 3.0, 4.0]
        c = accuracy_study.compare([1.5, 2.5, 3.5, 4.5], base)
        self.assertAlmostEqual(c["diff"], 0.5)
        self.assertAlmostEqual(c["combined_se"], math.sqrt(2) * sem)
        self.assertAlmostEqual(c["z"], 0.5 / (math.sqrt(2) * sem))
        self.assertTrue(c["within_one_se"])
        # Every trial 0.5 worse: no spread in the differences, so the paired z is undefined (None, not inf).
        self.assertAlmostEqual(c["paired_mean_diff"], 0.5)
        self.assertIsNone(c["paired_z"])
        c = accuracy_study.compare([2.0, 3.5, 3.0, 5.5], base)
        self.assertAlmostEqual(c["paired_mean_diff"], 1.0)
        self.assertAlmostEqual(c["paired_z"], 1.0 / (statistics.stdev([1.0, 1.5, 0.0, 1.5]) / 2))
        self.assertEqual(accuracy_study.compare(base, base)["z"], 0.0)
        # A run cut short: the paired part uses the trials both strategies have.
        self.assertAlmostEqual(accuracy_study.compare([2.0, 3.0, 4.0], base)["paired_mean_diff"], 1.0)

    def test_rows_and_table(self):
        manifests = [self.study(256, s) for s in ("f32", "f16", "hybrid:2")]
        grid = accuracy_study.study_grid(manifests)
        errors = {"acc_256_f32": [1e-7, 2e-7, 3e-7], "acc_256_f16": [5e-4, 6e-4, 7e-4],
                  "acc_256_hybrid2": [1.5e-7, 2e-7, 3e-7]}
        rows = accuracy_study.study_rows(grid, errors, {})
        self.assertEqual([(r["strategy"], r["trials"]) for r in rows], [("f32", 3), ("f16", 3), ("hybrid:2", 3)])
        self.assertIsNone(rows[0]["vs_f32"])
        self.assertFalse(rows[1]["vs_f32"]["within_one_se"])
        self.assertTrue(rows[2]["vs_f32"]["within_one_se"])
        table = accuracy_study.format_study(rows)
        self.assertIn("256x256x256  f32", table)
        self.assertIn("beyond 1 SE of f32", table)
        self.assertIn("within 1 SE of f32", table)
        failed = accuracy_study.study_rows(grid, {"acc_256_f32": errors["acc_256_f32"]},
                                           {"acc_256_f16": "cuLaunchKernel failed"})
        self.assertEqual(failed[1]["failure"], "cuLaunchKernel failed")
        self.assertIsNone(failed[2]["mean"])
        self.assertIn("FAIL acc_256_f16: cuLaunchKernel failed", accuracy_study.format_study(failed))
        json.dumps(rows, allow_nan=False)  # standard JSON: no inf or NaN anywhere

    def test_timing_bounds_and_arguments(self):
        self.assertEqual(accuracy_study.timing_bound("f32", "f16"), 2e-3)
        self.assertEqual(accuracy_study.timing_bound("hybrid:2", "f16"), accuracy_study.SANITY_BOUND)
        args = accuracy_study.parse_args(["study", "--timing", "t", "--trials", "5"])
        self.assertEqual((args.manifests, args.timing, args.trials), (Path("study"), Path("t"), 5))
        with self.assertRaises(SystemExit), contextlib.redirect_stderr(io.StringIO()) as err:
            accuracy_study.parse_args(["study", "--trials", "1"])
        self.assertIn("at least 2 trials", err.getvalue())
        rows = [{"label": "t_f16", "shape": "4096x4096x4096", "accumulation": "f16",
                 "kernels": [{"registers": 172, "spill_bytes": 0}], "rel_l2_error": 8e-3, "tolerance": 5e-2,
                 "ours_tflops": 450.0, "cublas_tflops": 680.0, "ratio": 450 / 680, "status": "PASS", "failure": None},
                {"label": "t_f32", "shape": "4096x4096x4096", "accumulation": "f32",
                 "kernels": [{"registers": 239, "spill_bytes": 0}], "rel_l2_error": None, "tolerance": 2e-3,
                 "ours_tflops": None, "cublas_tflops": 680.0, "ratio": None, "status": "FAIL",
                 "failure": "output 'out' holds 3 NaN(s)"}]
        table = accuracy_study.format_timing(rows)
        self.assertIn("4096x4096x4096  f16       172   0      8.00e-03     5e-02", table)
        self.assertIn("0.662  PASS", table)
        self.assertTrue(table.endswith("FAIL t_f32: output 'out' holds 3 NaN(s)"))


TWIST = Path(os.environ.get("TWIST", bench_gemm.REPO / "build/bench/apps/twist/twist"))


@unittest.skipUnless(TWIST.is_file(), f"no twist binary at {TWIST} (set TWIST to one)")
class ExportedManifestTest(unittest.TestCase):
    """What `twist export gemm` really writes, with the flags bench/export_gemm_suite.sh passes, reads as the
    scripts expect (NVRTC compiles the cubins without a GPU)."""

    def export(self, out, *flags):
        subprocess.run([str(TWIST), "export", "gemm", *flags, "--out", str(out)], check=True, capture_output=True)

    def test_benchmark_and_study_manifests(self):
        with tempfile.TemporaryDirectory() as d:
            self.export(Path(d) / "gemm", "--shape", "16x256x512", "--dtype", "bf16", "--block", "64x64x32", "--warp",
                        "32x32", "--split-k", "8")
            self.export(Path(d) / "study", "--shape", "256x256x512", "--dtype", "f16", "--output", "f32",
                        "--accumulation", "hybrid:8", "--label", "acc_f16_f32out_256x256x512_hybrid8")
            self.export(Path(d) / "study", "--shape", "256x256x512", "--dtype", "f16", "--output", "f32",
                        "--label", "acc_f16_f32out_256x256x512_f32")
            (case,) = bench_gemm.gemm_cases(find_manifests(Path(d) / "gemm", "gemm"))
            self.assertEqual((case.problem.shape, case.problem.dtype, case.problem.output),
                             ("16x256x512", "bf16", "bf16"))
            (m,) = case.manifests
            self.assertEqual([k.name for k in m.kernels], ["out_parts", "out"])
            self.assertEqual(m.with_role("workspace")[0].shape, (8, 16, 256))
            self.assertTrue(all(k.cubin.stat().st_size > 0 for k in m.kernels))
            grid = accuracy_study.study_grid(find_manifests(Path(d) / "study", "gemm"))
            self.assertEqual([(p.k, p.output, list(s)) for p, s in grid.items()], [(512, "f32", ["f32", "hybrid:8"])])


if __name__ == "__main__":
    unittest.main()
