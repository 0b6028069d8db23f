"""The q, k, v head norms and RoPE in the QKV projection's epilogue (`qkv_norm_rope`, apps/gemma/README.md)
against the four kernels the layer runs for them (`qkv`, `q_norm_rope`, `k_norm_rope`, `v_norm`), on the GPU,
from the manifests `twist export gemma` writes (it exports `qkv_norm_rope` where the projection's plan is one
head wide: the sliding layers at prefill). B 1, where the fused output [heads + 2 kv_heads, S, D] is
attention's [1, H, S, D] side by side.

    build/release/apps/twist/twist export gemma --config 31b --layer sliding --phase prefill --batch 1 \
        --tokens 2048 --out .gpu/qkvfuse/manifests
    # on the GPU machine (torch with its own CUDA libraries):
    PYTHONPATH=python python3 apps/gemma/bench_qkv_norms.py --manifests .gpu/qkvfuse/manifests --out r.json

Checks: the fused output against the four kernels' (max |difference| and relative L2), and both against the
same steps in f32 PyTorch from the bf16 projection (relative L2). Times: the four kernels in a row and the fused
kernel (median ms, bench_gemma.bench_ms)."""
import argparse
import json
import math
import sys
from pathlib import Path

from bench_gemma import bench_ms
from twist import gemma
from twist.runtime import load_manifest
from twist.torch_ops import register_manifest

UNFUSED = ("qkv", "q_norm_rope", "k_norm_rope", "v_norm")


def rotary_tables(tokens: int, head_dim: int, theta: float = 10000.0):
    """cos, sin [tokens, D] as transformers' default rotary embedding makes them (rotate-half layout)."""
    import torch
    inv_freq = 1.0 / theta ** (torch.arange(0, head_dim, 2, dtype=torch.float32, device="cuda") / head_dim)
    freqs = torch.outer(torch.arange(tokens, dtype=torch.float32, device="cuda"), inv_freq)
    angles = torch.cat([freqs, freqs], dim=-1)
    return angles.cos().to(torch.bfloat16), angles.sin().to(torch.bfloat16)


def reference(projected, q_w, k_w, cos, sin, heads: int, kv_heads: int, head_dim: int, eps: float):
    """The norms in f32 from the bf16 projection [S, columns]: [heads + 2 kv_heads, S, D]."""
    import torch
    x = projected.float().view(projected.shape[0], -1, head_dim).transpose(0, 1)  # [groups, S, D]
    normed = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)
    q = normed[:heads] * q_w.float()
    k = normed[heads:heads + kv_heads] * k_w.float()
    v = normed[heads + kv_heads:heads + 2 * kv_heads]

    def rope(t):
        half = head_dim // 2
        rotated = torch.cat([-t[..., half:], t[..., :half]], dim=-1)
        return t * cos.float() + rotated * sin.float()
    return torch.cat([rope(q), rope(k), v])


def relative_l2(got, want) -> float:
    return float((got.float() - want.float()).norm() / want.float().norm())


def main() -> int:
    import torch
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--manifests", required=True)
    parser.add_argument("--config", default="31b")
    parser.add_argument("--tokens", type=int, default=2048)
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    dims = gemma.CONFIGS[args.config]
    shape = gemma.LayerShape("prefill", 1, args.tokens)
    kv, d, _ = dims.attention("sliding")
    columns = dims.qkv_columns("sliding")
    def path(kernel: str) -> Path:
        return Path(args.manifests) / (shape.label(args.config, "sliding", kernel) + ".json")
    ops = {kernel: register_manifest(load_manifest(path(kernel))) for kernel in UNFUSED + ("qkv_norm_rope",)}

    torch.manual_seed(0)
    s, hidden = args.tokens, dims.hidden
    y = torch.randn(s, hidden, device="cuda").to(torch.bfloat16)
    w = (torch.randn(hidden, columns, device="cuda") / math.sqrt(hidden)).to(torch.bfloat16)
    q_w, k_w = (torch.empty(d, device="cuda").uniform_(0.5, 1.5).to(torch.bfloat16) for _ in range(2))
    cos, sin = rotary_tables(s, d)

    def unfused():
        projected = ops["qkv"](y, w)
        x = projected.view(1, s, -1, d)
        return projected, (ops["q_norm_rope"](x, q_w, cos[None], sin[None]),
                           ops["k_norm_rope"](x, k_w, cos[None], sin[None]), ops["v_norm"](x))

    def fused():
        return ops["qkv_norm_rope"](y, w, q_w, k_w, cos, sin)

    projected, (q, k, v) = unfused()
    separate = torch.cat([q[0], k[0], v[0]])
    together = fused()
    torch.cuda.synchronize()
    exact = reference(projected, q_w, k_w, cos, sin, dims.heads, kv, d, dims.eps)
    record = {
        "case": f"{args.config} sliding prefill B1 S{s}: [{s}, {hidden}] x [{hidden}, {columns}], heads of {d}",
        "schedule": json.loads(path("qkv_norm_rope").read_text()).get("schedule"),
        "fused_vs_unfused_max_abs": float((together.float() - separate.float()).abs().max()),
        "fused_vs_unfused_rel_l2": relative_l2(together, separate),
        "fused_elements_differing": float((together != separate).float().mean()),
        "fused_vs_f32_rel_l2": relative_l2(together, exact),
        "unfused_vs_f32_rel_l2": relative_l2(separate, exact),
        "unfused_ms": bench_ms(unfused),
        "qkv_ms": bench_ms(lambda: ops["qkv"](y, w)),
        "fused_ms": bench_ms(fused),
    }
    record["speedup"] = record["unfused_ms"] / record["fused_ms"]
    print(json.dumps(record, indent=2))
    Path(args.out).write_text(json.dumps(record, indent=2) + "\n")
    ok = record["fused_vs_f32_rel_l2"] < 1.5 * record["unfused_vs_f32_rel_l2"] + 1e-3
    print("PASS" if ok else "FAIL: the fused output is further from f32 than the four kernels'")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
