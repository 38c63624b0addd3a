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
 * AlltoAll and AllGather also have single-copy schedules (LOOM_ALGO_CMA,
 * below).
 *
 * As plans (schedule.h): each round is one loop over pieces whose body is a
 * SEND and a RECV template, each with its own length, so a plan holds O(n)
 * templates whatever the counts.
 */
#include <stddef.h>
#include <stdint.h>

#include "schedule.h"

/*
 * Appends one template: op over len elements in pieces of `piece` (0: one
 * step of all of them), src and dst offsets moving from srcOff and dstOff.
 */
static loomResult_t directStep(struct loomPlan *out, loomStepOp_t op, int sendPeer, int recvPeer,
                               size_t srcOff, size_t dstOff, size_t len, size_t piece)
{
    unsigned uses = loomStepUses(op);
    struct loomPlanStep t = {
        .op = (uint8_t)op,
        .srcBuf = LOOM_BUF_SEND,
        .dstBuf = LOOM_BUF_RECV,
        .moves = (uint8_t)(((uses & LOOM_USES_SRC) ? LOOM_PLAN_SRC_MOVES : 0) |
                           ((uses & LOOM_USES_DST) ? LOOM_PLAN_DST_MOVES : 0)),
        .nrecv = recvPeer >= 0,
        .nsend = sendPeer >= 0,
        .recvPeers = {recvPeer},
        .sendPeers = {sendPeer},
        .nblocks = 1,
        .len = len,
        .piece = piece,
        .srcBase = (uses & LOOM_USES_SRC) ? srcOff : 0,
        .dstBase = (uses & LOOM_USES_DST) ? dstOff : 0,
    };
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

/*
 * Single copies (LOOM_ALGO_CMA): this rank offers each peer its block (a
 * whole block per OFFER), copies its own, pulls its block of every peer's
 * send buffer, then drains every peer it offered to. gather: AllGather,
 * whose blocks are all the send buffer.
 */
static loomResult_t directCma(const struct loomSchedArgs *a, struct loomPlan *out, int gather)
{
    loomResult_t res = directCheck(a);
    if (res != loomSuccess)
        return res;
    int n = a->nranks, r = a->rank;
    size_t len = a->hi - a->lo, own = (size_t)r * a->count + a->lo;
    if (len == 0)
        return loomSuccess;
    planLoop(out);
    for (int k = 1; k < n && res == loomSuccess; k++) {
        int p = (r + k) % n;
        size_t srcOff = (gather ? 0 : (size_t)p * a->count) + a->lo;
        res = directStep(out, LOOM_STEP_OFFER, p, -1, srcOff, 0, len, 0);
    }
    if (res == loomSuccess)
        res = directCopyPieces(out, gather ? a->lo : own, own, len, a->chunkElems);
    planLoop(out);
    for (int k = 1; k < n && res == loomSuccess; k++) {
        int p = (r - k + n) % n;
        res = directStep(out, LOOM_STEP_PULL, -1, p, 0, (size_t)p * a->count + a->lo, len, 0);
    }
    for (int k = 1; k < n && res == loomSuccess; k++)
        res = directStep(out, LOOM_STEP_DRAIN, (r + k) % n, -1, 0, 0, 0, 0);
    return res;
}

loomResult_t directAlltoAllCmaPlan(const struct loomSchedArgs *a, struct loomPlan *out)
{
    return directCma(a, out, 0);
}

loomResult_t directAllGatherCmaPlan(const struct loomSchedArgs *a, struct loomPlan *out)
{
    return directCma(a, out, 1);
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
