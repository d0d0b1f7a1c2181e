# The CUDA path (docs/cuda.md): the grid emulator's sanitizer test, and the nvcc build gate.
#
# test_core_cuda_emu_asan: the emulator (src/core/cuda_emu) and its tests, plus the single-source
# kernels at their pointer level (src/ops/cuda/kernels_emu.cpp, tests/unit/ops/cuda/test_kernels_raw.cpp), compiled with ASan and UBSan in one binary.
if(TITAN_TESTS)
  file(GLOB TITAN_EMU_SOURCES CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/src/core/cuda_emu/*.cpp)
  file(GLOB TITAN_EMU_TESTS CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/tests/unit/core/cuda_emu/*.cpp)
  set(TITAN_EMU_SAN -fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer)
  list(APPEND TITAN_EMU_SOURCES ${CMAKE_SOURCE_DIR}/src/ops/cuda/kernels_emu.cpp)
  list(APPEND TITAN_EMU_TESTS ${CMAKE_SOURCE_DIR}/tests/unit/ops/cuda/test_kernels_raw.cpp)
  add_executable(test_core_cuda_emu_asan ${TITAN_EMU_SOURCES} ${TITAN_EMU_TESTS})
  target_include_directories(test_core_cuda_emu_asan PRIVATE ${CMAKE_SOURCE_DIR}/src ${CMAKE_SOURCE_DIR}/tests)
  target_compile_options(test_core_cuda_emu_asan PRIVATE ${TITAN_WARN} ${TITAN_EMU_SAN} -O1 -g)
  target_link_options(test_core_cuda_emu_asan PRIVATE ${TITAN_EMU_SAN})
  target_link_libraries(test_core_cuda_emu_asan PRIVATE GTest::gtest GTest::gtest_main Threads::Threads)
  add_test(NAME core_cuda_emu_asan COMMAND test_core_cuda_emu_asan)
  # ASan warns once that it cannot follow swapcontext fully; the emulator annotates every switch.
  set_tests_properties(core_cuda_emu_asan PROPERTIES ENVIRONMENT "ASAN_OPTIONS=detect_leaks=1")
endif()

# The nvcc build gate. TITAN_CUDA=AUTO (default): on where nvcc is found, so that every machine
# with the toolkit (CI included) compiles every src/**/*.cu for sm_80 and sm_90 with warnings as
# errors; ON: nvcc is required; OFF: skipped. The objects are a compile check (this build runs
# the kernels under the emulator; a GPU build links them, docs/cuda.md). Each compile records
# `nvcc -Xptxas -v` (registers, stack, spills per kernel) in build/cuda/<file>.ptxas.txt, and the
# test cuda_register_spills fails when a hot kernel spills.
set(TITAN_CUDA AUTO CACHE STRING "Compile the CUDA kernels with nvcc: AUTO (where nvcc is found), ON, OFF")
set_property(CACHE TITAN_CUDA PROPERTY STRINGS AUTO ON OFF)
set(TITAN_CUDA_ARCHS 80 90 CACHE STRING "GPU architectures (sm_XX) the .cu files are compiled for")
# Kernels that must not spill registers (regex over mangled names).
set(TITAN_CUDA_HOT_KERNELS "rmsnorm|swiglu|adamw|attention|attn|gemm|epilogue|cross_entropy|ce_rows|gd_|conv1d|moe_|foreach_"
    CACHE STRING "Regex of the kernels cuda_register_spills checks")
if(NOT TITAN_CUDA MATCHES "^(AUTO|ON|OFF)$")
  message(FATAL_ERROR "TITAN_CUDA must be AUTO, ON or OFF, got '${TITAN_CUDA}'")
endif()
set(TITAN_NVCC_FOUND OFF)
if(NOT TITAN_CUDA STREQUAL "OFF")
  find_program(TITAN_NVCC nvcc HINTS $ENV{CUDA_HOME}/bin /usr/local/cuda/bin)
  if(TITAN_NVCC)
    set(TITAN_NVCC_FOUND ON)
  elseif(TITAN_CUDA STREQUAL "ON")
    message(FATAL_ERROR "TITAN_CUDA=ON but nvcc was not found (set CUDA_HOME or put nvcc on PATH)")
  endif()
endif()
message(STATUS "TITAN_CUDA=${TITAN_CUDA}: nvcc ${TITAN_NVCC_FOUND} ${TITAN_NVCC}")
if(TITAN_NVCC_FOUND)
  file(GLOB_RECURSE TITAN_CU_SOURCES CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/src/*.cu)
  # The NCCL backend's Api over the real library (src/comm/nccl_runtime.cu) where the NCCL headers
  # are found (the toolkit's include folder, or NCCL_HOME); without them it is left out, and the
  # backend's host logic is still built and tested over the tests' fake (comm/nccl_api.h).
  get_filename_component(TITAN_NVCC_DIR ${TITAN_NVCC} DIRECTORY)
  find_path(TITAN_NCCL_INCLUDE nccl.h HINTS $ENV{NCCL_HOME}/include ${TITAN_NVCC_DIR}/../include /usr/local/cuda/include)
  if(TITAN_NCCL_INCLUDE)
    message(STATUS "NCCL headers: ${TITAN_NCCL_INCLUDE} (src/comm/nccl_runtime.cu compiled)")
  else()
    message(STATUS "NCCL headers not found: src/comm/nccl_runtime.cu left out")
    list(FILTER TITAN_CU_SOURCES EXCLUDE REGEX "/src/comm/nccl_runtime\\.cu$")
  endif()
  set(TITAN_NVCC_FLAGS -std=c++20 -O3 -Werror all-warnings -Xcompiler=-Wall,-Wextra,-Wno-unused-parameter,-fPIC
      -Xptxas -v -I${CMAKE_SOURCE_DIR}/src)
  if(TITAN_NCCL_INCLUDE)
    list(APPEND TITAN_NVCC_FLAGS -I${TITAN_NCCL_INCLUDE})
  endif()
  foreach(arch ${TITAN_CUDA_ARCHS})
    list(APPEND TITAN_NVCC_FLAGS -gencode arch=compute_${arch},code=sm_${arch})
  endforeach()
  # ccache in front of nvcc where the machine has it (nothing depends on it: a bare machine has none).
  find_program(TITAN_CCACHE_PROGRAM ccache)
  set(TITAN_NVCC_LAUNCHER "")
  if(TITAN_CCACHE_PROGRAM)
    set(TITAN_NVCC_LAUNCHER ${TITAN_CCACHE_PROGRAM})
  endif()
  set(TITAN_CU_OBJECTS "")
  set(TITAN_CU_LOGS "")
  foreach(cu ${TITAN_CU_SOURCES})
    file(RELATIVE_PATH rel ${CMAKE_SOURCE_DIR}/src ${cu})
    string(REPLACE "/" "_" flat ${rel})
    set(obj ${CMAKE_BINARY_DIR}/cuda/${flat}.o)
    set(log ${CMAKE_BINARY_DIR}/cuda/${flat}.ptxas.txt)
    add_custom_command(OUTPUT ${obj} ${log}
      COMMAND bash ${CMAKE_SOURCE_DIR}/tools/cuda/nvcc_ptxas.sh ${log} ${TITAN_NVCC_LAUNCHER} ${TITAN_NVCC} ${TITAN_NVCC_FLAGS}
              -MD -MF ${obj}.d -c ${cu} -o ${obj}
      DEPFILE ${obj}.d
      DEPENDS ${cu} ${CMAKE_SOURCE_DIR}/tools/cuda/nvcc_ptxas.sh
      COMMENT "nvcc ${rel} (sm ${TITAN_CUDA_ARCHS})"
      VERBATIM)
    list(APPEND TITAN_CU_OBJECTS ${obj})
    list(APPEND TITAN_CU_LOGS ${log})
  endforeach()
  file(MAKE_DIRECTORY ${CMAKE_BINARY_DIR}/cuda)
  add_custom_target(titan_cuda_kernels ALL DEPENDS ${TITAN_CU_OBJECTS} ${TITAN_CU_LOGS})
  if(TITAN_TESTS AND TITAN_CU_LOGS)
    add_test(NAME cuda_register_spills
             COMMAND bash ${CMAKE_SOURCE_DIR}/tools/cuda/ptxas_report.sh --hot ${TITAN_CUDA_HOT_KERNELS} ${TITAN_CU_LOGS})
  endif()
endif()

# TITAN_CUDA_RUNTIME=ON (a GPU machine, bench/cuda/device_check.sh): the "cuda" variants run the
# nvcc objects on the GPU (CUDA runtime, cuBLASLt) instead of the emulator: the objects join
# titan_ops, and TITAN_CUDA_RUNTIME=1 leaves out the emulator's definitions of the same calls
# (src/ops/cuda/kernels_emu.cpp, src/core/cuda_emu/gpu_memory.cpp). The emulator itself and its
# tests stay.
option(TITAN_CUDA_RUNTIME "Run the cuda kernel variants on a GPU instead of the grid emulator" OFF)
if(TITAN_CUDA_RUNTIME)
  if(NOT TITAN_NVCC_FOUND)
    message(FATAL_ERROR "TITAN_CUDA_RUNTIME=ON needs nvcc (TITAN_CUDA AUTO or ON, and the toolkit installed)")
  endif()
  find_package(CUDAToolkit REQUIRED)
  set_source_files_properties(${TITAN_CU_OBJECTS} PROPERTIES EXTERNAL_OBJECT TRUE GENERATED TRUE)
  target_sources(titan_ops PRIVATE ${TITAN_CU_OBJECTS})
  # Only the files that choose between the two (a define on every target would change every
  # object's command line, and the compiler cache would miss them all).
  set_source_files_properties(${CMAKE_SOURCE_DIR}/src/core/cuda_emu/gpu_memory.cpp
    ${CMAKE_SOURCE_DIR}/src/ops/cuda/kernels_emu.cpp ${CMAKE_SOURCE_DIR}/tests/unit/ops/cuda/test_cuda_kernels.cpp
    ${CMAKE_SOURCE_DIR}/tests/unit/ops/cuda/test_blas_gemm.cpp
    ${CMAKE_SOURCE_DIR}/tests/unit/distributed/test_data_parallel_gpu.cpp PROPERTIES COMPILE_DEFINITIONS TITAN_CUDA_RUNTIME=1)
  target_link_libraries(titan_ops PUBLIC CUDA::cudart CUDA::cublasLt)
  if(TITAN_NCCL_INCLUDE)
    find_library(TITAN_NCCL_LIBRARY nccl HINTS $ENV{NCCL_HOME}/lib ${TITAN_NCCL_INCLUDE}/../lib ${TITAN_NCCL_INCLUDE}/../lib64)
    if(NOT TITAN_NCCL_LIBRARY)
      message(FATAL_ERROR "TITAN_CUDA_RUNTIME=ON: nccl.h found in ${TITAN_NCCL_INCLUDE} but no libnccl (set NCCL_HOME)")
    endif()
    target_link_libraries(titan_ops PUBLIC ${TITAN_NCCL_LIBRARY})
    # distributed::make_nccl_comm offers NCCL only where cuda_nccl_api() is linked.
    set_source_files_properties(${CMAKE_SOURCE_DIR}/src/distributed/backends.cpp PROPERTIES
      COMPILE_DEFINITIONS TITAN_NCCL_RUNTIME=1)
  endif()
endif()
