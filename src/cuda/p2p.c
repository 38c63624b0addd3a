/*
 * p2p.c — GPU peer-to-peer: FIFO slots in the receiving GPU's memory, for
 * ranks on one host whose buffers are on GPUs.
 *
 * A communicator is bound to the CUDA device whose context is current on
 * the thread that creates it (as NCCL binds to cudaGetDevice()); a process
 * that has not touched CUDA is not bound and never loads the driver. Each
 * bound rank allocates, in its GPU's memory, a second set of slots for the
 * FIFOs it receives on, laid out like the shm segment's:
 *
 *   [ ch 0: from local 0 | from local 1 | ... ][ ch 1: ... ] ...   each LOOM_STEPS x slot
 *
 * and exports it with a CUDA IPC handle; every rank opens the handles of its
 * local peers (cuIpcOpenMemHandle) and hangs the slots it sends into on its
 * send connectors (connector->devSlots). The counters stay where shm put
 * them, in host memory: the CUDA executor (src/exec/cudaexec.c) is driven by
 * the host, which waits on them, so only the data needs GPU memory. A
 * sender working on device buffers writes a chunk straight into the
 * receiver's GPU (NVLink or PCIe peer-to-peer, or the same GPU) and marks
 * the message LOOM_FIFO_DEVICE_DATA; the receiver's kernel reads it there.
 * A pair that cannot map each other (no peer access between the two GPUs,
 * IPC refused, LOOM_P2P_DISABLE=1 on either rank) keeps the host slots:
 * kernels then read and write the /dev/shm slots directly, which this file
 * registers with the driver (p2pMapHostSlots) the first time a device plan
 * runs on the communicator — the host-staged path, slower but always there.
 *
 * Several ranks may share ONE GPU: each is a process with its own context,
 * IPC maps memory of the same device across processes, and since no kernel
 * of Loom ever waits for another process, ranks that share a GPU only share
 * its time. Ranks may also be threads of one process (loomCommInitAll): a
 * rank's thread makes its device's primary context current before it
 * builds the communicator, so ranks of one device share that context and
 * use each other's slots by address (the driver opens no IPC handle in the
 * process that made it); ranks of one process on different devices keep
 * the host slots. (NCCL refuses this; Loom allows it, which is how the multi-rank
 * GPU paths are tested on a one-GPU machine.)
 *
 * The GPU of each rank travels with the peer information exchanged at init
 * (p2pPeerInfo), so every rank decides the same way whether the handle
 * exchange, a collective, takes place.
 *
 * Device FIFOs, for launched kernels (LOOM_EXECUTOR=kernel, devexec.c). A
 * kernel that waits on counters in host memory pays a PCIe round trip per
 * look, so the same region also holds, past the slots, a whole FIFO's shared
 * words for each FIFO this rank receives on, and the head of each FIFO it
 * sends on: each counter where its reader polls it, as NCCL places them.
 *
 *   [ slots (above) ][ fifos: ch x local peer: tail | size words | LL lines ][ heads: ch x local
 * peer ]
 *
 *   FIFO S -> R:  slots, tail, size words, LL lines   in R's region (S writes them remotely)
 *                 head                                in S's region (R writes it remotely)
 *
 * Both ends must use the same copy, and either may lack the other's region
 * (IPC refused, another GPU, LOOM_P2P_DISABLE, the host executor): so each
 * end that launches and has mapped the peer's region says so in the host
 * FIFO's devEnds word when the pair connects, before the connect's last
 * word (connect.c) or before init's last barrier, and a launch takes the
 * device copy only when both ends have said so (p2pDevConn). The device
 * copy counts its messages from zero, apart from the host FIFO: a pair whose
 * kernels talk through GPU memory must run every call of one kind on both
 * ends (device buffers on every rank, as NCCL requires), else the two ends
 * wait on different FIFOs until LOOM_TIMEOUT.
 */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bootstrap.h"
#include "cudacore.h"
#include "cudalib.h"
#include "debug.h"
#include "interp.h"
#include "interpview.h"
#include "param.h"

/* The shared words of one device FIFO, in its receiver's region: each group on its own line. */
struct p2pDevFifo {
    uint64_t tail[LOOM_CACHELINE / 8];
    uint64_t bytes[LOOM_STEPS];
    uint64_t ll[LOOM_STEPS * LOOM_LL_LINES];
};
#define P2P_HEAD_BYTES LOOM_CACHELINE

struct hostRegion {
    char *base;
    size_t bytes;
};

/* What each rank publishes in the handle exchange. */
struct p2pEntry {
    cuIpcHandle_t handle;
    int32_t valid;
    int32_t pad;
    uint64_t slots; /* the device address itself, for ranks of the same process */
};

struct cudaComm {
    const struct cudaLib *lib;
    cuContext_t ctx; /* the bound context, or NULL */
    int device;
    cuDevPtr_t recvSlots; /* our receive slots in GPU memory, or 0 */
    size_t recvBytes;
    cuDevPtr_t *opened;         /* [nranks]: peers' slots mapped through IPC, or 0 */
    cuDevPtr_t *peerBase;       /* [nranks]: where this rank sends into peer p's slots, or 0 */
    struct p2pEntry *entries;   /* [nranks]: the handles exchanged at init, or NULL */
    struct hostRegion *regions; /* [nranks]: host slot memory registered, by peer */
    int nRegions;
    int hostMapped;
    cuContext_t regCtx; /* current when the regions were registered */
};

void p2pPeerInfo(struct loomPeerInfo *me)
{
    const struct cudaLib *lib;
    cuContext_t ctx = NULL;
    cuDevice_t dev;
    int uva = 0;
    me->gpu = -1;
    me->gpuFlags = paramInt(LOOM_PARAM_P2P_DISABLE) ? 0 : LOOM_GPU_P2P;
    memset(me->gpuUuid, 0, sizeof(me->gpuUuid));
    /* Only a process already using CUDA binds: the driver is in it and a context is current. */
    if (!cudaLibLoaded() || cudaLibGet(&lib) != loomSuccess)
        return;
    if (lib->ctxGetCurrent(&ctx) != CUL_SUCCESS || ctx == NULL ||
        lib->ctxGetDevice(&dev) != CUL_SUCCESS)
        return;
    if (lib->deviceGetAttribute(&uva, CUL_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING, dev) !=
            CUL_SUCCESS ||
        !uva) {
        INFO(LOOM_INIT, "CUDA device %d has no unified addressing: not bound", (int)dev);
        return;
    }
    cuUuid_t uuid;
    if (lib->deviceGetUuid(&uuid, dev) != CUL_SUCCESS)
        return;
    memcpy(me->gpuUuid, uuid.bytes, sizeof(me->gpuUuid));
    me->gpu = (int32_t)dev;
}

static int p2pMember(const struct loomPeerInfo *p)
{
    return p->gpu >= 0 && (p->gpuFlags & LOOM_GPU_P2P);
}

static size_t slotsOffset(const struct loomComm *comm, int channel, int localIdx)
{
    return ((size_t)channel * comm->localSize + localIdx) * LOOM_STEPS * comm->slotBytes;
}

/* Where the device FIFOs from local peer localIdx start in a region, and then the heads. */
static size_t fifoOffset(const struct loomComm *comm, int channel, int localIdx)
{
    size_t base = (slotsOffset(comm, comm->nChannels, 0) + 4095) & ~(size_t)4095;
    return base + ((size_t)channel * comm->localSize + localIdx) * sizeof(struct p2pDevFifo);
}

static size_t headOffset(const struct loomComm *comm, int channel, int localIdx)
{
    return fifoOffset(comm, comm->nChannels, 0) +
           ((size_t)channel * comm->localSize + localIdx) * P2P_HEAD_BYTES;
}

/* Zeroes the region's counters and LL lines (GPU memory starts with anything in it). */
static loomResult_t p2pZeroFifos(struct cudaComm *cc, const struct loomComm *comm)
{
    size_t from = fifoOffset(comm, 0, 0), bytes = cc->recvBytes - from;
    void *zeros = calloc(1, bytes);
    if (zeros == NULL)
        return loomSetError(loomSystemError, "out of memory zeroing the device FIFOs");
    cuResult_t r =
        cc->lib->memcpyAsync(cc->recvSlots + from, (cuDevPtr_t)(uintptr_t)zeros, bytes, NULL);
    if (r == CUL_SUCCESS)
        r = cc->lib->streamSynchronize(NULL);
    free(zeros);
    return r == CUL_SUCCESS ? loomSuccess
                            : cudaLibError(cc->lib, r, "zeroing the device FIFOs in GPU memory");
}

/* 1 if this process's device can write into memory of the GPU with the given uuid. */
static int p2pReachable(const struct cudaComm *cc, const char *uuid)
{
    const struct cudaLib *lib = cc->lib;
    int n = 0, can = 0;
    if (lib->deviceGetCount(&n) != CUL_SUCCESS)
        return 0;
    for (int i = 0; i < n; i++) {
        cuDevice_t d;
        cuUuid_t u;
        if (lib->deviceGet(&d, i) != CUL_SUCCESS || lib->deviceGetUuid(&u, d) != CUL_SUCCESS ||
            memcmp(u.bytes, uuid, sizeof(u.bytes)) != 0)
            continue;
        if (d == cc->device)
            return 1;
        return lib->deviceCanAccessPeer(&can, cc->device, d) == CUL_SUCCESS && can;
    }
    return 0; /* not visible in this process (CUDA_VISIBLE_DEVICES) */
}

/* Our receive slots in GPU memory and their handle. */
static loomResult_t p2pAllocate(struct loomComm *comm, struct p2pEntry *mine)
{
    struct cudaComm *cc = comm->cuda;
    cc->recvBytes = headOffset(comm, comm->nChannels, 0);
    cuResult_t r = cc->lib->memAlloc(&cc->recvSlots, cc->recvBytes);
    if (r != CUL_SUCCESS) {
        cc->recvSlots = 0;
        return cudaLibError(cc->lib, r, "allocating the p2p receive slots in GPU memory");
    }
    LOOMCHECK(p2pZeroFifos(cc, comm));
    mine->slots = (uint64_t)cc->recvSlots;
    r = cc->lib->ipcGetMemHandle(&mine->handle, cc->recvSlots);
    if (r != CUL_SUCCESS)
        return cudaLibError(cc->lib, r, "cuIpcGetMemHandle of the p2p receive slots");
    mine->valid = 1;
    return loomSuccess;
}

/* The base of peer p's receive slots as this process sees them, or 0. */
static cuDevPtr_t p2pOpen(struct loomComm *comm, int p, const struct p2pEntry *e)
{
    struct cudaComm *cc = comm->cuda;
    if (p == comm->rank)
        return cc->recvSlots;
    if (!e->valid || !p2pReachable(cc, comm->peers[p].gpuUuid))
        return 0;
    if (comm->peers[p].pid == comm->peers[comm->rank].pid) {
        /* A rank of this process (loomCommInitAll): the driver refuses to open a handle in the
         * process that made it, and needs none. On the same device the ranks share the primary
         * context, so the address is good as it is; across devices it would need peer access
         * between the two contexts, which Loom does not enable: host slots then. */
        if (memcmp(comm->peers[p].gpuUuid, comm->peers[comm->rank].gpuUuid,
                   sizeof(comm->peers[p].gpuUuid)) == 0)
            return (cuDevPtr_t)e->slots;
        INFO(LOOM_INIT, "p2p: rank %d is in this process on another GPU: host slots", p);
        return 0;
    }
    cuResult_t r =
        cc->lib->ipcOpenMemHandle(&cc->opened[p], e->handle, CUL_IPC_MEM_LAZY_ENABLE_PEER_ACCESS);
    if (r != CUL_SUCCESS) {
        INFO(LOOM_INIT, "p2p: cannot map rank %d's GPU memory (CUDA error %d): host slots", p, r);
        cc->opened[p] = 0;
    }
    return cc->opened[p];
}

/* Hangs the device slots on the connectors to local peer p, once they are connected. */
static int p2pWirePeer(struct loomComm *comm, int p)
{
    struct cudaComm *cc = comm->cuda;
    int me = comm->rank;
    if (comm->peers[p].hostHash != comm->peers[me].hostHash)
        return 0;
    if (p2pMember(&comm->peers[p]) && cc->peerBase[p] == 0)
        cc->peerBase[p] = p2pOpen(comm, p, &cc->entries[p]);
    cuDevPtr_t peerBase = cc->peerBase[p];
    for (int c = 0; c < comm->nChannels; c++) {
        struct loomConnector *rc = &comm->channels[c].recv[p];
        struct loomConnector *sc = &comm->channels[c].send[p];
        if (rc->connected)
            rc->devSlots =
                (char *)(uintptr_t)(cc->recvSlots + slotsOffset(comm, c, comm->peers[p].localRank));
        if (sc->connected && peerBase)
            sc->devSlots =
                (char *)(uintptr_t)(peerBase + slotsOffset(comm, c, comm->peers[me].localRank));
        /* This end launches over the pair's device FIFOs (p2pDevConn): the FIFOs' readers see it
         * before the pair's connect (or init) ends. */
        if (peerBase && interpServes(comm) && sc->connected && rc->connected && sc->fifo &&
            rc->fifo) {
            atomic_fetch_or_explicit(&sc->fifo->devEnds, LOOM_FIFO_END_SEND, memory_order_release);
            atomic_fetch_or_explicit(&rc->fifo->devEnds, LOOM_FIFO_END_RECV, memory_order_release);
        }
    }
    return peerBase != 0;
}

/* Hangs the device slots on the connectors to the local peers connected so far. */
static void p2pWire(struct loomComm *comm)
{
    int wired = 0;
    for (int p = 0; p < comm->nranks; p++)
        if (comm->channels[0].send[p].connected)
            wired += p2pWirePeer(comm, p);
    INFO(LOOM_INIT,
         "p2p: device %d, %d of %d local ranks connected and reachable through GPU "
         "memory",
         comm->cuda->device, wired, comm->localSize);
}

/* The handle exchange; `res` is this rank's binding so far, reported after it took part. */
static loomResult_t p2pExchange(struct loomComm *comm, loomResult_t res)
{
    struct p2pEntry *all = calloc((size_t)comm->nranks, sizeof(*all));
    if (all == NULL)
        return loomSetError(loomSystemError, "out of memory for the p2p handles");
    /* A rank that cannot allocate still joins the exchange, so that nobody waits for it. */
    if (res == loomSuccess && comm->cuda && p2pMember(&comm->peers[comm->rank]))
        res = p2pAllocate(comm, &all[comm->rank]);
    loomResult_t ex = bootstrapAllGather(comm->bootstrap, all, sizeof(*all));
    if (res == loomSuccess)
        res = ex;
    if (res == loomSuccess && comm->cuda && comm->cuda->recvSlots) {
        comm->cuda->entries = all; /* kept for the peers connected later (p2pPeerConnected) */
        p2pWire(comm);
        return res;
    }
    free(all);
    return res;
}

static loomResult_t p2pBind(struct loomComm *comm)
{
    struct cudaComm *cc = calloc(1, sizeof(*cc));
    if (cc == NULL)
        return loomSetError(loomSystemError, "out of memory for the CUDA state");
    comm->cuda = cc;
    cc->device = comm->peers[comm->rank].gpu;
    cc->opened = calloc((size_t)comm->nranks, sizeof(*cc->opened));
    cc->peerBase = calloc((size_t)comm->nranks, sizeof(*cc->peerBase));
    if (cc->opened == NULL || cc->peerBase == NULL)
        return loomSetError(loomSystemError, "out of memory for the CUDA state");
    LOOMCHECK(cudaLibGet(&cc->lib));
    cuResult_t r = cc->lib->ctxGetCurrent(&cc->ctx);
    if (r != CUL_SUCCESS || cc->ctx == NULL)
        return loomSetError(loomInternalError, "the CUDA context went away during init");
    return loomSuccess;
}

loomResult_t p2pSetup(struct loomComm *comm)
{
    int any = 0;
    loomResult_t res = comm->peers[comm->rank].gpu >= 0 ? p2pBind(comm) : loomSuccess;
    for (int p = 0; p < comm->nranks; p++)
        any |= p2pMember(&comm->peers[p]);
    if (any)
        res = p2pExchange(comm, res);
    /*
     * The host slots are registered now, while nothing waits on the GPU, rather than at
     * the first device plan. A failure here only matters to device plans, which report it.
     */
    if (res == loomSuccess && comm->cuda && comm->cuda->ctx && p2pMapHostSlots(comm) != loomSuccess)
        INFO(LOOM_INIT, "p2p: %s", debugLastError(NULL));
    return res;
}

/* ---- loomCommInitAll's devices ---- */

loomResult_t p2pDeviceCount(int *count)
{
    const struct cudaLib *lib;
    *count = 0;
    LOOMCHECK(cudaLibGet(&lib));
    return lib->deviceGetCount(count) == CUL_SUCCESS ? loomSuccess : loomSystemError;
}

loomResult_t p2pDeviceCheck(int dev, int index, const char *fn)
{
    const struct cudaLib *lib;
    int count = 0;
    if (cudaLibGet(&lib) != loomSuccess)
        return loomSetError(loomInvalidArgument,
                            "%s: devlist[%d] is CUDA device %d, but CUDA is not usable here (%s); "
                            "pass NULL or -1 for host-only ranks",
                            fn, index, dev, debugLastError(NULL));
    if (lib->deviceGetCount(&count) != CUL_SUCCESS)
        count = 0;
    if (dev >= count)
        return loomSetError(loomInvalidArgument,
                            "%s: devlist[%d] is CUDA device %d, but %d device(s) are visible "
                            "(CUDA_VISIBLE_DEVICES)",
                            fn, index, dev, count);
    return loomSuccess;
}

loomResult_t p2pDeviceEnter(int dev)
{
    const struct cudaLib *lib;
    cuDevice_t d;
    cuContext_t ctx;
    LOOMCHECK(cudaLibGet(&lib));
    cuResult_t r = lib->deviceGet(&d, dev);
    if (r == CUL_SUCCESS)
        r = lib->devicePrimaryCtxRetain(&ctx, d);
    if (r == CUL_SUCCESS)
        r = lib->ctxSetCurrent(ctx);
    return r == CUL_SUCCESS ? loomSuccess
                            : cudaLibError(lib, r, "making the device's primary context current");
}

int p2pDevConn(const struct loomComm *comm, int channel, int peer, int send, struct loomDevConn *d)
{
    const struct cudaComm *cc = comm->cuda;
    const struct loomConnector *c =
        send ? &comm->channels[channel].send[peer] : &comm->channels[channel].recv[peer];
    if (cc == NULL || cc->recvSlots == 0 || cc->peerBase == NULL || cc->peerBase[peer] == 0 ||
        !c->connected || c->fifo == NULL ||
        atomic_load_explicit(&c->fifo->devEnds, memory_order_acquire) !=
            (LOOM_FIFO_END_SEND | LOOM_FIFO_END_RECV))
        return 0;
    int me = comm->peers[comm->rank].localRank, them = comm->peers[peer].localRank;
    cuDevPtr_t mine = cc->recvSlots, theirs = cc->peerBase[peer];
    cuDevPtr_t rx = send ? theirs : mine, tx = send ? mine : theirs; /* receiver's, sender's */
    int from = send ? me : them, to = send ? them : me;
    struct p2pDevFifo *f = (struct p2pDevFifo *)(uintptr_t)(rx + fifoOffset(comm, channel, from));
    memset(d, 0, sizeof(*d));
    d->tail = f->tail;
    d->bytes = f->bytes;
    d->ll = f->ll;
    d->head = (uint64_t *)(uintptr_t)(tx + headOffset(comm, channel, to));
    d->slots = (char *)(uintptr_t)(rx + slotsOffset(comm, channel, from));
    d->slotBytes = comm->slotBytes;
    return 1;
}

void *p2pContext(const struct loomComm *comm, int *device)
{
    if (comm->cuda == NULL || comm->cuda->ctx == NULL)
        return NULL;
    *device = comm->cuda->device;
    return comm->cuda->ctx;
}

/* ---- host slots for kernels (the host-staged path) ---- */

/* Grows r over c's FIFO: its counters and size words, slots and LL lines (a launched kernel
 * reads and writes them all, devexec.c). */
static void regionGrow(struct hostRegion *r, const struct loomConnector *c)
{
    char *lo = c->slots, *hi = c->slots + LOOM_STEPS * c->slotBytes;
    if (c->fifo && (char *)c->fifo < lo)
        lo = (char *)c->fifo;
    if (c->ll && (char *)(c->ll + LOOM_STEPS * LOOM_LL_LINES) > hi)
        hi = (char *)(c->ll + LOOM_STEPS * LOOM_LL_LINES);
    if (r->base == NULL) {
        r->base = lo;
        r->bytes = (size_t)(hi - lo);
        return;
    }
    char *end = r->base + r->bytes;
    r->base = lo < r->base ? lo : r->base;
    r->bytes = (size_t)((hi > end ? hi : end) - r->base);
}

/*
 * The host memory that holds the slots of the links to peer p (both
 * directions, every channel: one mapping of the transport's), widened to
 * whole pages; base NULL when p is not connected.
 */
static struct hostRegion regionOf(const struct loomComm *comm, int p)
{
    struct hostRegion r = {NULL, 0};
    long page = sysconf(_SC_PAGESIZE);
    for (int c = 0; c < comm->nChannels; c++) {
        const struct loomConnector *rc = &comm->channels[c].recv[p];
        const struct loomConnector *sc = &comm->channels[c].send[p];
        if (rc->connected && rc->slots)
            regionGrow(&r, rc);
        if (sc->connected && sc->slots)
            regionGrow(&r, sc);
    }
    if (r.base != NULL) {
        uintptr_t lo = (uintptr_t)r.base & ~(uintptr_t)(page - 1);
        uintptr_t hi = ((uintptr_t)r.base + r.bytes + (uintptr_t)page - 1) & ~(uintptr_t)(page - 1);
        r.base = (char *)lo;
        r.bytes = hi - lo;
    }
    return r;
}

static loomResult_t regionsRegister(struct cudaComm *cc, struct hostRegion *r, int n)
{
    for (int i = 0; i < n; i++) {
        if (r[i].base == NULL)
            continue;
        cuResult_t e = cc->lib->memHostRegister(
            r[i].base, r[i].bytes, CUL_MEMHOSTREGISTER_PORTABLE | CUL_MEMHOSTREGISTER_DEVICEMAP);
        if (e == CUL_ERROR_HOST_MEMORY_ALREADY_REGISTERED) {
            r[i].base = NULL; /* someone else's registration: not ours to undo */
            continue;
        }
        if (e != CUL_SUCCESS) {
            r[i].base = NULL;
            return cudaLibError(cc->lib, e, "registering the shared-memory slots with the GPU");
        }
        cuDevPtr_t d = 0;
        if (cc->lib->memHostGetDevicePointer(&d, r[i].base, 0) != CUL_SUCCESS ||
            d != (cuDevPtr_t)(uintptr_t)r[i].base)
            return loomSetError(loomUnhandledCudaError,
                                "the GPU maps host memory at another address (no unified "
                                "addressing): Loom needs a 64-bit system with UVA");
    }
    return loomSuccess;
}

loomResult_t p2pMapHostSlots(struct loomComm *comm)
{
    struct cudaComm *cc = comm->cuda;
    if (cc && cc->hostMapped)
        return loomSuccess;
    if (cc && cc->regions) /* a failed registration: the plan fails again, and says why */
        return loomSetError(loomUnhandledCudaError,
                            "the shared-memory slots could not be registered with the GPU");
    if (cc == NULL) { /* not bound at init: only the host-staged path */
        if ((cc = calloc(1, sizeof(*cc))) == NULL)
            return loomSetError(loomSystemError, "out of memory for the CUDA state");
        comm->cuda = cc;
        cc->device = -1;
        LOOMCHECK(cudaLibGet(&cc->lib));
    }
    int n = comm->nranks;
    cc->regions = calloc((size_t)n, sizeof(*cc->regions));
    if (cc->regions == NULL)
        return loomSetError(loomSystemError, "out of memory for the CUDA state");
    cc->nRegions = n;
    cc->lib->ctxGetCurrent(&cc->regCtx);
    for (int p = 0; p < n; p++)
        cc->regions[p] = regionOf(comm, p);
    loomResult_t res = regionsRegister(cc, cc->regions, n); /* p2pFree undoes what it did */
    cc->hostMapped = res == loomSuccess;
    return res;
}

void p2pPeerConnected(struct loomComm *comm, int p)
{
    struct cudaComm *cc = comm->cuda;
    if (cc == NULL)
        return;
    if (cc->recvSlots && cc->entries)
        p2pWirePeer(comm, p);
    if (cc->hostMapped && cc->regions && cc->regions[p].base == NULL) {
        cuContext_t saved = NULL;
        cc->lib->ctxGetCurrent(&saved);
        if (cc->regCtx)
            cc->lib->ctxSetCurrent(cc->regCtx);
        cc->regions[p] = regionOf(comm, p);
        if (regionsRegister(cc, &cc->regions[p], 1) != loomSuccess) {
            /* Device plans over this link fail and say why (p2pMapHostSlots). */
            INFO(LOOM_INIT, "p2p: %s", debugLastError(NULL));
            cc->hostMapped = 0;
        }
        cc->lib->ctxSetCurrent(saved);
    }
}

void p2pFree(struct loomComm *comm)
{
    struct cudaComm *cc = comm->cuda;
    if (cc == NULL)
        return;
    comm->cuda = NULL;
    if (cc->lib) {
        cuContext_t saved = NULL;
        cc->lib->ctxGetCurrent(&saved);
        if (cc->regCtx)
            cc->lib->ctxSetCurrent(cc->regCtx);
        for (int i = 0; i < cc->nRegions; i++)
            if (cc->regions[i].base)
                cc->lib->memHostUnregister(cc->regions[i].base);
        if (cc->ctx)
            cc->lib->ctxSetCurrent(cc->ctx);
        for (int p = 0; cc->opened && p < comm->nranks; p++)
            if (cc->opened[p])
                cc->lib->ipcCloseMemHandle(cc->opened[p]);
        if (cc->recvSlots)
            cc->lib->memFree(cc->recvSlots);
        cc->lib->ctxSetCurrent(saved);
    }
    for (int c = 0; c < LOOM_MAX_CHANNELS; c++) {
        for (int p = 0; comm->channels[c].send && comm->channels[c].recv && p < comm->nranks; p++) {
            comm->channels[c].send[p].devSlots = NULL;
            comm->channels[c].recv[p].devSlots = NULL;
        }
    }
    free(cc->regions);
    free(cc->opened);
    free(cc->peerBase);
    free(cc->entries);
    free(cc);
}
