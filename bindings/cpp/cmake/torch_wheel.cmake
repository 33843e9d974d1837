# nenyax_torch: libtorch as the Python `torch` wheel ships it (headers under torch/include, shared
# libraries under torch/lib), for examples/tiny_lm.cpp.
#
# Not find_package(Torch): the PyPI wheel is built with CUDA, and its TorchConfig.cmake then
# requires a CUDA toolkit with nvcc at configure time (enable_language(CUDA)), even for a program
# that has no CUDA code and runs on the CPU. The wheel itself has everything a C++ program needs:
# its headers, its libraries (which find the CUDA runtime of the nvidia-* wheels through their
# own RPATH) and, for the --cuda path, the CUDA runtime headers of the nvidia wheels.
set(NENYAX_TORCH_PYTHON "python3" CACHE STRING "Python interpreter whose torch to build against")
execute_process(
  COMMAND "${NENYAX_TORCH_PYTHON}" -c
          "import os, sys, torch; d = os.path.dirname(torch.__file__); print(d); print(int(torch._C._GLIBCXX_USE_CXX11_ABI)); print(torch.__version__); print(os.path.dirname(d))"
  OUTPUT_VARIABLE _nenyax_torch_out
  RESULT_VARIABLE _nenyax_torch_rc
  OUTPUT_STRIP_TRAILING_WHITESPACE)
if(NOT _nenyax_torch_rc EQUAL 0)
  message(FATAL_ERROR "NENYAX_WITH_TORCH: `${NENYAX_TORCH_PYTHON} -c 'import torch'` failed; "
                      "set NENYAX_TORCH_PYTHON to an interpreter with torch (scripts/tiny_lm.sh "
                      "makes one)")
endif()
string(REPLACE "\n" ";" _nenyax_torch_out "${_nenyax_torch_out}")
list(GET _nenyax_torch_out 0 NENYAX_TORCH_DIR)
list(GET _nenyax_torch_out 1 _nenyax_torch_abi)
list(GET _nenyax_torch_out 2 NENYAX_TORCH_VERSION)
list(GET _nenyax_torch_out 3 _nenyax_site)

add_library(nenyax_torch INTERFACE)
# SYSTEM: libtorch's own headers do not build warning-free under -Wall -Wextra -Wpedantic
# -Werror; the flags stay on for the example's own code.
target_include_directories(nenyax_torch SYSTEM INTERFACE
                           "${NENYAX_TORCH_DIR}/include"
                           "${NENYAX_TORCH_DIR}/include/torch/csrc/api/include")
target_compile_definitions(nenyax_torch INTERFACE _GLIBCXX_USE_CXX11_ABI=${_nenyax_torch_abi})
set(_nenyax_torch_lib "${NENYAX_TORCH_DIR}/lib")
# --no-as-needed: libtorch.so pulls in libtorch_cuda.so, whose static initialisers register the
# CUDA backend; a program that names no CUDA symbol would otherwise drop it and see no GPU.
target_link_libraries(nenyax_torch INTERFACE
                      "-Wl,--no-as-needed" "${_nenyax_torch_lib}/libtorch.so" "-Wl,--as-needed"
                      "${_nenyax_torch_lib}/libtorch_cpu.so" "${_nenyax_torch_lib}/libc10.so")
set_property(TARGET nenyax_torch APPEND PROPERTY INTERFACE_LINK_OPTIONS
             "LINKER:-rpath,${_nenyax_torch_lib}")

# The --cuda path needs c10's CUDA stream API, and so the CUDA runtime headers with their crt/
# (its own wheel, nvidia-cuda-crt): those of the nvidia wheels beside torch, or of a CUDA toolkit.
set(NENYAX_CUDA_RUNTIME_INCLUDE "")
foreach(_dir IN ITEMS "${_nenyax_site}/nvidia/cu13/include" "${_nenyax_site}/nvidia/cuda_runtime/include"
                      "$ENV{CUDA_HOME}/include" /usr/local/cuda/include)
  if(EXISTS "${_dir}/cuda_runtime_api.h" AND EXISTS "${_dir}/crt/host_defines.h")
    set(NENYAX_CUDA_RUNTIME_INCLUDE "${_dir}")
    break()
  endif()
endforeach()
if(EXISTS "${_nenyax_torch_lib}/libc10_cuda.so" AND NENYAX_CUDA_RUNTIME_INCLUDE
   AND EXISTS "${NENYAX_CUDA_RUNTIME_INCLUDE}/crt/host_defines.h")
  target_include_directories(nenyax_torch SYSTEM INTERFACE "${NENYAX_CUDA_RUNTIME_INCLUDE}")
  target_compile_definitions(nenyax_torch INTERFACE NENYAX_TINY_LM_CUDA=1)
  target_link_libraries(nenyax_torch INTERFACE "${_nenyax_torch_lib}/libc10_cuda.so")
  set(_nenyax_torch_cuda "with CUDA (runtime headers ${NENYAX_CUDA_RUNTIME_INCLUDE})")
else()
  set(_nenyax_torch_cuda "CPU only (no libc10_cuda.so, or no CUDA runtime headers with crt/)")
endif()
message(STATUS "nenyax: torch ${NENYAX_TORCH_VERSION} at ${NENYAX_TORCH_DIR}, ${_nenyax_torch_cuda}")
