/*
 * direct.c — pairwise schedules: AlltoAll, AlltoAllv, and Send / Recv.
 *
 * All-to-all runs n rounds. Round 0 copies this rank's own block; in round k
 * rank r sends to r + k and receives from r - k (mod n), so every ordered
 * pair of ranks is used in exactly one round and every round is a set of
 * rings. Within a round the sends and receives alternate piece by piece:
 *
 *   round k on rank r:  SEND p0 -> r+k   RECV p0 <- r-k   SEND p1 -> r+k   RECV p1 <- r-k ...
 *
 * so no rank has to finish sending before it starts receiving: each FIFO is
 * drained while it fills, and LOOM_STEPS slots suffice whatever the counts
 * (AlltoAllv counts may differ per pair; the longer side finishes alone).
 * The symbolic simulator in tests/unit/check_schedule.c checks this for
 * uneven counts. Peers are ranks, not ring positions: the ring order buys
 * nothing when every pair talks.
 *
 * Send and Recv are one stream of pieces to or from args->root.
 *
 * Single copies (LOOM_ALGO_CMA) have schedules of their own: single.c.
 *
 * As plans (schedule.h): each round is one loop over pieces whose body is a
 * SEND and a RECV template, each with its own length, so a plan holds O(n)
 * templates whatever the counts.
 */
#include <stddef.h>
#include <stdint.h>

#include "schedule.h"

/* Appends one template between the send and the receive buffer (schedule.h's planMoving). */
static loomResult_t directStep(struct loomPlan *out, loomStepOp_t op, int sendPeer, int recvPeer,
                               size_t srcOff, size_t dstOff, size_t len, size_t piece)
{
    struct loomPlanStep t = planMoving(op, 0, sendPeer, &recvPeer, recvPeer >= 0, LOOM_BUF_SEND,
                                       srcOff, LOOM_BUF_RECV, dstOff, len, piece);
    return planAppend(out, &t);
}

/* Copies count elements from srcOff to dstOff in pieces of chunk: a loop of its own. */
static loomResult_t directCopyPieces(struct loomPlan *out, size_t srcOff, size_t dstOff,
                                     size_t count, size_t chunk)
{
    planLoop(out);
    return directStep(out, LOOM_STEP_COPY, -1, -1, srcOff, dstOff, count, chunk);
}

/*
 * One round: nsend elements to sendTo and nrecv from recvFrom, alternating
 * piece by piece (one loop; the longer side goes on alone).
 */
static loomResult_t directExchange(struct loomPlan *out, size_t chunk, int sendTo, size_t srcOff,
                                   size_t nsend, int recvFrom, size_t dstOff, size_t nrecv)
{
    planLoop(out);
    loomResult_t res = directStep(out, LOOM_STEP_SEND, sendTo, -1, srcOff, 0, nsend, chunk);
    if (res == loomSuccess)
        res = directStep(out, LOOM_STEP_RECV, -1, recvFrom, 0, dstOff, nrecv, chunk);
    return res;
}

/* A zero chunk would never advance; the core never passes one, so it is an internal bug. */
static loomResult_t directCheck(const struct loomSchedArgs *a)
{
    if (a->nranks < 1 || a->rank < 0 || a->rank >= a->nranks || a->chunkElems == 0 || a->lo > a->hi)
        return loomInternalError;
    return loomSuccess;
}

loomResult_t directAlltoAllPlan(const struct loomSchedArgs *a, struct loomPlan *out)
{
    loomResult_t res = directCheck(a);
    if (res != loomSuccess)
        return res;
    int n = a->nranks, r = a->rank;
    size_t len = a->hi - a->lo;
    size_t own = (size_t)r * a->count + a->lo;
    if ((res = directCopyPieces(out, own, own, len, a->chunkElems)) != loomSuccess)
        return res;
    for (int k = 1; k < n; k++) {
        int sendTo = (r + k) % n, recvFrom = (r - k + n) % n;
        size_t srcOff = (size_t)sendTo * a->count + a->lo;
        size_t dstOff = (size_t)recvFrom * a->count + a->lo;
        res = directExchange(out, a->chunkElems, sendTo, srcOff, len, recvFrom, dstOff, len);
        if (res != loomSuccess)
            return res;
    }
    return loomSuccess;
}

loomResult_t directAlltoAllvPlan(const struct loomSchedArgs *a, struct loomPlan *out)
{
    loomResult_t res = directCheck(a);
    if (res != loomSuccess)
        return res;
    int n = a->nranks, r = a->rank;
    size_t self = a->sendcounts[r] < a->recvcounts[r] ? a->sendcounts[r] : a->recvcounts[r];
    res = directCopyPieces(out, a->sdispls[r], a->rdispls[r], self, a->chunkElems);
    if (res != loomSuccess)
        return res;
    for (int k = 1; k < n; k++) {
        int sendTo = (r + k) % n, recvFrom = (r - k + n) % n;
        res = directExchange(out, a->chunkElems, sendTo, a->sdispls[sendTo], a->sendcounts[sendTo],
                             recvFrom, a->rdispls[recvFrom], a->recvcounts[recvFrom]);
        if (res != loomSuccess)
            return res;
    }
    return loomSuccess;
}

loomResult_t directSendPlan(const struct loomSchedArgs *a, struct loomPlan *out)
{
    if (a->chunkElems == 0 || a->lo > a->hi)
        return loomInternalError;
    planLoop(out);
    return directStep(out, LOOM_STEP_SEND, a->root, -1, a->lo, 0, a->hi - a->lo, a->chunkElems);
}

loomResult_t directRecvPlan(const struct loomSchedArgs *a, struct loomPlan *out)
{
    if (a->chunkElems == 0 || a->lo > a->hi)
        return loomInternalError;
    planLoop(out);
    return directStep(out, LOOM_STEP_RECV, -1, a->root, 0, a->lo, a->hi - a->lo, a->chunkElems);
}
