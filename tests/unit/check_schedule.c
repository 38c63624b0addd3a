/*
 * check_schedule.c — the schedule generators, run together in a symbolic
 * simulator.
 *
 * The generators only emit steps, so their correctness is a property of the
 * steps of all n ranks taken together. The simulator runs every rank's
 * schedule at once over one FIFO of LOOM_STEPS slots per ordered pair of
 * ranks; a rank executes its next step only when the message it needs has
 * arrived and its outgoing FIFO has a free slot. A full pass in which no rank
 * moves while some are unfinished is a deadlock.
 *
 * Elements are symbols, not numbers. Every element of rank r's send buffer
 * starts as {origin r, index j, mask 1 << r}; a reduction ORs the masks of
 * its inputs and fails if they overlap (a rank counted twice) or if the two
 * inputs are different elements; LOOM_STEP_FINAL marks a value finished and
 * fails on a value already finished, and a finished value may no longer be
 * reduced. Receive buffers start poisoned and count their writes. After a
 * run every element of every buffer is compared with what the collective
 * must leave there, written exactly once, and every untouched element must
 * still be poison. Messages carry their element count, which must equal the
 * count of the receiving step.
 *
 * A fan-in step takes one message from each of its receive peers and
 * reduces them all with its input; a fan-out step puts the same message in
 * each of its send peers' FIFOs; it runs only when every message is there
 * and every FIFO has a free slot.
 *
 * Single copies (the cma schedules): an OFFER puts a reference to the
 * sender's elements in the FIFO, not the elements; the PULL that takes it
 * reads them from the sender's buffer as it is at that moment (a PUSH
 * writes its input there, counted as a write of that buffer); a DRAIN
 * waits until its FIFO is empty; and a rank that finishes while a peer has
 * not yet pulled what it offered fails the run (its buffers would be reused
 * under the reader).
 *
 *   rank 0: steps[pc], send buf, recv buf       rank 1: steps[pc], ...
 *          │ SEND                                    ▲ RECV
 *          └──────> FIFO[0->1]: LOOM_STEPS slots ────┘    (one per ordered pair)
 *                   each message {count, symbols}
 */
#include <check.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comms.h"
#include "connect.h"
#include "exec.h"
#include "executor.h"
#include "schedule.h"

#define MAX_RANKS 128 /* the tree schedules run up to here */
#define RING_RANKS 64 /* the ring and direct schedules, whose runs cost n^2, up to here */
#define MAX_CHUNK 16  /* largest chunkElems any test uses */
#define ERR_LEN 512
/*
 * Past this many ranks runs get expensive, so the sweeps thin out: each case
 * runs in one of the two orders, and the per-rank-block collectives (which
 * cut each block in pieces of chunk whatever n is, at a cost of n^2 x count)
 * use counts that no longer grow with n. The suite stays within seconds.
 */
#define SMALL_RANKS 16

/* A set of ranks, one bit each. */
typedef unsigned __int128 rankSet;

/* One symbolic element. */
struct sym {
    rankSet mask;   /* ranks whose input this value contains */
    uint32_t idx;   /* index of the element in its origin's send buffer */
    uint8_t origin; /* rank whose send buffer it came from (0xff once reduced) */
    uint8_t valid;  /* 0: poison, never written */
    uint8_t final;  /* LOOM_STEP_FINAL was applied */
    uint8_t writes; /* buffer elements only: how many steps wrote it */
};

/* Steps that move elements without a slot (single copies). */
static int opSlotless(int op)
{
    return (loomStepUses((unsigned)op) & LOOM_USES_SLOTLESS) != 0;
}

static int opReduces(int op)
{
    return (loomStepUses((unsigned)op) & LOOM_USES_REDUCE) != 0;
}

/* Runs generator gen and appends its plan, expanded, to *out: the steps the simulator runs. */
static loomResult_t viaPlan(loomGenerator_t gen, const struct loomSchedArgs *a,
                            struct loomSchedule *out)
{
    struct loomPlan plan = {0};
    loomResult_t res = gen(a, &plan);
    if (res == loomSuccess)
        res = planExpand(&plan, out);
    planFree(&plan);
    return res;
}

/* ------------------------------------------------------------------------ */
/* Deterministic randomness (xorshift64*), so a failure reproduces.           */

static uint64_t rngNext(uint64_t *s)
{
    *s ^= *s >> 12;
    *s ^= *s << 25;
    *s ^= *s >> 27;
    return *s * 0x2545F4914F6CDD1DULL;
}

static size_t rngBelow(uint64_t *s, size_t n)
{
    return n ? (size_t)(rngNext(s) % n) : 0;
}

static void rngShuffle(uint64_t *s, int *v, int n)
{
    for (int i = n - 1; i > 0; i--) {
        int j = (int)rngBelow(s, (size_t)i + 1);
        int t = v[i];
        v[i] = v[j];
        v[j] = t;
    }
}

/* ------------------------------------------------------------------------ */
/* The simulator.                                                             */

struct simFifo {
    uint64_t head, tail;
    size_t count[LOOM_STEPS];
    /* An OFFER's message: the sender's buffer and offset (offer 1), not elements. */
    uint8_t offer[LOOM_STEPS], offerBuf[LOOM_STEPS];
    size_t offerOff[LOOM_STEPS];
    struct sym *slots; /* LOOM_STEPS x MAX_CHUNK, allocated on first use */
};

/*
 * FIFOs and buffers are kept from one run to the next: the tests make
 * thousands of runs, and fresh pages for each cost more than the runs.
 */
static struct simFifo fifoPool[MAX_RANKS * MAX_RANKS];
static struct loomSchedule schedPool[MAX_RANKS]; /* reset, never freed, between runs */
static struct sym *bufPool[MAX_RANKS][2];
static size_t bufPoolCap[MAX_RANKS][2];

/* Rank r's buffer b, len elements of poison (one extra so that len 0 is a real pointer). */
static struct sym *poolBuffer(int r, int b, size_t len)
{
    if (len + 1 > bufPoolCap[r][b]) {
        free(bufPool[r][b]);
        bufPool[r][b] = malloc((len + 1) * sizeof(struct sym));
        ck_assert(bufPool[r][b] != NULL);
        bufPoolCap[r][b] = len + 1;
    }
    memset(bufPool[r][b], 0, (len + 1) * sizeof(struct sym));
    return bufPool[r][b];
}

struct simRank {
    const struct loomStep *steps;
    size_t nsteps, pc;
    struct sym *buf[2]; /* LOOM_BUF_SEND, LOOM_BUF_RECV */
    size_t len[2];
};

struct sim {
    int n;
    size_t chunk;
    struct simRank *ranks;
    struct simFifo *fifos; /* [from * n + to] */
    struct sym *tmp;
    char *err;
    /* Recursive doubling, and single copies folding more than LOOM_STEP_MAXPEERS
     * peers, keep partial sums in recvbuff, so an element may be written more
     * than once; never again once it holds a finished value. */
    int multiWrite;
    /* Reduce by single copies: the other ranks' receive buffers are scratch (any writes), the
     * root is this rank; -1 otherwise. */
    int scratchRoot;
};

static int simFail(struct sim *s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int simFail(struct sim *s, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(s->err, ERR_LEN, fmt, ap);
    va_end(ap);
    return -1;
}

static void simInit(struct sim *s, int n, size_t chunk, struct simRank *ranks, char *err)
{
    s->n = n;
    s->chunk = chunk;
    s->ranks = ranks;
    s->fifos = fifoPool;
    size_t most = chunk; /* a PULL moves up to a whole buffer */
    for (int r = 0; r < n; r++)
        for (int b = 0; b < 2; b++)
            most = ranks[r].len[b] > most ? ranks[r].len[b] : most;
    s->tmp = calloc(most, sizeof(*s->tmp));
    s->err = err;
    s->multiWrite = 0;
    s->scratchRoot = -1;
    ck_assert(n <= MAX_RANKS && chunk <= MAX_CHUNK && s->tmp != NULL);
    for (int i = 0; i < n * n; i++)
        s->fifos[i].head = s->fifos[i].tail = 0;
}

static void simFree(struct sim *s)
{
    free(s->tmp);
}

/*
 * Whether a step's n peers fit its op: none without `use`, exactly one
 * without `many`, 1..LOOM_STEP_MAXPEERS with it; each a rank, none twice,
 * the unused entries -1.
 */
static int simPeersOk(const struct sim *s, unsigned uses, unsigned use, unsigned many, unsigned n,
                      const int32_t *peers)
{
    unsigned most = !(uses & use) ? 0 : (uses & many) ? LOOM_STEP_MAXPEERS : 1;
    if (n > most || ((uses & use) && n == 0))
        return 0;
    for (unsigned k = 0; k < LOOM_STEP_MAXPEERS; k++) {
        if (k >= n ? peers[k] != -1 : peers[k] < 0 || peers[k] >= s->n)
            return 0;
        for (unsigned j = 0; j < k && k < n; j++)
            if (peers[j] == peers[k])
                return 0;
    }
    return 1;
}

/* Checks the fields of step pc of rank r that do not depend on the run. */
static int simValidate(struct sim *s, int r, size_t pc, const struct loomStep *st)
{
    if (st->op >= LOOM_STEP_NUM_OPS)
        return simFail(s, "rank %d step %zu: bad op %u", r, pc, st->op);
    uint8_t uses = loomStepUses(st->op);
    /* OFFER and PULL move whole blocks; PULL_REDUCE stages a piece in a slot's worth. */
    int whole = opSlotless(st->op) && st->op != LOOM_STEP_PULL_REDUCE;
    int countOk = st->op == LOOM_STEP_DRAIN ? st->count == 0
                  : whole                   ? st->count >= 1
                                            : st->count >= 1 && st->count <= s->chunk;
    if (!countOk)
        return simFail(s, "rank %d step %zu (%s): count %zu outside 1..%zu", r, pc,
                       loomStepName(st->op), st->count, s->chunk);
    if ((st->flags & ~LOOM_STEP_FINAL) ||
        ((st->flags & LOOM_STEP_FINAL) && !opReduces(st->op) && st->op != LOOM_STEP_COPY))
        return simFail(s, "rank %d step %zu (%s): bad flags %#x", r, pc, loomStepName(st->op),
                       st->flags);
    if (st->srcBuf > LOOM_BUF_RECV || st->dstBuf > LOOM_BUF_RECV)
        return simFail(s, "rank %d step %zu: bad buffer", r, pc);
    if (!simPeersOk(s, uses, LOOM_USES_SEND, LOOM_USES_FANOUT, st->nsend, st->sendPeers) ||
        !simPeersOk(s, uses, LOOM_USES_RECV, LOOM_USES_FANIN, st->nrecv, st->recvPeers))
        return simFail(s,
                       "rank %d step %zu (%s): %u send peers (%d %d %d), %u receive peers "
                       "(%d %d %d)",
                       r, pc, loomStepName(st->op), st->nsend, st->sendPeers[0], st->sendPeers[1],
                       st->sendPeers[2], st->nrecv, st->recvPeers[0], st->recvPeers[1],
                       st->recvPeers[2]);
    return 0;
}

static int simReduce(struct sim *s, int r, const struct sym *a, const struct sym *b,
                     struct sym *out)
{
    size_t pc = s->ranks[r].pc;
    if (a->idx != b->idx)
        return simFail(s, "rank %d step %zu: reduces element %u with element %u", r, pc, a->idx,
                       b->idx);
    if (a->mask & b->mask)
        return simFail(s, "rank %d step %zu: element %u counts ranks %#llx:%016llx twice", r, pc,
                       a->idx, (unsigned long long)((a->mask & b->mask) >> 64),
                       (unsigned long long)(a->mask & b->mask));
    if (a->final || b->final)
        return simFail(s, "rank %d step %zu: element %u reduced after FINAL", r, pc, a->idx);
    *out = (struct sym){.mask = a->mask | b->mask, .idx = a->idx, .origin = 0xff, .valid = 1};
    return 0;
}

/* Computes the step's output values into s->tmp: src, then each of the nmsg messages folded in. */
static int simCompute(struct sim *s, int r, const struct loomStep *st,
                      const struct sym *const *msgs, int nmsg)
{
    struct simRank *rk = &s->ranks[r];
    const struct sym *src = NULL;
    if (loomStepUses(st->op) & LOOM_USES_SRC) {
        if (st->srcOff > rk->len[st->srcBuf] || st->count > rk->len[st->srcBuf] - st->srcOff)
            return simFail(s, "rank %d step %zu: reads [%zu,+%zu) of a %zu-element buffer", r,
                           rk->pc, st->srcOff, st->count, rk->len[st->srcBuf]);
        src = rk->buf[st->srcBuf] + st->srcOff;
    }
    if (st->op == LOOM_STEP_OFFER) /* a reference: its elements are read (or written) later */
        return 0;
    if (nmsg > 1 && !opReduces(st->op))
        return simFail(s, "rank %d step %zu (%s): %d messages and no reduction", r, rk->pc,
                       loomStepName(st->op), nmsg);
    for (size_t i = 0; i < st->count; i++) {
        int bad = src && !src[i].valid;
        for (int k = 0; k < nmsg; k++)
            bad |= !msgs[k][i].valid;
        if (bad)
            return simFail(s, "rank %d step %zu (%s): reads an unwritten element", r, rk->pc,
                           loomStepName(st->op));
        s->tmp[i] = src ? src[i] : msgs[0][i];
        for (int k = src ? 0 : 1; k < nmsg; k++)
            if (simReduce(s, r, &msgs[k][i], &s->tmp[i], &s->tmp[i]) < 0)
                return -1;
        if (st->flags & LOOM_STEP_FINAL) {
            if (s->tmp[i].final)
                return simFail(s, "rank %d step %zu: FINAL applied twice to element %u", r, rk->pc,
                               s->tmp[i].idx);
            s->tmp[i].final = 1;
        }
    }
    return 0;
}

/* Stores s->tmp in buffer b of rank `owner` at off (rank r's step: its own dst, or a PUSH). */
static int simStoreAt(struct sim *s, int r, int owner, int b, size_t off, size_t count)
{
    struct simRank *rk = &s->ranks[r], *to = &s->ranks[owner];
    if (off > to->len[b] || count > to->len[b] - off)
        return simFail(s, "rank %d step %zu: writes [%zu,+%zu) of rank %d's %zu-element buffer", r,
                       rk->pc, off, count, owner, to->len[b]);
    struct sym *dst = to->buf[b] + off;
    for (size_t i = 0; i < count; i++) {
        int scratch = s->scratchRoot >= 0 && owner != s->scratchRoot && b == LOOM_BUF_RECV;
        if (s->multiWrite && !scratch && dst[i].valid && dst[i].final)
            return simFail(s, "rank %d step %zu: overwrites finished element %zu of buffer %d", r,
                           rk->pc, off + i, b);
        uint8_t writes = dst[i].writes;
        dst[i] = s->tmp[i];
        dst[i].writes = (uint8_t)(writes < 255 ? writes + 1 : 255);
    }
    return 0;
}

static int simStore(struct sim *s, int r, const struct loomStep *st)
{
    return simStoreAt(s, r, r, st->dstBuf, st->dstOff, st->count);
}

static void simPush(struct sim *s, struct simFifo *f, size_t count)
{
    if (f->slots == NULL) {
        f->slots = calloc(LOOM_STEPS * MAX_CHUNK, sizeof(*f->slots));
        ck_assert(f->slots != NULL);
    }
    size_t slot = f->tail % LOOM_STEPS;
    memcpy(f->slots + slot * s->chunk, s->tmp, count * sizeof(*s->tmp));
    f->count[slot] = count;
    f->tail++;
}

/*
 * 1 after rank r ran a step; a failure if that was its last and a peer has
 * not yet pulled what it offered (the caller would reuse the buffer).
 */
static int simFinished(struct sim *s, int r)
{
    const struct simRank *rk = &s->ranks[r];
    if (rk->pc < rk->nsteps)
        return 1;
    for (int q = 0; q < s->n; q++) {
        const struct simFifo *f = &s->fifos[r * s->n + q];
        for (uint64_t m = f->head; m < f->tail; m++)
            if (f->offer[m % LOOM_STEPS])
                return simFail(s, "rank %d finished while rank %d had not pulled its offer", r, q);
    }
    return 1;
}

/* Runs rank r's next step: 1 if it ran, 0 if it must wait, -1 on a failure. */
static int simStep(struct sim *s, int r)
{
    struct simRank *rk = &s->ranks[r];
    const struct loomStep *st = &rk->steps[rk->pc];
    struct simFifo *in[LOOM_STEP_MAXPEERS], *out[LOOM_STEP_MAXPEERS];
    const struct sym *msgs[LOOM_STEP_MAXPEERS];
    for (int k = 0; k < st->nrecv; k++) {
        in[k] = &s->fifos[st->recvPeers[k] * s->n + r];
        if (in[k]->head == in[k]->tail)
            return 0;
    }
    for (int k = 0; k < st->nsend; k++) {
        out[k] = &s->fifos[r * s->n + st->sendPeers[k]];
        if (out[k]->tail - out[k]->head == LOOM_STEPS)
            return 0;
    }
    if (st->op == LOOM_STEP_DRAIN) {
        if (out[0]->head != out[0]->tail)
            return 0;
        rk->pc++;
        return simFinished(s, r);
    }
    for (int k = 0; k < st->nrecv; k++) {
        size_t slot = in[k]->head % LOOM_STEPS;
        int from = st->recvPeers[k];
        if (in[k]->count[slot] != st->count)
            return simFail(s,
                           "rank %d step %zu (%s): receives %zu elements from rank %d, "
                           "which sent %zu",
                           r, rk->pc, loomStepName(st->op), st->count, from, in[k]->count[slot]);
        if (in[k]->offer[slot] != loomStepTakesOffers(st->op))
            return simFail(s, "rank %d step %zu (%s): receives %s from rank %d", r, rk->pc,
                           loomStepName(st->op), in[k]->offer[slot] ? "an offer" : "elements",
                           from);
        msgs[k] = in[k]->slots + slot * s->chunk;
        if (in[k]->offer[slot]) { /* read (or, PUSH, write) the sender's buffer now */
            const struct simRank *sender = &s->ranks[from];
            size_t off = in[k]->offerOff[slot], b = in[k]->offerBuf[slot];
            if (off > sender->len[b] || st->count > sender->len[b] - off)
                return simFail(s, "rank %d step %zu: reaches past rank %d's buffer", r, rk->pc,
                               from);
            msgs[k] = sender->buf[b] + off;
        }
    }
    if (st->op == LOOM_STEP_PUSH) { /* src into the offered elements */
        size_t slot = in[0]->head % LOOM_STEPS;
        if (simCompute(s, r, st, NULL, 0) < 0 ||
            simStoreAt(s, r, st->recvPeers[0], in[0]->offerBuf[slot], in[0]->offerOff[slot],
                       st->count) < 0)
            return -1;
    } else if (simCompute(s, r, st, msgs, st->nrecv) < 0) {
        return -1;
    }
    if ((loomStepUses(st->op) & LOOM_USES_DST) && simStore(s, r, st) < 0)
        return -1;
    for (int k = 0; k < st->nrecv; k++)
        in[k]->head++;
    for (int k = 0; k < st->nsend; k++) {
        if (st->op == LOOM_STEP_OFFER) {
            size_t slot = out[k]->tail % LOOM_STEPS;
            out[k]->count[slot] = st->count;
            out[k]->offer[slot] = 1, out[k]->offerBuf[slot] = st->srcBuf;
            out[k]->offerOff[slot] = st->srcOff;
            out[k]->tail++;
        } else {
            out[k]->offer[out[k]->tail % LOOM_STEPS] = 0;
            simPush(s, out[k], st->count);
        }
    }
    rk->pc++;
    return simFinished(s, r);
}

static int simDeadlock(struct sim *s)
{
    char *p = s->err;
    size_t left = ERR_LEN;
    int k = snprintf(p, left, "deadlock:");
    for (int r = 0; r < s->n && k > 0 && (size_t)k < left; r++) {
        struct simRank *rk = &s->ranks[r];
        if (rk->pc == rk->nsteps)
            continue;
        p += k;
        left -= (size_t)k;
        const struct loomStep *st = &rk->steps[rk->pc];
        k = snprintf(p, left, " rank %d at step %zu/%zu (%s);", r, rk->pc, rk->nsteps,
                     loomStepName(st->op));
    }
    return -1;
}

/*
 * Runs all ranks to completion. randomOrder: each pass visits the ranks in a
 * fresh random order and lets each run 1..4 steps; otherwise one step each,
 * round-robin. Returns 0, or -1 with s->err set.
 */
static int simRun(struct sim *s, int randomOrder, uint64_t *rng)
{
    int order[MAX_RANKS];
    for (int r = 0; r < s->n; r++) {
        order[r] = r;
        for (size_t pc = 0; pc < s->ranks[r].nsteps; pc++)
            if (simValidate(s, r, pc, &s->ranks[r].steps[pc]) < 0)
                return -1;
    }
    for (;;) {
        int progress = 0, unfinished = 0;
        if (randomOrder)
            rngShuffle(rng, order, s->n);
        for (int i = 0; i < s->n; i++) {
            struct simRank *rk = &s->ranks[order[i]];
            int burst = randomOrder ? 1 + (int)rngBelow(rng, 4) : 1;
            for (int b = 0; b < burst && rk->pc < rk->nsteps; b++) {
                int rc = simStep(s, order[i]);
                if (rc < 0)
                    return -1;
                if (rc == 0)
                    break;
                progress = 1;
            }
            unfinished |= rk->pc < rk->nsteps;
        }
        if (!unfinished)
            break;
        if (!progress)
            return simDeadlock(s);
    }
    for (int i = 0; i < s->n * s->n; i++)
        if (s->fifos[i].head != s->fifos[i].tail)
            return simFail(s, "FIFO %d->%d holds %llu messages at the end", i / s->n, i % s->n,
                           (unsigned long long)(s->fifos[i].tail - s->fifos[i].head));
    return 0;
}

/* ------------------------------------------------------------------------ */
/* Collectives: buffers, generators and the exact expected result.           */

struct coll {
    loomColl_t coll;
    int n;
    int root; /* Broadcast/Reduce root; Send/Recv: the sender */
    int peer; /* Send/Recv: the receiver */
    const int *ring;
    size_t count;
    size_t chunk;
    /* AlltoAllv, per rank r at [r * n]: counts and displacements by peer */
    const size_t *sc, *sd, *rc, *rd;
    const size_t *vlen; /* AlltoAllv: [2 * r + LOOM_BUF_*] buffer lengths */
    int tree;           /* 1: the double binary tree instead of the ring */
    int doubling;       /* 1: recursive doubling (AllReduce) instead of the ring */
    int cma;            /* 1: single copies (algorithms/single.c) */
    int trees;          /* tree: 1 to send everything through the first tree */
    const int *hosts;   /* tree: host of each rank, NULL for one host */
    const int *order;   /* tree: chain and position order of the ranks, NULL for rank order */
};

static void collLens(const struct coll *c, int r, size_t len[2])
{
    size_t n = (size_t)c->n, k = c->count;
    switch (c->coll) {
    case LOOM_COLL_ALLGATHER:
        len[0] = k, len[1] = n * k;
        break;
    case LOOM_COLL_REDUCESCATTER:
        len[0] = n * k, len[1] = k;
        break;
    case LOOM_COLL_ALLTOALL:
        len[0] = n * k, len[1] = n * k;
        break;
    case LOOM_COLL_ALLTOALLV:
        len[0] = c->vlen[2 * r], len[1] = c->vlen[2 * r + 1];
        break;
    default:
        len[0] = k, len[1] = k;
    }
}

static int collIsReduction(loomColl_t coll)
{
    return coll == LOOM_COLL_ALLREDUCE || coll == LOOM_COLL_REDUCE ||
           coll == LOOM_COLL_REDUCESCATTER;
}

/* The tree or recursive doubling when asked for, else the ring, or direct where there is no ring.
 */
static loomAlgo_t collAlgo(const struct coll *c)
{
    if (c->tree)
        return LOOM_ALGO_TREE;
    if (c->doubling)
        return LOOM_ALGO_DOUBLING;
    if (c->cma)
        return LOOM_ALGO_CMA;
    return scheduleGenerator(c->coll, LOOM_ALGO_RING) ? LOOM_ALGO_RING : LOOM_ALGO_DIRECT;
}

/* The plan of rank a->rank for c (a holds the rank, the lane range and the chunk). */
static loomResult_t collPlan(const struct coll *c, struct loomSchedArgs *a, struct loomPlan *out)
{
    a->hosts = c->hosts;
    a->order = c->order;
    a->trees = c->trees;
    switch (c->coll) {
    case LOOM_COLL_ALLTOALLV:
        a->sendcounts = c->sc + a->rank * c->n;
        a->sdispls = c->sd + a->rank * c->n;
        a->recvcounts = c->rc + a->rank * c->n;
        a->rdispls = c->rd + a->rank * c->n;
        return directAlltoAllvPlan(a, out);
    case LOOM_COLL_SEND: /* a sender and a receiver; the other ranks have nothing to do */
        a->coll = a->rank == c->root ? LOOM_COLL_SEND : LOOM_COLL_RECV;
        a->root = a->rank == c->root ? c->peer : c->root;
        if (a->rank == c->root)
            return directSendPlan(a, out);
        return a->rank == c->peer ? directRecvPlan(a, out) : loomSuccess;
    default: {
        loomGenerator_t gen = scheduleGenerator(c->coll, collAlgo(c));
        return gen ? gen(a, out) : loomInternalError;
    }
    }
}

/* The same plan, expanded: the steps the simulator runs. */
static loomResult_t collSchedule(const struct coll *c, struct loomSchedArgs *a,
                                 struct loomSchedule *out)
{
    struct loomPlan plan = {0};
    loomResult_t res = collPlan(c, a, &plan);
    if (res == loomSuccess)
        res = planExpand(&plan, out);
    planFree(&plan);
    return res;
}

static rankSet allRanks(int n)
{
    return n == 128 ? ~(rankSet)0 : ((rankSet)1 << n) - 1;
}

static struct sym copyOf(int origin, size_t idx)
{
    return (struct sym){
        .mask = (rankSet)1 << origin, .idx = (uint32_t)idx, .origin = (uint8_t)origin, .valid = 1};
}

static struct sym reducedAt(int n, size_t idx)
{
    return (struct sym){
        .mask = allRanks(n), .idx = (uint32_t)idx, .origin = 0xff, .valid = 1, .final = 1};
}

/* The AlltoAllv element rank r's receive element i must hold; 0 if it must stay poison. */
static int collExpectV(const struct coll *c, int r, size_t i, struct sym *e)
{
    for (int q = 0; q < c->n; q++) {
        size_t off = c->rd[r * c->n + q], len = c->rc[r * c->n + q];
        if (i >= off && i < off + len) {
            *e = copyOf(q, c->sd[q * c->n + r] + (i - off));
            return 1;
        }
    }
    return 0;
}

/*
 * What rank r's receive element i holds once elements [0, cov) of each
 * per-rank block (of the buffer for whole-buffer collectives) are done:
 * returns 1 and fills *e, 0 when the element must still be poison, or 2
 * when it is scratch whose content does not matter.
 * Element i is element j of per-rank block q (i == q * count + j).
 */
static int collExpect(const struct coll *c, int r, size_t i, size_t q, size_t j, size_t cov,
                      struct sym *e)
{
    size_t k = c->count;
    switch (c->coll) {
    case LOOM_COLL_ALLREDUCE:
        *e = reducedAt(c->n, i);
        return i < cov;
    case LOOM_COLL_REDUCE:
        *e = reducedAt(c->n, i);
        if (c->cma && r != c->root)
            return 2; /* single copies: scratch the core passes as recvbuff there */
        return r == c->root && i < cov; /* off the root recvbuff is never touched */
    case LOOM_COLL_REDUCESCATTER:
        *e = reducedAt(c->n, (size_t)r * k + i);
        return i < cov;
    case LOOM_COLL_BROADCAST:
        *e = copyOf(c->root, i);
        return i < cov;
    case LOOM_COLL_ALLGATHER:
        *e = copyOf((int)q, j);
        return j < cov;
    case LOOM_COLL_ALLTOALL:
        *e = copyOf((int)q, (size_t)r * k + j);
        return j < cov;
    case LOOM_COLL_ALLTOALLV:
        return collExpectV(c, r, i, e);
    default:
        *e = copyOf(c->root, i);
        return r == c->peer && i < cov;
    }
}

static int symEqual(const struct sym *a, const struct sym *b, int reduced)
{
    return a->valid == b->valid && a->mask == b->mask && a->idx == b->idx && a->final == b->final &&
           (reduced || a->origin == b->origin);
}

static int collCheck(const struct coll *c, struct simRank *ranks, size_t cov, char *err)
{
    int reduced = collIsReduction(c->coll);
    for (int r = 0; r < c->n; r++) {
        struct simRank *rk = &ranks[r];
        for (size_t j = 0; j < rk->len[0]; j++) {
            struct sym e = copyOf(r, j);
            if (!symEqual(&rk->buf[0][j], &e, 0) || rk->buf[0][j].writes != 0) {
                snprintf(err, ERR_LEN, "rank %d: send element %zu was modified", r, j);
                return -1;
            }
        }
        for (size_t i = 0; i < rk->len[1]; i++) {
            size_t q = c->count ? i / c->count : 0, j = c->count ? i % c->count : i;
            const struct sym *v = &rk->buf[1][i];
            struct sym e;
            int want = collExpect(c, r, i, q, j, cov, &e);
            if (want == 2)
                continue;
            if (!want) {
                if (v->writes != 0) {
                    snprintf(err, ERR_LEN,
                             "rank %d: recv element %zu written outside the "
                             "collective's range",
                             r, i);
                    return -1;
                }
                continue;
            }
            /* Trees fold every child in one step: only doubling and single copies rewrite
             * partial sums. */
            int writesOk = v->writes == 1 || ((c->doubling || c->cma) && reduced && v->writes > 1);
            if (!writesOk || !symEqual(v, &e, reduced)) {
                snprintf(
                    err, ERR_LEN,
                    "rank %d: recv element %zu is {origin %d idx %u mask %#llx:%016llx final %d "
                    "written %d times}, want {origin %d idx %u mask %#llx:%016llx final %d}",
                    r, i, v->valid ? v->origin : -1, v->idx, (unsigned long long)(v->mask >> 64),
                    (unsigned long long)v->mask, v->final, v->writes, e.origin, e.idx,
                    (unsigned long long)(e.mask >> 64), (unsigned long long)e.mask, e.final);
                return -1;
            }
        }
    }
    return 0;
}

static void collAllocBuffers(const struct coll *c, struct simRank *ranks)
{
    for (int r = 0; r < c->n; r++) {
        collLens(c, r, ranks[r].len);
        for (int b = 0; b < 2; b++)
            ranks[r].buf[b] = poolBuffer(r, b, ranks[r].len[b]);
        for (size_t j = 0; j < ranks[r].len[0]; j++)
            ranks[r].buf[0][j] = copyOf(r, j);
    }
}

/* Builds one lane's schedule for every rank, runs them together and checks the buffers. */
static int collRunLane(const struct coll *c, struct simRank *ranks, struct loomSchedule *scheds,
                       size_t lo, size_t hi, int randomOrder, uint64_t *rng, char *err)
{
    for (int r = 0; r < c->n; r++) {
        struct loomSchedArgs a = {.coll = c->coll,
                                  .nranks = c->n,
                                  .rank = r,
                                  .ring = c->ring,
                                  .root = c->root,
                                  .count = c->count,
                                  .lo = lo,
                                  .hi = hi,
                                  .chunkElems = c->chunk};
        scheduleReset(&scheds[r]);
        loomResult_t res = collSchedule(c, &a, &scheds[r]);
        if (res != loomSuccess) {
            snprintf(err, ERR_LEN, "rank %d: generator failed with %d", r, res);
            return -1;
        }
        ranks[r].steps = scheds[r].steps;
        ranks[r].nsteps = scheds[r].nsteps;
        ranks[r].pc = 0;
    }
    struct sim s;
    simInit(&s, c->n, c->chunk, ranks, err);
    s.multiWrite = (c->doubling || c->cma) && collIsReduction(c->coll);
    s.scratchRoot = c->cma && c->coll == LOOM_COLL_REDUCE ? c->root : -1;
    int rc = simRun(&s, randomOrder, rng);
    simFree(&s);
    return rc < 0 ? -1 : collCheck(c, ranks, hi, err);
}

/*
 * Runs the collective split into lanes [cuts[l], cuts[l+1]) for l < nlanes
 * (cuts[0] == 0, cuts[nlanes] == count), one simulation per lane on the same
 * buffers, and checks the buffers after each lane.
 */
static int collRunLanes(const struct coll *c, int nlanes, const size_t *cuts, int randomOrder,
                        uint64_t seed, char *err)
{
    struct simRank ranks[MAX_RANKS] = {{0}};
    uint64_t rng = seed | 1;
    int rc = 0;
    collAllocBuffers(c, ranks);
    for (int l = 0; l < nlanes && rc == 0; l++)
        rc = collRunLane(c, ranks, schedPool, cuts[l], cuts[l + 1], randomOrder, &rng, err);
    return rc;
}

static int collRun(const struct coll *c, int randomOrder, uint64_t seed, char *err)
{
    size_t cuts[2] = {0, c->count};
    return collRunLanes(c, 1, cuts, randomOrder, seed, err);
}

/*
 * Runs c round-robin and in random order and fails the test with the case
 * spelled out. Past SMALL_RANKS ranks only one order runs, alternating with
 * the case number, so every collective still meets both at every size.
 */
static void collExpectOk(const struct coll *c, const char *ring, unsigned caseNo)
{
    char err[ERR_LEN];
    for (int randomOrder = 0; randomOrder < 2; randomOrder++) {
        if (c->n > SMALL_RANKS && randomOrder != (int)(caseNo & 1))
            continue;
        uint64_t seed =
            0x9e3779b97f4a7c15ULL ^ ((uint64_t)c->n << 32) ^ (c->count << 8) ^ (uint64_t)c->root;
        int rc = collRun(c, randomOrder, seed, err);
        const char *algo = c->tree ? "tree" : c->doubling ? "doubling" : c->cma ? "cma" : "ring";
        ck_assert_msg(rc == 0, "coll %d %s n %d root %d count %zu chunk %zu order %s %s: %s",
                      c->coll, algo, c->n, c->root, c->count, c->chunk, ring,
                      randomOrder ? "random" : "round-robin", err);
    }
}

static const size_t chunks[] = {1, 3, 16};

static int perBlock(loomColl_t coll, int n)
{
    return n > SMALL_RANKS && (coll == LOOM_COLL_ALLGATHER || coll == LOOM_COLL_REDUCESCATTER ||
                               coll == LOOM_COLL_ALLTOALL);
}

/*
 * A count past the interesting boundaries: for AllReduce (and the other
 * whole-buffer collectives) two full loops of n x chunk and a ragged tail;
 * for the large per-block runs, more pieces than FIFO slots and a ragged tail.
 */
static size_t bigCount(loomColl_t coll, int n, size_t chunk)
{
    return perBlock(coll, n) ? (LOOM_STEPS + 1) * chunk + 1 : 2 * (size_t)n * chunk + 6;
}

/* A count of a few pieces with a ragged end: 3n + 1, or chunk + 1 for the large per-block runs. */
static size_t midCount(loomColl_t coll, int n, size_t chunk)
{
    return perBlock(coll, n) ? chunk + 1 : 3 * (size_t)n + 1;
}

/*
 * A tree cuts each half of the buffer in pieces of chunk: this count gives
 * each tree more pieces than a FIFO has slots, twice over, and a ragged end.
 */
static size_t treeCount(size_t chunk)
{
    return 2 * (2 * LOOM_STEPS + 3) * chunk + 5;
}

/*
 * Every n in 1..64 (1..128 for the tree), every chunk size, the interesting
 * counts, the given roots.
 */
/* algo: 0 the ring (or direct), 1 the tree, 2 recursive doubling, 3 single copies. */
static void sweep(loomColl_t coll, int allRoots, int algo)
{
    unsigned caseNo = 0;
    uint64_t rng = 0x5eeded + (uint64_t)coll;
    int tree = algo == 1, doubling = algo == 2, cma = algo == 3;
    for (int n = 1; n <= (tree || doubling ? MAX_RANKS : RING_RANKS); n++) {
        for (size_t ci = 0; ci < sizeof(chunks) / sizeof(chunks[0]); ci++) {
            size_t ch = chunks[ci], nn = (size_t)n;
            size_t counts[] = {0, 1, perBlock(coll, n) ? ch : nn - 1, midCount(coll, n, ch),
                               tree ? treeCount(ch) : bigCount(coll, n, ch)};
            int roots[] = {0, n - 1, (int)rngBelow(&rng, (size_t)n), n / 2};
            int nroots = !allRoots ? 1 : n <= 8 ? n : 4;
            if ((tree || doubling) && n > SMALL_RANKS) {
                /* A tree's pieces depend on count and chunk, not on n: keep the runs short. */
                counts[2] = 2 * ch + 1, counts[3] = 0;
                nroots = allRoots ? 3 : 1;
            }
            for (size_t k = 0; k < sizeof(counts) / sizeof(counts[0]); k++) {
                if (k == 3 && (tree || doubling) && n > SMALL_RANKS)
                    continue;
                for (int ri = 0; ri < nroots; ri++) {
                    struct coll c = {.coll = coll,
                                     .n = n,
                                     .count = counts[k],
                                     .chunk = ch,
                                     .root = n <= 8 ? ri : roots[ri],
                                     .tree = tree,
                                     .doubling = doubling,
                                     .cma = cma,
                                     .trees = tree && caseNo % 3 == 1 ? 1 : 2};
                    collExpectOk(&c, "identity", caseNo++);
                }
            }
        }
    }
}

/* ------------------------------------------------------------------------ */
/* The step array.                                                            */

START_TEST(test_array_grows_and_keeps_order)
{
    struct loomSchedule s = {0};
    for (size_t i = 0; i < 1000; i++) {
        struct loomStep st = {.op = LOOM_STEP_COPY, .count = i + 1};
        ck_assert_int_eq(scheduleAppend(&s, &st), loomSuccess);
    }
    ck_assert_uint_eq(s.nsteps, 1000);
    ck_assert_uint_ge(s.cap, 1000);
    for (size_t i = 0; i < 1000; i++)
        ck_assert_uint_eq(s.steps[i].count, i + 1);
    size_t cap = s.cap;
    struct loomStep *steps = s.steps;
    scheduleReset(&s);
    ck_assert_uint_eq(s.nsteps, 0);
    ck_assert_uint_eq(s.cap, cap);
    struct loomStep st = {.op = LOOM_STEP_SEND, .count = 7};
    ck_assert_int_eq(scheduleAppend(&s, &st), loomSuccess);
    ck_assert_ptr_eq(s.steps, steps);
    ck_assert_uint_eq(s.steps[0].count, 7);
    scheduleFree(&s);
    ck_assert_ptr_null(s.steps);
    ck_assert_uint_eq(s.nsteps, 0);
    ck_assert_uint_eq(s.cap, 0);
    scheduleFree(&s);
}
END_TEST

/* ------------------------------------------------------------------------ */
/* The shape of the schedules.                                                */

START_TEST(test_allreduce_shape)
{
    /* n = 4, one loop of 4 full blocks: docs/design.md's sequence, exactly. */
    static const int ops[] = {LOOM_STEP_SEND,
                              LOOM_STEP_RECV_REDUCE_SEND,
                              LOOM_STEP_RECV_REDUCE_SEND,
                              LOOM_STEP_RECV_REDUCE_COPY_SEND,
                              LOOM_STEP_RECV_COPY_SEND,
                              LOOM_STEP_RECV_COPY_SEND,
                              LOOM_STEP_RECV};
    static const size_t blocks[] = {1, 0, 3, 2, 1, 0, 3}; /* rank 1: blk(1), blk(0), ... */
    struct loomSchedule s = {0};
    struct loomSchedArgs a = {.coll = LOOM_COLL_ALLREDUCE,
                              .nranks = 4,
                              .rank = 1,
                              .count = 40,
                              .lo = 0,
                              .hi = 40,
                              .chunkElems = 10};
    ck_assert_int_eq(viaPlan(ringAllReducePlan, &a, &s), loomSuccess);
    ck_assert_uint_eq(s.nsteps, 7);
    for (size_t i = 0; i < 7; i++) {
        const struct loomStep *st = &s.steps[i];
        ck_assert_int_eq(st->op, ops[i]);
        ck_assert_uint_eq(st->count, 10);
        ck_assert_int_eq(st->flags,
                         ops[i] == LOOM_STEP_RECV_REDUCE_COPY_SEND ? LOOM_STEP_FINAL : 0);
        ck_assert_int_eq(st->nsend, (loomStepUses(st->op) & LOOM_USES_SEND) ? 1 : 0);
        ck_assert_int_eq(st->nrecv, (loomStepUses(st->op) & LOOM_USES_RECV) ? 1 : 0);
        ck_assert_int_eq(st->sendPeers[0], st->nsend ? 2 : -1);
        ck_assert_int_eq(st->recvPeers[0], st->nrecv ? 0 : -1);
        size_t off = (loomStepUses(st->op) & LOOM_USES_SRC) ? st->srcOff : st->dstOff;
        ck_assert_uint_eq(off, blocks[i] * 10);
    }
    scheduleFree(&s);
}
END_TEST

/* Steps plan p expands to, counted without storing them. */
static size_t planCountSteps(const struct loomPlan *p)
{
    struct loomPlanIter it = {0, 0};
    struct loomStep st;
    size_t n = 0;
    while (loomPlanNext(p->steps, p->nsteps, &it, &st))
        n++;
    return n;
}

/*
 * A plan's size does not grow with the count: the same templates for 1 MiB
 * and 1 GiB of floats at 8 ranks, with 128 KiB pieces, and the 1 GiB plan
 * still expands to every step (a ring AllReduce: 2n - 1 per loop of n pieces).
 */
START_TEST(test_plan_size_fixed)
{
    loomGenerator_t gens[] = {ringAllReducePlan,     treeAllReducePlan, doublingAllReducePlan,
                              ringAllGatherPlan,     ringBroadcastPlan, ringReducePlan,
                              ringReduceScatterPlan, treeBroadcastPlan, directAlltoAllPlan};
    size_t counts[] = {(size_t)1 << 18, (size_t)1 << 28}, chunk = 32768;
    for (size_t g = 0; g < sizeof(gens) / sizeof(gens[0]); g++) {
        uint32_t sizes[2];
        for (int k = 0; k < 2; k++) {
            struct loomPlan p = {0};
            struct loomSchedArgs a = {.nranks = 8,
                                      .rank = 3,
                                      .root = 5,
                                      .count = counts[k],
                                      .lo = 0,
                                      .hi = counts[k],
                                      .chunkElems = chunk};
            ck_assert_int_eq(gens[g](&a, &p), loomSuccess);
            sizes[k] = p.nsteps;
            if (g == 0 && k == 1)
                ck_assert_uint_eq(planCountSteps(&p), (counts[1] / (8 * chunk)) * 15);
            planFree(&p);
        }
        ck_assert_msg(sizes[0] == sizes[1] && sizes[0] <= 64,
                      "generator %zu: %u templates for 1 MiB, %u for 1 GiB", g, sizes[0], sizes[1]);
    }
}
END_TEST

START_TEST(test_empty_ranges_emit_nothing)
{
    loomGenerator_t gens[] = {ringBroadcastPlan, ringReducePlan,        ringAllReducePlan,
                              ringAllGatherPlan, ringReduceScatterPlan, directAlltoAllPlan,
                              directSendPlan,    directRecvPlan};
    struct loomSchedule s = {0};
    for (size_t g = 0; g < sizeof(gens) / sizeof(gens[0]); g++) {
        for (int n = 1; n <= 5; n++) {
            struct loomSchedArgs a = {.nranks = n,
                                      .rank = n - 1,
                                      .root = 0,
                                      .count = 9,
                                      .lo = 4,
                                      .hi = 4,
                                      .chunkElems = 2};
            ck_assert_int_eq(viaPlan(gens[g], &a, &s), loomSuccess);
            a.count = a.lo = a.hi = 0;
            ck_assert_int_eq(viaPlan(gens[g], &a, &s), loomSuccess);
            ck_assert_msg(s.nsteps == 0, "generator %zu n %d emitted %zu steps", g, n, s.nsteps);
        }
    }
    /* AlltoAllv with every count 0 (displacements arbitrary). */
    size_t zeros[5] = {0}, displs[5] = {3, 1, 4, 1, 5};
    for (int n = 1; n <= 5; n++) {
        struct loomSchedArgs a = {.nranks = n,
                                  .rank = n / 2,
                                  .chunkElems = 2,
                                  .sendcounts = zeros,
                                  .sdispls = displs,
                                  .recvcounts = zeros,
                                  .rdispls = displs};
        ck_assert_int_eq(viaPlan(directAlltoAllvPlan, &a, &s), loomSuccess);
        ck_assert_uint_eq(s.nsteps, 0);
    }
    scheduleFree(&s);
}
END_TEST

START_TEST(test_inconsistent_args_refused)
{
    /* A core bug, not a user error: refused rather than turned into a hang or an endless loop. */
    int ring[3] = {0, 2, 2}; /* rank 1 is missing */
    struct loomSchedule s = {0};
    struct loomSchedArgs a = {.nranks = 3,
                              .rank = 1,
                              .ring = ring,
                              .root = 0,
                              .count = 8,
                              .lo = 0,
                              .hi = 8,
                              .chunkElems = 4};
    ck_assert_int_eq(viaPlan(ringAllReducePlan, &a, &s), loomInternalError);
    a.rank = 2, a.root = 1; /* the root is missing */
    ck_assert_int_eq(viaPlan(ringBroadcastPlan, &a, &s), loomInternalError);
    ck_assert_int_eq(viaPlan(ringReducePlan, &a, &s), loomInternalError);
    a.ring = NULL, a.chunkElems = 0;
    ck_assert_int_eq(viaPlan(ringAllGatherPlan, &a, &s), loomInternalError);
    ck_assert_int_eq(viaPlan(directAlltoAllPlan, &a, &s), loomInternalError);
    ck_assert_int_eq(viaPlan(directSendPlan, &a, &s), loomInternalError);
    ck_assert_uint_eq(s.nsteps, 0);
    scheduleFree(&s);
}
END_TEST

START_TEST(test_generators_append)
{
    /* Generators append: two lanes built into one array keep both. */
    struct loomSchedule s = {0};
    struct loomSchedArgs a = {
        .nranks = 3, .rank = 0, .root = 1, .count = 12, .lo = 0, .hi = 6, .chunkElems = 4};
    ck_assert_int_eq(viaPlan(ringBroadcastPlan, &a, &s), loomSuccess);
    size_t first = s.nsteps;
    ck_assert_uint_gt(first, 0);
    a.lo = 6, a.hi = 12;
    ck_assert_int_eq(viaPlan(ringBroadcastPlan, &a, &s), loomSuccess);
    ck_assert_uint_eq(s.nsteps, 2 * first);
    ck_assert_uint_eq(s.steps[first].dstOff, 6);
    scheduleFree(&s);
}
END_TEST

/* ------------------------------------------------------------------------ */
/* The simulator catches what it claims to catch.                            */

static int runHandmade(int n, struct loomStep *const *steps, const size_t *nsteps, size_t bufLen,
                       char *err)
{
    struct simRank ranks[4] = {{0}};
    uint64_t rng = 1;
    for (int r = 0; r < n; r++) {
        ranks[r].steps = steps[r];
        ranks[r].nsteps = nsteps[r];
        for (int b = 0; b < 2; b++) {
            ranks[r].len[b] = bufLen;
            ranks[r].buf[b] = calloc(bufLen, sizeof(struct sym));
        }
        for (size_t j = 0; j < bufLen; j++)
            ranks[r].buf[0][j] = copyOf(r, j);
    }
    struct sim s;
    simInit(&s, n, 4, ranks, err);
    int rc = simRun(&s, 0, &rng);
    simFree(&s);
    for (int r = 0; r < n; r++) {
        free(ranks[r].buf[0]);
        free(ranks[r].buf[1]);
    }
    return rc;
}

#define STEP(o, sp, rp, so, do_, cnt)                                                              \
    {                                                                                              \
        .op = (o), .srcBuf = LOOM_BUF_SEND, .dstBuf = LOOM_BUF_RECV, .nsend = (sp) >= 0,           \
        .nrecv = (rp) >= 0, .sendPeers = {(sp), -1, -1}, .recvPeers = {(rp), -1, -1},              \
        .srcOff = (so), .dstOff = (do_), .count = (cnt)                                            \
    }

START_TEST(test_sim_detects_deadlock)
{
    struct loomStep a[] = {STEP(LOOM_STEP_RECV, -1, 1, 0, 0, 4),
                           STEP(LOOM_STEP_SEND, 1, -1, 0, 0, 4)};
    struct loomStep b[] = {STEP(LOOM_STEP_RECV, -1, 0, 0, 0, 4),
                           STEP(LOOM_STEP_SEND, 0, -1, 0, 0, 4)};
    struct loomStep *steps[] = {a, b};
    size_t nsteps[] = {2, 2};
    char err[ERR_LEN] = "";
    ck_assert_int_eq(runHandmade(2, steps, nsteps, 8, err), -1);
    ck_assert_msg(strstr(err, "deadlock") != NULL, "%s", err);

    /* More than LOOM_STEPS sends before the peer's first receive also deadlock. */
    struct loomStep c[2 * LOOM_STEPS + 2], d[2 * LOOM_STEPS + 2];
    for (int i = 0; i <= LOOM_STEPS; i++) {
        c[i] = (struct loomStep)STEP(LOOM_STEP_SEND, 1, -1, 0, 0, 1);
        d[i] = (struct loomStep)STEP(LOOM_STEP_SEND, 0, -1, 0, 0, 1);
        c[LOOM_STEPS + 1 + i] = (struct loomStep)STEP(LOOM_STEP_RECV, -1, 1, 0, 0, 1);
        d[LOOM_STEPS + 1 + i] = (struct loomStep)STEP(LOOM_STEP_RECV, -1, 0, 0, 0, 1);
    }
    struct loomStep *steps2[] = {c, d};
    size_t nsteps2[] = {2 * LOOM_STEPS + 2, 2 * LOOM_STEPS + 2};
    ck_assert_int_eq(runHandmade(2, steps2, nsteps2, 8, err), -1);
    ck_assert_msg(strstr(err, "deadlock") != NULL, "%s", err);
    nsteps2[0] = nsteps2[1] = 2 * LOOM_STEPS; /* LOOM_STEPS sends each: fits */
    for (int i = 0; i < LOOM_STEPS; i++) {
        c[LOOM_STEPS + i] = c[LOOM_STEPS + 1 + i];
        d[LOOM_STEPS + i] = d[LOOM_STEPS + 1 + i];
    }
    ck_assert_msg(runHandmade(2, steps2, nsteps2, 8, err) == 0, "%s", err);
}
END_TEST

START_TEST(test_sim_detects_size_mismatch)
{
    struct loomStep a[] = {STEP(LOOM_STEP_SEND, 1, -1, 0, 0, 3)};
    struct loomStep b[] = {STEP(LOOM_STEP_RECV, -1, 0, 0, 0, 4)};
    struct loomStep *steps[] = {a, b};
    size_t nsteps[] = {1, 1};
    char err[ERR_LEN] = "";
    ck_assert_int_eq(runHandmade(2, steps, nsteps, 8, err), -1);
    ck_assert_msg(strstr(err, "sent 3") != NULL, "%s", err);
}
END_TEST

START_TEST(test_sim_detects_offer_misuse)
{
    /* Rank 0 offers and ends without a DRAIN: its buffer would be reused before rank 1 reads it. */
    struct loomStep a[] = {STEP(LOOM_STEP_OFFER, 1, -1, 2, 0, 6)};
    struct loomStep b[] = {STEP(LOOM_STEP_COPY, -1, -1, 0, 0, 1),
                           STEP(LOOM_STEP_PULL, -1, 0, 0, 2, 6)};
    struct loomStep *steps[] = {a, b};
    size_t nsteps[] = {1, 2};
    char err[ERR_LEN] = "";
    ck_assert_int_eq(runHandmade(2, steps, nsteps, 8, err), -1);
    ck_assert_msg(strstr(err, "had not pulled") != NULL, "%s", err);

    /* With the DRAIN it runs, and the pull reads rank 0's elements 2..7. */
    struct loomStep c[] = {STEP(LOOM_STEP_OFFER, 1, -1, 2, 0, 6),
                           STEP(LOOM_STEP_DRAIN, 1, -1, 0, 0, 0)};
    steps[0] = c, nsteps[0] = 2;
    ck_assert_int_eq(runHandmade(2, steps, nsteps, 8, err), 0);

    /* An offer where elements are expected, and elements where an offer is. */
    struct loomStep c4[] = {STEP(LOOM_STEP_OFFER, 1, -1, 2, 0, 4),
                            STEP(LOOM_STEP_DRAIN, 1, -1, 0, 0, 0)};
    struct loomStep d[] = {STEP(LOOM_STEP_RECV, -1, 0, 0, 0, 4)};
    steps[0] = c4, steps[1] = d, nsteps[1] = 1;
    ck_assert_int_eq(runHandmade(2, steps, nsteps, 8, err), -1);
    ck_assert_msg(strstr(err, "receives an offer") != NULL, "%s", err);
    struct loomStep e[] = {STEP(LOOM_STEP_SEND, 1, -1, 0, 0, 4)};
    struct loomStep f[] = {STEP(LOOM_STEP_PULL, -1, 0, 0, 0, 4)};
    steps[0] = e, steps[1] = f, nsteps[0] = nsteps[1] = 1;
    ck_assert_int_eq(runHandmade(2, steps, nsteps, 8, err), -1);
    ck_assert_msg(strstr(err, "receives elements") != NULL, "%s", err);
}
END_TEST

START_TEST(test_sim_detects_double_counting)
{
    /* 0 -> 1 -> 0: rank 0's input comes back and is added to itself. */
    struct loomStep a[] = {STEP(LOOM_STEP_SEND, 1, -1, 0, 0, 2),
                           STEP(LOOM_STEP_RECV_REDUCE_COPY, -1, 1, 0, 0, 2)};
    struct loomStep b[] = {STEP(LOOM_STEP_RECV_REDUCE_SEND, 0, 0, 0, 0, 2)};
    struct loomStep *steps[] = {a, b};
    size_t nsteps[] = {2, 1};
    char err[ERR_LEN] = "";
    ck_assert_int_eq(runHandmade(2, steps, nsteps, 8, err), -1);
    ck_assert_msg(strstr(err, "twice") != NULL, "%s", err);
}
END_TEST

START_TEST(test_sim_detects_misaligned_reduce)
{
    struct loomStep a[] = {STEP(LOOM_STEP_SEND, 1, -1, 0, 0, 2)};
    struct loomStep b[] = {STEP(LOOM_STEP_RECV_REDUCE_COPY, -1, 0, 1, 0, 2)};
    struct loomStep *steps[] = {a, b};
    size_t nsteps[] = {1, 1};
    char err[ERR_LEN] = "";
    ck_assert_int_eq(runHandmade(2, steps, nsteps, 8, err), -1);
    ck_assert_msg(strstr(err, "with element") != NULL, "%s", err);
}
END_TEST

START_TEST(test_sim_detects_leftover_and_bad_steps)
{
    struct loomStep a[] = {STEP(LOOM_STEP_SEND, 1, -1, 0, 0, 2)};
    struct loomStep *steps[] = {a, NULL};
    size_t nsteps[] = {1, 0};
    char err[ERR_LEN] = "";
    ck_assert_int_eq(runHandmade(2, steps, nsteps, 8, err), -1);
    ck_assert_msg(strstr(err, "at the end") != NULL, "%s", err);

    struct loomStep big[] = {STEP(LOOM_STEP_COPY, -1, -1, 0, 0, 5)}; /* chunk is 4 */
    struct loomStep *steps2[] = {big};
    size_t nsteps2[] = {1};
    ck_assert_int_eq(runHandmade(1, steps2, nsteps2, 8, err), -1);
    ck_assert_msg(strstr(err, "outside 1..4") != NULL, "%s", err);

    struct loomStep peer[] = {STEP(LOOM_STEP_COPY, 0, -1, 0, 0, 2)}; /* COPY names a peer */
    steps2[0] = peer;
    ck_assert_int_eq(runHandmade(1, steps2, nsteps2, 8, err), -1);
    ck_assert_msg(strstr(err, "peers") != NULL, "%s", err);

    struct loomStep twice[] = {STEP(LOOM_STEP_COPY, -1, -1, 0, 0, 2),
                               STEP(LOOM_STEP_COPY, -1, -1, 0, 0, 2)};
    twice[0].flags = twice[1].flags = LOOM_STEP_FINAL;
    twice[1].srcBuf = LOOM_BUF_RECV;
    steps2[0] = twice;
    nsteps2[0] = 2;
    ck_assert_int_eq(runHandmade(1, steps2, nsteps2, 8, err), -1);
    ck_assert_msg(strstr(err, "FINAL applied twice") != NULL, "%s", err);
}
END_TEST

START_TEST(test_check_detects_wrong_result)
{
    /* A Broadcast in which the last rank forgets its final RECV is caught by the checks. */
    struct coll c = {.coll = LOOM_COLL_BROADCAST, .n = 3, .root = 0, .count = 5, .chunk = 2};
    struct simRank ranks[3] = {{0}};
    struct loomSchedule scheds[3] = {{0}};
    char err[ERR_LEN] = "";
    uint64_t rng = 1;
    collAllocBuffers(&c, ranks);
    for (int r = 0; r < 3; r++) {
        struct loomSchedArgs a = {
            .nranks = 3, .rank = r, .root = 0, .count = 5, .lo = 0, .hi = 5, .chunkElems = 2};
        ck_assert_int_eq(viaPlan(ringBroadcastPlan, &a, &scheds[r]), loomSuccess);
        ranks[r].steps = scheds[r].steps;
        ranks[r].nsteps = scheds[r].nsteps;
    }
    ranks[2].nsteps--;
    struct sim s;
    simInit(&s, 3, 2, ranks, err);
    int rc = simRun(&s, 0, &rng);
    simFree(&s);
    if (rc == 0)
        rc = collCheck(&c, ranks, 5, err);
    ck_assert_int_eq(rc, -1);
    for (int r = 0; r < 3; r++)
        scheduleFree(&scheds[r]);
}
END_TEST

/* ------------------------------------------------------------------------ */
/* The collectives, n = 1..64.                                                */

START_TEST(test_allreduce)
{
    sweep(LOOM_COLL_ALLREDUCE, 0, 0);
}
END_TEST

START_TEST(test_reducescatter)
{
    sweep(LOOM_COLL_REDUCESCATTER, 0, 0);
}
END_TEST

START_TEST(test_allgather)
{
    sweep(LOOM_COLL_ALLGATHER, 0, 0);
}
END_TEST

START_TEST(test_broadcast)
{
    sweep(LOOM_COLL_BROADCAST, 1, 0);
}
END_TEST

START_TEST(test_reduce)
{
    sweep(LOOM_COLL_REDUCE, 1, 0);
}
END_TEST

START_TEST(test_alltoall)
{
    sweep(LOOM_COLL_ALLTOALL, 0, 0);
}
END_TEST

START_TEST(test_cma)
{
    sweep(LOOM_COLL_ALLTOALL, 0, 3);
    sweep(LOOM_COLL_ALLGATHER, 0, 3);
}
END_TEST

/* Single copies of the reductions and Broadcast: PULL_REDUCE fan-in, reduced slices pulled. */
START_TEST(test_cma_reductions)
{
    sweep(LOOM_COLL_ALLREDUCE, 0, 3);
    sweep(LOOM_COLL_REDUCESCATTER, 0, 3);
    sweep(LOOM_COLL_BROADCAST, 1, 3);
    sweep(LOOM_COLL_REDUCE, 1, 3);
}
END_TEST

/* Random per-pair counts (a quarter of them 0) and displacements with gaps, in shuffled order. */
static void makeAlltoAllv(int n, size_t maxCount, uint64_t *rng, size_t *sc, size_t *sd, size_t *rc,
                          size_t *rd, size_t *vlen)
{
    size_t *cnt = calloc((size_t)n * (size_t)n, sizeof(*cnt));
    int order[MAX_RANKS];
    ck_assert(cnt != NULL);
    for (int i = 0; i < n * n; i++)
        cnt[i] = rngBelow(rng, 4) == 0 ? 0 : 1 + rngBelow(rng, maxCount);
    for (int r = 0; r < n; r++) {
        for (int q = 0; q < n; q++) {
            sc[r * n + q] = cnt[r * n + q];
            rc[r * n + q] = cnt[q * n + r];
            order[q] = q;
        }
        size_t off[2] = {rngBelow(rng, 3), rngBelow(rng, 3)};
        rngShuffle(rng, order, n);
        for (int i = 0; i < n; i++) {
            sd[r * n + order[i]] = off[0];
            off[0] += sc[r * n + order[i]] + rngBelow(rng, 3);
        }
        rngShuffle(rng, order, n);
        for (int i = 0; i < n; i++) {
            rd[r * n + order[i]] = off[1];
            off[1] += rc[r * n + order[i]] + rngBelow(rng, 3);
        }
        vlen[2 * r] = off[0];
        vlen[2 * r + 1] = off[1];
    }
    free(cnt);
}

static void alltoallvCase(int n, size_t chunk, size_t maxCount, uint64_t *rng)
{
    size_t nn = (size_t)n * (size_t)n;
    size_t *sc = calloc(nn, sizeof(size_t)), *sd = calloc(nn, sizeof(size_t));
    size_t *rc = calloc(nn, sizeof(size_t)), *rd = calloc(nn, sizeof(size_t));
    size_t *vlen = calloc(2 * (size_t)n, sizeof(size_t));
    ck_assert(sc && sd && rc && rd && vlen);
    makeAlltoAllv(n, maxCount, rng, sc, sd, rc, rd, vlen);
    struct coll c = {.coll = LOOM_COLL_ALLTOALLV,
                     .n = n,
                     .chunk = chunk,
                     .sc = sc,
                     .sd = sd,
                     .rc = rc,
                     .rd = rd,
                     .vlen = vlen};
    char err[ERR_LEN];
    for (int randomOrder = 0; randomOrder < 2; randomOrder++) {
        int res = collRun(&c, randomOrder, rngNext(rng), err);
        ck_assert_msg(res == 0, "alltoallv n %d chunk %zu max %zu %s order: %s", n, chunk, maxCount,
                      randomOrder ? "random" : "round-robin", err);
    }
    free(sc), free(sd), free(rc), free(rd), free(vlen);
}

START_TEST(test_alltoallv)
{
    uint64_t rng = 0x5eed;
    for (int n = 1; n <= RING_RANKS; n++)
        for (size_t ci = 0; ci < sizeof(chunks) / sizeof(chunks[0]); ci++)
            alltoallvCase(n, chunks[ci], 3 * chunks[ci] + 2, &rng);
    /* Long, very uneven exchanges: far more pieces than FIFO slots one way, none the other. */
    for (int n = 2; n <= 9; n++)
        alltoallvCase(n, 2, 20 * LOOM_STEPS, &rng);
}
END_TEST

START_TEST(test_sendrecv)
{
    uint64_t rng = 0xfeed;
    char err[ERR_LEN];
    for (int n = 2; n <= RING_RANKS; n += (n < 8 ? 1 : 7)) {
        for (size_t ci = 0; ci < sizeof(chunks) / sizeof(chunks[0]); ci++) {
            size_t counts[] = {0, 1, chunks[ci] * (2 * LOOM_STEPS + 1) + 1};
            for (size_t k = 0; k < 3; k++) {
                int from = (int)rngBelow(&rng, (size_t)n);
                int to = (from + 1 + (int)rngBelow(&rng, (size_t)n - 1)) % n;
                struct coll c = {.coll = LOOM_COLL_SEND,
                                 .n = n,
                                 .root = from,
                                 .peer = to,
                                 .count = counts[k],
                                 .chunk = chunks[ci]};
                int rc = collRun(&c, (int)(k & 1), rngNext(&rng), err);
                ck_assert_msg(rc == 0, "send %d -> %d n %d count %zu chunk %zu: %s", from, to, n,
                              counts[k], chunks[ci], err);
            }
        }
    }
}
END_TEST

/* ------------------------------------------------------------------------ */
/* The double binary tree.                                                    */

START_TEST(test_tree_allreduce)
{
    sweep(LOOM_COLL_ALLREDUCE, 0, 1);
}
END_TEST

START_TEST(test_doubling_allreduce)
{
    sweep(LOOM_COLL_ALLREDUCE, 0, 2);
}
END_TEST

/* Recursive doubling's partners, and the one exchange of two ranks. */
START_TEST(test_doubling_shape)
{
    struct loomSchedule s = {0};
    struct loomSchedArgs a = {.coll = LOOM_COLL_ALLREDUCE,
                              .nranks = 2,
                              .rank = 1,
                              .count = 5,
                              .lo = 0,
                              .hi = 5,
                              .chunkElems = 8};
    ck_assert_int_eq(viaPlan(doublingAllReducePlan, &a, &s), loomSuccess);
    ck_assert_uint_eq(s.nsteps, 2); /* one hop: send mine, add the peer's */
    ck_assert_int_eq(s.steps[0].op, LOOM_STEP_SEND);
    ck_assert_int_eq(s.steps[0].sendPeers[0], 0);
    ck_assert_int_eq(s.steps[1].op, LOOM_STEP_RECV_REDUCE_COPY);
    ck_assert_int_eq(s.steps[1].recvPeers[0], 0);
    ck_assert_int_eq(s.steps[1].srcBuf, LOOM_BUF_SEND);
    ck_assert_int_eq(s.steps[1].flags, LOOM_STEP_FINAL);
    /* 8 ranks: rank 5 meets 4, 7 and 1, one round each. */
    scheduleReset(&s);
    a.nranks = 8, a.rank = 5;
    ck_assert_int_eq(viaPlan(doublingAllReducePlan, &a, &s), loomSuccess);
    ck_assert_uint_eq(s.nsteps, 6);
    int want8[] = {4, 7, 1};
    for (int k = 0; k < 3; k++) {
        ck_assert_int_eq(s.steps[2 * k].sendPeers[0], want8[k]);
        ck_assert_int_eq(s.steps[2 * k + 1].recvPeers[0], want8[k]);
        ck_assert_int_eq(s.steps[2 * k + 1].srcBuf, k == 0 ? LOOM_BUF_SEND : LOOM_BUF_RECV);
        ck_assert_int_eq(s.steps[2 * k + 1].flags, k == 2 ? LOOM_STEP_FINAL : 0);
    }
    /* 6 ranks (4 + 2): rank 0 hands its vector to 1 and gets the result back; rank 1 plays
     * participant 0 against 3 and 4, then returns the result to 0. */
    scheduleReset(&s);
    a.nranks = 6, a.rank = 0;
    ck_assert_int_eq(viaPlan(doublingAllReducePlan, &a, &s), loomSuccess);
    ck_assert_uint_eq(s.nsteps, 2);
    ck_assert_int_eq(s.steps[0].sendPeers[0], 1);
    ck_assert_int_eq(s.steps[1].op, LOOM_STEP_RECV);
    ck_assert_int_eq(s.steps[1].recvPeers[0], 1);
    scheduleReset(&s);
    a.rank = 1;
    ck_assert_int_eq(viaPlan(doublingAllReducePlan, &a, &s), loomSuccess);
    ck_assert_uint_eq(s.nsteps, 6);
    ck_assert_int_eq(s.steps[0].recvPeers[0], 0);
    ck_assert_int_eq(s.steps[1].sendPeers[0], 3);
    ck_assert_int_eq(s.steps[3].sendPeers[0], 4);
    ck_assert_int_eq(s.steps[5].sendPeers[0], 0);
    ck_assert_int_eq(s.steps[5].srcBuf, LOOM_BUF_RECV);
    /* A rank outside the communicator or a zero chunk is a core bug: refused. */
    a.rank = 6;
    ck_assert_int_eq(viaPlan(doublingAllReducePlan, &a, &s), loomInternalError);
    a.rank = 0, a.chunkElems = 0;
    ck_assert_int_eq(viaPlan(doublingAllReducePlan, &a, &s), loomInternalError);
    scheduleFree(&s);
}
END_TEST

START_TEST(test_tree_broadcast)
{
    sweep(LOOM_COLL_BROADCAST, 1, 1);
}
END_TEST

START_TEST(test_tree_reduce)
{
    sweep(LOOM_COLL_REDUCE, 1, 1);
}
END_TEST

/* Both trees of a collective: nodes[t][r], checked to be trees that span every rank. */
static void treeNodes(loomColl_t coll, int n, int root, const int *hosts, const int *order,
                      struct loomTreeNode nodes[2][MAX_RANKS])
{
    for (int t = 0; t < 2; t++) {
        int tops = 0;
        for (int r = 0; r < n; r++) {
            struct loomSchedArgs a = {.coll = coll,
                                      .nranks = n,
                                      .rank = r,
                                      .root = root,
                                      .chunkElems = 1,
                                      .hosts = hosts,
                                      .order = order};
            ck_assert_int_eq(treeNodeOf(&a, t, &nodes[t][r]), loomSuccess);
        }
        for (int r = 0; r < n; r++) {
            const struct loomTreeNode *nd = &nodes[t][r];
            tops += nd->up < 0;
            ck_assert_msg(nd->up < 0 ? nd->depth == 0 : nd->depth == nodes[t][nd->up].depth + 1,
                          "n %d tree %d rank %d: depth %d under a parent of depth %d", n, t, r,
                          nd->depth, nd->up < 0 ? -1 : nodes[t][nd->up].depth);
            for (int i = 0; i < nd->ndown; i++)
                ck_assert_msg(nodes[t][nd->down[i]].up == r,
                              "n %d tree %d: rank %d lists child %d whose parent is %d", n, t, r,
                              nd->down[i], nodes[t][nd->down[i]].up);
            if (nd->up >= 0) {
                int listed = 0;
                for (int i = 0; i < nodes[t][nd->up].ndown; i++)
                    listed += nodes[t][nd->up].down[i] == r;
                ck_assert_msg(listed == 1, "n %d tree %d: rank %d is not a child of its parent %d",
                              n, t, r, nd->up);
            }
        }
        /* One top and consistent links with depths: every rank hangs from the top. */
        ck_assert_int_eq(tops, 1);
        if (coll != LOOM_COLL_ALLREDUCE)
            ck_assert_int_eq(nodes[t][root].up, -1);
    }
}

static int ceilLog2(int n)
{
    int k = 0;
    while ((1 << k) < n)
        k++;
    return k;
}

START_TEST(test_tree_shape)
{
    static struct loomTreeNode nodes[2][MAX_RANKS];
    for (int n = 1; n <= MAX_RANKS; n++) {
        int roots[] = {-1, 0, n / 2, n - 1};
        for (size_t k = 0; k < sizeof(roots) / sizeof(roots[0]); k++) {
            int root = roots[k];
            loomColl_t coll = root < 0 ? LOOM_COLL_ALLREDUCE : LOOM_COLL_BROADCAST;
            treeNodes(coll, n, root, NULL, NULL, nodes);
            for (int r = 0; r < n; r++) {
                int interior = 0;
                for (int t = 0; t < 2; t++) {
                    ck_assert_msg(nodes[t][r].depth <= ceilLog2(n) + 1,
                                  "n %d root %d tree %d: rank %d at depth %d", n, root, t, r,
                                  nodes[t][r].depth);
                    ck_assert_int_le(nodes[t][r].ndown, 2);
                    interior += nodes[t][r].ndown > 0;
                }
                if (r == root && n > 1) {
                    /* Above both trees, handing each half to one child. */
                    ck_assert_int_eq(nodes[0][r].ndown, 1);
                    ck_assert_int_eq(nodes[1][r].ndown, 1);
                    continue;
                }
                ck_assert_msg(interior <= 1, "n %d root %d: rank %d is interior in both trees", n,
                              root, r);
                if (root < 0 && n % 2 == 0)
                    ck_assert_msg(interior == 1, "n %d: rank %d is a leaf in both trees", n, r);
            }
            if (root < 0)
                for (int t = 0; t < 2; t++)
                    for (int r = 0; r < n; r++)
                        ck_assert_int_le(nodes[t][r].depth, ceilLog2(n));
        }
    }
}
END_TEST

START_TEST(test_tree_halves)
{
    /* Each tree carries half: a rank receives ceil(c/2) elements from one parent, floor from the
     * other; with trees = 1, all of it from its parent in the first tree. */
    struct loomSchedule s = {0};
    for (int i = 0; i < 4; i++) {
        int n = i < 2 ? 3 : 40, trees = 1 + i % 2;
        for (int r = 0; r < n; r++) {
            struct loomTreeNode nd[2];
            struct loomSchedArgs a = {.coll = LOOM_COLL_BROADCAST,
                                      .nranks = n,
                                      .rank = r,
                                      .root = 1,
                                      .count = 101,
                                      .lo = 0,
                                      .hi = 101,
                                      .chunkElems = 7,
                                      .trees = trees};
            if (r == a.root)
                continue;
            ck_assert_int_eq(treeNodeOf(&a, 0, &nd[0]), loomSuccess);
            ck_assert_int_eq(treeNodeOf(&a, 1, &nd[1]), loomSuccess);
            scheduleReset(&s);
            ck_assert_int_eq(viaPlan(treeBroadcastPlan, &a, &s), loomSuccess);
            size_t got[2] = {0, 0};
            for (size_t i = 0; i < s.nsteps; i++)
                for (int t = 0; t < 2; t++)
                    if (s.steps[i].nrecv && s.steps[i].recvPeers[0] == nd[t].up &&
                        nd[0].up != nd[1].up)
                        got[t] += s.steps[i].count;
            if (nd[0].up != nd[1].up) {
                ck_assert_uint_eq(got[0], trees == 1 ? 101 : 51);
                ck_assert_uint_eq(got[1], trees == 1 ? 0 : 50);
            }
        }
    }
    scheduleFree(&s);
}
END_TEST

/* Random hosts of random sizes: host h of ranks in a shuffled order, every host used. */
static int makeHosts(int n, uint64_t *rng, int *hosts)
{
    int nhosts = 1 + (int)rngBelow(rng, (size_t)(n < 12 ? n : 12));
    int order[MAX_RANKS];
    for (int r = 0; r < n; r++)
        order[r] = r;
    rngShuffle(rng, order, n);
    for (int i = 0; i < n; i++)
        hosts[order[i]] = i < nhosts ? i : (int)rngBelow(rng, (size_t)nhosts);
    return nhosts;
}

START_TEST(test_tree_hosts)
{
    /* Trees over hosts, a chain inside each: the shape, then every collective in the simulator. */
    static struct loomTreeNode nodes[2][MAX_RANKS];
    static const loomColl_t colls[] = {LOOM_COLL_ALLREDUCE, LOOM_COLL_BROADCAST, LOOM_COLL_REDUCE};
    uint64_t rng = 0x4057;
    int hosts[MAX_RANKS], order[MAX_RANKS], where[MAX_RANKS];
    unsigned caseNo = 0;
    for (int n = 1; n <= 48; n += 1 + (n > 16) * 4) {
        for (int rep = 0; rep < 3; rep++) {
            int nhosts = makeHosts(n, &rng, hosts);
            /* rep 0: rank order; else a shuffled order, as topo.c's NUMA order may be */
            for (int r = 0; r < n; r++)
                order[r] = r;
            if (rep > 0)
                rngShuffle(&rng, order, n);
            for (int i = 0; i < n; i++)
                where[order[i]] = i;
            const int *ord = rep > 0 ? order : NULL;
            for (size_t ci = 0; ci < 3; ci++) {
                int root = (int)rngBelow(&rng, (size_t)n);
                treeNodes(colls[ci], n, root, hosts, ord, nodes);
                for (int t = 0; t < 2 && nhosts > 1; t++) {
                    for (int r = 0; r < n; r++) {
                        const struct loomTreeNode *nd = &nodes[t][r];
                        int sameHost = 0;
                        for (int i = 0; i < nd->ndown; i++)
                            sameHost += hosts[nd->down[i]] == hosts[r];
                        ck_assert_int_le(sameHost, 1); /* a chain inside the host */
                        if (nd->up >= 0 && hosts[nd->up] == hosts[r])
                            ck_assert_int_le(nd->ndown, 1); /* only a head joins other hosts */
                        /* AllReduce chains follow the order: forwards in tree 0, back in 1 */
                        if (colls[ci] == LOOM_COLL_ALLREDUCE && nd->up >= 0 &&
                            hosts[nd->up] == hosts[r])
                            ck_assert(t == 0 ? where[nd->up] < where[r] : where[nd->up] > where[r]);
                    }
                }
                if (nhosts > 1 && colls[ci] == LOOM_COLL_ALLREDUCE) {
                    int interior[MAX_RANKS] = {0};
                    for (int t = 0; t < 2; t++)
                        for (int r = 0; r < n; r++)
                            for (int i = 0; i < nodes[t][r].ndown; i++)
                                if (hosts[nodes[t][r].down[i]] != hosts[r])
                                    interior[hosts[r]] |= 1 << t;
                    for (int h = 0; h < nhosts; h++)
                        ck_assert_msg(interior[h] != 3, "n %d: host %d interior in both trees", n,
                                      h);
                    /* A host of several ranks joins the two trees through different ranks. */
                    int head[2][MAX_RANKS], size[MAX_RANKS] = {0};
                    for (int r = 0; r < n; r++)
                        size[hosts[r]]++;
                    for (int t = 0; t < 2; t++)
                        for (int r = 0; r < n; r++)
                            if (nodes[t][r].up < 0 || hosts[nodes[t][r].up] != hosts[r])
                                head[t][hosts[r]] = r;
                    for (int h = 0; h < nhosts; h++)
                        ck_assert(size[h] < 2 || head[0][h] != head[1][h]);
                }
                size_t chunk = chunks[rngBelow(&rng, 3)];
                struct coll c = {.coll = colls[ci],
                                 .n = n,
                                 .root = root,
                                 .count = rngBelow(&rng, 2) ? treeCount(chunk) : 3 * (size_t)n + 1,
                                 .chunk = chunk,
                                 .tree = 1,
                                 .hosts = hosts,
                                 .order = ord};
                collExpectOk(&c, "hosts", caseNo++);
            }
        }
    }
}
END_TEST

START_TEST(test_tree_lanes)
{
    uint64_t rng = 0x7a9e5;
    char err[ERR_LEN];
    static const loomColl_t colls[] = {LOOM_COLL_ALLREDUCE, LOOM_COLL_BROADCAST, LOOM_COLL_REDUCE};
    for (size_t ci = 0; ci < 3; ci++) {
        for (int n = 1; n <= MAX_RANKS; n += 1 + (n > 16) * 6) {
            size_t chunk = chunks[rngBelow(&rng, 3)];
            size_t count = rngBelow(&rng, 2) ? treeCount(chunk) : 3 * (size_t)n + 1;
            size_t cuts[4] = {0, rngBelow(&rng, count + 1), 0, count};
            cuts[2] = cuts[1] + rngBelow(&rng, count - cuts[1] + 1);
            struct coll c = {.coll = colls[ci],
                             .n = n,
                             .root = (int)rngBelow(&rng, (size_t)n),
                             .count = count,
                             .chunk = chunk,
                             .tree = 1,
                             .trees = 1 + (int)rngBelow(&rng, 2)};
            int rc = collRunLanes(&c, 3, cuts, (int)rngBelow(&rng, 2), rngNext(&rng), err);
            ck_assert_msg(rc == 0, "tree coll %d n %d count %zu chunk %zu cuts %zu %zu: %s", c.coll,
                          n, count, chunk, cuts[1], cuts[2], err);
        }
    }
}
END_TEST

START_TEST(test_tree_refuses_bad_args)
{
    struct loomSchedule s = {0};
    int gap[3] = {0, 2, 2}; /* host 1 has no rank */
    struct loomSchedArgs a = {.coll = LOOM_COLL_ALLREDUCE,
                              .nranks = 3,
                              .rank = 1,
                              .count = 8,
                              .lo = 0,
                              .hi = 8,
                              .chunkElems = 4,
                              .hosts = gap};
    ck_assert_int_eq(viaPlan(treeAllReducePlan, &a, &s), loomInternalError);
    int twice[3] = {0, 2, 2}; /* an order that is no permutation */
    a.hosts = NULL, a.order = twice;
    ck_assert_int_eq(viaPlan(treeAllReducePlan, &a, &s), loomInternalError);
    a.order = NULL, a.root = 3; /* no such rank */
    ck_assert_int_eq(viaPlan(treeBroadcastPlan, &a, &s), loomInternalError);
    ck_assert_int_eq(viaPlan(treeReducePlan, &a, &s), loomInternalError);
    a.root = 0, a.chunkElems = 0;
    ck_assert_int_eq(viaPlan(treeAllReducePlan, &a, &s), loomInternalError);
    a.chunkElems = 4, a.hi = 9; /* past count */
    ck_assert_int_eq(viaPlan(treeAllReducePlan, &a, &s), loomInternalError);
    ck_assert_uint_eq(s.nsteps, 0);
    scheduleFree(&s);
}
END_TEST

/* ------------------------------------------------------------------------ */
/* Lanes and ring orders.                                                     */

static const loomColl_t laneColls[] = {
    LOOM_COLL_BROADCAST,     LOOM_COLL_REDUCE,   LOOM_COLL_ALLREDUCE, LOOM_COLL_ALLGATHER,
    LOOM_COLL_REDUCESCATTER, LOOM_COLL_ALLTOALL, LOOM_COLL_SEND,
};

START_TEST(test_lanes_cover_everything)
{
    uint64_t rng = 0x1a7e5;
    char err[ERR_LEN];
    for (size_t ci = 0; ci < sizeof(laneColls) / sizeof(laneColls[0]); ci++) {
        for (int n = 1; n <= RING_RANKS; n++) {
            if (laneColls[ci] == LOOM_COLL_SEND && n == 1)
                continue;
            size_t chunk = chunks[rngBelow(&rng, 3)];
            size_t count = rngBelow(&rng, 2) ? midCount(laneColls[ci], n, chunk)
                                             : bigCount(laneColls[ci], n, chunk);
            int nlanes = 2 + (int)rngBelow(&rng, 2);
            size_t cuts[4] = {0};
            for (int l = 1; l < nlanes; l++)
                cuts[l] = rngBelow(&rng, count + 1);
            cuts[nlanes] = count;
            for (int i = 1; i < nlanes; i++) /* sort the cuts; empty lanes are allowed */
                for (int j = i; j > 1 && cuts[j] < cuts[j - 1]; j--) {
                    size_t t = cuts[j];
                    cuts[j] = cuts[j - 1];
                    cuts[j - 1] = t;
                }
            int root = (int)rngBelow(&rng, (size_t)n);
            struct coll c = {.coll = laneColls[ci],
                             .n = n,
                             .root = root,
                             .peer = (root + 1) % n,
                             .count = count,
                             .chunk = chunk};
            int rc = collRunLanes(&c, nlanes, cuts, (int)rngBelow(&rng, 2), rngNext(&rng), err);
            ck_assert_msg(rc == 0, "coll %d n %d count %zu chunk %zu lanes %d cuts %zu %zu: %s",
                          c.coll, n, count, chunk, nlanes, cuts[1], cuts[2], err);
        }
    }
}
END_TEST

START_TEST(test_random_ring_order)
{
    static const loomColl_t ringColls[] = {LOOM_COLL_BROADCAST, LOOM_COLL_REDUCE,
                                           LOOM_COLL_ALLREDUCE, LOOM_COLL_ALLGATHER,
                                           LOOM_COLL_REDUCESCATTER};
    uint64_t rng = 0x0bade;
    int ring[MAX_RANKS];
    for (int n = 1; n <= RING_RANKS; n++) {
        for (int i = 0; i < n; i++)
            ring[i] = i;
        rngShuffle(&rng, ring, n);
        for (size_t ci = 0; ci < sizeof(ringColls) / sizeof(ringColls[0]); ci++) {
            size_t chunk = chunks[rngBelow(&rng, 3)];
            size_t counts[] = {midCount(ringColls[ci], n, chunk),
                               bigCount(ringColls[ci], n, chunk)};
            for (size_t k = 0; k < 2; k++) {
                struct coll c = {.coll = ringColls[ci],
                                 .n = n,
                                 .ring = ring,
                                 .root = (int)rngBelow(&rng, (size_t)n),
                                 .count = counts[k],
                                 .chunk = chunk};
                collExpectOk(&c, "random", (unsigned)(n + k));
            }
        }
    }
}
END_TEST

/* ------------------------------------------------------------------------ */
/* Differential: the same plans through the simulator and the real executor. */

/*
 * The case the ranks run (set before they are forked, so each child has it,
 * with the simulator's buffers of the same plans, by inheritance).
 */
static const struct coll *diffCase;
static struct simRank diffRanks[MAX_RANKS];

#define DIFF_POISON 0xdeadbeefdeadbeefULL

/*
 * Element j of rank r's send buffer: its index (plus one) in the high half
 * and its rank's bit in the low half. A sum of k such elements of one index
 * holds the ranks' bits, and k x (index + 1) above them: every value says
 * which elements it adds up, as a simulator symbol does.
 */
static uint64_t diffInput(int r, size_t j)
{
    return ((uint64_t)(j + 1) << 32) | ((uint64_t)1 << r);
}

static int diffMatches(const struct sym *e, uint64_t v)
{
    if (!e->valid)
        return v == DIFF_POISON;
    uint64_t mask = v & 0xffffffffULL;
    return mask == (uint64_t)e->mask &&
           (v >> 32) == (uint64_t)__builtin_popcountll(mask) * ((uint64_t)e->idx + 1);
}

/* The lanes the case is cut in: [diffCuts[l], diffCuts[l + 1]) on channel l. */
static int diffLanes;
static size_t diffCuts[LOOM_MAX_CHANNELS + 1];

/*
 * One rank: builds its plans (one per lane) as the simulator did, runs them
 * together with exec.c, compares every element. A single-copy case where
 * the kernel refuses cross-memory attach is a skip, said once by rank 0.
 */
static int diffRank(int rank, int nranks, loomComm_t comm)
{
    const struct coll *c = diffCase;
    const struct simRank *sim = &diffRanks[rank];
    struct loomPlan plans[LOOM_MAX_CHANNELS] = {{0}};
    struct loomLane lanes[LOOM_MAX_CHANNELS];
    uint64_t *buf[2];
    if (c->cma && nranks > 1 && !comm->cmaOk) {
        if (rank == 0)
            fprintf(stderr,
                    "differential: single copies are off here (cross-memory attach "
                    "refused or LOOM_CMA_DISABLE): coll %d skipped\n",
                    c->coll);
        return 0;
    }
    if (comm->nChannels < diffLanes)
        return testRankFail(rank, 6, "%d lanes need %d channels, the comm has %d (LOOM_NCHANNELS)",
                            diffLanes, diffLanes, comm->nChannels);
    for (int b = 0; b < 2; b++)
        buf[b] = malloc((sim->len[b] + 1) * sizeof(uint64_t));
    if (buf[0] == NULL || buf[1] == NULL)
        return testRankFail(rank, 2, "out of memory for %zu + %zu elements", sim->len[0],
                            sim->len[1]);
    for (size_t j = 0; j < sim->len[0]; j++)
        buf[0][j] = diffInput(rank, j);
    for (size_t i = 0; i < sim->len[1]; i++)
        buf[1][i] = DIFF_POISON;
    for (int l = 0; l < diffLanes; l++) {
        struct loomSchedArgs a = {.coll = c->coll,
                                  .nranks = nranks,
                                  .rank = rank,
                                  .ring = c->ring,
                                  .root = c->root,
                                  .count = c->count,
                                  .lo = diffCuts[l],
                                  .hi = diffCuts[l + 1],
                                  .chunkElems = c->chunk};
        if (collPlan(c, &a, &plans[l]) != loomSuccess)
            return testRankFail(rank, 3, "the generator of coll %d failed", c->coll);
        lanes[l] = (struct loomLane){.comm = comm,
                                     .channel = l,
                                     .plan = &plans[l],
                                     .bufs = {(char *)buf[0], (char *)buf[1]},
                                     .dt = loomUint64,
                                     .op = loomSum,
                                     .elemSize = sizeof(uint64_t)};
    }
    struct loomExecCall call = {.connect = connectLanes}; /* as the planner hands it down */
    loomResult_t res = executorRun(&loomExecHost, lanes, diffLanes, &call);
    if (res != loomSuccess)
        return testRankFail(rank, 4, "the host executor's run of coll %d: %s", c->coll,
                            loomGetLastError(comm));
    for (int b = 0; b < 2; b++) {
        for (size_t i = 0; i < sim->len[b]; i++) {
            if (!diffMatches(&sim->buf[b][i], buf[b][i]))
                return testRankFail(rank, 5,
                                    "coll %d: buffer %d element %zu is %#llx, the simulator has "
                                    "{mask %#llx idx %u valid %d}",
                                    c->coll, b, i, (unsigned long long)buf[b][i],
                                    (unsigned long long)sim->buf[b][i].mask, sim->buf[b][i].idx,
                                    sim->buf[b][i].valid);
        }
    }
    for (int l = 0; l < diffLanes; l++)
        planFree(&plans[l]);
    free(buf[0]);
    free(buf[1]);
    return 0;
}

/*
 * Simulates c's plans, lane after lane, then runs them on c->n real
 * processes, all lanes at once, and compares. nlanes > 1 cuts the count (of
 * a per-rank block) in near-equal lanes, as the core does.
 */
static void diffRunLanes(const struct coll *c, int nlanes)
{
    char err[ERR_LEN];
    uint64_t rng = 1;
    memset(diffRanks, 0, sizeof(diffRanks));
    collAllocBuffers(c, diffRanks);
    diffLanes = nlanes;
    for (int l = 0; l <= nlanes; l++)
        diffCuts[l] = c->count * (size_t)l / (size_t)nlanes;
    for (int l = 0; l < nlanes; l++) {
        int rc = collRunLane(c, diffRanks, schedPool, diffCuts[l], diffCuts[l + 1], 0, &rng, err);
        ck_assert_msg(rc == 0, "simulator: coll %d n %d lane %d of %d: %s", c->coll, c->n, l,
                      nlanes, err);
    }
    diffCase = c;
    runRanks(c->n, diffRank);
}

static void diffRun(const struct coll *c)
{
    diffRunLanes(c, 1);
}

START_TEST(test_differential)
{
    static const loomColl_t colls[] = {LOOM_COLL_ALLREDUCE,     LOOM_COLL_REDUCE,
                                       LOOM_COLL_BROADCAST,     LOOM_COLL_ALLGATHER,
                                       LOOM_COLL_REDUCESCATTER, LOOM_COLL_ALLTOALL};
    static const int sizes[] = {1, 2, 3, 5};
    for (size_t k = 0; k < sizeof(sizes) / sizeof(sizes[0]); k++) {
        int n = sizes[k];
        for (size_t i = 0; i < sizeof(colls) / sizeof(colls[0]); i++) {
            for (int algo = 0; algo < 4; algo++) {
                struct coll c = {.coll = colls[i],
                                 .n = n,
                                 .root = n - 1,
                                 .count = 29,
                                 .chunk = 3,
                                 .tree = algo == 1,
                                 .doubling = algo == 2,
                                 .cma = algo == 3};
                if (scheduleGenerator(c.coll, collAlgo(&c)) == NULL)
                    continue; /* no such algorithm for this collective */
                diffRun(&c);
            }
        }
    }
}
END_TEST

/*
 * The rest of what plans do: AlltoAllv's uneven counts, Send/Recv, trees
 * whose nodes fold three children (hosts, so chains hang below tree
 * nodes), and several lanes on several channels at once.
 */
START_TEST(test_differential_more)
{
    uint64_t rng = 0xd1ff;
    /* Parameters are read once per process: before this test's first communicator, so that
     * every rank forked below has the channels the lanes case needs. */
    setenv("LOOM_NCHANNELS", "3", 1);
    for (int n = 2; n <= 5; n += 3) {
        size_t nn = (size_t)n * (size_t)n;
        size_t *sc = calloc(nn, sizeof(size_t)), *sd = calloc(nn, sizeof(size_t));
        size_t *rc = calloc(nn, sizeof(size_t)), *rd = calloc(nn, sizeof(size_t));
        size_t *vlen = calloc(2 * (size_t)n, sizeof(size_t));
        ck_assert(sc && sd && rc && rd && vlen);
        makeAlltoAllv(n, 11, &rng, sc, sd, rc, rd, vlen);
        struct coll v = {.coll = LOOM_COLL_ALLTOALLV,
                         .n = n,
                         .chunk = 3,
                         .sc = sc,
                         .sd = sd,
                         .rc = rc,
                         .rd = rd,
                         .vlen = vlen};
        diffRun(&v);
        free(sc), free(sd), free(rc), free(rd), free(vlen);
    }
    struct coll p2p = {
        .coll = LOOM_COLL_SEND, .n = 3, .root = 2, .peer = 0, .count = 31, .chunk = 4};
    diffRun(&p2p);
    static const int hosts[] = {0, 0, 1, 1, 2, 2, 3};
    for (int k = 0; k < 3; k++) {
        static const loomColl_t tc[] = {LOOM_COLL_ALLREDUCE, LOOM_COLL_REDUCE, LOOM_COLL_BROADCAST};
        struct coll t = {.coll = tc[k],
                         .n = 7,
                         .root = 3,
                         .count = 41,
                         .chunk = 3,
                         .tree = 1,
                         .trees = 2,
                         .hosts = hosts};
        diffRun(&t);
    }
    static const loomColl_t lanes[] = {LOOM_COLL_ALLREDUCE, LOOM_COLL_ALLGATHER,
                                       LOOM_COLL_REDUCESCATTER, LOOM_COLL_ALLTOALL,
                                       LOOM_COLL_BROADCAST};
    for (size_t i = 0; i < sizeof(lanes) / sizeof(lanes[0]); i++) {
        for (int algo = 0; algo < 4; algo += 3) {
            struct coll c = {
                .coll = lanes[i], .n = 3, .root = 1, .count = 37, .chunk = 4, .cma = algo == 3};
            if (scheduleGenerator(c.coll, collAlgo(&c)) != NULL)
                diffRunLanes(&c, 3);
        }
    }
    struct coll tree = {
        .coll = LOOM_COLL_ALLREDUCE, .n = 4, .count = 50, .chunk = 3, .tree = 1, .trees = 2};
    diffRunLanes(&tree, 2);
}
END_TEST

/* ------------------------------------------------------------------------ */

static TCase *tcase(const char *name, const TTest *test)
{
    TCase *tc = tcase_create(name);
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test);
    return tc;
}

static Suite *scheduleSuite(void)
{
    Suite *s = suite_create("schedule");
    suite_add_tcase(s, tcase("array", test_array_grows_and_keeps_order));
    suite_add_tcase(s, tcase("allreduce shape", test_allreduce_shape));
    suite_add_tcase(s, tcase("empty ranges", test_empty_ranges_emit_nothing));
    suite_add_tcase(s, tcase("plan size", test_plan_size_fixed));
    suite_add_tcase(s, tcase("generators append", test_generators_append));
    suite_add_tcase(s, tcase("inconsistent args", test_inconsistent_args_refused));
    suite_add_tcase(s, tcase("sim deadlock", test_sim_detects_deadlock));
    suite_add_tcase(s, tcase("sim size mismatch", test_sim_detects_size_mismatch));
    suite_add_tcase(s, tcase("sim double counting", test_sim_detects_double_counting));
    suite_add_tcase(s, tcase("sim offer misuse", test_sim_detects_offer_misuse));
    suite_add_tcase(s, tcase("sim misaligned reduce", test_sim_detects_misaligned_reduce));
    suite_add_tcase(s,
                    tcase("sim leftovers and bad steps", test_sim_detects_leftover_and_bad_steps));
    suite_add_tcase(s, tcase("check wrong result", test_check_detects_wrong_result));
    suite_add_tcase(s, tcase("allreduce", test_allreduce));
    suite_add_tcase(s, tcase("reducescatter", test_reducescatter));
    suite_add_tcase(s, tcase("allgather", test_allgather));
    suite_add_tcase(s, tcase("broadcast", test_broadcast));
    suite_add_tcase(s, tcase("reduce", test_reduce));
    suite_add_tcase(s, tcase("alltoall", test_alltoall));
    suite_add_tcase(s, tcase("alltoallv", test_alltoallv));
    suite_add_tcase(s, tcase("cma alltoall allgather", test_cma));
    suite_add_tcase(s, tcase("cma reductions broadcast", test_cma_reductions));
    suite_add_tcase(s, tcase("sendrecv", test_sendrecv));
    suite_add_tcase(s, tcase("lanes", test_lanes_cover_everything));
    suite_add_tcase(s, tcase("ring order", test_random_ring_order));
    suite_add_tcase(s, tcase("tree allreduce", test_tree_allreduce));
    suite_add_tcase(s, tcase("tree broadcast", test_tree_broadcast));
    suite_add_tcase(s, tcase("doubling allreduce", test_doubling_allreduce));
    suite_add_tcase(s, tcase("doubling shape", test_doubling_shape));
    suite_add_tcase(s, tcase("tree reduce", test_tree_reduce));
    suite_add_tcase(s, tcase("tree shape", test_tree_shape));
    suite_add_tcase(s, tcase("tree halves", test_tree_halves));
    suite_add_tcase(s, tcase("tree hosts", test_tree_hosts));
    suite_add_tcase(s, tcase("tree lanes", test_tree_lanes));
    suite_add_tcase(s, tcase("tree bad args", test_tree_refuses_bad_args));
    suite_add_tcase(s, tcase("differential", test_differential));
    suite_add_tcase(s, tcase("differential more", test_differential_more));
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(scheduleSuite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
