/*
 * doubling.c — recursive doubling AllReduce: the fewest hops for the
 * smallest messages.
 *
 * The ring needs 2(n - 1) hops and the double binary tree about 2 log2 n;
 * for a few bytes every hop is latency. Here every rank exchanges its whole
 * partial sum with one partner per round, and both add the two: log2 n
 * rounds, one hop each, at the price of moving the whole vector every round
 * (so the tuner keeps it to small messages). On 2 ranks it is one exchange:
 *
 *   rank 0:  SEND x0 -> 1   RECV_REDUCE_COPY x1 (+) x0 -> out
 *   rank 1:  SEND x1 -> 0   RECV_REDUCE_COPY x0 (+) x1 -> out
 *
 * With p the largest power of two <= n and e = n - p, the first 2e ranks pair
 * up before and after the rounds: even rank 2i sends its vector to 2i + 1,
 * which adds it and plays for both (as participant i); after the rounds it
 * sends the result back. The others, r >= 2e, are participants r - e. In
 * round k participant v exchanges with v ^ 2^k.
 *
 * All ranks end with bit-identical results: every sum adds two partial sums
 * that both partners hold, and a (+) b == b (+) a for every loomRedOp (only
 * association changes results, and the association is the same on every
 * rank: the tree of the rounds). The steps run piece by piece of chunkElems,
 * each piece through every round before the next starts, and each round of
 * a piece waits for the partner's message, so no FIFO holds more than one
 * message per piece in flight. The last round's step is FINAL (loomAvg's
 * division), so the result the odd ranks return is already complete.
 */
#include <stddef.h>
#include <stdint.h>

#include "schedule.h"

/* The rank of participant v. */
static int doublingRank(int v, int extra)
{
    return v < extra ? 2 * v + 1 : v + extra;
}

/* One step on the same piece of both buffers (the lane's [lo, hi) in pieces of chunkElems). */
static loomResult_t doublingStep(const struct loomSchedArgs *a, struct loomPlan *out,
                                 loomStepOp_t op, uint8_t srcBuf, int sendPeer, int recvPeer,
                                 uint8_t flags)
{
    struct loomPlanStep t = {
        .op = (uint8_t)op,
        .srcBuf = srcBuf,
        .dstBuf = LOOM_BUF_RECV,
        .flags = flags,
        .moves = LOOM_PLAN_SRC_MOVES | LOOM_PLAN_DST_MOVES,
        .nrecv = recvPeer >= 0,
        .nsend = sendPeer >= 0,
        .recvPeers = {recvPeer},
        .sendPeers = {sendPeer},
        .nblocks = 1,
        .len = a->hi - a->lo,
        .piece = a->chunkElems,
        .srcBase = a->lo,
        .dstBase = a->lo,
    };
    return planAppend(out, &t);
}

loomResult_t doublingAllReducePlan(const struct loomSchedArgs *a, struct loomPlan *out)
{
    int n = a->nranks, r = a->rank;
    if (n < 1 || r < 0 || r >= n || a->chunkElems == 0 || a->lo > a->hi || a->hi > a->count)
        return loomInternalError;
    int p = 1, rounds = 0;
    while (2 * p <= n)
        p *= 2, rounds++;
    int extra = n - p;
    int folded = r < 2 * extra && r % 2 == 0; /* sends its vector to r + 1, gets the result */
    int helper = r < 2 * extra && r % 2 == 1; /* adds r - 1's vector and plays for both */
    int v = r < 2 * extra ? r / 2 : r - extra;
    loomResult_t res = loomSuccess;
    planLoop(out);
    if (n == 1)
        return doublingStep(a, out, LOOM_STEP_COPY, LOOM_BUF_SEND, -1, -1, LOOM_STEP_FINAL);
    if (folded) {
        res = doublingStep(a, out, LOOM_STEP_SEND, LOOM_BUF_SEND, r + 1, -1, 0);
        if (res == loomSuccess)
            res = doublingStep(a, out, LOOM_STEP_RECV, LOOM_BUF_SEND, -1, r + 1, 0);
        return res;
    }
    /* Where this rank's partial sum lives: its own vector until it adds another. */
    uint8_t cur = LOOM_BUF_SEND;
    if (helper) {
        res = doublingStep(a, out, LOOM_STEP_RECV_REDUCE_COPY, cur, -1, r - 1, 0);
        cur = LOOM_BUF_RECV;
    }
    for (int k = 0; k < rounds && res == loomSuccess; k++) {
        int partner = doublingRank(v ^ (1 << k), extra);
        res = doublingStep(a, out, LOOM_STEP_SEND, cur, partner, -1, 0);
        if (res == loomSuccess)
            res = doublingStep(a, out, LOOM_STEP_RECV_REDUCE_COPY, cur, -1, partner,
                               k == rounds - 1 ? LOOM_STEP_FINAL : 0);
        cur = LOOM_BUF_RECV;
    }
    if (helper && res == loomSuccess)
        res = doublingStep(a, out, LOOM_STEP_SEND, LOOM_BUF_RECV, r - 1, -1, 0);
    return res;
}
