/*
 * optim.h — Adam with fp32 master weights, bf16 conversion, and the
 * replicated parameter set (DDP, MoE, the reference). See optim.c.
 */
#ifndef LOOM_TRAIN_OPTIM_H_
#define LOOM_TRAIN_OPTIM_H_

#include <stddef.h>
#include <stdint.h>

#include "model.h"
#include "train.h"

struct adamConfig {
    float lr, beta1, beta2, eps;
};

static inline size_t dtypeSize(int bf16)
{
    return bf16 ? 2 : 4;
}

static inline loomDataType_t dtypeLoom(int bf16)
{
    return bf16 ? loomBfloat16 : loomFloat32;
}

void toFloat(const void *src, int bf16, size_t n, float *dst);
void fromFloat(const float *src, size_t n, int bf16, void *dst);
double sumSquares(const void *src, int bf16, size_t n);
/* FNV-1a over n bytes, continuing from h (start with HASH_INIT). */
#define HASH_INIT 0xcbf29ce484222325ULL
uint64_t hashBytes(uint64_t h, const void *p, size_t n);

/*
 * Initial values of elements [lo, hi) of a unit: in fp32 mode into params
 * (float); in bf16 mode into master (float) and, rounded, into params.
 * params and master point at element lo.
 */
void paramsInitRange(const struct unitSpec *u, uint64_t seed, size_t lo, size_t hi, int bf16,
                     void *params, float *master);

/*
 * Optimizer state of n parameters: momentum and variance, and in bf16 mode
 * the fp32 master weights (16 bytes a parameter with the bf16 weight and
 * gradient). In fp32 mode the parameters are their own master.
 */
struct optimState {
    int bf16;
    size_t n;
    float *master, *m, *v;
};

loomResult_t optimInit(struct optimState *o, int bf16, size_t n, struct ledger *l);
void optimFree(struct optimState *o, struct ledger *l);
/*
 * One Adam step (step counts from 1) on elements [lo, lo + n) of the state:
 * params and grads (the training dtype) point at element lo.
 */
void optimStep(struct optimState *o, const struct adamConfig *c, long step, size_t lo, size_t n,
               void *params, const void *grads);
/* The fp32 weights of elements [lo, lo + n): the master, or the fp32 params. */
void optimWeights(const struct optimState *o, size_t lo, size_t n, const void *params, float *out);

/*
 * A full copy of the parameters, gradients and optimizer state of a layout,
 * as DDP keeps on every rank. In bf16 mode the passes see fp32 views of one
 * unit at a time (viewP, viewG: temporaries), and gradients are rounded into
 * the bf16 buffer as replicaReady marks them final.
 */
struct replica {
    int bf16;
    const struct unitLayout *lay;
    size_t shardLo, shardN; /* the elements the optimizer state is for: all but under ZeRO */
    /* ZeRO-2, 3 (loom-train --tp/--pp): grads, and under 3 params too, hold only the shard */
    int shardGrads, shardParams;
    void *params, *grads;
    struct optimState opt;
    float *viewP, *viewG;
    size_t gradHi; /* bf16: the current unit's gradients [gradHi, count) are stored */
};

loomResult_t replicaInit(struct replica *r, const struct unitLayout *lay, int bf16, uint64_t seed,
                         struct ledger *l);
/*
 * The same with optimizer state (bf16: and master weights) only for elements
 * [lo, lo + n) (ZeRO-1 across loom-train --tp/--pp replicas): replicaUpdate
 * steps those alone, and replicaWeights may not be used.
 */
loomResult_t replicaInitShard(struct replica *r, const struct unitLayout *lay, int bf16,
                              uint64_t seed, struct ledger *l, size_t lo, size_t n);
/*
 * The same for ZeRO stage 1, 2 or 3: from stage 2 grads holds only the
 * shard's n gradients, and under stage 3 params only its n parameters too
 * (replicaParams may then not be used: the caller gathers the whole).
 */
loomResult_t replicaInitStage(struct replica *r, const struct unitLayout *lay, int bf16,
                              uint64_t seed, struct ledger *l, size_t lo, size_t n, int stage);
/* The fp32 weight of element e (bf16: e must be in the shard). */
float replicaWeightAt(const struct replica *r, size_t e);
void replicaFree(struct replica *r, struct ledger *l);
loomResult_t replicaParams(struct replica *r, int unit, const float **p);
loomResult_t replicaGrads(struct replica *r, int unit, float **g);
void replicaReady(struct replica *r, int unit, size_t lo);
void replicaUpdate(struct replica *r, const struct adamConfig *c, long step);
double replicaGradNormSq(const struct replica *r);
/* Hash of the parameters and (bf16, unsharded) master weights. */
uint64_t replicaHash(const struct replica *r);
/* Sets the fp32 weights of a unit (its count of them; bf16: the master, and rounded the params). */
void replicaSet(struct replica *r, int unit, const float *w);
/* Units [u0, u1) of fp32 weights, unpadded, back to back at out; returns elements written. */
size_t replicaWeights(const struct replica *r, int u0, int u1, float *out);

/*
 * The state a step changes (parameters, fp32 master, Adam moments), saved to
 * and restored from replicaStateBytes() bytes at buf: --elastic saves it
 * before each step, so the survivors of a failure all redo that step from
 * the same state, whatever part of it each had finished.
 */
size_t replicaStateBytes(const struct replica *r);
void replicaSave(const struct replica *r, void *buf);
void replicaRestore(struct replica *r, const void *buf);

#endif /* LOOM_TRAIN_OPTIM_H_ */
