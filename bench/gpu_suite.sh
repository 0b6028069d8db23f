#!/usr/bin/env bash
# Everything the GPU machine runs in one call (device time is short): the GPU test suite, the demo under
# compute-sanitizer, the SASS of the benchmark kernels, and the benchmarks. Run from the repository root on
# the GPU machine, with .gpu/ (binaries and manifests, see bench/README.md) and .device-runtime/ carried:
#
#   bench/gpu_suite.sh [tests] [sanitizer] [sass] [gemm] [accumulation] [attention] [norms] [torch_ops]
#                      (default: all)
#
# Results go to $OUT (at most 8 files come back): suite.log, and the benchmarks' JSON.
set -uo pipefail
out=${OUT:-/tmp/twist-out}
mkdir -p "$out"
log=$out/suite.log
parts=${*:-tests sanitizer sass gemm accumulation attention norms torch_ops}
wants() { [[ " $parts " == *" $1 "* ]]; }
# The C++ binaries need the Debian runtime libraries; PyTorch must not see them.
cpp() { (source .device-runtime/enter.sh && "$@"); }
export TWIST_CUDA_INCLUDE=/usr/local/cuda/include TWIST_CACHE_DIR=/tmp/twist-cache PYTHONUNBUFFERED=1
status=0
# compute-sanitizer's TOOL on one case of twist_apps_gpu_tests, reported as LABEL (doctest splits filters at
# commas: '?' matches a name's comma).
sanitize_case() {  # tool, label, test case
  local l=/tmp/san_case.log
  TWIST_LINEINFO=1 cpp compute-sanitizer --tool "$1" --error-exitcode 3 .gpu/bin/twist_apps_gpu_tests \
    --test-case="${3//,/?}" >"$l" 2>&1
  local r=$?
  echo "[$([[ $r == 0 ]] && echo PASS || echo FAIL)] $1 on $2: $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY|test cases' "$l" | tr '\n' ' ')" | tee -a "$log"
  [[ $r != 0 ]] && { status=1; tail -30 "$l" >>"$log"; }
}
section() { echo -e "\n=== $* ($(date +%T))" | tee -a "$log"; }

section "machine"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv | tee -a "$log"

if wants tests; then
  section "GPU tests (one process per case, ${GPU_TEST_JOBS:=8} at a time)"
  mapfile -t cases < <(cpp .gpu/bin/twist_apps_gpu_tests --list-test-cases --no-intro 2>/dev/null | grep '^GPU:')
  # A bounded number at a time: all 58 at once left the longest case (the clustered GEMM at every element)
  # without its time on the 16 cores.
  rm -f /tmp/case*.rc
  for i in "${!cases[@]}"; do
    while (( $(jobs -rp | wc -l) >= GPU_TEST_JOBS )); do wait -n; done
    # doctest splits filters at commas: '?' matches the comma of a name that has one.
    (cpp .gpu/bin/twist_apps_gpu_tests --test-case="${cases[$i]//,/?}" >"/tmp/case$i.log" 2>&1
     echo $? >"/tmp/case$i.rc") &
  done
  wait
  for i in "${!cases[@]}"; do
    r=FAIL
    # A pass needs exit 0 and exactly one case run and passed (a filter that matched nothing also exits 0).
    if [[ $(cat "/tmp/case$i.rc") == 0 ]] && grep -qE 'test cases: +1 \| +1 passed' "/tmp/case$i.log"; then r=PASS; fi
    [[ $r == FAIL ]] && status=1
    echo "[$r] ${cases[$i]}" | tee -a "$log"
    [[ $r == FAIL ]] && tail -40 "/tmp/case$i.log" >>"$log"
  done
  # The runtime's own GPU tests: driver, kernels, TMA tensor maps (hand-written sm_90a kernels) and cluster launches.
  # One process per case, in turn: a case that makes a kernel fault on purpose leaves its context unusable.
  if [[ -x .gpu/bin/twist_cuda_gpu_tests ]]; then
    mapfile -t runtime_cases < <(cpp .gpu/bin/twist_cuda_gpu_tests --list-test-cases --no-intro 2>/dev/null | grep -v '^\[doctest\]\|^=*$')
    for c in "${runtime_cases[@]}"; do
      r=FAIL
      # (doctest splits filters at commas: '?' matches the comma instead)
      cpp .gpu/bin/twist_cuda_gpu_tests --test-case="${c//,/?}" >/tmp/cuda_case.log 2>&1 &&
        grep -qE 'test cases: +1 \| +1 passed' /tmp/cuda_case.log && r=PASS
      [[ $r == FAIL ]] && status=1
      echo "[$r] runtime: $c" | tee -a "$log"
      [[ $r == FAIL ]] && tail -40 /tmp/cuda_case.log >>"$log"
    done
  fi
fi

if wants sanitizer; then
  section "twist demo under compute-sanitizer (memcheck, racecheck)"
  for tool in memcheck racecheck; do
    cpp compute-sanitizer --tool $tool --error-exitcode 3 .gpu/bin/twist demo >/tmp/san_$tool.log 2>&1
    r=$?
    echo "[$([[ $r == 0 ]] && echo PASS || echo FAIL)] $tool: $(grep -E 'ERROR SUMMARY|checks passed|FAILED' /tmp/san_$tool.log | tr '\n' ' ')" | tee -a "$log"
    [[ $r != 0 ]] && { status=1; tail -30 /tmp/san_$tool.log >>"$log"; }
  done
  # The kernels of the GEMM and attention datapaths, each on its small case.
  sanitize_case memcheck "attention" "GPU: split-KV prefill and packed grouped-query decoding match the oracle"
  for tool in memcheck racecheck synccheck; do
    # The Hopper GEMM: TMA ring, warp specialization, persistent grid, the TMA-store epilogue.
    sanitize_case $tool "Hopper GEMM" "GPU: Hopper GEMM with the TMA-store epilogue on small problems (for the sanitizers)"
    # Hopper attention (TMA ring, wgmma from shared memory and from registers), also warp-specialized.
    sanitize_case $tool "Hopper attention" \
      "GPU: Hopper attention with masked rows and grouped-query heads (for the sanitizers)"
    sanitize_case $tool "warp-specialized Hopper attention" \
      "GPU: warp-specialized Hopper attention with masked rows and grouped-query heads (for the sanitizers)"
    # Two consumer warpgroups taking turns (bar.sync / bar.arrive on their own named barriers).
    sanitize_case $tool "ping-pong Hopper attention" \
      "GPU: ping-pong Hopper attention with masked rows and grouped-query heads (for the sanitizers)"
    # The next tile's S overlapped with this tile's softmax (two S sets by the tile's parity), alone and in
    # ping-pong.
    sanitize_case $tool "overlapped Hopper attention" \
      "GPU: overlapped Hopper attention with masked rows and grouped-query heads (for the sanitizers)"
    # Head dim 512 with the output's columns over two consumer warpgroups (Gemma 4's full layers).
    sanitize_case $tool "D 512 Hopper attention" "GPU: D 512 Hopper attention with masked rows (for the sanitizers)"
    # 2-block clusters: B multicast by TMA, slots released in both blocks, cluster barriers.
    sanitize_case $tool "clustered Hopper GEMM" "GPU: clustered Hopper GEMM on a small problem (for the sanitizers)"
    # Ping-pong: two consumer warpgroups with tiles of their own, main loops in turn, epilogue tiles of their own.
    sanitize_case $tool "ping-pong Hopper GEMM" "GPU: ping-pong Hopper GEMM on a small problem (for the sanitizers)"
  done
  # Split-KV decoding on the decode rule's ring (apps::decode_tiling: 3 cp.async slots, parts of 24 tiles).
  for tool in memcheck racecheck; do
    sanitize_case $tool "split-KV decode" "GPU: decoding on the rule's ring with parts of many tiles (for the sanitizers)"
  done
  # The split's parts folded by each tile's last block (SplitCombine::last_block: fence, ticket, fold, reset).
  for tool in memcheck racecheck; do
    sanitize_case $tool "last-block decode" "GPU: decoding with the last block's fold over parts of many tiles (for the sanitizers)"
    sanitize_case $tool "last-block split-K" "GPU: split-K with each tile's last block folding matches a double loop"
  done
fi

if wants sass; then
  section "SASS of the benchmark kernels (instruction counts)"
  # Every exported 4096^3 f16 GEMM (the suite's, the rule's, and any Hopper set), attention prefill and decoding.
  # A kernel with wgmma (HGMMA) must also load through TMA (UTMALDG) and use no local memory (LDL/STL), or the
  # section fails; UTMASTG counts the epilogue's TMA stores.
  count() { grep -cE "$1" <<<"$sass"; }
  for cubin in .gpu/manifests/*/gemm_f16_4096x4096x4096_*.cubin .gpu/manifests/attention/attention_f16_B4_H16_S4096_L4096_D128_*.cubin .gpu/manifests/attention/attention_bf16_*_D256_*.cubin .gpu/manifests/attention/attention_bf16_*_D512_*.cubin .gpu/manifests/attention/decode_*.cubin; do
    [[ -e $cubin ]] || continue
    sass=$(cuobjdump --dump-sass "$cubin")
    hgmma=$(count 'HGMMA') utmaldg=$(count 'UTMALDG') local=$(count '\bLDL|\bSTL')
    verdict=""
    if (( hgmma > 0 )); then
      if (( utmaldg > 0 && local == 0 )); then verdict=" [PASS Hopper]"; else verdict=" [FAIL Hopper: needs UTMALDG and no LDL/STL]"; status=1; fi
    fi
    printf '%s: HMMA %d LDSM %d LDGSTS %d HGMMA %d UTMALDG %d UTMASTG %d LDL/STL %d%s\n' "${cubin#.gpu/manifests/}" \
      "$(count 'HMMA')" "$(count 'LDSM')" "$(count 'LDGSTS')" "$hgmma" "$utmaldg" "$(count 'UTMASTG')" "$local" \
      "$verdict" | tee -a "$log"
  done
  # The norms at 8192x4096 f16: rows and outputs moved with 16-byte accesses (LDG/STG .128) and no local
  # memory (LDL/STL: a row kept in registers that spilled), or the section fails.
  for cubin in .gpu/manifests/norms/*_f16_8192x4096.*.cubin; do
    [[ -e $cubin ]] || continue
    sass=$(cuobjdump --dump-sass "$cubin")
    ldg128=$(count 'LDG\.[A-Z0-9.]*128') stg128=$(count 'STG\.[A-Z0-9.]*128') local=$(count '\bLDL|\bSTL')
    verdict=" [PASS 16-byte]"
    if (( ldg128 == 0 || stg128 == 0 || local > 0 )); then verdict=" [FAIL: needs LDG.128 and STG.128, no LDL/STL]"; status=1; fi
    printf '%s: LDG %d (128-bit %d) STG %d (128-bit %d) LDS %d LDL/STL %d%s\n' "${cubin#.gpu/manifests/}" \
      "$(count '\bLDG\.')" "$ldg128" "$(count '\bSTG\.')" "$stg128" "$(count '\bLDS\b|\bLDS\.')" "$local" "$verdict" | tee -a "$log"
  done
fi

if wants gemm; then
  section "GEMM benchmark"
  python3 apps/gemm/bench_gemm.py .gpu/manifests/gemm --out "$out/gemm.json" 2>&1 | tee -a "$log" || status=1
  # The rule's tilings: the suite's shapes, shapes outside it and skinny ones (GB/s against HBM for M <= 64).
  if [[ -d .gpu/manifests/gemm_rule ]]; then
    python3 apps/gemm/bench_gemm.py .gpu/manifests/gemm_rule --out "$out/gemm_rule.json" 2>&1 | tee -a "$log" || status=1
  fi
  # Beside some of those picks, the tilings the rule's cost model ranks next: where it is least sure.
  if [[ -d .gpu/manifests/gemm_alternatives ]]; then
    python3 apps/gemm/bench_gemm.py .gpu/manifests/gemm_alternatives --out "$out/gemm_alternatives.json" 2>&1 | tee -a "$log" || status=1
  fi
fi

if wants accumulation; then
  section "accumulation study"
  python3 apps/gemm/accuracy_study.py .gpu/manifests/accumulation --timing .gpu/manifests/accumulation_timing \
    --out "$out/accumulation.json" 2>&1 | tee -a "$log" || status=1
  # The same study on the Hopper schedule (wgmma), beside the mma.sync one.
  if [[ -d .gpu/manifests/accumulation_wgmma ]]; then
    python3 apps/gemm/accuracy_study.py .gpu/manifests/accumulation_wgmma \
      --timing .gpu/manifests/accumulation_wgmma_timing --out "$out/accumulation_wgmma.json" 2>&1 | tee -a "$log" || status=1
  fi
fi

if wants attention && [[ -d .gpu/manifests/attention ]]; then
  section "attention benchmark"
  python3 apps/attention/bench_attention.py .gpu/manifests/attention --out "$out/attention.json" 2>&1 | tee -a "$log" || status=1
  if [[ -d .gpu/manifests/attention_explore ]]; then
    python3 apps/attention/bench_attention.py .gpu/manifests/attention_explore --out "$out/attention_explore.json" \
      2>&1 | tee -a "$log" || status=1
  fi
fi

if wants norms && [[ -d .gpu/manifests/norms ]]; then
  section "norms benchmark (softmax, LayerNorm, RMSNorm, add + RMSNorm, SwiGLU)"
  python3 apps/norms/bench_norms.py .gpu/manifests/norms --out "$out/norms.json" 2>&1 | tee -a "$log" || status=1
fi

if wants torch_ops && [[ -d .gpu/manifests/torch_ops ]]; then
  section "GEMM and attention as PyTorch custom ops under torch.compile (bench/export_torch_ops.sh)"
  TWIST_TORCH_OPS_MANIFESTS=.gpu/manifests/torch_ops python3 -m pytest -q -s -rs -p no:cacheprovider \
    python/tests/gpu python/tests/test_runtime.py python/tests/test_tensor_map.py 2>&1 | tee -a "$log" || status=1
fi

section "done, status $status"
exit $status
