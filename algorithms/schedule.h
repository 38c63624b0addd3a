/*
 * schedule.h — the step language: algorithms are data, not code paths.
 *
 * A schedule generator turns (collective, nranks, rank, ring order, count,
 * chunking) into the list of steps this rank performs for one lane (one
 * channel of one operation). Steps run strictly in order. Each step is one
 * primitive over at most `chunkElems` elements:
 *
 *   SEND                    src[srcOff..] ------------------------> sendPeer
 *   RECV                    recvPeer ------------------------------> dst[dstOff..]
 *   RECV_REDUCE_SEND        recvPeer (+) src[srcOff..] ------------> sendPeer
 *   RECV_REDUCE_COPY        recvPeer (+) src[srcOff..] ------------> dst[dstOff..]
 *   RECV_REDUCE_COPY_SEND   recvPeer (+) src[srcOff..] --> dst[dstOff..] and sendPeer
 *   RECV_COPY_SEND          recvPeer --> dst[dstOff..] and sendPeer
 *   COPY                    src[srcOff..] -------------------------> dst[dstOff..]
 *
 * and three for single copies between the processes of one host (the cma
 * algorithm), where no data passes through the FIFOs:
 *
 *   OFFER                   the address of src[srcOff..], count ----> sendPeer
 *   PULL                    recvPeer's offered elements, read straight
 *                           from its memory (process_vm_readv) -----> dst[dstOff..]
 *   DRAIN                   waits until sendPeer has taken every message sent
 *                           to it (so has finished reading what was offered)
 *
 * A rank must DRAIN every peer it offered to before its schedule ends: that
 * is what keeps its buffers valid until the peers have read them. OFFER and
 * PULL may move more than chunkElems (nothing goes through a slot); DRAIN
 * has count 0.
 * Peers are ranks of the communicator; between two ranks messages travel in
 * a FIFO, in order (one FIFO per ordered pair and channel). `src` and `dst`
 * name one of the operation's two buffers (LOOM_BUF_SEND = the user's
 * sendbuff, LOOM_BUF_RECV = recvbuff); offsets and counts are in elements.
 * A step flagged LOOM_STEP_FINAL produces a complete reduction: the executor
 * applies the operation's post-processing (the division of loomAvg) to the
 * reduced values before storing or sending them.
 *
 * Generators touch no buffer and call no transport: tests run them for many
 * rank counts in a symbolic simulator (tests/unit/check_schedule.c).
 */
#ifndef LOOM_SCHEDULE_H_
#define LOOM_SCHEDULE_H_

#include <stddef.h>
#include <stdint.h>

#include "loom.h"

/* Slots in every connector FIFO. */
#define LOOM_STEPS 8

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
 *   LOOM_USES_RECV      takes one message from recvPeer
 *   LOOM_USES_REDUCE    combines the message with the local input
 *   LOOM_USES_DST       writes local output dst[dstOff .. +count)
 *   LOOM_USES_SEND      puts one message to sendPeer
 *   LOOM_USES_SLOTLESS  a single copy: no elements pass through a slot
 *                       (the message is an offer, or there is none)
 *
 * A step that writes both dst and a message writes the same values to each.
 * Without REDUCE, a step with RECV moves the message, one without moves src.
 */
enum {
    LOOM_USES_SRC = 0x01,
    LOOM_USES_RECV = 0x02,
    LOOM_USES_REDUCE = 0x04,
    LOOM_USES_DST = 0x08,
    LOOM_USES_SEND = 0x10,
    LOOM_USES_SLOTLESS = 0x20,
};

/* The LOOM_USES_* flags of op; 0 for a value that is no op. */
static inline LOOM_HOSTDEV unsigned loomStepUses(unsigned op)
{
    switch (op) {
    case LOOM_STEP_SEND:
        return LOOM_USES_SRC | LOOM_USES_SEND;
    case LOOM_STEP_RECV:
        return LOOM_USES_RECV | LOOM_USES_DST;
    case LOOM_STEP_RECV_REDUCE_SEND:
        return LOOM_USES_RECV | LOOM_USES_SRC | LOOM_USES_REDUCE | LOOM_USES_SEND;
    case LOOM_STEP_RECV_REDUCE_COPY:
        return LOOM_USES_RECV | LOOM_USES_SRC | LOOM_USES_REDUCE | LOOM_USES_DST;
    case LOOM_STEP_RECV_REDUCE_COPY_SEND:
        return LOOM_USES_RECV | LOOM_USES_SRC | LOOM_USES_REDUCE | LOOM_USES_DST | LOOM_USES_SEND;
    case LOOM_STEP_RECV_COPY_SEND:
        return LOOM_USES_RECV | LOOM_USES_DST | LOOM_USES_SEND;
    case LOOM_STEP_COPY:
        return LOOM_USES_SRC | LOOM_USES_DST;
    case LOOM_STEP_OFFER:
        return LOOM_USES_SRC | LOOM_USES_SEND | LOOM_USES_SLOTLESS;
    case LOOM_STEP_PULL:
        return LOOM_USES_RECV | LOOM_USES_DST | LOOM_USES_SLOTLESS;
    case LOOM_STEP_DRAIN:
        return LOOM_USES_SEND | LOOM_USES_SLOTLESS;
    default:
        return 0;
    }
}

/* The op's name ("RECV_REDUCE_SEND"), "?" for a value that is no op. */
const char *loomStepName(unsigned op);

#define LOOM_STEP_FINAL 0x1

struct loomStep {
    uint8_t op;       /* loomStepOp_t */
    uint8_t srcBuf;   /* LOOM_BUF_*: where local input is read */
    uint8_t dstBuf;   /* LOOM_BUF_*: where local output is written */
    uint8_t flags;    /* LOOM_STEP_FINAL */
    int32_t sendPeer; /* rank data is sent to, or -1 */
    int32_t recvPeer; /* rank data is received from, or -1 */
    size_t srcOff;    /* element offset into src (ops that read local input) */
    size_t dstOff;    /* element offset into dst (ops that write local output) */
    size_t count;     /* elements, 1 .. chunkElems (OFFER, PULL: 1 or more; DRAIN: 0) */
};

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

/* A growable array of steps. Generators append; the caller owns and reuses it. */
struct loomSchedule {
    struct loomStep *steps;
    size_t nsteps;
    size_t cap;
};

/* Appends one step, growing the array. Returns loomSystemError if out of memory. */
loomResult_t scheduleAppend(struct loomSchedule *s, const struct loomStep *step);
/* Appends a step that writes to LOOM_BUF_RECV (if it writes): the common case, spelled out. */
loomResult_t scheduleAppendOp(struct loomSchedule *s, loomStepOp_t op, uint8_t flags, int recvPeer,
                              int sendPeer, uint8_t srcBuf, size_t srcOff, size_t dstOff,
                              size_t count);
/* Empties s (keeps its memory). */
void scheduleReset(struct loomSchedule *s);
/* Frees s's memory and empties it. */
void scheduleFree(struct loomSchedule *s);

/*
 * Ring generators (algorithms/ring.c). Each appends this rank's steps for one
 * lane to *out (it does not reset it). They return loomSystemError when out
 * of memory (the caller records the reason: generators do not log) and
 * loomInternalError when the rank or root is not in the ring or chunkElems is
 * 0 (a core bug, since the core checked the user's arguments).
 */
loomResult_t ringBroadcastSchedule(const struct loomSchedArgs *a, struct loomSchedule *out);
loomResult_t ringReduceSchedule(const struct loomSchedArgs *a, struct loomSchedule *out);
loomResult_t ringAllReduceSchedule(const struct loomSchedArgs *a, struct loomSchedule *out);
loomResult_t ringAllGatherSchedule(const struct loomSchedArgs *a, struct loomSchedule *out);
loomResult_t ringReduceScatterSchedule(const struct loomSchedArgs *a, struct loomSchedule *out);

/*
 * Double binary tree generators (algorithms/tree.c): two complementary trees,
 * each carrying half of [lo, hi), pipelined in pieces of chunkElems with
 * reduce-up and broadcast-down overlapped; Broadcast and Reduce for any root.
 * Same contract as the ring generators (appends; loomSystemError when out of
 * memory, loomInternalError on inconsistent arguments, including a bad
 * hosts[] array). Reduce on a rank other than the root: LOOM_BUF_RECV must be
 * a scratch area of 2 x chunkElems elements private to the lane (the user
 * need not pass a recvbuff there); the schedule keeps partial sums in it.
 */
loomResult_t treeAllReduceSchedule(const struct loomSchedArgs *a, struct loomSchedule *out);
loomResult_t treeBroadcastSchedule(const struct loomSchedArgs *a, struct loomSchedule *out);
loomResult_t treeReduceSchedule(const struct loomSchedArgs *a, struct loomSchedule *out);

/* A rank's place in one of the two trees: children are at most two of the
 * tree plus the next rank of its host's chain. */
#define LOOM_TREE_MAXDOWN 3
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
loomResult_t directAlltoAllSchedule(const struct loomSchedArgs *a, struct loomSchedule *out);
loomResult_t directAlltoAllvSchedule(const struct loomSchedArgs *a, struct loomSchedule *out);
/*
 * AlltoAll by single copies (LOOM_ALGO_CMA): a rank offers each peer its
 * block, copies its own, pulls its block of every peer's send buffer, and
 * drains. Only where every rank can read every other's memory (cma.c).
 */
loomResult_t directAlltoAllCmaSchedule(const struct loomSchedArgs *a, struct loomSchedule *out);
/* AllGather the same way: every peer is offered this rank's send buffer. */
loomResult_t directAllGatherCmaSchedule(const struct loomSchedArgs *a, struct loomSchedule *out);
loomResult_t directSendSchedule(const struct loomSchedArgs *a, struct loomSchedule *out);
loomResult_t directRecvSchedule(const struct loomSchedArgs *a, struct loomSchedule *out);

/*
 * Recursive doubling (algorithms/doubling.c): AllReduce in log2 n exchanges
 * of the whole vector between partners (two more when n is not a power of
 * two), for the smallest messages. Same contract as the ring generators.
 */
loomResult_t doublingAllReduceSchedule(const struct loomSchedArgs *a, struct loomSchedule *out);

/*
 * The algorithms. The tuner (src/tuner.c) chooses among those a collective
 * has a generator for; adding one takes a value here, its generators in
 * schedule.c's table, and a cost model and a name in tuner.c.
 * LOOM_ALGO_CMA: single copies between the buffers of the ranks of one
 * host. AlltoAll and AllGather have schedules for it (OFFER, PULL, DRAIN steps); the other
 * collectives run it without one, in src/cma.c, where LOOM_ALGO names it
 * and the call can (tunerAllows).
 */
typedef enum {
    LOOM_ALGO_RING = 0,
    LOOM_ALGO_TREE,
    LOOM_ALGO_DIRECT,
    LOOM_ALGO_DOUBLING,
    LOOM_ALGO_CMA,
    LOOM_ALGO_NUM
} loomAlgo_t;

/* A generator: appends rank a->rank's steps of one lane to *out. */
typedef loomResult_t (*loomGenerator_t)(const struct loomSchedArgs *a, struct loomSchedule *out);
/*
 * The generator of coll for algo: ring (reductions, Broadcast, AllGather),
 * tree (AllReduce, Broadcast, Reduce), doubling (AllReduce), direct
 * (AlltoAll(v), Send, Recv) or cma (AlltoAll, AllGather).
 * NULL when coll has no such schedule (a tree AllGather) or either is out
 * of range.
 */
loomGenerator_t scheduleGenerator(loomColl_t coll, loomAlgo_t algo);

#endif /* LOOM_SCHEDULE_H_ */
