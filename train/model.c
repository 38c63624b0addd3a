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

struct modelShape modelShapeOf(const struct trainOptions *o)
{
    return (struct modelShape){o->layers, o->hidden, o->ffn, o->classes, o->heads,
                               o->seq,    1,         0,      1,          o->checkpoint};
}

void modelBlockSpec(const struct modelShape *s, int layer, struct unitSpec *u)
{
    size_t d = (size_t)s->hidden, f = (size_t)s->ffn / shapeTp(s), dl = d / shapeTp(s);
    memset(u, 0, sizeof(*u));
    u->id = UNIT_ID_BLOCK(layer);
    if (s->heads > 0) {
        unitSpecAdd(u, d, INIT_ONE, 0);
        unitSpecAdd(u, d, INIT_ZERO, 0);
        unitSpecAdd(u, d * 3 * dl, INIT_NORMAL, s->hidden);
        unitSpecAdd(u, dl * d, INIT_NORMAL, s->hidden);
        unitSpecAdd(u, d, INIT_ZERO, 0);
    }
    unitSpecAdd(u, d, INIT_ONE, 0);
    unitSpecAdd(u, d, INIT_ZERO, 0);
    unitSpecAdd(u, d * f, INIT_NORMAL, s->hidden);
    unitSpecAdd(u, f, INIT_ZERO, 0);
    unitSpecAdd(u, f * d, INIT_NORMAL, s->ffn);
    unitSpecAdd(u, d, INIT_ZERO, 0);
}

size_t modelAttnCount(const struct modelShape *s)
{
    size_t d = (size_t)s->hidden, dl = d / shapeTp(s);
    return s->heads > 0 ? 2 * d + 3 * d * dl + dl * d + d : 0;
}

/* How a tensor of the block is split over TP ranks. */
enum splitKind {
    SPLIT_NONE,    /* replicated */
    SPLIT_COLUMNS, /* rows x (parts x width): each part's columns [r w/tp, (r+1) w/tp) */
    SPLIT_ROWS     /* (rows) x width: rows [r rows/tp, (r+1) rows/tp) */
};

struct splitTensor {
    enum splitKind kind;
    size_t rows, parts, width; /* width: of a part (columns) or of a row (rows, none) */
};

void modelBlockMap(const struct modelShape *s, size_t *full, unsigned char *repl)
{
    int tp = shapeTp(s), r = s->tpRank;
    size_t d = (size_t)s->hidden, f = (size_t)s->ffn;
    struct splitTensor t[UNIT_MAX_TENSORS];
    int n = 0;
    if (s->heads > 0) {
        t[n++] = (struct splitTensor){SPLIT_NONE, 1, 1, d};
        t[n++] = (struct splitTensor){SPLIT_NONE, 1, 1, d};
        t[n++] = (struct splitTensor){SPLIT_COLUMNS, d, 3, d};
        t[n++] = (struct splitTensor){SPLIT_ROWS, d, 1, d};
        t[n++] = (struct splitTensor){SPLIT_NONE, 1, 1, d};
    }
    t[n++] = (struct splitTensor){SPLIT_NONE, 1, 1, d};
    t[n++] = (struct splitTensor){SPLIT_NONE, 1, 1, d};
    t[n++] = (struct splitTensor){SPLIT_COLUMNS, d, 1, f};
    t[n++] = (struct splitTensor){SPLIT_COLUMNS, 1, 1, f};
    t[n++] = (struct splitTensor){SPLIT_ROWS, f, 1, d};
    t[n++] = (struct splitTensor){SPLIT_NONE, 1, 1, d};
    size_t e = 0, base = 0;
    for (int i = 0; i < n; i++) {
        size_t rows = t[i].rows, parts = t[i].parts, w = t[i].width;
        if (t[i].kind == SPLIT_NONE) {
            for (size_t k = 0; k < w; k++, e++) {
                full[e] = base + k;
                if (repl != NULL)
                    repl[e] = 1;
            }
        } else if (t[i].kind == SPLIT_COLUMNS) {
            size_t wl = w / (size_t)tp;
            for (size_t row = 0; row < rows; row++)
                for (size_t p = 0; p < parts; p++)
                    for (size_t k = 0; k < wl; k++, e++) {
                        full[e] = base + row * parts * w + p * w + (size_t)r * wl + k;
                        if (repl != NULL)
                            repl[e] = 0;
                    }
        } else {
            size_t rl = rows / (size_t)tp;
            for (size_t k = 0; k < rl * w; k++, e++) {
                full[e] = base + (size_t)r * rl * w + k;
                if (repl != NULL)
                    repl[e] = 0;
            }
        }
        base += rows * parts * w;
    }
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

/* ---- attention ---- */

/*
 * Self-attention of each sequence of s->seq rows, over this rank's heads: qkv
 * holds rows of [queries | keys | values], each heads x (hidden / heads)
 * wide; probs[(row x heads + h) x seq + j] keeps the softmax weights, ctx the
 * heads' outputs side by side.
 */
static void attnForward(const struct modelShape *s, const float *qkv, int rows, float *probs,
                        float *ctx)
{
    int S = s->seq, dh = s->hidden / s->heads, hl = s->heads / shapeTp(s), dl = hl * dh;
    int w = 3 * dl;
    float scale = 1.0f / sqrtf((float)dh);
    memset(ctx, 0, (size_t)rows * dl * sizeof(*ctx));
    for (int r = 0; r < rows; r++) {
        const float *seq = qkv + (size_t)(r - r % S) * w;
        for (int h = 0; h < hl; h++) {
            const float *q = qkv + (size_t)r * w + h * dh;
            float *pr = probs + ((size_t)r * hl + h) * S, mx, sum = 0.0f;
            for (int j = 0; j < S; j++)
                pr[j] = dot(q, seq + (size_t)j * w + dl + h * dh, dh) * scale;
            mx = pr[0];
            for (int j = 1; j < S; j++)
                mx = pr[j] > mx ? pr[j] : mx;
            for (int j = 0; j < S; j++) {
                pr[j] = expf(pr[j] - mx);
                sum += pr[j];
            }
            for (int j = 0; j < S; j++) {
                pr[j] /= sum;
                axpy(ctx + (size_t)r * dl + h * dh, pr[j], seq + (size_t)j * w + 2 * dl + h * dh,
                     dh);
            }
        }
    }
}

/* dqkv (overwritten) from dctx; dp is seq floats of scratch. */
static void attnBackward(const struct modelShape *s, const float *qkv, const float *probs,
                         const float *dctx, int rows, float *dqkv, float *dp)
{
    int S = s->seq, dh = s->hidden / s->heads, hl = s->heads / shapeTp(s), dl = hl * dh;
    int w = 3 * dl;
    float scale = 1.0f / sqrtf((float)dh);
    memset(dqkv, 0, (size_t)rows * w * sizeof(*dqkv));
    for (int r = 0; r < rows; r++) {
        size_t first = (size_t)(r - r % S) * w;
        const float *seq = qkv + first;
        float *dseq = dqkv + first;
        for (int h = 0; h < hl; h++) {
            const float *q = qkv + (size_t)r * w + h * dh, *dc = dctx + (size_t)r * dl + h * dh;
            const float *pr = probs + ((size_t)r * hl + h) * S;
            float *dq = dqkv + (size_t)r * w + h * dh, sum = 0.0f;
            for (int j = 0; j < S; j++) {
                dp[j] = dot(dc, seq + (size_t)j * w + 2 * dl + h * dh, dh);
                axpy(dseq + (size_t)j * w + 2 * dl + h * dh, pr[j], dc, dh);
                sum += pr[j] * dp[j];
            }
            for (int j = 0; j < S; j++) {
                float ds = pr[j] * (dp[j] - sum) * scale;
                axpy(dq, ds, seq + (size_t)j * w + dl + h * dh, dh);
                axpy(dseq + (size_t)j * w + dl + h * dh, ds, q, dh);
            }
        }
    }
}

/*
 * Ring attention (sequence parallelism): this rank holds s->seq tokens of
 * each sequence, the other sp - 1 parts are on the other ranks of the ring.
 * The keys and values of each part go once around the ring; each rank
 * attends its queries to every part as it passes, with a softmax kept
 * online (a running maximum and sum, the output rescaled when the maximum
 * grows). Without a mask the order of the parts does not matter. Kept for
 * backward: the output and the log of each softmax's sum (probs).
 */
static loomResult_t ringForward(const struct modelShape *s, const struct modelHooks *hk,
                                struct modelActs *a, const float *qkv, int rows, float *lse,
                                float *ctx)
{
    int S = s->seq, dh = s->hidden / s->heads, hl = s->heads / shapeTp(s), dl = hl * dh;
    int w = 3 * dl, kw = 2 * dl;
    float scale = 1.0f / sqrtf((float)dh), *cur = a->kvA, *next = a->kvB, *sum = a->runSum;
    for (int r = 0; r < rows; r++)
        memcpy(cur + (size_t)r * kw, qkv + (size_t)r * w + dl, (size_t)kw * sizeof(*cur));
    memset(ctx, 0, (size_t)rows * dl * sizeof(*ctx));
    for (size_t i = 0; i < (size_t)rows * hl; i++) {
        lse[i] = -INFINITY; /* the running maximum until the end */
        sum[i] = 0.0f;
    }
    for (int t = 0; t < s->sp; t++) {
        for (int r = 0; r < rows; r++) {
            const float *blk = cur + (size_t)(r - r % S) * kw;
            for (int h = 0; h < hl; h++) {
                const float *q = qkv + (size_t)r * w + h * dh;
                float *o = ctx + (size_t)r * dl + h * dh, *m = lse + (size_t)r * hl + h;
                float *l = sum + (size_t)r * hl + h, mx = *m;
                for (int j = 0; j < S; j++) {
                    a->dp[j] = dot(q, blk + (size_t)j * kw + h * dh, dh) * scale;
                    mx = a->dp[j] > mx ? a->dp[j] : mx;
                }
                float corr = expf(*m - mx);
                *l *= corr;
                for (int i = 0; i < dh; i++)
                    o[i] *= corr;
                for (int j = 0; j < S; j++) {
                    float e = expf(a->dp[j] - mx);
                    *l += e;
                    axpy(o, e, blk + (size_t)j * kw + dl + h * dh, dh);
                }
                *m = mx;
            }
        }
        if (t + 1 < s->sp) {
            LOOMCHECK(hk->ring(hk->ctx, cur, next, (size_t)rows * kw));
            float *tmp = cur;
            cur = next;
            next = tmp;
        }
    }
    for (size_t i = 0; i < (size_t)rows * hl; i++) {
        float inv = 1.0f / sum[i];
        for (int k = 0; k < dh; k++)
            ctx[i * dh + k] *= inv;
        lse[i] += logf(sum[i]);
    }
    return loomSuccess;
}

/*
 * Its backward: the parts go round again with their key and value gradients,
 * which every rank adds to as they pass; after sp moves each part is home
 * with the whole of its gradients. The softmax weights are recomputed from
 * the scores and the saved log-sums.
 */
static loomResult_t ringBackward(const struct modelShape *s, const struct modelHooks *hk,
                                 struct modelActs *a, const float *qkv, const float *lse,
                                 const float *ctx, const float *dctx, int rows, float *dqkv)
{
    int S = s->seq, dh = s->hidden / s->heads, hl = s->heads / shapeTp(s), dl = hl * dh;
    int w = 3 * dl, kw = 4 * dl;
    float scale = 1.0f / sqrtf((float)dh), *cur = a->kvA, *next = a->kvB, *D = a->runSum;
    memset(dqkv, 0, (size_t)rows * w * sizeof(*dqkv));
    memset(cur, 0, (size_t)rows * kw * sizeof(*cur));
    for (int r = 0; r < rows; r++)
        memcpy(cur + (size_t)r * kw, qkv + (size_t)r * w + dl, 2 * (size_t)dl * sizeof(*cur));
    for (size_t i = 0; i < (size_t)rows * hl; i++)
        D[i] = dot(dctx + i * dh, ctx + i * dh, dh);
    for (int t = 0; t < s->sp; t++) {
        for (int r = 0; r < rows; r++) {
            float *blk = cur + (size_t)(r - r % S) * kw;
            for (int h = 0; h < hl; h++) {
                size_t rh = (size_t)r * hl + h;
                const float *q = qkv + (size_t)r * w + h * dh, *dc = dctx + rh * dh;
                float *dq = dqkv + (size_t)r * w + h * dh;
                for (int j = 0; j < S; j++) {
                    float *kj = blk + (size_t)j * kw + h * dh;
                    float p = expf(dot(q, kj, dh) * scale - lse[rh]);
                    float ds = p * (dot(dc, kj + dl, dh) - D[rh]) * scale;
                    axpy(kj + 3 * dl, p, dc, dh);
                    axpy(dq, ds, kj, dh);
                    axpy(kj + 2 * dl, ds, q, dh);
                }
            }
        }
        LOOMCHECK(hk->ring(hk->ctx, cur, next, (size_t)rows * kw));
        float *tmp = cur;
        cur = next;
        next = tmp;
    }
    for (int r = 0; r < rows; r++)
        memcpy(dqkv + (size_t)r * w + dl, cur + (size_t)r * kw + 2 * dl,
               2 * (size_t)dl * sizeof(*dqkv));
    return loomSuccess;
}

/* ---- the dense model's activations and passes ---- */

static size_t attnWidth(const struct modelShape *s)
{
    return (size_t)s->hidden / shapeTp(s);
}

/* The sizes of one block's activation buffers, in bytes. */
struct actSizes {
    size_t rd, r1, rf, qkv, probs, ctx;
};

static struct actSizes actSizes(const struct modelShape *s, int rows)
{
    size_t r = (size_t)rows, dl = attnWidth(s), hl = s->heads > 0 ? s->heads / shapeTp(s) : 0;
    return (struct actSizes){r * s->hidden * sizeof(float),
                             r * sizeof(float),
                             r * (s->ffn / shapeTp(s)) * sizeof(float),
                             r * 3 * dl * sizeof(float),
                             r * hl * (s->sp > 1 ? 1 : s->seq) * sizeof(float),
                             r * dl * sizeof(float)};
}

/* Allocates (alloc) or frees one block's activations; NULL pointers are skipped on free. */
static int blockActsAlloc(struct blockActs *b, const struct modelShape *s, int rows, int alloc,
                          struct ledger *l)
{
    struct actSizes z = actSizes(s, rows);
    int attn = s->heads > 0;
    struct {
        float **p;
        size_t bytes;
    } bufs[] = {{&b->x, z.rd},
                {&b->u, z.rd},
                {&b->mean, z.r1},
                {&b->rstd, z.r1},
                {&b->a, z.rf},
                {&b->h, z.rf},
                {&b->y, attn ? z.rd : 0},
                {&b->meanA, attn ? z.r1 : 0},
                {&b->rstdA, attn ? z.r1 : 0},
                {&b->ua, attn ? z.rd : 0},
                {&b->qkv, attn ? z.qkv : 0},
                {&b->probs, attn ? z.probs : 0},
                {&b->ctx, attn ? z.ctx : 0}};
    int ok = 1;
    for (size_t i = 0; i < sizeof(bufs) / sizeof(bufs[0]); i++) {
        if (bufs[i].bytes == 0)
            continue;
        if (alloc) {
            *bufs[i].p = ledgerAlloc(l, LEDGER_ACTS, bufs[i].bytes);
            ok &= *bufs[i].p != NULL;
        } else if (*bufs[i].p != NULL) {
            ledgerFree(l, LEDGER_ACTS, *bufs[i].p, bufs[i].bytes);
        }
    }
    if (!attn)
        b->y = b->x;
    return ok;
}

loomResult_t modelActsInitPart(struct modelActs *a, const struct modelShape *s, int rows, int l0,
                               int l1, int head, struct ledger *l)
{
    struct actSizes z = actSizes(s, rows);
    memset(a, 0, sizeof(*a));
    a->rows = rows;
    a->l0 = l0;
    a->l1 = l1;
    a->hasHead = head;
    a->checkpoint = s->checkpoint > 0 && s->checkpoint < l1 - l0 ? s->checkpoint : 0;
    int kept = a->checkpoint ? a->checkpoint : l1 - l0;
    a->block = calloc((size_t)(kept > 0 ? kept : 1), sizeof(*a->block));
    if (a->block == NULL)
        return loomSystemError;
    for (int i = 0; i < kept; i++)
        if (!blockActsAlloc(&a->block[i], s, rows, 1, l))
            goto fail_free;
    if (a->checkpoint) {
        a->nseg = (l1 - l0 + a->checkpoint - 1) / a->checkpoint;
        a->seg = calloc((size_t)a->nseg, sizeof(*a->seg));
        if (a->seg == NULL)
            goto fail_free;
        for (int k = 0; k < a->nseg; k++)
            if ((a->seg[k] = ledgerAlloc(l, LEDGER_ACTS, z.rd)) == NULL)
                goto fail_free;
        if ((a->scratch = ledgerAlloc(l, LEDGER_TEMP, z.rd)) == NULL)
            goto fail_free;
    }
    if (head && headActsInit(&a->head, s, rows, l) != loomSuccess)
        goto fail_free;
    a->dx = ledgerAlloc(l, LEDGER_TEMP, z.rd);
    a->dy = ledgerAlloc(l, LEDGER_TEMP, z.rd);
    a->du = ledgerAlloc(l, LEDGER_TEMP, z.rd);
    a->dh = ledgerAlloc(l, LEDGER_TEMP, z.rf);
    if (a->dx == NULL || a->dy == NULL || a->du == NULL || a->dh == NULL)
        goto fail_free;
    if (s->heads > 0) {
        a->dyy = ledgerAlloc(l, LEDGER_TEMP, z.rd);
        a->dqkv = ledgerAlloc(l, LEDGER_TEMP, z.qkv);
        a->dctx = ledgerAlloc(l, LEDGER_TEMP, z.ctx);
        a->dp = ledgerAlloc(l, LEDGER_TEMP, (size_t)s->seq * sizeof(float));
        if (a->dyy == NULL || a->dqkv == NULL || a->dctx == NULL || a->dp == NULL)
            goto fail_free;
    }
    if (s->heads > 0 && s->sp > 1) {
        a->kvA = ledgerAlloc(l, LEDGER_TEMP, z.ctx * 4);
        a->kvB = ledgerAlloc(l, LEDGER_TEMP, z.ctx * 4);
        a->runSum = ledgerAlloc(l, LEDGER_TEMP, z.probs);
        if (a->kvA == NULL || a->kvB == NULL || a->runSum == NULL)
            goto fail_free;
    }
    return loomSuccess;

fail_free:
    modelActsFree(a, s, l);
    return loomSystemError;
}

loomResult_t modelActsInit(struct modelActs *a, const struct modelShape *s, int rows,
                           struct ledger *l)
{
    return modelActsInitPart(a, s, rows, 0, s->layers, 1, l);
}

void modelActsTakeTimes(struct modelActs *a, struct trainer *t)
{
    t->forwardNs += a->forwardNs;
    t->recomputeNs += a->recomputeNs;
    a->forwardNs = a->recomputeNs = 0;
}

void modelActsNote(const struct modelShape *s, int rows, int blocks, int head, int copies,
                   struct trainer *t)
{
    struct modelShape all = *s;
    all.checkpoint = 0;
    t->actsWithout = (size_t)copies * modelActsBytes(&all, rows, blocks, head);
    t->actsBlocks = blocks;
    t->actsRows = rows * copies;
}

size_t modelActsBytes(const struct modelShape *s, int rows, int blocks, int head)
{
    struct actSizes z = actSizes(s, rows);
    size_t block = 2 * z.rd + 2 * z.r1 + 2 * z.rf; /* x, u, mean, rstd, a, h; y is x */
    if (s->heads > 0) /* y, ua, their norm's statistics, qkv, the softmax, the context */
        block += 2 * z.rd + 2 * z.r1 + z.qkv + z.probs + z.ctx;
    int k = s->checkpoint > 0 && s->checkpoint < blocks ? s->checkpoint : 0;
    size_t bytes = (size_t)(k ? k : blocks) * block;
    if (k)
        bytes += (size_t)((blocks + k - 1) / k) * z.rd;
    if (head)
        bytes += 2 * z.rd + 2 * z.r1 + 2 * (size_t)rows * s->classes * sizeof(float);
    return bytes;
}

void modelActsFree(struct modelActs *a, const struct modelShape *s, struct ledger *l)
{
    struct actSizes z = actSizes(s, a->rows);
    for (int i = 0; a->block != NULL && i < (a->checkpoint ? a->checkpoint : a->l1 - a->l0); i++)
        blockActsAlloc(&a->block[i], s, a->rows, 0, l);
    for (int k = 0; a->seg != NULL && k < a->nseg; k++)
        ledgerFree(l, LEDGER_ACTS, a->seg[k], z.rd);
    free(a->seg);
    ledgerFree(l, LEDGER_TEMP, a->scratch, z.rd);
    if (a->head.x != NULL)
        headActsFree(&a->head, s, a->rows, l);
    ledgerFree(l, LEDGER_TEMP, a->dx, z.rd);
    ledgerFree(l, LEDGER_TEMP, a->dy, z.rd);
    ledgerFree(l, LEDGER_TEMP, a->du, z.rd);
    ledgerFree(l, LEDGER_TEMP, a->dh, z.rf);
    ledgerFree(l, LEDGER_TEMP, a->dyy, z.rd);
    ledgerFree(l, LEDGER_TEMP, a->dqkv, z.qkv);
    ledgerFree(l, LEDGER_TEMP, a->dctx, z.ctx);
    ledgerFree(l, LEDGER_TEMP, a->dp, (size_t)s->seq * sizeof(float));
    ledgerFree(l, LEDGER_TEMP, a->kvA, z.ctx * 4);
    ledgerFree(l, LEDGER_TEMP, a->kvB, z.ctx * 4);
    ledgerFree(l, LEDGER_TEMP, a->runSum, z.probs);
    free(a->block);
    memset(a, 0, sizeof(*a));
}

/* Partial sums of a row-split linear layer, summed over the TP ranks. */
static loomResult_t tpReduce(const struct modelHooks *h, float *buf, size_t n)
{
    return h->reduce != NULL ? h->reduce(h->ctx, buf, n) : loomSuccess;
}

static loomResult_t blockForward(const struct modelShape *s, const struct modelHooks *hk,
                                 struct modelActs *a, const float *p, struct blockActs *b,
                                 float *out)
{
    int rows = a->rows;
    size_t d = (size_t)s->hidden, f = (size_t)s->ffn / shapeTp(s), dl = attnWidth(s);
    size_t n = (size_t)rows * d;
    int owner = s->tpRank == 0; /* adds the biases of the row-split layers */
    if (s->heads > 0) {
        const float *wqkv = p + 2 * d, *wo = wqkv + d * 3 * dl, *bo = wo + dl * d;
        layerNormForward(b->x, p, p + d, rows, (int)d, b->ua, b->meanA, b->rstdA);
        linearForward(b->ua, wqkv, NULL, rows, (int)d, (int)(3 * dl), b->qkv);
        if (s->sp > 1)
            LOOMCHECK(ringForward(s, hk, a, b->qkv, rows, b->probs, b->ctx));
        else
            attnForward(s, b->qkv, rows, b->probs, b->ctx);
        linearForward(b->ctx, wo, owner ? bo : NULL, rows, (int)dl, (int)d, b->y);
        LOOMCHECK(tpReduce(hk, b->y, n));
        for (size_t i = 0; i < n; i++)
            b->y[i] += b->x[i];
        p += modelAttnCount(s);
    }
    const float *w1 = p + 2 * d, *b1 = w1 + d * f, *w2 = b1 + f, *b2 = w2 + f * d;
    layerNormForward(b->y, p, p + d, rows, (int)d, b->u, b->mean, b->rstd);
    linearForward(b->u, w1, b1, rows, (int)d, (int)f, b->a);
    geluForward(b->a, (size_t)rows * f, b->h);
    linearForward(b->h, w2, owner ? b2 : NULL, rows, (int)f, (int)d, out);
    LOOMCHECK(tpReduce(hk, out, n));
    for (size_t i = 0; i < n; i++)
        out[i] += b->y[i];
    return loomSuccess;
}

/* The activations of block l: its own, or with checkpointing those of its place in a segment. */
static struct blockActs *actsOf(struct modelActs *a, int l)
{
    return &a->block[a->checkpoint ? (l - a->l0) % a->checkpoint : l - a->l0];
}

/*
 * Backward of one block from dy (the gradient of its output) into dx; g is the
 * unit's gradient buffer (filled), marked ready from the end of the unit down.
 */
static loomResult_t blockBackward(const struct modelShape *s, const struct modelHooks *h,
                                  struct modelActs *a, int l, const float *p, float *g,
                                  const float *dy, float *dx)
{
    struct blockActs *b = actsOf(a, l);
    size_t d = (size_t)s->hidden, f = (size_t)s->ffn / shapeTp(s), dl = attnWidth(s);
    size_t A = modelAttnCount(s), n = (size_t)a->rows * d;
    int rows = a->rows;
    const float *pm = p + A, *w1 = pm + 2 * d, *w2 = w1 + d * f + f;
    float *gm = g + A, *gw1 = gm + 2 * d, *gb1 = gw1 + d * f, *gw2 = gb1 + f, *gb2 = gw2 + f * d;
    /* the MLP, then its norm: the gradient of y into dyy (dx without attention) */
    float *dyy = s->heads > 0 ? a->dyy : dx;
    linearBackward(b->h, w2, dy, rows, (int)f, (int)d, a->dh, gw2, gb2);
    geluBackward(b->a, a->dh, (size_t)rows * f, a->dh);
    linearBackward(b->u, w1, a->dh, rows, (int)d, (int)f, a->du, gw1, gb1);
    LOOMCHECK(tpReduce(h, a->du, n));
    LOOMCHECK(h->ready(h->ctx, l, A + 2 * d));
    memcpy(dyy, dy, n * sizeof(*dyy)); /* the residual path */
    layerNormBackward(b->y, pm, b->mean, b->rstd, a->du, rows, (int)d, dyy, gm, gm + d);
    LOOMCHECK(h->ready(h->ctx, l, A));
    if (s->heads == 0)
        return loomSuccess;
    const float *wqkv = p + 2 * d, *wo = wqkv + d * 3 * dl;
    float *gwqkv = g + 2 * d, *gwo = gwqkv + d * 3 * dl, *gbo = gwo + dl * d;
    linearBackward(b->ctx, wo, dyy, rows, (int)dl, (int)d, a->dctx, gwo, gbo);
    if (s->sp > 1)
        LOOMCHECK(ringBackward(s, h, a, b->qkv, b->probs, b->ctx, a->dctx, rows, a->dqkv));
    else
        attnBackward(s, b->qkv, b->probs, a->dctx, rows, a->dqkv, a->dp);
    linearBackward(b->ua, wqkv, a->dqkv, rows, (int)d, (int)(3 * dl), a->du, gwqkv, NULL);
    LOOMCHECK(tpReduce(h, a->du, n));
    LOOMCHECK(h->ready(h->ctx, l, 2 * d));
    memcpy(dx, dyy, n * sizeof(*dx));
    layerNormBackward(b->x, p, b->meanA, b->rstdA, a->du, rows, (int)d, dx, g, g + d);
    return h->ready(h->ctx, l, 0);
}

static loomResult_t unitGrads(const struct modelHooks *h, int unit, size_t count, int accumulate,
                              float **g)
{
    LOOMCHECK(h->grads(h->ctx, unit, g));
    if (!accumulate)
        memset(*g, 0, count * sizeof(**g));
    return loomSuccess;
}

/* Forward of blocks [from, to) from the input in actsOf(from)->x; the last one's output to out. */
static loomResult_t blocksForward(const struct modelShape *s, const struct modelHooks *h,
                                  struct modelActs *a, int from, int to, float *out)
{
    const float *p;
    for (int l = from; l < to; l++) {
        float *o = l + 1 < to ? actsOf(a, l + 1)->x : out;
        LOOMCHECK(h->params(h->ctx, l, &p));
        LOOMCHECK(blockForward(s, h, a, p, actsOf(a, l), o));
        LOOMCHECK(h->release(h->ctx, l));
    }
    return loomSuccess;
}

loomResult_t modelForwardPart(const struct modelShape *s, const struct modelHooks *h,
                              struct modelActs *a, const float *x, const int *labels, float *out,
                              double *loss)
{
    const float *p;
    size_t rowBytes = (size_t)a->rows * s->hidden * sizeof(float);
    float *last = a->hasHead ? a->head.x : out;
    int K = a->checkpoint ? a->checkpoint : a->l1 - a->l0;
    uint64_t t0 = nowNs();
    memcpy(a->l1 > a->l0 ? actsOf(a, a->l0)->x : last, x, rowBytes);
    /* segment by segment; with checkpointing each one's input is kept, the rest overwritten */
    for (int l = a->l0; l < a->l1; l += K) {
        int end = l + K < a->l1 ? l + K : a->l1;
        if (a->checkpoint)
            memcpy(a->seg[(l - a->l0) / K], actsOf(a, l)->x, rowBytes);
        LOOMCHECK(blocksForward(s, h, a, l, end, end < a->l1 ? actsOf(a, end)->x : last));
    }
    if (a->hasHead) {
        LOOMCHECK(h->params(h->ctx, s->layers, &p));
        *loss = headForward(s, p, labels, a->rows, &a->head);
        LOOMCHECK(h->release(h->ctx, s->layers));
    }
    a->forwardNs += nowNs() - t0;
    return loomSuccess;
}

loomResult_t modelBackwardPart(const struct modelShape *s, const struct modelHooks *h,
                               struct modelActs *a, const int *labels, double scale,
                               const float *dy, float *dx, int accumulate)
{
    struct unitSpec spec;
    const float *p;
    float *g, *cur = a->dy, *next = a->dx;
    size_t rowBytes = (size_t)a->rows * s->hidden * sizeof(float);
    if (a->hasHead) {
        modelHeadSpec(s, &spec);
        LOOMCHECK(h->params(h->ctx, s->layers, &p));
        LOOMCHECK(unitGrads(h, s->layers, spec.count, accumulate, &g));
        headBackward(s, p, labels, a->rows, scale, &a->head, g, cur, a->du);
        LOOMCHECK(h->ready(h->ctx, s->layers, 0));
        LOOMCHECK(h->release(h->ctx, s->layers));
    } else {
        memcpy(cur, dy, rowBytes);
    }
    modelBlockSpec(s, 0, &spec);
    for (int l = a->l1 - 1; l >= a->l0; l--) {
        int K = a->checkpoint;
        int from = K ? a->l0 + (l - a->l0) / K * K : 0;
        if (K && (l - a->l0) % K == K - 1 && from + K < a->l1) {
            /* the segment's forward again, from its kept input (the last segment's activations
             * are still those of the forward) */
            uint64_t t0 = nowNs();
            memcpy(actsOf(a, from)->x, a->seg[(from - a->l0) / K], rowBytes);
            LOOMCHECK(blocksForward(s, h, a, from, l + 1, a->scratch));
            a->recomputeNs += nowNs() - t0;
        }
        LOOMCHECK(h->params(h->ctx, l, &p));
        LOOMCHECK(unitGrads(h, l, spec.count, accumulate, &g));
        LOOMCHECK(blockBackward(s, h, a, l, p, g, cur, next));
        LOOMCHECK(h->release(h->ctx, l));
        float *t = cur;
        cur = next;
        next = t;
    }
    if (dx != NULL)
        memcpy(dx, cur, rowBytes);
    return loomSuccess;
}

loomResult_t modelForward(const struct modelShape *s, const struct modelHooks *h,
                          struct modelActs *a, const float *x, const int *labels, double *loss)
{
    return modelForwardPart(s, h, a, x, labels, NULL, loss);
}

loomResult_t modelBackward(const struct modelShape *s, const struct modelHooks *h,
                           struct modelActs *a, const int *labels)
{
    return modelBackwardPart(s, h, a, labels, 1.0, NULL, NULL, 0);
}
