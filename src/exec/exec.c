/*
 * exec.c — the host executor: walks plans over connectors on the CPU.
 *
 * Each lane executes its steps in order, expanding its plan one step ahead
 * (loomPlanNext, schedule.h): the lane holds the step it runs next, so a
 * plan of any count costs the same to start. A step may run when its receive
 * FIFO holds a message (tail > pos) and its send FIFO has a free slot
 * (head + LOOM_STEPS > pos); then it copies or reduces with reduce.c,
 * publishes the counters (release) and rings the other end's doorbell.
 * Those rules, which lane owns a connector and what a step's passes are,
 * are src/device/step.h's, shared with the plan interpreter: what is this
 * file's is the waiting, the network, the device slots, single copies and
 * sends from the caller's buffer.
 * A large send over TCP whose bytes are in the caller's memory puts their
 * address in the slot instead (LOOM_FIFO_REF), and execRun takes such
 * addresses back before it returns (refsTakeBack).
 * Nothing here blocks: execRun sweeps all lanes, and only when a sweep makes
 * no progress does it wait, in three stages:
 *
 *   spin (pause) -> yield -> sleep on this process's doorbell futex
 *
 * The sleeper flags itself (`sleeping`) before re-checking, and writers look
 * at the flag after publishing (both seq_cst), so a wake-up cannot be lost;
 * sleeps are also capped at 100 ms so abort, the deadline and dead peers are
 * noticed without help. The spin stage (LOOM_SPIN pauses, 20000 by default:
 * about half a millisecond) keeps a rank on its core while its peers run on
 * theirs: on a host busy with other work, a rank that yields after a few
 * microseconds loses its core for a whole time slice, which made an 8-byte
 * AllReduce on 2 ranks an order of magnitude slower (docs/performance.md,
 * "polling before yielding"; Open MPI polls
 * without yielding). With more ranks than cores a peer may need this very
 * core, so the spin stage is cut to 32 pauses there and sched_yield hands it
 * the core at once. The same holds whenever a peer the wait is for shares
 * this thread's core, as two ranks on two cores do after the scheduler
 * happened to wake one onto the other's core: each rank publishes in its
 * doorbell the core it runs on when a call or a wait begins (coreMark), and
 * a wait for a local peer last seen on this core skips the spin stage
 * (peerOnThisCore). Without that, two
 * blocking calls in a row on 2 ranks of the 2-core machine could settle
 * into slow turns, each rank spinning out its stage while the
 * other waited for the core (`bench/first-calls`; docs/performance.md).
 * Yielding goes on for a millisecond, then the thread
 * sleeps. A wait on a network connector skips the spin
 * stage and moves the network itself (pollNetwork), so no thread hand-off
 * sits on the latency path: when every link the blocked lanes wait on is a
 * socket that alone carries what they wait for (small messages over TCP,
 * comm->netWait), it blocks in poll() on those sockets for the yield stage,
 * woken by the kernel as a program calling recv() is, while the proxy keeps
 * off them; otherwise it yields between polls.
 *
 * Device plans (execRun's `dev`: device buffers, the host-driven CUDA
 * executor, loomExecCuda, defined here too) walk the same steps, but a ready
 * step is handed to the GPU (cudaexec.c, this executor's device steps,
 * which calls nothing here) instead of computed here,
 * and its counters are published by cudaExecRetire once the GPU is done with
 * it; the positions advance at issue, so later steps can be issued behind
 * it. A plan is finished when every step is issued and retired. While the
 * GPU has steps in flight the thread yields rather than sleeps, since the
 * GPU rings no doorbell. The top bit of a FIFO's size word says whether the
 * message sits in the connector's device slots (p2p) or its host slots.
 *
 * What ends a wait that makes no progress, and how the peers are told of a
 * failure, is execfail.c's, and the futex sleep and the same-core hint are
 * execwait.c's: services of the executor layer that every executor uses
 * (exec.h); this file calls no other executor.
 */
#include <errno.h>
#include <limits.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cma.h"
#include "compress.h"
#include "cudacore.h"
#include "debug.h"
#include "exec.h"
#include "executor.h"
#include "interp.h"
#include "mem.h"
#include "reduce.h"
#include "step.h"

#define EXEC_NET_WAIT_MAX 16          /* network connectors one blocking wait polls */
#define EXEC_NET_WAIT_MS 1            /* the longest such poll: abort is seen within it */
#define EXEC_NET_SPIN_NS (100 * 1000) /* a network wait polls without sleeping this long first */

static inline void cpuRelax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield");
#endif
}

/* ---- connector ownership between lanes of one plan (src/device/step.h) ---- */

/*
 * The owner table of lane l's channel: owner[dir * ownerStride(comm) + peer]
 * (comm->owner spans every channel of the communicator).
 */
static inline int32_t *ownerTable(const struct loomLane *l)
{
    return l->comm->owner + (size_t)l->channel * l->comm->nranks;
}

static inline size_t ownerStride(const struct loomComm *comm)
{
    return (size_t)comm->nChannels * comm->nranks;
}

static void ownersClaim(struct loomLane *lanes, int nlanes)
{
    for (int i = 0; i < nlanes; i++) {
        struct loomLane *l = &lanes[i];
        loomOwnersTake(ownerTable(l), ownerStride(l->comm), l->plan->steps, l->plan->nsteps, i,
                       LOOM_OWNER_NONE);
    }
}

/* Hands each connector lane `i` owned to the next lane that uses it, or frees it. */
static void ownersRelease(struct loomLane *lanes, int nlanes, int i)
{
    struct loomComm *comm = lanes[i].comm;
    int32_t *owner = ownerTable(&lanes[i]);
    size_t stride = ownerStride(comm);
    loomOwnersHandOff(owner, stride, comm->nranks, i);
    for (int j = i + 1; j < nlanes; j++) {
        const struct loomLane *l = &lanes[j];
        if (l->comm == comm && l->channel == lanes[i].channel && !l->done)
            loomOwnersTake(owner, stride, l->plan->steps, l->plan->nsteps, j, LOOM_OWNER_HANDED);
    }
    loomOwnersSettle(owner, stride, comm->nranks);
}

static void ownersReset(struct loomLane *lanes, int nlanes)
{
    for (int i = 0; i < nlanes; i++) {
        struct loomComm *comm = lanes[i].comm;
        size_t n = 2 * (size_t)comm->nChannels * comm->nranks;
        for (size_t k = 0; k < n; k++)
            comm->owner[k] = -1;
    }
}

/* ---- one step ---- */

/* A slot's message: the bytes at `from`, or their address (the backend sends from there). */
static void sendFrom(char *slot, const char *from, size_t bytes, int byRef)
{
    if (byRef)
        memcpy(slot, &from, sizeof(from)); /* LOOM_FIFO_REF */
    else
        reduceCopy(slot, from, bytes);
}

/*
 * One pass of a step's work (struct loomStepPass, src/device/step.h) with
 * reduce.c, one output at a time: a reduction, or a copy to dst, into the
 * first output, the others copied from there; else every output copied from
 * the message or src. A slot may take the address of its values instead
 * (bit j of *ref for the j-th send peer) only where they are in the
 * caller's buffers; the bits are cleared where they are not.
 */
static void passRun(const struct loomLane *l, const struct loomStepPass *p, size_t count,
                    unsigned *ref)
{
    size_t bytes = count * l->elemSize;
    int n = l->comm->nranks, first = 0;
    if (p->reduce) {
        if (p->nin > 1)
            reduceApplyMany(p->to[0], p->with, (const void *const *)p->in, p->nin, count, l->dt,
                            l->op, n, p->divide);
        else if (p->divide)
            reduceApplyFinal(p->to[0], p->in[0], p->with, count, l->dt, l->op, n);
        else
            reduceApply(p->to[0], p->in[0], p->with, count, l->dt, l->op);
        first = 1;
    } else if (p->overlap) {
        memmove(p->to[0], p->in[0], bytes);
        first = 1;
    } else if (p->dstFirst) {
        if (p->to[0] != p->in[0])
            reduceCopy(p->to[0], p->in[0], bytes);
        first = 1;
    }
    if (p->divide && !p->reduce)
        reducePostOp(p->to[0], count, l->dt, l->op, n);
    if (!p->callers)
        *ref = 0;
    const char *vals = first ? p->to[0] : p->in[0];
    for (int k = first; k < p->nto; k++)
        sendFrom(p->to[k], vals, bytes, (*ref >> (k - p->dstFirst)) & 1);
}

/*
 * The local work of one step, as the op table declares it (loomStepWorkOf,
 * src/device/step.h), or an OFFER's descriptor. `in` holds the messages'
 * slots (one per receive peer), `out` the outgoing ones (one per send peer).
 */
static void stepCompute(struct loomLane *l, const struct loomStep *s, const char *const *in,
                        char *const *out, unsigned *ref)
{
    size_t es = l->elemSize, bytes = s->count * es;
    const char *src = l->bufs[s->srcBuf] + s->srcOff * es;
    unsigned uses = loomStepUses(s->op);
    char *dst = (uses & LOOM_USES_DST) ? l->bufs[s->dstBuf] + s->dstOff * es : NULL;
    struct loomStepWork w;

    if (uses & LOOM_USES_SLOTLESS) {
        *ref = 0; /* an offer is a descriptor in the slot, not the caller's bytes */
        if (s->op == LOOM_STEP_OFFER) { /* the PULLs, PUSH and DRAIN: stepTakeOffers, laneAdvance */
            struct loomOffer o;
            memOfferFill(src, bytes, &o);
            memcpy(out[0], &o, sizeof(o));
        }
        return;
    }
    loomStepWorkOf(&w, s, l->op, l->comm->nranks, src, dst, in, out, s->nsend, bytes);
    for (int k = 0; k < w.npass; k++)
        passRun(l, &w.pass[k], s->count, ref);
}

/*
 * A PULL, PULL_REDUCE or PUSH: the peers' offered elements, read from their
 * memory into dst, or folded one peer after the other into src on the way
 * to dst (through a mapping of a loomMemAlloc buffer, or read into the
 * communicator's staging buffer first); or src written into them.
 *
 * A rank that leaves a call on an error does not wait for its peers to
 * have read what it offered (they may never): it withdraws its offers
 * first (withdrawOffers zeroes the address in every slot not yet taken),
 * and its caller may reuse the buffer as soon as it returns. So the reader
 * reads the address again after its copy: if it still stands, the copy was
 * made while the buffer still held the call's data; if it was withdrawn, the
 * copy may hold anything and the call fails. A writer claims the address
 * before it writes (a withdrawal then waits for the write to end) and
 * writes nothing once it is withdrawn. A peer that is gone sets *gone and
 * leaves the step to be reported as a wait on a dead peer (waitFailure,
 * which prefers a failure the peer had heard of).
 */
static loomResult_t stepTakeOffers(struct loomLane *l, const struct loomStep *s,
                                   const char *const *in, int *gone)
{
    size_t es = l->elemSize, bytes = s->count * es;
    int push = s->op == LOOM_STEP_PUSH, reduce = s->op == LOOM_STEP_PULL_REDUCE;
    const char *src = l->bufs[s->srcBuf] + s->srcOff * es, *acc = src;
    char *dst = push ? NULL : l->bufs[s->dstBuf] + s->dstOff * es;
    *gone = 0;
    for (int k = 0; k < s->nrecv; k++) {
        _Atomic uint64_t *slot = (_Atomic uint64_t *)(uintptr_t)in[k];
        uint64_t at = atomic_load_explicit(slot, memory_order_acquire);
        int from = s->recvPeers[k];
        const struct loomPeerInfo *peer = &l->comm->peers[from];
        int err = 0, withdrawn = at == 0;
        if (push && !withdrawn)
            withdrawn = !atomic_compare_exchange_strong_explicit(
                slot, &at, at | LOOM_OFFER_CLAIMED, memory_order_acq_rel, memory_order_acquire);
        if (!withdrawn) {
            struct loomOffer o;
            /* Not the address: withdrawOffers may be writing it (it was read above). */
            memcpy((char *)&o + sizeof(o.addr), in[k] + sizeof(o.addr), sizeof(o) - sizeof(o.addr));
            o.addr = at;
            memPeerSeen(l->comm, from, o.memGen);
            char *view = memPeerView(l->comm, from, &o, bytes, push);
            if (push) {
                if (view)
                    reduceCopy(view, src, bytes);
                else
                    err = cmaWrite(peer->pid, src, at, bytes);
            } else if (!reduce) {
                if (view)
                    reduceCopyStream(dst, view, bytes);
                else
                    err = cmaRead(peer->pid, dst, at, bytes);
            } else {
                const char *b = view;
                if (b == NULL && (err = cmaRead(peer->pid, cmaStage(l->comm), at, bytes)) == 0)
                    b = cmaStage(l->comm);
                if (b && k == s->nrecv - 1 && (s->flags & LOOM_STEP_FINAL))
                    reduceApplyFinal(dst, acc, b, s->count, l->dt, l->op, l->comm->nranks);
                else if (b)
                    reduceApply(dst, acc, b, s->count, l->dt, l->op);
                acc = dst;
            }
            /* A read-modify-write (adding 0) orders the check after the copy as a full fence
             * would (fences are refused under -fsanitize=thread). A claimed address stays. */
            withdrawn = !push && atomic_fetch_add_explicit(slot, 0, memory_order_seq_cst) != at;
            if (err == 0 && !withdrawn)
                continue;
        }
        loomResult_t heard = execPeerFailure(l->comm); /* what made the peer leave, if posted */
        if (heard != loomSuccess)
            return heard;
        if (withdrawn)
            return loomSetError(loomRemoteError,
                                "rank %d (pid %d on %s) left the call on an error (its own, a "
                                "peer's or an abort) while rank %d %s its buffer",
                                from, (int)peer->pid, peer->hostname, l->comm->rank,
                                push ? "wrote" : "read");
        if (err == ESRCH || execPeerGone(l->comm, from)) {
            *gone = 1; /* exiting, or gone */
            return loomSuccess;
        }
        return loomSetError(loomRemoteError,
                            "rank %d could not %s the buffer of rank %d (pid %d on %s) with "
                            "process_vm_%s: %s (LOOM_CMA_DISABLE=1 turns single copies off)",
                            l->comm->rank, push ? "write" : "read", from, (int)peer->pid,
                            peer->hostname, push ? "writev" : "readv", strerror(err));
    }
    return loomSuccess;
}

/* The other end learns of a counter we advanced: shm through its doorbell, net by moving now. */
static inline void connectorPublished(struct loomConnector *c)
{
    if (c->progress)
        c->progress(c->progressCtx);
    else
        bellRing(c->peerBell);
}

/* A slot of c: in its device slots for a device lane when the FIFO has them. */
static char *slotAt(const struct loomConnector *c, int device)
{
    char *base = device && c->devSlots ? c->devSlots : c->slots;
    return base + (c->pos % LOOM_STEPS) * c->slotBytes;
}

/* The connectors of one ready step and their slots: one per receive peer, one per send peer. */
struct stepLinks {
    struct loomConnector *rc[LOOM_STEP_MAXPEERS], *sc[LOOM_STEP_MAXPEERS];
    const char *in[LOOM_STEP_MAXPEERS];
    char *out[LOOM_STEP_MAXPEERS];
};

/* ---- sends from the caller's memory (LOOM_FIFO_REF; loomConnector.unref in core.h) ---- */

/*
 * The sends of step s (bit j: its j-th send peer) that may go from the
 * caller's memory instead of through the slot: a host lane of at least
 * EXEC_REF_MIN_BYTES that does not compress, over a link whose backend takes
 * references, while the lane's list of such links has room. stepCompute
 * clears the bits where the bytes are in a slot (a sum for the next hop, a
 * message forwarded without dst). Smaller messages are copied: that costs
 * less than taking them back from the backend when the call returns.
 */
#define EXEC_REF_MIN_BYTES (32 * 1024)
static unsigned refsAllowed(const struct loomLane *l, const struct loomStep *s,
                            const struct stepLinks *k, size_t bytes)
{
    unsigned mask = 0;
    int room = EXEC_REF_LINKS - l->nrefs;
    if (l->compress || bytes < EXEC_REF_MIN_BYTES)
        return 0;
    for (int j = 0; j < s->nsend; j++) {
        int listed = 0;
        if (k->sc[j]->unref == NULL)
            continue;
        for (int r = 0; r < l->nrefs; r++)
            listed |= l->refs[r] == k->sc[j];
        if (listed || room-- > 0)
            mask |= 1u << j;
    }
    return mask;
}

static void refsNote(struct loomLane *l, struct loomConnector *sc)
{
    for (int r = 0; r < l->nrefs; r++)
        if (l->refs[r] == sc)
            return;
    l->refs[l->nrefs++] = sc;
}

/*
 * Whether a message of sc the backend may not have sent yet points into
 * [lo, hi) (any message, with lo == hi == NULL). The size words and slots are
 * this thread's: only the executor and its unref write them.
 */
static int refsPending(const struct loomConnector *sc, const char *lo, const char *hi)
{
    for (uint64_t m = atomic_load_explicit(&sc->fifo->head, memory_order_acquire); m < sc->pos;
         m++) {
        uint64_t word = sc->fifo->bytes[m % LOOM_STEPS];
        const char *at;
        if (!(word & LOOM_FIFO_REF))
            continue;
        memcpy(&at, sc->slots + (m % LOOM_STEPS) * sc->slotBytes, sizeof(at));
        if (lo == NULL || (at < hi && at + (word & ~LOOM_FIFO_FLAGS) > lo))
            return 1;
    }
    return 0;
}

/* Before a step writes [lo, hi) of the caller's memory: no message still to send reads it. */
static void refsGuard(const struct loomLane *l, const char *lo, size_t bytes)
{
    for (int r = 0; r < l->nrefs; r++)
        if (refsPending(l->refs[r], lo, lo + bytes))
            l->refs[r]->unref(l->refs[r]->progressCtx);
}

/*
 * Before execRun returns, whatever the outcome: each message still pointing
 * to the caller's memory is sent as far as the socket takes it now, and the
 * rest is copied into its slot by unref, so that the caller may reuse or free
 * its buffers at once (and a rank leaving on an error leaves no thread
 * reading them).
 */
static void refsTakeBack(struct loomLane *lanes, int nlanes)
{
    for (int i = 0; i < nlanes; i++) {
        struct loomLane *l = &lanes[i];
        for (int r = 0; r < l->nrefs; r++) {
            struct loomConnector *sc = l->refs[r];
            if (refsPending(sc, NULL, NULL))
                sc->progress(sc->progressCtx);
            if (refsPending(sc, NULL, NULL))
                sc->unref(sc->progressCtx);
        }
        l->nrefs = 0;
    }
}

/*
 * Makes a step's effect visible: bumps the counters (host lanes publish them
 * at once). `bytes` is the message's size word; a FIFO with device slots
 * flags it as there on a device lane.
 */
static void stepPublish(struct loomLane *l, int dev, const struct loomStep *s,
                        const struct stepLinks *k, uint64_t bytes, unsigned ref)
{
    for (int j = 0; j < s->nsend; j++) {
        struct loomConnector *sc = k->sc[j];
        uint64_t b = l->compress && sc->progress ? s->count * sizeof(uint16_t) : bytes;
        if ((ref >> j) & 1) {
            b |= LOOM_FIFO_REF;
            refsNote(l, sc);
        }
        sc->fifo->bytes[sc->pos % LOOM_STEPS] =
            b | (dev && sc->devSlots ? LOOM_FIFO_DEVICE_DATA : 0);
        sc->pos++;
        if (!dev) {
            atomic_store_explicit(&sc->fifo->tail, sc->pos, memory_order_release);
            connectorPublished(sc);
        }
    }
    for (int j = 0; j < s->nrecv; j++) {
        struct loomConnector *rc = k->rc[j];
        if (loomLinesClear(rc->ll, rc->pos, LOOM_LL_MOD)) /* see fifo.h */
            memset(rc->ll + (rc->pos % LOOM_STEPS) * LOOM_LL_LINES, 0,
                   LOOM_LL_LINES * sizeof(uint64_t));
        rc->pos++;
        if (!dev) {
            atomic_store_explicit(&rc->fifo->head, rc->pos, memory_order_release);
            connectorPublished(rc);
        }
    }
}

/* Whether lane i may use the connector to or from peer now: lanes sharing one take turns. */
static inline int laneOwns(const struct loomLane *l, int shared, int i, int dir, int peer)
{
    return loomOwns(shared ? ownerTable(l) : NULL, ownerStride(l->comm), dir, peer, i);
}

/*
 * Whether step s of lane i can run: every message it receives has arrived
 * (and is what it expects) and every FIFO it sends to has a free slot.
 * 1 with k filled, 0 to wait, -1 on an error in *err.
 */
static int stepReady(struct loomLane *l, int i, int shared, int dev, const struct loomStep *s,
                     struct stepLinks *k, loomResult_t *err)
{
    struct loomChannel *ch = &l->comm->channels[l->channel];
    for (int j = 0; j < s->nrecv; j++) {
        int from = s->recvPeers[j];
        struct loomConnector *rc = &ch->recv[from];
        if (!laneOwns(l, shared, i, 1, from) ||
            !loomMessageIn(atomic_load_explicit(&rc->fifo->tail, memory_order_acquire), rc->pos))
            return 0;
        uint64_t got = rc->fifo->bytes[rc->pos % LOOM_STEPS];
        int onDevice = (got & LOOM_FIFO_DEVICE_DATA) != 0;
        *err = execMessageMismatch(l, s, from, got, dev && rc->devSlots != NULL);
        if (*err != loomSuccess)
            return -1;
        k->rc[j] = rc;
        k->in[j] = slotAt(rc, onDevice);
    }
    for (int j = 0; j < s->nsend; j++) {
        int to = s->sendPeers[j];
        struct loomConnector *sc = &ch->send[to];
        if (!laneOwns(l, shared, i, 0, to) ||
            !loomSlotFree(atomic_load_explicit(&sc->fifo->head, memory_order_acquire), sc->pos))
            return 0;
        if (s->op == LOOM_STEP_OFFER && sc->progress) { /* cmaOk needs every link on shm */
            *err = loomSetError(loomInternalError, "a single-copy offer on a network link");
            return -1;
        }
        k->sc[j] = sc;
        k->out[j] = slotAt(sc, dev);
    }
    return 1;
}

/* Bit j set when connector c[j] is a network link: a compressing lane's bfloat16 goes there. */
static unsigned linksOnNet(struct loomConnector *const *c, int n)
{
    unsigned mask = 0;
    for (int j = 0; j < n; j++)
        mask |= (c[j]->progress != NULL) << j;
    return mask;
}

/* Moves the lane on to its next step. */
static inline void laneNext(struct loomLane *l)
{
    l->cur++;
    l->more = loomPlanNext(l->plan->steps, l->plan->nsteps, &l->it, &l->step);
}

/* Runs as many steps of lane `i` as can run now. Returns steps done, or -1 on error. */
static long laneAdvance(struct loomLane *lanes, int nlanes, int i, struct cudaExec *gpu,
                        loomResult_t *err)
{
    struct loomLane *l = &lanes[i];
    struct loomChannel *ch = &l->comm->channels[l->channel];
    int shared = nlanes > 1, dev = gpu != NULL;
    long done = 0;

    while (l->more && !(dev && cudaExecFull(gpu))) {
        const struct loomStep *s = &l->step;
        struct stepLinks k;
        size_t bytes = s->count * l->elemSize;

        if (s->op == LOOM_STEP_DRAIN) {
            /* Done when the peer has taken every message: it read what was offered. */
            struct loomConnector *sc = &ch->send[s->sendPeers[0]];
            if (!laneOwns(l, shared, i, 0, s->sendPeers[0]) ||
                !loomDrained(atomic_load_explicit(&sc->fifo->head, memory_order_acquire), sc->pos))
                break;
            laneNext(l);
            done++;
            continue;
        }
        int ready = stepReady(l, i, shared, dev, s, &k, err);
        if (ready < 0)
            return -1;
        if (ready == 0)
            break;
        if (dev && (loomStepUses(s->op) &
                    LOOM_USES_SLOTLESS)) { /* the tuner never picks single copies there */
            *err = loomSetError(loomInternalError, "a single-copy step in a device plan");
            return -1;
        }
        unsigned ref = 0;
        if (!dev && l->nrefs > 0 && (loomStepUses(s->op) & LOOM_USES_DST))
            refsGuard(l, l->bufs[s->dstBuf] + s->dstOff * l->elemSize, bytes);
        if (dev) {
            *err = cudaExecStep(gpu, l, s, k.in, k.out, k.rc, k.sc);
            if (*err != loomSuccess)
                return -1;
        } else if (loomStepTakesOffers(s->op)) {
            int gone;
            if ((*err = stepTakeOffers(l, s, k.in, &gone)) != loomSuccess)
                return -1;
            if (gone)
                break;
        } else if (l->compress && s->op != LOOM_STEP_COPY) {
            compressStep(l, s, k.in, linksOnNet(k.rc, s->nrecv), k.out, linksOnNet(k.sc, s->nsend));
        } else {
            ref = refsAllowed(l, s, &k, bytes);
            stepCompute(l, s, k.in, k.out, &ref);
        }
        stepPublish(l, dev, s, &k, s->op == LOOM_STEP_OFFER ? bytes | LOOM_FIFO_OFFER : bytes, ref);
        laneNext(l);
        done++;
    }
    if (!l->more && !l->done) {
        l->done = 1;
        if (shared)
            ownersRelease(lanes, nlanes, i);
    }
    return done;
}

/* ---- waiting ---- */
/*
 * Publishes the core this thread runs on in its lanes' doorbells, at the
 * start of every call and of every wait, and returns it plus one (0: not
 * known).
 */
static int32_t coreMark(const struct loomLane *lanes, int nlanes)
{
    int32_t mine = execThisCore();
    for (int i = 0; i < nlanes && mine; i++)
        execBellMarkCore(lanes[i].comm->bell, mine);
    return mine;
}

/* Connector j of lane l's step: its receives first, then its sends. */
static struct loomConnector *stepLink(const struct loomLane *l, int j)
{
    const struct loomStep *s = &l->step;
    struct loomChannel *ch = &l->comm->channels[l->channel];
    return j < s->nrecv ? &ch->recv[s->recvPeers[j]] : &ch->send[s->sendPeers[j - s->nrecv]];
}

/*
 * Whether a peer on this host that a blocked step waits for was last seen
 * (coreMark) on the core this thread runs on: spinning would only keep that
 * peer off it. A hint that may be stale; a wrong guess costs yields instead
 * of pauses.
 */
static int peerOnThisCore(const struct loomLane *lanes, int nlanes)
{
    int32_t mine = coreMark(lanes, nlanes);
    for (int i = 0; i < nlanes && mine; i++) {
        const struct loomLane *l = &lanes[i];
        for (int j = 0; !l->done && j < l->step.nrecv + l->step.nsend; j++)
            if (execPeerSeenOn(stepLink(l, j), l->comm->bell, mine))
                return 1;
    }
    return 0;
}

/*
 * One pass over the lanes; returns how many are unfinished (a device plan
 * is unfinished while the GPU still has steps in flight), -1 on error.
 */
static int sweep(struct loomLane *lanes, int nlanes, struct cudaExec *dev, long *progress,
                 loomResult_t *err)
{
    int left = 0;
    *progress = 0;
    if (dev) {
        long r = cudaExecRetire(dev, err);
        if (r < 0)
            return -1;
        *progress += r;
    }
    for (int i = 0; i < nlanes; i++) {
        if (lanes[i].done)
            continue;
        long d = laneAdvance(lanes, nlanes, i, dev, err);
        if (d < 0)
            return -1;
        *progress += d;
        left += !lanes[i].done;
    }
    /* Counted after the lanes, which may just have issued their last steps. */
    return left + (dev && cudaExecPending(dev) > 0);
}

/*
 * Moves the network links the blocked lanes wait on, from this thread, and
 * returns 1 if there were any. Such a wait first polls its sockets without
 * sleeping for EXEC_NET_SPIN_NS (and at most LOOM_SPIN polls), yielding at
 * every fourth poll; then it blocks in poll() on them, or yields between
 * polls, until EXEC_YIELD_NS; then sleeps (the proxy moves the links
 * meanwhile and rings). A thread asleep in poll() pays a wake-up when the
 * message lands (halted vCPUs: tens of us, several times the round trip
 * itself); the yields leave the core to whoever else needs it where ranks
 * outnumber cores (figures in docs/performance.md, "Waiting on the network").
 */
static int pollNetwork(const struct loomLane *lanes, int nlanes)
{
    int any = 0;
    for (int i = 0; i < nlanes; i++) {
        const struct loomLane *l = &lanes[i];
        for (int j = 0; !l->done && j < l->step.nrecv + l->step.nsend; j++) {
            struct loomConnector *c = stepLink(l, j);
            if (c->progress) {
                c->progress(c->progressCtx);
                any = 1;
            }
        }
    }
    return any;
}

/*
 * Blocks until a network link the blocked lanes wait on may move (comm->netWait: poll() on
 * their sockets, as a program that calls recv() itself is woken by the kernel, with no hand-off
 * to the proxy), at most timeoutMs (0: only looks). Returns 0 at once when the lanes wait for
 * anything else too: a link without a socket to wait on, shared memory, another lane, a second
 * communicator; they then yield as before.
 */
static int netBlock(const struct loomLane *lanes, int nlanes, int timeoutMs)
{
    struct loomConnector *c[EXEC_NET_WAIT_MAX];
    struct loomComm *comm = lanes[0].comm;
    int n = 0;
    if (comm->netWait == NULL)
        return 0;
    for (int i = 0; i < nlanes; i++) {
        const struct loomLane *l = &lanes[i];
        if (l->done)
            continue;
        const struct loomStep *s = &l->step;
        int blocked = 0;
        if (l->comm != comm || s->op == LOOM_STEP_DRAIN)
            return 0;
        for (int j = 0; j < s->nrecv + s->nsend; j++) {
            int recv = j < s->nrecv;
            struct loomConnector *k = stepLink(l, j);
            if (recv ? loomMessageIn(atomic_load_explicit(&k->fifo->tail, memory_order_acquire),
                                     k->pos)
                     : loomSlotFree(atomic_load_explicit(&k->fifo->head, memory_order_acquire),
                                    k->pos))
                continue; /* this one may move */
            if (k->progress == NULL || n == EXEC_NET_WAIT_MAX)
                return 0;
            c[n++] = k;
            blocked = 1;
        }
        if (!blocked) /* it waits for another lane's connector, or runs now */
            return 0;
    }
    return n > 0 && comm->netWait(comm, c, n, timeoutMs);
}

/* An abort or a peer's notice is waiting to be reported: do not go to sleep. */
static int failurePending(const struct loomLane *lanes, int nlanes)
{
    for (int i = 0; i < nlanes; i++) {
        const struct loomComm *comm = lanes[i].comm;
        if (atomic_load_explicit(&comm->abortFlag, memory_order_acquire) ||
            atomic_load_explicit(&comm->bell->noticeState, memory_order_acquire) == 2)
            return 1;
    }
    return 0;
}

/*
 * The flag, the re-check and the failure check all come after `seq` is read,
 * so a wake-up, an abort or a notice that arrives from then on is not slept
 * through.
 */
static int execSleep(struct loomLane *lanes, int nlanes, struct cudaExec *dev, long *progress,
                     loomResult_t *err, int *left)
{
    struct loomDoorbell *bell = lanes[0].comm->bell;
    int multi = 0, capped = 0;
    for (int i = 1; i < nlanes; i++)
        multi |= lanes[i].comm != lanes[0].comm;
    uint32_t seq = atomic_load_explicit(&bell->seq, memory_order_seq_cst);
    atomic_store_explicit(&bell->sleeping, 1, memory_order_seq_cst);
    *left = sweep(lanes, nlanes, dev, progress, err);
    if (*left > 0 && *progress == 0 && !failurePending(lanes, nlanes))
        capped = execFutexWait(&bell->seq, seq, multi ? 1000000ULL : EXEC_SLEEP_NS) != 0 &&
                 errno == ETIMEDOUT && !multi;
    atomic_store_explicit(&bell->sleeping, 0, memory_order_relaxed);
    return capped;
}

/*
 * Waits until the peer has taken message m of sc (its PUSH into our buffer,
 * claimed, is over), is gone, or the communicator's timeout has passed.
 */
static void waitPushed(struct loomComm *comm, struct loomConnector *sc, uint64_t m, int peer)
{
    uint64_t deadline = loomClockNs() + (uint64_t)comm->timeoutSec * 1000000000ULL;
    while (atomic_load_explicit(&sc->fifo->head, memory_order_acquire) <= m &&
           !execPeerGone(comm, peer) && loomClockNs() < deadline)
        sched_yield();
}

/*
 * On an error, before the caller gets its buffers back: the address in every
 * single-copy offer a peer has not taken yet is zeroed, so that a peer still
 * to PULL it finds it withdrawn instead of reading a buffer the caller may
 * already have reused, and one still to PUSH into it writes nothing (see
 * stepTakeOffers); a PUSH that claimed its offer is waited for. Offers go
 * over shared memory only.
 */
static void withdrawOffers(struct loomLane *lanes, int nlanes)
{
    for (int i = 0; i < nlanes; i++) {
        struct loomComm *comm = lanes[i].comm;
        int first = 1;
        for (int j = 0; j < i; j++)
            first &= lanes[j].comm != comm;
        for (int c = 0; first && c < comm->nChannels; c++) {
            struct loomChannel *ch = &comm->channels[c];
            for (int p = 0; ch->send && p < comm->nranks; p++) {
                struct loomConnector *sc = &ch->send[p];
                if (!sc->connected || sc->progress || sc->fifo == NULL || sc->slots == NULL)
                    continue;
                uint64_t m = atomic_load_explicit(&sc->fifo->head, memory_order_acquire);
                for (; m < sc->pos; m++) {
                    if (!(sc->fifo->bytes[m % LOOM_STEPS] & LOOM_FIFO_OFFER))
                        continue;
                    char *slot = sc->slots + (m % LOOM_STEPS) * sc->slotBytes;
                    _Atomic uint64_t *addr = (_Atomic uint64_t *)(uintptr_t)slot;
                    uint64_t v = atomic_load_explicit(addr, memory_order_acquire);
                    while (v != 0 && !(v & LOOM_OFFER_CLAIMED) &&
                           !atomic_compare_exchange_weak_explicit(addr, &v, 0, memory_order_seq_cst,
                                                                  memory_order_acquire))
                        ;
                    if (v & LOOM_OFFER_CLAIMED)
                        waitPushed(comm, sc, m, p);
                }
            }
        }
    }
}

/* Runs every lane to completion, after execPrepare; dev: device lanes, their steps on the GPU. */
static loomResult_t execRun(struct loomLane *lanes, int nlanes, struct cudaExec *dev)
{
    struct execWait w = {0};
    loomResult_t err = loomSuccess;
    long progress;
    int left, spinLimit = lanes[0].comm->spin;

    for (int i = 0; i < nlanes; i++) {
        struct loomLane *l = &lanes[i];
        l->it = (struct loomPlanIter){0, 0};
        l->cur = 0;
        l->more = loomPlanNext(l->plan->steps, l->plan->nsteps, &l->it, &l->step);
        l->nrefs = 0;
    }
    if (nlanes > 1)
        ownersClaim(lanes, nlanes);
    coreMark(lanes, nlanes); /* a rank that seldom waits (a Broadcast's root) is seen too */
    for (;;) {
        if (w.capped && w.network) /* what a missed wake-up left in the sockets, counted below */
            pollNetwork(lanes, nlanes);
        left = sweep(lanes, nlanes, dev, &progress, &err);
        if (w.capped && progress) /* woken by the cap, not by whoever moved: a missed wake-up */
            atomic_fetch_add_explicit(&lanes[0].comm->lateWakes, 1, memory_order_relaxed);
        w.capped = 0;
        if (left <= 0)
            break;
        if (progress) {
            w.spins = 0;
            continue;
        }
        if (w.spins == 0) {
            w.idleSince = loomClockNs();
            w.network = pollNetwork(lanes, nlanes);
            w.crowded = !w.network && peerOnThisCore(lanes, nlanes);
        }
        w.spins++;
        if (!w.network && !w.crowded && w.spins < spinLimit) {
            cpuRelax();
            if ((w.spins & 1023) == 0 &&
                atomic_load_explicit(&lanes[0].comm->abortFlag, memory_order_relaxed))
                w.spins = spinLimit; /* go and notice it below */
            continue;
        }
        /* Nobody rings the doorbell when the GPU finishes a step: never sleep on it then. */
        int gpuBusy = dev && cudaExecPending(dev) > 0;
        if (w.network && !gpuBusy && w.spins < spinLimit &&
            loomClockNs() - w.idleSince < EXEC_NET_SPIN_NS) {
            /* a poll() that returns at once, which also keeps the proxy off the sockets */
            w.netPolled |= netBlock(lanes, nlanes, 0);
            pollNetwork(lanes, nlanes);
            if ((w.spins & 3) == 0)
                sched_yield();
            continue;
        }
        if (w.network && !gpuBusy && loomClockNs() - w.idleSince < EXEC_YIELD_NS &&
            !failurePending(lanes, nlanes) && netBlock(lanes, nlanes, EXEC_NET_WAIT_MS)) {
            w.netPolled = 1;
            pollNetwork(lanes, nlanes);
            continue;
        }
        if ((w.spins & 63) != 0 || gpuBusy || loomClockNs() - w.idleSince < EXEC_YIELD_NS) {
            if (w.network)
                pollNetwork(lanes, nlanes);
            sched_yield();
            if (gpuBusy && (w.spins & 63) == 0 &&
                (err = execWaitFailure(lanes, nlanes, loomClockNs(), &w)) != loomSuccess)
                break;
            continue;
        }
        if (w.netPolled) { /* the proxy moves the links from now on, and rings */
            lanes[0].comm->netWaitEnd(lanes[0].comm, 1);
            w.netPolled = 0;
        }
        w.capped = execSleep(lanes, nlanes, dev, &progress, &err, &left);
        if (left <= 0)
            break;
        if (progress) {
            w.spins = 0;
            continue;
        }
        err = execWaitFailure(lanes, nlanes, loomClockNs(), &w);
        if (err != loomSuccess)
            break;
    }
    if (w.netPolled)
        lanes[0].comm->netWaitEnd(lanes[0].comm, 0);
    refsTakeBack(lanes, nlanes);
    if (nlanes > 1)
        ownersReset(lanes, nlanes);
    if (err != loomSuccess) {
        execMarkBroken(lanes, nlanes, err, !w.heard); /* posted first: a reader finds the reason */
        withdrawOffers(lanes, nlanes);
    }
    return err;
}

/*
 * The two executors this loop is (executor.h): loomExecHost computes the
 * steps on the CPU, loomExecCuda hands them to the GPU (call->dev, this
 * thread's CUDA side: cudaPlanBegin), cudaexec.c being its device steps.
 * Either returns loomSuccess, loomTimeout (no progress for the comm's
 * timeout), loomRemoteError (abort, or a peer died), or loomInvalidUsage
 * (the peers disagree on a message size); on an error the communicators
 * involved are marked broken. Both run every communicator's calls.
 */
static int servesAll(const struct loomComm *comm)
{
    (void)comm;
    return 1;
}

static loomResult_t hostRun(struct loomLane *lanes, int nlanes, const struct loomExecCall *call)
{
    (void)call;
    return execRun(lanes, nlanes, NULL);
}

static loomResult_t cudaRun(struct loomLane *lanes, int nlanes, const struct loomExecCall *call)
{
    return execRun(lanes, nlanes, call->dev);
}

const struct loomExecutor loomExecHost = {
    .name = "host", .serves = servesAll, .prepare = execPrepare, .run = hostRun};
const struct loomExecutor loomExecCuda = {
    .name = "cuda", .serves = servesAll, .prepare = execPrepare, .run = cudaRun};
