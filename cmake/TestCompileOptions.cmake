# How the test suites' own code is compiled (towerjit_tests, towerjit_gpu_tests) in a sanitized
# build, whose time is the library's: -O0 (the library keeps the build's -O1), and no UBSan in
# the tests' own code, whose checks cost most of the compile (tests/jit/test_fusion.cpp: 29.7 s
# -> 17.1 s with ASan alone, one core); the library stays under every sanitizer asked for, and
# ASan still checks the tests' memory accesses. A plain build keeps the build type's flags: at
# -O1 the call-stack tests see other frames (what -O3 inlines), so they would test another build.
function(towerjit_test_compile_options target)
  if(NOT TOWERJIT_SANITIZE)
    return()
  endif()
  target_compile_options(${target} PRIVATE -O0)
  if(TOWERJIT_SANITIZE MATCHES "undefined")
    target_compile_options(${target} PRIVATE -fno-sanitize=undefined)
  endif()
endfunction()
