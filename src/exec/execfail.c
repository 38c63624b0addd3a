/*
 * execfail.c — failures, for every executor (execfail.h): what ends a
 * wait that makes no progress, a message that is not the one a step
 * expects, and telling the peers. It calls no executor: the executors call
 * it (the host executor's waits, a kernel executor's block, the launched
 * kernel's watchdog), and the core asks it about peers.
 *
 * A wait ends on a local abort, on a notice a peer posted on this rank's
 * doorbell, on the death of a peer the blocked step waits for (its process
 * on this host gone, or its network link ended), or at LOOM_TIMEOUT; the
 * error names the rank and what was waited for.
 *
 * A rank that stops on an error it found itself (the peer it waits
 * for is dead, LOOM_TIMEOUT passed without progress, the peers disagree on
 * a message size) posts the reason on the doorbell of every peer of the
 * communicator and rings it, so ranks that were waiting on someone else, and
 * would otherwise sit until their own timeout, stop at once with the same
 * line. A local abort is not posted (loomCommAbort is local, as in NCCL).
 * Peers on other hosts are reached through comm->notifyPeer: the network
 * transport sends the notice over the wire and the peer's proxy posts it on
 * that peer's doorbell (transports/net.c), so every rank of the job hears of
 * the failure, not only those on the detector's host.
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "bell.h"
#include "debug.h"
#include "exec.h"
#include "execfail.h"
#include "execwait.h"
#include "executor.h"
#include "interp.h"
#include "recorder.h"
#include "step.h"

/*
 * A peer found dead with no notice is reported only after this: a rank that
 * heard of a failure and exited leaves its peers a notice that may still be
 * travelling (from another host, each rank is told apart), and the first
 * failure is the one to report. (Without it, check_faults' "tcp SIGKILL"
 * and "SIGKILL cma alltoall" each named, in one of their first runs here, a
 * survivor that had exited instead of the rank killed.)
 */
#define EXEC_DEAD_GRACE_NS EXEC_SLEEP_NS

/* The state letter of /proc/<pid>/stat ('R', 'S', 'T' stopped, 'Z' zombie, ...), '?' if unknown. */
static char procState(pid_t pid)
{
    char path[64], line[512];
    snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
    FILE *f = fopen(path, "re");
    if (f == NULL)
        return '?';
    size_t n = fread(line, 1, sizeof(line) - 1, f);
    fclose(f);
    line[n] = '\0';
    const char *close = strrchr(line, ')'); /* the command name may hold anything */
    return close && close[1] == ' ' && close[2] ? close[2] : '?';
}

static int isLocalPeer(const struct loomComm *comm, int p)
{
    return p != comm->rank && comm->peers[p].hostHash == comm->peers[comm->rank].hostHash;
}

/* A killed rank whose parent has not reaped it yet is a zombie: gone, though kill() finds it. */
int execPeerGone(const struct loomComm *comm, int p)
{
    if (comm->lost && atomic_load_explicit(&comm->lost[p], memory_order_acquire))
        return 1;
    if (!isLocalPeer(comm, p))
        return 0;
    if (kill(comm->peers[p].pid, 0) != 0)
        return errno == ESRCH;
    char st = procState(comm->peers[p].pid);
    return st == 'Z' || st == 'X' || st == 'x';
}

int execPeerFailed(const struct loomComm *comm, int p)
{
    if (p == comm->rank)
        return 0;
    if (execPeerGone(comm, p))
        return 1;
    /* Stopped (SIGSTOP, a debugger) counts once a wait on this communicator has timed out. */
    char st = isLocalPeer(comm, p) ? procState(comm->peers[p].pid) : '?';
    return (st == 'T' || st == 't') &&
           atomic_load_explicit(&comm->broken, memory_order_acquire) == loomTimeout;
}

/* Whether a step waits on receive connector rc (no message yet) or send connector sc (step.h). */
static int recvWaits(const struct loomConnector *rc)
{
    return !loomMessageIn(atomic_load_explicit(&rc->fifo->tail, memory_order_acquire), rc->pos);
}

/* A send waits for a free slot, a DRAIN for every message to be taken. */
static int sendWaits(const struct loomStep *s, const struct loomConnector *sc)
{
    uint64_t head = atomic_load_explicit(&sc->fifo->head, memory_order_acquire);
    return s->op == LOOM_STEP_DRAIN ? !loomDrained(head, sc->pos) : !loomSlotFree(head, sc->pos);
}

/*
 * The peer lane `l` waits for if that peer's process is gone, else -1. Only a
 * peer the current step is blocked on counts: a rank that finished its part
 * and exited has already written everything its peers will read. The FIFO is
 * looked at again after the peer is known dead, since a dead process writes
 * nothing more and a message it wrote just before exiting must still be used.
 */
static int laneDeadPeer(const struct loomLane *l)
{
    const struct loomStep *s = &l->step;
    const struct loomChannel *ch = &l->comm->channels[l->channel];
    for (int j = 0; loomStepTakesOffers(s->op) && j < s->nrecv; j++)
        if (execPeerGone(l->comm, s->recvPeers[j]))
            return s->recvPeers[j]; /* its offer came, its memory went */
    for (int j = 0; j < s->nrecv; j++) {
        int p = s->recvPeers[j];
        const struct loomConnector *rc = &ch->recv[p];
        if (recvWaits(rc) && execPeerGone(l->comm, p) && recvWaits(rc))
            return p;
    }
    for (int j = 0; j < s->nsend; j++) {
        int p = s->sendPeers[j];
        const struct loomConnector *sc = &ch->send[p];
        if (sendWaits(s, sc) && execPeerGone(l->comm, p) && sendWaits(s, sc))
            return p;
    }
    return -1;
}

/*
 * The peer lane l's step waits for, for the flight recorder: a receive with
 * nothing in its FIFO, else a send with no free slot (the first of each),
 * else its first peer (an offer, a GPU still busy); -1 for a step with none.
 */
static int laneBlockedOn(const struct loomLane *l)
{
    const struct loomStep *s = &l->step;
    const struct loomChannel *ch = &l->comm->channels[l->channel];
    for (int j = 0; ch->recv && j < s->nrecv; j++) {
        const struct loomConnector *rc = &ch->recv[s->recvPeers[j]];
        if (rc->fifo && recvWaits(rc))
            return s->recvPeers[j];
    }
    for (int j = 0; ch->send && j < s->nsend; j++) {
        const struct loomConnector *sc = &ch->send[s->sendPeers[j]];
        if (sc->fifo && sendWaits(s, sc))
            return s->sendPeers[j];
    }
    return s->nrecv ? s->recvPeers[0] : s->nsend ? s->sendPeers[0] : -1;
}

/* The first lane not done, to name who we wait for. */
static const struct loomLane *firstBlocked(const struct loomLane *lanes, int nlanes)
{
    for (int i = 0; i < nlanes; i++)
        if (!lanes[i].done)
            return &lanes[i];
    return &lanes[0];
}

/* ", rank 1 (pid 42 on node2) is stopped" for each local peer stopped by a signal or debugger. */
static void describeStopped(const struct loomComm *comm, char *buf, size_t len)
{
    size_t used = 0;
    buf[0] = '\0';
    for (int p = 0; p < comm->nranks && used + 1 < len; p++) {
        if (!isLocalPeer(comm, p))
            continue;
        char st = procState(comm->peers[p].pid);
        if (st != 'T' && st != 't')
            continue;
        int n = snprintf(buf + used, len - used, "; rank %d (pid %d on %s) is stopped (%s)", p,
                         (int)comm->peers[p].pid, comm->peers[p].hostname,
                         st == 'T' ? "SIGSTOP" : "a debugger");
        used += n > 0 ? (size_t)n : 0;
    }
}

/* "what rank 3" or "what ranks 3, 5, 6" into buf (empty for n 0). */
static void peerList(char *buf, size_t len, const char *what, const int32_t *peers, int n)
{
    size_t used = 0;
    buf[0] = '\0';
    for (int j = 0; j < n && used + 1 < len; j++) {
        int k = j == 0 ? snprintf(buf, len, "%s rank%s %d", what, n > 1 ? "s" : "", peers[0])
                       : snprintf(buf + used, len - used, ", %d", peers[j]);
        used += k > 0 ? (size_t)k : 0;
    }
}

static loomResult_t timedOut(const struct loomLane *b)
{
    const struct loomStep *s = &b->step;
    char stopped[192], from[48] = "", to[48] = "";
    describeStopped(b->comm, stopped, sizeof(stopped));
    peerList(from, sizeof(from), "receive from", s->recvPeers, s->nrecv);
    peerList(to, sizeof(to), s->op == LOOM_STEP_DRAIN ? "reads by" : "send to", s->sendPeers,
             s->nsend);
    return loomSetError(loomTimeout,
                        "rank %d made no progress for %d s (LOOM_TIMEOUT) waiting on step %zu "
                        "(%s%s%s)%s; a peer is stopped, hung or called a different operation",
                        b->comm->rank, b->comm->timeoutSec, b->cur, from,
                        from[0] && to[0] ? ", " : "", to, stopped);
}

/* A message that is not the one a step expects: the ranks disagree (execMessageMismatch). */

static loomResult_t sizeMismatch(const struct loomLane *lane, int from, uint64_t got, size_t want)
{
    int half = got * 2 == want || want * 2 == got; /* bfloat16 against float32 (compress.c)? */
    return loomSetError(loomInvalidUsage,
                        "rank %d received %llu bytes from rank %d where it expected %zu: the "
                        "ranks called different operations or counts (calls must match in order, "
                        "count and datatype on every rank)%s",
                        lane->comm->rank, (unsigned long long)got, from, want,
                        half ? ", or LOOM_NET_COMPRESS differs between them" : "");
}

static loomResult_t pathMismatch(const struct loomLane *lane, const struct loomStep *s, int from)
{
    return loomSetError(
        loomInvalidUsage,
        "rank %d received %s from rank %d where it expected %s: the ranks chose "
        "different algorithms for one call, or called different operations "
        "(LOOM_ALGO must be equal on every rank, every rank must pass the same "
        "kind of memory, and calls must match in order, count and datatype)",
        lane->comm->rank, loomStepTakesOffers(s->op) ? "data" : "a buffer address (single copy)",
        from, loomStepTakesOffers(s->op) ? "a buffer address (single copy)" : "data");
}

static loomResult_t kindMismatch(const struct loomLane *lane, int from)
{
    return loomSetError(loomInvalidUsage,
                        "rank %d received CUDA device memory from rank %d where it passed host "
                        "buffers: every rank must pass the same kind of memory to one call",
                        lane->comm->rank, from);
}

static loomResult_t protoMismatch(const struct loomLane *lane, int from, uint64_t got)
{
    return loomSetError(loomInvalidUsage,
                        "rank %d received %s message from rank %d where it expected %s one: the "
                        "ranks chose different protocols (LOOM_PROTO and LOOM_EXECUTOR must be "
                        "equal on every rank)",
                        lane->comm->rank, (got & LOOM_FIFO_LL) ? "an LL" : "a Simple", from,
                        (got & LOOM_FIFO_LL) ? "a Simple" : "an LL");
}

loomResult_t execMessageMismatch(const struct loomLane *l, const struct loomStep *s, int from,
                                 uint64_t got, int device)
{
    size_t want = s->count * l->elemSize;
    if (l->compress && l->comm->channels[l->channel].recv[from].progress)
        want = s->count * sizeof(uint16_t); /* bfloat16 on the wire (compress.c) */
    /* A single copy's offer is whole blocks, the FIFOs' pieces are smaller: the path first. */
    switch (loomMessageCheck(got, want, loomStepTakesOffers(s->op), l->proto == LOOM_PROTO_LL,
                             device)) {
    case LOOM_MSG_PATH:
        return pathMismatch(l, s, from);
    case LOOM_MSG_PROTO:
        return protoMismatch(l, from, got);
    case LOOM_MSG_SIZE:
        return sizeMismatch(l, from, got & ~LOOM_FIFO_FLAGS, want);
    case LOOM_MSG_KIND:
        return kindMismatch(l, from);
    default:
        return loomSuccess;
    }
}

/* A local abort or a peer's notice: reported here, but not posted to the peers again. */
loomResult_t execHeardFailure(struct loomLane *lanes, int nlanes)
{
    for (int i = 0; i < nlanes; i++) {
        struct loomComm *comm = lanes[i].comm;
        if (atomic_load_explicit(&comm->abortFlag, memory_order_acquire))
            return loomSetError(loomRemoteError, "rank %d's communicator was %s", comm->rank,
                                atomic_load(&comm->revoked) ? "revoked (loomCommRevoke)"
                                                            : "aborted (loomCommAbort)");
        loomResult_t res = execPeerFailure(comm);
        if (res != loomSuccess)
            return res;
    }
    return loomSuccess;
}

/*
 * The notice a dead peer on this host had heard, if any. A rank that heard
 * of a failure (a peer's death, say, posted on its doorbell) returns, and
 * its process may exit before the notice reaches the ranks that wait for it
 * (from another host it travels over the network, to each rank apart). Its
 * doorbell stays mapped here, so those ranks report the first failure, not
 * the exit it caused.
 */
static const struct loomDoorbell *deadPeerNotice(const struct loomComm *comm, int dead)
{
    const struct loomChannel *ch = &comm->channels[0];
    if (ch->send == NULL)
        return NULL;
    const struct loomConnector *c = &ch->send[dead];
    /* A network connector's bell is this process's own, not the peer's. A local peer's bell
     * is there before the link is connected (transports/shm.c). */
    if (c->progress != NULL || c->peerBell == NULL ||
        atomic_load_explicit(&c->peerBell->noticeState, memory_order_acquire) != 2)
        return NULL;
    return c->peerBell;
}

loomResult_t execWaitFailure(struct loomLane *lanes, int nlanes, uint64_t now, struct execWait *w)
{
    loomResult_t heard = execHeardFailure(lanes, nlanes);
    if (heard != loomSuccess) {
        w->heard = 1;
        return heard;
    }
    if (now - w->lastLiveCheck >= EXEC_SLEEP_NS) {
        int anyDead = 0;
        w->lastLiveCheck = now;
        for (int i = 0; i < nlanes; i++) {
            struct loomComm *comm = lanes[i].comm;
            int dead = lanes[i].done ? -1 : laneDeadPeer(&lanes[i]);
            const struct loomDoorbell *told = dead >= 0 ? deadPeerNotice(comm, dead) : NULL;
            if (told != NULL)
                return loomSetError(told->noticeCode == loomTimeout ? loomTimeout : loomRemoteError,
                                    "%.*s (reported by rank %d to rank %d, which has since exited)",
                                    LOOM_NOTICE_BYTES, told->notice, (int)told->noticeFrom, dead);
            anyDead |= dead >= 0;
            if (dead >= 0 && w->deadSince == 0)
                w->deadSince = now;
            if (dead >= 0 && now - w->deadSince < EXEC_DEAD_GRACE_NS)
                continue; /* a notice of what made it exit may be on its way */
            if (dead >= 0)
                return loomSetError(loomRemoteError,
                                    "rank %d (pid %d on %s) %s while rank %d waited for it", dead,
                                    comm->peers[dead].pid, comm->peers[dead].hostname,
                                    comm->lost && atomic_load(&comm->lost[dead])
                                        ? "closed its connection (it exited or the network failed)"
                                        : "exited",
                                    comm->rank);
        }
        if (!anyDead)
            w->deadSince = 0; /* none in sight now: one seen later gets its own grace */
    }
    const struct loomLane *b = firstBlocked(lanes, nlanes);
    if (b->more)
        recorderWaiting(b->comm, laneBlockedOn(b), (int64_t)b->cur);
    if (now - w->idleSince >= (uint64_t)b->comm->timeoutSec * 1000000000ULL) {
        if (!b->more)
            return loomSetError(loomTimeout,
                                "rank %d made no progress for %d s (LOOM_TIMEOUT) waiting for "
                                "the GPU to finish its steps",
                                b->comm->rank, b->comm->timeoutSec);
        return timedOut(b);
    }
    return loomSuccess;
}

void execPostFailure(struct loomComm *comm, loomResult_t res, const char *reason)
{
    const struct loomChannel *ch = &comm->channels[0];
    for (int p = 0; ch->send && p < comm->nranks; p++) {
        const struct loomConnector *c = &ch->send[p];
        /* Peers on this host are told whether connected or not (their bells are mapped from
         * init); a network peer only once connected. */
        if (p == comm->rank || (!c->connected && c->peerBell == NULL))
            continue;
        /* A network connector's bell is a local one: the transport carries the notice over. */
        if (c->connected && comm->notifyPeer && comm->notifyPeer(comm, p, res, reason))
            continue;
        /* Not on a dead peer's bell: what is there is what that peer heard (deadPeerNotice). */
        if (c->peerBell && !execPeerGone(comm, p))
            bellPostNotice(c->peerBell, res, comm->rank, reason);
    }
}

loomResult_t execPeerFailure(struct loomComm *comm)
{
    struct loomDoorbell *bell = comm->bell;
    if (bell == NULL || atomic_load_explicit(&bell->noticeState, memory_order_acquire) != 2)
        return loomSuccess;
    loomResult_t res = bell->noticeCode == loomTimeout ? loomTimeout : loomRemoteError;
    return loomSetError(res, "%.*s (reported to rank %d by rank %d)", LOOM_NOTICE_BYTES,
                        bell->notice, comm->rank, (int)bell->noticeFrom);
}

loomResult_t execPrepare(struct loomLane *lanes, int nlanes, const struct loomExecCall *call)
{
    /* A comm aborted, or left by a peer, fails at once: its peers are not all there. */
    loomResult_t err = execHeardFailure(lanes, nlanes);
    if (err != loomSuccess) {
        execMarkBroken(lanes, nlanes, err, 0);
        return err;
    }
    /* Peers the plans talk to for the first time: the core connects them (src/connect.c). */
    if (call->connect == NULL)
        return loomSuccess;
    err = call->connect(lanes, nlanes);
    if (err != loomSuccess)
        execMarkBroken(lanes, nlanes, err, 1);
    return err;
}

void execMarkBroken(struct loomLane *lanes, int nlanes, loomResult_t res, int post)
{
    const char *reason = debugLastError(NULL);
    for (int i = 0; i < nlanes; i++) {
        struct loomComm *comm = lanes[i].comm;
        /* The line first: a thread polling loomCommGetAsyncError sees `broken` and at once
         * asks loomGetLastError(comm), before the stream thread records the error itself. */
        commRecordError(comm);
        commSetBroken(comm, res, reason);
        int first = 1;
        for (int j = 0; j < i; j++)
            first &= lanes[j].comm != comm;
        /* A rank that timed out itself tells the job's status (before its peers hear of it and
         * leave the calls they wait in); one told of it does not. */
        if (first)
            recorderFailed(comm, res, post && res == loomTimeout);
        if (post && first)
            execPostFailure(comm, res, reason);
    }
}
