# `cmake --install build --prefix <prefix>` installs what a program needs to use towerjit:
#   lib/                      libtowerjit_{dsl,jit,runtime}.so, and the emulated GPU's
#                             libtowerjit_cuda_emulator.so and (with OpenMPI) libtowerjit_mpi.so
#                             beside them (found there at run time)
#   include/towerjit/         towerjit.h and the public headers it includes (below), laid out as
#                             in the repository (the headers include each other by those paths)
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
# The public API and nothing else: the headers include/towerjit.h includes, directly or not
# (`g++ -std=c++20 -MM -I. -Iinclude include/towerjit.h` lists them), and the opt-in ones
# below. The kernel IR, the emitters, the reference interpreter, the transports and the CUDA
# runtime stay in the repository; tests/package/outside_project.sh fails when an installed
# header is not in towerjit.h's closure or when one the closure needs is missing.
set(TOWERJIT_PUBLIC_HEADERS
  dsl/autodiff.h dsl/call_stack.h dsl/collectives.h dsl/devices.h dsl/dtype.h dsl/ema.h
  dsl/exception.h dsl/graph.h dsl/half_float.h dsl/initializer.h dsl/layers.h dsl/loss_scale.h dsl/node.h dsl/op.h dsl/ops.def
  dsl/ops.h dsl/optimizers.h dsl/phase.h dsl/schedules.h dsl/sequence.h dsl/shape.h dsl/state.h dsl/tensor.h
  dsl/precision.h dsl/towers.h dsl/variables.h jit/compile_options.h jit/cuda/dump_graph.h
  runtime/checkpoint/checkpoint.h runtime/checkpoint/directory_lock.h runtime/checkpoint/precision_change.h runtime/data/augment.h runtime/data/cast_feeds.h
  runtime/data/batch_pipeline.h runtime/data/fashion_mnist.h runtime/data/npy.h runtime/data/npz.h runtime/data/tensor_dataset.h
  runtime/dist/world_layout.h runtime/host_tensor.h runtime/interop/onnx_export.h runtime/interop/safetensors.h runtime/report/metrics.h
  runtime/report/progress.h runtime/report/smoothing.h runtime/report/svg_plot.h
  runtime/report/tensorboard.h runtime/towers/dump_programs.h runtime/towers/fit.h
  runtime/towers/histogram_hook.h runtime/towers/hooks.h runtime/towers/interrupts.h
  runtime/towers/predictor.h runtime/towers/tower_trainer.h)
# Public but not in towerjit.h: report::Trace (TowerTrainer::set_trace), whose inline spans need
# <chrono>, which would add 17,000 lines to every user's translation unit; the language-model
# evaluation (TokenEvalHook, evaluate_tokens), included by the programs that score tokens.
set(TOWERJIT_OPT_IN_HEADERS runtime/report/trace.h runtime/towers/token_eval_hook.h runtime/towers/token_evaluation.h
    dsl/call_site.h)
foreach(header ${TOWERJIT_PUBLIC_HEADERS} ${TOWERJIT_OPT_IN_HEADERS})
  get_filename_component(dir ${header} DIRECTORY)
  install(FILES ${PROJECT_SOURCE_DIR}/${header} DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/towerjit/${dir})
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
