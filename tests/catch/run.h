// Catch2's session, compiled once for both test programs (tests/, tests_gpu/): its single
// header's implementation takes about 80 s to compile, which each main paid before.
#pragma once

// Catch::Session().run(argc, argv).
int run_catch_session(int argc, char** argv);
