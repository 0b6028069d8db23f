#!/usr/bin/env bash
# Installs, idempotently, the Debian packages twist builds with and the PyPI packages its Python package
# builds and tests with. Safe to run again: packages that are already present are skipped, and
# `apt-get update` runs only when something is missing.
set -euo pipefail
packages=(cmake ninja-build g++ libhalide14-0-dev llvm-14-dev llvm-14-tools doctest-dev libfmt-dev libz3-dev clang-format
          python3 python3-dev python3-pip)
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
# The Python package (pyproject.toml): nanobind and scikit-build-core build it, numpy and pytest test it; the
# tutorial notebooks run under nbclient (a Jupyter kernel from ipykernel), plot with matplotlib and render to
# HTML with nbconvert. They go to the `python3` on PATH (scripts/pip-flags.sh says where).
python_packages=(numpy pytest nanobind scikit-build-core nbclient nbformat ipykernel matplotlib nbconvert)
python_missing=()
for p in "${python_packages[@]}"; do
  python3 -c "import ${p//-/_}" 2>/dev/null || python_missing+=("$p")
done
if ((${#python_missing[@]})); then
  echo "twist setup: installing ${python_missing[*]} from PyPI for $(command -v python3)"
  source "$(dirname "$0")/pip-flags.sh"
  python3 -m pip install -q "${pip_flags[@]}" "${python_missing[@]}"
fi
