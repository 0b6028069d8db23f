#!/usr/bin/env bash
# Exports every manifest (and its cubins, sm_90a) that apps/gemm/bench_gemm.py and apps/gemm/accuracy_study.py
# read, on this machine: NVRTC compiles without a GPU. Run from the repository root:
#
#   bench/export_gemm_suite.sh OUT_DIR [TWIST_BINARY]
#
# OUT_DIR/gemm                 the benchmark shapes in f16 and bf16: the schedule rule's pick (apps/gemm/gemm_rule.h,
#                              `--rule true`: the Hopper schedule) and one mma.sync tiling, the datapath before it
# OUT_DIR/gemm_rule            what the rule is judged by (44 manifests): its pick for the suite's shapes (f16 and
#                              bf16), 8 shapes outside it drawn at random (f16; 4 of them in bf16 too), the mid-size
#                              shapes where earlier rules went wrong (one with N and K that TMA cannot copy, so
#                              that the mma.sync fallback is measured too) and skinny shapes (M = 1 and 16, and M =
#                              8 and 48 at drawn N and K), which bench_gemm.py also reports in GB/s against the HBM
#                              read bandwidth it measures
# OUT_DIR/gemm_alternatives    beside some of those picks, the tilings the rule's cost model ranks next or that an
#                              earlier measurement preferred: where the rule is least sure
# OUT_DIR/accumulation         the study on mma.sync: f16 inputs, f32 output, M = N = 256, K = 256 .. 16384, per
#                              strategy
# OUT_DIR/accumulation_timing  4096^3 with f16 inputs and output, per strategy (mma.sync)
# OUT_DIR/accumulation_wgmma   the same study on the Hopper schedule (wgmma)
# OUT_DIR/accumulation_wgmma_timing   and its timing at 4096^3
# OUT_DIR/gemm_subtile         (only when GEMM_SUITES names it) the 128x256x64 Hopper tiling with 3 stages and the
#                              whole output tile against 4 stages and the tile stored in boxes through 2 buffers
#                              (--output-sub-tiles 2), at 4096^3, 8192^3, 4096x15360x3840 and 2048^3, f16 and bf16
#
# TWIST_BINARY defaults to build/bench/apps/twist/twist (see bench/README.md for the build command).
# GEMM_SUITES (default: every folder above) picks the folders to export, e.g. GEMM_SUITES="gemm_rule
# gemm_alternatives" for what the rule is judged by.
set -euo pipefail

source "$(dirname "$0")/export_common.sh"
parse_export_args "$@"
read -r -a subs <<<"${GEMM_SUITES:-gemm gemm_rule gemm_alternatives accumulation accumulation_timing accumulation_wgmma accumulation_wgmma_timing}"
for sub in "${subs[@]}"; do require_no_manifests "$out/$sub"; done
wants() { [[ " ${subs[*]} " == *" $1 "* ]]; }

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
if wants gemm_subtile; then
  for dtype in f16 bf16; do
    for shape in 4096x4096x4096 8192x8192x8192 4096x15360x3840 2048x2048x2048; do
      export_gemm --shape "$shape" --dtype "$dtype" --atom wgmma --stages 3 --out "$out/gemm_subtile"
      export_gemm --shape "$shape" --dtype "$dtype" --atom wgmma --stages 4 --output-sub-tiles 2 \
        --out "$out/gemm_subtile"
    done
  done
fi

if wants gemm; then
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
fi

# hybrid:N promotes every N k-steps of 16, and with block_k = 32 only an even N promotes inside the K loop (an
# odd N > 1 would promote once, at the end, which is f16 accumulation); 2 promotes every block, 8 every 4 blocks.
# The labels are explicit because the default label does not tell hybrid:2 from hybrid:8.
strategies=(f32 f16 hybrid:2 hybrid:8)
if wants accumulation; then
  for k in 256 512 1024 2048 4096 8192 16384; do
    for s in "${strategies[@]}"; do
      export_gemm --shape "256x256x$k" --dtype f16 --output f32 --accumulation "$s" \
        --label "acc_f16_f32out_256x256x${k}_${s/:/}" --out "$out/accumulation"
    done
  done
fi
if wants accumulation_timing; then
  for s in "${strategies[@]}"; do
    export_gemm --shape 4096x4096x4096 --dtype f16 --accumulation "$s" \
      --label "acc_time_f16_4096x4096x4096_${s/:/}" --out "$out/accumulation_timing"
  done
fi

# The Hopper accumulation study: the same strategies, promoting every 64 and every 128 k (hybrid:4 and hybrid:8;
# the wgmma path promotes between k-tiles of 4 k-steps, so N must be a multiple of 4), on 128x128x64 blocks of two
# warpgroups for the study and the rule's 4096^3 tiling for the timing.
wgmma_strategies=(f32 f16 hybrid:4 hybrid:8)
if wants accumulation_wgmma; then
  for k in 256 512 1024 2048 4096 8192 16384; do
    for s in "${wgmma_strategies[@]}"; do
      export_gemm --shape "256x256x$k" --dtype f16 --output f32 --accumulation "$s" \
        --atom wgmma --block 128x128x64 --warpgroups 2 --stages 4 \
        --label "acc_wgmma_f16_f32out_256x256x${k}_${s/:/}" --out "$out/accumulation_wgmma"
    done
  done
fi
if wants accumulation_wgmma_timing; then
  for s in "${wgmma_strategies[@]}"; do
    export_gemm --shape 4096x4096x4096 --dtype f16 --accumulation "$s" --rule true \
      --label "acc_wgmma_time_f16_4096x4096x4096_${s/:/}" --out "$out/accumulation_wgmma_timing"
  done
fi

# The rule is judged on shapes it was not tuned on: 8 drawn at random (seed 13: M, N and K uniform over
# [512, 12288], N and K rounded down to a multiple of 8 so that TMA can copy the rows; none of them is a shape
# the cost model was fitted on), the mid-size shapes where the rule's earlier cost models went wrong (a tail of
# one tile, a long K over few tiles, 777x3333x1240 whose N only the mma.sync fallback takes), and skinny decode
# shapes: M = 1 and 16 tokens against 4096 x 4096 and 4096 x 14336 weights (1x4096x4096 and 16x15360x3840 are
# the suite's), and two batches of tokens the rule was never fitted on, M = 8 and 48, each against weights drawn
# at random (seed 16: N and K uniform over [2048, 16384], rounded down to a multiple of 64). 44 manifests.
mapfile -t drawn < <(python3 -c '
import random
r = random.Random(13)
for _ in range(8):
    m, n, k = r.randint(512, 12288), r.randint(512, 12288) // 8 * 8, r.randint(512, 12288) // 8 * 8
    print(f"{m}x{n}x{k}")')
mapfile -t skinny_drawn < <(python3 -c '
import random
r = random.Random(16)
for m in (8, 48):
    n, k = r.randint(2048, 16384) // 64 * 64, r.randint(2048, 16384) // 64 * 64
    print(f"{m}x{n}x{k}")')
midsize=(2048x5120x5120 3000x5000x2000 896x4864x4096 1000x1000x7000 777x3333x1240)
skinny=(1x4096x14336 1x14336x4096 16x4096x4096 16x4096x14336 16x14336x4096)
if wants gemm_rule; then
  for dtype in f16 bf16; do
    for shape in "${shapes[@]}"; do
      export_gemm --shape "$shape" --dtype "$dtype" --rule true --out "$out/gemm_rule"
    done
  done
  for shape in "${drawn[@]}" "${midsize[@]}" "${skinny[@]}" "${skinny_drawn[@]}"; do
    export_gemm --shape "$shape" --dtype f16 --rule true --out "$out/gemm_rule"
  done
  for shape in "${drawn[@]:0:4}"; do
    export_gemm --shape "$shape" --dtype bf16 --rule true --out "$out/gemm_rule"
  done
  # Where the rule picks stream-K (its tiles at least the blocks, a tail it pays for), the rule without it
  # beside the pick: 4 manifests more (44).
  for pair in f16:896x4864x4096 f16:4755x5272x11736 bf16:4755x5272x11736 f16:2645x1672x9216; do
    export_gemm --shape "${pair#*:}" --dtype "${pair%%:*}" --rule true --stream-k false --out "$out/gemm_rule"
  done
fi

# Where the rule is least sure (f16), the tilings its model ranks next or that a measurement preferred
# (bench/results/gemm_skinny_alternatives.json). Skinny shapes (M = 1 and 16 against 4096 x 4096, 4096 x 14336 and
# 14336 x 4096 weights, the drawn M = 8 and 48): which of these streams B fastest is what the model's wgmma step
# and combine terms decide: 64x64 blocks of block K 128 unsplit with 4 slots and with every slot (7), or split 2
# ways; 64x128x128 (4 slots) unsplit and split 2 and 4 ways (the rule's split 3 lies between); 64x256x64 (5
# slots) split 4 and 8 ways. Mid-size: 1024^3 with block K 64 beside the pick's 128; 896x4864x4096 on 128x256
# (133 tiles) and 64x128x128 beside 128x128 (266); 1000x1000x7000 on 128x256 split 4 and 64x128x128 unsplit
# beside 128x128 split 2; 2645x1672x9216 (147 tiles of 128x256) on 128x256 unsplit, split 2 (the previous pick)
# and split 3 beside the pick's 128x128; 4016x5336x1000 and 4755x5272x11736 on 128x128 and 256x128;
# 777x3333x1240 (mma.sync) on 64x128 blocks beside the pick's 128x128 with 64x32 warp tiles. And stream-K of
# the tail alone where the rule does not weigh it, tiles fewer than the SMs (its skinny 64x128x128 picks: 112
# tiles at N = 14336 leave 20 SMs idle; 1000x1000x7000's 64 tiles of 128x128), and 4016x5336x1000 (a tail of
# 12 tiles of 128x256 after 5 waves): unmeasured (2026-12-04); the model ranks it ahead at 1x4096x14336 and
# 8x7936x9728 and behind at 1x14336x4096.
explore() {  # SHAPE FLAGS...
  export_gemm --shape "$1" --dtype f16 "${@:2}" --out "$out/gemm_alternatives"
}
ws1=(--atom wgmma --persistent 132 --warpgroups 1)
ws2=(--atom wgmma --persistent 132 --warpgroups 2)
if wants gemm_alternatives; then
  for shape in 1x4096x4096 16x4096x4096 1x4096x14336 16x4096x14336 1x14336x4096 16x14336x4096 \
    "${skinny_drawn[@]}"; do
    explore "$shape" "${ws1[@]}" --block 64x64x128 --stages 4
    explore "$shape" "${ws1[@]}" --block 64x64x128 --stages 7
    explore "$shape" "${ws1[@]}" --block 64x64x128 --stages 7 --split-k 2
    explore "$shape" "${ws1[@]}" --block 64x128x128 --stages 4
    explore "$shape" "${ws1[@]}" --block 64x128x128 --stages 4 --split-k 2
    explore "$shape" "${ws1[@]}" --block 64x128x128 --stages 4 --split-k 4
    explore "$shape" "${ws1[@]}" --block 64x256x64 --stages 5 --split-k 4
    explore "$shape" "${ws1[@]}" --block 64x256x64 --stages 5 --split-k 8
    explore "$shape" "${ws1[@]}" --block 64x128x128 --stages 4 --stream-k true --stream-k-tiles tail
  done
  explore 1024x1024x1024 "${ws1[@]}" --block 64x128x64 --stages 4
  explore 896x4864x4096 "${ws2[@]}" --block 128x256x64 --stages 3
  explore 896x4864x4096 "${ws1[@]}" --block 64x128x128 --stages 3
  explore 1000x1000x7000 "${ws2[@]}" --block 128x256x64 --stages 3 --split-k 4
  explore 1000x1000x7000 "${ws1[@]}" --block 64x128x128 --stages 3
  explore 2645x1672x9216 "${ws2[@]}" --block 128x256x64 --stages 3
  explore 2645x1672x9216 "${ws2[@]}" --block 128x256x64 --stages 3 --split-k 3
  explore 2645x1672x9216 "${ws2[@]}" --block 128x256x64 --stages 3 --split-k 2
  explore 4016x5336x1000 "${ws2[@]}" --block 128x128x64 --stages 4
  explore 4016x5336x1000 "${ws2[@]}" --block 256x128x64 --stages 3
  explore 4755x5272x11736 "${ws2[@]}" --block 128x128x64 --stages 4
  explore 4755x5272x11736 "${ws2[@]}" --block 256x128x64 --stages 3
  explore 1000x1000x7000 "${ws2[@]}" --block 128x128x64 --stages 4 --stream-k true --stream-k-tiles tail
  explore 4016x5336x1000 "${ws2[@]}" --block 128x256x64 --stages 3 --stream-k true --stream-k-tiles tail
  explore 777x3333x1240 --block 64x128x64 --warp 32x64 --stages 3
fi

for sub in "${subs[@]}"; do
  echo "$out/$sub: $(ls "$out/$sub"/*.json | wc -l) manifests, $(du -sh "$out/$sub" | cut -f1)"
done
echo "total: $(du -sh "$out" | cut -f1)"
