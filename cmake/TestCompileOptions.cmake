# How the test suites' own code is compiled (towerjit_tests, towerjit_gpu_tests). Their time is
# the library's and the JIT's; their build is most of a build from scratch (130 of 360 files),
# so their flags are chosen for compile time (measured on tests/jit/test_fusion.cpp, one core):
# - a plain build: -O1, not the build type's -O3 (30.1 s -> 22.2 s);
# - a sanitized build: -O0 (the library keeps the build's -O1), and no UBSan in the tests' own
#   code, whose checks cost most of the compile (29.7 s -> 17.1 s with ASan alone); the library
#   stays under every sanitizer asked for, and ASan still checks the tests' memory accesses.
function(towerjit_test_compile_options target)
  if(NOT TOWERJIT_SANITIZE)
    target_compile_options(${target} PRIVATE -O1)
    return()
  endif()
  target_compile_options(${target} PRIVATE -O0)
  if(TOWERJIT_SANITIZE MATCHES "undefined")
    target_compile_options(${target} PRIVATE -fno-sanitize=undefined)
  endif()
endfunction()
