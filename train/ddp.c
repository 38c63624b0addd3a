/*
 * ddp.c — data parallelism: gradients averaged by bucketed AllReduce,
 * overlapped with backward.
 *
 * Every rank holds the whole model and optimizer state (16 bytes a
 * parameter) and trains on its own shard of the batch; after backward the
 * gradients are averaged over ranks, so every rank takes the same Adam step
 * and the parameters stay bit for bit identical (main checks a hash of them
 * every --verify-every steps).
 *
 * The gradient buffer is cut into buckets of about --bucket-mb, whole
 * tensors each, counted from the end because backward produces the last
 * unit's gradients first (PyTorch's DistributedDataParallel does the same):
 *
 *   flat gradients: [ block0 | block1 | ... | blockL-1 | head ]
 *   buckets:          ...   ][  bucket 1  ][   bucket 0     ]   launch order 0, 1, ...
 *
 * As backward marks gradients final (modelHooks.ready), the frontier below
 * which gradients are still being computed moves down; each bucket wholly
 * above it is handed at once to loomAllReduce(loomAvg) on a host stream,
 * whose progress thread runs it while backward goes on with earlier units.
 * After backward one loomStreamSynchronize waits for the tail. With
 * --no-overlap the same buckets are reduced, blocking, after backward, so
 * both runs give identical results and differ only in time.
 * --compare-overlap alternates the two step by step (odd steps overlapped),
 * so that a comparison of their times on a shared machine sees the same
 * background load in both.
 *
 * --elastic: the state is saved before each step (16 bytes a parameter more,
 * and a copy of it a step), so that after a rank dies the survivors, whatever
 * part of the step each had finished, all go back to the same state and redo
 * the step on a smaller communicator (ddpRegroup). They re-divide the same
 * global batch; where it does not divide evenly, each scales its mean
 * gradient by rows x N / global rows before the average, so the average is
 * still the mean over the global batch.
 */
#include <stdio.h>
#include <stdlib.h>

#include "optim.h"

struct bucket {
    size_t lo, hi; /* elements of the flat gradient buffer */
};

struct ddp {
    struct trainer *t;
    struct modelShape shape;
    struct unitLayout lay;
    struct replica rep;
    struct modelActs acts;
    struct adamConfig adam;
    struct modelHooks hooks;
    loomStream_t stream;  /* NULL with --no-overlap */
    loomStream_t current; /* this step's: the stream, or NULL for the blocking way */
    struct bucket *buckets;
    int nbuckets, launched;
    double gradScale; /* rows x nranks / global rows: 1 unless the rows are uneven */
    void *saved;      /* --elastic: the state at the start of the step */
    size_t savedBytes;
};

/* Cuts [0, total) into buckets of at least capBytes, whole tensors, from the end. */
static loomResult_t ddpBuckets(struct ddp *d, size_t capBytes)
{
    const struct unitLayout *lay = &d->lay;
    size_t esz = dtypeSize(d->rep.bf16), hi = lay->total, ntensors = 0;
    for (int u = 0; u < lay->nunits; u++)
        ntensors += (size_t)lay->spec[u].ntensors;
    d->buckets = calloc(ntensors, sizeof(*d->buckets));
    if (d->buckets == NULL)
        return loomSystemError;
    for (int u = lay->nunits - 1; u >= 0; u--) {
        for (int i = lay->spec[u].ntensors - 1; i >= 0; i--) {
            size_t lo = lay->offset[u] + unitTensorOffset(&lay->spec[u], i);
            if ((hi - lo) * esz >= capBytes || lo == 0) {
                d->buckets[d->nbuckets].lo = lo;
                d->buckets[d->nbuckets].hi = hi;
                d->nbuckets++;
                hi = lo;
            }
        }
    }
    return loomSuccess;
}

static void ddpScale(struct ddp *d, void *p, size_t n)
{
    float f = (float)d->gradScale;
    for (size_t i = 0; i < n; i++) {
        if (d->rep.bf16)
            ((uint16_t *)p)[i] = floatToBf16(bf16ToFloat(((uint16_t *)p)[i]) * f);
        else
            ((float *)p)[i] *= f;
    }
}

static loomResult_t ddpLaunch(struct ddp *d, loomStream_t stream)
{
    const struct bucket *b = &d->buckets[d->launched++];
    void *p = (char *)d->rep.grads + b->lo * dtypeSize(d->rep.bf16);
    if (d->gradScale != 1.0)
        ddpScale(d, p, b->hi - b->lo);
    uint64_t t0 = nowNs();
    return trainComm(
        d->t, "loomAllReduce",
        loomAllReduce(p, p, b->hi - b->lo, dtypeLoom(d->rep.bf16), loomAvg, d->t->comm, stream),
        t0);
}

static loomResult_t hookParams(void *ctx, int unit, const float **p)
{
    return replicaParams(&((struct ddp *)ctx)->rep, unit, p);
}

static loomResult_t hookRelease(void *ctx, int unit)
{
    return loomSuccess;
}

static loomResult_t hookGrads(void *ctx, int unit, float **g)
{
    return replicaGrads(&((struct ddp *)ctx)->rep, unit, g);
}

static loomResult_t hookReady(void *ctx, int unit, size_t lo)
{
    struct ddp *d = ctx;
    size_t frontier = d->lay.offset[unit] + lo;
    replicaReady(&d->rep, unit, lo);
    while (d->current != NULL && d->launched < d->nbuckets &&
           d->buckets[d->launched].lo >= frontier)
        LOOMCHECK(ddpLaunch(d, d->current));
    return loomSuccess;
}

/* After backward: reduce what is left (everything with --no-overlap), wait for the stream. */
static loomResult_t ddpFinish(struct ddp *d)
{
    while (d->launched < d->nbuckets)
        LOOMCHECK(ddpLaunch(d, d->current));
    if (d->current != NULL) {
        uint64_t t0 = nowNs();
        LOOMCHECK(trainComm(d->t, "loomStreamSynchronize", loomStreamSynchronize(d->current), t0));
    }
    return loomSuccess;
}

static loomResult_t ddpStep(void *self, long step, const float *x, const int *labels,
                            struct stepStats *stats)
{
    struct ddp *d = self;
    d->launched = 0;
    d->current = d->t->opt->overlap == OVERLAP_ALTERNATE && step % 2 == 0 ? NULL : d->stream;
    LOOMCHECK(modelForward(&d->shape, &d->hooks, &d->acts, x, labels, &stats->loss));
    LOOMCHECK(modelBackward(&d->shape, &d->hooks, &d->acts, labels));
    modelActsTakeTimes(&d->acts, d->t);
    LOOMCHECK(ddpFinish(d));
    /* every rank holds the whole averaged gradient: each contributes 1/N of its norm */
    stats->gradNormSq = replicaGradNormSq(&d->rep) / d->t->nranks;
    replicaUpdate(&d->rep, &d->adam, step);
    return loomSuccess;
}

static uint64_t ddpFingerprint(void *self)
{
    return replicaHash(&((struct ddp *)self)->rep);
}

static loomResult_t ddpCollect(void *self, struct finalState *out)
{
    struct ddp *d = self;
    memset(out, 0, sizeof(*out));
    out->nweights = d->lay.params;
    out->weights = calloc(out->nweights, sizeof(float));
    if (out->weights == NULL)
        return trainFail(d->t, loomSystemError, "out of memory for the final weights");
    replicaWeights(&d->rep, 0, d->lay.nunits, out->weights);
    return loomSuccess;
}

static void ddpSave(void *self)
{
    struct ddp *d = self;
    if (d->saved == NULL) {
        d->savedBytes = replicaStateBytes(&d->rep);
        d->saved = ledgerAlloc(&d->t->ledger, LEDGER_TEMP, d->savedBytes);
    }
    if (d->saved != NULL)
        replicaSave(&d->rep, d->saved);
}

static loomResult_t ddpRegroup(void *self)
{
    struct ddp *d = self;
    struct trainer *t = d->t;
    if (d->saved == NULL)
        return trainFail(t, loomSystemError, "elastic: no saved state to go back to");
    replicaRestore(&d->rep, d->saved);
    d->gradScale = (double)t->rows * t->nranks / (double)t->globalRows;
    if (d->acts.rows != t->rows) {
        modelActsFree(&d->acts, &d->shape, &t->ledger);
        if (modelActsInit(&d->acts, &d->shape, t->rows, &t->ledger) != loomSuccess)
            return trainFail(t, loomSystemError, "out of memory for %d rows of activations",
                             t->rows);
    }
    /* The stream holds the error of the failed step; a new one starts clean. */
    if (d->stream != NULL) {
        loomStreamDestroy(d->stream);
        d->stream = NULL;
        LOOMCHECK(trainComm(t, "loomStreamCreate", loomStreamCreate(&d->stream), nowNs()));
    }
    return loomSuccess;
}

static loomResult_t ddpAdopt(void *self)
{
    struct ddp *d = self;
    struct trainer *t = d->t;
    if (d->saved == NULL)
        ddpSave(self); /* a replacement: a buffer of the right size, overwritten below */
    if (d->saved == NULL)
        return trainFail(t, loomSystemError, "elastic: out of memory for the state");
    LOOMCHECK(trainComm(
        t, "loomBroadcast",
        loomBroadcast(d->saved, d->saved, d->savedBytes, loomUint8, 0, t->comm, NULL), nowNs()));
    return ddpRegroup(self);
}

static void ddpDestroy(void *self)
{
    struct ddp *d = self;
    ledgerFree(&d->t->ledger, LEDGER_TEMP, d->saved, d->savedBytes);
    if (d->stream != NULL)
        loomStreamDestroy(d->stream);
    modelActsFree(&d->acts, &d->shape, &d->t->ledger);
    replicaFree(&d->rep, &d->t->ledger);
    layoutFree(&d->lay);
    free(d->buckets);
    free(d);
}

loomResult_t ddpCreate(struct trainer *t, struct strategy *s)
{
    const struct trainOptions *o = t->opt;
    struct unitSpec *specs = NULL;
    int nunits;
    struct ddp *d = calloc(1, sizeof(*d));
    if (d == NULL)
        return trainFail(t, loomSystemError, "out of memory");
    d->t = t;
    d->gradScale = 1.0;
    d->shape = modelShapeOf(o);
    d->adam = (struct adamConfig){(float)o->lr, 0.9f, 0.999f, 1e-8f};
    d->hooks = (struct modelHooks){d, hookParams, hookRelease, hookGrads, hookReady, NULL, NULL};
    if (modelSpecs(&d->shape, &specs, &nunits) != loomSuccess ||
        layoutInit(&d->lay, specs, nunits, 1) != loomSuccess ||
        replicaInit(&d->rep, &d->lay, o->bf16, o->seed, &t->ledger) != loomSuccess ||
        modelActsInit(&d->acts, &d->shape, t->rows, &t->ledger) != loomSuccess ||
        ddpBuckets(d, (size_t)(o->bucketMb * 1024 * 1024)) != loomSuccess) {
        free(specs);
        ddpDestroy(d);
        return trainFail(t, loomSystemError, "out of memory for the model");
    }
    free(specs);
    modelActsNote(&d->shape, t->rows, o->layers, 1, 1, t);
    if (o->overlap != OVERLAP_NEVER) {
        loomResult_t res = loomStreamCreate(&d->stream);
        if (res != loomSuccess) {
            ddpDestroy(d);
            return trainComm(t, "loomStreamCreate", res, nowNs());
        }
    }
    *s = (struct strategy){.self = d,
                           .step = ddpStep,
                           .fingerprint = ddpFingerprint,
                           .collect = ddpCollect,
                           .destroy = ddpDestroy,
                           .regroup = ddpRegroup,
                           .save = ddpSave,
                           .adopt = ddpAdopt,
                           .psi = d->lay.params,
                           .formula = "16 Psi",
                           .formulaBytes = 16.0 * (double)d->lay.params};
    if (t->rank == 0)
        printf("ddp: %d bucket(s) of about %.3g MiB, %s\n", d->nbuckets, o->bucketMb,
               o->overlap == OVERLAP_ALWAYS
                   ? "each AllReduced on a host stream as soon as backward completes it"
               : o->overlap == OVERLAP_NEVER
                   ? "AllReduced after backward (--no-overlap)"
                   : "odd steps overlapped, even steps not (--compare-overlap)");
    return loomSuccess;
}
