/*
 * par.c — model parallelism: tensor (--tp), pipeline (--pp) and sequence
 * (--sp) parallelism, and data parallelism across their replicas, each on
 * its own communicator.
 *
 * The world of N = dp x pp x tp ranks is cut by loomCommSplit into three
 * families of communicators. Rank r sits at
 *
 *   tp index  r % tp,   pipeline stage  (r / tp) % pp,   replica  r / (tp pp)
 *
 * so the ranks of one TP group are consecutive (loomrun and mpirun place
 * consecutive ranks on one host: TP, the most frequent and latency-bound
 * traffic, stays on the fastest links), a pipeline's stages come next and
 * the data-parallel replicas are furthest apart.
 *
 * Tensor parallelism (Megatron): each block's attention is split by heads
 * and its MLP by the columns of W1 and the rows of W2 (model.c says which
 * elements a rank holds); the partial outputs of Wo and W2, and in backward
 * the partial gradients of the inputs of Wqkv and W1, are summed by an
 * AllReduce on the TP communicator (modelHooks.reduce): two in forward and
 * two in backward per block. Norms, the head and the biases of the row-split
 * layers are replicated, with identical gradients on every TP rank.
 *
 * Pipeline parallelism: stage s holds blocks [s L / pp, (s + 1) L / pp), the
 * last stage the head too. Each rank's batch is cut into --microbatches
 * micro-batches; a stage receives a micro-batch's activations from the stage
 * before (loomRecv), runs its blocks and sends the output on (loomSend), and
 * in backward the gradients flow the other way. The schedule is a list of
 * forwards and backwards per stage:
 *
 *   gpipe  all m forwards, then all m backwards: m micro-batches' activations
 *          held at once
 *   1f1b   pp - s - 1 forwards to fill the pipe, then one forward and one
 *          backward in turn, then the backwards left: at most pp - s held
 *
 * Between two operations a stage does at most one send (the output of the
 * one just done) and one receive (the input of the next); both go into one
 * loomGroupStart/End, so where a stage sends activations to its neighbour
 * while receiving gradients back from it (1F1B's steady state) the two
 * directions move at once and neither waits for the other's order. Gradients
 * are summed over micro-batches in fp32 (each micro-batch's loss weighted
 * 1/m: the mean over the batch), then rounded to the training dtype and
 * averaged over the replicas by one AllReduce on the DP communicator, and
 * every rank takes its Adam step on what it holds. Under --mode zeroN the
 * stage's flat buffer is cut into one shard per DP rank and the average is a
 * ReduceScatter: zero1 keeps the optimizer state of the shard only, steps it
 * and AllGathers the parameters; zero2 keeps only the shard's gradients too;
 * zero3 only its parameters too, gathered for each step (parGather).
 *
 * The schedule's own idle time is computed exactly by playing it with a
 * forward costing 1 and a backward 2 (its ratio to the compute is (p-1)/m
 * for both schedules); the run prints it beside (p-1)/m and the share of the
 * step each stage measured waiting in Send/Recv, and the peak of activations
 * in flight of both schedules.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "optim.h"

enum opKind { OP_FORWARD, OP_BACKWARD };

struct pipeOp {
    enum opKind kind;
    int mb;
};

struct par {
    struct trainer *t;
    const struct trainOptions *o;
    int tp, pp, sp, dp, tpIdx, ppIdx, spIdx, dpIdx;
    int dpq;  /* this rank in dpComm: dpIdx x sp + spIdx */
    int zero; /* --mode zeroN: N, the ZeRO stage over dpComm (0: ddp) */
    /* dpComm: the dp x sp ranks that hold the same part of the model (replicas and the parts of
     * a sequence), over which gradients are averaged */
    loomComm_t tpComm, ppComm, spComm, dpComm;
    struct modelShape shape; /* this rank's TP part of the model */
    int l0, l1, last;        /* blocks [l0, l1); last: the stage holds the head */
    struct unitLayout lay;   /* blocks l0..l1-1, then the head on the last stage */
    struct replica rep;
    float *acc;          /* fp32 gradients, summed over micro-batches */
    void *whole;         /* ZeRO-3: the stage's parameters, gathered for a step */
    size_t *map;         /* a block's elements: their index in the whole block */
    unsigned char *repl; /* ... and whether they are replicated over TP */
    size_t blockFull;    /* elements of a whole block */
    struct adamConfig adam;
    struct modelHooks hooks;
    int m, mb, nslots; /* micro-batches, their rows, activation slots */
    struct modelActs *slot;
    float *sendBuf, *recvBuf; /* mb x hidden */
    float *x;                 /* --sp: this rank's part of each sequence of the batch */
    int *labels;
    struct pipeOp *ops;
    int nops;
    uint64_t waitNs, stepNs; /* time in the pipeline's Send/Recv, and in steps (after the first) */
    char formula[64];
};

/* ---- the schedule ---- */

/* Stage s's operations under `schedule` (1: 1f1b), 2 m of them, into ops. */
static void scheduleOps(int onef1b, int p, int s, int m, struct pipeOp *ops)
{
    int n = 0, f = 0, b = 0;
    int warm = onef1b ? (p - s - 1 < m ? p - s - 1 : m) : m;
    for (; f < warm; f++)
        ops[n++] = (struct pipeOp){OP_FORWARD, f};
    for (; f < m; f++) {
        ops[n++] = (struct pipeOp){OP_FORWARD, f};
        ops[n++] = (struct pipeOp){OP_BACKWARD, b++};
    }
    for (; b < m; b++)
        ops[n++] = (struct pipeOp){OP_BACKWARD, b};
}

struct scheduleFigures {
    double idle;   /* the share of the makespan a stage is idle (the same on every stage) */
    double bubble; /* idle time over compute time */
    int peak0;     /* stage 0's peak of micro-batches forwarded and not yet backwarded */
};

/*
 * Plays the schedule of p stages and m micro-batches with a forward costing 1
 * and a backward 2: each operation starts when its stage is free and its
 * input exists (a forward after the stage before forwarded the micro-batch, a
 * backward after the stage after backwarded it).
 */
static int scheduleFigures(int onef1b, int p, int m, struct scheduleFigures *out)
{
    struct pipeOp *ops = calloc((size_t)p * 2 * m, sizeof(*ops));
    double *endF = calloc((size_t)p * m, sizeof(double)),
           *endB = calloc((size_t)p * m, sizeof(double));
    double *freeAt = calloc((size_t)p, sizeof(double)), makespan = 0.0;
    int *next = calloc((size_t)p, sizeof(int)), done = 0, inflight = 0;
    if (ops == NULL || endF == NULL || endB == NULL || freeAt == NULL || next == NULL) {
        free(ops), free(endF), free(endB), free(freeAt), free(next);
        return -1;
    }
    for (int s = 0; s < p; s++)
        scheduleOps(onef1b, p, s, m, ops + (size_t)s * 2 * m);
    for (int i = 0; i < p * m; i++)
        endF[i] = endB[i] = -1.0;
    out->peak0 = 0;
    while (done < 2 * p * m) {
        int progressed = 0;
        for (int s = 0; s < p; s++) {
            if (next[s] == 2 * m)
                continue;
            struct pipeOp op = ops[(size_t)s * 2 * m + next[s]];
            double dep = 0.0;
            if (op.kind == OP_FORWARD && s > 0)
                dep = endF[(s - 1) * m + op.mb];
            else if (op.kind == OP_BACKWARD)
                dep = s + 1 < p ? endB[(s + 1) * m + op.mb] : endF[s * m + op.mb];
            if (dep < 0.0)
                continue;
            double start = freeAt[s] > dep ? freeAt[s] : dep;
            freeAt[s] = start + (op.kind == OP_FORWARD ? 1.0 : 2.0);
            (op.kind == OP_FORWARD ? endF : endB)[s * m + op.mb] = freeAt[s];
            makespan = freeAt[s] > makespan ? freeAt[s] : makespan;
            if (s == 0) {
                inflight += op.kind == OP_FORWARD ? 1 : -1;
                out->peak0 = inflight > out->peak0 ? inflight : out->peak0;
            }
            next[s]++;
            done++;
            progressed = 1;
        }
        if (!progressed)
            break; /* cannot happen for these schedules */
    }
    double busy = 3.0 * m;
    out->idle = (makespan - busy) / makespan;
    out->bubble = (makespan - busy) / busy;
    free(ops), free(endF), free(endB), free(freeAt), free(next);
    return done == 2 * p * m ? 0 : -1;
}

/* ---- hooks: the stage's units as the passes see them ---- */

static int localUnit(const struct par *p, int unit)
{
    return unit == p->o->layers ? p->l1 - p->l0 : unit - p->l0;
}

static loomResult_t hookParams(void *ctx, int unit, const float **w)
{
    struct par *p = ctx;
    int u = localUnit(p, unit);
    if (p->zero < 3)
        return replicaParams(&p->rep, u, w);
    /* ZeRO-3: from the stage's parameters gathered for this step */
    if (!p->rep.bf16) {
        *w = (const float *)p->whole + p->lay.offset[u];
        return loomSuccess;
    }
    toFloat((const uint16_t *)p->whole + p->lay.offset[u], 1, p->lay.spec[u].count, p->rep.viewP);
    *w = p->rep.viewP;
    return loomSuccess;
}

static loomResult_t hookRelease(void *ctx, int unit)
{
    return loomSuccess;
}

static loomResult_t hookGrads(void *ctx, int unit, float **g)
{
    struct par *p = ctx;
    *g = p->acc + p->lay.offset[localUnit(p, unit)];
    return loomSuccess;
}

static loomResult_t hookReady(void *ctx, int unit, size_t lo)
{
    return loomSuccess;
}

static loomResult_t hookRing(void *ctx, const float *send, float *recv, size_t n)
{
    struct par *p = ctx;
    int next = (p->spIdx + 1) % p->sp, prev = (p->spIdx + p->sp - 1) % p->sp;
    uint64_t t0 = nowNs();
    loomResult_t res = loomGroupStart();
    if (res == loomSuccess)
        res = loomSend(send, n, loomFloat32, next, p->spComm, NULL);
    if (res == loomSuccess)
        res = loomRecv(recv, n, loomFloat32, prev, p->spComm, NULL);
    loomResult_t end = loomGroupEnd();
    return trainComm(p->t, "loomSend/loomRecv (SP ring)", res == loomSuccess ? end : res, t0);
}

static loomResult_t hookReduce(void *ctx, float *buf, size_t n)
{
    struct par *p = ctx;
    uint64_t t0 = nowNs();
    return trainComm(p->t, "loomAllReduce (TP)",
                     loomAllReduce(buf, buf, n, loomFloat32, loomSum, p->tpComm, NULL), t0);
}

/* ---- the step ---- */

/* One group: this op's output to send (peer -1: none) and the next op's input to receive. */
static loomResult_t pipeExchange(struct par *p, int sendPeer, int recvPeer)
{
    size_t n = (size_t)p->mb * p->o->hidden;
    if (sendPeer < 0 && recvPeer < 0)
        return loomSuccess;
    uint64_t t0 = nowNs();
    loomResult_t res = loomGroupStart();
    if (res == loomSuccess && sendPeer >= 0)
        res = loomSend(p->sendBuf, n, loomFloat32, sendPeer, p->ppComm, NULL);
    if (res == loomSuccess && recvPeer >= 0)
        res = loomRecv(p->recvBuf, n, loomFloat32, recvPeer, p->ppComm, NULL);
    loomResult_t end = loomGroupEnd();
    res = res == loomSuccess ? end : res;
    p->waitNs += nowNs() - t0;
    return trainComm(p->t, "loomSend/loomRecv (PP)", res, t0);
}

/* The peer op i receives its input from (-1: none). */
static int recvPeerOf(const struct par *p, int i)
{
    if (i >= p->nops)
        return -1;
    if (p->ops[i].kind == OP_FORWARD)
        return p->ppIdx > 0 ? p->ppIdx - 1 : -1;
    return p->last ? -1 : p->ppIdx + 1;
}

/* Whether this rank puts element e of the stage's flat buffer into sums over all ranks: once
 * per (TP rank, stage) across the replicas, by TP rank 0 where it is replicated over TP. */
static int parHolds(const struct par *p, size_t e, int replicated)
{
    int mine = p->zero ? e >= p->rep.shardLo && e < p->rep.shardLo + p->rep.shardN : p->dpq == 0;
    return mine && (!replicated || p->tpIdx == 0);
}

/* Whether element i of local unit u is replicated over TP: the head, and the norms and the
 * biases of the row-split layers of a block. */
static int parReplicated(const struct par *p, int u, size_t i)
{
    return (p->last && u == p->lay.nunits - 1) || p->repl[i];
}

/* The gradient of element e of the stage, averaged (zero: e in the shard). */
static double parGradAt(const struct par *p, size_t e)
{
    if (p->rep.shardGrads)
        e -= p->rep.shardLo;
    return p->rep.bf16 ? bf16ToFloat(((const uint16_t *)p->rep.grads)[e])
                       : ((const float *)p->rep.grads)[e];
}

/*
 * The gradients of the micro-batches, rounded to the training dtype, averaged over the
 * replicas: all of them (ddp), or each rank's shard (ZeRO). From ZeRO-2 on the rank keeps only
 * its shard's gradients: the fp32 sum is rounded in place (bf16: each element to the front
 * half of its float) and reduce-scattered from there.
 */
static loomResult_t parAverage(struct par *p)
{
    uint64_t c0 = nowNs();
    size_t esz = dtypeSize(p->rep.bf16);
    if (p->zero >= 2) {
        if (p->rep.bf16) {
            uint16_t *to = (uint16_t *)p->acc; /* to[i] overwrites floats up to i/2, read */
            for (size_t i = 0; i < p->lay.total; i++)
                to[i] = floatToBf16(p->acc[i]);
        }
        return trainComm(p->t,
                         p->zero == 2 ? "loomReduceScatter (ZeRO-2)" : "loomReduceScatter (ZeRO-3)",
                         loomReduceScatter(p->acc, p->rep.grads, p->rep.shardN,
                                           dtypeLoom(p->rep.bf16), loomAvg, p->dpComm, NULL),
                         c0);
    }
    fromFloat(p->acc, p->lay.total, p->rep.bf16, p->rep.grads);
    if (p->dp * p->sp == 1)
        return loomSuccess;
    if (p->zero)
        return trainComm(
            p->t, "loomReduceScatter (ZeRO-1)",
            loomReduceScatter(p->rep.grads, (char *)p->rep.grads + p->rep.shardLo * esz,
                              p->rep.shardN, dtypeLoom(p->rep.bf16), loomAvg, p->dpComm, NULL),
            c0);
    return trainComm(p->t, "loomAllReduce (DP)",
                     loomAllReduce(p->rep.grads, p->rep.grads, p->lay.total, dtypeLoom(p->rep.bf16),
                                   loomAvg, p->dpComm, NULL),
                     c0);
}

/* This rank's share of the squared norm of the averaged gradient: each element counted once. */
static double parGradNormSq(const struct par *p)
{
    double sq = 0.0;
    for (int u = 0; u < p->lay.nunits; u++) {
        size_t off = p->lay.offset[u], count = p->lay.spec[u].count;
        for (size_t i = 0; i < count; i++) {
            if (!parHolds(p, off + i, parReplicated(p, u, i)))
                continue;
            double g = parGradAt(p, off + i);
            sq += g * g;
        }
    }
    return sq;
}

/*
 * ZeRO-3: the stage's parameters gathered from the replicas' shards into a temporary. Under a
 * pipeline each unit is used by every micro-batch's forward and backward, interleaved across
 * the whole step by 1F1B, so the stage is gathered once at the start of the step and dropped
 * before the update: between steps a rank holds only its shard.
 */
static loomResult_t parGather(struct par *p)
{
    size_t bytes = p->lay.total * dtypeSize(p->rep.bf16);
    p->whole = ledgerAlloc(&p->t->ledger, LEDGER_TEMP, bytes);
    if (p->whole == NULL)
        return trainFail(p->t, loomSystemError, "out of memory for the gathered parameters");
    uint64_t c0 = nowNs();
    return trainComm(p->t, "loomAllGather (ZeRO-3)",
                     loomAllGather(p->rep.params, p->whole, p->rep.shardN, dtypeLoom(p->rep.bf16),
                                   p->dpComm, NULL),
                     c0);
}

static void parDrop(struct par *p)
{
    if (p->whole == NULL)
        return;
    ledgerFree(&p->t->ledger, LEDGER_TEMP, p->whole, p->lay.total * dtypeSize(p->rep.bf16));
    p->whole = NULL;
}

static loomResult_t parStep(void *self, long step, const float *x, const int *labels,
                            struct stepStats *stats)
{
    struct par *p = self;
    size_t d = (size_t)p->o->hidden;
    double lossSum = 0.0;
    uint64_t t0 = nowNs(), wait0 = p->waitNs;
    if (p->sp > 1) {
        /* this rank's part of each sequence: rows [spIdx seq/sp, (spIdx + 1) seq/sp) of it */
        int seq = p->o->seq, part = seq / p->sp;
        for (int n = 0; n < p->o->batch / seq; n++) {
            size_t from = (size_t)n * seq + (size_t)p->spIdx * part, to = (size_t)n * part;
            memcpy(p->x + to * d, x + from * d, (size_t)part * d * sizeof(*x));
            memcpy(p->labels + to, labels + from, (size_t)part * sizeof(*labels));
        }
        x = p->x;
        labels = p->labels;
    }
    memset(p->acc, 0, p->lay.total * sizeof(*p->acc));
    if (p->zero == 3)
        LOOMCHECK(parGather(p));
    LOOMCHECK(pipeExchange(p, -1, recvPeerOf(p, 0)));
    for (int i = 0; i < p->nops; i++) {
        struct pipeOp op = p->ops[i];
        struct modelActs *a = &p->slot[op.mb % p->nslots];
        const int *lab = labels + (size_t)op.mb * p->mb;
        int sendPeer;
        if (op.kind == OP_FORWARD) {
            const float *in = p->ppIdx == 0 ? x + (size_t)op.mb * p->mb * d : p->recvBuf;
            double loss = 0.0;
            LOOMCHECK(modelForwardPart(&p->shape, &p->hooks, a, in, lab, p->sendBuf, &loss));
            lossSum += loss;
            sendPeer = p->last ? -1 : p->ppIdx + 1;
        } else {
            LOOMCHECK(modelBackwardPart(&p->shape, &p->hooks, a, lab, 1.0 / p->m,
                                        p->last ? NULL : p->recvBuf,
                                        p->ppIdx > 0 ? p->sendBuf : NULL, 1));
            sendPeer = p->ppIdx > 0 ? p->ppIdx - 1 : -1;
        }
        LOOMCHECK(pipeExchange(p, sendPeer, recvPeerOf(p, i + 1)));
        modelActsTakeTimes(a, p->t);
    }
    if (p->zero == 3)
        parDrop(p);
    LOOMCHECK(parAverage(p));
    /* The loss once per replica (last stage, TP rank 0, each part of the sequences 1/sp); main
     * weights it 1/dp. */
    stats->loss = p->last && p->tpIdx == 0 ? lossSum / p->m / p->sp : 0.0;
    stats->gradNormSq = parGradNormSq(p);
    replicaUpdate(&p->rep, &p->adam, step);
    if (p->zero == 1 || p->zero == 2) {
        uint64_t c0 = nowNs();
        size_t esz = dtypeSize(p->rep.bf16);
        LOOMCHECK(
            trainComm(p->t, p->zero == 1 ? "loomAllGather (ZeRO-1)" : "loomAllGather (ZeRO-2)",
                      loomAllGather((char *)p->rep.params + p->rep.shardLo * esz, p->rep.params,
                                    p->rep.shardN, dtypeLoom(p->rep.bf16), p->dpComm, NULL),
                      c0));
    }
    if (step > 1) {
        p->stepNs += nowNs() - t0;
    } else {
        p->waitNs = wait0;
    }
    return loomSuccess;
}

/*
 * The replicas of one (TP rank, stage) must agree bit for bit: each rank compares its hash with
 * its DP peers'; main's comparison across the world then sees 0 where they agree.
 */
static uint64_t parFingerprint(void *self)
{
    struct par *p = self;
    int n = p->dp * p->sp;
    uint64_t h = replicaHash(&p->rep), *all = calloc((size_t)n, sizeof(*all));
    int same = all != NULL;
    if (p->zero == 3) { /* the shards differ: compare the whole they make */
        same = same && parGather(p) == loomSuccess;
        if (same)
            h = hashBytes(HASH_INIT, p->whole, p->lay.total * dtypeSize(p->rep.bf16));
        parDrop(p);
    }
    if (same && n > 1)
        same = loomAllGather(&h, all, 1, loomUint64, p->dpComm, NULL) == loomSuccess;
    for (int i = 0; same && n > 1 && i < n; i++)
        same = all[i] == h;
    free(all);
    return same ? 0 : (uint64_t)p->t->rank + 1;
}

/* Every rank: the whole model's fp32 weights, each element put in by its one holder. */
static loomResult_t parCollect(void *self, struct finalState *out)
{
    struct par *p = self;
    const struct trainOptions *o = p->o;
    struct modelShape full = modelShapeOf(o);
    struct unitSpec head;
    modelHeadSpec(&full, &head);
    size_t total = (size_t)o->layers * p->blockFull + head.count;
    memset(out, 0, sizeof(*out));
    out->nweights = total;
    out->weights = calloc(total, sizeof(float));
    if (out->weights == NULL)
        return trainFail(p->t, loomSystemError, "out of memory for the final weights");
    for (int u = 0; u < p->lay.nunits; u++) {
        int head = p->last && u == p->lay.nunits - 1;
        float *to = out->weights +
                    (head ? (size_t)o->layers * p->blockFull : (size_t)(p->l0 + u) * p->blockFull);
        for (size_t i = 0; i < p->lay.spec[u].count; i++) {
            size_t e = p->lay.offset[u] + i;
            if (parHolds(p, e, parReplicated(p, u, i)))
                to[head ? i : p->map[i]] = replicaWeightAt(&p->rep, e);
        }
    }
    uint64_t t0 = nowNs();
    return trainComm(
        p->t, "loomAllReduce",
        loomAllReduce(out->weights, out->weights, total, loomFloat32, loomSum, p->t->comm, NULL),
        t0);
}

/* The pipeline's figures: the schedule's, beside what the stages measured. */
static loomResult_t parReport(void *self)
{
    struct par *p = self;
    /* from the first replica's first part of the sequences and TP rank 0 of each stage */
    double mine[4] = {(double)p->waitNs, (double)p->stepNs, p->ppIdx,
                      p->dpIdx == 0 && p->spIdx == 0 && p->tpIdx == 0},
           *all;
    if (p->pp == 1)
        return loomSuccess;
    all = calloc(4 * (size_t)p->t->nranks, sizeof(*all));
    if (all == NULL)
        return trainFail(p->t, loomSystemError, "out of memory");
    uint64_t t0 = nowNs();
    loomResult_t res = trainComm(p->t, "loomAllGather",
                                 loomAllGather(mine, all, 4, loomFloat64, p->t->comm, NULL), t0);
    if (res == loomSuccess && p->t->rank == 0) {
        struct scheduleFigures own, gp, fb;
        int onef1b = p->o->schedule == SCHEDULE_1F1B;
        if (scheduleFigures(onef1b, p->pp, p->m, &own) == 0 &&
            scheduleFigures(0, p->pp, p->m, &gp) == 0 &&
            scheduleFigures(1, p->pp, p->m, &fb) == 0) {
            printf("pipeline: %s, %d stages x %d micro-batches: the schedule idles each stage "
                   "%.1f%% of its time (played with forward 1, backward 2: idle/compute %.4f), "
                   "(p-1)/m = %.4f\n",
                   onef1b ? "1f1b" : "gpipe", p->pp, p->m, 100.0 * own.idle, own.bubble,
                   (double)(p->pp - 1) / p->m);
            printf("pipeline: activations in flight at most (stage 0): 1f1b %d micro-batches, "
                   "gpipe %d\n",
                   fb.peak0, gp.peak0);
        }
        printf("pipeline: measured share of the step each stage waited in loomSend/loomRecv "
               "(replica 0, TP rank 0, steps 2..):");
        for (int s = 0; s < p->pp; s++)
            for (int r = 0; r < p->t->nranks; r++) {
                const double *f = all + 4 * (size_t)r;
                if (f[3] != 0.0 && (int)f[2] == s)
                    printf(" stage %d %.1f%%", s, f[1] > 0 ? 100.0 * f[0] / f[1] : 0.0);
            }
        printf("\n");
    }
    free(all);
    return res;
}

static void parDestroy(void *self)
{
    struct par *p = self;
    struct ledger *l = &p->t->ledger;
    size_t rd = (size_t)p->mb * p->o->hidden * sizeof(float);
    for (int i = 0; p->slot != NULL && i < p->nslots; i++)
        if (p->slot[i].block != NULL)
            modelActsFree(&p->slot[i], &p->shape, l);
    free(p->slot);
    ledgerFree(l, LEDGER_TEMP, p->sendBuf, rd);
    ledgerFree(l, LEDGER_TEMP, p->recvBuf, rd);
    free(p->x);
    free(p->labels);
    if (p->acc != NULL)
        ledgerFree(l, LEDGER_TEMP, p->acc, p->lay.total * sizeof(float));
    parDrop(p);
    replicaFree(&p->rep, l);
    layoutFree(&p->lay);
    free(p->map);
    free(p->repl);
    free(p->ops);
    loomComm_t comms[] = {p->tpComm, p->ppComm, p->spComm, p->dpComm};
    for (int i = 0; i < 4; i++)
        if (comms[i] != NULL)
            loomCommDestroy(comms[i]);
    free(p);
}

/* Prints which transport this rank reaches each peer of comm with, the comm's ring and this
 * rank's links in its two trees (their transports among the peers'). */
static void printTransports(struct par *p, const char *name, loomComm_t comm)
{
    char line[512];
    int n, me, used = 0;
    loomCommCount(comm, &n);
    loomCommUserRank(comm, &me);
    used = snprintf(line, sizeof(line), "rank %d: %s communicator of %d:", p->t->rank, name, n);
    for (int peer = 0; peer < n && used < (int)sizeof(line) - 32; peer++) {
        loomPeerInfo_t info;
        if (peer == me || loomCommPeerInfo(comm, peer, &info) != loomSuccess)
            continue;
        used += snprintf(line + used, sizeof(line) - (size_t)used, " %d->%d %s (host %s)", me, peer,
                         info.transport != NULL ? info.transport : "none", info.hostname);
    }
    /* and its ring, as loom-info --comm prints it */
    int *ring = n > 1 ? calloc((size_t)n, sizeof(*ring)) : NULL;
    if (ring != NULL && used < (int)sizeof(line) - 16 && loomCommRing(comm, ring) == loomSuccess) {
        used += snprintf(line + used, sizeof(line) - (size_t)used, "; ring");
        for (int i = 0; i < n && used < (int)sizeof(line) - 16; i++)
            used += snprintf(line + used, sizeof(line) - (size_t)used, " %d", ring[i]);
    }
    free(ring);
    /* and this rank's place in its two trees: up (or root) and down */
    for (int t = 0; n > 1 && t < 2; t++) {
        int up, down[LOOM_TREE_MAX_DOWN], ndown = 0;
        if (used >= (int)sizeof(line) - 48 || loomCommTree(comm, t, me, &up, down, &ndown))
            break;
        used += up < 0
                    ? snprintf(line + used, sizeof(line) - (size_t)used, "; tree %d root", t)
                    : snprintf(line + used, sizeof(line) - (size_t)used, "; tree %d up %d", t, up);
        used += snprintf(line + used, sizeof(line) - (size_t)used, " down");
        for (int d = 0; d < ndown; d++)
            used += snprintf(line + used, sizeof(line) - (size_t)used, " %d", down[d]);
        if (ndown == 0)
            used += snprintf(line + used, sizeof(line) - (size_t)used, " -");
    }
    printf("%s\n", line);
}

/* The three communicators of this rank, split from the world. */
static loomResult_t parSplit(struct par *p)
{
    struct trainer *t = p->t;
    struct {
        loomComm_t *comm;
        int color, key;
        const char *name;
    } split[] = {{&p->tpComm, (p->dpIdx * p->pp + p->ppIdx) * p->sp + p->spIdx, p->tpIdx, "tp"},
                 {&p->ppComm, (p->dpIdx * p->sp + p->spIdx) * p->tp + p->tpIdx, p->ppIdx, "pp"},
                 {&p->spComm, (p->dpIdx * p->pp + p->ppIdx) * p->tp + p->tpIdx, p->spIdx, "sp"},
                 {&p->dpComm, p->ppIdx * p->tp + p->tpIdx, p->dpIdx * p->sp + p->spIdx, "dp"}};
    for (int i = 0; i < 4; i++) {
        uint64_t t0 = nowNs();
        LOOMCHECK(trainComm(
            t, "loomCommSplit",
            loomCommSplit(t->comm, split[i].color, split[i].key, split[i].comm, NULL), t0));
    }
    return loomSuccess;
}

static loomResult_t parPrintTransports(struct par *p)
{
    /* one rank at a time, so that the lines do not interleave */
    loomComm_t comms[] = {p->tpComm, p->ppComm, p->spComm, p->dpComm};
    const char *names[] = {"tp", "pp", "sp", "dp"};
    for (int r = 0; r < p->t->nranks; r++) {
        if (r == p->t->rank)
            for (int i = 0; i < 4; i++)
                printTransports(p, names[i], comms[i]);
        fflush(stdout);
        int32_t token = 0;
        uint64_t t0 = nowNs();
        LOOMCHECK(trainComm(p->t, "loomAllReduce",
                            loomAllReduce(&token, &token, 1, loomInt32, loomSum, p->t->comm, NULL),
                            t0));
    }
    return loomSuccess;
}

/*
 * This rank's position in the grid of dp x pp x sp x tp, from the hosts Loom
 * sees (numbered by their lowest rank). packed: the ranks host by host, so
 * that consecutive positions, a TP group, share a host wherever a host holds
 * whole groups, and the replicas, furthest apart in positions, cross hosts;
 * spread: the hosts in turn (the first rank of each host, then the second,
 * ...), so that a TP group crosses hosts, for comparison. *inside: whether
 * every rank of this rank's TP group is on its host.
 */
static loomResult_t parPlace(struct par *p, int *pos, int *inside)
{
    int n = p->t->nranks, me = p->t->rank;
    int *host = calloc((size_t)n, sizeof(int)), *local = calloc((size_t)n, sizeof(int));
    long *key = calloc((size_t)n, sizeof(long));
    if (host == NULL || local == NULL || key == NULL) {
        free(host), free(local), free(key);
        return trainFail(p->t, loomSystemError, "out of memory");
    }
    for (int r = 0; r < n; r++) {
        loomPeerInfo_t info;
        loomResult_t res = loomCommPeerInfo(p->t->comm, r, &info);
        if (res != loomSuccess) {
            free(host), free(local), free(key);
            return trainComm(p->t, "loomCommPeerInfo", res, nowNs());
        }
        host[r] = info.host;
        for (int q = 0; q < r; q++)
            local[r] += host[q] == host[r];
    }
    for (int r = 0; r < n; r++)
        key[r] = p->o->placement == PLACEMENT_SPREAD ? (long)local[r] * n + host[r]
                                                     : (long)host[r] * n + local[r];
    *pos = 0;
    for (int r = 0; r < n; r++)
        *pos += key[r] < key[me];
    /* the ranks of my TP group hold positions pos - pos % tp .. + tp - 1 */
    *inside = 1;
    for (int r = 0; r < n; r++) {
        int q = 0;
        for (int k = 0; k < n; k++)
            q += key[k] < key[r];
        if (q / p->tp == *pos / p->tp && host[r] != host[me])
            *inside = 0;
    }
    free(host), free(local), free(key);
    return loomSuccess;
}

/* Units of the stage, their layout and parameters: each block's part cut from the whole block. */
static loomResult_t parModel(struct par *p)
{
    const struct trainOptions *o = p->o;
    struct modelShape full = modelShapeOf(o);
    struct unitSpec blockFull, *specs;
    int nunits = p->l1 - p->l0 + p->last;
    modelBlockSpec(&full, 0, &blockFull);
    p->blockFull = blockFull.count;
    specs = calloc((size_t)nunits, sizeof(*specs));
    if (specs == NULL)
        return loomSystemError;
    for (int l = p->l0; l < p->l1; l++)
        modelBlockSpec(&p->shape, l, &specs[l - p->l0]);
    if (p->last)
        modelHeadSpec(&p->shape, &specs[nunits - 1]);
    loomResult_t res = layoutInit(&p->lay, specs, nunits, 1);
    size_t local = specs[0].count;
    free(specs);
    LOOMCHECK(res);
    if (p->zero) {
        /* ZeRO: the stage's flat buffer padded to a multiple of the dp x sp ranks, each of
         * which keeps the optimizer state of its 1/(dp sp) (from ZeRO-2 the gradients too,
         * under ZeRO-3 the parameters too) */
        size_t R = (size_t)p->dp * p->sp, shard = (p->lay.total + R - 1) / R;
        p->lay.total = shard * R;
        LOOMCHECK(replicaInitStage(&p->rep, &p->lay, o->bf16, o->seed, &p->t->ledger,
                                   (size_t)p->dpq * shard, shard, p->zero));
    } else {
        LOOMCHECK(replicaInit(&p->rep, &p->lay, o->bf16, o->seed, &p->t->ledger));
    }
    p->map = calloc(local, sizeof(*p->map));
    p->repl = calloc(p->lay.maxPadded, sizeof(*p->repl));
    float *whole = calloc(p->blockFull, sizeof(*whole)), *part = calloc(local, sizeof(*part));
    if (p->map == NULL || p->repl == NULL || whole == NULL || part == NULL) {
        free(whole);
        free(part);
        return loomSystemError;
    }
    modelBlockMap(&p->shape, p->map, p->repl);
    for (int l = p->l0; l < p->l1; l++) {
        blockFull.id = UNIT_ID_BLOCK(l);
        unitInitRange(&blockFull, o->seed, 0, p->blockFull, whole);
        for (size_t i = 0; i < local; i++)
            part[i] = whole[p->map[i]];
        replicaSet(&p->rep, l - p->l0, part);
    }
    free(whole);
    free(part);
    p->acc = ledgerAlloc(&p->t->ledger, LEDGER_TEMP, p->lay.total * sizeof(float));
    return p->acc != NULL ? loomSuccess : loomSystemError;
}

static loomResult_t parPipeline(struct par *p)
{
    struct ledger *l = &p->t->ledger;
    size_t rd = (size_t)p->mb * p->o->hidden * sizeof(float);
    p->nops = 2 * p->m;
    p->ops = calloc((size_t)p->nops, sizeof(*p->ops));
    if (p->ops == NULL)
        return loomSystemError;
    scheduleOps(p->o->schedule == SCHEDULE_1F1B, p->pp, p->ppIdx, p->m, p->ops);
    /* 1F1B never holds more than pp - s micro-batches; micro-batch k uses slot k mod nslots */
    p->nslots =
        p->o->schedule == SCHEDULE_1F1B && p->pp - p->ppIdx < p->m ? p->pp - p->ppIdx : p->m;
    p->slot = calloc((size_t)p->nslots, sizeof(*p->slot));
    p->sendBuf = ledgerAlloc(l, LEDGER_TEMP, rd);
    p->recvBuf = ledgerAlloc(l, LEDGER_TEMP, rd);
    if (p->slot == NULL || p->sendBuf == NULL || p->recvBuf == NULL)
        return loomSystemError;
    if (p->sp > 1) {
        p->x = calloc((size_t)p->o->batch / p->sp * p->o->hidden, sizeof(*p->x));
        p->labels = calloc((size_t)p->o->batch / p->sp, sizeof(*p->labels));
        if (p->x == NULL || p->labels == NULL)
            return loomSystemError;
    }
    for (int i = 0; i < p->nslots; i++)
        LOOMCHECK(modelActsInitPart(&p->slot[i], &p->shape, p->mb, p->l0, p->l1, p->last, l));
    modelActsNote(&p->shape, p->mb, p->l1 - p->l0, p->last, p->nslots, p->t);
    return loomSuccess;
}

loomResult_t parCreate(struct trainer *t, struct strategy *s)
{
    const struct trainOptions *o = t->opt;
    struct par *p = calloc(1, sizeof(*p));
    if (p == NULL)
        return trainFail(t, loomSystemError, "out of memory");
    p->t = t;
    p->o = o;
    p->tp = o->tp;
    p->pp = o->pp;
    p->sp = o->sp;
    p->dp = t->nranks / (o->tp * o->pp * o->sp);
    int pos = 0, inside = 0;
    loomResult_t res = parPlace(p, &pos, &inside);
    if (res != loomSuccess) {
        free(p);
        return res;
    }
    p->tpIdx = pos % p->tp;
    p->spIdx = pos / p->tp % p->sp;
    p->ppIdx = pos / (p->tp * p->sp) % p->pp;
    p->dpIdx = pos / (p->tp * p->sp * p->pp);
    p->dpq = p->dpIdx * p->sp + p->spIdx;
    p->zero = o->mode == MODE_DDP ? 0 : (int)o->mode - MODE_ZERO1 + 1;
    t->rowLo = (long)p->dpIdx * o->batch;
    p->l0 = p->ppIdx * o->layers / p->pp;
    p->l1 = (p->ppIdx + 1) * o->layers / p->pp;
    p->last = p->ppIdx == p->pp - 1;
    p->m = o->microbatches;
    p->mb = o->batch / o->microbatches / p->sp;
    p->shape = modelShapeOf(o);
    p->shape.tp = p->tp;
    p->shape.tpRank = p->tpIdx;
    p->shape.sp = p->sp;
    p->shape.seq = o->seq / p->sp;
    p->adam = (struct adamConfig){(float)o->lr, 0.9f, 0.999f, 1e-8f};
    p->hooks = (struct modelHooks){p,
                                   hookParams,
                                   hookRelease,
                                   hookGrads,
                                   hookReady,
                                   p->tp > 1 ? hookReduce : NULL,
                                   p->sp > 1 ? hookRing : NULL};
    res = parSplit(p);
    if (res != loomSuccess) {
        parDestroy(p);
        return res;
    }
    if (parModel(p) != loomSuccess || parPipeline(p) != loomSuccess) {
        parDestroy(p);
        return trainFail(t, loomSystemError, "out of memory for the model");
    }
    size_t psi = (size_t)o->layers * p->blockFull;
    struct unitSpec head;
    modelHeadSpec(&p->shape, &head);
    psi += head.count;
    /* bytes a parameter: bf16 2 + 2 + 12, fp32 4 + 4 + 8; ZeRO-1 shards the state over
     * R = dp x sp, ZeRO-2 the gradients too, ZeRO-3 the parameters too */
    double R = (double)p->dp * p->sp, w = o->bf16 ? 2.0 : 4.0, st = o->bf16 ? 12.0 : 8.0;
    double full = (p->zero < 3 ? w : 0) + (p->zero < 2 ? w : 0),
           part = (p->zero >= 3 ? w : 0) + (p->zero >= 2 ? w : 0) + st;
    double perParam = p->zero ? full + part / R : full + part;
    if (p->zero == 3)
        snprintf(p->formula, sizeof(p->formula), "%g/R Psi/(TP PP), R = dp sp", part);
    else if (p->zero)
        snprintf(p->formula, sizeof(p->formula), "(%g + %g/R) Psi/(TP PP), R = dp sp", full, part);
    else
        snprintf(p->formula, sizeof(p->formula), "16 Psi/(TP PP)");
    *s = (struct strategy){.self = p,
                           .step = parStep,
                           .fingerprint = parFingerprint,
                           .collect = parCollect,
                           .destroy = parDestroy,
                           .report = parReport,
                           .psi = psi,
                           .formula = p->formula,
                           .formulaBytes = perParam * (double)psi / (p->tp * p->pp)};
    if (t->rank == 0)
        printf("parallel: %d ranks = dp %d x pp %d x sp %d x tp %d (position = ((replica x pp + "
               "stage) x sp + part) x tp + tp index); blocks per stage %d..%d; %d micro-batch(es) "
               "of %d tokens a rank, schedule %s\n",
               t->nranks, p->dp, p->pp, p->sp, p->tp, o->layers / p->pp,
               (o->layers + p->pp - 1) / p->pp, p->m, p->mb,
               o->schedule == SCHEDULE_1F1B ? "1f1b" : "gpipe");
    int32_t all = inside;
    uint64_t t0 = nowNs();
    res = trainComm(t, "loomAllReduce",
                    loomAllReduce(&all, &all, 1, loomInt32, loomMin, t->comm, NULL), t0);
    if (res == loomSuccess && t->rank == 0)
        printf("parallel: placement %s: %s\n",
               o->placement == PLACEMENT_SPREAD ? "spread" : "packed",
               all ? "every TP group inside one host" : "TP groups across hosts");
    if (res == loomSuccess)
        res = parPrintTransports(p);
    if (res != loomSuccess) {
        parDestroy(p);
        return res;
    }
    return loomSuccess;
}
