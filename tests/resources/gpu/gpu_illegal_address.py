"""GPU script case: a kernel writes through a null pointer -> CUDA illegal address (a crash)."""

import cupy

kernel = cupy.RawKernel(r"""extern "C" __global__ void poke(int* p) { p[threadIdx.x] = 1; }""", "poke")
kernel((1,), (32,), (cupy.uint64(0),))
cupy.cuda.runtime.deviceSynchronize()
print("VERDICT pass: not reached")
