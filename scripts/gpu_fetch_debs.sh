#!/usr/bin/env bash
# Run HERE (a Debian 12 machine with network): downloads the Debian -dev packages the bpbench build needs that a
# GPU machine without network lacks (nlohmann-json, GoogleTest, the gloo headers of c10d's Gloo backend) into
# .deps/debs/, and the peers' wheels (reports/peers/) into .deps/wheels/ (about 15 MB), both git-ignored and travels to the GPU machine with the device tool's `carry: [".deps"]`.
# LibTorch, CUDA, CUPTI, NVTX and NCCL are the GPU machine's own (its python3's torch and /usr/local/cuda).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
mkdir -p "$root/.deps/debs"
cd "$root/.deps/debs"
[ "$(id -u)" -eq 0 ] && apt-get update -qq
apt-get download nlohmann-json3-dev libgtest-dev libgmock-dev googletest libgloo-dev 2>&1 | grep -v '^Get:' || true
ls -1 "$root/.deps/debs"
# The peers' wheels (scripts/peers/*.txt, hashed), which scripts/setup_peers.sh installs from .deps/wheels there.
mkdir -p "$root/.deps/wheels"
for requirements in "$root"/scripts/peers/*.txt; do
  "${PYTHON:-$root/.venv/bin/python}" -m pip download -q --disable-pip-version-check --no-deps --require-hashes \
    -d "$root/.deps/wheels" -r "$requirements"
done
ls -1 "$root/.deps/wheels"
