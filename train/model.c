/*
 * model.c — the model: units of parameters, kernels, forward and backward.
 *
 * The model is a stack of pre-norm residual blocks and a classifier head:
 *
 *   x -> [ x + W2 gelu(W1 LN(x) + b1) + b2 ] x layers -> LN -> W x + b -> softmax CE
 *
 * Each block, and the head, is one *unit*: its tensors lie back to back, and
 * every strategy keeps, shards, gathers and reduces parameters and gradients
 * a unit at a time. The passes never touch parameter storage themselves: a
 * strategy lends them an fp32 view of each unit just before use and takes
 * each unit's gradients as soon as they are final (struct modelHooks), which
 * is where DDP launches its buckets and ZeRO-3 gathers and scatters.
 *
 * The kernels are plain C, written so the compiler can vectorise the inner
 * loops (weights input-major, so the forward and the weight gradient are
 * axpy loops, and dot products keep eight partial sums). They are
 * deterministic: the same inputs give the same bits in every process, so any
 * difference between ranks, or from the reference, comes from what was
 * communicated and in what order it was summed.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "data.h"
#include "model.h"

#define LN_EPS 1e-5f
#define ROW_TILE 4 /* rows sharing one pass over a weight row */

/* ---- units and layouts ---- */

void unitSpecAdd(struct unitSpec *u, size_t count, enum tensorInit init, int fanIn)
{
    struct tensorSpec *t = &u->tensor[u->ntensors++];
    t->count = count;
    t->init = init;
    t->fanIn = fanIn;
    u->count += count;
}

size_t unitTensorOffset(const struct unitSpec *u, int i)
{
    size_t off = 0;
    for (int k = 0; k < i; k++)
        off += u->tensor[k].count;
    return off;
}

void unitInitRange(const struct unitSpec *u, uint64_t seed, size_t lo, size_t hi, float *out)
{
    size_t start = 0;
    for (size_t e = lo; e < hi; e++)
        out[e - lo] = 0.0f;
    for (int i = 0; i < u->ntensors; i++) {
        const struct tensorSpec *t = &u->tensor[i];
        size_t end = start + t->count;
        size_t a = lo > start ? lo : start, b = hi < end ? hi : end;
        float scale = t->init == INIT_NORMAL ? 1.0f / sqrtf((float)t->fanIn) : 0.0f;
        for (size_t e = a; e < b; e++) {
            if (t->init == INIT_ONE)
                out[e - lo] = 1.0f;
            else if (t->init == INIT_NORMAL)
                out[e - lo] = (float)rngNormal(seed, u->id, e) * scale;
        }
        start = end;
    }
}

loomResult_t layoutInit(struct unitLayout *lay, const struct unitSpec *specs, int nunits, int pad)
{
    memset(lay, 0, sizeof(*lay));
    lay->nunits = nunits;
    lay->pad = pad;
    lay->spec = calloc((size_t)nunits, sizeof(*lay->spec));
    lay->offset = calloc((size_t)nunits, sizeof(*lay->offset));
    lay->padded = calloc((size_t)nunits, sizeof(*lay->padded));
    lay->shard = calloc((size_t)nunits, sizeof(*lay->shard));
    lay->shardOffset = calloc((size_t)nunits, sizeof(*lay->shardOffset));
    if (lay->spec == NULL || lay->offset == NULL || lay->padded == NULL || lay->shard == NULL ||
        lay->shardOffset == NULL) {
        layoutFree(lay);
        return loomSystemError;
    }
    for (int u = 0; u < nunits; u++) {
        lay->spec[u] = specs[u];
        lay->padded[u] = (specs[u].count + (size_t)pad - 1) / (size_t)pad * (size_t)pad;
        lay->shard[u] = lay->padded[u] / (size_t)pad;
        lay->offset[u] = lay->total;
        lay->shardOffset[u] = lay->shardTotal;
        lay->total += lay->padded[u];
        lay->shardTotal += lay->shard[u];
        lay->params += specs[u].count;
        if (lay->padded[u] > lay->maxPadded)
            lay->maxPadded = lay->padded[u];
    }
    return loomSuccess;
}

void layoutFree(struct unitLayout *lay)
{
    free(lay->spec);
    free(lay->offset);
    free(lay->padded);
    free(lay->shard);
    free(lay->shardOffset);
    memset(lay, 0, sizeof(*lay));
}

void modelBlockSpec(const struct modelShape *s, int layer, struct unitSpec *u)
{
    memset(u, 0, sizeof(*u));
    u->id = UNIT_ID_BLOCK(layer);
    unitSpecAdd(u, (size_t)s->hidden, INIT_ONE, 0);
    unitSpecAdd(u, (size_t)s->hidden, INIT_ZERO, 0);
    unitSpecAdd(u, (size_t)s->hidden * s->ffn, INIT_NORMAL, s->hidden);
    unitSpecAdd(u, (size_t)s->ffn, INIT_ZERO, 0);
    unitSpecAdd(u, (size_t)s->ffn * s->hidden, INIT_NORMAL, s->ffn);
    unitSpecAdd(u, (size_t)s->hidden, INIT_ZERO, 0);
}

void modelHeadSpec(const struct modelShape *s, struct unitSpec *u)
{
    memset(u, 0, sizeof(*u));
    u->id = UNIT_ID_HEAD;
    unitSpecAdd(u, (size_t)s->hidden, INIT_ONE, 0);
    unitSpecAdd(u, (size_t)s->hidden, INIT_ZERO, 0);
    unitSpecAdd(u, (size_t)s->hidden * s->classes, INIT_NORMAL, s->hidden);
    unitSpecAdd(u, (size_t)s->classes, INIT_ZERO, 0);
}

loomResult_t modelSpecs(const struct modelShape *s, struct unitSpec **specs, int *nunits)
{
    struct unitSpec *sp = calloc((size_t)s->layers + 1, sizeof(*sp));
    if (sp == NULL)
        return loomSystemError;
    for (int l = 0; l < s->layers; l++)
        modelBlockSpec(s, l, &sp[l]);
    modelHeadSpec(s, &sp[s->layers]);
    *specs = sp;
    *nunits = s->layers + 1;
    return loomSuccess;
}

/* ---- kernels ---- */

static float dot(const float *restrict a, const float *restrict b, int n)
{
    float acc[8] = {0};
    int i = 0;
    for (; i + 8 <= n; i += 8)
        for (int k = 0; k < 8; k++)
            acc[k] += a[i + k] * b[i + k];
    float tail = 0.0f;
    for (; i < n; i++)
        tail += a[i] * b[i];
    return ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7])) + tail;
}

/* Eight at a time so that -O2's cautious vectoriser takes the fixed-length inner loop. */
static void axpy(float *restrict y, float a, const float *restrict x, int n)
{
    int i = 0;
    for (; i + 8 <= n; i += 8)
        for (int k = 0; k < 8; k++)
            y[i + k] += a * x[i + k];
    for (; i < n; i++)
        y[i] += a * x[i];
}

void linearForward(const float *x, const float *w, const float *b, int rows, int in, int out,
                   float *y)
{
    for (int r0 = 0; r0 < rows; r0 += ROW_TILE) {
        int nr = rows - r0 < ROW_TILE ? rows - r0 : ROW_TILE;
        for (int r = r0; r < r0 + nr; r++) {
            if (b != NULL)
                memcpy(y + (size_t)r * out, b, (size_t)out * sizeof(*y));
            else
                memset(y + (size_t)r * out, 0, (size_t)out * sizeof(*y));
        }
        for (int i = 0; i < in; i++) {
            const float *wi = w + (size_t)i * out;
            for (int r = r0; r < r0 + nr; r++)
                axpy(y + (size_t)r * out, x[(size_t)r * in + i], wi, out);
        }
    }
}

void linearBackward(const float *x, const float *w, const float *dy, int rows, int in, int out,
                    float *dx, float *dw, float *db)
{
    if (dx != NULL) {
        for (int r0 = 0; r0 < rows; r0 += ROW_TILE) {
            int nr = rows - r0 < ROW_TILE ? rows - r0 : ROW_TILE;
            for (int i = 0; i < in; i++) {
                const float *wi = w + (size_t)i * out;
                for (int r = r0; r < r0 + nr; r++)
                    dx[(size_t)r * in + i] = dot(dy + (size_t)r * out, wi, out);
            }
        }
    }
    for (int i = 0; i < in; i++) {
        float *dwi = dw + (size_t)i * out;
        for (int r = 0; r < rows; r++)
            axpy(dwi, x[(size_t)r * in + i], dy + (size_t)r * out, out);
    }
    if (db != NULL)
        for (int r = 0; r < rows; r++)
            axpy(db, 1.0f, dy + (size_t)r * out, out);
}

void layerNormForward(const float *x, const float *g, const float *b, int rows, int d, float *y,
                      float *mean, float *rstd)
{
    for (int r = 0; r < rows; r++) {
        const float *xr = x + (size_t)r * d;
        float *yr = y + (size_t)r * d;
        float sum = 0.0f, var = 0.0f;
        for (int i = 0; i < d; i++)
            sum += xr[i];
        float mu = sum / (float)d;
        for (int i = 0; i < d; i++)
            var += (xr[i] - mu) * (xr[i] - mu);
        float rs = 1.0f / sqrtf(var / (float)d + LN_EPS);
        for (int i = 0; i < d; i++)
            yr[i] = (xr[i] - mu) * rs * g[i] + b[i];
        mean[r] = mu;
        rstd[r] = rs;
    }
}

void layerNormBackward(const float *x, const float *g, const float *mean, const float *rstd,
                       const float *dy, int rows, int d, float *dx, float *dg, float *db)
{
    for (int r = 0; r < rows; r++) {
        const float *xr = x + (size_t)r * d, *dyr = dy + (size_t)r * d;
        float *dxr = dx + (size_t)r * d;
        float mu = mean[r], rs = rstd[r], m1 = 0.0f, m2 = 0.0f;
        for (int i = 0; i < d; i++) {
            float xhat = (xr[i] - mu) * rs, dxhat = dyr[i] * g[i];
            dg[i] += dyr[i] * xhat;
            db[i] += dyr[i];
            m1 += dxhat;
            m2 += dxhat * xhat;
        }
        m1 /= (float)d;
        m2 /= (float)d;
        for (int i = 0; i < d; i++) {
            float xhat = (xr[i] - mu) * rs;
            dxr[i] += rs * (dyr[i] * g[i] - m1 - xhat * m2);
        }
    }
}

#define GELU_K0 0.7978845608028654f /* sqrt(2 / pi) */
#define GELU_K1 0.044715f

static void geluForward(const float *x, size_t n, float *y)
{
    for (size_t i = 0; i < n; i++) {
        float v = x[i];
        y[i] = 0.5f * v * (1.0f + tanhf(GELU_K0 * (v + GELU_K1 * v * v * v)));
    }
}

/* dx = dy * gelu'(x); dx may be dy. */
static void geluBackward(const float *x, const float *dy, size_t n, float *dx)
{
    for (size_t i = 0; i < n; i++) {
        float v = x[i], t = tanhf(GELU_K0 * (v + GELU_K1 * v * v * v));
        float d = 0.5f * (1.0f + t) +
                  0.5f * v * (1.0f - t * t) * GELU_K0 * (1.0f + 3.0f * GELU_K1 * v * v);
        dx[i] = dy[i] * d;
    }
}

void mlpForward(const float *p, int d, int f, const float *x, int rows, float *a, float *h,
                float *out)
{
    const float *w1 = p, *b1 = w1 + (size_t)d * f, *w2 = b1 + f, *b2 = w2 + (size_t)f * d;
    linearForward(x, w1, b1, rows, d, f, a);
    geluForward(a, (size_t)rows * f, h);
    linearForward(h, w2, b2, rows, f, d, out);
}

void mlpBackward(const float *p, int d, int f, const float *x, const float *a, const float *h,
                 const float *dout, int rows, float *g, float *dx, float *dh)
{
    const float *w1 = p, *w2 = p + (size_t)d * f + f;
    float *gw1 = g, *gb1 = gw1 + (size_t)d * f, *gw2 = gb1 + f, *gb2 = gw2 + (size_t)f * d;
    linearBackward(h, w2, dout, rows, f, d, dh, gw2, gb2);
    geluBackward(a, dh, (size_t)rows * f, dh);
    linearBackward(x, w1, dh, rows, d, f, dx, gw1, gb1);
}

/* ---- head ---- */

double headForward(const struct modelShape *s, const float *p, const int *labels, int rows,
                   struct headActs *a)
{
    int d = s->hidden, c = s->classes;
    const float *g = p, *b = p + d, *w = p + 2 * d, *bias = w + (size_t)d * c;
    double loss = 0.0;
    layerNormForward(a->x, g, b, rows, d, a->u, a->mean, a->rstd);
    linearForward(a->u, w, bias, rows, d, c, a->probs);
    for (int r = 0; r < rows; r++) {
        float *pr = a->probs + (size_t)r * c, mx = pr[0], sum = 0.0f;
        for (int k = 1; k < c; k++)
            mx = pr[k] > mx ? pr[k] : mx;
        for (int k = 0; k < c; k++) {
            pr[k] = expf(pr[k] - mx);
            sum += pr[k];
        }
        for (int k = 0; k < c; k++)
            pr[k] /= sum;
        loss -= log((double)pr[labels[r]] + 1e-30);
    }
    return loss / rows;
}

void headBackward(const struct modelShape *s, const float *p, const int *labels, int rows,
                  double scale, struct headActs *a, float *g, float *dx, float *du)
{
    int d = s->hidden, c = s->classes;
    const float *gamma = p, *w = p + 2 * d;
    float *dlogits = a->probs + (size_t)rows * c; /* the second half of the probs buffer */
    float f = (float)(scale / rows);
    for (int r = 0; r < rows; r++)
        for (int k = 0; k < c; k++)
            dlogits[(size_t)r * c + k] =
                (a->probs[(size_t)r * c + k] - (k == labels[r] ? 1.0f : 0.0f)) * f;
    linearBackward(a->u, w, dlogits, rows, d, c, du, g + 2 * d, g + 2 * d + (size_t)d * c);
    memset(dx, 0, (size_t)rows * d * sizeof(*dx));
    layerNormBackward(a->x, gamma, a->mean, a->rstd, du, rows, d, dx, g, g + d);
}

loomResult_t headActsInit(struct headActs *a, const struct modelShape *s, int rows,
                          struct ledger *l)
{
    size_t rd = (size_t)rows * s->hidden * sizeof(float), r1 = (size_t)rows * sizeof(float);
    a->x = ledgerAlloc(l, LEDGER_ACTS, rd);
    a->u = ledgerAlloc(l, LEDGER_ACTS, rd);
    a->mean = ledgerAlloc(l, LEDGER_ACTS, r1);
    a->rstd = ledgerAlloc(l, LEDGER_ACTS, r1);
    a->probs = ledgerAlloc(l, LEDGER_ACTS, 2 * (size_t)rows * s->classes * sizeof(float));
    if (a->x == NULL || a->u == NULL || a->mean == NULL || a->rstd == NULL || a->probs == NULL) {
        headActsFree(a, s, rows, l);
        return loomSystemError;
    }
    return loomSuccess;
}

void headActsFree(struct headActs *a, const struct modelShape *s, int rows, struct ledger *l)
{
    size_t rd = (size_t)rows * s->hidden * sizeof(float), r1 = (size_t)rows * sizeof(float);
    ledgerFree(l, LEDGER_ACTS, a->x, rd);
    ledgerFree(l, LEDGER_ACTS, a->u, rd);
    ledgerFree(l, LEDGER_ACTS, a->mean, r1);
    ledgerFree(l, LEDGER_ACTS, a->rstd, r1);
    ledgerFree(l, LEDGER_ACTS, a->probs, 2 * (size_t)rows * s->classes * sizeof(float));
    memset(a, 0, sizeof(*a));
}

/* ---- the dense model's activations and passes ---- */

loomResult_t modelActsInit(struct modelActs *a, const struct modelShape *s, int rows,
                           struct ledger *l)
{
    size_t rd = (size_t)rows * s->hidden * sizeof(float), r1 = (size_t)rows * sizeof(float);
    size_t rf = (size_t)rows * s->ffn * sizeof(float);
    memset(a, 0, sizeof(*a));
    a->rows = rows;
    a->block = calloc((size_t)s->layers, sizeof(*a->block));
    if (a->block == NULL)
        return loomSystemError;
    for (int i = 0; i < s->layers; i++) {
        struct blockActs *b = &a->block[i];
        b->x = ledgerAlloc(l, LEDGER_ACTS, rd);
        b->u = ledgerAlloc(l, LEDGER_ACTS, rd);
        b->mean = ledgerAlloc(l, LEDGER_ACTS, r1);
        b->rstd = ledgerAlloc(l, LEDGER_ACTS, r1);
        b->a = ledgerAlloc(l, LEDGER_ACTS, rf);
        b->h = ledgerAlloc(l, LEDGER_ACTS, rf);
        if (b->x == NULL || b->u == NULL || b->mean == NULL || b->rstd == NULL || b->a == NULL ||
            b->h == NULL)
            goto fail_free;
    }
    if (headActsInit(&a->head, s, rows, l) != loomSuccess)
        goto fail_free;
    a->dx = ledgerAlloc(l, LEDGER_TEMP, rd);
    a->dy = ledgerAlloc(l, LEDGER_TEMP, rd);
    a->du = ledgerAlloc(l, LEDGER_TEMP, rd);
    a->dh = ledgerAlloc(l, LEDGER_TEMP, rf);
    if (a->dx == NULL || a->dy == NULL || a->du == NULL || a->dh == NULL)
        goto fail_free;
    return loomSuccess;

fail_free:
    modelActsFree(a, s, l);
    return loomSystemError;
}

void modelActsFree(struct modelActs *a, const struct modelShape *s, struct ledger *l)
{
    size_t rd = (size_t)a->rows * s->hidden * sizeof(float), r1 = (size_t)a->rows * sizeof(float);
    size_t rf = (size_t)a->rows * s->ffn * sizeof(float);
    for (int i = 0; a->block != NULL && i < s->layers; i++) {
        struct blockActs *b = &a->block[i];
        ledgerFree(l, LEDGER_ACTS, b->x, rd);
        ledgerFree(l, LEDGER_ACTS, b->u, rd);
        ledgerFree(l, LEDGER_ACTS, b->mean, r1);
        ledgerFree(l, LEDGER_ACTS, b->rstd, r1);
        ledgerFree(l, LEDGER_ACTS, b->a, rf);
        ledgerFree(l, LEDGER_ACTS, b->h, rf);
    }
    if (a->head.x != NULL)
        headActsFree(&a->head, s, a->rows, l);
    ledgerFree(l, LEDGER_TEMP, a->dx, rd);
    ledgerFree(l, LEDGER_TEMP, a->dy, rd);
    ledgerFree(l, LEDGER_TEMP, a->du, rd);
    ledgerFree(l, LEDGER_TEMP, a->dh, rf);
    free(a->block);
    memset(a, 0, sizeof(*a));
}

static void blockForward(const struct modelShape *s, const float *p, struct blockActs *b, int rows,
                         float *out)
{
    int d = s->hidden;
    layerNormForward(b->x, p, p + d, rows, d, b->u, b->mean, b->rstd);
    mlpForward(p + 2 * d, d, s->ffn, b->u, rows, b->a, b->h, out);
    for (size_t i = 0; i < (size_t)rows * d; i++)
        out[i] += b->x[i];
}

loomResult_t modelForward(const struct modelShape *s, const struct modelHooks *h,
                          struct modelActs *a, const float *x, const int *labels, double *loss)
{
    const float *p;
    size_t rowBytes = (size_t)a->rows * s->hidden * sizeof(float);
    memcpy(s->layers > 0 ? a->block[0].x : a->head.x, x, rowBytes);
    for (int l = 0; l < s->layers; l++) {
        float *out = l + 1 < s->layers ? a->block[l + 1].x : a->head.x;
        LOOMCHECK(h->params(h->ctx, l, &p));
        blockForward(s, p, &a->block[l], a->rows, out);
        LOOMCHECK(h->release(h->ctx, l));
    }
    LOOMCHECK(h->params(h->ctx, s->layers, &p));
    *loss = headForward(s, p, labels, a->rows, &a->head);
    return h->release(h->ctx, s->layers);
}

static loomResult_t unitGrads(const struct modelHooks *h, int unit, size_t count, float **g)
{
    LOOMCHECK(h->grads(h->ctx, unit, g));
    memset(*g, 0, count * sizeof(**g));
    return loomSuccess;
}

loomResult_t modelBackward(const struct modelShape *s, const struct modelHooks *h,
                           struct modelActs *a, const int *labels)
{
    int d = s->hidden, rows = a->rows;
    struct unitSpec spec;
    const float *p;
    float *g, *dy = a->dy, *dx = a->dx;

    modelHeadSpec(s, &spec);
    LOOMCHECK(h->params(h->ctx, s->layers, &p));
    LOOMCHECK(unitGrads(h, s->layers, spec.count, &g));
    headBackward(s, p, labels, rows, 1.0, &a->head, g, dy, a->du);
    LOOMCHECK(h->ready(h->ctx, s->layers, 0));
    LOOMCHECK(h->release(h->ctx, s->layers));

    modelBlockSpec(s, 0, &spec);
    for (int l = s->layers - 1; l >= 0; l--) {
        struct blockActs *b = &a->block[l];
        LOOMCHECK(h->params(h->ctx, l, &p));
        LOOMCHECK(unitGrads(h, l, spec.count, &g));
        mlpBackward(p + 2 * d, d, s->ffn, b->u, b->a, b->h, dy, rows, g + 2 * d, a->du, a->dh);
        LOOMCHECK(h->ready(h->ctx, l, 2 * (size_t)d));
        memcpy(dx, dy, (size_t)rows * d * sizeof(*dx)); /* the residual path */
        layerNormBackward(b->x, p, b->mean, b->rstd, a->du, rows, d, dx, g, g + d);
        LOOMCHECK(h->ready(h->ctx, l, 0));
        LOOMCHECK(h->release(h->ctx, l));
        float *t = dy;
        dy = dx;
        dx = t;
    }
    return loomSuccess;
}
