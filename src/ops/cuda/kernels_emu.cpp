// The single-source CUDA kernels (ops/cuda/*.cuh) compiled by the host compiler against the grid
// emulator (core/cuda_emu): the definitions of ops/cuda/launch.h in every build. kernels.cu
// compiles the same headers with nvcc (the TITAN_CUDA build gate, cmake/cuda.cmake).
#include "core/cuda_emu/cuda.h"
#include "ops/cuda/adamw.cuh"
#include "ops/cuda/embedding.cuh"
#include "ops/cuda/rmsnorm.cuh"
#include "ops/cuda/rope.cuh"
#include "ops/cuda/swiglu.cuh"
