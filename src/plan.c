/*
 * plan.c — from operations to lanes, and running them:
 *
 *   operations -> executor (the tuner's, one for the call or group)
 *              -> tuner (the decision record: algorithm, chunk, lanes, protocol)
 *              -> scratch -> schedules -> lanes
 *              -> the executor's run (src/exec/executor.h)
 *
 * Schedules depend only on (collective, algorithm, count, element size, root
 * or peer, lane range, chunk), never on buffer addresses, so each
 * communicator's planner caches the ones it built: a repeated call builds
 * nothing and allocates nothing, and a call that repeats the previous one
 * exactly (the memo) skips the tuner and the cache lookup too. AlltoAllv
 * (per-call counts) uses a pool of reusable schedules instead. Scratch that
 * the lanes of a plan read or write (an in-place AlltoAll's staged input) is
 * laid out op by op in one per-communicator area, sized before any pointer
 * into it is handed out.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "array.h"
#include "cma.h"
#include "compress.h"
#include "connect.h"
#include "cudacore.h"
#include "debug.h"
#include "enqueue.h"
#include "exec.h"
#include "executor.h"
#include "interp.h"
#include "kexec.h"
#include "plan.h"
#include "recorder.h"
#include "reduce.h"
#include "topo.h"
#include "tuner.h"

/* A cached schedule. The key holds everything a generator reads besides the communicator's shape.
 */
#define LOOM_SCHED_KEY 5
#define LOOM_SCHED_CACHE 64
struct loomSchedEntry {
    uint64_t key[LOOM_SCHED_KEY];
    uint64_t epoch; /* plan that pins it */
    int valid;
    struct loomPlan sched;
};

/* A communicator's planning state (comm->planner). */
struct loomPlanner {
    /* Schedules: a cache for repeated calls, a pool for one-off ones. */
    struct loomSchedEntry cache[LOOM_SCHED_CACHE];
    uint64_t epoch; /* bumped by every plan; a cache entry of the current plan is not evicted */
    struct loomPlan *pool;
    int poolSize;
    int poolUsed; /* entries taken by the plan being built */
    uint64_t gen; /* bumped whenever a cached or pooled schedule is (re)built */
    /*
     * The last single-op host plan: a call with the same arguments, buffers
     * included, reuses its schedules without asking the tuner or the cache
     * again, while gen is unchanged.
     */
    struct {
        int valid;
        int coll, dt, op, root, nlanes, compress;
        struct loomTuning tune;
        size_t count;
        const void *send;
        void *recv;
        uint64_t gen;
        const struct loomPlan *sched[LOOM_MAX_CHANNELS];
    } memo;
    /* Per-plan scratch: in-place AlltoAll staging. */
    void *scratch;
    size_t scratchBytes;
    size_t scratchTaken; /* bytes handed out to the plan being built */
};

loomResult_t plannerInit(struct loomComm *comm)
{
    comm->planner = calloc(1, sizeof(*comm->planner));
    if (comm->planner == NULL)
        return loomSetError(loomSystemError, "out of memory for the planner");
    return loomSuccess;
}

void plannerFree(struct loomComm *comm)
{
    struct loomPlanner *pl = comm->planner;
    if (pl == NULL)
        return;
    for (int i = 0; i < LOOM_SCHED_CACHE; i++)
        planFree(&pl->cache[i].sched);
    for (int i = 0; i < pl->poolSize; i++)
        planFree(&pl->pool[i]);
    free(pl->pool);
    free(pl->scratch);
    free(pl);
    comm->planner = NULL;
}

/* What the plan decided for one op: the tuner's decision record, its lanes, its scratch. */
struct planOp {
    struct loomTuning tune;
    size_t chunkElems;
    int lanes;
    const struct loomPlan *sched[LOOM_MAX_CHANNELS]; /* each lane's plan */
    size_t stageBytes;                               /* in-place AlltoAll: the send buffer staged */
    int compress;                                    /* COMPRESS_* (compress.c) */
    size_t scratchOff;                               /* where it starts in the planner's scratch */
};

static __thread struct loomLane *tlLanes;
static __thread int tlLaneCap;
static __thread struct planOp *tlPlan;
static __thread int tlPlanCap;

void planThreadCleanup(void)
{
    kexecThreadCleanup();
    free(tlLanes);
    free(tlPlan);
    tlLanes = NULL;
    tlPlan = NULL;
    tlLaneCap = tlPlanCap = 0;
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
                            loomCollName(a->coll), scheduleAlgoName(algo), a->rank, a->nranks,
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

static loomResult_t poolTake(struct loomPlanner *pl, struct loomPlan **out)
{
    if (pl->poolUsed == pl->poolSize) {
        int cap = pl->poolSize ? 2 * pl->poolSize : 4;
        struct loomPlan *p = realloc(pl->pool, (size_t)cap * sizeof(*p));
        if (p == NULL)
            return loomSetError(loomSystemError, "out of memory for schedules");
        memset(p + pl->poolSize, 0, (size_t)(cap - pl->poolSize) * sizeof(*p));
        pl->pool = p;
        pl->poolSize = cap;
    }
    *out = &pl->pool[pl->poolUsed++];
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
    struct loomPlanner *pl = comm->planner;
    struct loomPlan *s = NULL;
    if (a->coll != LOOM_COLL_ALLTOALLV) {
        uint64_t key[LOOM_SCHED_KEY] = {(uint64_t)a->coll | (uint64_t)algo << 8 |
                                            (uint64_t)a->trees << 12 | es << 16 |
                                            (uint64_t)(uint32_t)a->root << 32,
                                        a->count, a->lo, a->hi, a->chunkElems};
        struct loomSchedEntry *e = &pl->cache[keyHash(key) % LOOM_SCHED_CACHE];
        if (e->valid && memcmp(e->key, key, sizeof(key)) == 0) {
            e->epoch = pl->epoch;
            *out = &e->sched;
            return loomSuccess;
        }
        if (e->epoch != pl->epoch) {
            pl->gen++;
            e->valid = 0;
            planReset(&e->sched);
            LOOMCHECK(buildSchedule(a, algo, &e->sched));
            memcpy(e->key, key, sizeof(key));
            e->valid = 1;
            e->epoch = pl->epoch;
            *out = &e->sched;
            return loomSuccess;
        }
    }
    pl->gen++;
    LOOMCHECK(poolTake(pl, &s));
    LOOMCHECK(buildSchedule(a, algo, s));
    *out = s;
    return loomSuccess;
}

static size_t alignUp(size_t x)
{
    return (x + LOOM_CACHELINE - 1) & ~(size_t)(LOOM_CACHELINE - 1);
}

/*
 * Whether op is a single-copy Reduce off its root: every rank reduces a
 * slice there (algorithms/single.c), these into scratch, since the caller
 * need not pass a receive buffer. Each lane folds its pieces, one after
 * the other, at its own start in that scratch, so it is laid out as large as
 * the buffer, of which only a piece per lane is ever touched (the pages
 * of the rest are never faulted in).
 */
static int reduceInScratch(const struct loomOp *op, const struct planOp *p)
{
    return op->coll == LOOM_COLL_REDUCE && p->tune.algo == LOOM_ALGO_CMA &&
           op->comm->rank != op->root;
}

/*
 * Asks the tuner (run by executor; mapped: single copies through
 * loomMemAlloc mappings, the ranks found), cuts the op into lanes, and
 * counts the scratch it needs: an in-place AlltoAll stages its send buffer,
 * since blocks are overwritten before they are sent; a single-copy Reduce
 * reduces into scratch off the root.
 */
static void planTune(struct loomOp *op, struct planOp *p, struct cudaExec *dev, int executor,
                     int mapped)
{
    struct loomComm *comm = op->comm;
    struct loomPlanner *pl = comm->planner;
    size_t es = reduceTypeSize(op->dt);
    if (mapped)
        tunerChooseMapped(comm, op->coll, opBytes(op), &p->tune);
    else
        tunerChoose(comm, op->coll, opBytes(op), executor, &p->tune);
    /* Doubling would round a different partial on each rank (compress.c): a ring instead. */
    p->compress = compressOpMode(op, dev != NULL);
    if (p->compress && p->tune.algo == LOOM_ALGO_DOUBLING)
        p->tune.algo = LOOM_ALGO_RING;
    p->chunkElems = p->tune.chunkBytes / es ? p->tune.chunkBytes / es : 1;
    size_t want = op->count / p->chunkElems;
    int n = p->tune.nChannels;
    p->lanes = op->coll == LOOM_COLL_ALLTOALLV ? 1 : want < (size_t)n ? (want ? (int)want : 1) : n;
    p->stageBytes = 0;
    if (op->coll == LOOM_COLL_ALLTOALL && op->sendbuff == op->recvbuff && dev == NULL)
        p->stageBytes = alignUp(opBytes(op));
    if (reduceInScratch(op, p))
        p->stageBytes = alignUp(opBytes(op));
    p->scratchOff = pl->scratchTaken;
    pl->scratchTaken += p->stageBytes;
    recorderChose(op, (int)p->tune.algo, p->tune.proto);
}

/* Grows each communicator's scratch to what the plan's ops took (before any pointer is handed out).
 */
static loomResult_t planScratch(struct loomOp *ops, int nops)
{
    for (int i = 0; i < nops; i++) {
        struct loomPlanner *pl = ops[i].comm->planner;
        if (pl->scratchBytes >= pl->scratchTaken)
            continue;
        void *p = realloc(pl->scratch, pl->scratchTaken);
        if (p == NULL)
            return loomSetError(loomSystemError, "out of memory for %zu bytes of plan scratch",
                                pl->scratchTaken);
        pl->scratch = p;
        pl->scratchBytes = pl->scratchTaken;
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
    struct loomPlanner *pl = comm->planner;
    size_t es = reduceTypeSize(op->dt), n = (size_t)comm->nranks;
    char *scratch = (char *)pl->scratch + p->scratchOff;
    const void *send;
    LOOMCHECK(stageInPlace(op, p, scratch, dev, &send));
    char *recv = reduceInScratch(op, p) ? scratch : op->recvbuff;
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
                                                 .bufs = {(char *)send, recv},
                                                 .dt = op->dt,
                                                 .op = op->op,
                                                 .elemSize = es,
                                                 .proto = p->tune.proto,
                                                 .compress = p->compress};
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

/* mapped: the single op runs single copies through loomMemAlloc mappings (cmaAllMapped). */
static loomResult_t planLanes(struct loomOp *ops, int nops, struct cudaExec *dev, int executor,
                              int mapped, int *nlanes)
{
    LOOMCHECK(arrayReserve((void **)&tlPlan, &tlPlanCap, nops, sizeof(*tlPlan)));
    for (int i = 0; i < nops; i++) {
        ops[i].comm->planner->epoch++;
        ops[i].comm->planner->poolUsed = 0;
        ops[i].comm->planner->scratchTaken = 0;
    }
    for (int i = 0; i < nops; i++) {
        LOOMCHECK(commUsable(&ops[i]));
        planTune(&ops[i], &tlPlan[i], dev, executor, mapped);
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
 * AlltoAll) or a pool schedule (AlltoAllv), and decisions the ranks must
 * take anew at every call (single copies through loomMemAlloc mappings), are
 * not kept.
 */
static int memoMatches(const struct loomOp *op)
{
    const struct loomComm *comm = op->comm;
    struct loomPlanner *pl = comm->planner;
    return pl->memo.valid && pl->memo.gen == pl->gen && pl->memo.coll == (int)op->coll &&
           pl->memo.count == op->count && pl->memo.send == op->sendbuff &&
           pl->memo.recv == op->recvbuff && pl->memo.dt == (int)op->dt &&
           pl->memo.op == (int)op->op && pl->memo.root == op->root;
}

/* Keeps op's plan p as the memo when it qualifies (built: it was built, for this call only). */
static void memoKeep(struct loomOp *op, const struct planOp *p, int built)
{
    struct loomComm *comm = op->comm;
    struct loomPlanner *pl = comm->planner;
    pl->memo.valid = 0;
    if (!built || op->coll == LOOM_COLL_ALLTOALLV || p->stageBytes || p->tune.mapped)
        return;
    pl->memo.coll = (int)op->coll, pl->memo.dt = (int)op->dt, pl->memo.op = (int)op->op;
    pl->memo.root = op->root, pl->memo.count = op->count;
    pl->memo.send = op->sendbuff, pl->memo.recv = op->recvbuff;
    pl->memo.nlanes = p->lanes;
    pl->memo.tune = p->tune;
    pl->memo.compress = p->compress;
    memcpy(pl->memo.sched, p->sched, (size_t)p->lanes * sizeof(p->sched[0]));
    pl->memo.gen = pl->gen;
    pl->memo.valid = 1;
}

/* The memo's lanes for op (memoMatches said yes). */
static loomResult_t memoLanes(struct loomOp *op, int *nlanes)
{
    struct loomComm *comm = op->comm;
    struct loomPlanner *pl = comm->planner;
    LOOMCHECK(commUsable(op));
    LOOMCHECK(arrayReserve((void **)&tlLanes, &tlLaneCap, pl->memo.nlanes, sizeof(*tlLanes)));
    size_t es = reduceTypeSize(op->dt);
    for (int c = 0; c < pl->memo.nlanes; c++) {
        tlLanes[c] = (struct loomLane){.comm = comm,
                                       .channel = c,
                                       .plan = pl->memo.sched[c],
                                       .bufs = {(char *)op->sendbuff, op->recvbuff},
                                       .dt = op->dt,
                                       .op = op->op,
                                       .elemSize = es,
                                       .proto = pl->memo.tune.proto,
                                       .compress = pl->memo.compress};
    }
    *nlanes = pl->memo.nlanes;
    recorderChose(op, (int)pl->memo.tune.algo, pl->memo.tune.proto);
    return loomSuccess;
}

/*
 * Runs lanes with executor x. A group mixing communicators whose calls chose
 * LL (the interpreter's) with others falls back to an executor without
 * lines: refused, since the peers of those communicators may run them alone
 * with LL.
 */
static loomResult_t planRunLanes(const struct loomExecutor *x, struct loomLane *lanes, int nlanes,
                                 const struct loomExecCall *call)
{
    for (int i = 0; !x->lines && i < nlanes; i++)
        if (lanes[i].proto == LOOM_PROTO_LL)
            return loomSetError(loomInvalidUsage,
                                "rank %d: this group mixes communicators the kernel executor "
                                "runs with others, and some of its calls chose LL, which only the "
                                "kernel executor speaks; set LOOM_PROTO=Simple",
                                lanes[0].comm->rank);
    return executorRun(x, lanes, nlanes, call);
}

/* What the launched executor sees of Loom streams (stream.c). */
static const struct loomExecStreams planStreams = {
    .isCuda = streamIsCuda, .handle = streamCudaHandle, .recordError = streamRecordError};

/* A device plan as one launch of the plan interpreter (src/exec/devexec.c). */
static loomResult_t planLaunch(struct loomOp *ops, int nops, struct cudaExec *dev)
{
    int nlanes = 0;
    struct loomStream *s = ops[0].stream && streamIsCuda(ops[0].stream) ? ops[0].stream : NULL;
    cudaPlanUseStream(dev, s ? streamCudaHandle(s) : NULL);
    loomResult_t res = planLanes(ops, nops, dev, LOOM_EXECUTOR_LAUNCH, 0, &nlanes);
    if (res == loomSuccess && nlanes > 0) {
        TRACE(LOOM_COLL, "plan: %d op(s), %d lane(s), first %s count %zu (%s), launched", nops,
              nlanes, loomCollName(ops[0].coll), ops[0].count,
              scheduleAlgoName(tlPlan[0].tune.algo));
        struct loomExecCall call = {.dev = dev,
                                    .stream = s,
                                    .streams = &planStreams,
                                    .ops = ops,
                                    .nops = nops,
                                    .connect = connectLanes};
        res = planRunLanes(&loomExecLaunch, tlLanes, nlanes, &call);
    }
    cudaPlanEnd(dev, res);
    return res;
}

/*
 * The executor of a call or group (LOOM_EXECUTOR_*) on host or device
 * buffers: the one its communicators' decisions name where they agree, else
 * the host-driven one (a group mixing communicators the kernel executor runs
 * with others).
 */
static int planExecutor(const struct loomOp *ops, int nops, int device)
{
    int executor = tunerExecutor(ops[0].comm, device);
    for (int i = 1; i < nops; i++)
        if (tunerExecutor(ops[i].comm, device) != executor)
            return device ? LOOM_EXECUTOR_CUDA : LOOM_EXECUTOR_HOST;
    return executor;
}

int planLaunched(const struct loomOp *ops, int nops)
{
    return nops > 0 && planExecutor(ops, nops, 1) == LOOM_EXECUTOR_LAUNCH &&
           cudaPlanIsDevice(ops, nops);
}

static loomResult_t planRun(struct loomOp *ops, int nops)
{
    int nlanes = 0;
    struct cudaExec *dev;
    /* Device buffers: the GPU computes the steps (src/cuda); a CUDA stream already ordered them. */
    LOOMCHECK(cudaPlanBegin(ops, nops, ops[0].stream && streamIsCuda(ops[0].stream), &dev));
    int executor = planExecutor(ops, nops, dev != NULL);
    if (executor == LOOM_EXECUTOR_LAUNCH)
        return planLaunch(ops, nops, dev);
    const struct loomExecutor *x = executorOf(executor);
    struct loomExecCall call = {.dev = dev, .ops = ops, .nops = nops, .connect = connectLanes};
    for (int i = 0; i < nops; i++)
        executorReclaim(x, ops[i].comm); /* e.g. a host-driven run after launches on the comm */
    /* Host buffers that every rank allocated with loomMemAlloc: single copies through the
     * mappings (cma.c), where the tuner says to ask. Before the memo: every rank must ask,
     * whatever its previous call was. */
    int mapped = 0;
    if (dev == NULL && nops == 1 && tunerAsksMapped(ops[0].comm, ops[0].coll, opBytes(&ops[0]))) {
        struct loomLane exchange;
        LOOMCHECK(commUsable(&ops[0]));
        cmaMappedLane(&ops[0], &exchange);
        LOOMCHECK(
            executorRun(executorOf(LOOM_EXECUTOR_HOST), &exchange, 1, &(struct loomExecCall){0}));
        mapped = cmaAllMapped(&ops[0]);
    }
    if (dev == NULL && nops == 1 && !mapped && memoMatches(&ops[0])) {
        loomResult_t res = memoLanes(&ops[0], &nlanes);
        return res == loomSuccess ? planRunLanes(x, tlLanes, nlanes, &call) : res;
    }
    loomResult_t res = planLanes(ops, nops, dev, executor, mapped, &nlanes);
    if (dev == NULL && nops == 1)
        memoKeep(&ops[0], tlPlan, res == loomSuccess);
    if (res == loomSuccess && nlanes > 0) {
        TRACE(LOOM_COLL, "plan: %d op(s), %d lane(s), first %s count %zu (%s)%s", nops, nlanes,
              loomCollName(ops[0].coll), ops[0].count, scheduleAlgoName(tlPlan[0].tune.algo),
              dev ? " (device)" : "");
        res = planRunLanes(x, tlLanes, nlanes, &call);
    }
    cudaPlanEnd(dev, res);
    return res;
}

loomResult_t planExecute(struct loomOp *ops, int nops)
{
    for (int i = 0; i < nops; i++)
        recorderBegin(&ops[i]);
    loomResult_t res = planRun(ops, nops);
    for (int i = 0; i < nops; i++)
        recorderEnd(&ops[i], res);
    return res;
}
