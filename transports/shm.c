/*
 * shm.c — the shared-memory transport: ranks on one host, host buffers.
 *
 * Every rank creates one POSIX shared-memory segment holding its doorbell and
 * the receive FIFOs of all its local peers (itself included, for
 * send-to-self), for every channel:
 *
 *   +----------+--------------------------------+--------------------------------+---
 *   | doorbell | fifo(ch 0, from local peer 0)  | fifo(ch 0, from local peer 1)  | ...
 *   +----------+--------------------------------+--------------------------------+---
 *                each fifo: struct loomFifo (counters, sizes) + LOOM_STEPS slots
 *                           + LOOM_STEPS LL slots of LOOM_LL_LINES lines (src/base/fifo.h)
 *
 * A sender writes into the slots that live in the receiver's segment, so a
 * message is copied once into shared memory and once out of it. Segment names
 * are random and exchanged through the bootstrap allgather; every rank maps
 * all its peers' segments, then after a barrier unlinks its own, so from then
 * on a crash leaves nothing in /dev/shm. The pages are allocated up front
 * (posix_fallocate), so a /dev/shm that is too small fails here, with a
 * message saying how much is needed, and never later with SIGBUS.
 *
 * They are also mapped up front: the whole own segment (MAP_POPULATE), and
 * in each peer's segment the FIFOs this rank writes (shmPrefault). Left to
 * first touch, every page of a slot costs a minor fault the first time a
 * message reaches that far into it, so each new, larger message size paid
 * tens of faults a call for as many calls as a FIFO has slots, on both
 * ends, an order of magnitude over the call itself where faults are dear
 * (virtual machines); populating costs a fraction of those faults, once.
 */
#include <errno.h>
#include <stdint.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "bootstrap.h"
#include "debug.h"
#include "bell.h"
#include "param.h"
#include "transport.h"

#define SHM_NAME_BYTES 48
#define SHM_HDR_BYTES 4096
_Static_assert(sizeof(struct loomDoorbell) <= SHM_HDR_BYTES, "the doorbell fits the header");

struct shmSegment {
    char name[SHM_NAME_BYTES];
    void *base;
    size_t bytes;
};

struct shmState {
    struct shmSegment own;
    struct shmSegment *peers; /* [nranks]; base NULL when not local */
    int *localIndex;          /* [nranks]: index among local ranks, -1 if remote */
    int linked;               /* own segment still has a name in /dev/shm */
};

static size_t fifoBytes(const struct loomComm *comm)
{
    return sizeof(struct loomFifo) + LOOM_STEPS * comm->slotBytes +
           LOOM_STEPS * LOOM_LL_LINES * sizeof(uint64_t);
}

static size_t segmentBytes(const struct loomComm *comm)
{
    return SHM_HDR_BYTES + (size_t)comm->nChannels * comm->localSize * fifoBytes(comm);
}

static char *fifoAt(const struct loomComm *comm, void *base, int channel, int localIdx)
{
    return (char *)base + SHM_HDR_BYTES +
           ((size_t)channel * comm->localSize + localIdx) * fifoBytes(comm);
}

static int shmUsable(const char **why)
{
    if (paramInt(LOOM_PARAM_SHM_DISABLE)) {
        *why = "disabled by LOOM_SHM_DISABLE=1";
        return 0;
    }
    if (access("/dev/shm", W_OK) != 0) {
        *why = "/dev/shm is not writable";
        return 0;
    }
    *why = "";
    return 1;
}

static int shmCanConnect(const struct loomComm *comm, int peer)
{
    return comm->peers[peer].hostHash == comm->peers[comm->rank].hostHash;
}

static loomResult_t shmCheckSpace(const struct loomComm *comm, size_t bytes)
{
    struct statvfs vfs;
    if (statvfs("/dev/shm", &vfs) != 0)
        return loomSuccess; /* posix_fallocate will tell */
    unsigned long long freeBytes = (unsigned long long)vfs.f_bavail * vfs.f_frsize;
    unsigned long long need = (unsigned long long)bytes * comm->localSize;
    if (need > freeBytes)
        return loomSetError(
            loomSystemError,
            "/dev/shm has %llu MiB free, this communicator needs %llu MiB (%d local "
            "ranks x %zu KiB); enlarge /dev/shm (docker --shm-size) or lower "
            "LOOM_BUFFSIZE (now %zu bytes)",
            freeBytes >> 20, (need + (1 << 20) - 1) >> 20, comm->localSize, bytes >> 10,
            comm->buffBytes);
    return loomSuccess;
}

static loomResult_t shmCreate(struct loomComm *comm, struct shmSegment *seg)
{
    uint64_t r[2] = {0, 0};
    if (getrandom(r, sizeof(r), 0) != sizeof(r))
        r[0] = (uint64_t)getpid() ^ loomClockNs(), r[1] = loomClockNs();
    snprintf(seg->name, sizeof(seg->name), "/loom-%d-%016llx%08llx", (int)getpid(),
             (unsigned long long)r[0], (unsigned long long)(r[1] & 0xffffffffULL));
    seg->bytes = segmentBytes(comm);
    LOOMCHECK(shmCheckSpace(comm, seg->bytes));

    int fd = shm_open(seg->name, O_CREAT | O_EXCL | O_RDWR | O_CLOEXEC, 0600);
    if (fd < 0)
        return loomSetError(loomSystemError, "shm_open(%s) failed: %s", seg->name,
                            debugErrnoText(errno));
    int e = posix_fallocate(fd, 0, (off_t)seg->bytes);
    if (e != 0) {
        loomSetError(loomSystemError,
                     "cannot allocate %zu KiB in /dev/shm for %s: %s; enlarge /dev/shm (docker "
                     "--shm-size) or lower LOOM_BUFFSIZE (now %zu bytes)",
                     seg->bytes >> 10, seg->name, strerror(e), comm->buffBytes);
        goto fail_unlink;
    }
    seg->base = mmap(NULL, seg->bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, 0);
    if (seg->base == MAP_FAILED) {
        seg->base = NULL;
        loomSetError(loomSystemError, "mmap of %zu bytes of %s failed: %s", seg->bytes, seg->name,
                     debugErrnoText(errno));
        goto fail_unlink;
    }
    close(fd);
    return loomSuccess;

fail_unlink:
    shm_unlink(seg->name);
    close(fd);
    return loomSystemError;
}

static loomResult_t shmMapPeer(struct shmSegment *seg, int peer)
{
    int fd = shm_open(seg->name, O_RDWR | O_CLOEXEC, 0600);
    int err = errno;
    if (fd < 0)
        return loomSetError(loomSystemError, "cannot open rank %d's shared memory %s: %s%s", peer,
                            seg->name, debugErrnoText(err),
                            err == ENOENT ? " (are both ranks in the same container, with the "
                                            "same /dev/shm?)"
                                          : "");
    seg->base = mmap(NULL, seg->bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (seg->base == MAP_FAILED) {
        seg->base = NULL;
        return loomSetError(loomSystemError, "mmap of rank %d's segment %s failed: %s", peer,
                            seg->name, debugErrnoText(errno));
    }
    return loomSuccess;
}

/*
 * Maps [p, p + bytes) of a peer's segment into this process now rather than
 * page by page at first touch (see the top of the file). The pages exist
 * (the owner allocated them), so a read fault maps them writable; kernels
 * before 5.14 lack MADV_POPULATE_READ and get the reads themselves.
 */
static void shmPrefault(char *p, size_t bytes)
{
    uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
    uintptr_t lo = (uintptr_t)p & ~(page - 1);
#ifdef MADV_POPULATE_READ
    if (madvise((void *)lo, (uintptr_t)p + bytes - lo, MADV_POPULATE_READ) == 0)
        return;
#endif
    for (uintptr_t a = lo; a < (uintptr_t)p + bytes; a += page)
        (void)*(volatile const char *)a;
}

/* The LL lines of the FIFO at f. */
static uint64_t *llLines(const struct loomComm *comm, char *f)
{
    return (uint64_t *)(f + sizeof(struct loomFifo) + LOOM_STEPS * comm->slotBytes);
}

static void shmInitOwn(struct loomComm *comm, struct shmState *st)
{
    comm->bell = (struct loomDoorbell *)st->own.base;
    for (int c = 0; c < comm->nChannels; c++)
        for (int l = 0; l < comm->localSize; l++)
            memset(fifoAt(comm, st->own.base, c, l), 0, sizeof(struct loomFifo));
}

static void shmWire(struct loomComm *comm, struct shmState *st)
{
    int me = comm->rank, myIdx = st->localIndex[me];
    for (int p = 0; p < comm->nranks; p++) {
        if (st->localIndex[p] < 0)
            continue;
        struct loomDoorbell *peerBell = (struct loomDoorbell *)st->peers[p].base;
        for (int c = 0; c < comm->nChannels; c++) {
            struct loomConnector *r = &comm->channels[c].recv[p];
            struct loomConnector *s = &comm->channels[c].send[p];
            char *rf = fifoAt(comm, st->own.base, c, st->localIndex[p]);
            char *sf = fifoAt(comm, st->peers[p].base, c, myIdx);
            if (p != me)
                shmPrefault(sf, fifoBytes(comm));
            *r = (struct loomConnector){(struct loomFifo *)rf,
                                        rf + sizeof(struct loomFifo),
                                        comm->slotBytes,
                                        0,
                                        peerBell,
                                        p,
                                        1,
                                        NULL,
                                        NULL,
                                        NULL,
                                        llLines(comm, rf)};
            *s = (struct loomConnector){(struct loomFifo *)sf,
                                        sf + sizeof(struct loomFifo),
                                        comm->slotBytes,
                                        0,
                                        peerBell,
                                        p,
                                        1,
                                        NULL,
                                        NULL,
                                        NULL,
                                        llLines(comm, sf)};
        }
    }
}

static loomResult_t shmExchange(struct loomComm *comm, struct shmState *st)
{
    size_t n = (size_t)comm->nranks;
    char *names = calloc(n, SHM_NAME_BYTES);
    if (names == NULL)
        return loomSetError(loomSystemError, "out of memory exchanging shm names");
    memcpy(names + comm->rank * SHM_NAME_BYTES, st->own.name, SHM_NAME_BYTES);
    loomResult_t res = bootstrapAllGather(comm->bootstrap, names, SHM_NAME_BYTES);
    if (res != loomSuccess)
        goto out;
    for (int p = 0; p < comm->nranks; p++) {
        if (st->localIndex[p] < 0)
            continue;
        if (p == comm->rank) {
            st->peers[p] = st->own;
            continue;
        }
        memcpy(st->peers[p].name, names + p * SHM_NAME_BYTES, SHM_NAME_BYTES);
        st->peers[p].name[SHM_NAME_BYTES - 1] = '\0';
        st->peers[p].bytes = st->own.bytes;
        res = shmMapPeer(&st->peers[p], p);
        if (res != loomSuccess)
            goto out;
    }
out:
    free(names);
    return res;
}

static void shmTeardown(struct loomComm *comm)
{
    struct shmState *st = comm->shm;
    if (st == NULL)
        return;
    for (int p = 0; st->peers && p < comm->nranks; p++)
        if (p != comm->rank && st->peers[p].base)
            munmap(st->peers[p].base, st->peers[p].bytes);
    if (st->linked)
        shm_unlink(st->own.name);
    if (comm->bell == (struct loomDoorbell *)st->own.base)
        comm->bell = &comm->localBell;
    if (st->own.base)
        munmap(st->own.base, st->own.bytes);
    free(st->peers);
    free(st->localIndex);
    free(st);
    comm->shm = NULL;
}

/*
 * Ranks that cannot use shm (LOOM_SHM_DISABLE=1 there) still take part in
 * the exchange and the barrier, which are collective, with an empty name.
 */
static loomResult_t shmSetupAbsent(struct loomComm *comm)
{
    char *names = calloc((size_t)comm->nranks, SHM_NAME_BYTES);
    if (names == NULL)
        return loomSetError(loomSystemError, "out of memory exchanging shm names");
    loomResult_t res = bootstrapAllGather(comm->bootstrap, names, SHM_NAME_BYTES);
    free(names);
    LOOMCHECK(res);
    return bootstrapBarrier(comm->bootstrap);
}

static loomResult_t shmSetup(struct loomComm *comm)
{
    loomResult_t res = loomSystemError;
    if (!transportUsableOn(comm, &shmTransport, comm->rank))
        return shmSetupAbsent(comm);
    struct shmState *st = calloc(1, sizeof(*st));
    if (st == NULL)
        return loomSetError(loomSystemError, "out of memory in shm setup");
    comm->shm = st;
    st->peers = calloc((size_t)comm->nranks, sizeof(*st->peers));
    st->localIndex = calloc((size_t)comm->nranks, sizeof(*st->localIndex));
    if (st->peers == NULL || st->localIndex == NULL) {
        loomSetError(res, "out of memory in shm setup");
        goto fail;
    }
    /* Computed alike on every rank: same host, and shm usable there. */
    for (int p = 0, l = 0; p < comm->nranks; p++)
        st->localIndex[p] =
            shmCanConnect(comm, p) && transportUsableOn(comm, &shmTransport, p) ? l++ : -1;

    res = shmCreate(comm, &st->own);
    if (res != loomSuccess)
        goto fail;
    st->linked = 1;
    shmInitOwn(comm, st);
    res = shmExchange(comm, st);
    if (res != loomSuccess)
        goto fail;
    shmWire(comm, st);
    res = bootstrapBarrier(comm->bootstrap);
    if (res != loomSuccess)
        goto fail;
    shm_unlink(st->own.name);
    st->linked = 0;
    INFO(LOOM_SHM, "shm: %d local ranks, %d channel(s), %zu KiB per FIFO, segment %zu KiB",
         comm->localSize, comm->nChannels, comm->buffBytes >> 10, st->own.bytes >> 10);
    return loomSuccess;

fail:
    shmTeardown(comm);
    return res;
}

const struct loomTransport shmTransport = {
    .name = "shm",
    .usable = shmUsable,
    .canConnect = shmCanConnect,
    .setup = shmSetup,
    .teardown = shmTeardown,
};
