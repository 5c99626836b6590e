#!/usr/bin/env bash
# Measures what a developer waits for, on this machine, and prints one table (also written to OUT/build_times.md):
#   quickstart    a fresh clone of HEAD to the quickstart's first table (scripts/quickstart.sh: set-up, building
#                 bpbench, the runs), with the pinned wheels downloaded beforehand (OUT/wheels, not timed)
#   cold build    the whole build (bpbench, tests, benchmarks) from an empty build folder and an empty ccache
#   no change     the build again, nothing changed
#   one file      the build after a change to one source file (a declaration appended to
#                 harness/estimate/estimate.cpp)
#   ctest         the whole suite (scripts/test.sh's ctest), and without the cases labelled slow (-LE slow)
# Everything runs in a fresh clone under OUT (default /tmp/bpbench-build-times) with its own empty ccache, so
# the figures do not depend on this checkout's build/ or ccache. STAGES picks some (default: all, in order:
# quickstart cold noop onefile ctest ctest_fast); a later stage reuses the clone the earlier ones made.
# Usage: scripts/bench_build.sh [OUT]
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
out="${1:-/tmp/bpbench-build-times}"
stages="${STAGES:-quickstart cold noop onefile ctest ctest_fast}"
clone="$out/clone"
mkdir -p "$out"
export CCACHE_DIR="$out/ccache"  # empty at first: a cold build compiles every file
export CCACHE_SLOPPINESS="pch_defines,time_macros,include_file_mtime,include_file_ctime"
table="$out/build_times.md"

now() { date +%s.%N; }
record() {  # STAGE SECONDS NOTE
  printf '| %s | %.0f s (%s) | %s |\n' "$1" "$2" "$(awk -v s="$2" 'BEGIN { printf "%dm%02ds", s / 60, s % 60 }')" \
    "$3" | tee -a "$table"
}
timed() {  # STAGE NOTE COMMAND...: runs the command, its output to OUT/STAGE.log, and records its wall time
  local stage="$1" note="$2" start rc=0
  shift 2
  start="$(now)"
  "$@" >"$out/$stage.log" 2>&1 || rc=$?
  local seconds
  seconds="$(awk -v a="$start" -v b="$(now)" 'BEGIN { print b - a }')"
  ((rc == 0)) || note="$note; FAILED with exit $rc (see $out/$stage.log)"
  record "$stage" "$seconds" "$note"
  return "$rc"
}

# A run from the quickstart on starts the table; a run of later stages alone adds its rows to it.
[[ " $stages " != *" quickstart "* && -f "$table" ]] || {
  echo "# Build and test times: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')"
  echo
  echo "Commit $(git -C "$root" rev-parse --short HEAD), $(date -u '+%Y-%m-%d %H:%M UTC'), compiler: see cold.log."
  echo
  echo "| stage | wall time | what |"
  echo "|---|---|---|"
} >"$table"
cat "$table"

for stage in $stages; do
  case "$stage" in
    quickstart)
      rm -rf "$clone" "$CCACHE_DIR"
      git clone -q "$root" "$clone"
      # The wheels downloaded beforehand, untimed (kept in OUT/wheels for the next run): the figure is the
      # set-up and the build, not this machine's network.
      python3 -m pip download -q -r "$root/scripts/requirements.txt" -d "$out/wheels" >"$out/wheels.log" 2>&1
      PIP_FIND_LINKS="$out/wheels" PIP_NO_INDEX=1 timed quickstart \
        "fresh clone to the first table (set-up with the wheels downloaded, bpbench built, the runs; empty ccache)" \
        bash "$clone/scripts/quickstart.sh" "$out/quickstart-results"
      ;;
    cold)
      rm -rf "$clone/build" "$CCACHE_DIR"
      # BUILD_TARGETS=all: the build alone (scripts/build.sh then leaves out the peers' install, not a build).
      BUILD_TARGETS=all timed cold "everything from an empty build/ and ccache ($(nproc) jobs)" \
        bash "$clone/scripts/build.sh"
      bash "$clone/scripts/setup_peers.sh" >"$out/peers.log" 2>&1 || echo "bench_build: peers not installed" >&2
      ;;
    noop)
      timed noop "the build again, nothing changed" cmake --build "$clone/build" -j "$(nproc)"
      ;;
    onefile)
      # A declaration, not a comment: ccache would find a comment-only change's preprocessed text in its cache.
      echo "namespace { [[maybe_unused]] const int bench_build_change = $(date +%s); }" \
        >>"$clone/harness/estimate/estimate.cpp"
      timed onefile "a declaration appended to harness/estimate/estimate.cpp (recompiled; bpbench, tests relinked)" \
        cmake --build "$clone/build" -j "$(nproc)" || true
      git -C "$clone" checkout -q -- harness/estimate/estimate.cpp
      cmake --build "$clone/build" -j "$(nproc)" >/dev/null
      ;;
    ctest)
      timed ctest "the whole suite: ctest -j $(nproc) ($(cd "$clone/build" && ctest -N | tail -n 1))" \
        bash -c "cd '$clone/build' && ctest -j $(nproc)" || true
      ;;
    ctest_fast)
      timed ctest_fast "without the slow cases: ctest -j $(nproc) -LE slow" \
        bash -c "cd '$clone/build' && ctest -j $(nproc) -LE slow" || true
      ;;
    *)
      echo "bench_build: unknown stage '$stage' (valid: quickstart cold noop onefile ctest ctest_fast)" >&2
      exit 2
      ;;
  esac
done
echo "bench_build: $table"
