/*
 * cudaplan.h — the CUDA side of a device plan, as the two executors of
 * device buffers share it (cudaplan.c): Loom's kernels loaded in the
 * buffers' context, and this thread's stream, events and scratch for it
 * (struct cudaExec, the `dev` of struct loomExecCall). The host-driven
 * executor's device steps (cudaexec.c) keep their ring of steps in flight
 * here; the launched interpreter (devexec.c) takes the context, the streams
 * and the launch of loomInterpret through cudacore.h's functions. Private to
 * src/exec/: the core holds a struct cudaExec only as a handle.
 */
#ifndef LOOM_CUDAPLAN_H_
#define LOOM_CUDAPLAN_H_

#include "core.h"
#include "cudalib.h"

#define CUDA_EXEC_RING 64 /* steps in flight per thread */
#define CUDA_SCRATCH_GROWTHS 48

/* Loom's kernels in one context. */
struct cudaKernels {
    cuContext_t ctx;
    cuFunction_t reduce[loomNumTypes][loomNumOps];
    cuFunction_t wait;
    cuFunction_t interpret; /* loomInterpret (devexec.c) */
    unsigned int maxBlocks;
    loomResult_t failed; /* the load failed: this, with why, for every later call */
    char why[256];
};

/* A step in flight: the counters to publish once its event has completed. */
struct cudaRecord {
    cuEvent_t event;
    int nsend, nrecv;
    struct loomConnector *sc[LOOM_STEP_MAXPEERS], *rc[LOOM_STEP_MAXPEERS];
    uint64_t sendPos[LOOM_STEP_MAXPEERS], recvPos[LOOM_STEP_MAXPEERS];
};

/* A thread's CUDA side for the context it last ran a device plan in. */
struct cudaExec {
    const struct cudaLib *lib;
    const struct cudaKernels *kernels;
    cuContext_t ctx;
    cuContext_t saved; /* the thread's context before the plan */
    cuStream_t stream;
    cuStream_t work; /* where the plan's own copies go: stream, or the launch's (devexec.c) */
    struct cudaRecord rec[CUDA_EXEC_RING];
    unsigned int head, tail; /* retired, issued */
    cuDevPtr_t scratch;      /* in-place AlltoAll staging */
    size_t scratchBytes;
    cuDevPtr_t retired[CUDA_SCRATCH_GROWTHS]; /* outgrown scratch, freed with it */
    int nRetired;
};

#endif /* LOOM_CUDAPLAN_H_ */
