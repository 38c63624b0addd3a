/*
 * net_socket.c — the TCP backend of the network transport.
 *
 * Each connection (one direction of one peer pair on one channel) is
 * nsocks TCP sockets: the smaller of the two ranks' values, each
 * LOOM_SOCKET_NSOCKS or chosen from the link's speed (sockChoose). Socket
 * 0 carries every message's 8-byte header (size, message number) followed
 * by the message, or by its first part when the message is large; the
 * other parts travel on sockets 1.. side by side (netSplit):
 *
 *   socket 0:  [hdr k][msg k]  [hdr k+1][part 0 of k+1]  [hdr k+2][msg k+2] ...
 *   socket 1:                  [part 1 of k+1]
 *   socket 2:                  [part 2 of k+1]
 *
 * Socket 0 is always moved by the proxy thread itself (or by an executor
 * waiting on it), so a small message costs one sendmsg() and two recv()
 * calls and no hand-off, with TCP_NODELAY.
 *
 * Duplex: on one rail without TLS and with nsocks >= 2, socket 0 of a pair's
 * two connections on a channel (this rank -> peer and peer -> this rank) is
 * one TCP connection, which the lower rank connects (twinsPair). Each direction of
 * it is the stream above; a message one way then carries the ACK of what
 * came the other way, where on a socket a direction every small message
 * cost a pure ACK of its own (~6 us on veth, as much as a message:
 * docs/performance.md). Sockets 1.. are moved by helper threads (LOOM_SOCKET_NTHREADS,
 * or one per core the rank has beyond two; each owns some of them), or by
 * the proxy when there are none. Every socket has a queue of transfers,
 * filled only by the proxy and emptied in order by
 * whoever moves the socket; a transfer that finishes counts itself done in
 * its message, and a message is done when all its parts are.
 *
 * A message the executor flagged LOOM_FIFO_REF (fifo.h) is sent from the
 * address its slot holds, the caller's memory, instead of from the slot;
 * sockUnref (the executor, before a call returns) copies what the socket
 * has not taken yet into the slot and points the transfers there. The
 * proxy's sockets are kept apart from it by net.c's lock, a helper's by the
 * socket's mutex, which the helper holds while it moves the socket. Rails
 * and TLS never get such messages (sendsRef).
 *
 * No credits are needed: the receiver reads message k only once slot
 * k % LOOM_STEPS is free, and until then TCP's own flow control holds the
 * sender back. The only thing that ever travels from receiver to sender is
 * a failure notice (net.h), at most one per connection: the receiver
 * stopped on an error and tells the sender why. It goes back on a socket
 * whose reverse direction carries nothing else (noticeLink): socket 0
 * without duplex, socket 1 with it (socket 0 then carries the other
 * direction's messages; socket 1 forward carries only large messages'
 * parts). So the notice never waits behind data the peer no longer reads,
 * is written at once into an empty direction (nothing to lose at a
 * teardown right after), and the sender's proxy reads it when it goes idle
 * (sockPollNotice), at the latest PROXY_SLEEP_MS later when a helper
 * thread owns socket 1 (the proxy does not watch it then).
 *
 * Teardown: a connection ends when its peer closes (the receiver reads the
 * end between two messages, endedBetweenMessages) or fails; a duplex
 * socket 0 belongs to one of its two links (the other is `shared`: not
 * watched, not closed) and is closed once, with the rest, at teardown,
 * after the proxy drained what this rank sends.
 *
 * Rails: when LOOM_SOCKET_IFNAME lists several interfaces that are up,
 * each is a rail (socketFindRails: sorted by name, so rail r is the same
 * network on every host). A connection uses the rails both ends have and
 * nsocks sockets on each (16 in all at most); socket s runs over rail s % nrails, connected
 * from this rank's address on that rail to the peer's, so a large message's
 * parts cross all the rails side by side. Such a connection is moved by
 * net_rails.c instead of the protocol below: every part says what it is,
 * the receiver acknowledges what landed, and the connection goes on over
 * the rails left when one fails, resending what had not landed.
 *
 * Connection: every rank listens on each of its rails (one interface
 * unless LOOM_SOCKET_IFNAME lists several) and publishes the addresses, a
 * random nonce and its nsocks in its init info (net.c; the core gathers
 * them). A pair is connected when the core
 * connects it (src/connect.c, at init or on first use): in connectStart
 * each end connects its send connections to the other's listening socket
 * and presents the receiver's nonce, its rank, the channel and the
 * socket's index (a connection with anything else is closed); in
 * connectFinish it accepts the other's. A connection from a peer this rank
 * has not started to connect yet is kept until it does. Helper threads
 * (LOOM_SOCKET_NTHREADS) are given the sockets of the connections of the
 * first set the core connects (init's); the proxy moves those of later ones.
 */
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <fcntl.h>
#include <unistd.h>

#include "bootstrap.h"
#include "debug.h"
#include "bell.h"
#include "net.h"
#include "param.h"
#include "proxy.h"
#include "socket.h"
#include "tls.h"
#include "wire.h"

#include "net_socket.h"

/* ---- moving bytes ---- */

/* Moves what the socket takes now. Returns 1 when the transfer is complete, 0 if it would
 * block, -1 on an error (with *err set). A receive's header is handed to onHeader. */
static int opSend(struct sockLink *l, struct sockOp *op, int *err)
{
    size_t hdrLen = op->hdr ? NET_HEADER_BYTES : 0;
    while (op->done < hdrLen + op->len) {
        struct iovec iov[2];
        int n = 0;
        if (op->done < hdrLen)
            iov[n++] = (struct iovec){op->hdr + op->done, hdrLen - op->done};
        size_t dataDone = op->done > hdrLen ? op->done - hdrLen : 0;
        if (op->len > dataDone)
            iov[n++] = (struct iovec){op->data + dataDone, op->len - dataDone};
        ssize_t s = tlsSendv(l->fd, iov, n);
        if (s > 0) {
            op->done += (size_t)s;
            continue;
        }
        if (s < 0 && errno == EINTR)
            continue;
        if (s < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            return 0;
        *err = s == 0 ? SOCK_ERR_EOF : errno;
        return -1;
    }
    return 1;
}

static int recvSome(int fd, char *buf, size_t want, size_t *got, int *err)
{
    while (want > 0) {
        ssize_t r = tlsRecv(fd, buf, want);
        if (r > 0) {
            *got += (size_t)r;
            buf += r;
            want -= (size_t)r;
            continue;
        }
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            return 0;
        *err = r == 0 ? SOCK_ERR_EOF : errno;
        return -1;
    }
    return 1;
}

/*
 * Asks the kernel to delay the ACK of what socket 0 of a receive connection without duplex
 * (TLS) takes next. Nothing travels back on it (only a failure notice), so every ACK is a
 * segment of its own: on veth sending one runs the peer's receive path, ~6 us, as much as a
 * message. Without this, reading a small message that emptied the queue sends that ACK at once;
 * with it, Linux acknowledges every second small message (ICSK_ACK_PUSHED2) or when its
 * delayed-ACK timer runs out, which also ends the mode, hence the call after every message
 * (8 B AllReduce of 2 ranks: ~3.7 segments out a call before, ~3.0 after). A duplex socket
 * needs none: sending soon after receiving puts it in that mode by itself (~2.4 segments out a
 * call with or without the call).
 */
static void ackLater(int fd)
{
    int zero = 0;
    (void)setsockopt(fd, IPPROTO_TCP, TCP_QUICKACK, &zero, sizeof(zero));
}

static int sockPost(struct sockLink *l, const struct sockOp *op);
static void noticeFlush(struct sockConn *sc);
static void helperWake(struct sockState *st, struct sockLink *l);

/* The header of message `slot` is in: check it and post the other parts. Proxy thread only. */
static int sockOnHeader(struct sockState *st, struct sockConn *sc, struct sockOp *op)
{
    struct sockMsg *m = &sc->msgs[op->slot];
    uint32_t bytes, seq;
    netHeaderDecode(m->hdr, &bytes, &seq);
    if ((uint32_t)op->msg != seq || bytes > sc->nc->slotBytes)
        return -1;
    size_t off, len;
    int parts = netSplit(bytes, sc->nsocks, 0, &off, &len);
    m->bytes = bytes;
    op->len = len;
    for (int i = 1; i < parts; i++) {
        netSplit(bytes, sc->nsocks, i, &off, &len);
        struct sockOp part = {NULL,    sc->nc->slots + (size_t)op->slot * sc->nc->slotBytes + off,
                              len,     0,
                              op->msg, op->slot};
        sockPost(&sc->links[i], &part);
        helperWake(st, &sc->links[i]);
    }
    m->parts = parts;
    return 0;
}

static int opRecv(struct sockState *st, struct sockLink *l, struct sockOp *op, int *err)
{
    struct sockConn *sc = l->conn;
    size_t hdrLen = op->hdr ? NET_HEADER_BYTES : 0;
    if (op->done < hdrLen) {
        int r = recvSome(l->fd, (char *)op->hdr + op->done, hdrLen - op->done, &op->done, err);
        if (r <= 0)
            return r;
        if (sockOnHeader(st, sc, op) != 0) {
            *err = SOCK_ERR_FRAME;
            return -1;
        }
    }
    size_t dataDone = op->done - hdrLen;
    int r = recvSome(l->fd, op->data + dataDone, op->len - dataDone, &op->done, err);
    if (r == 1 && hdrLen > 0 && sc->twin == NULL)
        ackLater(l->fd);
    return r;
}

/* Runs the link's queue as far as it goes. Returns 1 if anything finished, -1 on an error. */
static int linkAdvance(struct sockState *st, struct sockLink *l)
{
    int finished = 0;
    uint32_t head = atomic_load_explicit(&l->qHead, memory_order_relaxed);
    while (head != atomic_load_explicit(&l->qTail, memory_order_acquire)) {
        struct sockOp *op = &l->q[head % SOCK_QUEUE];
        int err = 0;
        int r = l->conn->nc->isSend ? opSend(l, op, &err) : opRecv(st, l, op, &err);
        if (r < 0) {
            atomic_store_explicit(&l->err, err, memory_order_release);
            return -1;
        }
        if (r == 0)
            break;
        atomic_fetch_add_explicit(&l->conn->msgs[op->slot].partsDone, 1, memory_order_release);
        atomic_store_explicit(&l->qHead, ++head, memory_order_release);
        finished = 1;
    }
    return finished;
}

static int sockPost(struct sockLink *l, const struct sockOp *op)
{
    uint32_t tail = atomic_load_explicit(&l->qTail, memory_order_relaxed);
    if (tail - atomic_load_explicit(&l->qHead, memory_order_acquire) >= SOCK_QUEUE)
        return -1; /* cannot happen: at most LOOM_STEPS messages are in flight */
    l->q[tail % SOCK_QUEUE] = *op;
    atomic_store_explicit(&l->qTail, tail + 1, memory_order_release);
    return 0;
}

static int linkPending(struct sockLink *l)
{
    return atomic_load_explicit(&l->qHead, memory_order_acquire) !=
           atomic_load_explicit(&l->qTail, memory_order_acquire);
}

/* ---- helper threads ---- */

static void helperWake(struct sockState *st, struct sockLink *l)
{
    if (l->helper >= 0)
        bellRing(&st->helpers[l->helper].bell);
}

static int helperPass(struct sockHelper *h)
{
    int moved = 0;
    for (int i = 0; i < h->nlinks; i++) {
        struct sockLink *l = h->links[i];
        if (atomic_load_explicit(&l->err, memory_order_relaxed))
            continue;
        pthread_mutex_lock(&l->mu);
        int r = linkAdvance(h->st, l);
        pthread_mutex_unlock(&l->mu);
        if (r != 0)
            moved = 1; /* finished, or failed: either way the proxy must look */
    }
    if (moved && h->st->proxyBell)
        bellRing(h->st->proxyBell);
    return moved;
}

static void helperSleep(struct sockHelper *h)
{
    int n = 0;
    atomic_store_explicit(&h->bell.sleeping, 1, memory_order_seq_cst);
    if (!helperPass(h) && !atomic_load_explicit(&h->stop, memory_order_acquire)) {
        h->fds[n++] = (struct pollfd){.fd = h->bell.wakeFd, .events = POLLIN};
        for (int i = 0; i < h->nlinks; i++) {
            struct sockLink *l = h->links[i];
            if (linkPending(l) && !atomic_load_explicit(&l->err, memory_order_relaxed))
                h->fds[n++] =
                    (struct pollfd){.fd = l->fd, .events = l->conn->nc->isSend ? POLLOUT : POLLIN};
        }
        poll(h->fds, (nfds_t)n, SOCK_HELPER_SLEEP_MS);
        if (h->fds[0].revents & POLLIN) {
            uint64_t count;
            ssize_t ignored = read(h->bell.wakeFd, &count, sizeof(count));
            (void)ignored;
        }
    }
    atomic_store_explicit(&h->bell.sleeping, 0, memory_order_relaxed);
}

static void *helperMain(void *arg)
{
    struct sockHelper *h = arg;
    uint64_t idleSince = loomClockNs();
    pthread_setname_np(pthread_self(), "loom-net-tcp");
    while (!atomic_load_explicit(&h->stop, memory_order_acquire)) {
        if (helperPass(h)) {
            idleSince = loomClockNs();
            continue;
        }
        if (!h->st->comm->oversubscribed && loomClockNs() - idleSince < SOCK_HELPER_YIELD_NS) {
            sched_yield();
            continue;
        }
        helperSleep(h);
    }
    return NULL;
}

static loomResult_t helperStart(struct sockHelper *h)
{
    sigset_t all, old;
    int efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (efd < 0)
        return loomSetError(loomSystemError, "NET/socket: eventfd: %s", strerror(errno));
    h->bell.wakeFd = fcntl(efd, F_DUPFD_CLOEXEC, 3);
    close(efd);
    h->fds = calloc((size_t)h->nlinks + 1, sizeof(*h->fds));
    if (h->bell.wakeFd < 0 || h->fds == NULL)
        return loomSetError(loomSystemError, "NET/socket: cannot prepare a helper thread");
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    int err = pthread_create(&h->thread, NULL, helperMain, h);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (err != 0)
        return loomSetError(loomSystemError, "NET/socket: cannot start a helper thread: %s",
                            strerror(err));
    h->started = 1;
    return loomSuccess;
}

static void helpersStop(struct sockState *st)
{
    for (int i = 0; i < st->nhelpers; i++) {
        struct sockHelper *h = &st->helpers[i];
        if (h->started) {
            atomic_store_explicit(&h->stop, 1, memory_order_release);
            uint64_t one = 1;
            ssize_t ignored = write(h->bell.wakeFd, &one, sizeof(one));
            (void)ignored;
            pthread_join(h->thread, NULL);
        }
        if (h->bell.wakeFd > 0)
            close(h->bell.wakeFd);
        free(h->links);
        free(h->fds);
    }
    free(st->helpers);
    st->helpers = NULL;
    st->nhelpers = 0;
}

/* 1 when every socket of sc is connected. */
static int sockComplete(const struct sockConn *sc)
{
    for (int s = 0; s < sc->nsocks; s++)
        if (sc->links[s].fd < 0)
            return 0;
    return 1;
}

/* 1 when helpers may move sockets 1.. of sc: it is connected, on one rail (net_rails.c moves
 * the others itself). */
static int sockHelped(const struct sockConn *sc)
{
    return sockComplete(sc) && sc->rails == NULL;
}

/* Plans which helper moves sockets 1.. of every connection made so far, round robin;
 * sockAttach hands them over, with net.c's lock held, since the proxy may be moving some of
 * those sockets already (the first peers' connections are published before the last ones). */
static loomResult_t helpersPlan(struct sockState *st)
{
    int extra = 0;
    for (int i = 0; i < st->nconns; i++)
        extra += sockHelped(st->conns[i]) ? st->conns[i]->nsocks - 1 : 0;
    st->nhelpers = st->nthreads < extra ? st->nthreads : extra;
    if (st->nhelpers == 0)
        return loomSuccess;
    st->helpers = calloc((size_t)st->nhelpers, sizeof(*st->helpers));
    if (st->helpers == NULL)
        return loomSetError(loomSystemError, "NET/socket: out of memory for helper threads");
    for (int t = 0; t < st->nhelpers; t++) {
        st->helpers[t].st = st;
        st->helpers[t].links = calloc((size_t)extra, sizeof(struct sockLink *));
        if (st->helpers[t].links == NULL)
            return loomSetError(loomSystemError, "NET/socket: out of memory for helper threads");
    }
    int next = 0;
    for (int i = 0; i < st->nconns; i++) {
        for (int s = 1; sockHelped(st->conns[i]) && s < st->conns[i]->nsocks; s++) {
            struct sockHelper *h = &st->helpers[next];
            h->links[h->nlinks++] = &st->conns[i]->links[s];
            next = (next + 1) % st->nhelpers;
        }
    }
    return loomSuccess;
}

/* ---- the backend's progress ---- */

static void postSends(struct sockState *st, struct sockConn *sc)
{
    struct netConn *nc = sc->nc;
    uint64_t tail = atomic_load_explicit(&nc->fifo->tail, memory_order_acquire);
    for (uint64_t n = netSendable(nc->posted, tail, UINT64_MAX); n > 0; n--) {
        int slot = (int)(nc->posted % LOOM_STEPS);
        struct sockMsg *m = &sc->msgs[slot];
        char *data = nc->slots + (size_t)slot * nc->slotBytes;
        size_t off, len;
        uint64_t word = nc->fifo->bytes[slot];
        m->bytes = (uint32_t)(word & ~LOOM_FIFO_FLAGS);
        if (word & LOOM_FIFO_REF) { /* the caller's memory (sockUnref takes it back) */
            memcpy(&data, data, sizeof(data));
            st->refMsgs++;
            st->refBytes += m->bytes;
        }
        netHeaderEncode(m->bytes, (uint32_t)nc->posted, m->hdr);
        m->parts = netSplit(m->bytes, sc->nsocks, 0, &off, &len);
        atomic_store_explicit(&m->partsDone, 0, memory_order_relaxed);
        for (int i = 0; i < m->parts; i++) {
            netSplit(m->bytes, sc->nsocks, i, &off, &len);
            struct sockOp op = {i == 0 ? m->hdr : NULL, data + off, len, 0, nc->posted, slot};
            sockPost(&sc->links[i], &op);
            helperWake(st, &sc->links[i]);
        }
        nc->posted++;
    }
}

static void postRecvs(struct sockConn *sc)
{
    struct netConn *nc = sc->nc;
    uint64_t head = atomic_load_explicit(&nc->fifo->head, memory_order_acquire);
    for (uint64_t n = netReceivable(nc->posted, head); n > 0; n--) {
        int slot = (int)(nc->posted % LOOM_STEPS);
        struct sockMsg *m = &sc->msgs[slot];
        m->parts = 0;
        atomic_store_explicit(&m->partsDone, 0, memory_order_relaxed);
        struct sockOp op = {m->hdr, nc->slots + (size_t)slot * nc->slotBytes, 0, 0, nc->posted,
                            slot};
        sockPost(&sc->links[0], &op);
        nc->posted++;
    }
}

/* Retires finished messages in order; returns 1 if any. */
static int retire(struct sockConn *sc)
{
    struct netConn *nc = sc->nc;
    int any = 0;
    while (nc->done < nc->posted) {
        int slot = (int)(nc->done % LOOM_STEPS);
        struct sockMsg *m = &sc->msgs[slot];
        if (m->parts == 0 || atomic_load_explicit(&m->partsDone, memory_order_acquire) != m->parts)
            break;
        nc->done++;
        if (nc->isSend) {
            atomic_store_explicit(&nc->fifo->head, nc->done, memory_order_release);
        } else {
            nc->fifo->bytes[slot] = m->bytes;
            atomic_store_explicit(&nc->fifo->tail, nc->done, memory_order_release);
        }
        any = 1;
    }
    return any;
}

static loomResult_t linkFailed(struct sockConn *sc, struct sockLink *l)
{
    int err = atomic_load(&l->err);
    const char *what = err == SOCK_ERR_EOF     ? "closed by the peer"
                       : err == SOCK_ERR_FRAME ? "a malformed message header (the peers disagree "
                                                 "about the protocol)"
                                               : socketErrText(err);
    snprintf(sc->nc->why, sizeof(sc->nc->why), "NET/socket: %s rank %d (channel %d, socket %d): %s",
             sc->nc->isSend ? "sending to" : "receiving from", sc->nc->peer, sc->nc->channel,
             l->index, what);
    return loomRemoteError;
}

/*
 * Socket 0 of a receive connection ended where a message header was due: the
 * peer closed after its last message. Each socket is a stream of its own, so
 * that end can be read before the rest of the last message, still waiting on
 * the other sockets; the connection goes on until those parts are in.
 */
static int endedBetweenMessages(const struct sockLink *l)
{
    uint32_t head = atomic_load_explicit(&l->qHead, memory_order_acquire);
    return !l->conn->nc->isSend && l->index == 0 &&
           atomic_load_explicit(&l->err, memory_order_acquire) == SOCK_ERR_EOF &&
           head != atomic_load_explicit(&l->qTail, memory_order_acquire) &&
           l->q[head % SOCK_QUEUE].done == 0;
}

static loomResult_t sockProgress(void *state, struct netConn *c, int *moved)
{
    struct sockState *st = state;
    struct sockConn *sc = c->priv;
    struct sockLink *failed = NULL, *ended = NULL;
    int partsDue = 0;
    if (sc->rails != NULL)
        return railsProgress(st, sc, moved);
    if (c->isSend)
        postSends(st, sc);
    else
        postRecvs(sc);
    if (sc->noticeDone < sc->noticeLen)
        noticeFlush(sc);
    for (int i = 0; i < sc->nsocks; i++) {
        struct sockLink *l = &sc->links[i];
        if (l->helper < 0)
            linkAdvance(st, l);
        if (!atomic_load_explicit(&l->err, memory_order_acquire))
            partsDue |= linkPending(l);
        else if (endedBetweenMessages(l))
            ended = l;
        else if (failed == NULL)
            failed = l;
    }
    /* What arrived before the connection ended is still delivered. */
    if (retire(sc))
        *moved = 1;
    if (failed == NULL && !partsDue)
        failed = ended;
    return failed ? linkFailed(sc, failed) : loomSuccess;
}

/*
 * An executor waiting for c may block on socket 0 (net.c's netWait) when that socket alone
 * carries what it waits for: one rail, no TLS (OpenSSL may hold bytes the socket no longer
 * shows), no part of a large message on the other sockets, no notice to finish sending.
 */
static int sockWaitFd(void *state, struct netConn *c, short *events)
{
    struct sockConn *sc = c->priv;
    (void)state;
    if (sc == NULL || sc->rails != NULL || tlsWanted() || sc->noticeDone < sc->noticeLen)
        return -1;
    for (int i = 1; i < sc->nsocks; i++)
        if (linkPending(&sc->links[i]))
            return -1;
    struct sockLink *l = &sc->links[0];
    if (l->fd < 0 || atomic_load_explicit(&l->err, memory_order_acquire) || !linkPending(l))
        return -1;
    *events = c->isSend ? POLLOUT : POLLIN;
    return l->fd;
}

/*
 * Part `part` of message m, posted on its socket: what is not yet sent is copied to the same
 * place in the slot, and the rest goes from there. Held: net.c's lock (the proxy's sockets),
 * the link's mutex (a helper's).
 */
static size_t unrefPart(struct sockConn *sc, uint64_t m, int part, char *slot, const char *ref)
{
    size_t copied = 0;
    struct sockLink *l = &sc->links[part];
    uint32_t tail = atomic_load_explicit(&l->qTail, memory_order_relaxed); /* the proxy's */
    if (l->helper >= 0)
        pthread_mutex_lock(&l->mu);
    for (uint32_t q = atomic_load_explicit(&l->qHead, memory_order_acquire); q != tail; q++) {
        struct sockOp *op = &l->q[q % SOCK_QUEUE];
        if (op->msg != m)
            continue;
        size_t hdrLen = op->hdr ? NET_HEADER_BYTES : 0;
        size_t sent = op->done > hdrLen ? op->done - hdrLen : 0, off = (size_t)(op->data - ref);
        memcpy(slot + off + sent, op->data + sent, op->len - sent);
        op->data = slot + off;
        copied = op->len - sent;
        break;
    }
    if (l->helper >= 0)
        pthread_mutex_unlock(&l->mu);
    return copied;
}

/*
 * The backend's unref (net.h): every message of c that points to the caller's memory goes on
 * from its slot. One not yet posted is copied whole; one on its sockets part by part, from
 * where each socket stands. The address is read before the copy overwrites it.
 */
static void sockUnref(void *state, struct netConn *c)
{
    struct sockState *st = state;
    struct sockConn *sc = c->priv;
    uint64_t tail = atomic_load_explicit(&c->fifo->tail, memory_order_acquire);
    for (uint64_t m = c->done; sc != NULL && m < tail; m++) {
        int slotIndex = (int)(m % LOOM_STEPS);
        uint64_t word = c->fifo->bytes[slotIndex];
        char *slot = c->slots + (size_t)slotIndex * c->slotBytes;
        const char *ref;
        if (!(word & LOOM_FIFO_REF))
            continue;
        memcpy(&ref, slot, sizeof(ref));
        if (m >= c->posted) {
            memcpy(slot, ref, (size_t)(word & ~LOOM_FIFO_FLAGS));
            st->unrefBytes += word & ~LOOM_FIFO_FLAGS;
        } else {
            for (int i = sc->msgs[slotIndex].parts - 1; i >= 0; i--)
                st->unrefBytes += unrefPart(sc, m, i, slot, ref);
        }
        c->fifo->bytes[slotIndex] = word & ~LOOM_FIFO_REF;
    }
}

/* ---- failure notices, on socket 0 ---- */
/* ---- failure notices, back where nothing else travels ---- */

/*
 * The socket of connection sc whose reverse direction carries the notice: socket 0, or with
 * duplex socket 1 (twinsPair pairs only connections of two sockets or more), as socket 0's
 * reverse then carries the twin's messages, which a notice would wait behind.
 */
static int noticeLink(const struct sockConn *sc)
{
    return sc->twin != NULL ? 1 : 0;
}

static void noticeFlush(struct sockConn *sc)
{
    int fd = sc->links[noticeLink(sc)].fd;
    while (sc->noticeDone < sc->noticeLen) {
        ssize_t s = tlsSend(fd, sc->notice + sc->noticeDone, sc->noticeLen - sc->noticeDone);
        if (s > 0)
            sc->noticeDone += (size_t)s;
        else if (s < 0 && errno == EINTR)
            continue;
        else if (s < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            return; /* the proxy watches the socket and comes back */
        else
            sc->noticeDone = sc->noticeLen; /* the peer is gone: nobody to tell */
    }
}

static void sockNotify(void *state, struct netConn *c, const uint8_t *msg, size_t len)
{
    struct sockConn *sc = c->priv;
    (void)state;
    if (sc != NULL && sc->rails != NULL) {
        railsNotify(sc, msg, len);
        return;
    }
    if (sc == NULL || sc->links[noticeLink(sc)].fd < 0 || sc->noticeLen > 0 ||
        len > sizeof(sc->notice))
        return; /* one notice per connection: the first failure is the one that counts */
    memcpy(sc->notice, msg, len);
    sc->noticeLen = len;
    noticeFlush(sc);
}

static void sockPollNotice(void *state, struct netConn *c)
{
    struct sockConn *sc = c->priv;
    if (sc != NULL && sc->rails != NULL) {
        railsPollNotice(state, sc);
        return;
    }
    if (sc == NULL || sc->links[noticeLink(sc)].fd < 0 || sc->noticeOver || c->noticeIn)
        return;
    for (;;) {
        long missing = netNoticeDecode(sc->notice, sc->noticeDone, &c->notice);
        if (missing == 0) {
            c->noticeIn = 1;
            sc->noticeOver = 1; /* one per connection */
            return;
        }
        if (missing < 0) {
            INFO(LOOM_NET,
                 "NET/socket: rank %d sent something other than a failure notice "
                 "against the data; not read further",
                 c->peer);
            sc->noticeOver = 1;
            return;
        }
        /* Duplex: a helper may be sending on this socket meanwhile; a socket takes one
         * reader and one writer at once (no TLS with duplex). */
        ssize_t r =
            tlsRecv(sc->links[noticeLink(sc)].fd, sc->notice + sc->noticeDone, (size_t)missing);
        if (r > 0)
            sc->noticeDone += (size_t)r;
        else if (r < 0 && errno == EINTR)
            continue;
        else if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            return;
        else {
            sc->noticeOver = 1; /* closed or failed: sending finds out by itself */
            return;
        }
    }
}

static int sockBeforeSleep(void *state)
{
    (void)state;
    return 0; /* the proxy watches every socket it moves, edge-triggered */
}

/* Watches the sockets nobody watches yet; starts the helpers once they have their sockets. */
static void sockAttach(void *state, struct loomProxy *proxy)
{
    struct sockState *st = state;
    st->proxy = proxy;
    st->proxyBell = proxyBell(proxy);
    if (st->helpersPlanned && !st->helpersStarted) {
        st->helpersStarted = 1;
        for (int i = 0; i < st->nhelpers; i++) {
            struct sockHelper *h = &st->helpers[i];
            for (int k = 0; k < h->nlinks; k++) {
                pthread_mutex_init(&h->links[k]->mu, NULL);
                h->links[k]->helper = i;
            }
            if (helperStart(h) == loomSuccess)
                continue;
            WARN("%s; the proxy thread moves its sockets instead", debugLastError(NULL));
            for (int k = 0; k < h->nlinks; k++) {
                h->links[k]->helper = -1;
                pthread_mutex_destroy(&h->links[k]->mu);
            }
            h->nlinks = 0;
        }
    }
    for (int i = 0; i < st->nconns; i++) {
        struct sockConn *sc = st->conns[i];
        for (int s = 0; s < sc->nsocks; s++) {
            struct sockLink *l = &sc->links[s];
            if (l->helper >= 0 || l->watched || l->fd < 0 || l->shared)
                continue;
            l->watched = 1;
            if (proxyWatch(proxy, l->fd) != loomSuccess)
                WARN("%s; that socket is looked at only when something else wakes the proxy",
                     debugLastError(NULL));
        }
    }
}

/* ---- connecting ---- */

/* "LMNS" nonce(32) rank(4) channel(4) socket(2) nsocks(2), big-endian */
static void helloEncode(const uint8_t *nonce, int rank, int channel, int sock, int nsocks,
                        uint8_t *out)
{
    memcpy(out, "LMNS", 4);
    memcpy(out + 4, nonce, SOCK_NONCE_BYTES);
    wirePut32(out + 4 + SOCK_NONCE_BYTES, (uint32_t)rank);
    wirePut32(out + 8 + SOCK_NONCE_BYTES, (uint32_t)channel);
    wirePut32(out + 12 + SOCK_NONCE_BYTES, (uint32_t)(sock << 16 | nsocks));
}

static loomResult_t connectOne(struct sockState *st, struct sockConn *sc,
                               const struct sockPublic *peer, uint64_t deadline)
{
    struct loomComm *comm = st->comm;
    union socketAddress addr;
    char who[128];
    uint8_t hello[SOCK_HELLO_BYTES];
    snprintf(who, sizeof(who), "NET/socket: rank %d connecting to rank %d (%s) for channel %d",
             comm->rank, sc->nc->peer, comm->peers[sc->nc->peer].hostname, sc->nc->channel);
    for (int s = 0; s < sc->nsocks; s++) {
        int rail = s % sc->nrails;
        if (s == 0 && sc->twin != NULL && comm->rank > sc->nc->peer)
            continue; /* duplex: the peer connects socket 0 (twinsPair) */
        if (socketAddrFromBootstrap(&peer->addr[rail], &addr) != loomSuccess)
            return loomSetError(loomInternalError, "%s: its published address is malformed", who);
        /* The peer listens from its init on: a refusal means it has left. From this rank's
         * address on the same rail, so that the socket leaves by that interface. */
        LOOMCHECK(socketConnectListenerFrom(sc->nrails > 1 ? &st->rails[rail].addr : NULL, &addr,
                                            deadline, &comm->abortFlag, who, &sc->links[s].fd));
        LOOMCHECK(tlsWrap(sc->links[s].fd, 0, bootstrapSecret(comm->bootstrap)));
        helloEncode(peer->nonce, comm->rank, sc->nc->channel, s, sc->nsocks, hello);
        LOOMCHECK(
            socketSendAll(sc->links[s].fd, hello, sizeof(hello), deadline, &comm->abortFlag, who));
        if (s == 0 && sc->twin != NULL) {
            sc->twin->links[0].fd = sc->links[0].fd;
            sc->twin->links[0].shared = 1;
        }
    }
    return loomSuccess;
}

/* Keeps a connection from a peer this rank has not started to connect yet. */
static int earlyKeep(struct sockState *st, int fd, int rank, int channel, int sock, int nsocks)
{
    for (int i = 0; i < st->nearly; i++)
        if (st->early[i].rank == rank && st->early[i].channel == channel &&
            st->early[i].sock == sock)
            return 0;
    if (st->nearly == st->capEarly) {
        int cap = st->capEarly ? 2 * st->capEarly : 16;
        struct sockEarly *e = realloc(st->early, (size_t)cap * sizeof(*e));
        if (e == NULL)
            return 0;
        st->early = e, st->capEarly = cap;
    }
    st->early[st->nearly++] = (struct sockEarly){fd, rank, channel, sock, nsocks};
    return 1;
}

/* Takes one accepted connection if it says a valid hello; closes it otherwise. */
static void acceptOne(struct sockState *st, int fd)
{
    struct loomComm *comm = st->comm;
    uint8_t h[SOCK_HELLO_BYTES];
    char peer[SOCKET_ADDR_STRLEN];
    const char *why = NULL;
    if (tlsWrap(fd, 1, bootstrapSecret(comm->bootstrap)) != loomSuccess) {
        why = debugLastError(NULL);
        goto drop;
    }
    if (socketRecvAll(fd, h, sizeof(h), socketDeadline(SOCK_HELLO_SEC), &comm->abortFlag, NULL) !=
        loomSuccess) {
        why = errno == EKEYREJECTED ? socketErrText(errno) : "no whole hello";
        goto drop;
    }
    int rank = (int)wireGet32(h + 4 + SOCK_NONCE_BYTES),
        channel = (int)wireGet32(h + 8 + SOCK_NONCE_BYTES);
    uint32_t socks = wireGet32(h + 12 + SOCK_NONCE_BYTES);
    int sock = (int)(socks >> 16), nsocks = (int)(socks & 0xffff);
    if (memcmp(h, "LMNS", 4) != 0 || !bootstrapSecretEqual(h + 4, st->me.nonce)) {
        why = "wrong nonce (not a rank of this communicator)";
        goto drop;
    }
    if (rank < 0 || rank >= comm->nranks || channel < 0 || channel >= comm->nChannels ||
        nsocks < 1 || nsocks > SOCK_MAX || sock < 0 || sock >= nsocks) {
        why = "a malformed hello";
        goto drop;
    }
    struct sockConn *sc = st->recvIndex[rank * comm->nChannels + channel];
    if (sc == NULL) {
        if (earlyKeep(st, fd, rank, channel, sock, nsocks))
            return;
        why = "a repeated connection";
        goto drop;
    }
    if (nsocks != sc->nsocks || sc->links[sock].fd >= 0) {
        why = "an unexpected or repeated connection";
        goto drop;
    }
    sc->links[sock].fd = fd;
    return;
drop:
    socketPeerFormat(fd, peer, sizeof(peer));
    INFO(LOOM_NET, "NET/socket: dropped a connection from %s: %s", peer, why);
    socketClose(fd);
}

static loomResult_t acceptPending(struct sockState *st)
{
    for (int r = 0; r < st->me.nrails; r++) {
        for (;;) {
            int fd;
            if (socketTryAccept(st->listenFd[r], &fd, NULL) != loomSuccess)
                return loomSetError(loomSystemError, "NET/socket: accept: %s", strerror(errno));
            if (fd < 0)
                break;
            acceptOne(st, fd);
        }
    }
    return loomSuccess;
}

/* Waits until a connection is pending on a listening socket, the deadline or an abort. */
static loomResult_t acceptWait(struct sockState *st, uint64_t deadline, const char *who)
{
    struct pollfd p[SOCK_RAILS_MAX];
    for (int r = 0; r < st->me.nrails; r++)
        p[r] = (struct pollfd){.fd = st->listenFd[r], .events = POLLIN};
    if (socketAborted(&st->comm->abortFlag))
        return loomSetError(loomRemoteError, "%s: aborted while waiting for a connection", who);
    int ms = socketPollMs(deadline);
    if (ms == 0)
        return loomSetError(loomTimeout, "%s: no connection before the deadline", who);
    poll(p, (nfds_t)st->me.nrails, ms);
    return loomSuccess;
}

/* The sockets of recv connection sc that arrived before it was started. */
static void earlyAdopt(struct sockState *st, struct sockConn *sc)
{
    int kept = 0;
    for (int i = 0; i < st->nearly; i++) {
        struct sockEarly *e = &st->early[i];
        if (e->rank == sc->nc->peer && e->channel == sc->nc->channel) {
            if (e->nsocks == sc->nsocks && sc->links[e->sock].fd < 0)
                sc->links[e->sock].fd = e->fd;
            else
                socketClose(e->fd);
            continue;
        }
        st->early[kept++] = *e;
    }
    st->nearly = kept;
}

/* The speed of interface ifname in Mbit/s, as its driver says (veth: 10000); -1 if unknown. */
static long linkMbit(const char *ifname)
{
    char path[96];
    long mbit = -1;
    snprintf(path, sizeof(path), "/sys/class/net/%s/speed", ifname);
    FILE *f = fopen(path, "r");
    if (f != NULL) {
        if (fscanf(f, "%ld", &mbit) != 1)
            mbit = -1;
        fclose(f);
    }
    return mbit > 0 ? mbit : -1;
}

/* The cores the ranks of this host may use between them (their CPU masks' union), a rank. */
static int coresPerRank(const struct loomComm *comm)
{
    uint64_t hash = comm->peers[comm->rank].hostHash;
    int cpus = 0, ranks = 0;
    for (int w = 0; w < LOOM_CPU_WORDS; w++) {
        uint64_t m = 0;
        for (int p = 0; p < comm->nranks; p++)
            if (comm->peers[p].hostHash == hash)
                m |= comm->peers[p].cpuMask[w];
        cpus += __builtin_popcountll(m);
    }
    for (int p = 0; p < comm->nranks; p++)
        ranks += comm->peers[p].hostHash == hash;
    return cpus > ranks ? cpus / ranks : 1;
}

/*
 * Sockets a connection and helper threads, unless LOOM_SOCKET_NSOCKS and LOOM_SOCKET_NTHREADS
 * say: a socket per SOCK_FLOW_MBIT of the first rail's speed (a TCP flow is moved by one core
 * at a time, on both hosts), SOCK_AUTO_MIN..MAX; a helper per core this rank has beyond the
 * caller's and the proxy's, at most one per socket the proxy does not keep (socket 0). On the
 * 2-core build machine (two namespace hosts on veth) that is 2 sockets and no helper.
 */
static void sockChoose(struct sockState *st, char *why, size_t len)
{
    long mbit = linkMbit(st->rails[0].ifname);
    int cores = coresPerRank(st->comm), n;
    char sockWhy[160], threadWhy[96];
    if (paramInt(LOOM_PARAM_SOCKET_NSOCKS) > 0) {
        st->me.nsocks = (int32_t)paramInt(LOOM_PARAM_SOCKET_NSOCKS);
        snprintf(sockWhy, sizeof(sockWhy), "LOOM_SOCKET_NSOCKS");
    } else {
        n = (int)(((mbit > 0 ? mbit : SOCK_FLOW_MBIT) + SOCK_FLOW_MBIT - 1) / SOCK_FLOW_MBIT);
        st->me.nsocks = n < SOCK_AUTO_MIN ? SOCK_AUTO_MIN : n > SOCK_AUTO_MAX ? SOCK_AUTO_MAX : n;
        snprintf(sockWhy, sizeof(sockWhy), "%s %s %ld Mbit/s, a socket per %d Gbit/s, %d..%d",
                 st->rails[0].ifname, mbit > 0 ? "at" : "of unknown speed, taken as",
                 mbit > 0 ? mbit : SOCK_FLOW_MBIT, SOCK_FLOW_MBIT / 1000, SOCK_AUTO_MIN,
                 SOCK_AUTO_MAX);
    }
    if (paramInt(LOOM_PARAM_SOCKET_NTHREADS) >= 0) {
        st->nthreads = (int)paramInt(LOOM_PARAM_SOCKET_NTHREADS);
        snprintf(threadWhy, sizeof(threadWhy), "LOOM_SOCKET_NTHREADS");
    } else {
        n = cores - 2;
        st->nthreads = n < 0 ? 0 : n > st->me.nsocks - 1 ? st->me.nsocks - 1 : n;
        snprintf(threadWhy, sizeof(threadWhy),
                 "%d core(s) a rank on this host, less the caller's and the proxy's", cores);
    }
    snprintf(why, len, "%d socket(s) a connection (%s), %d helper thread(s) (%s)",
             (int)st->me.nsocks, sockWhy, st->nthreads, threadWhy);
}

static loomResult_t sockInit(struct loomComm *comm, void **state, void *pub)
{
    char chosen[400];
    union socketAddress bound;
    char names[SOCK_RAILS_MAX * (SOCKET_ADDR_STRLEN + 40)], name[SOCKET_ADDR_STRLEN];
    size_t used = 0;
    struct sockState *st = calloc(1, sizeof(*st));
    *state = st;
    if (st == NULL)
        return loomSetError(loomSystemError, "NET/socket: out of memory");
    st->comm = comm;
    for (int r = 0; r < SOCK_RAILS_MAX; r++)
        st->listenFd[r] = -1;
    st->cap = 2 * comm->nranks * comm->nChannels;
    st->conns = calloc((size_t)st->cap + 1, sizeof(*st->conns));
    st->recvIndex = calloc((size_t)comm->nranks * comm->nChannels, sizeof(*st->recvIndex));
    if (st->conns == NULL || st->recvIndex == NULL)
        return loomSetError(loomSystemError, "NET/socket: out of memory");
    /* A list in LOOM_SOCKET_IFNAME that matches several interfaces makes each a rail. */
    st->me.nrails = socketFindRails(paramStr(LOOM_PARAM_SOCKET_IFNAME), st->rails, SOCK_RAILS_MAX);
    if (st->me.nrails <= 1) {
        st->me.nrails = 1;
        LOOMCHECK(socketFindInterface(&st->rails[0].addr, st->rails[0].ifname,
                                      sizeof(st->rails[0].ifname)));
    }
    for (int r = 0; r < st->me.nrails; r++) {
        LOOMCHECK(socketListen(&st->rails[r].addr, &st->listenFd[r], &bound));
        socketAddrToBootstrap(&bound, &st->me.addr[r]);
        socketAddrFormat(&bound, name, sizeof(name));
        int n = snprintf(names + used, sizeof(names) - used, "%s%s (%s)", r ? ", " : "",
                         st->rails[r].ifname, name);
        used += n > 0 && (size_t)n < sizeof(names) - used ? (size_t)n : 0;
    }
    if (getrandom(st->me.nonce, sizeof(st->me.nonce), 0) != (ssize_t)sizeof(st->me.nonce))
        return loomSetError(loomSystemError, "NET/socket: getrandom: %s", strerror(errno));
    sockChoose(st, chosen, sizeof(chosen));
    INFO(LOOM_NET, "NET/socket: listening on %s; %s%s", names, chosen,
         st->me.nrails > 1 ? "; the sockets on each rail, striped over these rails" : "");
    memcpy(pub, &st->me, sizeof(st->me));
    return loomSuccess;
}

/*
 * Duplex: each send connection of a pair and the recv connection of the same channel share
 * socket 0 when one rail carries them, TLS is off (a TLS session a direction would need
 * both ends to agree who speaks first; rails resend by parts of their own) and they have a
 * socket 1, whose reverse direction carries failure notices (noticeLink). The lower rank
 * connects it (its send connection's socket 0), the higher one accepts it for its recv
 * connection and its send connection takes it over in connectFinish (twinsJoin).
 */
static void twinsPair(struct netConn **conns, int n)
{
    for (int i = 0; i < n; i++) {
        struct sockConn *s = conns[i]->priv;
        for (int j = 0;
             conns[i]->isSend && !tlsWanted() && s->nrails == 1 && s->nsocks >= 2 && j < n; j++) {
            struct sockConn *r = conns[j]->priv;
            if (!conns[j]->isSend && conns[j]->channel == conns[i]->channel && r->nrails == 1 &&
                r->nsocks >= 2) {
                s->twin = r;
                r->twin = s;
            }
        }
    }
}

/* Returns the number of duplex send connections among conns. */
static int twinsJoin(struct netConn **conns, int n)
{
    int duplex = 0;
    for (int i = 0; i < n; i++) {
        struct sockConn *sc = conns[i]->priv;
        if (conns[i]->isSend && sc->twin != NULL && sc->links[0].fd < 0 &&
            sc->twin->links[0].fd >= 0) {
            sc->links[0].fd = sc->twin->links[0].fd;
            sc->links[0].shared = 1;
        }
        duplex += conns[i]->isSend && sc->twin != NULL;
    }
    return duplex;
}

static loomResult_t sockConnectStart(void *state, struct netConn **conns, int n, const void *pub,
                                     void *record)
{
    (void)record; /* the peer needs only what this rank published at init */
    struct sockState *st = state;
    struct loomComm *comm = st->comm;
    struct sockPublic peer;
    memcpy(&peer, pub, sizeof(peer));
    uint64_t deadline = socketDeadline(comm->timeoutSec);
    for (int i = 0; i < n; i++) {
        struct netConn *nc = conns[i];
        struct sockConn *sc = calloc(1, sizeof(*sc));
        if (sc == NULL || st->nconns == st->cap) {
            free(sc);
            return loomSetError(loomSystemError, "NET/socket: out of memory for a connection");
        }
        st->conns[st->nconns++] = sc;
        sc->nc = nc;
        nc->priv = sc;
        sc->nsocks = peer.nsocks < st->me.nsocks ? peer.nsocks : st->me.nsocks;
        if (sc->nsocks < 1 || sc->nsocks > SOCK_MAX)
            sc->nsocks = 1;
        /* Rails both ends have, each with the sockets one rail would have (one TCP flow fills
         * a shaped link less well than two: bench/net-rails). */
        sc->nrails = peer.nrails < st->me.nrails ? peer.nrails : st->me.nrails;
        if (sc->nrails < 1 || sc->nrails > SOCK_RAILS_MAX)
            sc->nrails = 1;
        sc->nsocks = sc->nsocks * sc->nrails > SOCK_MAX ? SOCK_MAX : sc->nsocks * sc->nrails;
        if (sc->nrails > 1)
            LOOMCHECK(railsCreate(sc));
        /* Sends go from the caller's memory on one rail without TLS; rails resend, and
         * OpenSSL wants a write it could not finish repeated from the same buffer. */
        nc->sendsRef = nc->isSend && sc->nrails == 1 && !tlsWanted();
        for (int s = 0; s < SOCK_MAX; s++)
            sc->links[s] = (struct sockLink){.fd = -1, .index = s, .helper = -1, .conn = sc};
        if (!nc->isSend) {
            st->recvIndex[nc->peer * comm->nChannels + nc->channel] = sc;
            earlyAdopt(st, sc);
        }
    }
    twinsPair(conns, n);
    for (int i = 0; i < n; i++) {
        if (!conns[i]->isSend)
            continue;
        LOOMCHECK(connectOne(st, conns[i]->priv, &peer, deadline));
        /* Keep our listen queue short while we connect. */
        LOOMCHECK(acceptPending(st));
    }
    return loomSuccess;
}

/* Recv sockets of conns still to come. */
static int sockMissing(struct netConn **conns, int n)
{
    int missing = 0;
    for (int i = 0; i < n; i++) {
        struct sockConn *sc = conns[i]->priv;
        for (int s = 0; !conns[i]->isSend && s < sc->nsocks; s++)
            missing += sc->links[s].fd < 0;
    }
    return missing;
}

/*
 * Waits until the TLS handshakes of conns' sockets are done and their hellos are out (tls.h):
 * from then on only the thread that moves a socket touches its session, and it waits on the
 * socket alone. Without LOOM_NET_TLS every socket is ready at once.
 */
static loomResult_t tlsSettle(struct sockState *st, struct netConn **conns, int n,
                              uint64_t deadline)
{
    struct loomComm *comm = st->comm;
    for (int i = 0; i < n; i++) {
        struct sockConn *sc = conns[i]->priv;
        for (int s = 0; s < sc->nsocks; s++) {
            int r;
            while ((r = tlsReady(sc->links[s].fd)) == 0) {
                if (socketAborted(&comm->abortFlag) || socketPollMs(deadline) == 0)
                    return loomSetError(socketAborted(&comm->abortFlag) ? loomRemoteError
                                                                        : loomTimeout,
                                        "NET/socket: rank %d: no TLS handshake with rank %d (%s) "
                                        "within %d s",
                                        comm->rank, conns[i]->peer,
                                        comm->peers[conns[i]->peer].hostname, comm->timeoutSec);
                poll(NULL, 0, 1);
            }
            if (r < 0)
                return loomSetError(loomRemoteError, "NET/socket: rank %d with rank %d (%s): %s",
                                    comm->rank, conns[i]->peer,
                                    comm->peers[conns[i]->peer].hostname, socketErrText(errno));
        }
    }
    return loomSuccess;
}

static loomResult_t sockConnectFinish(void *state, struct netConn **conns, int n,
                                      const void *record)
{
    (void)record;
    struct sockState *st = state;
    struct loomComm *comm = st->comm;
    uint64_t deadline = socketDeadline(comm->timeoutSec);
    char who[192];
    int missing;
    LOOMCHECK(acceptPending(st));
    while ((missing = sockMissing(conns, n)) > 0) {
        snprintf(who, sizeof(who),
                 "NET/socket: rank %d waiting for %d connection(s) from rank %d (%s)", comm->rank,
                 missing, conns[0]->peer, comm->peers[conns[0]->peer].hostname);
        LOOMCHECK(acceptWait(st, deadline, who));
        LOOMCHECK(acceptPending(st));
    }
    if (twinsJoin(conns, n) > 0)
        INFO(LOOM_NET,
             "NET/socket: rank %d and rank %d (%s): socket 0 of each channel carries both "
             "directions (duplex)",
             comm->rank, conns[0]->peer, comm->peers[conns[0]->peer].hostname);
    LOOMCHECK(tlsSettle(st, conns, n, deadline));
    /* Helpers take the connections of the first batch the core connects (init's) once all of
     * it is in; later ones stay with the proxy. */
    int complete = 1;
    for (int i = 0; i < st->nconns && complete; i++)
        complete = sockComplete(st->conns[i]);
    if (!st->helpersPlanned && complete) {
        st->helpersPlanned = 1;
        LOOMCHECK(helpersPlan(st));
    }
    return loomSuccess;
}

static void sockTeardown(void *state)
{
    struct sockState *st = state;
    if (st == NULL)
        return;
    if (st->refMsgs > 0)
        INFO(LOOM_NET,
             "NET/socket: rank %d sent %llu message(s), %.1f MiB, from the caller's memory; "
             "%.1f MiB of it was copied into the slots as calls returned or overwrote it",
             st->comm->rank, (unsigned long long)st->refMsgs, st->refBytes / 1048576.0,
             st->unrefBytes / 1048576.0);
    helpersStop(st);
    for (int i = 0; i < st->nconns; i++) {
        for (int s = 0; s < SOCK_MAX; s++) {
            if (!st->conns[i]->links[s].shared)
                socketClose(st->conns[i]->links[s].fd);
            if (st->conns[i]->links[s].helper >= 0)
                pthread_mutex_destroy(&st->conns[i]->links[s].mu);
        }
        st->conns[i]->nc->priv = NULL;
        railsFree(st->conns[i]);
        free(st->conns[i]);
    }
    for (int i = 0; i < st->nearly; i++)
        socketClose(st->early[i].fd);
    for (int r = 0; r < SOCK_RAILS_MAX; r++)
        socketClose(st->listenFd[r]);
    free(st->early);
    free(st->conns);
    free(st->recvIndex);
    free(st);
}

_Static_assert(sizeof(struct sockPublic) <= NET_PUBLIC_BYTES, "the address fits the info");

const struct netBackend netSocketBackend = {
    .name = "socket",
    .init = sockInit,
    .connectStart = sockConnectStart,
    .connectFinish = sockConnectFinish,
    .progress = sockProgress,
    .beforeSleep = sockBeforeSleep,
    .attach = sockAttach,
    .teardown = sockTeardown,
    .notify = sockNotify,
    .pollNotice = sockPollNotice,
    .waitFd = sockWaitFd,
    .unref = sockUnref,
};
