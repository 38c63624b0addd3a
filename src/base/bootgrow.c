/*
 * bootgrow.c — the meeting of loomCommGrow: the ranks of the parent and the
 * new ranks meet at the rank that made the grow id (the coordinator), on a
 * port it opened for that one grow, and leave with a fresh unique id or the
 * same error.
 *
 * loomCommGetUniqueId (bootstrapGrowOpen) listens on a port of its own, with
 * a fresh random secret, and writes both into a grow id (kind 1, bootwire.c).
 * Nothing serves the port until the coordinator's loomCommGrow: a new rank
 * that comes earlier waits in the listen queue. Each rank but the
 * coordinator connects there and sends its request; the coordinator answers
 * every one with the same verdict:
 *
 *   request: hello(64: grow secret, rank, nranks, the connection's own address)
 *            "LMGR"(4) existing(4: 1 a rank of the parent, 0 a new rank)
 *   verdict: "LMGV"(4) result(4) unique id(128) text(320, NUL-padded)
 *
 * The coordinator checks that everyone asks for the same nranks, that every
 * new rank has a number of its own from the parent's size up, and waits for
 * all nranks - 1 others no longer than the timeout; a parent rank that fails
 * (the caller's gone()) or a rank that closes its connection ends the wait
 * at once. Any of these gives every rank that came the same error. Then the
 * port is closed, whatever the outcome: an id serves one grow, and a rank
 * that comes later is refused at connect (bootstrapGrowJoin says why).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>

#include "bootint.h"
#include "debug.h"
#include "tls.h"
#include "wire.h"

#define GROW_REQ_MAGIC 0x4c4d4752u     /* "LMGR" */
#define GROW_VERDICT_MAGIC 0x4c4d4756u /* "LMGV" */
#define GROW_REQ_BYTES 8
/* How often a wait looks at who has failed. */
#define GROW_POLL_MS 50
/* A rank waits for the verdict this much longer than the coordinator waits for the others. */
#define GROW_GRACE_SEC 5
/* Connections beyond nranks - 1 that are answered (with the error) rather than dropped. */
#define GROW_EXTRA 16

struct bootstrapGrow {
    int listenFd;
    uint8_t secret[BOOTSTRAP_SECRET_BYTES];
    loomUniqueId id;
    char name[SOCKET_ADDR_STRLEN];
};

loomResult_t bootstrapGrowOpen(struct bootstrapGrow **out, loomUniqueId *id)
{
    union socketAddress local, bound;
    struct bootstrapId bid;
    struct bootstrapGrow *g = calloc(1, sizeof(*g));
    if (g == NULL)
        return loomSetError(loomSystemError, "loomCommGetUniqueId: out of memory");
    g->listenFd = -1;
    loomResult_t res = socketFindInterface(&local, NULL, 0);
    if (res == loomSuccess)
        res = socketListen(&local, &g->listenFd, &bound);
    if (res == loomSuccess &&
        getrandom(g->secret, sizeof(g->secret), 0) != (ssize_t)sizeof(g->secret))
        res = loomSetError(loomSystemError, "loomCommGetUniqueId: getrandom: %s", strerror(errno));
    if (res == loomSuccess) {
        memcpy(bid.secret, g->secret, sizeof(bid.secret));
        if (socketAddrToBootstrap(&bound, &bid.root) != loomSuccess ||
            bootwireIdEncodeKind(&bid, BOOTWIRE_ID_GROW, &g->id) != LOOM_UNIQUE_ID_BYTES)
            res = loomSetError(loomInternalError, "loomCommGetUniqueId: cannot encode the id");
    }
    if (res != loomSuccess) {
        bootstrapGrowClose(g);
        return res;
    }
    socketAddrFormat(&bound, g->name, sizeof(g->name));
    INFO(LOOM_BOOTSTRAP, "loomCommGetUniqueId: the grow meeting listens at %s", g->name);
    *id = g->id;
    *out = g;
    return loomSuccess;
}

int bootstrapGrowOwns(const struct bootstrapGrow *g, const loomUniqueId *id)
{
    return g != NULL && id != NULL &&
           memcmp(g->id.internal, id->internal, sizeof(id->internal)) == 0;
}

void bootstrapGrowClose(struct bootstrapGrow *g)
{
    if (g == NULL)
        return;
    socketClose(g->listenFd);
    free(g);
}

/* ---- the coordinator ---- */

struct growConn {
    int fd;
    int rank;
    int existing;
};

struct growMeet {
    const struct bootstrapGrowReq *req;
    struct growConn *conns; /* those that arrived: at most nranks - 1 + GROW_EXTRA */
    int nconns, cap;
    char mismatch[BOOT_VERDICT_TEXT_BYTES];
};

/* 1 if a rank asking for `rank` came; with parent, only the rank of the parent counts. */
static int growCame(const struct growMeet *m, int rank, int parent)
{
    for (int i = 0; i < m->nconns; i++)
        if (m->conns[i].rank == rank && (!parent || m->conns[i].existing))
            return 1;
    return 0;
}

/* The first misuse seen, in words, for every rank that came. */
static void growMisuse(struct growMeet *m, int rank, int existing, int nranks)
{
    const struct bootstrapGrowReq *r = m->req;
    const char *who = existing ? "existing" : "new";
    char span[32];
    if (m->mismatch[0])
        return;
    if (r->nranks - 1 > r->oldRanks)
        snprintf(span, sizeof(span), "%d .. %d", r->oldRanks, r->nranks - 1);
    else
        snprintf(span, sizeof(span), "%d", r->oldRanks);
    if (nranks != r->nranks)
        snprintf(m->mismatch, sizeof(m->mismatch),
                 "%s rank %d asks for %d ranks, rank %d (the coordinator, which made the id) for "
                 "%d; every rank must pass the same nranks",
                 who, rank, nranks, r->rank, r->nranks);
    else if (!existing && rank < r->oldRanks)
        snprintf(m->mismatch, sizeof(m->mismatch),
                 "a new rank asks for rank %d, which rank %d of the communicator keeps; new ranks "
                 "take %s",
                 rank, rank, span);
    else if (existing && rank >= r->oldRanks)
        snprintf(m->mismatch, sizeof(m->mismatch),
                 "rank %d says it is of the communicator, which has %d ranks", rank, r->oldRanks);
    else
        snprintf(m->mismatch, sizeof(m->mismatch),
                 "two %s ranks ask for rank %d; each new rank takes a number of its own in %s", who,
                 rank, span);
}

static const char *growTake(void *ctx, const struct bootstrapHello *h, int fd,
                            const union socketAddress *peer)
{
    struct growMeet *m = ctx;
    uint8_t tail[GROW_REQ_BYTES];
    (void)peer;

    if (socketRecvAll(fd, tail, sizeof(tail), socketDeadline(HELLO_TIMEOUT_SEC), NULL, NULL) !=
            loomSuccess ||
        wireGet32(tail) != GROW_REQ_MAGIC || wireGet32(tail + 4) > 1)
        return "no whole grow request";
    if (m->nconns == m->cap)
        return "more ranks than the grow has places for";
    int existing = (int)wireGet32(tail + 4);
    if (h->nranks != m->req->nranks || (!existing && h->rank < m->req->oldRanks) ||
        (existing && h->rank >= m->req->oldRanks) || h->rank == m->req->rank ||
        growCame(m, h->rank, 0))
        growMisuse(m, h->rank, existing, h->nranks);
    m->conns[m->nconns++] = (struct growConn){fd, h->rank, existing};
    return NULL;
}

/* A rank that arrived sends nothing more: an event on its connection means it went away. */
static int growConnGone(int fd)
{
    struct pollfd p = {.fd = fd, .events = POLLIN};
    return poll(&p, 1, 0) > 0;
}

/* "{1, 3}" of the ranks that did not come; a long list ends in "...}". */
static void growMissing(struct growMeet *m, char *buf, size_t len)
{
    size_t used = (size_t)snprintf(buf, len, "{");
    int listed = 0;
    for (int r = 0; r < m->req->nranks && used + 16 < len; r++)
        if (r != m->req->rank && !growCame(m, r, 0))
            used += (size_t)snprintf(buf + used, len - used, "%s%d", listed++ ? ", " : "", r);
    snprintf(buf + used, len - used, "%s}", used + 16 >= len ? "..." : "");
}

static loomResult_t growAwait(struct growMeet *m, struct helloGather *g, char *why, size_t len)
{
    const struct bootstrapGrowReq *r = m->req;
    uint64_t deadline = socketDeadline(r->timeoutSec);
    for (;;) {
        gatherRound(g, GROW_POLL_MS);
        /* On a misuse the ranks of the parent, which are on their way, still come to hear it. */
        int parentHere = 1;
        for (int p = 0; p < r->oldRanks; p++)
            parentHere &= p == r->rank || growCame(m, p, 1);
        if (m->mismatch[0] && parentHere) {
            snprintf(why, len, "%s", m->mismatch);
            return loomInvalidUsage;
        }
        for (int i = 0; i < m->nconns; i++) {
            if (growConnGone(m->conns[i].fd)) {
                snprintf(why, len,
                         "%s rank %d closed its connection during loomCommGrow (it died or gave "
                         "up)",
                         m->conns[i].existing ? "existing" : "new", m->conns[i].rank);
                return loomRemoteError;
            }
        }
        for (int p = 0; r->gone && p < r->oldRanks; p++) {
            if (p != r->rank && !growCame(m, p, 1) && r->gone(r->goneCtx, p)) {
                snprintf(why, len,
                         "rank %d of the communicator failed before it came to loomCommGrow; "
                         "shrink without it first",
                         p);
                return loomRemoteError;
            }
        }
        if (m->nconns == r->nranks - 1 && !m->mismatch[0])
            return loomSuccess;
        if (socketClockNs() >= deadline && m->mismatch[0]) {
            snprintf(why, len, "%s", m->mismatch);
            return loomInvalidUsage;
        }
        if (socketClockNs() >= deadline) {
            char list[96];
            growMissing(m, list, sizeof(list));
            snprintf(why, len,
                     "rank(s) %s did not come to loomCommGrow within %d s (LOOM_TIMEOUT): not "
                     "started, stopped, holding another id, or a rank of the communicator that "
                     "did not call it",
                     list, r->timeoutSec);
            return loomTimeout;
        }
    }
}

loomResult_t bootstrapGrowHost(struct bootstrapGrow *grow, const struct bootstrapGrowReq *req,
                               loomUniqueId *newId)
{
    struct growMeet m = {.req = req, .cap = req->nranks - 1 + GROW_EXTRA};
    char why[BOOT_VERDICT_TEXT_BYTES] = "";
    char owner[48];
    loomResult_t res;

    snprintf(owner, sizeof(owner), "rank %d (grow)", req->rank);
    m.conns = calloc((size_t)m.cap, sizeof(*m.conns));
    struct helloGather *g = gatherOpenAt(grow->listenFd, grow->secret, owner, growTake, &m);
    if (m.conns == NULL || g == NULL) {
        free(m.conns);
        free(g);
        return loomSetError(loomSystemError, "loomCommGrow: out of memory");
    }
    res = growAwait(&m, g, why, sizeof(why));
    if (res == loomSuccess && bootstrapGetUniqueId(newId) != loomSuccess) {
        res = loomSystemError;
        snprintf(why, sizeof(why), "%s", debugLastError(NULL));
    }
    for (int i = 0; i < m.nconns; i++) {
        verdictSend(m.conns[i].fd, GROW_VERDICT_MAGIC, res, newId, why);
        socketClose(m.conns[i].fd);
    }
    gatherCloseAll(g);
    free(g);
    free(m.conns);
    if (res != loomSuccess)
        return loomSetError(res, "loomCommGrow: rank %d (the coordinator): %s", req->rank, why);
    return loomSuccess;
}

/* ---- everyone else ---- */

/* Connects to the meeting; a refusal means it is over (the port was open before the id was). */
static loomResult_t growConnect(const struct bootstrapGrowReq *req, const union socketAddress *at,
                                const char *atName, uint64_t deadline, int *fd)
{
    int err = socketConnectOnce(at, deadline, NULL, fd);
    if (err == 0)
        return loomSuccess;
    if (err == ECONNREFUSED)
        return loomSetError(loomInvalidUsage,
                            "loomCommGrow: %s rank %d: nothing listens at %s, where the grow id "
                            "says to meet: the loomCommGrow it was made for is over (an id serves "
                            "one grow; get a new one with loomCommGetUniqueId), or the process "
                            "that made it has ended",
                            req->existing ? "existing" : "new", req->rank, atName);
    return loomSetError(err == ETIMEDOUT ? loomTimeout : loomSystemError,
                        "loomCommGrow: %s rank %d could not reach the coordinator at %s: %s",
                        req->existing ? "existing" : "new", req->rank, atName,
                        err == ETIMEDOUT ? "timed out" : strerror(err));
}

static loomResult_t growRequest(const struct bootstrapId *bid, const struct bootstrapGrowReq *req,
                                int fd, uint64_t deadline)
{
    union socketAddress self;
    socklen_t slen = sizeof(self);
    struct bootstrapHello h;
    uint8_t msg[BOOTSTRAP_HELLO_BYTES + GROW_REQ_BYTES];

    memcpy(h.secret, bid->secret, sizeof(h.secret));
    h.rank = req->rank;
    h.nranks = req->nranks;
    /* A new rank has no listening socket yet: the connection's own address stands in. */
    if (getsockname(fd, &self.sa, &slen) != 0 ||
        socketAddrToBootstrap(&self, &h.addr) != loomSuccess ||
        bootstrapEncodeHello(&h, msg, sizeof(msg)) != BOOTSTRAP_HELLO_BYTES)
        return loomSetError(loomInternalError, "loomCommGrow: rank %d cannot encode its request",
                            req->rank);
    wirePut32(msg + BOOTSTRAP_HELLO_BYTES, GROW_REQ_MAGIC);
    wirePut32(msg + BOOTSTRAP_HELLO_BYTES + 4, (uint32_t)(req->existing != 0));
    if (socketSendAll(fd, msg, sizeof(msg), deadline, NULL, NULL) != loomSuccess)
        return loomSetError(loomRemoteError,
                            "loomCommGrow: rank %d could not send its request to the coordinator: "
                            "%s",
                            req->rank, errno ? strerror(errno) : "connection closed");
    return loomSuccess;
}

static loomResult_t growAwaitVerdict(const struct bootstrapGrowReq *req, int fd, uint64_t deadline,
                                     uint8_t *buf)
{
    size_t done = 0;
    while (done < BOOT_VERDICT_BYTES) {
        if (socketTryRecv(fd, buf, BOOT_VERDICT_BYTES, &done) != loomSuccess)
            return loomSetError(loomRemoteError,
                                "loomCommGrow: rank %d: the coordinator closed the connection "
                                "before its verdict (it died, gave up, or the grow failed on "
                                "the ranks of the communicator)",
                                req->rank);
        if (done == BOOT_VERDICT_BYTES)
            break;
        if (socketClockNs() >= deadline)
            return loomSetError(loomTimeout,
                                "loomCommGrow: rank %d had no verdict from the coordinator within "
                                "%d s: it has not called loomCommGrow, or waits for ranks that "
                                "did not come",
                                req->rank, req->timeoutSec + GROW_GRACE_SEC);
        struct pollfd p = {.fd = fd, .events = POLLIN};
        poll(&p, 1, GROW_POLL_MS);
    }
    return loomSuccess;
}

loomResult_t bootstrapGrowJoin(const loomUniqueId *growId, const struct bootstrapGrowReq *req,
                               loomUniqueId *newId)
{
    struct bootstrapId bid;
    union socketAddress at;
    char atName[SOCKET_ADDR_STRLEN];
    uint8_t verdict[BOOT_VERDICT_BYTES];
    int kind, fd = -1;

    const char *why = bootwireIdDecodeKind(growId, &kind, &bid);
    if (why == NULL && kind != BOOTWIRE_ID_GROW)
        why = "it is an id from loomGetUniqueId; loomCommGrow takes one from loomCommGetUniqueId";
    if (why != NULL)
        return loomSetError(loomInvalidArgument, "loomCommGrow: the id is not usable: %s", why);
    socketAddrFromBootstrap(&bid.root, &at);
    socketAddrFormat(&at, atName, sizeof(atName));
    uint64_t deadline = socketDeadline(req->timeoutSec + GROW_GRACE_SEC);
    loomResult_t res = growConnect(req, &at, atName, deadline, &fd);
    if (res == loomSuccess)
        res = tlsWrap(fd, 0,
                      bid.secret); /* the meeting's port wraps what it accepts (bootgather.c) */
    if (res == loomSuccess)
        res = growRequest(&bid, req, fd, deadline);
    if (res == loomSuccess)
        res = growAwaitVerdict(req, fd, deadline, verdict);
    socketClose(fd);
    LOOMCHECK(res);
    const char *text = verdictRead(verdict, GROW_VERDICT_MAGIC, &res, newId);
    if (text == NULL)
        return loomSetError(loomInternalError,
                            "loomCommGrow: rank %d: malformed verdict from the coordinator at %s",
                            req->rank, atName);
    if (res != loomSuccess)
        return loomSetError(res, "loomCommGrow: %srank %d: %s (told by the coordinator at %s)",
                            req->existing ? "" : "new ", req->rank, text, atName);
    return loomSuccess;
}
