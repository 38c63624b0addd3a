/*
 * schedule.h — the step language: algorithms are data, not code paths.
 *
 * A generator turns (collective, nranks, rank, ring order, count, chunking)
 * into the plan of the steps this rank performs for one lane (one channel
 * of one operation): a fixed-size program of step templates and loops over
 * pieces (struct loomPlan, below), which the executors expand into steps as
 * they run. Steps run strictly in order. Each step is one primitive over at
 * most `chunkElems` elements:
 *
 *   SEND                    src[srcOff..] ------------------------> sendPeer
 *   RECV                    recvPeer ------------------------------> dst[dstOff..]
 *   RECV_REDUCE_SEND        recvPeer (+) src[srcOff..] ------------> sendPeer
 *   RECV_REDUCE_COPY        recvPeer (+) src[srcOff..] ------------> dst[dstOff..]
 *   RECV_REDUCE_COPY_SEND   recvPeer (+) src[srcOff..] --> dst[dstOff..] and sendPeer
 *   RECV_COPY_SEND          recvPeer --> dst[dstOff..] and sendPeer
 *   COPY                    src[srcOff..] -------------------------> dst[dstOff..]
 *
 * A step names its peers in two small arrays, recvPeers[0 .. nrecv) and
 * sendPeers[0 .. nsend), at most LOOM_STEP_MAXPEERS (3) each. Most steps
 * have one of each they use; a tree node folds or feeds its children in one
 * step instead of one step per child:
 *
 *   fan-in   RECV_REDUCE_*  with nrecv = k: one message from each of k peers,
 *            reduced with src in one pass: (((src (+) m0) (+) m1) (+) m2)
 *   fan-out  any op that sends, with nsend = k: the same values to each of k
 *            peers (a tree's broadcast-down: RECV_COPY_SEND from the parent
 *            to every child; the AllReduce top: RECV_REDUCE_COPY_SEND from
 *            all children back to all of them)
 *
 * The op table below says which ops may do which (LOOM_USES_FANIN,
 * LOOM_USES_FANOUT). A step runs when every one of its messages has arrived
 * and every one of its send FIFOs has a free slot.
 *
 * and five for single copies between the processes of one host (the cma
 * algorithm), where no data passes through the FIFOs:
 *
 *   OFFER                   the address of src[srcOff..], count ----> sendPeer
 *                           (to read from, or, from the receive buffer, to
 *                           write into)
 *   PULL                    recvPeer's offered elements, read straight
 *                           from its memory (process_vm_readv) -----> dst[dstOff..]
 *   PULL_REDUCE             recvPeers' offered elements (+) src ----> dst[dstOff..]
 *                           (fan-in: up to LOOM_STEP_MAXPEERS offers, folded
 *                           in the order of recvPeers)
 *   PUSH                    src[srcOff..] --> written straight into recvPeer's
 *                           offered elements (process_vm_writev)
 *   DRAIN                   waits until sendPeer has taken every message sent
 *                           to it (so has finished reading, or writing, what
 *                           was offered)
 *
 * A rank must DRAIN every peer it offered to before its schedule ends: that
 * is what keeps its buffers valid until the peers have read them, and what
 * tells it that they have written them. OFFER, PULL and PUSH may move more
 * than chunkElems (nothing goes through a slot); PULL_REDUCE at most
 * chunkElems (the executor may stage a piece in a buffer of one slot's
 * size); DRAIN has count 0. A reduced piece is pushed rather than pulled:
 * the reducer writes it while it is in its cache, where a reader on another
 * core would fetch it line by line from that core's cache.
 * Peers are ranks of the communicator; between two ranks messages travel in
 * a FIFO, in order (one FIFO per ordered pair and channel). `src` and `dst`
 * name one of the operation's two buffers (LOOM_BUF_SEND = the user's
 * sendbuff, LOOM_BUF_RECV = recvbuff); offsets and counts are in elements.
 * A step flagged LOOM_STEP_FINAL produces a complete reduction: the executor
 * applies the operation's post-processing (the division of loomAvg) to the
 * reduced values before storing or sending them.
 *
 * Generators touch no buffer and call no transport: tests expand their
 * plans and run them for many rank counts in a symbolic simulator
 * (tests/unit/check_schedule.c).
 *
 * Sizes: a step is 56 bytes, a template 112. An 8-rank ring AllReduce lane of
 * 1 GiB in 128 KiB pieces is 15360 steps (840 KiB) as a list, and 15
 * templates (1680 bytes) as a plan, the same as for 1 MiB.
 *
 * Layout of a template (struct loomPlanStep, 112 bytes, no pointers):
 *
 *    0  op srcBuf dstBuf flags moves nrecv nsend pad     8 x uint8
 *    8  recvPeers[3] sendPeers[3]                        6 x int32 (unused: -1)
 *   32  nblocks block lag loopStart loopEnd pad2         6 x uint32
 *   56  niters len piece srcBase dstBase npieces blockLen 7 x uint64
 */
#ifndef LOOM_SCHEDULE_H_
#define LOOM_SCHEDULE_H_

#include <stddef.h>
#include <stdint.h>

#include "loom.h"

/* Slots in every connector FIFO. */
#define LOOM_STEPS 8

/* Most peers one step receives from, or sends to (a tree node's children). */
#define LOOM_STEP_MAXPEERS 3

typedef enum {
    LOOM_STEP_SEND = 0,
    LOOM_STEP_RECV,
    LOOM_STEP_RECV_REDUCE_SEND,
    LOOM_STEP_RECV_REDUCE_COPY,
    LOOM_STEP_RECV_REDUCE_COPY_SEND,
    LOOM_STEP_RECV_COPY_SEND,
    LOOM_STEP_COPY,
    LOOM_STEP_OFFER,
    LOOM_STEP_PULL,
    LOOM_STEP_DRAIN,
    LOOM_STEP_PULL_REDUCE,
    LOOM_STEP_PUSH,
    LOOM_STEP_NUM_OPS
} loomStepOp_t;

enum { LOOM_BUF_SEND = 0, LOOM_BUF_RECV = 1 };

/* Functions the device code shares with the host (issue 19's interpreter) say so. */
#if defined(__CUDACC__)
#define LOOM_HOSTDEV __host__ __device__
#else
#define LOOM_HOSTDEV
#endif

/*
 * The op table: what each step op does, one flag per side of the data path.
 * Generators, the simulator and both executors read it here rather than
 * spelling each op out.
 *
 *   LOOM_USES_SRC       reads local input src[srcOff .. +count)
 *   LOOM_USES_RECV      takes one message from each recv peer (an offer,
 *                       with SLOTLESS)
 *   LOOM_USES_REDUCE    combines the message with the local input
 *   LOOM_USES_DST       writes local output dst[dstOff .. +count)
 *   LOOM_USES_SEND      puts one message to each send peer
 *   LOOM_USES_SLOTLESS  a single copy: no elements pass through a slot
 *                       (the message is an offer, or there is none)
 *   LOOM_USES_FANIN     may receive from up to LOOM_STEP_MAXPEERS peers
 *                       (nrecv), reducing every message with src
 *   LOOM_USES_FANOUT    may send to up to LOOM_STEP_MAXPEERS peers (nsend)
 *
 * RECV means nrecv >= 1 (exactly 1 without FANIN), SEND nsend >= 1 (exactly
 * 1 without FANOUT); an op without them has nrecv or nsend 0. A step that
 * writes dst and messages writes the same values to each. Without REDUCE, a
 * step with RECV moves the message, one without moves src.
 */
enum {
    LOOM_USES_SRC = 0x01,
    LOOM_USES_RECV = 0x02,
    LOOM_USES_REDUCE = 0x04,
    LOOM_USES_DST = 0x08,
    LOOM_USES_SEND = 0x10,
    LOOM_USES_SLOTLESS = 0x20,
    LOOM_USES_FANIN = 0x40,
    LOOM_USES_FANOUT = 0x80,
};

/* The LOOM_USES_* flags of op; 0 for a value that is no op. */
static inline LOOM_HOSTDEV unsigned loomStepUses(unsigned op)
{
    switch (op) {
    case LOOM_STEP_SEND:
        return LOOM_USES_SRC | LOOM_USES_SEND | LOOM_USES_FANOUT;
    case LOOM_STEP_RECV:
        return LOOM_USES_RECV | LOOM_USES_DST;
    case LOOM_STEP_RECV_REDUCE_SEND:
        return LOOM_USES_RECV | LOOM_USES_SRC | LOOM_USES_REDUCE | LOOM_USES_SEND |
               LOOM_USES_FANIN | LOOM_USES_FANOUT;
    case LOOM_STEP_RECV_REDUCE_COPY:
        return LOOM_USES_RECV | LOOM_USES_SRC | LOOM_USES_REDUCE | LOOM_USES_DST | LOOM_USES_FANIN;
    case LOOM_STEP_RECV_REDUCE_COPY_SEND:
        return LOOM_USES_RECV | LOOM_USES_SRC | LOOM_USES_REDUCE | LOOM_USES_DST | LOOM_USES_SEND |
               LOOM_USES_FANIN | LOOM_USES_FANOUT;
    case LOOM_STEP_RECV_COPY_SEND:
        return LOOM_USES_RECV | LOOM_USES_DST | LOOM_USES_SEND | LOOM_USES_FANOUT;
    case LOOM_STEP_COPY:
        return LOOM_USES_SRC | LOOM_USES_DST;
    case LOOM_STEP_OFFER:
        return LOOM_USES_SRC | LOOM_USES_SEND | LOOM_USES_SLOTLESS;
    case LOOM_STEP_PULL:
        return LOOM_USES_RECV | LOOM_USES_DST | LOOM_USES_SLOTLESS;
    case LOOM_STEP_DRAIN:
        return LOOM_USES_SEND | LOOM_USES_SLOTLESS;
    case LOOM_STEP_PULL_REDUCE:
        return LOOM_USES_RECV | LOOM_USES_SRC | LOOM_USES_REDUCE | LOOM_USES_DST |
               LOOM_USES_SLOTLESS | LOOM_USES_FANIN;
    case LOOM_STEP_PUSH:
        return LOOM_USES_RECV | LOOM_USES_SRC | LOOM_USES_SLOTLESS;
    default:
        return 0;
    }
}

/* 1 if op takes offers from its receive peers and reads or writes their memory (PULL,
 * PULL_REDUCE, PUSH). */
static inline LOOM_HOSTDEV int loomStepTakesOffers(unsigned op)
{
    unsigned uses = loomStepUses(op);
    return (uses & LOOM_USES_SLOTLESS) && (uses & LOOM_USES_RECV);
}

/* The op's name ("RECV_REDUCE_SEND"), "?" for a value that is no op. */
const char *loomStepName(unsigned op);

#define LOOM_STEP_FINAL 0x1

struct loomStep {
    uint8_t op;     /* loomStepOp_t */
    uint8_t srcBuf; /* LOOM_BUF_*: where local input is read */
    uint8_t dstBuf; /* LOOM_BUF_*: where local output is written */
    uint8_t flags;  /* LOOM_STEP_FINAL */
    uint8_t nrecv;  /* peers in recvPeers (0 for an op without RECV) */
    uint8_t nsend;  /* peers in sendPeers (0 for an op without SEND) */
    uint8_t pad[2];
    int32_t recvPeers[LOOM_STEP_MAXPEERS]; /* ranks data is received from; unused: -1 */
    int32_t sendPeers[LOOM_STEP_MAXPEERS]; /* ranks data is sent to; unused: -1 */
    size_t srcOff;                         /* element offset into src (ops that read local input) */
    size_t dstOff; /* element offset into dst (ops that write local output) */
    size_t count;  /* elements, 1 .. chunkElems (OFFER, PULL: 1 or more; DRAIN: 0) */
};

struct loomSchedule;

/*
 * A plan: a lane's steps as a short program whose size does not depend on
 * the count. It is an array of step templates (struct loomPlanStep) grouped
 * in loops: a loop runs its templates in order, iteration after iteration,
 * and then the next loop starts.
 *
 *   loop 0 [t0 t1 t2] x niters0      iteration i: t0(i) t1(i) t2(i)
 *   loop 1 [t3 t4]    x niters1
 *
 * A template covers a range of len elements, cut in pieces of `piece`
 * elements; piece j runs in iteration j + lag (lags let a tree overlap
 * reduce-up and broadcast-down of different pieces). Each piece is cut in
 * nblocks near-equal blocks of ceil(m / nblocks) elements (m: the piece's
 * length, shorter for the last one), and the template moves block `block`
 * (a ring AllReduce: the n blocks of a loop around the ring). So in
 * iteration i a template yields one concrete step, or none when the piece
 * or its block is empty:
 *
 *   j = i - lag          pos = j x piece      m = min(piece, len - pos)
 *   bs = ceil(m / nblocks)   start = block x bs   count = min(bs, m - start)
 *   srcOff = srcBase + (pos + start if the source moves with the piece, else 0)
 *   dstOff = dstBase + (the same for the destination)
 *
 * piece = 0 means the whole range in one step (count = len, even 0: a
 * DRAIN, or an OFFER of a whole block). Every template of a loop carries
 * the loop's bounds and iteration count, so a plan is one array with no
 * pointers inside: a device kernel can take it by its base address, and
 * loomPlanNext below (host and device code) expands it one step at a time.
 * Templates that could never yield a step are left out when appended, so
 * every peer a plan names is one its lane talks to.
 */
#define LOOM_PLAN_SRC_MOVES 0x1 /* srcOff moves with the piece */
#define LOOM_PLAN_DST_MOVES 0x2 /* dstOff moves with the piece */

struct loomPlanStep {
    uint8_t op, srcBuf, dstBuf, flags; /* as in struct loomStep */
    uint8_t moves;                     /* LOOM_PLAN_*_MOVES */
    uint8_t nrecv, nsend;              /* as in struct loomStep */
    uint8_t pad;
    int32_t recvPeers[LOOM_STEP_MAXPEERS], sendPeers[LOOM_STEP_MAXPEERS];
    uint32_t nblocks, block; /* block of nblocks this template moves (1, 0: the whole piece) */
    uint32_t lag;            /* piece j runs in iteration j + lag */
    uint32_t loopStart;      /* this template's loop: templates [loopStart, loopEnd) */
    uint32_t loopEnd;
    uint32_t pad2;
    uint64_t niters; /* iterations of the loop */
    uint64_t len;    /* elements of the range */
    uint64_t piece;  /* elements per piece, or 0: the whole range in one step */
    uint64_t srcBase, dstBase;
    /* Filled by planAppend, so that expanding divides only in a ragged last piece: */
    uint64_t npieces;  /* pieces of the range (1 for piece 0) */
    uint64_t blockLen; /* ceil(piece / nblocks): the block size of a full piece */
};

/* A growable plan. Generators append; the caller owns and reuses it. */
struct loomPlan {
    struct loomPlanStep *steps;
    uint32_t nsteps;
    uint32_t cap;
    uint32_t open; /* first template of the loop being appended to */
};

/* Where an expansion stands: template k of its loop, iteration i. */
struct loomPlanIter {
    uint32_t k;
    uint64_t i;
};

/* Template t's step in iteration i into *out: 1, or 0 when it yields none there. */
static inline LOOM_HOSTDEV int loomPlanStepAt(const struct loomPlanStep *t, uint64_t i,
                                              struct loomStep *out)
{
    uint64_t count, rel = 0;
    if (i < t->lag || i - t->lag >= t->npieces)
        return 0;
    if (t->piece == 0) {
        count = t->len;
    } else {
        uint64_t pos = (i - t->lag) * t->piece;
        uint64_t m = t->len - pos < t->piece ? t->len - pos : t->piece;
        uint64_t bs = m;
        if (t->nblocks != 1)
            bs = m == t->piece ? t->blockLen : m / t->nblocks + (m % t->nblocks != 0);
        uint64_t start = t->block * bs;
        if (start >= m)
            return 0;
        count = m - start < bs ? m - start : bs;
        rel = pos + start;
    }
    out->op = t->op;
    out->srcBuf = t->srcBuf;
    out->dstBuf = t->dstBuf;
    out->flags = t->flags;
    out->nrecv = t->nrecv;
    out->nsend = t->nsend;
    for (int k = 0; k < LOOM_STEP_MAXPEERS; k++) {
        out->recvPeers[k] = t->recvPeers[k];
        out->sendPeers[k] = t->sendPeers[k];
    }
    out->srcOff = t->srcBase + ((t->moves & LOOM_PLAN_SRC_MOVES) ? rel : 0);
    out->dstOff = t->dstBase + ((t->moves & LOOM_PLAN_DST_MOVES) ? rel : 0);
    out->count = count;
    return 1;
}

/*
 * The next step of plan steps[0 .. n) into *out: 1, or 0 at the end. Start
 * with *it zeroed. Costs a few operations per template visited; a template
 * that yields nothing in an iteration (a tree's pipeline filling) is
 * skipped on the way.
 */
static inline LOOM_HOSTDEV int loomPlanNext(const struct loomPlanStep *steps, uint32_t n,
                                            struct loomPlanIter *it, struct loomStep *out)
{
    while (it->k < n) {
        const struct loomPlanStep *t = &steps[it->k];
        int got = loomPlanStepAt(t, it->i, out);
        if (it->k + 1 < t->loopEnd) {
            it->k++;
        } else if (it->i + 1 < t->niters) {
            it->i++;
            it->k = t->loopStart;
        } else {
            it->k = t->loopEnd;
            it->i = 0;
        }
        if (got)
            return 1;
    }
    return 0;
}

/* Starts a new loop: the templates appended from now on form its body. */
void planLoop(struct loomPlan *p);
/*
 * Appends template t to the open loop (its loop fields are filled here,
 * and its unused peer entries set to -1) and sets the loop's iterations to
 * cover every template's pieces. A template that would yield no step is
 * dropped. Returns loomSystemError when out of memory, loomInternalError
 * when t's peers disagree with its op (a generator bug: a count the op
 * table does not allow, a negative or repeated peer).
 */
loomResult_t planAppend(struct loomPlan *p, const struct loomPlanStep *t);
/*
 * The template most generators need, to append with planAppend: op over len
 * elements in pieces of `piece` (0: one step of all of them), a whole piece
 * a step from iteration 0 on (lag 0), src in buffer srcBuf from srcOff and
 * dst in dstBuf from dstOff, both moving with the piece (where op uses
 * them); nrecv receive peers from recvPeers, one send peer (or -1).
 */
struct loomPlanStep planMoving(loomStepOp_t op, uint8_t flags, int sendPeer, const int *recvPeers,
                               int nrecv, int srcBuf, size_t srcOff, int dstBuf, size_t dstOff,
                               size_t len, size_t piece);
/* Empties p (keeps its memory). */
void planReset(struct loomPlan *p);
/* Frees p's memory and empties it. */
void planFree(struct loomPlan *p);
/* Appends every step of p, expanded, to *out (the simulator's view). loomSystemError if out of
 * memory. */
loomResult_t planExpand(const struct loomPlan *p, struct loomSchedule *out);

/* Collectives and point-to-point kinds a schedule can be built for. */
typedef enum {
    LOOM_COLL_BROADCAST = 0,
    LOOM_COLL_REDUCE,
    LOOM_COLL_ALLREDUCE,
    LOOM_COLL_ALLGATHER,
    LOOM_COLL_REDUCESCATTER,
    LOOM_COLL_ALLTOALL,
    LOOM_COLL_ALLTOALLV,
    LOOM_COLL_SEND,
    LOOM_COLL_RECV,
    LOOM_COLL_NUM
} loomColl_t;

/* Inputs of a generator. Sizes are in elements. */
struct loomSchedArgs {
    loomColl_t coll;
    int nranks;
    int rank;
    /* ring[i] is the rank at position i of the ring; data flows from ring[i]
     * to ring[(i+1) % nranks]. NULL means the identity order. */
    const int *ring;
    /* Broadcast/Reduce: root rank. Send/Recv: the peer. */
    int root;
    /* Element count as the user passed it: AllReduce/Broadcast/Reduce: buffer
     * length; AllGather: sendcount (per-rank block); ReduceScatter: recvcount
     * (per-rank block); AlltoAll: count per peer; Send/Recv: count. */
    size_t count;
    /* This lane handles elements [lo, hi) of each per-rank block (of the
     * whole buffer for AllReduce, Broadcast, Reduce, Send/Recv): lanes split
     * the work by channel. 0 <= lo <= hi <= count. */
    size_t lo, hi;
    /* Largest count of one step (the FIFO slot size in elements), >= 1. */
    size_t chunkElems;
    /* AlltoAllv only: per-peer counts and displacements in elements. */
    const size_t *sendcounts, *sdispls, *recvcounts, *rdispls;
    /* Tree only: hosts[r] is the host of rank r, numbered 0 .. nhosts - 1 with
     * every number used. With several hosts the trees span hosts and the ranks
     * of a host form a chain; NULL (or one host): the trees span the ranks. */
    const int *hosts;
    /* Tree only: the ranks host after host (each host's in the order its
     * chain runs, as topo.c orders them), or on one host the order in which
     * ranks take the trees' positions; NULL: rank order. A permutation of
     * 0 .. nranks - 1. */
    const int *order;
    /* Tree only: 1 sends the whole lane through the first tree (half the
     * messages, for sizes where latency is all that counts); 0 or 2 splits it
     * between the two. */
    int trees;
};

/* A growable array of steps: a plan expanded (planExpand), as the simulator runs it. */
struct loomSchedule {
    struct loomStep *steps;
    size_t nsteps;
    size_t cap;
};

/* Appends one step, growing the array. Returns loomSystemError if out of memory. */
loomResult_t scheduleAppend(struct loomSchedule *s, const struct loomStep *step);
/* Empties s (keeps its memory). */
void scheduleReset(struct loomSchedule *s);
/* Frees s's memory and empties it. */
void scheduleFree(struct loomSchedule *s);

/*
 * Ring generators (algorithms/ring.c). Each appends the plan of this rank's
 * steps for one lane to *out, in loops of its own (it does not reset it). They return
 * loomSystemError when out of memory (the caller records the reason: generators do not log) and
 * loomInternalError when the rank or root is not in the ring or chunkElems is
 * 0 (a core bug, since the core checked the user's arguments).
 */
loomResult_t ringBroadcastPlan(const struct loomSchedArgs *a, struct loomPlan *out);
loomResult_t ringReducePlan(const struct loomSchedArgs *a, struct loomPlan *out);
loomResult_t ringAllReducePlan(const struct loomSchedArgs *a, struct loomPlan *out);
loomResult_t ringAllGatherPlan(const struct loomSchedArgs *a, struct loomPlan *out);
loomResult_t ringReduceScatterPlan(const struct loomSchedArgs *a, struct loomPlan *out);

/*
 * Double binary tree generators (algorithms/tree.c): two complementary trees,
 * each carrying half of [lo, hi), pipelined in pieces of chunkElems with
 * reduce-up and broadcast-down overlapped; Broadcast and Reduce for any root.
 * Same contract as the ring generators (appends; loomSystemError when out of
 * memory, loomInternalError on inconsistent arguments, including a bad
 * hosts[] array). A node folds all its children in one fan-in step and
 * feeds them in one fan-out step. Reduce on a rank other than the root
 * writes no buffer (the user need not pass a recvbuff there).
 */
loomResult_t treeAllReducePlan(const struct loomSchedArgs *a, struct loomPlan *out);
loomResult_t treeBroadcastPlan(const struct loomSchedArgs *a, struct loomPlan *out);
loomResult_t treeReducePlan(const struct loomSchedArgs *a, struct loomPlan *out);

/* A rank's place in one of the two trees: children are at most two of the
 * tree plus the next rank of its host's chain (one fan-in or fan-out step
 * takes them all). */
#define LOOM_TREE_MAXDOWN LOOM_STEP_MAXPEERS
struct loomTreeNode {
    int up;    /* parent rank, -1 at the top */
    int ndown; /* children, 0 .. LOOM_TREE_MAXDOWN */
    int down[LOOM_TREE_MAXDOWN];
    int depth; /* edges from the top */
};
/*
 * Fills *out with rank a->rank's links in tree `tree` (0 or 1) for the
 * collective a->coll (Broadcast and Reduce are rooted at a->root, the others
 * are not), a->nranks, a->hosts and a->order. Used by the tests and by
 * topo.c (the trees loomCommTree shows are the AllReduce ones); the
 * generators compute the same. loomInternalError on inconsistent arguments.
 */
loomResult_t treeNodeOf(const struct loomSchedArgs *a, int tree, struct loomTreeNode *out);

/*
 * Direct generators (algorithms/direct.c): pairwise exchange. AlltoAll and
 * AlltoAllv, and Send / Recv of one lane. For AlltoAll(v) the steps of
 * different peers are interleaved so that no FIFO needs more than LOOM_STEPS
 * slots of slack for the schedule to complete when every rank runs it.
 */
loomResult_t directAlltoAllPlan(const struct loomSchedArgs *a, struct loomPlan *out);
loomResult_t directAlltoAllvPlan(const struct loomSchedArgs *a, struct loomPlan *out);
loomResult_t directSendPlan(const struct loomSchedArgs *a, struct loomPlan *out);
loomResult_t directRecvPlan(const struct loomSchedArgs *a, struct loomPlan *out);

/*
 * Single copies (LOOM_ALGO_CMA, algorithms/single.c): OFFER, PULL,
 * PULL_REDUCE and DRAIN steps, each byte read once straight from the peer's
 * buffer; only where every rank can read every other's memory (src/exec/cma.c).
 * AlltoAll and AllGather pull their blocks; Broadcast pulls the root's
 * buffer; ReduceScatter and AllReduce reduce one block (slice) per rank, and
 * AllReduce then pulls the reduced slices; Reduce folds everything at the
 * root. Same contract as the ring generators.
 */
loomResult_t singleAlltoAllPlan(const struct loomSchedArgs *a, struct loomPlan *out);
loomResult_t singleAllGatherPlan(const struct loomSchedArgs *a, struct loomPlan *out);
loomResult_t singleBroadcastPlan(const struct loomSchedArgs *a, struct loomPlan *out);
loomResult_t singleReduceScatterPlan(const struct loomSchedArgs *a, struct loomPlan *out);
loomResult_t singleAllReducePlan(const struct loomSchedArgs *a, struct loomPlan *out);
loomResult_t singleReducePlan(const struct loomSchedArgs *a, struct loomPlan *out);

/*
 * Recursive doubling (algorithms/doubling.c): AllReduce in log2 n exchanges
 * of the whole vector between partners (two more when n is not a power of
 * two), for the smallest messages. Same contract as the ring generators.
 */
loomResult_t doublingAllReducePlan(const struct loomSchedArgs *a, struct loomPlan *out);

/*
 * The algorithms. The tuner (src/tuner.c) chooses among those a collective
 * has a generator for; adding one takes a value here, its generators and
 * its name in schedule.c's tables, and a cost model in tuner.c.
 * LOOM_ALGO_CMA: single copies between the buffers of the ranks of one
 * host (single.c), for every collective but AlltoAllv and Send/Recv.
 */
typedef enum {
    LOOM_ALGO_RING = 0,
    LOOM_ALGO_TREE,
    LOOM_ALGO_DIRECT,
    LOOM_ALGO_DOUBLING,
    LOOM_ALGO_CMA,
    LOOM_ALGO_NUM
} loomAlgo_t;

/* A generator: appends the plan of rank a->rank's steps of one lane to *out. */
typedef loomResult_t (*loomGenerator_t)(const struct loomSchedArgs *a, struct loomPlan *out);
/*
 * The generator of coll for algo: ring (reductions, Broadcast, AllGather),
 * tree (AllReduce, Broadcast, Reduce), doubling (AllReduce), direct
 * (AlltoAll(v), Send, Recv) or cma (all but AlltoAllv, Send and Recv).
 * NULL when coll has no such schedule (a tree AllGather) or either is out
 * of range.
 */
loomGenerator_t scheduleGenerator(loomColl_t coll, loomAlgo_t algo);
/* The name of algo ("ring", "tree", "direct", "doubling", "cma"; "?" out of range). */
const char *scheduleAlgoName(loomAlgo_t algo);

#endif /* LOOM_SCHEDULE_H_ */
