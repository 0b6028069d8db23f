#!/usr/bin/env bash
# Exports every manifest (and its cubins, sm_90a) that apps/attention/bench_attention.py reads, on this machine:
# NVRTC compiles without a GPU. Run from the repository root:
#
#   bench/export_attention_suite.sh OUT_DIR [TWIST_BINARY]
#
# OUT_DIR gets, for the shapes ../shared/device/baseline.py measured FlashAttention-2 and cuDNN at:
#   prefill (S = L), f16, and bf16 for B4 H16 S4096 D128: the Hopper datapath's tiling by rule (TMA, wgmma;
#   apps::hopper_attention_tiling); at five of them also the tiling the rule chose before warp specialization
#   and the warp-specialized variants it weighs (a producer warpgroup, setmaxnreg; ping-pong of the two consumer
#   warpgroups; the next tile's S overlapped with this tile's softmax; both); at every one the delayed column
#   products (FlashAttention-3's order within a warpgroup), alone and in ping-pong, and the rule's tiling on a
#   persistent grid (--persistent true)
#   Gemma 4's attention (bf16): the sliding layers' D 256 with a window of 1024 at S4096, the full layers' D 512
#   with 8 query heads per key/value head at S2048 and S8192 (causal), and their decode at L4096 and L32768
#   (the sliding layers' cache is the window's 1024 keys), all by rule
#   decode (one query per head), f16, the tiling by rule (apps::decode_tiling), plain and grouped-query, the four
#   problems baseline.py measured and four outside them; beside each, the same tiling with the other combine of
#   its split (--split-combine kernel or last_block: a second kernel, or each tile's last block)
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
# Each of the tilings (each a list of flags) at one problem.
export_tilings() {  # shape dtype causal tiling...
  local shape=$1 dtype=$2 causal=$3 tiling
  shift 3
  for tiling in "$@"; do
    # shellcheck disable=SC2086  # the tiling is a list of flags
    export_attention --shape "$shape" --dtype "$dtype" --causal "$causal" $tiling
  done
}

# --- prefill: B H S D causal (S = L) ------------------------------------------------------------------------
# The Hopper datapath's tiling by rule (apps::hopper_attention_tiling in apps/attention/attention.h).
prefill() {  # dtype B H S D causal
  export_attention --shape "${2}x${3}x${4}x${4}x${5}" --dtype "$1" --causal "$6" --atom wgmma --rule true
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

# Beside the rule's tiling at five problems, by their flags: the tiling the rule chose before warp
# specialization (two warpgroups of 64 rows; D 64: 64-key tiles, two blocks per SM; D 128: 128-key tiles; D 256:
# 64-key tiles; 2 slots), the warp-specialized one (a producer warpgroup at 24 registers, the consumers at what
# it leaves; D 256 on its best measured 80-key tiles), ping-pong (WarpSpecialization::ping_pong: the two consumer
# warpgroups take turns on the tensor cores), the next tile's S overlapped with this tile's softmax inside each
# warpgroup (FuncSchedule::overlap_producer, two sets of S accumulators by the tile's parity) on the
# warp-specialized kernel, and both together. D 64 overlaps on 128-key tiles at one block per SM (the second S
# does not fit the 104 registers of two blocks), D 128 on 112-key tiles (ptxas spills 200-240 bytes with two
# 128-key tiles of S in the consumers' 240 registers, none with 112), D 256 on 48-key tiles; the overlap on 3
# slots (with 2, each tile waits for the next tile's copy: docs/hopper.md), which 64-key tiles at D 256 do not
# fit beside Q. One of them is the rule's own (the same manifest, written
# again). The 176-key tiles (local memory when causal) and the third slot were measured slower than the rule
# (bench/RESULTS.md) and are no longer exported.
variants() {  # B H S D causal
  local shape="${1}x${2}x${3}x${3}x${4}" causal=$5 w="--atom wgmma --block-rows 128"
  local ws="$w --warp-specialize true"
  local pp="$ws --ping-pong true"
  local ovl="$ws --overlap true --stages 3"
  local ovlpp="$pp --overlap true --stages 3"
  case $4 in
    64) tilings=("$w --key-tile 64 --min-blocks 2" "$ws --key-tile 64 --min-blocks 2"
                 "$ovl --key-tile 128" "$ovlpp --key-tile 128") ;;
    # Both together with a causal mask at D 128 spill (36 local loads and stores, 2026-12-04), which the SASS
    # check refuses; measured 2-5% behind the overlap alone without the mask, so not exported with it.
    128) tilings=("$w --key-tile 128" "$ws --key-tile 128" "$pp --key-tile 128" "$ovl --key-tile 112")
         [[ $causal == true ]] || tilings+=("$ovlpp --key-tile 112") ;;
    256) tilings=("$w --key-tile 64" "$ws --key-tile 80" "$pp --key-tile 80" "$ovl --key-tile 48"
                  "$ovlpp --key-tile 48") ;;
    *) echo "$0: no variants for D = $4" >&2; exit 2 ;;
  esac
  export_tilings "$shape" f16 "$causal" "${tilings[@]}"
}
variants 4 16 4096 128 false
variants 4 16 4096 128 true
variants 2 16 8192 128 false
variants 1 8 4096 64 false
variants 4 16 4096 256 false

# Each key tile's P V issued after the next tile's S and waited for after that tile's softmax
# (FuncSchedule::delay_column_products, FlashAttention-3's order, on a producer warpgroup: one set of S
# accumulators, so 128-key tiles fit at D 128 without spills). At every prefill problem above, on its best
# measured tiling (D 64 and D 128: 128-key tiles, D 128 on 3 slots; D 256: 80-key tiles); beside it at the
# four variant problems, D 128 on 2 slots and D 256 on 64-key tiles. Measured behind the rule's kernels at
# every problem (bench/RESULTS.md, "Delayed column products"); not taken by the rule.
delayed() {  # dtype B H S D causal
  local shape="${2}x${3}x${4}x${4}x${5}" ws="--atom wgmma --block-rows 128 --warp-specialize true --delay-products true"
  local tilings
  case $5 in
    64) tilings=("$ws --key-tile 128") ;;
    128) tilings=("$ws --key-tile 128 --stages 3") ;;
    256) tilings=("$ws --key-tile 80") ;;
  esac
  if [[ $1 == f16 && " 4x16x4096x128 2x16x8192x128 4x16x4096x256 " == *" ${2}x${3}x${4}x${5} "* ]]; then
    case $5 in
      128) tilings+=("$ws --key-tile 128") ;;
      256) tilings+=("$ws --key-tile 64") ;;
    esac
  fi
  export_tilings "$shape" "$1" "$6" "${tilings[@]}"
}
delayed f16 1 8 4096 64 false
delayed f16 4 16 4096 128 false
delayed f16 4 16 4096 128 true
delayed f16 2 16 8192 128 false
delayed f16 16 16 1024 64 false
delayed f16 1 16 16384 128 true
delayed f16 4 16 4096 256 false
delayed bf16 4 16 4096 128 false
delayed bf16 4 16 4096 128 true

# The block order under a causal mask: beside the rule's tiling (longest first, in groups of rows:
# AttentionTiling::longest_first), the same in the launch order (--longest-first false), and the
# warp-specialized forms with the rule's block order (the overlapped S on 112-key tiles and 3 slots, one of
# them the rule's own at S16384; a producer alone). Not at D 64 and D 256: the suite has no causal problem
# there.
block_order() {  # dtype B H S D
  local shape="${2}x${3}x${4}x${4}x${5}" ws="--atom wgmma --block-rows 128 --warp-specialize true"
  export_attention --shape "$shape" --dtype "$1" --causal true --atom wgmma --rule true --longest-first false
  export_attention --shape "$shape" --dtype "$1" --causal true $ws --overlap true --stages 3 --key-tile 112 \
    --longest-first true
  export_attention --shape "$shape" --dtype "$1" --causal true $ws --key-tile 128 --longest-first true
}
block_order f16 4 16 4096 128
block_order f16 1 16 16384 128
block_order bf16 4 16 4096 128

# Ping-pong of the two consumer warpgroups with the delayed column products (FlashAttention-3's full order:
# a warpgroup's turn issues tile r's S and tile r - 1's P V, and it passes the turn before waiting for them). At
# every prefill problem: D 64 on 128-key tiles (64-key tiles at two blocks per SM spill in their 104 registers),
# D 128 on 128-key tiles with 2 and 3 slots, and without a causal mask also on 176-key tiles (FlashAttention-3's
# choice; ptxas spills 56 bytes) and 160-key tiles (no spill) on 2 slots; D 256 on 80- and 64-key tiles.
delayed_ping_pong() {  # dtype B H S D causal
  local shape="${2}x${3}x${4}x${4}x${5}"
  local pp="--atom wgmma --block-rows 128 --warp-specialize true --ping-pong true --delay-products true"
  local tilings
  case $5 in
    64) tilings=("$pp --key-tile 128") ;;
    128) tilings=("$pp --key-tile 128" "$pp --key-tile 128 --stages 3")
         [[ $6 == true ]] || tilings+=("$pp --key-tile 176" "$pp --key-tile 160") ;;
    256) tilings=("$pp --key-tile 80" "$pp --key-tile 64") ;;
  esac
  export_tilings "$shape" "$1" "$6" "${tilings[@]}"
}
delayed_ping_pong f16 1 8 4096 64 false
delayed_ping_pong f16 4 16 4096 128 false
delayed_ping_pong f16 4 16 4096 128 true
delayed_ping_pong f16 2 16 8192 128 false
delayed_ping_pong f16 16 16 1024 64 false
delayed_ping_pong f16 1 16 16384 128 true
delayed_ping_pong f16 4 16 4096 256 false
delayed_ping_pong bf16 4 16 4096 128 false
delayed_ping_pong bf16 4 16 4096 128 true

# Persistent grids (AttentionTiling::persistent_blocks, --persistent true: as many blocks as the SMs keep
# resident, each taking the output tiles b, b + blocks, ... in the rule's block order, its producer loading the
# next tile's Q and key tiles while the consumers finish this one): the rule's tiling at every prefill problem,
# with a producer warpgroup where the rule has none (a persistent chained kernel needs one).
persistent() {  # dtype B H S D causal
  export_attention --shape "${2}x${3}x${4}x${4}x${5}" --dtype "$1" --causal "$6" --atom wgmma --rule true \
    --warp-specialize true --persistent true
}
persistent f16 1 8 4096 64 false
persistent f16 4 16 4096 128 false
persistent f16 4 16 4096 128 true
persistent f16 2 16 8192 128 false
persistent f16 16 16 1024 64 false
persistent f16 1 16 16384 128 true
persistent f16 4 16 4096 256 false
persistent bf16 4 16 4096 128 false
persistent bf16 4 16 4096 128 true

# --- decode: B H L D group -------------------------------------------------------------------------------
# The tiling by rule (apps::decode_tiling in apps/attention/attention.h): a warp of 16 rows per block (the
# group's query heads packed into them), key tiles of 16 KB of K and V, 4 or 2 blocks per SM with the deepest
# cp.async ring that leaves room for them (128-192 KB in flight per SM), and the keys split into the parts that
# fill the blocks' waves with the fewest rounds of the combine. The suite's four problems, then four outside it.
# Beside it, the rule's tiling with each combine of the split (SplitCombine::kernel, a second kernel, and
# SplitCombine::last_block, each tile's last block): one of them is the rule's own (the same manifest, written
# again); with no split the two are the rule's tiling.
decode() {  # B H L D group
  for combine in kernel last_block; do
    export_attention --shape "${1}x${2}x1x${3}x${4}" --dtype f16 --decode true --group "$5" --rule true \
      --split-combine "$combine"
  done
}
decode 1 8 32768 128 1
decode 8 8 8192 128 1
decode 1 32 131072 128 1
decode 1 32 131072 128 4
decode 4 32 16384 128 8
decode 16 16 4096 128 1
decode 1 64 65536 128 8
decode 32 8 2048 128 1

# --- Gemma 4 (the 31B text model's layers, bf16): B H S D causal window group -------------------------------
# The tilings by rule that apps/gemma's attention_tiling picks: sliding layers (32 heads of 256, 16 key/value
# heads, keys within 1024 of the diagonal: the tiles outside the window are skipped) and full layers (32 heads
# of 512 over 4 key/value heads, the output's columns over two warpgroups), prefill and their decode against a
# cache (the sliding layers' cache keeps the last 1024 keys; the full layers' the whole sequence).
gemma_prefill() {  # B H S D group [window]
  export_attention --shape "${1}x${2}x${3}x${3}x${4}" --dtype bf16 --causal true --group "$5" --atom wgmma \
    --rule true ${6:+--window "$6"}
}
gemma_decode() {  # B H L D group
  export_attention --shape "${1}x${2}x1x${3}x${4}" --dtype bf16 --decode true --group "$5" --rule true
}
gemma_prefill 1 32 4096 256 2 1024
gemma_prefill 1 32 2048 512 8
gemma_prefill 1 32 8192 512 8
gemma_decode 1 32 1024 256 2
gemma_decode 1 32 4096 512 8
gemma_decode 1 32 32768 512 8

json_files=$(find "$out" -maxdepth 1 -name '*.json' | wc -l)
echo "$out: $count manifests ($json_files .json files), $(du -sh "$out" | cut -f1)"
