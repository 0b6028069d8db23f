#!/usr/bin/env bash
# Exports every manifest (and its cubins, sm_90a) that apps/gemm/bench_gemm.py and apps/gemm/accuracy_study.py
# read, on this machine: NVRTC compiles without a GPU. Run from the repository root:
#
#   bench/export_gemm_suite.sh OUT_DIR [TWIST_BINARY]
#
# OUT_DIR/gemm                 the benchmark shapes in f16 and bf16, two tilings each
# OUT_DIR/accumulation         the study: f16 inputs, f32 output, M = N = 256, K = 256 .. 16384, per strategy
# OUT_DIR/accumulation_timing  4096^3 with f16 inputs and output, per strategy
# OUT_DIR/gemm_rule            the tiling chosen by the schedule rule (apps/gemm/gemm_rule.h, `--rule true`) for
#                              the suite's shapes, shapes outside the suite, and skinny shapes (M = 1 and 16),
#                              which bench_gemm.py also reports in GB/s against the HBM read bandwidth it measures
#
# TWIST_BINARY defaults to build/bench/apps/twist/twist (see bench/README.md for the build command).
set -euo pipefail

source "$(dirname "$0")/export_common.sh"
parse_export_args "$@"
subs=(gemm accumulation accumulation_timing gemm_rule)
for sub in "${subs[@]}"; do require_no_manifests "$out/$sub"; done

export_gemm() {
  "$twist" export gemm "$@" >/dev/null
}

# M x N x K, as baseline.py measured cuBLAS.
shapes=(1024x1024x1024 2048x2048x2048 4096x4096x4096 8192x8192x8192 4096x15360x3840 4096x3840x15360
        16x15360x3840 1x4096x4096)
# The first tiling, for every shape: block 128x128x64 and warp 64x64 with 3 stages (two blocks of 96 KB fit an
# SM). The second: for M >= 1024 block 128x256x64 with 3 stages, which halves the loads of A per flop. Both
# were the best of their block size in a sweep at 4096^3 and 8192^3 f16 on the H200 (2026-12-03, after the
# write-back epilogue: 423 and 428 TFLOP/s at 4096^3, where 128x128x32 and 128x256x32 with 4 stages, the
# tilings before, measured 383 and 399-418). For the skinny shapes (M = 1, 16) a 128-row block computes
# mostly padding and covers few SMs, so instead small blocks with K split 8 ways, to put more of the machine
# on reading B.
first=(--block 128x128x64 --warp 64x64 --stages 3)
large=(--block 128x256x64 --warp 64x64 --stages 3)
skinny=(--block 64x64x32 --warp 32x32 --split-k 8)
for dtype in f16 bf16; do
  for shape in "${shapes[@]}"; do
    export_gemm --shape "$shape" --dtype "$dtype" "${first[@]}" --out "$out/gemm"
    if (( ${shape%%x*} < 1024 )); then
      export_gemm --shape "$shape" --dtype "$dtype" "${skinny[@]}" --out "$out/gemm"
    else
      export_gemm --shape "$shape" --dtype "$dtype" "${large[@]}" --out "$out/gemm"
    fi
  done
done

# hybrid:N promotes every N k-steps of 16, and with block_k = 32 only an even N promotes inside the K loop (an
# odd N > 1 would promote once, at the end, which is f16 accumulation); 2 promotes every block, 8 every 4 blocks.
# The labels are explicit because the default label does not tell hybrid:2 from hybrid:8.
strategies=(f32 f16 hybrid:2 hybrid:8)
for k in 256 512 1024 2048 4096 8192 16384; do
  for s in "${strategies[@]}"; do
    export_gemm --shape "256x256x$k" --dtype f16 --output f32 --accumulation "$s" \
      --label "acc_f16_f32out_256x256x${k}_${s/:/}" --out "$out/accumulation"
  done
done
for s in "${strategies[@]}"; do
  export_gemm --shape 4096x4096x4096 --dtype f16 --accumulation "$s" \
    --label "acc_time_f16_4096x4096x4096_${s/:/}" --out "$out/accumulation_timing"
done

# The rule is judged on shapes it was not tuned on: model layers' shapes (a 4096-wide model's MLP and
# attention projections, a 5120-wide one's), odd sizes, and skinny decode shapes (M = 1 and 16 tokens). K stays
# a multiple of 8, so that rows of A stay 16-byte aligned (other K take the narrow-copy fallback).
rule_shapes=("${shapes[@]}"
             4096x11008x4096 4096x4096x11008 2048x5120x5120 8192x2048x1024 3000x5000x2000 1000x1000x7000
             777x3333x1240 512x512x8192
             1x11008x4096 1x4096x11008 1x8192x8192 1x14336x4096 1x5120x13824
             16x11008x4096 16x4096x11008 16x8192x8192 16x14336x4096 16x5120x13824)
for dtype in f16 bf16; do
  for shape in "${rule_shapes[@]}"; do
    export_gemm --shape "$shape" --dtype "$dtype" --rule true --out "$out/gemm_rule"
  done
done

for sub in "${subs[@]}"; do
  echo "$out/$sub: $(ls "$out/$sub"/*.json | wc -l) manifests, $(du -sh "$out/$sub" | cut -f1)"
done
echo "total: $(du -sh "$out" | cut -f1)"
