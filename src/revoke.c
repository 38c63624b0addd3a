/*
 * revoke.c — loomCommRevoke, as NCCL 2.28's ncclCommRevoke: stop what is in
 * flight on a communicator and keep it only as the parent of a new one.
 *
 * Revoke marks comm broken (reason: revoked), so that new calls and the
 * operations still queued on streams are refused, then raises the abort
 * flag, which every wait of the executors polls, so that operations in
 * flight on any thread end (loomRemoteError). Peers are not told: each rank
 * revokes its own communicator. Once no API call is inside comm and nothing
 * is queued (comm->activeCalls, comm->pending) the abort flag goes down
 * again, because the bootstrap ring that carries loomCommSplit polls the
 * same flag; shrink and grow meet without the ring.
 *
 *   REVOKE_NONE --loomCommRevoke--> REVOKE_STOPPING --quiescent--> REVOKE_DONE
 *
 * loomCommGetAsyncError reports loomInProgress while STOPPING, loomSuccess
 * once DONE; the move to DONE happens in whichever call looks first.
 */
#include <time.h>

#include "core.h"
#include "debug.h"
#include "exec.h"
#include "lifecycle.h"

int commRevokeSettle(struct loomComm *comm, int wait)
{
    for (;;) {
        if (atomic_load_explicit(&comm->revoked, memory_order_acquire) != REVOKE_STOPPING)
            return 1;
        if (atomic_load(&comm->pending) == 0 && atomic_load(&comm->activeCalls) == 0) {
            /* Nothing polls the flag now; two threads may both get here, harmlessly. */
            atomic_store_explicit(&comm->abortFlag, 0, memory_order_release);
            atomic_store_explicit(&comm->revoked, REVOKE_DONE, memory_order_release);
            return 1;
        }
        if (!wait)
            return 0;
        execWake(comm);
        struct timespec ts = {0, 1000000};
        nanosleep(&ts, NULL);
    }
}

loomResult_t commCheckParent(struct loomComm *comm, const char *fn)
{
    LOOMCHECK(commCheck(comm, fn));
    if (!atomic_load(&comm->revoked))
        return commCheckReady(comm, fn);
    commRevokeSettle(comm, 1);
    return loomSuccess;
}

loomResult_t loomCommRevoke(loomComm_t comm, int revokeFlags)
{
    const char *fn = "loomCommRevoke";
    LOOMCHECK(commCheck(comm, fn));
    if (revokeFlags != LOOM_REVOKE_DEFAULT)
        return loomSetError(loomInvalidArgument, "%s: revokeFlags 0x%x is not LOOM_REVOKE_DEFAULT",
                            fn, (unsigned)revokeFlags);
    if (atomic_load_explicit(&comm->initializing, memory_order_acquire))
        return loomSetError(loomInvalidUsage,
                            "%s: the communicator is still being created (non-blocking mode); "
                            "abort it instead",
                            fn);
    int none = REVOKE_NONE;
    if (atomic_compare_exchange_strong(&comm->revoked, &none, REVOKE_STOPPING)) {
        commSetBroken(comm, loomInvalidUsage, "it was revoked (loomCommRevoke)");
        atomic_store_explicit(&comm->abortFlag, 1, memory_order_release);
        execWake(comm);
        INFO(LOOM_INIT, "%s: rank %d of %d revoked; its operations in flight are stopping", fn,
             comm->rank, comm->nranks);
    }
    /* As NCCL: a blocking communicator returns once quiescent, a non-blocking one at once. */
    return commRevokeSettle(comm, comm->blocking) ? loomSuccess : loomInProgress;
}
