# cmake -DPROGRAM=... -DARGS="a;b" -DOUTPUT=file -P run_to_file.cmake
# Runs PROGRAM with ARGS and writes its stdout to OUTPUT; fails the build on a non-zero exit, so a
# broken generator never installs an empty file.
separate_arguments(_args UNIX_COMMAND "${ARGS}")
execute_process(COMMAND "${PROGRAM}" ${_args} OUTPUT_FILE "${OUTPUT}.tmp" RESULT_VARIABLE _rc)
if(NOT _rc EQUAL 0)
  file(REMOVE "${OUTPUT}.tmp")
  message(FATAL_ERROR "${PROGRAM} ${ARGS} failed (${_rc})")
endif()
file(RENAME "${OUTPUT}.tmp" "${OUTPUT}")
