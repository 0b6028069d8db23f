"""Tests of the parts of the norms benchmark that need no GPU and no PyTorch: reading real manifests from
`twist export norms` (TWIST names the binary; the test skips, saying so, without one), checking them against
their notes, the bytes each op moves, records and the table. Run from the repository root:

    python3 -m unittest apps/norms/test_bench_norms.py
"""
import os
import subprocess
import sys
import tempfile
import unittest
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import bench_norms as bn  # noqa: E402


def export(twist: str, out: str, op: str, rows: int, hidden: int, dtype: str = "f16") -> None:
    subprocess.run([twist, "export", "norms", "--op", op, "--rows", str(rows), "--hidden", str(hidden), "--dtype",
                    dtype, "--out", out], check=True, capture_output=True)


class ExportedManifests(unittest.TestCase):
    def setUp(self):
        self.twist = os.environ.get("TWIST", str(bn.REPO / "build" / "release" / "apps" / "twist" / "twist"))
        if not Path(self.twist).exists():
            self.skipTest(f"no twist binary at {self.twist} (set TWIST)")

    def test_every_op_exports_and_reads_back_with_the_bytes_it_moves(self):
        rows, hidden = 64, 256
        with tempfile.TemporaryDirectory() as out:
            for op in bn.OPS:
                export(self.twist, out, op, rows, hidden, "bf16")
            manifests = bn.norm_manifests(out)
            self.assertEqual(sorted(m.notes["op"] for m in manifests), sorted(bn.OPS))
            element = 2
            # Row inputs and outputs, in units of rows x hidden elements, and the per-column vectors (w, b).
            want = {"softmax": (2, 0), "layernorm": (2, 2), "rmsnorm": (2, 1), "add_rmsnorm": (4, 1), "swiglu": (3, 0)}
            for m in manifests:
                p = bn.problem(m)
                row_units, vectors = want[p["op"]]
                self.assertEqual(p["bytes"], (row_units * rows * hidden + vectors * hidden) * element, p["op"])
                self.assertEqual(len(m.kernels), 1, p["op"])
            # A variant (another label of one problem) is timed with its problem.
            subprocess.run([self.twist, "export", "norms", "--op", "layernorm", "--layernorm", "shifted_sums",
                            "--rows", str(rows), "--hidden", str(hidden), "--dtype", "bf16", "--out", out],
                           check=True, capture_output=True)
            groups = bn.problems(bn.norm_manifests(out))
            self.assertEqual(len(groups), len(bn.OPS))
            self.assertEqual(sorted(len(g) for g in groups), [1, 1, 1, 1, 2])

    def test_a_manifest_whose_x_disagrees_with_its_notes_is_refused(self):
        with tempfile.TemporaryDirectory() as out:
            export(self.twist, out, "rmsnorm", 8, 128)
            m = bn.norm_manifests(out)[0]
            m.notes["hidden"] = "64"
            with self.assertRaisesRegex(ValueError, "input x is f16"):
                bn.problem(m)


class Accounting(unittest.TestCase):
    def record(self):
        return bn.new_record({"op": "rmsnorm", "dtype": "f16", "rows": 8192, "hidden": 4096,
                              "bytes": 2 * 8192 * 4096 * 2},
                             type("M", (), {"label": "rmsnorm_f16_8192x4096"})(), "H200", "today")

    def test_records_take_medians_and_round_by_round_ratios(self):
        r = bn.finish_record(self.record(), ours=[0.05, 0.06, 0.05], eager=[0.2, 0.2, 0.2],
                             compiled=[0.1, 0.09, 0.11], copy=[0.04, 0.05, 0.04])
        self.assertAlmostEqual(r["ours_gbps"], 134217728 / 0.05 / 1e6)
        self.assertEqual(r["repeats"], 3)
        # Ratios per round (0.1/0.05, 0.09/0.06, 0.11/0.05), not a ratio of medians.
        self.assertAlmostEqual(r["vs_compiled"]["median"], 2.0)
        self.assertAlmostEqual(r["vs_compiled"]["min"], 1.5)
        self.assertAlmostEqual(r["vs_compiled"]["max"], 2.2)
        self.assertEqual(r["vs_compiled"]["verdict"], "faster")
        self.assertAlmostEqual(r["fraction_of_copy"]["median"], 0.8)
        self.assertIn("rmsnorm_f16_8192x4096", bn.format_table([r]))
        self.assertIn("2.00 [1.50-2.20]", bn.format_table([r]))

    def test_a_ratio_whose_spread_reaches_across_one_is_a_tie(self):
        r = bn.finish_record(self.record(), ours=[1.0, 1.0, 1.0, 1.0], eager=[2.0] * 4, compiled=[0.97, 1.02, 0.99, 1.0],
                             copy=[0.9] * 4)
        self.assertEqual(r["vs_compiled"]["verdict"], "tie")
        self.assertAlmostEqual(r["vs_compiled"]["median"], 0.995)
        self.assertIn("0.99 [0.97-1.02] tie", bn.format_table([r]))
        slower = bn.ratio_spread([0.95, 0.97], [1.0, 1.0])
        self.assertEqual(slower["verdict"], "slower")

    def test_rounds_interleave_the_timers(self):
        order = []
        times = bn.interleaved({"ours": "a", "compile": "b", "copy": "c"}, 2,
                               bench=lambda fn: order.append(fn) or float(len(order)))
        self.assertEqual(order, ["a", "b", "c", "a", "b", "c"])
        self.assertEqual(times, {"ours": [1.0, 4.0], "compile": [2.0, 5.0], "copy": [3.0, 6.0]})


if __name__ == "__main__":
    unittest.main()
