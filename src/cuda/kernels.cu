/*
 * kernels.cu — the device side of Loom: element-wise reduction of one chunk
 * for every datatype x operation, and a flag wait.
 *
 * The CUDA executor (cudaexec.c) walks a schedule on the host and, for each
 * step whose data is ready, launches one of these on a chunk of at most one
 * FIFO slot. They are compiled by nvcc into one fatbin (sm_80, sm_90 and
 * compute_90 PTX for newer GPUs), which the library embeds and loads with the
 * driver API at run time; so these names are extern "C" and every kernel
 * takes one struct (kernels.h).
 *
 * Arithmetic is the one reduce.c defines, so that a result does not depend
 * on which side computed it: integers wrap (computed unsigned), max and min
 * use the C comparison, fp16 and bf16 use the native half instructions,
 * which round to nearest even exactly as reduce.c's widen-combine-round does,
 * and Avg sums and then divides the sum, rounded to the element type, by the
 * rank count (C division for integers, float division for halves). nvcc
 * runs with -fmad=false so that no multiply is fused into an add.
 *
 * Each thread handles 16-byte packs when every pointer is 16-byte aligned
 * (the usual case: slots and cudaMalloc'ed buffers are), elements one by one
 * otherwise and for the tail. A pack is loaded from both inputs before its
 * outputs are stored, so an output may be an input (in-place reductions).
 */
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <stdint.h>

#include "loom.h"
#include "kernels.h"

namespace {

template <typename T> struct Wrap {
    typedef T type;
};
template <> struct Wrap<int8_t> {
    typedef uint8_t type;
};
template <> struct Wrap<int32_t> {
    typedef uint32_t type;
};
template <> struct Wrap<int64_t> {
    typedef uint64_t type;
};

/* Integers and floats: C arithmetic, sums and products on the unsigned view. */
template <typename T, int Op> struct Combine {
    static __device__ __forceinline__ T apply(T x, T y)
    {
        typedef typename Wrap<T>::type U;
        if (Op == loomSum || Op == loomAvg)
            return (T)((U)x + (U)y);
        if (Op == loomProd)
            return (T)((U)x * (U)y);
        if (Op == loomMax)
            return x > y ? x : y;
        return x < y ? x : y;
    }
    /* x / n is the C division of reduce.c: integer for integers, in T for floats. */
    static __device__ __forceinline__ T post(T x, int n)
    {
        return Op == loomAvg ? (T)(x / n) : x;
    }
};

/*
 * fp16 and bf16: the native instructions (__hadd and friends are overloaded
 * for both); the division of Avg goes through float, rounded to nearest.
 */
static __device__ __forceinline__ float widen(__half x)
{
    return __half2float(x);
}
static __device__ __forceinline__ float widen(__nv_bfloat16 x)
{
    return __bfloat162float(x);
}
static __device__ __forceinline__ void narrow(float f, __half *x)
{
    *x = __float2half_rn(f);
}
static __device__ __forceinline__ void narrow(float f, __nv_bfloat16 *x)
{
    *x = __float2bfloat16_rn(f);
}

template <typename H, int Op> struct HalfCombine {
    static __device__ __forceinline__ H apply(H x, H y)
    {
        if (Op == loomSum || Op == loomAvg)
            return __hadd(x, y);
        if (Op == loomProd)
            return __hmul(x, y);
        if (Op == loomMax)
            return __hgt(x, y) ? x : y;
        return __hlt(x, y) ? x : y;
    }
    static __device__ __forceinline__ H post(H x, int n)
    {
        if (Op == loomAvg)
            narrow(widen(x) / (float)n, &x);
        return x;
    }
};
template <int Op> struct Combine<__half, Op> : HalfCombine<__half, Op> {
};
template <int Op> struct Combine<__nv_bfloat16, Op> : HalfCombine<__nv_bfloat16, Op> {
};

template <typename T, int Op>
__device__ __forceinline__ T element(const loomReduceArgs &p, size_t i)
{
    T x = static_cast<const T *>(p.a)[i];
    if (p.b != NULL)
        x = Combine<T, Op>::apply(x, static_cast<const T *>(p.b)[i]);
    if (p.final)
        x = Combine<T, Op>::post(x, p.nranks);
    return x;
}

template <typename T, int Op> __device__ void reduceChunk(const loomReduceArgs &p)
{
    const int per = (int)(sizeof(uint4) / sizeof(T));
    size_t tid = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    size_t stride = (size_t)gridDim.x * blockDim.x;
    size_t first = 0;
    uintptr_t all = (uintptr_t)p.out0 | (uintptr_t)p.out1 | (uintptr_t)p.a | (uintptr_t)p.b;
    if (all % sizeof(uint4) == 0) {
        size_t packs = p.count / per;
        for (size_t k = tid; k < packs; k += stride) {
            uint4 va = static_cast<const uint4 *>(p.a)[k], vb;
            T *x = reinterpret_cast<T *>(&va);
            if (p.b != NULL) {
                vb = static_cast<const uint4 *>(p.b)[k];
                const T *y = reinterpret_cast<const T *>(&vb);
                for (int j = 0; j < per; j++)
                    x[j] = Combine<T, Op>::apply(x[j], y[j]);
            }
            if (p.final)
                for (int j = 0; j < per; j++)
                    x[j] = Combine<T, Op>::post(x[j], p.nranks);
            static_cast<uint4 *>(p.out0)[k] = va;
            if (p.out1 != NULL)
                static_cast<uint4 *>(p.out1)[k] = va;
        }
        first = packs * per;
    }
    for (size_t i = first + tid; i < p.count; i += stride) {
        T x = element<T, Op>(p, i);
        static_cast<T *>(p.out0)[i] = x;
        if (p.out1 != NULL)
            static_cast<T *>(p.out1)[i] = x;
    }
}

} // namespace

#define LOOM_DEFINE_KERNEL(T, tname, OPE, oname)                                                   \
    extern "C" __global__ void __launch_bounds__(LOOM_KERNEL_THREADS)                              \
        loomReduce_##tname##_##oname(loomReduceArgs p)                                             \
    {                                                                                              \
        reduceChunk<T, OPE>(p);                                                                    \
    }
#define LOOM_KERNELS_OF_TYPE(E, tname, T) LOOM_KERNEL_OPS(LOOM_DEFINE_KERNEL, T, tname)

LOOM_KERNEL_TYPES(LOOM_KERNELS_OF_TYPE)

extern "C" __global__ void loomWaitFlag(loomWaitArgs p)
{
    while ((int32_t)(*p.flag - p.value) < 0)
        __nanosleep(2000);
}
