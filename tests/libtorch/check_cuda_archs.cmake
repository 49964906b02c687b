# libtorch.cuda_archs: nvcc compiles our kernels for the architectures of BCD_CUDA_ARCHITECTURES
# (or of CMAKE_CUDA_ARCHITECTURES when the user gives it), whatever a CUDA LibTorch's CMake does.
# The LibTorch found here (TORCH_DIR) is wrapped in a scratch prefix that then does what torch
# 2.x's cmake/public/cuda.cmake does to the project that finds it: enable_language(CUDA),
# CMAKE_CUDA_ARCHITECTURES set to OFF, and TORCH_CUDA_ARCH_LIST's -gencode flags (sm_75 here) and
# torch's own nvcc options appended to CMAKE_CUDA_FLAGS. One scratch build directory is configured
# and reconfigured, and the nvcc command of kernels/adamw.cu (compile_commands.json) is checked
# each time. Nothing is compiled.
# -DSOURCE_DIR=... -DSCRATCH=... -DTORCH_DIR=<dir of TorchConfig.cmake> -DCUDA_COMPILER=<nvcc or "">
# [-DCXX_COMPILER=...] [-DC_COMPILER=...]
cmake_minimum_required(VERSION 3.19)

if(NOT CUDA_COMPILER)
  message(STATUS "skipped: no CUDA compiler (the project was configured without nvcc)")
  return()
endif()

file(REMOVE_RECURSE ${SCRATCH})
set(prefix ${SCRATCH}/libtorch)
include(${CMAKE_CURRENT_LIST_DIR}/scratch_prefix.cmake)
scratch_torch_prefix(${prefix}
  "# torch 2.x, cmake/public/cuda.cmake: the language, no CMake architectures, its own nvcc flags\n"
  "enable_language(CUDA)\n"
  "set(CMAKE_CUDA_ARCHITECTURES OFF)\n"
  "foreach(flag -DONNX_NAMESPACE=onnx_c2 -gencode arch=compute_75,code=sm_75 -gencode arch=compute_75,code=compute_75\n"
  "             -Xcudafe --diag_suppress=cc_clobber_ignored --expt-relaxed-constexpr --expt-extended-lambda)\n"
  "  string(APPEND CMAKE_CUDA_FLAGS \" \${flag}\")\n"
  "endforeach()\n")

set(build ${SCRATCH}/build)
set(first_time -G "Unix Makefiles" -DCMAKE_PREFIX_PATH=${prefix} -DBCD_CUDA=ON
               -DBCD_PCH=OFF -DBCD_TESTS=OFF -DCMAKE_EXPORT_COMPILE_COMMANDS=ON
               -DCMAKE_CUDA_COMPILER=${CUDA_COMPILER} ${scratch_compilers})

set(failures 0)
# Configures ${build} with the arguments after `expected` and checks adamw.cu's nvcc command: the
# architectures it names (compute_XX, sm_XX) must be exactly `expected`, the user's CMAKE_CUDA_FLAGS
# (-lineinfo) must be there and LibTorch's flags must not.
function(check_step what expected)
  execute_process(COMMAND ${CMAKE_COMMAND} -S ${SOURCE_DIR} -B ${build} ${ARGN}
                  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "${what}: configuring failed:\n${out}")
  endif()
  file(READ ${build}/compile_commands.json commands)
  string(JSON n LENGTH "${commands}")
  math(EXPR last "${n} - 1")
  set(command "")
  foreach(i RANGE ${last})
    string(JSON file GET "${commands}" ${i} file)
    if(file MATCHES "/kernels/adamw\\.cu$")
      string(JSON command GET "${commands}" ${i} command)
    endif()
  endforeach()
  if(NOT command)
    message(FATAL_ERROR "${what}: kernels/adamw.cu is not in compile_commands.json: were the CUDA kernels built?")
  endif()
  string(REGEX MATCHALL "(compute|sm|lto)_[0-9]+[af]?" named "${command}")
  list(TRANSFORM named REPLACE "^[a-z]+_" "")
  list(REMOVE_DUPLICATES named)
  list(SORT named)
  string(REGEX MATCHALL "(-gencode|--generate-code|-arch|--gpu-architecture)[= ][^ ]+" arch_flags "${command}")
  string(REPLACE ";" " " arch_flags "${arch_flags}")
  set(problems "")
  if(NOT named STREQUAL expected)
    list(APPEND problems "architectures ${named}, expected ${expected}")
  endif()
  if(NOT command MATCHES " -lineinfo ")
    list(APPEND problems "the user's CMAKE_CUDA_FLAGS (-lineinfo) are missing")
  endif()
  if(command MATCHES "expt-extended-lambda|ONNX_NAMESPACE")
    list(APPEND problems "LibTorch's nvcc flags reached our kernels")
  endif()
  if(problems)
    string(REPLACE ";" "; " problems "${problems}")
    message(SEND_ERROR "${what}: ${problems}\n  ${command}")
    math(EXPR failures "${failures} + 1")
    set(failures ${failures} PARENT_SCOPE)
  else()
    message(STATUS "${what}: ${arch_flags}")
  endif()
endfunction()

check_step("default" "80;89;90" ${first_time} -DCMAKE_CUDA_FLAGS=-lineinfo)
check_step("reconfigured" "80;89;90")
check_step("-DBCD_CUDA_ARCHITECTURES=89" "89" -DBCD_CUDA_ARCHITECTURES=89)
check_step("-DCMAKE_CUDA_ARCHITECTURES=86 (the user's, wins)" "86" -DCMAKE_CUDA_ARCHITECTURES=86)
check_step("reconfigured" "86")
check_step("-UCMAKE_CUDA_ARCHITECTURES" "89" -UCMAKE_CUDA_ARCHITECTURES)
# A build directory of an earlier CMakeLists.txt, which cached its own "80;89;90" there.
file(WRITE ${SCRATCH}/old_cache.cmake
  "set(CMAKE_CUDA_ARCHITECTURES \"80;89;90\" CACHE STRING \"bcdtrain: GPU architectures to build for\")\n")
check_step("an earlier version's cached default" "89" -C ${SCRATCH}/old_cache.cmake)
if(failures GREATER 0)
  message(FATAL_ERROR "${failures} configuration(s) compile the kernels for other architectures than asked")
endif()
file(REMOVE_RECURSE ${SCRATCH})
