/*
 * enqueue.c — API entry for collectives and point-to-point: check the
 * arguments, capture the operation, and run it (now, at group end, or on a
 * stream); and the plan:
 *
 *   operations -> tuner (algorithm, chunk, lanes) -> scratch -> schedules
 *              -> lanes -> execRun
 *
 * Schedules depend only on (collective, algorithm, count, element size, root
 * or peer, lane range, chunk), never on buffer addresses, so each
 * communicator caches the ones it built: a repeated call builds nothing and
 * allocates nothing. AlltoAllv (per-call counts) uses a pool of reusable
 * schedules instead. Scratch that the lanes of a plan read or write (an
 * in-place AlltoAll's staged input) is laid out op by op in one
 * per-communicator area, sized before any pointer into it is handed out.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cma.h"
#include "cudacore.h"
#include "debug.h"
#include "enqueue.h"
#include "exec.h"
#include "interp.h"
#include "kexec.h"
#include "param.h"
#include "reduce.h"
#include "topo.h"
#include "tuner.h"

/* ---- argument checks ---- */

static int collReduces(loomColl_t c)
{
    return c == LOOM_COLL_REDUCE || c == LOOM_COLL_ALLREDUCE || c == LOOM_COLL_REDUCESCATTER;
}

/* Elements of the largest of the op's buffers, in units of count. */
static size_t collBlocks(const struct loomOp *op)
{
    switch (op->coll) {
    case LOOM_COLL_ALLGATHER:
    case LOOM_COLL_REDUCESCATTER:
    case LOOM_COLL_ALLTOALL:
        return (size_t)op->comm->nranks;
    default:
        return 1;
    }
}

static loomResult_t checkBuffers(const struct loomOp *op, const char *fn)
{
    int me = op->comm->rank;
    int needSend =
        op->coll != LOOM_COLL_RECV && (op->coll != LOOM_COLL_BROADCAST || op->root == me);
    int needRecv = op->coll != LOOM_COLL_SEND && (op->coll != LOOM_COLL_REDUCE || op->root == me);
    if (op->count == 0)
        return loomSuccess;
    if (needSend && op->sendbuff == NULL)
        return loomSetError(loomInvalidArgument, "%s: sendbuff is NULL with count %zu", fn,
                            op->count);
    if (needRecv && op->recvbuff == NULL)
        return loomSetError(loomInvalidArgument, "%s: recvbuff is NULL with count %zu", fn,
                            op->count);
    return loomSuccess;
}

static loomResult_t checkCounts(const struct loomOp *op, const char *fn)
{
    size_t es = reduceTypeSize(op->dt), blocks = collBlocks(op);
    if (op->count > (size_t)PTRDIFF_MAX / es / blocks)
        return loomSetError(loomInvalidArgument,
                            "%s: count %zu of %s (x %zu blocks) overflows the address space", fn,
                            op->count, reduceTypeName(op->dt), blocks);
    return loomSuccess;
}

static loomResult_t checkAlltoAllv(const struct loomOp *op, const char *fn)
{
    const size_t *v = op->v;
    size_t n = (size_t)op->comm->nranks, es = reduceTypeSize(op->dt);
    size_t sendEnd = 0, recvEnd = 0;
    for (size_t p = 0; p < n; p++) {
        for (int k = 0; k < 4; k += 2) {
            size_t c = v[k * n + p], d = v[(k + 1) * n + p];
            if (c > (size_t)PTRDIFF_MAX / es || d > (size_t)PTRDIFF_MAX / es - c)
                return loomSetError(loomInvalidArgument,
                                    "%s: %s[%zu] = %zu with displacement %zu overflows", fn,
                                    k ? "recvcounts" : "sendcounts", p, c, d);
            if (c)
                *(k ? &recvEnd : &sendEnd) =
                    c + d > *(k ? &recvEnd : &sendEnd) ? c + d : *(k ? &recvEnd : &sendEnd);
        }
    }
    if (v[op->comm->rank] != v[2 * n + op->comm->rank])
        return loomSetError(
            loomInvalidArgument, "%s: sendcounts[%d] = %zu differs from recvcounts[%d] = %zu", fn,
            op->comm->rank, v[op->comm->rank], op->comm->rank, v[2 * n + op->comm->rank]);
    if (sendEnd && op->sendbuff == NULL)
        return loomSetError(loomInvalidArgument, "%s: sendbuff is NULL with data to send", fn);
    if (recvEnd && op->recvbuff == NULL)
        return loomSetError(loomInvalidArgument, "%s: recvbuff is NULL with data to receive", fn);
    const char *s = op->sendbuff, *r = op->recvbuff;
    if (sendEnd && recvEnd && s < r + recvEnd * es && r < s + sendEnd * es)
        return loomSetError(loomInvalidArgument,
                            "%s: sendbuff and recvbuff overlap (AlltoAllv is not in place)", fn);
    return loomSuccess;
}

static loomResult_t opCheck(const struct loomOp *op, const char *fn)
{
    LOOMCHECK(commCheck(op->comm, fn));
    LOOMCHECK(commCheckReady(op->comm, fn));
    if ((unsigned)op->dt >= loomNumTypes)
        return loomSetError(loomInvalidArgument, "%s: datatype %d is not a loomDataType_t (0..%d)",
                            fn, (int)op->dt, loomNumTypes - 1);
    if (collReduces(op->coll) && (unsigned)op->op >= loomNumOps)
        return loomSetError(loomInvalidArgument, "%s: op %d is not a loomRedOp_t (0..%d)", fn,
                            (int)op->op, loomNumOps - 1);
    if ((op->coll == LOOM_COLL_BROADCAST || op->coll == LOOM_COLL_REDUCE) &&
        (op->root < 0 || op->root >= op->comm->nranks))
        return loomSetError(loomInvalidArgument,
                            "%s: root %d is out of range for a communicator of %d ranks", fn,
                            op->root, op->comm->nranks);
    if ((op->coll == LOOM_COLL_SEND || op->coll == LOOM_COLL_RECV) &&
        (op->root < 0 || op->root >= op->comm->nranks))
        return loomSetError(loomInvalidArgument,
                            "%s: peer %d is out of range for a communicator of %d ranks", fn,
                            op->root, op->comm->nranks);
    if (op->stream)
        LOOMCHECK(streamCheck(op->stream, fn));
    if (op->coll == LOOM_COLL_ALLTOALLV) {
        LOOMCHECK(checkAlltoAllv(op, fn));
    } else {
        LOOMCHECK(checkCounts(op, fn));
        LOOMCHECK(checkBuffers(op, fn));
    }
    return cudaOpCheck(op, fn);
}

/* ---- entry ---- */

static loomResult_t opSubmit(struct loomOp *op)
{
    if (groupActive())
        return groupAdd(op);
    if (op->stream)
        return streamEnqueue(op->stream, op, 1);
    if (op->comm->queue) { /* non-blocking mode: the comm's own stream runs it */
        loomResult_t queued = streamEnqueue(op->comm->queue, op, 1);
        return queued == loomSuccess ? loomInProgress : queued;
    }
    loomResult_t res = planExecute(op, 1);
    opRelease(op);
    return res;
}

static loomResult_t opIssue(struct loomOp *op)
{
    const char *fn = loomCollName(op->coll);
    loomResult_t res = opCheck(op, fn);
    if (res != loomSuccess) {
        if (commIsLive(op->comm))
            commRecordError(op->comm);
        if (groupActive())
            groupRecordError(res);
        opRelease(op);
        return res;
    }
    atomic_fetch_add_explicit(&op->comm->activeCalls, 1, memory_order_acq_rel);
    res = opSubmit(op);
    if (res != loomSuccess && res != loomInProgress)
        commRecordError(op->comm);
    atomic_fetch_sub_explicit(&op->comm->activeCalls, 1, memory_order_acq_rel);
    return res;
}

loomResult_t loomAllReduce(const void *sendbuff, void *recvbuff, size_t count,
                           loomDataType_t datatype, loomRedOp_t op, loomComm_t comm,
                           loomStream_t stream)
{
    struct loomOp o = {
        LOOM_COLL_ALLREDUCE, sendbuff, recvbuff, count, datatype, op, 0, comm, stream, NULL};
    return opIssue(&o);
}

loomResult_t loomBroadcast(const void *sendbuff, void *recvbuff, size_t count,
                           loomDataType_t datatype, int root, loomComm_t comm, loomStream_t stream)
{
    struct loomOp o = {LOOM_COLL_BROADCAST,
                       sendbuff,
                       recvbuff,
                       count,
                       datatype,
                       loomSum,
                       root,
                       comm,
                       stream,
                       NULL};
    return opIssue(&o);
}

loomResult_t loomReduce(const void *sendbuff, void *recvbuff, size_t count, loomDataType_t datatype,
                        loomRedOp_t op, int root, loomComm_t comm, loomStream_t stream)
{
    struct loomOp o = {LOOM_COLL_REDUCE, sendbuff, recvbuff, count, datatype, op, root, comm,
                       stream,           NULL};
    return opIssue(&o);
}

loomResult_t loomAllGather(const void *sendbuff, void *recvbuff, size_t sendcount,
                           loomDataType_t datatype, loomComm_t comm, loomStream_t stream)
{
    struct loomOp o = {LOOM_COLL_ALLGATHER,
                       sendbuff,
                       recvbuff,
                       sendcount,
                       datatype,
                       loomSum,
                       0,
                       comm,
                       stream,
                       NULL};
    return opIssue(&o);
}

loomResult_t loomReduceScatter(const void *sendbuff, void *recvbuff, size_t recvcount,
                               loomDataType_t datatype, loomRedOp_t op, loomComm_t comm,
                               loomStream_t stream)
{
    struct loomOp o = {LOOM_COLL_REDUCESCATTER,
                       sendbuff,
                       recvbuff,
                       recvcount,
                       datatype,
                       op,
                       0,
                       comm,
                       stream,
                       NULL};
    return opIssue(&o);
}

loomResult_t loomAlltoAll(const void *sendbuff, void *recvbuff, size_t count,
                          loomDataType_t datatype, loomComm_t comm, loomStream_t stream)
{
    struct loomOp o = {
        LOOM_COLL_ALLTOALL, sendbuff, recvbuff, count, datatype, loomSum, 0, comm, stream, NULL};
    return opIssue(&o);
}

loomResult_t loomAlltoAllv(const void *sendbuff, const size_t sendcounts[], const size_t sdispls[],
                           void *recvbuff, const size_t recvcounts[], const size_t rdispls[],
                           loomDataType_t datatype, loomComm_t comm, loomStream_t stream)
{
    const char *fn = "loomAlltoAllv";
    loomResult_t res = commCheck(comm, fn);
    if (res == loomSuccess && (!sendcounts || !sdispls || !recvcounts || !rdispls))
        res = loomSetError(loomInvalidArgument,
                           "%s: sendcounts, sdispls, recvcounts and rdispls must not be NULL", fn);
    if (res == loomSuccess && (unsigned)datatype >= loomNumTypes)
        res = loomSetError(loomInvalidArgument, "%s: datatype %d is not a loomDataType_t (0..%d)",
                           fn, (int)datatype, loomNumTypes - 1);
    if (res != loomSuccess) {
        if (commIsLive(comm))
            commRecordError(comm);
        if (groupActive())
            groupRecordError(res);
        return res;
    }
    size_t n = (size_t)comm->nranks;
    size_t *v = malloc(4 * n * sizeof(*v));
    if (v == NULL)
        return loomSetError(loomSystemError, "%s: out of memory", fn);
    memcpy(v, sendcounts, n * sizeof(*v));
    memcpy(v + n, sdispls, n * sizeof(*v));
    memcpy(v + 2 * n, recvcounts, n * sizeof(*v));
    memcpy(v + 3 * n, rdispls, n * sizeof(*v));
    struct loomOp o = {
        LOOM_COLL_ALLTOALLV, sendbuff, recvbuff, 0, datatype, loomSum, 0, comm, stream, v};
    return opIssue(&o);
}

loomResult_t loomSend(const void *sendbuff, size_t count, loomDataType_t datatype, int peer,
                      loomComm_t comm, loomStream_t stream)
{
    struct loomOp o = {LOOM_COLL_SEND, sendbuff, NULL, count,  datatype,
                       loomSum,        peer,     comm, stream, NULL};
    return opIssue(&o);
}

loomResult_t loomRecv(void *recvbuff, size_t count, loomDataType_t datatype, int peer,
                      loomComm_t comm, loomStream_t stream)
{
    struct loomOp o = {LOOM_COLL_RECV, NULL, recvbuff, count,  datatype,
                       loomSum,        peer, comm,     stream, NULL};
    return opIssue(&o);
}

void opRelease(struct loomOp *op)
{
    free(op->v);
    op->v = NULL;
}

/* ---- plans ---- */

/* What the plan decided for one op: the tuner's choice, its lanes, its scratch. */
struct planOp {
    struct loomTuning tune;
    size_t chunkElems;
    int lanes;
    const struct loomPlan *sched[LOOM_MAX_CHANNELS]; /* each lane's plan */
    size_t stageBytes;                               /* in-place AlltoAll: the send buffer staged */
    int proto;                                       /* LOOM_PROTO_* (kexec.c) */
    size_t scratchOff;                               /* where it starts in comm->scratch */
};

static __thread struct loomLane *tlLanes;
static __thread int tlLaneCap;
static __thread struct planOp *tlPlan;
static __thread int tlPlanCap;

void enqueueThreadCleanup(void)
{
    kexecThreadCleanup();
    free(tlLanes);
    free(tlPlan);
    tlLanes = NULL;
    tlPlan = NULL;
    tlLaneCap = tlPlanCap = 0;
}

loomResult_t arrayReserve(void **array, int *cap, int n, size_t elemSize)
{
    if (n <= *cap)
        return loomSuccess;
    int c = *cap ? *cap : 16;
    while (c < n)
        c *= 2;
    void *p = realloc(*array, (size_t)c * elemSize);
    if (p == NULL)
        return loomSetError(loomSystemError, "out of memory planning %d lanes or operations", n);
    *array = p;
    *cap = c;
    return loomSuccess;
}

static loomResult_t generate(const struct loomSchedArgs *a, loomAlgo_t algo, struct loomPlan *s)
{
    loomGenerator_t gen = scheduleGenerator(a->coll, algo);
    return gen ? gen(a, s) : loomInternalError;
}

/* Generators do not log (algorithms/ stays below the core): the reason is recorded here. */
static loomResult_t buildSchedule(const struct loomSchedArgs *a, loomAlgo_t algo,
                                  struct loomPlan *s)
{
    loomResult_t res = generate(a, algo, s);
    if (res == loomSystemError)
        return loomSetError(res, "%s: out of memory building a plan of %u templates",
                            loomCollName(a->coll), s->nsteps);
    if (res != loomSuccess)
        return loomSetError(res, "%s: no %s schedule for rank %d of %d (count %zu, chunk %zu)",
                            loomCollName(a->coll), tunerAlgoName(algo), a->rank, a->nranks,
                            a->count, a->chunkElems);
    return loomSuccess;
}

static uint64_t keyHash(const uint64_t *k)
{
    uint64_t h = 0x9e3779b97f4a7c15ULL;
    for (int i = 0; i < LOOM_SCHED_KEY; i++) {
        h ^= k[i];
        h *= 0xff51afd7ed558ccdULL;
        h ^= h >> 33;
    }
    return h;
}

static loomResult_t poolTake(struct loomComm *comm, int *used, struct loomPlan **out)
{
    if (*used == comm->poolSize) {
        int cap = comm->poolSize ? 2 * comm->poolSize : 4;
        struct loomPlan *p = realloc(comm->pool, (size_t)cap * sizeof(*p));
        if (p == NULL)
            return loomSetError(loomSystemError, "out of memory for schedules");
        memset(p + comm->poolSize, 0, (size_t)(cap - comm->poolSize) * sizeof(*p));
        comm->pool = p;
        comm->poolSize = cap;
    }
    *out = &comm->pool[(*used)++];
    planReset(*out);
    return loomSuccess;
}

/*
 * Finds or builds the schedule of one lane. The key holds everything a
 * generator reads besides the communicator's fixed shape: collective,
 * algorithm (and for a tree, how many trees), element size, root, count,
 * lane range and chunk.
 */
static loomResult_t scheduleGet(struct loomComm *comm, const struct loomSchedArgs *a,
                                loomAlgo_t algo, size_t es, const struct loomPlan **out)
{
    struct loomPlan *s = NULL;
    if (a->coll != LOOM_COLL_ALLTOALLV) {
        uint64_t key[LOOM_SCHED_KEY] = {(uint64_t)a->coll | (uint64_t)algo << 8 |
                                            (uint64_t)a->trees << 12 | es << 16 |
                                            (uint64_t)(uint32_t)a->root << 32,
                                        a->count, a->lo, a->hi, a->chunkElems};
        struct loomSchedEntry *e = &comm->cache[keyHash(key) % LOOM_SCHED_CACHE];
        if (e->valid && memcmp(e->key, key, sizeof(key)) == 0) {
            e->epoch = comm->planEpoch;
            *out = &e->sched;
            return loomSuccess;
        }
        if (e->epoch != comm->planEpoch) {
            comm->schedGen++;
            e->valid = 0;
            planReset(&e->sched);
            LOOMCHECK(buildSchedule(a, algo, &e->sched));
            memcpy(e->key, key, sizeof(key));
            e->valid = 1;
            e->epoch = comm->planEpoch;
            *out = &e->sched;
            return loomSuccess;
        }
    }
    comm->schedGen++;
    LOOMCHECK(poolTake(comm, &comm->poolUsed, &s));
    LOOMCHECK(buildSchedule(a, algo, s));
    *out = s;
    return loomSuccess;
}

/* The op's size as the tuner sees it: bytes of the largest buffer. */
static size_t opBytes(const struct loomOp *op)
{
    size_t bytes = 0;
    if (op->coll == LOOM_COLL_ALLTOALLV) {
        for (int p = 0; p < op->comm->nranks; p++)
            bytes += op->v[p];
        return bytes * reduceTypeSize(op->dt);
    }
    return op->count * reduceTypeSize(op->dt) * collBlocks(op);
}

static size_t alignUp(size_t x)
{
    return (x + LOOM_CACHELINE - 1) & ~(size_t)(LOOM_CACHELINE - 1);
}

/*
 * Asks the tuner, cuts the op into lanes, and counts the scratch it needs:
 * an in-place AlltoAll stages its send buffer, since blocks are overwritten
 * before they are sent.
 */
static void planTune(struct loomOp *op, struct planOp *p, struct cudaExec *dev, int launched)
{
    struct loomComm *comm = op->comm;
    size_t es = reduceTypeSize(op->dt);
    tunerChoose(comm, op->coll, opBytes(op), dev != NULL, &p->tune);
    /* AlltoAllv's size differs between ranks, so only a forced protocol is one they agree on.
     * Device plans take LL only when launched (the host-driven executor has no lines). */
    p->proto = dev && !launched
                   ? LOOM_PROTO_SIMPLE
                   : kexecProto(comm, op->coll == LOOM_COLL_ALLTOALLV ? SIZE_MAX : opBytes(op));
    if (p->proto == LOOM_PROTO_LL && p->tune.chunkBytes > LOOM_LL_BYTES)
        p->tune.chunkBytes = LOOM_LL_BYTES; /* a step is at most one LL slot */
    p->chunkElems = p->tune.chunkBytes / es ? p->tune.chunkBytes / es : 1;
    size_t want = op->count / p->chunkElems;
    int n = p->tune.nChannels;
    p->lanes = op->coll == LOOM_COLL_ALLTOALLV ? 1 : want < (size_t)n ? (want ? (int)want : 1) : n;
    p->stageBytes = 0;
    if (op->coll == LOOM_COLL_ALLTOALL && op->sendbuff == op->recvbuff && dev == NULL)
        p->stageBytes = alignUp(opBytes(op));
    p->scratchOff = comm->scratchTaken;
    comm->scratchTaken += p->stageBytes;
}

/* Grows each communicator's scratch to what the plan's ops took (before any pointer is handed out).
 */
static loomResult_t planScratch(struct loomOp *ops, int nops)
{
    for (int i = 0; i < nops; i++) {
        struct loomComm *comm = ops[i].comm;
        if (comm->scratchBytes >= comm->scratchTaken)
            continue;
        void *p = realloc(comm->scratch, comm->scratchTaken);
        if (p == NULL)
            return loomSetError(loomSystemError, "out of memory for %zu bytes of plan scratch",
                                comm->scratchTaken);
        comm->scratch = p;
        comm->scratchBytes = comm->scratchTaken;
    }
    return loomSuccess;
}

/* The send buffer of an in-place AlltoAll is staged, since blocks are overwritten before sent. */
static loomResult_t stageInPlace(struct loomOp *op, const struct planOp *p, char *scratch,
                                 struct cudaExec *dev, const void **send)
{
    *send = op->sendbuff;
    if (op->coll != LOOM_COLL_ALLTOALL || op->sendbuff != op->recvbuff || opBytes(op) == 0)
        return loomSuccess;
    if (dev)
        return cudaStageInPlace(dev, op, opBytes(op), send);
    if (p->stageBytes) {
        memcpy(scratch, op->sendbuff, opBytes(op));
        *send = scratch;
    }
    return loomSuccess;
}

static loomResult_t opLanes(struct loomOp *op, struct planOp *p, struct cudaExec *dev, int *nlanes)
{
    struct loomComm *comm = op->comm;
    size_t es = reduceTypeSize(op->dt), n = (size_t)comm->nranks;
    char *scratch = (char *)comm->scratch + p->scratchOff;
    const void *send;
    LOOMCHECK(stageInPlace(op, p, scratch, dev, &send));
    LOOMCHECK(arrayReserve((void **)&tlLanes, &tlLaneCap, *nlanes + p->lanes, sizeof(*tlLanes)));
    for (int c = 0; c < p->lanes; c++) {
        struct loomSchedArgs a = {.coll = op->coll,
                                  .nranks = comm->nranks,
                                  .rank = comm->rank,
                                  .ring = comm->ring,
                                  .root = op->root,
                                  .count = op->count,
                                  .lo = op->count * c / p->lanes,
                                  .hi = op->count * (c + 1) / p->lanes,
                                  .chunkElems = p->chunkElems,
                                  .hosts = topoTreeHosts(comm->topo),
                                  .order = comm->topo->order,
                                  .trees = p->tune.algo == LOOM_ALGO_TREE ? p->tune.trees : 0};
        if (op->v) {
            a.sendcounts = op->v, a.sdispls = op->v + n;
            a.recvcounts = op->v + 2 * n, a.rdispls = op->v + 3 * n;
        }
        const struct loomPlan *s;
        LOOMCHECK(scheduleGet(comm, &a, p->tune.algo, es, &s));
        p->sched[c] = s;
        tlLanes[(*nlanes)++] = (struct loomLane){.comm = comm,
                                                 .channel = c,
                                                 .plan = s,
                                                 .bufs = {(char *)send, op->recvbuff},
                                                 .dt = op->dt,
                                                 .op = op->op,
                                                 .elemSize = es,
                                                 .proto = p->proto};
    }
    return loomSuccess;
}

/* loomSuccess, or the error that left op's communicator unusable. */
static loomResult_t commUsable(const struct loomOp *op)
{
    int broken = atomic_load_explicit(&op->comm->broken, memory_order_acquire);
    if (broken)
        return loomSetError((loomResult_t)broken,
                            "%s: the communicator is unusable after an earlier error (%s)",
                            loomCollName(op->coll), op->comm->abortReason);
    return loomSuccess;
}

static loomResult_t planLanes(struct loomOp *ops, int nops, struct cudaExec *dev, int launched,
                              int *nlanes)
{
    LOOMCHECK(arrayReserve((void **)&tlPlan, &tlPlanCap, nops, sizeof(*tlPlan)));
    for (int i = 0; i < nops; i++) {
        ops[i].comm->planEpoch++;
        ops[i].comm->poolUsed = 0;
        ops[i].comm->scratchTaken = 0;
    }
    for (int i = 0; i < nops; i++) {
        LOOMCHECK(commUsable(&ops[i]));
        planTune(&ops[i], &tlPlan[i], dev, launched);
    }
    LOOMCHECK(planScratch(ops, nops));
    for (int i = 0; i < nops; i++)
        LOOMCHECK(opLanes(&ops[i], &tlPlan[i], dev, nlanes));
    return loomSuccess;
}

/*
 * The memo: the last single-op host plan of a communicator, with the
 * schedules its lanes ran. A call that repeats it exactly (a training loop's
 * AllReduce, a benchmark) needs no tuner, no schedule lookup and no scratch:
 * the schedules depend only on arguments that match, and schedGen says no
 * cache entry was rebuilt since. Calls that use scratch (an in-place
 * AlltoAll) or a pool schedule (AlltoAllv), and
 * single copies, are not kept.
 */
static int memoMatches(const struct loomOp *op)
{
    const struct loomComm *comm = op->comm;
    return comm->memo.valid && comm->memo.gen == comm->schedGen &&
           comm->memo.coll == (int)op->coll && comm->memo.count == op->count &&
           comm->memo.send == op->sendbuff && comm->memo.recv == op->recvbuff &&
           comm->memo.dt == (int)op->dt && comm->memo.op == (int)op->op &&
           comm->memo.root == op->root;
}

/* Keeps op's plan p as the memo when it qualifies; res is how building it went. */
static void memoKeep(struct loomOp *op, const struct planOp *p, loomResult_t res)
{
    struct loomComm *comm = op->comm;
    comm->memo.valid = 0;
    if (res != loomSuccess || op->coll == LOOM_COLL_ALLTOALLV || p->stageBytes)
        return;
    comm->memo.coll = (int)op->coll, comm->memo.dt = (int)op->dt, comm->memo.op = (int)op->op;
    comm->memo.root = op->root, comm->memo.count = op->count;
    comm->memo.send = op->sendbuff, comm->memo.recv = op->recvbuff;
    comm->memo.nlanes = p->lanes;
    comm->memo.proto = p->proto;
    memcpy(comm->memo.sched, p->sched, (size_t)p->lanes * sizeof(p->sched[0]));
    comm->memo.gen = comm->schedGen;
    comm->memo.valid = 1;
}

/* The memo's lanes for op (memoMatches said yes). */
static loomResult_t memoLanes(struct loomOp *op, int *nlanes)
{
    struct loomComm *comm = op->comm;
    LOOMCHECK(commUsable(op));
    LOOMCHECK(arrayReserve((void **)&tlLanes, &tlLaneCap, comm->memo.nlanes, sizeof(*tlLanes)));
    size_t es = reduceTypeSize(op->dt);
    for (int c = 0; c < comm->memo.nlanes; c++) {
        tlLanes[c] = (struct loomLane){.comm = comm,
                                       .channel = c,
                                       .plan = comm->memo.sched[c],
                                       .bufs = {(char *)op->sendbuff, op->recvbuff},
                                       .dt = op->dt,
                                       .op = op->op,
                                       .elemSize = es,
                                       .proto = comm->memo.proto};
    }
    *nlanes = comm->memo.nlanes;
    return loomSuccess;
}

/* A device plan as one launch of the plan interpreter (src/cuda/devexec.c). */
static loomResult_t planLaunch(struct loomOp *ops, int nops, struct cudaExec *dev)
{
    int nlanes = 0;
    struct loomStream *s = ops[0].stream && streamIsCuda(ops[0].stream) ? ops[0].stream : NULL;
    cudaPlanUseStream(dev, s ? streamCudaHandle(s) : NULL);
    loomResult_t res = planLanes(ops, nops, dev, 1, &nlanes);
    if (res == loomSuccess && nlanes > 0) {
        TRACE(LOOM_COLL, "plan: %d op(s), %d lane(s), first %s count %zu (%s), launched", nops,
              nlanes, loomCollName(ops[0].coll), ops[0].count, tunerAlgoName(tlPlan[0].tune.algo));
        res = devexecRun(dev, tlLanes, nlanes, s, ops, nops);
    }
    cudaPlanEnd(dev, res);
    return res;
}

loomResult_t planExecute(struct loomOp *ops, int nops)
{
    int nlanes = 0;
    struct cudaExec *dev;
    /* Device buffers: the GPU computes the steps (src/cuda); a CUDA stream already ordered them. */
    LOOMCHECK(cudaPlanBegin(ops, nops, ops[0].stream && streamIsCuda(ops[0].stream), &dev));
    if (dev && devexecWanted(ops, nops))
        return planLaunch(ops, nops, dev);
    for (int i = 0; i < nops; i++)
        devexecReclaim(ops[i].comm); /* a host-driven run after launches on the comm */
    /* Host buffers of ranks that reach each other's memory: one copy, no schedule (cma.c).
     * Before the memo: every rank must ask, whatever its previous call was. */
    int cma = dev == NULL && nops == 1 ? cmaEligible(&ops[0]) : CMA_NO;
    if (cma != CMA_NO) {
        int declined;
        LOOMCHECK(commUsable(&ops[0]));
        loomResult_t res = cmaRun(&ops[0], cma, &declined);
        if (res != loomSuccess || !declined)
            return res;
    }
    if (dev == NULL && nops == 1 && memoMatches(&ops[0])) {
        loomResult_t res = memoLanes(&ops[0], &nlanes);
        return res == loomSuccess ? execRun(tlLanes, nlanes, NULL) : res;
    }
    loomResult_t res = planLanes(ops, nops, dev, 0, &nlanes);
    if (dev == NULL && nops == 1)
        memoKeep(&ops[0], tlPlan, res);
    if (res == loomSuccess && nlanes > 0) {
        TRACE(LOOM_COLL, "plan: %d op(s), %d lane(s), first %s count %zu (%s)%s", nops, nlanes,
              loomCollName(ops[0].coll), ops[0].count, tunerAlgoName(tlPlan[0].tune.algo),
              dev ? " (device)" : "");
        res = execRun(tlLanes, nlanes, dev);
    }
    cudaPlanEnd(dev, res);
    return res;
}
