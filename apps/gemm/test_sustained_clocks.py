"""Tests of the sustained-clock probe's accounting (apps/gemm/sustained_clocks.py), without a GPU or PyTorch.
Run from the repository root: python3 -m unittest apps/gemm/test_sustained_clocks.py
"""
import sys
import unittest
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import sustained_clocks  # noqa: E402


class PeakAtTheClock(unittest.TestCase):
    def test_the_peak_follows_the_median_clock_and_the_rate_counts_every_call(self):
        # 132 SMs at 1830 MHz are the H100 SXM's published 989.4 dense f16 TFLOP/s.
        samples = [(1830.0, 650.0, "0x0"), (1830.0, 690.0, "0x4"), (1000.0, 700.0, "0x4")]
        r = sustained_clocks.summarize("k", flop=2 * 4096.0**3, calls=1000, elapsed=0.2, samples=samples, sms=132)
        self.assertAlmostEqual(r["peak_tflops_at_clock"], 989.43, places=1)
        self.assertAlmostEqual(r["tflops"], 2 * 4096.0**3 * 1000 / 0.2 / 1e12)
        self.assertAlmostEqual(r["fraction_of_peak_at_clock"], r["tflops"] / r["peak_tflops_at_clock"])
        self.assertEqual(r["power_w_median"], 690.0)
        self.assertEqual(r["clock_event_reasons"], ["0x0", "0x4"])


if __name__ == "__main__":
    unittest.main()
