/*
 * bootstrap.c — joining (a rank's hello to the root, then its ring
 * neighbours), the socket ring that carries out-of-band allgather and
 * barrier, and point-to-point messages (see bootstrap.h). The unique id and
 * the root thread are in bootroot.c, the gathering of hellos in
 * bootgather.c, the shrink meeting in bootshrink.c, the wire formats in
 * bootwire.c.
 *
 * Trust rests on the 32-byte secret in the unique id: whoever can read the id
 * is part of the job, anyone else who finds the port is a stranger. Strangers
 * must not be able to stall a job, so nobody ever waits on one connection:
 * the root (and each rank, when it waits for its ring predecessor) polls all
 * pending connections at once, gives each at most HELLO_TIMEOUT_SEC to
 * deliver a full hello, and closes anything malformed, silent, or without
 * the secret. Only the first valid hello is believed about nranks.
 *
 * Allgather on the ring: in step s (0 .. n-2) rank r sends block (r - s) to
 * its successor and receives block (r - s - 1) from its predecessor, both at
 * once on non-blocking sockets, so any block size goes through without the
 * two sends of a pair of ranks waiting on each other.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bootint.h"
#include "debug.h"
#include "wire.h"

/* ---- joining: root, then ring ---- */

void peerLabel(const struct loomBootstrap *b, int r, char *buf, size_t len)
{
    char addr[SOCKET_ADDR_STRLEN];
    bootwireAddrFormat(&b->peers[r], addr, sizeof(addr));
    snprintf(buf, len, "rank %d (%s)", r, addr);
}

void verdictSend(int fd, uint32_t magic, loomResult_t res, const loomUniqueId *id, const char *text)
{
    uint8_t buf[BOOT_VERDICT_BYTES];
    memset(buf, 0, sizeof(buf));
    wirePut32(buf, magic);
    wirePut32(buf + 4, (uint32_t)res);
    if (res == loomSuccess)
        memcpy(buf + 8, id->internal, LOOM_UNIQUE_ID_BYTES);
    snprintf((char *)buf + 8 + LOOM_UNIQUE_ID_BYTES, BOOT_VERDICT_TEXT_BYTES, "%s", text);
    socketSendAll(fd, buf, sizeof(buf), socketDeadline(HELLO_TIMEOUT_SEC), NULL, NULL);
}

const char *verdictRead(uint8_t *buf, uint32_t magic, loomResult_t *res, loomUniqueId *id)
{
    *res = (loomResult_t)wireGet32(buf + 4);
    buf[BOOT_VERDICT_BYTES - 1] = '\0';
    if (wireGet32(buf) != magic || *res >= loomNumResults)
        return NULL;
    if (*res == loomSuccess)
        memcpy(id->internal, buf + 8, LOOM_UNIQUE_ID_BYTES);
    return (const char *)buf + 8 + LOOM_UNIQUE_ID_BYTES;
}

loomResult_t helloMake(const struct loomBootstrap *b, uint8_t *buf)
{
    struct bootstrapHello h;

    memcpy(h.secret, b->secret, sizeof(h.secret));
    h.rank = b->rank;
    h.nranks = b->nranks;
    if (socketAddrToBootstrap(&b->listenAddr, &h.addr) != loomSuccess ||
        bootstrapEncodeHello(&h, buf, BOOTSTRAP_HELLO_BYTES) != BOOTSTRAP_HELLO_BYTES)
        return loomSetError(loomInternalError, "bootstrap: rank %d cannot encode its hello",
                            b->rank);
    return loomSuccess;
}

/* Receives len bytes of the table, turning a quiet failure into a message about the root. */
static loomResult_t tableRecv(struct loomBootstrap *b, int fd, void *buf, size_t len,
                              uint64_t deadline, const char *rootName)
{
    char trouble[BOOT_TROUBLE_BYTES + 64];
    size_t done = 0;
    int err = 0;
    /* Like socketRecvAll, but a root of this process in trouble ends the wait at once. */
    for (;;) {
        if (socketTryRecv(fd, buf, len, &done) != loomSuccess) {
            err = errno;
            break;
        }
        if (done == len)
            return loomSuccess;
        rootTroubleQuote(rootName, trouble, sizeof(trouble));
        if (trouble[0])
            return loomSetError(loomSystemError,
                                "bootstrap: rank %d of %d: no address table from the root at "
                                "%s%s",
                                b->rank, b->nranks, rootName, trouble);
        err = socketAborted(b->abortFlag) ? ECANCELED : socketPollMs(deadline) == 0 ? ETIMEDOUT : 0;
        if (err != 0)
            break;
        struct pollfd p = {.fd = fd, .events = POLLIN};
        poll(&p, 1, socketPollMs(deadline));
    }
    rootTroubleQuote(rootName, trouble, sizeof(trouble));
    if (err == ECANCELED)
        return loomSetError(loomRemoteError,
                            "bootstrap: rank %d aborted while waiting for the root at %s", b->rank,
                            rootName);
    if (err == ETIMEDOUT)
        return loomSetError(loomTimeout,
                            "bootstrap: rank %d of %d: not every rank joined the root at %s "
                            "within %d s%s",
                            b->rank, b->nranks, rootName, b->timeoutSec, trouble);
    if (err == 0 && trouble[0])
        return loomSetError(loomSystemError,
                            "bootstrap: rank %d of %d: the root at %s closed the connection%s",
                            b->rank, b->nranks, rootName, trouble);
    if (err == 0 || err == ECONNRESET)
        return loomSetError(loomRemoteError,
                            "bootstrap: rank %d of %d: the root at %s closed the connection: it "
                            "refused the hello (the id is from another job, nranks differs "
                            "between ranks, rank %d joined twice, or LOOM_NET_TLS differs: it is "
                            "%d here) or gave up waiting",
                            b->rank, b->nranks, rootName, b->rank, tlsWanted());
    return loomSetError(trouble[0] ? loomSystemError : loomRemoteError,
                        "bootstrap: rank %d: connection to the root at %s failed: %s%s", b->rank,
                        rootName, socketErrText(err), trouble);
}

static loomResult_t tableRead(struct loomBootstrap *b, int fd, uint64_t deadline,
                              const char *rootName)
{
    struct bootstrapAddr mine;
    size_t len = bootstrapTableBytes(b->nranks);
    int bad;

    uint8_t *raw = malloc(len);
    b->peers = calloc((size_t)b->nranks, sizeof(*b->peers));
    if (raw == NULL || b->peers == NULL) {
        free(raw);
        return loomSetError(loomSystemError, "bootstrap: out of memory for %d addresses",
                            b->nranks);
    }
    loomResult_t res = tableRecv(b, fd, raw, len, deadline, rootName);
    const char *why =
        res == loomSuccess ? bootwireTableDecode(raw, len, b->nranks, b->peers, &bad) : NULL;
    free(raw);
    LOOMCHECK(res);
    if (why != NULL && bad >= 0)
        return loomSetError(loomInternalError,
                            "bootstrap: rank %d: malformed address of rank %d in the table from "
                            "the root at %s",
                            b->rank, bad, rootName);
    if (why != NULL)
        return loomSetError(loomInternalError,
                            "bootstrap: rank %d: malformed address table (%s) from the root at %s",
                            b->rank, why, rootName);
    socketAddrToBootstrap(&b->listenAddr, &mine);
    if (!bootwireAddrSame(&mine, &b->peers[b->rank]))
        return loomSetError(loomInternalError,
                            "bootstrap: rank %d: the root at %s lists another address for it",
                            b->rank, rootName);
    return loomSuccess;
}

static loomResult_t joinRoot(struct loomBootstrap *b, const struct bootstrapId *id,
                             uint64_t deadline)
{
    union socketAddress rootAddr;
    char rootName[SOCKET_ADDR_STRLEN], who[SOCKET_ADDR_STRLEN + 64];
    uint8_t hello[BOOTSTRAP_HELLO_BYTES];
    int fd;

    socketAddrFromBootstrap(&id->root, &rootAddr);
    socketAddrFormat(&rootAddr, rootName, sizeof(rootName));
    snprintf(who, sizeof(who), "bootstrap: rank %d of %d joining the root (timeout %d s)", b->rank,
             b->nranks, b->timeoutSec);
    LOOMCHECK(helloMake(b, hello));
    loomResult_t res = socketConnect(&rootAddr, deadline, b->abortFlag, who, &fd);
    if (res != loomSuccess) {
        char line[512], trouble[BOOT_TROUBLE_BYTES + 64];
        rootTroubleQuote(rootName, trouble, sizeof(trouble));
        snprintf(line, sizeof(line), "%s", debugLastError(NULL));
        return trouble[0] ? loomSetError(loomSystemError, "%s%s", line, trouble) : res;
    }
    res = tlsWrap(fd, 0, b->secret);
    if (res == loomSuccess)
        res = socketSendAll(fd, hello, sizeof(hello), deadline, b->abortFlag, who);
    if (res == loomSuccess)
        res = tableRead(b, fd, deadline, rootName);
    socketClose(fd);
    return res;
}

struct ringAccept {
    struct loomBootstrap *b;
    int prev;
    int fd;
};

static const char *ringTake(void *ctx, const struct bootstrapHello *h, int fd,
                            const union socketAddress *peer)
{
    struct ringAccept *ra = ctx;
    (void)peer;

    if (h->nranks != ra->b->nranks)
        return "nranks differs from this rank's";
    if (h->rank != ra->prev)
        return "not this rank's ring predecessor";
    if (!bootwireAddrSame(&h->addr, &ra->b->peers[ra->prev]))
        return "its listen address differs from the root's table";
    if (ra->fd >= 0)
        return "the predecessor is connected already";
    ra->fd = fd;
    return NULL;
}

static loomResult_t ringAcceptPrev(struct loomBootstrap *b, uint64_t deadline)
{
    struct ringAccept ra = {.b = b, .prev = (b->rank - 1 + b->nranks) % b->nranks, .fd = -1};
    char owner[32];
    loomResult_t res = loomSuccess;

    snprintf(owner, sizeof(owner), "rank %d", b->rank);
    struct helloGather *g = gatherOpen(b, owner, ringTake, &ra);
    if (g == NULL)
        return loomSetError(loomSystemError, "bootstrap: out of memory");
    while (ra.fd < 0) {
        if (socketAborted(b->abortFlag)) {
            res = loomSetError(loomRemoteError,
                               "bootstrap: rank %d aborted while waiting for %s to connect",
                               b->rank, b->prevLabel);
            break;
        }
        if (socketClockNs() >= deadline) {
            res = loomSetError(loomTimeout, "bootstrap: %s did not connect to rank %d within %d s",
                               b->prevLabel, b->rank, b->timeoutSec);
            break;
        }
        gatherRound(g, socketPollMs(deadline));
    }
    gatherCloseAll(g);
    free(g);
    b->prevFd = ra.fd;
    return res;
}

static loomResult_t ringConnect(struct loomBootstrap *b, uint64_t deadline)
{
    int next = (b->rank + 1) % b->nranks;
    int prev = (b->rank - 1 + b->nranks) % b->nranks;
    union socketAddress nextAddr;
    uint8_t hello[BOOTSTRAP_HELLO_BYTES];
    char who[LABEL_LEN + 64];

    peerLabel(b, next, b->nextLabel, sizeof(b->nextLabel));
    peerLabel(b, prev, b->prevLabel, sizeof(b->prevLabel));
    socketAddrFromBootstrap(&b->peers[next], &nextAddr);
    snprintf(who, sizeof(who), "bootstrap: rank %d connecting to its ring successor %s", b->rank,
             b->nextLabel);
    LOOMCHECK(helloMake(b, hello));
    /* Every rank listened before it said hello to the root, so the successor is listening. */
    LOOMCHECK(socketConnect(&nextAddr, deadline, b->abortFlag, who, &b->nextFd));
    LOOMCHECK(tlsWrap(b->nextFd, 0, b->secret));
    LOOMCHECK(socketSendAll(b->nextFd, hello, sizeof(hello), deadline, b->abortFlag, who));
    LOOMCHECK(ringAcceptPrev(b, deadline));
    INFO(LOOM_BOOTSTRAP, "bootstrap: rank %d of %d: ring up, next %s, prev %s", b->rank, b->nranks,
         b->nextLabel, b->prevLabel);
    return loomSuccess;
}

loomResult_t bootstrapInit(const loomUniqueId *id, int rank, int nranks, int timeoutSec,
                           atomic_int *abortFlag, struct loomBootstrap **out)
{
    struct bootstrapId bid;
    union socketAddress local;
    loomResult_t res;

    if (id == NULL || out == NULL)
        return loomSetError(loomInvalidArgument, "bootstrap: %s is NULL",
                            id == NULL ? "the unique id" : "the output pointer");
    if (nranks < 1 || nranks > BOOTSTRAP_MAX_RANKS)
        return loomSetError(loomInvalidArgument, "bootstrap: nranks %d is not in 1..%d", nranks,
                            BOOTSTRAP_MAX_RANKS);
    if (rank < 0 || rank >= nranks)
        return loomSetError(loomInvalidArgument, "bootstrap: rank %d is not in 0..%d", rank,
                            nranks - 1);
    if (timeoutSec <= 0)
        return loomSetError(loomInvalidArgument, "bootstrap: timeout %d s is not positive",
                            timeoutSec);
    const char *why = bootwireIdDecode(id, &bid);
    if (why != NULL)
        return loomSetError(loomInvalidArgument,
                            "bootstrap: the unique id is not usable: %s; pass every rank the id "
                            "loomGetUniqueId wrote, unchanged",
                            why);
    struct loomBootstrap *b = calloc(1, sizeof(*b));
    if (b == NULL)
        return loomSetError(loomSystemError, "bootstrap: out of memory");
    b->rank = rank;
    b->nranks = nranks;
    b->timeoutSec = timeoutSec;
    b->abortFlag = abortFlag;
    b->listenFd = b->nextFd = b->prevFd = -1;
    memcpy(b->secret, bid.secret, sizeof(b->secret));
    uint64_t deadline = socketDeadline(timeoutSec);

    res = socketFindInterface(&local, NULL, 0);
    if (res != loomSuccess)
        goto fail_close;
    res = socketListen(&local, &b->listenFd, &b->listenAddr);
    if (res != loomSuccess)
        goto fail_close;
    res = joinRoot(b, &bid, deadline);
    if (res != loomSuccess)
        goto fail_close;
    if (nranks > 1) {
        res = ringConnect(b, deadline);
        if (res != loomSuccess)
            goto fail_close;
    }
    *out = b;
    return loomSuccess;

fail_close:
    bootstrapClose(b);
    return res;
}

/* ---- ring collectives ---- */

struct ringXfer {
    uint8_t hdr[BOOTSTRAP_FRAME_BYTES];
    size_t hdrDone;
    size_t dataDone;
};

static loomResult_t frameCheck(const struct loomBootstrap *b, const uint8_t *hdr, uint32_t seq,
                               size_t bytes, int step)
{
    uint32_t gotSeq;
    uint64_t gotBytes;
    if (bootstrapDecodeFrame(hdr, BOOTSTRAP_FRAME_BYTES, &gotSeq, &gotBytes) != loomSuccess)
        return loomSetError(loomInternalError,
                            "bootstrap: malformed allgather frame from %s to rank %d", b->prevLabel,
                            b->rank);
    if (gotSeq != seq)
        return loomSetError(loomInternalError,
                            "bootstrap: %s is at bootstrap collective #%u, rank %d at #%u (the "
                            "ranks called allgather/barrier a different number of times)",
                            b->prevLabel, gotSeq, b->rank, seq);
    if (gotBytes != bytes)
        return loomSetError(loomInternalError,
                            "bootstrap: %s sent a %llu-byte block in allgather step %d, rank %d "
                            "expected %zu bytes (every rank must pass the same size)",
                            b->prevLabel, (unsigned long long)gotBytes, step, b->rank, bytes);
    return loomSuccess;
}

static loomResult_t ringLost(const struct loomBootstrap *b, int sending, int err, int step)
{
    const char *dir = sending ? "to" : "from";
    const char *label = sending ? b->nextLabel : b->prevLabel;

    if (err == 0)
        return loomSetError(loomRemoteError,
                            "bootstrap: connection %s %s closed during allgather (rank %d, step "
                            "%d of %d)",
                            dir, label, b->rank, step + 1, b->nranks - 1);
    return loomSetError(loomRemoteError,
                        "bootstrap: connection %s %s failed during allgather: %s (rank %d)", dir,
                        label, socketErrText(err), b->rank);
}

static loomResult_t ringStalled(const struct loomBootstrap *b, int sending, size_t done,
                                size_t total, int step)
{
    if (sending)
        return loomSetError(loomTimeout,
                            "bootstrap: rank %d could not send to %s for %d s during allgather "
                            "(step %d of %d, %zu of %zu bytes sent)",
                            b->rank, b->nextLabel, b->timeoutSec, step + 1, b->nranks - 1, done,
                            total);
    return loomSetError(loomTimeout,
                        "bootstrap: rank %d got nothing from %s for %d s during allgather (step "
                        "%d of %d, %zu of %zu bytes received)",
                        b->rank, b->prevLabel, b->timeoutSec, step + 1, b->nranks - 1, done, total);
}

/*
 * One ring step: sends `bytes` from sendBuf to the successor while receiving
 * `bytes` into recvBuf from the predecessor. The deadline restarts whenever
 * bytes move, so only a stall, not a large block, times out.
 */
static loomResult_t ringExchange(struct loomBootstrap *b, uint32_t seq, int step,
                                 const uint8_t *sendBuf, uint8_t *recvBuf, size_t bytes)
{
    struct ringXfer out = {.hdrDone = 0}, in = {.hdrDone = 0};
    uint64_t deadline = socketDeadline(b->timeoutSec);
    int checked = 0;

    bootstrapEncodeFrame(seq, bytes, out.hdr, sizeof(out.hdr));
    for (;;) {
        size_t before = out.hdrDone + out.dataDone + in.hdrDone + in.dataDone;
        loomResult_t res = socketTrySend(b->nextFd, out.hdr, BOOTSTRAP_FRAME_BYTES, &out.hdrDone);
        if (res == loomSuccess && out.hdrDone == BOOTSTRAP_FRAME_BYTES)
            res = socketTrySend(b->nextFd, sendBuf, bytes, &out.dataDone);
        if (res != loomSuccess)
            return ringLost(b, 1, errno, step);
        res = socketTryRecv(b->prevFd, in.hdr, BOOTSTRAP_FRAME_BYTES, &in.hdrDone);
        if (res == loomSuccess && in.hdrDone == BOOTSTRAP_FRAME_BYTES) {
            if (!checked) {
                LOOMCHECK(frameCheck(b, in.hdr, seq, bytes, step));
                checked = 1;
            }
            res = socketTryRecv(b->prevFd, recvBuf, bytes, &in.dataDone);
        }
        if (res != loomSuccess)
            return ringLost(b, 0, errno, step);
        int sendDone = out.hdrDone == BOOTSTRAP_FRAME_BYTES && out.dataDone == bytes;
        int recvDone = checked && in.dataDone == bytes;
        if (sendDone && recvDone)
            return loomSuccess;
        if (out.hdrDone + out.dataDone + in.hdrDone + in.dataDone != before)
            deadline = socketDeadline(b->timeoutSec);
        if (socketAborted(b->abortFlag))
            return loomSetError(loomRemoteError, "bootstrap: rank %d: allgather aborted", b->rank);
        int ms = socketPollMs(deadline);
        if (ms == 0)
            return recvDone ? ringStalled(b, 1, out.dataDone, bytes, step)
                            : ringStalled(b, 0, in.dataDone, bytes, step);
        struct pollfd p[2];
        int n = 0;
        if (!sendDone)
            p[n++] = (struct pollfd){.fd = b->nextFd, .events = POLLOUT};
        if (!recvDone)
            p[n++] = (struct pollfd){.fd = b->prevFd, .events = POLLIN};
        poll(p, (nfds_t)n, ms);
    }
}

loomResult_t bootstrapAllGather(struct loomBootstrap *b, void *data, size_t bytes)
{
    if (b == NULL || (data == NULL && bytes > 0))
        return loomSetError(loomInvalidArgument, "bootstrapAllGather: %s is NULL",
                            b == NULL ? "the bootstrap" : "data");
    if (bytes > SIZE_MAX / (size_t)b->nranks)
        return loomSetError(loomInvalidArgument,
                            "bootstrapAllGather: %zu bytes x %d ranks overflows", bytes, b->nranks);
    uint32_t seq = b->seq++;
    int n = b->nranks;
    uint8_t *blocks = data;
    for (int s = 0; s < n - 1; s++) {
        size_t sendBlock = (size_t)((b->rank - s + n) % n);
        size_t recvBlock = (size_t)((b->rank - s - 1 + 2 * n) % n);
        LOOMCHECK(
            ringExchange(b, seq, s, blocks + sendBlock * bytes, blocks + recvBlock * bytes, bytes));
    }
    return loomSuccess;
}

loomResult_t bootstrapBarrier(struct loomBootstrap *b)
{
    if (b == NULL)
        return loomSetError(loomInvalidArgument, "bootstrapBarrier: the bootstrap is NULL");
    if (b->nranks == 1)
        return loomSuccess;
    uint8_t *tokens = calloc((size_t)b->nranks, 1);
    if (tokens == NULL)
        return loomSetError(loomSystemError, "bootstrap: out of memory");
    /* An allgather returns only after every block, hence every rank, has arrived. */
    loomResult_t res = bootstrapAllGather(b, tokens, 1);
    free(tokens);
    return res;
}

const uint8_t *bootstrapSecret(const struct loomBootstrap *b)
{
    return b->secret;
}

void bootstrapClose(struct loomBootstrap *b)
{
    if (b == NULL)
        return;
    socketClose(b->nextFd);
    socketClose(b->prevFd);
    socketClose(b->listenFd);
    free(b->peers);
    if (b->gather != NULL) {
        gatherCloseAll(b->gather);
        free(b->gather);
    }
    while (b->inbox != NULL) {
        struct bootMsg *m = b->inbox;
        b->inbox = m->next;
        free(m);
    }
    free(b);
}

/* ---- point-to-point messages (bootstrapSend, bootstrapRecv) ---- */

/*
 * A message travels on a connection of its own to the receiver's listening
 * socket: the hello (secret, rank, nranks, listen address, as at init), then
 *
 *   "LMBP"(4) tag(4) length(4) data(length)
 *
 * and the sender closes it. The kernel holds it until the receiver accepts,
 * so a send never waits for the receiver to be ready (only for its
 * kernel to accept the connection); the receiver keeps
 * what it accepted for a later call (b->inbox).
 */
#define P2P_MAGIC 0x4c4d4250u /* "LMBP" */
#define P2P_HEADER 12
#define P2P_POLL_MS 50

static const char *p2pTake(void *ctx, const struct bootstrapHello *h, int fd,
                           const union socketAddress *peer)
{
    struct loomBootstrap *b = ctx;
    uint8_t hdr[P2P_HEADER];
    (void)peer;
    if (h->nranks != b->nranks || h->rank < 0 || h->rank >= b->nranks)
        return "not a rank of this communicator";
    if (!bootwireAddrSame(&h->addr, &b->peers[h->rank]))
        return "its listen address differs from the root's table";
    uint64_t deadline = socketDeadline(HELLO_TIMEOUT_SEC);
    if (socketRecvAll(fd, hdr, sizeof(hdr), deadline, b->abortFlag, NULL) != loomSuccess ||
        wireGet32(hdr) != P2P_MAGIC)
        return "no message after the hello";
    uint32_t bytes = wireGet32(hdr + 8);
    if (bytes > BOOTSTRAP_MSG_MAX_BYTES)
        return "a message larger than any the bootstrap sends";
    struct bootMsg *m = malloc(sizeof(*m) + bytes);
    if (m == NULL)
        return "out of memory for its message";
    if (socketRecvAll(fd, m->data, bytes, deadline, b->abortFlag, NULL) != loomSuccess) {
        free(m);
        return "the message ended early";
    }
    m->from = h->rank;
    m->tag = wireGet32(hdr + 4);
    m->bytes = bytes;
    m->next = NULL;
    struct bootMsg **at = &b->inbox;
    while (*at != NULL)
        at = &(*at)->next;
    *at = m;
    socketClose(fd);
    return NULL;
}

loomResult_t bootstrapSend(struct loomBootstrap *b, int peer, uint32_t tag, const void *data,
                           size_t bytes, const struct bootstrapWait *w)
{
    union socketAddress addr;
    uint8_t hello[BOOTSTRAP_HELLO_BYTES], hdr[P2P_HEADER];
    char label[LABEL_LEN], who[LABEL_LEN + 64];
    int fd = -1;
    if (peer < 0 || peer >= b->nranks || bytes > BOOTSTRAP_MSG_MAX_BYTES)
        return loomSetError(loomInternalError, "bootstrap: no message of %zu bytes to rank %d",
                            bytes, peer);
    peerLabel(b, peer, label, sizeof(label));
    snprintf(who, sizeof(who), "bootstrap: rank %d sending to %s", b->rank, label);
    uint64_t deadline = w->deadline;
    LOOMCHECK(helloMake(b, hello));
    wirePut32(hdr, P2P_MAGIC);
    wirePut32(hdr + 4, tag);
    wirePut32(hdr + 8, (uint32_t)bytes);
    socketAddrFromBootstrap(&b->peers[peer], &addr);
    /*
     * Every rank listens from init until it destroys the communicator, and a full listen
     * queue drops connections rather than refuse them: a refusal means the peer has left.
     */
    loomResult_t res = loomSuccess;
    char where[SOCKET_ADDR_STRLEN];
    socketAddrFormat(&addr, where, sizeof(where));
    for (int backoffMs = 10;; backoffMs = backoffMs < 100 ? 2 * backoffMs : 100) {
        /* Attempts of at most 0.5 s, so that a peer known to have failed ends the wait. */
        uint64_t soon = socketDeadline(0.5);
        int err = socketConnectOnce(&addr, soon < deadline ? soon : deadline, b->abortFlag, &fd);
        if (err == 0)
            break;
        if (err == ECONNREFUSED && w->gone != NULL && w->gone(w->ctx, peer))
            return loomSetError(loomRemoteError,
                                "bootstrap: %s failed while rank %d was sending to it (%s)", label,
                                b->rank, w->what);
        if (err == ECONNREFUSED)
            return loomSetError(loomRemoteError,
                                "bootstrap: %s refused rank %d's connection: it has exited or "
                                "left the communicator (%s)",
                                label, b->rank, w->what);
        if (err == ECANCELED || socketAborted(b->abortFlag))
            return loomSetError(loomRemoteError, "bootstrap: rank %d aborted while sending to %s",
                                b->rank, label);
        if (w->gone != NULL && w->gone(w->ctx, peer))
            return loomSetError(loomRemoteError,
                                "bootstrap: %s failed while rank %d was sending to it (%s)", label,
                                b->rank, w->what);
        if (socketClockNs() >= deadline)
            return loomSetError(loomTimeout,
                                "bootstrap: rank %d could not connect to %s at %s within %d s: %s "
                                "(%s)",
                                b->rank, label, where, b->timeoutSec, debugErrnoText(err), w->what);
        int ms = socketPollMs(deadline);
        poll(NULL, 0, ms < backoffMs ? ms : backoffMs);
    }
    res = tlsWrap(fd, 0, b->secret);
    if (res == loomSuccess)
        res = socketSendAll(fd, hello, sizeof(hello), deadline, b->abortFlag, who);
    if (res == loomSuccess)
        res = socketSendAll(fd, hdr, sizeof(hdr), deadline, b->abortFlag, who);
    if (res == loomSuccess && bytes > 0)
        res = socketSendAll(fd, data, bytes, deadline, b->abortFlag, who);
    socketClose(fd);
    return res;
}

static struct bootMsg *inboxTake(struct loomBootstrap *b, int from, uint32_t tag)
{
    for (struct bootMsg **at = &b->inbox; *at != NULL; at = &(*at)->next) {
        if ((*at)->from == from && (*at)->tag == tag) {
            struct bootMsg *m = *at;
            *at = m->next;
            return m;
        }
    }
    return NULL;
}

loomResult_t bootstrapRecv(struct loomBootstrap *b, int peer, uint32_t tag, void *data,
                           size_t bytes, const struct bootstrapWait *w)
{
    char label[LABEL_LEN];
    if (b->gather == NULL) {
        snprintf(b->owner, sizeof(b->owner), "rank %d", b->rank);
        b->gather = gatherOpen(b, b->owner, p2pTake, b);
        if (b->gather == NULL)
            return loomSetError(loomSystemError, "bootstrap: out of memory");
    }
    peerLabel(b, peer, label, sizeof(label));
    int drained = 0;
    for (;;) {
        struct bootMsg *m = inboxTake(b, peer, tag);
        if (m != NULL) {
            loomResult_t res = loomSuccess;
            if (m->bytes != bytes)
                res = loomSetError(loomInternalError,
                                   "bootstrap: rank %d got %zu bytes from %s, expected %zu",
                                   b->rank, m->bytes, label, bytes);
            else
                memcpy(data, m->data, bytes);
            free(m);
            return res;
        }
        if (socketAborted(b->abortFlag))
            return loomSetError(loomRemoteError, "bootstrap: rank %d aborted while waiting for %s",
                                b->rank, label);
        if (w->gone != NULL && w->gone(w->ctx, peer)) {
            /* What it sent before it left may wait in the listen queue or a socket: read
             * that in, without waiting, once before giving up on it. */
            if (!drained) {
                drained = 1;
                for (int pass = 0; pass < 4; pass++)
                    gatherRound(b->gather, 0);
                continue;
            }
            return loomSetError(loomRemoteError,
                                "bootstrap: %s failed while rank %d waited for it (%s)", label,
                                b->rank, w->what);
        }
        if (socketClockNs() >= w->deadline)
            return loomSetError(loomTimeout,
                                "bootstrap: %s did not answer rank %d within %d s (%s)", label,
                                b->rank, b->timeoutSec, w->what);
        int ms = socketPollMs(w->deadline);
        gatherRound(b->gather, ms < P2P_POLL_MS ? ms : P2P_POLL_MS);
    }
}
