/*
 * enqueue.h — from an API call to work: the captured operation, groups, plans
 * and host streams.
 *
 *   loomAllReduce(...) -> check arguments -> struct loomOp
 *       -> inside a group: kept until loomGroupEnd
 *       -> on a stream: queued for the stream's progress thread
 *       -> otherwise: planExecute on the calling thread
 *
 * planExecute turns operations into lanes (one schedule per channel, cached
 * per communicator) and runs them on the executor the decision record names
 * (executorRun, src/exec/executor.h).
 */
#ifndef LOOM_ENQUEUE_H_
#define LOOM_ENQUEUE_H_

#include "core.h"
#include "op.h"
#include "schedule.h"

/* Frees what an op owns. */
void opRelease(struct loomOp *op);

/* opcheck.c */
/* loomSuccess if op's arguments are valid; else loomInvalidArgument (or the comm's state) and one
 * line naming fn. */
loomResult_t opCheck(const struct loomOp *op, const char *fn);

/* group.c */
int groupActive(void);
/* Adds a checked op to the current group (takes ownership of op->v). */
loomResult_t groupAdd(struct loomOp *op);
/* Records a failed call inside a group: loomGroupEnd will return it and run nothing. */
void groupRecordError(loomResult_t res);

/* stream.c */
/* loomSuccess if s is a live stream; else loomInvalidArgument naming fn. */
loomResult_t streamCheck(struct loomStream *s, const char *fn);
/* Queues ops (ownership of each op's v passes to the stream) as one unit of work. */
loomResult_t streamEnqueue(struct loomStream *s, struct loomOp *ops, int nops);
/* 1 if s wraps a CUDA stream (its units are ordered by cudaStreamFence). */
int streamIsCuda(const struct loomStream *s);
/* The application's cudaStream_t that s wraps (streamIsCuda). */
void *streamCudaHandle(const struct loomStream *s);
/* Records res (the line given) as s's first error, if it has none. */
void streamRecordError(struct loomStream *s, loomResult_t res, const char *line);

#endif /* LOOM_ENQUEUE_H_ */
