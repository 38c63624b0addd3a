/*
 * single.c — single-copy schedules (LOOM_ALGO_CMA): every collective between
 * the processes of one host, moving each byte once, straight between the
 * ranks' buffers.
 *
 * No element passes through a FIFO. A rank OFFERs a peer the address of what
 * that peer needs (one message), the peer reads it from the rank's memory
 * (PULL, or PULL_REDUCE to fold it into its own input), and before its
 * schedule ends the rank DRAINs every peer it offered to: a DRAIN waits
 * until the peer has taken every message, so has finished reading, which is
 * what keeps the rank's buffers valid until then. The executor reads with
 * process_vm_readv, or through a mapping of the peer's buffer where it is
 * loomMemAlloc memory (src/exec/mem.c).
 *
 *   AlltoAll       offer each peer its block, copy the own block, pull this
 *                  rank's block of every peer's send buffer.
 *   AllGather      the same, every peer offered the whole send buffer.
 *   Broadcast      the root offers its send buffer to every peer and copies
 *                  it to its receive buffer; the others pull it.
 *   ReduceScatter  rank r reduces block r: it offers each peer p block p of
 *                  its send buffer and folds block r of every peer's into its
 *                  own (PULL_REDUCE, up to LOOM_STEP_MAXPEERS peers a step).
 *   AllReduce      the lane's range in n slices: rank r reduces slice r a
 *                  piece at a time, as ReduceScatter does block r, into its
 *                  receive buffer, and PUSHes each reduced piece, while it
 *                  is in the cache, into every peer's receive buffer (which
 *                  the peer offered). Each slice is reduced by one rank in
 *                  one order, so every rank gets the same bits.
 *   Reduce         as AllReduce, but pushing into the root's buffer only;
 *                  the other ranks reduce each piece into scratch (the core
 *                  passes it as their receive buffer: planTune).
 *
 * The reductions go in pieces of chunkElems, one loop iteration a piece:
 * a piece of a peer's buffer stays in the cache between its read and its
 * reduction. In an iteration a rank makes all its offers of that piece
 * before it waits for the peers', and each FIFO carries one offer an
 * iteration, so LOOM_STEPS slots let ranks run several pieces apart and no
 * rank waits on one that waits on it; a reduced slice is offered once all
 * of it is reduced. In place (sendbuff == recvbuff, or
 * ReduceScatter's recvbuff at block r of sendbuff) no rank writes memory a
 * peer still reads: peers read rank r's slice (block) p only, before
 * rank r pulls its reduced copy from p, and rank r alone reads and writes
 * its own slice.
 *
 * The symbolic simulator (tests/unit/check_schedule.c) reads an offered
 * buffer at the moment of the PULL, so it also checks that nothing is
 * pulled before it is written, and that no rank ends before its offers
 * were taken.
 */
#include <stddef.h>
#include <stdint.h>

#include "schedule.h"

/* Appends t (a template planMoving made). */
static loomResult_t singleAppend(struct loomPlan *out, struct loomPlanStep t)
{
    return planAppend(out, &t);
}

static loomResult_t singleOffer(struct loomPlan *out, int to, int buf, size_t off, size_t len,
                                size_t piece)
{
    return singleAppend(out,
                        planMoving(LOOM_STEP_OFFER, 0, to, NULL, 0, buf, off, 0, 0, len, piece));
}

static loomResult_t singlePull(struct loomPlan *out, int from, size_t dstOff, size_t len,
                               size_t piece)
{
    return singleAppend(
        out, planMoving(LOOM_STEP_PULL, 0, -1, &from, 1, 0, 0, LOOM_BUF_RECV, dstOff, len, piece));
}

/* Copies len elements of the send buffer from srcOff to dstOff of the receive buffer. */
static loomResult_t singleCopy(struct loomPlan *out, uint8_t flags, size_t srcOff, size_t dstOff,
                               size_t len, size_t piece)
{
    return singleAppend(out, planMoving(LOOM_STEP_COPY, flags, -1, NULL, 0, LOOM_BUF_SEND, srcOff,
                                        LOOM_BUF_RECV, dstOff, len, piece));
}

/* Waits until peer p has read everything offered to it. */
static loomResult_t singleDrainOne(struct loomPlan *out, int p)
{
    return singleAppend(out, planMoving(LOOM_STEP_DRAIN, 0, p, NULL, 0, 0, 0, 0, 0, 0, 0));
}

/* Drains every peer: a loop of its own, last in the plan. */
static loomResult_t singleDrain(struct loomPlan *out, const struct loomSchedArgs *a)
{
    loomResult_t res = loomSuccess;
    planLoop(out);
    for (int k = 1; k < a->nranks && res == loomSuccess; k++)
        res = singleDrainOne(out, (a->rank + k) % a->nranks);
    return res;
}

/*
 * Folds elements [off, off + len) of every peer's send buffer (in pieces of
 * chunkElems) into this rank's send buffer at srcOff and stores the result at
 * dstOff of its receive buffer: one PULL_REDUCE per LOOM_STEP_MAXPEERS
 * peers, the first reading the send buffer, the next ones the partial result
 * in the receive buffer, the last one FINAL. Peers in the order r - 1, r - 2, ...
 * fixed: every piece lands at dstOff itself (a piece's worth of scratch).
 */
static loomResult_t singleFold(struct loomPlan *out, const struct loomSchedArgs *a, size_t srcOff,
                               size_t dstOff, size_t len, int fixed)
{
    int n = a->nranks, r = a->rank;
    loomResult_t res = loomSuccess;
    for (int k = 1; k < n && res == loomSuccess; k += LOOM_STEP_MAXPEERS) {
        int peers[LOOM_STEP_MAXPEERS], np = 0;
        for (int j = k; j < n && np < LOOM_STEP_MAXPEERS; j++)
            peers[np++] = (r - j + n) % n;
        int first = k == 1, last = k + np >= n;
        struct loomPlanStep t =
            planMoving(LOOM_STEP_PULL_REDUCE, last ? LOOM_STEP_FINAL : 0, -1, peers, np,
                       first ? LOOM_BUF_SEND : LOOM_BUF_RECV, first ? srcOff : dstOff,
                       LOOM_BUF_RECV, dstOff, len, a->chunkElems);
        if (fixed) /* the partial sums stay put too */
            t.moves = first ? LOOM_PLAN_SRC_MOVES : 0;
        res = singleAppend(out, t);
    }
    return res;
}

/* A zero chunk would never advance; the core never passes one, so it is an internal bug. */
static loomResult_t singleCheck(const struct loomSchedArgs *a)
{
    if (a->nranks < 1 || a->rank < 0 || a->rank >= a->nranks || a->chunkElems == 0 ||
        a->lo > a->hi || a->hi > a->count)
        return loomInternalError;
    return loomSuccess;
}

/*
 * The start of a reduction's plan: 1 when the plan is complete already
 * (*res says how it went: bad arguments, nothing to move, or one rank's
 * copy), else 0 with a loop opened for the pieces.
 */
static int singleReductionStart(const struct loomSchedArgs *a, struct loomPlan *out,
                                loomResult_t *res)
{
    *res = singleCheck(a);
    if (*res != loomSuccess || a->hi == a->lo)
        return 1;
    planLoop(out);
    if (a->nranks > 1)
        return 0;
    *res = singleCopy(out, LOOM_STEP_FINAL, a->lo, a->lo, a->hi - a->lo, a->chunkElems);
    return 1;
}

/*
 * AlltoAll and AllGather: this rank offers each peer its block (a whole
 * block per OFFER), copies its own, pulls its block of every peer's send
 * buffer, then drains every peer it offered to. gather: AllGather, whose
 * blocks are all the send buffer.
 */
static loomResult_t singleExchange(const struct loomSchedArgs *a, struct loomPlan *out, int gather)
{
    loomResult_t res = singleCheck(a);
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
        res = singleOffer(out, p, LOOM_BUF_SEND, srcOff, len, 0);
    }
    if (res == loomSuccess) {
        planLoop(out);
        res = singleCopy(out, 0, gather ? a->lo : own, own, len, a->chunkElems);
    }
    planLoop(out);
    for (int k = 1; k < n && res == loomSuccess; k++) {
        int p = (r - k + n) % n;
        res = singlePull(out, p, (size_t)p * a->count + a->lo, len, 0);
    }
    return res == loomSuccess ? singleDrain(out, a) : res;
}

loomResult_t singleAlltoAllPlan(const struct loomSchedArgs *a, struct loomPlan *out)
{
    return singleExchange(a, out, 0);
}

loomResult_t singleAllGatherPlan(const struct loomSchedArgs *a, struct loomPlan *out)
{
    return singleExchange(a, out, 1);
}

loomResult_t singleBroadcastPlan(const struct loomSchedArgs *a, struct loomPlan *out)
{
    loomResult_t res = singleCheck(a);
    if (res != loomSuccess || a->root < 0 || a->root >= a->nranks)
        return res != loomSuccess ? res : loomInternalError;
    int n = a->nranks, r = a->rank, root = a->root;
    size_t len = a->hi - a->lo;
    if (len == 0)
        return loomSuccess;
    planLoop(out);
    if (r != root)
        return singlePull(out, root, a->lo, len, 0);
    for (int k = 1; k < n && res == loomSuccess; k++)
        res = singleOffer(out, (r + k) % n, LOOM_BUF_SEND, a->lo, len, 0);
    if (res == loomSuccess) {
        planLoop(out);
        res = singleCopy(out, 0, a->lo, a->lo, len, a->chunkElems);
    }
    return res == loomSuccess ? singleDrain(out, a) : res;
}

loomResult_t singleReduceScatterPlan(const struct loomSchedArgs *a, struct loomPlan *out)
{
    loomResult_t res;
    if (singleReductionStart(a, out, &res))
        return res;
    int n = a->nranks, r = a->rank;
    size_t len = a->hi - a->lo, chunk = a->chunkElems;
    for (int k = 1; k < n && res == loomSuccess; k++) {
        int p = (r + k) % n;
        res = singleOffer(out, p, LOOM_BUF_SEND, (size_t)p * a->count + a->lo, len, chunk);
    }
    if (res == loomSuccess)
        res = singleFold(out, a, (size_t)r * a->count + a->lo, a->lo, len, 0);
    return res == loomSuccess ? singleDrain(out, a) : res;
}

/*
 * AllReduce (root -1) and Reduce: rank r folds slice r of the lane's range
 * of every peer's send buffer into its receive buffer, a piece an
 * iteration, and pushes each reduced piece, while it is in its cache, into
 * every peer's receive buffer (AllReduce) or the root's (Reduce), which
 * offered it. In an iteration a rank offers each peer p the piece of slice
 * p of its send buffer, to fold, and of its receive buffer, to write into
 * (a Reduce: the root only), in that order, which is the order in which p
 * takes them (fold, then push). A Reduce's other ranks fold into scratch
 * the core gives them as their receive buffer, a piece's worth of it per
 * lane.
 */
static loomResult_t singleSlices(const struct loomSchedArgs *a, struct loomPlan *out, int root)
{
    loomResult_t res;
    if (singleReductionStart(a, out, &res))
        return res;
    int n = a->nranks, r = a->rank;
    size_t len = a->hi - a->lo, chunk = a->chunkElems;
    /* Slice s of the lane's range: [lo + len * s / n, lo + len * (s + 1) / n). */
#define SLICE_AT(s) (a->lo + len * (size_t)(s) / (size_t)n)
    size_t mine = SLICE_AT(r), mineLen = SLICE_AT(r + 1) - mine;
    for (int k = 1; k < n && res == loomSuccess; k++) {
        int p = (r + k) % n;
        size_t at = SLICE_AT(p), plen = SLICE_AT(p + 1) - at;
        res = singleOffer(out, p, LOOM_BUF_SEND, at, plen, chunk);
        if (res == loomSuccess && (root < 0 || r == root))
            res = singleOffer(out, p, LOOM_BUF_RECV, at, plen, chunk);
    }
    /* A Reduce's other ranks fold each piece into the same place of their scratch (at the
     * lane's start, so that lanes do not meet) and push it from there before the next. */
    int scratch = root >= 0 && r != root;
    size_t at = scratch ? a->lo : mine;
    if (res == loomSuccess)
        res = singleFold(out, a, mine, at, mineLen, scratch);
    for (int k = 1; k < n && res == loomSuccess; k++) {
        int p = (r - k + n) % n;
        struct loomPlanStep t =
            planMoving(LOOM_STEP_PUSH, 0, -1, &p, 1, LOOM_BUF_RECV, at, 0, 0, mineLen, chunk);
        if (scratch)
            t.moves = 0;
        if (root < 0 || p == root)
            res = singleAppend(out, t);
    }
#undef SLICE_AT
    return res == loomSuccess ? singleDrain(out, a) : res;
}

loomResult_t singleAllReducePlan(const struct loomSchedArgs *a, struct loomPlan *out)
{
    return singleSlices(a, out, -1);
}

loomResult_t singleReducePlan(const struct loomSchedArgs *a, struct loomPlan *out)
{
    if (a->root < 0 || a->root >= a->nranks)
        return loomInternalError;
    return singleSlices(a, out, a->root);
}
