/*
 * enqueue.c — API entry for collectives and point-to-point: check the
 * arguments (opcheck.c), capture the operation, and run it now (plan.c), at
 * group end (group.c) or on a stream (stream.c).
 */
#include <stdlib.h>
#include <string.h>

#include "debug.h"
#include "enqueue.h"
#include "plan.h"

static loomResult_t opSubmit(struct loomOp *op)
{
    if (groupActive())
        return groupAdd(op);
    if (op->stream)
        return streamEnqueue(op->stream, op, 1);
    if (op->comm->queue) { /* non-blocking mode: the comm's own stream runs it */
        loomResult_t queued = streamEnqueue(op->comm->queue, op, 1);
        return queued == loomSuccess ? loomInProgress : queued;
    }
    loomResult_t res = planExecute(op, 1);
    opRelease(op);
    return res;
}

static loomResult_t opIssue(struct loomOp *op)
{
    const char *fn = loomCollName(op->coll);
    loomResult_t res = opCheck(op, fn);
    if (res != loomSuccess) {
        if (commIsLive(op->comm))
            commRecordError(op->comm);
        if (groupActive())
            groupRecordError(res);
        opRelease(op);
        return res;
    }
    atomic_fetch_add_explicit(&op->comm->activeCalls, 1, memory_order_acq_rel);
    res = opSubmit(op);
    if (res != loomSuccess && res != loomInProgress)
        commRecordError(op->comm);
    atomic_fetch_sub_explicit(&op->comm->activeCalls, 1, memory_order_acq_rel);
    return res;
}

loomResult_t loomAllReduce(const void *sendbuff, void *recvbuff, size_t count,
                           loomDataType_t datatype, loomRedOp_t op, loomComm_t comm,
                           loomStream_t stream)
{
    struct loomOp o = {
        LOOM_COLL_ALLREDUCE, sendbuff, recvbuff, count, datatype, op, 0, comm, stream, NULL, 0};
    return opIssue(&o);
}

loomResult_t loomBroadcast(const void *sendbuff, void *recvbuff, size_t count,
                           loomDataType_t datatype, int root, loomComm_t comm, loomStream_t stream)
{
    struct loomOp o = {LOOM_COLL_BROADCAST,
                       sendbuff,
                       recvbuff,
                       count,
                       datatype,
                       loomSum,
                       root,
                       comm,
                       stream,
                       NULL,
                       0};
    return opIssue(&o);
}

loomResult_t loomReduce(const void *sendbuff, void *recvbuff, size_t count, loomDataType_t datatype,
                        loomRedOp_t op, int root, loomComm_t comm, loomStream_t stream)
{
    struct loomOp o = {LOOM_COLL_REDUCE, sendbuff, recvbuff, count, datatype, op, root, comm,
                       stream,           NULL,     0};
    return opIssue(&o);
}

loomResult_t loomAllGather(const void *sendbuff, void *recvbuff, size_t sendcount,
                           loomDataType_t datatype, loomComm_t comm, loomStream_t stream)
{
    struct loomOp o = {LOOM_COLL_ALLGATHER,
                       sendbuff,
                       recvbuff,
                       sendcount,
                       datatype,
                       loomSum,
                       0,
                       comm,
                       stream,
                       NULL,
                       0};
    return opIssue(&o);
}

loomResult_t loomReduceScatter(const void *sendbuff, void *recvbuff, size_t recvcount,
                               loomDataType_t datatype, loomRedOp_t op, loomComm_t comm,
                               loomStream_t stream)
{
    struct loomOp o = {LOOM_COLL_REDUCESCATTER,
                       sendbuff,
                       recvbuff,
                       recvcount,
                       datatype,
                       op,
                       0,
                       comm,
                       stream,
                       NULL,
                       0};
    return opIssue(&o);
}

loomResult_t loomAlltoAll(const void *sendbuff, void *recvbuff, size_t count,
                          loomDataType_t datatype, loomComm_t comm, loomStream_t stream)
{
    struct loomOp o = {
        LOOM_COLL_ALLTOALL, sendbuff, recvbuff, count, datatype, loomSum, 0, comm, stream, NULL, 0};
    return opIssue(&o);
}

loomResult_t loomAlltoAllv(const void *sendbuff, const size_t sendcounts[], const size_t sdispls[],
                           void *recvbuff, const size_t recvcounts[], const size_t rdispls[],
                           loomDataType_t datatype, loomComm_t comm, loomStream_t stream)
{
    const char *fn = "loomAlltoAllv";
    loomResult_t res = commCheck(comm, fn);
    if (res == loomSuccess && (!sendcounts || !sdispls || !recvcounts || !rdispls))
        res = loomSetError(loomInvalidArgument,
                           "%s: sendcounts, sdispls, recvcounts and rdispls must not be NULL", fn);
    if (res == loomSuccess && (unsigned)datatype >= loomNumTypes)
        res = loomSetError(loomInvalidArgument, "%s: datatype %d is not a loomDataType_t (0..%d)",
                           fn, (int)datatype, loomNumTypes - 1);
    if (res != loomSuccess) {
        if (commIsLive(comm))
            commRecordError(comm);
        if (groupActive())
            groupRecordError(res);
        return res;
    }
    size_t n = (size_t)comm->nranks;
    size_t *v = malloc(4 * n * sizeof(*v));
    if (v == NULL)
        return loomSetError(loomSystemError, "%s: out of memory", fn);
    memcpy(v, sendcounts, n * sizeof(*v));
    memcpy(v + n, sdispls, n * sizeof(*v));
    memcpy(v + 2 * n, recvcounts, n * sizeof(*v));
    memcpy(v + 3 * n, rdispls, n * sizeof(*v));
    struct loomOp o = {
        LOOM_COLL_ALLTOALLV, sendbuff, recvbuff, 0, datatype, loomSum, 0, comm, stream, v, 0};
    return opIssue(&o);
}

loomResult_t loomSend(const void *sendbuff, size_t count, loomDataType_t datatype, int peer,
                      loomComm_t comm, loomStream_t stream)
{
    struct loomOp o = {LOOM_COLL_SEND, sendbuff, NULL,   count, datatype, loomSum,
                       peer,           comm,     stream, NULL,  0};
    return opIssue(&o);
}

loomResult_t loomRecv(void *recvbuff, size_t count, loomDataType_t datatype, int peer,
                      loomComm_t comm, loomStream_t stream)
{
    struct loomOp o = {LOOM_COLL_RECV, NULL, recvbuff, count, datatype, loomSum,
                       peer,           comm, stream,   NULL,  0};
    return opIssue(&o);
}

void opRelease(struct loomOp *op)
{
    free(op->v);
    op->v = NULL;
}
