/*
 * devexec.c — device buffers as one launch of the plan interpreter.
 *
 * With LOOM_EXECUTOR=kernel (every link over shared memory, kexec.c), a
 * call or group on device buffers is not walked step by step by the host
 * (cudaexec.c): its lanes become the blocks of one launch of loomInterpret
 * (kernels.cu over src/device/interp.h), which waits for the FIFOs, copies,
 * reduces and publishes the counters itself:
 *
 *   the call:    plan -> descriptor staged in mapped memory -> on S: copy to the GPU,
 *                cuLaunchKernel, copy the blocks and lanes back -> returns
 *   S:           ... app work ... [ loomInterpret: every step of every lane ] ... app work ...
 *   watchdog:    polls the launch's event; meanwhile watches the positions and beats and
 *                the failure signals, and raises the launch's abort flag on a failure
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
 *     a peer on the host executor). The host never reads a device FIFO;
 *   - per communicator, the interpreter's view of the connectors (struct
 *     loomDevConn) is in GPU memory, copied from mapped memory as links
 *     connect; the positions of device FIFOs are in GPU memory, those of
 *     host FIFOs in mapped memory (the host executors take them back);
 *   - per launch, the blocks (each with the error record it writes: status,
 *     lane, peer, size word), the lanes, a copy of their plans, the
 *     connector ownership and the LL staging are in GPU memory, staged in
 *     mapped memory and copied in on S before the kernel; the blocks and
 *     lanes are copied back on S after it, so the staging copy is final
 *     when the launch's event completes. Mapped: the abort flag the host
 *     raises and each block's beat (steps published), the watchdog's
 *     progress with the host FIFOs' positions.
 *
 * Positions. The host executors keep a connector's position in the
 * connector (c->pos), a launch in the mapped block. Whoever runs next takes
 * them over: a launch copies them in when the host had them, and a
 * host-driven run on the communicator first waits for its launches to end
 * and copies them back (devexecReclaim). A connector on a device FIFO is
 * another FIFO with its own count: its position stays in GPU memory.
 *
 * The watchdog: one thread per process, started by the first launch, looks
 * at every launch in flight every DEVEXEC_WATCH_NS. Ended (its event) ->
 * retired: the blocks' error records become the call's error, with the host
 * executor's lines (interpview.c, execfail.c), recorded on the communicators
 * and the Loom stream, the communicators marked broken and the peers told
 * (execfail.h: the failure services every executor uses; this file calls no
 * other executor, and reaches the CUDA side of the plan, its context and
 * streams, through cudaplan.c). Running ->
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

#include "array.h"
#include "cudacore.h"
#include "cudalib.h"
#include "debug.h"
#include "interp.h"
#include "kernels.h"
#include "executor.h"
#include "interpview.h"

#define DEVEXEC_WATCH_NS (200 * 1000LL) /* the watchdog's period while launches are in flight */
#define DEVEXEC_ALIGN 64

/*
 * A communicator's connectors as launched kernels see them: the views in GPU
 * memory (copied from mapped memory as connectors connect), the positions of
 * host FIFOs in mapped memory (the host executors take them back), those of
 * device FIFOs in GPU memory.
 */
struct devexecComm {
    const struct cudaLib *lib;
    void *mem;                 /* cuMemHostAlloc'ed (mapped): pos, zeros, conns */
    uint64_t *pos;             /* [channel][2 * nranks]: send connectors, then receive */
    const uint64_t *zeros;     /* the same size, never written: what dpos starts from */
    struct loomDevConn *conns; /* the same layout: the views, as copied to dconns */
    uint8_t *onDevice;         /* the same layout: the connector's FIFO is in GPU memory */
    cuDevPtr_t dmem;           /* GPU memory: dconns, then dpos */
    struct loomDevConn *dconns;
    uint64_t *dpos; /* positions of the connectors on device FIFOs */
    int filled;     /* comm->nLinksUp when conns were filled */
    int deviceOwns; /* the positions are in pos, not in the connectors */
    int inflight;   /* launches not retired (under watchLock) */
};

/* One launch, from the call to its retirement. */
struct devLaunch {
    struct devLaunch *next; /* in flight, or free */
    const struct cudaLib *lib;
    cuContext_t ctx;
    cuEvent_t event; /* recorded after the kernel */
    char *mem;       /* mapped: the abort flag, the beats, and the staging copy of the descriptor */
    cuDevPtr_t dmem; /* GPU memory: the descriptor the kernel reads (the same layout) */
    size_t memBytes;
    size_t descBytes, backBytes; /* copied in before the kernel; copied back after it */
    int32_t *abort;
    uint64_t *beats; /* [2 * nblocks], mapped: each block's beat (interp.h): steps, waited peer */
    struct loomDevBlock *blocks;  /* the staging copy: final once the launch has ended */
    struct loomDevLane *devLanes; /* block by block, staging */
    int nblocks;
    struct loomLane *lanes; /* the executors' view of devLanes (interpLanesSync), in order */
    int nlanes, laneCap;
    int *blockLanes; /* [nblocks]: lanes of each block */
    int blockCap;
    struct loomStream *stream;  /* the Loom CUDA stream, or NULL: a caller waits */
    struct loomStream **joined; /* the group's other Loom CUDA streams (they wait on event) */
    const struct loomExecStreams *streams; /* what those are, the core's (executor.h) */
    int njoined, joinedCap;
    cuEvent_t joinEvent; /* recorded on each joined stream before the launch */
    /* the watchdog's */
    uint64_t progress, idleSince, lastLiveCheck;
    int stopping; /* the abort flag is up for stopErr (heard: an abort or a peer's notice) */
    int deadSeen; /* 1 + a dead peer a block waited for at the last look, with no progress */
    uint64_t deadProgress;
    int heard;
    loomResult_t stopErr;
    char stopWhy[512];
    /* captured into a CUDA graph: the graph owns it (a user object) and each replay runs it */
    int graph;
    int running; /* replays between their first and last host node */
    int orphan;  /* a communicator of it was destroyed, or its capture failed: replays do nothing */
    uint64_t stopSince;          /* when the watchdog first saw a replay told to stop */
    struct devLaunch *nextGraph; /* on graphLaunches */
    /* set when retired */
    int done;
    loomResult_t err;
    char why[512];
};

static pthread_mutex_t watchLock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t watchWork = PTHREAD_COND_INITIALIZER;
static struct devLaunch *inflight, *freeLaunches;
static struct devLaunch *graphLaunches; /* captured, while their graphs live */
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

/* ---- a communicator's launch state ---- */

/*
 * Fills the view of comm's connector to (send) or from peer on channel ch
 * (index i of the block) once it is connected: the device FIFO when the pair
 * has one, else the host FIFO; the view goes to GPU memory on `stream`,
 * ahead of the kernel that reads it. A kernel rings no doorbell (its peers
 * poll).
 */
static loomResult_t connFill(struct loomComm *comm, struct devexecComm *dc, int ch, int peer,
                             int send, size_t i, cuStream_t stream)
{
    const struct loomConnector *c =
        send ? &comm->channels[ch].send[peer] : &comm->channels[ch].recv[peer];
    struct loomDevConn *d = &dc->conns[i];
    if (d->pos != NULL || !c->connected)
        return loomSuccess;
    dc->onDevice[i] = (uint8_t)p2pDevConn(comm, ch, peer, send, d);
    if (dc->onDevice[i])
        d->pos = &dc->dpos[i];
    else
        interpConnView(d, c, &dc->pos[i], NULL);
    cuResult_t r = dc->lib->memcpyAsync((cuDevPtr_t)(uintptr_t)&dc->dconns[i],
                                        (cuDevPtr_t)(uintptr_t)d, sizeof(*d), stream);
    return r == CUL_SUCCESS ? loomSuccess
                            : cudaLibError(dc->lib, r, "copying a connector's view to the GPU");
}

/* comm's launch state, made on first use: mapped and GPU memory, the positions zeroed. */
static loomResult_t commStateMake(struct loomComm *comm, const struct cudaLib *lib,
                                  cuStream_t stream, struct devexecComm **out)
{
    size_t n = 2 * (size_t)comm->nranks * (size_t)comm->nChannels;
    struct devexecComm *dc = calloc(1, sizeof(*dc));
    void *mem = NULL;
    if (dc == NULL || (dc->onDevice = calloc(n, 1)) == NULL) {
        free(dc);
        return loomSetError(loomSystemError, "out of memory for the launch state");
    }
    dc->lib = lib;
    loomResult_t res = mappedAlloc(lib, n * (2 * sizeof(uint64_t) + sizeof(*dc->conns)),
                                   "allocating mapped memory for the launched kernel", &mem);
    cuResult_t r = CUL_SUCCESS;
    if (res == loomSuccess &&
        (r = lib->memAlloc(&dc->dmem, n * (sizeof(uint64_t) + sizeof(*dc->conns)))) != CUL_SUCCESS)
        res = cudaLibError(lib, r, "allocating GPU memory for the launched kernel's connectors");
    if (res != loomSuccess)
        goto fail_free;
    dc->mem = mem;
    dc->pos = mem;
    dc->zeros = dc->pos + n;
    dc->conns = (struct loomDevConn *)(dc->pos + 2 * n);
    dc->dconns = (struct loomDevConn *)(uintptr_t)dc->dmem;
    dc->dpos = (uint64_t *)(dc->dconns + n);
    r = lib->memcpyAsync((cuDevPtr_t)(uintptr_t)dc->dpos, (cuDevPtr_t)(uintptr_t)dc->zeros,
                         n * sizeof(uint64_t), stream);
    if (r != CUL_SUCCESS) {
        res = cudaLibError(lib, r, "zeroing the launched kernel's positions");
        goto fail_free;
    }
    dc->filled = -1;
    comm->devexec = dc;
    *out = dc;
    return loomSuccess;
fail_free:
    if (dc->dmem)
        lib->memFree(dc->dmem);
    if (mem)
        lib->memFreeHost(mem);
    free(dc->onDevice);
    free(dc);
    return res;
}

/* comm's launch state, with the connectors connected since filled in (copies on `stream`). */
static loomResult_t commState(struct loomComm *comm, const struct cudaLib *lib, cuStream_t stream,
                              struct devexecComm **out)
{
    struct devexecComm *dc = comm->devexec;
    if (dc == NULL)
        LOOMCHECK(commStateMake(comm, lib, stream, &dc));
    int up = atomic_load_explicit(&comm->nLinksUp, memory_order_acquire);
    size_t np = (size_t)comm->nranks;
    for (int ch = 0; dc->filled != up && ch < comm->nChannels; ch++) {
        size_t base = (size_t)ch * 2 * np;
        for (size_t p = 0; p < np; p++) {
            LOOMCHECK(connFill(comm, dc, ch, (int)p, 1, base + p, stream));
            LOOMCHECK(connFill(comm, dc, ch, (int)p, 0, base + np + p, stream));
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
    L->stopping = L->heard = L->done = L->deadSeen = 0;
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

/*
 * The descriptor's bytes; off[]: where the blocks, lanes, plans, owners,
 * stages and (mapped only) beats start. The abort flag comes first, in the
 * mapped copy only.
 */
static size_t descriptorBytes(const struct devLaunch *L, size_t off[6])
{
    size_t steps = 0, owners = 0;
    for (int i = 0; i < L->nlanes; i++)
        steps += L->lanes[i].plan->nsteps;
    for (int b = 0, at = 0; b < L->nblocks; at += L->blockLanes[b++])
        if (L->blockLanes[b] > 1)
            owners += 2 * (size_t)L->lanes[at].comm->nranks;
    off[0] = DEVEXEC_ALIGN;
    off[1] = off[0] + alignUp((size_t)L->nblocks * sizeof(struct loomDevBlock));
    off[2] = off[1] + alignUp((size_t)L->nlanes * sizeof(struct loomDevLane));
    off[3] = off[2] + alignUp(steps * sizeof(struct loomPlanStep));
    off[4] = off[3] + alignUp(owners * sizeof(int32_t));
    off[5] = off[4] + (size_t)L->nblocks * LOOM_DEV_STAGE_BYTES;
    return off[5] + 2 * (size_t)L->nblocks * sizeof(uint64_t);
}

/* The launch's mapped and GPU memory, at least `bytes` each (kept from launch to launch). */
static loomResult_t descriptorMemory(struct devLaunch *L, size_t bytes)
{
    if (L->memBytes >= bytes)
        return loomSuccess;
    size_t want = bytes > 2 * L->memBytes ? bytes : 2 * L->memBytes;
    void *mem = NULL;
    cuDevPtr_t dmem = 0;
    LOOMCHECK(mappedAlloc(L->lib, want, "allocating mapped memory for a launch's plans", &mem));
    cuResult_t r = L->lib->memAlloc(&dmem, want);
    if (r != CUL_SUCCESS) {
        L->lib->memFreeHost(mem);
        return cudaLibError(L->lib, r, "allocating GPU memory for a launch's plans");
    }
    if (L->mem) { /* its last kernel has ended: it was retired */
        L->lib->memFreeHost(L->mem);
        L->lib->memFree(L->dmem);
    }
    L->mem = mem;
    L->dmem = dmem;
    L->memBytes = want;
    return loomSuccess;
}

/* Where the kernel sees byte `at` of the descriptor (GPU memory). */
static void *deviceAt(const struct devLaunch *L, size_t at)
{
    return (void *)(uintptr_t)(L->dmem + at);
}

/* The staging copy of what the descriptor's device pointer p points to. */
static const void *stagingOf(const struct devLaunch *L, const void *p)
{
    return L->mem + ((uintptr_t)p - (uintptr_t)L->dmem);
}

/*
 * Fills the staging copy of the descriptor (device addresses throughout,
 * but the abort flag and the beats, which stay in mapped memory): the
 * interpreter's blocks and lanes over copies of the plans.
 */
static loomResult_t descriptorFill(struct devLaunch *L)
{
    size_t off[6];
    LOOMCHECK(descriptorMemory(L, descriptorBytes(L, off)));
    L->abort = (int32_t *)L->mem;
    *L->abort = 0;
    L->beats = (uint64_t *)(L->mem + off[5]);
    L->blocks = (struct loomDevBlock *)(L->mem + off[0]);
    L->devLanes = (struct loomDevLane *)(L->mem + off[1]);
    L->descBytes = off[4] - off[0];
    L->backBytes = off[2] - off[0];
    struct loomPlanStep *steps = (struct loomPlanStep *)(L->mem + off[2]);
    size_t owners = off[3];
    for (int b = 0, at = 0; b < L->nblocks; at += L->blockLanes[b++]) {
        struct loomComm *comm = L->lanes[at].comm;
        struct devexecComm *dc = comm->devexec;
        struct loomDevConn *conns = dc->dconns + (size_t)L->lanes[at].channel * 2 * comm->nranks;
        struct loomDevBlock *d = &L->blocks[b];
        memset(d, 0, sizeof(*d));
        d->lanes = deviceAt(L, off[1] + (size_t)at * sizeof(struct loomDevLane));
        d->nlanes = (uint32_t)L->blockLanes[b];
        d->nranks = comm->nranks;
        if (d->nlanes > 1) {
            d->owner = deviceAt(L, owners);
            owners += 2 * (size_t)comm->nranks * sizeof(int32_t);
        }
        d->abort = L->abort;
        d->llMod = LOOM_LL_MOD;
        d->host = NULL; /* the device backs off by itself (port.h) */
        d->stage = deviceAt(L, off[4] + (size_t)b * LOOM_DEV_STAGE_BYTES);
        L->beats[2 * b] = L->beats[2 * b + 1] = 0;
        d->beat = &L->beats[2 * b];
        for (int i = at; i < at + L->blockLanes[b]; i++) {
            const struct loomLane *l = &L->lanes[i];
            memcpy(steps, l->plan->steps, l->plan->nsteps * sizeof(*steps));
            L->devLanes[i] =
                (struct loomDevLane){.steps = deviceAt(L, (size_t)((char *)steps - L->mem)),
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

/* The Loom CUDA streams of ops other than the launch's own (a group's), each once. */
static loomResult_t joinedFind(struct devLaunch *L, const struct loomOp *ops, int nops)
{
    L->njoined = 0;
    for (int i = 0; i < nops; i++) {
        struct loomStream *s = ops[i].stream;
        int seen = s == NULL || s == L->stream || !L->streams->isCuda(s);
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
        cuResult_t r = L->lib->eventRecord(L->joinEvent, L->streams->handle(L->joined[j]));
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
        cuResult_t r = L->lib->streamWaitEvent(L->streams->handle(L->joined[j]), L->event, 0);
        if (r != CUL_SUCCESS)
            return cudaLibError(L->lib, r, "ordering a group's other streams after its launch");
    }
    return loomSuccess;
}

/*
 * Queues the launch on `stream`: the descriptor copied to GPU memory, the
 * kernel, the blocks and lanes copied back (their status, error records and
 * final steps, for the watchdog once the launch has ended).
 */
static loomResult_t descriptorLaunch(struct devLaunch *L, struct cudaExec *ex, cuStream_t stream)
{
    const struct cudaLib *lib = L->lib;
    cuDevPtr_t staged = (cuDevPtr_t)(uintptr_t)L->blocks, dev = L->dmem + DEVEXEC_ALIGN;
    cuResult_t r = lib->memcpyAsync(dev, staged, L->descBytes, stream);
    if (r != CUL_SUCCESS)
        return cudaLibError(lib, r, "copying a launch's plans to the GPU");
    LOOMCHECK(joinBefore(L, stream));
    LOOMCHECK(cudaKernelInterpret(ex, (void *)(uintptr_t)dev, (unsigned int)L->nblocks,
                                  LOOM_KERNEL_THREADS));
    r = lib->memcpyAsync(staged, dev, L->backBytes, stream);
    return r == CUL_SUCCESS ? loomSuccess
                            : cudaLibError(lib, r, "copying a launch's error records back");
}

/* ---- watching ---- */

/*
 * The positions of the launch's host FIFOs and the beats of its blocks (mapped
 * memory, which the kernel moves as it publishes each tail and head): moves
 * when the kernel does. The device FIFOs and their positions are in GPU
 * memory, which the host cannot read.
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
        sum += __atomic_load_n(&L->beats[2 * b], __ATOMIC_ACQUIRE);
    }
    return sum;
}

/*
 * 1 if lane l's plan (d: the launch's copy, which stays as it is while the
 * plan cache moves on) names peer p, and the FIFO from p is empty or the one
 * to p is full.
 */
static int starvedOn(const struct devLaunch *L, const struct loomLane *l,
                     const struct loomDevLane *d, int p)
{
    const struct loomChannel *ch = &l->comm->channels[l->channel];
    const struct loomConnector *rc = &ch->recv[p], *sc = &ch->send[p];
    const struct loomPlanStep *steps = stagingOf(L, d->steps);
    if (!loomPlanUsesPeer(steps, d->nsteps, 1, p) && !loomPlanUsesPeer(steps, d->nsteps, 0, p))
        return 0;
    if (!rc->connected || !sc->connected)
        return 0;
    const struct devexecComm *dc = l->comm->devexec;
    size_t at = (size_t)l->channel * 2 * (size_t)l->comm->nranks + (size_t)p;
    if (dc->onDevice[at] || dc->onDevice[at + (size_t)l->comm->nranks])
        return 0; /* its counters are in GPU memory: the blocks' waits say (blockWaitsOnDead) */
    return !loomMessageIn(atomic_load_explicit(&rc->fifo->tail, memory_order_acquire),
                          atomic_load_explicit(&rc->fifo->head, memory_order_acquire)) ||
           !loomSlotFree(atomic_load_explicit(&sc->fifo->head, memory_order_acquire),
                         atomic_load_explicit(&sc->fifo->tail, memory_order_acquire));
}

/*
 * A dead peer that a block of L reports waiting for (beat[1]) on a device
 * FIFO, seen twice in a row with no progress in between (a message the peer
 * wrote just before it died is still used): the peer, else -1; *comm its
 * communicator.
 */
static int blockWaitsOnDead(struct devLaunch *L, const struct loomComm **comm)
{
    int seen = -1;
    for (int b = 0, at = 0; b < L->nblocks && seen < 0; at += L->blockLanes[b++]) {
        const struct loomLane *l = &L->lanes[at];
        int p = (int)__atomic_load_n(&L->beats[2 * b + 1], __ATOMIC_ACQUIRE) - 1;
        size_t i = (size_t)l->channel * 2 * (size_t)l->comm->nranks + (size_t)p;
        if (p >= 0 && p < l->comm->nranks && l->comm->devexec->onDevice[i] &&
            execPeerFailed(l->comm, p)) {
            seen = p;
            *comm = l->comm;
        }
    }
    int again = seen >= 0 && L->deadSeen == seen + 1 && L->deadProgress == L->progress;
    L->deadSeen = seen + 1;
    L->deadProgress = L->progress;
    return again ? seen : -1;
}

/* A peer the kernel may be waiting for that has failed: its error, recorded; else loomSuccess. */
static loomResult_t deadPeer(struct devLaunch *L)
{
    const struct loomComm *dc = NULL;
    int dp = blockWaitsOnDead(L, &dc);
    if (dp >= 0)
        return loomSetError(loomRemoteError,
                            "rank %d (pid %d on %s) exited while rank %d's kernel waited for it",
                            dp, dc->peers[dp].pid, dc->peers[dp].hostname, dc->rank);
    for (int i = 0; i < L->nlanes; i++) {
        const struct loomComm *comm = L->lanes[i].comm;
        for (int p = 0; p < comm->nranks; p++)
            if (p != comm->rank && execPeerFailed(comm, p) &&
                starvedOn(L, &L->lanes[i], &L->devLanes[i], p))
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
    interpLanesSync(L->devLanes, L->lanes, L->nlanes);
    for (int b = 0, at = 0; b < L->nblocks; at += L->blockLanes[b++]) {
        struct loomDevBlock d = L->blocks[b];
        d.lanes = &L->devLanes[at]; /* the staging copy, final now */
        if (d.status != LOOM_DEV_OK && d.status != LOOM_DEV_STOPPED)
            return interpBlockError(&d, &L->lanes[at], 1);
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

/*
 * An ended launch (r: its event's query): its error recorded everywhere, its
 * counts dropped. lost: a replay that never ended (its last host node did not
 * run), retired with that line instead.
 */
static void launchRetire(struct devLaunch *L, cuResult_t r, const char *lost)
{
    loomResult_t err = loomSuccess;
    int post = 1, failed = r != CUL_SUCCESS || lost != NULL;
    for (int b = 0; b < L->nblocks; b++)
        failed |= L->blocks[b].status != LOOM_DEV_OK;
    if (lost)
        err = loomSetError(loomUnhandledCudaError, "%s", lost);
    else if (r != CUL_SUCCESS)
        err = cudaLibError(L->lib, r, "the kernel of a collective");
    else if (failed)
        err = launchError(L, &post);
    L->err = err;
    snprintf(L->why, sizeof(L->why), "%s", err != loomSuccess ? debugLastError(NULL) : "");
    if (err != loomSuccess) {
        execMarkBroken(L->lanes, L->nlanes, err, post);
        /* As a stream's unit that failed; a replay's error has nobody else to go to. */
        for (int i = 0; (L->stream || L->graph) && i < L->nlanes; i++) {
            int none = loomSuccess;
            atomic_compare_exchange_strong(&L->lanes[i].comm->asyncError, &none, (int)err);
        }
        if (L->stream && !L->graph)
            L->streams->recordError(L->stream, err, L->why);
        for (int j = 0; j < L->njoined; j++)
            L->streams->recordError(L->joined[j], err, L->why);
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

/*
 * Looks at a launch in flight (watchLock held): retires it if it ended, else
 * watches it. A replay of a captured launch is retired by its last host node.
 */
static void launchCheck(struct devLaunch *L, uint64_t now)
{
    if (L->graph) {
        launchWatch(L, now);
        if (L->stopping && L->stopSince == 0)
            L->stopSince = now;
        /* Told to stop a timeout ago and still not ended: its last host node will not run (the
         * context failed: the driver calls no host function after an error). */
        if (L->stopping &&
            now - L->stopSince >= (uint64_t)L->lanes[0].comm->timeoutSec * 1000000000ULL) {
            L->running = 0;
            launchRetire(L, CUL_SUCCESS,
                         "the replay of a captured call did not end after it was told to stop: "
                         "the CUDA context failed, or the GPU hangs");
        }
        return;
    }
    cuContext_t saved = NULL;
    L->lib->ctxGetCurrent(&saved);
    if (saved != L->ctx)
        L->lib->ctxSetCurrent(L->ctx);
    cuResult_t r = L->lib->eventQuery(L->event);
    if (r == CUL_ERROR_NOT_READY)
        launchWatch(L, now);
    else
        launchRetire(L, r, NULL);
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
        if (L->done && L->stream && !L->graph)
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
static loomResult_t launchCommsTake(struct devLaunch *L, cuStream_t stream)
{
    for (int b = 0, at = 0; b < L->nblocks; at += L->blockLanes[b++]) {
        struct devexecComm *dc = NULL;
        struct loomComm *comm = L->lanes[at].comm;
        LOOMCHECK(commState(comm, L->lib, stream, &dc));
        pthread_mutex_lock(&watchLock); /* a replay's first node takes them too */
        if (!dc->deviceOwns) {
            positionsMove(comm, dc, 1);
            dc->deviceOwns = 1;
        }
        pthread_mutex_unlock(&watchLock);
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

/* ---- captured into a CUDA graph ---- */

/*
 * A replay begins (a host node of the graph, before the descriptor's copy
 * and the kernel; no CUDA call may be made here): what devexecRun does for a
 * launch after queueing it, so the watchdog watches the replay. The FIFO
 * positions are the communicator's, where the last launch or replay left
 * them (taken back first if a host-driven run had them since).
 */
static void replayBegin(void *arg)
{
    struct devLaunch *L = arg;
    pthread_mutex_lock(&watchLock);
    int broken = 0;
    for (int i = 0; i < L->nlanes && !L->orphan; i++)
        broken |= atomic_load(&L->lanes[i].comm->broken) != 0 ||
                  atomic_load(&L->lanes[i].comm->abortFlag) != 0;
    if (L->orphan || broken) { /* blocks with no lanes: the kernel ends at once, touching no FIFO */
        for (int b = 0; b < L->nblocks; b++)
            L->blocks[b].nlanes = 0; /* copied in after this node */
        __atomic_store_n(L->abort, 1, __ATOMIC_RELEASE);
        pthread_mutex_unlock(&watchLock);
        return; /* a broken communicator's error is in loomCommGetAsyncError already */
    }
    if (L->running++ > 0) { /* two instances of the graph at once: both over one descriptor */
        if (!L->stopping) {
            L->stopping = 1;
            L->stopErr = loomInvalidUsage;
            snprintf(L->stopWhy, sizeof(L->stopWhy),
                     "a captured Loom call was replayed while its last replay still ran (two "
                     "instances of one CUDA graph launched at once)");
        }
        __atomic_store_n(L->abort, 1, __ATOMIC_RELEASE);
        pthread_mutex_unlock(&watchLock);
        return;
    }
    for (int b = 0, at = 0; b < L->nblocks; at += L->blockLanes[b++]) {
        struct loomComm *comm = L->lanes[at].comm;
        if (!comm->devexec->deviceOwns) {
            positionsMove(comm, comm->devexec, 1);
            comm->devexec->deviceOwns = 1;
        }
    }
    __atomic_store_n(L->abort, 0, __ATOMIC_RELEASE);
    memset(L->beats, 0, 2 * (size_t)L->nblocks * sizeof(uint64_t));
    L->stopping = L->heard = L->done = L->deadSeen = 0;
    L->deadProgress = L->stopSince = 0;
    L->err = L->stopErr = loomSuccess;
    L->why[0] = L->stopWhy[0] = '\0';
    L->progress = launchProgress(L);
    L->idleSince = L->lastLiveCheck = loomClockNs();
    launchCount(L);
    L->next = inflight;
    inflight = L;
    pthread_cond_signal(&watchWork);
    pthread_mutex_unlock(&watchLock);
}

/* A replay ended (a host node after the copy back): retired, as the watchdog retires a launch. */
static void replayEnd(void *arg)
{
    struct devLaunch *L = arg;
    pthread_mutex_lock(&watchLock);
    if (L->running > 0 && --L->running == 0)
        launchRetire(L, CUL_SUCCESS, NULL);
    pthread_mutex_unlock(&watchLock);
}

/*
 * The graph was destroyed (the user object's destructor, on a thread of the
 * driver's, after the graph's last replay; no CUDA call may be made here):
 * the launch's memory is kept for later launches, as a retired launch's is.
 */
static void graphLaunchRelease(void *arg)
{
    struct devLaunch *L = arg;
    pthread_mutex_lock(&watchLock);
    struct devLaunch **pp = &graphLaunches;
    while (*pp && *pp != L)
        pp = &(*pp)->nextGraph;
    if (*pp)
        *pp = L->nextGraph;
    if (L->running > 0) { /* its last replay never ended (see launchCheck) */
        L->running = 0;
        launchRetire(L, CUL_SUCCESS,
                     "a CUDA graph was destroyed while a replay of a captured call had not ended");
    }
    L->graph = L->orphan = 0;
    L->next = freeLaunches;
    freeLaunches = L;
    pthread_mutex_unlock(&watchLock);
}

/*
 * Queues the launch into the graph being captured on `cs`: a host node that
 * begins the replay, the descriptor's copy, the kernel, the copy back, and a
 * host node that retires it. The graph holds the launch (a user object) for
 * its life. What the launch needs from the host now (the connector views in
 * GPU memory, the descriptor) is made outside the graph, on the executor's
 * own stream, which cudaPlanEnd waits for before the call returns. Each
 * replay copies the same staging copy in: the copy back of the last replay
 * leaves nothing there that matters, since the kernel starts every lane from
 * its first step (interp.h, loomDevRun).
 */
static loomResult_t launchCapture(struct devLaunch *L, struct cudaExec *ex, cuStream_t cs,
                                  cuGraph_t graph)
{
    const struct cudaLib *lib = L->lib;
    if (L->njoined > 0)
        return loomSetError(loomInvalidUsage,
                            "loomGroupEnd: the group's calls are on %d CUDA streams, and a "
                            "group can be captured into a CUDA graph only from one; make its "
                            "calls on the stream being captured",
                            L->njoined + 1);
    LOOMCHECK(launchCommsTake(L, cudaPlanOwnStream(ex)));
    LOOMCHECK(descriptorFill(L));
    pthread_mutex_lock(&watchLock);
    loomResult_t err = watchStart();
    pthread_mutex_unlock(&watchLock);
    LOOMCHECK(err);
    cuUserObject_t obj = NULL;
    cuResult_t r =
        lib->userObjectCreate(&obj, L, graphLaunchRelease, 1, CUL_USER_OBJECT_NO_DESTRUCTOR_SYNC);
    if (r != CUL_SUCCESS)
        return cudaLibError(lib, r, "making a CUDA user object for a captured call");
    /* From here the user object owns the launch: its destructor gives it back. */
    L->graph = 1;
    L->stream = NULL; /* replays report to the communicators (loomCommGetAsyncError) */
    if ((r = lib->graphRetainUserObject(graph, obj, 1, CUL_GRAPH_USER_OBJECT_MOVE)) !=
        CUL_SUCCESS) {
        lib->userObjectRelease(obj, 1);
        return cudaLibError(lib, r, "handing a captured call to its CUDA graph");
    }
    pthread_mutex_lock(&watchLock);
    L->nextGraph = graphLaunches;
    graphLaunches = L;
    pthread_mutex_unlock(&watchLock);
    if ((r = lib->launchHostFunc(cs, replayBegin, L)) != CUL_SUCCESS)
        return cudaLibError(lib, r, "capturing the host node that begins a replay");
    err = descriptorLaunch(L, ex, cs);
    if (err == loomSuccess && (r = lib->launchHostFunc(cs, replayEnd, L)) != CUL_SUCCESS)
        err = cudaLibError(lib, r, "capturing the host node that ends a replay");
    if (err != loomSuccess) { /* the graph has the first node: its replays do nothing */
        pthread_mutex_lock(&watchLock);
        L->orphan = 1;
        pthread_mutex_unlock(&watchLock);
    }
    return err;
}

/* The graph being captured on cs, or NULL when cs is not capturing. */
static loomResult_t captureGraph(const struct cudaLib *lib, cuStream_t cs, cuGraph_t *graph)
{
    int status = CUL_STREAM_CAPTURE_STATUS_NONE;
    *graph = NULL;
    cuResult_t r = lib->streamGetCaptureInfo(cs, &status, NULL, graph, NULL, NULL);
    if (r != CUL_SUCCESS)
        return cudaLibError(lib, r, "asking whether the CUDA stream is being captured");
    if (status != CUL_STREAM_CAPTURE_STATUS_NONE && status != CUL_STREAM_CAPTURE_STATUS_ACTIVE)
        return loomSetError(loomInvalidUsage, "the CUDA stream's capture was invalidated");
    if (status == CUL_STREAM_CAPTURE_STATUS_NONE)
        *graph = NULL;
    return loomSuccess;
}

/*
 * Runs the lanes of a device plan (after cudaPlanBegin) of ops as one launch
 * of loomInterpret. On a Loom CUDA stream (`stream`) the launch goes on the
 * application's stream and the call returns at once; the other Loom CUDA
 * streams of a group's ops join it with events (the launch waits for the
 * work queued on them, and they for the launch); a failure is reported
 * by loomStreamSynchronize/Query on any of them and as the communicators'
 * async error. Otherwise it goes on ex's stream and the call returns when
 * it has ended, with its error. loomSuccess, or the error (recorded).
 */
static loomResult_t devexecRun(struct cudaExec *ex, struct loomLane *lanes, int nlanes,
                               struct loomStream *stream, const struct loomExecStreams *streams,
                               const struct loomOp *ops, int nops)
{
    const struct cudaLib *lib;
    struct devLaunch *L = NULL;
    loomResult_t err;
    LOOMCHECK(cudaLibGet(&lib));
    cuGraph_t graph = NULL;
    if (stream != NULL)
        LOOMCHECK(captureGraph(lib, cudaPlanStream(ex), &graph));
    LOOMCHECK(launchTake(lib, &L));
    L->ctx = cudaPlanContext(ex);
    L->stream = stream;
    L->streams = streams;
    if (graph != NULL) {
        if ((err = lanesOrder(L, lanes, nlanes)) != loomSuccess ||
            (err = joinedFind(L, ops, nops)) != loomSuccess ||
            (err = launchCapture(L, ex, cudaPlanStream(ex), graph)) != loomSuccess) {
            if (!L->graph)
                launchGive(L);
            return err; /* nothing ran: the communicators stay usable */
        }
        return loomSuccess;
    }
    if ((err = lanesOrder(L, lanes, nlanes)) != loomSuccess ||
        (err = joinedFind(L, ops, nops)) != loomSuccess ||
        (err = launchCommsTake(L, cudaPlanStream(ex))) != loomSuccess ||
        (err = descriptorFill(L)) != loomSuccess ||
        (err = descriptorLaunch(L, ex, cudaPlanStream(ex))) != loomSuccess) {
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
    pthread_mutex_lock(&watchLock); /* a replay's first node takes them too */
    positionsMove(comm, dc, 0);
    dc->deviceOwns = 0;
    pthread_mutex_unlock(&watchLock);
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
    pthread_mutex_lock(&watchLock); /* first: a replay that begins from here does nothing */
    for (struct devLaunch *L = graphLaunches; L; L = L->nextGraph)
        L->orphan |= sameComm(L, comm);
    pthread_mutex_unlock(&watchLock);
    settle(sameComm, comm); /* none is left: destroy waited for its pending operations */
    comm->devexec = NULL;
    dc->lib->memFreeHost(dc->mem);
    dc->lib->memFree(dc->dmem);
    free(dc->onDevice);
    free(dc);
}

static loomResult_t launchRun(struct loomLane *lanes, int nlanes, const struct loomExecCall *call)
{
    return devexecRun(call->dev, lanes, nlanes, call->stream, call->streams, call->ops, call->nops);
}

const struct loomExecutor loomExecLaunch = {.name = "launch",
                                            .lines = 1,
                                            .serves = interpServes,
                                            .prepare = execPrepare,
                                            .run = launchRun,
                                            .reclaim = devexecReclaim};
