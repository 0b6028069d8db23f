"""The host path of one twist custom op: the Python time of a call (twist.torch_ops' CUDA implementation through
torch.ops' dispatch) beside the kernels' device time, for each kernel of one exported Gemma layer. At decode a
projection runs for tens of microseconds, so a call that takes longer on the host than its kernels on the device
leaves the GPU waiting.

    PYTHONPATH=python python3 apps/gemma/bench_host_path.py --manifests .gpu/gemma_manifests/decode_B8_L4096 \
        --batch 8 --keys 4096

Host time: the wall time of CALLS calls queued back to back with no synchronization, divided by CALLS; elapsed:
the GPU's time per call between CUDA events around the same calls, which is the kernels' time when the host keeps
ahead and the host time when it does not. Both are medians over REPEATS. Prints one JSON object per kernel.
"""
import argparse
import json
import statistics
import time

import torch

from twist import gemma

CALLS, REPEATS = 200, 5


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--manifests", required=True)
    p.add_argument("--batch", type=int, required=True)
    p.add_argument("--keys", type=int, required=True)
    args = p.parse_args()
    shape = gemma.LayerShape("decode", batch=args.batch, keys=args.keys)
    kernels = gemma.TwistKernels(args.manifests, "31b", [shape])
    for (layer, seen), manifests in kernels.manifests.items():
        for name, manifest in manifests.items():
            inputs = {b.name: torch.randn(b.shape, device="cuda").to(gemma_dtype(b.dtype)) if b.dtype != "i32"
                      else torch.zeros(b.shape, dtype=torch.int32, device="cuda")
                      for b in manifest.with_role("input")}
            kernels.call(layer, seen, name, **inputs)
            torch.cuda.synchronize()
            host, device = [], []
            for _ in range(REPEATS):
                start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                torch.cuda.synchronize()
                began = time.perf_counter()
                start.record()
                for _ in range(CALLS):
                    kernels.call(layer, seen, name, **inputs)
                end.record()
                host.append((time.perf_counter() - began) / CALLS * 1e6)
                torch.cuda.synchronize()
                device.append(start.elapsed_time(end) / CALLS * 1e3)
            print(json.dumps({"layer": layer, "kernel": name, "host_us_per_call": round(statistics.median(host), 1),
                              "elapsed_us_per_call": round(statistics.median(device), 1)}), flush=True)


def gemma_dtype(name: str):
    return getattr(torch, {"bf16": "bfloat16", "f16": "float16", "f32": "float32"}[name])


if __name__ == "__main__":
    main()
