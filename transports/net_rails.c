/*
 * net_rails.c — a TCP connection striped over several rails, which carries on when all but one
 * of them fail (net_socket.c connects it: socket s on rail s % rails; see its header).
 *
 * On one rail a message's parts follow a header on socket 0 (net_socket.c); once a socket can
 * vanish mid-message that is not enough, so here every part says what it is and each socket is
 * a stream of frames of its own:
 *
 *   sender -> receiver, RAIL_FRAME bytes:  "LMRD" gen msg total off len, then len bytes of msg
 *                                          "LMRX" dead: the sender lost these sockets
 *   receiver -> sender, against the data:  "LMRA" done: messages landed
 *                                          "LMRR" gen done dead: resume
 *                                          "LMNF" ...: a failure notice (net.h)
 *
 * The receiver puts a part at `off` in message msg's slot and counts its bytes; a message is in
 * when all `total` have come, whatever socket brought them. The sender keeps a message's slot
 * until the receiver acknowledges it (LMRA), not merely until it left, so that it can send it
 * again: that is the point both ends know.
 *
 * A socket fails when its rail's interface goes down on this host (looked at every 100 ms), or
 * on an error or an end inside a frame. The sender tells the receiver (LMRX, on a socket that
 * still works); the receiver, when it learns of a failure either way, starts a new generation
 * and sends "resume from message done" (LMRR) on its lowest working socket. From then on it
 * counts only parts of the new generation: what the old one still brings (a part the sender had
 * started) is read and dropped, and the sender, on LMRR, drops what it had not started and
 * sends every message from `done` on again over the sockets left. A rail that failed stays
 * dropped for the communicator's life. The connection fails only when no socket is left.
 *
 * A socket that ends between frames was closed by the peer on its way out (not a failure):
 * nothing more comes on it, and the connection ends once no socket is left. Each connection is
 * moved by the proxy alone (no helper threads), under net.c's lock. Bytes go through tls.h, as
 * on one rail (LOOM_NET_TLS).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>

#include "debug.h"
#include "net_socket.h"
#include "tls.h"
#include "wire.h"

#define RAIL_FRAME 32
/* Frames a socket holds: a part of each message in flight, the part started before a resume and
 * an LMRX for each socket that failed. */
#define RAIL_QUEUE (LOOM_STEPS + 1 + SOCK_MAX)
#define RAIL_CHECK_NS (100 * 1000000ULL)
#define RAIL_SCRATCH 16384
#define RAIL_ACK_BYTES 12
#define RAIL_RESUME_BYTES 20

_Static_assert(SOCK_MAX <= 32, "a socket mask fits 32 bits");

/* One frame to send: its header, then len bytes of data. */
struct railOp {
    uint8_t hdr[RAIL_FRAME];
    char *data;
    size_t len;
    size_t done; /* bytes sent, header included */
};

struct railLink {
    int dead;  /* failed: not used any more */
    int ended; /* the peer closed it between frames */
    /* send connection: frames in order */
    struct railOp q[RAIL_QUEUE];
    uint32_t qHead, qTail;
    /* recv connection: the frame being read */
    uint8_t hdr[RAIL_FRAME];
    size_t hdrGot;
    int inData;   /* the header is in and taken: reading its data */
    char *dst;    /* where the data goes; NULL: read and dropped */
    size_t left;  /* data bytes still to read */
    uint64_t msg; /* the part's message, length and generation */
    uint32_t len, gen;
    /* control frames against the data: out on a recv connection, in on a send one */
    uint8_t ctl[NET_NOTICE_MAX_BYTES];
    size_t ctlLen, ctlDone;
};

struct railSlot {
    int valid; /* a part of msg in generation gen has come */
    uint64_t msg;
    uint32_t gen, total, got;
};

struct railConn {
    uint32_t gen;     /* the receiver's generation: parts of another one do not count */
    uint32_t dead;    /* sockets that failed (bit s) */
    uint32_t told;    /* send: dead sockets an LMRX went out for; recv: those of the last resume */
    int resumeDue;    /* recv: an LMRR to send */
    int noticeSent;   /* recv: the failure notice went into a control frame */
    uint64_t acked;   /* send: messages the receiver has */
    uint64_t ackSent; /* recv: the done count last acknowledged */
    int broken;       /* the peer sent something malformed */
    struct railSlot slots[LOOM_STEPS]; /* recv */
    struct railLink links[SOCK_MAX];
    char scratch[RAIL_SCRATCH];
};

loomResult_t railsCreate(struct sockConn *sc)
{
    sc->rails = calloc(1, sizeof(*sc->rails));
    if (sc->rails == NULL)
        return loomSetError(loomSystemError, "NET/socket: out of memory for a connection");
    return loomSuccess;
}

void railsFree(struct sockConn *sc)
{
    free(sc->rails);
    sc->rails = NULL;
}

static int linkLive(const struct railLink *l)
{
    return !l->dead && !l->ended;
}

/* The lowest socket still working, or -1. */
static int firstLive(const struct sockConn *sc)
{
    for (int s = 0; s < sc->nsocks; s++)
        if (linkLive(&sc->rails->links[s]))
            return s;
    return -1;
}

static void linkDie(struct sockState *st, struct sockConn *sc, int s, const char *why)
{
    struct railConn *rc = sc->rails;
    int rail = s % sc->nrails;
    if (rc->links[s].dead)
        return;
    rc->links[s].dead = 1;
    rc->dead |= 1u << s;
    if (!(st->railsWarned & (1u << rail))) {
        st->railsWarned |= 1u << rail;
        WARN("NET/socket: rail %d (%s) failed on the connection %s rank %d (%s): %s; the other "
             "rail(s) carry on",
             rail, st->rails[rail].ifname, sc->nc->isSend ? "to" : "from", sc->nc->peer,
             st->comm->peers[sc->nc->peer].hostname, why);
    }
    INFO(LOOM_NET, "NET/socket: %s rank %d (channel %d): socket %d (rail %s) dropped: %s",
         sc->nc->isSend ? "sending to" : "receiving from", sc->nc->peer, sc->nc->channel, s,
         st->rails[rail].ifname, why);
}

/* Marks the sockets of the rails whose interface went down (looked at every RAIL_CHECK_NS). */
static void railsWatch(struct sockState *st, struct sockConn *sc)
{
    uint64_t now = loomClockNs();
    if (now - st->railsCheckNs >= RAIL_CHECK_NS) {
        st->railsCheckNs = now;
        for (int r = 0; r < st->me.nrails; r++)
            if (!socketInterfaceUp(st->rails[r].ifname))
                st->railsDown |= 1u << r;
    }
    for (int s = 0; s < sc->nsocks; s++)
        if (!sc->rails->links[s].dead && (st->railsDown & (1u << (s % sc->nrails))))
            linkDie(st, sc, s, "its interface is down on this host");
}

/* Sends what goes now of a and then b. 1: all sent, 0: would block, -1: error (errno). */
static int sendSome(int fd, const void *a, size_t alen, const char *b, size_t blen, size_t *done)
{
    while (*done < alen + blen) {
        struct iovec iov[2];
        int n = 0;
        if (*done < alen)
            iov[n++] = (struct iovec){(char *)a + *done, alen - *done};
        size_t bDone = *done > alen ? *done - alen : 0;
        if (blen > bDone)
            iov[n++] = (struct iovec){(char *)b + bDone, blen - bDone};
        ssize_t r = tlsSendv(fd, iov, n);
        if (r > 0)
            *done += (size_t)r;
        else if (r < 0 && errno == EINTR)
            continue;
        else if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            return 0;
        else
            return -1;
    }
    return 1;
}

/* Reads what is there, at most want bytes. >0: bytes read, 0: nothing now, -1: error (errno),
 * -2: the peer closed it. */
static ssize_t recvSome(int fd, void *buf, size_t want)
{
    for (;;) {
        ssize_t r = tlsRecv(fd, buf, want);
        if (r > 0)
            return r;
        if (r == 0)
            return -2;
        if (errno == EINTR)
            continue;
        return errno == EAGAIN || errno == EWOULDBLOCK ? 0 : -1;
    }
}

/* ---- sending ---- */

static void queueFrame(struct railLink *l, const struct railOp *op)
{
    if (l->qTail - l->qHead < RAIL_QUEUE) /* always: see RAIL_QUEUE */
        l->q[l->qTail++ % RAIL_QUEUE] = *op;
}

/* Queues message k's parts over the sockets that work, in the current generation. */
static void queueMessage(struct sockConn *sc, uint64_t k)
{
    struct railConn *rc = sc->rails;
    int slot = (int)(k % LOOM_STEPS), live[SOCK_MAX], n = 0;
    uint32_t bytes = sc->msgs[slot].bytes;
    for (int s = 0; s < sc->nsocks; s++)
        if (linkLive(&rc->links[s]))
            live[n++] = s;
    size_t off, len;
    int parts = n == 0 ? 0 : netSplit(bytes, n, 0, &off, &len);
    for (int i = 0; i < parts; i++) {
        netSplit(bytes, n, i, &off, &len);
        struct railOp op = {.data = sc->nc->slots + (size_t)slot * sc->nc->slotBytes + off,
                            .len = len};
        memcpy(op.hdr, "LMRD", 4);
        wirePut32(op.hdr + 4, rc->gen);
        wirePut64(op.hdr + 8, k);
        wirePut32(op.hdr + 16, bytes);
        wirePut32(op.hdr + 20, (uint32_t)off);
        wirePut32(op.hdr + 24, (uint32_t)len);
        queueFrame(&rc->links[live[i]], &op);
    }
}

/* LMRR gen done dead: drop what was not started, send again from `done` on. */
static void resume(struct sockState *st, struct sockConn *sc, const uint8_t *f)
{
    struct railConn *rc = sc->rails;
    uint32_t gen = wireGet32(f + 4), dead = wireGet32(f + 16);
    uint64_t done = wireGet64(f + 8);
    if (gen <= rc->gen)
        return; /* an old one */
    if (done > sc->nc->posted) {
        rc->broken = 1;
        return;
    }
    rc->gen = gen;
    for (int s = 0; s < sc->nsocks; s++)
        if (dead & (1u << s))
            linkDie(st, sc, s, "the peer lost it");
    rc->told = dead;
    if (done > rc->acked)
        rc->acked = done;
    for (int s = 0; s < sc->nsocks; s++) {
        struct railLink *l = &rc->links[s];
        if (!linkLive(l))
            continue;
        /* A frame half sent stays: the receiver reads it whole and drops it. */
        l->qTail = l->qHead + (l->qHead != l->qTail && l->q[l->qHead % RAIL_QUEUE].done > 0);
    }
    for (uint64_t k = rc->acked; k < sc->nc->posted; k++)
        queueMessage(sc, k);
}

/* The frames against the data on socket s of a send connection: acks, resumes, a notice. */
static void readControl(struct sockState *st, struct sockConn *sc, int s)
{
    struct railConn *rc = sc->rails;
    struct railLink *l = &rc->links[s];
    while (linkLive(l) && !rc->broken) {
        long missing;
        struct netNotice notice;
        if (l->ctlLen < 4)
            missing = 4 - (long)l->ctlLen;
        else if (memcmp(l->ctl, "LMRA", 4) == 0)
            missing = RAIL_ACK_BYTES - (long)l->ctlLen;
        else if (memcmp(l->ctl, "LMRR", 4) == 0)
            missing = RAIL_RESUME_BYTES - (long)l->ctlLen;
        else
            missing = netNoticeDecode(l->ctl, l->ctlLen, &notice);
        if (missing < 0) {
            rc->broken = 1;
            return;
        }
        if (missing == 0) {
            if (memcmp(l->ctl, "LMRA", 4) == 0) {
                uint64_t done = wireGet64(l->ctl + 4);
                if (done > rc->acked && done <= sc->nc->posted)
                    rc->acked = done;
            } else if (memcmp(l->ctl, "LMRR", 4) == 0) {
                resume(st, sc, l->ctl);
            } else if (!sc->nc->noticeIn) {
                sc->nc->notice = notice;
                sc->nc->noticeIn = 1;
            }
            l->ctlLen = 0;
            continue;
        }
        ssize_t r = recvSome(sc->links[s].fd, l->ctl + l->ctlLen, (size_t)missing);
        if (r == 0)
            return;
        if (r == -2 && l->ctlLen == 0)
            l->ended = 1;
        else if (r < 0)
            linkDie(st, sc, s, r == -2 ? "closed inside a frame" : socketErrText(errno));
        else
            l->ctlLen += (size_t)r;
    }
}

static void sendProgress(struct sockState *st, struct sockConn *sc, int *moved)
{
    struct railConn *rc = sc->rails;
    struct netConn *nc = sc->nc;
    for (int s = 0; s < sc->nsocks; s++)
        readControl(st, sc, s);
    uint64_t tail = atomic_load_explicit(&nc->fifo->tail, memory_order_acquire);
    for (uint64_t n = netSendable(nc->posted, tail, UINT64_MAX); n > 0; n--) {
        sc->msgs[nc->posted % LOOM_STEPS].bytes =
            (uint32_t)nc->fifo->bytes[nc->posted % LOOM_STEPS];
        queueMessage(sc, nc->posted++);
    }
    int first = firstLive(sc);
    if (first >= 0 && (rc->dead & ~rc->told)) {
        struct railOp op = {.len = 0};
        memcpy(op.hdr, "LMRX", 4);
        wirePut32(op.hdr + 4, rc->dead);
        queueFrame(&rc->links[first], &op);
        rc->told = rc->dead;
    }
    for (int s = 0; s < sc->nsocks; s++) {
        struct railLink *l = &rc->links[s];
        while (linkLive(l) && l->qHead != l->qTail) {
            struct railOp *op = &l->q[l->qHead % RAIL_QUEUE];
            int r = sendSome(sc->links[s].fd, op->hdr, RAIL_FRAME, op->data, op->len, &op->done);
            if (r == 0)
                break;
            if (r < 0)
                linkDie(st, sc, s, socketErrText(errno));
            else
                l->qHead++;
        }
    }
    /* A slot is free again once the receiver has its message. */
    if (rc->acked > nc->done) {
        nc->done = rc->acked;
        atomic_store_explicit(&nc->fifo->head, nc->done, memory_order_release);
        *moved = 1;
    }
}

/* ---- receiving ---- */

/* The header on socket s is in: says where its data goes. 1: go on, 0: its slot is not free
 * yet (wait), -1: malformed. */
static int frameStart(struct sockState *st, struct sockConn *sc, int s)
{
    struct railConn *rc = sc->rails;
    struct railLink *l = &rc->links[s];
    struct netConn *nc = sc->nc;
    if (memcmp(l->hdr, "LMRX", 4) == 0) {
        uint32_t dead = wireGet32(l->hdr + 4);
        for (int d = 0; d < sc->nsocks; d++)
            if (dead & (1u << d))
                linkDie(st, sc, d, "the peer lost it");
        l->hdrGot = 0;
        return 1;
    }
    uint32_t gen = wireGet32(l->hdr + 4), total = wireGet32(l->hdr + 16),
             off = wireGet32(l->hdr + 20), len = wireGet32(l->hdr + 24);
    uint64_t msg = wireGet64(l->hdr + 8);
    if (memcmp(l->hdr, "LMRD", 4) != 0 || gen > rc->gen || total > nc->slotBytes || len > total ||
        off > total - len)
        return -1;
    int counts = gen == rc->gen && msg >= nc->done;
    if (counts) {
        uint64_t head = atomic_load_explicit(&nc->fifo->head, memory_order_acquire);
        if (msg >= head + LOOM_STEPS)
            return 0; /* the executor has not freed its slot: TCP holds the sender back */
        struct railSlot *sl = &rc->slots[msg % LOOM_STEPS];
        if (!sl->valid || sl->msg != msg || sl->gen != gen)
            *sl = (struct railSlot){1, msg, gen, total, 0};
        else if (sl->total != total)
            return -1;
    }
    l->inData = 1;
    l->msg = msg;
    l->gen = gen;
    l->len = len;
    l->left = len;
    l->dst = counts ? nc->slots + (msg % LOOM_STEPS) * nc->slotBytes + off : NULL;
    return 1;
}

static void readData(struct sockState *st, struct sockConn *sc, int s)
{
    struct railConn *rc = sc->rails;
    struct railLink *l = &rc->links[s];
    int fd = sc->links[s].fd;
    while (linkLive(l) && !rc->broken) {
        ssize_t r;
        if (!l->inData && l->hdrGot < RAIL_FRAME) {
            r = recvSome(fd, l->hdr + l->hdrGot, RAIL_FRAME - l->hdrGot);
            if (r > 0)
                l->hdrGot += (size_t)r;
        } else if (!l->inData) {
            int go = frameStart(st, sc, s);
            if (go < 0)
                rc->broken = 1;
            if (go <= 0)
                return;
            continue;
        } else if (l->left > 0) {
            char *to = l->dst ? l->dst + (l->len - l->left) : rc->scratch;
            size_t want = l->dst || l->left < RAIL_SCRATCH ? l->left : RAIL_SCRATCH;
            r = recvSome(fd, to, want);
            if (r > 0)
                l->left -= (size_t)r;
        } else {
            struct railSlot *sl = &rc->slots[l->msg % LOOM_STEPS];
            if (l->dst && sl->valid && sl->msg == l->msg && sl->gen == l->gen && l->gen == rc->gen)
                sl->got += l->len;
            l->inData = 0;
            l->hdrGot = 0;
            continue;
        }
        if (r == 0)
            return;
        if (r == -2 && l->hdrGot == 0 && !l->inData)
            l->ended = 1;
        else if (r < 0)
            linkDie(st, sc, s, r == -2 ? "closed inside a frame" : socketErrText(errno));
    }
}

/* Sends the receiver's control frames on its lowest working socket: a notice, a resume, an ack. */
static void writeControl(struct sockState *st, struct sockConn *sc)
{
    struct railConn *rc = sc->rails;
    int s = firstLive(sc);
    while (s >= 0) {
        struct railLink *l = &rc->links[s];
        if (l->ctlDone == l->ctlLen) {
            l->ctlDone = l->ctlLen = 0;
            if (sc->noticeLen > 0 && !rc->noticeSent) {
                memcpy(l->ctl, sc->notice, sc->noticeLen);
                l->ctlLen = sc->noticeLen;
                rc->noticeSent = 1;
            } else if (rc->resumeDue) {
                memcpy(l->ctl, "LMRR", 4);
                wirePut32(l->ctl + 4, rc->gen);
                wirePut64(l->ctl + 8, sc->nc->done);
                wirePut32(l->ctl + 16, rc->dead);
                l->ctlLen = RAIL_RESUME_BYTES;
                rc->resumeDue = 0;
                rc->ackSent = sc->nc->done;
            } else if (sc->nc->done > rc->ackSent) {
                memcpy(l->ctl, "LMRA", 4);
                wirePut64(l->ctl + 4, sc->nc->done);
                l->ctlLen = RAIL_ACK_BYTES;
                rc->ackSent = sc->nc->done;
            } else {
                return;
            }
        }
        int r = sendSome(sc->links[s].fd, l->ctl, l->ctlLen, NULL, 0, &l->ctlDone);
        if (r == 0)
            return;
        if (r < 0) {
            linkDie(st, sc, s, socketErrText(errno));
            return; /* the next pass resumes on the socket after it */
        }
    }
}

static void recvProgress(struct sockState *st, struct sockConn *sc, int *moved)
{
    struct railConn *rc = sc->rails;
    struct netConn *nc = sc->nc;
    for (int s = 0; s < sc->nsocks; s++)
        readData(st, sc, s);
    if (rc->dead & ~rc->told) {
        /* A new generation: what the old one still brings is dropped, from the part being read
         * on. */
        rc->gen++;
        rc->told = rc->dead;
        rc->resumeDue = 1;
        for (int s = 0; s < sc->nsocks; s++)
            rc->links[s].dst = NULL;
        *moved = 1;
    }
    for (;;) {
        struct railSlot *sl = &rc->slots[nc->done % LOOM_STEPS];
        if (!sl->valid || sl->msg != nc->done || sl->gen != rc->gen || sl->got != sl->total)
            break;
        nc->fifo->bytes[nc->done % LOOM_STEPS] = sl->total;
        sl->valid = 0;
        nc->done++;
        nc->posted = nc->done;
        atomic_store_explicit(&nc->fifo->tail, nc->done, memory_order_release);
        *moved = 1;
    }
    writeControl(st, sc);
}

loomResult_t railsProgress(struct sockState *st, struct sockConn *sc, int *moved)
{
    struct railConn *rc = sc->rails;
    uint32_t dead = rc->dead;
    railsWatch(st, sc);
    if (sc->nc->isSend)
        sendProgress(st, sc, moved);
    else
        recvProgress(st, sc, moved);
    if (rc->dead != dead)
        *moved = 1; /* look again at once: the others take over */
    const char *why = NULL;
    if (rc->broken)
        why = "a malformed frame (the peers disagree about the protocol)";
    else if (firstLive(sc) < 0)
        why = rc->dead == (1u << sc->nsocks) - 1 ? "every rail failed" : "closed by the peer";
    if (why == NULL)
        return loomSuccess;
    snprintf(sc->nc->why, sizeof(sc->nc->why), "NET/socket: %s rank %d (channel %d, %d rails): %s",
             sc->nc->isSend ? "sending to" : "receiving from", sc->nc->peer, sc->nc->channel,
             sc->nrails, why);
    return loomRemoteError;
}

void railsNotify(struct sockConn *sc, const uint8_t *msg, size_t len)
{
    if (sc->noticeLen > 0 || len > sizeof(sc->notice))
        return; /* one notice per connection: the first failure is the one that counts */
    memcpy(sc->notice, msg, len);
    sc->noticeLen = len; /* writeControl sends it */
}

void railsPollNotice(struct sockState *st, struct sockConn *sc)
{
    for (int s = 0; s < sc->nsocks; s++)
        readControl(st, sc, s);
}
