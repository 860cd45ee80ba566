# TOWERJIT_BUILD_FUZZERS: the whole build (libraries included, so libFuzzer sees coverage in
# the readers and passes themselves, not only in the target) instrumented for libFuzzer, with
# AddressSanitizer and UndefinedBehaviorSanitizer. Needs clang (`make fuzz` uses clang-19, the
# one that matches the LLVM 19 the CPU JIT links); g++ has no libFuzzer.
if(NOT CMAKE_CXX_COMPILER_ID STREQUAL "Clang")
  message(FATAL_ERROR "TOWERJIT_BUILD_FUZZERS needs clang (libFuzzer), not ${CMAKE_CXX_COMPILER_ID}: "
                      "configure with -DCMAKE_CXX_COMPILER=clang++-19 -DCMAKE_C_COMPILER=clang-19, or run `make fuzz`")
endif()
# fuzzer-no-link: coverage counters everywhere; only the fuzz executables link libFuzzer's
# main (fuzz/CMakeLists.txt). -fno-sanitize-recover: a UBSan finding stops the run, so the
# fuzzer records it as a crash instead of printing and carrying on. No vptr check: libLLVM is
# built without RTTI, and the check would trip over its classes. No function check: before an
# indirect call it reads a type signature from the 8 bytes in front of the callee, which the
# JIT's kernels do not carry (a kernel at the start of a page makes that read fault).
add_compile_options(-fsanitize=fuzzer-no-link,address,undefined -fno-sanitize=vptr,function
                    -fno-sanitize-recover=all -fno-omit-frame-pointer)
add_link_options(-fsanitize=address,undefined)
