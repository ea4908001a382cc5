# SPDX-License-Identifier: MIT
# Installs fitlib into a scratch prefix, then configures, builds and runs a find_package consumer.
cmake_minimum_required(VERSION 3.21)

foreach(_var FITLIB_BUILD_DIR FITLIB_CONSUMER_SOURCE_DIR FITLIB_WORK_DIR FITLIB_GENERATOR FITLIB_CXX_COMPILER)
  if(NOT DEFINED ${_var})
    message(FATAL_ERROR "run_install_test.cmake: pass -D${_var}=...")
  endif()
endforeach()
if(NOT FITLIB_BUILD_TYPE)
  set(FITLIB_BUILD_TYPE Release)
endif()

set(_prefix "${FITLIB_WORK_DIR}/prefix")
set(_consumer_build "${FITLIB_WORK_DIR}/consumer-build")
file(REMOVE_RECURSE "${FITLIB_WORK_DIR}")

execute_process(
  COMMAND "${CMAKE_COMMAND}" --install "${FITLIB_BUILD_DIR}" --prefix "${_prefix}" --config "${FITLIB_BUILD_TYPE}"
  COMMAND_ERROR_IS_FATAL ANY)

execute_process(
  COMMAND "${CMAKE_COMMAND}" -S "${FITLIB_CONSUMER_SOURCE_DIR}" -B "${_consumer_build}"
    -G "${FITLIB_GENERATOR}"
    "-DCMAKE_CXX_COMPILER=${FITLIB_CXX_COMPILER}"
    "-DCMAKE_BUILD_TYPE=${FITLIB_BUILD_TYPE}"
    "-DCMAKE_PREFIX_PATH=${_prefix}"
  COMMAND_ERROR_IS_FATAL ANY)

execute_process(
  COMMAND "${CMAKE_COMMAND}" --build "${_consumer_build}" --config "${FITLIB_BUILD_TYPE}"
  COMMAND_ERROR_IS_FATAL ANY)

find_program(_consumer fitlib_consumer
  PATHS "${_consumer_build}" "${_consumer_build}/${FITLIB_BUILD_TYPE}" NO_DEFAULT_PATH REQUIRED)
execute_process(COMMAND "${_consumer}" COMMAND_ERROR_IS_FATAL ANY)
