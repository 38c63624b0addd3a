/*
 * shrink.c — going on without the dead: loomCommGetFailedRanks and
 * loomCommShrink.
 *
 * A rank's death breaks the bootstrap ring (each rank is a link of it) and
 * may take the unique id's root with it, so the survivors cannot rebuild
 * through either. They meet instead at the lowest rank they keep, at the
 * listening socket it opened at init, whose address every rank got then
 * (bootstrapShrink in bootstrap.c). That rank checks that everyone passed
 * the same exclude list and hands out a fresh unique id, with which the
 * survivors make the new communicator as any init does: every link is new,
 * and nothing of the old communicator, broken or not, is used again.
 *
 *   survivors --request{secret, rank, list}--> lowest rank kept
 *             <--verdict{ok + new id | why}---
 *   loomCommInitRankConfig(newcomm, n - excluded, id, rank among the kept)
 *
 * What a rank knows to have failed comes from the executor's own tests
 * (execPeerFailed): a local process gone, a network connection ended.
 */
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bootstrap.h"
#include "core.h"
#include "debug.h"
#include "exec.h"
#include "lifecycle.h"

loomResult_t loomCommGetFailedRanks(loomComm_t comm, int *ranks, int *count)
{
    const char *fn = "loomCommGetFailedRanks";
    LOOMCHECK(commCheck(comm, fn));
    if (count == NULL)
        return loomSetError(loomInvalidArgument, "%s: count is NULL", fn);
    int n = 0;
    for (int p = 0; comm->peers != NULL && p < comm->nranks; p++) {
        if (!execPeerFailed(comm, p))
            continue;
        if (ranks != NULL)
            ranks[n] = p;
        n++;
    }
    *count = n;
    return loomSuccess;
}

static int shrinkGone(void *ctx, int rank)
{
    const struct loomComm *comm = ctx;
    return comm->peers != NULL && execPeerFailed(comm, rank);
}

static int intCompare(const void *a, const void *b)
{
    int x = *(const int *)a, y = *(const int *)b;
    return (x > y) - (x < y);
}

/* Checks the list and leaves it sorted, without duplicates, in *out. */
static loomResult_t shrinkList(const struct loomComm *comm, const int *ex, int nex, int **out,
                               int *nout)
{
    const char *fn = "loomCommShrink";
    if (nex < 0 || nex >= comm->nranks || (ex == NULL && nex > 0))
        return loomSetError(loomInvalidArgument,
                            "%s: excludeCount %d must be in 0..%d, with excludeRanks not NULL", fn,
                            nex, comm->nranks - 1);
    int *list = calloc((size_t)nex + 1, sizeof(*list));
    if (list == NULL)
        return loomSetError(loomSystemError, "%s: out of memory", fn);
    for (int i = 0; i < nex; i++) {
        if (ex[i] < 0 || ex[i] >= comm->nranks || ex[i] == comm->rank) {
            free(list);
            return loomSetError(
                loomInvalidArgument,
                "%s: excludeRanks[%d] = %d is %s; the excluded ranks do not call "
                "loomCommShrink",
                fn, i, ex[i], ex[i] == comm->rank ? "the caller's own rank" : "not a rank of comm");
        }
        list[i] = ex[i];
    }
    qsort(list, (size_t)nex, sizeof(*list), intCompare);
    int m = 0;
    for (int i = 0; i < nex; i++)
        if (m == 0 || list[m - 1] != list[i])
            list[m++] = list[i];
    *out = list;
    *nout = m;
    return loomSuccess;
}

/* Waits until no operation of comm is queued or running (after an abort they end soon). */
static void shrinkQuiesce(struct loomComm *comm, int abort)
{
    if (abort) {
        atomic_store_explicit(&comm->abortFlag, 1, memory_order_release);
        commSetBroken(comm, loomRemoteError, "aborted by loomCommShrink (LOOM_SHRINK_ABORT)");
    }
    while (atomic_load(&comm->pending) > 0 || atomic_load(&comm->activeCalls) > 0) {
        if (abort)
            execWake(comm);
        struct timespec ts = {0, 1000000};
        nanosleep(&ts, NULL);
    }
}

static loomResult_t shrinkRun(struct loomComm *comm, const int *list, int nex, loomComm_t *newcomm,
                              loomConfig_t *config)
{
    struct bootstrapShrink req = {list, nex, shrinkGone, comm};
    loomUniqueId id;
    int newRank = comm->rank;
    for (int i = 0; i < nex; i++)
        newRank -= list[i] < comm->rank;
    uint64_t start = loomClockNs();
    LOOMCHECK(bootstrapShrink(comm->bootstrap, &req, &id));
    uint64_t met = loomClockNs();
    loomResult_t res = loomCommInitRankConfig(newcomm, comm->nranks - nex, id, newRank,
                                              config ? config : &comm->config);
    INFO(LOOM_INIT,
         "loomCommShrink: rank %d of %d is rank %d of %d of the new communicator (met in %.1f "
         "ms, made in %.1f ms)",
         comm->rank, comm->nranks, newRank, comm->nranks - nex, (double)(met - start) / 1e6,
         (double)(loomClockNs() - met) / 1e6);
    return res;
}

loomResult_t loomCommShrink(loomComm_t comm, const int *excludeRanks, int excludeCount,
                            loomComm_t *newcomm, loomConfig_t *config, int flags)
{
    const char *fn = "loomCommShrink";
    int *list = NULL, nex = 0;
    LOOMCHECK(commCheck(comm, fn));
    if (atomic_load_explicit(&comm->initializing, memory_order_acquire) || comm->bootstrap == NULL)
        return loomSetError(loomInvalidUsage,
                            "%s: the communicator %s; only a communicator that was made can "
                            "shrink",
                            fn,
                            atomic_load(&comm->initializing) ? "is still being created"
                                                             : "failed to be created");
    if (newcomm == NULL)
        return loomSetError(loomInvalidArgument, "%s: newcomm is NULL", fn);
    if (flags != LOOM_SHRINK_DEFAULT && flags != LOOM_SHRINK_ABORT)
        return loomSetError(loomInvalidArgument,
                            "%s: flags 0x%x is neither LOOM_SHRINK_DEFAULT nor LOOM_SHRINK_ABORT",
                            fn, (unsigned)flags);
    LOOMCHECK(commCheckInitArgs(newcomm, comm->nranks, 0, config, fn));
    LOOMCHECK(shrinkList(comm, excludeRanks, excludeCount, &list, &nex));
    commRevokeSettle(comm, 1);
    shrinkQuiesce(comm, flags == LOOM_SHRINK_ABORT);
    loomResult_t res = shrinkRun(comm, list, nex, newcomm, config);
    free(list);
    if (res != loomSuccess && res != loomInProgress)
        commRecordError(comm);
    return res;
}
