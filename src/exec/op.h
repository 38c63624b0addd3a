/*
 * op.h — one operation as the API captured it (struct loomOp): what the
 * planner turns into lanes and what the executors read of a call (its
 * buffers, type and stream). Here, below the core, so that the executors
 * need nothing of the API entry (enqueue.h) to see it.
 */
#ifndef LOOM_OP_H_
#define LOOM_OP_H_

#include "core.h"
#include "reduce.h"

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
    uint64_t recPos; /* its flight recorder entry + 1 while it runs (src/exec/recorder.c), else 0 */
};

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

#endif /* LOOM_OP_H_ */
