#!/usr/bin/env bash
# Installs the twist Python package (pyproject.toml) into the `python3` on PATH, reusing the release preset's
# build folder: run it after `cmake --build --preset release` (README, "The two commands").
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/pip-flags.sh
python3 -m pip install -q --no-build-isolation "${pip_flags[@]}" .
