/*
 * net_ib.c — the InfiniBand verbs backend of the network transport (built
 * only when libibverbs is found).
 *
 * Every connection (one direction of one peer pair on one channel) is one
 * reliable-connected queue pair on each end. The sender writes message k
 * straight into the receiver's slot k % LOOM_STEPS with an RDMA write with
 * immediate; the immediate carries the message's size, and its arrival on
 * the receiver's queue says the data is in place. The receiver returns
 * credits: after its executor frees slots, a zero-byte send with immediate
 * carries the low 32 bits of its head counter, and the sender may write
 * message k only while k < head + LOOM_STEPS:
 *
 *   sender                                   receiver
 *   k < credit: RDMA_WRITE_WITH_IMM(slot k, imm = size) ---> recv completion: bytes[], tail++
 *   completion: head = k + 1 (slot reusable)
 *   recv completion: credit = head' + STEPS  <--- SEND_WITH_IMM(imm = head') after the executor
 * reads
 *
 * Failures travel too. A rank that stops on an error tells its peers (net.c,
 * netNotifyPeer): the notice is an RDMA write with immediate from the recv
 * connection's queue pair into an inbox the peer's send connection named in
 * its record, and its completion there (a write, where credits are sends)
 * hands it to net.c. A dead peer is found by writing to it: every peer's
 * channel-0 send queue pair carries a zero-byte probe every 100 ms, which
 * fails once the retries to a queue pair that is gone run out (postProbe).
 *
 * Both ends' FIFO memory is registered through the registration cache
 * (net_ib_util.c). Queue pair numbers, PSNs, LID, GID (RoCE: the entry
 * LOOM_IB_GID_INDEX of the port's table), slot address and rkey travel in
 * one 64-byte record per connection, in the pair's connection record that
 * the core carries when it first connects the pair (src/connect.c: at init
 * for ring and tree neighbours, else on first use), like TCP's links. The
 * device is opened at init on a rank with a peer to reach over it; one
 * completion queue, sized for a connection to every peer, serves the
 * communicator; the proxy sleeps on its completion channel.
 *
 * The device is the first active port that LOOM_IB_HCA allows. It has run
 * on soft-RoCE only (tests/rdma/); see the README (Status).
 */
#include <errno.h>
#include <fcntl.h>
#include <infiniband/verbs.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>
#include <arpa/inet.h>

#include "debug.h"
#include "net.h"
#include "net_ib_util.h"
#include "param.h"
#include "proxy.h"
#include "transport.h"

#define IB_QUEUE (2 * LOOM_STEPS)
#define IB_CQ_BATCH 16
#define IB_STASH 64
#define IB_REG_CACHE 1024
/* How often a peer's liveness is probed (one zero-byte write on its channel-0 send QP). */
#define IB_PROBE_NS 100000000ULL

/* A work request's id: the connection's index, then its kind in the low IB_WR_BITS. */
enum { IB_WR_DATA, IB_WR_CREDIT, IB_WR_RECV, IB_WR_PROBE, IB_WR_NOTICE };
#define IB_WR_BITS 3
/*
 * LOOM_IB_QPS_PER_CONNECTION: every message goes on each of a connection's
 * queue pairs, as one write with immediate apiece (netSplit's part, empty
 * for small messages), so a message is done, on both ends, when each queue
 * pair has done it: no queue pair can get ahead or fall behind by a message.
 */
#define IB_MAX_QPS 8 /* LOOM_IB_QPS_PER_CONNECTION's largest value (param.c) */
#define IB_QP_BITS 3
_Static_assert(IB_MAX_QPS <= 1 << IB_QP_BITS, "a queue pair's index fits its bits of wr_id");

struct ibConn {
    struct netConn *nc;
    struct ibv_qp *qp[IB_MAX_QPS]; /* st->nqps of them; qp[0] also carries credits and notices */
    uint32_t psn[IB_MAX_QPS];
    uint64_t qpDone[IB_MAX_QPS]; /* parts acknowledged (send) or landed (recv) on each */
    struct ibReg *reg;
    uint64_t remoteAddr; /* send: the receiver's slots; recv: the sender's notice inbox */
    uint32_t rkey;
    uint64_t head;       /* send: the receiver's head as last told; recv: as last sent */
    uint64_t completed;  /* messages done on every queue pair: the least qpDone */
    int creditsInFlight; /* recv: credit sends not yet completed */
    int failed;          /* a work completion failed: its status */
    int postErr;         /* posting failed while another connection was moved: errno */
    int unblocked;       /* a completion may let it post more (a credit came or left) */
    uint64_t probedAt;   /* send, channel 0: when the last liveness probe was posted */
    int probing;         /* send, channel 0: a probe is in flight */
};

struct ibState {
    struct loomComm *comm;
    struct ibv_context *ctx;
    struct ibv_pd *pd;
    struct ibv_comp_channel *channel;
    struct ibv_cq *cq;
    struct ibv_port_attr port;
    int gidIndex; /* LOOM_IB_GID_INDEX, or ibGidChoose's */
    int nqps;     /* queue pairs per connection (LOOM_IB_QPS_PER_CONNECTION) */
    union ibv_gid gid;
    struct ibRegCache cache;
    int cacheReady;
    struct ibConn *conns; /* [cap]: [0, nconns) made, in the order the pairs connect */
    int nconns, cap;
    struct ibv_wc stash[IB_STASH];
    int nstash;
    int watched; /* the proxy watches the completion channel (attach runs at every connect) */
    /* Failure notices: per peer an inbox (its notices land there) and an outbox. */
    uint8_t *notices; /* [nranks][2][NET_NOTICE_MAX_BYTES] */
    struct ibv_mr *noticeMr;
};

static uint8_t *noticeBox(const struct ibState *st, int peer, int outbox)
{
    return st->notices + ((size_t)peer * 2 + (size_t)outbox) * NET_NOTICE_MAX_BYTES;
}

/* ---- the device, probed once per process ---- */

static pthread_once_t probeOnce = PTHREAD_ONCE_INIT;
static char probeDev[IBV_SYSFS_NAME_MAX];
static int probePort;
static char probeWhy[512];

static void probeList(struct ibv_device **list, int n)
{
    const char *spec = paramStr(LOOM_PARAM_IB_HCA);
    size_t used = 0;
    for (int i = 0; i < n && probePort == 0; i++) {
        const char *name = ibv_get_device_name(list[i]);
        struct ibv_context *ctx = ibv_open_device(list[i]);
        struct ibv_device_attr attr;
        if (ctx == NULL || ibv_query_device(ctx, &attr) != 0) {
            if (ctx)
                ibv_close_device(ctx);
            continue;
        }
        for (int p = 1; p <= attr.phys_port_cnt && probePort == 0; p++) {
            struct ibv_port_attr pa;
            if (ibv_query_port(ctx, (uint8_t)p, &pa) != 0)
                continue;
            int n2 =
                snprintf(probeWhy + used, sizeof(probeWhy) - used, "%s%s:%d (%s)", used ? ", " : "",
                         name, p, pa.state == IBV_PORT_ACTIVE ? "active" : "not active");
            used += n2 > 0 && (size_t)n2 < sizeof(probeWhy) - used ? (size_t)n2 : 0;
            if (pa.state == IBV_PORT_ACTIVE && ibHcaMatches(spec, name, p)) {
                snprintf(probeDev, sizeof(probeDev), "%s", name);
                probePort = p;
            }
        }
        ibv_close_device(ctx);
    }
}

static void probe(void)
{
    int n = 0;
    struct ibv_device **list = ibv_get_device_list(&n);
    if (list == NULL || n == 0) {
        snprintf(probeWhy, sizeof(probeWhy), "no RDMA device found");
        if (list)
            ibv_free_device_list(list);
        return;
    }
    probeList(list, n);
    ibv_free_device_list(list);
    if (probePort == 0) {
        char ports[400];
        snprintf(ports, sizeof(ports), "%.399s", probeWhy);
        snprintf(probeWhy, sizeof(probeWhy), "no active port%s%.64s; ports: %s",
                 paramStr(LOOM_PARAM_IB_HCA)[0] ? " matches LOOM_IB_HCA=" : "",
                 paramStr(LOOM_PARAM_IB_HCA), ports[0] ? ports : "none");
    }
}

/* A port's GID table (at most `max` entries): addresses and types; returns the entries read. */
static int gidTable(struct ibv_context *ctx, int port, const struct ibv_port_attr *pa,
                    uint8_t (*gids)[IB_GID_BYTES], int *types, int max)
{
    int n = pa->gid_tbl_len < max ? pa->gid_tbl_len : max;
    for (int i = 0; i < n; i++) {
        struct ibv_gid_entry e;
        memset(gids[i], 0, IB_GID_BYTES);
        types[i] = IB_GID_UNSET;
        if (ibv_query_gid_ex(ctx, (uint32_t)port, (uint32_t)i, &e, 0) != 0)
            continue;
        memcpy(gids[i], e.gid.raw, IB_GID_BYTES);
        types[i] = e.gid_type == IBV_GID_TYPE_ROCE_V2   ? IB_GID_ROCE_V2
                   : e.gid_type == IBV_GID_TYPE_ROCE_V1 ? IB_GID_ROCE_V1
                                                        : IB_GID_IB;
    }
    return n;
}

#define IB_GID_MAX 256

/* LOOM_IB_GID_INDEX, or where it is unset the entry ibGidChoose picks from the port's table. */
static int gidIndexOf(struct ibv_context *ctx, int port, const struct ibv_port_attr *pa)
{
    if (paramInt(LOOM_PARAM_IB_GID_INDEX) >= 0)
        return (int)paramInt(LOOM_PARAM_IB_GID_INDEX);
    static uint8_t gids[IB_GID_MAX][IB_GID_BYTES];
    static int types[IB_GID_MAX];
    static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
    pthread_mutex_lock(&lock);
    int n = gidTable(ctx, port, pa, gids, types, IB_GID_MAX);
    int index = ibGidChoose((const uint8_t(*)[IB_GID_BYTES])gids, types, n,
                            pa->link_layer == IBV_LINK_LAYER_ETHERNET);
    pthread_mutex_unlock(&lock);
    return index;
}

int netIbUsable(const char **why)
{
    pthread_once(&probeOnce, probe);
    *why = probeWhy;
    return probePort != 0;
}

/* ---- what loom-info lists ---- */

static pthread_once_t describeOnce = PTHREAD_ONCE_INIT;
static char describeText[16384];
static size_t describeUsed;

static void say(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void say(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(describeText + describeUsed, sizeof(describeText) - describeUsed, fmt, ap);
    va_end(ap);
    if (n > 0)
        describeUsed += (size_t)n < sizeof(describeText) - describeUsed
                            ? (size_t)n
                            : sizeof(describeText) - describeUsed - 1;
}

static void describePort(struct ibv_context *ctx, const char *name, int port)
{
    static const char *const gidTypes[] = {"IB", "RoCE v1", "RoCE v2", "-"};
    static uint8_t gids[IB_GID_MAX][IB_GID_BYTES];
    static int types[IB_GID_MAX];
    struct ibv_port_attr pa;
    if (ibv_query_port(ctx, (uint8_t)port, &pa) != 0) {
        say("  %s:%d: cannot query: %s\n", name, port, strerror(errno));
        return;
    }
    int used = strcmp(name, probeDev) == 0 && port == probePort;
    int roce = pa.link_layer == IBV_LINK_LAYER_ETHERNET;
    say("%s %s:%d  %s, %s link layer, MTU %d (max %d)\n", used ? "*" : " ", name, port,
        ibv_port_state_str(pa.state), roce ? "Ethernet (RoCE)" : "InfiniBand", 128 << pa.active_mtu,
        128 << pa.max_mtu);
    if (!roce)
        say("      lid %u\n", pa.lid);
    int n = gidTable(ctx, port, &pa, gids, types, IB_GID_MAX);
    int chosen = used ? gidIndexOf(ctx, port, &pa) : -1;
    for (int i = 0; i < n; i++) {
        char text[IB_GID_STRLEN];
        if (types[i] == IB_GID_UNSET || ibGidIsZero(gids[i]))
            continue;
        ibGidFormat(gids[i], text, sizeof(text));
        say("    %s GID %-3d %s  %s\n", i == chosen ? "*" : " ", i, text, gidTypes[types[i]]);
    }
}

static void describe(void)
{
    const char *why;
    int n = 0;
    netIbUsable(&why);
    struct ibv_device **list = ibv_get_device_list(&n);
    for (int i = 0; list && i < n; i++) {
        const char *name = ibv_get_device_name(list[i]);
        struct ibv_context *ctx = ibv_open_device(list[i]);
        struct ibv_device_attr attr;
        if (ctx == NULL || ibv_query_device(ctx, &attr) != 0) {
            say("  %s: cannot open: %s\n", name, strerror(errno));
            if (ctx)
                ibv_close_device(ctx);
            continue;
        }
        for (int p = 1; p <= attr.phys_port_cnt; p++)
            describePort(ctx, name, p);
        ibv_close_device(ctx);
    }
    if (list)
        ibv_free_device_list(list);
    if (probePort == 0)
        say("  none used: %s\n", why);
}

const char *netIbDescribe(void)
{
    pthread_once(&describeOnce, describe);
    return describeText;
}

/* ---- registration ---- */

static loomResult_t ibRegister(void *ctx, void *addr, size_t len, void **handle, uint32_t *lkey,
                               uint32_t *rkey)
{
    struct ibState *st = ctx;
    struct ibv_mr *mr =
        ibv_reg_mr(st->pd, addr, len, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
    if (mr == NULL)
        return loomSetError(loomSystemError,
                            "NET/IB: cannot register %zu bytes with %s: %s (is the locked-memory "
                            "limit, ulimit -l, large enough?)",
                            len, probeDev, strerror(errno));
    *handle = mr;
    *lkey = mr->lkey;
    *rkey = mr->rkey;
    return loomSuccess;
}

static void ibDeregister(void *ctx, void *handle)
{
    (void)ctx;
    ibv_dereg_mr(handle);
}

/* ---- queue pairs ---- */

static loomResult_t qpCreate(struct ibState *st, struct ibConn *ic, int q)
{
    struct ibv_qp_init_attr init = {.send_cq = st->cq,
                                    .recv_cq = st->cq,
                                    .cap = {.max_send_wr = IB_QUEUE,
                                            .max_recv_wr = IB_QUEUE,
                                            .max_send_sge = 1,
                                            .max_recv_sge = 1},
                                    .qp_type = IBV_QPT_RC};
    ic->qp[q] = ibv_create_qp(st->pd, &init);
    if (ic->qp[q] == NULL)
        return loomSetError(loomSystemError, "NET/IB: ibv_create_qp on %s: %s", probeDev,
                            strerror(errno));
    struct ibv_qp_attr a = {.qp_state = IBV_QPS_INIT,
                            .pkey_index = 0,
                            .port_num = (uint8_t)probePort,
                            .qp_access_flags = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE};
    if (ibv_modify_qp(ic->qp[q], &a,
                      IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS) != 0)
        return loomSetError(loomSystemError, "NET/IB: queue pair to INIT: %s", strerror(errno));
    uint32_t r = 0;
    if (getrandom(&r, sizeof(r), 0) != sizeof(r))
        r = (uint32_t)loomClockNs();
    ic->psn[q] = r & 0xffffff;
    return loomSuccess;
}

/* LOOM_IB_MTU as an enum ibv_mtu; IBV_MTU_4096 (no cap) where unset. */
static enum ibv_mtu mtuCap(void)
{
    const char *cap = paramStr(LOOM_PARAM_IB_MTU);
    enum ibv_mtu mtu = IBV_MTU_256;
    for (int bytes = 256; cap[0] && atoi(cap) > bytes && mtu < IBV_MTU_4096; bytes *= 2)
        mtu++;
    return cap[0] ? mtu : IBV_MTU_4096;
}

static loomResult_t qpConnect(struct ibState *st, struct ibConn *ic, int q,
                              const struct ibConnInfo *peer)
{
    int roce = st->port.link_layer == IBV_LINK_LAYER_ETHERNET;
    enum ibv_mtu mtu =
        peer->mtu < st->port.active_mtu ? (enum ibv_mtu)peer->mtu : st->port.active_mtu;
    if (mtu > mtuCap())
        mtu = mtuCap();
    struct ibv_qp_attr a = {.qp_state = IBV_QPS_RTR,
                            .path_mtu = mtu,
                            .dest_qp_num = peer->qpn,
                            .rq_psn = peer->psn,
                            .max_dest_rd_atomic = 1,
                            .min_rnr_timer = 12,
                            .ah_attr = {.dlid = peer->lid,
                                        .sl = (uint8_t)paramInt(LOOM_PARAM_IB_SL),
                                        .src_path_bits = 0,
                                        .port_num = (uint8_t)probePort}};
    if (roce || !ibGidIsZero(peer->gid)) {
        a.ah_attr.is_global = 1;
        memcpy(a.ah_attr.grh.dgid.raw, peer->gid, IB_GID_BYTES);
        a.ah_attr.grh.sgid_index = (uint8_t)st->gidIndex;
        a.ah_attr.grh.hop_limit = 255;
        a.ah_attr.grh.traffic_class = (uint8_t)paramInt(LOOM_PARAM_IB_TC);
    }
    if (ibv_modify_qp(ic->qp[q], &a,
                      IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                          IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER) != 0)
        return loomSetError(loomSystemError, "NET/IB: queue pair to rank %d to RTR: %s",
                            ic->nc->peer, strerror(errno));
    struct ibv_qp_attr b = {.qp_state = IBV_QPS_RTS,
                            .timeout = (uint8_t)paramInt(LOOM_PARAM_IB_TIMEOUT),
                            .retry_cnt = (uint8_t)paramInt(LOOM_PARAM_IB_RETRY_CNT),
                            .rnr_retry = 7,
                            .sq_psn = ic->psn[q],
                            .max_rd_atomic = 1};
    if (ibv_modify_qp(ic->qp[q], &b,
                      IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
                          IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC) != 0)
        return loomSetError(loomSystemError, "NET/IB: queue pair to rank %d to RTS: %s",
                            ic->nc->peer, strerror(errno));
    return loomSuccess;
}

/* A work request's id: the connection, the queue pair and the kind. */
static uint64_t wrId(const struct ibState *st, const struct ibConn *ic, int q, int kind)
{
    return ((uint64_t)(ic - st->conns) << IB_QP_BITS | (uint64_t)q) << IB_WR_BITS | (uint64_t)kind;
}

static int postRecv(struct ibState *st, struct ibConn *ic, int q)
{
    struct ibv_recv_wr wr = {.wr_id = wrId(st, ic, q, IB_WR_RECV)}, *bad;
    return ibv_post_recv(ic->qp[q], &wr, &bad);
}

/* ---- setup ---- */

static loomResult_t ibOpen(struct ibState *st, int nconns)
{
    int n = 0;
    struct ibv_device **list = ibv_get_device_list(&n);
    for (int i = 0; list && i < n && st->ctx == NULL; i++)
        if (strcmp(ibv_get_device_name(list[i]), probeDev) == 0)
            st->ctx = ibv_open_device(list[i]);
    if (list)
        ibv_free_device_list(list);
    if (st->ctx == NULL)
        return loomSetError(loomSystemError, "NET/IB: cannot open %s: %s", probeDev,
                            strerror(errno));
    if (ibv_query_port(st->ctx, (uint8_t)probePort, &st->port) != 0)
        return loomSetError(loomSystemError, "NET/IB: cannot query %s port %d: %s", probeDev,
                            probePort, strerror(errno));
    st->gidIndex = gidIndexOf(st->ctx, probePort, &st->port);
    if (ibv_query_gid(st->ctx, (uint8_t)probePort, st->gidIndex, &st->gid) != 0)
        return loomSetError(loomSystemError,
                            "NET/IB: cannot read GID %d of %s port %d: %s (LOOM_IB_GID_INDEX; "
                            "loom-info lists the port's GIDs)",
                            st->gidIndex, probeDev, probePort, strerror(errno));
    st->pd = ibv_alloc_pd(st->ctx);
    st->channel = st->pd ? ibv_create_comp_channel(st->ctx) : NULL;
    int depth = 2 * IB_QUEUE * st->nqps * (nconns > 0 ? nconns : 1);
    struct ibv_device_attr attr;
    if (ibv_query_device(st->ctx, &attr) == 0 && depth > attr.max_cqe)
        depth = attr.max_cqe; /* a pair's completions are taken as they come, seldom all at once */
    st->cq = st->channel ? ibv_create_cq(st->ctx, depth, NULL, st->channel, 0) : NULL;
    if (st->cq == NULL)
        return loomSetError(loomSystemError,
                            "NET/IB: cannot set up %s (protection domain, "
                            "completion queue of %d): %s",
                            probeDev, depth, strerror(errno));
    fcntl(st->channel->fd, F_SETFL, fcntl(st->channel->fd, F_GETFL) | O_NONBLOCK);
    LOOMCHECK(ibRegCacheInit(&st->cache, IB_REG_CACHE, (size_t)sysconf(_SC_PAGESIZE), ibRegister,
                             ibDeregister, st));
    st->cacheReady = 1;
    return loomSuccess;
}

/* LOOM_IB_QPS_PER_CONNECTION (the same on every rank, as the records' size must be). */
static int ibQpsPerConnection(void)
{
    return (int)paramInt(LOOM_PARAM_IB_QPS_PER_CONNECTION);
}

/* Where the record of queue pair q of a connection (channel, direction) sits in the pair's. */
static size_t recordAt(const struct ibState *st, int channel, int isSend, int q)
{
    return (((size_t)channel * 2 + (isSend ? 0 : 1)) * (size_t)st->nqps + (size_t)q) *
           IB_CONN_BYTES;
}

/* Channels times queue pairs a connection may have: a pair's records fit the core's bound. */
#define IB_MAX_CHANNEL_QPS (LOOM_CONNECT_RECORD_MAX / (2 * IB_CONN_BYTES))
_Static_assert(LOOM_MAX_CHANNELS <= IB_MAX_CHANNEL_QPS, "one queue pair a connection always fits");

/* A pair's record: one record per queue pair of each channel and direction. */
static size_t ibRecordBytes(const struct loomComm *comm)
{
    return 2 * (size_t)comm->nChannels * (size_t)ibQpsPerConnection() * IB_CONN_BYTES;
}

static void ibTeardown(void *state)
{
    struct ibState *st = state;
    if (st == NULL)
        return;
    for (int i = 0; i < st->nconns; i++) {
        for (int q = 0; q < st->nqps; q++)
            if (st->conns[i].qp[q])
                ibv_destroy_qp(st->conns[i].qp[q]);
        st->conns[i].nc->priv = NULL;
    }
    if (st->cacheReady)
        ibRegCacheDestroy(&st->cache);
    if (st->noticeMr)
        ibv_dereg_mr(st->noticeMr);
    free(st->notices);
    if (st->cq)
        ibv_destroy_cq(st->cq);
    if (st->channel)
        ibv_destroy_comp_channel(st->channel);
    if (st->pd)
        ibv_dealloc_pd(st->pd);
    if (st->ctx)
        ibv_close_device(st->ctx);
    free(st->conns);
    free(st);
}

/*
 * Opens the device for every connection this rank may make: one send and
 * one recv per channel to every peer (their QPs come as pairs connect).
 */
static loomResult_t ibInit(struct loomComm *comm, void **state, void *pub)
{
    (void)pub; /* what a peer needs travels in the pair's record */
    struct ibState *st = calloc(1, sizeof(*st));
    *state = st;
    if (st == NULL)
        return loomSetError(loomSystemError, "NET/IB: out of memory");
    st->comm = comm;
    st->nqps = ibQpsPerConnection();
    if (comm->nChannels * st->nqps > IB_MAX_CHANNEL_QPS)
        return loomSetError(loomInvalidUsage,
                            "NET/IB: %d channels (LOOM_NCHANNELS) of %d queue pairs each "
                            "(LOOM_IB_QPS_PER_CONNECTION) are more than the %d a connection "
                            "between two ranks may have; lower either",
                            comm->nChannels, st->nqps, IB_MAX_CHANNEL_QPS);
    st->cap = 2 * comm->nChannels * comm->nranks;
    st->conns = calloc((size_t)st->cap, sizeof(*st->conns));
    size_t noticeBytes = (size_t)comm->nranks * 2 * NET_NOTICE_MAX_BYTES;
    st->notices = calloc(1, noticeBytes);
    if (st->conns == NULL || st->notices == NULL)
        return loomSetError(loomSystemError, "NET/IB: out of memory");
    LOOMCHECK(ibOpen(st, st->cap));
    st->noticeMr = ibv_reg_mr(st->pd, st->notices, noticeBytes,
                              IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
    if (st->noticeMr == NULL)
        return loomSetError(loomSystemError,
                            "NET/IB: cannot register %zu bytes for failure notices with %s: %s",
                            noticeBytes, probeDev, strerror(errno));
    return loomSuccess;
}

/* Queue pair q of connection ic: made, and this end's record of it in the pair's record. */
static loomResult_t connStart(struct ibState *st, struct ibConn *ic, int q, void *record)
{
    struct netConn *nc = ic->nc;
    LOOMCHECK(qpCreate(st, ic, q));
    struct ibConnInfo info = {.lid = st->port.lid,
                              .qpn = ic->qp[q]->qp_num,
                              .psn = ic->psn[q],
                              .mtu = (uint8_t)st->port.active_mtu,
                              .addr = (uint64_t)(uintptr_t)(nc->isSend ? noticeBox(st, nc->peer, 0)
                                                                       : (uint8_t *)nc->slots),
                              .rkey = nc->isSend ? st->noticeMr->rkey : ic->reg->rkey,
                              .slotBytes = (uint32_t)nc->slotBytes};
    memcpy(info.gid, st->gid.raw, IB_GID_BYTES);
    ibConnEncode(&info, (uint8_t *)record + recordAt(st, nc->channel, nc->isSend, q));
    return loomSuccess;
}

/* The connections to one peer: their queue pairs, and this end's records of them. */
static loomResult_t ibConnectStart(void *state, struct netConn **conns, int n, const void *peerPub,
                                   void *record)
{
    struct ibState *st = state;
    (void)peerPub;
    if (st->nconns + n > st->cap)
        return loomSetError(loomInternalError, "NET/IB: more connections than %d", st->cap);
    for (int i = 0; i < n; i++) {
        struct netConn *nc = conns[i];
        struct ibConn *ic = &st->conns[st->nconns];
        ic->nc = nc;
        nc->priv = ic;
        st->nconns++; /* teardown destroys what is made below, made or not */
        LOOMCHECK(ibRegCacheGet(&st->cache, nc->fifo,
                                sizeof(struct loomFifo) + LOOM_STEPS * nc->slotBytes, &ic->reg));
        for (int q = 0; q < st->nqps; q++)
            LOOMCHECK(connStart(st, ic, q, record));
    }
    return loomSuccess;
}

/*
 * With the peer's record: each queue pair to ready-to-send, and its receives
 * posted: on a recv connection one a message on every queue pair; on a send
 * connection, on its first, one a credit (at most LOOM_STEPS in flight) and
 * one for a notice.
 */
static loomResult_t ibConnectFinish(void *state, struct netConn **conns, int n, const void *record)
{
    struct ibState *st = state;
    for (int i = 0; i < n; i++) {
        struct netConn *nc = conns[i];
        struct ibConn *ic = nc->priv;
        for (int q = 0; q < st->nqps; q++) {
            struct ibConnInfo peer;
            const uint8_t *rec =
                (const uint8_t *)record + recordAt(st, nc->channel, !nc->isSend, q);
            if (ibConnDecode(rec, &peer) != loomSuccess || peer.slotBytes != nc->slotBytes)
                return loomSetError(loomInternalError,
                                    "NET/IB: rank %d sent no usable connection record for rank %d "
                                    "(channel %d); do all ranks run the same Loom with the same "
                                    "LOOM_BUFFSIZE and LOOM_IB_QPS_PER_CONNECTION?",
                                    nc->peer, st->comm->rank, nc->channel);
            ic->remoteAddr = peer.addr;
            ic->rkey = peer.rkey;
            LOOMCHECK(qpConnect(st, ic, q, &peer));
            int recvs = nc->isSend ? (q == 0 ? LOOM_STEPS + 1 : 0) : LOOM_STEPS;
            for (int k = 0; k < recvs; k++)
                if (postRecv(st, ic, q) != 0)
                    return loomSetError(loomSystemError, "NET/IB: ibv_post_recv: %s",
                                        strerror(errno));
        }
    }
    if (n > 0) {
        char gid[IB_GID_STRLEN];
        ibGidFormat(st->gid.raw, gid, sizeof(gid));
        INFO(LOOM_NET,
             "NET/IB: %d connection(s) of %d queue pair(s) to rank %d on %s:%d (lid %u, gid %d %s)",
             n, st->nqps, conns[0]->peer, probeDev, probePort, st->port.lid, st->gidIndex, gid);
    }
    return loomSuccess;
}

/* ---- progress ---- */

/* A notice landed in the peer's inbox (on c, a send connection): net.c posts it. */
static void noticeArrived(struct ibState *st, struct netConn *c, uint32_t len)
{
    if (len <= NET_NOTICE_MAX_BYTES &&
        netNoticeDecode(noticeBox(st, c->peer, 0), len, &c->notice) == 0)
        c->noticeIn = 1;
}

/* A part of a message finished on queue pair q: the message, once every queue pair has it. */
static void partDone(struct ibState *st, struct ibConn *ic, int q)
{
    ic->qpDone[q]++;
    uint64_t least = ic->qpDone[0];
    for (int i = 1; i < st->nqps; i++)
        least = ic->qpDone[i] < least ? ic->qpDone[i] : least;
    ic->completed = least;
}

static void complete(struct ibState *st, const struct ibv_wc *wc)
{
    uint64_t id = wc->wr_id >> IB_WR_BITS;
    struct ibConn *ic = &st->conns[id >> IB_QP_BITS];
    int q = (int)(id & ((1u << IB_QP_BITS) - 1));
    int kind = (int)(wc->wr_id & ((1u << IB_WR_BITS) - 1));
    if (kind == IB_WR_PROBE)
        ic->probing = 0;
    if (wc->status != IBV_WC_SUCCESS) {
        ic->failed = wc->status;
        return;
    }
    if (kind == IB_WR_DATA) {
        partDone(st, ic, q);
    } else if (kind == IB_WR_CREDIT) {
        ic->creditsInFlight--;
        ic->unblocked = 1;
    } else if (kind == IB_WR_PROBE || kind == IB_WR_NOTICE) {
        /* nothing to count */
    } else if (ic->nc->isSend) { /* a credit or a notice arrived */
        if (wc->opcode == IBV_WC_RECV_RDMA_WITH_IMM)
            noticeArrived(st, ic->nc, ntohl(wc->imm_data));
        else
            ic->head = netCounterExpand(ic->head, ntohl(wc->imm_data));
        ic->unblocked = 1;
        postRecv(st, ic, q);
    } else { /* a part of a message landed; every part carries the message's size */
        uint32_t bytes = ntohl(wc->imm_data);
        if (bytes > ic->nc->slotBytes)
            ic->failed = -1;
        if (q == 0)
            ic->nc->fifo->bytes[ic->qpDone[0] % LOOM_STEPS] = bytes;
        partDone(st, ic, q);
        postRecv(st, ic, q);
    }
}

/* Takes the completions ibBeforeSleep stashed, then those on the CQ, in order. */
static void pollCq(struct ibState *st)
{
    struct ibv_wc wc[IB_CQ_BATCH];
    int n;
    for (int i = 0; i < st->nstash; i++)
        complete(st, &st->stash[i]);
    st->nstash = 0;
    while ((n = ibv_poll_cq(st->cq, IB_CQ_BATCH, wc)) > 0)
        for (int i = 0; i < n; i++)
            complete(st, &wc[i]);
}

/* Message after message, as credits allow: netSplit's part q of each on queue pair q. */
static int postWrites(struct ibState *st, struct ibConn *ic, int *moved)
{
    struct netConn *nc = ic->nc;
    uint64_t tail = atomic_load_explicit(&nc->fifo->tail, memory_order_acquire);
    for (uint64_t n = netSendable(nc->posted, tail, ic->head + LOOM_STEPS); n > 0; n--) {
        int slot = (int)(nc->posted % LOOM_STEPS);
        uint32_t bytes = (uint32_t)nc->fifo->bytes[slot];
        for (int q = 0; q < st->nqps; q++) {
            size_t off, len;
            netSplit(bytes, st->nqps, q, &off, &len);
            size_t at = (size_t)slot * nc->slotBytes + off;
            struct ibv_sge sge = {(uint64_t)(uintptr_t)(nc->slots + at), (uint32_t)len,
                                  ic->reg->lkey};
            struct ibv_send_wr wr = {.wr_id = wrId(st, ic, q, IB_WR_DATA),
                                     .sg_list = &sge,
                                     .num_sge = len ? 1 : 0,
                                     .opcode = IBV_WR_RDMA_WRITE_WITH_IMM,
                                     .send_flags = IBV_SEND_SIGNALED,
                                     .imm_data = htonl(bytes)},
                               *bad;
            wr.wr.rdma.remote_addr = ic->remoteAddr + at;
            wr.wr.rdma.rkey = ic->rkey;
            if (ibv_post_send(ic->qp[q], &wr, &bad) != 0)
                return errno;
        }
        nc->posted++;
        *moved = 1;
    }
    return 0;
}

static int postCredit(struct ibState *st, struct ibConn *ic, int *moved)
{
    uint64_t head = atomic_load_explicit(&ic->nc->fifo->head, memory_order_acquire);
    if (head == ic->head || ic->creditsInFlight >= LOOM_STEPS)
        return 0;
    struct ibv_send_wr wr = {.wr_id = wrId(st, ic, 0, IB_WR_CREDIT),
                             .num_sge = 0,
                             .opcode = IBV_WR_SEND_WITH_IMM,
                             .send_flags = IBV_SEND_SIGNALED,
                             .imm_data = htonl((uint32_t)head)},
                       *bad;
    if (ibv_post_send(ic->qp[0], &wr, &bad) != 0)
        return errno;
    ic->head = head;
    ic->creditsInFlight++;
    *moved = 1;
    return 0;
}

/*
 * A peer's death shows on InfiniBand only when something is sent to it: a
 * write to a queue pair that is gone is retried, then fails (after about
 * LOOM_IB_TIMEOUT's interval times LOOM_IB_RETRY_CNT + 1). A rank that only
 * waits to receive would sit to LOOM_TIMEOUT; so every peer's channel-0
 * send queue pair carries a zero-byte write (no immediate: the peer sees
 * nothing) every IB_PROBE_NS, and its failure marks the link lost, as a
 * closed socket does over TCP.
 */
static int postProbe(struct ibState *st, struct ibConn *ic)
{
    uint64_t now = loomClockNs();
    if (ic->probing || now - ic->probedAt < IB_PROBE_NS)
        return 0;
    struct ibv_send_wr wr = {.wr_id = wrId(st, ic, 0, IB_WR_PROBE),
                             .num_sge = 0,
                             .opcode = IBV_WR_RDMA_WRITE,
                             .send_flags = IBV_SEND_SIGNALED},
                       *bad;
    wr.wr.rdma.remote_addr = ic->remoteAddr;
    wr.wr.rdma.rkey = ic->rkey;
    if (ibv_post_send(ic->qp[0], &wr, &bad) != 0)
        return errno;
    ic->probedAt = now;
    ic->probing = 1;
    return 0;
}

/* Publishes what completed on a connection: the sender's head, the receiver's tail. */
static void ibPublish(struct ibConn *ic, int *moved)
{
    struct netConn *c = ic->nc;
    if (c == NULL || c->done >= ic->completed)
        return;
    c->done = ic->completed;
    if (c->isSend) {
        atomic_store_explicit(&c->fifo->head, c->done, memory_order_release);
    } else {
        c->posted = c->done;
        atomic_store_explicit(&c->fifo->tail, c->done, memory_order_release);
    }
    *moved = 1;
}

/* Posts what connection ic may send now: messages (send) or a credit (recv); errno or 0. */
static int post(struct ibState *st, struct ibConn *ic, int *moved)
{
    ic->unblocked = 0;
    return ic->nc->isSend ? postWrites(st, ic, moved) : postCredit(st, ic, moved);
}

/*
 * The completions taken here are every connection's (one CQ), taken by the
 * proxy or by the executor (netKick, for c): so all are published here, and
 * a connection a completion unblocked (a credit came, or a credit send
 * finished) posts too, not only c. Otherwise they would wait for the
 * proxy's next pass, which a completion already taken does not bring.
 */
static loomResult_t ibProgress(void *state, struct netConn *c, int *moved)
{
    struct ibState *st = state;
    struct ibConn *ic = c->priv;
    pollCq(st);
    int err = post(st, ic, moved);
    if (err == 0 && !ic->failed && c->isSend && c->channel == 0)
        err = postProbe(st, ic);
    for (int i = 0; i < st->nconns; i++) {
        struct ibConn *other = &st->conns[i];
        if (other->unblocked && other->postErr == 0)
            other->postErr = post(st, other, moved);
        ibPublish(other, moved);
    }
    err = err ? err : ic->postErr;
    if (ic->failed || err) {
        snprintf(c->why, sizeof(c->why), "NET/IB: %s rank %d (channel %d): %s",
                 c->isSend ? "sending to" : "receiving from", c->peer, c->channel,
                 ic->failed > 0   ? ibv_wc_status_str((enum ibv_wc_status)ic->failed)
                 : ic->failed < 0 ? "a message larger than a slot"
                                  : strerror(err));
        return loomRemoteError;
    }
    return loomSuccess;
}

/*
 * Arms the completion channel, unless completions are waiting (they would
 * not wake us). The proxy alone takes the channel's events, here, right
 * before it sleeps: were the executor to take one (it drains the CQ too),
 * the channel's descriptor could turn unready between the event and the
 * proxy's epoll_wait, which then reports nothing, and the proxy would sleep
 * to its 100 ms cap with completions waiting (docs/performance.md has the
 * counts before and after).
 */
static int ibBeforeSleep(void *state)
{
    struct ibState *st = state;
    struct ibv_cq *evCq;
    void *evCtx;
    unsigned events = 0;
    if (st->cq == NULL)
        return 0;
    if (st->nstash > 0)
        return -1;
    while (ibv_get_cq_event(st->channel, &evCq, &evCtx) == 0)
        events++;
    if (events > 0)
        ibv_ack_cq_events(st->cq, events);
    if (ibv_req_notify_cq(st->cq, 0) != 0)
        return -1;
    /* A completion that came before the arming would not wake us: look once more. */
    int n = ibv_poll_cq(st->cq, IB_STASH, st->stash);
    if (n > 0) {
        st->nstash = n;
        return -1;
    }
    return 0;
}

/*
 * A failure notice to the peer of c (a recv connection): an RDMA write with
 * immediate (its length) into the inbox the peer's send connection named in
 * its record; its arrival on that queue pair tells it from a credit.
 */
static void ibNotify(void *state, struct netConn *c, const uint8_t *msg, size_t len)
{
    struct ibState *st = state;
    struct ibConn *ic = c->priv;
    if (ic == NULL || ic->qp[0] == NULL || ic->remoteAddr == 0 || len > NET_NOTICE_MAX_BYTES)
        return;
    uint8_t *out = noticeBox(st, c->peer, 1);
    memcpy(out, msg, len);
    struct ibv_sge sge = {(uint64_t)(uintptr_t)out, (uint32_t)len, st->noticeMr->lkey};
    struct ibv_send_wr wr = {.wr_id = wrId(st, ic, 0, IB_WR_NOTICE),
                             .sg_list = &sge,
                             .num_sge = 1,
                             .opcode = IBV_WR_RDMA_WRITE_WITH_IMM,
                             .send_flags = IBV_SEND_SIGNALED,
                             .imm_data = htonl((uint32_t)len)},
                       *bad;
    wr.wr.rdma.remote_addr = ic->remoteAddr;
    wr.wr.rdma.rkey = ic->rkey;
    if (ibv_post_send(ic->qp[0], &wr, &bad) != 0)
        WARN("NET/IB: cannot send a failure notice to rank %d: %s", c->peer, strerror(errno));
}

/* Notices are taken with the completions (noticeArrived); take those waiting now. */
static void ibPollNotice(void *state, struct netConn *c)
{
    (void)c;
    pollCq(state);
}

static void ibAttach(void *state, struct loomProxy *proxy)
{
    struct ibState *st = state;
    if (st->channel == NULL || st->watched)
        return;
    if (proxyWatch(proxy, st->channel->fd) == loomSuccess)
        st->watched = 1;
    else
        WARN("%s; InfiniBand completions are looked at only when something else wakes the proxy",
             debugLastError(NULL));
}

const struct netBackend netIbBackend = {
    .name = "ib",
    .init = ibInit,
    .recordBytes = ibRecordBytes,
    .connectStart = ibConnectStart,
    .connectFinish = ibConnectFinish,
    .progress = ibProgress,
    .beforeSleep = ibBeforeSleep,
    .attach = ibAttach,
    .teardown = ibTeardown,
    .notify = ibNotify,
    .pollNotice = ibPollNotice,
};
