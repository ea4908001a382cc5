# SPDX-License-Identifier: MIT
# fitlib-fit against the reliability probe's findings (../shared/reference/reliability-probe.md): exit
# codes, outputs checked before any fit, no input or result destroyed, valid JSON whatever the bytes in
# names and paths, a toy table instead of a block per toy. Arguments: FIT, TENSOR (the demo), BLOSC2
# (a Blosc2-compressed rabbit tensor), OUT (a scratch directory).
file(REMOVE_RECURSE "${OUT}")
file(MAKE_DIRECTORY "${OUT}")

# run(<expected rc> <regex that stdout+stderr must match, or "">  args...)
function(run expect regex)
  execute_process(COMMAND "${FIT}" ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err WORKING_DIRECTORY "${OUT}")
  if(NOT rc STREQUAL "${expect}")
    message(FATAL_ERROR "fitlib-fit ${ARGN}: exit ${rc}, expected ${expect}\n${out}\n${err}")
  endif()
  if(regex AND NOT "${out}${err}" MATCHES "${regex}")
    message(FATAL_ERROR "fitlib-fit ${ARGN}: output does not match '${regex}':\n${out}\n${err}")
  endif()
  set(out "${out}" PARENT_SCOPE)
  set(err "${err}" PARENT_SCOPE)
endfunction()

# U2: every malformed command line exits 2 (CLI11's own codes were 104–109), --help 0.
run(0 "Exit status" --help)
run(2 "--noSuchOption" "${TENSOR}" --noSuchOption)
run(2 "tensor is required" -q)
run(2 "minimizerMethod" "${TENSOR}" --minimizerMethod foo)
run(2 "toys" "${TENSOR}" -t abc)
# S3: seeds outside 0 … 2⁶⁴−1 are refused, not wrapped or saturated.
run(2 "--seed '-1' is not a whole number" "${TENSOR}" -t 1 --seed -1 -o "${OUT}/s.hdf5")
run(2 "--seed '18446744073709551616'" "${TENSOR}" -t 1 --seed 18446744073709551616 -o "${OUT}/s.hdf5")
run(0 "" "${TENSOR}" -q -t 1 --seed 18446744073709551615 -o "${OUT}/s.hdf5")

# U3: messages name the flag to pass, not the library's option field.
run(2 "pass --allowNegativePOI" "${TENSOR}" -q -t 0 --expectSignal signal -1 -o "${OUT}/neg.hdf5")
if("${out}${err}" MATCHES "LikelihoodOptions")
  message(FATAL_ERROR "a library field name reached the user:\n${err}")
endif()

# U6: --unblind takes exact names as --freezeParameters does; a pattern that is neither is refused before the fit.
run(2 "--unblind 'sig\\(1' is neither a parameter of the tensor nor a valid regular expression" "${TENSOR}" -q -t 0 --unblind "sig(1" -o "${OUT}/u.hdf5")

# D4: a missing directory is found before the fit; D2: the input is never the output; D3: nor the JSON.
run(2 "directory '.*no/such' does not exist" "${TENSOR}" -q -t 50 --doImpacts -o "${OUT}/no/such/r.hdf5")
file(COPY "${TENSOR}" DESTINATION "${OUT}")
get_filename_component(_name "${TENSOR}" NAME)
file(SHA256 "${OUT}/${_name}" _before)
run(2 "is the input" "${OUT}/${_name}" -q -t 0 --unblind -o "${OUT}/${_name}")
run(2 "is the input" "${OUT}/${_name}" -q -t 0 --unblind -o "${OUT}/./${_name}")
file(SHA256 "${OUT}/${_name}" _after)
if(NOT _before STREQUAL _after)
  message(FATAL_ERROR "the input tensor changed")
endif()
run(2 "would replace the HDF5 results" "${TENSOR}" -q -t 0 --unblind -o "${OUT}/r.json" --json)
# U5: bad scan options are refused before the toys are fitted.
run(2 "--scanPoints must be" "${TENSOR}" -q -t 300 --scan --scanPoints 0 -o "${OUT}/sp.hdf5")
if("${out}${err}" MATCHES "toys")
  message(FATAL_ERROR "--scanPoints 0 was refused only after the toys:\n${out}\n${err}")
endif()

# C1: a path with a byte that is not UTF-8 gives valid JSON (U+FFFD in place of the byte), and no crash.
string(ASCII 233 _latin1_e)
set(_odd "${OUT}/caf${_latin1_e}")
run(0 "" "${TENSOR}" -q -t 0 --unblind -o "${_odd}.hdf5" --json)
file(READ "${_odd}.json" json)
string(JSON _path GET "${json}" input path)
string(JSON _rows LENGTH "${json}" fits 0 covariance)
string(JSON _cols LENGTH "${json}" fits 0 covariance 0)
string(JSON _npar LENGTH "${json}" fits 0 parameters)
# The covariance is a list of rows, as docs/results-format.md shows.
if(NOT _rows EQUAL _npar OR NOT _cols EQUAL _npar)
  message(FATAL_ERROR "JSON covariance is ${_rows} × ${_cols}, expected rows of ${_npar}")
endif()

# D1/D5: an earlier result at -o survives a run that fails, and temporary files never stay behind.
run(0 "" "${TENSOR}" -q -t 0 --unblind -o "${OUT}/keep.hdf5")
file(SHA256 "${OUT}/keep.hdf5" _before)
run(2 "" "${TENSOR}" -q -t 0 --unblind --freezeParameters no_such_parameter -o "${OUT}/keep.hdf5")
file(SHA256 "${OUT}/keep.hdf5" _after)
if(NOT _before STREQUAL _after)
  message(FATAL_ERROR "a failed run changed the earlier results file")
endif()
file(GLOB _left "${OUT}/.*.tmp")
if(_left)
  message(FATAL_ERROR "temporary files left behind: ${_left}")
endif()

# Toys: one table on stdout, not a block per toy; no per-iteration lines for toys.
run(0 "toys: 30 of 30 converged" "${TENSOR}" -t 30 -o "${OUT}/toys.hdf5")
if(out MATCHES "== toy[0-9]" OR err MATCHES "fit 'toy")
  message(FATAL_ERROR "toys printed one by one:\n${out}\n${err}")
endif()

# The Blosc2 plugin is found without HDF5_PLUGIN_PATH (scripts/install-deps.sh puts it in .deps/).
if(EXISTS "${BLOSC2}")
  unset(ENV{HDF5_PLUGIN_PATH})
  run(0 "converged" "${BLOSC2}" -q -t 0 --unblind -o "${OUT}/blosc2.hdf5")
endif()
