#!/usr/bin/env bash
# Installs what a fresh Debian 12 machine lacks to build, test and report with bpbench, and nothing that is
# already there:
#   1. Debian packages: compilers (g++, clang++), CMake, Ninja, ccache, GoogleTest, Google Benchmark,
#      nlohmann-json, the gloo headers that c10d's ProcessGroupGloo.hpp includes (the wheel ships none),
#      matplotlib for the plots.
#   2. LibTorch: PyTorch 2.x from PyPI, pinned in scripts/requirements.txt, in the project-local, git-ignored
#      .venv (with transformers, the model oracle). The first time this downloads about 3 GB and takes about
#      5 GB of disk (torch's CUDA 13 libraries). Where .venv does not exist and python3 already imports a
#      torch 2.x (the GPU machines: their own torch, and no network), that one is used and nothing is installed.
#   3. Real text for the training scenarios: scripts/text_data.py tokenises the Python 3.11 documentation
#      (Debian's python3.11-doc, 12.6 MB download, no root) into .data/, once. Where it cannot (a GPU machine
#      has no network) a warning: carry .data/ there.
# The peers of impls/peers/ (scripts/setup_peers.sh) are not installed here but by scripts/build.sh after the
# build: a peer that cannot be installed (no network for its wheels) must not stop the build.
# CMake then finds LibTorch through that Python (scripts/cmake/dependencies.cmake). The CUDA 13 toolkit
# (nvcc, CUPTI, NVTX3) is expected at /usr/local/cuda (or CUDAToolkit_ROOT), of the wheel's CUDA major version.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"

packages=(
  build-essential cmake ninja-build ccache pkg-config git
  clang                                 # the default compiler of scripts/build.sh (twice g++'s speed here)
  python3 python3-venv
  nlohmann-json3-dev libgtest-dev libgmock-dev libbenchmark-dev
  libgloo-dev                           # headers for c10d's Gloo backend (streambp-dist on CPU)
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

# True when $1 imports every pin of requirements.txt at its pinned version (torch may carry a +cuXXX suffix).
satisfies_pins() {
  "$1" - "$root/scripts/requirements.txt" <<'PY' 2>/dev/null
import importlib.metadata as md, sys
for line in open(sys.argv[1]):
    line = line.split("#")[0].strip()
    if not line:
        continue
    name, version = line.split("==")
    if md.version(name).split("+")[0] != version:
        sys.exit(1)
PY
}

# The main environment.
venv="$root/.venv"
install_venv() {
  if [ -x "$venv/bin/python" ]; then
    satisfies_pins "$venv/bin/python" && return 0
  elif python3 -c 'import sys, torch; sys.exit(int(torch.__version__.split(".")[0]) < 2)' 2>/dev/null; then
    echo "setup: using python3's own torch $(python3 -c 'import torch; print(torch.__version__)'); nothing installed" >&2
    return 0
  else
    python3 -m venv "$venv"
  fi
  echo "setup: installing scripts/requirements.txt into .venv (first time: ~3 GB download, ~5 GB disk)" >&2
  # uv (pinned, from PyPI) downloads and unpacks the wheels in parallel: 35 s here where pip took about 150 s
  # for the same 3 GB, which counted against CI's 15 minutes. --native-tls: the system's certificates, as pip
  # uses them. Where uv cannot be had, pip installs the same pins.
  local uv_pin
  uv_pin="$(grep -E '^uv==' "$root/scripts/requirements.txt")"
  if "$venv/bin/python" -m pip install -q --disable-pip-version-check "$uv_pin" &&
     "$venv/bin/uv" pip install -q --native-tls --compile-bytecode --python "$venv/bin/python" \
       -r "$root/scripts/requirements.txt"; then
    return 0
  fi
  echo "setup: uv did not install the pins; pip installs them" >&2
  "$venv/bin/python" -m pip install -q --disable-pip-version-check -r "$root/scripts/requirements.txt"
}
install_venv

# The token files the shipped scenarios name (scenarios/cpu_train_text.json, h100_train_stability.json).
# Earlier versions of text_data.py downloaded and unpacked its package into .data/deb/ (83 MB), which the
# skip below would leave there; .data/ is carried whole to GPU machines (a 64 MiB carry), so it goes.
rm -rf "$root/.data/deb"
text_python="$venv/bin/python"
[ -x "$text_python" ] || text_python=python3
for shape in "2048 128" "8192 1024"; do
  read -r vocab seq_len <<<"$shape"
  [ -f "$root/.data/python_docs_V${vocab}_T${seq_len}.json" ] && continue
  "$text_python" "$root/scripts/text_data.py" --vocab "$vocab" --seq-len "$seq_len" --out "$root/.data" >/dev/null ||
    echo "setup: warning: .data/python_docs_V${vocab}_T${seq_len}.json not made; the scenarios that read it refuse to run" >&2
done
