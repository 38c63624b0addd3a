/*
 * comm.c — what every layer asks of a communicator, defined where
 * core.h declares it: the registry of the communicators this process made
 * (so that a NULL, foreign or destroyed handle gives a one-line error
 * instead of a crash), the handle checks, the last error and the broken
 * state, the clock, and the sizes every rank must agree on. Lifecycle
 * (init, split, destroy) stays in the core (src/init.c), which registers
 * each communicator it makes.
 */
#include <sched.h>
#include <stdio.h>
#include <time.h>
#include <unistd.h>

#include "core.h"
#include "debug.h"
#include "param.h"

#define REGISTRY_MAX 65536
static pthread_mutex_t registryLock = PTHREAD_MUTEX_INITIALIZER;
static struct loomComm *registry[REGISTRY_MAX];
static _Atomic int registryCount;

loomResult_t commRegister(struct loomComm *comm)
{
    pthread_mutex_lock(&registryLock);
    int n = atomic_load_explicit(&registryCount, memory_order_relaxed);
    if (n == REGISTRY_MAX) {
        pthread_mutex_unlock(&registryLock);
        return loomSetError(loomSystemError, "more than %d communicators created", REGISTRY_MAX);
    }
    registry[n] = comm;
    atomic_store_explicit(&registryCount, n + 1, memory_order_release);
    pthread_mutex_unlock(&registryLock);
    return loomSuccess;
}

int commRegistered(const struct loomComm *comm)
{
    int n = atomic_load_explicit(&registryCount, memory_order_acquire);
    for (int i = n - 1; i >= 0; i--)
        if (registry[i] == comm)
            return 1;
    return 0;
}

int commIsLive(const struct loomComm *comm)
{
    return comm != NULL && commRegistered(comm) && comm->magic == LOOM_COMM_MAGIC;
}

loomResult_t commCheck(const struct loomComm *comm, const char *fn)
{
    if (comm == NULL)
        return loomSetError(loomInvalidArgument, "%s: comm is NULL", fn);
    if (!commRegistered(comm))
        return loomSetError(loomInvalidArgument,
                            "%s: comm %p is not a communicator created by this process", fn,
                            (const void *)comm);
    if (comm->magic != LOOM_COMM_MAGIC)
        return loomSetError(loomInvalidUsage, "%s: the communicator was destroyed", fn);
    return loomSuccess;
}

void commRecordError(struct loomComm *comm)
{
    uint64_t seq;
    const char *line = debugLastError(&seq);
    pthread_mutex_lock(&comm->errLock);
    if (seq > comm->lastErrorSeq) {
        snprintf(comm->lastError, sizeof(comm->lastError), "%s", line);
        comm->lastErrorSeq = seq;
    }
    pthread_mutex_unlock(&comm->errLock);
}

/* The reason is written before `broken` is published, and never again, so readers need no lock. */
void commSetBroken(struct loomComm *comm, loomResult_t res, const char *reason)
{
    pthread_mutex_lock(&comm->errLock);
    if (atomic_load_explicit(&comm->broken, memory_order_relaxed) == 0) {
        snprintf(comm->abortReason, sizeof(comm->abortReason), "%s", reason);
        atomic_store_explicit(&comm->broken, (int)res, memory_order_release);
    }
    pthread_mutex_unlock(&comm->errLock);
}

loomResult_t commCheckReady(struct loomComm *comm, const char *fn)
{
    if (atomic_load_explicit(&comm->initializing, memory_order_acquire))
        return loomSetError(loomInvalidUsage,
                            "%s: the communicator is still being created (non-blocking mode); "
                            "poll loomCommGetAsyncError until it gives loomSuccess",
                            fn);
    if (atomic_load_explicit(&comm->revoked, memory_order_acquire))
        return loomSetError(loomInvalidUsage,
                            "%s: the communicator was revoked (loomCommRevoke); it can only be "
                            "destroyed, aborted, split, shrunk or grown now",
                            fn);
    int broken = atomic_load_explicit(&comm->broken, memory_order_acquire);
    if (broken)
        return loomSetError((loomResult_t)broken,
                            "%s: the communicator is unusable after an earlier error (%s); "
                            "destroy it",
                            fn, comm->abortReason);
    return loomSuccess;
}

uint64_t loomClockNs(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
}

int commCpuCount(void)
{
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof(set), &set) == 0)
        return CPU_COUNT(&set);
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (int)n : 1;
}

/*
 * Sizes that depend on the parameters and on how many ranks share a host.
 * The slot size decides how schedules cut messages, so it must be the same
 * on every rank: it follows what every rank knows alike (the number of
 * hosts, ranks and channels, the most crowded host). Across hosts each
 * message pays a proxy hand-off and system calls, so larger slots (4 MiB
 * FIFOs) pay off, as long as the network FIFOs (two per peer and channel,
 * all connected at init) stay within NET_FIFO_BUDGET per rank.
 */
#define NET_BUFFSIZE (4 << 20)
#define NET_FIFO_BUDGET (256ULL << 20)

size_t commSlotBytes(int nranks, int nHosts, int crowd, int nChannels)
{
    const int oneMiB = 1 << 20;
    int setBuff = paramIsSet(LOOM_PARAM_BUFFSIZE);
    size_t buff = (size_t)paramInt(LOOM_PARAM_BUFFSIZE);
    if (!setBuff && nHosts > 1 &&
        2ULL * (uint64_t)nranks * (uint64_t)nChannels * NET_BUFFSIZE <= NET_FIFO_BUDGET)
        buff = NET_BUFFSIZE;
    if (!setBuff && crowd > 8) /* keep /dev/shm use near 8 MiB per rank */
        buff = (size_t)(8 * oneMiB / crowd) < 64 * 1024 ? 64 * 1024 : 8 * oneMiB / crowd;
    size_t slot = (buff / LOOM_STEPS) & ~(size_t)(LOOM_CACHELINE - 1);
    return slot < LOOM_CACHELINE ? LOOM_CACHELINE : slot;
}
