/*
 * interp.h — the plan interpreter, written once for the GPU and the CPU.
 *
 * A block runs the lanes of one channel (of one communicator) of a call or
 * group: each lane is a plan (schedule.h) over the FIFOs of its channel. The
 * block's threads take each step together:
 *
 *   thread 0: pick a lane whose next step can run: each of its receive
 *             FIFOs holds a message (Simple: tail > pos; LL: the first line
 *             carries the message's flag) and each of its send FIFOs has a
 *             free slot (head + LOOM_STEPS > pos); spin and back off
 *             (portIdle) while none can, and stop when the abort flag is
 *             raised
 *   barrier
 *   all:      copy or reduce the step's elements, each thread its pieces
 *             (LL: lines read into, and written from, a staging area)
 *   barrier
 *   thread 0: publish: the size words, then tail (sender) / head (receiver),
 *             release, and tell the other ends (portNotify)
 *
 * A fan-in step (nrecv = k > 1, schedule.h) reduces its k messages and the
 * local input in one pass, in the host executor's order (reduceApplyMany:
 * ((src (+) m0) (+) m1) (+) m2, so the bits agree); a fan-out step (nsend =
 * k) stores the same values to every outgoing slot in that pass. Over LL,
 * each received message has a staging area of its own, and the one
 * outgoing message is staged once and written as lines to each send peer.
 *
 * What a step reads, reduces, writes and sends comes from the op table
 * (loomStepUses), not from a case per op, so a new op costs a row there.
 * Lanes that share a connector take turns in plan order: the first lane
 * that uses a connector owns it until it is done. Those rules, and when a
 * step is ready, are step.h's, which the host executors follow too; what
 * is the interpreter's own here is how a block's threads wait, split a
 * pass's elements, and move LL lines.
 * Single copies (OFFER, PULL, DRAIN) are not for this executor: the block
 * stops with LOOM_DEV_UNSUPPORTED, and the planner never gives it one.
 *
 * Everything here is static inline and LOOM_HOSTDEV over port.h: nvcc
 * compiles it into the kernel (kernels.cu), the C compiler into the kernel
 * executor of host buffers (src/exec/kexec.c), where pthreads are the threads.
 * Arithmetic is reduce.c's (integers wrap, computed unsigned; max and min
 * the C comparison; fp16 and bf16 widened to float and rounded to nearest
 * even after each operation; Avg sums, rounds to the type, then divides),
 * so results agree bit for bit with the host executor.
 */
#ifndef LOOM_DEVICE_INTERP_H_
#define LOOM_DEVICE_INTERP_H_

#include <stddef.h>
#include <stdint.h>

#include "fifo.h"
#include "loom.h"
#include "port.h"
#include "schedule.h"
#include "step.h"

enum { LOOM_PROTO_SIMPLE = 0, LOOM_PROTO_LL = 1, LOOM_PROTO_NUM };

/* One end of a FIFO as the interpreter sees it (the host fills it from a struct loomConnector). */
struct loomDevConn {
    uint64_t *tail;  /* messages written (the sender's) */
    uint64_t *head;  /* messages consumed (the receiver's) */
    uint64_t *bytes; /* [LOOM_STEPS]: each message's size word (fifo.h) */
    char *slots;     /* LOOM_STEPS slots of slotBytes */
    uint64_t slotBytes;
    uint64_t *ll;  /* LOOM_STEPS x LOOM_LL_LINES lines, or NULL: no LL on this link */
    uint64_t *pos; /* messages this end produced or consumed; lives on between calls */
    void *bell;    /* the other end's doorbell (host), or NULL */
};

/* The staging area of a block: one LL message per receive peer, then the one to send. */
#define LOOM_DEV_STAGE_BYTES ((LOOM_STEP_MAXPEERS + 1) * LOOM_LL_BYTES)

/* One lane: a plan on one operation's buffers. */
struct loomDevLane {
    const struct loomPlanStep *steps;
    uint32_t nsteps;
    uint32_t elemSize;
    int32_t dt, op, nranks, proto;
    char *bufs[2];                   /* LOOM_BUF_SEND, LOOM_BUF_RECV */
    struct loomDevConn *send, *recv; /* [nranks] of the lane's channel */
    /* Thread 0's while the block runs: */
    struct loomPlanIter it;
    struct loomStep step; /* the next step, while `more` */
    int32_t more, done;
    uint64_t cur; /* steps done */
};

/* How a block ended. */
enum {
    LOOM_DEV_OK = 0,
    LOOM_DEV_STOPPED,    /* the abort flag was raised */
    LOOM_DEV_MISMATCH,   /* a message's size word is not the step's (errLane, errGot) */
    LOOM_DEV_UNSUPPORTED /* a single-copy step, or LL on a link without lines (errLane) */
};

struct loomDevBlock {
    struct loomDevLane *lanes;
    uint32_t nlanes;
    int32_t nranks;
    int32_t *owner; /* [2 * nranks], send connectors then receive ones; NULL with one lane */
    int32_t *abort; /* raised (non-zero) by the watchdog: stop */
    uint64_t llMod; /* LL flag modulus: LOOM_LL_MOD, or smaller in tests */
    void *host;     /* the host executor's context for portIdle */
    char *stage;    /* LOOM_DEV_STAGE_BYTES: LL messages received, the LL message to send */
    /*
     * For a watchdog on the host (mapped memory), or NULL: beat[0] counts the
     * steps published, beat[1] is 1 + the peer thread 0 last found the block
     * waiting for (its message, or a free slot towards it), 0 if none yet.
     */
    uint64_t *beat;
    uint64_t beats;            /* thread 0's: beat[0] */
    int32_t waitOn, waitShown; /* thread 0's: the peer of this sweep's first wait; beat[1] - 1 */
    /* Thread 0 writes these before a barrier; all read them after it. */
    int32_t sel; /* lane whose step runs, or -1: finished, -2: stopped (status) */
    int32_t status;
    const char *in[LOOM_STEP_MAXPEERS]; /* the step's messages, one per receive peer */
    char *out[LOOM_STEP_MAXPEERS];      /* its outgoing slots, one per send peer (LL: one stage) */
    int32_t errLane;
    int32_t errPeer; /* the peer whose message did not match (LOOM_DEV_MISMATCH) */
    uint64_t errGot;
};

/*
 * ---- arithmetic ----
 *
 * Every output o[0 .. no) = post(a[na-1] (op) ... (op) (a[0] (op) b)) over
 * count elements, in one pass: each input read once, each output written
 * once. Without b, the chain starts from a[0]. The operands go in the
 * order reduce.c takes them (the message first, the running value second).
 */
#define LOOM_DEV_KERNEL(fname, T, COMBINE, POST)                                                   \
    static inline LOOM_HOSTDEV void fname(char *const *o, int no, const char *const *a, int na,    \
                                          const char *b, uint64_t count, int post, int nranks)     \
    {                                                                                              \
        enum { PER = 16 / sizeof(T) };                                                             \
        uint64_t i = 0;                                                                            \
        uintptr_t at = (uintptr_t)b;                                                               \
        const char *first = b ? b : a[0];                                                          \
        int k0 = b ? 0 : 1;                                                                        \
        (void)nranks;                                                                              \
        for (int k = 0; k < na; k++)                                                               \
            at |= (uintptr_t)a[k];                                                                 \
        for (int m = 0; m < no; m++)                                                               \
            at |= (uintptr_t)o[m];                                                                 \
        if ((at & 15) == 0) {                                                                      \
            for (; i + PER <= count; i += PER) {                                                   \
                T x[PER];                                                                          \
                struct loomPack v = portLoadPack(first + i * sizeof(T));                           \
                memcpy(x, &v, sizeof(v));                                                          \
                for (int k = k0; k < na; k++) {                                                    \
                    T y[PER];                                                                      \
                    v = portLoadPack(a[k] + i * sizeof(T));                                        \
                    memcpy(y, &v, sizeof(v));                                                      \
                    for (int j = 0; j < PER; j++)                                                  \
                        x[j] = COMBINE(y[j], x[j]);                                                \
                }                                                                                  \
                if (post)                                                                          \
                    for (int j = 0; j < PER; j++)                                                  \
                        x[j] = POST(x[j]);                                                         \
                memcpy(&v, x, sizeof(v));                                                          \
                for (int m = 0; m < no; m++)                                                       \
                    portStorePack(o[m] + i * sizeof(T), v);                                        \
            }                                                                                      \
        }                                                                                          \
        for (; i < count; i++) {                                                                   \
            T x;                                                                                   \
            memcpy(&x, first + i * sizeof(T), sizeof(T));                                          \
            for (int k = k0; k < na; k++) {                                                        \
                T y;                                                                               \
                memcpy(&y, a[k] + i * sizeof(T), sizeof(T));                                       \
                x = COMBINE(y, x);                                                                 \
            }                                                                                      \
            if (post)                                                                              \
                x = POST(x);                                                                       \
            for (int m = 0; m < no; m++)                                                           \
                memcpy(o[m] + i * sizeof(T), &x, sizeof(T));                                       \
        }                                                                                          \
    }

/* Integers: sums and products on the unsigned view U, so that they wrap. */
#define LOOM_DEV_INT(name, T)                                                                      \
    LOOM_DEV_KERNEL(name##Sum, T, LOOM_DEV_ISUM_##name, LOOM_DEV_IDIV)                             \
    LOOM_DEV_KERNEL(name##Prod, T, LOOM_DEV_IPROD_##name, LOOM_DEV_IDIV)                           \
    LOOM_DEV_KERNEL(name##Max, T, LOOM_DEV_MAX, LOOM_DEV_IDIV)                                     \
    LOOM_DEV_KERNEL(name##Min, T, LOOM_DEV_MIN, LOOM_DEV_IDIV)
#define LOOM_DEV_MAX(x, y) ((x) > (y) ? (x) : (y))
#define LOOM_DEV_MIN(x, y) ((x) < (y) ? (x) : (y))
#define LOOM_DEV_IDIV(x) ((x) / nranks)
#define LOOM_DEV_ISUM_i8(x, y) ((int8_t)(uint8_t)((uint8_t)(x) + (uint8_t)(y)))
#define LOOM_DEV_IPROD_i8(x, y) ((int8_t)(uint8_t)((uint8_t)(x) * (uint8_t)(y)))
#define LOOM_DEV_ISUM_u8(x, y) ((uint8_t)((x) + (y)))
#define LOOM_DEV_IPROD_u8(x, y) ((uint8_t)((x) * (y)))
#define LOOM_DEV_ISUM_i32(x, y) ((int32_t)((uint32_t)(x) + (uint32_t)(y)))
#define LOOM_DEV_IPROD_i32(x, y) ((int32_t)((uint32_t)(x) * (uint32_t)(y)))
#define LOOM_DEV_ISUM_u32(x, y) ((uint32_t)((x) + (y)))
#define LOOM_DEV_IPROD_u32(x, y) ((uint32_t)((x) * (y)))
#define LOOM_DEV_ISUM_i64(x, y) ((int64_t)((uint64_t)(x) + (uint64_t)(y)))
#define LOOM_DEV_IPROD_i64(x, y) ((int64_t)((uint64_t)(x) * (uint64_t)(y)))
#define LOOM_DEV_ISUM_u64(x, y) ((uint64_t)((x) + (y)))
#define LOOM_DEV_IPROD_u64(x, y) ((uint64_t)((x) * (y)))
LOOM_DEV_INT(i8, int8_t)
LOOM_DEV_INT(u8, uint8_t)
LOOM_DEV_INT(i32, int32_t)
LOOM_DEV_INT(u32, uint32_t)
LOOM_DEV_INT(i64, int64_t)
LOOM_DEV_INT(u64, uint64_t)

/* float and double: C arithmetic in the type; Avg divides in the type. */
#define LOOM_DEV_ADD(x, y) ((x) + (y))
#define LOOM_DEV_MUL(x, y) ((x) * (y))
#define LOOM_DEV_FLOAT(name, T)                                                                    \
    LOOM_DEV_KERNEL(name##Sum, T, LOOM_DEV_ADD, LOOM_DEV_FDIV_##name)                              \
    LOOM_DEV_KERNEL(name##Prod, T, LOOM_DEV_MUL, LOOM_DEV_FDIV_##name)                             \
    LOOM_DEV_KERNEL(name##Max, T, LOOM_DEV_MAX, LOOM_DEV_FDIV_##name)                              \
    LOOM_DEV_KERNEL(name##Min, T, LOOM_DEV_MIN, LOOM_DEV_FDIV_##name)
#define LOOM_DEV_FDIV_f32(x) ((x) / (float)nranks)
#define LOOM_DEV_FDIV_f64(x) ((x) / (double)nranks)
LOOM_DEV_FLOAT(f32, float)
LOOM_DEV_FLOAT(f64, double)

/* fp16 and bf16 (bits in a uint16_t): through float, rounded after each operation. */
#define LOOM_DEV_HALF(name)                                                                        \
    LOOM_DEV_KERNEL(name##Sum, uint16_t, LOOM_DEV_HSUM_##name, LOOM_DEV_HDIV_##name)               \
    LOOM_DEV_KERNEL(name##Prod, uint16_t, LOOM_DEV_HPROD_##name, LOOM_DEV_HDIV_##name)             \
    LOOM_DEV_KERNEL(name##Max, uint16_t, LOOM_DEV_HMAX_##name, LOOM_DEV_HDIV_##name)               \
    LOOM_DEV_KERNEL(name##Min, uint16_t, LOOM_DEV_HMIN_##name, LOOM_DEV_HDIV_##name)
#define LOOM_DEV_HSUM_f16(x, y) portFloatToHalf(portHalfToFloat(x) + portHalfToFloat(y))
#define LOOM_DEV_HPROD_f16(x, y) portFloatToHalf(portHalfToFloat(x) * portHalfToFloat(y))
#define LOOM_DEV_HMAX_f16(x, y) (portHalfToFloat(x) > portHalfToFloat(y) ? (x) : (y))
#define LOOM_DEV_HMIN_f16(x, y) (portHalfToFloat(x) < portHalfToFloat(y) ? (x) : (y))
#define LOOM_DEV_HDIV_f16(x) portFloatToHalf(portHalfToFloat(x) / (float)nranks)
#define LOOM_DEV_HSUM_bf16(x, y) portFloatToBf16(portBf16ToFloat(x) + portBf16ToFloat(y))
#define LOOM_DEV_HPROD_bf16(x, y) portFloatToBf16(portBf16ToFloat(x) * portBf16ToFloat(y))
#define LOOM_DEV_HMAX_bf16(x, y) (portBf16ToFloat(x) > portBf16ToFloat(y) ? (x) : (y))
#define LOOM_DEV_HMIN_bf16(x, y) (portBf16ToFloat(x) < portBf16ToFloat(y) ? (x) : (y))
#define LOOM_DEV_HDIV_bf16(x) portFloatToBf16(portBf16ToFloat(x) / (float)nranks)
LOOM_DEV_HALF(f16)
LOOM_DEV_HALF(bf16)

typedef void (*loomDevKernel_t)(char *const *o, int no, const char *const *a, int na, const char *b,
                                uint64_t count, int post, int nranks);

/* The arithmetic of (dt, op): one of the functions above (loomAvg's is the sum's), or NULL. */
static inline LOOM_HOSTDEV loomDevKernel_t loomDevKernelOf(int dt, int op)
{
    int k = op == loomProd ? 1 : op == loomMax ? 2 : op == loomMin ? 3 : 0;
#define LOOM_DEV_CASE(E, name)                                                                     \
    case E: {                                                                                      \
        loomDevKernel_t f[4] = {name##Sum, name##Prod, name##Max, name##Min};                      \
        return f[k];                                                                               \
    }
    switch (dt) {
        LOOM_DEV_CASE(loomInt8, i8)
        LOOM_DEV_CASE(loomUint8, u8)
        LOOM_DEV_CASE(loomInt32, i32)
        LOOM_DEV_CASE(loomUint32, u32)
        LOOM_DEV_CASE(loomInt64, i64)
        LOOM_DEV_CASE(loomUint64, u64)
        LOOM_DEV_CASE(loomFloat16, f16)
        LOOM_DEV_CASE(loomFloat32, f32)
        LOOM_DEV_CASE(loomFloat64, f64)
        LOOM_DEV_CASE(loomBfloat16, bf16)
    default:
        return NULL;
    }
#undef LOOM_DEV_CASE
}

/*
 * Every o[m] = post(a[na-1] (op) ... (op) (a[0] (op) b)) for every datatype
 * and operation (b NULL: the chain starts from a[0]; na 1 and no b: post(a[0]));
 * post is the division of a finished Avg. loomAvg reduces as a sum.
 */
static inline LOOM_HOSTDEV void loomDevReduce(int dt, int op, char *const *o, int no,
                                              const char *const *a, int na, const char *b,
                                              uint64_t count, int post, int nranks)
{
    loomDevKernel_t f = loomDevKernelOf(dt, op);
    if (f)
        f(o, no, a, na, b, count, post, nranks);
}

/*
 * Thread tid's share, of nthreads, of f(o, no, {a}, 1, b, count, post,
 * nranks) (f one of the functions above, for elements of es bytes): 16-byte
 * packs tid, tid + nthreads, ... when every pointer is 16-byte aligned, else
 * single elements, and the tail after the packs one element at a time the
 * same way. This is a reduction kernel of its own (kernels.cu, launched by
 * the host-driven CUDA executor, cudaexec.c) rather than a block of the
 * interpreter: consecutive threads take consecutive packs, so a warp's
 * accesses coalesce. An output may be an input (in place): each pack or
 * element is read before it is written, by the one thread that takes it.
 */
static inline LOOM_HOSTDEV void loomDevReduceShare(loomDevKernel_t f, uint64_t es, char *const *o,
                                                   int no, const char *a, const char *b,
                                                   uint64_t count, int post, int nranks,
                                                   uint64_t tid, uint64_t nthreads)
{
    uint64_t per = 16 / es, first = 0;
    uintptr_t at = (uintptr_t)a | (uintptr_t)b;
    char *oo[LOOM_STEP_OUTS];
    for (int m = 0; m < no; m++)
        at |= (uintptr_t)o[m];
    if ((at & 15) == 0) {
        uint64_t packs = count / per;
        for (uint64_t k = tid; k < packs; k += nthreads) {
            uint64_t off = k * 16;
            const char *aa = a + off;
            for (int m = 0; m < no; m++)
                oo[m] = o[m] + off;
            f(oo, no, &aa, 1, b ? b + off : NULL, per, post, nranks);
        }
        first = packs * per;
    }
    for (uint64_t i = first + tid; i < count; i += nthreads) {
        uint64_t off = i * es;
        const char *aa = a + off;
        for (int m = 0; m < no; m++)
            oo[m] = o[m] + off;
        f(oo, no, &aa, 1, b ? b + off : NULL, 1, post, nranks);
    }
}

/*
 * This thread's share of loomDevReduce over count elements (a plain copy of
 * a[0] to every output when there is nothing to combine or divide): pieces
 * of LOOM_PORT_PIECE bytes, thread t taking pieces t, t + T, ...
 */
static inline LOOM_HOSTDEV void loomDevApply(const struct loomPortThread *t,
                                             const struct loomDevLane *l, char *const *o, int no,
                                             const char *const *a, int na, const char *b,
                                             uint64_t count, int post)
{
    uint64_t es = l->elemSize, per = LOOM_PORT_PIECE / es;
    for (uint64_t e = (uint64_t)t->tid * per; e < count; e += (uint64_t)t->nthreads * per) {
        uint64_t n = count - e < per ? count - e : per, off = e * es;
        char *oo[LOOM_STEP_OUTS];
        const char *aa[LOOM_STEP_MAXPEERS];
        for (int m = 0; m < no; m++)
            oo[m] = o[m] + off;
        for (int k = 0; k < na; k++)
            aa[k] = a[k] + off;
        if (na == 1 && b == NULL && !post) {
            for (int m = 0; m < no; m++)
                portCopy(oo[m], aa[0], n * es);
        } else {
            loomDevReduce(l->dt, l->op, oo, no, aa, na, b ? b + off : NULL, n, post, l->nranks);
        }
    }
}

/* dst = src where the two overlap (an in-place copy): thread 0 alone, in a safe direction. */
static inline LOOM_HOSTDEV void loomDevMove(char *dst, const char *src, uint64_t bytes)
{
    if (dst < src)
        for (uint64_t i = 0; i < bytes; i++)
            dst[i] = src[i];
    else
        for (uint64_t i = bytes; i > 0; i--)
            dst[i - 1] = src[i - 1];
}

/* ---- LL lines ---- */

/* Reads an LL message of `bytes` from c's slot into stage, each thread its lines. */
static inline LOOM_HOSTDEV void loomDevReadLines(struct loomDevBlock *b,
                                                 const struct loomPortThread *t,
                                                 const struct loomDevConn *c, uint64_t bytes,
                                                 char *stage)
{
    uint64_t pos = *c->pos, nlines = (bytes + 3) / 4, per = LOOM_PORT_PIECE / 8;
    uint32_t flag = LOOM_LL_FLAG(pos, b->llMod);
    const uint64_t *lines = c->ll + (pos % LOOM_STEPS) * LOOM_LL_LINES;
    for (uint64_t first = (uint64_t)t->tid * per; first < nlines;
         first += (uint64_t)t->nthreads * per) {
        uint64_t end = first + per < nlines ? first + per : nlines;
        for (uint64_t i = first; i < end; i++) {
            uint64_t v = portLoadLine(&lines[i]);
            for (uint32_t spins = 0; (uint32_t)(v >> 32) != flag; spins++) {
                if (portLoad32Acquire(b->abort))
                    return; /* the block stops before it publishes anything */
                if (t->tid == 0)
                    portIdle(b->host, spins + 1); /* the watchdog runs in thread 0's waits */
                else
                    portRelax(spins);
                v = portLoadLine(&lines[i]);
            }
            uint32_t data = (uint32_t)v;
            memcpy(stage + 4 * i, &data, 4);
        }
    }
}

/* Writes an LL message of `bytes` from stage into c's slot, each thread its lines. */
static inline LOOM_HOSTDEV void loomDevWriteLines(const struct loomDevBlock *b,
                                                  const struct loomPortThread *t,
                                                  const struct loomDevConn *c, uint64_t bytes,
                                                  const char *stage)
{
    uint64_t pos = *c->pos, nlines = (bytes + 3) / 4, per = LOOM_PORT_PIECE / 8;
    uint64_t flag = (uint64_t)LOOM_LL_FLAG(pos, b->llMod) << 32;
    uint64_t *lines = c->ll + (pos % LOOM_STEPS) * LOOM_LL_LINES;
    for (uint64_t first = (uint64_t)t->tid * per; first < nlines;
         first += (uint64_t)t->nthreads * per) {
        uint64_t end = first + per < nlines ? first + per : nlines;
        for (uint64_t i = first; i < end; i++) {
            uint32_t data = 0;
            uint64_t n = bytes - 4 * i < 4 ? bytes - 4 * i : 4;
            memcpy(&data, stage + 4 * i, n);
            portStoreLine(&lines[i], flag | data);
        }
    }
}

/* Clears the lines of c's current slot (its last message before the flags wrap was taken). */
static inline LOOM_HOSTDEV void loomDevClearLines(const struct loomPortThread *t,
                                                  const struct loomDevConn *c)
{
    uint64_t *lines = c->ll + (*c->pos % LOOM_STEPS) * LOOM_LL_LINES;
    for (uint64_t i = t->tid; i < LOOM_LL_LINES; i += t->nthreads)
        portStoreLine(&lines[i], 0);
}

/* ---- connector ownership among the lanes of a block (step.h) ---- */

/* The block's table: owner[dir * nranks + peer]. */
static inline LOOM_HOSTDEV void loomDevOwnersClaim(struct loomDevBlock *b)
{
    for (int32_t k = 0; k < 2 * b->nranks; k++)
        b->owner[k] = LOOM_OWNER_NONE;
    for (uint32_t i = 0; i < b->nlanes; i++)
        loomOwnersTake(b->owner, (size_t)b->nranks, b->lanes[i].steps, b->lanes[i].nsteps,
                       (int32_t)i, LOOM_OWNER_NONE);
}

/* Hands each connector lane i owned to the next lane that uses it. */
static inline LOOM_HOSTDEV void loomDevOwnersRelease(struct loomDevBlock *b, uint32_t i)
{
    size_t stride = (size_t)b->nranks;
    loomOwnersHandOff(b->owner, stride, b->nranks, (int32_t)i);
    for (uint32_t j = i + 1; j < b->nlanes; j++)
        if (!b->lanes[j].done)
            loomOwnersTake(b->owner, stride, b->lanes[j].steps, b->lanes[j].nsteps, (int32_t)j,
                           LOOM_OWNER_HANDED);
    loomOwnersSettle(b->owner, stride, b->nranks);
}

/* ---- one step ---- */

static inline LOOM_HOSTDEV int loomDevFail(struct loomDevBlock *b, int status, uint32_t lane,
                                           int32_t peer, uint64_t got)
{
    b->status = status;
    b->errLane = (int32_t)lane;
    b->errPeer = peer;
    b->errGot = got;
    return -1;
}

/* Thread 0: lane's step waits for peer (the sweep's first such peer is kept); returns 0. */
static inline LOOM_HOSTDEV int loomDevWaitOn(struct loomDevBlock *b, int32_t peer)
{
    if (b->waitOn < 0)
        b->waitOn = peer;
    return 0;
}

/*
 * Thread 0: 1 if lane i's next step can run now: every message it takes has
 * come and every FIFO it sends to has a free slot (b->in, b->out set); 0 if
 * not yet, -1 on error.
 */
static inline LOOM_HOSTDEV int loomDevReady(struct loomDevBlock *b, uint32_t i)
{
    struct loomDevLane *l = &b->lanes[i];
    const struct loomStep *s = &l->step;
    uint64_t bytes = s->count * l->elemSize;
    int ll = l->proto == LOOM_PROTO_LL;
    if (loomStepUses(s->op) & LOOM_USES_SLOTLESS)
        return loomDevFail(b, LOOM_DEV_UNSUPPORTED, i, -1, 0);
    for (int j = 0; j < s->nrecv; j++) {
        int32_t from = s->recvPeers[j];
        struct loomDevConn *rc = &l->recv[from];
        uint64_t pos = *rc->pos;
        if (!loomOwns(b->owner, (size_t)b->nranks, 1, from, (int32_t)i))
            return 0;
        if (ll && (rc->ll == NULL || bytes > LOOM_LL_BYTES))
            return loomDevFail(b, LOOM_DEV_UNSUPPORTED, i, from, 0);
        if (ll) {
            const uint64_t *line = rc->ll + (pos % LOOM_STEPS) * LOOM_LL_LINES;
            if (!loomLineIn(portLoadLine(line), pos, b->llMod))
                return loomDevWaitOn(b, from);
        } else if (!loomMessageIn(portLoadAcquire(rc->tail), pos)) {
            return loomDevWaitOn(b, from);
        }
        /* A size word flagged device data is the host-driven CUDA executor's: not a peer's here. */
        uint64_t got = portLoadAcquire(&rc->bytes[pos % LOOM_STEPS]);
        if (loomMessageCheck(got, bytes, 0, ll, 0) != LOOM_MSG_OK)
            return loomDevFail(b, LOOM_DEV_MISMATCH, i, from, got);
        b->in[j] = ll ? b->stage + (uint64_t)j * LOOM_LL_BYTES
                      : rc->slots + (pos % LOOM_STEPS) * rc->slotBytes;
    }
    for (int j = 0; j < s->nsend; j++) {
        int32_t to = s->sendPeers[j];
        struct loomDevConn *sc = &l->send[to];
        uint64_t pos = *sc->pos;
        if (!loomOwns(b->owner, (size_t)b->nranks, 0, to, (int32_t)i))
            return 0;
        if (ll && (sc->ll == NULL || bytes > LOOM_LL_BYTES))
            return loomDevFail(b, LOOM_DEV_UNSUPPORTED, i, to, 0);
        if (!loomSlotFree(portLoadAcquire(sc->head), pos))
            return loomDevWaitOn(b, to);
        b->out[j] = ll ? b->stage + LOOM_STEP_MAXPEERS * LOOM_LL_BYTES
                       : sc->slots + (pos % LOOM_STEPS) * sc->slotBytes;
    }
    return 1;
}

/* Thread 0: the lane whose step runs next; -1 when every lane is done, -2 on a stop or error. */
static inline LOOM_HOSTDEV int32_t loomDevSelect(struct loomDevBlock *b)
{
    for (uint32_t spins = 0;; spins++) {
        int left = 0;
        b->waitOn = -1;
        if (portLoad32Acquire(b->abort)) {
            b->status = LOOM_DEV_STOPPED;
            return -2;
        }
        for (uint32_t i = 0; i < b->nlanes; i++) {
            struct loomDevLane *l = &b->lanes[i];
            if (l->done)
                continue;
            if (!l->more) {
                l->done = 1;
                if (b->owner)
                    loomDevOwnersRelease(b, i);
                continue;
            }
            left = 1;
            int r = loomDevReady(b, i);
            if (r < 0)
                return -2;
            if (r > 0)
                return (int32_t)i;
        }
        if (!left)
            return -1;
        if (b->beat && b->waitOn != b->waitShown) { /* the watchdog's, once per change */
            b->waitShown = b->waitOn;
            portStoreRelease(&b->beat[1], (uint64_t)(b->waitOn + 1));
        }
        portIdle(b->host, spins + 1);
    }
}

/* All threads: the local work of the selected step, as the op table declares it (step.h). */
static inline LOOM_HOSTDEV void loomDevCompute(struct loomDevBlock *b, struct loomPortThread *t)
{
    const struct loomDevLane *l = &b->lanes[b->sel];
    const struct loomStep *s = &l->step;
    unsigned uses = loomStepUses(s->op);
    uint64_t es = l->elemSize, bytes = s->count * es;
    const char *src = l->bufs[s->srcBuf] + s->srcOff * es;
    char *dst = l->bufs[s->dstBuf] + s->dstOff * es;
    int ll = l->proto == LOOM_PROTO_LL;
    int nin = (uses & LOOM_USES_RECV) ? s->nrecv : 0;
    /* LL stages the one outgoing message once, for every send peer's lines. */
    int nout = (uses & LOOM_USES_SEND) ? (ll ? s->nsend > 0 : s->nsend) : 0;
    int clear = 0;
    struct loomStepWork w;

    if (nin && ll) {
        for (int j = 0; j < nin; j++)
            loomDevReadLines(b, t, &l->recv[s->recvPeers[j]], bytes, b->stage + j * LOOM_LL_BYTES);
        portBarrier(t);
    }
    /* Each pass writes all its outputs at once: each input read once, each output written once. */
    loomStepWorkOf(&w, s, l->op, l->nranks, src, dst, b->in, b->out, nout, bytes);
    for (int k = 0; k < w.npass; k++) {
        struct loomStepPass *p = &w.pass[k];
        if (p->overlap) { /* an in-place copy whose ends overlap: one thread, in a safe direction */
            portBarrier(t);
            if (t->tid == 0)
                loomDevMove(p->to[0], p->in[0], bytes);
            portBarrier(t);
            if (p->divide)
                loomDevApply(t, l, p->to, 1, (const char *const *)p->to, 1, NULL, s->count, 1);
        } else {
            loomDevApply(t, l, p->to, p->nto, p->in, p->nin, p->with, s->count, p->divide);
        }
    }
    if (nout && ll) {
        portBarrier(t);
        for (int j = 0; j < s->nsend; j++)
            loomDevWriteLines(b, t, &l->send[s->sendPeers[j]], bytes, b->out[0]);
    }
    for (int j = 0; j < nin; j++) {
        const struct loomDevConn *rc = &l->recv[s->recvPeers[j]];
        clear |= loomLinesClear(rc->ll, *rc->pos, b->llMod);
    }
    if (clear) {
        if (ll)
            portBarrier(t); /* every thread has read its lines */
        for (int j = 0; j < nin; j++) {
            const struct loomDevConn *rc = &l->recv[s->recvPeers[j]];
            if (loomLinesClear(rc->ll, *rc->pos, b->llMod))
                loomDevClearLines(t, rc);
        }
    }
}

/* Thread 0, after the step's work: makes it visible and moves the lane on. */
static inline LOOM_HOSTDEV void loomDevPublish(struct loomDevBlock *b)
{
    struct loomDevLane *l = &b->lanes[b->sel];
    const struct loomStep *s = &l->step;
    uint64_t bytes = s->count * l->elemSize;
    if (portLoad32Acquire(b->abort))
        return; /* an LL read may have given up: publish nothing (loomDevSelect stops) */
    for (int j = 0; j < s->nsend; j++) {
        struct loomDevConn *sc = &l->send[s->sendPeers[j]];
        uint64_t pos = *sc->pos;
        if (l->proto != LOOM_PROTO_LL)
            sc->bytes[pos % LOOM_STEPS] = bytes;
        *sc->pos = pos + 1;
        portStoreRelease(sc->tail, pos + 1);
        portNotify(sc->bell);
    }
    for (int j = 0; j < s->nrecv; j++) {
        struct loomDevConn *rc = &l->recv[s->recvPeers[j]];
        uint64_t pos = *rc->pos + 1;
        *rc->pos = pos;
        portStoreRelease(rc->head, pos);
        portNotify(rc->bell);
    }
    l->cur++;
    l->more = loomPlanNext(l->steps, l->nsteps, &l->it, &l->step);
    if (b->beat)
        portStoreRelease(b->beat, ++b->beats);
}

/*
 * Runs the block's lanes to the end: every thread of the block calls it.
 * Returns LOOM_DEV_OK, or how it stopped (b->status; b->errLane and
 * b->errGot say where).
 */
static inline LOOM_HOSTDEV int loomDevRun(struct loomDevBlock *b, struct loomPortThread *t)
{
    if (t->tid == 0) {
        b->status = LOOM_DEV_OK;
        b->beats = 0;
        b->waitShown = -1;
        for (uint32_t i = 0; i < b->nlanes; i++) {
            struct loomDevLane *l = &b->lanes[i];
            l->it.k = 0;
            l->it.i = 0;
            l->cur = 0;
            l->done = 0;
            l->more = loomPlanNext(l->steps, l->nsteps, &l->it, &l->step);
        }
        if (b->owner)
            loomDevOwnersClaim(b);
    }
    for (;;) {
        if (t->tid == 0) {
            b->sel = loomDevSelect(b);
            if (b->sel >= 0) {
                const struct loomDevLane *l = &b->lanes[b->sel];
                const struct loomStep *s = &l->step;
                if (l->proto == LOOM_PROTO_LL && s->nsend > 0) {
                    /* The size words go before the lines, which make them visible. */
                    for (int j = 0; j < s->nsend; j++) {
                        struct loomDevConn *sc = &l->send[s->sendPeers[j]];
                        sc->bytes[*sc->pos % LOOM_STEPS] = s->count * l->elemSize | LOOM_FIFO_LL;
                    }
                    portFence();
                }
            }
        }
        portBarrier(t);
        if (b->sel < 0)
            break;
        loomDevCompute(b, t);
        portBarrier(t);
        if (t->tid == 0)
            loomDevPublish(b);
    }
    return b->status;
}

#endif /* LOOM_DEVICE_INTERP_H_ */
