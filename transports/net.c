/*
 * net.c — the network transport: ranks on different hosts (or on one host
 * when shared memory is off), over TCP or InfiniBand verbs.
 *
 * Both ends of a network connector are local memory: one FIFO (counters and
 * LOOM_STEPS slots) per direction, peer and channel, all carved from one
 * page-aligned block so that a verbs backend can register it. The executor
 * uses them as it uses shared memory; a backend moves the messages between
 * hosts, run by the proxy thread (src/proxy.c) or, through the connector's
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
 * nothing else travels, so it never waits behind messages the peer no
 * longer reads; the peer's backend receives it when its proxy goes idle and
 * net.c posts it on that rank's doorbell (bellPostNotice). Before a lost
 * connection is reported, the notices already in from that peer are read,
 * so a survivor names the first failure, not the peer that left after it. Destroy lets the proxy
 * drain what the executor handed over before the sockets close, so a rank may destroy its
 * communicator as soon as its last call returns.
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include "bootstrap.h"
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

enum { NET_SOCKET = 0, NET_IB = 1, NET_BACKENDS = 2 };

/* Published by every rank at setup. */
#define NET_INFO_IB 0x1          /* InfiniBand usable and allowed here */
#define NET_INFO_IB_REQUIRED 0x2 /* LOOM_NET=ib (or config.netName "ib") */

struct netState {
    struct loomComm *comm;
    char *mem;
    size_t memBytes;
    struct netConn *conns; /* [nconns]: a send and a recv connection per remote peer and channel */
    int nconns;
    int *backendOf; /* [nranks]: NET_SOCKET or NET_IB, -1 when not a network link */
    const struct netBackend *backends[NET_BACKENDS];
    void *bstate[NET_BACKENDS];
    struct loomProxy *proxy;
    /* Held by whoever moves connections: the proxy (waits for it), an executor (only tries). */
    pthread_mutex_t lock;
    int lockReady;
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

/* Carves the FIFOs: one per remote peer, channel and direction, plus one for a link to self. */
static loomResult_t netAllocate(struct netState *st)
{
    struct loomComm *comm = st->comm;
    int remote = 0, self = transportServes(comm, &netTransport, comm->rank);
    for (int p = 0; p < comm->nranks; p++)
        remote += st->backendOf[p] >= 0;
    st->nconns = 2 * remote * comm->nChannels;
    st->memBytes = (size_t)(st->nconns + self * comm->nChannels) * fifoRegion(comm);
    if (st->memBytes == 0)
        return loomSuccess;
    st->conns = calloc((size_t)st->nconns + 1, sizeof(*st->conns));
    if (st->conns == NULL || posix_memalign((void **)&st->mem, NET_PAGE, st->memBytes) != 0) {
        st->mem = NULL;
        return loomSetError(loomSystemError, "out of memory for %d network connections (%zu KiB)",
                            st->nconns, st->memBytes >> 10);
    }
    memset(st->mem, 0, st->memBytes);
    char *at = st->mem;
    int i = 0;
    for (int c = 0; c < comm->nChannels; c++) {
        for (int p = 0; p < comm->nranks; p++) {
            if (p == comm->rank && self) {
                netWireConnector(&comm->channels[c].send[p], at, comm->slotBytes, comm->bell, p);
                netWireConnector(&comm->channels[c].recv[p], at, comm->slotBytes, comm->bell, p);
                at += fifoRegion(comm);
            }
            for (int dir = 0; dir < 2 && st->backendOf[p] >= 0; dir++, i++) {
                st->conns[i] = (struct netConn){.peer = p,
                                                .channel = c,
                                                .isSend = dir == 0,
                                                .fifo = (struct loomFifo *)at,
                                                .slots = at + sizeof(struct loomFifo),
                                                .slotBytes = comm->slotBytes,
                                                .owner = st};
                at += fifoRegion(comm);
            }
        }
    }
    return loomSuccess;
}

/* ---- moving: the proxy's callbacks and the executor's hook ---- */

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
    bellRing(comm->bell);
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
        bellRing(st->comm->bell);
    *moved = any;
}

/*
 * The executor's hook (struct loomConnector.progress): move this connection
 * now. If someone else holds the lock, the proxy is told through its bell:
 * the pass that holds the lock may be the last one before the proxy sleeps
 * (proxySleep flags itself, then makes one more pass) and may have looked
 * at this connection before the counter moved; the bell's eventfd then
 * ends that sleep at once. (Before, nothing was rung there, and the proxy
 * slept its full 100 ms with a message to send or to read: 8-byte
 * AllReduce over 4 hosts averaged 2.5-14 ms a call instead of 0.5.)
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
    for (int i = 0; i < st->nconns && back == NULL; i++)
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
};

/* ---- setup and teardown ---- */

static loomResult_t netSetupBackends(struct netState *st)
{
    struct loomComm *comm = st->comm;
    struct netConn **list = calloc((size_t)st->nconns + 1, sizeof(*list));
    if (list == NULL)
        return loomSetError(loomSystemError, "out of memory for network connections");
    loomResult_t res = loomSuccess;
    for (int b = 0; b < NET_BACKENDS && res == loomSuccess; b++) {
        if (st->backends[b] == NULL)
            continue;
        struct netSetupArgs a = {comm, list, 0, comm->timeoutSec};
        for (int i = 0; i < st->nconns; i++)
            if (st->backendOf[st->conns[i].peer] == b)
                list[a.nconns++] = &st->conns[i];
        res = st->backends[b]->setup(&a, &st->bstate[b]);
    }
    free(list);
    return res;
}

static void netTeardown(struct loomComm *comm)
{
    struct netState *st = comm->net;
    if (st == NULL)
        return;
    comm->notifyPeer = NULL;
    int aborted = atomic_load(&comm->abortFlag) || atomic_load(&comm->broken);
    double drain = comm->timeoutSec < NET_DRAIN_MAX_SEC ? comm->timeoutSec : NET_DRAIN_MAX_SEC;
    proxyStop(st->proxy, aborted ? 0 : drain);
    for (int b = 0; b < NET_BACKENDS; b++)
        if (st->backends[b] != NULL)
            st->backends[b]->teardown(st->bstate[b]);
    if (st->lockReady)
        pthread_mutex_destroy(&st->lock);
    free(st->mem);
    free(st->conns);
    free(st->backendOf);
    free(st);
    comm->net = NULL;
}

static void netLogLinks(const struct netState *st)
{
    static const char *const names[NET_BACKENDS] = {"TCP", "IB"};
    for (int p = 0; p < st->comm->nranks; p++)
        if (st->backendOf[p] >= 0)
            INFO(LOOM_NET, "NET: rank %d -> rank %d (%s): %s", st->comm->rank, p,
                 st->comm->peers[p].hostname, names[st->backendOf[p]]);
}

static loomResult_t netSetup(struct loomComm *comm)
{
    struct netState *st = calloc(1, sizeof(*st));
    int32_t *info = calloc((size_t)comm->nranks, sizeof(*info));
    loomResult_t res = loomSystemError;
    if (st == NULL || info == NULL) {
        free(st);
        free(info);
        return loomSetError(res, "out of memory in the network setup");
    }
    comm->net = st;
    st->comm = comm;
    pthread_mutex_init(&st->lock, NULL);
    st->lockReady = 1;
    st->backendOf = calloc((size_t)comm->nranks, sizeof(*st->backendOf));
    if (st->backendOf == NULL) {
        loomSetError(res, "out of memory in the network setup");
        goto fail;
    }
    info[comm->rank] = netLocalInfo(comm);
    res = bootstrapAllGather(comm->bootstrap, info, sizeof(*info));
    if (res == loomSuccess)
        res = netChooseBackends(st, info);
    if (res == loomSuccess)
        res = netAllocate(st);
    if (res != loomSuccess)
        goto fail;
    st->backends[NET_SOCKET] = &netSocketBackend;
#ifdef HAVE_VERBS
    /* Collective: every rank sets IB up when any two ranks can use it. */
    int ibRanks = 0;
    for (int r = 0; r < comm->nranks; r++)
        ibRanks += (info[r] & NET_INFO_IB) != 0;
    if (ibRanks >= 2)
        st->backends[NET_IB] = &netIbBackend;
#endif
    res = netSetupBackends(st);
    if (res != loomSuccess)
        goto fail;
    if (st->nconns > 0) {
        res = proxyStart(comm, &netProxyOps, st, &st->proxy);
        if (res != loomSuccess)
            goto fail;
        for (int b = 0; b < NET_BACKENDS; b++)
            if (st->backends[b] != NULL)
                st->backends[b]->attach(st->bstate[b], st->proxy);
        for (int i = 0; i < st->nconns; i++) {
            struct netConn *c = &st->conns[i];
            struct loomChannel *ch = &comm->channels[c->channel];
            struct loomConnector *k = c->isSend ? &ch->send[c->peer] : &ch->recv[c->peer];
            netWireConnector(k, (char *)c->fifo, comm->slotBytes, proxyBell(st->proxy), c->peer);
            k->progress = netKick;
            k->progressCtx = c;
        }
        comm->notifyPeer = netNotifyPeer;
    }
    netLogLinks(st);
    free(info);
    return loomSuccess;

fail:
    free(info);
    netTeardown(comm);
    return res;
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
    .setup = netSetup,
    .teardown = netTeardown,
    .linkName = netLinkName,
};
