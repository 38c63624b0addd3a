/*
 * zero.c — ZeRO stages 1, 2 and 3: model state sharded across ranks.
 *
 * ZeRO (Rajbhandari et al., 2020) removes the redundancy of data
 * parallelism. Each unit of the model (a block, the head) is padded to a
 * multiple of N elements and cut into N equal shards; rank r owns shard r of
 * every unit and keeps the optimizer state (fp32 master, momentum, variance)
 * only for what it owns.
 *
 *   stage 1  optimizer state sharded. Gradients are computed in full; after
 *            backward each unit's gradient is ReduceScattered in place, so
 *            rank r holds the average of its shard; r updates its shard and
 *            an in-place AllGather per unit gives every rank the new
 *            parameters.                        model state (2 + 2) Psi + 12 Psi / N
 *   stage 2  gradients sharded too: each unit's gradient goes to a
 *            temporary unit buffer and is ReduceScattered into the rank's
 *            gradient shard as soon as backward completes the unit.
 *                                               2 Psi + (2 + 12) Psi / N
 *   stage 3  parameters sharded too: before a unit is used, in forward and
 *            again in backward, its shards are AllGathered into a temporary
 *            unit buffer, which is released (reused by the next unit) after
 *            use.                               (2 + 2 + 12) Psi / N
 *
 * (Bytes for bf16; in fp32 mode 4 + 4 + 8.) The temporary unit buffers, and
 * in bf16 mode the fp32 views the passes compute with, are the "peak
 * temporaries" of the ledger, outside the model-state formula.
 *
 * Every collective here is blocking: each is issued where the data it needs
 * is complete and its result is needed next. The step is the same as DDP's
 * in arithmetic: gradients averaged over ranks (loomAvg), one Adam step.
 */
#include <stdio.h>
#include <stdlib.h>

#include "optim.h"

struct zero {
    struct trainer *t;
    int stage, bf16;
    size_t esz;
    struct modelShape shape;
    struct unitLayout lay; /* units padded to a multiple of N */
    void *params;          /* stages 1, 2: lay.total; stage 3: lay.shardTotal */
    void *grads;           /* stage 1: lay.total; stages 2, 3: lay.shardTotal */
    struct optimState opt; /* lay.shardTotal */
    void *unitParams;      /* stage 3: one gathered unit */
    void *unitGrads;       /* stages 2, 3: one unit's full gradient */
    float *viewP, *viewG;  /* bf16: fp32 views of one unit */
    size_t gradHi;
    struct modelActs acts;
    struct adamConfig adam;
    struct modelHooks hooks;
    char formula[48];
};

static void *at(void *base, size_t elems, size_t esz)
{
    return (char *)base + elems * esz;
}

/* Where the rank's shard of unit u lies in the parameter and gradient buffers. */
static void *paramShard(struct zero *z, int u)
{
    size_t e = z->stage == 3 ? z->lay.shardOffset[u]
                             : z->lay.offset[u] + (size_t)z->t->rank * z->lay.shard[u];
    return at(z->params, e, z->esz);
}

static void *gradShard(struct zero *z, int u)
{
    size_t e = z->stage == 1 ? z->lay.offset[u] + (size_t)z->t->rank * z->lay.shard[u]
                             : z->lay.shardOffset[u];
    return at(z->grads, e, z->esz);
}

/* The full (padded) gradient buffer of unit u that backward writes. */
static void *unitGradBuffer(struct zero *z, int u)
{
    return z->stage == 1 ? at(z->grads, z->lay.offset[u], z->esz) : z->unitGrads;
}

static loomResult_t zeroReduceScatter(struct zero *z, int u, const void *full, void *shard)
{
    uint64_t t0 = nowNs();
    return trainComm(z->t, "loomReduceScatter",
                     loomReduceScatter(full, shard, z->lay.shard[u], dtypeLoom(z->bf16), loomAvg,
                                       z->t->comm, NULL),
                     t0);
}

static loomResult_t zeroAllGather(struct zero *z, const void *shard, void *full, size_t count,
                                  loomDataType_t dt)
{
    uint64_t t0 = nowNs();
    return trainComm(z->t, "loomAllGather", loomAllGather(shard, full, count, dt, z->t->comm, NULL),
                     t0);
}

static loomResult_t hookParams(void *ctx, int u, const float **p)
{
    struct zero *z = ctx;
    const void *full = at(z->params, z->lay.offset[u], z->esz);
    if (z->stage == 3) {
        LOOMCHECK(
            zeroAllGather(z, paramShard(z, u), z->unitParams, z->lay.shard[u], dtypeLoom(z->bf16)));
        full = z->unitParams;
    }
    if (!z->bf16) {
        *p = full;
        return loomSuccess;
    }
    toFloat(full, 1, z->lay.spec[u].count, z->viewP);
    *p = z->viewP;
    return loomSuccess;
}

static loomResult_t hookRelease(void *ctx, int u)
{
    return loomSuccess; /* stage 3: the next unit's gather reuses the buffer */
}

static loomResult_t hookGrads(void *ctx, int u, float **g)
{
    struct zero *z = ctx;
    void *full = unitGradBuffer(z, u);
    /* padding past the unit's count must be zero in what is reduced */
    memset(at(full, z->lay.spec[u].count, z->esz), 0,
           (z->lay.padded[u] - z->lay.spec[u].count) * z->esz);
    z->gradHi = z->lay.spec[u].count;
    *g = z->bf16 ? z->viewG : full;
    return loomSuccess;
}

static loomResult_t hookReady(void *ctx, int u, size_t lo)
{
    struct zero *z = ctx;
    void *full = unitGradBuffer(z, u);
    if (z->bf16 && lo < z->gradHi)
        fromFloat(z->viewG + lo, z->gradHi - lo, 1, at(full, lo, z->esz));
    z->gradHi = lo;
    if (lo == 0 && z->stage >= 2)
        return zeroReduceScatter(z, u, full, gradShard(z, u));
    return loomSuccess;
}

static loomResult_t zeroStep(void *self, long step, const float *x, const int *labels,
                             struct stepStats *stats)
{
    struct zero *z = self;
    const struct unitLayout *lay = &z->lay;
    LOOMCHECK(modelForward(&z->shape, &z->hooks, &z->acts, x, labels, &stats->loss));
    LOOMCHECK(modelBackward(&z->shape, &z->hooks, &z->acts, labels));
    modelActsTakeTimes(&z->acts, z->t);
    stats->gradNormSq = 0.0;
    for (int u = 0; u < lay->nunits; u++) {
        if (z->stage == 1) /* in place: the rank's shard of the unit's full gradient */
            LOOMCHECK(
                zeroReduceScatter(z, u, at(z->grads, lay->offset[u], z->esz), gradShard(z, u)));
        stats->gradNormSq += sumSquares(gradShard(z, u), z->bf16, lay->shard[u]);
        optimStep(&z->opt, &z->adam, step, lay->shardOffset[u], lay->shard[u], paramShard(z, u),
                  gradShard(z, u));
        if (z->stage < 3) /* in place: every rank's updated shard into the full parameters */
            LOOMCHECK(zeroAllGather(z, paramShard(z, u), at(z->params, lay->offset[u], z->esz),
                                    lay->shard[u], dtypeLoom(z->bf16)));
    }
    return loomSuccess;
}

/* Stages 1 and 2: the full parameters (the master and its moments are sharded). */
static uint64_t zeroFingerprint(void *self)
{
    struct zero *z = self;
    return hashBytes(HASH_INIT, z->params, z->lay.total * z->esz);
}

/* Gathers each unit's fp32 weights (master, or fp32 parameters) from every rank's shard. */
static loomResult_t zeroCollect(void *self, struct finalState *out)
{
    struct zero *z = self;
    const struct unitLayout *lay = &z->lay;
    float *shard = calloc(lay->maxPadded / (size_t)lay->pad, sizeof(float));
    float *full = calloc(lay->maxPadded, sizeof(float));
    memset(out, 0, sizeof(*out));
    out->weights = calloc(lay->params, sizeof(float));
    if (shard == NULL || full == NULL || out->weights == NULL) {
        free(shard);
        free(full);
        return trainFail(z->t, loomSystemError, "out of memory for the final weights");
    }
    for (int u = 0; u < lay->nunits; u++) {
        optimWeights(&z->opt, lay->shardOffset[u], lay->shard[u], paramShard(z, u), shard);
        loomResult_t res = zeroAllGather(z, shard, full, lay->shard[u], loomFloat32);
        if (res != loomSuccess) {
            free(shard);
            free(full);
            return res;
        }
        memcpy(out->weights + out->nweights, full, lay->spec[u].count * sizeof(float));
        out->nweights += lay->spec[u].count;
    }
    free(shard);
    free(full);
    return loomSuccess;
}

static void zeroDestroy(void *self)
{
    struct zero *z = self;
    struct ledger *l = &z->t->ledger;
    size_t full = z->lay.total * z->esz, shard = z->lay.shardTotal * z->esz;
    size_t unit = z->lay.maxPadded * z->esz, view = z->lay.maxPadded * sizeof(float);
    modelActsFree(&z->acts, &z->shape, l);
    ledgerFree(l, LEDGER_PARAMS, z->params, z->stage == 3 ? shard : full);
    ledgerFree(l, LEDGER_GRADS, z->grads, z->stage == 1 ? full : shard);
    if (z->opt.m != NULL)
        optimFree(&z->opt, l);
    ledgerFree(l, LEDGER_TEMP, z->unitParams, unit);
    ledgerFree(l, LEDGER_TEMP, z->unitGrads, unit);
    ledgerFree(l, LEDGER_TEMP, z->viewP, view);
    ledgerFree(l, LEDGER_TEMP, z->viewG, view);
    layoutFree(&z->lay);
    free(z);
}

static loomResult_t zeroAllocate(struct zero *z)
{
    struct ledger *l = &z->t->ledger;
    const struct unitLayout *lay = &z->lay;
    size_t full = lay->total * z->esz, shard = lay->shardTotal * z->esz;
    z->params = ledgerAlloc(l, LEDGER_PARAMS, z->stage == 3 ? shard : full);
    z->grads = ledgerAlloc(l, LEDGER_GRADS, z->stage == 1 ? full : shard);
    if (z->params == NULL || z->grads == NULL ||
        optimInit(&z->opt, z->bf16, lay->shardTotal, l) != loomSuccess)
        return loomSystemError;
    if (z->stage == 3 &&
        (z->unitParams = ledgerAlloc(l, LEDGER_TEMP, lay->maxPadded * z->esz)) == NULL)
        return loomSystemError;
    if (z->stage >= 2 &&
        (z->unitGrads = ledgerAlloc(l, LEDGER_TEMP, lay->maxPadded * z->esz)) == NULL)
        return loomSystemError;
    if (z->bf16) {
        z->viewP = ledgerAlloc(l, LEDGER_TEMP, lay->maxPadded * sizeof(float));
        z->viewG = ledgerAlloc(l, LEDGER_TEMP, lay->maxPadded * sizeof(float));
        if (z->viewP == NULL || z->viewG == NULL)
            return loomSystemError;
    }
    return loomSuccess;
}

/*
 * Every rank makes the initial values of what it holds, from the same seed:
 * whole units (stages 1, 2) and the master of its shards (bf16), or only its
 * shards (stage 3).
 */
static void zeroInitParams(struct zero *z, uint64_t seed)
{
    const struct unitLayout *lay = &z->lay;
    for (int u = 0; u < lay->nunits; u++) {
        size_t lo = (size_t)z->t->rank * lay->shard[u], n = lay->shard[u];
        float *master = z->bf16 ? z->opt.master + lay->shardOffset[u] : NULL;
        void *full = at(z->params, lay->offset[u], z->esz);
        if (z->stage == 3) {
            paramsInitRange(&lay->spec[u], seed, lo, lo + n, z->bf16, paramShard(z, u), master);
        } else if (!z->bf16) {
            unitInitRange(&lay->spec[u], seed, 0, lay->padded[u], full);
        } else {
            unitInitRange(&lay->spec[u], seed, 0, lay->padded[u], z->viewP);
            fromFloat(z->viewP, lay->padded[u], 1, full);
            memcpy(master, z->viewP + lo, n * sizeof(*master));
        }
    }
}

loomResult_t zeroCreate(struct trainer *t, int stage, struct strategy *s)
{
    const struct trainOptions *o = t->opt;
    struct unitSpec *specs = NULL;
    int nunits;
    struct zero *z = calloc(1, sizeof(*z));
    if (z == NULL)
        return trainFail(t, loomSystemError, "out of memory");
    z->t = t;
    z->stage = stage;
    z->bf16 = o->bf16;
    z->esz = dtypeSize(o->bf16);
    z->shape = modelShapeOf(o);
    z->adam = (struct adamConfig){(float)o->lr, 0.9f, 0.999f, 1e-8f};
    z->hooks = (struct modelHooks){z, hookParams, hookRelease, hookGrads, hookReady, NULL, NULL};
    if (modelSpecs(&z->shape, &specs, &nunits) != loomSuccess ||
        layoutInit(&z->lay, specs, nunits, t->nranks) != loomSuccess || zeroAllocate(z) ||
        modelActsInit(&z->acts, &z->shape, o->batch, &t->ledger) != loomSuccess) {
        free(specs);
        zeroDestroy(z);
        return trainFail(t, loomSystemError, "out of memory for the model");
    }
    free(specs);
    zeroInitParams(z, o->seed);
    modelActsNote(&z->shape, o->batch, o->layers, 1, 1, t);

    double psi = (double)z->lay.params, n = t->nranks, pg = (double)z->esz;
    double opt = 16.0 - 2.0 * pg; /* bytes of optimizer state a parameter: 12 bf16, 8 fp32 */
    double bytes[4] = {0, 2 * pg * psi + opt * psi / n, pg * psi + (pg + opt) * psi / n,
                       16.0 * psi / n};
    if (stage == 1)
        snprintf(z->formula, sizeof(z->formula), "%g Psi + %g Psi/N", 2 * pg, opt);
    else if (stage == 2)
        snprintf(z->formula, sizeof(z->formula), "%g Psi + %g Psi/N", pg, pg + opt);
    else
        snprintf(z->formula, sizeof(z->formula), "16 Psi/N");
    *s = (struct strategy){.self = z,
                           .step = zeroStep,
                           .fingerprint = stage < 3 ? zeroFingerprint : NULL,
                           .collect = zeroCollect,
                           .destroy = zeroDestroy,
                           .psi = z->lay.params,
                           .formula = z->formula,
                           .formulaBytes = bytes[stage]};
    return loomSuccess;
}
