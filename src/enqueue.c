/*
 * enqueue.c — API entry for collectives and point-to-point: check the
 * arguments, capture the operation, and run it (now, at group end, or on a
 * stream); and the plan: operations -> schedules -> lanes -> execRun.
 *
 * Schedules depend only on (collective, count, element size, root or peer,
 * lane range), never on buffer addresses, so each communicator caches the
 * ones it built: a repeated call builds nothing and allocates nothing.
 * AlltoAllv (per-call counts) uses a pool of reusable schedules instead.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cudacore.h"
#include "debug.h"
#include "enqueue.h"
#include "exec.h"
#include "param.h"
#include "reduce.h"

static const char *const collNames[LOOM_COLL_NUM] = {
    "loomBroadcast", "loomReduce",    "loomAllReduce", "loomAllGather", "loomReduceScatter",
    "loomAlltoAll",  "loomAlltoAllv", "loomSend",      "loomRecv"};

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
    const char *fn = collNames[op->coll];
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

static __thread struct loomLane *tlLanes;
static __thread int tlLaneCap;

void enqueueThreadCleanup(void)
{
    free(tlLanes);
    tlLanes = NULL;
    tlLaneCap = 0;
}

static loomResult_t lanesReserve(int n)
{
    if (n <= tlLaneCap)
        return loomSuccess;
    int cap = tlLaneCap ? tlLaneCap : 16;
    while (cap < n)
        cap *= 2;
    struct loomLane *l = realloc(tlLanes, (size_t)cap * sizeof(*l));
    if (l == NULL)
        return loomSetError(loomSystemError, "out of memory for %d lanes", n);
    tlLanes = l;
    tlLaneCap = cap;
    return loomSuccess;
}

static loomResult_t generate(const struct loomSchedArgs *a, struct loomSchedule *s)
{
    switch (a->coll) {
    case LOOM_COLL_BROADCAST:
        return ringBroadcastSchedule(a, s);
    case LOOM_COLL_REDUCE:
        return ringReduceSchedule(a, s);
    case LOOM_COLL_ALLREDUCE:
        return ringAllReduceSchedule(a, s);
    case LOOM_COLL_ALLGATHER:
        return ringAllGatherSchedule(a, s);
    case LOOM_COLL_REDUCESCATTER:
        return ringReduceScatterSchedule(a, s);
    case LOOM_COLL_ALLTOALL:
        return directAlltoAllSchedule(a, s);
    case LOOM_COLL_ALLTOALLV:
        return directAlltoAllvSchedule(a, s);
    case LOOM_COLL_SEND:
        return directSendSchedule(a, s);
    case LOOM_COLL_RECV:
        return directRecvSchedule(a, s);
    default:
        return loomInternalError;
    }
}

/* Generators do not log (algorithms/ stays below the core): the reason is recorded here. */
static loomResult_t buildSchedule(const struct loomSchedArgs *a, struct loomSchedule *s)
{
    loomResult_t res = generate(a, s);
    if (res == loomSystemError)
        return loomSetError(res, "%s: out of memory building a schedule of %zu steps",
                            collNames[a->coll], s->nsteps);
    if (res != loomSuccess)
        return loomSetError(res, "%s: no schedule for rank %d of %d (count %zu, chunk %zu)",
                            collNames[a->coll], a->rank, a->nranks, a->count, a->chunkElems);
    return loomSuccess;
}

static uint64_t keyHash(const uint64_t *k)
{
    uint64_t h = 0x9e3779b97f4a7c15ULL;
    for (int i = 0; i < 4; i++) {
        h ^= k[i];
        h *= 0xff51afd7ed558ccdULL;
        h ^= h >> 33;
    }
    return h;
}

static loomResult_t poolTake(struct loomComm *comm, int *used, struct loomSchedule **out)
{
    if (*used == comm->poolSize) {
        int cap = comm->poolSize ? 2 * comm->poolSize : 4;
        struct loomSchedule *p = realloc(comm->pool, (size_t)cap * sizeof(*p));
        if (p == NULL)
            return loomSetError(loomSystemError, "out of memory for schedules");
        memset(p + comm->poolSize, 0, (size_t)(cap - comm->poolSize) * sizeof(*p));
        comm->pool = p;
        comm->poolSize = cap;
    }
    *out = &comm->pool[(*used)++];
    scheduleReset(*out);
    return loomSuccess;
}

/* Finds or builds the schedule of one lane. */
static loomResult_t scheduleGet(struct loomComm *comm, const struct loomSchedArgs *a, size_t es,
                                const struct loomSchedule **out)
{
    struct loomSchedule *s = NULL;
    if (a->coll != LOOM_COLL_ALLTOALLV) {
        uint64_t key[4] = {(uint64_t)a->coll | es << 8 | (uint64_t)(uint32_t)a->root << 32,
                           a->count, a->lo, a->hi};
        struct loomSchedEntry *e = &comm->cache[keyHash(key) % LOOM_SCHED_CACHE];
        if (e->valid && memcmp(e->key, key, sizeof(key)) == 0) {
            e->epoch = comm->planEpoch;
            *out = &e->sched;
            return loomSuccess;
        }
        if (e->epoch != comm->planEpoch) {
            e->valid = 0;
            scheduleReset(&e->sched);
            LOOMCHECK(buildSchedule(a, &e->sched));
            memcpy(e->key, key, sizeof(key));
            e->valid = 1;
            e->epoch = comm->planEpoch;
            *out = &e->sched;
            return loomSuccess;
        }
    }
    LOOMCHECK(poolTake(comm, &comm->poolUsed, &s));
    LOOMCHECK(buildSchedule(a, s));
    *out = s;
    return loomSuccess;
}

/* The send buffer of an in-place AlltoAll is staged, since blocks are overwritten before sent. */
static loomResult_t stageInPlace(struct loomOp *op, const void **send)
{
    struct loomComm *comm = op->comm;
    size_t bytes = op->count * reduceTypeSize(op->dt) * (size_t)comm->nranks;
    *send = op->sendbuff;
    if (op->coll != LOOM_COLL_ALLTOALL || op->sendbuff != op->recvbuff || bytes == 0)
        return loomSuccess;
    if (cudaPlanActive())
        return cudaStageInPlace(op, bytes, send);
    if (comm->scratchBytes < bytes) {
        void *p = realloc(comm->scratch, bytes);
        if (p == NULL)
            return loomSetError(loomSystemError, "out of memory staging %zu bytes", bytes);
        comm->scratch = p;
        comm->scratchBytes = bytes;
    }
    memcpy(comm->scratch, op->sendbuff, bytes);
    *send = comm->scratch;
    return loomSuccess;
}

static int laneCount(const struct loomOp *op, size_t chunkElems)
{
    if (op->coll == LOOM_COLL_ALLTOALLV)
        return 1;
    size_t want = op->count / chunkElems;
    int n = op->comm->nChannels;
    return want < (size_t)n ? (want ? (int)want : 1) : n;
}

static loomResult_t opLanes(struct loomOp *op, int *nlanes)
{
    struct loomComm *comm = op->comm;
    size_t es = reduceTypeSize(op->dt), n = (size_t)comm->nranks;
    size_t chunkElems = comm->slotBytes / es;
    int lanes = laneCount(op, chunkElems);
    const void *send;
    LOOMCHECK(stageInPlace(op, &send));
    LOOMCHECK(lanesReserve(*nlanes + lanes));
    for (int c = 0; c < lanes; c++) {
        struct loomSchedArgs a = {op->coll,
                                  comm->nranks,
                                  comm->rank,
                                  comm->ring,
                                  op->root,
                                  op->count,
                                  op->count * c / lanes,
                                  op->count * (c + 1) / lanes,
                                  chunkElems,
                                  NULL,
                                  NULL,
                                  NULL,
                                  NULL};
        if (op->v) {
            a.sendcounts = op->v, a.sdispls = op->v + n;
            a.recvcounts = op->v + 2 * n, a.rdispls = op->v + 3 * n;
        }
        const struct loomSchedule *s;
        LOOMCHECK(scheduleGet(comm, &a, es, &s));
        tlLanes[(*nlanes)++] = (struct loomLane){
            comm,   c,      s->steps, s->nsteps, 0, {(char *)send, (char *)op->recvbuff},
            op->dt, op->op, es,       0};
    }
    return loomSuccess;
}

static loomResult_t planLanes(struct loomOp *ops, int nops, int *nlanes)
{
    for (int i = 0; i < nops; i++) {
        ops[i].comm->planEpoch++;
        ops[i].comm->poolUsed = 0;
    }
    for (int i = 0; i < nops; i++) {
        int broken = atomic_load_explicit(&ops[i].comm->broken, memory_order_acquire);
        if (broken)
            return loomSetError((loomResult_t)broken,
                                "%s: the communicator is unusable after an earlier error (%s)",
                                collNames[ops[i].coll], ops[i].comm->abortReason);
        LOOMCHECK(opLanes(&ops[i], nlanes));
    }
    return loomSuccess;
}

loomResult_t planExecute(struct loomOp *ops, int nops)
{
    int nlanes = 0;
    struct cudaExec *dev;
    /* Device buffers: the GPU computes the steps (src/cuda); a CUDA stream already ordered them. */
    LOOMCHECK(cudaPlanBegin(ops, nops, ops[0].stream && streamIsCuda(ops[0].stream), &dev));
    loomResult_t res = planLanes(ops, nops, &nlanes);
    if (res == loomSuccess && nlanes > 0) {
        TRACE(LOOM_COLL, "plan: %d op(s), %d lane(s), first %s count %zu%s", nops, nlanes,
              collNames[ops[0].coll], ops[0].count, dev ? " (device)" : "");
        res = execRun(tlLanes, nlanes, dev);
    }
    cudaPlanEnd(dev, res);
    return res;
}
