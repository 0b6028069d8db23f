"""What the GPU's clock does while a GEMM runs for seconds: twist's exported kernel and torch.matmul (cuBLAS) on
the same inputs, each launched back to back for --seconds while nvidia-smi samples the SM clock, the power draw
and the clock event (throttle) reasons. The tensor cores' peak follows the clock (dense f16/bf16 on Hopper:
4096 FLOP per SM per cycle), so a GEMM's TFLOP/s against the peak at the clock it actually ran at says how much
of the gap to a fixed TFLOP/s target is the kernel and how much is the chip's power limit.

    python3 apps/gemm/sustained_clocks.py MANIFEST [MANIFEST...] [--seconds 4] [--out clocks.json]

Each manifest is a GEMM exported by `twist export gemm` (op "gemm"); inputs are N(0, 1) in its dtype (the
power a GEMM draws depends on its data: zeros would flatter the clock). Prints a table; writes JSON.
"""
from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "python"))  # the twist package, for its runtime
from twist.runtime import Program, load_manifest, torch_dtype  # noqa: E402

FLOP_PER_SM_CYCLE = 4096  # dense f16/bf16 wgmma on Hopper: 989.4 TFLOP/s on 132 SMs at 1830 MHz (H100 SXM)
QUERY = "clocks.sm,power.draw,clocks_event_reasons.active"


def sample_while(fn, seconds: float) -> tuple[int, float, list[tuple[float, float, str]]]:
    """Calls fn() back to back for `seconds` (synchronizing every 50 calls) while nvidia-smi samples every 50 ms;
    returns the calls made, the seconds they took, and the samples (MHz, W, reasons) of the middle 80%."""
    import torch
    with tempfile.NamedTemporaryFile("r", suffix=".csv") as log:
        sampler = subprocess.Popen(["nvidia-smi", f"--query-gpu={QUERY}", "--format=csv,noheader,nounits",
                                    "-lms", "50", "-f", log.name])
        try:
            calls, start = 0, time.perf_counter()
            while time.perf_counter() - start < seconds:
                for _ in range(50):
                    fn()
                calls += 50
                torch.cuda.synchronize()
            elapsed = time.perf_counter() - start
        finally:
            sampler.terminate()
            sampler.wait()
        rows = [line.split(", ") for line in log.read().splitlines() if line.count(",") == 2]
    samples = [(float(mhz), float(watts), reasons) for mhz, watts, reasons in rows]
    cut = len(samples) // 10
    return calls, elapsed, samples[cut:len(samples) - cut] or samples


def summarize(name: str, flop: float, calls: int, elapsed: float, samples, sms: int) -> dict:
    mhz = statistics.median(s[0] for s in samples)
    tflops = flop * calls / elapsed / 1e12
    peak = sms * FLOP_PER_SM_CYCLE * mhz * 1e6 / 1e12
    return {"name": name, "tflops": tflops, "sm_mhz_median": mhz,
            "power_w_median": statistics.median(s[1] for s in samples),
            "clock_event_reasons": sorted({s[2] for s in samples}), "peak_tflops_at_clock": peak,
            "fraction_of_peak_at_clock": tflops / peak, "samples": len(samples)}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("manifests", nargs="+")
    p.add_argument("--seconds", type=float, default=4.0)
    p.add_argument("--out")
    args = p.parse_args()
    import torch
    torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction = False
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    generator = torch.Generator(device="cuda").manual_seed(0)
    results = []
    for path in args.manifests:
        manifest = load_manifest(path)
        if manifest.notes.get("op") != "gemm":
            raise SystemExit(f"{path}: not a GEMM manifest (op {manifest.notes.get('op')!r})")
        with Program(manifest) as program:
            a, b = program.tensors["A"], program.tensors["B"]
            a.copy_(torch.randn(a.shape, generator=generator, device="cuda", dtype=a.dtype))
            b.copy_(torch.randn(b.shape, generator=generator, device="cuda", dtype=b.dtype))
            flop = 2.0 * a.shape[-2] * a.shape[-1] * b.shape[-1]
            dtype = torch_dtype(manifest.notes["dtype"]) if "dtype" in manifest.notes else a.dtype
            shape = f"{a.shape[-2]}x{b.shape[-1]}x{a.shape[-1]} {str(dtype).removeprefix('torch.')}"
            for name, fn in ((f"twist {manifest.label}", program.launch),
                             ("cuBLAS (torch.matmul)", lambda: torch.matmul(a, b))):
                fn()
                torch.cuda.synchronize()
                r = summarize(name, flop, *sample_while(fn, args.seconds), sms)
                r["shape"] = shape
                results.append(r)
                print(f"{shape:>22}  {name[:60]:60} {r['tflops']:7.1f} TFLOP/s  {r['sm_mhz_median']:6.0f} MHz  "
                      f"{r['power_w_median']:5.0f} W  {100 * r['fraction_of_peak_at_clock']:5.1f}% of "
                      f"{r['peak_tflops_at_clock']:.0f} at that clock  reasons {','.join(r['clock_event_reasons'])}",
                      flush=True)
    if args.out:
        Path(args.out).write_text(json.dumps({"gpu": torch.cuda.get_device_name(0), "seconds": args.seconds,
                                              "query": QUERY, "results": results}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
