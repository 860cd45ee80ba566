# Precompiled headers for the targets with many files: a build from scratch is mostly parsing the
# same standard headers again (on 2 cores, CI builds the project three times: plain, ASan, TSan).
# Measured on runtime/towers/strategies/sync_placed.cpp at -O3, one core: 10.7 s, 6.4 s with
# these standard headers precompiled (building the header once: 4.6 s). The list is the
# standard headers the project's files include most. Each target gets its own precompiled header,
# built with its own flags (CMake's target_precompile_headers); extra headers (Catch2 for the
# test suites) are given by the caller. Only headers whose inclusion changes no name lookup: a
# test file sees what it includes (towerjit.h, precompiled, made `report` ambiguous in one).
# TOWERJIT_PRECOMPILE_HEADERS=OFF builds without them (say, to check that every file includes
# what it uses).
option(TOWERJIT_PRECOMPILE_HEADERS "Precompile the standard headers of the larger targets" ON)

set(TOWERJIT_PRECOMPILED_STD_HEADERS
  <algorithm> <atomic> <chrono> <cmath> <cstdint> <cstdio> <cstdlib> <cstring> <filesystem>
  <fstream> <functional> <limits> <map> <memory> <mutex> <optional> <random> <set>
  <source_location> <sstream> <string> <string_view> <thread> <utility> <vector>)

function(towerjit_precompile_headers target)
  if(TOWERJIT_PRECOMPILE_HEADERS)
    target_precompile_headers(${target} PRIVATE ${TOWERJIT_PRECOMPILED_STD_HEADERS} ${ARGN})
  endif()
endfunction()
