#!/usr/bin/env bash
# Run HERE (a Debian 12 machine with network): downloads the Debian -dev packages the bpbench build needs that a
# GPU machine without network lacks (nlohmann-json, GoogleTest, the gloo headers of c10d's Gloo backend) into
# .deps/debs/, and the peers' wheels (impls/peers/) into .deps/wheels/ (about 15 MB). .deps/ is git-ignored
# and travels to the GPU machine with the device tool's `carry: [".deps"]`, whose limit is 64 MiB for all
# carried paths together (.data/ included): the total is printed at the end, with a warning past 64 MiB.
# LibTorch, CUDA, CUPTI, NVTX and NCCL are the GPU machine's own (its python3's torch and /usr/local/cuda).
# Needs apt-get and a python3 with pip (the project's .venv when there is one; PYTHON= overrides).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"

# Any python with pip can download wheels: .venv's when a setup made one, else python3 (a fresh checkout).
python="${PYTHON:-}"
if [ -z "$python" ]; then
  if [ -x "$root/.venv/bin/python" ]; then python="$root/.venv/bin/python"; else python="python3"; fi
fi
if ! "$python" -m pip --version >/dev/null 2>&1; then
  echo "gpu_fetch_debs: $python has no pip; install it (apt-get install python3-pip) or set PYTHON=" >&2
  exit 2
fi

mkdir -p "$root/.deps/debs"
cd "$root/.deps/debs"
[ "$(id -u)" -eq 0 ] && apt-get update -qq
apt-get download nlohmann-json3-dev libgtest-dev libgmock-dev googletest libgloo-dev 2>&1 | grep -v '^Get:' || true
ls -1 "$root/.deps/debs"

# The peers' wheels (scripts/peers/*.txt, hashed), which scripts/setup_peers.sh installs from .deps/wheels there.
# Every pinned wheel is pure Python (py3-none-any) but tokenizers 0.21.1's, cp39-abi3-manylinux_2_17_x86_64: any
# CPython >= 3.9 on x86-64 Linux, so the GPU machine's Python (3.12) may differ from this one's, but its processor
# (x86-64) may not differ from the wheel's. The target is named so that a download from another processor or an
# older Python still picks that wheel (the hashes then refuse any other).
# DeepSpeed (scripts/peers/deepspeed.txt) is an sdist only: no --only-binary (pip allows that with --no-deps),
# and the build backend its offline build needs (setuptools, wheel, packaging) is carried beside it.
mkdir -p "$root/.deps/wheels"
for requirements in "$root"/scripts/peers/*.txt; do
  "$python" -m pip download -q --disable-pip-version-check --no-deps --require-hashes \
    --implementation cp --python-version 3.12 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
    -d "$root/.deps/wheels" -r "$requirements"
done
"$python" -m pip download -q --disable-pip-version-check --no-deps --only-binary=:all: -d "$root/.deps/wheels" \
  setuptools wheel packaging
ls -1 "$root/.deps/wheels"

# What the carry costs: .deps/ alone, and beside .data/ (scripts/text_data.py) when that exists too.
limit=$((64 << 20))
deps_bytes="$(du -sb "$root/.deps" | cut -f1)"
data_bytes=0
[ -d "$root/.data" ] && data_bytes="$(du -sb "$root/.data" | cut -f1)"
mib() { awk -v b="$1" 'BEGIN { printf "%.1f MiB", b / 1048576 }'; }
echo "gpu_fetch_debs: .deps/ holds $(mib "$deps_bytes") (with .data/: $(mib $((deps_bytes + data_bytes))))" >&2
if ((deps_bytes + data_bytes > limit)); then
  echo "gpu_fetch_debs: warning: more than the device tool's 64 MiB carry; carry fewer paths per call" >&2
fi
