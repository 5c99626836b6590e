#!/usr/bin/env bash
# Builds bpbench_bench (Google Benchmark micro-benchmarks, tests/benchmarks/) and runs it, writing JSON to
# out/bench.json. Extra arguments go to the binary, after the defaults, so they override them, e.g.
#   scripts/bench.sh --benchmark_filter=Head --benchmark_min_time=1 --torch_threads=2
# Environment: BPBENCH_BUILD_DIR (default build/), BPBENCH_JOBS (default nproc), BPBENCH_BENCH_OUT (the JSON).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${BPBENCH_BUILD_DIR:-$root/build}"
out="${BPBENCH_BENCH_OUT:-$root/out/bench.json}"
bash "$root/scripts/setup.sh"
export CCACHE_SLOPPINESS="pch_defines,time_macros,include_file_mtime,include_file_ctime"
if [ ! -f "$build/build.ninja" ]; then
  cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
elif ! grep -q bpbench_bench "$build/build.ninja"; then
  # Configured before Google Benchmark was installed, or with the option off.
  cmake -S "$root" -B "$build" -DBPBENCH_BUILD_BENCHMARKS=ON >/dev/null
fi
cmake --build "$build" --target bpbench_bench -j "${BPBENCH_JOBS:-$(nproc)}"
mkdir -p "$(dirname "$out")"
# A short default run (under a minute on 2 cores): at least 0.5 s per benchmark, one torch thread.
"$build/bpbench_bench" --benchmark_min_time=0.5 --benchmark_out="$out" --benchmark_out_format=json "$@"
echo "bench: JSON written to $out"
