/*
 * schedule.c — the growable step array every generator appends to.
 *
 * A schedule is built once per (operation, lane) and usually cached or
 * rebuilt into the same array for the next call, so the array only ever
 * grows: scheduleReset keeps the memory, and growth doubles the capacity so
 * that a lane of k steps costs O(log k) reallocations the first time and
 * none afterwards.
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

loomResult_t scheduleAppendOp(struct loomSchedule *s, loomStepOp_t op, uint8_t flags, int recvPeer,
                              int sendPeer, uint8_t srcBuf, size_t srcOff, size_t dstOff,
                              size_t count)
{
    struct loomStep st = {
        .op = (uint8_t)op,
        .srcBuf = srcBuf,
        .dstBuf = LOOM_BUF_RECV,
        .flags = flags,
        .sendPeer = sendPeer,
        .recvPeer = recvPeer,
        .srcOff = srcOff,
        .dstOff = dstOff,
        .count = count,
    };
    return scheduleAppend(s, &st);
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

/* Indexed by loomColl_t, then loomAlgo_t; NULL where a collective lacks the algorithm. */
#define RING LOOM_ALGO_RING
#define TREE LOOM_ALGO_TREE
#define DIRECT LOOM_ALGO_DIRECT
#define DOUBLING LOOM_ALGO_DOUBLING
#define CMA LOOM_ALGO_CMA
static const loomGenerator_t scheduleGenerators[LOOM_COLL_NUM][LOOM_ALGO_NUM] = {
    [LOOM_COLL_BROADCAST] = {[RING] = ringBroadcastSchedule, [TREE] = treeBroadcastSchedule},
    [LOOM_COLL_REDUCE] = {[RING] = ringReduceSchedule, [TREE] = treeReduceSchedule},
    [LOOM_COLL_ALLREDUCE] = {[RING] = ringAllReduceSchedule,
                             [TREE] = treeAllReduceSchedule,
                             [DOUBLING] = doublingAllReduceSchedule},
    [LOOM_COLL_ALLGATHER] = {[RING] = ringAllGatherSchedule, [CMA] = directAllGatherCmaSchedule},
    [LOOM_COLL_REDUCESCATTER] = {[RING] = ringReduceScatterSchedule},
    [LOOM_COLL_ALLTOALL] = {[DIRECT] = directAlltoAllSchedule, [CMA] = directAlltoAllCmaSchedule},
    [LOOM_COLL_ALLTOALLV] = {[DIRECT] = directAlltoAllvSchedule},
    [LOOM_COLL_SEND] = {[DIRECT] = directSendSchedule},
    [LOOM_COLL_RECV] = {[DIRECT] = directRecvSchedule},
};

loomGenerator_t scheduleGenerator(loomColl_t coll, loomAlgo_t algo)
{
    if ((unsigned)coll >= LOOM_COLL_NUM || (unsigned)algo >= LOOM_ALGO_NUM)
        return NULL;
    return scheduleGenerators[coll][algo];
}
