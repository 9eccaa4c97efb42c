# ctest names that are GoogleTest's own full names, for typed tests too (tests/CMakeLists.txt).
#
# gtest_discover_tests (CMake's GoogleTest module) names a typed test
# `Suite.Name<TYPE>`, where it expects gtest's list to say `Suite/0.  # TypeParam = T`. A typed
# suite with a name generator (`CachePolicyTest/Lru.`) does not match the pattern its script
# parses, and the whole list line lands in the name:
#   CachePolicyTest.Name<CachePolicyTest/Lru.  # TypeParam = proxy::(anonymous namespace)::Lru>
# 150-odd characters that ctest pads every line of its output to. This script runs in place of
# the module's discovery script (tests/CMakeLists.txt points _GOOGLETEST_DISCOVER_TESTS_SCRIPT at
# it): it runs that script unchanged, then renames every test whose name is not the gtest name
# its own --gtest_filter= runs (CachePolicyTest/Lru.Name), in the file that script wrote.
# Only the default discovery mode (POST_BUILD, a `cmake -P` after each link) comes through here.

# The module's script runs its discovery when included in script mode, with our -D variables.
include(${CMAKE_ROOT}/Modules/GoogleTestAddTests.cmake)

if(CMAKE_SCRIPT_MODE_FILE AND EXISTS "${CTEST_FILE}")
  file(READ "${CTEST_FILE}" script)
  set(renamed "${script}")
  # One add_test( per line: the name in a bracket argument ([=[...]=], more '=' when the name holds
  # "]=]"), then the program and its arguments, one of them --gtest_filter=FULL_NAME.
  string(REGEX MATCHALL "add_test\\(\\[=*\\[[^\n]*" adds "${script}")
  foreach(add IN LISTS adds)
    string(REGEX MATCH "^add_test\\(\\[(=*)\\[" open "${add}")
    set(eq "${CMAKE_MATCH_1}")
    string(LENGTH "${open}" start)
    string(FIND "${add}" "]${eq}]" end)
    math(EXPR length "${end} - ${start}")
    string(SUBSTRING "${add}" ${start} ${length} name)
    if(NOT add MATCHES "--gtest_filter=([A-Za-z0-9_/.]+)")
      continue()
    endif()
    set(full_name "${CMAKE_MATCH_1}")
    if(NOT name STREQUAL full_name)
      # The old name is unique (it holds gtest's whole list line): it appears in add_test,
      # set_tests_properties and the <target>_TESTS list, and nowhere else.
      string(REPLACE "${name}" "${full_name}" renamed "${renamed}")
    endif()
  endforeach()
  if(NOT renamed STREQUAL script)
    file(WRITE "${CTEST_FILE}" "${renamed}")
  endif()
endif()
