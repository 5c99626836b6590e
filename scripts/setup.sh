#!/usr/bin/env bash
# Installs what a fresh Debian 12 machine lacks to build, test and report with bpbench.
# Quick when everything is already there: it checks with dpkg before touching apt.
set -euo pipefail

packages=(
  build-essential cmake ninja-build ccache pkg-config git
  libtorch-dev libopenblas0-openmp      # LibTorch 1.13 (CPU); OpenBLAS, else ~17x slower GEMMs
  libfmt-dev nlohmann-json3-dev libgtest-dev libgmock-dev libbenchmark-dev
  libgloo-dev                           # c10d Gloo backend for streambp-dist on CPU
  python3-matplotlib python3-numpy      # reports/plot.py
  clang-format
)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done

if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}" >&2
  sudo_cmd=""
  [ "$(id -u)" -eq 0 ] || sudo_cmd="sudo"
  $sudo_cmd apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
