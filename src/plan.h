/*
 * plan.h — from operations (one call or one group) to lanes, and running
 * them (plan.c). Each communicator has a planner: its schedule cache and
 * pool, the memo of its last call, and the scratch its plans lay out.
 */
#ifndef LOOM_PLAN_H_
#define LOOM_PLAN_H_

#include "enqueue.h"

struct loomPlanner;

/* Gives comm its planner (at init, once its shape is final). */
loomResult_t plannerInit(struct loomComm *comm);
/* Frees comm's planner and every schedule it holds; safe if there is none. */
void plannerFree(struct loomComm *comm);

/* Runs ops (one call or one group) to completion on this thread. */
loomResult_t planExecute(struct loomOp *ops, int nops);
/*
 * 1 if ops, on device buffers (checked without recording an error), run as
 * one launch of the plan interpreter (src/exec/devexec.c): the executor the
 * tuner chose for every communicator of ops (LOOM_EXECUTOR=kernel, shared
 * memory links only). A Loom CUDA stream launches such calls at once.
 */
int planLaunched(const struct loomOp *ops, int nops);
/* Frees this thread's plan arrays (called when a stream thread ends). */
void planThreadCleanup(void);

#endif /* LOOM_PLAN_H_ */
