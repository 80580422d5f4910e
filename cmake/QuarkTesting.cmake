# quark_add_test(<source> [NAME <name>] [LIBS ...] [LABELS ...]): one executable per test file
# (named <group>_<name>, <name> defaulting to the file name), linked with the shared doctest main;
# every TEST_CASE becomes its own ctest entry. NAME builds one source a second time (e.g. for
# another instruction set). A variable quark_test_cost_<target> (seconds) set by the caller
# becomes the COST of the target's tests, so ctest starts the long ones first.
include_guard(GLOBAL)
find_package(doctest REQUIRED)
include(doctest)

function(quark_add_test src)
  cmake_parse_arguments(arg "" "NAME" "LIBS;LABELS;ENV" ${ARGN})
  get_filename_component(name ${src} NAME_WE)
  if(arg_NAME)
    set(name ${arg_NAME})
  endif()
  get_filename_component(dir ${src} DIRECTORY)
  get_filename_component(group ${dir} NAME)
  set(tgt ${group}_${name})
  add_executable(${tgt} ${src})
  target_link_libraries(${tgt} PRIVATE quark_test_main quark::quark quark_warnings ${arg_LIBS})
  target_include_directories(${tgt} PRIVATE ${PROJECT_SOURCE_DIR}/tests)
  set(labels unit ${arg_LABELS})
  doctest_discover_tests(${tgt} TEST_PREFIX "${group}/${name}: " ADD_LABELS 0)
  set_property(GLOBAL APPEND PROPERTY QUARK_TEST_TARGETS ${tgt})  # test-names guard
  # List-valued properties do not survive doctest_discover_tests(PROPERTIES ...): set them from a
  # file that ctest includes after the discovered tests.
  set(props ${CMAKE_CURRENT_BINARY_DIR}/${tgt}_props.cmake)
  # COST: ctest starts the costliest tests first, so a long one does not run alone at the end
  # (a fresh build has no timings of its own). quark_test_cost_<target>, if the caller set it.
  set(cost 0)
  if(DEFINED quark_test_cost_${tgt})
    set(cost ${quark_test_cost_${tgt}})
  endif()
  file(GENERATE OUTPUT ${props} CONTENT
    "if(DEFINED ${tgt}_TESTS)\n  set_tests_properties(\${${tgt}_TESTS} PROPERTIES LABELS [==[${labels}]==] ENVIRONMENT [==[${arg_ENV}]==] COST ${cost})\nendif()\n")
  set_property(DIRECTORY APPEND PROPERTY TEST_INCLUDE_FILES ${props})
endfunction()
