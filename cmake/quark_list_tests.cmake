# cmake -P quark_list_tests.cmake with EXE, FILE_FILTER, PREFIX, LIST_VAR, OUT, WORKDIR: writes OUT,
# a CTest script that adds one test per doctest test case of EXE defined in a file matching
# FILE_FILTER (doctest's --source-file wildcard), named PREFIX + the case's name and run with the
# same filter, and sets LIST_VAR to the names. quark_add_test_bundle (QuarkTesting.cmake) runs it
# after each link of a bundled test executable, once per file in it.
execute_process(COMMAND ${EXE} --source-file=${FILE_FILTER} --list-test-cases
                OUTPUT_VARIABLE listing RESULT_VARIABLE rc WORKING_DIRECTORY ${WORKDIR})
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "${EXE} --list-test-cases failed (${rc}):\n${listing}")
endif()
string(REPLACE "\n" ";" listing "${listing}")
set(script "")
set(names "")
foreach(line IN LISTS listing)
  if(line STREQUAL "" OR line MATCHES "^===+$" OR line MATCHES "^\\[doctest\\] ")
    continue()
  endif()
  # doctest's --test-case takes a comma-separated list of wildcards: a comma in a name is escaped.
  string(REPLACE "," "\\," filter "${line}")
  string(APPEND script "add_test([==[${PREFIX}${line}]==] [==[${EXE}]==] [==[--test-case=${filter}]==] "
                       "[==[--source-file=${FILE_FILTER}]==])\n"
                       "set_tests_properties([==[${PREFIX}${line}]==] PROPERTIES WORKING_DIRECTORY "
                       "[==[${WORKDIR}]==])\n")
  list(APPEND names "${PREFIX}${line}")
endforeach()
if(names STREQUAL "")
  message(FATAL_ERROR "${EXE}: no test cases in a file matching ${FILE_FILTER}")
endif()
string(APPEND script "set(${LIST_VAR} [==[${names}]==])\n")
file(WRITE ${OUT} "${script}")
