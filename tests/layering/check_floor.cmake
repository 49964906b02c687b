# layering.build.<FLOOR>: builds each probe of FLOOR (see CMakeLists.txt here) and checks that
# the build takes includes of the floors FLOOR uses and refuses all others.
# -DBUILD_DIR=... -DFLOOR=io -DPROBE_DIR=... -DPROBES="base:uses:error.h;model:not:block.h;..."
cmake_minimum_required(VERSION 3.18)
set(failures 0)
foreach(probe ${PROBES})
  string(REPLACE ":" ";" fields "${probe}")
  list(GET fields 0 other)
  list(GET fields 1 rule)
  list(GET fields 2 header)
  # Touched so that every run compiles it again, whatever an earlier run left behind.
  file(TOUCH ${PROBE_DIR}/${FLOOR}_includes_${other}.cpp)
  execute_process(COMMAND ${CMAKE_COMMAND} --build ${BUILD_DIR} --target layering_probe_${FLOOR}_${other}
                  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
  # gcc: "fatal error: io/x.h: No such file or directory"; clang: "fatal error: 'io/x.h' file not found"
  string(REGEX MATCH "${other}/${header}'?:? (No such file or directory|file not found)" refused "${out}")
  if(rule STREQUAL "uses")
    if(rc EQUAL 0)
      message(STATUS "${FLOOR} -> ${other}: allowed, builds")
    else()
      message(SEND_ERROR "${FLOOR}/ uses ${other}/ (cmake/floors.cmake), but #include \"${other}/${header}\" "
                         "did not build:\n${out}")
      math(EXPR failures "${failures} + 1")
    endif()
  else()
    if(NOT rc EQUAL 0 AND refused)
      message(STATUS "${FLOOR} -> ${other}: refused by the build (${refused})")
    elseif(rc EQUAL 0)
      message(SEND_ERROR "${FLOOR}/ must not include ${other}/, but #include \"${other}/${header}\" built: "
                         "the floors leak include paths (see bcd_floor_usage in CMakeLists.txt)")
      math(EXPR failures "${failures} + 1")
    else()
      message(SEND_ERROR "${FLOOR} -> ${other}: the probe failed, but not for want of ${other}/${header}:\n${out}")
      math(EXPR failures "${failures} + 1")
    endif()
  endif()
endforeach()
if(failures GREATER 0)
  message(FATAL_ERROR "${failures} layering probe(s) of ${FLOOR}/ went wrong")
endif()
