/*
 * schedule.c — plans and step arrays: building, expanding, the generator table.
 *
 * A plan is built once per (operation, lane) and usually cached or rebuilt
 * into the same array for the next call, so its array only ever grows:
 * planReset keeps the memory, and growth doubles the capacity. Its size
 * depends on the number of ranks, not on the count. The step array
 * (struct loomSchedule) is a plan expanded, for the simulator.
 *
 * This file sits below the core's logging (algorithms include only
 * schedule.h and libc), so an allocation failure is reported by its code
 * alone; the caller that owns the communicator records the reason.
 */
#include <stdint.h>
#include <stdlib.h>

#include "schedule.h"

/* First capacity: enough for a ring AllReduce of one loop on 32 ranks. */
#define SCHEDULE_INITIAL_CAP 64

loomResult_t scheduleAppend(struct loomSchedule *s, const struct loomStep *step)
{
    if (s->nsteps == s->cap) {
        size_t cap = s->cap ? s->cap * 2 : SCHEDULE_INITIAL_CAP;
        if (cap <= s->cap || cap > SIZE_MAX / sizeof(*s->steps))
            return loomSystemError;
        struct loomStep *steps = realloc(s->steps, cap * sizeof(*steps));
        if (steps == NULL)
            return loomSystemError;
        s->steps = steps;
        s->cap = cap;
    }
    s->steps[s->nsteps++] = *step;
    return loomSuccess;
}

const char *loomStepName(unsigned op)
{
    static const char *const names[LOOM_STEP_NUM_OPS] = {
        "SEND",
        "RECV",
        "RECV_REDUCE_SEND",
        "RECV_REDUCE_COPY",
        "RECV_REDUCE_COPY_SEND",
        "RECV_COPY_SEND",
        "COPY",
        "OFFER",
        "PULL",
        "DRAIN",
        "PULL_REDUCE",
        "PUSH",
    };
    return op < LOOM_STEP_NUM_OPS ? names[op] : "?";
}

void scheduleReset(struct loomSchedule *s)
{
    s->nsteps = 0;
}

void scheduleFree(struct loomSchedule *s)
{
    free(s->steps);
    s->steps = NULL;
    s->nsteps = 0;
    s->cap = 0;
}

/* ---- plans ---- */

void planLoop(struct loomPlan *p)
{
    p->open = p->nsteps;
}

/*
 * Whether n peers in peers[] fit an op whose table entry has `use` (RECV or
 * SEND) and `many` (FANIN or FANOUT): none without `use`, one without
 * `many`, up to LOOM_STEP_MAXPEERS with it, each a rank and none twice.
 * Unused entries are set to -1.
 */
static int peersFit(unsigned uses, unsigned use, unsigned many, unsigned n, int32_t *peers)
{
    unsigned most = !(uses & use) ? 0 : (uses & many) ? LOOM_STEP_MAXPEERS : 1;
    if (n > most || ((uses & use) && n == 0))
        return 0;
    for (unsigned k = 0; k < LOOM_STEP_MAXPEERS; k++) {
        if (k >= n) {
            peers[k] = -1;
            continue;
        }
        if (peers[k] < 0)
            return 0;
        for (unsigned j = 0; j < k; j++)
            if (peers[j] == peers[k])
                return 0;
    }
    return 1;
}

loomResult_t planAppend(struct loomPlan *p, const struct loomPlanStep *tmpl)
{
    struct loomPlanStep tc = *tmpl, *t = &tc;
    unsigned uses = loomStepUses(t->op);
    struct loomStep first;
    if (uses == 0 || !peersFit(uses, LOOM_USES_RECV, LOOM_USES_FANIN, t->nrecv, t->recvPeers) ||
        !peersFit(uses, LOOM_USES_SEND, LOOM_USES_FANOUT, t->nsend, t->sendPeers) ||
        t->nblocks == 0 || t->block >= t->nblocks || (t->piece == 0 && t->nblocks != 1))
        return loomInternalError;
    t->npieces = t->piece == 0 ? 1 : t->len / t->piece + (t->len % t->piece != 0);
    t->blockLen = t->piece / t->nblocks + (t->piece % t->nblocks != 0);
    /* The first piece is the longest, so a block empty there is empty everywhere. */
    if (!loomPlanStepAt(t, t->lag, &first))
        return loomSuccess;
    if (p->nsteps == p->cap) {
        uint32_t cap = p->cap ? p->cap * 2 : 16;
        if (cap <= p->cap)
            return loomSystemError;
        struct loomPlanStep *steps = realloc(p->steps, cap * sizeof(*steps));
        if (steps == NULL)
            return loomSystemError;
        p->steps = steps;
        p->cap = cap;
    }
    uint64_t niters = p->nsteps > p->open ? p->steps[p->open].niters : 0;
    if (t->lag + t->npieces > niters)
        niters = t->lag + t->npieces;
    p->steps[p->nsteps++] = *t;
    for (uint32_t k = p->open; k < p->nsteps; k++) {
        p->steps[k].loopStart = p->open;
        p->steps[k].loopEnd = p->nsteps;
        p->steps[k].niters = niters;
    }
    return loomSuccess;
}

struct loomPlanStep planMoving(loomStepOp_t op, uint8_t flags, int sendPeer, const int *recvPeers,
                               int nrecv, int srcBuf, size_t srcOff, int dstBuf, size_t dstOff,
                               size_t len, size_t piece)
{
    unsigned uses = loomStepUses(op);
    struct loomPlanStep t = {
        .op = (uint8_t)op,
        .srcBuf = (uint8_t)srcBuf,
        .dstBuf = (uint8_t)dstBuf,
        .flags = flags,
        .moves = (uint8_t)(((uses & LOOM_USES_SRC) ? LOOM_PLAN_SRC_MOVES : 0) |
                           ((uses & LOOM_USES_DST) ? LOOM_PLAN_DST_MOVES : 0)),
        .nrecv = (uint8_t)nrecv,
        .nsend = sendPeer >= 0,
        .sendPeers = {sendPeer},
        .nblocks = 1,
        .len = len,
        .piece = piece,
        .srcBase = (uses & LOOM_USES_SRC) ? srcOff : 0,
        .dstBase = (uses & LOOM_USES_DST) ? dstOff : 0,
    };
    for (int k = 0; k < nrecv && k < LOOM_STEP_MAXPEERS; k++)
        t.recvPeers[k] = recvPeers[k];
    return t;
}

void planReset(struct loomPlan *p)
{
    p->nsteps = 0;
    p->open = 0;
}

void planFree(struct loomPlan *p)
{
    free(p->steps);
    p->steps = NULL;
    p->nsteps = p->cap = p->open = 0;
}

loomResult_t planExpand(const struct loomPlan *p, struct loomSchedule *out)
{
    struct loomPlanIter it = {0, 0};
    struct loomStep st;
    while (loomPlanNext(p->steps, p->nsteps, &it, &st)) {
        loomResult_t res = scheduleAppend(out, &st);
        if (res != loomSuccess)
            return res;
    }
    return loomSuccess;
}

/* Indexed by loomColl_t, then loomAlgo_t; NULL where a collective lacks the algorithm. */
#define RING LOOM_ALGO_RING
#define TREE LOOM_ALGO_TREE
#define DIRECT LOOM_ALGO_DIRECT
#define DOUBLING LOOM_ALGO_DOUBLING
#define CMA LOOM_ALGO_CMA
static const loomGenerator_t scheduleGenerators[LOOM_COLL_NUM][LOOM_ALGO_NUM] = {
    [LOOM_COLL_BROADCAST] =
        {[RING] = ringBroadcastPlan, [TREE] = treeBroadcastPlan, [CMA] = singleBroadcastPlan},
    [LOOM_COLL_REDUCE] =
        {[RING] = ringReducePlan, [TREE] = treeReducePlan, [CMA] = singleReducePlan},
    [LOOM_COLL_ALLREDUCE] = {[RING] = ringAllReducePlan,
                             [TREE] = treeAllReducePlan,
                             [DOUBLING] = doublingAllReducePlan,
                             [CMA] = singleAllReducePlan},
    [LOOM_COLL_ALLGATHER] = {[RING] = ringAllGatherPlan, [CMA] = singleAllGatherPlan},
    [LOOM_COLL_REDUCESCATTER] = {[RING] = ringReduceScatterPlan, [CMA] = singleReduceScatterPlan},
    [LOOM_COLL_ALLTOALL] = {[DIRECT] = directAlltoAllPlan, [CMA] = singleAlltoAllPlan},
    [LOOM_COLL_ALLTOALLV] = {[DIRECT] = directAlltoAllvPlan},
    [LOOM_COLL_SEND] = {[DIRECT] = directSendPlan},
    [LOOM_COLL_RECV] = {[DIRECT] = directRecvPlan},
};

loomGenerator_t scheduleGenerator(loomColl_t coll, loomAlgo_t algo)
{
    if ((unsigned)coll >= LOOM_COLL_NUM || (unsigned)algo >= LOOM_ALGO_NUM)
        return NULL;
    return scheduleGenerators[coll][algo];
}

const char *scheduleAlgoName(loomAlgo_t algo)
{
    static const char *const names[LOOM_ALGO_NUM] = {[LOOM_ALGO_RING] = "ring",
                                                     [LOOM_ALGO_TREE] = "tree",
                                                     [LOOM_ALGO_DIRECT] = "direct",
                                                     [LOOM_ALGO_DOUBLING] = "doubling",
                                                     [LOOM_ALGO_CMA] = "cma"};
    return (unsigned)algo < LOOM_ALGO_NUM ? names[algo] : "?";
}
