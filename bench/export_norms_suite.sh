#!/usr/bin/env bash
# Exports every manifest (and its cubin, sm_90a) that apps/norms/bench_norms.py reads, on this machine: NVRTC
# compiles without a GPU. Run from the repository root:
#
#   bench/export_norms_suite.sh OUT_DIR [TWIST_BINARY]
#
# OUT_DIR gets softmax, layernorm, rmsnorm, add_rmsnorm and swiglu at the LLM shapes of the issue: rows 4096,
# 8192, 16384 and 32768 by hidden 2048, 4096, 8192 and 16384, in f16 and bf16 (160 manifests).
#
# TWIST_BINARY defaults to build/bench/apps/twist/twist (see bench/README.md for the build command).
set -euo pipefail

source "$(dirname "$0")/export_common.sh"
parse_export_args "$@"
require_export_command norms
require_no_manifests "$out"
mkdir -p "$out"

count=0
for dtype in f16 bf16; do
  for op in softmax layernorm rmsnorm add_rmsnorm swiglu; do
    for rows in 4096 8192 16384 32768; do
      for hidden in 2048 4096 8192 16384; do
        "$twist" export norms --op "$op" --rows "$rows" --hidden "$hidden" --dtype "$dtype" --out "$out" >/dev/null
        count=$((count + 1))
      done
    done
  done
done
echo "$count manifests in $out ($(du -sh "$out" | cut -f1))"
