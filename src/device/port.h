/*
 * port.h — the common subset of C and CUDA that Loom's device logic is
 * written in: the one place that differs between nvcc and the C compiler.
 *
 * The plan interpreter (interp.h) is written once against these names and
 * compiled twice: by nvcc into a kernel, where a block's threads run it, and
 * by the C compiler into the kernel executor of host buffers (src/exec/kexec.c),
 * where pthreads stand in for a block's threads. What the interpreter needs:
 *
 *   portLoadAcquire / portStoreRelease   64-bit FIFO counters shared with
 *                                        other processes (or the host)
 *   portLoad32Acquire                    the abort flag the watchdog raises
 *   portFence                            orders stores before a publication
 *   portBarrier                          all threads of a block meet
 *   portIdle                             a waiting thread backs off
 *   struct loomPack, portLoadPack,       16-byte pack loads and stores
 *   portStorePack
 *   portLoadLine, portStoreLine          one 8-byte access (the LL protocol's
 *                                        line: data and flag together)
 *   portHalfToFloat, portFloatToHalf,    fp16 and bf16 through float, round to
 *   portBf16ToFloat, portFloatToBf16     nearest even (reduce.c uses these too)
 *
 * On the device (__CUDA_ARCH__): volatile accesses with __threadfence_system
 * (counters may live in host or peer memory), __syncthreads, threadIdx and
 * blockDim, __nanosleep, the cuda_fp16/cuda_bf16 conversions. On the host:
 * GCC's __atomic builtins (what C11 atomics compile to, and what
 * ThreadSanitizer understands) on plain 64-bit words, a sense-reversing
 * barrier among the pthreads of a block, and the executor's own back-off
 * (kexecIdle, src/exec/kexec.c: spin, yield, sleep on the doorbell, and the
 * watchdog's checks). nvcc's host pass compiles the host side.
 */
#ifndef LOOM_DEVICE_PORT_H_
#define LOOM_DEVICE_PORT_H_

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "schedule.h" /* LOOM_HOSTDEV */

#if defined(__CUDACC__)
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#endif
#if !defined(__CUDA_ARCH__)
#include <sched.h>
#endif

/* A block's threads: this thread's index and their number; the host's barrier state. */
struct loomPortBarrier {
    uint32_t arrived; /* threads at the barrier now */
    uint32_t sense;   /* flips each time all have arrived */
};
struct loomPortThread {
    uint32_t tid, nthreads;
    struct loomPortBarrier *bar; /* host: shared by the block's threads; device: unused */
    uint32_t sense;              /* host: this thread's view of bar->sense */
};

/*
 * Bytes of a thread's contiguous piece when a block splits a step's
 * elements: threads take pieces t, t + T, t + 2T, ... A GPU thread takes
 * one pack at a time, so a warp's accesses coalesce; a CPU thread takes a
 * page, so no two threads write one cache line.
 */
#if defined(__CUDA_ARCH__)
#define LOOM_PORT_PIECE 16
#else
#define LOOM_PORT_PIECE 4096
#endif

/* ---- counters and fences ---- */

static inline LOOM_HOSTDEV uint64_t portLoadAcquire(const uint64_t *p)
{
#if defined(__CUDA_ARCH__)
    uint64_t v = *(const volatile uint64_t *)p;
    __threadfence_system();
    return v;
#else
    return __atomic_load_n(p, __ATOMIC_ACQUIRE);
#endif
}

static inline LOOM_HOSTDEV void portStoreRelease(uint64_t *p, uint64_t v)
{
#if defined(__CUDA_ARCH__)
    __threadfence_system();
    *(volatile uint64_t *)p = v;
#else
    __atomic_store_n(p, v, __ATOMIC_RELEASE);
#endif
}

static inline LOOM_HOSTDEV int32_t portLoad32Acquire(const int32_t *p)
{
#if defined(__CUDA_ARCH__)
    int32_t v = *(const volatile int32_t *)p;
    __threadfence_system();
    return v;
#else
    return __atomic_load_n(p, __ATOMIC_ACQUIRE);
#endif
}

static inline LOOM_HOSTDEV void portStore32Release(int32_t *p, int32_t v)
{
#if defined(__CUDA_ARCH__)
    __threadfence_system();
    *(volatile int32_t *)p = v;
#else
    __atomic_store_n(p, v, __ATOMIC_RELEASE);
#endif
}

/* Orders this thread's earlier stores before its later ones, for every observer. */
static inline LOOM_HOSTDEV void portFence(void)
{
#if defined(__CUDA_ARCH__)
    __threadfence_system();
#elif defined(__SANITIZE_THREAD__)
    /* ThreadSanitizer does not model a bare fence (GCC refuses one, -Wtsan): a seq_cst
     * read-modify-write of a word of its own orders the same on the CPU. */
    static int portFenceWord;
    __atomic_fetch_add(&portFenceWord, 0, __ATOMIC_SEQ_CST);
#else
    __atomic_thread_fence(__ATOMIC_SEQ_CST);
#endif
}

/*
 * One 8-byte access, never torn: the LL protocol's line (4 bytes of data,
 * 4 of flag). The load is acquire, so what the writer stored before the line
 * is visible once its flag is.
 */
static inline LOOM_HOSTDEV uint64_t portLoadLine(const uint64_t *p)
{
#if defined(__CUDA_ARCH__)
    return *(const volatile uint64_t *)p;
#else
    return __atomic_load_n(p, __ATOMIC_ACQUIRE);
#endif
}

static inline LOOM_HOSTDEV void portStoreLine(uint64_t *p, uint64_t v)
{
#if defined(__CUDA_ARCH__)
    *(volatile uint64_t *)p = v;
#else
    __atomic_store_n(p, v, __ATOMIC_RELEASE);
#endif
}

/* ---- waiting ---- */

#if !defined(__CUDA_ARCH__)
/*
 * The host executor's back-off for a thread that waited `spins` times
 * without progress (src/exec/kexec.c): spins, yields or sleeps on the doorbell,
 * and runs the watchdog's checks, which raise the block's abort flag on a
 * failure. `ctx` is the block's host context.
 */
void kexecIdle(void *ctx, uint32_t spins);
/* Tells the other end of a FIFO that a counter moved (rings its doorbell). */
void kexecNotify(void *bell);
#endif

/* Backs off after `spins` fruitless polls. */
static inline LOOM_HOSTDEV void portIdle(void *hostCtx, uint32_t spins)
{
#if defined(__CUDA_ARCH__)
    (void)hostCtx;
    __nanosleep(spins < 64 ? 32 : 1000);
#else
    kexecIdle(hostCtx, spins);
#endif
}

/* After a counter is published: the host wakes a sleeping peer; a GPU peer polls. */
static inline LOOM_HOSTDEV void portNotify(void *bell)
{
#if defined(__CUDA_ARCH__)
    (void)bell;
#else
    if (bell)
        kexecNotify(bell);
#endif
}

/* A thread of a barrier that waits; the host yields after a while (ranks may share cores). */
static inline LOOM_HOSTDEV void portRelax(uint32_t spins)
{
#if defined(__CUDA_ARCH__)
    (void)spins;
#elif defined(__x86_64__) || defined(__i386__)
    if (spins < 256)
        __builtin_ia32_pause();
    else
        sched_yield();
#else
    if (spins >= 256)
        sched_yield();
#endif
}

/* ---- a block's threads ---- */

static inline LOOM_HOSTDEV void portBarrier(struct loomPortThread *t)
{
#if defined(__CUDA_ARCH__)
    (void)t;
    __syncthreads();
#else
    if (t->nthreads <= 1)
        return;
    uint32_t sense = t->sense ^ 1;
    t->sense = sense;
    if (__atomic_add_fetch(&t->bar->arrived, 1, __ATOMIC_ACQ_REL) == t->nthreads) {
        __atomic_store_n(&t->bar->arrived, 0, __ATOMIC_RELAXED);
        __atomic_store_n(&t->bar->sense, sense, __ATOMIC_RELEASE);
        return;
    }
    for (uint32_t spins = 0; __atomic_load_n(&t->bar->sense, __ATOMIC_ACQUIRE) != sense; spins++)
        portRelax(spins);
#endif
}

/* ---- 16-byte packs ---- */

struct loomPack {
    uint64_t w[2];
};

static inline LOOM_HOSTDEV struct loomPack portLoadPack(const void *p)
{
    struct loomPack v;
#if defined(__CUDA_ARCH__)
    uint4 u = *(const uint4 *)p;
    memcpy(&v, &u, sizeof(v));
#else
    memcpy(&v, p, sizeof(v));
#endif
    return v;
}

static inline LOOM_HOSTDEV void portStorePack(void *p, struct loomPack v)
{
#if defined(__CUDA_ARCH__)
    uint4 u;
    memcpy(&u, &v, sizeof(u));
    *(uint4 *)p = u;
#else
    memcpy(p, &v, sizeof(v));
#endif
}

/* Copies one thread's piece; src and dst do not overlap. */
static inline LOOM_HOSTDEV void portCopy(void *dst, const void *src, size_t bytes)
{
#if defined(__CUDA_ARCH__)
    size_t i = 0;
    if ((((uintptr_t)dst | (uintptr_t)src) & 15) == 0)
        for (; i + 16 <= bytes; i += 16)
            portStorePack((char *)dst + i, portLoadPack((const char *)src + i));
    for (; i < bytes; i++)
        ((char *)dst)[i] = ((const char *)src)[i];
#else
    memcpy(dst, src, bytes);
#endif
}

/* ---- fp16 and bf16 ---- */

static inline LOOM_HOSTDEV uint32_t portFloatBits(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof(u));
    return u;
}

static inline LOOM_HOSTDEV float portBitsFloat(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof(f));
    return f;
}

/* binary16 -> float, exact. */
static inline LOOM_HOSTDEV float portHalfToFloat(uint16_t h)
{
#if defined(__CUDA_ARCH__)
    return __half2float(__ushort_as_half(h));
#else
    uint32_t sign = (uint32_t)(h & 0x8000) << 16;
    uint32_t exp = h & 0x7c00;
    uint32_t shifted = (uint32_t)(h & 0x7fff) << 13;
    if (exp == 0x7c00)
        return portBitsFloat(sign | shifted | 0x7f800000u);
    if (exp == 0)
        return portBitsFloat(sign | portFloatBits((float)(h & 0x3ff) * 0x1p-24f));
    return portBitsFloat(sign | (shifted + (112u << 23)));
#endif
}

/* float -> binary16, round to nearest even; a NaN stays NaN with the quiet bit set. */
static inline LOOM_HOSTDEV uint16_t portFloatToHalf(float f)
{
#if defined(__CUDA_ARCH__)
    return __half_as_ushort(__float2half_rn(f));
#else
    uint32_t bits = portFloatBits(f);
    uint32_t sign = (bits >> 16) & 0x8000;
    uint32_t x = bits & 0x7fffffff;
    uint32_t r;
    if (x > 0x7f800000) {
        r = 0x7e00 | ((x >> 13) & 0x3ff);
    } else if (x < 0x38800000) {
        r = portFloatBits(portBitsFloat(x) + 0.5f) - 0x3f000000u;
    } else {
        r = (x - (112u << 23) + 0xfff + ((x >> 13) & 1)) >> 13;
        if (r > 0x7c00)
            r = 0x7c00;
    }
    return (uint16_t)(r | sign);
#endif
}

static inline LOOM_HOSTDEV float portBf16ToFloat(uint16_t b)
{
    return portBitsFloat((uint32_t)b << 16);
}

/* float -> bfloat16, round to nearest even; a NaN gets its quiet bit set. */
static inline LOOM_HOSTDEV uint16_t portFloatToBf16(float f)
{
    uint32_t bits = portFloatBits(f);
    if ((bits & 0x7fffffff) > 0x7f800000)
        return (uint16_t)((bits >> 16) | 0x40);
    return (uint16_t)((bits + 0x7fff + ((bits >> 16) & 1)) >> 16);
}

#endif /* LOOM_DEVICE_PORT_H_ */
