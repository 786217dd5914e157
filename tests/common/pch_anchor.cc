// The source of tpcomm_test_pch, the program that builds the tests' shared precompiled header
// (tests/CMakeLists.txt). It holds no tests; GoogleTest's main runs none.
