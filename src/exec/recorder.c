/*
 * recorder.c — the flight recorder's writer: every rank notes each
 * operation of a communicator in a ring of REC_RING entries in a segment
 * other processes of the host can read (the format is in recorder.h).
 * The planner writes it (begin, chose, end) and so do the executors' waits
 * and failures (execfail.c), so it lives with the executors, a layer below
 * the core, and needs nothing of the core; so does its reader, recstatus.c.
 *
 * The call path (recorderBegin, recorderChose, recorderEnd) takes no lock,
 * makes no system call but the vDSO's coarse clock, and allocates nothing: it
 * writes one 88-byte entry in memory mapped at init. The wait's peer and
 * step are noted only by a wait that already slept (execWaitFailure), so
 * a call that does not wait pays nothing for them.
 *
 * The rank's status listener (bootstrap.h, opened before the peer exchange
 * so that every rank knows every other's address) starts with the
 * recorder: its thread answers a query with recWireEncode's copy of the
 * segment, and stops before the segment is unmapped.
 *
 * On a failure (recorderFailed, from execMarkBroken) the running entries
 * end failed, LOOM_DUMP_DIR gets the rank's recorder as JSON, and a rank
 * that found the timeout itself prints the status of the job's ranks on
 * this host through the logger, once.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "bootstrap.h"
#include "core.h"
#include "debug.h"
#include "op.h"
#include "param.h"
#include "recorder.h"
#include "recstatus.h"
#include "reduce.h"
#include "schedule.h"

struct loomRecorder {
    struct recHeader *h;
    struct recEntry *ring;
    size_t bytes;
    int fd;
    uint64_t collSeq, p2pSeq; /* written by the thread running the comm's calls */
    atomic_int reported;      /* the failure was dumped and told */
};

/*
 * The coarse clock (the last tick): a few nanoseconds where the precise one
 * costs far more on a virtual machine, twice a call (docs/performance.md,
 * "The flight recorder's cost"). The
 * recorder tells where a job hangs and since when, not how long a call
 * took (loom-perf does that).
 */
static uint64_t recNow(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME_COARSE, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
}

static void recNames(struct recHeader *h)
{
    for (int c = 0; c < LOOM_COLL_NUM && c < REC_COLLS; c++)
        snprintf(h->collNames[c], REC_NAME_BYTES, "%s", loomCollName((loomColl_t)c));
    for (int a = 0; a < LOOM_ALGO_NUM && a < REC_ALGOS; a++)
        snprintf(h->algoNames[a], REC_NAME_BYTES, "%s", scheduleAlgoName((loomAlgo_t)a));
    snprintf(h->protoNames[0], REC_NAME_BYTES, "Simple");
    snprintf(h->protoNames[1], REC_NAME_BYTES, "LL");
    for (int t = 0; t < loomNumTypes && t < REC_TYPES; t++)
        snprintf(h->typeNames[t], REC_NAME_BYTES, "%s", reduceTypeName((loomDataType_t)t));
}

static uint64_t recHash(const void *id, unsigned n)
{
    uint64_t x = 0xcbf29ce484222325ULL;
    for (unsigned i = 0; i < n; i++) {
        x ^= ((const unsigned char *)id)[i];
        x *= 0x100000001b3ULL;
    }
    return x;
}

/* The status listener's answer (its thread): a copy of the segment. */
static void *recAnswer(void *ctx, size_t *bytes)
{
    struct loomRecorder *r = ctx;
    return recWireEncode(r->h, bytes);
}

/* Starts comm's status listener on the segment, or closes it when it cannot serve. */
static void recServe(struct loomComm *comm)
{
    struct loomRecorder *r = comm->recorder;
    char addr[SOCKET_ADDR_STRLEN];
    union socketAddress sa;
    if (comm->status == NULL)
        return;
    if (r == NULL ||
        bootstrapStatusStart(comm->status, r->h->secret, recAnswer, r) != loomSuccess) {
        if (r != NULL)
            INFO(LOOM_INIT, "no status listener: %s", debugLastError(NULL));
        bootstrapStatusClose(comm->status);
        comm->status = NULL;
        return;
    }
    socketAddrFromBootstrap(&comm->peers[comm->rank].statusAddr, &sa);
    socketAddrFormat(&sa, addr, sizeof(addr));
    INFO(LOOM_INIT, "rank %d answers loom-info --status %s (with the job's secret)", comm->rank,
         addr);
}

void recorderInit(struct loomComm *comm, const void *id, unsigned idBytes)
{
    struct loomRecorder *r = calloc(1, sizeof(*r));
    if (r == NULL) {
        recServe(comm);
        return;
    }
    r->bytes = recSegmentBytes(comm->nranks);
    r->fd = memfd_create(REC_MEMFD_NAME, MFD_CLOEXEC);
    if (r->fd < 0 || ftruncate(r->fd, (off_t)r->bytes) != 0) {
        INFO(LOOM_INIT, "no flight recorder for this communicator: %s", debugErrnoText(errno));
        goto fail;
    }
    r->h = mmap(NULL, r->bytes, PROT_READ | PROT_WRITE, MAP_SHARED, r->fd, 0);
    if (r->h == MAP_FAILED) {
        INFO(LOOM_INIT, "no flight recorder for this communicator: mmap: %s",
             debugErrnoText(errno));
        goto fail;
    }
    struct recHeader *h = r->h;
    h->version = REC_VERSION;
    h->headerBytes = sizeof(*h);
    h->commId = recHash(id, idBytes);
    h->rank = comm->rank, h->nranks = comm->nranks, h->pid = (int32_t)getpid();
    h->ring = REC_RING;
    h->timeoutSec = comm->timeoutSec;
    h->hostHash = comm->peers[comm->rank].hostHash;
    snprintf(h->host, sizeof(h->host), "%s", comm->peers[comm->rank].hostname);
    h->createdNs = recNow();
    recNames(h);
    memcpy(h->secret, bootstrapSecret(comm->bootstrap), sizeof(h->secret));
    struct recPeer *peers = recPeers(h);
    for (int p = 0; p < comm->nranks; p++) {
        union socketAddress sa;
        peers[p].pid = comm->peers[p].pid;
        peers[p].hostHash = comm->peers[p].hostHash;
        snprintf(peers[p].host, sizeof(peers[p].host), "%s", comm->peers[p].hostname);
        if (socketAddrFromBootstrap(&comm->peers[p].statusAddr, &sa) == loomSuccess)
            socketAddrFormat(&sa, peers[p].status, sizeof(peers[p].status));
    }
    r->ring = recRing(h);
    atomic_store_explicit((_Atomic uint64_t *)&h->magic, REC_MAGIC, memory_order_release);
    comm->recorder = r;
    recServe(comm);
    return;
fail:
    if (r->fd >= 0)
        close(r->fd);
    free(r);
    recServe(comm);
}

void recorderFree(struct loomComm *comm)
{
    struct loomRecorder *r = comm->recorder;
    bootstrapStatusClose(comm->status); /* its thread reads the segment */
    comm->status = NULL;
    if (r == NULL)
        return;
    comm->recorder = NULL;
    munmap(r->h, r->bytes);
    close(r->fd);
    free(r);
}

/* op's entry, or NULL when it has none or the ring has moved on. */
static struct recEntry *recEntryOf(const struct loomOp *op)
{
    struct loomRecorder *r = op->comm->recorder;
    if (r == NULL || op->recPos == 0)
        return NULL;
    struct recEntry *e = &r->ring[(op->recPos - 1) % REC_RING];
    return atomic_load_explicit(&e->pos, memory_order_relaxed) == op->recPos ? e : NULL;
}

void recorderBegin(struct loomOp *op)
{
    struct loomRecorder *r = op->comm->recorder;
    op->recPos = 0;
    if (r == NULL)
        return;
    uint64_t k = atomic_load_explicit(&r->h->next, memory_order_relaxed);
    struct recEntry *e = &r->ring[k % REC_RING];
    int p2p = op->coll == LOOM_COLL_SEND || op->coll == LOOM_COLL_RECV;
    atomic_store_explicit(&e->pos, 0, memory_order_relaxed);
    atomic_thread_fence(memory_order_release); /* a reader sees pos 0 before any new field */
    e->seq = p2p ? r->p2pSeq++ : r->collSeq++;
    e->count = op->count;
    e->startNs = recNow();
    atomic_store_explicit(&e->endNs, 0, memory_order_relaxed);
    atomic_store_explicit(&e->waitNs, 0, memory_order_relaxed);
    atomic_store_explicit(&e->waitStep, -1, memory_order_relaxed);
    atomic_store_explicit(&e->waitPeer, -1, memory_order_relaxed);
    atomic_store_explicit(&e->state, REC_RUNNING, memory_order_relaxed);
    atomic_store_explicit(&e->result, 0, memory_order_relaxed);
    int rooted = op->coll == LOOM_COLL_BROADCAST || op->coll == LOOM_COLL_REDUCE || p2p;
    e->root = rooted ? op->root : -1;
    e->coll = (int8_t)op->coll, e->dt = (int8_t)op->dt, e->op = (int8_t)op->op;
    e->p2p = (int8_t)p2p;
    atomic_store_explicit(&e->algo, -1, memory_order_relaxed);
    atomic_store_explicit(&e->proto, -1, memory_order_relaxed);
    atomic_store_explicit(&e->pos, k + 1, memory_order_release);
    atomic_store_explicit(&r->h->next, k + 1, memory_order_release);
    op->recPos = k + 1;
}

void recorderChose(const struct loomOp *op, int algo, int proto)
{
    struct recEntry *e = recEntryOf(op);
    if (e == NULL)
        return;
    atomic_store_explicit(&e->algo, (int8_t)algo, memory_order_relaxed);
    atomic_store_explicit(&e->proto, (int8_t)proto, memory_order_relaxed);
}

void recorderWaiting(struct loomComm *comm, int peer, int64_t step)
{
    struct loomRecorder *r = comm->recorder;
    if (r == NULL)
        return;
    uint64_t next = atomic_load_explicit(&r->h->next, memory_order_relaxed);
    if (next == 0)
        return;
    struct recEntry *e = &r->ring[(next - 1) % REC_RING];
    if (atomic_load_explicit(&e->state, memory_order_relaxed) != REC_RUNNING)
        return;
    atomic_store_explicit(&e->waitPeer, peer, memory_order_relaxed);
    atomic_store_explicit(&e->waitStep, step, memory_order_relaxed);
    atomic_store_explicit(&e->waitNs, recNow(), memory_order_release);
}

static void recEnd(struct recEntry *e, int res, uint64_t now)
{
    atomic_store_explicit(&e->endNs, now, memory_order_relaxed);
    atomic_store_explicit(&e->result, res, memory_order_relaxed);
    atomic_store_explicit(&e->state,
                          res == loomSuccess || res == loomInProgress ? REC_DONE : REC_FAILED,
                          memory_order_release);
}

void recorderEnd(const struct loomOp *op, int res)
{
    struct recEntry *e = recEntryOf(op);
    if (e != NULL && atomic_load_explicit(&e->state, memory_order_relaxed) == REC_RUNNING)
        recEnd(e, res, recNow());
}

/* Writes the recorder to LOOM_DUMP_DIR/loom-rec-COMM-rRANK.json, when the variable is set. */
static void recDump(struct loomRecorder *r)
{
    const char *dir = paramStr(LOOM_PARAM_DUMP_DIR);
    if (dir[0] == '\0')
        return;
    char path[4096];
    snprintf(path, sizeof(path), "%s/loom-rec-%016llx-r%d.json", dir,
             (unsigned long long)r->h->commId, r->h->rank);
    if (mkdir(dir, 0777) != 0 && errno != EEXIST)
        WARN("LOOM_DUMP_DIR: cannot make %s: %s", dir, debugErrnoText(errno));
    else if (recDumpWrite(r->h, path) != 0)
        WARN("LOOM_DUMP_DIR: cannot write %s: %s", path, debugErrnoText(errno));
    else
        INFO(LOOM_COLL, "flight recorder written to %s", path);
}

static void recEmitLog(void *ctx, const char *line)
{
    (void)ctx;
    loomLogReport("%s", line);
}

/* The job's status as this rank sees it, through the logger. */
static void recPrintTable(struct loomRecorder *r)
{
    struct recJob *job = NULL;
    char err[256];
    if (recJobFromSelf(r->h, &job, err, sizeof(err)) != 0) {
        loomLogReport("no status table: %s", err);
        return;
    }
    recJobPrint(job, recEmitLog, NULL);
    recJobsFree(job, 1);
}

void recorderFailed(struct loomComm *comm, int res, int printTable)
{
    struct loomRecorder *r = comm->recorder;
    if (r == NULL)
        return;
    uint64_t next = atomic_load_explicit(&r->h->next, memory_order_relaxed), now = recNow();
    for (uint64_t k = next; k > 0 && k + REC_RING > next; k--) {
        struct recEntry *e = &r->ring[(k - 1) % REC_RING];
        if (atomic_load_explicit(&e->state, memory_order_relaxed) != REC_RUNNING)
            break;
        recEnd(e, res, now);
    }
    atomic_store_explicit(&r->h->state, REC_RANK_FAILED, memory_order_release);
    if (atomic_exchange(&r->reported, 1))
        return;
    recDump(r);
    if (printTable)
        recPrintTable(r);
}
