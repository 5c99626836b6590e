#!/usr/bin/env bash
# The build's promises, checked on the built binaries (ctest runs this as the test "build_facts"):
#   - one LibTorch: no source branches on a LibTorch version;
#   - one fmt: the wheel's headers, header-only; no libfmt on any link line or in the binary's libraries;
#   - every CUDA path compiled and linked wherever LibTorch is CUDA-enabled: libtorch_cuda, CUPTI and the
#     CUDA runtime are linked, and NCCL's process group is in the binary.
# Usage: BPBENCH=build/bpbench BUILD_DIR=build PYTHON=.venv/bin/python bash scripts/check_build.sh
set -uo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bpbench="${BPBENCH:-$root/build/bpbench}"
build="${BUILD_DIR:-$root/build}"
python="${PYTHON:-python3}"
failures=0
fail() { echo "build_facts: FAIL: $*"; failures=$((failures + 1)); }
ok() { echo "build_facts: ok: $*"; }

branches=$(grep -rnE 'TORCH_VERSION_(MAJOR|MINOR)|BPBENCH_TORCH_AT_LEAST' "$root"/{harness,impls,profiles,reports,tests} \
  --include='*.cpp' --include='*.h' 2>/dev/null)
[ -z "$branches" ] && ok "no source branches on a LibTorch version" || fail "version branches: $branches"

libs=$(ldd "$bpbench")
if grep -q 'libfmt' <<<"$libs" || grep -qE -- '-lfmt|libfmt' "$build/build.ninja"; then
  fail "a libfmt is linked beside the wheel's fmt headers"
else
  ok "no libfmt linked; fmt is header-only ($(grep -o 'FMT_HEADER_ONLY=1' "$build/compile_commands.json" | head -n 1))"
fi

wheel_cuda=$("$python" -c 'import torch; print(torch.version.cuda or "")')
if [ -n "$wheel_cuda" ]; then
  for lib in libtorch_cuda libc10_cuda libcudart libcupti; do
    grep -q "$lib" <<<"$libs" && ok "$lib linked (CUDA $wheel_cuda wheel)" || fail "$lib not linked, CUDA $wheel_cuda wheel"
  done
  symbols=$(nm -C "$bpbench")  # whole, not piped into grep -q: pipefail would see nm's SIGPIPE
  grep -q 'c10d::ProcessGroupNCCL::Options::Options' <<<"$symbols" &&
    ok "ProcessGroupNCCL compiled in" || fail "ProcessGroupNCCL not compiled in"
else
  ok "CPU-only LibTorch: CUDA paths not expected"
fi
exit "$failures"
