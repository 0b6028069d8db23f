#!/usr/bin/env bash
# Exports every manifest (and its cubins, sm_90a) that apps/gemm/bench_gemm.py and apps/gemm/accuracy_study.py
# read, on this machine: NVRTC compiles without a GPU. Run from the repository root:
#
#   bench/export_gemm_suite.sh OUT_DIR [TWIST_BINARY]
#
# OUT_DIR/gemm                 the benchmark shapes in f16 and bf16: the schedule rule's pick (apps/gemm/gemm_rule.h,
#                              `--rule true`: the Hopper schedule) and one mma.sync tiling, the datapath before it
# OUT_DIR/gemm_rule            the rule's pick for the suite's shapes, shapes outside the suite (model layers', odd
#                              ones, some whose N or K TMA cannot copy, so that the mma.sync fallback is measured
#                              too) and skinny shapes (M = 1 and 16), which bench_gemm.py also reports in GB/s
#                              against the HBM read bandwidth it measures
# OUT_DIR/gemm_explore         skinny shapes under the Hopper tilings the rule weighs (64-row blocks 64, 128 and
#                              256 wide, K split 1 to 8 ways, the deepest ring that fits): what the rule's cost
#                              model is checked against
# OUT_DIR/accumulation         the study on mma.sync: f16 inputs, f32 output, M = N = 256, K = 256 .. 16384, per
#                              strategy
# OUT_DIR/accumulation_timing  4096^3 with f16 inputs and output, per strategy (mma.sync)
# OUT_DIR/accumulation_wgmma   the same study on the Hopper schedule (wgmma)
# OUT_DIR/accumulation_wgmma_timing   and its timing at 4096^3
#
# TWIST_BINARY defaults to build/bench/apps/twist/twist (see bench/README.md for the build command).
set -euo pipefail

source "$(dirname "$0")/export_common.sh"
parse_export_args "$@"
subs=(gemm gemm_rule gemm_explore accumulation accumulation_timing accumulation_wgmma accumulation_wgmma_timing)
for sub in "${subs[@]}"; do require_no_manifests "$out/$sub"; done

export_gemm() {
  "$twist" export gemm "$@" >/dev/null
}

# M x N x K, as baseline.py measured cuBLAS.
shapes=(1024x1024x1024 2048x2048x2048 4096x4096x4096 8192x8192x8192 4096x15360x3840 4096x3840x15360
        16x15360x3840 1x4096x4096)
# Beside the rule's pick, the mma.sync datapath's best tiling of the sweep at 4096^3 and 8192^3 f16 on the H200
# (2026-12-03: block 128x256x64, warp 64x64, 3 stages, 428 TFLOP/s); for the skinny shapes (M = 1, 16) small
# blocks with K split 8 ways.
mma_large=(--block 128x256x64 --warp 64x64 --stages 3)
mma_skinny=(--block 64x64x32 --warp 32x32 --split-k 8)
for dtype in f16 bf16; do
  for shape in "${shapes[@]}"; do
    export_gemm --shape "$shape" --dtype "$dtype" --rule true --out "$out/gemm"
    if (( ${shape%%x*} < 1024 )); then
      export_gemm --shape "$shape" --dtype "$dtype" "${mma_skinny[@]}" --out "$out/gemm"
    else
      export_gemm --shape "$shape" --dtype "$dtype" "${mma_large[@]}" --out "$out/gemm"
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

# The Hopper accumulation study: the same strategies, promoting every 64 and every 128 k (hybrid:4 and hybrid:8;
# the wgmma path promotes between k-tiles of 4 k-steps, so N must be a multiple of 4), on 128x128x64 blocks of two
# warpgroups for the study and the rule's 4096^3 tiling for the timing.
wgmma_strategies=(f32 f16 hybrid:4 hybrid:8)
for k in 256 512 1024 2048 4096 8192 16384; do
  for s in "${wgmma_strategies[@]}"; do
    export_gemm --shape "256x256x$k" --dtype f16 --output f32 --accumulation "$s" \
      --atom wgmma --block 128x128x64 --warpgroups 2 --stages 4 \
      --label "acc_wgmma_f16_f32out_256x256x${k}_${s/:/}" --out "$out/accumulation_wgmma"
  done
done
for s in "${wgmma_strategies[@]}"; do
  export_gemm --shape 4096x4096x4096 --dtype f16 --accumulation "$s" --rule true \
    --label "acc_wgmma_time_f16_4096x4096x4096_${s/:/}" --out "$out/accumulation_wgmma_timing"
done

# The rule is judged on shapes it was not tuned on: model layers' shapes (a 4096-wide model's MLP and attention
# projections, an 8B model's 14336-wide MLP, a 5120-wide model's), odd sizes (777x3333x1240, 16x5000x3001: N or K
# not a multiple of 8, which TMA cannot copy, so the rule falls back to mma.sync), and skinny decode shapes
# (M = 1 and 16 tokens).
rule_shapes=("${shapes[@]}"
             4096x11008x4096 4096x4096x11008 2048x5120x5120 8192x2048x1024 3000x5000x2000 1000x1000x7000
             777x3333x1240 512x512x8192 896x4864x4096 64x14336x4096
             1x11008x4096 1x4096x11008 1x8192x8192 1x14336x4096 1x4096x14336 1x5120x13824 1x3000x5000
             16x11008x4096 16x4096x11008 16x8192x8192 16x14336x4096 16x4096x14336 16x5120x13824 16x4096x4096
             16x5000x3001)
for dtype in f16 bf16; do
  for shape in "${rule_shapes[@]}"; do
    export_gemm --shape "$shape" --dtype "$dtype" --rule true --out "$out/gemm_rule"
  done
done

# The skinny tilings the rule weighs, each with the deepest ring that fits one block per SM (227 KB: 14 stages of
# 64x64x64 tiles of A and B, 9 of 64x128x64, 5 of 64x256x64), K split 1, 2, 4 and 8 ways; and 64x128x128 (4
# stages), which the rule does not weigh: k-tiles twice as deep halve the ring's barriers per byte of B.
explore_shapes=(1x4096x4096 16x4096x4096 1x14336x4096 16x4096x14336)
for shape in "${explore_shapes[@]}"; do
  for block in 64x64x64:14 64x128x64:9 64x256x64:5 64x128x128:4; do
    for split in 1 2 4 8; do
      export_gemm --shape "$shape" --dtype f16 --atom wgmma --block "${block%%:*}" --warpgroups 1 \
        --stages "${block##*:}" --split-k "$split" --out "$out/gemm_explore"
    done
  done
done

for sub in "${subs[@]}"; do
  echo "$out/$sub: $(ls "$out/$sub"/*.json | wc -l) manifests, $(du -sh "$out/$sub" | cut -f1)"
done
echo "total: $(du -sh "$out" | cut -f1)"
