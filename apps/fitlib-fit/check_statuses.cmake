# SPDX-License-Identifier: MIT
# fitlib-fit says what its statuses rest on: a fit whose covariance fails (an all-zero signal template)
# reports the EDM its stop tested, with the number in the status, and warns on stderr while its exit
# status stays that of the fit; observed-mode toys are pulled against the fit to the observed data
# (on zero data, not the default parameters: a mean pull of −56 before), and the results say so.
# Arguments: FIT (fitlib-fit), WRITE (fitlib_fit_check_tensors), OUT (a scratch directory).
file(REMOVE_RECURSE "${OUT}")
file(MAKE_DIRECTORY "${OUT}")
execute_process(COMMAND "${WRITE}" "${OUT}" RESULT_VARIABLE rc ERROR_VARIABLE err)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "fitlib_fit_check_tensors failed (${rc}): ${err}")
endif()

include("${CMAKE_CURRENT_LIST_DIR}/check_common.cmake")  # run, require

# 1. The signal template is all zero: the Hessian's POI row is zero, so the covariance fails. The fit still
#    converges (exit 0), by a test it names with its number, on stdout and in the progress on stderr; the EDM
#    written is the one that passed (not NaN); stderr warns about the covariance and names the parameter.
set(_converged "converged \\((EDM [-+.e0-9]+ below edm_tol 1e-12|no decrease resolvable in double precision: EDM [-+.e0-9]+ within)")
run(0 "" "${OUT}/zero_signal.hdf5" -t 0 --unblind --json -o "${OUT}/zero_signal_fit.hdf5")
require("${out}" "== data: ${_converged}" "stdout")
require("${err}" "stopped: ${_converged}" "stderr")
require("${err}" "warning: fit 'data': the covariance failed[^\n]*row is zero for 'signal'" "stderr")
if(out MATCHES "EDM nan")
  message(FATAL_ERROR "the data fit reports a NaN EDM:\n${out}")
endif()
file(READ "${OUT}/zero_signal_fit.json" json)
string(JSON _edm_type TYPE "${json}" fits 0 edm)
string(JSON _status GET "${json}" fits 0 status)
string(JSON _covariance GET "${json}" fits 0 covariance_status)
if(NOT _edm_type STREQUAL "NUMBER" OR NOT _covariance MATCHES "^failed" OR NOT _status MATCHES "^converged \\((EDM below|no decrease)")
  message(FATAL_ERROR "zero-signal data fit: edm is ${_edm_type}, status '${_status}', covariance '${_covariance}'")
endif()

# 2. Observed-mode toys on zero data: every toy's data are zero too, so each toy's fit lies near the fit to the
#    observed data; pulled against it their mean is near 0 (against the default point √μ = 1 it was −56).
run(0 "" "${OUT}/zero_data.hdf5" -q -t 20 --toysDataMode observed --json -o "${OUT}/zero_data_toys.hdf5")
require("${out}" "toys: 20 of 20 converged" "stdout")
require("${out}" "pulls [^\n]* against the fit to the observed data" "stdout")
file(READ "${OUT}/zero_data_toys.json" json)
string(JSON _reference GET "${json}" toys pull_reference)
string(JSON _name GET "${json}" toys parameters 0 name)
string(JSON _pull GET "${json}" toys parameters 0 pull mean)
string(JSON _pull_type TYPE "${json}" toys parameters 0 pull mean)
string(JSON _count GET "${json}" toys parameters 0 pull count)
if(NOT _reference STREQUAL "observed_fit" OR NOT _name STREQUAL "signal" OR _count LESS 10 OR NOT _pull_type STREQUAL "NUMBER" OR _pull LESS -1 OR _pull GREATER 1)
  message(FATAL_ERROR "observed-mode toys: pull_reference '${_reference}', ${_name}'s mean pull ${_pull} over ${_count} toys")
endif()
# Expected-mode toys keep their generating point as the reference.
run(0 "" "${OUT}/zero_data.hdf5" -q -t 3 --json -o "${OUT}/expected_toys.hdf5")
require("${out}" "pulls [^\n]* against the toys' generating parameters" "stdout")
file(READ "${OUT}/expected_toys.json" json)
string(JSON _reference GET "${json}" toys pull_reference)
if(NOT _reference STREQUAL "generating_point")
  message(FATAL_ERROR "expected-mode toys: pull_reference '${_reference}'")
endif()
message(STATUS "fitlib-fit status checks passed")
