/*
 * kernels.cu — the device side of Loom: element-wise reduction of one chunk
 * for every datatype x operation, a flag wait, and the plan interpreter.
 *
 * The CUDA executor (cudaexec.c) walks a schedule on the host and, for each
 * step whose data is ready, launches one of these on a chunk of at most one
 * FIFO slot. They are compiled by nvcc into one fatbin (sm_80, sm_90 and
 * compute_90 PTX for newer GPUs), which the library embeds and loads with the
 * driver API at run time; so these names are extern "C" and every kernel
 * takes one struct (kernels.h). The arithmetic is the interpreter's
 * (loomDevReduceShare, src/device/interp.h), so the two device executors
 * compute alike; its host build is tested against reduce.c
 * (tests/unit/check_arith.c). nvcc runs with -fmad=false so that no multiply
 * is fused into an add.
 */
#include "interp.h"
#include "kernels.h"

/*
 * One kernel per datatype x operation, each calling the interpreter's
 * function of its own (dt, op) (i8Sum, ..., bf16Min; Avg is the sum's), so
 * that everything is inlined. The two calls give the output count as a
 * constant, which keeps the pointer arrays in registers. Device buffers are
 * aligned to their element (the CUDA executor's chunks start at whole
 * elements of them), which lets an element be loaded whole.
 */
#define LOOM_CAT_(a, b) a##b
#define LOOM_CAT(a, b) LOOM_CAT_(a, b)
#define LOOM_OPFN_sum Sum
#define LOOM_OPFN_prod Prod
#define LOOM_OPFN_max Max
#define LOOM_OPFN_min Min
#define LOOM_OPFN_avg Sum
#define LOOM_ALIGNED(p, T) (char *)__builtin_assume_aligned((p), sizeof(T))
#define LOOM_DEFINE_KERNEL(T, tname, OPE, oname)                                                   \
    extern "C" __global__ void __launch_bounds__(LOOM_KERNEL_THREADS)                              \
        loomReduce_##tname##_##oname(loomReduceArgs p)                                             \
    {                                                                                              \
        char *o[2] = {LOOM_ALIGNED(p.out0, T), LOOM_ALIGNED(p.out1, T)};                           \
        const char *a = LOOM_ALIGNED(p.a, T), *b = LOOM_ALIGNED(p.b, T);                           \
        int post = p.final && OPE == loomAvg;                                                      \
        uint64_t tid = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x;                            \
        uint64_t nthreads = (uint64_t)gridDim.x * blockDim.x;                                      \
        loomDevKernel_t f = LOOM_CAT(tname, LOOM_OPFN_##oname);                                    \
        if (p.out1 != NULL)                                                                        \
            loomDevReduceShare(f, sizeof(T), o, 2, a, b, p.count, post, p.nranks, tid, nthreads);  \
        else                                                                                       \
            loomDevReduceShare(f, sizeof(T), o, 1, a, b, p.count, post, p.nranks, tid, nthreads);  \
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
