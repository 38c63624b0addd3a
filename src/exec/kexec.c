/*
 * kexec.c — the kernel executor of host buffers (LOOM_EXECUTOR=kernel).
 *
 * The plan interpreter a GPU kernel runs (src/device/interp.h), compiled by
 * the C compiler and run on the CPU over the same shared-memory FIFOs as the
 * host executor, so every line of the device logic runs in the CPU tests:
 *
 *   call or group -> lanes -> blocks, one per (communicator, channel)
 *                  -> LOOM_KERNEL_THREADS threads per block run loomDevRun
 *
 * The calling thread is thread 0 of the first block; every other thread of
 * a call is a worker of the communicator, one per (channel, thread index),
 * started at its first use and joined when the communicator is destroyed
 * or aborted (kexecFree). Between calls a worker waits for its next job as
 * a stream's thread does: yields for KEXEC_WORKER_POLL_NS, then sleeps on a futex of its own until
 * a call posts a job (or the communicator goes). A call waits for its workers' jobs the same way. A
 * block's thread 0 selects steps and waits for FIFOs; while it waits it backs off (kexecIdle) as
 * the host executor does: LOOM_SPIN pauses (none where a peer of its channel was last seen on
 * its core: execChannelPeerOnThisCore), then yields for EXEC_YIELD_NS, then sleeps on the
 * doorbell (flag `sleeping`, re-check, futex, as in exec.c; execwait.h). Past the spin stage each
 * wait is also the block's watchdog: it runs the failure checks every executor's waits run on the
 * block's lanes (execWaitFailure, execfail.h: abort, a peer's failure notice, a dead peer the step
 * waits for, LOOM_TIMEOUT) and on a failure raises the run's abort flag, which every block polls,
 * and wakes them. That is the flag a GPU kernel would poll, raised by a host thread; here the
 * waiting thread itself plays the host. Errors are the same lines as the host executor's, and the
 * communicators are marked broken and peers told by the same code (execfail.c); what this file
 * shares with the launched interpreter (devexec.c) is interpview.c's. It calls no other executor.
 *
 * Only links over shared memory run here (LL lines live in the shm
 * segment); a communicator with a network link keeps the host executor for
 * host buffers. Device buffers of a communicator served here run as the same
 * interpreter launched on the GPU (src/exec/devexec.c). Single copies are off when
 * this executor is chosen (cmaSetup is told so at init, on every rank).
 */
#include <errno.h>
#include <limits.h>
#include <linux/futex.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "array.h"
#include "debug.h"
#include "executor.h"
#include "interp.h"
#include "interpview.h"
#include "kexec.h"
#include "op.h"
#include "param.h"

/*
 * An idle worker polls, yielding, this long for its next job before it
 * sleeps; it never spins with pauses, which would hold a core that the
 * caller or a peer needs (a block's threads outnumber the cores easily).
 * A call waiting for its workers, which end with it, pauses this many times
 * first, as a block's barrier does.
 */
#define KEXEC_WORKER_POLL_NS (20 * 1000ULL)
#define KEXEC_JOIN_PAUSES 256

struct kexecRunState;
struct kexecBlock;

/* One thread of a block: the block and the thread's index in it. */
struct kexecThread {
    struct kexecBlock *block;
    uint32_t tid;
};

/*
 * A long-lived thread of a communicator that runs one thread of a block per
 * job. The caller writes `job`, then bumps `posted` (the worker's futex
 * word); the worker runs it and stores `posted`'s value in `done` (the
 * caller's futex word). Each side flags itself before it sleeps, and the
 * other wakes it only when flagged.
 */
struct kexecWorker {
    _Alignas(LOOM_CACHELINE) _Atomic uint32_t posted;
    _Atomic uint32_t sleeping; /* the worker sleeps on `posted` */
    _Atomic uint32_t stop;     /* set before the last bump of `posted`: leave */
    struct kexecThread job;
    _Alignas(LOOM_CACHELINE) _Atomic uint32_t done;
    _Atomic uint32_t waiting; /* the caller sleeps on `done` */
    pthread_t thread;
    int started;
};

struct kexecComm {
    struct loomDevConn *conns[LOOM_MAX_CHANNELS]; /* [2 * nranks]: send connectors, then receive */
    int connected[LOOM_MAX_CHANNELS];             /* comm->nLinksUp when last filled */
    struct kexecWorker *workers;                  /* [channel * threads + tid] */
    int threads;                                  /* LOOM_KERNEL_THREADS */
};

struct kexecBlock {
    struct loomDevBlock dev;
    struct loomPortBarrier bar;
    struct loomLane *lanes; /* the block's lanes as exec.c sees them (for the watchdog) */
    int nlanes;
    struct kexecRunState *run;
    struct loomComm *comm;
    int channel;
    /* the watchdog, thread 0's */
    struct execWait wait;
    uint32_t seq; /* the doorbell's seq when this block flagged itself sleeping */
    int armed;    /* flagged sleeping, to sleep at the next idle call */
    int crowded;  /* a peer was last seen on this thread's core: no spin stage */
    loomResult_t err;
    int heard;
    char why[512];
    char stage[LOOM_DEV_STAGE_BYTES];
};

struct kexecRunState {
    int32_t abort;
    struct kexecBlock *blocks;
    int nblocks;
    int threads; /* per block */
    int multi;   /* several blocks share a doorbell: sleep 1 ms at most */
};

/* Per calling thread, reused from call to call. */
static __thread struct kexecBlock *tlBlocks;
static __thread int tlBlockCap;
static __thread struct loomDevLane *tlDevLanes;
static __thread struct loomLane *tlLaneCopies;
static __thread int tlLaneCap;
static __thread int32_t *tlOwners;
static __thread size_t tlOwnerCap;

/* ---- setup ---- */

/* Fills the interpreter's view of the FIFOs of a channel connected since it was last looked at. */
static void connsRefresh(struct loomComm *comm, int ch)
{
    struct kexecComm *k = comm->kexec;
    size_t n = (size_t)comm->nranks;
    if (k->connected[ch] == comm->nLinksUp)
        return;
    for (size_t p = 0; p < n; p++) {
        struct loomConnector *sc = &comm->channels[ch].send[p], *rc = &comm->channels[ch].recv[p];
        if (k->conns[ch][p].pos == NULL)
            interpConnView(&k->conns[ch][p], sc, &sc->pos, sc->peerBell);
        if (k->conns[ch][n + p].pos == NULL)
            interpConnView(&k->conns[ch][n + p], rc, &rc->pos, rc->peerBell);
    }
    k->connected[ch] = comm->nLinksUp;
}

loomResult_t kexecSetup(struct loomComm *comm, int allShm)
{
    if (!allShm) {
        INFO(LOOM_INIT, "kernel executor: a link leaves shared memory; host buffers keep the "
                        "host executor");
        return loomSuccess;
    }
    struct kexecComm *k = calloc(1, sizeof(*k));
    if (k == NULL)
        return loomSetError(loomSystemError, "out of memory for the kernel executor");
    size_t n = (size_t)comm->nranks;
    for (int ch = 0; ch < comm->nChannels; ch++) {
        k->conns[ch] = calloc(2 * n, sizeof(*k->conns[ch]));
        if (k->conns[ch] == NULL) {
            comm->kexec = k;
            kexecFree(comm);
            return loomSetError(loomSystemError, "out of memory for the kernel executor");
        }
        k->connected[ch] = -1;
    }
    k->threads = (int)paramInt(LOOM_PARAM_KERNEL_THREADS);
    size_t nw = (size_t)comm->nChannels * (size_t)k->threads;
    if (posix_memalign((void **)&k->workers, LOOM_CACHELINE, nw * sizeof(*k->workers)) != 0) {
        k->workers = NULL;
        comm->kexec = k;
        kexecFree(comm);
        return loomSetError(loomSystemError, "out of memory for the kernel executor");
    }
    memset(k->workers, 0, nw * sizeof(*k->workers));
    comm->kexec = k;
    INFO(LOOM_INIT, "kernel executor: host buffers run the plan interpreter, %d thread(s) a block",
         k->threads);
    return loomSuccess;
}

static void futexWake(_Atomic uint32_t *addr)
{
    syscall(SYS_futex, (uint32_t *)addr, FUTEX_WAKE, INT_MAX, NULL, NULL, 0);
}

static void workersStop(struct loomComm *comm)
{
    struct kexecComm *k = comm->kexec;
    if (k->workers == NULL)
        return;
    for (int i = 0; i < comm->nChannels * k->threads; i++) {
        struct kexecWorker *w = &k->workers[i];
        if (!w->started)
            continue;
        atomic_store_explicit(&w->stop, 1, memory_order_relaxed);
        atomic_fetch_add_explicit(&w->posted, 1, memory_order_seq_cst);
        futexWake(&w->posted);
        pthread_join(w->thread, NULL);
        w->started = 0;
    }
    free(k->workers);
    k->workers = NULL;
}

void kexecFree(struct loomComm *comm)
{
    if (comm->kexec == NULL)
        return;
    workersStop(comm);
    for (int ch = 0; ch < LOOM_MAX_CHANNELS; ch++)
        free(comm->kexec->conns[ch]);
    free(comm->kexec);
    comm->kexec = NULL;
}

/* ---- waiting and watching (the host side of port.h) ---- */

void kexecNotify(void *bell)
{
    bellRing(bell);
}

/* The run stops: every block polls the flag, and sleeping ones are woken. */
static void runStop(struct kexecRunState *run)
{
    __atomic_store_n(&run->abort, 1, __ATOMIC_RELEASE);
    for (int i = 0; i < run->nblocks; i++)
        bellWakeAll(run->blocks[i].comm->bell);
}

/* The watchdog: 1 if the block must stop (the run's abort flag is then raised). */
static int watch(struct kexecBlock *k, uint64_t now)
{
    interpLanesSync(k->dev.lanes, k->lanes, k->nlanes);
    loomResult_t err = execWaitFailure(k->lanes, k->nlanes, now, &k->wait);
    if (err == loomSuccess)
        return 0;
    k->err = err;
    k->heard = k->wait.heard;
    snprintf(k->why, sizeof(k->why), "%s", debugLastError(NULL));
    runStop(k->run);
    return 1;
}

static void disarm(struct kexecBlock *k)
{
    if (k->armed) {
        atomic_store_explicit(&k->comm->bell->sleeping, 0, memory_order_relaxed);
        k->armed = 0;
    }
}

void kexecIdle(void *ctx, uint32_t spins)
{
    struct kexecBlock *k = ctx;
    if (k == NULL) { /* a block run without an executor around it (the unit tests) */
        portRelax(spins);
        return;
    }
    if (spins == 1) {
        disarm(k);
        k->wait.idleSince = loomClockNs();
        k->crowded = execChannelPeerOnThisCore(k->comm, k->channel);
    }
    if (spins < (uint32_t)k->comm->spin && !k->crowded &&
        ((spins & 1023) != 0 || !atomic_load_explicit(&k->comm->abortFlag, memory_order_relaxed))) {
#if defined(__x86_64__) || defined(__i386__)
        __builtin_ia32_pause();
#endif
        return;
    }
    uint64_t now = loomClockNs();
    if (watch(k, now))
        return;
    if (now - k->wait.idleSince < EXEC_YIELD_NS) {
        sched_yield();
        return;
    }
    struct loomDoorbell *bell = k->comm->bell;
    if (!k->armed) { /* flag first, then the interpreter looks again, then sleep */
        k->seq = atomic_load_explicit(&bell->seq, memory_order_seq_cst);
        atomic_store_explicit(&bell->sleeping, 1, memory_order_seq_cst);
        k->armed = 1;
        return;
    }
    execFutexWait(&bell->seq, k->seq, k->run->multi ? 1000000ULL : EXEC_SLEEP_NS);
    disarm(k);
}

/* ---- a run ---- */

static loomResult_t reserveLanes(int n)
{
    int cap = tlLaneCap;
    LOOMCHECK(arrayReserve((void **)&tlDevLanes, &cap, n, sizeof(*tlDevLanes)));
    cap = tlLaneCap;
    LOOMCHECK(arrayReserve((void **)&tlLaneCopies, &cap, n, sizeof(*tlLaneCopies)));
    tlLaneCap = cap;
    return loomSuccess;
}

/* Groups the lanes into blocks, one per (comm, channel), each block's lanes in plan order. */
static loomResult_t blocksBuild(struct loomLane *lanes, int nlanes, struct kexecRunState *run)
{
    int nb = 0;
    size_t owners = 0;
    LOOMCHECK(reserveLanes(nlanes));
    LOOMCHECK(arrayReserve((void **)&tlBlocks, &tlBlockCap, nlanes, sizeof(*tlBlocks)));
    for (int i = 0; i < nlanes; i++) {
        int b = 0;
        while (b < nb &&
               (tlBlocks[b].comm != lanes[i].comm || tlBlocks[b].channel != lanes[i].channel))
            b++;
        if (b == nb) {
            struct kexecBlock *k = &tlBlocks[nb++];
            memset(k, 0, offsetof(struct kexecBlock, stage));
            k->comm = lanes[i].comm;
            k->channel = lanes[i].channel;
            k->run = run;
        }
        tlBlocks[b].nlanes++;
    }
    int at = 0;
    for (int b = 0; b < nb; b++) {
        struct kexecBlock *k = &tlBlocks[b];
        k->lanes = &tlLaneCopies[at];
        k->dev.lanes = &tlDevLanes[at];
        at += k->nlanes;
        if (k->nlanes > 1)
            owners += 2 * (size_t)k->comm->nranks;
        k->nlanes = 0;
    }
    if (owners > tlOwnerCap) {
        int32_t *o = realloc(tlOwners, owners * sizeof(*o));
        if (o == NULL)
            return loomSetError(loomSystemError, "out of memory running %d lanes", nlanes);
        tlOwners = o;
        tlOwnerCap = owners;
    }
    for (int i = 0; i < nlanes; i++) {
        int b = 0;
        while (tlBlocks[b].comm != lanes[i].comm || tlBlocks[b].channel != lanes[i].channel)
            b++;
        struct kexecBlock *k = &tlBlocks[b];
        struct loomLane *l = &lanes[i];
        struct loomDevConn *conns = l->comm->kexec->conns[l->channel];
        k->lanes[k->nlanes] = *l;
        k->dev.lanes[k->nlanes++] = (struct loomDevLane){.steps = l->plan->steps,
                                                         .nsteps = l->plan->nsteps,
                                                         .elemSize = (uint32_t)l->elemSize,
                                                         .dt = l->dt,
                                                         .op = l->op,
                                                         .nranks = l->comm->nranks,
                                                         .proto = l->proto,
                                                         .bufs = {l->bufs[0], l->bufs[1]},
                                                         .send = conns,
                                                         .recv = conns + l->comm->nranks};
    }
    size_t o = 0;
    for (int b = 0; b < nb; b++) {
        struct kexecBlock *k = &tlBlocks[b];
        k->dev.nlanes = (uint32_t)k->nlanes;
        k->dev.nranks = k->comm->nranks;
        k->dev.owner = NULL;
        if (k->nlanes > 1) {
            k->dev.owner = tlOwners + o;
            o += 2 * (size_t)k->comm->nranks;
        }
        k->dev.abort = &run->abort;
        k->dev.llMod = LOOM_LL_MOD;
        k->dev.host = k;
        k->dev.stage = k->stage;
        k->dev.beat = NULL; /* its watchdog reads the lanes themselves */
    }
    run->nblocks = nb;
    run->blocks = tlBlocks;
    run->multi = nb > 1;
    return loomSuccess;
}

/* One thread of a block. Thread 0 stops the run when its block stops on an error of its own. */
static void blockThread(const struct kexecThread *th)
{
    struct kexecBlock *k = th->block;
    struct loomPortThread t = {th->tid, (uint32_t)k->run->threads, &k->bar, 0};
    int status = loomDevRun(&k->dev, &t);
    if (th->tid == 0 && status != LOOM_DEV_OK && status != LOOM_DEV_STOPPED)
        runStop(k->run);
    if (th->tid == 0)
        disarm(k);
}

/*
 * Waits until *word differs from `from` (acquire) and returns its value:
 * polls `spin` times, yields for pollNs, then flags itself in *flag and
 * sleeps on the word's futex. Whoever moves the word wakes it when flagged.
 */
static uint32_t waitChange(_Atomic uint32_t *word, uint32_t from, _Atomic uint32_t *flag, int spin,
                           uint64_t pollNs)
{
    uint64_t since = 0;
    for (uint32_t spins = 0;; spins++) {
        uint32_t v = atomic_load_explicit(word, memory_order_acquire);
        if (v != from)
            return v;
        if (spins < (uint32_t)spin) {
#if defined(__x86_64__) || defined(__i386__)
            __builtin_ia32_pause();
#endif
            continue;
        }
        uint64_t now = loomClockNs();
        if (since == 0)
            since = now;
        if (now - since < pollNs) {
            sched_yield();
            continue;
        }
        atomic_store_explicit(flag, 1, memory_order_seq_cst);
        if (atomic_load_explicit(word, memory_order_seq_cst) == from)
            execFutexWait(word, from, EXEC_SLEEP_NS);
        atomic_store_explicit(flag, 0, memory_order_relaxed);
    }
}

static void *workerMain(void *arg)
{
    struct kexecWorker *w = arg;
    uint32_t seen = 0;
    for (;;) {
        seen = waitChange(&w->posted, seen, &w->sleeping, 0, KEXEC_WORKER_POLL_NS);
        if (atomic_load_explicit(&w->stop, memory_order_relaxed))
            break;
        blockThread(&w->job);
        atomic_store_explicit(&w->done, seen, memory_order_seq_cst);
        if (atomic_load_explicit(&w->waiting, memory_order_seq_cst))
            futexWake(&w->done);
    }
    return NULL;
}

/* The worker that runs thread tid of block k, started if it is not yet. */
static loomResult_t workerGet(struct kexecBlock *k, uint32_t tid, struct kexecWorker **out)
{
    struct kexecComm *kc = k->comm->kexec;
    struct kexecWorker *w = &kc->workers[k->channel * kc->threads + (int)tid];
    if (!w->started) {
        int e = pthread_create(&w->thread, NULL, workerMain, w);
        if (e != 0)
            return loomSetError(loomSystemError,
                                "rank %d: the kernel executor cannot start a thread: %s; lower "
                                "LOOM_KERNEL_THREADS or LOOM_NCHANNELS",
                                k->comm->rank, strerror(e));
        w->started = 1;
    }
    *out = w;
    return loomSuccess;
}

/* Every thread of the run but the caller's, each its worker's job; all start, or none. */
static loomResult_t runThreads(struct kexecRunState *run)
{
    struct kexecWorker *w;
    for (int b = 0; b < run->nblocks; b++)
        for (uint32_t t = b == 0; t < (uint32_t)run->threads; t++)
            LOOMCHECK(workerGet(&run->blocks[b], t, &w));
    for (int b = 0; b < run->nblocks; b++)
        for (uint32_t t = b == 0; t < (uint32_t)run->threads; t++) {
            (void)workerGet(&run->blocks[b], t, &w);
            w->job = (struct kexecThread){&run->blocks[b], t};
            atomic_fetch_add_explicit(&w->posted, 1, memory_order_seq_cst);
            if (atomic_load_explicit(&w->sleeping, memory_order_seq_cst))
                futexWake(&w->posted);
        }
    blockThread(&(struct kexecThread){&run->blocks[0], 0});
    for (int b = 0; b < run->nblocks; b++)
        for (uint32_t t = b == 0; t < (uint32_t)run->threads; t++) {
            (void)workerGet(&run->blocks[b], t, &w);
            uint32_t want = atomic_load_explicit(&w->posted, memory_order_relaxed);
            uint32_t done = atomic_load_explicit(&w->done, memory_order_acquire);
            while (done != want)
                done = waitChange(&w->done, done, &w->waiting, KEXEC_JOIN_PAUSES, EXEC_YIELD_NS);
        }
    return loomSuccess;
}

/* The error of a run whose blocks stopped, recorded on this thread; *post: tell the peers. */
static loomResult_t runError(int *post)
{
    for (int b = 0; b < tlBlocks[0].run->nblocks; b++) {
        struct kexecBlock *k = &tlBlocks[b];
        if (k->err != loomSuccess) { /* the watchdog's, recorded again on this thread */
            *post = !k->heard;
            return loomSetError(k->err, "%s", k->why);
        }
    }
    for (int b = 0; b < tlBlocks[0].run->nblocks; b++) {
        struct kexecBlock *k = &tlBlocks[b];
        if (k->dev.status == LOOM_DEV_OK || k->dev.status == LOOM_DEV_STOPPED)
            continue;
        *post = 1;
        return interpBlockError(&k->dev, k->lanes, 0);
    }
    *post = 0;
    return loomSetError(loomInternalError, "the kernel executor stopped without a reason");
}

void kexecThreadCleanup(void)
{
    free(tlBlocks);
    free(tlDevLanes);
    free(tlLaneCopies);
    free(tlOwners);
    tlBlocks = NULL, tlDevLanes = NULL, tlLaneCopies = NULL, tlOwners = NULL;
    tlBlockCap = tlLaneCap = 0;
    tlOwnerCap = 0;
}

/* Runs host-buffer lanes whose communicators it serves to completion (kexec.h). */
static loomResult_t kernelRun(struct loomLane *lanes, int nlanes, const struct loomExecCall *call)
{
    struct kexecRunState run = {0};
    loomResult_t err;
    (void)call;
    run.threads = lanes[0].comm->kexec->threads; /* LOOM_KERNEL_THREADS: every comm's */
    LOOMCHECK(blocksBuild(lanes, nlanes, &run));
    for (int b = 0; b < run.nblocks; b++)
        connsRefresh(tlBlocks[b].comm, tlBlocks[b].channel);
    err = runThreads(&run);
    if (err != loomSuccess) {
        execMarkBroken(lanes, nlanes, err, 0);
        return err;
    }
    int failed = 0, post = 0;
    for (int b = 0; b < run.nblocks; b++)
        failed |= tlBlocks[b].dev.status != LOOM_DEV_OK;
    if (!failed)
        return loomSuccess;
    err = runError(&post);
    execMarkBroken(lanes, nlanes, err, post);
    return err;
}

const struct loomExecutor loomExecKernel = {
    .name = "kernel", .lines = 1, .serves = interpServes, .prepare = execPrepare, .run = kernelRun};
