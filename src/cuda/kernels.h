/*
 * kernels.h — the contract between the CUDA executor (C, cudaexec.c) and the
 * kernels it launches (CUDA, kernels.cu).
 *
 * The library finds its kernels by name in a module it loads at run time
 * (the driver API, see cudalib.h), so the names and the one argument block
 * are spelled here once, for both compilers. There is one reduction kernel
 * per datatype x operation, named "loomReduce_<type>_<op>":
 *
 *   out0[i] = post(a[i] (op) b[i])      and, when out1 != NULL, out1[i] = out0[i]
 *   out0[i] = post(a[i])                when b == NULL (a copy that finishes an Avg)
 *
 * where post() divides by nranks when `final` is set and the operation is
 * loomAvg (Avg reduces as a sum), and is the identity otherwise. The
 * arithmetic is the interpreter's (src/device/interp.h), which agrees with
 * reduce.c's bit for bit, NaN payloads aside (tests/unit/check_arith.c).
 * Every pointer is aligned to its element. Plain copies do not need a
 * kernel (the executor uses cuMemcpyAsync).
 *
 * "loomInterpret" is the plan interpreter (LOOM_KERNEL_INTERPRET below).
 *
 * "loomWaitFlag" spins until (int32_t)(*flag - value) >= 0; it orders a
 * CUDA stream after host work when the device cannot wait on memory itself
 * (stream memory operations unsupported).
 */
#ifndef LOOM_CUDA_KERNELS_H_
#define LOOM_CUDA_KERNELS_H_

#include <stdint.h>

/* X(loom enum, short name, CUDA element type) for every datatype, in enum order. */
#define LOOM_KERNEL_TYPES(X)                                                                       \
    X(loomInt8, i8, int8_t)                                                                        \
    X(loomUint8, u8, uint8_t)                                                                      \
    X(loomInt32, i32, int32_t)                                                                     \
    X(loomUint32, u32, uint32_t)                                                                   \
    X(loomInt64, i64, int64_t)                                                                     \
    X(loomUint64, u64, uint64_t)                                                                   \
    X(loomFloat16, f16, __half)                                                                    \
    X(loomFloat32, f32, float)                                                                     \
    X(loomFloat64, f64, double)                                                                    \
    X(loomBfloat16, bf16, __nv_bfloat16)

/*
 * X(..., loom enum, short name) for every operation, in enum order; the
 * arguments given after X come first, so that the list can be expanded
 * inside an expansion of LOOM_KERNEL_TYPES (for the type at hand).
 */
#define LOOM_KERNEL_OPS(X, ...)                                                                    \
    X(__VA_ARGS__, loomSum, sum)                                                                   \
    X(__VA_ARGS__, loomProd, prod)                                                                 \
    X(__VA_ARGS__, loomMax, max)                                                                   \
    X(__VA_ARGS__, loomMin, min)                                                                   \
    X(__VA_ARGS__, loomAvg, avg)

#define LOOM_KERNEL_PREFIX "loomReduce_"
#define LOOM_KERNEL_WAIT "loomWaitFlag"
/*
 * The plan interpreter (src/device/interp.h): one launch runs a call or a
 * group, block b running blocks[b] (struct loomDevBlock) with all its
 * threads; its one argument is the address of that array (devexec.c).
 */
#define LOOM_KERNEL_INTERPRET "loomInterpret"

/* Threads per block of the reduction kernels. */
#define LOOM_KERNEL_THREADS 512

/* The one argument of a reduction kernel (passed by value). */
struct loomReduceArgs {
    void *out0;
    void *out1;     /* NULL: one output */
    const void *a;  /* the received chunk */
    const void *b;  /* the local chunk; NULL: out0 = post(a) */
    uint64_t count; /* elements */
    int32_t nranks; /* divisor of a final Avg */
    int32_t final;  /* 1: apply post() */
};

/* The argument of loomWaitFlag. */
struct loomWaitArgs {
    const volatile uint32_t *flag;
    uint32_t value;
};

#endif /* LOOM_CUDA_KERNELS_H_ */
