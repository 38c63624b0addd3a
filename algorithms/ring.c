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
 * A step whose count would be 0 is left out. Both ends of a FIFO compute the
 * same block sizes, so they leave out the same messages.
 */
#include <stddef.h>
#include <stdint.h>

#include "schedule.h"

/* One rank's view of the ring for one lane. */
struct ringLane {
    const struct loomSchedArgs *a;
    struct loomSchedule *out;
    int n;
    int pos;      /* ring[pos] == rank */
    int next;     /* rank that receives what this rank sends */
    int prev;     /* rank that sends to this rank */
    int rootDist; /* hops from the root's position to pos, -1 if root is not in the ring */
};

typedef loomResult_t (*ringPieceFn)(const struct ringLane *l, size_t c0, size_t len);

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
static loomResult_t ringLaneInit(const struct loomSchedArgs *a, struct loomSchedule *out,
                                 struct ringLane *l)
{
    if (a->nranks < 1 || a->chunkElems == 0)
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
    return loomSuccess;
}

/* Appends one step with the peers and offsets `op` uses; a count of 0 appends nothing. */
static loomResult_t ringStep(const struct ringLane *l, loomStepOp_t op, uint8_t flags,
                             size_t srcOff, size_t dstOff, size_t count)
{
    if (count == 0)
        return loomSuccess;
    unsigned uses = loomStepUses(op);
    struct loomStep st = {
        .op = (uint8_t)op,
        .srcBuf = LOOM_BUF_SEND,
        .dstBuf = LOOM_BUF_RECV,
        .flags = flags,
        .sendPeer = (uses & LOOM_USES_SEND) ? l->next : -1,
        .recvPeer = (uses & LOOM_USES_RECV) ? l->prev : -1,
        .srcOff = (uses & LOOM_USES_SRC) ? srcOff : 0,
        .dstOff = (uses & LOOM_USES_DST) ? dstOff : 0,
        .count = count,
    };
    return scheduleAppend(l->out, &st);
}

/* Calls fn on [lo, hi) in pieces of at most chunkElems. */
static loomResult_t ringPieces(const struct ringLane *l, ringPieceFn fn)
{
    size_t hi = l->a->hi;
    size_t len;
    for (size_t c0 = l->a->lo; c0 < hi; c0 += len) {
        len = hi - c0 < l->a->chunkElems ? hi - c0 : l->a->chunkElems;
        loomResult_t res = fn(l, c0, len);
        if (res != loomSuccess)
            return res;
    }
    return loomSuccess;
}

/* The n blocks of one AllReduce loop: [base, base + m) cut in pieces of bs. */
struct ringBlocks {
    size_t base;
    size_t m;
    size_t bs;
};

/* One AllReduce step on blk(x); the same offset in both buffers. */
static loomResult_t ringBlockStep(const struct ringLane *l, const struct ringBlocks *b,
                                  loomStepOp_t op, uint8_t flags, int x)
{
    size_t start = (size_t)ringMod(x, l->n) * b->bs;
    if (start >= b->m)
        return loomSuccess;
    size_t len = b->m - start < b->bs ? b->m - start : b->bs;
    return ringStep(l, op, flags, b->base + start, b->base + start, len);
}

static loomResult_t ringAllReduceLoop(const struct ringLane *l, size_t base, size_t m)
{
    int n = l->n, p = l->pos;
    struct ringBlocks b = {base, m, m / (size_t)n + (m % (size_t)n != 0)};
    loomResult_t res;

    if (n == 1)
        return ringBlockStep(l, &b, LOOM_STEP_COPY, LOOM_STEP_FINAL, 0);
    if ((res = ringBlockStep(l, &b, LOOM_STEP_SEND, 0, p)) != loomSuccess)
        return res;
    for (int s = 1; s <= n - 2; s++)
        if ((res = ringBlockStep(l, &b, LOOM_STEP_RECV_REDUCE_SEND, 0, p - s)) != loomSuccess)
            return res;
    res = ringBlockStep(l, &b, LOOM_STEP_RECV_REDUCE_COPY_SEND, LOOM_STEP_FINAL, p - (n - 1));
    if (res != loomSuccess)
        return res;
    for (int s = 1; s <= n - 2; s++)
        if ((res = ringBlockStep(l, &b, LOOM_STEP_RECV_COPY_SEND, 0, p + 1 - s)) != loomSuccess)
            return res;
    return ringBlockStep(l, &b, LOOM_STEP_RECV, 0, p + 2 - n);
}

loomResult_t ringAllReduceSchedule(const struct loomSchedArgs *a, struct loomSchedule *out)
{
    struct ringLane l;
    loomResult_t res = ringLaneInit(a, out, &l);
    if (res != loomSuccess)
        return res;
    size_t n = (size_t)l.n;
    size_t loop = a->chunkElems > SIZE_MAX / n ? SIZE_MAX : n * a->chunkElems;
    size_t m;
    for (size_t base = a->lo; base < a->hi; base += m) {
        m = a->hi - base < loop ? a->hi - base : loop;
        if ((res = ringAllReduceLoop(&l, base, m)) != loomSuccess)
            return res;
    }
    return loomSuccess;
}

/* Offset of piece c0 in the per-rank block of the rank at ring position x. */
static size_t ringBlockOff(const struct ringLane *l, int x, size_t c0)
{
    return (size_t)ringRankAt(l, x) * l->a->count + c0;
}

static loomResult_t ringReduceScatterPiece(const struct ringLane *l, size_t c0, size_t len)
{
    int n = l->n, p = l->pos;
    loomResult_t res;

    if (n == 1)
        return ringStep(l, LOOM_STEP_COPY, LOOM_STEP_FINAL, ringBlockOff(l, p, c0), c0, len);
    res = ringStep(l, LOOM_STEP_SEND, 0, ringBlockOff(l, p - 1, c0), 0, len);
    if (res != loomSuccess)
        return res;
    for (int s = 1; s <= n - 2; s++) {
        size_t off = ringBlockOff(l, p - 1 - s, c0);
        if ((res = ringStep(l, LOOM_STEP_RECV_REDUCE_SEND, 0, off, 0, len)) != loomSuccess)
            return res;
    }
    return ringStep(l, LOOM_STEP_RECV_REDUCE_COPY, LOOM_STEP_FINAL, ringBlockOff(l, p, c0), c0,
                    len);
}

loomResult_t ringReduceScatterSchedule(const struct loomSchedArgs *a, struct loomSchedule *out)
{
    struct ringLane l;
    loomResult_t res = ringLaneInit(a, out, &l);
    return res != loomSuccess ? res : ringPieces(&l, ringReduceScatterPiece);
}

static loomResult_t ringAllGatherPiece(const struct ringLane *l, size_t c0, size_t len)
{
    int n = l->n, p = l->pos;
    size_t own = (size_t)l->a->rank * l->a->count + c0;
    loomResult_t res;

    if ((res = ringStep(l, LOOM_STEP_COPY, 0, c0, own, len)) != loomSuccess)
        return res;
    if (n == 1)
        return loomSuccess;
    if ((res = ringStep(l, LOOM_STEP_SEND, 0, c0, 0, len)) != loomSuccess)
        return res;
    for (int s = 1; s <= n - 2; s++) {
        size_t off = ringBlockOff(l, p - s, c0);
        if ((res = ringStep(l, LOOM_STEP_RECV_COPY_SEND, 0, 0, off, len)) != loomSuccess)
            return res;
    }
    return ringStep(l, LOOM_STEP_RECV, 0, 0, ringBlockOff(l, p - (n - 1), c0), len);
}

loomResult_t ringAllGatherSchedule(const struct loomSchedArgs *a, struct loomSchedule *out)
{
    struct ringLane l;
    loomResult_t res = ringLaneInit(a, out, &l);
    return res != loomSuccess ? res : ringPieces(&l, ringAllGatherPiece);
}

static loomResult_t ringBroadcastPiece(const struct ringLane *l, size_t c0, size_t len)
{
    int n = l->n, d = l->rootDist;

    if (d == 0) {
        loomResult_t res = ringStep(l, LOOM_STEP_COPY, 0, c0, c0, len);
        if (res != loomSuccess || n == 1)
            return res;
        return ringStep(l, LOOM_STEP_SEND, 0, c0, 0, len);
    }
    if (d < n - 1)
        return ringStep(l, LOOM_STEP_RECV_COPY_SEND, 0, 0, c0, len);
    return ringStep(l, LOOM_STEP_RECV, 0, 0, c0, len);
}

loomResult_t ringBroadcastSchedule(const struct loomSchedArgs *a, struct loomSchedule *out)
{
    struct ringLane l;
    loomResult_t res = ringLaneInit(a, out, &l);
    if (res != loomSuccess)
        return res;
    if (l.rootDist < 0)
        return loomInternalError;
    return ringPieces(&l, ringBroadcastPiece);
}

/* The chain starts one hop after the root, so the root reduces last and keeps the result. */
static loomResult_t ringReducePiece(const struct ringLane *l, size_t c0, size_t len)
{
    int n = l->n, d = l->rootDist;

    if (n == 1)
        return ringStep(l, LOOM_STEP_COPY, LOOM_STEP_FINAL, c0, c0, len);
    if (d == 1)
        return ringStep(l, LOOM_STEP_SEND, 0, c0, 0, len);
    if (d > 1)
        return ringStep(l, LOOM_STEP_RECV_REDUCE_SEND, 0, c0, 0, len);
    return ringStep(l, LOOM_STEP_RECV_REDUCE_COPY, LOOM_STEP_FINAL, c0, c0, len);
}

loomResult_t ringReduceSchedule(const struct loomSchedArgs *a, struct loomSchedule *out)
{
    struct ringLane l;
    loomResult_t res = ringLaneInit(a, out, &l);
    if (res != loomSuccess)
        return res;
    if (l.rootDist < 0)
        return loomInternalError;
    return ringPieces(&l, ringReducePiece);
}
