/*
 * cma.c — single-copy collectives between the processes of one host, with
 * cross-memory attach (process_vm_readv / process_vm_writev).
 *
 * The FIFO path (exec.c over transports/shm.c) copies every byte twice: into
 * a slot of the receiver's segment, and out of it. With cross-memory attach a
 * rank reads a peer's user buffer straight into its own, or writes its own
 * into the peer's, in one copy done by the kernel. AlltoAll and AllGather
 * do so as schedules (OFFER, PULL and DRAIN steps, algorithms/direct.c; the
 * PULL's read is cmaRead below), which the tuner weighs like any other. For
 * the other collectives: when every rank of a
 * communicator sits on this host and the kernel lets every rank reach every
 * other, a collective of at least LOOM_CMA_MIN_BYTES (the size loom-perf
 * prints: the largest buffer), alone in its plan (not in a group), on host
 * buffers, runs here instead of as a schedule when LOOM_ALGO names "cma"
 * (the tuner's LOOM_ALGO_CMA; off by default: measured on the 2-core
 * development machine the FIFOs, whose slots stay in cache, beat these page
 * pinning copies about 2x for AllReduce from 2 MiB to 64 MiB on 2 ranks, and
 * for Broadcast and Reduce; single copies won only under heavy load):
 *
 *   1. the ranks exchange their buffer addresses (a Send to and a Recv from
 *      every peer over the FIFOs, so waiting, abort, timeouts and dead peers
 *      are handled as for any call; see cmaExchange);
 *   2. each rank moves its share:
 *      AllReduce      rank i reduces slice i of the vector (1/n): reads the
 *                     peers' slices chunk by chunk into a scratch buffer the
 *                     size of a chunk, reduces into its own recvbuff, and
 *                     writes the reduced chunk into every peer's recvbuff;
 *      ReduceScatter  rank i reduces its own block, reading the peers' blocks;
 *      Reduce         as AllReduce, but each reduced chunk goes to the root only;
 *      Broadcast      every rank reads the root's sendbuff;
 *   3. the ranks exchange their status, which is also the barrier that keeps
 *      a rank from returning (and its caller from reusing its buffers) while a
 *      peer still reads or writes them.
 * Every element of a result is written by exactly one rank, and no rank reads
 * memory another writes in the same call, in place included (NCCL's layout:
 * ReduceScatter's recvbuff at rank*recvcount of sendbuff). Each
 * AllReduce slice is reduced by one rank in one order, so all ranks get
 * bit-identical results.
 *
 * Whether the kernel allows it is found at connect (cmaSetup): each rank
 * reads and writes back a random word of every peer. Yama's ptrace_scope >= 1,
 * a seccomp filter, other users or PID namespaces make that fail (EPERM,
 * ENOSYS, ESRCH, or a word that does not match), and then the ranks agree to
 * use the FIFO path, as they do when any rank sets LOOM_CMA_DISABLE=1.
 * LOOM_CMA_MIN_BYTES is agreed the same way: the largest any rank set.
 */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/uio.h>
#include <unistd.h>

#include "bootstrap.h"
#include "cma.h"
#include "debug.h"
#include "exec.h"
#include "mem.h"
#include "param.h"
#include "reduce.h"
#include "tuner.h"

/* Elements are reduced in chunks this big, which stay in the L2 cache. */
#define CMA_CHUNK (128 * 1024)

/* What a rank tells the others at the start and at the end of a call. */
struct cmaDesc {
    struct loomOffer send, recv; /* the buffers, and the loomMemAlloc blocks holding them */
    int32_t status;              /* 0, or the errno of a failed copy */
    int32_t peer;                /* the peer that copy was with */
    int32_t mode;                /* cmaEligible's answer: ranks that differ fail the call */
};

struct cmaState {
    struct cmaDesc *all;   /* [nranks] */
    const char **sendView; /* [nranks]: peers' send buffers mapped here (mem.c), or NULL */
    char **recvView;       /* [nranks]: peers' receive buffers mapped for writing, or NULL */
    char *scratch;         /* 2 x CMA_CHUNK: a peer's chunk, and a chunk reduced for the root */
    struct loomPlan xplan; /* the descriptor exchange (cmaExchange) */
    size_t minBytes;
};

static loomResult_t cmaExchangePlan(const struct loomComm *comm, struct loomPlan *out);

/* ---- probe ---- */

static uint64_t cmaProbeWord;
static pthread_once_t cmaProbeOnce = PTHREAD_ONCE_INIT;

static void cmaProbeInit(void)
{
    uint64_t r;
    if (getrandom(&r, sizeof(r), 0) != sizeof(r))
        r = loomClockNs() ^ ((uint64_t)getpid() << 32);
    cmaProbeWord = r | 1;
}

struct cmaHello {
    uint64_t addr, nonce;
    uint64_t minBytes; /* this rank's LOOM_CMA_MIN_BYTES */
    int32_t ok, pad;
};

/* 0 if this process may read and write `peer`'s probe word, else an errno. */
static int cmaProbePeer(const struct loomComm *comm, int peer, const struct cmaHello *h)
{
    uint64_t v = 0;
    struct iovec local = {&v, sizeof(v)}, remote = {(void *)(uintptr_t)h->addr, sizeof(v)};
    if (process_vm_readv(comm->peers[peer].pid, &local, 1, &remote, 1, 0) != sizeof(v))
        return errno ? errno : EIO;
    if (v != h->nonce)
        return ESRCH; /* another process under that pid: a PID namespace between us */
    if (process_vm_writev(comm->peers[peer].pid, &local, 1, &remote, 1, 0) != sizeof(v))
        return errno ? errno : EIO;
    return 0;
}

loomResult_t cmaSetup(struct loomComm *comm, int present)
{
    int n = comm->nranks, me = comm->rank;
    const char *why = "";
    int err = 0, bad = -1;
    comm->cmaOk = 0;
    struct cmaHello *h = calloc((size_t)n, sizeof(*h));
    if (h == NULL)
        return loomSetError(loomSystemError, "out of memory probing cross-memory attach");
    int want = present && n > 1 && comm->localSize == n;
    if (paramInt(LOOM_PARAM_CMA_DISABLE))
        want = 0, why = "LOOM_CMA_DISABLE=1";
    else if (!want)
        why = "not all ranks share memory on this host";
    else if (comm->slotBytes < sizeof(struct cmaDesc)) /* the exchange's messages are not cut */
        want = 0, why = "FIFO slots smaller than a buffer descriptor (LOOM_BUFFSIZE)";
    if (want) {
        pthread_once(&cmaProbeOnce, cmaProbeInit);
        h[me].addr = (uintptr_t)&cmaProbeWord;
        h[me].nonce = cmaProbeWord;
    }
    loomResult_t res = bootstrapAllGather(comm->bootstrap, h, sizeof(*h));
    if (res != loomSuccess)
        goto out;
    for (int p = 0; want && p < n; p++) {
        if (p == me)
            continue;
        if (h[p].addr == 0) {
            want = 0, why = "another rank does not use it";
            break;
        }
        err = cmaProbePeer(comm, p, &h[p]);
        if (err != 0) {
            want = 0, bad = p;
            break;
        }
    }
    struct cmaState *st = NULL;
    if (want) {
        st = calloc(1, sizeof(*st));
        if (st == NULL || (st->all = calloc((size_t)n, sizeof(*st->all))) == NULL ||
            (st->sendView = calloc((size_t)n, sizeof(*st->sendView))) == NULL ||
            (st->recvView = calloc((size_t)n, sizeof(*st->recvView))) == NULL ||
            (st->scratch = malloc(2 * CMA_CHUNK)) == NULL)
            want = 0, why = "out of memory";
        else if (cmaExchangePlan(comm, &st->xplan) != loomSuccess)
            want = 0, why = "out of memory";
    }
    int mine = want;
    memset(h, 0, (size_t)n * sizeof(*h));
    h[me].ok = mine;
    h[me].minBytes = (uint64_t)paramInt(LOOM_PARAM_CMA_MIN_BYTES);
    res = bootstrapAllGather(comm->bootstrap, h, sizeof(*h));
    /* The largest any rank set: ranks that differ would otherwise choose differently. */
    comm->cmaMinBytes = 0;
    for (int p = 0; res == loomSuccess && p < n; p++) {
        if (h[p].minBytes > comm->cmaMinBytes)
            comm->cmaMinBytes = (size_t)h[p].minBytes;
        if (!h[p].ok) {
            if (mine)
                why = "another rank cannot use it";
            want = 0;
        }
    }
    if (res == loomSuccess && want) {
        st->minBytes = comm->cmaMinBytes;
        comm->cma = st;
        comm->cmaOk = 1;
        st = NULL;
        INFO(LOOM_SHM,
             "cma: single-copy collectives possible from %zu bytes (process_vm_readv/writev); "
             "AlltoAll's where the tuner picks them, the others' where LOOM_ALGO names cma",
             comm->cma->minBytes);
    } else if (bad >= 0) {
        INFO(LOOM_SHM, "cma: off, rank %d cannot reach rank %d (pid %d): %s; FIFO copies only", me,
             bad, (int)comm->peers[bad].pid, debugErrnoText(err));
    } else {
        INFO(LOOM_SHM, "cma: off (%s); FIFO copies only", why);
    }
    if (st) {
        free(st->all);
        free(st->sendView);
        free(st->recvView);
        planFree(&st->xplan);
        free(st->scratch);
        free(st);
    }
out:
    free(h);
    return res;
}

void cmaTeardown(struct loomComm *comm)
{
    struct cmaState *st = comm->cma;
    comm->cmaOk = 0;
    if (st == NULL)
        return;
    free(st->all);
    free(st->sendView);
    free(st->recvView);
    planFree(&st->xplan);
    free(st->scratch);
    free(st);
    comm->cma = NULL;
}

/* ---- one call ---- */

/* The bytes of a rank's send buffer, of its receive buffer, and the call's size (loom-perf's). */
static size_t sendBytes(const struct loomOp *op)
{
    size_t b = op->count * reduceTypeSize(op->dt);
    return op->coll == LOOM_COLL_REDUCESCATTER ? b * (size_t)op->comm->nranks : b;
}

static size_t recvBytes(const struct loomOp *op)
{
    size_t b = op->count * reduceTypeSize(op->dt);
    return op->coll == LOOM_COLL_ALLGATHER ? b * (size_t)op->comm->nranks : b;
}

static size_t opBytes(const struct loomOp *op)
{
    size_t s = sendBytes(op), r = recvBytes(op);
    return s > r ? s : r;
}

/*
 * Finding out whether every rank passes loomMemAlloc buffers costs an
 * exchange of descriptors, a barrier, in every call that may qualify, and
 * most calls do not. With a core for each rank that is a few microseconds
 * (2 ranks, 512 KiB AllReduce on malloc'd buffers, medians of 9 interleaved
 * runs: 65.8 us with it, 64.6 without). Where ranks share cores it costs
 * far more, since it stops the ranks' calls from overlapping: 1 MiB at 4
 * ranks 290 against 270 us, 2 MiB at 8 ranks 2.69 against 2.25 ms. So the
 * ranks ask only where each has a core of its own (the most crowded host,
 * agreed at init); elsewhere LOOM_ALGO naming cma turns single copies on,
 * and with loomMemAlloc buffers they then go through the mappings too.
 * And only from CMA_ASK_MIN_BYTES: below it the exchange cost more than the
 * mappings saved for ordinary buffers (2 ranks, Broadcast of 256 KiB: 18 us
 * a call without asking, 32 us asking; docs/performance.md, 2026-12-03).
 */
#define CMA_ASK_MIN_BYTES (512 * 1024)

static int cmaAsk(const struct loomOp *op)
{
    const struct loomComm *comm = op->comm;
    return opBytes(op) >= CMA_ASK_MIN_BYTES && comm->tuneLocalRanks <= comm->tuneCpus &&
           tunerZeroCopy(op->coll);
}

int cmaEligible(const struct loomOp *op)
{
    const struct loomComm *comm = op->comm;
    if (!comm->cmaOk || op->count == 0 || opBytes(op) < comm->cma->minBytes)
        return CMA_NO;
    switch (op->coll) {
    case LOOM_COLL_ALLREDUCE:
    case LOOM_COLL_REDUCESCATTER:
    case LOOM_COLL_BROADCAST:
    case LOOM_COLL_REDUCE:
        if (tunerAllows(op->coll, LOOM_ALGO_CMA))
            return CMA_ASKED;
        return cmaAsk(op) ? CMA_IF_MAPPED : CMA_NO;
    case LOOM_COLL_ALLGATHER: /* named in LOOM_ALGO: its schedule (algorithms/direct.c) */
        return !tunerAllows(op->coll, LOOM_ALGO_CMA) && cmaAsk(op) ? CMA_IF_MAPPED : CMA_NO;
    default:
        return CMA_NO;
    }
}

/* Whether the call reads rank p's send buffer, and writes its receive buffer, from elsewhere. */
static void cmaUses(const struct loomOp *op, int p, int *send, int *recv)
{
    *send = 1, *recv = 0;
    switch (op->coll) {
    case LOOM_COLL_ALLREDUCE:
        *recv = 1;
        break;
    case LOOM_COLL_BROADCAST:
        *send = p == op->root;
        break;
    case LOOM_COLL_REDUCE:
        *recv = p == op->root;
        break;
    default: /* ReduceScatter, AllGather: every send buffer, and each its own recv */
        break;
    }
}

/*
 * 1 if every buffer the call reads or writes on another rank is loomMemAlloc
 * memory (the descriptors of all ranks say so, so every rank finds the same).
 */
static int cmaAllMapped(const struct loomOp *op, const struct cmaDesc *all)
{
    for (int p = 0; p < op->comm->nranks; p++) {
        int send, recv;
        cmaUses(op, p, &send, &recv);
        if ((send && all[p].send.memFd < 0) || (recv && all[p].recv.memFd < 0))
            return 0;
    }
    return 1;
}

/* Copies bytes between this process and `pid`: from there (write 0) or to there (write 1). */
static int cmaMove(pid_t pid, int write, char *local, uint64_t remote, size_t bytes)
{
    while (bytes > 0) {
        struct iovec l = {local, bytes}, r = {(void *)(uintptr_t)remote, bytes};
        ssize_t got = write ? process_vm_writev(pid, &l, 1, &r, 1, 0)
                            : process_vm_readv(pid, &l, 1, &r, 1, 0);
        if (got < 0 && errno == EINTR)
            continue;
        if (got <= 0)
            return got < 0 ? errno : EFAULT;
        local += got, remote += (uint64_t)got, bytes -= (size_t)got;
    }
    return 0;
}

int cmaRead(pid_t pid, void *local, uint64_t remote, size_t bytes)
{
    int err = cmaMove(pid, 0, local, remote, bytes);
    if (err && kill(pid, 0) != 0 && errno == ESRCH)
        err = ESRCH; /* the peer is gone, whatever the copy said */
    return err;
}

struct cmaCall {
    struct loomComm *comm;
    const struct loomOp *op;
    const char *send; /* this rank's send buffer */
    char *recv;
    size_t es;
    int failPeer;
};

static int cmaPeerMove(struct cmaCall *c, int p, int write, char *local, uint64_t remote,
                       size_t bytes)
{
    pid_t pid = c->comm->peers[p].pid;
    int err = cmaMove(pid, write, local, remote, bytes);
    if (err) {
        c->failPeer = p;
        if (kill(pid, 0) != 0 && errno == ESRCH)
            err = ESRCH; /* the peer is gone, whatever the copy said */
    }
    return err;
}

/*
 * Reduces elements [off, off + count) of all ranks' send buffers, a chunk at
 * a time. Each reduced chunk lands at `acc` (+ its offset in the range), or,
 * when acc is NULL, in scratch, and is then written to the recv buffer of
 * every peer (toAll) or of `root` (root >= 0, not this rank), at `off`.
 */
static int cmaReduceRange(struct cmaCall *c, size_t off, size_t count, char *acc, int toAll,
                          int root)
{
    struct loomComm *comm = c->comm;
    struct cmaState *st = comm->cma;
    const struct loomOp *op = c->op;
    int n = comm->nranks, me = comm->rank;
    size_t es = c->es, step = CMA_CHUNK / es;
    char *in = st->scratch;
    for (size_t done = 0; done < count; done += step) {
        size_t m = count - done < step ? count - done : step, pos = (off + done) * es;
        char *dst = acc ? acc + done * es : st->scratch + CMA_CHUNK;
        for (int k = 1; k < n; k++) {
            int p = (me + k) % n;
            const char *b = st->sendView[p] ? st->sendView[p] + pos : in; /* mapped: no copy */
            int err = b == in ? cmaPeerMove(c, p, 0, in, st->all[p].send.addr + pos, m * es) : 0;
            if (err)
                return err;
            const char *a = k == 1 ? c->send + pos : dst;
            if (k == n - 1)
                reduceApplyFinal(dst, a, b, m, op->dt, op->op, n);
            else
                reduceApply(dst, a, b, m, op->dt, op->op);
        }
        for (int k = 1; k < n; k++) {
            int p = (me + k) % n;
            if (!toAll && p != root)
                continue;
            int err = 0;
            if (st->recvView[p])
                reduceCopy(st->recvView[p] + pos, dst, m * es);
            else
                err = cmaPeerMove(c, p, 1, dst, st->all[p].recv.addr + pos, m * es);
            if (err)
                return err;
        }
    }
    return 0;
}

/* This rank's part of the call; 0 or the errno of a failed copy (c->failPeer says with whom). */
static int cmaMoveShare(struct cmaCall *c)
{
    const struct loomOp *op = c->op;
    struct cmaState *st = c->comm->cma;
    int n = c->comm->nranks, me = c->comm->rank;
    size_t es = c->es, cnt = op->count, blk = cnt * es;
    size_t lo = cnt * (size_t)me / (size_t)n, hi = cnt * (size_t)(me + 1) / (size_t)n;

    switch (op->coll) {
    case LOOM_COLL_ALLREDUCE:
        return cmaReduceRange(c, lo, hi - lo, c->recv + lo * es, 1, -1);
    case LOOM_COLL_REDUCE:
        return cmaReduceRange(c, lo, hi - lo, me == op->root ? c->recv + lo * es : NULL, 0,
                              op->root);
    case LOOM_COLL_REDUCESCATTER:
        /* Block `me` of every send buffer; the (in-place) recv buffer is this rank's own. */
        return cmaReduceRange(c, (size_t)me * cnt, cnt, c->recv, 0, -1);
    case LOOM_COLL_ALLGATHER: {
        char *own = c->recv + (size_t)me * blk;
        if (own != c->send)
            memcpy(own, c->send, blk);
        for (int k = 1; k < n; k++) {
            int p = (me + k) % n, err = 0;
            if (st->sendView[p])
                reduceCopyStream(c->recv + (size_t)p * blk, st->sendView[p], blk);
            else
                err = cmaPeerMove(c, p, 0, c->recv + (size_t)p * blk, st->all[p].send.addr, blk);
            if (err)
                return err;
        }
        return 0;
    }
    case LOOM_COLL_BROADCAST:
        if (me != op->root) {
            if (st->sendView[op->root] == NULL)
                return cmaPeerMove(c, op->root, 0, c->recv, st->all[op->root].send.addr, blk);
            reduceCopyStream(c->recv, st->sendView[op->root], blk);
            return 0;
        }
        if (c->send != c->recv)
            memcpy(c->recv, c->send, blk);
        return 0;
    default:
        return EINVAL;
    }
}

/*
 * The plan of the descriptor exchange (cmaExchange), the same for every
 * call: every Send first (each to its own FIFO; one message a call, so a
 * free slot is never far), then every Recv, in rank order. Each message is
 * one slot (cmaSetup checks that a descriptor fits).
 */
static loomResult_t cmaExchangePlan(const struct loomComm *comm, struct loomPlan *out)
{
    int n = comm->nranks, me = comm->rank;
    loomResult_t res = loomSuccess;
    planLoop(out);
    for (int dir = 0; dir < 2; dir++) {
        for (int p = 0; p < n && res == loomSuccess; p++) {
            if (p == me)
                continue;
            struct loomPlanStep t = {.op = dir == 0 ? LOOM_STEP_SEND : LOOM_STEP_RECV,
                                     .srcBuf = LOOM_BUF_SEND,
                                     .dstBuf = LOOM_BUF_RECV,
                                     .nrecv = dir == 1,
                                     .nsend = dir == 0,
                                     .recvPeers = {p},
                                     .sendPeers = {p},
                                     .nblocks = 1,
                                     .len = sizeof(struct cmaDesc),
                                     .dstBase = dir == 0 ? 0 : (size_t)p * sizeof(struct cmaDesc)};
            res = planAppend(out, &t);
        }
    }
    return res;
}

/*
 * Gives every rank every rank's descriptor (into comm->cma->all), over the
 * FIFOs: one Send to and one Recv from each peer. Nothing is forwarded, so the
 * exchange ends as soon as the last rank has arrived and sent: it is also
 * the barrier. (A ring AllGather here took 1.2-1.5 ms of a 4.5 ms AlltoAll
 * at 4 ranks on 2 cores: each of its n - 1 forwarding hops waited for a
 * rank that shared its core with one still copying.)
 */
static loomResult_t cmaExchange(struct loomComm *comm, struct cmaDesc *mine)
{
    struct cmaState *st = comm->cma;
    st->all[comm->rank] = *mine;
    /* Run as a lane of its own, not through the planner, so the exchange neither touches
     * the schedule cache nor spoils the memo of the call's schedule when it falls back to
     * one (CMA_IF_MAPPED declined). */
    struct loomLane lane = {.comm = comm,
                            .channel = 0,
                            .plan = &st->xplan,
                            .bufs = {(char *)mine, (char *)st->all},
                            .dt = loomUint8,
                            .op = loomSum,
                            .elemSize = 1};
    return execRun(&lane, 1, NULL);
}

loomResult_t cmaRun(struct loomOp *op, int mode, int *declined)
{
    struct loomComm *comm = op->comm;
    struct cmaState *st = comm->cma;
    struct cmaCall c = {comm, op, op->sendbuff, op->recvbuff, reduceTypeSize(op->dt), -1};
    struct cmaDesc mine = {.status = 0, .peer = -1, .mode = mode};
    memOfferFill(c.send, sendBytes(op), &mine.send);
    memOfferFill(c.recv, recvBytes(op), &mine.recv);
    mine.recv.memGen = mine.send.memGen; /* one count: a free in between changes nothing here */
    TRACE(LOOM_COLL, "cma: coll %d count %zu", (int)op->coll, op->count);
    *declined = 0;
    LOOMCHECK(cmaExchange(comm, &mine));
    for (int p = 0; p < comm->nranks; p++) {
        if (st->all[p].mode != mode)
            return loomSetError(loomInvalidUsage,
                                "ranks %d and %d were told different things about single copies "
                                "for one call (LOOM_ALGO names cma on rank %d only): LOOM_ALGO "
                                "must be equal on every rank",
                                comm->rank, p, mode == CMA_ASKED ? comm->rank : p);
        if (p != comm->rank) /* before any view is taken: none is dropped while in use */
            memPeerSeen(comm, p, st->all[p].send.memGen);
    }
    int mapped = cmaAllMapped(op, st->all);
    if (mode == CMA_IF_MAPPED && !mapped) {
        *declined = 1; /* every rank sees the same descriptors: all decline */
        return loomSuccess;
    }
    tunerLogCma(comm, op->coll, opBytes(op), mapped);
    for (int p = 0; p < comm->nranks; p++) {
        int send, recv, peer = p != comm->rank;
        cmaUses(op, p, &send, &recv);
        st->sendView[p] =
            peer && send ? memPeerView(comm, p, &st->all[p].send, sendBytes(op), 0) : NULL;
        st->recvView[p] =
            peer && recv ? memPeerView(comm, p, &st->all[p].recv, recvBytes(op), 1) : NULL;
    }
    mine.status = cmaMoveShare(&c);
    mine.peer = c.failPeer;
    LOOMCHECK(cmaExchange(comm, &mine));
    for (int p = 0; p < comm->nranks; p++) {
        const struct cmaDesc *d = &st->all[p];
        if (d->status == 0)
            continue;
        if (d->status == ESRCH) { /* the peer exited in the middle: as a dead peer on the FIFOs */
            loomSetError(loomRemoteError,
                         "rank %d (pid %d on %s) exited while rank %d copied data "
                         "with it",
                         d->peer, d->peer >= 0 ? (int)comm->peers[d->peer].pid : -1,
                         d->peer >= 0 ? comm->peers[d->peer].hostname : "?", p);
            commSetBroken(comm, loomRemoteError, debugLastError(NULL));
            return loomRemoteError;
        }
        return loomSetError(loomSystemError,
                            "rank %d could not reach rank %d's memory (pid %d) in a single-copy "
                            "collective: %s; the buffers passed may be invalid "
                            "(LOOM_CMA_DISABLE=1 turns single copies off)",
                            p, d->peer, d->peer >= 0 ? (int)comm->peers[d->peer].pid : -1,
                            debugErrnoText(d->status));
    }
    return loomSuccess;
}
