/*
 * data.h — deterministic synthetic data, sharded across ranks as PyTorch's
 * DistributedSampler does. See data.c.
 */
#ifndef LOOM_TRAIN_DATA_H_
#define LOOM_TRAIN_DATA_H_

#include <stddef.h>
#include <stdint.h>

#include "loom.h"

/* Counter-based random numbers: the same (seed, stream, index) gives the same value anywhere. */
uint64_t rngHash(uint64_t seed, uint64_t stream, uint64_t index);
/* A standard normal value for (seed, stream, index). */
double rngNormal(uint64_t seed, uint64_t stream, uint64_t index);

struct dataSet {
    int dim, classes, teacherHidden;
    long samples;
    uint64_t seed;
    int nranks;
    long perRank;       /* ceil(samples / nranks): DistributedSampler's num_samples */
    long stepsPerEpoch; /* perRank / batch, the last partial batch dropped */
    int batch;
    float *teacher1; /* dim x teacherHidden */
    float *teacher2; /* teacherHidden x classes */
    long *perm;      /* the shuffled, padded order of the current epoch */
    long permEpoch;
};

/*
 * A data set of `samples` inputs of `dim` normal values, each labelled by a
 * fixed random teacher network drawn from `seed`. Fails with
 * loomInvalidArgument if one epoch holds no full batch for every rank.
 */
loomResult_t dataInit(struct dataSet *d, int dim, int classes, long samples, int batch, int nranks,
                      uint64_t seed);
void dataFree(struct dataSet *d);
/* The index of the j-th sample of rank `rank`'s batch of step `step` (0-based). */
long dataIndex(struct dataSet *d, int rank, long step, int j);
/* Rank `rank`'s batch of step `step` (0-based): batch x dim inputs and batch labels. */
loomResult_t dataBatch(struct dataSet *d, int rank, long step, float *x, int *labels);

/*
 * Rows [lo, lo + n) of the global batch of step `step`: the batches of every
 * rank stacked in rank order (row k x batch + j is sample j of rank k).
 * Rank k's batch is rows [k x batch, (k + 1) x batch); --elastic re-divides
 * the same rows among the ranks left after a failure.
 */
loomResult_t dataRows(struct dataSet *d, long step, long lo, int n, float *x, int *labels);

#endif /* LOOM_TRAIN_DATA_H_ */
