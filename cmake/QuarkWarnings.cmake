# Strict warnings for our own compiled targets only (never on the quark INTERFACE target).
set(QUARK_WARNING_FLAGS
  -Wall -Wextra -Wpedantic -Wshadow -Wconversion -Wsign-conversion -Wdouble-promotion
  -Wold-style-cast)
if(QUARK_WARNINGS_AS_ERRORS)
  list(APPEND QUARK_WARNING_FLAGS -Werror)
endif()
add_library(quark_warnings INTERFACE)
target_compile_options(quark_warnings INTERFACE ${QUARK_WARNING_FLAGS})
