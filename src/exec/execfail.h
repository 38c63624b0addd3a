/*
 * execfail.h — what ends a wait and how the peers hear of a failure: the
 * executor layer's failure services (execfail.c), the same for every
 * executor (executor.h). An executor calls them, never another executor:
 *
 *   before a plan's first step    execPrepare (every executor's prepare)
 *   a wait that made no progress  execWaitFailure (the host executor's
 *                                 waits, a kernel executor's block, the
 *                                 launched kernel's line once it ended)
 *   a watchdog's quick check      execHeardFailure, execPeerFailed
 *   a message not as expected     execMessageMismatch
 *   the run ends on an error      execMarkBroken (marks, records, posts)
 *
 * The core uses the peer checks too (connect, shrink, grow, init:
 * execPeerFailure, execPeerFailed). execfail.c calls no executor.
 */
#ifndef LOOM_EXECFAIL_H_
#define LOOM_EXECFAIL_H_

#include <stdint.h>

#include "core.h"

struct loomLane;

/*
 * One waiter's state, for execWaitFailure: zero it, then set idleSince
 * when a wait begins. The host executor keeps its wait stages here too.
 */
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
 * What every executor does before a plan's first step (its prepare,
 * executor.h): fail at once on a comm that heard of a failure, then have
 * the core connect the peers the lanes name for the first time
 * (call->connect: src/connect.c's connectLanes); on an error the comms are
 * marked broken.
 */
struct loomExecCall;
loomResult_t execPrepare(struct loomLane *lanes, int nlanes, const struct loomExecCall *call);
/*
 * loomSuccess when the size word `got` of the message lane l's step s takes
 * from peer `from` is the one s expects (device: the lane may take device
 * data), else the error that says how the ranks disagree, recorded.
 */
loomResult_t execMessageMismatch(const struct loomLane *l, const struct loomStep *s, int from,
                                 uint64_t got, int device);
/*
 * Posts `reason` with code `res` on the doorbell of every peer of comm and
 * wakes them, so that they stop waiting for this rank (see execfail.c); peers
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

#endif /* LOOM_EXECFAIL_H_ */
