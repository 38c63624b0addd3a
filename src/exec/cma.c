/*
 * cma.c — what single copies between the processes of one host need besides
 * their schedules (algorithms/single.c, run by exec.c): whether the kernel
 * lets the ranks reach each other's memory (cross-memory attach,
 * process_vm_readv), the read and the write, the staging buffer of a PULL_REDUCE,
 * and, for calls whose single copies go through loomMemAlloc mappings, the
 * ranks' agreement that every buffer is such memory.
 *
 * The FIFO path (exec.c over transports/shm.c) copies every byte twice: into
 * a slot of the receiver's segment, and out of it. With cross-memory attach a
 * rank reads a peer's user buffer straight into its own in one copy done by
 * the kernel, or, where the peer's buffer is loomMemAlloc memory, through a
 * mapping of it with plain loads (src/exec/mem.c). The single-copy schedules
 * (LOOM_ALGO_CMA) are weighed by the tuner for AlltoAll, AllGather and
 * AllReduce and taken for the others where LOOM_ALGO names cma; and, unasked, for
 * AllReduce, ReduceScatter, AllGather, Broadcast and Reduce of ungrouped
 * host calls where every rank passes loomMemAlloc buffers (where the tuner
 * says to ask, tunerAsksMapped: the ranks exchange their buffers'
 * descriptors first, a lane cmaMappedLane builds and the planner runs, and
 * cmaAllMapped reads the answer).
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

/* What a rank tells the others before a call that may run through mappings (cmaMappedLane). */
struct cmaDesc {
    struct loomOffer send, recv; /* the buffers, and the loomMemAlloc blocks holding them */
};

struct cmaState {
    struct cmaDesc mine;   /* this rank's, sent by the exchange (cmaMappedLane) */
    struct cmaDesc *all;   /* [nranks] */
    char *stage;           /* comm->slotBytes: a peer's piece on its way into a PULL_REDUCE */
    struct loomPlan xplan; /* the descriptor exchange (cmaMappedLane) */
    size_t minBytes;
};

static loomResult_t cmaExchangePlan(const struct loomComm *comm, struct loomPlan *out);

static void cmaStateFree(struct cmaState *st)
{
    if (st == NULL)
        return;
    free(st->all);
    free(st->stage);
    planFree(&st->xplan);
    free(st);
}

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
            (st->stage = malloc(comm->slotBytes)) == NULL)
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
             "AlltoAll's and AllGather's where the tuner picks them, the others' where LOOM_ALGO "
             "names cma or every buffer is loomMemAlloc memory",
             comm->cma->minBytes);
    } else if (bad >= 0) {
        INFO(LOOM_SHM, "cma: off, rank %d cannot reach rank %d (pid %d): %s; FIFO copies only", me,
             bad, (int)comm->peers[bad].pid, debugErrnoText(err));
    } else {
        INFO(LOOM_SHM, "cma: off (%s); FIFO copies only", why);
    }
    cmaStateFree(st);
out:
    free(h);
    return res;
}

void cmaTeardown(struct loomComm *comm)
{
    cmaStateFree(comm->cma);
    comm->cmaOk = 0;
    comm->cma = NULL;
}

char *cmaStage(const struct loomComm *comm)
{
    return comm->cma->stage;
}

/* ---- one call ---- */

/* Whether the call's single copies read rank p's send buffer, and its receive buffer. */
static void cmaUses(const struct loomOp *op, int p, int *send, int *recv)
{
    *send = 1, *recv = 0;
    switch (op->coll) {
    case LOOM_COLL_ALLREDUCE: /* its slice of the send buffer read, the others' written */
        *recv = 1;
        break;
    case LOOM_COLL_BROADCAST:
        *send = p == op->root;
        break;
    case LOOM_COLL_REDUCE: /* every send buffer read, the root's receive buffer written */
        *recv = p == op->root;
        break;
    default: /* ReduceScatter, AllGather: every send buffer */
        break;
    }
}

/* Copies bytes between this process and `pid`: from there (write 0) or to there (write 1). */
static int cmaMove(pid_t pid, int write, char *local, uint64_t remote, size_t bytes)
{
    int err = 0;
    while (bytes > 0) {
        struct iovec l = {local, bytes}, r = {(void *)(uintptr_t)remote, bytes};
        ssize_t got = write ? process_vm_writev(pid, &l, 1, &r, 1, 0)
                            : process_vm_readv(pid, &l, 1, &r, 1, 0);
        if (got < 0 && errno == EINTR)
            continue;
        if (got <= 0) {
            err = got < 0 ? errno : EFAULT;
            break;
        }
        local += got, remote += (uint64_t)got, bytes -= (size_t)got;
    }
    if (err && kill(pid, 0) != 0 && errno == ESRCH)
        err = ESRCH; /* the peer is gone, whatever the copy said */
    return err;
}

int cmaRead(pid_t pid, void *local, uint64_t remote, size_t bytes)
{
    return cmaMove(pid, 0, local, remote, bytes);
}

int cmaWrite(pid_t pid, const void *local, uint64_t remote, size_t bytes)
{
    return cmaMove(pid, 1, (char *)(uintptr_t)local, remote, bytes);
}

/*
 * The plan of the descriptor exchange (cmaMappedLane), the same for every
 * call: every Send first (each to its own FIFO; one message a call, so a
 * free slot is never far), then every Recv, in rank order. Each message is
 * one slot (cmaSetup checks that a descriptor fits). Nothing is forwarded,
 * so the exchange ends as soon as the last rank has arrived and sent. (A
 * ring AllGather here took, each time, about a third of an AlltoAll where
 * ranks share cores: each of its n - 1 forwarding hops waited for a rank
 * that shared its core with one still copying; docs/performance.md,
 * "single copies: the exchanges around the copies".)
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

void cmaMappedLane(struct loomOp *op, struct loomLane *lane)
{
    struct loomComm *comm = op->comm;
    struct cmaState *st = comm->cma;
    size_t elem = op->count * reduceTypeSize(op->dt);
    memOfferFill(op->sendbuff, elem * opSendBlocks(op), &st->mine.send);
    memOfferFill(op->recvbuff, elem * opRecvBlocks(op), &st->mine.recv);
    st->all[comm->rank] = st->mine;
    *lane = (struct loomLane){.comm = comm,
                              .channel = 0,
                              .plan = &st->xplan,
                              .bufs = {(char *)&st->mine, (char *)st->all},
                              .dt = loomUint8,
                              .op = loomSum,
                              .elemSize = 1};
}

int cmaAllMapped(const struct loomOp *op)
{
    const struct cmaState *st = op->comm->cma;
    for (int p = 0; p < op->comm->nranks; p++) {
        int send, recv;
        cmaUses(op, p, &send, &recv);
        /* Every rank looks at every descriptor, its own too, so all decide alike. */
        if ((send && st->all[p].send.memFd < 0) || (recv && st->all[p].recv.memFd < 0))
            return 0;
    }
    return 1;
}
