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
# OUT_DIR/hopper_epilogue the epilogue's variants on the default tiling (128x256x64, 3 stages, warp-specialized,
#                         persistent): stores of whole rows from the shared tile, a TMA store of the tile
#                         written element by element, and written by stmatrix (HopperTiling::tma_store,
#                         stmatrix); 4096^3, 8192^3 f16 and bf16, 2048^3 and two shapes outside the suite
# OUT_DIR/hopper_cluster  2-block clusters with B multicast (HopperTiling::cluster) against none, on the default
#                         tiling at 4096^3 f16 and bf16, 8192^3 f16, 2048^3 f16 and two shapes outside the
#                         suite, with a raster group of 16 at 4096^3 f16, and clusters over 128 persistent
#                         blocks at 4096^3 and 8192^3 f16
# OUT_DIR/hopper_pingpong ping-pong (HopperTiling::ping_pong: two consumer warpgroups with 128 x 128 tiles of
#                         their own, 4 or 5 slots, in 2-block clusters or not; 64 x 256 with 4) against the
#                         default cooperative 128 x 256
#                         tiling, at 4096^3 f16 and bf16, 8192^3, 4096x15360x3840 and 2048^3 f16
#
# HOPPER_SUITES (default "hopper hopper_configs hopper_epilogue") picks the folders to export.
# apps/gemm/bench_gemm.py measures each folder against cuBLAS.
set -euo pipefail

source "$(dirname "$0")/export_common.sh"
parse_export_args "$@"
read -r -a subs <<<"${HOPPER_SUITES:-hopper hopper_configs hopper_epilogue}"
for sub in "${subs[@]}"; do require_no_manifests "$out/$sub"; done
wants() { [[ " ${subs[*]} " == *" $1 "* ]]; }

export_hopper() {
  "$twist" export gemm --atom wgmma "$@" >/dev/null
}

# The suite's shapes with M >= 1024 (the skinny ones are the rule's: apps/gemm/gemm_rule.h), and shapes outside
# it: a 4096-wide model's MLP projections and odd sizes.
shapes=(1024x1024x1024 2048x2048x2048 4096x4096x4096 8192x8192x8192 4096x15360x3840 4096x3840x15360
        4096x11008x4096 3000x5000x2000 2048x5120x5120)
wants hopper && for dtype in f16 bf16; do
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
wants hopper_configs && for shape in 4096x4096x4096 8192x8192x8192; do
  for config in "${configs[@]}"; do
    # shellcheck disable=SC2086
    export_hopper --shape "$shape" --dtype f16 $config --warp-specialize true --out "$out/hopper_configs" \
      --label "gemm_f16_${shape}_$(echo "$config" | tr -d ' -' | sed 's/block//;s/warpgroups/_wg/;s/stages/_s/;s/raster/_r/;s/persistent/_p/')_ws"
  done
done

# name: flags
epilogues=("rowstores: --tma-store false" "tmastore: --tma-store true --stmatrix false"
           "stmatrix: --tma-store true --stmatrix true")
epilogue_cases=(f16:4096x4096x4096 bf16:4096x4096x4096 f16:8192x8192x8192 bf16:8192x8192x8192
                f16:2048x2048x2048 f16:4096x11008x4096 f16:3000x5000x2000)
wants hopper_epilogue && for case in "${epilogue_cases[@]}"; do
  for epilogue in "${epilogues[@]}"; do
    # shellcheck disable=SC2086
    export_hopper --shape "${case#*:}" --dtype "${case%%:*}" --block 128x256x64 --warpgroups 2 --stages 3 \
      --warp-specialize true --persistent 132 ${epilogue#*: } --out "$out/hopper_epilogue" \
      --label "gemm_${case%%:*}_${case#*:}_${epilogue%%:*}"
  done
done

# name: flags
clusters=("nocluster: --cluster 1" "cluster2: --cluster 2")
cluster_cases=(f16:4096x4096x4096 bf16:4096x4096x4096 f16:8192x8192x8192 f16:2048x2048x2048
               f16:4096x11008x4096 f16:3000x5000x2000)
cluster_export() {  # case, label suffix, flags
  # shellcheck disable=SC2086
  export_hopper --shape "${1#*:}" --dtype "${1%%:*}" --block 128x256x64 --warpgroups 2 --stages 3 \
    --warp-specialize true --persistent 132 $3 --out "$out/hopper_cluster" --label "gemm_${1%%:*}_${1#*:}_$2"
}
wants hopper_cluster && for case in "${cluster_cases[@]}"; do
  for cluster in "${clusters[@]}"; do cluster_export "$case" "${cluster%%:*}" "${cluster#*: }"; done
done
# The raster group (the L2 reuse of the tiles a wave computes) with and without clusters, at 4096^3 f16; and
# clusters over 128 persistent blocks, in case the GPCs cannot hold 66 clusters of 2 at once.
wants hopper_cluster && for cluster in "${clusters[@]}"; do
  cluster_export f16:4096x4096x4096 "${cluster%%:*}_r16" "${cluster#*: } --raster 16"
done
wants hopper_cluster && for case in f16:4096x4096x4096 f16:8192x8192x8192; do
  cluster_export "$case" cluster2_p128 "--cluster 2 --persistent 128"
done

# name: flags
ping_pongs=("cooperative: --block 128x256x64 --warpgroups 2 --stages 3"
            "pingpong128x128s4: --block 128x128x64 --warpgroups 1 --stages 4 --ping-pong true"
            "pingpong128x128s5: --block 128x128x64 --warpgroups 1 --stages 5 --ping-pong true"
            "pingpong64x256s4: --block 64x256x64 --warpgroups 1 --stages 4 --ping-pong true"
            "pingpong128x128s4cluster2: --block 128x128x64 --warpgroups 1 --stages 4 --ping-pong true --cluster 2")
ping_pong_cases=(f16:4096x4096x4096 bf16:4096x4096x4096 f16:8192x8192x8192 f16:4096x15360x3840
                 f16:2048x2048x2048)
wants hopper_pingpong && for case in "${ping_pong_cases[@]}"; do
  for variant in "${ping_pongs[@]}"; do
    # The other variants at 4096^3 only.
    [[ $case != *:4096x4096x4096 && ${variant%%:*} != cooperative && ${variant%%:*} != pingpong128x128s4* ]] &&
      continue
    # shellcheck disable=SC2086
    export_hopper --shape "${case#*:}" --dtype "${case%%:*}" --warp-specialize true --persistent 132 \
      ${variant#*: } --out "$out/hopper_pingpong" --label "gemm_${case%%:*}_${case#*:}_${variant%%:*}"
  done
done

for sub in "${subs[@]}"; do
  echo "$out/$sub: $(ls "$out/$sub"/*.json | wc -l) manifests, $(du -sh "$out/$sub" | cut -f1)"
done
