#!/usr/bin/env bash
# GPU step: configure and build bpbench against the machine's own torch (its python3; no network there), with
# every CUDA path on, into BUILD_DIR (build-gpu/, which paper_gpu.sh reads). The Debian -dev packages a GPU
# machine lacks come as .debs in .deps/debs (scripts/gpu_fetch_debs.sh here; carry ".deps"), unpacked into
# .deps/prefix. Then the peers from .deps/wheels (scripts/setup_peers.sh), never fatal to the build.
# Stopped after STEP_SECONDS like every step: ninja continues where it stopped when called again on the same
# (warm) machine. 02_tests.sh builds the test binary.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
step_begin 01_build "$@"

prefix="$gpu_root/.deps/prefix"
mkdir -p "$prefix"
shopt -s nullglob
debs=("$gpu_root"/.deps/debs/*.deb)
for deb in "${debs[@]}"; do dpkg-deb -x "$deb" "$prefix"; done
echo "01_build: ${#debs[@]} .debs unpacked into $prefix"
if [[ ! -f "$BUILD_DIR/build.ninja" ]]; then
  cmake -S "$gpu_root" -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release \
    -DBPBENCH_PYTHON="$(command -v "$PYTHON")" -DBPBENCH_BUILD_BENCHMARKS=OFF \
    -DCMAKE_PREFIX_PATH="$prefix/usr;$prefix/usr/lib/x86_64-linux-gnu/cmake" | tail -n 25
fi
status=0
with_time_limit cmake --build "$BUILD_DIR" --target bpbench -j "$(nproc)" | tail -n 15 || status=$?
if ((status)); then
  [[ $status == 124 || $status == 137 ]] && echo "01_build: NOT FINISHED after $STEP_SECONDS s: call it again"
  exit "$status"
fi
"$BUILD_DIR/bpbench" --version
# The peers (reports/peers/) into .peers from the carried wheels: for paper_gpu.sh; a failure only warns.
PYTHON="$(command -v "$PYTHON")" bash "$gpu_root/scripts/setup_peers.sh" ||
  echo "01_build: warning: the peers were not installed; the peer steps will write why"
echo "01_build: done: $BUILD_DIR/bpbench"
