#!/usr/bin/env bash
# Exports every manifest (and its cubin, sm_90a) that apps/norms/bench_norms.py reads, on this machine: NVRTC
# compiles without a GPU. Run from the repository root:
#
#   bench/export_norms_suite.sh OUT_DIR [TWIST_BINARY]
#
# OUT_DIR gets the shapes issue 12 holds to its target (rows x hidden >= 8192 x 4096) where the last runs
# missed or came near torch.compile, and each op in both types (15 problems, 17 manifests: about 50 s of
# bench_norms.py with its interleaved rounds and torch.compile's compilations; bench/RESULTS.md, "Norms:
# threads per row"):
#   RMSNorm      f16 8192x4096, 16384x8192, 32768x16384; bf16 16384x8192, 32768x16384
#   LayerNorm    f16 16384x8192; f16 and bf16 32768x16384, each also by shifted sums (--layernorm
#                shifted_sums, a variant timed with its problem)
#   SwiGLU       f16 8192x4096, 32768x16384; bf16 8192x4096
#   softmax      f16 16384x8192; bf16 32768x16384
#   add+RMSNorm  f16 32768x16384; bf16 16384x8192
# Any other shape: twist export norms --op OP --rows R --hidden H --dtype T --out DIR. NORMS_FORMS=1 exports the
# row kernel's forms instead (below).
#
# TWIST_BINARY defaults to build/bench/apps/twist/twist (see bench/README.md for the build command).
set -euo pipefail

source "$(dirname "$0")/export_common.sh"
parse_export_args "$@"
require_export_command norms
require_no_manifests "$out"
mkdir -p "$out"

# NORMS_FORMS=1: instead, for each row-kernel problem (SwiGLU, elementwise, and LayerNorm by shifted sums left
# out), the row kernel's forms side by side, each a manifest of its own label timed with its problem
# (bench/results/norms6.json; bench/RESULTS.md, "Norms: rows read again"), with M = min(1024, hidden / 8)
# threads per row (one or two 16-byte runs per thread): the rule's kernel (rows in registers); rows in
# registers at M and at 512 threads per row (_registers_tM, _t512); rows read again by each pass at M and 512
# (_reread_tM, _t512), and at M asking the compiler for a full SM of threads (_reread_tM_mb{2048/M}). twist
# export norms --row-form / --row-threads / --min-blocks set them (the schedule's row_form and
# min_blocks_per_sm); 70 manifests of 12 problems.
forms() {  # HIDDEN: the variants' extra arguments, one set a line (the first empty: the rule's kernel)
  local most=$(($1 / 8 > 1024 ? 1024 : $1 / 8))
  printf '%s\n' "" "--row-form registers --row-threads $most" "--row-form reread --row-threads $most" \
    "--row-form reread --row-threads $most --min-blocks $((2048 / most))" "--row-form reread --row-threads 512" \
    "--row-form registers --row-threads 512"
}

count=0
# Each line: op dtype shape [extra arguments of twist export norms].
while read -r op dtype shape extra; do
  variants=("$extra")
  if [[ -n ${NORMS_FORMS:-} ]]; then
    [[ $op == swiglu || -n $extra ]] && continue
    mapfile -t variants < <(forms "${shape#*x}")
  fi
  for variant in "${variants[@]}"; do
    # shellcheck disable=SC2086  # variant is zero or more arguments
    "$twist" export norms --op "$op" --rows "${shape%x*}" --hidden "${shape#*x}" --dtype "$dtype" --out "$out" \
      $variant >/dev/null
    count=$((count + 1))
  done
done <<'SUITE'
rmsnorm f16 8192x4096
rmsnorm f16 16384x8192
rmsnorm f16 32768x16384
rmsnorm bf16 16384x8192
rmsnorm bf16 32768x16384
layernorm f16 16384x8192
layernorm f16 32768x16384
layernorm f16 32768x16384 --layernorm shifted_sums
layernorm bf16 32768x16384
layernorm bf16 32768x16384 --layernorm shifted_sums
swiglu f16 8192x4096
swiglu f16 32768x16384
swiglu bf16 8192x4096
softmax f16 16384x8192
softmax bf16 32768x16384
add_rmsnorm f16 32768x16384
add_rmsnorm bf16 16384x8192
SUITE
# (a variant that is the rule's kernel, or one asked for twice, is written once)
echo "$(find "$out" -name '*.json' | wc -l) manifests in $out ($count exports, $(du -sh "$out" | cut -f1))"
