#!/usr/bin/env bash
# Exports the Hopper GEMM manifests (TMA ring + wgmma, `twist export gemm --atom wgmma`) that choose
# HopperTiling's defaults by measurement, on this machine: NVRTC compiles without a GPU. Run from the
# repository root:
#
#   bench/export_hopper_suite.sh OUT_DIR [TWIST_BINARY]
#
# OUT_DIR/hopper          the GEMM suite's shapes (M >= 1024) and shapes outside it, f16 and bf16, with the
#                         128x256x64 tiling: every thread computing, warp-specialized, and warp-specialized
#                         with a persistent grid of 132 blocks (the H200's SMs)
# OUT_DIR/hopper_configs  4096^3 and 8192^3 f16, warp-specialized: the other configurations (consumer
#                         warpgroups, tile shape, ring depth, raster group, a persistent grid of 132 blocks)
#
# apps/gemm/bench_gemm.py measures each folder against cuBLAS.
set -euo pipefail

source "$(dirname "$0")/export_common.sh"
parse_export_args "$@"
subs=(hopper hopper_configs)
for sub in "${subs[@]}"; do require_no_manifests "$out/$sub"; done

export_hopper() {
  "$twist" export gemm --atom wgmma "$@" >/dev/null
}

# The suite's shapes with M >= 1024 (the skinny ones are the rule's: apps/gemm/gemm_rule.h), and shapes outside
# it: a 4096-wide model's MLP projections and odd sizes.
shapes=(1024x1024x1024 2048x2048x2048 4096x4096x4096 8192x8192x8192 4096x15360x3840 4096x3840x15360
        4096x11008x4096 3000x5000x2000 2048x5120x5120)
for dtype in f16 bf16; do
  for shape in "${shapes[@]}"; do
    for variant in "--warp-specialize false" "--warp-specialize true" "--warp-specialize true --persistent 132"; do
      # shellcheck disable=SC2086
      export_hopper --shape "$shape" --dtype "$dtype" --block 128x256x64 --warpgroups 2 --stages 3 $variant \
        --out "$out/hopper"
    done
  done
done

# name: flags
configs=("--block 128x256x64 --warpgroups 2 --stages 4"
         "--block 256x128x64 --warpgroups 2 --stages 3"
         "--block 256x128x64 --warpgroups 2 --stages 4"
         "--block 128x128x64 --warpgroups 1 --stages 4"
         "--block 128x128x64 --warpgroups 2 --stages 4"
         "--block 128x256x64 --warpgroups 2 --stages 3 --raster 16"
         "--block 128x192x64 --warpgroups 2 --stages 4"
         "--block 128x256x64 --warpgroups 2 --stages 3 --persistent 132"
         "--block 128x256x64 --warpgroups 2 --stages 4 --persistent 132"
         "--block 256x128x64 --warpgroups 2 --stages 3 --persistent 132")
for shape in 4096x4096x4096 8192x8192x8192; do
  for config in "${configs[@]}"; do
    # shellcheck disable=SC2086
    export_hopper --shape "$shape" --dtype f16 $config --warp-specialize true --out "$out/hopper_configs" \
      --label "gemm_f16_${shape}_$(echo "$config" | tr -d ' -' | sed 's/block//;s/warpgroups/_wg/;s/stages/_s/;s/raster/_r/;s/persistent/_p/')_ws"
  done
done

for sub in "${subs[@]}"; do
  echo "$out/$sub: $(ls "$out/$sub"/*.json | wc -l) manifests, $(du -sh "$out/$sub" | cut -f1)"
done
