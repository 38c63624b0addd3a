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
 * per communicator) and runs them with execRun.
 */
#ifndef LOOM_ENQUEUE_H_
#define LOOM_ENQUEUE_H_

#include "core.h"
#include "reduce.h"
#include "schedule.h"

struct loomOp {
    loomColl_t coll;
    const void *sendbuff;
    void *recvbuff;
    size_t count;
    loomDataType_t dt;
    loomRedOp_t op;
    int root; /* Broadcast/Reduce root; Send/Recv peer */
    struct loomComm *comm;
    struct loomStream *stream;
    size_t *v;       /* AlltoAllv: sendcounts, sdispls, recvcounts, rdispls (4 x nranks), owned */
    uint64_t recPos; /* its flight recorder entry + 1 while it runs (src/recorder.c), else 0 */
};

/* Frees what an op owns. */
void opRelease(struct loomOp *op);

/* Elements of the op's send buffer, and of its receive buffer, in units of its count. */
static inline size_t opSendBlocks(const struct loomOp *op)
{
    int many = op->coll == LOOM_COLL_REDUCESCATTER || op->coll == LOOM_COLL_ALLTOALL;
    return many ? (size_t)op->comm->nranks : 1;
}

static inline size_t opRecvBlocks(const struct loomOp *op)
{
    int many = op->coll == LOOM_COLL_ALLGATHER || op->coll == LOOM_COLL_ALLTOALL;
    return many ? (size_t)op->comm->nranks : 1;
}

/* Elements of the op's largest buffer, in units of its count. */
static inline size_t opBlocks(const struct loomOp *op)
{
    size_t s = opSendBlocks(op), r = opRecvBlocks(op);
    return s > r ? s : r;
}

/* The op's size as the tuner sees it: bytes of its largest buffer (AlltoAllv: all it sends). */
static inline size_t opBytes(const struct loomOp *op)
{
    if (op->coll == LOOM_COLL_ALLTOALLV) {
        size_t count = 0;
        for (int p = 0; p < op->comm->nranks; p++)
            count += op->v[p];
        return count * reduceTypeSize(op->dt);
    }
    return op->count * reduceTypeSize(op->dt) * opBlocks(op);
}

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

#endif /* LOOM_ENQUEUE_H_ */
