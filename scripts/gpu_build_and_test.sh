#!/usr/bin/env bash
# Run ON THE GPU MACHINE (PyTorch 2.x + CUDA wheel, no network), from the repository root, with .deps carried:
# unpacks the .debs from scripts/gpu_fetch_debs.sh into .deps/prefix, configures against the wheel's LibTorch with
# CUDA, builds, and runs every test including tests/device/. Logs go to $OUT when the device tool sets it.
#   device run: command "bash scripts/gpu_build_and_test.sh", carry [".deps"]
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
prefix="$root/.deps/prefix"
log_dir="${OUT:-$root/build-gpu}"
mkdir -p "$prefix" "$log_dir"
for deb in "$root"/.deps/debs/*.deb; do dpkg -x "$deb" "$prefix"; done
torch_prefix="$(python3 -c 'import torch; print(torch.utils.cmake_prefix_path)')"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee "$log_dir/gpu.txt"
cmake -S "$root" -B "$root/build-gpu" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_PREFIX_PATH="$torch_prefix;$prefix/usr;$prefix/usr/lib/x86_64-linux-gnu/cmake" \
  -DCMAKE_CUDA_ARCHITECTURES=90 -DBPBENCH_WITH_CUDA=ON 2>&1 | tee "$log_dir/configure.log"
cmake --build "$root/build-gpu" -j "$(nproc)" 2>&1 | tee "$log_dir/build.log" | tail -n 20
cd "$root/build-gpu"
ctest --output-on-failure -j 4 2>&1 | tee "$log_dir/ctest.log" | tail -n 40
