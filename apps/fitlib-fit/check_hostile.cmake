# SPDX-License-Identifier: MIT
# fitlib-fit against the reliability probe's findings (../shared/reference/reliability-probe.md): exit
# codes, outputs checked before any fit, no input or result destroyed, valid JSON whatever the bytes in
# names and paths, a toy table instead of a block per toy. Arguments: FIT, TENSOR (the demo), BLOSC2
# (a Blosc2-compressed rabbit tensor), OUT (a scratch directory).
file(REMOVE_RECURSE "${OUT}")
file(MAKE_DIRECTORY "${OUT}")

include("${CMAKE_CURRENT_LIST_DIR}/check_common.cmake")  # run, require

# U2: every malformed command line exits 2 (CLI11's own codes were 104–109), --help 0.
run(0 "Exit status" --help)
run(2 "--noSuchOption" "${TENSOR}" --noSuchOption)
run(2 "tensor is required" -q)
run(2 "minimizerMethod" "${TENSOR}" --minimizerMethod foo)
run(2 "toys" "${TENSOR}" -t abc)
# S3: seeds outside 0 … 2⁶⁴−1 are refused, not wrapped or saturated.
run(2 "--seed '-1' is not a whole number" "${TENSOR}" -t 1 --seed -1 -o "${OUT}/s.hdf5")
run(2 "--seed '18446744073709551616'" "${TENSOR}" -t 1 --seed 18446744073709551616 -o "${OUT}/s.hdf5")
run(0 "" "${TENSOR}" -q -t 1 --seed 18446744073709551615 -o "${OUT}/s.hdf5" --json)
# The seed is recorded as a string (docs/results-format.md, "Options"): a JSON number above 2⁵³ reads back rounded.
file(READ "${OUT}/s.json" json)
string(JSON _seed_type TYPE "${json}" options seed)
string(JSON _seed GET "${json}" options seed)
if(NOT _seed_type STREQUAL "STRING" OR NOT _seed STREQUAL "18446744073709551615")
  message(FATAL_ERROR "options.seed is ${_seed_type} ${_seed}, expected the string \"18446744073709551615\"")
endif()
run(2 "--maxMetaMiB must be from 1" "${TENSOR}" -q -t 0 --maxMetaMiB 0 -o "${OUT}/m.hdf5")
run(2 "--maxCompressionRatio must be at least 1" "${TENSOR}" -q -t 0 --maxCompressionRatio 0.5 -o "${OUT}/m.hdf5")
# A one-byte change made hsignals declare 1.8e9 strings in 19 stored bytes: refused at once, naming the flag that raises the bound.
get_filename_component(_mutated "${CMAKE_CURRENT_LIST_DIR}/../../tests/data/rabbit/mutated/normal_seed16_hsignals_dataspace.hdf5" ABSOLUTE)
run(2 "--maxCompressionRatio" "${_mutated}" -q -t 0 -o "${OUT}/m.hdf5")
if("${err}" MATCHES "FileOptions")
  message(FATAL_ERROR "a library field name reached the user:\n${err}")
endif()

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
run(2 "--scan2D needs two different parameters" "${TENSOR}" -q -t 0 --scan2D signal signal -o "${OUT}/s2.hdf5")
run(2 "unknown parameter 'nosuch'" "${TENSOR}" -q -t 300 --scan2D signal nosuch -o "${OUT}/s2.hdf5")
if("${out}${err}" MATCHES "toys")
  message(FATAL_ERROR "an unknown --scan2D parameter was refused only after the toys:\n${out}\n${err}")
endif()
run(2 "--noHessian leaves no covariance" "${TENSOR}" -q -t 0 --noHessian --scan2D signal signal -o "${OUT}/s2.hdf5")
# A mapping is checked against the tensor's channels and axes before any fit (the toys would come first).
run(2 "-m is part of the histograms: add --saveHists" "${TENSOR}" -q -t 0 -m Project ch0 -o "${OUT}/mp.hdf5")
run(2 "-m Project: no channel 'ch9' in the tensor; its channels are 'ch0', 'ch1_masked'" "${TENSOR}" -q -t 300 --saveHists -m Project ch9 -o "${OUT}/mp.hdf5")
run(2 "-m Select: channel 'ch0' has no axis 'pt'; its axes are 'obs'" "${TENSOR}" -q -t 0 --saveHists -m Select ch0 pt:sum -o "${OUT}/mp.hdf5")
run(2 "-m Asymmetry: fitlib has the mappings Select, Project, Normalize and Ratio" "${TENSOR}" -q -t 300 --saveHists -m Asymmetry ch0 ch0 -o "${OUT}/mp.hdf5")
if("${out}${err}" MATCHES "toys")
  message(FATAL_ERROR "a bad mapping was refused only after the toys:\n${out}\n${err}")
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

# O1: an output that is not a regular file (a FIFO, a device such as /dev/null, at -o or behind a link) is
# refused before the fit with the reason (exit 2) and left as it was; a dangling link is written through, at
# its target (docs/results-format.md). The real /dev/null is tried only when not root: a regression would
# replace it. O3: a name of the file system's full length is written; one byte more is refused as too long.
function(require_type flag path what)
  execute_process(COMMAND test ${flag} "${path}" RESULT_VARIABLE _rc)
  if(NOT _rc EQUAL 0)
    message(FATAL_ERROR "${path} is no longer ${what}")
  endif()
endfunction()
execute_process(COMMAND mkfifo "${OUT}/fifo.hdf5" "${OUT}/pair.json" RESULT_VARIABLE _rc)
if(NOT _rc EQUAL 0)
  message(FATAL_ERROR "mkfifo failed in ${OUT}")
endif()
run(2 "-o/--output '[^']*fifo.hdf5' is a FIFO \\(named pipe\\), not a regular file" "${TENSOR}" -q -t 50 --doImpacts -o "${OUT}/fifo.hdf5")
if("${out}${err}" MATCHES "toys|converged")
  message(FATAL_ERROR "a FIFO at -o was refused only after the fit:\n${out}\n${err}")
endif()
require_type(-p "${OUT}/fifo.hdf5" "a FIFO")
file(CREATE_LINK "${OUT}/fifo.hdf5" "${OUT}/fifo_link.hdf5" SYMBOLIC)
run(2 "is a symbolic link to '[^']*fifo.hdf5', a FIFO" "${TENSOR}" -q -t 0 --unblind -o "${OUT}/fifo_link.hdf5")
require_type(-L "${OUT}/fifo_link.hdf5" "a symbolic link")
require_type(-p "${OUT}/fifo.hdf5" "a FIFO")
run(2 "the JSON summary \\(--json\\) '[^']*pair.json' is a FIFO" "${TENSOR}" -q -t 0 --unblind -o "${OUT}/pair.hdf5" --json)
require_type(-p "${OUT}/pair.json" "a FIFO")
if(EXISTS "${OUT}/pair.hdf5")
  message(FATAL_ERROR "the results were written beside a refused JSON path")
endif()
execute_process(COMMAND id -u OUTPUT_VARIABLE _uid OUTPUT_STRIP_TRAILING_WHITESPACE)
if(NOT _uid STREQUAL "0")
  run(2 "-o/--output '/dev/null' is a character device, not a regular file" "${TENSOR}" -q -t 0 --unblind -o /dev/null)
  require_type(-c /dev/null "a character device")
else()
  execute_process(COMMAND mknod "${OUT}/null.hdf5" c 1 3 RESULT_VARIABLE _rc ERROR_QUIET)
  if(_rc EQUAL 0)
    run(2 "-o/--output '[^']*null.hdf5' is a character device, not a regular file" "${TENSOR}" -q -t 0 --unblind -o "${OUT}/null.hdf5")
    require_type(-c "${OUT}/null.hdf5" "a character device")
  else()
    message(STATUS "root, but mknod is refused here: a device node at -o is not tried")
  endif()
endif()
file(MAKE_DIRECTORY "${OUT}/real")
file(CREATE_LINK "${OUT}/real/dangling.hdf5" "${OUT}/dangling.hdf5" SYMBOLIC)
run(0 "" "${TENSOR}" -q -t 0 --unblind -o "${OUT}/dangling.hdf5" --json)
require_type(-L "${OUT}/dangling.hdf5" "a symbolic link")
require_type(-f "${OUT}/real/dangling.hdf5" "written at the link's target")
require_type(-f "${OUT}/dangling.json" "written beside the link")
execute_process(COMMAND getconf NAME_MAX "${OUT}" OUTPUT_VARIABLE _name_max OUTPUT_STRIP_TRAILING_WHITESPACE)
if(_name_max MATCHES "^[0-9]+$" AND _name_max GREATER 20)
  math(EXPR _n "${_name_max} - 5")
  string(REPEAT "a" ${_n} _long)
  run(0 "" "${TENSOR}" -q -t 0 --unblind -o "${OUT}/${_long}.hdf5" --json)
  require_type(-f "${OUT}/${_long}.hdf5" "written (a name of ${_name_max} bytes)")
  require_type(-f "${OUT}/${_long}.json" "written (a name of ${_name_max} bytes)")
  run(2 "more than the ${_name_max} a name may have in .*ENAMETOOLONG" "${TENSOR}" -q -t 0 --unblind -o "${OUT}/${_long}b.hdf5")
  if("${out}${err}" MATCHES "writable directory")
    message(FATAL_ERROR "a name too long was reported as an unwritable directory:\n${err}")
  endif()
endif()
file(GLOB _left "${OUT}/.*.tmp" "${OUT}/real/.*.tmp")
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
  # A plugin directory that does not exist is skipped with a warning; the search goes on through the others.
  run(0 "warning: HDF5 plugin directory '[^']*/no/such/plugins' \\(from --hdf5PluginPath\\)" "${BLOSC2}" -q -t 0 --unblind
      --hdf5PluginPath "${OUT}/no/such/plugins" -o "${OUT}/blosc2_opt.hdf5")
  set(ENV{FITLIB_HDF5_PLUGIN_PATH} "${OUT}/no/such/env_plugins")
  run(0 "warning: HDF5 plugin directory '[^']*/no/such/env_plugins' \\(from FITLIB_HDF5_PLUGIN_PATH\\)" "${BLOSC2}" -q -t 0 --unblind
      -o "${OUT}/blosc2_env.hdf5")
  unset(ENV{FITLIB_HDF5_PLUGIN_PATH})
endif()

# rabbit's -o DIR --outname NAME: the results in DIR/NAME (DIR made when it ends in '/'); --outname with a file refused.
run(0 "" "${TENSOR}" -q -t 0 -o "${OUT}/rabbit_style/" --outname fit.hdf5 --json)
if(NOT EXISTS "${OUT}/rabbit_style/fit.hdf5" OR NOT EXISTS "${OUT}/rabbit_style/fit.json")
  message(FATAL_ERROR "-o DIR/ --outname fit.hdf5 did not write DIR/fit.hdf5 and DIR/fit.json")
endif()
run(0 "" "${TENSOR}" -q -t 0 -o "${OUT}/rabbit_style")
if(NOT EXISTS "${OUT}/rabbit_style/fitresults.hdf5")
  message(FATAL_ERROR "-o DIR (an existing directory) did not write DIR/fitresults.hdf5")
endif()
run(2 "--outname names the results file inside the directory" "${TENSOR}" -q -t 0 -o "${OUT}/x.hdf5" --outname y.hdf5)
