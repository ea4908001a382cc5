# SPDX-License-Identifier: MIT
# prebuilt_same_bits (tests/CMakeLists.txt): runs prebuilt_fits.cpp built header-only (HEADER_ONLY) and against
# fitlib::prebuilt (PREBUILT) on TENSORS, writing their outputs (every number in hexadecimal) to WORK_DIR; the two
# must be the same. PREBUILT_OBJECT, the prebuilt program's object file, must leave the fits to the library: NM
# lists it, and it must define no fitlib::fit<...> and use the library's.
cmake_minimum_required(VERSION 3.21)
foreach(_var HEADER_ONLY PREBUILT PREBUILT_OBJECT NM TENSORS WORK_DIR)
  if(NOT DEFINED ${_var})
    message(FATAL_ERROR "same_bits.cmake: pass -D${_var}=...")
  endif()
endforeach()

execute_process(COMMAND "${NM}" -C "${PREBUILT_OBJECT}" RESULT_VARIABLE _rc OUTPUT_VARIABLE _symbols ERROR_VARIABLE _err)
if(NOT _rc EQUAL 0)
  message(FATAL_ERROR "${NM} ${PREBUILT_OBJECT} failed: ${_err}")
endif()
if(_symbols MATCHES "\n[0-9a-f]+ [TtWw] fitlib::FitResult fitlib::fit<")
  message(FATAL_ERROR "the program built against fitlib::prebuilt instantiates fitlib::fit itself: the headers' extern "
                      "template declarations (include/fitlib/prebuilt.hpp) did not take effect")
endif()
if(NOT _symbols MATCHES " U fitlib::FitResult fitlib::fit<" OR NOT _symbols MATCHES " U fitlib::io::read_rabbit\\(")
  message(FATAL_ERROR "the program built against fitlib::prebuilt does not call the library's fit and read_rabbit")
endif()

file(MAKE_DIRECTORY "${WORK_DIR}")
foreach(_variant HEADER_ONLY PREBUILT)
  string(TOLOWER "${WORK_DIR}/${_variant}.txt" _file)
  execute_process(COMMAND "${${_variant}}" ${TENSORS} RESULT_VARIABLE _rc OUTPUT_FILE "${_file}" ERROR_VARIABLE _err)
  if(NOT _rc EQUAL 0)
    message(FATAL_ERROR "${${_variant}} failed (exit status ${_rc}):\n${_err}")
  endif()
  file(READ "${_file}" _out_${_variant})
endforeach()
if(NOT _out_HEADER_ONLY STREQUAL _out_PREBUILT)
  message(FATAL_ERROR "fitlib::prebuilt and the headers give different numbers: compare ${WORK_DIR}/header_only.txt "
                      "with ${WORK_DIR}/prebuilt.txt (e.g. diff them)")
endif()
string(REGEX MATCHALL "\n== " _fits "\n${_out_PREBUILT}")
list(LENGTH _fits _nfits)
if(NOT _nfits EQUAL 12)
  message(FATAL_ERROR "expected 12 fits (2 tensors × 2 policies × 3 subproblems), got ${_nfits}: see ${WORK_DIR}/prebuilt.txt")
endif()
message("same bits in ${_nfits} fits with their impacts and scans (${WORK_DIR}/prebuilt.txt)")
