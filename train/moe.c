/*
 * moe.c — Mixture-of-Experts blocks with expert parallelism.
 *
 * In --mode moe every block's MLP is replaced by E experts (MLPs of the same
 * shape) and a router:
 *
 *   u = LN(x);  p = softmax(u Wr);  y = x + sum_{j < k} gate_j Expert_{e_j}(u)
 *
 * with the top-k experts e_j of each token (Switch for k = 1, GShard for
 * k = 2). Each expert takes at most `capacity` tokens of a rank's batch,
 * ceil(factor * k * batch / E); a choice over capacity is dropped and the
 * token keeps only its residual for it. The load-balancing loss of Switch,
 * alpha E sum_e f_e P_e (f_e the share of choices naming e, P_e the mean
 * probability of e), is added to the loss of each block.
 *
 * Parallelism: the experts are sharded, E/N per rank (rank r owns experts
 * r E/N .. (r+1) E/N - 1); the rest (layer norms, routers, head) is
 * replicated and trained data-parallel, its gradients averaged by one
 * AllReduce after backward. Per block:
 *
 *   route locally -> AlltoAll of the per-expert counts -> AlltoAllv dispatch
 *   (each token row to the rank owning its expert; uneven counts) -> the
 *   owner runs each local expert on all rows it received, in (source rank,
 *   queue place) order -> AlltoAllv combine (the reverse exchange) -> each
 *   rank adds gate-weighted expert outputs to its tokens.
 *
 *   send layout on a rank (rows):   [ to rank 0: e0 | e1 ][ to rank 1: e2 | e3 ] ...
 *   receive layout on rank r:       [ from 0: its e_r0 | e_r1 ][ from 1: ... ] ...
 *
 * Backward runs the same two exchanges with gradients: output gradients out
 * to the experts, input gradients back. An expert's weight gradient sums
 * the contributions of every rank's tokens, each the gradient of that rank's
 * mean loss, so it is scaled by 1/N to be the gradient of the global mean
 * loss, as the averaged dense gradients are.
 *
 * The routing, the capacity rule and the auxiliary loss are the model's
 * definition and live here for the reference (check.c) to share; the
 * reference moves no data between ranks: it routes each rank-sized group of
 * its global batch and runs every expert itself.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "moe.h"
#include "optim.h"

/* ---- the model definition ---- */

int moeCapacity(double factor, int topK, int group, int experts)
{
    int cap = (int)ceil(factor * topK * group / experts);
    return cap < 1 ? 1 : cap;
}

void moeRouterSpec(const struct moeShape *m, int layer, struct unitSpec *u)
{
    memset(u, 0, sizeof(*u));
    u->id = UNIT_ID_ROUTER(layer);
    unitSpecAdd(u, (size_t)m->hidden, INIT_ONE, 0);
    unitSpecAdd(u, (size_t)m->hidden, INIT_ZERO, 0);
    unitSpecAdd(u, (size_t)m->hidden * m->experts, INIT_NORMAL, m->hidden);
}

void moeExpertSpec(const struct moeShape *m, int layer, int expert, struct unitSpec *u)
{
    memset(u, 0, sizeof(*u));
    u->id = UNIT_ID_EXPERT(layer, expert);
    unitSpecAdd(u, (size_t)m->hidden * m->ffn, INIT_NORMAL, m->hidden);
    unitSpecAdd(u, (size_t)m->ffn, INIT_ZERO, 0);
    unitSpecAdd(u, (size_t)m->ffn * m->hidden, INIT_NORMAL, m->ffn);
    unitSpecAdd(u, (size_t)m->hidden, INIT_ZERO, 0);
}

loomResult_t moeRoutingInit(struct moeRouting *r, const struct moeShape *m, struct ledger *l)
{
    size_t gk = (size_t)m->group * m->topK, e = (size_t)m->experts;
    memset(r, 0, sizeof(*r));
    r->expert = ledgerAlloc(l, LEDGER_ACTS, gk * sizeof(int));
    r->gate = ledgerAlloc(l, LEDGER_ACTS, gk * sizeof(float));
    r->slot = ledgerAlloc(l, LEDGER_ACTS, gk * sizeof(int));
    r->count = ledgerAlloc(l, LEDGER_ACTS, e * sizeof(int));
    r->frac = ledgerAlloc(l, LEDGER_ACTS, e * sizeof(float));
    r->mean = ledgerAlloc(l, LEDGER_ACTS, e * sizeof(float));
    if (r->expert == NULL || r->gate == NULL || r->slot == NULL || r->count == NULL ||
        r->frac == NULL || r->mean == NULL) {
        moeRoutingFree(r, m, l);
        return loomSystemError;
    }
    return loomSuccess;
}

void moeRoutingFree(struct moeRouting *r, const struct moeShape *m, struct ledger *l)
{
    size_t gk = (size_t)m->group * m->topK, e = (size_t)m->experts;
    ledgerFree(l, LEDGER_ACTS, r->expert, gk * sizeof(int));
    ledgerFree(l, LEDGER_ACTS, r->gate, gk * sizeof(float));
    ledgerFree(l, LEDGER_ACTS, r->slot, gk * sizeof(int));
    ledgerFree(l, LEDGER_ACTS, r->count, e * sizeof(int));
    ledgerFree(l, LEDGER_ACTS, r->frac, e * sizeof(float));
    ledgerFree(l, LEDGER_ACTS, r->mean, e * sizeof(float));
    memset(r, 0, sizeof(*r));
}

void softmaxRows(float *z, int rows, int n)
{
    for (int r = 0; r < rows; r++) {
        float *zr = z + (size_t)r * n, mx = zr[0], sum = 0.0f;
        for (int i = 1; i < n; i++)
            mx = zr[i] > mx ? zr[i] : mx;
        for (int i = 0; i < n; i++) {
            zr[i] = expf(zr[i] - mx);
            sum += zr[i];
        }
        for (int i = 0; i < n; i++)
            zr[i] /= sum;
    }
}

/* The most probable expert of a row other than `not` (-1: none excluded). */
static int argmaxExcept(const float *p, int n, int not )
{
    int best = -1;
    for (int i = 0; i < n; i++)
        if (i != not &&(best < 0 || p[i] > p[best]))
            best = i;
    return best;
}

void moeRoute(const struct moeShape *m, const float *p, struct moeRouting *r)
{
    int g = m->group, k = m->topK, ne = m->experts;
    memset(r->count, 0, (size_t)ne * sizeof(int));
    memset(r->frac, 0, (size_t)ne * sizeof(float));
    memset(r->mean, 0, (size_t)ne * sizeof(float));
    for (int t = 0; t < g; t++) {
        const float *pt = p + (size_t)t * ne;
        int e0 = argmaxExcept(pt, ne, -1), e1 = k > 1 ? argmaxExcept(pt, ne, e0) : -1;
        r->expert[t * k] = e0;
        if (k == 1) {
            r->gate[t] = pt[e0];
        } else {
            float s = pt[e0] + pt[e1];
            r->expert[t * k + 1] = e1;
            r->gate[t * k] = pt[e0] / s;
            r->gate[t * k + 1] = pt[e1] / s;
        }
        for (int e = 0; e < ne; e++)
            r->mean[e] += pt[e] / (float)g;
    }
    r->dropped = 0;
    for (int j = 0; j < k; j++) {
        for (int t = 0; t < g; t++) {
            int e = r->expert[t * k + j];
            r->frac[e] += 1.0f / (float)(g * k);
            if (r->count[e] < m->capacity) {
                r->slot[t * k + j] = r->count[e]++;
            } else {
                r->slot[t * k + j] = -1;
                r->dropped++;
            }
        }
    }
    double s = 0.0;
    for (int e = 0; e < ne; e++)
        s += (double)r->frac[e] * r->mean[e];
    r->aux = m->auxWeight * ne * s;
}

void moeRouterBackward(const struct moeShape *m, const float *p, const struct moeRouting *r,
                       const float *dgate, double auxScale, float *dz)
{
    int g = m->group, k = m->topK, ne = m->experts;
    float auxCoef = (float)(auxScale * m->auxWeight * ne / g);
    for (int t = 0; t < g; t++) {
        const float *pt = p + (size_t)t * ne;
        float *dp = dz + (size_t)t * ne, dot = 0.0f;
        for (int e = 0; e < ne; e++)
            dp[e] = auxCoef * r->frac[e];
        int e0 = r->expert[t * k];
        if (k == 1) {
            dp[e0] += dgate[t];
        } else {
            int e1 = r->expert[t * k + 1];
            float s = pt[e0] + pt[e1], d = dgate[t * k] - dgate[t * k + 1];
            dp[e0] += d * pt[e1] / (s * s);
            dp[e1] -= d * pt[e0] / (s * s);
        }
        for (int e = 0; e < ne; e++)
            dot += dp[e] * pt[e];
        for (int e = 0; e < ne; e++)
            dp[e] = pt[e] * (dp[e] - dot);
    }
}

void moeRouterForward(const struct moeShape *m, const float *rp, const float *x, int rows, float *u,
                      float *mean, float *rstd, float *p)
{
    int d = m->hidden;
    layerNormForward(x, rp, rp + d, rows, d, u, mean, rstd);
    linearForward(u, rp + 2 * d, NULL, rows, d, m->experts, p);
    softmaxRows(p, rows, m->experts);
}

void moeRouterNormBackward(const struct moeShape *m, const float *rp, const float *x,
                           const float *u, const float *mean, const float *rstd, const float *dz,
                           const float *dy, int rows, float *du, float *du2, float *dx, float *g)
{
    int d = m->hidden;
    size_t n = (size_t)rows * d;
    memset(g, 0, ((size_t)2 * d + (size_t)d * m->experts) * sizeof(*g));
    linearBackward(u, rp + 2 * d, dz, rows, d, m->experts, du2, g + 2 * d, NULL);
    for (size_t i = 0; i < n; i++)
        du[i] += du2[i];
    memcpy(dx, dy, n * sizeof(*dx));
    layerNormBackward(x, rp, mean, rstd, du, rows, d, dx, g, g + d);
}

/* ---- expert parallelism ---- */

struct moeLayer {
    float *x, *mean, *rstd, *u, *p;
    struct moeRouting route;
    int *pos;               /* group x k: row in the send layout, -1 if dropped */
    float *combined;        /* expert outputs in the send layout */
    int *recvCount;         /* nranks x local: rows from each source for each local expert */
    int *blockStart;        /* nranks x local: their first row in the receive layout */
    float **ex, **ea, **eh; /* per local expert: inputs, pre-activations, activations */
};

struct moe {
    struct trainer *t;
    struct moeShape m;
    struct modelShape headShape;
    int layers, local;
    size_t maxRows; /* rows one local expert can receive: nranks x capacity */
    struct unitLayout denseLay, expertLay;
    struct replica dense, expert;
    struct moeLayer *layer;
    struct headActs head;
    float *send, *recv, *eIn, *eOut, *dh, *dx, *dy, *du, *du2, *dz, *dgate;
    int *firstRow;  /* experts: the first row of each expert's queue in the send layout */
    size_t *counts; /* 4 x nranks elements: send counts, send displacements, receive counts,
                       receive displacements of the next AlltoAllv */
    struct adamConfig adam;
    char formula[64];
};

#define MOE_LAYER_BUFS 3 /* per local expert: inputs, pre-activations, activations */

static loomResult_t moeLayerInit(struct moe *s, struct moeLayer *L)
{
    struct ledger *l = &s->t->ledger;
    int b = s->m.group, d = s->m.hidden, k = s->m.topK, n = s->t->nranks;
    L->x = ledgerAlloc(l, LEDGER_ACTS, (size_t)b * d * sizeof(float));
    L->u = ledgerAlloc(l, LEDGER_ACTS, (size_t)b * d * sizeof(float));
    L->mean = ledgerAlloc(l, LEDGER_ACTS, (size_t)b * sizeof(float));
    L->rstd = ledgerAlloc(l, LEDGER_ACTS, (size_t)b * sizeof(float));
    L->p = ledgerAlloc(l, LEDGER_ACTS, (size_t)b * s->m.experts * sizeof(float));
    L->pos = ledgerAlloc(l, LEDGER_ACTS, (size_t)b * k * sizeof(int));
    L->combined = ledgerAlloc(l, LEDGER_ACTS, (size_t)b * k * d * sizeof(float));
    L->recvCount = ledgerAlloc(l, LEDGER_ACTS, (size_t)n * s->local * sizeof(int));
    L->blockStart = ledgerAlloc(l, LEDGER_ACTS, (size_t)n * s->local * sizeof(int));
    L->ex = calloc((size_t)s->local * MOE_LAYER_BUFS, sizeof(float *));
    if (L->x == NULL || L->u == NULL || L->mean == NULL || L->rstd == NULL || L->p == NULL ||
        L->pos == NULL || L->combined == NULL || L->recvCount == NULL || L->blockStart == NULL ||
        L->ex == NULL || moeRoutingInit(&L->route, &s->m, l) != loomSuccess)
        return loomSystemError;
    L->ea = L->ex + s->local;
    L->eh = L->ea + s->local;
    for (int i = 0; i < s->local; i++) {
        L->ex[i] = ledgerAlloc(l, LEDGER_ACTS, s->maxRows * d * sizeof(float));
        L->ea[i] = ledgerAlloc(l, LEDGER_ACTS, s->maxRows * s->m.ffn * sizeof(float));
        L->eh[i] = ledgerAlloc(l, LEDGER_ACTS, s->maxRows * s->m.ffn * sizeof(float));
        if (L->ex[i] == NULL || L->ea[i] == NULL || L->eh[i] == NULL)
            return loomSystemError;
    }
    return loomSuccess;
}

static void moeLayerFree(struct moe *s, struct moeLayer *L)
{
    struct ledger *l = &s->t->ledger;
    int b = s->m.group, d = s->m.hidden, k = s->m.topK, n = s->t->nranks;
    ledgerFree(l, LEDGER_ACTS, L->x, (size_t)b * d * sizeof(float));
    ledgerFree(l, LEDGER_ACTS, L->u, (size_t)b * d * sizeof(float));
    ledgerFree(l, LEDGER_ACTS, L->mean, (size_t)b * sizeof(float));
    ledgerFree(l, LEDGER_ACTS, L->rstd, (size_t)b * sizeof(float));
    ledgerFree(l, LEDGER_ACTS, L->p, (size_t)b * s->m.experts * sizeof(float));
    ledgerFree(l, LEDGER_ACTS, L->pos, (size_t)b * k * sizeof(int));
    ledgerFree(l, LEDGER_ACTS, L->combined, (size_t)b * k * d * sizeof(float));
    ledgerFree(l, LEDGER_ACTS, L->recvCount, (size_t)n * s->local * sizeof(int));
    ledgerFree(l, LEDGER_ACTS, L->blockStart, (size_t)n * s->local * sizeof(int));
    for (int i = 0; L->ex != NULL && i < s->local; i++) {
        ledgerFree(l, LEDGER_ACTS, L->ex[i], s->maxRows * d * sizeof(float));
        ledgerFree(l, LEDGER_ACTS, L->ea[i], s->maxRows * s->m.ffn * sizeof(float));
        ledgerFree(l, LEDGER_ACTS, L->eh[i], s->maxRows * s->m.ffn * sizeof(float));
    }
    free(L->ex);
    if (L->route.expert != NULL)
        moeRoutingFree(&L->route, &s->m, l);
}

/* Rows of the send layout: each accepted choice at its expert's first row plus its place. */
static void moeSendLayout(struct moe *s, struct moeLayer *L)
{
    int rows = 0, gk = s->m.group * s->m.topK;
    for (int e = 0; e < s->m.experts; e++) {
        s->firstRow[e] = rows;
        rows += L->route.count[e];
    }
    for (int i = 0; i < gk; i++)
        L->pos[i] = L->route.slot[i] < 0 ? -1 : s->firstRow[L->route.expert[i]] + L->route.slot[i];
}

/* Sends every rank the counts of its experts; derives where each received block starts. */
static loomResult_t moeExchangeCounts(struct moe *s, struct moeLayer *L)
{
    int n = s->t->nranks, local = s->local, row = 0;
    uint64_t t0 = nowNs();
    LOOMCHECK(trainComm(
        s->t, "loomAlltoAll",
        loomAlltoAll(L->route.count, L->recvCount, (size_t)local, loomInt32, s->t->comm, NULL),
        t0));
    for (int b = 0; b < n * local; b++) {
        L->blockStart[b] = row;
        row += L->recvCount[b];
    }
    return loomSuccess;
}

/*
 * AlltoAllv of rows of `hidden` floats between the send layout and the
 * receive layout of layer L: towards the experts (dispatch) or back (combine).
 */
static loomResult_t moeExchange(struct moe *s, const struct moeLayer *L, const float *sendbuf,
                                float *recvbuf, int towardExperts)
{
    int n = s->t->nranks, local = s->local;
    size_t d = (size_t)s->m.hidden, *sc = s->counts, *sd = sc + n, *rc = sd + n, *rd = rc + n;
    size_t sOff = 0, rOff = 0;
    for (int r = 0; r < n; r++) {
        size_t toR = 0, fromR = 0;
        for (int i = 0; i < local; i++) {
            toR += (size_t)L->route.count[r * local + i];
            fromR += (size_t)L->recvCount[r * local + i];
        }
        sc[r] = (towardExperts ? toR : fromR) * d;
        rc[r] = (towardExperts ? fromR : toR) * d;
        sd[r] = sOff;
        rd[r] = rOff;
        sOff += sc[r];
        rOff += rc[r];
    }
    uint64_t t0 = nowNs();
    return trainComm(s->t, "loomAlltoAllv",
                     loomAlltoAllv(sendbuf, sc, sd, recvbuf, rc, rd, loomFloat32, s->t->comm, NULL),
                     t0);
}

/* Copies local expert i's rows between the receive layout and a contiguous buffer. */
static int moeExpertRows(const struct moe *s, const struct moeLayer *L, int i, float *recv,
                         float *rows, int toRows)
{
    size_t d = (size_t)s->m.hidden;
    int n = 0;
    for (int src = 0; src < s->t->nranks; src++) {
        int b = src * s->local + i, c = L->recvCount[b];
        float *blk = recv + (size_t)L->blockStart[b] * d;
        if (toRows)
            memcpy(rows + (size_t)n * d, blk, (size_t)c * d * sizeof(float));
        else
            memcpy(blk, rows + (size_t)n * d, (size_t)c * d * sizeof(float));
        n += c;
    }
    return n;
}

static loomResult_t moeLayerForward(struct moe *s, int l, float *out)
{
    struct moeLayer *L = &s->layer[l];
    int b = s->m.group, d = s->m.hidden, k = s->m.topK;
    const float *rp, *ep;
    LOOMCHECK(replicaParams(&s->dense, l, &rp));
    moeRouterForward(&s->m, rp, L->x, b, L->u, L->mean, L->rstd, L->p);
    moeRoute(&s->m, L->p, &L->route);
    moeSendLayout(s, L);
    for (int i = 0; i < b * k; i++)
        if (L->pos[i] >= 0)
            memcpy(s->send + (size_t)L->pos[i] * d, L->u + (size_t)(i / k) * d,
                   (size_t)d * sizeof(float));
    LOOMCHECK(moeExchangeCounts(s, L));
    LOOMCHECK(moeExchange(s, L, s->send, s->recv, 1));
    for (int i = 0; i < s->local; i++) {
        int rows = moeExpertRows(s, L, i, s->recv, L->ex[i], 1);
        LOOMCHECK(replicaParams(&s->expert, l * s->local + i, &ep));
        mlpForward(ep, d, s->m.ffn, L->ex[i], rows, L->ea[i], L->eh[i], s->eOut);
        moeExpertRows(s, L, i, s->recv, s->eOut, 0);
    }
    LOOMCHECK(moeExchange(s, L, s->recv, L->combined, 0));
    memcpy(out, L->x, (size_t)b * d * sizeof(float));
    for (int i = 0; i < b * k; i++)
        if (L->pos[i] >= 0) {
            const float *o = L->combined + (size_t)L->pos[i] * d;
            float *y = out + (size_t)(i / k) * d, g = L->route.gate[i];
            for (int c = 0; c < d; c++)
                y[c] += g * o[c];
        }
    return loomSuccess;
}

/* Backward through the experts: from dy (the block's output gradient) to s->du (at u). */
static loomResult_t moeExpertsBackward(struct moe *s, int l, const float *dy)
{
    struct moeLayer *L = &s->layer[l];
    int b = s->m.group, d = s->m.hidden, k = s->m.topK;
    const float *ep;
    float *g;
    for (int i = 0; i < b * k; i++) {
        const float *dyt = dy + (size_t)(i / k) * d;
        s->dgate[i] = 0.0f;
        if (L->pos[i] < 0)
            continue;
        const float *o = L->combined + (size_t)L->pos[i] * d;
        float *row = s->send + (size_t)L->pos[i] * d;
        for (int c = 0; c < d; c++) {
            row[c] = L->route.gate[i] * dyt[c];
            s->dgate[i] += dyt[c] * o[c];
        }
    }
    LOOMCHECK(moeExchange(s, L, s->send, s->recv, 1));
    for (int i = 0; i < s->local; i++) {
        int unit = l * s->local + i, rows = moeExpertRows(s, L, i, s->recv, s->eIn, 1);
        size_t count = s->expertLay.spec[unit].count;
        LOOMCHECK(replicaParams(&s->expert, unit, &ep));
        LOOMCHECK(replicaGrads(&s->expert, unit, &g));
        memset(g, 0, count * sizeof(*g));
        mlpBackward(ep, d, s->m.ffn, L->ex[i], L->ea[i], L->eh[i], s->eIn, rows, g, s->eOut, s->dh);
        for (size_t e = 0; e < count; e++) /* the gradient of the mean loss over all ranks */
            g[e] /= (float)s->t->nranks;
        replicaReady(&s->expert, unit, 0);
        moeExpertRows(s, L, i, s->recv, s->eOut, 0);
    }
    LOOMCHECK(moeExchange(s, L, s->recv, s->send, 0));
    memset(s->du, 0, (size_t)b * d * sizeof(float));
    for (int i = 0; i < b * k; i++)
        if (L->pos[i] >= 0) {
            const float *row = s->send + (size_t)L->pos[i] * d;
            float *du = s->du + (size_t)(i / k) * d;
            for (int c = 0; c < d; c++)
                du[c] += row[c];
        }
    return loomSuccess;
}

/* Backward of block l: dy the output gradient, dx the input gradient. */
static loomResult_t moeLayerBackward(struct moe *s, int l, const float *dy, float *dx)
{
    struct moeLayer *L = &s->layer[l];
    const float *rp;
    float *g;
    LOOMCHECK(moeExpertsBackward(s, l, dy));
    LOOMCHECK(replicaParams(&s->dense, l, &rp));
    LOOMCHECK(replicaGrads(&s->dense, l, &g));
    moeRouterBackward(&s->m, L->p, &L->route, s->dgate, 1.0, s->dz);
    moeRouterNormBackward(&s->m, rp, L->x, L->u, L->mean, L->rstd, s->dz, dy, s->m.group, s->du,
                          s->du2, dx, g);
    replicaReady(&s->dense, l, 0);
    return loomSuccess;
}

static loomResult_t moeStep(void *self, long step, const float *x, const int *labels,
                            struct stepStats *stats)
{
    struct moe *s = self;
    int b = s->m.group, d = s->m.hidden, head = s->layers;
    const float *p;
    float *g, *dy = s->dy, *dx = s->dx;

    stats->loss = 0.0;
    stats->dropped = 0.0;
    memcpy(s->layers > 0 ? s->layer[0].x : s->head.x, x, (size_t)b * d * sizeof(float));
    for (int l = 0; l < s->layers; l++) {
        LOOMCHECK(moeLayerForward(s, l, l + 1 < s->layers ? s->layer[l + 1].x : s->head.x));
        stats->loss += s->layer[l].route.aux;
        stats->dropped += (double)s->layer[l].route.dropped / (b * s->m.topK * s->layers);
    }
    LOOMCHECK(replicaParams(&s->dense, head, &p));
    stats->loss += headForward(&s->headShape, p, labels, b, &s->head);

    LOOMCHECK(replicaGrads(&s->dense, head, &g));
    memset(g, 0, s->denseLay.spec[head].count * sizeof(*g));
    headBackward(&s->headShape, p, labels, b, 1.0, &s->head, g, dy, s->du);
    replicaReady(&s->dense, head, 0);
    for (int l = s->layers - 1; l >= 0; l--) {
        LOOMCHECK(moeLayerBackward(s, l, dy, dx));
        float *t = dy;
        dy = dx;
        dx = t;
    }

    uint64_t t0 = nowNs();
    LOOMCHECK(trainComm(s->t, "loomAllReduce",
                        loomAllReduce(s->dense.grads, s->dense.grads, s->denseLay.total,
                                      dtypeLoom(s->dense.bf16), loomAvg, s->t->comm, NULL),
                        t0));
    stats->gradNormSq = replicaGradNormSq(&s->dense) / s->t->nranks + replicaGradNormSq(&s->expert);
    replicaUpdate(&s->dense, &s->adam, step);
    replicaUpdate(&s->expert, &s->adam, step);
    return loomSuccess;
}

static uint64_t moeFingerprint(void *self)
{
    return replicaHash(&((struct moe *)self)->dense);
}

/*
 * The canonical order of the weights: per layer its router then experts 0..E-1,
 * then the head. Each layer's experts are gathered from their owners (rank
 * order is expert order).
 */
static loomResult_t moeCollect(void *self, struct finalState *out)
{
    struct moe *s = self;
    int n = s->t->nranks;
    size_t per = s->expertLay.spec[0].count * (size_t)s->local;
    float *mine = calloc(per, sizeof(float));
    memset(out, 0, sizeof(*out));
    out->weights = calloc(s->denseLay.params + s->expertLay.params * n, sizeof(float));
    out->noutputs = (size_t)n * s->m.group * s->headShape.classes;
    out->outputs = calloc(out->noutputs, sizeof(float));
    if (mine == NULL || out->weights == NULL || out->outputs == NULL) {
        free(mine);
        return trainFail(s->t, loomSystemError, "out of memory for the final weights");
    }
    loomResult_t res = loomSuccess;
    for (int l = 0; l < s->layers && res == loomSuccess; l++) {
        out->nweights += replicaWeights(&s->dense, l, l + 1, out->weights + out->nweights);
        replicaWeights(&s->expert, l * s->local, (l + 1) * s->local, mine);
        uint64_t t0 = nowNs();
        res = trainComm(
            s->t, "loomAllGather",
            loomAllGather(mine, out->weights + out->nweights, per, loomFloat32, s->t->comm, NULL),
            t0);
        out->nweights += per * n;
    }
    free(mine);
    LOOMCHECK(res);
    out->nweights +=
        replicaWeights(&s->dense, s->layers, s->layers + 1, out->weights + out->nweights);
    uint64_t t0 = nowNs();
    return trainComm(s->t, "loomAllGather",
                     loomAllGather(s->head.probs, out->outputs,
                                   (size_t)s->m.group * s->headShape.classes, loomFloat32,
                                   s->t->comm, NULL),
                     t0);
}

/* The buffers of one block's exchanges and backward: temporaries of the ledger. */
struct moeTemp {
    float **buf;
    size_t elems;
};

#define MOE_TEMPS 11

static void moeTempTable(struct moe *s, struct moeTemp t[MOE_TEMPS])
{
    size_t b = (size_t)s->m.group, d = (size_t)s->m.hidden, f = (size_t)s->m.ffn;
    size_t bk = b * (size_t)s->m.topK, recvRows = s->maxRows * (size_t)s->local;
    struct moeTemp table[MOE_TEMPS] = {{&s->send, bk * d},
                                       {&s->recv, recvRows * d},
                                       {&s->eIn, s->maxRows * d},
                                       {&s->eOut, s->maxRows * d},
                                       {&s->dh, s->maxRows * f},
                                       {&s->dx, b * d},
                                       {&s->dy, b * d},
                                       {&s->du, b * d},
                                       {&s->du2, b * d},
                                       {&s->dz, b * (size_t)s->m.experts},
                                       {&s->dgate, bk}};
    memcpy(t, table, sizeof(table));
}

static void moeDestroy(void *self)
{
    struct moe *s = self;
    struct ledger *l = &s->t->ledger;
    struct moeTemp temps[MOE_TEMPS];
    moeTempTable(s, temps);
    for (int i = 0; i < MOE_TEMPS; i++)
        ledgerFree(l, LEDGER_TEMP, *temps[i].buf, temps[i].elems * sizeof(float));
    for (int i = 0; s->layer != NULL && i < s->layers; i++)
        moeLayerFree(s, &s->layer[i]);
    if (s->head.x != NULL)
        headActsFree(&s->head, &s->headShape, s->m.group, l);
    replicaFree(&s->dense, l);
    replicaFree(&s->expert, l);
    layoutFree(&s->denseLay);
    layoutFree(&s->expertLay);
    free(s->layer);
    free(s->firstRow);
    free(s->counts);
    free(s);
}

/* Layouts: the replicated units (routers, head) and this rank's experts. */
static loomResult_t moeLayouts(struct moe *s)
{
    int nd = s->layers + 1, ne = s->layers * s->local;
    struct unitSpec *dense = calloc((size_t)nd, sizeof(*dense));
    struct unitSpec *experts = calloc((size_t)(ne > 0 ? ne : 1), sizeof(*experts));
    loomResult_t res = loomSystemError;
    if (dense == NULL || experts == NULL)
        goto out;
    for (int l = 0; l < s->layers; l++) {
        moeRouterSpec(&s->m, l, &dense[l]);
        for (int i = 0; i < s->local; i++)
            moeExpertSpec(&s->m, l, s->t->rank * s->local + i, &experts[l * s->local + i]);
    }
    modelHeadSpec(&s->headShape, &dense[s->layers]);
    if (layoutInit(&s->denseLay, dense, nd, 1) == loomSuccess &&
        layoutInit(&s->expertLay, experts, ne, 1) == loomSuccess)
        res = loomSuccess;
out:
    free(dense);
    free(experts);
    return res;
}

static loomResult_t moeAllocate(struct moe *s)
{
    struct ledger *l = &s->t->ledger;
    const struct trainOptions *o = s->t->opt;
    struct moeTemp temps[MOE_TEMPS];
    s->layer = calloc((size_t)s->layers, sizeof(*s->layer));
    s->firstRow = calloc((size_t)s->m.experts, sizeof(*s->firstRow));
    s->counts = calloc(4 * (size_t)s->t->nranks, sizeof(*s->counts));
    if (s->layer == NULL || s->firstRow == NULL || s->counts == NULL)
        return loomSystemError;
    LOOMCHECK(moeLayouts(s));
    LOOMCHECK(replicaInit(&s->dense, &s->denseLay, o->bf16, o->seed, l));
    LOOMCHECK(replicaInit(&s->expert, &s->expertLay, o->bf16, o->seed, l));
    for (int i = 0; i < s->layers; i++)
        LOOMCHECK(moeLayerInit(s, &s->layer[i]));
    LOOMCHECK(headActsInit(&s->head, &s->headShape, s->m.group, l));
    moeTempTable(s, temps);
    for (int i = 0; i < MOE_TEMPS; i++)
        if ((*temps[i].buf = ledgerAlloc(l, LEDGER_TEMP, temps[i].elems * sizeof(float))) == NULL)
            return loomSystemError;
    return loomSuccess;
}

loomResult_t moeCreate(struct trainer *t, struct strategy *s)
{
    const struct trainOptions *o = t->opt;
    if (o->experts % t->nranks != 0)
        return trainFail(t, loomInvalidArgument,
                         "--experts %d is not a multiple of the %d ranks; each rank holds "
                         "the same number of experts",
                         o->experts, t->nranks);
    struct moe *m = calloc(1, sizeof(*m));
    if (m == NULL)
        return trainFail(t, loomSystemError, "out of memory");
    m->t = t;
    m->layers = o->layers;
    m->local = o->experts / t->nranks;
    m->m = (struct moeShape){o->hidden,   o->ffn,
                             o->experts,  o->topK,
                             o->batch,    moeCapacity(o->capacity, o->topK, o->batch, o->experts),
                             o->auxWeight};
    m->headShape = modelShapeOf(o);
    m->maxRows = (size_t)t->nranks * m->m.capacity;
    m->adam = (struct adamConfig){(float)o->lr, 0.9f, 0.999f, 1e-8f};
    if (moeAllocate(m) != loomSuccess) {
        moeDestroy(m);
        return trainFail(t, loomSystemError, "out of memory for the model");
    }
    double dense = (double)m->denseLay.params, experts = (double)m->expertLay.params * t->nranks;
    snprintf(m->formula, sizeof(m->formula), "16 Psi_dense + 16 Psi_experts/N");
    *s = (struct strategy){.self = m,
                           .step = moeStep,
                           .fingerprint = moeFingerprint,
                           .collect = moeCollect,
                           .destroy = moeDestroy,
                           .psi = (size_t)(dense + experts),
                           .formula = m->formula,
                           .formulaBytes = 16.0 * dense + 16.0 * experts / t->nranks};
    if (t->rank == 0)
        printf("moe: %d experts a block, %d per rank; top-%d; capacity %d tokens per expert per "
               "rank (factor %.3g); aux loss weight %.3g; Psi_dense %.0f, Psi_experts %.0f\n",
               o->experts, m->local, o->topK, m->m.capacity, o->capacity, o->auxWeight, dense,
               experts);
    return loomSuccess;
}
