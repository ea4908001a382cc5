# SPDX-License-Identifier: MIT
# The helpers of fitlib-fit's check scripts (check_hostile.cmake, check_statuses.cmake), in one place so that
# they fail alike. The including script sets FIT (fitlib-fit) and OUT (the scratch directory runs start in).

# run(<expected rc> <regex that stdout+stderr must match, or ""> args...): runs fitlib-fit in OUT with args, fails
# unless it exits with <expected rc> and its output matches; sets out and err in the caller.
function(run expect regex)
  execute_process(COMMAND "${FIT}" ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err WORKING_DIRECTORY "${OUT}")
  if(NOT rc STREQUAL "${expect}")
    message(FATAL_ERROR "fitlib-fit ${ARGN}: exit ${rc}, expected ${expect}\n${out}\n${err}")
  endif()
  if(NOT regex STREQUAL "")
    require("${out}${err}" "${regex}" "fitlib-fit ${ARGN}: the output")
  endif()
  set(out "${out}" PARENT_SCOPE)
  set(err "${err}" PARENT_SCOPE)
endfunction()

# require(<text> <regex> <what>): fails, naming <what>, unless <text> matches <regex>.
function(require text regex what)
  if(NOT "${text}" MATCHES "${regex}")
    message(FATAL_ERROR "${what} does not match '${regex}':\n${text}")
  endif()
endfunction()
