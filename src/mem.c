/*
 * mem.c — loomMemAlloc / loomMemFree: host memory that peers on this host
 * can map.
 *
 * The memory is a memfd mapped shared; a peer on the host can map the same
 * pages through /proc/<pid>/fd/<fd>. A small registry maps each pointer to
 * its file so that loomMemFree can check its argument: freeing a pointer
 * loomMemAlloc did not return is an error, not a crash. (Collectives do not
 * yet use these mappings to skip copies; that is the single-copy work of
 * the intra-host performance issue.)
 */
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "core.h"
#include "debug.h"

struct memBlock {
    struct memBlock *next;
    void *ptr;
    size_t bytes;
    int fd;
};

static pthread_mutex_t memLock = PTHREAD_MUTEX_INITIALIZER;
static struct memBlock *memBlocks;

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
    munmap(b->ptr, b->bytes);
    close(b->fd);
    free(b);
    return loomSuccess;
}
