#!/usr/bin/env bash
# Run HERE (a Debian 12 machine with network): downloads the Debian -dev packages the bpbench build needs that a
# GPU machine without network lacks (nlohmann-json, GoogleTest, the gloo headers of c10d's Gloo backend) into
# .deps/debs/, which is git-ignored and travels to the GPU machine with the device tool's `carry: [".deps"]`.
# LibTorch, CUDA, CUPTI, NVTX and NCCL are the GPU machine's own (its python3's torch and /usr/local/cuda).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
mkdir -p "$root/.deps/debs"
cd "$root/.deps/debs"
[ "$(id -u)" -eq 0 ] && apt-get update -qq
apt-get download nlohmann-json3-dev libgtest-dev libgmock-dev googletest libgloo-dev 2>&1 | grep -v '^Get:' || true
ls -1 "$root/.deps/debs"
