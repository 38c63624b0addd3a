/*
 * train.h — what the parts of loom-train share.
 *
 * loom-train is a small but complete data-parallel training program whose
 * only communication is Loom. Its parts, one file each:
 *
 *   data.c    synthetic samples from a fixed random teacher; DistributedSampler sharding
 *   model.c   the model's layout (units of tensors), forward, backward, the kernels
 *   optim.c   Adam with fp32 master weights; bf16 conversion; the replicated parameter set
 *   ddp.c     gradients averaged by bucketed AllReduce, overlapped with backward
 *   zero.c    ZeRO stages 1, 2 and 3
 *   moe.c     Mixture-of-Experts blocks, experts sharded, tokens moved by AlltoAllv
 *   par.c     tensor and pipeline parallelism on communicators split from the world
 *   check.c   the single-process reference and the comparison behind --check
 *   main.c    options, the training loop, the per-step log, the memory ledger
 *
 * This header holds the options, the trainer every strategy is given, the
 * memory ledger (each buffer of model state, activations and temporaries is
 * allocated through it, so the ledger printed at the end is measured, not
 * estimated), and small helpers: bf16 rounding, a clock, error reporting.
 * Only the public include/loom.h is used.
 */
#ifndef LOOM_TRAIN_H_
#define LOOM_TRAIN_H_

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "loom.h"

/* The one propagation macro, as in the library: pass a failure on to the caller. */
#define LOOMCHECK(call)                                                                            \
    do {                                                                                           \
        loomResult_t res_ = (call);                                                                \
        if (res_ != loomSuccess)                                                                   \
            return res_;                                                                           \
    } while (0)

enum trainMode { MODE_DDP, MODE_ZERO1, MODE_ZERO2, MODE_ZERO3, MODE_MOE };

enum pipeSchedule { SCHEDULE_GPIPE, SCHEDULE_1F1B };

/* Where --tp/--pp/--sp put TP groups: on one host where they fit, or across hosts. */
enum placement { PLACEMENT_PACKED, PLACEMENT_SPREAD };

/* DDP: launch buckets during backward, after it, or alternate step by step (odd steps during). */
enum overlapMode { OVERLAP_NEVER, OVERLAP_ALWAYS, OVERLAP_ALTERNATE };

struct trainOptions {
    enum trainMode mode;
    int bf16; /* --dtype bf16: parameters and gradients in bf16, fp32 master weights */
    int layers, hidden, ffn, classes;
    int heads, seq; /* attention in every block (heads 0: none) over sequences of seq tokens */
    int tp, pp, sp; /* tensor, pipeline, sequence parallelism (1: none); the rest of the ranks
                     * is data parallel */
    int microbatches;
    int checkpoint; /* activation checkpointing in segments of this many blocks (0: none) */
    enum pipeSchedule schedule;
    enum placement placement;
    int batch; /* samples (tokens) per rank per step */
    int steps;
    long samples; /* size of the synthetic data set */
    uint64_t seed;
    double lr;
    double bucketMb;
    enum overlapMode overlap;
    int check;
    int logEvery;
    int verifyEvery; /* steps between cross-rank parameter fingerprints (0: only at the end) */
    int experts, topK;
    double capacity, auxWeight;
    int elastic;          /* --elastic: go on without a rank that fails */
    const char *growFile; /* --grow-file PATH: after a shrink, grow back through PATH */
    const char *joinFile; /* --join PATH: a replacement, joining through PATH */
    int testKillRank;     /* --test-kill R:S: rank R SIGKILLs itself at step S (-1: no) */
    long testKillStep;
};

/* ---- memory ledger ---- */

enum ledgerKind {
    LEDGER_PARAMS,
    LEDGER_GRADS,
    LEDGER_OPTIM,
    LEDGER_ACTS,
    LEDGER_TEMP,
    LEDGER_KINDS
};

struct ledger {
    size_t now[LEDGER_KINDS];
    size_t peak[LEDGER_KINDS];
};

/*
 * Zeroed memory of `bytes`, counted under `kind` (ledger may be NULL: not
 * counted, as for the reference of --check). NULL on failure, with a line on
 * stderr.
 */
void *ledgerAlloc(struct ledger *l, enum ledgerKind kind, size_t bytes);
/* Frees what ledgerAlloc returned for the same kind and size. */
void ledgerFree(struct ledger *l, enum ledgerKind kind, void *p, size_t bytes);

/* ---- the trainer: what every strategy is handed ---- */

struct trainer {
    const struct trainOptions *opt;
    loomComm_t comm;
    int rank, nranks;
    /* This rank's rows (tokens) of each step's global batch of globalRows: [rowLo, rowLo + rows).
     * rank x batch, batch and nranks x batch, until --elastic re-divides them. */
    long rowLo, globalRows;
    int rows;
    struct ledger ledger;
    uint64_t commNs; /* time the training thread spent in or waiting for Loom calls */
    /* activations: the bytes without --checkpoint (LEDGER_ACTS), and the blocks, rows and
     * sequences they are for; the time of forwards and of their recomputation in backward */
    size_t actsWithout;
    int actsBlocks, actsRows;
    uint64_t forwardNs, recomputeNs;
};

/* Per-step figures a strategy reports; main combines them across ranks. */
struct stepStats {
    double loss;       /* this rank's mean loss over its batch */
    double gradNormSq; /* this rank's share of the squared norm of the averaged gradient */
    double dropped;    /* MoE: share of this rank's top-k choices dropped over capacity */
};

/* Weights and outputs in one canonical order, for the comparison of --check. */
struct finalState {
    size_t nweights;
    float *weights; /* fp32 master weights, unit by unit, unpadded */
    size_t noutputs;
    float *outputs; /* MoE: class probabilities of the last step's forward, global batch */
};

/* A training strategy: DDP, ZeRO-1/2/3 or MoE. */
struct strategy {
    void *self;
    /* Forward, backward, gradient communication and the optimizer step, for one batch. */
    loomResult_t (*step)(void *self, long step, const float *x, const int *labels,
                         struct stepStats *stats);
    /* A hash of the state every rank must hold bit for bit; NULL where all of it is sharded. */
    uint64_t (*fingerprint)(void *self);
    /* Collective: the final weights (and outputs) on every rank, for --check. */
    loomResult_t (*collect)(void *self, struct finalState *out);
    void (*destroy)(void *self);
    /*
     * --elastic, after t->comm was replaced by a smaller one and t's rows re-divided:
     * back to the state at the start of the step that failed, ready to redo it.
     * NULL where the state is sharded and a lost rank's share cannot be recovered.
     */
    loomResult_t (*regroup)(void *self);
    /* --elastic: called before each step, so that regroup can return to it. */
    void (*save)(void *self);
    /*
     * --grow-file/--join, collective on the grown communicator: rank 0's saved state
     * (that of the step about to be redone) to every rank, then as regroup.
     */
    loomResult_t (*adopt)(void *self);
    /* Collective, after the run (may be NULL): the strategy's own figures. */
    loomResult_t (*report)(void *self);
    /* Parameters in the model and the model-state formula of this strategy, for the ledger. */
    size_t psi;
    const char *formula; /* "16 Psi/N" */
    double formulaBytes; /* its value for this run */
};

loomResult_t ddpCreate(struct trainer *t, struct strategy *s);
loomResult_t zeroCreate(struct trainer *t, int stage, struct strategy *s);
loomResult_t moeCreate(struct trainer *t, struct strategy *s);
/* Tensor and pipeline parallelism (--tp, --pp), data parallel across their replicas. */
loomResult_t parCreate(struct trainer *t, struct strategy *s);

/* ---- helpers ---- */

/* Prints "loom-train: rank R: <what>" on stderr and returns res. */
loomResult_t trainFail(const struct trainer *t, loomResult_t res, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* A Loom call, timed into t->commNs; on failure prints the call's name and loomGetLastError. */
loomResult_t trainComm(struct trainer *t, const char *what, loomResult_t res, uint64_t startNs);

uint64_t nowNs(void);
void freeFinalState(struct finalState *f);

/* bfloat16: the high half of a float; rounding to nearest even, NaN kept a (quiet) NaN. */
static inline float bf16ToFloat(uint16_t b)
{
    uint32_t u = (uint32_t)b << 16;
    float f;
    memcpy(&f, &u, sizeof(f));
    return f;
}

static inline uint16_t floatToBf16(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof(u));
    if ((u & 0x7fffffffu) > 0x7f800000u)
        return (uint16_t)((u >> 16) | 0x40u);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

#endif /* LOOM_TRAIN_H_ */
