/*
 * model.h — the model of loom-train: its units of parameters, the kernels,
 * and the forward and backward passes. See model.c.
 */
#ifndef LOOM_TRAIN_MODEL_H_
#define LOOM_TRAIN_MODEL_H_

#include <stddef.h>
#include <stdint.h>

#include "train.h"

enum tensorInit { INIT_ONE, INIT_ZERO, INIT_NORMAL };

struct tensorSpec {
    size_t count;
    enum tensorInit init;
    int fanIn; /* INIT_NORMAL: values are N(0, 1/fanIn) */
};

#define UNIT_MAX_TENSORS 12

/*
 * A unit is the grain of the parameter bookkeeping: a dense block, the head,
 * a router or one expert. Its tensors lie back to back; `id` names the unit
 * in the model, so its initial values do not depend on which rank holds it.
 */
struct unitSpec {
    uint64_t id;
    int ntensors;
    struct tensorSpec tensor[UNIT_MAX_TENSORS];
    size_t count;
};

/* Unit ids: the kind in the high 32 bits. */
#define UNIT_ID_BLOCK(l) ((1ULL << 32) | (uint64_t)(l))
#define UNIT_ID_HEAD (2ULL << 32)
#define UNIT_ID_ROUTER(l) ((3ULL << 32) | (uint64_t)(l))
#define UNIT_ID_EXPERT(l, e) ((4ULL << 32) | ((uint64_t)(l) << 16) | (uint64_t)(e))

void unitSpecAdd(struct unitSpec *u, size_t count, enum tensorInit init, int fanIn);
/* Offset of tensor i in the unit. */
size_t unitTensorOffset(const struct unitSpec *u, int i);
/* Initial values of elements [lo, hi) of the unit (0 past its count, in padding). */
void unitInitRange(const struct unitSpec *u, uint64_t seed, size_t lo, size_t hi, float *out);

/*
 * Where units lie in a flat buffer. Each unit is padded to a multiple of
 * `pad` elements (the number of ranks for ZeRO, 1 otherwise); shard[u] =
 * padded[u] / pad is one rank's part of it, and the rank's parts of all
 * units lie back to back at shardOffset[u] in a shard buffer.
 */
struct unitLayout {
    int nunits;
    struct unitSpec *spec;
    int pad;
    size_t *offset, *padded, *shard, *shardOffset;
    size_t total, shardTotal, maxPadded;
    size_t params; /* parameters without padding */
};

loomResult_t layoutInit(struct unitLayout *lay, const struct unitSpec *specs, int nunits, int pad);
void layoutFree(struct unitLayout *lay);

/* ---- the dense model: `layers` blocks, then the head ---- */

struct modelShape {
    int layers, hidden, ffn, classes;
    int heads, seq; /* attention: heads (0: MLP-only blocks), over sequences of seq rows */
    int tp, tpRank; /* tensor parallel (0 or 1: none): this rank's part of tp */
    int sp;         /* sequence parallel (0 or 1: none): seq is this rank's part of each
                     * sequence, and attention goes around a ring of sp such parts */
    int checkpoint; /* activation checkpointing in segments of this many blocks (0: none) */
};

/* The shape of the model of the options (no tensor parallelism). */
struct modelShape modelShapeOf(const struct trainOptions *o);

static inline int shapeTp(const struct modelShape *s)
{
    return s->tp > 1 ? s->tp : 1;
}

/*
 * Block without attention: y = x + W2 gelu(W1 LN(x) + b1) + b2, tensors LN
 * gain, LN bias, W1 (hidden x ffn), b1, W2 (ffn x hidden), b2. With heads,
 * self-attention comes first:
 *
 *   y = x + Wo attn(LN_a(x) Wqkv) + bo,  out = y + W2 gelu(W1 LN(y) + b1) + b2
 *
 * and its tensors LN_a gain, LN_a bias, Wqkv (hidden x 3 hidden: the
 * queries, keys and values of every head, head by head within each), Wo
 * (hidden x hidden), bo lie before those of the MLP (backward finishes
 * the MLP's gradients first, and a unit's gradients become final from its
 * end down). Each sequence of `seq` consecutive rows attends to itself (no
 * mask). Wqkv has no bias: a key bias adds the same to every score of a
 * query, so its true gradient is 0 and Adam would turn rounding noise into
 * steps of lr. Head: LN, then logits = W LN(x) + b (hidden x classes), softmax
 * cross-entropy.
 *
 * With tensor parallelism (tp > 1) a block holds this rank's part (Megatron):
 * heads / tp heads (Wqkv's columns of them, Wo's rows), ffn / tp
 * columns of W1 and b1 and the same rows of W2; the norms, bo and b2 are
 * replicated, and the biases of the row-split Wo and W2 are added by TP rank 0
 * alone, so that the AllReduce of the partial outputs (modelHooks.reduce)
 * adds them once.
 */
void modelBlockSpec(const struct modelShape *s, int layer, struct unitSpec *u);
/* Elements of the whole block before the MLP's: the attention tensors (0 without heads). */
size_t modelAttnCount(const struct modelShape *s);
/*
 * For each element of this TP rank's block, its index in the whole block
 * (full[count]), and whether it is replicated on every TP rank (repl[count],
 * may be NULL). Without TP, the identity.
 */
void modelBlockMap(const struct modelShape *s, size_t *full, unsigned char *repl);
void modelHeadSpec(const struct modelShape *s, struct unitSpec *u);
/* The layers + 1 unit specs of the dense model, in forward order. */
loomResult_t modelSpecs(const struct modelShape *s, struct unitSpec **specs, int *nunits);

/* ---- kernels (row-major; weights stored input-major: w[i * out + o]) ---- */

void linearForward(const float *x, const float *w, const float *b, int rows, int in, int out,
                   float *y);
/* dx = dy W^T (skipped if dx is NULL), dw += x^T dy, db += column sums of dy (if db). */
void linearBackward(const float *x, const float *w, const float *dy, int rows, int in, int out,
                    float *dx, float *dw, float *db);
void layerNormForward(const float *x, const float *g, const float *b, int rows, int d, float *y,
                      float *mean, float *rstd);
/* dx += the gradient through the norm; dg, db accumulated. */
void layerNormBackward(const float *x, const float *g, const float *mean, const float *rstd,
                       const float *dy, int rows, int d, float *dx, float *dg, float *db);
/* The two-layer perceptron W1, b1, W2, b2 lying back to back at p (a block's or an expert's). */
void mlpForward(const float *p, int d, int f, const float *x, int rows, float *a, float *h,
                float *out);
/* Gradients into g (laid out as p, accumulated); dx overwritten; dh is rows x f scratch. */
void mlpBackward(const float *p, int d, int f, const float *x, const float *a, const float *h,
                 const float *dout, int rows, float *g, float *dx, float *dh);

/* ---- activations and the passes ---- */

struct blockActs {
    float *x; /* the block's input */
    float *mean, *rstd, *u, *a, *h;
    /* attention: y the MLP's input (x without attention), the rest NULL without it;
     * probs: the softmax weights, or with a ring the log of each softmax's sum */
    float *y, *meanA, *rstdA, *ua, *qkv, *probs, *ctx;
};

struct headActs {
    float *x, *mean, *rstd, *u, *probs;
};

/* Head forward: returns the mean cross-entropy over `rows`; probabilities kept in a->probs. */
double headForward(const struct modelShape *s, const float *p, const int *labels, int rows,
                   struct headActs *a);
/* Head backward of the mean loss times `scale`: gradients into g (zeroed first), dx overwritten. */
void headBackward(const struct modelShape *s, const float *p, const int *labels, int rows,
                  double scale, struct headActs *a, float *g, float *dx, float *du);

loomResult_t headActsInit(struct headActs *a, const struct modelShape *s, int rows,
                          struct ledger *l);
void headActsFree(struct headActs *a, const struct modelShape *s, int rows, struct ledger *l);

/*
 * The activations of blocks [l0, l1) and, if `head`, of the head (a pipeline
 * stage holds a part of the model; the whole model is 0, layers, 1).
 */
struct modelActs {
    int rows, l0, l1, hasHead;
    /* block[l - l0]; with checkpointing only one segment's, block[(l - l0) % checkpoint],
     * and seg[k] keeps the input of segment k (blocks l0 + k K ..) for backward */
    struct blockActs *block;
    int checkpoint, nseg;
    float **seg, *scratch;
    uint64_t forwardNs, recomputeNs; /* time in forwards, and in recomputing them, summed */
    struct headActs head;
    float *dx, *dy, *du, *dh;      /* backward work: rows x hidden (three) and rows x ffn */
    float *dyy, *dqkv, *dctx, *dp; /* attention's backward work */
    float *kvA, *kvB, *runSum;     /* ring attention: blocks of keys and values going round */
};

loomResult_t modelActsInit(struct modelActs *a, const struct modelShape *s, int rows,
                           struct ledger *l);
loomResult_t modelActsInitPart(struct modelActs *a, const struct modelShape *s, int rows, int l0,
                               int l1, int head, struct ledger *l);
/*
 * Bytes of activations (LEDGER_ACTS) modelActsInitPart allocates for `blocks`
 * blocks (and the head) at s->checkpoint, without allocating them.
 */
size_t modelActsBytes(const struct modelShape *s, int rows, int blocks, int head);
/* Adds the time a spent in forwards and in recomputing them to t's and zeroes a's. */
void modelActsTakeTimes(struct modelActs *a, struct trainer *t);
/* For the ledger: t's activations without checkpointing, for `copies` sets of a part. */
void modelActsNote(const struct modelShape *s, int rows, int blocks, int head, int copies,
                   struct trainer *t);
void modelActsFree(struct modelActs *a, const struct modelShape *s, struct ledger *l);

/*
 * How a strategy lends the passes its parameters and takes their gradients,
 * unit by unit (0..layers-1 the blocks, layers the head):
 *   params   an fp32 view of the unit, valid until release
 *   grads    an fp32 buffer of the unit's count, which the pass zeroes and fills
 *   ready    the gradients of elements [lo, count) of the unit are final
 *   reduce   tensor parallelism: sum n floats at buf over the TP ranks, in
 *            place (NULL without TP)
 *   ring     sequence parallelism: send n floats to the next rank of the
 *            ring and receive n from the one before, at once (NULL without)
 */
struct modelHooks {
    void *ctx;
    loomResult_t (*params)(void *ctx, int unit, const float **p);
    loomResult_t (*release)(void *ctx, int unit);
    loomResult_t (*grads)(void *ctx, int unit, float **g);
    loomResult_t (*ready)(void *ctx, int unit, size_t lo);
    loomResult_t (*reduce)(void *ctx, float *buf, size_t n);
    loomResult_t (*ring)(void *ctx, const float *send, float *recv, size_t n);
};

/* Forward over a->rows rows of x; *loss is the mean cross-entropy. */
loomResult_t modelForward(const struct modelShape *s, const struct modelHooks *h,
                          struct modelActs *a, const float *x, const int *labels, double *loss);
/* Backward of the mean loss of the last forward, last unit first. */
loomResult_t modelBackward(const struct modelShape *s, const struct modelHooks *h,
                           struct modelActs *a, const int *labels);

/*
 * A pipeline stage's part: forward of blocks [a->l0, a->l1) on x, then the
 * head (loss into *loss) if a->hasHead, else the last block's output into out.
 */
loomResult_t modelForwardPart(const struct modelShape *s, const struct modelHooks *h,
                              struct modelActs *a, const float *x, const int *labels, float *out,
                              double *loss);
/*
 * Its backward: of `scale` times the mean loss if a->hasHead, else from dy, the
 * gradient of the part's output; the gradient of its input into dx (unless
 * NULL). accumulate: add to the gradients the hooks lend instead of zeroing
 * them first (micro-batches).
 */
loomResult_t modelBackwardPart(const struct modelShape *s, const struct modelHooks *h,
                               struct modelActs *a, const int *labels, double scale,
                               const float *dy, float *dx, int accumulate);

#endif /* LOOM_TRAIN_MODEL_H_ */
