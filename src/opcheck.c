/*
 * opcheck.c — the argument checks of every collective and point-to-point
 * call: each bad argument gives loomInvalidArgument and one line naming the
 * call and the argument, before anything is captured or run.
 */
#include <stdint.h>

#include "compress.h"
#include "cudacore.h"
#include "debug.h"
#include "enqueue.h"
#include "reduce.h"

static int collReduces(loomColl_t c)
{
    return c == LOOM_COLL_REDUCE || c == LOOM_COLL_ALLREDUCE || c == LOOM_COLL_REDUCESCATTER;
}

static loomResult_t checkBuffers(const struct loomOp *op, const char *fn)
{
    int me = op->comm->rank;
    int needSend =
        op->coll != LOOM_COLL_RECV && (op->coll != LOOM_COLL_BROADCAST || op->root == me);
    int needRecv = op->coll != LOOM_COLL_SEND && (op->coll != LOOM_COLL_REDUCE || op->root == me);
    if (op->count == 0)
        return loomSuccess;
    if (needSend && op->sendbuff == NULL)
        return loomSetError(loomInvalidArgument, "%s: sendbuff is NULL with count %zu", fn,
                            op->count);
    if (needRecv && op->recvbuff == NULL)
        return loomSetError(loomInvalidArgument, "%s: recvbuff is NULL with count %zu", fn,
                            op->count);
    return loomSuccess;
}

static loomResult_t checkCounts(const struct loomOp *op, const char *fn)
{
    size_t es = reduceTypeSize(op->dt), blocks = opBlocks(op);
    if (op->count > (size_t)PTRDIFF_MAX / es / blocks)
        return loomSetError(loomInvalidArgument,
                            "%s: count %zu of %s (x %zu blocks) overflows the address space", fn,
                            op->count, reduceTypeName(op->dt), blocks);
    return loomSuccess;
}

static loomResult_t checkAlltoAllv(const struct loomOp *op, const char *fn)
{
    const size_t *v = op->v;
    size_t n = (size_t)op->comm->nranks, es = reduceTypeSize(op->dt);
    size_t sendEnd = 0, recvEnd = 0;
    for (size_t p = 0; p < n; p++) {
        for (int k = 0; k < 4; k += 2) {
            size_t c = v[k * n + p], d = v[(k + 1) * n + p];
            if (c > (size_t)PTRDIFF_MAX / es || d > (size_t)PTRDIFF_MAX / es - c)
                return loomSetError(loomInvalidArgument,
                                    "%s: %s[%zu] = %zu with displacement %zu overflows", fn,
                                    k ? "recvcounts" : "sendcounts", p, c, d);
            if (c)
                *(k ? &recvEnd : &sendEnd) =
                    c + d > *(k ? &recvEnd : &sendEnd) ? c + d : *(k ? &recvEnd : &sendEnd);
        }
    }
    if (v[op->comm->rank] != v[2 * n + op->comm->rank])
        return loomSetError(
            loomInvalidArgument, "%s: sendcounts[%d] = %zu differs from recvcounts[%d] = %zu", fn,
            op->comm->rank, v[op->comm->rank], op->comm->rank, v[2 * n + op->comm->rank]);
    if (sendEnd && op->sendbuff == NULL)
        return loomSetError(loomInvalidArgument, "%s: sendbuff is NULL with data to send", fn);
    if (recvEnd && op->recvbuff == NULL)
        return loomSetError(loomInvalidArgument, "%s: recvbuff is NULL with data to receive", fn);
    const char *s = op->sendbuff, *r = op->recvbuff;
    if (sendEnd && recvEnd && s < r + recvEnd * es && r < s + sendEnd * es)
        return loomSetError(loomInvalidArgument,
                            "%s: sendbuff and recvbuff overlap (AlltoAllv is not in place)", fn);
    return loomSuccess;
}

loomResult_t opCheck(const struct loomOp *op, const char *fn)
{
    LOOMCHECK(commCheck(op->comm, fn));
    LOOMCHECK(commCheckReady(op->comm, fn));
    if ((unsigned)op->dt >= loomNumTypes)
        return loomSetError(loomInvalidArgument, "%s: datatype %d is not a loomDataType_t (0..%d)",
                            fn, (int)op->dt, loomNumTypes - 1);
    if (collReduces(op->coll) && (unsigned)op->op >= loomNumOps)
        return loomSetError(loomInvalidArgument, "%s: op %d is not a loomRedOp_t (0..%d)", fn,
                            (int)op->op, loomNumOps - 1);
    if ((op->coll == LOOM_COLL_BROADCAST || op->coll == LOOM_COLL_REDUCE) &&
        (op->root < 0 || op->root >= op->comm->nranks))
        return loomSetError(loomInvalidArgument,
                            "%s: root %d is out of range for a communicator of %d ranks", fn,
                            op->root, op->comm->nranks);
    if ((op->coll == LOOM_COLL_SEND || op->coll == LOOM_COLL_RECV) &&
        (op->root < 0 || op->root >= op->comm->nranks))
        return loomSetError(loomInvalidArgument,
                            "%s: peer %d is out of range for a communicator of %d ranks", fn,
                            op->root, op->comm->nranks);
    if (op->stream)
        LOOMCHECK(streamCheck(op->stream, fn));
    LOOMCHECK(compressOpCheck(op, fn));
    if (op->coll == LOOM_COLL_ALLTOALLV) {
        LOOMCHECK(checkAlltoAllv(op, fn));
    } else {
        LOOMCHECK(checkCounts(op, fn));
        LOOMCHECK(checkBuffers(op, fn));
    }
    return cudaOpCheck(op, fn);
}
