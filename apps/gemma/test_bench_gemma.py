"""The Gemma benchmark's GPU-free parts: its cases, the per-kernel summary (speedups, geometric mean, the kernels
below PyTorch's), the record and the table. No torch."""
import sys
import unittest
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "python"))

import bench_gemma  # noqa: E402
from twist import gemma  # noqa: E402


class BenchGemmaTest(unittest.TestCase):
    def test_cases_cover_the_issue_grid(self):
        full = bench_gemma.cases(quick=False)
        prefill = [c for c in full if c.phase == "prefill"]
        decode = [c for c in full if c.phase == "decode"]
        # The corners of the issue's grid and a case inside it.
        self.assertTrue({(1, 2048), (1, 8192), (8, 2048), (8, 8192)} < {(c.batch, c.tokens) for c in prefill})
        self.assertTrue({(1, 4096), (1, 32768), (64, 4096), (64, 32768)} < {(c.batch, c.keys) for c in decode})
        self.assertEqual(len(prefill), 5)
        self.assertEqual(len(decode), 5)
        self.assertEqual(len(bench_gemma.cases(quick=True)), 2)
        self.assertEqual(bench_gemma.case_name(decode[0]), "decode B1 L4096")

    def test_a_case_starts_only_if_one_as_long_as_the_longest_so_far_ends_within_the_budget(self):
        self.assertTrue(bench_gemma.next_case_fits(0.0, 0.0, 180.0))  # the first case always starts
        self.assertTrue(bench_gemma.next_case_fits(100.0, 80.0, 180.0))
        self.assertFalse(bench_gemma.next_case_fits(100.0, 90.0, 180.0))
        self.assertTrue(bench_gemma.next_case_fits(1e6, 1e6, None))  # no budget

    def test_every_kernel_names_the_pytorch_code_it_replaces(self):
        self.assertEqual(set(bench_gemma.PYTORCH_EQUIVALENT), set(gemma.KERNELS))

    def test_summary_and_record(self):
        kernels = {"sliding": {"qkv": {"twist_ms": 1.0, "pytorch_ms": 2.0},
                               "attention": {"twist_ms": 2.0, "pytorch_ms": 1.0}},
                   "full": {"gate_up": {"twist_ms": 1.0, "pytorch_ms": 4.0}}}
        summary = bench_gemma.kernel_summary(kernels)
        self.assertAlmostEqual(summary["geomean_speedup"], 4.0 ** (1 / 3))
        self.assertEqual(summary["slower_than_pytorch"], ["sliding/attention"])
        shape = gemma.LayerShape("prefill", batch=1, tokens=2048)
        r = bench_gemma.new_record(shape, "H200", "2026-12-03", 2)
        kernel_errors = {"sliding": {"qkv": 0.003, "attention": 0.004}, "full": {"gate_up": 0.002}}
        r = bench_gemma.finish_record(r, {"logits": 0.01, "hidden_states": 0.05},
                                      {"logits": 0.01, "hidden_states": 0.02}, kernels, kernel_errors,
                                      {k: bench_gemma.layer_kernels_ms(v) for k, v in kernels.items()},
                                      {"eager": 6.0, "compile": 4.0, "twist": 2.0})
        self.assertFalse(r["ok"])  # the hidden states' error is more than SLACK times the bf16 reference's
        self.assertEqual(r["end_to_end_speedup"], {"vs_eager": 3.0, "vs_compile": 2.0})
        self.assertEqual(r["layer_ms"]["sliding"], {"twist": 3.0, "pytorch": 3.0})
        table = bench_gemma.format_table([r])
        self.assertIn("prefill B1 S2048", table)
        self.assertIn("sliding/attention", table)

    def test_a_kernel_over_tolerance_fails_the_case_and_a_run_without_compile_says_so(self):
        kernels = {"sliding": {"qkv": {"twist_ms": 1.0, "pytorch_ms": 2.0}}}
        shape = gemma.LayerShape("decode", batch=8, keys=4096)
        r = bench_gemma.finish_record(bench_gemma.new_record(shape, "H200", "2026-12-03", 2),
                                      {"logits": 0.01, "hidden_states": 0.01}, {"logits": 0.01, "hidden_states": 0.01},
                                      kernels, {"sliding": {"qkv": float("nan")}},
                                      {"sliding": bench_gemma.layer_kernels_ms(kernels["sliding"])},
                                      {"eager": 6.0, "twist": 3.0})
        self.assertFalse(r["ok"])
        self.assertEqual(r["kernels_over_tolerance"], ["sliding/qkv"])
        self.assertEqual(r["end_to_end_speedup"], {"vs_eager": 2.0})
        self.assertIn("sliding/qkv nan", bench_gemma.format_table([r]))


    def test_what_pytorch_could_not_fit_in_memory_is_left_out_of_the_ratios_and_said(self):
        kernels = {"full": {"attention": {"twist_ms": 1.0, "pytorch_ms": None},
                            "qkv": {"twist_ms": 1.0, "pytorch_ms": 0.5}}}
        shape = gemma.LayerShape("decode", batch=64, keys=32768)
        r = bench_gemma.new_record(shape, "H200", "2026-12-03", 2)
        r["out_of_memory"] = {"eager forward": "CUDA out of memory. Tried to allocate 64.00 GiB"}
        errors = {"logits": 0.01, "hidden_states": 0.01}
        r = bench_gemma.finish_record(r, errors, errors, kernels, {"full": {"attention": None, "qkv": 0.003}},
                                      {"full": bench_gemma.layer_kernels_ms(kernels["full"])},
                                      {"eager": None, "twist": 3.0}, {"full": {"eager": None, "twist": 1.5}})
        self.assertTrue(r["ok"])
        self.assertEqual(r["speedup"], {"full/qkv": 0.5})
        self.assertEqual(r["unmeasured"], ["full/attention"])
        self.assertEqual(r["kernels_unchecked"], ["full/attention"])
        self.assertEqual(r["layer_ms"]["full"], {"twist": 2.0, "pytorch": None})
        self.assertEqual(r["end_to_end_speedup"], {})
        table = bench_gemma.format_table([r])
        self.assertIn("64.00 GiB", table)
        self.assertIn("full/qkv", table)

    def test_the_references_check_as_many_sequences_as_fit_the_check_budget(self):
        decode, prefill = gemma.LayerShape("decode", batch=64, keys=32768), gemma.LayerShape("prefill", 8, 2048)
        self.assertEqual(bench_gemma.checked_batch(decode), 1)
        self.assertEqual(bench_gemma.checked_batch(prefill), bench_gemma.CHECK_TOKENS // 2048)
        self.assertEqual(bench_gemma.checked_batch(gemma.LayerShape("prefill", 2, 2048)), 2)


    def test_a_case_is_named_as_its_directory(self):
        for shape in bench_gemma.cases(quick=False):
            name = bench_gemma.case_directory("m", shape).name
            self.assertEqual(bench_gemma.parse_case(name), shape)
        self.assertEqual(bench_gemma.parse_args(["--case", "decode_B64_L32768", "--case", "prefill_B8_S8192"]).case,
                         [gemma.LayerShape("decode", 64, keys=32768), gemma.LayerShape("prefill", 8, 8192)])
        with self.assertRaises(SystemExit):
            bench_gemma.parse_args(["--case", "decode_B64"])


class ExportTest(unittest.TestCase):
    def test_a_case_directory_holds_both_layer_types_the_sliding_one_at_its_window(self):
        import os
        import tempfile
        twist = os.environ.get("TWIST", str(Path(__file__).resolve().parents[2] / "build" / "release" / "apps" /
                                            "twist" / "twist"))
        if not Path(twist).exists():
            self.skipTest(f"no twist binary at {twist} (set TWIST)")
        tiny, shape = gemma.CONFIGS["tiny"], gemma.LayerShape("decode", batch=2, keys=12)
        with tempfile.TemporaryDirectory() as out:
            directory = bench_gemma.case_directory(out, shape)
            for layer in ("sliding", "full"):  # as export_all does, at the tiny configuration
                gemma.export_layer_kernels(twist, directory, "tiny", layer, gemma.layer_shape(tiny, layer, shape))
            kernels = gemma.TwistKernels(directory, "tiny", [shape])
        # The sliding layer's kernels are those of its window (5 keys), the full layer's of all 12.
        self.assertEqual(sorted((layer, s.keys) for layer, s in kernels.manifests), [("full", 12), ("sliding", 5)])


if __name__ == "__main__":
    unittest.main()
