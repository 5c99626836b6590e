#!/usr/bin/env bash
# probe.sh: what this machine has for a bpbench build and run, one line each (scripts/gpu/check.sh's first
# stage, and useful alone): GPU and driver, torch and its CUDA, where nvcc, CUPTI, NVTX3 and NCCL's headers
# and libraries are (the toolkit, or the python's nvidia-* packages), cmake, ninja, compilers, free disk.
# Never fails: what is missing is said. PYTHON: the python whose torch the build uses (python3).
set -uo pipefail
python="${PYTHON:-python3}"
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
line() { printf '%-8s %s\n' "$1:" "${*:2}"; }
first() { for p in "$@"; do [[ -e "$p" ]] && { echo "$p"; return; }; done; echo "none"; }

if command -v nvidia-smi >/dev/null && nvidia-smi -L >/dev/null 2>&1; then
  line gpu "$(nvidia-smi --query-gpu=name,memory.total,driver_version,compute_cap --format=csv,noheader | head -n 4 | paste -sd';')"
else
  line gpu "none ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(nproc) cores)"
fi
line cpu "$(nproc) cores, $(awk '/MemTotal/ { printf "%.0f GiB", $2 / 1048576 }' /proc/meminfo)"
# One import of torch (seconds): its version and CUDA, and where its site-packages are.
read -r torch_line cuda_major site < <("$python" - 2>/dev/null <<'PY' || echo "none none none"
import os, sysconfig, torch
cuda = torch.version.cuda or ""
where = os.path.dirname(os.path.dirname(torch.__file__))
print(f"{torch.__version__}|cuda|{cuda or 'none'}|at|{where}", cuda.split(".")[0] or "none", sysconfig.get_paths()["purelib"])
PY
)
line torch "$(tr '|' ' ' <<<"$torch_line")"
pip_cuda="$site/nvidia/cu${cuda_major}"
toolkit="${CUDAToolkit_ROOT:-/usr/local/cuda}"
nvcc="$(command -v nvcc || first "$toolkit/bin/nvcc" "$pip_cuda/bin/nvcc")"
line nvcc "$nvcc $([[ -x "$nvcc" ]] && "$nvcc" --version | grep -o 'release [0-9.]*')"
line cupti "headers $(first "$toolkit/extras/CUPTI/include/cupti.h" "$toolkit/include/cupti.h" "$pip_cuda/include/cupti.h");" \
  "library $(first "$toolkit/extras/CUPTI/lib64/libcupti.so" "$toolkit/lib64/libcupti.so" "$pip_cuda/lib/libcupti.so" "$pip_cuda/lib/libcupti.so.$cuda_major")"
line nvtx3 "$(first "$toolkit/include/nvtx3/nvToolsExt.h" "$pip_cuda/include/nvtx3/nvToolsExt.h")"
line nccl "headers $(first "$site/nvidia/nccl/include/nccl.h" "$toolkit/include/nccl.h");" \
  "library $(first "$site/nvidia/nccl/lib/libnccl.so.2" "$toolkit/lib64/libnccl.so.2")"
line cudart "$(first "$toolkit/lib64/libcudart.so" "$pip_cuda/lib/libcudart.so" "$pip_cuda/lib/libcudart.so.$cuda_major")"
line cmake "$(cmake --version 2>/dev/null | head -n 1 || echo none)"
line ninja "$(ninja --version 2>/dev/null || echo none)"
line cxx "$( (c++ --version || g++ --version) 2>/dev/null | head -n 1 || echo none); clang++: $(command -v clang++ || echo none)"
line debs "$(ls "$root"/.deps/debs/*.deb 2>/dev/null | wc -l) in .deps/debs, $(ls "$root"/.deps/wheels 2>/dev/null | wc -l) wheels in .deps/wheels"
line disk "$(df -h "$root" | awk 'NR == 2 { print $4 " free on " $6 }')"
