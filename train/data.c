/*
 * data.c — deterministic synthetic data, sharded as DistributedSampler does.
 *
 * Sample i is `dim` standard normal values drawn from a counter-based hash of
 * (seed, i), so any process can make any sample without shared state. Its
 * label comes from a fixed random teacher drawn from the same seed:
 *
 *   label(x) = argmax_c  sum_h tanh( x . T1[:,h] / sqrt(dim) ) T2[h,c]
 *
 * which a student of linear layers, GELU and layer norm can learn.
 *
 * Sharding follows torch.utils.data.DistributedSampler with shuffle on and
 * drop_last off, under a DataLoader that drops the last partial batch:
 * every epoch the indices 0..S-1 are shuffled by a generator seeded with
 * (seed, epoch), padded by repeating the first ones to a multiple of the
 * number of ranks N, and rank r takes positions r, r+N, r+2N, ... Its k-th
 * batch is the next `batch` of those. The single-process reference of
 * --check asks for every rank's batch of a step and so sees the same global
 * batch the ranks trained on together.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "data.h"

#define STREAM_DATA 0xda7a000000000000ULL
#define STREAM_TEACHER1 0x7eac000000000001ULL
#define STREAM_TEACHER2 0x7eac000000000002ULL
#define STREAM_PERM 0x9e4d000000000000ULL
#define TEACHER_HIDDEN 32

uint64_t rngHash(uint64_t seed, uint64_t stream, uint64_t index)
{
    /* splitmix64's finaliser over a mix of the three words */
    uint64_t z = seed * 0x9e3779b97f4a7c15ULL ^ (stream + 0x632be59bd9b4e019ULL);
    z = (z ^ (z >> 31)) * 0xbf58476d1ce4e5b9ULL + index * 0x94d049bb133111ebULL;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

double rngNormal(uint64_t seed, uint64_t stream, uint64_t index)
{
    uint64_t a = rngHash(seed, stream, 2 * index);
    uint64_t b = rngHash(seed, stream, 2 * index + 1);
    double u1 = ((double)(a >> 11) + 1.0) * 0x1p-53; /* (0, 1] */
    double u2 = (double)(b >> 11) * 0x1p-53;         /* [0, 1) */
    return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

loomResult_t dataInit(struct dataSet *d, int dim, int classes, long samples, int batch, int nranks,
                      uint64_t seed)
{
    memset(d, 0, sizeof(*d));
    d->dim = dim;
    d->classes = classes;
    d->teacherHidden = TEACHER_HIDDEN;
    d->samples = samples;
    d->batch = batch;
    d->nranks = nranks;
    d->seed = seed;
    d->perRank = (samples + nranks - 1) / nranks;
    d->stepsPerEpoch = d->perRank / batch;
    d->permEpoch = -1;
    if (d->stepsPerEpoch < 1) {
        fprintf(stderr,
                "loom-train: --samples %ld gives each of %d ranks %ld samples, fewer than "
                "--batch %d; raise --samples\n",
                samples, nranks, d->perRank, batch);
        return loomInvalidArgument;
    }
    d->teacher1 = calloc((size_t)dim * TEACHER_HIDDEN, sizeof(*d->teacher1));
    d->teacher2 = calloc((size_t)TEACHER_HIDDEN * classes, sizeof(*d->teacher2));
    d->perm = calloc((size_t)(d->perRank * nranks), sizeof(*d->perm));
    if (d->teacher1 == NULL || d->teacher2 == NULL || d->perm == NULL) {
        fprintf(stderr, "loom-train: out of memory for the data set\n");
        dataFree(d);
        return loomSystemError;
    }
    for (size_t i = 0; i < (size_t)dim * TEACHER_HIDDEN; i++)
        d->teacher1[i] = (float)rngNormal(seed, STREAM_TEACHER1, i);
    for (size_t i = 0; i < (size_t)TEACHER_HIDDEN * classes; i++)
        d->teacher2[i] = (float)rngNormal(seed, STREAM_TEACHER2, i);
    return loomSuccess;
}

void dataFree(struct dataSet *d)
{
    free(d->teacher1);
    free(d->teacher2);
    free(d->perm);
    d->teacher1 = d->teacher2 = NULL;
    d->perm = NULL;
}

/* Fisher-Yates with a generator seeded by (seed, epoch), then DistributedSampler's padding. */
static void dataShuffle(struct dataSet *d, long epoch)
{
    long n = d->samples, total = d->perRank * d->nranks;
    for (long i = 0; i < n; i++)
        d->perm[i] = i;
    for (long i = n - 1; i > 0; i--) {
        long j = (long)(rngHash(d->seed, STREAM_PERM + (uint64_t)epoch, (uint64_t)i) %
                        (uint64_t)(i + 1));
        long tmp = d->perm[i];
        d->perm[i] = d->perm[j];
        d->perm[j] = tmp;
    }
    for (long i = n; i < total; i++)
        d->perm[i] = d->perm[i - n];
    d->permEpoch = epoch;
}

static int dataLabel(const struct dataSet *d, const float *x)
{
    float hidden[TEACHER_HIDDEN];
    float scale = 1.0f / sqrtf((float)d->dim);
    for (int h = 0; h < TEACHER_HIDDEN; h++) {
        float s = 0.0f;
        for (int i = 0; i < d->dim; i++)
            s += x[i] * d->teacher1[(size_t)i * TEACHER_HIDDEN + h];
        hidden[h] = tanhf(s * scale);
    }
    int best = 0;
    float bestScore = -INFINITY;
    for (int c = 0; c < d->classes; c++) {
        float s = 0.0f;
        for (int h = 0; h < TEACHER_HIDDEN; h++)
            s += hidden[h] * d->teacher2[(size_t)h * d->classes + c];
        if (s > bestScore) {
            bestScore = s;
            best = c;
        }
    }
    return best;
}

long dataIndex(struct dataSet *d, int rank, long step, int j)
{
    long epoch = step / d->stepsPerEpoch, within = step % d->stepsPerEpoch;
    if (epoch != d->permEpoch)
        dataShuffle(d, epoch);
    return d->perm[rank + (long)d->nranks * (within * d->batch + j)];
}

loomResult_t dataRows(struct dataSet *d, long step, long lo, int n, float *x, int *labels)
{
    for (int j = 0; j < n; j++) {
        long g = lo + j, sample = dataIndex(d, (int)(g / d->batch), step, (int)(g % d->batch));
        float *row = x + (size_t)j * d->dim;
        for (int i = 0; i < d->dim; i++)
            row[i] = (float)rngNormal(d->seed, STREAM_DATA, (uint64_t)sample * d->dim + i);
        labels[j] = dataLabel(d, row);
    }
    return loomSuccess;
}

loomResult_t dataBatch(struct dataSet *d, int rank, long step, float *x, int *labels)
{
    return dataRows(d, step, (long)rank * d->batch, d->batch, x, labels);
}
