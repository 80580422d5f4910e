# cmake -P quark_check_bundle.cmake with EXE and FILTERS (doctest --source-file wildcards joined by
# ","): fails, naming them, when EXE has test cases defined outside the files FILTERS matches (a
# TEST_CASE in a header, say). quark_list_tests.cmake registers a bundled executable's cases file by
# file, so such a case would never run; quark_add_test_bundle runs this after each link.
execute_process(COMMAND ${EXE} --source-file-exclude=${FILTERS} --list-test-cases
                OUTPUT_VARIABLE listing RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "${EXE} --list-test-cases failed (${rc}):\n${listing}")
endif()
string(REPLACE "\n" ";" listing "${listing}")
set(stray "")
foreach(line IN LISTS listing)
  if(NOT (line STREQUAL "" OR line MATCHES "^===+$" OR line MATCHES "^\\[doctest\\] "))
    string(APPEND stray "\n  ${line}")
  endif()
endforeach()
if(NOT stray STREQUAL "")
  message(FATAL_ERROR "${EXE}: test cases outside the bundled files would never run "
                      "(define them in a *_test.cpp file):${stray}")
endif()
