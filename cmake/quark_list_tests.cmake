# cmake -P quark_list_tests.cmake with EXE, FILES (the bundled test files, relative to tests/,
# joined by "|"), OUT_DIR and WORKDIR: the ctest registration of a bundled test executable
# (quark_add_test_bundle, QuarkTesting.cmake, runs it after each link). For each file
# <dir>/<stem>.cpp it writes OUT_DIR/<dir>_<stem>_listed.cmake, a CTest script that adds one test
# per doctest test case defined in that file (doctest's --source-file filter), named
# "<dir>/<stem>:<case>" (as doctest_discover_tests names them) and run with the same filter, and sets <dir>_<stem>_TESTS to the names.
# It fails, naming them, when EXE has test cases outside these files (a TEST_CASE in a header,
# say), since no file's registration would run them.

# The test case names EXE lists with the doctest options in ARGN, into `out`.
function(list_cases out)
  execute_process(COMMAND ${EXE} ${ARGN} --list-test-cases OUTPUT_VARIABLE listing
                  RESULT_VARIABLE rc WORKING_DIRECTORY ${WORKDIR})
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "${EXE} --list-test-cases failed (${rc}):\n${listing}")
  endif()
  string(REPLACE "\n" ";" listing "${listing}")
  set(names "")
  foreach(line IN LISTS listing)
    if(NOT (line STREQUAL "" OR line MATCHES "^===+$" OR line MATCHES "^\\[doctest\\] "))
      list(APPEND names "${line}")
    endif()
  endforeach()
  set(${out} "${names}" PARENT_SCOPE)
endfunction()

string(REPLACE "|" ";" files "${FILES}")
set(filters "")
foreach(src IN LISTS files)
  get_filename_component(stem ${src} NAME_WE)
  get_filename_component(dir ${src} DIRECTORY)
  set(filter "*/tests/${src}")
  list(APPEND filters "${filter}")
  list_cases(cases "--source-file=${filter}")
  if(cases STREQUAL "")
    message(FATAL_ERROR "${EXE}: no test cases in a file matching ${filter}")
  endif()
  set(script "")
  set(names "")
  foreach(c IN LISTS cases)
    # doctest's --test-case takes a comma-separated list of wildcards: a comma in a name is escaped.
    string(REPLACE "," "\\," escaped "${c}")
    set(name "${dir}/${stem}:${c}")
    string(APPEND script "add_test([==[${name}]==] [==[${EXE}]==] [==[--test-case=${escaped}]==] "
                         "[==[--source-file=${filter}]==])\n"
                         "set_tests_properties([==[${name}]==] PROPERTIES WORKING_DIRECTORY "
                         "[==[${WORKDIR}]==])\n")
    list(APPEND names "${name}")
  endforeach()
  string(APPEND script "set(${dir}_${stem}_TESTS [==[${names}]==])\n")
  file(WRITE ${OUT_DIR}/${dir}_${stem}_listed.cmake "${script}")
endforeach()

list(JOIN filters "," filters)
list_cases(stray "--source-file-exclude=${filters}")
if(NOT stray STREQUAL "")
  list(JOIN stray "\n  " stray)
  message(FATAL_ERROR "${EXE}: test cases outside the bundled files would never run "
                      "(define them in a *_test.cpp file):\n  ${stray}")
endif()
