/*
 * group.c — loomGroupStart / loomGroupEnd.
 *
 * Between Start and the matching End (groups nest; only the outermost End
 * acts), checked operations are collected in a per-thread list. At End they
 * run as one plan: every operation's lanes progress together, so a set of
 * sends and receives that matches across ranks completes whatever order the
 * ranks issued them in. A call that failed its checks inside the group makes
 * End return that error and run nothing, since running the rest would leave
 * the peers waiting for the missing operation.
 */
#include <stdlib.h>

#include "cudacore.h"
#include "debug.h"
#include "enqueue.h"
#include "plan.h"

static __thread int groupDepth;
static __thread struct loomOp *groupOps;
static __thread int groupCount, groupCap;
static __thread loomResult_t groupError;

int groupActive(void)
{
    return groupDepth > 0;
}

loomResult_t groupAdd(struct loomOp *op)
{
    if (groupCount == groupCap) {
        int cap = groupCap ? 2 * groupCap : 16;
        struct loomOp *p = realloc(groupOps, (size_t)cap * sizeof(*p));
        if (p == NULL) {
            opRelease(op);
            groupError =
                loomSetError(loomSystemError, "out of memory growing a group to %d ops", cap);
            return groupError;
        }
        groupOps = p;
        groupCap = cap;
    }
    groupOps[groupCount++] = *op;
    op->v = NULL; /* the group owns it now */
    return loomSuccess;
}

void groupRecordError(loomResult_t res)
{
    if (groupError == loomSuccess)
        groupError = res;
}

loomResult_t loomGroupStart(void)
{
    groupDepth++;
    return loomSuccess;
}

static void groupClear(void)
{
    for (int i = 0; i < groupCount; i++)
        opRelease(&groupOps[i]);
    groupCount = 0;
    groupError = loomSuccess;
}

/*
 * One stream for the whole group, except a group launched as one kernel
 * (devexec.c) on Loom CUDA streams: the launch goes on operation 0's, and
 * the others join it with events.
 */
static loomResult_t groupCheckStreams(void)
{
    int cuda = 1, same = 1;
    for (int i = 0; i < groupCount; i++) {
        same &= groupOps[i].stream == groupOps[0].stream;
        cuda &= groupOps[i].stream != NULL && streamIsCuda(groupOps[i].stream);
    }
    if (same || (cuda && planLaunched(groupOps, groupCount)))
        return loomSuccess;
    for (int i = 1; i < groupCount; i++)
        if (groupOps[i].stream != groupOps[0].stream)
            return loomSetError(loomInvalidUsage,
                                "loomGroupEnd: operation %d of the group uses a different stream "
                                "than operation 0; all operations of a group must share a stream "
                                "(except device buffers on CUDA streams under "
                                "LOOM_EXECUTOR=kernel, launched as one kernel)",
                                i);
    return loomSuccess;
}

static loomResult_t groupRun(void)
{
    loomResult_t res = groupError;
    if (res != loomSuccess) {
        loomSetError(res,
                     "loomGroupEnd: an operation of the group failed its checks (%s); "
                     "nothing of the group was run",
                     loomGetErrorString(res));
        return res;
    }
    if (groupCount == 0)
        return loomSuccess;
    LOOMCHECK(groupCheckStreams());
    /* A communicator destroyed (or broken) since its call joined the group runs nothing. */
    for (int i = 0; i < groupCount; i++) {
        LOOMCHECK(commCheck(groupOps[i].comm, "loomGroupEnd"));
        LOOMCHECK(commCheckReady(groupOps[i].comm, "loomGroupEnd"));
    }
    struct loomStream *queue = groupOps[0].stream ? groupOps[0].stream : groupOps[0].comm->queue;
    if (queue) {
        res = streamEnqueue(queue, groupOps, groupCount);
        for (int i = 0; i < groupCount; i++)
            groupOps[i].v = NULL; /* the stream owns them now */
        return res == loomSuccess && !groupOps[0].stream ? loomInProgress : res;
    }
    for (int i = 0; i < groupCount; i++)
        atomic_fetch_add_explicit(&groupOps[i].comm->activeCalls, 1, memory_order_acq_rel);
    res = planExecute(groupOps, groupCount);
    for (int i = 0; i < groupCount; i++) {
        if (res != loomSuccess)
            commRecordError(groupOps[i].comm);
        atomic_fetch_sub_explicit(&groupOps[i].comm->activeCalls, 1, memory_order_acq_rel);
    }
    return res;
}

loomResult_t loomGroupEnd(void)
{
    if (groupDepth == 0)
        return loomSetError(loomInvalidUsage, "loomGroupEnd without a matching loomGroupStart");
    if (--groupDepth > 0)
        return loomSuccess;
    loomResult_t res = groupRun();
    groupClear();
    return res;
}
