/*
 * optim.c — Adam with fp32 master weights, bf16 conversion, and the
 * replicated parameter set.
 *
 * Mixed precision as large-model training does it: in bf16 mode the
 * parameters the passes read and the gradients they write (and that Loom
 * reduces) are bf16, 2 + 2 bytes a parameter, while the optimizer keeps
 * fp32 master weights, momentum and variance, 12 bytes: 16 in all, the
 * figure the ZeRO paper's accounting starts from. After each step the
 * master is rounded (to nearest even) into the bf16 parameters. In fp32 mode
 * parameters and gradients are fp32 and Adam updates the parameters in
 * place, also 16 bytes a parameter (4 + 4 + 8).
 *
 * Adam here is the original (Kingma & Ba) with bias correction and no
 * weight decay; every strategy, and the reference, runs this one function
 * element by element, so given equal gradients all of them take equal steps.
 */
#include <math.h>
#include <stdlib.h>

#include "optim.h"

void toFloat(const void *src, int bf16, size_t n, float *dst)
{
    if (!bf16) {
        memcpy(dst, src, n * sizeof(*dst));
        return;
    }
    const uint16_t *s = src;
    for (size_t i = 0; i < n; i++)
        dst[i] = bf16ToFloat(s[i]);
}

void fromFloat(const float *src, size_t n, int bf16, void *dst)
{
    if (!bf16) {
        memcpy(dst, src, n * sizeof(*src));
        return;
    }
    uint16_t *d = dst;
    for (size_t i = 0; i < n; i++)
        d[i] = floatToBf16(src[i]);
}

double sumSquares(const void *src, int bf16, size_t n)
{
    double s = 0.0;
    for (size_t i = 0; i < n; i++) {
        double v = bf16 ? bf16ToFloat(((const uint16_t *)src)[i]) : ((const float *)src)[i];
        s += v * v;
    }
    return s;
}

uint64_t hashBytes(uint64_t h, const void *p, size_t n)
{
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++) {
        h ^= b[i];
        h *= 0x100000001b3ULL;
    }
    return h;
}

void paramsInitRange(const struct unitSpec *u, uint64_t seed, size_t lo, size_t hi, int bf16,
                     void *params, float *master)
{
    if (!bf16) {
        unitInitRange(u, seed, lo, hi, params);
        return;
    }
    unitInitRange(u, seed, lo, hi, master);
    fromFloat(master, hi - lo, 1, params);
}

loomResult_t optimInit(struct optimState *o, int bf16, size_t n, struct ledger *l)
{
    memset(o, 0, sizeof(*o));
    o->bf16 = bf16;
    o->n = n;
    o->m = ledgerAlloc(l, LEDGER_OPTIM, n * sizeof(float));
    o->v = ledgerAlloc(l, LEDGER_OPTIM, n * sizeof(float));
    if (bf16)
        o->master = ledgerAlloc(l, LEDGER_OPTIM, n * sizeof(float));
    if (o->m == NULL || o->v == NULL || (bf16 && o->master == NULL)) {
        optimFree(o, l);
        return loomSystemError;
    }
    return loomSuccess;
}

void optimFree(struct optimState *o, struct ledger *l)
{
    ledgerFree(l, LEDGER_OPTIM, o->m, o->n * sizeof(float));
    ledgerFree(l, LEDGER_OPTIM, o->v, o->n * sizeof(float));
    ledgerFree(l, LEDGER_OPTIM, o->master, o->n * sizeof(float));
    memset(o, 0, sizeof(*o));
}

void optimStep(struct optimState *o, const struct adamConfig *c, long step, size_t lo, size_t n,
               void *params, const void *grads)
{
    float b1 = c->beta1, b2 = c->beta2, eps = c->eps;
    float c1 = (float)(1.0 - pow(c->beta1, (double)step));
    float c2 = (float)(1.0 - pow(c->beta2, (double)step));
    float *m = o->m + lo, *v = o->v + lo;
    float *w = o->bf16 ? o->master + lo : params;
    for (size_t i = 0; i < n; i++) {
        float g = o->bf16 ? bf16ToFloat(((const uint16_t *)grads)[i]) : ((const float *)grads)[i];
        m[i] = b1 * m[i] + (1.0f - b1) * g;
        v[i] = b2 * v[i] + (1.0f - b2) * g * g;
        float mhat = m[i] / c1, vhat = v[i] / c2;
        w[i] -= c->lr * mhat / (sqrtf(vhat) + eps);
    }
    if (o->bf16)
        fromFloat(w, n, 1, params);
}

void optimWeights(const struct optimState *o, size_t lo, size_t n, const void *params, float *out)
{
    memcpy(out, o->bf16 ? (const void *)(o->master + lo) : params, n * sizeof(*out));
}

/* ---- the replicated parameter set ---- */

loomResult_t replicaInit(struct replica *r, const struct unitLayout *lay, int bf16, uint64_t seed,
                         struct ledger *l)
{
    return replicaInitShard(r, lay, bf16, seed, l, 0, lay->total);
}

loomResult_t replicaInitShard(struct replica *r, const struct unitLayout *lay, int bf16,
                              uint64_t seed, struct ledger *l, size_t lo, size_t n)
{
    return replicaInitStage(r, lay, bf16, seed, l, lo, n, 1);
}

/* Elements the params (which 0) or grads (1) buffer holds. */
static size_t replicaHeld(const struct replica *r, int which)
{
    return (which ? r->shardGrads : r->shardParams) ? r->shardN : r->lay->total;
}

loomResult_t replicaInitStage(struct replica *r, const struct unitLayout *lay, int bf16,
                              uint64_t seed, struct ledger *l, size_t lo, size_t n, int stage)
{
    size_t esz = dtypeSize(bf16);
    float *init = NULL;
    memset(r, 0, sizeof(*r));
    r->bf16 = bf16;
    r->lay = lay;
    r->shardLo = lo;
    r->shardN = n;
    r->shardGrads = stage >= 2;
    r->shardParams = stage >= 3;
    r->params = ledgerAlloc(l, LEDGER_PARAMS, replicaHeld(r, 0) * esz);
    r->grads = ledgerAlloc(l, LEDGER_GRADS, replicaHeld(r, 1) * esz);
    if (r->params == NULL || r->grads == NULL || optimInit(&r->opt, bf16, n, l))
        goto fail_free;
    if (bf16) {
        r->viewP = ledgerAlloc(l, LEDGER_TEMP, lay->maxPadded * sizeof(float));
        r->viewG = ledgerAlloc(l, LEDGER_TEMP, lay->maxPadded * sizeof(float));
        if (r->viewP == NULL || r->viewG == NULL)
            goto fail_free;
    }
    if ((init = malloc((lay->maxPadded ? lay->maxPadded : 1) * sizeof(*init))) == NULL)
        goto fail_free;
    for (int u = 0; u < lay->nunits; u++) {
        unitInitRange(&lay->spec[u], seed, 0, lay->spec[u].count, init);
        replicaSet(r, u, init);
    }
    free(init);
    return loomSuccess;

fail_free:
    free(init);
    replicaFree(r, l);
    return loomSystemError;
}

void replicaFree(struct replica *r, struct ledger *l)
{
    if (r->lay == NULL)
        return;
    size_t esz = dtypeSize(r->bf16);
    ledgerFree(l, LEDGER_PARAMS, r->params, replicaHeld(r, 0) * esz);
    ledgerFree(l, LEDGER_GRADS, r->grads, replicaHeld(r, 1) * esz);
    if (r->opt.m != NULL || r->opt.v != NULL)
        optimFree(&r->opt, l);
    ledgerFree(l, LEDGER_TEMP, r->viewP, r->lay->maxPadded * sizeof(float));
    ledgerFree(l, LEDGER_TEMP, r->viewG, r->lay->maxPadded * sizeof(float));
    memset(r, 0, sizeof(*r));
}

loomResult_t replicaParams(struct replica *r, int unit, const float **p)
{
    const struct unitLayout *lay = r->lay;
    if (!r->bf16) {
        *p = (const float *)r->params + lay->offset[unit];
        return loomSuccess;
    }
    toFloat((const uint16_t *)r->params + lay->offset[unit], 1, lay->spec[unit].count, r->viewP);
    *p = r->viewP;
    return loomSuccess;
}

loomResult_t replicaGrads(struct replica *r, int unit, float **g)
{
    const struct unitLayout *lay = r->lay;
    if (!r->bf16) {
        *g = (float *)r->grads + lay->offset[unit];
        return loomSuccess;
    }
    r->gradHi = lay->spec[unit].count;
    *g = r->viewG;
    return loomSuccess;
}

void replicaReady(struct replica *r, int unit, size_t lo)
{
    if (!r->bf16 || lo >= r->gradHi)
        return;
    fromFloat(r->viewG + lo, r->gradHi - lo, 1, (uint16_t *)r->grads + r->lay->offset[unit] + lo);
    r->gradHi = lo;
}

void replicaUpdate(struct replica *r, const struct adamConfig *c, long step)
{
    size_t esz = dtypeSize(r->bf16);
    optimStep(&r->opt, c, step, 0, r->shardN,
              (char *)r->params + (r->shardParams ? 0 : r->shardLo) * esz,
              (const char *)r->grads + (r->shardGrads ? 0 : r->shardLo) * esz);
}

double replicaGradNormSq(const struct replica *r)
{
    return sumSquares(r->grads, r->bf16, r->lay->total);
}

uint64_t replicaHash(const struct replica *r)
{
    uint64_t h = hashBytes(HASH_INIT, r->params, replicaHeld(r, 0) * dtypeSize(r->bf16));
    if (r->bf16 && r->shardN == r->lay->total)
        h = hashBytes(h, r->opt.master, r->lay->total * sizeof(float));
    return h;
}

void replicaSet(struct replica *r, int unit, const float *w)
{
    size_t off = r->lay->offset[unit], count = r->lay->spec[unit].count;
    size_t lo = off > r->shardLo ? off : r->shardLo, hi = off + count;
    hi = hi < r->shardLo + r->shardN ? hi : r->shardLo + r->shardN;
    if (r->bf16 && lo < hi) /* the master of the part of the unit in the shard */
        memcpy(r->opt.master + (lo - r->shardLo), w + (lo - off), (hi - lo) * sizeof(*w));
    if (r->shardParams) {
        if (lo < hi)
            fromFloat(w + (lo - off), hi - lo, r->bf16,
                      (char *)r->params + (lo - r->shardLo) * dtypeSize(r->bf16));
        return;
    }
    fromFloat(w, count, r->bf16, (char *)r->params + off * dtypeSize(r->bf16));
}

float replicaWeightAt(const struct replica *r, size_t e)
{
    return r->bf16          ? r->opt.master[e - r->shardLo]
           : r->shardParams ? ((const float *)r->params)[e - r->shardLo]
                            : ((const float *)r->params)[e];
}

size_t replicaWeights(const struct replica *r, int u0, int u1, float *out)
{
    size_t n = 0, esz = dtypeSize(r->bf16);
    for (int u = u0; u < u1; u++) {
        size_t off = r->lay->offset[u], count = r->lay->spec[u].count;
        optimWeights(&r->opt, off, count, (const char *)r->params + off * esz, out + n);
        n += count;
    }
    return n;
}

size_t replicaStateBytes(const struct replica *r)
{
    size_t n = r->lay->total;
    return n * dtypeSize(r->bf16) + n * sizeof(float) * (r->bf16 ? 3 : 2);
}

/* The parts of the state, in the order they are saved: where each is and its size. */
static int replicaParts(const struct replica *r, void *parts[4], size_t sizes[4])
{
    size_t n = r->lay->total;
    int k = 0;
    parts[k] = r->params, sizes[k++] = n * dtypeSize(r->bf16);
    if (r->bf16)
        parts[k] = r->opt.master, sizes[k++] = n * sizeof(float);
    parts[k] = r->opt.m, sizes[k++] = n * sizeof(float);
    parts[k] = r->opt.v, sizes[k++] = n * sizeof(float);
    return k;
}

void replicaSave(const struct replica *r, void *buf)
{
    void *parts[4];
    size_t sizes[4];
    char *p = buf;
    for (int i = 0, k = replicaParts(r, parts, sizes); i < k; p += sizes[i], i++)
        memcpy(p, parts[i], sizes[i]);
}

void replicaRestore(struct replica *r, const void *buf)
{
    void *parts[4];
    size_t sizes[4];
    const char *p = buf;
    for (int i = 0, k = replicaParts(r, parts, sizes); i < k; p += sizes[i], i++)
        memcpy(parts[i], p, sizes[i]);
}
