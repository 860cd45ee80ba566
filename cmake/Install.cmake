# `cmake --install build --prefix <prefix>` installs what a program needs to use towerjit:
#   lib/                      libtowerjit_{dsl,jit,runtime}.so, and the emulated GPU's
#                             libtowerjit_cuda_emulator.so and (with OpenMPI) libtowerjit_mpi.so
#                             beside them (found there at run time)
#   include/towerjit/         towerjit.h and the dsl/, jit/, runtime/ headers, laid out as in the
#                             repository (the headers include each other by those paths)
#   lib/cmake/towerjit/       the package: find_package(towerjit CONFIG) gives towerjit::towerjit
# The prefix may be moved: the libraries find each other and the emulator relative to themselves.
include(CMakePackageConfigHelpers)
set(TOWERJIT_CMAKE_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/towerjit)

set_target_properties(towerjit_dsl PROPERTIES EXPORT_NAME dsl)
set_target_properties(towerjit_jit PROPERTIES EXPORT_NAME jit)
set_target_properties(towerjit_runtime PROPERTIES EXPORT_NAME runtime)
install(TARGETS towerjit towerjit_dsl towerjit_jit towerjit_runtime EXPORT towerjitTargets
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR})
# Loaded with dlopen when TOWERJIT_CUDA=emulator, never linked: not part of the export.
install(TARGETS towerjit_cuda_emulator LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR})
# The MPI transport, where OpenMPI was found: loaded with dlopen under mpirun/srun, never linked.
if(TARGET towerjit_mpi)
  install(TARGETS towerjit_mpi LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR})
endif()

install(FILES ${PROJECT_SOURCE_DIR}/include/towerjit.h DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/towerjit)
# Every header of the three libraries (the kernels' CUDA sources under jit/cuda/device/ are
# compiled into libtowerjit_jit.so, so they stay out).
foreach(dir dsl jit runtime)
  install(DIRECTORY ${PROJECT_SOURCE_DIR}/${dir} DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/towerjit
          FILES_MATCHING PATTERN "*.h" PATTERN "*.def" PATTERN "device" EXCLUDE)
endforeach()

install(EXPORT towerjitTargets NAMESPACE towerjit:: DESTINATION ${TOWERJIT_CMAKE_DIR})
configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/towerjitConfig.cmake.in
                              ${PROJECT_BINARY_DIR}/towerjitConfig.cmake
                              INSTALL_DESTINATION ${TOWERJIT_CMAKE_DIR})
# 0.x: a minor version may change the API, so only the same major.minor matches.
write_basic_package_version_file(${PROJECT_BINARY_DIR}/towerjitConfigVersion.cmake
                                 COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/towerjitConfig.cmake ${PROJECT_BINARY_DIR}/towerjitConfigVersion.cmake
        DESTINATION ${TOWERJIT_CMAKE_DIR})
