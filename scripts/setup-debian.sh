#!/usr/bin/env bash
# Installs, idempotently, the Debian packages twist builds with. Safe to run again: packages that are
# already present are skipped, and `apt-get update` runs only when something is missing.
set -euo pipefail
packages=(cmake ninja-build g++ libhalide14-0-dev llvm-14-dev llvm-14-tools doctest-dev libfmt-dev libz3-dev clang-format)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  sudo=""; [ "$(id -u)" -eq 0 ] || sudo="sudo"
  echo "twist setup: installing ${missing[*]}"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
if [ ! -e /usr/local/cuda/include/nvrtc.h ]; then
  echo "twist setup: the CUDA toolkit is expected at /usr/local/cuda (nvrtc.h, cuda.h, libnvrtc)" >&2
  exit 1
fi
