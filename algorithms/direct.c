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
 */
#include <stddef.h>
#include <stdint.h>

#include "schedule.h"

static size_t directMin(size_t x, size_t y)
{
    return x < y ? x : y;
}

static loomResult_t directSend(struct loomSchedule *out, int peer, size_t srcOff, size_t count)
{
    struct loomStep st = {
        .op = LOOM_STEP_SEND,
        .srcBuf = LOOM_BUF_SEND,
        .dstBuf = LOOM_BUF_RECV,
        .sendPeer = peer,
        .recvPeer = -1,
        .srcOff = srcOff,
        .count = count,
    };
    return scheduleAppend(out, &st);
}

static loomResult_t directRecv(struct loomSchedule *out, int peer, size_t dstOff, size_t count)
{
    struct loomStep st = {
        .op = LOOM_STEP_RECV,
        .srcBuf = LOOM_BUF_SEND,
        .dstBuf = LOOM_BUF_RECV,
        .sendPeer = -1,
        .recvPeer = peer,
        .dstOff = dstOff,
        .count = count,
    };
    return scheduleAppend(out, &st);
}

static loomResult_t directCopy(struct loomSchedule *out, size_t srcOff, size_t dstOff, size_t count)
{
    struct loomStep st = {
        .op = LOOM_STEP_COPY,
        .srcBuf = LOOM_BUF_SEND,
        .dstBuf = LOOM_BUF_RECV,
        .sendPeer = -1,
        .recvPeer = -1,
        .srcOff = srcOff,
        .dstOff = dstOff,
        .count = count,
    };
    return scheduleAppend(out, &st);
}

/* Copies count elements from srcOff to dstOff in pieces of chunk. */
static loomResult_t directCopyPieces(struct loomSchedule *out, size_t srcOff, size_t dstOff,
                                     size_t count, size_t chunk)
{
    size_t len;
    for (size_t j = 0; j < count; j += len) {
        len = directMin(chunk, count - j);
        loomResult_t res = directCopy(out, srcOff + j, dstOff + j, len);
        if (res != loomSuccess)
            return res;
    }
    return loomSuccess;
}

/*
 * One round of the exchange: nsend elements from srcOff to sendTo and nrecv
 * elements from recvFrom to dstOff, alternating pieces while either remains.
 */
static loomResult_t directExchange(struct loomSchedule *out, size_t chunk, int sendTo,
                                   size_t srcOff, size_t nsend, int recvFrom, size_t dstOff,
                                   size_t nrecv)
{
    size_t total = nsend > nrecv ? nsend : nrecv;
    for (size_t j = 0; j < total; j += directMin(chunk, total - j)) {
        loomResult_t res = loomSuccess;
        if (j < nsend)
            res = directSend(out, sendTo, srcOff + j, directMin(chunk, nsend - j));
        if (res == loomSuccess && j < nrecv)
            res = directRecv(out, recvFrom, dstOff + j, directMin(chunk, nrecv - j));
        if (res != loomSuccess)
            return res;
    }
    return loomSuccess;
}

/* A zero chunk would never advance; the core never passes one, so it is an internal bug. */
static loomResult_t directCheck(const struct loomSchedArgs *a)
{
    if (a->nranks < 1 || a->rank < 0 || a->rank >= a->nranks || a->chunkElems == 0)
        return loomInternalError;
    return loomSuccess;
}

loomResult_t directAlltoAllSchedule(const struct loomSchedArgs *a, struct loomSchedule *out)
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
 * Single copies (AlltoAll and AllGather). Each peer is offered this rank's
 * block for it (AllGather: the whole send buffer) before anything else, so no
 * rank waits for an offer behind a copy; the own block is copied while the
 * peers start reading; the pulls go r - 1, r - 2, ..., so that in each round
 * every rank's memory is read by one peer; the drains come last. Whole
 * blocks: a pull goes through no slot, and one long process_vm_readv pins
 * pages in fewer calls than many short ones. `gather`: every peer is offered
 * the same elements, the send buffer's [lo, hi).
 */
static loomResult_t directCma(const struct loomSchedArgs *a, struct loomSchedule *out, int gather)
{
    loomResult_t res = directCheck(a);
    if (res != loomSuccess)
        return res;
    int n = a->nranks, r = a->rank;
    size_t len = a->hi - a->lo, own = (size_t)r * a->count + a->lo;
    if (len == 0)
        return loomSuccess;
    for (int k = 1; k < n && res == loomSuccess; k++) {
        int p = (r + k) % n;
        struct loomStep st = {.op = LOOM_STEP_OFFER,
                              .srcBuf = LOOM_BUF_SEND,
                              .dstBuf = LOOM_BUF_RECV,
                              .sendPeer = p,
                              .recvPeer = -1,
                              .srcOff = (gather ? 0 : (size_t)p * a->count) + a->lo,
                              .count = len};
        res = scheduleAppend(out, &st);
    }
    if (res == loomSuccess)
        res = directCopyPieces(out, gather ? a->lo : own, own, len, a->chunkElems);
    for (int k = 1; k < n && res == loomSuccess; k++) {
        int p = (r - k + n) % n;
        struct loomStep st = {.op = LOOM_STEP_PULL,
                              .srcBuf = LOOM_BUF_SEND,
                              .dstBuf = LOOM_BUF_RECV,
                              .sendPeer = -1,
                              .recvPeer = p,
                              .dstOff = (size_t)p * a->count + a->lo,
                              .count = len};
        res = scheduleAppend(out, &st);
    }
    for (int k = 1; k < n && res == loomSuccess; k++) {
        struct loomStep st = {.op = LOOM_STEP_DRAIN,
                              .srcBuf = LOOM_BUF_SEND,
                              .dstBuf = LOOM_BUF_RECV,
                              .sendPeer = (r + k) % n,
                              .recvPeer = -1};
        res = scheduleAppend(out, &st);
    }
    return res;
}

loomResult_t directAlltoAllCmaSchedule(const struct loomSchedArgs *a, struct loomSchedule *out)
{
    return directCma(a, out, 0);
}

loomResult_t directAllGatherCmaSchedule(const struct loomSchedArgs *a, struct loomSchedule *out)
{
    return directCma(a, out, 1);
}

loomResult_t directAlltoAllvSchedule(const struct loomSchedArgs *a, struct loomSchedule *out)
{
    loomResult_t res = directCheck(a);
    if (res != loomSuccess)
        return res;
    int n = a->nranks, r = a->rank;
    size_t self = directMin(a->sendcounts[r], a->recvcounts[r]);
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

loomResult_t directSendSchedule(const struct loomSchedArgs *a, struct loomSchedule *out)
{
    if (a->chunkElems == 0)
        return loomInternalError;
    size_t len;
    for (size_t c0 = a->lo; c0 < a->hi; c0 += len) {
        len = directMin(a->chunkElems, a->hi - c0);
        loomResult_t res = directSend(out, a->root, c0, len);
        if (res != loomSuccess)
            return res;
    }
    return loomSuccess;
}

loomResult_t directRecvSchedule(const struct loomSchedArgs *a, struct loomSchedule *out)
{
    if (a->chunkElems == 0)
        return loomInternalError;
    size_t len;
    for (size_t c0 = a->lo; c0 < a->hi; c0 += len) {
        len = directMin(a->chunkElems, a->hi - c0);
        loomResult_t res = directRecv(out, a->root, c0, len);
        if (res != loomSuccess)
            return res;
    }
    return loomSuccess;
}
