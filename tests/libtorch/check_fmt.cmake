# libtorch.fmt: our code compiles against the fmt it links (fmt::fmt), even when LibTorch's include
# directories hold another fmt, as a pip wheel's torch/include does (fmt 11 beside Debian's 9).
# The LibTorch found here (TORCH_DIR) is wrapped in a scratch prefix whose TORCH_INCLUDE_DIRS start
# with a directory of fake fmt headers that each stop the compiler, plus Gloo's headers (a wheel
# ships those there too, so find_path finds Gloo in that directory). The project is configured
# against that prefix in SCRATCH and
# - objects of io, model and runtime that include fmt are compiled, two of them with LibTorch
#   (process_group.cpp with Gloo's directory);
# - a second configuration (PCH, tests, CUDA when nvcc is found) is checked target by target: the
#   first directory of each compile line that holds fmt/format.h must not be the fake one.
# -DSOURCE_DIR=... -DSCRATCH=... -DTORCH_DIR=<dir of TorchConfig.cmake> -DFMT_HEADERS=<fmt's fmt/>
# [-DGLOO_INCLUDE_DIR=...] [-DCXX_COMPILER=...] [-DC_COMPILER=...]
cmake_minimum_required(VERSION 3.18)

file(REMOVE_RECURSE ${SCRATCH})
set(prefix ${SCRATCH}/libtorch)
set(fake ${prefix}/include)

# ---- Fake fmt: every header name of the real one, and fmt 11's base.h ----
file(GLOB names RELATIVE ${FMT_HEADERS} ${FMT_HEADERS}/*.h)
list(APPEND names base.h)
list(REMOVE_DUPLICATES names)
foreach(name ${names})
  file(WRITE ${fake}/fmt/${name} "#error \"compiled against the LibTorch prefix's bundled fmt\"\n")
endforeach()
if(GLOO_INCLUDE_DIR AND EXISTS ${GLOO_INCLUDE_DIR}/gloo)
  file(CREATE_LINK ${GLOO_INCLUDE_DIR}/gloo ${fake}/gloo SYMBOLIC)
endif()

# ---- The scratch LibTorch prefix: the real one, its include directories led by the fake ----
include(${CMAKE_CURRENT_LIST_DIR}/scratch_prefix.cmake)
scratch_torch_prefix(${prefix}
  "list(PREPEND TORCH_INCLUDE_DIRS \"${fake}\")\n"
  "set_property(TARGET torch PROPERTY INTERFACE_INCLUDE_DIRECTORIES \"\${TORCH_INCLUDE_DIRS}\")\n")

function(configure_scratch build_dir)
  execute_process(COMMAND ${CMAKE_COMMAND} -S ${SOURCE_DIR} -B ${build_dir} -G "Unix Makefiles"
                          -DCMAKE_PREFIX_PATH=${prefix} -DCMAKE_BUILD_TYPE=Debug -DCMAKE_CXX_FLAGS_DEBUG=-O0
                          ${scratch_compilers} ${ARGN}
                  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "configuring against ${prefix} failed:\n${out}")
  endif()
  file(STRINGS ${build_dir}/CMakeCache.txt torch_dir REGEX "^Torch_DIR:")
  if(NOT torch_dir STREQUAL "Torch_DIR:PATH=${prefix}/share/cmake/Torch")
    message(FATAL_ERROR "the scratch build did not take the scratch LibTorch (${torch_dir})")
  endif()
endfunction()

set(problems "")

# ---- 1. Objects that include fmt, compiled with their library's flags ----
# loader.cpp and process_group.cpp include LibTorch too; safetensors.cpp stands for model's flags
# at a fraction of the cost (without -g, a LibTorch translation unit takes half the time).
set(objects src/io/loader.cpp.o src/model/safetensors.cpp.o src/runtime/process_group.cpp.o)
configure_scratch(${SCRATCH}/build -DBCD_PCH=OFF -DBCD_TESTS=OFF -DBCD_CUDA=OFF)
foreach(object ${objects})
  string(TIMESTAMP start "%s")
  execute_process(COMMAND ${CMAKE_COMMAND} --build ${SCRATCH}/build --target ${object}
                  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
  string(TIMESTAMP stop "%s")
  math(EXPR seconds "${stop} - ${start}")
  if(NOT rc EQUAL 0)
    string(REGEX MATCH "[^\n]*bundled fmt[^\n]*" why "${out}")
    if(NOT why)
      message(FATAL_ERROR "${object} did not compile, and not for the fake fmt:\n${out}")
    endif()
    list(APPEND problems "${object}: compiled against the LibTorch prefix's fmt: ${why}")
    message(STATUS "${object}: compiled against the LibTorch prefix's fmt")
  else()
    message(STATUS "${object}: compiled against fmt::fmt's headers (${seconds} s)")
  endif()
endforeach()

# ---- 2. Every target's include directories, as the compiler searches them ----
configure_scratch(${SCRATCH}/build-all -DBCD_PCH=ON -DBCD_TESTS=ON -DBCD_CUDA=AUTO)
file(GLOB_RECURSE flag_files ${SCRATCH}/build-all/*/flags.make)
set(checked "")
foreach(flag_file ${flag_files})
  string(REGEX REPLACE ".*/CMakeFiles/([^/]+)\\.dir/flags\\.make$" "\\1" target "${flag_file}")
  file(STRINGS ${flag_file} lines REGEX "^[A-Z]+_INCLUDES = ")
  foreach(line ${lines})
    string(REGEX REPLACE "^([A-Z]+)_INCLUDES = (.*)$" "\\1" lang "${line}")
    string(REGEX REPLACE "^([A-Z]+)_INCLUDES = (.*)$" "\\2" flags "${line}")
    if(flags MATCHES "^--options-file (.+)$")  # nvcc's, relative to the target's build directory
      set(options_file ${CMAKE_MATCH_1})
      string(REGEX REPLACE "/CMakeFiles/[^/]+\\.dir/flags\\.make$" "" target_build_dir "${flag_file}")
      file(READ ${target_build_dir}/${options_file} flags)
    endif()
    separate_arguments(flags UNIX_COMMAND "${flags}")
    # gcc and nvcc search every -I directory, then every -isystem one, each in command-line order.
    set(quoted "")
    set(system "")
    set(next "")
    foreach(flag ${flags})
      if(next)
        list(APPEND ${next} ${flag})
        set(next "")
      elseif(flag STREQUAL "-isystem")
        set(next system)
      elseif(flag MATCHES "^-isystem=?(.+)$")
        list(APPEND system ${CMAKE_MATCH_1})
      elseif(flag MATCHES "^-I(.+)$")
        list(APPEND quoted ${CMAKE_MATCH_1})
      endif()
    endforeach()
    if(NOT "${fake}" IN_LIST system AND NOT "${fake}" IN_LIST quoted)
      continue()  # sees no LibTorch
    endif()
    list(APPEND checked "${target}(${lang})")
    foreach(dir ${quoted} ${system})
      if(EXISTS ${dir}/fmt/format.h)
        if(dir STREQUAL fake)
          list(APPEND problems "${target} (${lang}): <fmt/format.h> is the LibTorch prefix's, not fmt::fmt's")
        endif()
        break()
      endif()
    endforeach()
  endforeach()
endforeach()
list(LENGTH checked n)
if(n LESS 4)
  message(FATAL_ERROR "only ${n} targets see LibTorch's include directories (${checked}): the check saw too little")
endif()
string(REPLACE ";" ", " checked "${checked}")
message(STATUS "targets that see LibTorch: ${checked}")
if(problems)
  string(REPLACE ";" "\n" problems "${problems}")
  message(FATAL_ERROR "${problems}\n(the fmt include root must come before every directory of LibTorch's: "
                      "bcd_torch and bcd_fmt_first in CMakeLists.txt)")
endif()
message(STATUS "each finds fmt::fmt's headers first")
file(REMOVE_RECURSE ${SCRATCH})
