#!/usr/bin/env bash
# Run ON THE GPU MACHINE (its own PyTorch 2.x + CUDA in python3, no network), from the repository root, with
# .deps carried (scripts/gpu_fetch_debs.sh): unpacks the .debs into .deps/prefix, configures against python3's
# LibTorch with every CUDA path on, builds, and runs the whole suite, tests/device/ included. Logs go to $OUT
# when the device tool sets it (else build-gpu/logs):
#   device run: command "bash scripts/gpu_build_and_test.sh", carry [".deps"]
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
prefix="$root/.deps/prefix"
log_dir="${OUT:-$root/build-gpu/logs}"
mkdir -p "$prefix" "$log_dir"
for deb in "$root"/.deps/debs/*.deb; do dpkg -x "$deb" "$prefix"; done
{ nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || echo "nvidia-smi: none"; } | tee "$log_dir/gpu.txt"
python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda)' | tee -a "$log_dir/gpu.txt"
# The peers (reports/peers/) into .peers from the carried wheels, for paper_gpu.sh and their tests.
PYTHON="$(command -v python3)" bash "$root/scripts/setup_peers.sh" 2>&1 | tee "$log_dir/peers.log"
cmake -S "$root" -B "$root/build-gpu" -G Ninja -DCMAKE_BUILD_TYPE=Release -DBPBENCH_PYTHON="$(command -v python3)" \
  -DBPBENCH_BUILD_BENCHMARKS=OFF -DCMAKE_PREFIX_PATH="$prefix/usr;$prefix/usr/lib/x86_64-linux-gnu/cmake" \
  2>&1 | tee "$log_dir/configure.log"
cmake --build "$root/build-gpu" -j "$(nproc)" 2>&1 | tee "$log_dir/build.log" | tail -n 20
cd "$root/build-gpu"
ctest --output-on-failure -j 4 2>&1 | tee "$log_dir/ctest.log" | tail -n 40
