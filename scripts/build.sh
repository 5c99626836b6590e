#!/usr/bin/env bash
# Configures and builds bpbench (Release with debug info) into build/, after installing what is missing.
# Usage: scripts/build.sh [extra cmake -D options...]
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bash "$root/scripts/setup.sh"
# ccache makes rebuilds after small changes quick; precompiled headers absorb most of LibTorch's header cost.
export CCACHE_SLOPPINESS="pch_defines,time_macros,include_file_mtime,include_file_ctime"
if [ ! -f "$root/build/build.ninja" ]; then
  cmake -S "$root" -B "$root/build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo "$@" >/dev/null
fi
cmake --build "$root/build" -j "$(nproc)"
