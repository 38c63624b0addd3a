/*
 * loom-perf — bandwidth and correctness of Loom's collectives, nccl-tests style.
 *
 * One binary serves every collective (-C); each rank is a process started by
 * loomrun, mpirun or srun and joins as toolcomm.c says (MPI_Bcast of the
 * unique id under mpirun when built with MPI, else loomCommInitFromEnv). Options,
 * columns and bandwidth figures follow nccl-tests so numbers can be compared
 * with theirs, and bench/mpi-coll prints the same table for Open MPI.
 *
 * For every (collective, datatype, op, root) section and every size:
 *
 *   out of place: [check once] -> warmups -> barrier -> timed iterations
 *   in place:     [check once] -> warmups -> barrier -> timed iterations
 *   -> times combined across ranks (-a), #wrong summed across ranks
 *
 * The check runs apart from the timed loop because in-place iterations feed
 * on their own output. Its inputs are exact by construction: small integers
 * chosen so that every partial result of every combining order is exactly
 * representable in every datatype, int8 and bfloat16 included:
 *
 *   sum, avg  values 0..100/nranks, so any partial sum is <= 100
 *   prod      1 or 2, with at most six 2s per element across the ranks
 *   max, min  -50..50 (0..100 for unsigned types)
 *   data      -60..60 (0..120 unsigned) for collectives that move data
 *
 * so the expected result is computed here in double and compared bit for bit.
 * Avg expects the exact sum divided by nranks: integer division for integer
 * types, one correctly rounded division for floating types. The check also
 * counts elements of an out-of-place send buffer that changed and bytes
 * written in guard areas just before and after every buffer used.
 *
 * SendRecv has no in-place form in loom.h (a buffer both sent and received
 * in one group is a race), so its in-place columns read N/A.
 *
 * With -G 1 (the default where a GPU is usable) the buffers are CUDA device
 * memory, each rank on GPU LOOM_LOCAL_RANK modulo the GPUs it sees (several
 * ranks may share one), and -z 0 issues the calls on a CUDA stream wrapped
 * by loomStreamCreateCuda. The check fills host copies of the buffers and
 * their guards, copies them to the device, runs the call, and copies them
 * back. The tool loads the CUDA driver itself (dlopen, the library Loom
 * loads: LOOM_CUDA_LIB), so it needs no CUDA to build or to run with -G 0.
 */
#include <dlfcn.h>
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "loom.h"
#include "toolcomm.h"

#define GUARD_BYTES 256
#define SENTINEL_BYTE 0xa5
#define SUM_LIMIT 100 /* largest exact sum: fits int8, uint8, bf16 */
#define PROD_TWOS 6   /* 2^6 fits int8 */
#define MAX_OFFSET 4096
#define MISMATCH_REPORTS 10 /* detailed lines per rank */
#define EXIT_WRONG 1
#define EXIT_USAGE 2

enum valueKind { KIND_INT, KIND_UINT, KIND_HALF, KIND_BF16, KIND_FLOAT, KIND_DOUBLE };

struct typeInfo {
    const char *name;
    loomDataType_t type;
    size_t size;
    enum valueKind kind;
};

/* Indexed by loomDataType_t. */
static const struct typeInfo typeTable[loomNumTypes] = {
    {"int8", loomInt8, 1, KIND_INT},         {"uint8", loomUint8, 1, KIND_UINT},
    {"int32", loomInt32, 4, KIND_INT},       {"uint32", loomUint32, 4, KIND_UINT},
    {"int64", loomInt64, 8, KIND_INT},       {"uint64", loomUint64, 8, KIND_UINT},
    {"half", loomFloat16, 2, KIND_HALF},     {"float", loomFloat32, 4, KIND_FLOAT},
    {"double", loomFloat64, 8, KIND_DOUBLE}, {"bfloat16", loomBfloat16, 2, KIND_BF16},
};

static const char *const opNames[loomNumOps] = {"sum", "prod", "max", "min", "avg"};

enum coll {
    COLL_ALLREDUCE,
    COLL_ALLGATHER,
    COLL_REDUCESCATTER,
    COLL_BROADCAST,
    COLL_REDUCE,
    COLL_ALLTOALL,
    COLL_SENDRECV,
    COLL_COUNT
};

static const char *const collNames[COLL_COUNT] = {
    "allreduce", "allgather", "reducescatter", "broadcast", "reduce", "alltoall", "sendrecv",
};

struct options {
    int colls[COLL_COUNT];
    int nColls;
    int types[loomNumTypes];
    int nTypes;
    int ops[loomNumOps];
    int nOps;
    int root; /* -1: every rank in turn */
    uint64_t minBytes, maxBytes, stepBytes;
    double stepFactor; /* <= 1: add stepBytes instead */
    int iters, warmup, check, agg, blocking;
    int gpu; /* -G: 1 device buffers, 0 host, -1 not given (device if a GPU is usable) */
    size_t offset;
    int registered; /* -R: host buffers from loomMemAlloc */
};

/* The few CUDA driver functions loom-perf needs for device buffers (loaded at run time). */
struct gpu {
    int (*init)(unsigned int);
    int (*deviceGetCount)(int *);
    int (*deviceGet)(int *, int);
    int (*primaryCtxRetain)(void **, int);
    int (*ctxSetCurrent)(void *);
    int (*memAlloc)(uint64_t *, size_t);
    int (*memFree)(uint64_t);
    int (*memcpyHtoD)(uint64_t, const void *, size_t);
    int (*memcpyDtoH)(void *, uint64_t, size_t);
    int (*streamCreate)(void **, unsigned int);
    int (*streamDestroy)(void *);
    int device;
    void *stream; /* CUstream behind the Loom stream with -z 0 */
};

/* One line of the table: a collective at one size. */
struct test {
    enum coll coll;
    const struct typeInfo *type;
    int op;       /* loomRedOp_t, -1 when the collective does not reduce */
    int root;     /* -1 when it has none */
    size_t count; /* as passed to the call */
    size_t sendElems, recvElems;
    size_t bytes; /* the size column */
};

struct perf {
    struct options opt;
    loomComm_t comm;
    loomStream_t stream; /* NULL with -z 1 */
    int rank, nranks;
    char *sendBase, *recvBase; /* allocations: guard, offset, data, guard */
    char *send, *recv;         /* aligned start + offset */
    size_t allocBytes;         /* of each allocation */
    struct gpu *gpu;           /* device buffers (-G 1), else NULL */
    uint64_t devSend, devRecv; /* device mirrors of sendBase and recvBase */
    uint64_t *sizes;
    size_t nSizes;
    int64_t totalWrong, totalOob;
    double busbwSum;
    long busbwRows;
    int reportsLeft;
};

/* ---- fp16 and bf16, round to nearest even ------------------------------ */

static uint32_t floatBits(float f)
{
    uint32_t x;
    memcpy(&x, &f, sizeof(x));
    return x;
}

static float bitsFloat(uint32_t x)
{
    float f;
    memcpy(&f, &x, sizeof(f));
    return f;
}

static uint16_t floatToHalf(float f)
{
    uint32_t x = floatBits(f);
    uint16_t sign = (uint16_t)((x >> 16) & 0x8000);
    uint32_t a = x & 0x7fffffff;
    if (a >= 0x7f800000) { /* inf stays inf, NaN stays a quiet NaN */
        return sign | 0x7c00 | (a > 0x7f800000 ? 0x200 : 0);
    }
    if (a >= 0x47800000) { /* >= 65536: beyond rounding range */
        return sign | 0x7c00;
    }
    /* Below 2^-14 the result is a subnormal half, counted in units of 2^-24. */
    if (a < 0x38800000) {
        /* Below 2^-25 it rounds to 0; a tie at 2^-25 goes to the even 0 too. */
        if (a < 0x33000000) {
            return sign;
        }
        uint32_t m = (a & 0x7fffff) | 0x800000;
        int shift = 126 - (int)(a >> 23);
        uint32_t q = m >> shift, rem = m & ((1u << shift) - 1), halfway = 1u << (shift - 1);
        if (rem > halfway || (rem == halfway && (q & 1))) {
            q++;
        }
        return sign | (uint16_t)q;
    }
    uint32_t h = ((((a >> 23) - 127 + 15) << 10) | ((a & 0x7fffff) >> 13));
    uint32_t rem = a & 0x1fff;
    /* A carry out of the mantissa bumps the exponent, up to inf: still correct. */
    if (rem > 0x1000 || (rem == 0x1000 && (h & 1))) {
        h++;
    }
    return sign | (uint16_t)h;
}

static float halfToFloat(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000) << 16;
    uint32_t e = (h >> 10) & 0x1f, m = h & 0x3ff;
    if (e == 0) {
        float v = ldexpf((float)m, -24);
        return sign ? -v : v;
    }
    if (e == 31) {
        return bitsFloat(sign | 0x7f800000 | (m << 13));
    }
    return bitsFloat(sign | ((e - 15 + 127) << 23) | (m << 13));
}

static uint16_t floatToBf16(float f)
{
    uint32_t x = floatBits(f);
    if ((x & 0x7fffffff) > 0x7f800000) {
        return (uint16_t)((x >> 16) | 0x40);
    }
    return (uint16_t)((x + 0x7fff + ((x >> 16) & 1)) >> 16);
}

static float bf16ToFloat(uint16_t b)
{
    return bitsFloat((uint32_t)b << 16);
}

/* ---- values -------------------------------------------------------------- */

/* Writes v, an exact small value or a quotient, as one element of type t. */
static void encodeValue(const struct typeInfo *t, double v, void *out)
{
    union {
        int8_t i8;
        uint8_t u8;
        int32_t i32;
        uint32_t u32;
        int64_t i64;
        uint64_t u64;
        uint16_t h;
        float f;
        double d;
    } u;
    switch (t->type) {
    case loomInt8:
        u.i8 = (int8_t)v;
        break;
    case loomUint8:
        u.u8 = (uint8_t)v;
        break;
    case loomInt32:
        u.i32 = (int32_t)v;
        break;
    case loomUint32:
        u.u32 = (uint32_t)v;
        break;
    case loomInt64:
        u.i64 = (int64_t)v;
        break;
    case loomUint64:
        u.u64 = (uint64_t)v;
        break;
    /* Via float: double rounding from 53 to 24 to 11 (or 8) bits is exact for a quotient. */
    case loomFloat16:
        u.h = floatToHalf((float)v);
        break;
    case loomFloat32:
        u.f = (float)v;
        break;
    case loomFloat64:
        u.d = v;
        break;
    case loomBfloat16:
        u.h = floatToBf16((float)v);
        break;
    default:
        u.u64 = 0;
        break;
    }
    memcpy(out, &u, t->size);
}

/* Reads one element, for messages about wrong ones. */
static double decodeValue(const struct typeInfo *t, const void *in)
{
    union {
        int8_t i8;
        uint8_t u8;
        int32_t i32;
        uint32_t u32;
        int64_t i64;
        uint64_t u64;
        uint16_t h;
        float f;
        double d;
    } u;
    memcpy(&u, in, t->size);
    switch (t->type) {
    case loomInt8:
        return u.i8;
    case loomUint8:
        return u.u8;
    case loomInt32:
        return u.i32;
    case loomUint32:
        return u.u32;
    case loomInt64:
        return (double)u.i64;
    case loomUint64:
        return (double)u.u64;
    case loomFloat16:
        return halfToFloat(u.h);
    case loomFloat32:
        return u.f;
    case loomFloat64:
        return u.d;
    case loomBfloat16:
        return bf16ToFloat(u.h);
    default:
        return 0;
    }
}

static int isUnsigned(const struct typeInfo *t)
{
    return t->kind == KIND_UINT;
}

/* Rank r's element i for a reduction with op; see the header for the ranges. */
static double reduceInput(const struct perf *p, int op, const struct typeInfo *t, int r, size_t i)
{
    size_t n = (size_t)p->nranks, ur = (size_t)r;
    switch (op) {
    case loomSum:
    case loomAvg: {
        /* Beyond SUM_LIMIT ranks only SUM_LIMIT of them contribute to an element. */
        size_t active = n < SUM_LIMIT ? n : SUM_LIMIT;
        if (n > SUM_LIMIT && (i + ur) % n >= SUM_LIMIT) {
            return 0;
        }
        size_t maxv = SUM_LIMIT / active;
        return (double)((i * 13 + ur * 7) % (maxv + 1));
    }
    case loomProd:
        return ((i + ur) % n < PROD_TWOS && (i * 5 + ur * 3) % 4 != 0) ? 2 : 1;
    default: {
        double v = (double)((i * 29 + ur * 17) % 101);
        return isUnsigned(t) ? v : v - 50;
    }
    }
}

/* Rank r's element i for a collective that only moves data. */
static double dataInput(const struct typeInfo *t, int r, size_t i)
{
    double v = (double)((i * 31 + (size_t)r * 17 + 5) % 121);
    return isUnsigned(t) ? v : v - 60;
}

/* What element i of every rank's input combines into. */
static double reduceExpected(const struct perf *p, int op, const struct typeInfo *t, size_t i)
{
    double acc = reduceInput(p, op, t, 0, i);
    for (int r = 1; r < p->nranks; r++) {
        double v = reduceInput(p, op, t, r, i);
        switch (op) {
        case loomProd:
            acc *= v;
            break;
        case loomMax:
            acc = v > acc ? v : acc;
            break;
        case loomMin:
            acc = v < acc ? v : acc;
            break;
        default:
            acc += v;
            break;
        }
    }
    if (op == loomAvg) {
        if (t->kind == KIND_INT || t->kind == KIND_UINT) {
            acc = (double)((int64_t)acc / p->nranks);
        } else {
            acc /= p->nranks;
        }
    }
    return acc;
}

static int isReduction(enum coll c)
{
    return c == COLL_ALLREDUCE || c == COLL_REDUCE || c == COLL_REDUCESCATTER;
}

static int hasRoot(enum coll c)
{
    return c == COLL_BROADCAST || c == COLL_REDUCE;
}

static int hasInPlace(enum coll c)
{
    return c != COLL_SENDRECV;
}

/* Rank r's send element i. */
static double inputValue(const struct perf *p, const struct test *t, int r, size_t i)
{
    if (isReduction(t->coll)) {
        return reduceInput(p, t->op, t->type, r, i);
    }
    return dataInput(t->type, r, i);
}

/* Element j of this rank's receive buffer after the collective. */
static double expectedValue(const struct perf *p, const struct test *t, size_t j)
{
    size_t c = t->count, me = (size_t)p->rank;
    switch (t->coll) {
    case COLL_ALLREDUCE:
    case COLL_REDUCE:
        return reduceExpected(p, t->op, t->type, j);
    case COLL_REDUCESCATTER:
        return reduceExpected(p, t->op, t->type, me * c + j);
    case COLL_BROADCAST:
        return dataInput(t->type, t->root, j);
    case COLL_ALLGATHER:
        return dataInput(t->type, (int)(j / c), j % c);
    case COLL_ALLTOALL:
        return dataInput(t->type, (int)(j / c), me * c + j % c);
    case COLL_SENDRECV:
    default:
        return dataInput(t->type, (p->rank - 1 + p->nranks) % p->nranks, j);
    }
}

/* ---- errors and small helpers -------------------------------------------- */

static void perfCheck(const struct perf *p, loomResult_t r, const char *call)
{
    if (r == loomSuccess) {
        return;
    }
    fprintf(stderr, "loom-perf: rank %d: %s failed: %s: %s\n", p->rank, call, loomGetErrorString(r),
            loomGetLastError(p->comm));
    exit(EXIT_WRONG);
}

static double nowUs(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec * 1e-3;
}

static void barrier(struct perf *p)
{
    int32_t one = 1, sum;
    perfCheck(p, loomAllReduce(&one, &sum, 1, loomInt32, loomSum, p->comm, NULL),
              "loomAllReduce (barrier)");
}

static double busFactor(enum coll c, int n)
{
    switch (c) {
    case COLL_ALLREDUCE:
        return 2.0 * (n - 1) / n;
    case COLL_ALLGATHER:
    case COLL_REDUCESCATTER:
    case COLL_ALLTOALL:
        return (double)(n - 1) / n;
    default:
        return 1.0;
    }
}

/* ---- one collective call -------------------------------------------------- */

static loomResult_t issueOp(struct perf *p, const struct test *t, const void *sendbuff,
                            void *recvbuff)
{
    loomComm_t comm = p->comm;
    loomStream_t s = p->stream;
    loomDataType_t dt = t->type->type;
    switch (t->coll) {
    case COLL_ALLREDUCE:
        return loomAllReduce(sendbuff, recvbuff, t->count, dt, t->op, comm, s);
    case COLL_ALLGATHER:
        return loomAllGather(sendbuff, recvbuff, t->count, dt, comm, s);
    case COLL_REDUCESCATTER:
        return loomReduceScatter(sendbuff, recvbuff, t->count, dt, t->op, comm, s);
    case COLL_BROADCAST:
        return loomBroadcast(sendbuff, recvbuff, t->count, dt, t->root, comm, s);
    case COLL_REDUCE:
        return loomReduce(sendbuff, recvbuff, t->count, dt, t->op, t->root, comm, s);
    case COLL_ALLTOALL:
        return loomAlltoAll(sendbuff, recvbuff, t->count, dt, comm, s);
    case COLL_SENDRECV:
    default: {
        int next = (p->rank + 1) % p->nranks, prev = (p->rank - 1 + p->nranks) % p->nranks;
        loomResult_t r = loomGroupStart();
        if (r != loomSuccess) {
            return r;
        }
        loomResult_t rs = loomSend(sendbuff, t->count, dt, next, comm, s);
        loomResult_t rr = loomRecv(recvbuff, t->count, dt, prev, comm, s);
        r = loomGroupEnd();
        return rs != loomSuccess ? rs : (rr != loomSuccess ? rr : r);
    }
    }
}

/* The device address that mirrors host address h of one of the two allocations. */
static char *onDevice(const struct perf *p, const void *h)
{
    const char *c = h;
    if (c >= p->sendBase && c < p->sendBase + p->allocBytes) {
        return (char *)(uintptr_t)(p->devSend + (uint64_t)(c - p->sendBase));
    }
    return (char *)(uintptr_t)(p->devRecv + (uint64_t)(c - p->recvBase));
}

/* Runs one call; with -G 1 on the device mirrors of the host buffers given. */
static void runOp(struct perf *p, const struct test *t, const void *sendbuff, void *recvbuff)
{
    if (p->gpu != NULL) {
        sendbuff = onDevice(p, sendbuff);
        recvbuff = onDevice(p, recvbuff);
    }
    perfCheck(p, issueOp(p, t, sendbuff, recvbuff), collNames[t->coll]);
}

/* Copies the host allocation that holds region k of a layout to the device, or back. */
static void mirror(struct perf *p, char *base, int toDevice)
{
    uint64_t dev = base == p->sendBase ? p->devSend : p->devRecv;
    int r = toDevice ? p->gpu->memcpyHtoD(dev, base, p->allocBytes)
                     : p->gpu->memcpyDtoH(base, dev, p->allocBytes);
    if (r != 0) {
        fprintf(stderr, "loom-perf: rank %d: copying a buffer %s the GPU failed: CUDA error %d\n",
                p->rank, toDevice ? "to" : "from", r);
        exit(EXIT_WRONG);
    }
}

static void syncStream(struct perf *p)
{
    if (p->stream != NULL) {
        perfCheck(p, loomStreamSynchronize(p->stream), "loomStreamSynchronize");
    }
}

/*
 * The buffers of one mode. In place, everything lives in one allocation:
 * AllGather sends from its block of recvbuff, ReduceScatter receives into its
 * block of sendbuff, and the others use one buffer for both.
 */
struct layout {
    char *sendbuff, *recvbuff;
    char *regions[2]; /* the distinct buffers in use, for guards */
    char *bases[2];   /* their allocations */
    size_t regionBytes[2];
    int nRegions;
};

static void makeLayout(const struct perf *p, const struct test *t, int inPlace, struct layout *l)
{
    size_t ts = t->type->size;
    size_t sendBytes = t->sendElems * ts, recvBytes = t->recvElems * ts;
    if (!inPlace) {
        *l = (struct layout){p->send,
                             p->recv,
                             {p->send, p->recv},
                             {p->sendBase, p->recvBase},
                             {sendBytes, recvBytes},
                             2};
        return;
    }
    if (t->coll == COLL_REDUCESCATTER) {
        *l = (struct layout){p->send,         p->send + (size_t)p->rank * t->count * ts,
                             {p->send, NULL}, {p->sendBase, NULL},
                             {sendBytes, 0},  1};
        return;
    }
    char *send = p->recv;
    if (t->coll == COLL_ALLGATHER) {
        send = p->recv + (size_t)p->rank * t->count * ts;
    }
    size_t bytes = sendBytes > recvBytes ? sendBytes : recvBytes;
    *l = (struct layout){send, p->recv, {p->recv, NULL}, {p->recvBase, NULL}, {bytes, 0}, 1};
}

/* Guard bytes: a position-dependent pattern no collective writes by chance. */
static unsigned char guardByte(size_t k)
{
    return (unsigned char)(0xa7 ^ (k * 29));
}

static void guardFill(char *base, char *region, size_t bytes)
{
    size_t front = (size_t)(region - base);
    for (size_t k = 0; k < front; k++) {
        base[k] = (char)guardByte(k);
    }
    for (size_t k = 0; k < GUARD_BYTES; k++) {
        region[bytes + k] = (char)guardByte(k);
    }
}

static int64_t guardDamage(const char *base, const char *region, size_t bytes)
{
    int64_t bad = 0;
    size_t front = (size_t)(region - base);
    for (size_t k = 0; k < front; k++) {
        bad += (unsigned char)base[k] != guardByte(k);
    }
    for (size_t k = 0; k < GUARD_BYTES; k++) {
        bad += (unsigned char)region[bytes + k] != guardByte(k);
    }
    return bad;
}

static void reportMismatch(struct perf *p, const struct test *t, int inPlace, const char *what,
                           size_t j, const void *got, double want)
{
    if (p->reportsLeft <= 0) {
        return;
    }
    p->reportsLeft--;
    fprintf(stderr,
            "loom-perf: rank %d: %s %s %s root %d count %zu %s: %s[%zu] is %.9g, expected "
            "%.9g\n",
            p->rank, collNames[t->coll], t->type->name, t->op >= 0 ? opNames[t->op] : "none",
            t->root, t->count, inPlace ? "in-place" : "out-of-place", what, j,
            decodeValue(t->type, got), want);
}

/* Counts the elements of buf[0..n) that differ from value(first + j). */
static int64_t compareInput(struct perf *p, const struct test *t, int inPlace, const char *buf,
                            size_t n)
{
    size_t ts = t->type->size;
    unsigned char want[8];
    int64_t wrong = 0;
    for (size_t j = 0; j < n; j++) {
        double v = inputValue(p, t, p->rank, j);
        encodeValue(t->type, v, want);
        if (memcmp(buf + j * ts, want, ts) != 0) {
            if (wrong == 0) {
                reportMismatch(p, t, inPlace, "unchanged sendbuff", j, buf + j * ts, v);
            }
            wrong++;
        }
    }
    return wrong;
}

static int64_t compareOutput(struct perf *p, const struct test *t, int inPlace, const char *buf)
{
    size_t ts = t->type->size;
    unsigned char want[8];
    int64_t wrong = 0;
    for (size_t j = 0; j < t->recvElems; j++) {
        double v = expectedValue(p, t, j);
        encodeValue(t->type, v, want);
        if (memcmp(buf + j * ts, want, ts) != 0) {
            if (wrong == 0) {
                reportMismatch(p, t, inPlace, "recvbuff", j, buf + j * ts, v);
            }
            wrong++;
        }
    }
    return wrong;
}

/*
 * Runs the collective once on fresh inputs and counts wrong elements on this
 * rank; bytes written outside the buffers go to *oob (and count as wrong).
 */
static int64_t checkOnce(struct perf *p, const struct test *t, int inPlace, int64_t *oob)
{
    struct layout l;
    size_t ts = t->type->size;
    makeLayout(p, t, inPlace, &l);
    for (int k = 0; k < l.nRegions; k++) {
        memset(l.regions[k], SENTINEL_BYTE, l.regionBytes[k]);
        guardFill(l.bases[k], l.regions[k], l.regionBytes[k]);
    }
    for (size_t i = 0; i < t->sendElems; i++) {
        encodeValue(t->type, inputValue(p, t, p->rank, i), l.sendbuff + i * ts);
    }
    for (int k = 0; p->gpu != NULL && k < l.nRegions; k++) {
        mirror(p, l.bases[k], 1);
    }
    runOp(p, t, l.sendbuff, l.recvbuff);
    syncStream(p);
    for (int k = 0; p->gpu != NULL && k < l.nRegions; k++) {
        mirror(p, l.bases[k], 0);
    }

    int64_t wrong = 0;
    int isRootless = t->coll == COLL_REDUCE && p->rank != t->root;
    if (isRootless) {
        /* Reduce leaves a non-root's recvbuff alone; in place that is its sendbuff. */
        if (inPlace) {
            wrong += compareInput(p, t, inPlace, l.sendbuff, t->sendElems);
        }
    } else {
        wrong += compareOutput(p, t, inPlace, l.recvbuff);
    }
    if (!inPlace) {
        wrong += compareInput(p, t, inPlace, l.sendbuff, t->sendElems);
    }
    int64_t bad = 0;
    for (int k = 0; k < l.nRegions; k++) {
        bad += guardDamage(l.bases[k], l.regions[k], l.regionBytes[k]);
    }
    if (bad > 0 && p->reportsLeft > 0) {
        p->reportsLeft--;
        fprintf(stderr,
                "loom-perf: rank %d: %s %s count %zu %s: %" PRId64
                " bytes written outside the buffers\n",
                p->rank, collNames[t->coll], t->type->name, t->count,
                inPlace ? "in-place" : "out-of-place", bad);
    }
    *oob += bad;
    return wrong + bad;
}

/* Average time of one call in microseconds, on this rank. */
static double timeOps(struct perf *p, const struct test *t, int inPlace)
{
    struct layout l;
    makeLayout(p, t, inPlace, &l);
    for (int i = 0; i < p->opt.warmup; i++) {
        runOp(p, t, l.sendbuff, l.recvbuff);
    }
    syncStream(p);
    barrier(p);
    double start = nowUs();
    for (int i = 0; i < p->opt.iters; i++) {
        runOp(p, t, l.sendbuff, l.recvbuff);
    }
    syncStream(p);
    return (nowUs() - start) / p->opt.iters;
}

/* Combines the times of every rank as -a asks (only rank 0's result is used). */
static void aggregateTimes(struct perf *p, double times[2])
{
    static const loomRedOp_t aggOps[] = {loomSum, loomSum, loomMin, loomMax};
    if (p->opt.agg == 0) {
        return;
    }
    double in[2] = {times[0], times[1]};
    perfCheck(p, loomAllReduce(in, times, 2, loomFloat64, aggOps[p->opt.agg], p->comm, NULL),
              "loomAllReduce (times)");
    if (p->opt.agg == 1) {
        times[0] /= p->nranks;
        times[1] /= p->nranks;
    }
}

static void printModeColumns(struct perf *p, const struct test *t, int ran, double us,
                             int64_t wrong)
{
    if (!ran) {
        printf("  %9s  %7s  %7s  %6s", "N/A", "N/A", "N/A", "N/A");
        return;
    }
    double algbw = us > 0 ? (double)t->bytes / us / 1e3 : 0;
    double busbw = algbw * busFactor(t->coll, p->nranks);
    char wrongText[24];
    if (p->opt.check) {
        snprintf(wrongText, sizeof(wrongText), "%" PRId64, wrong);
    } else {
        snprintf(wrongText, sizeof(wrongText), "N/A");
    }
    printf("  %9.2f  %7.2f  %7.2f  %6s", us, algbw, busbw, wrongText);
    p->busbwSum += busbw;
    p->busbwRows++;
}

static void runTest(struct perf *p, const struct test *t)
{
    int modes = hasInPlace(t->coll) ? 2 : 1;
    double times[2] = {0, 0};
    int64_t counts[3] = {0, 0, 0}; /* wrong out of place, wrong in place, out of bounds */
    for (int m = 0; m < modes; m++) {
        if (p->opt.check) {
            counts[m] = checkOnce(p, t, m, &counts[2]);
        }
        times[m] = timeOps(p, t, m);
    }
    aggregateTimes(p, times);
    if (p->opt.check) {
        int64_t local[3] = {counts[0], counts[1], counts[2]};
        perfCheck(p, loomAllReduce(local, counts, 3, loomInt64, loomSum, p->comm, NULL),
                  "loomAllReduce (#wrong)");
        p->totalWrong += counts[0] + counts[1];
        p->totalOob += counts[2];
    }
    if (p->rank != 0) {
        return;
    }
    printf("%12zu  %12zu  %8s  %6s  %6d", t->bytes, t->count, t->type->name,
           t->op >= 0 ? opNames[t->op] : "none", t->root);
    printModeColumns(p, t, 1, times[0], counts[0]);
    printModeColumns(p, t, modes == 2, times[1], counts[1]);
    printf("\n");
    fflush(stdout);
}

/*
 * Counts from a size, as nccl-tests does: size is the largest buffer. Returns
 * 0 for sizes below one element, which are skipped; a count of 0 per rank is
 * still run.
 */
static int makeTest(const struct perf *p, enum coll c, const struct typeInfo *type, int op,
                    int root, uint64_t size, struct test *t)
{
    size_t ts = type->size, n = (size_t)p->nranks;
    if (size > 0 && size < ts) {
        return 0;
    }
    size_t elems = (size_t)(size / ts);
    *t = (struct test){c, type, op, root, 0, 0, 0, 0};
    switch (c) {
    case COLL_ALLGATHER:
        t->count = elems / n;
        t->sendElems = t->count;
        t->recvElems = t->count * n;
        break;
    case COLL_REDUCESCATTER:
        t->count = elems / n;
        t->sendElems = t->count * n;
        t->recvElems = t->count;
        break;
    case COLL_ALLTOALL:
        t->count = elems / n;
        t->sendElems = t->recvElems = t->count * n;
        break;
    default:
        t->count = t->sendElems = t->recvElems = elems;
        break;
    }
    t->bytes = (t->sendElems > t->recvElems ? t->sendElems : t->recvElems) * ts;
    return 1;
}

static void runSection(struct perf *p, enum coll c, const struct typeInfo *type, int op, int root,
                       int announce)
{
    if (announce && p->rank == 0) {
        printf("# %s  type %s  redop %s  root %d\n", collNames[c], type->name,
               op >= 0 ? opNames[op] : "none", root);
    }
    for (size_t s = 0; s < p->nSizes; s++) {
        struct test t;
        if (makeTest(p, c, type, op, root, p->sizes[s], &t)) {
            runTest(p, &t);
        }
    }
}

/* ---- options --------------------------------------------------------------- */

/*
 * The options in the order nccl-tests' -h lists its own, with the same letters
 * and meanings; the ones nccl-tests does not have, or gives another meaning,
 * come last, marked [Loom].
 */
static void usage(FILE *f)
{
    fprintf(f, "usage: loom-perf [options]                 one rank, no launcher\n"
               "       loomrun -n N loom-perf [options]    N ranks (or mpirun, srun)\n"
               "  -b bytes   smallest size (32M); K, M, G suffixes are powers of 1024\n"
               "  -e bytes   largest size (32M)\n"
               "  -i bytes   add bytes to the size between lines when -f is not given (1M)\n"
               "  -f factor  multiply the size by factor between lines\n"
               "  -n iters   timed iterations per size (20)\n"
               "  -w iters   warmup iterations per size (5)\n"
               "  -c 0|1     check the results (1)\n"
               "  -o op      sum|prod|max|min|avg|all (sum)\n"
               "  -d type    int8|uint8|int32|uint32|int64|uint64|half|float16|float|float32|\n"
               "             double|float64|bfloat16|all (float)\n"
               "  -r root    root of broadcast and reduce, or all (0)\n"
               "  -z 0|1     1: blocking calls (NULL stream); 0: calls on a stream, a CUDA stream\n"
               "             with -G 1 (0)\n"
               "  -a 0..3    time across ranks: 0 rank 0, 1 average, 2 min, 3 max (1)\n"
               "  -R 0|1     1: host buffers from loomMemAlloc, which peers on the host map for\n"
               "             single copies; 0: ordinary memory (0)\n"
               "  -h         this help\n"
               "Loom's own (nccl-tests has one binary per collective, and -C, -G other meanings):\n"
               "  -C coll    [Loom] allreduce|allgather|reducescatter|broadcast|reduce|alltoall|\n"
               "             sendrecv|all (allreduce)\n"
               "  -G 0|1     [Loom] 1: CUDA device buffers; 0: host buffers (1 where a GPU is\n"
               "             usable)\n"
               "  -O bytes   [Loom] misalign both buffers by this many bytes (0)\n");
}

/*
 * Every rank parses the same options, so every rank meets the same error; each
 * says so in one line, since loomrun may stop the others before they print.
 */
static int usageError(const char *what, const char *arg)
{
    if (arg != NULL) {
        fprintf(stderr, "loom-perf: %s '%s'; loom-perf -h lists the options\n", what, arg);
    } else {
        fprintf(stderr, "loom-perf: %s; loom-perf -h lists the options\n", what);
    }
    return EXIT_USAGE;
}

static int parseBytes(const char *s, uint64_t *out)
{
    char *end;
    errno = 0;
    if (*s == '-') {
        return -1;
    }
    unsigned long long v = strtoull(s, &end, 10);
    if (errno != 0 || end == s) {
        return -1;
    }
    int shift = 0;
    switch (*end) {
    case 'k':
    case 'K':
        shift = 10;
        end++;
        break;
    case 'm':
    case 'M':
        shift = 20;
        end++;
        break;
    case 'g':
    case 'G':
        shift = 30;
        end++;
        break;
    default:
        break;
    }
    if (*end != '\0' || (shift > 0 && v > (UINT64_MAX >> shift))) {
        return -1;
    }
    *out = (uint64_t)v << shift;
    return 0;
}

static int parseInt(const char *s, long lo, long hi, int *out)
{
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno != 0 || end == s || *end != '\0' || v < lo || v > hi) {
        return -1;
    }
    *out = (int)v;
    return 0;
}

static int parseColl(const char *s, struct options *o)
{
    o->nColls = 0;
    for (int c = 0; c < COLL_COUNT; c++) {
        if (strcmp(s, "all") == 0 || strcmp(s, collNames[c]) == 0) {
            o->colls[o->nColls++] = c;
        }
    }
    return o->nColls > 0 ? 0 : -1;
}

static int parseType(const char *s, struct options *o)
{
    static const struct {
        const char *alias, *name;
    } aliases[] = {{"float16", "half"}, {"float32", "float"}, {"float64", "double"}};
    for (size_t a = 0; a < sizeof(aliases) / sizeof(aliases[0]); a++) {
        if (strcmp(s, aliases[a].alias) == 0) {
            s = aliases[a].name;
        }
    }
    o->nTypes = 0;
    for (int d = 0; d < loomNumTypes; d++) {
        if (strcmp(s, "all") == 0 || strcmp(s, typeTable[d].name) == 0) {
            o->types[o->nTypes++] = d;
        }
    }
    return o->nTypes > 0 ? 0 : -1;
}

static int parseOp(const char *s, struct options *o)
{
    o->nOps = 0;
    for (int op = 0; op < loomNumOps; op++) {
        if (strcmp(s, "all") == 0 || strcmp(s, opNames[op]) == 0) {
            o->ops[o->nOps++] = op;
        }
    }
    return o->nOps > 0 ? 0 : -1;
}

static int parseOptions(int argc, char **argv, struct options *o)
{
    *o = (struct options){.colls = {COLL_ALLREDUCE},
                          .nColls = 1,
                          .types = {loomFloat32},
                          .nTypes = 1,
                          .ops = {loomSum},
                          .nOps = 1,
                          .root = 0,
                          .minBytes = 32 << 20,
                          .maxBytes = 32 << 20,
                          .stepBytes = 1 << 20,
                          .stepFactor = 1,
                          .iters = 20,
                          .warmup = 5,
                          .check = 1,
                          .agg = 1,
                          .blocking = 0,
                          .gpu = -1,
                          .offset = 0};
    int c, v;
    char *end;
    opterr = 0;
    while ((c = getopt(argc, argv, "C:b:e:f:i:n:w:c:o:d:r:a:z:G:O:R:h")) != -1) {
        switch (c) {
        case 'C':
            if (parseColl(optarg, o) != 0) {
                return usageError("unknown collective", optarg);
            }
            break;
        case 'b':
        case 'e':
        case 'i':
            if (parseBytes(optarg, c == 'b'   ? &o->minBytes
                                   : c == 'e' ? &o->maxBytes
                                              : &o->stepBytes) != 0) {
                return usageError("not a size in bytes", optarg);
            }
            break;
        case 'f':
            errno = 0;
            o->stepFactor = strtod(optarg, &end);
            if (errno != 0 || end == optarg || *end != '\0' || !(o->stepFactor >= 1) ||
                !isfinite(o->stepFactor)) {
                return usageError("-f wants a factor >= 1, not", optarg);
            }
            break;
        case 'n':
            if (parseInt(optarg, 1, 1000000000, &o->iters) != 0) {
                return usageError("-n wants a number of iterations >= 1, not", optarg);
            }
            break;
        case 'w':
            if (parseInt(optarg, 0, 1000000000, &o->warmup) != 0) {
                return usageError("-w wants a number of iterations >= 0, not", optarg);
            }
            break;
        case 'c':
            if (parseInt(optarg, 0, 1, &o->check) != 0) {
                return usageError("-c wants 0 or 1, not", optarg);
            }
            break;
        case 'o':
            if (parseOp(optarg, o) != 0) {
                return usageError("unknown reduction operation", optarg);
            }
            break;
        case 'd':
            if (parseType(optarg, o) != 0) {
                return usageError("unknown datatype", optarg);
            }
            break;
        case 'r':
            if (strcmp(optarg, "all") == 0) {
                o->root = -1;
            } else if (parseInt(optarg, 0, 1 << 30, &o->root) != 0) {
                return usageError("-r wants a rank or all, not", optarg);
            }
            break;
        case 'a':
            if (parseInt(optarg, 0, 3, &o->agg) != 0) {
                return usageError("-a wants 0, 1, 2 or 3, not", optarg);
            }
            break;
        case 'z':
            if (parseInt(optarg, 0, 1, &o->blocking) != 0) {
                return usageError("-z wants 0 or 1, not", optarg);
            }
            break;
        case 'G':
            if (parseInt(optarg, 0, 1, &o->gpu) != 0) {
                return usageError("-G wants 0 or 1, not", optarg);
            }
            break;
        case 'O':
            if (parseInt(optarg, 0, MAX_OFFSET, &v) != 0) {
                return usageError("-O wants a byte offset from 0 to 4096, not", optarg);
            }
            o->offset = (size_t)v;
            break;
        case 'R':
            if (parseInt(optarg, 0, 1, &o->registered) != 0) {
                return usageError("-R wants 0 or 1, not", optarg);
            }
            break;
        case 'h':
            usage(stdout);
            exit(0);
        default: {
            char opt[3] = {'-', (char)optopt, '\0'};
            return usageError("unknown option or missing value", opt);
        }
        }
    }
    if (optind < argc) {
        return usageError("unexpected argument", argv[optind]);
    }
    if (o->minBytes > o->maxBytes) {
        return usageError("-b is larger than -e", NULL);
    }
    if (o->stepFactor <= 1 && o->stepBytes == 0 && o->minBytes < o->maxBytes) {
        return usageError("-i 0 never reaches -e; give -i > 0 or -f", NULL);
    }
    return 0;
}

/* ---- device buffers ------------------------------------------------------------ */

/* The CUDA driver Loom loads (its LOOM_CUDA_LIB parameter), so both agree on the driver. */
static const char *cudaLibName(void)
{
    for (int i = 0; i < loomParamCount(); i++) {
        loomParamInfo_t info;
        if (loomParamGet(i, &info) == loomSuccess && strcmp(info.name, "LOOM_CUDA_LIB") == 0) {
            return info.value;
        }
    }
    return "libcuda.so.1";
}

/* This rank's GPU among those it sees: its rank on the host, as the launcher says. */
static int localRank(void)
{
    static const char *const vars[] = {"LOOM_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_RANK",
                                       "SLURM_LOCALID"};
    for (size_t i = 0; i < sizeof(vars) / sizeof(vars[0]); i++) {
        const char *v = getenv(vars[i]);
        if (v != NULL && *v != '\0') {
            return atoi(v);
        }
    }
    return 0;
}

/*
 * Loads the driver and makes this rank's GPU current (before the communicator
 * is created, so that Loom binds it to that GPU). NULL, with *why, when no
 * GPU is usable.
 */
static struct gpu *gpuOpen(const char **why)
{
    static struct gpu g;
    static const struct {
        const char *name;
        size_t offset;
    } syms[] = {
        {"cuInit", offsetof(struct gpu, init)},
        {"cuDeviceGetCount", offsetof(struct gpu, deviceGetCount)},
        {"cuDeviceGet", offsetof(struct gpu, deviceGet)},
        {"cuDevicePrimaryCtxRetain", offsetof(struct gpu, primaryCtxRetain)},
        {"cuCtxSetCurrent", offsetof(struct gpu, ctxSetCurrent)},
        {"cuMemAlloc_v2", offsetof(struct gpu, memAlloc)},
        {"cuMemFree_v2", offsetof(struct gpu, memFree)},
        {"cuMemcpyHtoD_v2", offsetof(struct gpu, memcpyHtoD)},
        {"cuMemcpyDtoH_v2", offsetof(struct gpu, memcpyDtoH)},
        {"cuStreamCreate", offsetof(struct gpu, streamCreate)},
        {"cuStreamDestroy_v2", offsetof(struct gpu, streamDestroy)},
    };
    void *h = dlopen(cudaLibName(), RTLD_NOW | RTLD_LOCAL);
    int n = 0, dev, ctxDev;
    void *ctx;
    if (h == NULL) {
        *why = "the CUDA driver cannot be loaded (no NVIDIA driver here?)";
        return NULL;
    }
    for (size_t i = 0; i < sizeof(syms) / sizeof(syms[0]); i++) {
        void *f = dlsym(h, syms[i].name);
        if (f == NULL) {
            *why = "the CUDA driver is too old";
            return NULL;
        }
        memcpy((char *)&g + syms[i].offset, &f, sizeof(f));
    }
    if (g.init(0) != 0 || g.deviceGetCount(&n) != 0 || n < 1) {
        *why = "the CUDA driver finds no GPU";
        return NULL;
    }
    dev = localRank() % n;
    if (g.deviceGet(&ctxDev, dev) != 0 || g.primaryCtxRetain(&ctx, ctxDev) != 0 ||
        g.ctxSetCurrent(ctx) != 0) {
        *why = "the GPU cannot be used (cuDevicePrimaryCtxRetain failed)";
        return NULL;
    }
    g.device = dev;
    return &g;
}

/* Device mirrors of the two host allocations. */
static int gpuBuffers(struct perf *p)
{
    p->devSend = p->devRecv = 0;
    return p->gpu->memAlloc(&p->devSend, p->allocBytes) != 0 ||
                   p->gpu->memAlloc(&p->devRecv, p->allocBytes) != 0
               ? -1
               : 0;
}

/* ---- setup and output -------------------------------------------------------- */

static int makeSizes(struct perf *p)
{
    const struct options *o = &p->opt;
    size_t cap = 16;
    p->sizes = malloc(cap * sizeof(*p->sizes));
    if (p->sizes == NULL) {
        return -1;
    }
    for (uint64_t size = o->minBytes;;) {
        if (p->nSizes == cap) {
            cap *= 2;
            uint64_t *s = realloc(p->sizes, cap * sizeof(*s));
            if (s == NULL) {
                return -1;
            }
            p->sizes = s;
        }
        p->sizes[p->nSizes++] = size;
        double nextD =
            o->stepFactor > 1 ? (double)size * o->stepFactor : (double)size + (double)o->stepBytes;
        if (nextD > (double)o->maxBytes) {
            break;
        }
        uint64_t next = (uint64_t)nextD;
        size = next > size ? next : size + 1;
    }
    return 0;
}

/* Room for the front guard, the offset, the largest size and the back guard. */
static char *allocBuffer(struct perf *p, char **start)
{
    void *base = NULL;
    size_t front = 64;
    size_t total = front + p->opt.offset + (size_t)p->opt.maxBytes + GUARD_BYTES;
    p->allocBytes = total;
    if (p->opt.registered) {
        if (loomMemAlloc(&base, total, p->comm) != loomSuccess) {
            fprintf(stderr, "loom-perf: rank %d: loomMemAlloc: %s\n", p->rank,
                    loomGetLastError(p->comm));
            return NULL;
        }
    } else if (posix_memalign(&base, 4096, total) != 0) {
        return NULL;
    }
    memset(base, 0, total);
    *start = (char *)base + front + p->opt.offset;
    return base;
}

struct rankInfo {
    int32_t rank;
    int32_t pid;
    int32_t gpu; /* -1: host buffers */
    char host[52];
};

static void printHeader(struct perf *p)
{
    const struct options *o = &p->opt;
    struct rankInfo me = {
        .rank = p->rank, .pid = (int32_t)getpid(), .gpu = p->gpu ? p->gpu->device : -1};
    gethostname(me.host, sizeof(me.host) - 1);
    struct rankInfo *all = calloc((size_t)p->nranks, sizeof(*all));
    if (all == NULL) {
        fprintf(stderr, "loom-perf: out of memory\n");
        exit(EXIT_WRONG);
    }
    perfCheck(p, loomAllGather(&me, all, sizeof(me), loomUint8, p->comm, NULL),
              "loomAllGather (rank info)");
    if (p->rank == 0) {
        static const char *const aggNames[] = {"rank 0", "average", "min", "max"};
        char root[16];
        if (o->root < 0) {
            snprintf(root, sizeof(root), "all");
        } else {
            snprintf(root, sizeof(root), "%d", o->root);
        }
        printf("# loom-perf  nranks %d  collective %s  datatype %s  redop %s  root %s\n", p->nranks,
               o->nColls > 1 ? "all" : collNames[o->colls[0]],
               o->nTypes > 1 ? "all" : typeTable[o->types[0]].name,
               o->nOps > 1 ? "all" : opNames[o->ops[0]], root);
        printf("# minBytes %" PRIu64 " maxBytes %" PRIu64 " step: %g(%s) warmup iters: %d "
               "iters: %d validation: %d blocking: %d offset: %zu time: %s buffers: %s\n",
               o->minBytes, o->maxBytes, o->stepFactor > 1 ? o->stepFactor : (double)o->stepBytes,
               o->stepFactor > 1 ? "factor" : "bytes", o->warmup, o->iters, o->check, o->blocking,
               o->offset, aggNames[o->agg], p->gpu ? "device" : "host");
        printf("#\n");
        for (int r = 0; r < p->nranks; r++) {
            all[r].host[sizeof(all[r].host) - 1] = '\0';
            printf("#  Rank %2d Pid %6d on %s", all[r].rank, all[r].pid, all[r].host);
            if (all[r].gpu >= 0) {
                printf(" GPU %d", all[r].gpu);
            }
            printf("\n");
        }
        printf("#\n");
        printf("%-52s  %37s  %37s\n", "#", "out-of-place            ", "in-place            ");
        printf("# %10s  %12s  %8s  %6s  %6s  %9s  %7s  %7s  %6s  %9s  %7s  %7s  %6s\n", "size",
               "count", "type", "redop", "root", "time", "algbw", "busbw", "#wrong", "time",
               "algbw", "busbw", "#wrong");
        printf("# %10s  %12s  %8s  %6s  %6s  %9s  %7s  %7s  %6s  %9s  %7s  %7s  %6s\n", "(B)",
               "(elements)", "", "", "", "(us)", "(GB/s)", "(GB/s)", "", "(us)", "(GB/s)", "(GB/s)",
               "");
        fflush(stdout);
    }
    free(all);
}

static void runAll(struct perf *p)
{
    const struct options *o = &p->opt;
    int nRoots = o->root < 0 ? p->nranks : 1;
    long sections = 0;
    for (int ci = 0; ci < o->nColls; ci++) {
        enum coll c = (enum coll)o->colls[ci];
        sections += (long)o->nTypes * (isReduction(c) ? o->nOps : 1) * (hasRoot(c) ? nRoots : 1);
    }
    for (int ci = 0; ci < o->nColls; ci++) {
        enum coll c = (enum coll)o->colls[ci];
        for (int ti = 0; ti < o->nTypes; ti++) {
            int nOps = isReduction(c) ? o->nOps : 1;
            for (int oi = 0; oi < nOps; oi++) {
                int op = isReduction(c) ? o->ops[oi] : -1;
                for (int ri = 0; ri < (hasRoot(c) ? nRoots : 1); ri++) {
                    int root = !hasRoot(c) ? -1 : (o->root < 0 ? ri : o->root);
                    runSection(p, c, &typeTable[o->types[ti]], op, root, sections > 1);
                }
            }
        }
    }
}

int main(int argc, char **argv)
{
    struct perf p = {.reportsLeft = MISMATCH_REPORTS};
    int rc = parseOptions(argc, argv, &p.opt);
    const char *why = NULL;
    if (rc != 0) {
        return rc;
    }
    if (p.opt.gpu != 0 && (p.gpu = gpuOpen(&why)) == NULL && p.opt.gpu == 1) {
        fprintf(stderr, "loom-perf: -G 1: %s\n", why);
        return EXIT_USAGE;
    }
    if (toolCommInit(&argc, &argv, "loom-perf", &p.comm) != loomSuccess) {
        toolCommFinalize();
        return EXIT_WRONG;
    }
    perfCheck(&p, loomCommCount(p.comm, &p.nranks), "loomCommCount");
    perfCheck(&p, loomCommUserRank(p.comm, &p.rank), "loomCommUserRank");
    if (p.opt.root >= p.nranks) {
        fprintf(stderr, "loom-perf: rank %d: -r %d is not a rank of this %d-rank job\n", p.rank,
                p.opt.root, p.nranks);
        loomCommDestroy(p.comm);
        toolCommFinalize();
        return EXIT_USAGE;
    }
    if (makeSizes(&p) != 0 || (p.sendBase = allocBuffer(&p, &p.send)) == NULL ||
        (p.recvBase = allocBuffer(&p, &p.recv)) == NULL) {
        fprintf(stderr, "loom-perf: rank %d: cannot allocate 2 buffers of %" PRIu64 " bytes\n",
                p.rank, p.opt.maxBytes);
        return EXIT_WRONG;
    }
    if (p.gpu != NULL && gpuBuffers(&p) != 0) {
        fprintf(stderr, "loom-perf: rank %d: cannot allocate 2 buffers of %zu bytes on GPU %d\n",
                p.rank, p.allocBytes, p.gpu->device);
        return EXIT_WRONG;
    }
    if (!p.opt.blocking && p.gpu != NULL) {
        if (p.gpu->streamCreate(&p.gpu->stream, 1 /* CU_STREAM_NON_BLOCKING */) != 0) {
            fprintf(stderr, "loom-perf: rank %d: cannot create a CUDA stream\n", p.rank);
            return EXIT_WRONG;
        }
        perfCheck(&p, loomStreamCreateCuda(&p.stream, p.gpu->stream), "loomStreamCreateCuda");
    } else if (!p.opt.blocking) {
        perfCheck(&p, loomStreamCreate(&p.stream), "loomStreamCreate");
    }
    printHeader(&p);
    runAll(&p);
    if (p.rank == 0) {
        printf("# Out of bounds values : %" PRId64 " %s\n", p.totalOob,
               p.totalOob == 0 ? "OK" : "FAILED");
        printf("# Avg bus bandwidth    : %g \n", p.busbwRows > 0 ? p.busbwSum / p.busbwRows : 0);
        printf("#\n");
        if (p.totalWrong > 0) {
            printf("# %" PRId64 " wrong values: FAILED\n", p.totalWrong);
        }
        fflush(stdout);
    }
    if (p.stream != NULL) {
        perfCheck(&p, loomStreamDestroy(p.stream), "loomStreamDestroy");
    }
    perfCheck(&p, loomCommFinalize(p.comm), "loomCommFinalize");
    perfCheck(&p, loomCommDestroy(p.comm), "loomCommDestroy");
    if (p.gpu != NULL) {
        if (p.gpu->stream != NULL) {
            p.gpu->streamDestroy(p.gpu->stream);
        }
        p.gpu->memFree(p.devSend);
        p.gpu->memFree(p.devRecv);
    }
    toolCommFinalize();
    if (p.opt.registered) {
        loomMemFree(p.sendBase);
        loomMemFree(p.recvBase);
    } else {
        free(p.sendBase);
        free(p.recvBase);
    }
    free(p.sizes);
    return p.totalWrong > 0 || p.totalOob > 0 ? EXIT_WRONG : 0;
}
