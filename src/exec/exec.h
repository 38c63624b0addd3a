/*
 * exec.h — the host executor: runs lanes of steps over connectors.
 *
 * A lane is one plan applied to one operation's buffers on one channel; the
 * executor expands the plan into steps as it goes (loomPlanNext).
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
    const struct loomPlan *plan; /* expanded step by step as the lane runs */
    char *bufs[2];               /* LOOM_BUF_SEND, LOOM_BUF_RECV */
    loomDataType_t dt;
    loomRedOp_t op;
    size_t elemSize;
    int proto;    /* LOOM_PROTO_* (src/device/interp.h): LL only in the kernel executor */
    int compress; /* COMPRESS_* (compress.h): float32 as bfloat16 on network links */
    /* Set by execRun: */
    struct loomPlanIter it;
    struct loomStep step; /* the step to run next, while `more` */
    int more;
    size_t cur; /* steps run */
    int done;
    /* Send connectors that took a message by reference (LOOM_FIFO_REF) in this run: */
#define EXEC_REF_LINKS 4
    struct loomConnector *refs[EXEC_REF_LINKS];
    int nrefs;
};

struct cudaExec;

/*
 * The host executor's run (loomExecHost, executor.h): runs every lane, on
 * host buffers, to completion, after execPrepare. Returns loomSuccess,
 * loomTimeout (no progress for the comm's timeout), loomRemoteError (abort,
 * or a peer died), or loomInvalidUsage (the peers disagree on a message
 * size). On an error the communicators involved are marked broken.
 */
loomResult_t execRun(struct loomLane *lanes, int nlanes);
/*
 * Its loop, which the host-driven CUDA executor (cudaexec.c) runs too on
 * device buffers: `dev` (NULL for host buffers) computes the steps
 * (src/cuda/cudacore.h).
 */
loomResult_t execLoop(struct loomLane *lanes, int nlanes, struct cudaExec *dev);

/*
 * The failure machinery, shared with the kernel executor (kexec.c), whose
 * blocks watch their own lanes with it while they wait. `struct execWait`
 * is one waiter's state: zero it, then set idleSince when a wait begins.
 */
#define EXEC_SLEEP_NS (100 * 1000 * 1000ULL) /* the longest sleep on the doorbell */
#define EXEC_YIELD_NS (1000 * 1000ULL)       /* a wait yields this long before it sleeps */
struct execWait {
    int spins;
    int heard;     /* the failure came from an abort or a peer's notice: do not post it */
    int network;   /* some lane waits on a network link: poll it, and yield instead of spinning */
    int crowded;   /* a peer it waits for was last seen on this thread's core: yield, do not spin */
    int capped;    /* the last sleep ran to EXEC_SLEEP_NS: progress now means a missed wake-up */
    int netPolled; /* blocked in comm->netWait since the proxy last had the sockets */
    uint64_t idleSince;
    uint64_t lastLiveCheck;
    uint64_t deadSince; /* when a dead peer was first seen (EXEC_DEAD_GRACE_NS) */
};
/* An abort of a lane's comm, or a failure a peer posted: the error, recorded; else loomSuccess. */
loomResult_t execHeardFailure(struct loomLane *lanes, int nlanes);
/*
 * What ends a wait that made no progress since w->idleSince: a failure heard
 * of (w->heard set), a dead peer the blocked step waits for, or LOOM_TIMEOUT;
 * the error is recorded. loomSuccess while the wait may go on. Reads each
 * lane's step, cur, more and done, and its connectors' positions.
 */
loomResult_t execWaitFailure(struct loomLane *lanes, int nlanes, uint64_t now, struct execWait *w);
/* Marks the lanes' communicators broken with err (the recorded line); post: tell the peers. */
void execMarkBroken(struct loomLane *lanes, int nlanes, loomResult_t err, int post);
/*
 * What both executors do before a plan's first step: fail at once on a comm
 * that heard of a failure, and connect the peers the lanes name for the first
 * time (connect.c); on an error the comms are marked broken.
 */
loomResult_t execPrepare(struct loomLane *lanes, int nlanes);
/*
 * loomSuccess when the size word `got` of the message lane l's step s takes
 * from peer `from` is the one s expects (device: the lane may take device
 * data), else the error that says how the ranks disagree, recorded.
 */
loomResult_t execMessageMismatch(const struct loomLane *l, const struct loomStep *s, int from,
                                 uint64_t got, int device);

/* Sleeps on the futex at addr while it holds val, ns at most; the syscall's result. */
long execFutexWait(_Atomic uint32_t *addr, uint32_t val, uint64_t ns);

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
/* Whether peer p is gone: its link ended, or its process on this host exited (or is a zombie). */
int execPeerGone(const struct loomComm *comm, int p);
/*
 * The kernel executor's form of the host executor's same-core check: marks
 * this thread's core in comm's doorbell and says whether any peer of the
 * channel's links on this host was last seen on it (a block does not know
 * which peer it waits for). A hint: a wrong guess costs yields, not pauses.
 */
int execChannelPeerOnThisCore(struct loomComm *comm, int channel);

#endif /* LOOM_EXEC_H_ */
