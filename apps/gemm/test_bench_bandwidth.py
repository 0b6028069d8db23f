"""Tests of the GEMM benchmark's bandwidth accounting for memory-bound (skinny) problems and of the manifests the
schedule rule exports (bench/export_gemm_suite.sh's gemm_rule set), without a GPU or PyTorch.
Run from the repository root: python3 -m unittest apps/gemm/test_bench_bandwidth.py
"""
import json
import os
import re
import subprocess
import sys
import tempfile
import unittest
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import bench_gemm  # noqa: E402
from twist.runtime import load_manifest  # noqa: E402  (on the path bench_gemm set)

REPO = bench_gemm.REPO
TWIST = Path(os.environ.get("TWIST", REPO / "build/bench/apps/twist/twist"))


def timed_record(problem, ms, cublas_ms):
    r = {"ours_ms": ms, "cublas_ms": cublas_ms, "ours_gbps": None, "cublas_gbps": None, "ours_hbm_fraction": None}
    bench_gemm.add_bandwidth(r, problem, hbm_read_gbps=4000.0)
    return r


class BandwidthAccounting(unittest.TestCase):
    def test_bytes_moved_reads_a_and_b_once_and_writes_out_once(self):
        p = bench_gemm.GemmProblem(1, 4096, 4096, "f16", "f16")
        self.assertEqual(p.bytes_moved, (4096 + 4096 * 4096) * 2 + 4096 * 2)
        self.assertEqual(bench_gemm.GemmProblem(16, 100, 64, "bf16", "f32").bytes_moved,
                         (16 * 64 + 64 * 100) * 2 + 16 * 100 * 4)
        self.assertAlmostEqual(p.gbps(0.01), p.bytes_moved / 1e-5 / 1e9)

    def test_skinny_records_get_bandwidth_and_their_fraction_of_hbm(self):
        p = bench_gemm.GemmProblem(16, 11008, 4096, "f16", "f16")
        self.assertTrue(p.memory_bound)
        r = timed_record(p, 0.025, 0.02)
        self.assertAlmostEqual(r["ours_gbps"], p.bytes_moved / 0.025e-3 / 1e9)
        self.assertAlmostEqual(r["cublas_gbps"], p.bytes_moved / 0.02e-3 / 1e9)
        self.assertAlmostEqual(r["ours_hbm_fraction"], r["ours_gbps"] / 4000.0)

    def test_compute_bound_and_failed_records_get_none(self):
        large = timed_record(bench_gemm.GemmProblem(4096, 4096, 4096, "f16", "f16"), 0.2, 0.19)
        self.assertIsNone(large["ours_gbps"])
        failed = timed_record(bench_gemm.GemmProblem(1, 4096, 4096, "f16", "f16"), None, 0.01)
        self.assertIsNone(failed["ours_gbps"])

    def test_table_and_summary_show_bandwidth_and_the_rule(self):
        r = {"label": "l", "shape": "1x4096x4096", "dtype": "f16", "schedule": "mma_64x64x32_w32x32_s3_cpasync_splitk9",
             "kernels": [{"name": "out_parts", "registers": 116, "spill_bytes": 0}], "rel_l2_error": 3e-4,
             "status": "PASS", "failure": None, "ours_tflops": 1.6, "cublas_tflops": 1.8, "ratio": 0.9, "best": True,
             "ours_gbps": 3600.0, "cublas_gbps": 3900.0, "ours_hbm_fraction": 0.9, "chosen_by": "rule"}
        line = bench_gemm.format_table([r]).splitlines()[2]
        self.assertIn("3600 (90%)", line)
        self.assertIn("3900", line)
        self.assertTrue(line.endswith("PASS best (rule)"))
        summary = bench_gemm.format_summary([r], "NVIDIA H200", "d", "c", hbm_read_gbps=4321.0)
        self.assertIn("HBM read bandwidth measured in this run: 4321 GB/s", summary)


class RuleExportSet(unittest.TestCase):
    def script(self):
        return (REPO / "bench/export_gemm_suite.sh").read_text()

    def listed(self, name):
        return re.search(rf"^{name}=\((.*?)\)", self.script(), re.S | re.M).group(1).split()

    def test_the_rule_is_benchmarked_outside_the_suite_and_on_skinny_shapes(self):
        suite, extra = self.listed("shapes"), self.listed("midsize") + self.listed("skinny")
        self.assertFalse(set(extra) & set(suite))
        ms = {int(s.split("x")[0]) for s in extra}
        self.assertIn(1, ms)
        self.assertIn(16, ms)
        self.assertGreaterEqual(sum(int(s.split("x")[0]) > 64 for s in extra), 4)
        # 8 more drawn at random with a fixed seed, so that every export measures the same shapes, and two
        # skinny ones (M = 8 and 48) at weights drawn with another.
        self.assertIn("r = random.Random(13)", self.script())
        self.assertIn("for _ in range(8):", self.script())
        self.assertIn("r = random.Random(16)", self.script())
        self.assertIn("for m in (8, 48):", self.script())
        # What the final run measures stays small: the suite in f16 and bf16, the drawn 8 (4 of them in bf16
        # too), the mid-size and skinny shapes, the drawn skinny 2.
        self.assertLessEqual(2 * len(suite) + 8 + 4 + len(extra) + 2, 40)

    @unittest.skipUnless(TWIST.is_file(), f"no twist binary at {TWIST} (set TWIST to one)")
    def test_a_rule_manifest_reads_as_the_benchmark_expects(self):
        with tempfile.TemporaryDirectory() as d:
            subprocess.run([str(TWIST), "export", "gemm", "--shape", "16x5120x13824", "--dtype", "bf16", "--rule",
                            "true", "--out", d], check=True, capture_output=True)
            (path,) = Path(d).glob("*.json")
            manifest = load_manifest(path)
            data = json.loads(path.read_text())
        self.assertEqual(manifest.notes["chosen_by"], "rule")
        problem = bench_gemm.gemm_problem(manifest)
        self.assertEqual((problem.m, problem.n, problem.k, problem.dtype), (16, 5120, 13824, "bf16"))
        r = bench_gemm.new_record(problem, manifest, "NVIDIA H200", "d")
        self.assertEqual((r["chosen_by"], r["memory_bound"]), ("rule", True))
        # The rule's skinny pick on 132 SMs: the Hopper schedule with one atom of rows, warp-specialized and
        # persistent, K split across blocks (N = 5120 gives too few 64-row blocks to stream B; a second kernel
        # combines the slices), A and B copied by TMA through the tensor maps the launcher encodes.
        self.assertRegex(r["schedule"], r"^wgmma_64x\d+x(64|128)_wg1_s\d+_tma_ws_p132_splitk\d+$")
        self.assertEqual([k["name"] for k in data["kernels"]], ["out_parts", "out"])
        for kernel in data["kernels"]:
            self.assertEqual(kernel["cluster"], [1, 1, 1])
        maps = {m["buffer"]: m for m in data["kernels"][0]["tensor_maps"]}
        self.assertEqual(maps["A"]["extents"], [16, 13824])
        self.assertEqual(maps["B"]["extents"], [13824, 5120])
        self.assertEqual({m["swizzle"] for m in maps.values()}, {128})
        self.assertEqual(data["kernels"][1]["tensor_maps"], [])


if __name__ == "__main__":
    unittest.main()
