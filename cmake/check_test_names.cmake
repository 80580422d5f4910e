# ctest guard (tests/CMakeLists.txt): doctest_discover_tests stores the test-case names in CMake
# lists, so a name with a ';' is split into fragments that each select no test case and "pass"
# without running anything, and a name with unbalanced square brackets ("outside [0, C)") keeps
# the list from splitting at all: ctest then cannot even read the test file. Fails naming every
# such test case.
#   cmake -DEXES="a|b|..." -P check_test_names.cmake
string(REPLACE "|" ";" exes "${EXES}")
set(bad "")
foreach(exe IN LISTS exes)
  if(NOT EXISTS ${exe})
    continue()  # not built in this tree (partial builds): checked where it is built
  endif()
  execute_process(COMMAND ${exe} --list-test-cases --no-version=1 RESULT_VARIABLE rc
                  OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "${exe} --list-test-cases failed (${rc}): ${err}")
  endif()
  # Keep ';' and the brackets visible (and out of CMake's list syntax): turn the output into
  # lines first.
  string(REPLACE ";" "<SEMICOLON>" out "${out}")
  string(REPLACE "[" "<LB>" out "${out}")
  string(REPLACE "]" "<RB>" out "${out}")
  string(REPLACE "\n" ";" lines "${out}")
  foreach(line IN LISTS lines)
    string(REGEX MATCHALL "<LB>" opens "${line}")
    string(REGEX MATCHALL "<RB>" closes "${line}")
    list(LENGTH opens n_open)
    list(LENGTH closes n_close)
    if(line MATCHES "<SEMICOLON>" OR NOT n_open EQUAL n_close)
      string(REPLACE "<SEMICOLON>" ";" line "${line}")
      string(REPLACE "<LB>" "[" line "${line}")
      string(REPLACE "<RB>" "]" line "${line}")
      get_filename_component(n ${exe} NAME)
      string(APPEND bad "\n  ${n}: ${line}")
    endif()
  endforeach()
endforeach()
if(bad)
  message(FATAL_ERROR "test-case names with ';' or unbalanced [ ] (ctest would run none of them; "
                      "use ',' and balanced brackets):${bad}")
endif()
