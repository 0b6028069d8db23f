#!/usr/bin/env bash
# Exports the row kernel's forms of the norms of apps/norms side by side, for apps/norms/bench_norms.py (each
# variant a manifest of its own label, timed with its problem): bench/results/norms6.json, bench/RESULTS.md,
# "Norms: rows read again". Run from the repository root:
#
#   bench/export_norms_forms.sh OUT_DIR [TWIST_BINARY]
#
# For each row-kernel problem of bench/export_norms_suite.sh (SwiGLU, elementwise, and LayerNorm by shifted
# sums left out), with M = min(1024, hidden / 8) threads per row (one or two 16-byte runs per thread):
#   (rule)                      the row rule's kernel (rows in registers)
#   _registers_tM, _t512        rows in registers at M and at 512 threads per row
#   _reread_tM, _t512           rows read again by each pass at M and at 512 threads per row
#   _reread_tM_mb{2048/M}       the same at M, asking the compiler for a full SM of threads
# twist export norms --row-form / --row-threads / --min-blocks set them (the schedule's row_form and
# min_blocks_per_sm). The .cu and .h sources are left out (the benchmark loads the cubins).
set -euo pipefail

source "$(dirname "$0")/export_common.sh"
parse_export_args "$@"
require_export_command norms
require_no_manifests "$out"
mkdir -p "$out"

while read -r op dtype shape; do
  rows=${shape%x*} hidden=${shape#*x}
  most=$((hidden / 8 > 1024 ? 1024 : hidden / 8))
  for variant in "" "--row-form registers --row-threads $most" "--row-form reread --row-threads $most" \
    "--row-form reread --row-threads $most --min-blocks $((2048 / most))" "--row-form reread --row-threads 512" \
    "--row-form registers --row-threads 512"; do
    # shellcheck disable=SC2086  # variant is zero or more arguments
    "$twist" export norms --op "$op" --rows "$rows" --hidden "$hidden" --dtype "$dtype" --out "$out" \
      $variant >/dev/null
  done
done <<'SUITE'
rmsnorm f16 8192x4096
rmsnorm f16 16384x8192
rmsnorm f16 32768x16384
rmsnorm bf16 16384x8192
rmsnorm bf16 32768x16384
layernorm f16 16384x8192
layernorm f16 32768x16384
layernorm bf16 32768x16384
softmax f16 16384x8192
softmax bf16 32768x16384
add_rmsnorm f16 32768x16384
add_rmsnorm bf16 16384x8192
SUITE
rm -f "$out"/*.cu "$out"/*.h
echo "$(ls "$out"/*.json | wc -l) manifests in $out ($(du -sh "$out" | cut -f1))"
