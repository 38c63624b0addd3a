/*
 * shm.c — the shared-memory transport: ranks on one host, host buffers.
 *
 * Two kinds of POSIX shared-memory segment:
 *
 *   doorbells  one per host and communicator, made at init by the host's
 *              lowest rank, mapped by every rank of the host: a page of
 *              counts, then one page per local rank holding its doorbell.
 *              Every rank can so wake, or post a failure notice to, every
 *              other rank of its host, connected or not.
 *   pair       one per pair of ranks connected (src/connect.c: at init or
 *              on first use), made by the lower rank in setup, mapped by the
 *              higher in connect: for every channel the FIFO from the lower
 *              rank to the higher, then the one back.
 *
 *   pair segment:  [ch 0: fifo low->high | fifo high->low][ch 1: ...] ...
 *                  each fifo: struct loomFifo (counters, sizes) + LOOM_STEPS slots
 *                             + LOOM_STEPS LL slots of LOOM_LL_LINES lines (src/base/fifo.h)
 *
 * A sender writes into the slots the receiver reads, so a message is copied
 * once into shared memory and once out of it. A link to this rank itself
 * is private memory. Segment names are random; a pair segment's travels in
 * the lower rank's connection record, the doorbells' in its maker's init
 * info. The last rank to map a segment unlinks it (the higher rank of a
 * pair; for the doorbells, the rank whose mapping completes the count), so
 * once every rank has mapped it a crash leaves nothing in /dev/shm; a rank
 * unlinks what it made at teardown in case the peer never came. The pages
 * are allocated up front (posix_fallocate), so a /dev/shm that is too small
 * fails there, with a message saying how much is needed, and never later
 * with SIGBUS.
 *
 * They are also mapped up front (MAP_POPULATE) on both ends. Left to first
 * touch, every page of a slot costs a minor fault the first time a message
 * reaches that far into it, so each new, larger message size paid tens of
 * faults a call for as many calls as a FIFO has slots, on both ends, an
 * order of magnitude over the call itself where faults are dear (virtual
 * machines); populating costs a fraction of those faults, once.
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

#include "debug.h"
#include "bell.h"
#include "param.h"
#include "transport.h"

#define SHM_NAME_BYTES 48
#define SHM_PAGE 4096
_Static_assert(sizeof(struct loomDoorbell) <= SHM_PAGE, "a doorbell fits a page");
_Static_assert(SHM_NAME_BYTES <= LOOM_CONNECT_RECORD_BYTES, "a name fits a record");
_Static_assert(SHM_NAME_BYTES <= LOOM_TRANSPORT_INFO_BYTES, "a name fits an info");

struct shmSegment {
    char name[SHM_NAME_BYTES];
    void *base;
    size_t bytes;
    int made; /* this rank made it: unlink it at teardown in case nobody did */
};

/* The first page of the doorbells segment. */
struct shmBellsHead {
    _Atomic int mapped; /* ranks that mapped it; the one that makes it nlocal unlinks it */
};

struct shmState {
    struct shmSegment bells;
    struct shmSegment *pairs; /* [nranks]: the pair segment, or the private self link */
    int *localIndex;          /* [nranks]: index among the local shm ranks, -1 if none */
    int nlocal;
    int maker; /* the rank that makes the doorbells */
    int pairsMade, pairsMapped;
};

static size_t fifoBytes(const struct loomComm *comm)
{
    return sizeof(struct loomFifo) + LOOM_STEPS * comm->slotBytes +
           LOOM_STEPS * LOOM_LL_LINES * sizeof(uint64_t);
}

/* The LL lines of the FIFO at f. */
static uint64_t *llLines(const struct loomComm *comm, char *f)
{
    return (uint64_t *)(f + sizeof(struct loomFifo) + LOOM_STEPS * comm->slotBytes);
}

static size_t pairBytes(const struct loomComm *comm)
{
    return 2 * (size_t)comm->nChannels * fifoBytes(comm);
}

static struct loomDoorbell *bellOf(const struct shmState *st, int rank)
{
    return (struct loomDoorbell *)((char *)st->bells.base +
                                   (size_t)(1 + st->localIndex[rank]) * SHM_PAGE);
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
    if (bytes > freeBytes)
        return loomSetError(loomSystemError,
                            "/dev/shm has %llu MiB free, this communicator needs %zu KiB more "
                            "(for a link between two ranks: %d channel(s) x 2 FIFOs of %zu KiB); "
                            "enlarge /dev/shm (docker --shm-size) or lower LOOM_BUFFSIZE",
                            freeBytes >> 20, (bytes + 1023) >> 10, comm->nChannels,
                            comm->buffBytes >> 10);
    return loomSuccess;
}

static loomResult_t shmCreate(struct loomComm *comm, struct shmSegment *seg, size_t bytes)
{
    uint64_t r[2] = {0, 0};
    if (getrandom(r, sizeof(r), 0) != sizeof(r))
        r[0] = (uint64_t)getpid() ^ loomClockNs(), r[1] = loomClockNs();
    snprintf(seg->name, sizeof(seg->name), "/loom-%d-%016llx%08llx", (int)getpid(),
             (unsigned long long)r[0], (unsigned long long)(r[1] & 0xffffffffULL));
    seg->bytes = bytes;
    LOOMCHECK(shmCheckSpace(comm, seg->bytes));

    int fd = shm_open(seg->name, O_CREAT | O_EXCL | O_RDWR | O_CLOEXEC, 0600);
    if (fd < 0)
        return loomSetError(loomSystemError, "shm_open(%s) failed: %s", seg->name,
                            debugErrnoText(errno));
    seg->made = 1;
    int e = posix_fallocate(fd, 0, (off_t)seg->bytes);
    if (e != 0) {
        loomSetError(loomSystemError,
                     "cannot allocate %zu KiB in /dev/shm for %s: %s; enlarge /dev/shm (docker "
                     "--shm-size) or lower LOOM_BUFFSIZE (now %zu bytes)",
                     seg->bytes >> 10, seg->name, strerror(e), comm->buffBytes);
        goto fail;
    }
    seg->base = mmap(NULL, seg->bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, 0);
    if (seg->base == MAP_FAILED) {
        seg->base = NULL;
        loomSetError(loomSystemError, "mmap of %zu bytes of %s failed: %s", seg->bytes, seg->name,
                     debugErrnoText(errno));
        goto fail;
    }
    close(fd);
    return loomSuccess;

fail:
    shm_unlink(seg->name);
    seg->made = 0;
    close(fd);
    return loomSystemError;
}

/* Maps the segment another rank made (seg->name, seg->bytes), all of it populated. */
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
    seg->base = mmap(NULL, seg->bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, 0);
    close(fd);
    if (seg->base == MAP_FAILED) {
        seg->base = NULL;
        return loomSetError(loomSystemError, "mmap of rank %d's segment %s failed: %s", peer,
                            seg->name, debugErrnoText(errno));
    }
    return loomSuccess;
}

static void shmRelease(struct shmSegment *seg, int private)
{
    if (seg->made && !private)
        shm_unlink(seg->name); /* ENOENT once the peer did: nothing else has this name */
    if (seg->base)
        munmap(seg->base, seg->bytes);
    memset(seg, 0, sizeof(*seg));
}

static void shmTeardown(struct loomComm *comm)
{
    struct shmState *st = comm->shm;
    if (st == NULL)
        return;
    if (comm->bell != &comm->localBell && st->bells.base && comm->bell == bellOf(st, comm->rank))
        comm->bell = &comm->localBell;
    for (int p = 0; st->pairs && p < comm->nranks; p++)
        shmRelease(&st->pairs[p], p == comm->rank);
    for (int c = 0; c < comm->nChannels; c++)
        for (int p = 0; comm->channels[c].send && p < comm->nranks; p++)
            if (st->localIndex && st->localIndex[p] >= 0)
                comm->channels[c].send[p].peerBell = NULL;
    shmRelease(&st->bells, 0);
    free(st->pairs);
    free(st->localIndex);
    free(st);
    comm->shm = NULL;
}

/* ---- init: the doorbells ---- */

static loomResult_t shmInit(struct loomComm *comm, void *info)
{
    struct shmState *st = calloc(1, sizeof(*st));
    if (st == NULL)
        return loomSetError(loomSystemError, "out of memory in shm setup");
    comm->shm = st;
    st->pairs = calloc((size_t)comm->nranks, sizeof(*st->pairs));
    st->localIndex = calloc((size_t)comm->nranks, sizeof(*st->localIndex));
    if (st->pairs == NULL || st->localIndex == NULL)
        return loomSetError(loomSystemError, "out of memory in shm setup");
    /* Computed alike on every rank of the host: same host, and shm usable there. */
    st->maker = -1;
    for (int p = 0; p < comm->nranks; p++) {
        int local = shmCanConnect(comm, p) && transportUsableOn(comm, &shmTransport, p);
        st->localIndex[p] = local ? st->nlocal++ : -1;
        if (local && st->maker < 0)
            st->maker = p;
    }
    if (st->maker != comm->rank)
        return loomSuccess;
    LOOMCHECK(shmCreate(comm, &st->bells, (size_t)(1 + st->nlocal) * SHM_PAGE));
    memcpy(info, st->bells.name, SHM_NAME_BYTES);
    struct shmBellsHead *h = st->bells.base;
    if (atomic_fetch_add(&h->mapped, 1) + 1 == st->nlocal)
        shm_unlink(st->bells.name);
    return loomSuccess;
}

static loomResult_t shmInitPeers(struct loomComm *comm, const void *all)
{
    struct shmState *st = comm->shm;
    if (st->maker != comm->rank) {
        const char *name = (const char *)all + (size_t)st->maker * LOOM_TRANSPORT_INFO_BYTES;
        if (name[0] != '/')
            return loomSetError(loomSystemError,
                                "rank %d (on this host) published no doorbells segment: its "
                                "shared memory setup failed",
                                st->maker);
        memcpy(st->bells.name, name, SHM_NAME_BYTES);
        st->bells.name[SHM_NAME_BYTES - 1] = '\0';
        st->bells.bytes = (size_t)(1 + st->nlocal) * SHM_PAGE;
        LOOMCHECK(shmMapPeer(&st->bells, st->maker));
        struct shmBellsHead *h = st->bells.base;
        if (atomic_fetch_add(&h->mapped, 1) + 1 == st->nlocal)
            shm_unlink(st->bells.name);
    }
    comm->bell = bellOf(st, comm->rank);
    /* Every local rank's bell, connected or not: failure notices reach them all (exec.c). */
    for (int p = 0; p < comm->nranks; p++)
        if (st->localIndex[p] >= 0 && p != comm->rank)
            for (int c = 0; c < comm->nChannels; c++)
                comm->channels[c].send[p].peerBell = bellOf(st, p);
    INFO(LOOM_SHM,
         "shm: %d local ranks, doorbells in one segment of %zu KiB; %d channel(s), %zu KiB "
         "per FIFO, %zu KiB per pair of ranks connected",
         st->nlocal, st->bells.bytes >> 10, comm->nChannels, comm->buffBytes >> 10,
         pairBytes(comm) >> 10);
    return loomSuccess;
}

/* ---- a pair of ranks ---- */

static void shmWire(struct loomComm *comm, int peer, char *base, int sendDir)
{
    struct shmState *st = comm->shm;
    struct loomDoorbell *peerBell = bellOf(st, peer);
    for (int c = 0; c < comm->nChannels; c++) {
        char *sf = base + (2 * (size_t)c + (size_t)sendDir) * fifoBytes(comm);
        char *rf = base + (2 * (size_t)c + (size_t)(1 - sendDir)) * fifoBytes(comm);
        comm->channels[c].send[peer] = (struct loomConnector){.fifo = (struct loomFifo *)sf,
                                                              .slots = sf + sizeof(struct loomFifo),
                                                              .slotBytes = comm->slotBytes,
                                                              .peerBell = peerBell,
                                                              .peer = peer,
                                                              .connected = 1,
                                                              .ll = llLines(comm, sf)};
        comm->channels[c].recv[peer] = (struct loomConnector){.fifo = (struct loomFifo *)rf,
                                                              .slots = rf + sizeof(struct loomFifo),
                                                              .slotBytes = comm->slotBytes,
                                                              .peerBell = peerBell,
                                                              .peer = peer,
                                                              .connected = 1,
                                                              .ll = llLines(comm, rf)};
    }
}

static loomResult_t shmSetup(struct loomComm *comm, int peer, void *record)
{
    struct shmState *st = comm->shm;
    if (peer <= comm->rank)
        return loomSuccess; /* the lower rank makes the segment; a self link is private */
    LOOMCHECK(shmCreate(comm, &st->pairs[peer], pairBytes(comm)));
    st->pairsMade++;
    memcpy(record, st->pairs[peer].name, SHM_NAME_BYTES);
    return loomSuccess;
}

static loomResult_t shmConnect(struct loomComm *comm, int peer, const void *record)
{
    struct shmState *st = comm->shm;
    struct shmSegment *seg = &st->pairs[peer];
    if (peer == comm->rank) {
        seg->bytes = (size_t)comm->nChannels * fifoBytes(comm);
        seg->base = mmap(NULL, seg->bytes, PROT_READ | PROT_WRITE,
                         MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
        if (seg->base == MAP_FAILED) {
            seg->base = NULL;
            return loomSetError(loomSystemError, "out of memory for the link to itself: %s",
                                debugErrnoText(errno));
        }
        /* One FIFO per channel, both connectors on it. */
        for (int c = 0; c < comm->nChannels; c++) {
            char *f = (char *)seg->base + (size_t)c * fifoBytes(comm);
            struct loomConnector k = {.fifo = (struct loomFifo *)f,
                                      .slots = f + sizeof(struct loomFifo),
                                      .slotBytes = comm->slotBytes,
                                      .peerBell = comm->bell,
                                      .peer = peer,
                                      .connected = 1,
                                      .ll = llLines(comm, f)};
            comm->channels[c].send[peer] = k;
            comm->channels[c].recv[peer] = k;
        }
        return loomSuccess;
    }
    if (peer > comm->rank) {
        shmWire(comm, peer, seg->base, 0);
        return loomSuccess;
    }
    const char *name = record;
    if (name[0] != '/')
        return loomSetError(loomInternalError, "rank %d sent no shared memory name to rank %d",
                            peer, comm->rank);
    memcpy(seg->name, name, SHM_NAME_BYTES);
    seg->name[SHM_NAME_BYTES - 1] = '\0';
    seg->bytes = pairBytes(comm);
    LOOMCHECK(shmMapPeer(seg, peer));
    shm_unlink(seg->name); /* both ends have it now */
    st->pairsMapped++;
    shmWire(comm, peer, seg->base, 1);
    return loomSuccess;
}

const struct loomTransport shmTransport = {
    .name = "shm",
    .usable = shmUsable,
    .canConnect = shmCanConnect,
    .init = shmInit,
    .initPeers = shmInitPeers,
    .setup = shmSetup,
    .connect = shmConnect,
    .teardown = shmTeardown,
};
