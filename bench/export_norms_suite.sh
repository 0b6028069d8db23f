#!/usr/bin/env bash
# Exports every manifest (and its cubin, sm_90a) that apps/norms/bench_norms.py reads, on this machine: NVRTC
# compiles without a GPU. Run from the repository root:
#
#   bench/export_norms_suite.sh OUT_DIR [TWIST_BINARY]
#
# OUT_DIR gets softmax, layernorm, rmsnorm, add_rmsnorm and swiglu at the shapes issue 12 holds to its target
# (rows x hidden >= 8192 x 4096): 8192x4096, 16384x8192 and 32768x16384 in f16, 8192x4096 and 32768x16384 in
# bf16, and LayerNorm by shifted sums (--layernorm shifted_sums) at 32768x16384 beside the default two-pass
# one (27 manifests, 25 problems: a little over a minute of bench_norms.py with torch.compile's compilations;
# the variant shares its problem's PyTorch timings). Any other shape: twist export norms --op OP --rows R
# --hidden H --dtype T --out DIR.
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
  shapes="8192x4096 32768x16384"
  [[ $dtype == f16 ]] && shapes="$shapes 16384x8192"
  for op in softmax layernorm rmsnorm add_rmsnorm swiglu; do
    for shape in $shapes; do
      "$twist" export norms --op "$op" --rows "${shape%x*}" --hidden "${shape#*x}" --dtype "$dtype" --out "$out" \
        >/dev/null
      count=$((count + 1))
    done
  done
  "$twist" export norms --op layernorm --layernorm shifted_sums --rows 32768 --hidden 16384 --dtype "$dtype" \
    --out "$out" >/dev/null
  count=$((count + 1))
done
echo "$count manifests in $out ($(du -sh "$out" | cut -f1))"
