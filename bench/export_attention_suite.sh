#!/usr/bin/env bash
# Exports every manifest (and its cubins, sm_90a) that apps/attention/bench_attention.py reads, on this machine:
# NVRTC compiles without a GPU. Run from the repository root:
#
#   bench/export_attention_suite.sh OUT_DIR [TWIST_BINARY]
#
# OUT_DIR gets, for the shapes ../shared/device/baseline.py measured FlashAttention-2 and cuDNN at:
#   prefill (S = L), f16, and bf16 for B4 H16 S4096 D128: the Hopper datapath's tiling by rule (TMA, wgmma;
#   apps::hopper_attention_tiling), and the best mma.sync tiling as it was before it; for five of them also the
#   rule's tiling with --overlap true (the next tile's S during this tile's softmax)
#   decode (one query per head), f16, the tiling by rule (apps::decode_tiling), plain and grouped-query, the four
#   problems baseline.py measured and four outside them
#
# TWIST_BINARY defaults to build/bench/apps/twist/twist (see bench/README.md for the build command).
set -euo pipefail

source "$(dirname "$0")/export_common.sh"
parse_export_args "$@"
require_export_command attention
require_no_manifests "$out"
mkdir -p "$out"

count=0
export_attention() {
  "$twist" export attention "$@" --out "$out" >/dev/null
  count=$((count + 1))
}

# --- prefill: B H S D causal (S = L) ------------------------------------------------------------------------
# The first tiling is the Hopper datapath's, by rule (apps::hopper_attention_tiling in apps/attention/attention.h:
# 128 query rows in two warpgroups, 128-key tiles, 64 at D = 256, 2 slots). The second is the mma.sync datapath's
# best from a sweep on the H200 (2026-12-02, bench/RESULTS.md):
#   D = 64, 128: 32 rows per warp (two atoms of rows, so that each K and V fragment feeds both; Q is then read
#                from shared memory at every k-step), 4 warps, key tiles of 64 (252-255 registers; at D = 128,
#                56 bytes spilled, and still the fastest)
#   D = 256: 64 rows, key tiles of 32, at least 2 blocks per SM (255 registers, 96 KB); 32 rows per warp spills
#            2 KB at D = 256
second_tiling() {
  case $1 in
    64 | 128) echo "--block-rows 128 --key-tile 64 --stages 2 --warp-rows 32" ;;
    256) echo "--block-rows 64 --key-tile 32 --stages 2 --min-blocks 2" ;;
    *) echo "$0: no tiling for D = $1" >&2; exit 2 ;;
  esac
}
prefill() {  # dtype B H S D causal
  local dtype=$1 b=$2 h=$3 s=$4 d=$5 causal=$6
  for tiling in "--atom wgmma --rule true" "$(second_tiling "$d")"; do
    # shellcheck disable=SC2086  # the tiling is a list of flags
    export_attention --shape "${b}x${h}x${s}x${s}x${d}" --dtype "$dtype" --causal "$causal" $tiling
  done
}
prefill f16 1 8 4096 64 false
prefill f16 4 16 4096 128 false
prefill f16 4 16 4096 128 true
prefill f16 2 16 8192 128 false
prefill f16 16 16 1024 64 false
prefill f16 1 16 16384 128 true
prefill f16 4 16 4096 256 false
prefill bf16 4 16 4096 128 false
prefill bf16 4 16 4096 128 true

# The rule's tiling with the next key tile's S wgmmas in flight during this tile's softmax (--overlap true,
# FuncSchedule::overlap_producer; FlashAttention-3's intra-warpgroup overlap), beside the rule's own above.
overlap_variant() {  # dtype B H S D causal
  export_attention --shape "${2}x${3}x${4}x${4}x${5}" --dtype "$1" --causal "$6" --atom wgmma --rule true --overlap true
}
overlap_variant f16 4 16 4096 128 false
overlap_variant f16 4 16 4096 128 true
overlap_variant f16 2 16 8192 128 false
overlap_variant f16 1 8 4096 64 false
overlap_variant f16 4 16 4096 256 false

# --- decode: B H L D group -------------------------------------------------------------------------------
# The tiling by rule (apps::decode_tiling in apps/attention/attention.h): a warp of 16 rows per block (the
# group's query heads packed into them), key tiles of 16 KB of K and V, the deepest cp.async ring that leaves
# room for 4 blocks per SM (128 KB in flight per SM), and the keys split into the parts that fill the blocks'
# waves. The suite's four problems, then four outside it (the rule was fitted to none of them).
decode() {  # B H L D group
  export_attention --shape "${1}x${2}x1x${3}x${4}" --dtype f16 --decode true --group "$5" --rule true
}
decode 1 8 32768 128 1
decode 8 8 8192 128 1
decode 1 32 131072 128 1
decode 1 32 131072 128 4
decode 4 32 16384 128 8
decode 16 16 4096 128 1
decode 1 64 65536 128 8
decode 32 8 2048 128 1

json_files=$(find "$out" -maxdepth 1 -name '*.json' | wc -l)
echo "$out: $count manifests ($json_files .json files), $(du -sh "$out" | cut -f1)"
