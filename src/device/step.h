/*
 * step.h — what a step means, written once for every executor.
 *
 * Three rules decide how a plan's steps run over the FIFOs, whoever runs
 * them: which lane owns a connector and when it hands it on; when a step
 * may run (every message it takes has arrived and is the one expected, and
 * every FIFO it sends to has a free slot); and what its local work is (from
 * the op table, loomStepUses). They are here, on plain data (peers,
 * positions, counters, pointers), as LOOM_HOSTDEV static inline functions
 * in the common subset of C and CUDA, and every executor calls them:
 *
 *   the plan interpreter      interp.h: a GPU kernel, and the kernel executor
 *                             of host buffers (src/exec/kexec.c)
 *   the host executor         src/exec/exec.c
 *   the host-driven CUDA      src/exec/cudaexec.c (the local work)
 *   executor
 *
 * What each keeps is its own: how it waits, how it loads a counter, which
 * memory a slot is in, how it names a mismatch, and how it computes a pass
 * (the interpreter's threads, reduce.c's SIMD kernels, a kernel launch or
 * cuMemcpyAsync). The host executor's single copies, its sends from the
 * caller's buffer (LOOM_FIFO_REF) and its bfloat16 network links are host
 * matters and stay in exec.c and compress.c.
 */
#ifndef LOOM_DEVICE_STEP_H_
#define LOOM_DEVICE_STEP_H_

#include <stddef.h>
#include <stdint.h>

#include "fifo.h"
#include "loom.h"
#include "schedule.h"

/* ---- connector ownership among the lanes of a plan ---- */

/*
 * Lanes of one plan that use the same connector take turns in plan order
 * (the order the user issued them, the same on both ends): the first lane
 * whose plan names a connector owns it until that lane is done, then the
 * next lane in plan order that names it and is not done.
 *
 * An owner table holds, for each connector of one channel, the index of the
 * lane that owns it, or LOOM_OWNER_NONE: owner[dir * stride + peer], dir 0
 * for the send connector to peer, 1 for the receive connector from it. The
 * interpreter's block has one channel (stride nranks); the host executor's
 * table spans every channel of a communicator (stride nChannels * nranks,
 * owner pointing at the channel's first entry).
 */
#define LOOM_OWNER_NONE (-1)
#define LOOM_OWNER_HANDED (-2) /* handed on by a lane that is done, not yet taken */

/* Whether plan steps[0 .. n) sends to (dir 0) or receives from (dir 1) peer. */
static inline LOOM_HOSTDEV int loomPlanUsesPeer(const struct loomPlanStep *steps, uint32_t n,
                                                int dir, int peer)
{
    for (uint32_t k = 0; k < n; k++) {
        const struct loomPlanStep *s = &steps[k];
        int np = dir ? s->nrecv : s->nsend;
        for (int j = 0; j < np; j++)
            if ((dir ? s->recvPeers[j] : s->sendPeers[j]) == peer)
                return 1;
    }
    return 0;
}

/*
 * Lane `lane`, whose plan is steps[0 .. n), takes every connector the plan
 * names whose entry holds `from`: LOOM_OWNER_NONE when the lanes claim their
 * connectors before the first step (lane after lane, in plan order), or
 * LOOM_OWNER_HANDED when a lane is done (loomOwnersHandOff).
 */
static inline LOOM_HOSTDEV void loomOwnersTake(int32_t *owner, size_t stride,
                                               const struct loomPlanStep *steps, uint32_t n,
                                               int32_t lane, int32_t from)
{
    for (uint32_t k = 0; k < n; k++) {
        const struct loomPlanStep *s = &steps[k];
        for (int j = 0; j < s->nsend; j++)
            if (owner[s->sendPeers[j]] == from)
                owner[s->sendPeers[j]] = lane;
        for (int j = 0; j < s->nrecv; j++)
            if (owner[stride + (size_t)s->recvPeers[j]] == from)
                owner[stride + (size_t)s->recvPeers[j]] = lane;
    }
}

/*
 * Lane `lane` is done: the connectors of the channel (nranks peers each way)
 * it owns are handed on. The caller then lets every later lane of the
 * channel that is not done take them, in plan order (loomOwnersTake from
 * LOOM_OWNER_HANDED: the first that names one gets it), and frees what
 * none took (loomOwnersSettle).
 */
static inline LOOM_HOSTDEV void loomOwnersHandOff(int32_t *owner, size_t stride, int nranks,
                                                  int32_t lane)
{
    for (int dir = 0; dir < 2; dir++)
        for (int p = 0; p < nranks; p++)
            if (owner[dir * stride + (size_t)p] == lane)
                owner[dir * stride + (size_t)p] = LOOM_OWNER_HANDED;
}

static inline LOOM_HOSTDEV void loomOwnersSettle(int32_t *owner, size_t stride, int nranks)
{
    for (int dir = 0; dir < 2; dir++)
        for (int p = 0; p < nranks; p++)
            if (owner[dir * stride + (size_t)p] == LOOM_OWNER_HANDED)
                owner[dir * stride + (size_t)p] = LOOM_OWNER_NONE;
}

/* Whether `lane` may use the connector to (dir 0) or from (dir 1) peer now; owner NULL: one lane.
 */
static inline LOOM_HOSTDEV int loomOwns(const int32_t *owner, size_t stride, int dir, int peer,
                                        int32_t lane)
{
    return owner == NULL || owner[dir * stride + (size_t)peer] == lane;
}

/* ---- readiness ---- */

/* Message `pos` of a FIFO has arrived: the sender's tail passed it (Simple). */
static inline LOOM_HOSTDEV int loomMessageIn(uint64_t tail, uint64_t pos)
{
    return tail > pos;
}

/* The line of message `pos` (its first, in its LL slot) carries the message's flag (LL). */
static inline LOOM_HOSTDEV int loomLineIn(uint64_t line, uint64_t pos, uint64_t llMod)
{
    return (uint32_t)(line >> 32) == LOOM_LL_FLAG(pos, llMod);
}

/* The slot of message `pos` of a FIFO is free: the receiver's head is within LOOM_STEPS. */
static inline LOOM_HOSTDEV int loomSlotFree(uint64_t head, uint64_t pos)
{
    return head + LOOM_STEPS > pos;
}

/* Every message before `pos` of a FIFO has been taken (a DRAIN waits for it). */
static inline LOOM_HOSTDEV int loomDrained(uint64_t head, uint64_t pos)
{
    return head >= pos;
}

/* How a message's size word disagrees with the step that takes it (loomMessageCheck). */
enum {
    LOOM_MSG_OK = 0,
    LOOM_MSG_PATH,  /* an offer (single copy) where data was expected, or the other way round */
    LOOM_MSG_PROTO, /* LL where Simple was expected, or the other way round */
    LOOM_MSG_SIZE,  /* another number of bytes */
    LOOM_MSG_KIND   /* device data where the step cannot take it */
};

/*
 * Whether size word `got` is the message a step expects: `want` bytes, an
 * offer exactly when the step takes offers (loomStepTakesOffers), LL lines
 * exactly when the step runs LL, and in a device slot only where the step
 * may take device data. The first disagreement, in that order (the host
 * names it in a line: execMessageMismatch).
 */
static inline LOOM_HOSTDEV int loomMessageCheck(uint64_t got, uint64_t want, int offer, int ll,
                                                int device)
{
    if (((got & LOOM_FIFO_OFFER) != 0) != (offer != 0))
        return LOOM_MSG_PATH;
    if (((got & LOOM_FIFO_LL) != 0) != (ll != 0))
        return LOOM_MSG_PROTO;
    if ((got & ~LOOM_FIFO_FLAGS) != want)
        return LOOM_MSG_SIZE;
    if ((got & LOOM_FIFO_DEVICE_DATA) && !device)
        return LOOM_MSG_KIND;
    return LOOM_MSG_OK;
}

/* The receiver of message `pos` clears its slot's LL lines (see fifo.h): the flags wrap next. */
static inline LOOM_HOSTDEV int loomLinesClear(const uint64_t *ll, uint64_t pos, uint64_t llMod)
{
    return ll != NULL && LOOM_LL_WRAPS(pos, llMod);
}

/* ---- the local work ---- */

/* Outputs of one step at most: dst and every send peer. */
#define LOOM_STEP_OUTS (LOOM_STEP_MAXPEERS + 1)

/*
 * One pass over a step's count elements: every output to[k] gets the same
 * values,
 *
 *   reduce:   post(in[nin-1] (op) ... (op) (in[0] (op) with))
 *   else:     post(in[0])   (a copy: nin 1, with NULL)
 *
 * where post divides by nranks when `divide` (the end of an Avg). A copy
 * with `overlap` has one output, dst, whose ends overlap its input, src (an
 * in-place copy): it must be made in a safe direction (memmove). With
 * `dstFirst`, to[0] is dst and the rest are outgoing slots; without, all
 * are slots. An executor that writes one output at a time computes to[0]
 * when the pass reduces or has dstFirst and copies the others from it, else
 * copies every output from in[0]; `callers` says whether those values are
 * then in the caller's buffers (dst, or src as is), where the host executor
 * may send them from (LOOM_FIFO_REF) instead of copying them to a slot.
 */
struct loomStepPass {
    char *to[LOOM_STEP_OUTS];
    const char *in[LOOM_STEP_MAXPEERS];
    const char *with;
    int8_t nto, nin;
    uint8_t reduce, divide, overlap, dstFirst, callers;
};

/* A step's local work: npass passes (0 to 2), in order. */
struct loomStepWork {
    struct loomStepPass pass[2];
    int npass;
};

/* Appends an empty pass to w. */
static inline LOOM_HOSTDEV struct loomStepPass *loomStepPassAdd(struct loomStepWork *w)
{
    struct loomStepPass *p = &w->pass[w->npass++];
    p->nto = 0;
    p->nin = 0;
    p->with = NULL;
    p->reduce = 0;
    p->divide = 0;
    p->overlap = 0;
    p->dstFirst = 0;
    p->callers = 0;
    return p;
}

/*
 * The passes of step s with op `op` on `nranks` ranks, as the op table
 * declares it: src and dst are the step's local input and output (where
 * the op uses them), in[0 .. nrecv) its messages' slots and out[0 .. nout)
 * the outgoing slots to fill (nsend of them; the interpreter's LL stages
 * one for every peer). A reduction folds the messages into src, to dst and
 * every outgoing slot alike, divided when the step is FINAL in an Avg on
 * more than one rank; otherwise the message (or src) goes to the outgoing
 * slots as it is, and to dst divided that way. dst and the slots take one
 * pass when their values are the same; an in-place copy that overlaps is a
 * pass of its own, and one that does not (dst is src) is none, unless it
 * divides.
 */
static inline LOOM_HOSTDEV void loomStepWorkOf(struct loomStepWork *w, const struct loomStep *s,
                                               int op, int nranks, const char *src, char *dst,
                                               const char *const *in, char *const *out, int nout,
                                               uint64_t bytes)
{
    unsigned uses = loomStepUses(s->op);
    int divide = (s->flags & LOOM_STEP_FINAL) && op == loomAvg && nranks > 1;
    int nin = (uses & LOOM_USES_RECV) ? s->nrecv : 0;
    char *d = (uses & LOOM_USES_DST) ? dst : NULL;
    struct loomStepPass *p;
    w->npass = 0;
    if (!(uses & LOOM_USES_SEND))
        nout = 0;
    if (uses & LOOM_USES_REDUCE) {
        p = loomStepPassAdd(w);
        p->reduce = 1;
        p->divide = (uint8_t)divide;
        p->with = src;
        for (int j = 0; j < nin; j++)
            p->in[p->nin++] = in[j];
        if (d) {
            p->to[p->nto++] = d;
            p->dstFirst = 1;
            p->callers = 1;
        }
        for (int j = 0; j < nout; j++)
            p->to[p->nto++] = out[j];
        return;
    }
    /* A message, or src, to the slots as is and to dst (divided when final). */
    const char *from = nin ? in[0] : src;
    int overlap = d && !nin && d != src && d < src + bytes && src < d + bytes;
    int joint = d && nout && !divide && !overlap && from != d;
    if (joint || nout) {
        p = loomStepPassAdd(w);
        p->in[p->nin++] = from;
        if (joint) {
            p->to[p->nto++] = d;
            p->dstFirst = 1;
        }
        for (int j = 0; j < nout; j++)
            p->to[p->nto++] = out[j];
        p->callers = (uint8_t)(joint || !nin);
    }
    if (d && !joint && (overlap || from != d || divide)) {
        p = loomStepPassAdd(w);
        p->in[p->nin++] = from;
        p->to[p->nto++] = d;
        p->dstFirst = 1;
        p->divide = (uint8_t)divide;
        p->overlap = (uint8_t)overlap;
        p->callers = 1;
    }
}

#endif /* LOOM_DEVICE_STEP_H_ */
