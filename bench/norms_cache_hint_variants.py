"""Cache-hint variants of exported norm kernels: the experiment behind bench/results/norms5.json (docs/pipelines.md,
"Cache hints"). Not part of the product: it rewrites the 16-byte row loads and output stores of each exported .cu
with inline PTX, compiles it with nvcc for sm_90a, and writes a manifest per variant (label + _TAG) that
apps/norms/bench_norms.py times beside the original as a variant of its problem.

    bench/export_norms_suite.sh /tmp/norms build/release/apps/twist/twist
    python3 bench/norms_cache_hint_variants.py /tmp/norms OUT_DIR [TAG ...]

Variants: nvcc (the same source through nvcc: the control for the compiler), ldna (row loads
ld.global.nc.L1::no_allocate), ldef (those with an L2 evict_first policy, as Triton's eviction_policy='evict_first'),
stcs (stores st.global.cs), ldefstcs (both)."""
import json
import re
import subprocess
import sys
from pathlib import Path

HELPERS = r'''
__device__ __forceinline__ void twist_load_row(void *dst, const void *src, int) {
  uint4 v;
  asm("{\n .reg .b64 pol;\n createpolicy.fractional.L2::evict_first.b64 pol, 1.0;\n"
      " LOADOP {%0,%1,%2,%3}, [%4]POLICY;\n}"
      : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(src));
  *reinterpret_cast<uint4 *>(dst) = v;
}
__device__ __forceinline__ void twist_store_out(void *dst, const void *src, int) {
  const uint4 v = *reinterpret_cast<const uint4 *>(src);
  asm volatile("STOREOP [%0], {%1,%2,%3,%4};" ::"l"(dst), "r"(v.x), "r"(v.y), "r"(v.z), "r"(v.w) : "memory");
}
'''
VARIANTS = {
    "nvcc": (None, None),  # the same source through nvcc: the control for the compiler's difference
    "ldna": ("ld.global.nc.L1::no_allocate.v4.u32", None),
    "ldef": ("ld.global.nc.L1::no_allocate.L2::cache_hint.v4.u32", None),
    "stcs": (None, "st.global.cs.v4.u32"),
    "ldefstcs": ("ld.global.nc.L1::no_allocate.L2::cache_hint.v4.u32", "st.global.cs.v4.u32"),
}
ROW_LOAD = re.compile(r"twist_copy_sync<16>\((&\w*(_regs\[|x_v\d\[))")
STORE = re.compile(r"twist_copy_sync<16>\((&(?!\w*(_regs|_v\d)\[)\w+\[.*&\w+_out\w*\[0\], 16\);)")

src_dir, out_dir = Path(sys.argv[1]), Path(sys.argv[2])
only = sys.argv[3:]
out_dir.mkdir(parents=True, exist_ok=True)
for mpath in sorted(src_dir.glob("*.json")):
    m = json.loads(mpath.read_text())
    if "shifted_sums" in m["label"]:
        continue
    for tag, (ld, st) in VARIANTS.items():
        if only and tag not in only:
            continue
        v = json.loads(json.dumps(m))
        v["label"] = f"{m['label']}_{tag}"
        for k in v["kernels"]:
            cu = (src_dir / k["cubin"]).with_suffix(".cu").read_text()
            helpers = (HELPERS.replace("POLICY", ", pol" if ld and "cache_hint" in ld else "")
                       .replace("LOADOP", ld or "ld.global.v4.u32").replace("STOREOP", st or "st.global.v4.u32"))
            cu = cu.replace("template <int Bytes>\n__device__ __forceinline__ void twist_copy_async",
                            helpers + "template <int Bytes>\n__device__ __forceinline__ void twist_copy_async", 1)
            n_ld = n_st = 0
            if ld:
                cu, n_ld = ROW_LOAD.subn(r"twist_load_row(\1", cu)
            if st:
                cu, n_st = STORE.subn(r"twist_store_out(\1", cu)
            cubin = f"{v['label']}.{k['name']}.cubin"
            src = out_dir / (cubin[:-6] + ".cu")
            src.write_text(cu)
            r = subprocess.run(["nvcc", "-cubin", "-arch=sm_90a", "-std=c++17", "-Xptxas", "-v", "-o",
                                str(out_dir / cubin), str(src)], capture_output=True, text=True)
            if r.returncode:
                sys.exit(f"{src}: {r.stderr}")
            regs = re.findall(r"Used (\d+) registers", r.stderr)
            spill = re.findall(r"(\d+) bytes spill stores", r.stderr)
            print(f"{v['label']}: {n_ld} row loads, {n_st} stores rewritten; regs {regs} spill {spill}")
            k["cubin"] = cubin
            src.unlink()
        (out_dir / f"{v['label']}.json").write_text(json.dumps(v))
