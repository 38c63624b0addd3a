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
 * Every collective but AlltoAllv also has a single-copy schedule
 * (LOOM_ALGO_CMA, below): ranks of one host offer each other the addresses
 * of their buffers and read (PULL) straight from the peers' memory, or
 * write (PUT) straight into it. The reductions split the work: rank p
 * reduces slice p (1/n of the range), folding every peer's offer of that
 * slice into its own in fan-in steps, then writes the result where the
 * peers asked for it:
 *
 *   AllReduce on rank r:  OFFER send slice p -> p (each p)
 *                         OFFER recv slice p -> p (each p: where p puts it)
 *                         PULL_REDUCE_COPY slice r <- peers (+) send slice r, FINAL
 *                         PUT recv slice r -> p's offer (each p)
 *                         DRAIN p (each p)
 *
 * PUT rather than a PULL of every reduced slice: the writer's slice is
 * still in its cache and the stores go out without waiting, where a reader
 * would wait on lines another core just wrote (docs/performance.md).
 * Each FIFO carries at most two offers a call, and every rank makes all its
 * offers before it waits for anything, so nothing can deadlock. In place,
 * no rank writes what a peer has still to read: rank r writes slice r of
 * p's buffer only after it has read it (its PULL_REDUCE_COPY came first),
 * and no other rank reads it.
 *
 * As plans (schedule.h): each round is one loop over pieces whose body is a
 * SEND and a RECV template, each with its own length, so a plan holds O(n)
 * templates whatever the counts.
 */
#include <stddef.h>
#include <stdint.h>

#include "schedule.h"

/*
 * Appends one template: op over len elements of buffer srcBuf (from srcOff)
 * and dstBuf (from dstOff) in pieces of `piece` (0: one step of all of
 * them), the offsets moving with the pieces; receiving from the nrecv peers
 * of recv (fan-in) and sending to sendTo (-1: none).
 */
static loomResult_t directTemplate(struct loomPlan *out, loomStepOp_t op, uint8_t flags,
                                   uint8_t srcBuf, size_t srcOff, uint8_t dstBuf, size_t dstOff,
                                   size_t len, size_t piece, int nrecv, const int *recv, int sendTo)
{
    unsigned uses = loomStepUses(op);
    struct loomPlanStep t = {
        .op = (uint8_t)op,
        .srcBuf = srcBuf,
        .dstBuf = dstBuf,
        .flags = flags,
        .moves = (uint8_t)(((uses & LOOM_USES_SRC) ? LOOM_PLAN_SRC_MOVES : 0) |
                           ((uses & LOOM_USES_DST) ? LOOM_PLAN_DST_MOVES : 0)),
        .nrecv = (uint8_t)nrecv,
        .nsend = sendTo >= 0,
        .sendPeers = {sendTo},
        .nblocks = 1,
        .len = len,
        .piece = piece,
        .srcBase = (uses & LOOM_USES_SRC) ? srcOff : 0,
        .dstBase = (uses & LOOM_USES_DST) ? dstOff : 0,
    };
    for (int k = 0; k < nrecv; k++)
        t.recvPeers[k] = recv[k];
    if (nrecv == 0)
        t.recvPeers[0] = -1;
    return planAppend(out, &t);
}

/* The same from the send buffer to the receive buffer, with at most one peer each way. */
static loomResult_t directStep(struct loomPlan *out, loomStepOp_t op, int sendPeer, int recvPeer,
                               size_t srcOff, size_t dstOff, size_t len, size_t piece)
{
    return directTemplate(out, op, 0, LOOM_BUF_SEND, srcOff, LOOM_BUF_RECV, dstOff, len, piece,
                          recvPeer >= 0, &recvPeer, sendPeer);
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

loomResult_t directAllGatherSmallPlan(const struct loomSchedArgs *a, struct loomPlan *out)
{
    loomResult_t res = directCheck(a);
    int n = a->nranks, r = a->rank;
    size_t len = a->hi - a->lo;
    if (res != loomSuccess || len > a->chunkElems)
        return res != loomSuccess ? res : loomInternalError;
    if ((res = directCopyPieces(out, a->lo, (size_t)r * a->count + a->lo, len, len)) != loomSuccess)
        return res;
    planLoop(out);
    for (int k = 1; k < n && res == loomSuccess; k++)
        res = directStep(out, LOOM_STEP_SEND, (r + k) % n, -1, a->lo, 0, len, 0);
    for (int k = 1; k < n && res == loomSuccess; k++) {
        int p = (r - k + n) % n;
        res = directStep(out, LOOM_STEP_RECV, -1, p, 0, (size_t)p * a->count + a->lo, len, 0);
    }
    return res;
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

/* Slice p of the lane's range [lo, hi) on n ranks: its offset and length. */
static void cmaSlice(const struct loomSchedArgs *a, int p, size_t *off, size_t *len)
{
    size_t total = a->hi - a->lo, n = (size_t)a->nranks;
    size_t s = total / n * (size_t)p + total % n * (size_t)p / n;
    size_t e = total / n * (size_t)(p + 1) + total % n * (size_t)(p + 1) / n;
    *off = a->lo + s;
    *len = e - s;
}

size_t directCmaSliceMax(size_t len, int nranks)
{
    return nranks > 0 ? len / (size_t)nranks + (len % (size_t)nranks != 0) : len;
}

/* Offers off[p], len[p] of buffer buf (offset base + p x stride) to every peer p. */
static loomResult_t cmaOfferAll(const struct loomSchedArgs *a, struct loomPlan *out, uint8_t buf,
                                size_t stride, int slices)
{
    int n = a->nranks, r = a->rank;
    loomResult_t res = loomSuccess;
    for (int k = 1; k < n && res == loomSuccess; k++) {
        int p = (r + k) % n;
        size_t off = a->lo, len = a->hi - a->lo;
        if (slices)
            cmaSlice(a, p, &off, &len);
        if (len > 0)
            res = directTemplate(out, LOOM_STEP_OFFER, 0, buf, (size_t)p * stride + off,
                                 LOOM_BUF_RECV, 0, len, 0, 0, NULL, p);
    }
    return res;
}

/*
 * dst[dstOff, +len) = src[srcOff, +len) (+) every peer's offer of the same
 * elements, in fan-in steps of up to LOOM_STEP_MAXPEERS peers (r - 1, r - 2,
 * ... in that order; later steps fold into dst), the last one FINAL.
 */
static loomResult_t cmaFold(const struct loomSchedArgs *a, struct loomPlan *out, size_t srcOff,
                            uint8_t dstBuf, size_t dstOff, size_t len)
{
    int n = a->nranks, r = a->rank, k = 1;
    loomResult_t res = loomSuccess;
    if (len == 0)
        return loomSuccess;
    if (n == 1)
        return directTemplate(out, LOOM_STEP_COPY, LOOM_STEP_FINAL, LOOM_BUF_SEND, srcOff, dstBuf,
                              dstOff, len, a->chunkElems, 0, NULL, -1);
    while (k < n && res == loomSuccess) {
        int peers[LOOM_STEP_MAXPEERS], m = 0, first = k == 1;
        for (; m < LOOM_STEP_MAXPEERS && k < n; m++, k++)
            peers[m] = (r - k + n) % n;
        res = directTemplate(out, LOOM_STEP_PULL_REDUCE_COPY, k == n ? LOOM_STEP_FINAL : 0,
                             first ? LOOM_BUF_SEND : dstBuf, first ? srcOff : dstOff, dstBuf,
                             dstOff, len, 0, m, peers, -1);
    }
    return res;
}

/* Writes recv[off, +len) into the memory `peer` offered for it. */
static loomResult_t cmaPut(struct loomPlan *out, size_t off, size_t len, int peer)
{
    return directTemplate(out, LOOM_STEP_PUT, 0, LOOM_BUF_RECV, off, LOOM_BUF_RECV, 0, len, 0, 1,
                          &peer, -1);
}

/* Waits until every peer has taken everything offered to it: a loop of its own, at the end. */
static loomResult_t cmaDrainAll(const struct loomSchedArgs *a, struct loomPlan *out)
{
    loomResult_t res = loomSuccess;
    planLoop(out);
    for (int k = 1; k < a->nranks && res == loomSuccess; k++)
        res = directTemplate(out, LOOM_STEP_DRAIN, 0, LOOM_BUF_SEND, 0, LOOM_BUF_RECV, 0, 0, 0, 0,
                             NULL, (a->rank + k) % a->nranks);
    return res;
}

loomResult_t directAllReduceCmaPlan(const struct loomSchedArgs *a, struct loomPlan *out)
{
    loomResult_t res = directCheck(a);
    size_t off, len;
    if (res != loomSuccess || a->hi == a->lo)
        return res;
    cmaSlice(a, a->rank, &off, &len);
    planLoop(out);
    if ((res = cmaOfferAll(a, out, LOOM_BUF_SEND, 0, 1)) != loomSuccess ||
        (res = cmaOfferAll(a, out, LOOM_BUF_RECV, 0, 1)) != loomSuccess ||
        (res = cmaFold(a, out, off, LOOM_BUF_RECV, off, len)) != loomSuccess)
        return res;
    for (int k = 1; k < a->nranks && len > 0 && res == loomSuccess; k++)
        res = cmaPut(out, off, len, (a->rank + k) % a->nranks);
    return res == loomSuccess ? cmaDrainAll(a, out) : res;
}

loomResult_t directReduceScatterCmaPlan(const struct loomSchedArgs *a, struct loomPlan *out)
{
    loomResult_t res = directCheck(a);
    if (res != loomSuccess || a->hi == a->lo)
        return res;
    planLoop(out);
    if ((res = cmaOfferAll(a, out, LOOM_BUF_SEND, a->count, 0)) != loomSuccess ||
        (res = cmaFold(a, out, (size_t)a->rank * a->count + a->lo, LOOM_BUF_RECV, a->lo,
                       a->hi - a->lo)) != loomSuccess)
        return res;
    return cmaDrainAll(a, out);
}

loomResult_t directReduceCmaPlan(const struct loomSchedArgs *a, struct loomPlan *out)
{
    loomResult_t res = directCheck(a);
    int root = a->root, r = a->rank;
    size_t off, len;
    if (res != loomSuccess || root < 0 || root >= a->nranks)
        return res != loomSuccess ? res : loomInternalError;
    if (a->hi == a->lo)
        return loomSuccess;
    cmaSlice(a, r, &off, &len);
    planLoop(out);
    if ((res = cmaOfferAll(a, out, LOOM_BUF_SEND, 0, 1)) != loomSuccess ||
        (r == root && (res = cmaOfferAll(a, out, LOOM_BUF_RECV, 0, 1)) != loomSuccess) ||
        (res = cmaFold(a, out, off, LOOM_BUF_RECV, r == root ? off : 0, len)) != loomSuccess)
        return res;
    if (r != root && len > 0)
        res = cmaPut(out, 0, len, root);
    return res == loomSuccess ? cmaDrainAll(a, out) : res;
}

loomResult_t directBroadcastCmaPlan(const struct loomSchedArgs *a, struct loomPlan *out)
{
    loomResult_t res = directCheck(a);
    int root = a->root;
    if (res != loomSuccess || root < 0 || root >= a->nranks)
        return res != loomSuccess ? res : loomInternalError;
    if (a->hi == a->lo)
        return loomSuccess;
    planLoop(out);
    if (a->rank != root)
        return directTemplate(out, LOOM_STEP_PULL, 0, LOOM_BUF_SEND, 0, LOOM_BUF_RECV, a->lo,
                              a->hi - a->lo, 0, 1, &root, -1);
    if ((res = cmaOfferAll(a, out, LOOM_BUF_SEND, 0, 0)) != loomSuccess ||
        (res = directCopyPieces(out, a->lo, a->lo, a->hi - a->lo, a->chunkElems)) != loomSuccess)
        return res;
    return cmaDrainAll(a, out);
}
