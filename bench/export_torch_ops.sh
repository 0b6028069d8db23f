#!/usr/bin/env bash
# Exports the kernels that python/tests/gpu/test_torch_ops.py runs as PyTorch custom ops: one GEMM and one
# attention (prefill), compiled for sm_90a with NVRTC here (no GPU needed), with their launch manifests.
#
#   bench/export_torch_ops.sh OUT_DIR [TWIST_BINARY]      (e.g. .gpu/manifests/torch_ops build/release/apps/twist/twist)
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/export_common.sh
parse_export_args "$@"
require_no_manifests "$out"
"$twist" export gemm --shape 4096x4096x4096 --dtype f16 --out "$out" --label torch_gemm_f16_4096
"$twist" export attention --shape 4x16x4096x4096x128 --dtype f16 --out "$out" --label torch_attention_f16_4x16x4096x128
# A split whose tiles' last blocks fold the parts: its arrival counters must start at zero in every call.
"$twist" export gemm --shape 16x4096x4096 --dtype f16 --block 64x64x32 --warp 32x32 --split-k 8 \
  --split-combine last_block --out "$out" --label torch_gemm_f16_16x4096x4096_last_block
echo "$out: $(find "$out" -maxdepth 1 -name '*.json' | wc -l) manifests"
