/*
 * reduce.cuh — the arithmetic of Loom's reduction kernels, for the device
 * and, in the unit tests, the host.
 *
 * reduceRange<T, Op>(args, tid, stride) is the work of one GPU thread of a
 * reduction kernel (kernels.h): elements tid, tid + stride, ... (in 16-byte
 * packs when every pointer is 16-byte aligned, else one by one, and the tail
 * one by one). kernels.cu runs it with the thread's global index and the
 * grid's size; tests/unit/check_kernels.cu runs it on the CPU, thread after
 * thread, and compares every datatype x operation with reduce.c.
 *
 * Arithmetic is the one reduce.c defines, so that a result does not depend
 * on which side computed it: integers wrap (computed unsigned), max and min
 * use the C comparison, fp16 and bf16 use the half instructions (__hadd and
 * friends, native on the GPU), which round to nearest even exactly as
 * reduce.c's widen-combine-round does, and Avg sums and then divides the
 * sum, rounded to the element type, by the rank count (C division for
 * integers, float division for halves). A pack is loaded from both inputs
 * before its outputs are stored, so an output may be an input (in place).
 */
#ifndef LOOM_CUDA_REDUCE_CUH_
#define LOOM_CUDA_REDUCE_CUH_

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "kernels.h"
#include "loom.h"

#define LOOM_HD __host__ __device__ __forceinline__

namespace loomdev {

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
    static LOOM_HD T apply(T x, T y)
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
    static LOOM_HD T post(T x, int n)
    {
        return Op == loomAvg ? (T)(x / n) : x;
    }
};

/*
 * fp16 and bf16: the native instructions (__hadd and friends are overloaded
 * for both); the division of Avg goes through float, rounded to nearest.
 */
static LOOM_HD float widen(__half x)
{
    return __half2float(x);
}
static LOOM_HD float widen(__nv_bfloat16 x)
{
    return __bfloat162float(x);
}
static LOOM_HD void narrow(float f, __half *x)
{
    *x = __float2half_rn(f);
}
static LOOM_HD void narrow(float f, __nv_bfloat16 *x)
{
    *x = __float2bfloat16_rn(f);
}

template <typename H, int Op> struct HalfCombine {
    static LOOM_HD H apply(H x, H y)
    {
        if (Op == loomSum || Op == loomAvg)
            return __hadd(x, y);
        if (Op == loomProd)
            return __hmul(x, y);
        if (Op == loomMax)
            return __hgt(x, y) ? x : y;
        return __hlt(x, y) ? x : y;
    }
    static LOOM_HD H post(H x, int n)
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

template <typename T, int Op> LOOM_HD T element(const loomReduceArgs &p, size_t i)
{
    T x = static_cast<const T *>(p.a)[i];
    if (p.b != NULL)
        x = Combine<T, Op>::apply(x, static_cast<const T *>(p.b)[i]);
    if (p.final)
        x = Combine<T, Op>::post(x, p.nranks);
    return x;
}

template <typename T, int Op>
LOOM_HD void reduceRange(const loomReduceArgs &p, size_t tid, size_t stride)
{
    const int per = (int)(sizeof(uint4) / sizeof(T));
    size_t first = 0;
    uintptr_t all = (uintptr_t)p.out0 | (uintptr_t)p.out1 | (uintptr_t)p.a | (uintptr_t)p.b;
    if (all % sizeof(uint4) == 0) {
        size_t packs = p.count / per;
        for (size_t k = tid; k < packs; k += stride) {
            /* One 16-byte load per input; memcpy to and from the element view keeps the
             * type punning defined (it compiles to register moves). */
            uint4 va = static_cast<const uint4 *>(p.a)[k], vb;
            T x[sizeof(uint4) / sizeof(T)], y[sizeof(uint4) / sizeof(T)];
            memcpy(x, &va, sizeof(va));
            if (p.b != NULL) {
                vb = static_cast<const uint4 *>(p.b)[k];
                memcpy(y, &vb, sizeof(vb));
                for (int j = 0; j < per; j++)
                    x[j] = Combine<T, Op>::apply(x[j], y[j]);
            }
            if (p.final)
                for (int j = 0; j < per; j++)
                    x[j] = Combine<T, Op>::post(x[j], p.nranks);
            memcpy(&va, x, sizeof(va));
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

} // namespace loomdev

#endif /* LOOM_CUDA_REDUCE_CUH_ */
