/*
 * kernels.cu — the device side of Loom: element-wise reduction of one chunk
 * for every datatype x operation, a flag wait, and the plan interpreter.
 *
 * The CUDA executor (cudaexec.c) walks a schedule on the host and, for each
 * step whose data is ready, launches one of these on a chunk of at most one
 * FIFO slot. They are compiled by nvcc into one fatbin (sm_80, sm_90 and
 * compute_90 PTX for newer GPUs), which the library embeds and loads with the
 * driver API at run time; so these names are extern "C" and every kernel
 * takes one struct (kernels.h). The arithmetic lives in reduce.cuh, where
 * the unit tests run it on the CPU; nvcc runs with -fmad=false so that no
 * multiply is fused into an add.
 */
#include "interp.h"
#include "reduce.cuh"

#define LOOM_DEFINE_KERNEL(T, tname, OPE, oname)                                                   \
    extern "C" __global__ void __launch_bounds__(LOOM_KERNEL_THREADS)                              \
        loomReduce_##tname##_##oname(loomReduceArgs p)                                             \
    {                                                                                              \
        loomdev::reduceRange<T, OPE>(p, (size_t)blockIdx.x * blockDim.x + threadIdx.x,             \
                                     (size_t)gridDim.x * blockDim.x);                              \
    }
#define LOOM_KERNELS_OF_TYPE(E, tname, T) LOOM_KERNEL_OPS(LOOM_DEFINE_KERNEL, T, tname)

LOOM_KERNEL_TYPES(LOOM_KERNELS_OF_TYPE)

extern "C" __global__ void loomWaitFlag(loomWaitArgs p)
{
    while ((int32_t)(*p.flag - p.value) < 0)
        __nanosleep(2000);
}

/*
 * The plan interpreter (src/device/interp.h): block b runs blocks[b], one
 * channel's lanes, with all its threads; devexec.c launches it. The host
 * build of the same code is the kernel executor of host buffers (src/exec/kexec.c),
 * and fakecuda runs it for a launch, both in the CPU tests.
 */
extern "C" __global__ void __launch_bounds__(LOOM_KERNEL_THREADS)
    loomInterpret(struct loomDevBlock *blocks)
{
    struct loomPortThread t = {threadIdx.x, blockDim.x, NULL, 0};
    loomDevRun(&blocks[blockIdx.x], &t);
}
