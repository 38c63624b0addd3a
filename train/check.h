/*
 * check.h — the single-process reference of --check and the comparison with
 * a distributed run. See check.c.
 */
#ifndef LOOM_TRAIN_CHECK_H_
#define LOOM_TRAIN_CHECK_H_

#include "train.h"

struct runRecord {
    double *loss;     /* per step: the global mean loss */
    double *gradNorm; /* per step: the norm of the global mean gradient */
    struct finalState final;
    float *initial; /* the reference only: the weights before training, in the same order */
};

/*
 * Trains the model of `o` alone, with no communication, on the global batch
 * of every step (the union of the batches of `nranks` ranks), and records
 * what a distributed run records. Fills ref (loss and gradNorm allocated).
 */
loomResult_t referenceRun(const struct trainOptions *o, int nranks, struct runRecord *ref);
/* Prints the comparison of a run with its reference; returns 1 if it holds, 0 if not. */
int checkCompare(const struct trainOptions *o, int nranks, const struct runRecord *ref,
                 const struct runRecord *run);
void runRecordFree(struct runRecord *r);
/*
 * 1 when Loom sends float32 reductions as bfloat16 over network links
 * (LOOM_NET_COMPRESS, as the library reads it): the gradients' sums are then
 * as coarse as bf16 mode's, and --check holds them to its tolerances.
 */
int checkNetCompressed(void);

#endif /* LOOM_TRAIN_CHECK_H_ */
