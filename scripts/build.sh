#!/usr/bin/env bash
# Configures and builds bpbench (Release with debug info) into build/, after installing what is missing
# (scripts/setup.sh) and, for a whole build, the peers of impls/peers/ (scripts/setup_peers.sh; a warning if it
# fails).
# Usage: [BUILD_TARGETS="bpbench"] scripts/build.sh [extra cmake -D options...]
# BUILD_TARGETS: what to build (default: everything, tests and benchmarks included, the peers first); the
# quickstart builds only bpbench, which is all the main job runs (the test suite is most of the build).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bash "$root/scripts/setup.sh"
# ccache makes rebuilds after small changes quick; precompiled headers absorb most of LibTorch's header cost.
export CCACHE_SLOPPINESS="pch_defines,time_macros,include_file_mtime,include_file_ctime"
if [ ! -f "$root/build/build.ninja" ]; then
  # clang++ where it is installed (scripts/setup.sh installs Debian's clang 14): with LibTorch's precompiled
  # header it compiles this code about twice as fast as g++ 12 (docs/development.md). CXX=g++ keeps g++, and
  # a machine without clang++ (a GPU machine's image) builds with its g++.
  compiler=()
  if [[ -z "${CXX:-}" ]] && command -v clang++ >/dev/null; then compiler=(-DCMAKE_CXX_COMPILER=clang++); fi
  cmake -S "$root" -B "$root/build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo "${compiler[@]}" "$@" >/dev/null
fi
targets=()
for target in ${BUILD_TARGETS:-}; do targets+=(--target "$target"); done
# The peers of impls/peers/ (pinned wheels into .peers/) never fail the build: without them (no network for
# their wheels, no .deps/wheels carried) only the peer reports and their tests cannot run, and they say so.
# Before a whole build, which runs the official StreamBP check among the tests' Python oracles
# (tests/CMakeLists.txt); a partial build (BUILD_TARGETS) serves no peer.
if ((${#targets[@]} == 0)); then
  bash "$root/scripts/setup_peers.sh" || echo "build: warning: the peers were not installed" \
    "(scripts/setup_peers.sh failed, above: no network for their wheels?); the impls/peers/ modules that need" \
    "them will say so" >&2
fi
cmake --build "$root/build" -j "$(nproc)" "${targets[@]}"
