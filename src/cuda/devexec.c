/*
 * devexec.c — device buffers as one launch of the plan interpreter.
 *
 * With LOOM_EXECUTOR=kernel (every link over shared memory, kexec.c), a
 * call or group on device buffers is not walked step by step by the host
 * (cudaexec.c): its lanes become the blocks of one launch of loomInterpret
 * (kernels.cu over src/device/interp.h), which waits for the FIFOs, copies,
 * reduces and publishes the counters itself:
 *
 *   the call:    plan -> descriptor in mapped memory -> cuLaunchKernel(S) -> returns
 *   S:           ... app work ... [ loomInterpret: every step of every lane ] ... app work ...
 *   watchdog:    polls the launch's event; meanwhile watches the counters and the
 *                failure signals, and raises the launch's abort flag on a failure
 *
 * S is the application's stream on a Loom CUDA stream (loomStreamCreateCuda:
 * stream.c launches at once, on the calling thread), else the thread's own
 * stream, and the call waits for the launch to end (after the work already
 * queued on the device, as cudaPlanBegin orders it).
 *
 * What the kernel touches is where the GPU reaches it:
 *   - the FIFOs (counters, size words, slots, LL lines): in GPU memory when
 *     both ends of a pair launch and reach each other's GPU memory (p2p.c,
 *     p2pDevConn: tail and slots at the receiver, head at the sender, shared
 *     over CUDA IPC or, for ranks of this process on one device, by
 *     address); otherwise the shm segments' FIFOs, registered with the
 *     driver (p2pMapHostSlots), and a message goes GPU -> host -> GPU
 *     (host-staged: LOOM_P2P_DISABLE=1, ranks on GPUs without peer access,
 *     a peer on the host executor). The host never reads a device FIFO:
 *     the watchdog's progress is the positions below;
 *   - per communicator, a mapped block holds each connector's position and
 *     the interpreter's view of the connectors (struct loomDevConn);
 *   - per launch, a mapped block holds the abort flag, the blocks (each
 *     with the error record it writes: status, lane, peer, size word), the
 *     lanes, a copy of their plans, the connector ownership and LL staging.
 *
 * Positions. The host executors keep a connector's position in the
 * connector (c->pos), a launch in the mapped block. Whoever runs next takes
 * them over: a launch copies them in when the host had them, and a
 * host-driven run on the communicator first waits for its launches to end
 * and copies them back (devexecReclaim). A connector on a device FIFO is
 * another FIFO with its own count: its position stays in the mapped block.
 *
 * The watchdog: one thread per process, started by the first launch, looks
 * at every launch in flight every DEVEXEC_WATCH_NS. Ended (its event) ->
 * retired: the blocks' error records become the call's error, with the host
 * executor's lines (exec.c), recorded on the communicators and the Loom
 * stream, the communicators marked broken and the peers told. Running ->
 * it reads only what may be read while the kernel writes: the counters this
 * rank publishes (progress), the communicator's abort flag, the failure
 * notices peers posted, and whether a peer whose FIFO is starved has exited;
 * on an abort or a notice, a dead peer, or no progress for LOOM_TIMEOUT, it
 * raises the launch's abort flag, which every block polls, and the kernel
 * ends without publishing more. The line that names the step and the peers
 * is made once the kernel has ended, from its lanes. A caller that waits for
 * its launch checks it the same way itself, so it returns without waiting
 * for the watchdog's next look.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cudacore.h"
#include "cudalib.h"
#include "debug.h"
#include "interp.h"
#include "kernels.h"
#include "kexec.h"
#include "plan.h"

#define DEVEXEC_WATCH_NS (200 * 1000LL) /* the watchdog's period while launches are in flight */
#define DEVEXEC_ALIGN 64

/* A communicator's connectors as launched kernels see them: one mapped block. */
struct devexecComm {
    const struct cudaLib *lib;
    void *mem;                 /* cuMemHostAlloc'ed (mapped): pos, then conns */
    uint64_t *pos;             /* [channel][2 * nranks]: send connectors, then receive */
    struct loomDevConn *conns; /* the same layout */
    uint8_t *onDevice;         /* the same layout: the connector's FIFO is in GPU memory */
    int filled;                /* comm->nLinksUp when conns were filled */
    int deviceOwns;            /* the positions are in pos, not in the connectors */
    int inflight;              /* launches not retired (under watchLock) */
};

/* One launch, from the call to its retirement. */
struct devLaunch {
    struct devLaunch *next; /* in flight, or free */
    const struct cudaLib *lib;
    cuContext_t ctx;
    cuEvent_t event; /* recorded after the kernel */
    char *mem;       /* mapped: the descriptor below */
    size_t memBytes;
    int32_t *abort;
    struct loomDevBlock *blocks;
    struct loomDevLane *devLanes; /* block by block */
    int nblocks;
    struct loomLane *lanes; /* exec.c's view of devLanes, in the same order */
    int nlanes, laneCap;
    int *blockLanes; /* [nblocks]: lanes of each block */
    int blockCap;
    struct loomStream *stream;  /* the Loom CUDA stream, or NULL: a caller waits */
    struct loomStream **joined; /* the group's other Loom CUDA streams (they wait on event) */
    int njoined, joinedCap;
    cuEvent_t joinEvent; /* recorded on each joined stream before the launch */
    /* the watchdog's */
    uint64_t progress, idleSince, lastLiveCheck;
    int stopping; /* the abort flag is up for stopErr (heard: an abort or a peer's notice) */
    int heard;
    loomResult_t stopErr;
    char stopWhy[512];
    /* set when retired */
    int done;
    loomResult_t err;
    char why[512];
};

static pthread_mutex_t watchLock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t watchWork = PTHREAD_COND_INITIALIZER;
static struct devLaunch *inflight, *freeLaunches;
static int watchStarted;

static size_t alignUp(size_t x)
{
    return (x + DEVEXEC_ALIGN - 1) & ~(size_t)(DEVEXEC_ALIGN - 1);
}

/*
 * Mapped host memory for a kernel, whose address on the GPU is the host's
 * (unified addressing: the descriptor and the FIFOs hold host addresses).
 */
static loomResult_t mappedAlloc(const struct cudaLib *lib, size_t bytes, const char *what,
                                void **out)
{
    void *mem = NULL;
    cuDevPtr_t d = 0;
    cuResult_t r =
        lib->memHostAlloc(&mem, bytes, CUL_MEMHOSTALLOC_PORTABLE | CUL_MEMHOSTALLOC_DEVICEMAP);
    if (r != CUL_SUCCESS)
        return cudaLibError(lib, r, what);
    if (lib->memHostGetDevicePointer(&d, mem, 0) != CUL_SUCCESS ||
        d != (cuDevPtr_t)(uintptr_t)mem) {
        lib->memFreeHost(mem);
        return loomSetError(loomUnhandledCudaError,
                            "the GPU maps host memory at another address (no unified "
                            "addressing): Loom needs a 64-bit system with UVA");
    }
    memset(mem, 0, bytes);
    *out = mem;
    return loomSuccess;
}

/* ---- which plans launch ---- */

int devexecWanted(const struct loomOp *ops, int nops)
{
    for (int i = 0; i < nops; i++)
        if (!kexecUsable(ops[i].comm))
            return 0;
    return nops > 0;
}

int devexecLaunchable(const struct loomOp *ops, int nops)
{
    return devexecWanted(ops, nops) && cudaPlanIsDevice(ops, nops);
}

/* ---- a communicator's mapped block ---- */

/*
 * Fills the view of comm's connector to (send) or from peer on channel ch
 * (index i of the block) once it is connected: the device FIFO when the pair
 * has one, else the host FIFO. A kernel rings no doorbell (its peers poll).
 */
static void connFill(struct loomComm *comm, struct devexecComm *dc, int ch, int peer, int send,
                     size_t i)
{
    const struct loomConnector *c =
        send ? &comm->channels[ch].send[peer] : &comm->channels[ch].recv[peer];
    struct loomDevConn *d = &dc->conns[i];
    if (d->pos != NULL || !c->connected)
        return;
    dc->onDevice[i] = (uint8_t)p2pDevConn(comm, ch, peer, send, d);
    if (dc->onDevice[i])
        d->pos = &dc->pos[i];
    else
        kexecConnView(d, c, &dc->pos[i], NULL);
}

/* comm's mapped block, made on first use, with the connectors connected since filled in. */
static loomResult_t commState(struct loomComm *comm, const struct cudaLib *lib,
                              struct devexecComm **out)
{
    struct devexecComm *dc = comm->devexec;
    size_t n = 2 * (size_t)comm->nranks * (size_t)comm->nChannels;
    if (dc == NULL) {
        void *mem = NULL;
        if ((dc = calloc(1, sizeof(*dc))) == NULL || (dc->onDevice = calloc(n, 1)) == NULL) {
            free(dc);
            return loomSetError(loomSystemError, "out of memory for the launch state");
        }
        loomResult_t res = mappedAlloc(lib, n * (sizeof(uint64_t) + sizeof(*dc->conns)),
                                       "allocating mapped memory for the launched kernel", &mem);
        if (res != loomSuccess) {
            free(dc->onDevice);
            free(dc);
            return res;
        }
        dc->lib = lib;
        dc->mem = mem;
        dc->pos = mem;
        dc->conns = (struct loomDevConn *)(dc->pos + n);
        dc->filled = -1;
        comm->devexec = dc;
    }
    int up = atomic_load_explicit(&comm->nLinksUp, memory_order_acquire);
    size_t np = (size_t)comm->nranks;
    for (int ch = 0; dc->filled != up && ch < comm->nChannels; ch++) {
        size_t base = (size_t)ch * 2 * np;
        for (size_t p = 0; p < np; p++) {
            connFill(comm, dc, ch, (int)p, 1, base + p);
            connFill(comm, dc, ch, (int)p, 0, base + np + p);
        }
    }
    dc->filled = up;
    *out = dc;
    return loomSuccess;
}

/* Copies the positions between the connectors and the mapped block (toDevice: into it). */
static void positionsMove(struct loomComm *comm, struct devexecComm *dc, int toDevice)
{
    size_t np = (size_t)comm->nranks;
    for (int ch = 0; ch < comm->nChannels; ch++) {
        for (size_t p = 0; p < 2 * np; p++) {
            struct loomConnector *c =
                p < np ? &comm->channels[ch].send[p] : &comm->channels[ch].recv[p - np];
            uint64_t *d = &dc->pos[(size_t)ch * 2 * np + p];
            if (dc->onDevice[(size_t)ch * 2 * np + p])
                continue; /* another FIFO, with a count of its own */
            if (toDevice)
                *d = c->pos;
            else
                c->pos = *d;
        }
    }
}

/* ---- a launch's descriptor ---- */

static loomResult_t launchTake(const struct cudaLib *lib, struct devLaunch **out)
{
    pthread_mutex_lock(&watchLock);
    struct devLaunch *L = freeLaunches;
    if (L)
        freeLaunches = L->next;
    pthread_mutex_unlock(&watchLock);
    if (L == NULL) {
        if ((L = calloc(1, sizeof(*L))) == NULL)
            return loomSetError(loomSystemError, "out of memory for a launch");
        cuResult_t r = lib->eventCreate(&L->event, CUL_EVENT_DISABLE_TIMING);
        if (r != CUL_SUCCESS) {
            free(L);
            return cudaLibError(lib, r, "creating the event of a launch");
        }
    }
    L->lib = lib;
    L->next = NULL;
    L->stopping = L->heard = L->done = 0;
    L->err = loomSuccess;
    *out = L;
    return loomSuccess;
}

static void launchGive(struct devLaunch *L)
{
    pthread_mutex_lock(&watchLock);
    L->next = freeLaunches;
    freeLaunches = L;
    pthread_mutex_unlock(&watchLock);
}

/*
 * Copies the lanes into L->lanes block by block, one block per
 * (communicator, channel), each block's lanes in plan order.
 */
static loomResult_t lanesOrder(struct devLaunch *L, const struct loomLane *lanes, int nlanes)
{
    LOOMCHECK(arrayReserve((void **)&L->lanes, &L->laneCap, nlanes, sizeof(*L->lanes)));
    LOOMCHECK(arrayReserve((void **)&L->blockLanes, &L->blockCap, nlanes, sizeof(int)));
    L->nlanes = L->nblocks = 0;
    for (int i = 0; i < nlanes; i++) {
        int seen = 0;
        for (int j = 0; j < i && !seen; j++)
            seen = lanes[j].comm == lanes[i].comm && lanes[j].channel == lanes[i].channel;
        if (seen)
            continue;
        int *count = &L->blockLanes[L->nblocks++];
        *count = 0;
        for (int j = i; j < nlanes; j++) {
            if (lanes[j].comm == lanes[i].comm && lanes[j].channel == lanes[i].channel) {
                L->lanes[L->nlanes++] = lanes[j];
                (*count)++;
            }
        }
    }
    return loomSuccess;
}

/* The descriptor's bytes; off[]: where the blocks, lanes, plans, owners and stages start. */
static size_t descriptorBytes(const struct devLaunch *L, size_t off[5])
{
    size_t steps = 0, owners = 0;
    for (int i = 0; i < L->nlanes; i++)
        steps += L->lanes[i].plan->nsteps;
    for (int b = 0, at = 0; b < L->nblocks; at += L->blockLanes[b++])
        if (L->blockLanes[b] > 1)
            owners += 2 * (size_t)L->lanes[at].comm->nranks;
    off[0] = DEVEXEC_ALIGN; /* the abort flag comes first */
    off[1] = off[0] + alignUp((size_t)L->nblocks * sizeof(struct loomDevBlock));
    off[2] = off[1] + alignUp((size_t)L->nlanes * sizeof(struct loomDevLane));
    off[3] = off[2] + alignUp(steps * sizeof(struct loomPlanStep));
    off[4] = off[3] + alignUp(owners * sizeof(int32_t));
    return off[4] + (size_t)L->nblocks * LOOM_DEV_STAGE_BYTES;
}

/* The launch's mapped memory, at least `bytes` (kept from launch to launch). */
static loomResult_t descriptorMemory(struct devLaunch *L, size_t bytes)
{
    if (L->memBytes >= bytes)
        return loomSuccess;
    size_t want = bytes > 2 * L->memBytes ? bytes : 2 * L->memBytes;
    void *mem = NULL;
    LOOMCHECK(mappedAlloc(L->lib, want, "allocating mapped memory for a launch's plans", &mem));
    if (L->mem) /* its last kernel has ended: it was retired */
        L->lib->memFreeHost(L->mem);
    L->mem = mem;
    L->memBytes = want;
    return loomSuccess;
}

/* Fills the descriptor: the interpreter's blocks and lanes over copies of the plans. */
static loomResult_t descriptorFill(struct devLaunch *L)
{
    size_t off[5];
    LOOMCHECK(descriptorMemory(L, descriptorBytes(L, off)));
    L->abort = (int32_t *)L->mem;
    *L->abort = 0;
    L->blocks = (struct loomDevBlock *)(L->mem + off[0]);
    L->devLanes = (struct loomDevLane *)(L->mem + off[1]);
    struct loomPlanStep *steps = (struct loomPlanStep *)(L->mem + off[2]);
    int32_t *owners = (int32_t *)(L->mem + off[3]);
    for (int b = 0, at = 0; b < L->nblocks; at += L->blockLanes[b++]) {
        struct loomComm *comm = L->lanes[at].comm;
        struct devexecComm *dc = comm->devexec;
        struct loomDevConn *conns = dc->conns + (size_t)L->lanes[at].channel * 2 * comm->nranks;
        struct loomDevBlock *d = &L->blocks[b];
        memset(d, 0, sizeof(*d));
        d->lanes = &L->devLanes[at];
        d->nlanes = (uint32_t)L->blockLanes[b];
        d->nranks = comm->nranks;
        if (d->nlanes > 1) {
            d->owner = owners;
            owners += 2 * (size_t)comm->nranks;
        }
        d->abort = L->abort;
        d->llMod = LOOM_LL_MOD;
        d->host = NULL; /* the device backs off by itself (port.h) */
        d->stage = L->mem + off[4] + (size_t)b * LOOM_DEV_STAGE_BYTES;
        for (int i = at; i < at + L->blockLanes[b]; i++) {
            const struct loomLane *l = &L->lanes[i];
            memcpy(steps, l->plan->steps, l->plan->nsteps * sizeof(*steps));
            L->devLanes[i] = (struct loomDevLane){.steps = steps,
                                                  .nsteps = l->plan->nsteps,
                                                  .elemSize = (uint32_t)l->elemSize,
                                                  .dt = l->dt,
                                                  .op = l->op,
                                                  .nranks = comm->nranks,
                                                  .proto = l->proto,
                                                  .bufs = {l->bufs[0], l->bufs[1]},
                                                  .send = conns,
                                                  .recv = conns + comm->nranks};
            steps += l->plan->nsteps;
        }
    }
    return loomSuccess;
}

/* ---- watching ---- */

/*
 * The positions of the launch's connectors (mapped memory, which the kernel
 * moves as it publishes each tail and head): moves when the kernel does.
 * The FIFOs themselves may be in GPU memory, which the host cannot read.
 */
static uint64_t launchProgress(const struct devLaunch *L)
{
    uint64_t sum = 0;
    for (int b = 0, at = 0; b < L->nblocks; at += L->blockLanes[b++]) {
        const struct loomComm *comm = L->lanes[at].comm;
        const struct devexecComm *dc = comm->devexec;
        size_t n = 2 * (size_t)comm->nranks, base = (size_t)L->lanes[at].channel * n;
        for (size_t i = base; i < base + n; i++)
            sum += __atomic_load_n(&dc->pos[i], __ATOMIC_ACQUIRE);
    }
    return sum;
}

/*
 * 1 if lane l's plan (d: the launch's copy, which stays as it is while the
 * plan cache moves on) names peer p, and the FIFO from p is empty or the one
 * to p is full.
 */
static int starvedOn(const struct loomLane *l, const struct loomDevLane *d, int p)
{
    const struct loomChannel *ch = &l->comm->channels[l->channel];
    const struct loomConnector *rc = &ch->recv[p], *sc = &ch->send[p];
    int named = 0;
    for (uint32_t k = 0; k < d->nsteps && !named; k++) {
        const struct loomPlanStep *s = &d->steps[k];
        for (int j = 0; j < s->nrecv; j++)
            named |= s->recvPeers[j] == p;
        for (int j = 0; j < s->nsend; j++)
            named |= s->sendPeers[j] == p;
    }
    if (!named || !rc->connected || !sc->connected)
        return 0;
    const struct devexecComm *dc = l->comm->devexec;
    size_t at = (size_t)l->channel * 2 * (size_t)l->comm->nranks + (size_t)p;
    if (dc->onDevice[at] || dc->onDevice[at + (size_t)l->comm->nranks])
        return 1; /* its counters are in GPU memory: a dead peer the plan names is enough */
    return atomic_load_explicit(&rc->fifo->tail, memory_order_acquire) <=
               atomic_load_explicit(&rc->fifo->head, memory_order_acquire) ||
           atomic_load_explicit(&sc->fifo->head, memory_order_acquire) + LOOM_STEPS <=
               atomic_load_explicit(&sc->fifo->tail, memory_order_acquire);
}

/* A peer the kernel may be waiting for that has failed: its error, recorded; else loomSuccess. */
static loomResult_t deadPeer(const struct devLaunch *L)
{
    for (int i = 0; i < L->nlanes; i++) {
        const struct loomComm *comm = L->lanes[i].comm;
        for (int p = 0; p < comm->nranks; p++)
            if (p != comm->rank && execPeerFailed(comm, p) &&
                starvedOn(&L->lanes[i], &L->devLanes[i], p))
                return loomSetError(loomRemoteError,
                                    "rank %d (pid %d on %s) exited while rank %d's kernel waited "
                                    "for it",
                                    p, comm->peers[p].pid, comm->peers[p].hostname, comm->rank);
    }
    return loomSuccess;
}

/* A running launch: raises its abort flag on an abort, a notice, a dead peer or the timeout. */
static void launchWatch(struct devLaunch *L, uint64_t now)
{
    if (L->stopping)
        return;
    uint64_t progress = launchProgress(L);
    if (progress != L->progress) {
        L->progress = progress;
        L->idleSince = now;
    }
    loomResult_t err = execHeardFailure(L->lanes, L->nlanes);
    int heard = err != loomSuccess;
    uint64_t idle = now - L->idleSince;
    if (!heard && idle >= EXEC_SLEEP_NS && now - L->lastLiveCheck >= EXEC_SLEEP_NS) {
        L->lastLiveCheck = now;
        err = deadPeer(L);
    }
    if (err == loomSuccess && idle >= (uint64_t)L->lanes[0].comm->timeoutSec * 1000000000ULL)
        err = loomSetError(loomTimeout, "no progress for LOOM_TIMEOUT"); /* named at the end */
    if (err == loomSuccess)
        return;
    L->stopping = 1;
    L->heard = heard;
    L->stopErr = err;
    snprintf(L->stopWhy, sizeof(L->stopWhy), "%s", debugLastError(NULL));
    __atomic_store_n(L->abort, 1, __ATOMIC_RELEASE);
}

/*
 * The error of an ended launch that a block reported, recorded; *post: tell
 * the peers. Its lanes and positions are final now, so a stop for the
 * timeout is named as the host executor names it (the step, the peers).
 */
static loomResult_t launchError(struct devLaunch *L, int *post)
{
    *post = !L->heard;
    kexecLanesSync(L->devLanes, L->lanes, L->nlanes);
    for (int b = 0, at = 0; b < L->nblocks; at += L->blockLanes[b++]) {
        const struct loomDevBlock *d = &L->blocks[b];
        if (d->status != LOOM_DEV_OK && d->status != LOOM_DEV_STOPPED)
            return kexecBlockError(d, &L->lanes[at], 1);
    }
    if (L->stopErr != loomTimeout || L->heard)
        return loomSetError(L->stopErr, "%s", L->stopWhy);
    for (int b = 0, at = 0; b < L->nblocks; at += L->blockLanes[b++])
        positionsMove(L->lanes[at].comm, L->lanes[at].comm->devexec, 0);
    uint64_t now = loomClockNs();
    struct execWait w = {0};
    w.idleSince = now - (uint64_t)L->lanes[0].comm->timeoutSec * 1000000000ULL;
    loomResult_t err = execWaitFailure(L->lanes, L->nlanes, now, &w);
    return err != loomSuccess ? err : loomSetError(L->stopErr, "%s", L->stopWhy);
}

/* Other launches on L's communicators stop too: the communicators are broken. */
static void launchCascade(const struct devLaunch *L)
{
    for (struct devLaunch *o = inflight; o; o = o->next) {
        int shares = 0;
        for (int i = 0; i < o->nlanes && !shares; i++)
            for (int j = 0; j < L->nlanes && !shares; j++)
                shares = o->lanes[i].comm == L->lanes[j].comm;
        if (o == L || !shares || o->stopping)
            continue;
        o->stopping = o->heard = 1;
        o->stopErr = L->err;
        snprintf(o->stopWhy, sizeof(o->stopWhy),
                 "the communicator is unusable after an earlier error (%.400s)", L->why);
        __atomic_store_n(o->abort, 1, __ATOMIC_RELEASE);
    }
}

/* An ended launch (r: its event's query): its error recorded everywhere, its counts dropped. */
static void launchRetire(struct devLaunch *L, cuResult_t r)
{
    loomResult_t err = loomSuccess;
    int post = 1, failed = r != CUL_SUCCESS;
    for (int b = 0; b < L->nblocks; b++)
        failed |= L->blocks[b].status != LOOM_DEV_OK;
    if (r != CUL_SUCCESS)
        err = cudaLibError(L->lib, r, "the kernel of a collective");
    else if (failed)
        err = launchError(L, &post);
    L->err = err;
    snprintf(L->why, sizeof(L->why), "%s", err != loomSuccess ? debugLastError(NULL) : "");
    if (err != loomSuccess) {
        execMarkBroken(L->lanes, L->nlanes, err, post);
        for (int i = 0; L->stream && i < L->nlanes; i++) { /* as a stream's unit that failed */
            int none = loomSuccess;
            atomic_compare_exchange_strong(&L->lanes[i].comm->asyncError, &none, (int)err);
        }
        if (L->stream)
            streamRecordError(L->stream, err, L->why);
        for (int j = 0; j < L->njoined; j++)
            streamRecordError(L->joined[j], err, L->why);
        launchCascade(L);
    }
    for (int b = 0, at = 0; b < L->nblocks; at += L->blockLanes[b++]) {
        int first = 1;
        for (int c = 0, k = 0; c < b; k += L->blockLanes[c++])
            first &= L->lanes[k].comm != L->lanes[at].comm;
        if (first) {
            L->lanes[at].comm->devexec->inflight--;
            atomic_fetch_sub_explicit(&L->lanes[at].comm->pending, 1, memory_order_acq_rel);
        }
    }
    struct devLaunch **pp = &inflight;
    while (*pp != L)
        pp = &(*pp)->next;
    *pp = L->next;
    L->done = 1;
}

/* Looks at a launch in flight (watchLock held): retires it if it ended, else watches it. */
static void launchCheck(struct devLaunch *L, uint64_t now)
{
    cuContext_t saved = NULL;
    L->lib->ctxGetCurrent(&saved);
    if (saved != L->ctx)
        L->lib->ctxSetCurrent(L->ctx);
    cuResult_t r = L->lib->eventQuery(L->event);
    if (r == CUL_ERROR_NOT_READY)
        launchWatch(L, now);
    else
        launchRetire(L, r);
    if (saved != L->ctx)
        L->lib->ctxSetCurrent(saved);
}

/* Checks every launch in flight that `match` accepts (all: NULL); 1 if any is left. */
static int checkAll(int (*match)(const struct devLaunch *, const void *), const void *arg)
{
    int left = 0;
    uint64_t now = loomClockNs();
    for (struct devLaunch *L = inflight, *next; L; L = next) {
        next = L->next;
        if (match && !match(L, arg))
            continue;
        launchCheck(L, now);
        if (L->done && L->stream)
            L->next = freeLaunches, freeLaunches = L; /* nobody waits for it */
        left |= !L->done;
    }
    return left;
}

static void *watchMain(void *arg)
{
    (void)arg;
    pthread_mutex_lock(&watchLock);
    for (;;) {
        while (inflight == NULL)
            pthread_cond_wait(&watchWork, &watchLock);
        checkAll(NULL, NULL);
        struct timespec until;
        clock_gettime(CLOCK_REALTIME, &until);
        until.tv_nsec += DEVEXEC_WATCH_NS;
        if (until.tv_nsec >= 1000000000L) {
            until.tv_sec++;
            until.tv_nsec -= 1000000000L;
        }
        pthread_cond_timedwait(&watchWork, &watchLock, &until);
    }
    return NULL;
}

/* Starts the watchdog if it is not running (watchLock held). */
static loomResult_t watchStart(void)
{
    if (watchStarted)
        return loomSuccess;
    pthread_t t;
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    int e = pthread_create(&t, &attr, watchMain, NULL);
    pthread_attr_destroy(&attr);
    if (e != 0)
        return loomSetError(loomSystemError, "cannot start the launch watchdog thread: %s",
                            strerror(e));
    watchStarted = 1;
    return loomSuccess;
}

/* Sleeps a little while a waited-for launch runs (the caller checks it between naps). */
static void nap(void)
{
    struct timespec ts = {0, 20000};
    nanosleep(&ts, NULL);
}

/* ---- the entry points ---- */

/* Takes the positions of the launch's communicators for the device, and counts the launch. */
static loomResult_t launchCommsTake(struct devLaunch *L)
{
    for (int b = 0, at = 0; b < L->nblocks; at += L->blockLanes[b++]) {
        struct devexecComm *dc = NULL;
        struct loomComm *comm = L->lanes[at].comm;
        LOOMCHECK(commState(comm, L->lib, &dc));
        if (!dc->deviceOwns) {
            positionsMove(comm, dc, 1);
            dc->deviceOwns = 1;
        }
    }
    return loomSuccess;
}

static void launchCount(struct devLaunch *L)
{
    for (int b = 0, at = 0; b < L->nblocks; at += L->blockLanes[b++]) {
        struct loomComm *comm = L->lanes[at].comm;
        int first = 1;
        for (int c = 0, k = 0; c < b; k += L->blockLanes[c++])
            first &= L->lanes[k].comm != comm;
        if (first) {
            comm->devexec->inflight++;
            atomic_fetch_add_explicit(&comm->pending, 1, memory_order_acq_rel);
        }
    }
}

/* The Loom CUDA streams of ops other than the launch's own (a group's), each once. */
static loomResult_t joinedFind(struct devLaunch *L, const struct loomOp *ops, int nops)
{
    L->njoined = 0;
    for (int i = 0; i < nops; i++) {
        struct loomStream *s = ops[i].stream;
        int seen = s == NULL || s == L->stream || !streamIsCuda(s);
        for (int j = 0; j < L->njoined && !seen; j++)
            seen = L->joined[j] == s;
        if (seen)
            continue;
        LOOMCHECK(
            arrayReserve((void **)&L->joined, &L->joinedCap, L->njoined + 1, sizeof(*L->joined)));
        L->joined[L->njoined++] = s;
    }
    if (L->njoined > 0 && L->joinEvent == NULL) {
        cuResult_t r = L->lib->eventCreate(&L->joinEvent, CUL_EVENT_DISABLE_TIMING);
        if (r != CUL_SUCCESS) {
            L->joinEvent = NULL;
            return cudaLibError(L->lib, r, "creating the event that joins a group's streams");
        }
    }
    return loomSuccess;
}

/*
 * Before the launch (on stream `on`): it waits for the work queued so far on
 * each joined stream (a wait takes the event's last record, so one event
 * serves every stream in turn).
 */
static loomResult_t joinBefore(struct devLaunch *L, cuStream_t on)
{
    for (int j = 0; j < L->njoined; j++) {
        cuResult_t r = L->lib->eventRecord(L->joinEvent, streamCudaHandle(L->joined[j]));
        if (r == CUL_SUCCESS)
            r = L->lib->streamWaitEvent(on, L->joinEvent, 0);
        if (r != CUL_SUCCESS)
            return cudaLibError(L->lib, r, "ordering a group's launch after its other streams");
    }
    return loomSuccess;
}

/* After the launch: each joined stream waits for it (L->event, recorded after the kernel). */
static loomResult_t joinAfter(struct devLaunch *L)
{
    for (int j = 0; j < L->njoined; j++) {
        cuResult_t r = L->lib->streamWaitEvent(streamCudaHandle(L->joined[j]), L->event, 0);
        if (r != CUL_SUCCESS)
            return cudaLibError(L->lib, r, "ordering a group's other streams after its launch");
    }
    return loomSuccess;
}

loomResult_t devexecRun(struct cudaExec *ex, struct loomLane *lanes, int nlanes,
                        struct loomStream *stream, const struct loomOp *ops, int nops)
{
    const struct cudaLib *lib;
    struct devLaunch *L = NULL;
    LOOMCHECK(cudaLibGet(&lib));
    loomResult_t err = execPrepare(lanes, nlanes); /* connects the peers named the first time */
    if (err != loomSuccess)
        return err;
    LOOMCHECK(launchTake(lib, &L));
    L->ctx = cudaPlanContext(ex);
    L->stream = stream;
    if ((err = lanesOrder(L, lanes, nlanes)) != loomSuccess ||
        (err = joinedFind(L, ops, nops)) != loomSuccess ||
        (err = launchCommsTake(L)) != loomSuccess || (err = descriptorFill(L)) != loomSuccess ||
        (err = joinBefore(L, cudaPlanStream(ex))) != loomSuccess ||
        (err = cudaKernelInterpret(ex, L->blocks, (unsigned int)L->nblocks, LOOM_KERNEL_THREADS)) !=
            loomSuccess) {
        launchGive(L);
        execMarkBroken(lanes, nlanes, err, 1);
        return err;
    }
    cuResult_t r = lib->eventRecord(L->event, cudaPlanStream(ex));
    loomResult_t joined = r == CUL_SUCCESS ? joinAfter(L) : loomSuccess;
    pthread_mutex_lock(&watchLock);
    L->progress = launchProgress(L);
    L->idleSince = L->lastLiveCheck = loomClockNs();
    launchCount(L);
    L->next = inflight;
    inflight = L;
    err = r == CUL_SUCCESS ? watchStart() : cudaLibError(lib, r, "recording a launch's event");
    if (err == loomSuccess && joined != loomSuccess)
        err = loomSetError(joined, "%s", debugLastError(NULL));
    pthread_cond_signal(&watchWork);
    if (stream != NULL || err != loomSuccess) {
        pthread_mutex_unlock(&watchLock);
        return err; /* a failed event record: the watchdog retires the launch when it ends */
    }
    while (!L->done) {
        launchCheck(L, loomClockNs());
        if (!L->done) {
            pthread_mutex_unlock(&watchLock);
            nap();
            pthread_mutex_lock(&watchLock);
        }
    }
    err = L->err;
    if (err != loomSuccess)
        loomSetError(err, "%s", L->why);
    L->next = freeLaunches;
    freeLaunches = L;
    pthread_mutex_unlock(&watchLock);
    return err;
}

static int sameComm(const struct devLaunch *L, const void *comm)
{
    for (int i = 0; i < L->nlanes; i++)
        if (L->lanes[i].comm == comm)
            return 1;
    return 0;
}

static int sameStream(const struct devLaunch *L, const void *stream)
{
    for (int j = 0; j < L->njoined; j++)
        if (L->joined[j] == stream)
            return 1;
    return L->stream == stream;
}

/* Checks the launches `match` accepts until none is left in flight. */
static void settle(int (*match)(const struct devLaunch *, const void *), const void *arg)
{
    pthread_mutex_lock(&watchLock);
    while (checkAll(match, arg)) {
        pthread_mutex_unlock(&watchLock);
        nap();
        pthread_mutex_lock(&watchLock);
    }
    pthread_mutex_unlock(&watchLock);
}

void devexecReclaim(struct loomComm *comm)
{
    struct devexecComm *dc = comm->devexec;
    if (dc == NULL || !dc->deviceOwns)
        return;
    settle(sameComm, comm);
    positionsMove(comm, dc, 0);
    dc->deviceOwns = 0;
}

void devexecSettle(const struct loomStream *s)
{
    settle(sameStream, s);
}

void devexecFree(struct loomComm *comm)
{
    struct devexecComm *dc = comm->devexec;
    if (dc == NULL)
        return;
    settle(sameComm, comm); /* none is left: destroy waited for its pending operations */
    comm->devexec = NULL;
    dc->lib->memFreeHost(dc->mem);
    free(dc->onDevice);
    free(dc);
}
