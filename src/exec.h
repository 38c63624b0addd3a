/*
 * exec.h — the host executor: runs lanes of steps over connectors.
 *
 * A lane is one schedule applied to one operation's buffers on one channel.
 * A plan (one call, or one group) is a set of lanes run together: each lane
 * goes step by step in order, but lanes progress independently, so any
 * matching set of sends and receives completes. Two lanes that use the same
 * connector take turns in plan order (the order the user issued them, the
 * same on both ends).
 */
#ifndef LOOM_EXEC_H_
#define LOOM_EXEC_H_

#include "core.h"
#include "schedule.h"

struct loomLane {
    struct loomComm *comm;
    int channel;
    const struct loomStep *steps;
    size_t nsteps;
    size_t cur;
    char *bufs[2]; /* LOOM_BUF_SEND, LOOM_BUF_RECV */
    loomDataType_t dt;
    loomRedOp_t op;
    size_t elemSize;
    int done;
};

struct cudaExec;

/*
 * Runs every lane to completion. Returns loomSuccess, loomTimeout (no progress
 * for the comm's timeout), loomRemoteError (abort, or a peer died), or
 * loomInvalidUsage (the peers disagree on a message size). On an error the
 * communicators involved are marked broken. `dev` is NULL for host buffers,
 * else the CUDA executor that computes the steps (src/cuda/cudacore.h).
 */
loomResult_t execRun(struct loomLane *lanes, int nlanes, struct cudaExec *dev);

/* Wakes a thread of this process blocked in execRun on comm (used by abort). */
void execWake(struct loomComm *comm);
/*
 * Posts `reason` with code `res` on the doorbell of every peer of comm and
 * wakes them, so that they stop waiting for this rank (see exec.c); peers
 * behind a network connector get it through comm->notifyPeer.
 */
void execPostFailure(struct loomComm *comm, loomResult_t res, const char *reason);
/*
 * loomSuccess, or the failure a peer posted to this rank of comm: loomTimeout
 * for a peer's timeout, else loomRemoteError, with the peer's line recorded.
 */
loomResult_t execPeerFailure(struct loomComm *comm);
/*
 * 1 if this rank knows peer p to have failed: its process on this host is
 * gone (or a zombie), a transport saw its connection end, or, once a wait on
 * comm timed out, it is stopped on this host. Any thread.
 */
int execPeerFailed(const struct loomComm *comm, int p);

#endif /* LOOM_EXEC_H_ */
