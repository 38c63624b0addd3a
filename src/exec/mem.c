/*
 * mem.c — loomMemAlloc / loomMemFree: host memory that peers on this host
 * can map.
 *
 * The memory is a memfd mapped shared; a peer on the host can map the same
 * pages through /proc/<pid>/fd/<fd>. A small registry maps each pointer to
 * its file so that loomMemFree can check its argument: freeing a pointer
 * loomMemAlloc did not return is an error, not a crash.
 *
 * Single copies use these files. A single-copy offer (an OFFER step,
 * exec.c) says whether the offered elements lie in such a block: its
 * descriptor in the sender, its inode and the element's offset. The
 * reader opens /proc/<pid>/fd/<fd> once, checks the inode, maps the
 * block and from then on copies from its view with plain loads, two to
 * three times faster than process_vm_readv, which pins every page on every
 * call (docs/performance.md, "zero copy for loomMemAlloc buffers"). Opening
 * another process's descriptors needs only the "read" ptrace
 * access (same user), which Yama's ptrace_scope = 1 does not restrict; where
 * it is refused anyway the reader falls back to process_vm_readv. Views are
 * mapped for writing where the file opens so (a PUSH step writes a reduced
 * piece straight into a peer's receive buffer), else read-only.
 *
 * Views live per communicator, four per peer (at least 16; the least
 * recently used goes first), and are unmapped with it. A view keeps the peer's
 * pages alive after the peer frees the block, so each offer carries the
 * sender's count of loomMemFree calls: when it moves, the reader drops
 * every view of that peer's blocks before it maps again. The inode check
 * (with the device number, the type and the size) keeps a view from serving
 * a different block: while a view holds an inode its number cannot be given
 * to another file. A view is not dropped while a call uses it: only
 * memPeerSeen drops views, and callers call it before they gather theirs.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core.h"
#include "debug.h"
#include "mem.h"

struct memBlock {
    struct memBlock *next;
    void *ptr;
    size_t bytes;
    int fd;
    uint64_t dev, ino;
};

static pthread_mutex_t memLock = PTHREAD_MUTEX_INITIALIZER;
static struct memBlock *memBlocks;
static _Atomic uint64_t memFrees; /* loomMemFree calls: offers carry it (memPeerView) */

loomResult_t loomMemAlloc(void **ptr, size_t size, loomComm_t comm)
{
    if (ptr == NULL)
        return loomSetError(loomInvalidArgument, "loomMemAlloc: ptr is NULL");
    if (size == 0)
        return loomSetError(loomInvalidArgument, "loomMemAlloc: size is 0");
    if (size > (size_t)PTRDIFF_MAX)
        return loomSetError(loomInvalidArgument,
                            "loomMemAlloc: size %zu is larger than the address space", size);
    if (comm != NULL)
        LOOMCHECK(commCheck(comm, "loomMemAlloc"));
    struct memBlock *b = calloc(1, sizeof(*b));
    if (b == NULL)
        return loomSetError(loomSystemError, "loomMemAlloc: out of memory");
    b->fd = memfd_create("loom-mem", MFD_CLOEXEC);
    if (b->fd < 0) {
        loomSetError(loomSystemError, "loomMemAlloc: memfd_create failed: %s",
                     debugErrnoText(errno));
        goto fail_free;
    }
    if (ftruncate(b->fd, (off_t)size) != 0) {
        loomSetError(loomSystemError, "loomMemAlloc: cannot size %zu bytes: %s", size,
                     strerror(errno));
        goto fail_close;
    }
    struct stat st;
    if (fstat(b->fd, &st) != 0) {
        loomSetError(loomSystemError, "loomMemAlloc: fstat of its memfd failed: %s",
                     strerror(errno));
        goto fail_close;
    }
    b->dev = (uint64_t)st.st_dev;
    b->ino = (uint64_t)st.st_ino;
    b->ptr = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, b->fd, 0);
    if (b->ptr == MAP_FAILED) {
        loomSetError(loomSystemError, "loomMemAlloc: mmap of %zu bytes failed: %s", size,
                     debugErrnoText(errno));
        goto fail_close;
    }
    b->bytes = size;
    pthread_mutex_lock(&memLock);
    b->next = memBlocks;
    memBlocks = b;
    pthread_mutex_unlock(&memLock);
    *ptr = b->ptr;
    return loomSuccess;

fail_close:
    close(b->fd);
fail_free:
    free(b);
    return loomSystemError;
}

loomResult_t loomMemFree(void *ptr)
{
    if (ptr == NULL)
        return loomSuccess;
    pthread_mutex_lock(&memLock);
    struct memBlock **pp = &memBlocks;
    while (*pp && (*pp)->ptr != ptr)
        pp = &(*pp)->next;
    struct memBlock *b = *pp;
    if (b)
        *pp = b->next;
    pthread_mutex_unlock(&memLock);
    if (b == NULL)
        return loomSetError(loomInvalidArgument,
                            "loomMemFree: %p was not returned by loomMemAlloc (or was freed)", ptr);
    atomic_fetch_add_explicit(&memFrees, 1, memory_order_relaxed);
    munmap(b->ptr, b->bytes);
    close(b->fd);
    free(b);
    return loomSuccess;
}

/* ---- single copies from peers' blocks ---- */

void memOfferFill(const void *p, size_t bytes, struct loomOffer *o)
{
    uintptr_t at = (uintptr_t)p;
    memset(o, 0, sizeof(*o));
    o->addr = at;
    o->memFd = -1;
    o->memGen = atomic_load_explicit(&memFrees, memory_order_relaxed);
    pthread_mutex_lock(&memLock);
    for (const struct memBlock *b = memBlocks; b; b = b->next) {
        uintptr_t base = (uintptr_t)b->ptr;
        if (at >= base && at - base <= b->bytes && bytes <= b->bytes - (at - base)) {
            o->memFd = b->fd;
            o->memDev = b->dev;
            o->memIno = b->ino;
            o->memOff = at - base;
            o->memBytes = b->bytes;
            break;
        }
    }
    pthread_mutex_unlock(&memLock);
}

/* Views a communicator keeps: four a peer (two buffers of two calls in flight), at least 16. */
static int viewsWanted(const struct loomComm *comm)
{
    return comm->nranks > 4 ? 4 * comm->nranks : 16;
}

struct memView {
    int peer;          /* -1: free */
    uint64_t dev, ino; /* the block's device and inode numbers */
    uint64_t gen;      /* the peer's loomMemFree count when mapped */
    char *base;        /* NULL: the block could not be mapped (read it with process_vm_readv) */
    size_t bytes;
    int writable;  /* mapped for writing too */
    uint64_t used; /* for least-recently-used replacement */
};

struct memViews {
    pthread_mutex_t lock;
    uint64_t clock;
    int nv;
    struct memView v[];
};

static pthread_mutex_t memViewsInit = PTHREAD_MUTEX_INITIALIZER;

static void viewDrop(struct memView *v)
{
    if (v->base)
        munmap((void *)(uintptr_t)v->base, v->bytes);
    v->peer = -1;
    v->base = NULL;
}

static struct memViews *viewsOf(struct loomComm *comm)
{
    pthread_mutex_lock(&memViewsInit);
    if (comm->memViews == NULL) {
        int nv = viewsWanted(comm);
        struct memViews *vs = calloc(1, sizeof(*vs) + (size_t)nv * sizeof(vs->v[0]));
        if (vs) {
            pthread_mutex_init(&vs->lock, NULL);
            vs->nv = nv;
            for (int i = 0; i < nv; i++)
                vs->v[i].peer = -1;
        }
        comm->memViews = vs;
    }
    pthread_mutex_unlock(&memViewsInit);
    return comm->memViews;
}

/* Maps the peer's block into v (v->base stays NULL when it cannot). */
static void viewMap(struct loomComm *comm, int peer, const struct loomOffer *o, struct memView *v)
{
    pid_t pid = comm->peers[peer].pid;
    char path[64];
    const char *why = NULL;
    snprintf(path, sizeof(path), "/proc/%d/fd/%lld", (int)pid, (long long)o->memFd);
    /* Non-blocking: should the descriptor now name something else (the peer withdrew its
     * offer and freed the block), opening it must not wait; fstat then tells. */
    int flags = O_CLOEXEC | O_NONBLOCK | O_NOCTTY;
    int fd = open(path, O_RDWR | flags), writable = 1;
    if (fd < 0 && errno == EACCES)
        fd = open(path, O_RDONLY | flags), writable = 0;
    struct stat st;
    if (fd < 0)
        why = strerror(errno);
    else if (fstat(fd, &st) != 0)
        why = strerror(errno);
    else if (!S_ISREG(st.st_mode) || (uint64_t)st.st_dev != o->memDev ||
             (uint64_t)st.st_ino != o->memIno || st.st_size < 0 ||
             (uint64_t)st.st_size < o->memBytes)
        why = "not the offered block";
    if (why == NULL) {
        /* Not populated: a read fault in a memfd allocates the page, and most of a large
         * block may never be touched. The faults come once, on the first use. */
        int prot = PROT_READ | (writable ? PROT_WRITE : 0);
        void *m = mmap(NULL, o->memBytes, prot, MAP_SHARED, fd, 0);
        if (m == MAP_FAILED)
            why = strerror(errno);
        else
            v->base = m, v->writable = writable;
    }
    if (fd >= 0)
        close(fd);
    v->peer = peer;
    v->dev = o->memDev;
    v->ino = o->memIno;
    v->gen = o->memGen;
    v->bytes = o->memBytes;
    if (why)
        INFO(LOOM_SHM,
             "single copies: cannot map rank %d's loomMemAlloc block (%s: %s); reading "
             "it with process_vm_readv",
             peer, path, why);
    else
        INFO(LOOM_SHM, "single copies: mapped rank %d's loomMemAlloc block of %llu bytes%s", peer,
             (unsigned long long)o->memBytes, writable ? "" : " (read only)");
}

/* Drops the views of the peer's blocks made before it freed a block (one of them may be it). */
static void viewsPurge(struct memViews *vs, int peer, uint64_t gen)
{
    for (int i = 0; i < vs->nv; i++)
        if (vs->v[i].peer == peer && vs->v[i].gen != gen)
            viewDrop(&vs->v[i]);
}

void memPeerSeen(struct loomComm *comm, int peer, uint64_t gen)
{
    struct memViews *vs = comm->memViews;
    if (vs == NULL)
        return;
    pthread_mutex_lock(&vs->lock);
    viewsPurge(vs, peer, gen);
    pthread_mutex_unlock(&vs->lock);
}

char *memPeerView(struct loomComm *comm, int peer, const struct loomOffer *o, size_t bytes,
                  int write)
{
    if (o->memFd < 0 || o->memOff > o->memBytes || bytes > o->memBytes - o->memOff ||
        o->memBytes > (uint64_t)SIZE_MAX)
        return NULL;
    struct memViews *vs = viewsOf(comm);
    if (vs == NULL)
        return NULL;
    char *at = NULL;
    struct memView *hit = NULL, *spare = NULL;
    pthread_mutex_lock(&vs->lock);
    for (int i = 0; i < vs->nv; i++) {
        struct memView *v = &vs->v[i];
        if (v->peer == peer && v->dev == o->memDev && v->ino == o->memIno)
            hit = v;
        else if (spare == NULL || (spare->peer >= 0 && (v->peer < 0 || v->used < spare->used)))
            spare = v; /* a free view, else the least recently used */
    }
    if (hit == NULL && spare) {
        viewDrop(spare);
        viewMap(comm, peer, o, spare);
        hit = spare;
    }
    if (hit) {
        hit->used = ++vs->clock;
        if (hit->base && o->memBytes <= hit->bytes && (hit->writable || !write))
            at = hit->base + o->memOff;
    }
    pthread_mutex_unlock(&vs->lock);
    return at;
}

void memPeerViewsFree(struct loomComm *comm)
{
    struct memViews *vs = comm->memViews;
    if (vs == NULL)
        return;
    for (int i = 0; i < vs->nv; i++)
        viewDrop(&vs->v[i]);
    pthread_mutex_destroy(&vs->lock);
    free(vs);
    comm->memViews = NULL;
}
