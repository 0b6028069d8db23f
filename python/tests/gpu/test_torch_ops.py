"""On a GPU: twist's GEMM and attention, exported ahead of time (bench/export_torch_ops.sh), as PyTorch custom ops
called inside torch.compile'd functions, against PyTorch's own results, and timed next to PyTorch's kernels.

    TWIST_TORCH_OPS_MANIFESTS=.gpu/manifests/torch_ops python3 -m pytest -q -s python/tests/gpu

The timings are printed (and written to $OUT/torch_ops.json where OUT is set); they are measurements, not
assertions. Without PyTorch or a GPU every test skips, saying which."""
import json
import math
import os
from pathlib import Path

import pytest

torch = pytest.importorskip("torch", reason="PyTorch is not installed")
if not torch.cuda.is_available():
    pytest.skip("no CUDA GPU", allow_module_level=True)

from twist.runtime import load_manifest  # noqa: E402
from twist.torch_ops import register_manifest  # noqa: E402

REPO = Path(__file__).resolve().parents[3]
MANIFESTS = Path(os.environ.get("TWIST_TORCH_OPS_MANIFESTS", REPO / ".gpu/manifests/torch_ops"))
TIMINGS = {}


def manifest(label: str):
    path = MANIFESTS / f"{label}.json"
    if not path.is_file():
        pytest.fail(f"{path} is missing: export the kernels first with bench/export_torch_ops.sh {MANIFESTS} "
                    "(on a machine with twist built) and carry the folder here")
    return load_manifest(path)


def median_ms(fn, repeats=25, warmup=5) -> float:
    """The median over `repeats` runs, each between two events, with the L2 cache overwritten before each."""
    l2_bytes = torch.cuda.get_device_properties(0).L2_cache_size
    flush = torch.empty(2 * l2_bytes, dtype=torch.uint8, device="cuda")
    for _ in range(warmup):
        fn()
    times = []
    for r in range(repeats):
        flush.fill_(r)
        start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        stop.record()
        stop.synchronize()
        times.append(start.elapsed_time(stop))
    times.sort()
    return times[len(times) // 2]


def relative_l2(got, want) -> float:
    return float((got.double() - want.double()).norm() / want.double().norm())


def record(name: str, twist_ms: float, torch_ms: float, flop: float) -> None:
    TIMINGS[name] = {"twist_ms": twist_ms, "torch_ms": torch_ms, "twist_tflops": flop / twist_ms / 1e9,
                     "torch_tflops": flop / torch_ms / 1e9, "twist_over_torch": torch_ms / twist_ms}
    print(f"\n{name}: twist {twist_ms:.4f} ms ({flop / twist_ms / 1e9:.1f} TFLOP/s), PyTorch {torch_ms:.4f} ms "
          f"({flop / torch_ms / 1e9:.1f} TFLOP/s): twist at {torch_ms / twist_ms:.3f}x PyTorch's speed")
    if os.environ.get("OUT"):
        Path(os.environ["OUT"], "torch_ops.json").write_text(json.dumps(TIMINGS, indent=2))


def test_gemm_as_a_custom_op_in_a_compiled_function_matches_torch_matmul():
    m = manifest("torch_gemm_f16_4096")
    gemm = register_manifest(m)
    (a_spec, b_spec) = m.with_role("input")
    a = torch.randn(a_spec.shape, dtype=torch.float16, device="cuda")
    b = torch.randn(b_spec.shape, dtype=torch.float16, device="cuda")

    @torch.compile(fullgraph=True)
    def ours(x, y):
        return torch.relu(gemm(x, y)) + 1

    @torch.compile(fullgraph=True)
    def theirs(x, y):
        return torch.relu(x @ y) + 1

    want = torch.relu(a.float() @ b.float()) + 1
    got = ours(a, b)
    assert got.shape == want.shape and got.dtype == torch.float16
    assert relative_l2(got, want) < 5e-3
    k = a_spec.shape[1]
    record("gemm f16 4096^3 (+relu+1, torch.compile)", median_ms(lambda: ours(a, b)), median_ms(lambda: theirs(a, b)),
           2.0 * a_spec.shape[0] * b_spec.shape[1] * k)


def test_a_split_folded_by_its_last_blocks_starts_from_zeroed_counters_in_every_call():
    m = manifest("torch_gemm_f16_16x4096x4096_last_block")
    counters = [w for w in m.with_role("workspace") if w.zeroed]
    assert counters, "the export should have a zeroed workspace (the split's arrival counters)"
    gemm = register_manifest(m)
    (a_spec, b_spec) = m.with_role("input")
    for call in range(3):
        # Leave garbage where the caching allocator will place the next call's counters.
        for w in counters:
            junk = torch.full(w.shape, 0x3F3F3F3F, dtype=torch.int32, device="cuda")
            del junk
        a = torch.randn(a_spec.shape, dtype=torch.float16, device="cuda")
        b = torch.randn(b_spec.shape, dtype=torch.float16, device="cuda")
        got = gemm(a, b)
        torch.cuda.synchronize()
        assert relative_l2(got, a.float() @ b.float()) < 5e-3, f"call {call}"


def test_attention_as_a_custom_op_in_a_compiled_function_matches_sdpa():
    m = manifest("torch_attention_f16_4x16x4096x128")
    attention = register_manifest(m)
    q_spec, k_spec, v_spec = m.with_role("input")
    q, k, v = (torch.randn(s.shape, dtype=torch.float16, device="cuda") for s in (q_spec, k_spec, v_spec))
    sdpa = torch.nn.functional.scaled_dot_product_attention

    @torch.compile(fullgraph=True)
    def ours(q, k, v):
        return attention(q, k, v) * 2

    @torch.compile(fullgraph=True)
    def theirs(q, k, v):
        return sdpa(q, k, v) * 2

    want = sdpa(q.float(), k.float(), v.float()) * 2
    got = ours(q, k, v)
    assert got.shape == want.shape
    assert relative_l2(got, want) < 1e-2
    b, h, s, d = q_spec.shape
    keys = k_spec.shape[2]
    record("attention f16 4x16x4096x128 (x2, torch.compile)", median_ms(lambda: ours(q, k, v)),
           median_ms(lambda: theirs(q, k, v)), 4.0 * b * h * s * keys * d)
    assert math.isfinite(TIMINGS["attention f16 4x16x4096x128 (x2, torch.compile)"]["twist_ms"])
