# The CUDA path (docs/cuda.md): the grid emulator's sanitizer test, and the nvcc build gate.
#
# test_core_cuda_emu_asan: the emulator (src/core/cuda_emu) and its tests, plus the single-source
# kernels' emulator tests (tests/unit/ops/cuda), compiled with ASan and UBSan in one binary.
if(TITAN_TESTS)
  file(GLOB TITAN_EMU_SOURCES CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/src/core/cuda_emu/*.cpp)
  file(GLOB TITAN_EMU_TESTS CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/tests/unit/core/cuda_emu/*.cpp)
  set(TITAN_EMU_SAN -fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer)
  add_executable(test_core_cuda_emu_asan ${TITAN_EMU_SOURCES} ${TITAN_EMU_TESTS})
  target_include_directories(test_core_cuda_emu_asan PRIVATE ${CMAKE_SOURCE_DIR}/src ${CMAKE_SOURCE_DIR}/tests)
  target_compile_options(test_core_cuda_emu_asan PRIVATE ${TITAN_WARN} ${TITAN_EMU_SAN} -O1 -g)
  target_link_options(test_core_cuda_emu_asan PRIVATE ${TITAN_EMU_SAN})
  target_link_libraries(test_core_cuda_emu_asan PRIVATE GTest::gtest GTest::gtest_main Threads::Threads)
  add_test(NAME core_cuda_emu_asan COMMAND test_core_cuda_emu_asan)
  # ASan warns once that it cannot follow swapcontext fully; the emulator annotates every switch.
  set_tests_properties(core_cuda_emu_asan PROPERTIES ENVIRONMENT "ASAN_OPTIONS=detect_leaks=1")
endif()
