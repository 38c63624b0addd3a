/*
 * compress.c — half the bytes on the wire: float32 AllReduce and
 * ReduceScatter send bfloat16 over network links (LOOM_NET_COMPRESS=bf16,
 * or loomConfig_t.netCompress), accumulating in float32.
 *
 * Only the network is narrowed: a message between two ranks of one host
 * stays float32, and every reduction is computed in float32. The executor
 * hands each step of a compressing lane here (exec.c, stepCompute); a step
 * works a block of COMPRESS_BLOCK elements at a time through the stack:
 *
 *   in[k] (bf16 if from the network) --widen--> (+) src --> v (float32)
 *   v --> dst (float32), shm peers (float32), network peers (bf16)
 *
 * Rounding happens where a value leaves for the network: once per hop
 * of a ring's reduce phase (a partial sum), and once for the complete
 * result. That last rounding is made by the rank whose FINAL step sends the
 * result on (the ring's owner of a block, the tree's root), into its own
 * dst and every message alike, so every rank ends with the same values:
 * what is forwarded after it is exactly representable, and goes through
 * bfloat16 unchanged. Recursive doubling would have each rank round a
 * different partial, so compressing lanes run a ring instead (plan.c).
 *
 * Error (loom(7)): each rounding is a relative error of at most u, 2^-8 to
 * nearest even, 2^-7 stochastic (unbiased), so after n ranks an element of a
 * sum is within ((1 + u)^n - 1) * sum |x_i| of the exact sum.
 *
 * Stochastic rounding adds 16 random bits below the kept ones and
 * truncates; the bits come from a xorshift generator per thread (no two
 * ranks need the same ones, since each value is rounded by one rank).
 */
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "compress.h"
#include "debug.h"
#include "param.h"
#include "port.h"
#include "reduce.h"
#include "transport.h"

#define COMPRESS_BLOCK 1024 /* elements per pass: 3 blocks of float32 fit in L1 */

static const char *const compressWords[] = {"none", "bf16", "bf16-sr", NULL};

int compressParse(const char *word)
{
    for (int i = 0; compressWords[i]; i++)
        if (strcmp(word, compressWords[i]) == 0)
            return i;
    return -1;
}

const char *compressName(int m)
{
    return m >= 0 && m <= COMPRESS_BF16_SR ? compressWords[m] : "?";
}

/* Whether any pair of comm's ranks talks over the network: hosts differ, or a rank has no shm. */
static int compressAnyNet(const struct loomComm *comm, int multiHost)
{
    if (comm->nranks < 2)
        return 0;
    if (multiHost)
        return 1;
    for (int r = 0; r < comm->nranks; r++)
        if (!transportUsableOn(comm, &shmTransport, r))
            return 1;
    return 0;
}

void compressConfig(struct loomComm *comm)
{
    const char *word = comm->config.netCompress;
    comm->compressForced = word != NULL;
    if (word == NULL)
        word = paramStr(LOOM_PARAM_NET_COMPRESS);
    int m = compressParse(word[0] ? word : "none");
    comm->compress = m < 0 ? COMPRESS_NONE : m; /* the config was checked, the table warned */
    if (comm->compressForced) /* the caller's string may go; split and shrink pass this on */
        comm->config.netCompress = compressWords[comm->compress];
}

void compressSetup(struct loomComm *comm, int multiHost)
{
    comm->compressNet = compressAnyNet(comm, multiHost);
    if (comm->compress != COMPRESS_NONE)
        INFO(LOOM_NET, "float32 AllReduce and ReduceScatter send %s on network links (%s)",
             compressName(comm->compress),
             comm->compressNet ? "this communicator has some" : "none in this communicator");
}

static int compressColl(loomColl_t coll)
{
    return coll == LOOM_COLL_ALLREDUCE || coll == LOOM_COLL_REDUCESCATTER;
}

loomResult_t compressOpCheck(const struct loomOp *op, const char *fn)
{
    const struct loomComm *comm = op->comm;
    if (!comm->compressForced || comm->compress == COMPRESS_NONE || !compressColl(op->coll) ||
        op->dt == loomFloat32)
        return loomSuccess;
    return loomSetError(loomInvalidArgument,
                        "%s: the communicator's config->netCompress \"%s\" applies to float32 "
                        "only, not %s (use a communicator without it for this call)",
                        fn, compressName(comm->compress), reduceTypeName(op->dt));
}

int compressOpMode(const struct loomOp *op, int device)
{
    const struct loomComm *comm = op->comm;
    if (comm->compress == COMPRESS_NONE || !comm->compressNet || device || op->dt != loomFloat32 ||
        !compressColl(op->coll))
        return COMPRESS_NONE;
    return comm->compress;
}

/* ---- conversions ---- */

/*
 * Four lanes at a time in GCC's generic vectors (one SSE2 register: the
 * library is built for baseline x86-64), the same integer arithmetic as
 * portFloatToBf16 lane by lane; a tail of fewer than four goes through a
 * padded vector.
 */
#define LANES 4
typedef uint32_t vu32 __attribute__((vector_size(4 * LANES)));
typedef uint16_t vu16 __attribute__((vector_size(2 * LANES)));

/* Per thread: a xorshift32 state per lane, for the random bits of stochastic rounding. */
static __thread vu32 rngState;
static __thread int rngSeeded;

/* This thread's generator state, seeded on first use. */
static vu32 rngLoad(void)
{
    if (!rngSeeded) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        uint64_t s = ((uint64_t)ts.tv_nsec << 20) ^ (uint64_t)ts.tv_sec ^
                     ((uint64_t)getpid() << 40) ^ (uint64_t)(uintptr_t)&rngState;
        for (int j = 0; j < LANES; j++) {
            s = s * 6364136223846793005ULL + 1442695040888963407ULL; /* a seed per lane */
            rngState[j] = (uint32_t)(s >> 32) | 1;
        }
        rngSeeded = 1;
    }
    return rngState;
}

/*
 * float32 bits to bfloat16 (in the low half of each lane): to nearest even,
 * or, when sr, up with probability (dropped bits) / 2^16, drawing from the
 * xorshift32 lanes *rng; a NaN stays a NaN (quiet), and the largest finite
 * values and inf round to nearest even either way.
 */
static inline __attribute__((always_inline)) vu32 narrow(vu32 b, int sr, vu32 *rng)
{
    vu32 mag = b & 0x7fffffff;
    vu32 r = (b + 0x7fff + ((b >> 16) & 1)) >> 16;
    if (sr) {
        vu32 x = *rng;
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        *rng = x;
        vu32 up = (b + (x & 0xffff)) >> 16;
        vu32 even = (vu32)(mag >= 0x7f7f0000);
        r = (r & even) | (up & ~even);
    }
    vu32 nan = (vu32)(mag > 0x7f800000);
    return (((b >> 16) | 0x40) & nan) | (r & ~nan);
}

/* compressPack's loop, inlined twice so that each rounding gets its own straight code. */
static inline __attribute__((always_inline)) void packLoop(uint16_t *dst, const float *src,
                                                           size_t n, int sr, vu32 *rng)
{
    size_t i = 0;
    for (; i + LANES <= n; i += LANES) {
        vu32 b;
        memcpy(&b, src + i, sizeof(b));
        vu16 h = __builtin_convertvector(narrow(b, sr, rng), vu16);
        memcpy(dst + i, &h, sizeof(h));
    }
    if (i < n) {
        vu32 b = {0};
        memcpy(&b, src + i, (n - i) * sizeof(float));
        vu16 h = __builtin_convertvector(narrow(b, sr, rng), vu16);
        memcpy(dst + i, &h, (n - i) * sizeof(uint16_t));
    }
}

void compressPack(uint16_t *dst, const float *src, size_t n, int mode)
{
    vu32 rng = {0};
    if (mode != COMPRESS_BF16_SR) {
        packLoop(dst, src, n, 0, &rng);
        return;
    }
    rng = rngLoad();
    packLoop(dst, src, n, 1, &rng);
    rngState = rng;
}

void compressUnpack(float *dst, const uint16_t *src, size_t n)
{
    size_t i = 0;
    for (; i + LANES <= n; i += LANES) {
        vu16 h;
        memcpy(&h, src + i, sizeof(h));
        vu32 b = __builtin_convertvector(h, vu32) << 16;
        memcpy(dst + i, &b, sizeof(b));
    }
    for (; i < n; i++)
        dst[i] = portBf16ToFloat(src[i]);
}

/* ---- a step ---- */

/* Block [i, i + m) of message k as float32: in place when it came as float32, else widened. */
static const float *blockIn(const char *msg, int narrow, size_t i, size_t m, float *wide)
{
    if (!narrow)
        return (const float *)msg + i;
    compressUnpack(wide, (const uint16_t *)msg + i, m);
    return wide;
}

void compressStep(const struct loomLane *l, const struct loomStep *s, const char *const *in,
                  unsigned netIn, char *const *out, unsigned netOut)
{
    unsigned uses = loomStepUses(s->op);
    const float *src = (const float *)l->bufs[s->srcBuf] + s->srcOff;
    float *dst = (uses & LOOM_USES_DST) ? (float *)l->bufs[s->dstBuf] + s->dstOff : NULL;
    int final = (s->flags & LOOM_STEP_FINAL) != 0, n = l->comm->nranks;
    int reduce = (uses & LOOM_USES_REDUCE) != 0, recv = (uses & LOOM_USES_RECV) != 0;
    int mode = l->compress;
    float acc[COMPRESS_BLOCK], wide[COMPRESS_BLOCK];
    uint16_t rounded[COMPRESS_BLOCK];

    for (size_t i = 0; i < s->count; i += COMPRESS_BLOCK) {
        size_t m = s->count - i < COMPRESS_BLOCK ? s->count - i : COMPRESS_BLOCK;
        const float *v = recv ? blockIn(in[0], netIn & 1, i, m, wide) : src + i;
        /* v as bfloat16 where it is one already: a message forwarded, or the rounded result */
        const uint16_t *packed =
            recv && !reduce && (netIn & 1) ? (const uint16_t *)in[0] + i : NULL;
        if (reduce) { /* (((src (+) m0) (+) m1) ...), as reduceApplyMany folds */
            const float *a = src + i;
            for (int k = 0; k < s->nrecv; k++) {
                const float *b = k == 0 ? v : blockIn(in[k], (netIn >> k) & 1, i, m, wide);
                if (final && k == s->nrecv - 1)
                    reduceApplyFinal(acc, b, a, m, loomFloat32, l->op, n);
                else
                    reduceApply(acc, b, a, m, loomFloat32, l->op);
                a = acc;
            }
            v = acc;
            if (final && s->nsend > 0) { /* the result's one rounding, shared by every rank */
                compressPack(rounded, acc, m, mode);
                compressUnpack(acc, rounded, m);
                packed = rounded;
            }
        }
        if (dst && dst + i != v)
            memmove(dst + i, v, m * sizeof(float));
        for (int k = 0; k < s->nsend; k++) {
            if (((netOut >> k) & 1) && packed)
                memcpy((uint16_t *)out[k] + i, packed, m * sizeof(uint16_t));
            else if ((netOut >> k) & 1)
                compressPack((uint16_t *)out[k] + i, v, m, mode);
            else
                memcpy((float *)out[k] + i, v, m * sizeof(float));
        }
    }
}
