# Builds a C consumer against the installed libmoegemm with the build's own C compiler, then
# runs it (run with cmake -P).
#
# MODE=pkgconfig: flags from `pkg-config --cflags --libs moegemm` (PKG_CONFIG_PATH pointing
#   at the install tree only); run with LD_LIBRARY_PATH. Also checks --modversion, and that
#   the .pc file still resolves after its tree is moved (${pcfiledir}-relative prefix).
# MODE=c99: -std=c99 -pedantic-errors -Wall -Wextra -Werror, -I/-L to the install tree only,
#   linked with an rpath.
# MODE=readme: SOURCE is README.md; its C quick-start example is compiled as in MODE=c99 (plus
#   the CUDA runtime it calls: -DCUDA_INCLUDE_DIRS, -DCUDA_LIBRARY_DIR) and run.
#
#   cmake -DMODE=.. -DSOURCE=main.c -DWORK_DIR=.. -DPREFIX=.. -DLIBDIR=lib -DINCLUDEDIR=include
#         -DPKGCONFIGDIR=lib/pkgconfig -DC_COMPILER=cc [-DPKG_CONFIG=pkg-config] -DVERSION=0.2.0
#         [-DEXPECT_RELOCATABLE=ON]
#         -P c_consumer.cmake
cmake_minimum_required(VERSION 3.16)

foreach(_var MODE SOURCE WORK_DIR PREFIX LIBDIR INCLUDEDIR C_COMPILER)
  if(NOT DEFINED ${_var} OR "${${_var}}" STREQUAL "")
    message(FATAL_ERROR "c_consumer.cmake: -D${_var}=... is required")
  endif()
endforeach()

function(_run)
  cmake_parse_arguments(_R "" "OUTPUT_VARIABLE" "COMMAND" ${ARGN})
  string(REPLACE ";" " " _cmd "${_R_COMMAND}")
  message("$ ${_cmd}")
  execute_process(COMMAND ${_R_COMMAND}
    RESULT_VARIABLE _rc OUTPUT_VARIABLE _out ERROR_VARIABLE _err)
  if(NOT "${_out}${_err}" STREQUAL "")
    message("${_out}${_err}")
  endif()
  if(NOT _rc EQUAL 0)
    message(FATAL_ERROR "FAIL: exited with ${_rc}")
  endif()
  if(_R_OUTPUT_VARIABLE)
    string(STRIP "${_out}" _out)
    set(${_R_OUTPUT_VARIABLE} "${_out}" PARENT_SCOPE)
  endif()
endfunction()

file(REMOVE_RECURSE "${WORK_DIR}")
file(MAKE_DIRECTORY "${WORK_DIR}")
set(_exe "${WORK_DIR}/consumer")
set(_libpath "${PREFIX}/${LIBDIR}")

if(MODE STREQUAL "pkgconfig")
  if(NOT PKG_CONFIG)
    set(PKG_CONFIG pkg-config)
  endif()
  # Only the scratch install tree: an installed libmoegemm elsewhere must not be picked up.
  set(_pc_env "${CMAKE_COMMAND}" -E env "PKG_CONFIG_PATH=${PREFIX}/${PKGCONFIGDIR}"
    "PKG_CONFIG_LIBDIR=${PREFIX}/${PKGCONFIGDIR}")
  _run(COMMAND ${_pc_env} "${PKG_CONFIG}" --modversion moegemm OUTPUT_VARIABLE _modversion)
  if(DEFINED VERSION AND NOT _modversion STREQUAL VERSION)
    message(FATAL_ERROR "FAIL: pkg-config --modversion moegemm says '${_modversion}', expected '${VERSION}'")
  endif()
  _run(COMMAND ${_pc_env} "${PKG_CONFIG}" --cflags moegemm OUTPUT_VARIABLE _cflags)
  _run(COMMAND ${_pc_env} "${PKG_CONFIG}" --libs moegemm OUTPUT_VARIABLE _libs)
  separate_arguments(_cflags UNIX_COMMAND "${_cflags}")
  separate_arguments(_libs UNIX_COMMAND "${_libs}")
  # The user gets the install tree's include directory, its library directory and -lmoegemm:
  # nothing of CUDA or fmt.
  foreach(_flag IN LISTS _cflags _libs)
    if(_flag MATCHES "^-[IL](.*)$")
      get_filename_component(_dir "${CMAKE_MATCH_1}" ABSOLUTE)
      if(NOT _dir STREQUAL "${PREFIX}/${INCLUDEDIR}" AND NOT _dir STREQUAL "${PREFIX}/${LIBDIR}")
        message(FATAL_ERROR "FAIL: pkg-config gives a directory outside the install tree: ${_flag}")
      endif()
    elseif(NOT _flag STREQUAL "-lmoegemm")
      message(FATAL_ERROR "FAIL: pkg-config gives an unexpected flag: ${_flag}")
    endif()
  endforeach()
  _run(COMMAND "${C_COMPILER}" ${_cflags} "${SOURCE}" -o "${_exe}" ${_libs})
  _run(COMMAND "${CMAKE_COMMAND}" -E env "LD_LIBRARY_PATH=${_libpath}" "${_exe}")

  # Relocatable: a copy of the .pc file in another tree points into that tree.
  set(_moved "${WORK_DIR}/moved-prefix")
  file(MAKE_DIRECTORY "${_moved}/${PKGCONFIGDIR}")
  file(COPY "${PREFIX}/${PKGCONFIGDIR}/moegemm.pc" DESTINATION "${_moved}/${PKGCONFIGDIR}")
  _run(COMMAND "${CMAKE_COMMAND}" -E env "PKG_CONFIG_PATH=${_moved}/${PKGCONFIGDIR}"
      "PKG_CONFIG_LIBDIR=${_moved}/${PKGCONFIGDIR}" "${PKG_CONFIG}" --variable=includedir moegemm
    OUTPUT_VARIABLE _moved_includedir)
  get_filename_component(_moved_includedir "${_moved_includedir}" ABSOLUTE)
  if(NOT _moved_includedir STREQUAL "${_moved}/${INCLUDEDIR}")
    if(EXPECT_RELOCATABLE)
      message(FATAL_ERROR "FAIL: moegemm.pc is not relocatable: after a move to ${_moved}, "
        "includedir is '${_moved_includedir}'")
    endif()
    message("NOTE: moegemm.pc is not relocatable (absolute install directories)")
  else()
    message("moegemm.pc is relocatable: includedir follows the file to ${_moved_includedir}")
  endif()
elseif(MODE STREQUAL "c99")
  _run(COMMAND "${C_COMPILER}" -std=c99 -pedantic-errors -Wall -Wextra -Werror
    "-I${PREFIX}/${INCLUDEDIR}" "${SOURCE}" -o "${_exe}"
    "-L${_libpath}" -lmoegemm "-Wl,-rpath,${_libpath}")
  _run(COMMAND "${_exe}")
elseif(MODE STREQUAL "readme")
  # SOURCE is README.md: its first ```c block after "## Quick start (C)" is the example.
  file(READ "${SOURCE}" _readme)
  string(FIND "${_readme}" "## Quick start (C)" _pos)
  if(_pos EQUAL -1)
    message(FATAL_ERROR "FAIL: no '## Quick start (C)' section in ${SOURCE}")
  endif()
  string(SUBSTRING "${_readme}" ${_pos} -1 _readme)
  string(FIND "${_readme}" "```c\n" _begin)
  if(_begin EQUAL -1)
    message(FATAL_ERROR "FAIL: no ```c block in the Quick start section of ${SOURCE}")
  endif()
  math(EXPR _begin "${_begin} + 5")
  string(SUBSTRING "${_readme}" ${_begin} -1 _readme)
  string(FIND "${_readme}" "```" _end)
  string(SUBSTRING "${_readme}" 0 ${_end} _example)
  file(WRITE "${WORK_DIR}/example.c" "${_example}")
  set(_cuda_includes "")
  foreach(_dir IN LISTS CUDA_INCLUDE_DIRS)
    list(APPEND _cuda_includes -isystem "${_dir}")
  endforeach()
  _run(COMMAND "${C_COMPILER}" -std=c99 -pedantic-errors -Wall -Wextra -Werror
    "-I${PREFIX}/${INCLUDEDIR}" ${_cuda_includes} "${WORK_DIR}/example.c" -o "${_exe}"
    "-L${_libpath}" -lmoegemm "-Wl,-rpath,${_libpath}" "-L${CUDA_LIBRARY_DIR}" -lcudart
    "-Wl,-rpath,${CUDA_LIBRARY_DIR}")
  # With a usable GPU it runs to the end; without one it must stop at plan creation with
  # NO_DEVICE (or ARCH_MISMATCH) and say so.
  execute_process(COMMAND "${_exe}" RESULT_VARIABLE _rc OUTPUT_VARIABLE _out ERROR_VARIABLE _err)
  message("${_out}${_err}")
  if(NOT _rc EQUAL 0 AND NOT "${_err}" MATCHES
      "^moegemm_plan_create\\(&problem, &plan\\): MOEGEMM_STATUS_(NO_DEVICE|ARCH_MISMATCH): ")
    message(FATAL_ERROR "FAIL: the README example exited with ${_rc}")
  endif()
else()
  message(FATAL_ERROR "c_consumer.cmake: unknown MODE '${MODE}'")
endif()
message("OK: ${MODE} consumer built and ran")
