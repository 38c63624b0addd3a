/*
 * moe.h — the Mixture-of-Experts block's model definition, shared by the
 * expert-parallel strategy (moe.c) and the single-process reference
 * (check.c): units, routing with capacity, the auxiliary loss.
 */
#ifndef LOOM_TRAIN_MOE_H_
#define LOOM_TRAIN_MOE_H_

#include "model.h"

struct moeShape {
    int hidden, ffn, experts, topK;
    int group;        /* tokens routed together: one rank's batch */
    int capacity;     /* accepted tokens per expert per group */
    double auxWeight; /* alpha of the load-balancing loss */
};

/* ceil(factor * k * group / experts), at least 1. */
int moeCapacity(double factor, int topK, int group, int experts);

/* Router unit of a layer: LN gain, LN bias, router weights (hidden x experts). */
void moeRouterSpec(const struct moeShape *m, int layer, struct unitSpec *u);
/* Expert unit: W1 (hidden x ffn), b1, W2 (ffn x hidden), b2, as mlpForward reads them. */
void moeExpertSpec(const struct moeShape *m, int layer, int expert, struct unitSpec *u);

/* The routing of one group of tokens. */
struct moeRouting {
    int *expert; /* group x k: chosen experts, most probable first */
    float *gate; /* group x k: combine weights */
    int *slot;   /* group x k: place in the expert's queue, -1 if over capacity (dropped) */
    int *count;  /* experts: accepted tokens */
    float *frac; /* experts: share of the group x k choices naming the expert */
    float *mean; /* experts: mean router probability */
    double aux;  /* auxWeight * experts * sum_e frac_e mean_e */
    int dropped;
};

loomResult_t moeRoutingInit(struct moeRouting *r, const struct moeShape *m, struct ledger *l);
void moeRoutingFree(struct moeRouting *r, const struct moeShape *m, struct ledger *l);

/* Row-wise softmax in place. */
void softmaxRows(float *z, int rows, int n);
/*
 * Routes a group: top-k experts by router probability p (group x experts,
 * ties to the lower index); gates p for k = 1, renormalised over the two
 * for k = 2; places taken first for all first choices in token order, then
 * for second choices, until an expert holds `capacity`.
 */
void moeRoute(const struct moeShape *m, const float *p, struct moeRouting *r);
/*
 * Gradient at the router logits of a group (dz, group x experts), from the
 * gradient at the gates (dgate, group x k; 0 for dropped choices) and the
 * auxiliary loss weighted by auxScale in the total loss.
 */
void moeRouterBackward(const struct moeShape *m, const float *p, const struct moeRouting *r,
                       const float *dgate, double auxScale, float *dz);

/*
 * The replicated part of a block, on `rows` tokens with router unit rp (LN
 * gain, LN bias, router weights): u = LN(x), p = softmax(u Wr).
 */
void moeRouterForward(const struct moeShape *m, const float *rp, const float *x, int rows, float *u,
                      float *mean, float *rstd, float *p);
/*
 * Its backward: du holds the gradient at u from the experts; adds the
 * router's (from dz, the gradient at the logits), and goes through the norm:
 * dx = dy + LN'(du). g receives the router unit's gradients (zeroed here);
 * du2 is rows x hidden scratch.
 */
void moeRouterNormBackward(const struct moeShape *m, const float *rp, const float *x,
                           const float *u, const float *mean, const float *rstd, const float *dz,
                           const float *dy, int rows, float *du, float *du2, float *dx, float *g);

#endif /* LOOM_TRAIN_MOE_H_ */
