# cmake -DTEST_BIN=... -DEXPECTED=... -P compare_lists.cmake
# Fails when the TEST(...) cases of test_nenyax differ from those registered in CMakeLists.txt.
execute_process(COMMAND "${TEST_BIN}" --list OUTPUT_VARIABLE actual RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "${TEST_BIN} --list failed (${rc})")
endif()
file(READ "${EXPECTED}" expected)
string(REPLACE "\n" ";" actual "${actual}")
string(REPLACE "\n" ";" expected "${expected}")
list(REMOVE_ITEM actual "")
list(REMOVE_ITEM expected "")
list(SORT actual)
list(SORT expected)
if(NOT actual STREQUAL expected)
  message(FATAL_ERROR "test cases and CMake registrations differ:\n  in the binary: ${actual}\n"
                      "  registered:    ${expected}")
endif()
message(STATUS "${TEST_BIN}: all test cases are registered")
