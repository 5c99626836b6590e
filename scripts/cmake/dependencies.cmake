# dependencies.cmake: the one place that finds what bpbench builds against.
#
# LibTorch is the pinned PyTorch wheel's (scripts/requirements.txt), found through the Python that imports it.
# When that LibTorch is CUDA-enabled (the PyPI wheel is), every CUDA path is compiled and linked, on every
# machine, GPU or not: BPBENCH_WITH_CUDA, CUPTI, NVTX3 and NCCL, against a CUDA toolkit of the wheel's CUDA major version.
#
# Provides: TORCH_LIBRARIES, BPBENCH_PYTHON, BPBENCH_WITH_CUDA, and the targets
#   bpbench::gloo_headers  the gloo headers ProcessGroupGloo.hpp includes (Debian's libgloo-dev)
#   bpbench::fmt  the wheel's fmt, header-only: the one fmt in the binary (no libfmt is linked)
#   bpbench::gpu  CUDA runtime, CUPTI, NVTX3 and NCCL, with the definitions that record the build's CUDA
#                 in every results file; an empty target in a CPU-only build.

# ---- the Python whose torch provides LibTorch --------------------------------------------------------------
set(BPBENCH_PYTHON "" CACHE FILEPATH "Python that imports torch 2.x (default: .venv/bin/python, else python3)")
if(NOT BPBENCH_PYTHON)
  if(EXISTS "${CMAKE_SOURCE_DIR}/.venv/bin/python")
    set(BPBENCH_PYTHON "${CMAKE_SOURCE_DIR}/.venv/bin/python" CACHE FILEPATH "" FORCE)
  else()
    find_program(_bpbench_python3 python3 REQUIRED)
    set(BPBENCH_PYTHON "${_bpbench_python3}" CACHE FILEPATH "" FORCE)
  endif()
endif()
execute_process(
  COMMAND "${BPBENCH_PYTHON}" -c
          "import os, torch; print(torch.__version__); print(torch.utils.cmake_prefix_path); \
print(torch.version.cuda or ''); print(os.path.dirname(os.path.dirname(torch.__file__)))"
  OUTPUT_VARIABLE _torch_info RESULT_VARIABLE _torch_rc ERROR_QUIET OUTPUT_STRIP_TRAILING_WHITESPACE)
if(NOT _torch_rc EQUAL 0)
  message(FATAL_ERROR "bpbench: ${BPBENCH_PYTHON} cannot import torch; run scripts/setup.sh "
                      "(it installs the pinned torch into .venv), or pass -DBPBENCH_PYTHON=<a python with torch 2.x>")
endif()
string(REPLACE "\n" ";" _torch_info "${_torch_info}")
list(GET _torch_info 0 BPBENCH_TORCH_VERSION)
list(GET _torch_info 1 _torch_cmake_prefix)
list(GET _torch_info 2 BPBENCH_TORCH_CUDA)   # "13.0", or "" for a CPU-only wheel
list(GET _torch_info 3 _site_packages)
if(BPBENCH_TORCH_VERSION VERSION_LESS 2.0)
  message(FATAL_ERROR "bpbench: needs LibTorch 2.x; ${BPBENCH_PYTHON} has torch ${BPBENCH_TORCH_VERSION}")
endif()
list(PREPEND CMAKE_PREFIX_PATH "${_torch_cmake_prefix}")
get_filename_component(_torch_lib "${_torch_cmake_prefix}/../../lib" ABSOLUTE)
# TorchConfig's find_library calls search the system before their PATHS hint, so a Debian libtorch-dev in
# /usr/lib would win over the wheel's: name the wheel's libraries outright.
set(TORCH_LIBRARY "${_torch_lib}/libtorch.so" CACHE FILEPATH "" FORCE)
set(c10_LIBRARY "${_torch_lib}/libc10.so" CACHE FILEPATH "" FORCE)
if(BPBENCH_TORCH_CUDA)
  set(C10_CUDA_LIBRARY "${_torch_lib}/libc10_cuda.so" CACHE FILEPATH "" FORCE)
endif()

# ---- CUDA: on whenever the wheel is CUDA-enabled ------------------------------------------------------------
set(BPBENCH_WITH_CUDA AUTO CACHE STRING "CUDA paths (AUTO: on when LibTorch is CUDA-enabled; OFF forces CPU-only)")
if(BPBENCH_WITH_CUDA STREQUAL "AUTO")
  if(BPBENCH_TORCH_CUDA)
    set(BPBENCH_WITH_CUDA ON)
  else()
    set(BPBENCH_WITH_CUDA OFF)
  endif()
endif()
if(BPBENCH_WITH_CUDA AND NOT BPBENCH_TORCH_CUDA)
  message(FATAL_ERROR "bpbench: BPBENCH_WITH_CUDA=ON but torch ${BPBENCH_TORCH_VERSION} is a CPU-only build")
endif()

if(BPBENCH_WITH_CUDA)
  # The toolkit must be the wheel's CUDA major version: /usr/local/cuda (or CUDAToolkit_ROOT). TorchConfig's
  # cuda.cmake needs nvcc and the toolkit's libraries, so a mismatch stops here, saying what to point at.
  string(REGEX MATCH "^[0-9]+" _wheel_cuda_major "${BPBENCH_TORCH_CUDA}")
  # The python's nvidia-* wheels (site-packages/nvidia/cuXX: cuda-toolkit, nvidia-cuda-cupti, nvidia-nvtx...)
  # stand in for what a toolkit lacks: nvcc itself where no toolkit is installed, CUPTI and the NVTX3 headers
  # where the toolkit has no extras (a GPU image with nvcc alone).
  set(_pip_cuda "${_site_packages}/nvidia/cu${_wheel_cuda_major}")
  if(NOT CUDAToolkit_ROOT AND NOT DEFINED ENV{CUDAToolkit_ROOT} AND NOT EXISTS "/usr/local/cuda/bin/nvcc"
     AND EXISTS "${_pip_cuda}/bin/nvcc")
    set(CUDAToolkit_ROOT "${_pip_cuda}")
  endif()
  find_package(CUDAToolkit QUIET)
  if(NOT CUDAToolkit_FOUND OR NOT CUDAToolkit_VERSION_MAJOR EQUAL _wheel_cuda_major)
    message(FATAL_ERROR "bpbench: torch ${BPBENCH_TORCH_VERSION} was built with CUDA ${BPBENCH_TORCH_CUDA}, but the "
                        "CUDA toolkit found is '${CUDAToolkit_VERSION}' (${CUDAToolkit_BIN_DIR}); set "
                        "CUDAToolkit_ROOT to a CUDA ${_wheel_cuda_major}.x toolkit, or configure with "
                        "-DBPBENCH_WITH_CUDA=OFF")
  endif()
  set(BPBENCH_CUDA_SOURCE "toolkit ${CUDAToolkit_VERSION} at ${CUDAToolkit_LIBRARY_DIR}")
endif()

find_package(Torch REQUIRED)
# The wheel's libtorch.so exports a statically linked copy of std::filesystem (pytorch/pytorch#133437) that
# crashes when called from outside (remove_all jumps to a null weak symbol). The dynamic linker binds to the
# first library in DT_NEEDED order that defines a symbol, so libstdc++ goes before LibTorch on every link line.
list(PREPEND TORCH_LIBRARIES stdc++)

# ---- fmt: the wheel's headers, header-only --------------------------------------------------------------------
# The wheel ships fmt's headers (v12) and exports no fmt symbols, and its include directory shadows any system
# fmt. Linking Debian's libfmt beside them would put two fmt versions in one binary, so fmt is header-only.
file(STRINGS "${_torch_lib}/../include/fmt/base.h" _fmt_version_line REGEX "^#define FMT_VERSION ")
string(REGEX MATCH "[0-9]+" _fmt_version "${_fmt_version_line}")
math(EXPR _fmt_major "${_fmt_version} / 10000")
math(EXPR _fmt_minor "(${_fmt_version} / 100) % 100")
math(EXPR _fmt_patch "${_fmt_version} % 100")
set(BPBENCH_FMT_VERSION "${_fmt_major}.${_fmt_minor}.${_fmt_patch}")
add_library(bpbench_fmt INTERFACE)
add_library(bpbench::fmt ALIAS bpbench_fmt)
target_include_directories(bpbench_fmt SYSTEM INTERFACE "${_torch_lib}/../include")
target_compile_definitions(bpbench_fmt INTERFACE FMT_HEADER_ONLY=1)

# ---- gloo headers for c10d's ProcessGroupGloo.hpp (the wheel ships none; Debian's libgloo-dev) -------------
find_path(BPBENCH_GLOO_INCLUDE gloo/algorithm.h PATH_SUFFIXES include REQUIRED)
add_library(bpbench_gloo_headers INTERFACE)
add_library(bpbench::gloo_headers ALIAS bpbench_gloo_headers)
if(NOT BPBENCH_GLOO_INCLUDE STREQUAL "/usr/include")  # a system directory must not be re-added with -isystem
  target_include_directories(bpbench_gloo_headers SYSTEM INTERFACE "${BPBENCH_GLOO_INCLUDE}")
endif()

# ---- the GPU libraries: CUPTI, NVTX3 (header-only), NCCL -------------------------------------------------------
add_library(bpbench_gpu INTERFACE)
add_library(bpbench::gpu ALIAS bpbench_gpu)
if(BPBENCH_WITH_CUDA)
  if(NOT TARGET CUDA::cupti)
    # The nvidia-cuda-cupti wheel's: its library is versioned only (libcupti.so.13), which an imported target
    # links by its full path.
    file(GLOB _pip_cupti_libs "${_pip_cuda}/lib/libcupti.so*")
    if(EXISTS "${_pip_cuda}/include/cupti.h" AND _pip_cupti_libs)
      list(SORT _pip_cupti_libs)
      list(GET _pip_cupti_libs 0 _pip_cupti_lib)
      add_library(CUDA::cupti SHARED IMPORTED)
      set_target_properties(CUDA::cupti PROPERTIES IMPORTED_LOCATION "${_pip_cupti_lib}"
                                                   INTERFACE_INCLUDE_DIRECTORIES "${_pip_cuda}/include")
      string(APPEND BPBENCH_CUDA_SOURCE "; CUPTI from ${_pip_cupti_lib}")
    else()
      message(FATAL_ERROR "bpbench: CUPTI not found in ${BPBENCH_CUDA_SOURCE} nor in ${_pip_cuda} (the "
                          "nvidia-cuda-cupti wheel); install the toolkit's CUPTI or that wheel")
    endif()
  endif()
  find_path(BPBENCH_NVTX3_INCLUDE nvtx3/nvToolsExt.h HINTS ${CUDAToolkit_INCLUDE_DIRS} "${_pip_cuda}/include"
            REQUIRED)
  # NCCL: the headers of the libnccl that torch loads (the nvidia-nccl wheel beside it), else the toolkit's.
  find_path(BPBENCH_NCCL_INCLUDE nccl.h HINTS "${_site_packages}/nvidia/nccl/include" ${CUDAToolkit_INCLUDE_DIRS}
            REQUIRED)
  file(STRINGS "${BPBENCH_NCCL_INCLUDE}/nccl.h" _nccl_lines REGEX "^#define NCCL_(MAJOR|MINOR|PATCH) ")
  string(REGEX REPLACE ".*NCCL_MAJOR ([0-9]+).*NCCL_MINOR ([0-9]+).*NCCL_PATCH ([0-9]+).*" "\\1.\\2.\\3"
         BPBENCH_NCCL_VERSION "${_nccl_lines}")
  target_include_directories(bpbench_gpu SYSTEM INTERFACE "${BPBENCH_NVTX3_INCLUDE}" "${BPBENCH_NCCL_INCLUDE}")
  target_link_libraries(bpbench_gpu INTERFACE CUDA::cudart CUDA::cupti)
  target_compile_definitions(
    bpbench_gpu INTERFACE BPBENCH_WITH_CUDA=1 BPBENCH_WITH_CUPTI=1 BPBENCH_WITH_NVTX=1 BPBENCH_WITH_NCCL=1
                          BPBENCH_BUILD_CUDA="${BPBENCH_TORCH_CUDA}" BPBENCH_BUILD_CUDA_SOURCE="${BPBENCH_CUDA_SOURCE}")
  message(STATUS "bpbench: LibTorch ${BPBENCH_TORCH_VERSION} (${_torch_lib}); CUDA ${BPBENCH_TORCH_CUDA} from "
                 "${BPBENCH_CUDA_SOURCE}; CUPTI, NVTX3, NCCL ${BPBENCH_NCCL_VERSION} on; fmt ${BPBENCH_FMT_VERSION} "
                 "header-only")
else()
  message(STATUS "bpbench: LibTorch ${BPBENCH_TORCH_VERSION} (${_torch_lib}), CPU-only; "
                 "fmt ${BPBENCH_FMT_VERSION} header-only")
endif()
