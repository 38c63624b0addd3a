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

/* Indexed by loomColl_t: the ring or direct generator, and the tree's where there is one. */
static const loomGenerator_t scheduleGenerators[LOOM_COLL_NUM][2] = {
    [LOOM_COLL_BROADCAST] = {ringBroadcastSchedule, treeBroadcastSchedule},
    [LOOM_COLL_REDUCE] = {ringReduceSchedule, treeReduceSchedule},
    [LOOM_COLL_ALLREDUCE] = {ringAllReduceSchedule, treeAllReduceSchedule},
    [LOOM_COLL_ALLGATHER] = {ringAllGatherSchedule, NULL},
    [LOOM_COLL_REDUCESCATTER] = {ringReduceScatterSchedule, NULL},
    [LOOM_COLL_ALLTOALL] = {directAlltoAllSchedule, NULL},
    [LOOM_COLL_ALLTOALLV] = {directAlltoAllvSchedule, NULL},
    [LOOM_COLL_SEND] = {directSendSchedule, NULL},
    [LOOM_COLL_RECV] = {directRecvSchedule, NULL},
};

loomGenerator_t scheduleGenerator(loomColl_t coll, int tree)
{
    if ((unsigned)coll >= LOOM_COLL_NUM)
        return NULL;
    return scheduleGenerators[coll][tree != 0];
}
