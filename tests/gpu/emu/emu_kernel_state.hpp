// The built-in variables of the emulated kernel language, set by emu::launch() for the thread
// it runs (emu_core.hpp).
#pragma once

#include <vector_types.h>

extern thread_local uint3 threadIdx;
extern thread_local uint3 blockIdx;
extern thread_local dim3 blockDim;
extern thread_local dim3 gridDim;
