/*
 * net.c — the network transport: ranks on different hosts (or on one host
 * when shared memory is off), over TCP or InfiniBand verbs.
 *
 * Both ends of a network connector are local memory: one FIFO (counters and
 * LOOM_STEPS slots) per direction, peer and channel, a peer's carved from
 * one page-aligned block when the pair is connected (src/connect.c: at init
 * for ring and tree neighbours, else on first use), so that a verbs backend
 * can register it. Each rank's init info carries its NET_INFO_* word and
 * what its TCP backend publishes (the listening address); the connection
 * records themselves say nothing (the info said it all). The executor
 * uses them as it uses shared memory; a backend moves the messages between
 * hosts, run by the proxy thread (src/base/proxy.c) or, through the connector's
 * progress hook, by the executor itself right after it published a slot and
 * while it waits. One lock per communicator keeps the two apart; the
 * executor only tries it.
 *
 *   A: executor -> send FIFO -> backend (executor or proxy A) ~~~> backend (executor or proxy B)
 *                  head = slot left A                              -> recv FIFO -> B: executor
 *
 * Backend per pair: InfiniBand when both ranks have a usable device (and
 * neither said LOOM_NET=socket or LOOM_IB_DISABLE=1), else TCP. A rank with
 * no device says so in one INFO line and uses TCP; LOOM_NET=ib makes the
 * lack of a device an error instead. A link to this rank itself (only when
 * shm is off) needs no wire: both connectors share one FIFO.
 *
 * A connection that ends (the peer exited, the network failed) is marked in
 * comm->lost: the executor reports the peer when it waits for it, and other
 * links carry on. A rank that stops on an error tells its peers on other
 * hosts through comm->notifyPeer (netNotifyPeer): the backend sends
 * the notice against the data of the connection from that peer, where
 * nothing else travels (TCP with duplex socket 0: against socket 1's,
 * net_socket.c), so it never waits behind messages the peer no longer
 * reads; the peer's backend receives it when its proxy goes idle and net.c
 * posts it on that rank's doorbell (bellPostNotice). Before a lost
 * connection is reported, the notices already in from that peer are read,
 * so a survivor names the first failure, not the peer that left after it. Destroy lets the proxy
 * drain what the executor handed over before the sockets close, so a rank may destroy its
 * communicator as soon as its last call returns.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <unistd.h>

#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include "debug.h"
#include "bell.h"
#include "net.h"
#include "param.h"
#include "proxy.h"
#include "socket.h"
#include "transport.h"
#include "wire.h"

#define NET_PAGE 4096
#define NET_DRAIN_MAX_SEC 30.0
#define NET_WAIT_MAX 16              /* connectors one netWait polls */
#define NET_QUIET_SLACK_NS 500000ULL /* the proxy stays quiet this long past an executor's poll */

enum { NET_SOCKET = 0, NET_IB = 1, NET_BACKENDS = 2 };

/* Published by every rank in its init info. */
#define NET_INFO_IB 0x1          /* InfiniBand usable and allowed here */
#define NET_INFO_IB_REQUIRED 0x2 /* LOOM_NET=ib (or config.netName "ib") */

struct netState {
    struct loomComm *comm;
    char **mem;            /* [nranks]: the FIFOs of the link to each peer, or NULL */
    struct netConn *conns; /* [2 * nranks * nChannels]: send and recv per peer and channel */
    atomic_int nconns;     /* conns[0 .. nconns) are connected, and the proxy moves them */
    int started;           /* conns[0 .. started) are carved, the rest being connected */
    int *firstConn;        /* [nranks]: where peer p's connections start in conns, or -1 */
    int *backendOf;        /* [nranks]: NET_SOCKET or NET_IB, -1 when not a network link */
    uint8_t *pubs; /* [nranks * NET_PUBLIC_BYTES]: what each rank's socket backend published */
    const struct netBackend *backends[NET_BACKENDS];
    void *bstate[NET_BACKENDS];
    struct loomProxy *proxy;
    /* Held by whoever moves connections: the proxy (waits for it), an executor (only tries). */
    pthread_mutex_t lock;
    int lockReady;
    /*
     * An executor blocked in netWait: it sleeps on this bell's eventfd with its sockets, and
     * whoever moves something for it (the proxy) rings it; the proxy keeps off the sockets
     * until quietUntil.
     */
    struct loomDoorbell pollBell;
    _Atomic uint64_t quietUntil;
};

/* ---- bookkeeping shared by the backends ---- */

uint64_t netSendable(uint64_t posted, uint64_t tail, uint64_t credit)
{
    uint64_t limit = tail < credit ? tail : credit;
    return limit > posted ? limit - posted : 0;
}

uint64_t netReceivable(uint64_t posted, uint64_t head)
{
    uint64_t limit = head + LOOM_STEPS;
    return limit > posted ? limit - posted : 0;
}

uint64_t netCounterExpand(uint64_t last, uint32_t low)
{
    uint64_t c = (last & ~0xffffffffULL) | low;
    if (c < last && last - c >= (1ULL << 31))
        c += 1ULL << 32;
    return c;
}

int netSplit(size_t bytes, int nsocks, int part, size_t *off, size_t *len)
{
    int parts = 1;
    if (bytes >= NET_SPLIT_MIN_BYTES && nsocks > 1) {
        size_t most = bytes / (NET_SPLIT_MIN_BYTES / 2);
        parts = most < (size_t)nsocks ? (int)most : nsocks;
    }
    size_t lo = part == 0 ? 0 : (bytes / parts * part) & ~(size_t)63;
    size_t hi = part + 1 >= parts ? bytes : (bytes / parts * (part + 1)) & ~(size_t)63;
    *off = lo;
    *len = part < parts ? hi - lo : 0;
    return parts;
}

void netHeaderEncode(uint32_t bytes, uint32_t seq, uint8_t *out)
{
    for (int i = 0; i < 4; i++) {
        out[i] = (uint8_t)(bytes >> (8 * i));
        out[4 + i] = (uint8_t)(seq >> (8 * i));
    }
}

void netHeaderDecode(const uint8_t *in, uint32_t *bytes, uint32_t *seq)
{
    *bytes = *seq = 0;
    for (int i = 0; i < 4; i++) {
        *bytes |= (uint32_t)in[i] << (8 * i);
        *seq |= (uint32_t)in[4 + i] << (8 * i);
    }
}

size_t netNoticeEncode(const struct netNotice *n, uint8_t *out)
{
    size_t len = strnlen(n->text, LOOM_NOTICE_BYTES - 1);
    memcpy(out, "LMNF", 4);
    wirePut32(out + 4, (uint32_t)n->code);
    wirePut32(out + 8, (uint32_t)n->from);
    wirePut32(out + 12, (uint32_t)len);
    memcpy(out + NET_NOTICE_HEADER_BYTES, n->text, len);
    return NET_NOTICE_HEADER_BYTES + len;
}

long netNoticeDecode(const uint8_t *in, size_t len, struct netNotice *n)
{
    if (memcmp(in, "LMNF", len < 4 ? len : 4) != 0)
        return -1;
    if (len < NET_NOTICE_HEADER_BYTES)
        return (long)(NET_NOTICE_HEADER_BYTES - len);
    uint32_t textLen = wireGet32(in + 12);
    if (textLen >= LOOM_NOTICE_BYTES)
        return -1;
    size_t total = NET_NOTICE_HEADER_BYTES + textLen;
    if (len < total)
        return (long)(total - len);
    if (len > total)
        return -1;
    n->code = (int32_t)wireGet32(in + 4);
    n->from = (int32_t)wireGet32(in + 8);
    memcpy(n->text, in + NET_NOTICE_HEADER_BYTES, textLen);
    n->text[textLen] = '\0';
    return 0;
}

/* ---- the ops table ---- */

static int netUsable(const char **why)
{
    static __thread char reason[600];
    union socketAddress addr;
    if (socketFindInterface(&addr, NULL, 0) != loomSuccess) {
        snprintf(reason, sizeof(reason), "%s", debugLastError(NULL));
        *why = reason;
        return 0;
    }
    *why = "";
    return 1;
}

static int netCanConnect(const struct loomComm *comm, int peer)
{
    (void)comm;
    (void)peer;
    return 1;
}

static const char *netChoice(const struct loomComm *comm)
{
    return comm->config.netName ? comm->config.netName : paramStr(LOOM_PARAM_NET);
}

/* This rank's NET_INFO_* word; says at INFO, once per process, why InfiniBand is not used. */
static int32_t netLocalInfo(const struct loomComm *comm)
{
    static atomic_int told;
    const char *choice = netChoice(comm);
    int32_t info = strcmp(choice, "ib") == 0 ? NET_INFO_IB_REQUIRED : 0;
    const char *why = "this build has no InfiniBand support (libibverbs was not found)";
    if (strcmp(choice, "socket") == 0)
        why = "LOOM_NET=socket";
    else if (paramInt(LOOM_PARAM_IB_DISABLE))
        why = "LOOM_IB_DISABLE=1";
#ifdef HAVE_VERBS
    else if (netIbUsable(&why))
        return info | NET_INFO_IB;
#endif
    if (!atomic_exchange(&told, 1))
        INFO(LOOM_NET, "NET/IB: not used (%s); hosts talk over TCP", why);
    return info;
}

/* Picks each network peer's backend; fails on every rank alike when LOOM_NET=ib cannot hold. */
static loomResult_t netChooseBackends(struct netState *st, const int32_t *info)
{
    struct loomComm *comm = st->comm;
    for (int r = 0; r < comm->nranks; r++) {
        if (!(info[r] & NET_INFO_IB_REQUIRED))
            continue;
        for (int q = 0; q < comm->nranks; q++) {
            if (comm->peers[q].hostHash == comm->peers[r].hostHash ||
                (info[r] & info[q] & NET_INFO_IB))
                continue;
            int who = (info[r] & NET_INFO_IB) ? q : r;
            return loomSetError(loomInvalidUsage,
                                "rank %d asks for InfiniBand (LOOM_NET=ib) to reach rank %d, but "
                                "rank %d on %s cannot use it (no usable device, LOOM_IB_DISABLE=1 "
                                "or LOOM_NET=socket there; its INFO log says which); unset "
                                "LOOM_NET to let TCP carry those links",
                                r, q, who, comm->peers[who].hostname);
        }
    }
    for (int p = 0; p < comm->nranks; p++) {
        st->backendOf[p] = -1;
        if (p != comm->rank && transportServes(comm, &netTransport, p))
            st->backendOf[p] = (info[comm->rank] & info[p] & NET_INFO_IB) ? NET_IB : NET_SOCKET;
    }
    return loomSuccess;
}

static size_t fifoRegion(const struct loomComm *comm)
{
    size_t bytes = sizeof(struct loomFifo) + LOOM_STEPS * comm->slotBytes;
    return (bytes + NET_PAGE - 1) & ~(size_t)(NET_PAGE - 1);
}

static void netWireConnector(struct loomConnector *c, char *region, size_t slotBytes,
                             struct loomDoorbell *bell, int peer)
{
    *c = (struct loomConnector){.fifo = (struct loomFifo *)region,
                                .slots = region + sizeof(struct loomFifo),
                                .slotBytes = slotBytes,
                                .peerBell = bell,
                                .peer = peer,
                                .connected = 1};
}

/*
 * The FIFOs of the links to peer p: one per channel to itself, a send and a receive one per
 * channel to any other rank. Fresh anonymous pages, zero and not yet touched: a FIFO's pages
 * are faulted in as far as messages reach into its slots, so the first AlltoAll of a job
 * across hosts does not write megabytes for every peer it connects (memset here did).
 */
static size_t netMemBytes(const struct netState *st, int p)
{
    int dirs = p == st->comm->rank ? 1 : 2;
    return (size_t)dirs * (size_t)st->comm->nChannels * fifoRegion(st->comm);
}

static loomResult_t netMemMap(struct netState *st, int p)
{
    void *m =
        mmap(NULL, netMemBytes(st, p), PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED)
        return loomSetError(loomSystemError,
                            "out of memory for the network connections to rank %d (%zu KiB): %s", p,
                            netMemBytes(st, p) >> 10, debugErrnoText(errno));
    st->mem[p] = m;
    return loomSuccess;
}

/*
 * Carves peer p's connections: for every channel a send and a recv one,
 * their FIFOs in one page-aligned block. Not yet seen by the proxy.
 */
static loomResult_t netCarve(struct netState *st, int p)
{
    struct loomComm *comm = st->comm;
    if (st->firstConn[p] >= 0)
        return loomSuccess;
    LOOMCHECK(netMemMap(st, p));
    char *at = st->mem[p];
    st->firstConn[p] = st->started;
    for (int c = 0; c < comm->nChannels; c++) {
        for (int dir = 0; dir < 2; dir++, at += fifoRegion(comm))
            st->conns[st->started++] = (struct netConn){.peer = p,
                                                        .channel = c,
                                                        .isSend = dir == 0,
                                                        .fifo = (struct loomFifo *)at,
                                                        .slots = at + sizeof(struct loomFifo),
                                                        .slotBytes = comm->slotBytes,
                                                        .owner = st};
    }
    return loomSuccess;
}

/* A link to this rank itself (shm off): one FIFO per channel, both connectors on it, no wire. */
static loomResult_t netConnectSelf(struct netState *st)
{
    struct loomComm *comm = st->comm;
    int me = comm->rank;
    if (st->mem[me] == NULL)
        LOOMCHECK(netMemMap(st, me));
    for (int c = 0; c < comm->nChannels; c++) {
        char *at = st->mem[me] + c * fifoRegion(comm);
        netWireConnector(&comm->channels[c].send[me], at, comm->slotBytes, comm->bell, me);
        netWireConnector(&comm->channels[c].recv[me], at, comm->slotBytes, comm->bell, me);
    }
    return loomSuccess;
}

/* ---- moving: the proxy's callbacks and the executor's hook ---- */

/* Wakes this rank's executor, asleep on its doorbell or blocked in netWait. */
static void netRing(struct netState *st)
{
    bellRing(st->comm->bell);
    bellRing(&st->pollBell);
}

/* Posts a notice the backend received on c on this rank's doorbell. Lock held. */
static void netTakeNotice(struct netState *st, struct netConn *c)
{
    struct loomComm *comm = st->comm;
    if (!c->noticeIn)
        return;
    c->noticeIn = 0;
    /* The connection says who sent it; the code can only be one of the two a notice carries. */
    loomResult_t code = c->notice.code == loomTimeout ? loomTimeout : loomRemoteError;
    if (bellPostNotice(comm->bell, code, c->peer, c->notice.text))
        INFO(LOOM_NET, "NET: rank %d (%s) reports: %s", c->peer, comm->peers[c->peer].hostname,
             c->notice.text);
    bellRing(&st->pollBell);
}

/* Reads the notices that arrived on send connections (to `peer`, or to all if -1). Lock held. */
static void netPullNotices(struct netState *st, int peer)
{
    for (int i = 0; i < st->nconns; i++) {
        struct netConn *c = &st->conns[i];
        const struct netBackend *be = st->backends[st->backendOf[c->peer]];
        /* Notices travel on channel 0 (netNotifyPeer); a lost connection may still hold one. */
        if ((peer >= 0 && c->peer != peer) || !c->isSend || c->channel != 0 ||
            be->pollNotice == NULL)
            continue;
        be->pollNotice(st->bstate[st->backendOf[c->peer]], c);
        netTakeNotice(st, c);
    }
}

static void netMarkLost(struct netState *st, struct netConn *c)
{
    struct loomComm *comm = st->comm;
    netPullNotices(st, c->peer);
    c->lost = 1;
    if (!atomic_exchange(&comm->lost[c->peer], 1))
        INFO(LOOM_NET, "NET: the connection with rank %d (%s) ended: %s", c->peer,
             comm->peers[c->peer].hostname, c->why);
    netRing(st);
}

/* One connection's pass; the lock is held. */
static void netMove(struct netState *st, struct netConn *c, int *moved)
{
    int b = st->backendOf[c->peer];
    if (!c->lost && st->backends[b]->progress(st->bstate[b], c, moved) != loomSuccess)
        netMarkLost(st, c);
}

static void netProgress(void *ctx, int *moved)
{
    struct netState *st = ctx;
    int any = 0;
    pthread_mutex_lock(&st->lock);
    for (int i = 0; i < st->nconns; i++)
        netMove(st, &st->conns[i], &any);
    pthread_mutex_unlock(&st->lock);
    if (any)
        netRing(st);
    *moved = any;
}

/*
 * The executor's hook (struct loomConnector.progress): move this connection
 * now. If someone else holds the lock, the proxy is told through its bell:
 * the pass that holds the lock may be the last one before the proxy sleeps
 * (proxySleep flags itself, then makes one more pass) and may have looked
 * at this connection before the counter moved; the bell's eventfd then
 * ends that sleep at once. (Before, nothing was rung there, and the proxy
 * slept its full 100 ms with a message to send or to read; what that cost
 * small calls is in docs/performance.md, "Figures from the code's
 * comments".)
 */
static void netKick(void *ctx)
{
    struct netConn *c = ctx;
    struct netState *st = c->owner;
    int moved = 0;
    if (pthread_mutex_trylock(&st->lock) != 0) {
        if (st->proxy)
            bellRing(proxyBell(st->proxy));
        return;
    }
    netMove(st, c, &moved);
    pthread_mutex_unlock(&st->lock);
    if (moved)
        bellRing(st->comm->bell); /* another thread of ours may wait on this comm */
}

/* The connector's unref (core.h): the lock keeps the proxy out, the backend its helpers. */
static void netUnref(void *ctx)
{
    struct netConn *c = ctx;
    struct netState *st = c->owner;
    int b = st->backendOf[c->peer];
    pthread_mutex_lock(&st->lock);
    st->backends[b]->unref(st->bstate[b], c);
    pthread_mutex_unlock(&st->lock);
}

static uint64_t netQuietUntil(void *ctx)
{
    struct netState *st = ctx;
    return atomic_load_explicit(&st->quietUntil, memory_order_acquire);
}

/* 1 when one of the connectors may move now: a message is in, or a send slot is free. */
static int netAnyReady(struct loomConnector *const *k, int n)
{
    for (int i = 0; i < n; i++) {
        const struct netConn *c = k[i]->progressCtx;
        if (c->isSend ? atomic_load_explicit(&k[i]->fifo->head, memory_order_seq_cst) + LOOM_STEPS >
                            k[i]->pos
                      : atomic_load_explicit(&k[i]->fifo->tail, memory_order_seq_cst) > k[i]->pos)
            return 1;
    }
    return 0;
}

/*
 * What may block in netWait, in fds (n + 1 entries), the lock held: the sockets of k[], each
 * of which alone carries what its connector waits for, when nothing else of this rank is on
 * its way out (a send in flight needs the proxy, which netWait keeps quiet). 0 if not so.
 */
static int netWaitFds(struct netState *st, struct loomConnector *const *k, int n,
                      struct pollfd *fds)
{
    for (int i = 0; i < st->nconns; i++) {
        const struct netConn *c = &st->conns[i];
        int waited = 0;
        for (int j = 0; j < n; j++)
            waited |= k[j]->progressCtx == c;
        if (c->isSend && !c->lost && !waited &&
            c->done < atomic_load_explicit(&c->fifo->tail, memory_order_acquire))
            return 0;
    }
    for (int j = 0; j < n; j++) {
        struct netConn *c = k[j]->progressCtx;
        int b = st->backendOf[c->peer];
        fds[j] = (struct pollfd){.fd = -1};
        if (c->lost || st->backends[b]->waitFd == NULL)
            return 0;
        fds[j].fd = st->backends[b]->waitFd(st->bstate[b], c, &fds[j].events);
        if (fds[j].fd < 0)
            return 0;
    }
    fds[n] = (struct pollfd){.fd = st->pollBell.wakeFd, .events = POLLIN};
    return 1;
}

/*
 * comm->netWait. The bell is flagged before the connectors are looked at again, and the proxy
 * rings it after it publishes (both seq_cst), so what it moves meanwhile is not slept through.
 */
static int netWait(struct loomComm *comm, struct loomConnector *const *k, int n, int timeoutMs)
{
    struct netState *st = comm->net;
    struct pollfd fds[NET_WAIT_MAX + 1];
    if (st == NULL || st->pollBell.wakeFd <= 0 || n > NET_WAIT_MAX ||
        pthread_mutex_trylock(&st->lock) != 0)
        return 0;
    int ok = netWaitFds(st, k, n, fds);
    pthread_mutex_unlock(&st->lock);
    if (!ok)
        return 0;
    atomic_store_explicit(&st->quietUntil,
                          loomClockNs() + (uint64_t)timeoutMs * 1000000 + NET_QUIET_SLACK_NS,
                          memory_order_release);
    atomic_store_explicit(&st->pollBell.sleeping, 1, memory_order_seq_cst);
    if (!netAnyReady(k, n) && poll(fds, (nfds_t)n + 1, timeoutMs) > 0 && fds[n].revents) {
        uint64_t count;
        ssize_t ignored = read(fds[n].fd, &count, sizeof(count));
        (void)ignored;
    }
    atomic_store_explicit(&st->pollBell.sleeping, 0, memory_order_relaxed);
    return 1;
}

/* comm->netWaitEnd */
static void netWaitEnd(struct loomComm *comm, int handOver)
{
    struct netState *st = comm->net;
    if (st == NULL)
        return;
    /* The lock busy: the proxy is in a pass, and may find work. */
    int due = handOver || pthread_mutex_trylock(&st->lock) != 0;
    if (!due) {
        for (int i = 0; !due && i < st->nconns; i++) {
            struct netConn *c = &st->conns[i];
            due = c->isSend && c->done < atomic_load_explicit(&c->fifo->tail, memory_order_acquire);
        }
        pthread_mutex_unlock(&st->lock);
    }
    if (due) {
        atomic_store_explicit(&st->quietUntil, 0, memory_order_release);
        bellRing(proxyBell(st->proxy));
    }
}

static int netBeforeSleep(void *ctx)
{
    struct netState *st = ctx;
    int res = 0;
    pthread_mutex_lock(&st->lock);
    for (int b = 0; b < NET_BACKENDS; b++)
        if (st->backends[b] != NULL && st->backends[b]->beforeSleep(st->bstate[b]) != 0)
            res = -1;
    netPullNotices(st, -1);
    pthread_mutex_unlock(&st->lock);
    return res;
}

/*
 * comm->notifyPeer: sends a failure notice to a network peer, against the
 * data of the connection from it on channel 0 (net.c carves each recv
 * connection right after the send connection of the same peer and channel).
 */
static int netNotifyPeer(struct loomComm *comm, int peer, loomResult_t code, const char *text)
{
    struct netState *st = comm->net;
    if (st == NULL || st->backendOf[peer] < 0)
        return 0;
    const struct netBackend *be = st->backends[st->backendOf[peer]];
    struct netConn *back = NULL;
    int nconns = atomic_load_explicit(&st->nconns, memory_order_acquire);
    for (int i = 0; i < nconns && back == NULL; i++)
        if (st->conns[i].peer == peer && st->conns[i].channel == 0 && !st->conns[i].isSend)
            back = &st->conns[i];
    if (back == NULL || be->notify == NULL)
        return 1; /* nothing carries it: the peer finds out by itself */
    struct netNotice n = {.code = (int32_t)code, .from = comm->rank};
    uint8_t msg[NET_NOTICE_MAX_BYTES];
    snprintf(n.text, sizeof(n.text), "%s", text);
    size_t len = netNoticeEncode(&n, msg);
    pthread_mutex_lock(&st->lock);
    if (!back->lost)
        be->notify(st->bstate[st->backendOf[peer]], back, msg, len);
    pthread_mutex_unlock(&st->lock);
    if (st->proxy)
        bellRing(proxyBell(st->proxy)); /* it sends the rest, if any */
    return 1;
}

static int netDrained(void *ctx)
{
    struct netState *st = ctx;
    for (int i = 0; i < st->nconns; i++) {
        struct netConn *c = &st->conns[i];
        if (c->isSend && !c->lost &&
            c->done < atomic_load_explicit(&c->fifo->tail, memory_order_acquire))
            return 0;
    }
    return 1;
}

static const struct loomProxyOps netProxyOps = {
    .progress = netProgress,
    .beforeSleep = netBeforeSleep,
    .drained = netDrained,
    .quietUntil = netQuietUntil,
};

/* ---- init, connect and teardown ---- */

static void netLogLinks(const struct netState *st);

/*
 * Makes connections conns[from .. to) visible: starts the proxy the first
 * time, lets the backend watch their descriptors, hangs them on the
 * connectors. Called once their backend connected them.
 */
static loomResult_t netPublish(struct netState *st, int b, int from, int to)
{
    struct loomComm *comm = st->comm;
    if (st->proxy == NULL) {
        LOOMCHECK(proxyStart(comm, &netProxyOps, st, &st->proxy));
        comm->notifyPeer = netNotifyPeer;
        comm->netWait = netWait;
        comm->netWaitEnd = netWaitEnd;
    }
    for (int i = from; i < to; i++) {
        struct netConn *c = &st->conns[i];
        struct loomChannel *ch = &comm->channels[c->channel];
        struct loomConnector *k = c->isSend ? &ch->send[c->peer] : &ch->recv[c->peer];
        netWireConnector(k, (char *)c->fifo, comm->slotBytes, proxyBell(st->proxy), c->peer);
        k->progress = netKick;
        k->progressCtx = c;
        k->unref = c->isSend && c->sendsRef && st->backends[b]->unref ? netUnref : NULL;
    }
    pthread_mutex_lock(&st->lock);
    atomic_store_explicit(&st->nconns, to, memory_order_release);
    pthread_mutex_unlock(&st->lock);
    pthread_mutex_lock(&st->lock); /* the proxy is running: attach may hand it sockets */
    st->backends[b]->attach(st->bstate[b], st->proxy);
    pthread_mutex_unlock(&st->lock);
    bellRing(proxyBell(st->proxy)); /* what arrived before the proxy looked at these */
    return loomSuccess;
}

/* The connections conns[from .. to) as a list of pointers (NULL when out of memory). */
static struct netConn **netList(struct netState *st, int from, int to)
{
    struct netConn **list = calloc((size_t)(to - from) + 1, sizeof(*list));
    for (int i = from; list && i < to; i++)
        list[i - from] = &st->conns[i];
    return list;
}

static void netTeardown(struct loomComm *comm)
{
    struct netState *st = comm->net;
    if (st == NULL)
        return;
    comm->notifyPeer = NULL;
    comm->netWait = NULL;
    comm->netWaitEnd = NULL;
    int aborted = atomic_load(&comm->abortFlag) || atomic_load(&comm->broken);
    double drain = comm->timeoutSec < NET_DRAIN_MAX_SEC ? comm->timeoutSec : NET_DRAIN_MAX_SEC;
    proxyStop(st->proxy, aborted ? 0 : drain);
    for (int b = 0; b < NET_BACKENDS; b++)
        if (st->backends[b] != NULL)
            st->backends[b]->teardown(st->bstate[b]);
    proxyFree(st->proxy); /* after the backends' helper threads, which ring its doorbell */
    if (st->lockReady)
        pthread_mutex_destroy(&st->lock);
    if (st->pollBell.wakeFd > 0)
        close(st->pollBell.wakeFd);
    for (int p = 0; st->mem && p < comm->nranks; p++)
        if (st->mem[p] != NULL)
            munmap(st->mem[p], netMemBytes(st, p));
    free(st->mem);
    free(st->conns);
    free(st->firstConn);
    free(st->backendOf);
    free(st->pubs);
    free(st);
    comm->net = NULL;
}

/* Info: this rank's NET_INFO_* word, then what its socket backend publishes. */
static loomResult_t netInit(struct loomComm *comm, void *info)
{
    _Static_assert(8 + NET_PUBLIC_BYTES <= LOOM_TRANSPORT_INFO_BYTES, "the info fits");
    struct netState *st = calloc(1, sizeof(*st));
    if (st == NULL)
        return loomSetError(loomSystemError, "out of memory in the network setup");
    comm->net = st;
    st->comm = comm;
    pthread_mutex_init(&st->lock, NULL);
    st->lockReady = 1;
    /* Above fd 2, as the proxy's: a wakeFd of 0 means "a futex bell" (bell.c). */
    int efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (efd >= 0) {
        st->pollBell.wakeFd = fcntl(efd, F_DUPFD_CLOEXEC, 3);
        close(efd);
    }
    size_t n = (size_t)comm->nranks;
    st->mem = calloc(n, sizeof(*st->mem));
    st->conns = calloc(2 * n * (size_t)comm->nChannels + 1, sizeof(*st->conns));
    st->firstConn = malloc(n * sizeof(*st->firstConn));
    st->backendOf = calloc(n, sizeof(*st->backendOf));
    st->pubs = calloc(n, NET_PUBLIC_BYTES);
    if (!st->mem || !st->conns || !st->firstConn || !st->backendOf || !st->pubs)
        return loomSetError(loomSystemError, "out of memory in the network setup");
    for (size_t p = 0; p < n; p++)
        st->firstConn[p] = -1;
    wirePut32(info, (uint32_t)netLocalInfo(comm));
    st->backends[NET_SOCKET] = &netSocketBackend;
    return netSocketBackend.init(comm, &st->bstate[NET_SOCKET], (uint8_t *)info + 8);
}

static loomResult_t netInitPeers(struct loomComm *comm, const void *all)
{
    struct netState *st = comm->net;
    int32_t *info = calloc((size_t)comm->nranks, sizeof(*info));
    if (info == NULL)
        return loomSetError(loomSystemError, "out of memory in the network setup");
    for (int r = 0; r < comm->nranks; r++) {
        const uint8_t *rec = (const uint8_t *)all + (size_t)r * LOOM_TRANSPORT_INFO_BYTES;
        info[r] = (int32_t)wireGet32(rec);
        memcpy(st->pubs + (size_t)r * NET_PUBLIC_BYTES, rec + 8, NET_PUBLIC_BYTES);
    }
    loomResult_t res = netChooseBackends(st, info);
#ifdef HAVE_VERBS
    /* The device is opened once this rank has a peer to reach over it (none is yet connected). */
    for (int p = 0; res == loomSuccess && p < comm->nranks; p++) {
        if (st->backendOf[p] == NET_IB && st->backends[NET_IB] == NULL) {
            st->backends[NET_IB] = &netIbBackend;
            res = netIbBackend.init(comm, &st->bstate[NET_IB], NULL);
        }
    }
#endif
    free(info);
    if (res == loomSuccess)
        netLogLinks(st);
    return res;
}

/* The record of the pair: what the backend's connectStart fills (a TCP pair's says nothing). */
static size_t netRecordBytes(const struct loomComm *comm, int peer)
{
    const struct netState *st = comm->net;
    int b = peer == comm->rank ? -1 : st->backendOf[peer];
    if (b < 0 || st->backends[b] == NULL || st->backends[b]->recordBytes == NULL)
        return LOOM_CONNECT_RECORD_BYTES;
    return st->backends[b]->recordBytes(comm);
}

/*
 * The verbs backend is called with the lock held: it adds the connections to
 * the state its progress walks, which the proxy may be walking. TCP has a
 * state of its own per connection and waits in connectFinish, so it is not.
 */
static loomResult_t netSetup(struct loomComm *comm, int peer, void *record)
{
    struct netState *st = comm->net;
    int b = peer == comm->rank ? -1 : st->backendOf[peer];
    if (b < 0 || st->firstConn[peer] >= 0)
        return loomSuccess;
    LOOMCHECK(netCarve(st, peer));
    int from = st->firstConn[peer];
    struct netConn **list = netList(st, from, from + 2 * comm->nChannels);
    if (list == NULL)
        return loomSetError(loomSystemError, "out of memory for network connections");
    if (b == NET_IB)
        pthread_mutex_lock(&st->lock);
    loomResult_t res =
        st->backends[b]->connectStart(st->bstate[b], list, 2 * comm->nChannels,
                                      st->pubs + (size_t)peer * NET_PUBLIC_BYTES, record);
    if (b == NET_IB)
        pthread_mutex_unlock(&st->lock);
    free(list);
    return res;
}

static loomResult_t netConnect(struct loomComm *comm, int peer, const void *record)
{
    struct netState *st = comm->net;
    if (peer == comm->rank)
        return netConnectSelf(st);
    int b = st->backendOf[peer];
    int from = st->firstConn[peer], to = from + 2 * comm->nChannels;
    if (b < 0)
        return loomSetError(loomInternalError, "rank %d has no network link to rank %d", comm->rank,
                            peer);
    if (from < 0)
        return loomSetError(loomInternalError, "rank %d connects rank %d before setting it up",
                            comm->rank, peer);
    if (to <= atomic_load(&st->nconns))
        return loomSuccess;
    if (from != atomic_load(&st->nconns))
        return loomSetError(loomInternalError, "rank %d connects its network peers out of order",
                            comm->rank);
    struct netConn **list = netList(st, from, to);
    if (list == NULL)
        return loomSetError(loomSystemError, "out of memory for network connections");
    if (b == NET_IB)
        pthread_mutex_lock(&st->lock);
    loomResult_t res = st->backends[b]->connectFinish(st->bstate[b], list, to - from, record);
    if (b == NET_IB)
        pthread_mutex_unlock(&st->lock);
    free(list);
    if (res == loomSuccess) {
        res = netPublish(st, b, from, to);
        INFO(LOOM_NET, "NET: rank %d -> rank %d (%s): %s, connected", comm->rank, peer,
             comm->peers[peer].hostname, b == NET_IB ? "InfiniBand" : "TCP");
    }
    return res;
}

static void netLogLinks(const struct netState *st)
{
    static const char *const names[NET_BACKENDS] = {"TCP", "IB"};
    int n[NET_BACKENDS] = {0, 0};
    for (int p = 0; p < st->comm->nranks; p++)
        if (st->backendOf[p] >= 0)
            n[st->backendOf[p]]++;
    for (int b = 0; b < NET_BACKENDS; b++)
        if (n[b] > 0)
            INFO(LOOM_NET, "NET: rank %d reaches %d peer(s) over %s (connected when first used)",
                 st->comm->rank, n[b], names[b]);
}

static const char *netDevices(void)
{
#ifdef HAVE_VERBS
    return netIbDescribe();
#else
    return "";
#endif
}

static const char *netLinkName(const struct loomComm *comm, int peer)
{
    const struct netState *st = comm->net;
    if (st == NULL || st->backendOf[peer] < 0)
        return peer == comm->rank ? "net/self" : "net";
    return st->backendOf[peer] == NET_IB ? "net/ib" : "net/socket";
}

const struct loomTransport netTransport = {
    .name = "net",
    .usable = netUsable,
    .canConnect = netCanConnect,
    .init = netInit,
    .initPeers = netInitPeers,
    .setup = netSetup,
    .recordBytes = netRecordBytes,
    .connect = netConnect,
    .teardown = netTeardown,
    .linkName = netLinkName,
    .devices = netDevices,
};
