# SPDX-License-Identifier: MIT
# The install tests (tests/CMakeLists.txt). FITLIB_STEP=install: installs fitlib into a scratch prefix (the fixture).
# FITLIB_STEP=consumer: configures, builds and runs a C++-only find_package(fitlib) project against that prefix, checks
# that the package enabled no C language and, with FITLIB_CHECK_MISSING_HDF5 (FITLIB_CHECK_MISSING_CUDA), that without
# HDF5 (the CUDA toolkit) find_package fails naming what to install rather than leaving an unresolved target for later.
cmake_minimum_required(VERSION 3.21)

if(NOT FITLIB_STEP MATCHES "^(install|consumer)$")
  message(FATAL_ERROR "run_install_test.cmake: pass -DFITLIB_STEP=install or -DFITLIB_STEP=consumer")
endif()
set(_required FITLIB_PREFIX)
if(FITLIB_STEP STREQUAL "install")
  list(APPEND _required FITLIB_BUILD_DIR)
else()
  list(APPEND _required FITLIB_CONSUMER_SOURCE_DIR FITLIB_WORK_DIR FITLIB_GENERATOR FITLIB_CXX_COMPILER)
endif()
foreach(_var IN LISTS _required)
  if(NOT DEFINED ${_var})
    message(FATAL_ERROR "run_install_test.cmake: pass -D${_var}=...")
  endif()
endforeach()
if(NOT FITLIB_BUILD_TYPE)
  set(FITLIB_BUILD_TYPE Release)
endif()
if(NOT FITLIB_CONSUMER_TARGET)
  set(FITLIB_CONSUMER_TARGET fitlib_consumer)
endif()

if(FITLIB_STEP STREQUAL "install")
  file(REMOVE_RECURSE "${FITLIB_PREFIX}")
  execute_process(
    COMMAND "${CMAKE_COMMAND}" --install "${FITLIB_BUILD_DIR}" --prefix "${FITLIB_PREFIX}" --config "${FITLIB_BUILD_TYPE}"
    COMMAND_ERROR_IS_FATAL ANY)
  return()
endif()

if(NOT IS_DIRECTORY "${FITLIB_PREFIX}")
  message(FATAL_ERROR "no fitlib installed in ${FITLIB_PREFIX}: run the install_prefix test first (ctest does, as its fixture)")
endif()
set(_build "${FITLIB_WORK_DIR}/build")
file(REMOVE_RECURSE "${FITLIB_WORK_DIR}")

# Configures the consumer into `dir` with the extra arguments; `out` gets the exit status and the output, whitespace
# runs folded to one space (CMake wraps its error messages).
function(configure_consumer dir rc out)
  execute_process(
    COMMAND "${CMAKE_COMMAND}" -S "${FITLIB_CONSUMER_SOURCE_DIR}" -B "${dir}"
      -G "${FITLIB_GENERATOR}"
      "-DCMAKE_CXX_COMPILER=${FITLIB_CXX_COMPILER}"
      "-DCMAKE_BUILD_TYPE=${FITLIB_BUILD_TYPE}"
      "-DCMAKE_PREFIX_PATH=${FITLIB_PREFIX}"
      ${ARGN}
    RESULT_VARIABLE _rc OUTPUT_VARIABLE _out ERROR_VARIABLE _out)
  message("${_out}")
  string(REGEX REPLACE "[ \t\r\n]+" " " _out "${_out}")
  set(${rc} "${_rc}" PARENT_SCOPE)
  set(${out} "${_out}" PARENT_SCOPE)
endfunction()

configure_consumer("${_build}" _rc _out)
if(NOT _rc EQUAL 0)
  message(FATAL_ERROR "configuring ${FITLIB_CONSUMER_SOURCE_DIR} against ${FITLIB_PREFIX} failed (exit status ${_rc})")
endif()
file(STRINGS "${_build}/CMakeCache.txt" _c_compiler REGEX "^CMAKE_C_COMPILER:")
if(_c_compiler)
  message(FATAL_ERROR "the consumer is a C++-only project, yet the C language was enabled while it found fitlib: ${_c_compiler}")
endif()

execute_process(
  COMMAND "${CMAKE_COMMAND}" --build "${_build}" --config "${FITLIB_BUILD_TYPE}"
  COMMAND_ERROR_IS_FATAL ANY)

find_program(_consumer "${FITLIB_CONSUMER_TARGET}"
  PATHS "${_build}" "${_build}/${FITLIB_BUILD_TYPE}" NO_DEFAULT_PATH NO_CACHE REQUIRED)
execute_process(COMMAND "${_consumer}" ${FITLIB_CONSUMER_ARGS} RESULT_VARIABLE _rc OUTPUT_VARIABLE _out ERROR_VARIABLE _out)
message("${_out}")
if(NOT _rc EQUAL 0)
  message(FATAL_ERROR "${_consumer} exited with status ${_rc}")
endif()
if(DEFINED FITLIB_CONSUMER_OUTPUT AND NOT _out MATCHES "${FITLIB_CONSUMER_OUTPUT}")
  message(FATAL_ERROR "the output of ${_consumer} does not match '${FITLIB_CONSUMER_OUTPUT}'")
endif()

# find_package(fitlib) must fail, naming what to install rather than leaving an unresolved target for later, when a
# dependency is hidden (`what`: its name in the messages; the rest: the configure arguments that hide it).
function(expect_refusal what dir regex)
  configure_consumer("${dir}" _rc _out ${ARGN})
  if(_rc EQUAL 0)
    message(FATAL_ERROR "with ${what} hidden, configuring ${FITLIB_CONSUMER_SOURCE_DIR} succeeded; find_package(fitlib) should have failed")
  endif()
  if(NOT _out MATCHES "${regex}")
    message(FATAL_ERROR "with ${what} hidden, find_package(fitlib) did not fail naming what to install")
  endif()
  if(_out MATCHES "target was not found")
    message(FATAL_ERROR "with ${what} hidden, the configure reached an unresolved target instead of stopping at find_package")
  endif()
  message(STATUS "with ${what} hidden, find_package(fitlib) fails and names what to install, as it should")
endfunction()

# Without HDF5 (neither its CMake package nor pkg-config to be found).
if(FITLIB_CHECK_MISSING_HDF5)
  expect_refusal("HDF5" "${FITLIB_WORK_DIR}/build-without-hdf5" "fitlib::(io|prebuilt) needs the HDF5 C library.*libhdf5-dev"
    -DCMAKE_DISABLE_FIND_PACKAGE_HDF5=ON -DCMAKE_DISABLE_FIND_PACKAGE_PkgConfig=ON)
endif()
# Without the CUDA toolkit, for a project that asks for COMPONENTS cuda.
if(FITLIB_CHECK_MISSING_CUDA)
  expect_refusal("the CUDA toolkit" "${FITLIB_WORK_DIR}/build-without-cuda" "fitlib::cuda needs the CUDA toolkit.*CUDAToolkit_ROOT"
    -DCMAKE_DISABLE_FIND_PACKAGE_CUDAToolkit=ON)
endif()
