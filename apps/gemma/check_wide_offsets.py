"""Issue 18, 64-bit offsets: the Gemma 31B full layer's decode attention at B64 L32768 (K and V hold 2^32
elements each; the exported kernel addresses them in 64 bits) against PyTorch on sequences whose offsets pass
2^31 (32..63) and below it; and what 64-bit offsets cost: the same attention at B16 L32768 exported as usual
(32-bit offsets) and with --wide-offsets true (every buffer of symbolic extent addressed in 64 bits).

Export first, where twist is built (NVRTC; no GPU), into one directory DIR:
    PYTHONPATH=python python3 apps/gemma/bench_gemma.py --export-only --case decode_B64_L32768 --manifests DIR/m
    twist export gemma --layer full --phase decode --batch 16 --tokens 1 --kv-len 32768 --out DIR/n16
    twist export gemma --layer full --phase decode --batch 16 --tokens 1 --kv-len 32768 --wide-offsets true \
        --out DIR/w16
then on the GPU: PYTHONPATH=python python3 apps/gemma/check_wide_offsets.py DIR OUT (writes OUT/wide.json; the
run of 2026-12-04 is bench/results/gemma6_wide_offsets.json). Exits 1 if a check fails."""
import json
import sys
import time
from pathlib import Path

import torch

from bench_gemma import relative_l2  # (beside this file)
from twist.runtime import load_manifest
from twist.torch_ops import register_manifest

HERE = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(".")
OUT = Path(sys.argv[2]) if len(sys.argv) > 2 else Path("/tmp")
GROUP = 8  # query heads per KV head (full layers: 32 heads, 4 KV heads of 512)


def op(path, name):
    m = load_manifest(path)
    return register_manifest(m, name), m


def reference(q, k, v):
    """softmax(q k^T) v in f32 for one sequence: q [H, 1, D], k and v [KV, L, D]; the kernels' scale is 1
    (Gemma's attention scaling)."""
    k = k.float().repeat_interleave(GROUP, dim=0)
    v = v.float().repeat_interleave(GROUP, dim=0)
    s = q.float() @ k.transpose(1, 2)
    return torch.softmax(s, dim=-1) @ v


def time_ms(fn, reps=20):
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return sorted(times)[len(times) // 2]


def inputs(batch, keys, gen):
    q = torch.randn(batch, 32, 1, 512, device="cuda", dtype=torch.bfloat16, generator=gen) * 0.1
    k = torch.randn(batch, 4, keys, 512, device="cuda", dtype=torch.bfloat16, generator=gen)
    v = torch.randn(batch, 4, keys, 512, device="cuda", dtype=torch.bfloat16, generator=gen)
    return q, k, v


def main():
    result, t0 = {"gpu": torch.cuda.get_device_name()}, time.monotonic()
    gen = torch.Generator(device="cuda").manual_seed(0)
    # B64 L32768: the kernel the benchmark runs.
    big, manifest = op(next((HERE / "m").glob("*/gemma_31b_full_decode_B64_S1_L32768_attention.json")), "b64")
    result["b64_wide_offsets"] = {k.name: list(k.wide_offsets) for k in manifest.kernels}
    q, k, v = inputs(64, 32768, gen)
    out = big(q, k, v)
    torch.cuda.synchronize()
    errors = {}
    for b in (0, 15, 31, 32, 48, 63):  # offsets into K and V pass 2^31 from sequence 32 on
        errors[b] = relative_l2(out[b], reference(q[b], k[b], v[b]))
    result["b64_errors_by_sequence"] = errors
    result["b64_ok"] = all(e < 2e-2 for e in errors.values())
    kv_bytes = 2 * k.numel() * 2
    result["b64_attention_ms"] = time_ms(lambda: big(q, k, v))
    result["b64_kv_tb_per_s"] = kv_bytes / result["b64_attention_ms"] / 1e9
    print(f"B64 L32768 attention: errors by sequence {errors}, {result['b64_attention_ms']:.3f} ms "
          f"({result['b64_kv_tb_per_s']:.2f} TB/s of K and V) [{time.monotonic() - t0:.0f} s]", flush=True)
    del q, k, v, out
    torch.cuda.empty_cache()
    # B16 L32768 (2^30 elements: 32-bit offsets do) as exported, and with every offset in 64 bits.
    narrow, _ = op(HERE / "n16/gemma_31b_full_decode_B16_S1_L32768_attention.json", "b16_narrow")
    wide, wm = op(HERE / "w16/gemma_31b_full_decode_B16_S1_L32768_attention.json", "b16_wide")
    result["b16_forced_wide_offsets"] = {k.name: list(k.wide_offsets) for k in wm.kernels}
    q, k, v = inputs(16, 32768, gen)
    a, w = narrow(q, k, v), wide(q, k, v)
    torch.cuda.synchronize()
    result["b16_identical"] = bool(torch.equal(a, w))
    result["b16_error_seq15"] = relative_l2(w[15], reference(q[15], k[15], v[15]))
    rounds = {"narrow": [], "wide": []}
    for _ in range(3):  # interleaved, so that clocks and the machine's state weigh on both alike
        rounds["narrow"].append(time_ms(lambda: narrow(q, k, v)))
        rounds["wide"].append(time_ms(lambda: wide(q, k, v)))
    result["b16_narrow_ms"], result["b16_wide_ms"] = min(rounds["narrow"]), min(rounds["wide"])
    result["b16_rounds_ms"] = rounds
    result["b16_wide_over_narrow"] = result["b16_wide_ms"] / result["b16_narrow_ms"]
    result["b16_kv_tb_per_s_narrow"] = 2 * k.numel() * 2 / result["b16_narrow_ms"] / 1e9
    print(f"B16 L32768 attention: 32-bit offsets {result['b16_narrow_ms']:.3f} ms, all 64-bit "
          f"{result['b16_wide_ms']:.3f} ms ({result['b16_wide_over_narrow']:.3f}x), identical outputs "
          f"{result['b16_identical']}, error {result['b16_error_seq15']:.2e} [{time.monotonic() - t0:.0f} s]",
          flush=True)
    (OUT / "wide.json").write_text(json.dumps(result, indent=1) + "\n")
    return 0 if result["b64_ok"] and result["b16_identical"] else 1


if __name__ == "__main__":
    sys.exit(main())
