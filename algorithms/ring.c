/*
 * ring.c — ring schedules: Broadcast, Reduce, AllReduce, AllGather,
 * ReduceScatter.
 *
 * The ranks stand in a ring (args->ring, or the identity) and data only ever
 * flows forward: every step receives from the previous position and sends
 * to the next one. Each FIFO therefore carries one stream, in order, and a
 * rank waits only on its predecessor (for data) and its successor (for a
 * free slot). The symbolic simulator in tests/unit/check_schedule.c runs
 * every schedule here with LOOM_STEPS slots per FIFO for n = 1..64 and finds
 * no deadlock.
 *
 * AllReduce works on loops of m <= n x chunkElems elements, cut into n blocks
 * of ceil(m / n) (the last ones may be short or empty). With blk(x) the
 * block (x mod n), the rank at position p runs per loop:
 *
 *   SEND blk(p)                                  \  reduce: a block gains one
 *   RECV_REDUCE_SEND blk(p-1) .. blk(p-(n-2))     }  input per hop and is
 *   RECV_REDUCE_COPY_SEND blk(p-(n-1)) [FINAL]   /   complete after n-1 hops
 *   RECV_COPY_SEND blk(p) .. blk(p+1-(n-2))      \  gather: the complete block
 *   RECV blk(p+2-n)                              /   goes n-1 hops further
 *
 * For n = 4:
 *
 *        pos 0        pos 1        pos 2        pos 3
 *   t0   S b0         S b1         S b2         S b3
 *   t1   RRS b3       RRS b0       RRS b1       RRS b2
 *   t2   RRS b2       RRS b3       RRS b0       RRS b1
 *   t3   RRCS b1      RRCS b2      RRCS b3      RRCS b0    (complete here)
 *   t4   RCS b0       RCS b1       RCS b2       RCS b3
 *   t5   RCS b3       RCS b0       RCS b1       RCS b2
 *   t6   R b2         R b3         R b0         R b1
 *
 * The other collectives walk [lo, hi) in pieces of chunkElems, and each
 * piece makes one pass around the ring: in ReduceScatter position p adds its
 * contribution to the block of rank ring[p - 1 - s] at hop s, so that every
 * block completes on its own rank; AllGather forwards each rank's piece
 * n - 1 hops; Broadcast is a chain that starts at the root, Reduce one that
 * starts just after it and ends on it.
 *
 * Each generator emits a plan (schedule.h): one loop whose body is the
 * steps above, with offsets that move with the piece (AllReduce: one loop
 * of 2n - 1 templates over pieces of n x chunkElems, each moving its block;
 * the others: one template per step of a piece), so a plan's size depends
 * on n, not on the count. A step whose count would be 0 is left out. Both
 * ends of a FIFO compute the same block sizes, so they leave out the same
 * messages.
 */
#include <stddef.h>
#include <stdint.h>

#include "schedule.h"

/* One rank's view of the ring for one lane. */
struct ringLane {
    const struct loomSchedArgs *a;
    struct loomPlan *out;
    int n;
    int pos;      /* ring[pos] == rank */
    int next;     /* rank that receives what this rank sends */
    int prev;     /* rank that sends to this rank */
    int rootDist; /* hops from the root's position to pos, -1 if root is not in the ring */
};

typedef loomResult_t (*ringPieceFn)(const struct ringLane *l);

static int ringMod(int x, int n)
{
    int r = x % n;
    return r < 0 ? r + n : r;
}

/* The rank at ring position x (taken modulo n). */
static int ringRankAt(const struct ringLane *l, int x)
{
    int i = ringMod(x, l->n);
    return l->a->ring ? l->a->ring[i] : i;
}

/*
 * Finds this rank (and the root) in the ring. A rank missing from the ring
 * or a zero chunk is a core bug; refusing it beats emitting a schedule that
 * hangs or loops forever.
 */
static loomResult_t ringLaneInit(const struct loomSchedArgs *a, struct loomPlan *out,
                                 struct ringLane *l)
{
    if (a->nranks < 1 || a->chunkElems == 0 || a->lo > a->hi)
        return loomInternalError;
    l->a = a;
    l->out = out;
    l->n = a->nranks;
    l->pos = -1;
    int rootPos = -1;
    for (int i = 0; i < l->n; i++) {
        int r = a->ring ? a->ring[i] : i;
        if (r == a->rank)
            l->pos = i;
        if (r == a->root)
            rootPos = i;
    }
    if (l->pos < 0)
        return loomInternalError;
    l->next = ringRankAt(l, l->pos + 1);
    l->prev = ringRankAt(l, l->pos - 1);
    l->rootDist = rootPos < 0 ? -1 : ringMod(l->pos - rootPos, l->n);
    planLoop(out);
    return loomSuccess;
}

/*
 * Appends one template over the lane's [lo, hi) in pieces of `piece`, each
 * cut in nblocks, moving block `block`; src and dst offsets are srcBase and
 * dstBase plus the position in [lo, hi). Peers and offsets the op does not
 * use are left out.
 */
static loomResult_t ringTemplate(const struct ringLane *l, loomStepOp_t op, uint8_t flags,
                                 size_t srcBase, size_t dstBase, size_t piece, int nblocks,
                                 int block)
{
    unsigned uses = loomStepUses(op);
    struct loomPlanStep t = {
        .op = (uint8_t)op,
        .srcBuf = LOOM_BUF_SEND,
        .dstBuf = LOOM_BUF_RECV,
        .flags = flags,
        .moves = (uint8_t)(((uses & LOOM_USES_SRC) ? LOOM_PLAN_SRC_MOVES : 0) |
                           ((uses & LOOM_USES_DST) ? LOOM_PLAN_DST_MOVES : 0)),
        .nrecv = (uses & LOOM_USES_RECV) != 0,
        .nsend = (uses & LOOM_USES_SEND) != 0,
        .recvPeers = {l->prev},
        .sendPeers = {l->next},
        .nblocks = (uint32_t)nblocks,
        .block = (uint32_t)block,
        .len = l->a->hi - l->a->lo,
        .piece = piece,
        .srcBase = (uses & LOOM_USES_SRC) ? srcBase + l->a->lo : 0,
        .dstBase = (uses & LOOM_USES_DST) ? dstBase + l->a->lo : 0,
    };
    return planAppend(l->out, &t);
}

/* One step of each piece of chunkElems; offsets are relative to the piece. */
static loomResult_t ringStep(const struct ringLane *l, loomStepOp_t op, uint8_t flags,
                             size_t srcOff, size_t dstOff)
{
    return ringTemplate(l, op, flags, srcOff, dstOff, l->a->chunkElems, 1, 0);
}

/* One AllReduce step on blk(x) of every loop; the same offset in both buffers. */
static loomResult_t ringBlockStep(const struct ringLane *l, loomStepOp_t op, uint8_t flags, int x)
{
    size_t n = (size_t)l->n, chunk = l->a->chunkElems;
    size_t loop = chunk > SIZE_MAX / n ? SIZE_MAX : n * chunk;
    return ringTemplate(l, op, flags, 0, 0, loop, l->n, ringMod(x, l->n));
}

loomResult_t ringAllReducePlan(const struct loomSchedArgs *a, struct loomPlan *out)
{
    struct ringLane l;
    loomResult_t res = ringLaneInit(a, out, &l);
    if (res != loomSuccess)
        return res;
    int n = l.n, p = l.pos;

    if (n == 1)
        return ringBlockStep(&l, LOOM_STEP_COPY, LOOM_STEP_FINAL, 0);
    if ((res = ringBlockStep(&l, LOOM_STEP_SEND, 0, p)) != loomSuccess)
        return res;
    for (int s = 1; s <= n - 2; s++)
        if ((res = ringBlockStep(&l, LOOM_STEP_RECV_REDUCE_SEND, 0, p - s)) != loomSuccess)
            return res;
    res = ringBlockStep(&l, LOOM_STEP_RECV_REDUCE_COPY_SEND, LOOM_STEP_FINAL, p - (n - 1));
    if (res != loomSuccess)
        return res;
    for (int s = 1; s <= n - 2; s++)
        if ((res = ringBlockStep(&l, LOOM_STEP_RECV_COPY_SEND, 0, p + 1 - s)) != loomSuccess)
            return res;
    return ringBlockStep(&l, LOOM_STEP_RECV, 0, p + 2 - n);
}

/* Offset of the per-rank block of the rank at ring position x. */
static size_t ringBlockOff(const struct ringLane *l, int x)
{
    return (size_t)ringRankAt(l, x) * l->a->count;
}

static loomResult_t ringReduceScatterPiece(const struct ringLane *l)
{
    int n = l->n, p = l->pos;
    loomResult_t res;

    if (n == 1)
        return ringStep(l, LOOM_STEP_COPY, LOOM_STEP_FINAL, ringBlockOff(l, p), 0);
    res = ringStep(l, LOOM_STEP_SEND, 0, ringBlockOff(l, p - 1), 0);
    if (res != loomSuccess)
        return res;
    for (int s = 1; s <= n - 2; s++) {
        size_t off = ringBlockOff(l, p - 1 - s);
        if ((res = ringStep(l, LOOM_STEP_RECV_REDUCE_SEND, 0, off, 0)) != loomSuccess)
            return res;
    }
    return ringStep(l, LOOM_STEP_RECV_REDUCE_COPY, LOOM_STEP_FINAL, ringBlockOff(l, p), 0);
}

/* A collective of pieces: fn appends the steps of one piece. */
static loomResult_t ringPieces(const struct loomSchedArgs *a, struct loomPlan *out, ringPieceFn fn,
                               int rooted)
{
    struct ringLane l;
    loomResult_t res = ringLaneInit(a, out, &l);
    if (res != loomSuccess)
        return res;
    if (rooted && l.rootDist < 0)
        return loomInternalError;
    return fn(&l);
}

loomResult_t ringReduceScatterPlan(const struct loomSchedArgs *a, struct loomPlan *out)
{
    return ringPieces(a, out, ringReduceScatterPiece, 0);
}

static loomResult_t ringAllGatherPiece(const struct ringLane *l)
{
    int n = l->n, p = l->pos;
    size_t own = (size_t)l->a->rank * l->a->count;
    loomResult_t res;

    if ((res = ringStep(l, LOOM_STEP_COPY, 0, 0, own)) != loomSuccess)
        return res;
    if (n == 1)
        return loomSuccess;
    if ((res = ringStep(l, LOOM_STEP_SEND, 0, 0, 0)) != loomSuccess)
        return res;
    for (int s = 1; s <= n - 2; s++) {
        size_t off = ringBlockOff(l, p - s);
        if ((res = ringStep(l, LOOM_STEP_RECV_COPY_SEND, 0, 0, off)) != loomSuccess)
            return res;
    }
    return ringStep(l, LOOM_STEP_RECV, 0, 0, ringBlockOff(l, p - (n - 1)));
}

loomResult_t ringAllGatherPlan(const struct loomSchedArgs *a, struct loomPlan *out)
{
    return ringPieces(a, out, ringAllGatherPiece, 0);
}

static loomResult_t ringBroadcastPiece(const struct ringLane *l)
{
    int n = l->n, d = l->rootDist;

    if (d == 0) {
        loomResult_t res = ringStep(l, LOOM_STEP_COPY, 0, 0, 0);
        if (res != loomSuccess || n == 1)
            return res;
        return ringStep(l, LOOM_STEP_SEND, 0, 0, 0);
    }
    if (d < n - 1)
        return ringStep(l, LOOM_STEP_RECV_COPY_SEND, 0, 0, 0);
    return ringStep(l, LOOM_STEP_RECV, 0, 0, 0);
}

loomResult_t ringBroadcastPlan(const struct loomSchedArgs *a, struct loomPlan *out)
{
    return ringPieces(a, out, ringBroadcastPiece, 1);
}

/* The chain starts one hop after the root, so the root reduces last and keeps the result. */
static loomResult_t ringReducePiece(const struct ringLane *l)
{
    int n = l->n, d = l->rootDist;

    if (n == 1)
        return ringStep(l, LOOM_STEP_COPY, LOOM_STEP_FINAL, 0, 0);
    if (d == 1)
        return ringStep(l, LOOM_STEP_SEND, 0, 0, 0);
    if (d > 1)
        return ringStep(l, LOOM_STEP_RECV_REDUCE_SEND, 0, 0, 0);
    return ringStep(l, LOOM_STEP_RECV_REDUCE_COPY, LOOM_STEP_FINAL, 0, 0);
}

loomResult_t ringReducePlan(const struct loomSchedArgs *a, struct loomPlan *out)
{
    return ringPieces(a, out, ringReducePiece, 1);
}
