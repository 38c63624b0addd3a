/*
 * grow.c — adding ranks to a communicator: loomCommGetUniqueId and
 * loomCommGrow, with NCCL 2.29's signatures and rules (shrink.c is the
 * mirror).
 *
 * One rank of the parent communicator, the coordinator, makes a grow id
 * (loomCommGetUniqueId), which opens a port of its own for the meeting
 * (bootgrow.c), and hands the id to the new ranks by any means. Then:
 *
 *   ranks of comm:  loomCommGrow(comm, n, coordinator ? &id : NULL, -1, &newcomm, config)
 *   new ranks:      loomCommGrow(NULL, n, &id, their rank, &newcomm, config)
 *
 * The ranks of comm first exchange, over comm's bootstrap ring, what each
 * passed (nranks, whether it holds the id, the id), so that those without
 * the id learn it and all of them agree or fail together; then everyone
 * but the coordinator meets it on the id's port, and leaves with a fresh
 * unique id, with which all make the new communicator as any init does:
 * ranks of comm keep their numbers, new ranks take comm's size and up.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bootstrap.h"
#include "core.h"
#include "debug.h"
#include "exec.h"
#include "lifecycle.h"
#include "param.h"

loomResult_t loomCommGetUniqueId(loomComm_t comm, loomUniqueId *uniqueId)
{
    const char *fn = "loomCommGetUniqueId";
    LOOMCHECK(commCheckParent(comm, fn));
    if (uniqueId == NULL)
        return loomSetError(loomInvalidArgument, "%s: uniqueId is NULL", fn);
    /* An id made before and not used is withdrawn: one grow meeting at a time. */
    bootstrapGrowClose(comm->grow);
    comm->grow = NULL;
    return bootstrapGrowOpen(&comm->grow, uniqueId);
}

static int growGone(void *ctx, int rank)
{
    const struct loomComm *comm = ctx;
    return comm->peers != NULL && execPeerFailed(comm, rank);
}

/* What each rank of comm passed, exchanged over its bootstrap ring. */
struct growEntry {
    int32_t nranks;
    int32_t holds; /* passed an id */
    int32_t valid; /* ... and it is the unused one its own loomCommGetUniqueId made */
    loomUniqueId id;
};

/* loomSuccess with the coordinator in *holder, or the same misuse on every rank of comm. */
static loomResult_t growAgree(const struct loomComm *comm, const struct growEntry *all, int *holder)
{
    const char *fn = "loomCommGrow";
    int first = -1, second = -1;
    for (int p = 0; p < comm->nranks; p++) {
        if (all[p].nranks != all[comm->rank].nranks)
            return loomSetError(loomInvalidUsage,
                                "%s: rank %d asks for %d ranks, rank %d for %d; every rank must "
                                "pass the same nranks",
                                fn, p, all[p].nranks, comm->rank, all[comm->rank].nranks);
        if (all[p].holds && first < 0)
            first = p;
        else if (all[p].holds && second < 0)
            second = p;
    }
    if (first < 0)
        return loomSetError(loomInvalidUsage,
                            "%s: no rank of the communicator passed the grow id; the rank that "
                            "made it with loomCommGetUniqueId passes it, the others NULL",
                            fn);
    if (second >= 0)
        return loomSetError(loomInvalidUsage,
                            "%s: ranks %d and %d both passed an id; only the rank that made it "
                            "with loomCommGetUniqueId passes it, the others NULL",
                            fn, first, second);
    if (!all[first].valid)
        return loomSetError(loomInvalidUsage,
                            "%s: rank %d passed an id that is not the one its "
                            "loomCommGetUniqueId(comm) made last, or one a grow has used already "
                            "(an id serves one grow: get a new one)",
                            fn, first);
    *holder = first;
    return loomSuccess;
}

/* A rank of comm: agree with the others, then meet (or host) the coordinator. */
static loomResult_t growExisting(struct loomComm *comm, int nranks, const loomUniqueId *uniqueId,
                                 loomUniqueId *newId)
{
    struct growEntry *all = calloc((size_t)comm->nranks, sizeof(*all));
    if (all == NULL)
        return loomSetError(loomSystemError, "loomCommGrow: out of memory");
    struct growEntry *mine = &all[comm->rank];
    mine->nranks = nranks;
    mine->holds = uniqueId != NULL;
    mine->valid = bootstrapGrowOwns(comm->grow, uniqueId);
    if (uniqueId != NULL)
        mine->id = *uniqueId;
    int holder = -1;
    loomResult_t res = bootstrapAllGather(comm->bootstrap, all, sizeof(*all));
    if (res == loomSuccess)
        res = growAgree(comm, all, &holder);
    struct bootstrapGrowReq req = {comm->nranks,     nranks,   comm->rank, 1,
                                   comm->timeoutSec, growGone, comm};
    if (res == loomSuccess && holder == comm->rank)
        res = bootstrapGrowHost(comm->grow, &req, newId);
    else if (res == loomSuccess)
        res = bootstrapGrowJoin(&all[holder].id, &req, newId);
    /* The id is spent, whatever happened: new ranks still waiting are told so at once. */
    if (mine->valid) {
        bootstrapGrowClose(comm->grow);
        comm->grow = NULL;
    }
    free(all);
    return res;
}

/* The checks of a rank of comm; rank -1 and a size above comm's. */
static loomResult_t growCheckExisting(struct loomComm *comm, int nranks, int rank,
                                      loomComm_t *newcomm, loomConfig_t *config)
{
    const char *fn = "loomCommGrow";
    LOOMCHECK(commCheckParent(comm, fn));
    if (comm->bootstrap == NULL)
        return loomSetError(loomInvalidUsage, "%s: the communicator failed to be created", fn);
    if (rank != -1)
        return loomSetError(loomInvalidArgument,
                            "%s: rank %d: a rank of comm passes rank -1 (it keeps its rank, %d); "
                            "only new ranks, which pass comm NULL, name theirs",
                            fn, rank, comm->rank);
    if (nranks <= comm->nranks)
        return loomSetError(loomInvalidArgument,
                            "%s: nranks %d must be more than the communicator's %d ranks", fn,
                            nranks, comm->nranks);
    return commCheckInitArgs(newcomm, nranks, comm->rank, config, fn);
}

loomResult_t loomCommGrow(loomComm_t comm, int nranks, const loomUniqueId *uniqueId, int rank,
                          loomComm_t *newcomm, loomConfig_t *config)
{
    const char *fn = "loomCommGrow";
    loomUniqueId newId;
    loomResult_t res;
    uint64_t start = loomClockNs();

    debugInit();
    if (comm == NULL) {
        if (uniqueId == NULL)
            return loomSetError(loomInvalidArgument,
                                "%s: a new rank (comm NULL) passes the grow id that "
                                "loomCommGetUniqueId made on a rank of the communicator",
                                fn);
        LOOMCHECK(commCheckInitArgs(newcomm, nranks, rank, config, fn));
        if (nranks < 2)
            return loomSetError(loomInvalidArgument, "%s: nranks %d: a grow makes 2 ranks or more",
                                fn, nranks);
        int timeout = config && config->timeoutSec != LOOM_CONFIG_UNDEF_INT
                          ? config->timeoutSec
                          : (int)paramInt(LOOM_PARAM_TIMEOUT);
        struct bootstrapGrowReq req = {0, nranks, rank, 0, timeout < 1 ? 1 : timeout, NULL, NULL};
        LOOMCHECK(bootstrapGrowJoin(uniqueId, &req, &newId));
    } else {
        LOOMCHECK(growCheckExisting(comm, nranks, rank, newcomm, config));
        /* As NCCL asks: nothing of comm runs while it grows. */
        while (atomic_load(&comm->pending) > 0 || atomic_load(&comm->activeCalls) > 0) {
            struct timespec ts = {0, 1000000};
            nanosleep(&ts, NULL);
        }
        rank = comm->rank;
        res = growExisting(comm, nranks, uniqueId, &newId);
        if (res != loomSuccess) {
            commRecordError(comm);
            return res;
        }
        if (config == NULL)
            config = &comm->config;
    }
    uint64_t met = loomClockNs();
    res = loomCommInitRankConfig(newcomm, nranks, newId, rank, config);
    INFO(LOOM_INIT,
         "loomCommGrow: rank %d of %d of the new communicator (%s; met in %.1f ms, made in %.1f "
         "ms)",
         rank, nranks, comm ? "a rank of the parent" : "a new rank", (double)(met - start) / 1e6,
         (double)(loomClockNs() - met) / 1e6);
    return res;
}
