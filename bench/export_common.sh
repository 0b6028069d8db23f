# What the export scripts share, sourced by them: their arguments (OUT_DIR [TWIST_BINARY]) into $out and
# $twist, with the binary checked (and that it has the export command a script needs), and the check that a
# folder they export into holds no manifests yet (the benchmarks read every manifest in a folder, so
# manifests left from an earlier export would be measured too).

parse_export_args() {
  if [[ $# -lt 1 || $# -gt 2 ]]; then
    echo "usage: $0 OUT_DIR [TWIST_BINARY]" >&2
    exit 2
  fi
  out=$1
  twist=${2:-build/bench/apps/twist/twist}
  if [[ ! -x $twist ]]; then
    echo "$0: no twist binary at $twist; build it first:" >&2
    echo "  cmake -S . -B build/bench -G Ninja -DCMAKE_BUILD_TYPE=Release && cmake --build build/bench --target twist" >&2
    exit 2
  fi
}

require_no_manifests() {  # DIR
  if [[ -e $1 && ! -d $1 ]]; then
    echo "$0: $1 exists and is not a directory" >&2
    exit 2
  fi
  if [[ -d $1 && -n $(ls -A "$1") ]]; then
    echo "$0: $1 is not empty; remove it (or choose another OUT_DIR) so that no stale manifest is measured" >&2
    exit 2
  fi
}

require_export_command() {  # COMMAND: twist's `export COMMAND`, which a binary older than it lacks
  # Such a binary answers with its usage text instead of asking for --out.
  local probe
  probe=$("$twist" export "$1" 2>&1 || true)
  if [[ $probe != *"needs --out"* ]]; then
    echo "$0: $twist has no 'export $1' command; rebuild it from this tree" >&2
    exit 2
  fi
}
