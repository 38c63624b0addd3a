/*
 * core.h — the communicator and the connector, shared by the core modules.
 *
 * A communicator holds its ranks' identities, the bootstrap ring, and for
 * each channel one connector per peer and direction. A connector is one end
 * of a FIFO of LOOM_STEPS slots (see transports/transport.h for who builds
 * it). The struct loomComm itself is never freed: destroy releases what it
 * owns and marks it dead, so a later call with the stale handle gets a clear
 * loomInvalidUsage instead of touching freed memory.
 */
#ifndef LOOM_CORE_H_
#define LOOM_CORE_H_

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "loom.h"
#include "schedule.h"

#define LOOM_MAX_CHANNELS 32
#define LOOM_CACHELINE 64
#define LOOM_COMM_MAGIC 0x4c4f4f4d434f4d4dULL /* "LOOMCOMM" */
#define LOOM_COMM_DEAD 0x444541444c4f4f4dULL  /* "MOOLDAED" */
#define LOOM_HOSTNAME_BYTES 64

/*
 * A process's doorbell, in shared memory: peers bump `seq` and wake the
 * futex on it when `sleeping` says the owner went to sleep waiting for them.
 * A thread that sleeps in poll() rather than on the futex (the network
 * proxy, which also waits for sockets) sets `wakeFd` to an eventfd of its
 * own, which ringers write instead; 0 (as in zeroed shared memory) means
 * the futex. Such bells are process-local.
 */
struct loomDoorbell {
    _Alignas(LOOM_CACHELINE) _Atomic uint32_t seq;
    _Alignas(LOOM_CACHELINE) _Atomic uint32_t sleeping;
    int32_t wakeFd;
};

/*
 * The shared part of a FIFO: `tail` counts slots written (by the sender),
 * `head` slots consumed (by the receiver); slot = counter % LOOM_STEPS.
 * `bytes[slot]` is written before `tail` is released, so the receiver can
 * check that both ends agree on the size of every message.
 */
struct loomFifo {
    _Alignas(LOOM_CACHELINE) _Atomic uint64_t tail;
    _Alignas(LOOM_CACHELINE) _Atomic uint64_t head;
    _Alignas(LOOM_CACHELINE) uint64_t bytes[LOOM_STEPS];
};

/* One end of a FIFO as this process sees it. */
struct loomConnector {
    struct loomFifo *fifo;
    char *slots; /* LOOM_STEPS slots of slotBytes */
    size_t slotBytes;
    uint64_t pos;                  /* slots this end produced (send) or consumed (recv) */
    struct loomDoorbell *peerBell; /* the other end's doorbell */
    int peer;
    int connected;
    /*
     * Network connectors: moves this link's messages now, from the calling
     * thread (the executor calls it after it advances a counter and while it
     * waits; see src/proxy.h). NULL for shared memory.
     */
    void (*progress)(void *ctx);
    void *progressCtx;
};

struct loomChannel {
    struct loomConnector *send; /* [nranks], by peer */
    struct loomConnector *recv; /* [nranks], by peer */
};

struct loomPeerInfo {
    uint64_t hostHash;
    int32_t pid;
    int32_t localRank;
    int32_t numaNode;   /* NUMA node the process is bound to, -1 if unbound or unknown */
    uint32_t usable;    /* bit t: loomTransports[t] is usable on that rank */
    char hostname[LOOM_HOSTNAME_BYTES];
};

/* A cached schedule (see enqueue.c). */
struct loomSchedEntry {
    uint64_t key[4];
    uint64_t epoch; /* plan that pins it */
    int valid;
    struct loomSchedule sched;
};
#define LOOM_SCHED_CACHE 64

struct loomComm {
    uint64_t magic;
    int rank;
    int nranks;
    int nChannels;
    int timeoutSec;
    int localSize; /* ranks on this host */
    int spin;      /* busy-poll iterations before yielding */
    int oversubscribed; /* more ranks on this host than CPUs this process may use */
    size_t buffBytes;
    size_t slotBytes;
    loomConfig_t config;

    atomic_int abortFlag;   /* set by loomCommAbort or on a fatal error */
    atomic_int broken;      /* loomResult_t that made the comm unusable, 0 if none */
    atomic_int asyncError;  /* first error of an operation run on a stream */
    atomic_int activeCalls; /* API calls inside the comm right now */
    atomic_int pending;     /* operations queued on streams, not finished */

    struct loomPeerInfo *peers; /* [nranks] */
    int *ring;                  /* [nranks] ring order: each host's ranks in a row (topo.c) */
    struct loomTopo *topo;      /* hosts and trees (topo.c) */
    signed char *linkTransport; /* [nranks]: index in loomTransports of each peer's link, -1 none */
    atomic_int *lost;           /* [nranks]: a transport saw the link to that peer end */
    struct loomBootstrap *bootstrap;
    struct loomChannel channels[LOOM_MAX_CHANNELS];
    struct loomDoorbell *bell; /* this process's doorbell for this comm */
    struct loomDoorbell localBell;
    void *shm; /* transport state */
    void *net;

    /* Schedules: a cache for repeated calls, a pool for one-off ones. */
    struct loomSchedEntry cache[LOOM_SCHED_CACHE];
    uint64_t planEpoch;
    struct loomSchedule *pool;
    int poolSize;
    int poolUsed; /* entries taken by the plan being built */
    /* Lane ownership of connectors inside one plan (exec.c). */
    int *owner; /* [2 * nChannels * nranks] */
    /* In-place AlltoAll stages the send buffer here. */
    void *scratch;
    size_t scratchBytes;

    pthread_mutex_t errLock;
    char lastError[512];
    uint64_t lastErrorSeq;
    char abortReason[256];
};

/* Registry: 1 if comm is a live communicator of this process. */
int commIsLive(const struct loomComm *comm);
/*
 * Checks comm at API entry: NULL, foreign and destroyed handles give
 * loomInvalidArgument / loomInvalidUsage with a line naming `fn`.
 */
loomResult_t commCheck(const struct loomComm *comm, const char *fn);
/* Copies this thread's last error line to comm (for loomGetLastError(comm)). */
void commRecordError(struct loomComm *comm);
/* Marks comm unusable after a failure in the middle of an operation. */
void commSetBroken(struct loomComm *comm, loomResult_t res, const char *reason);

/* Nanoseconds on CLOCK_MONOTONIC. */
uint64_t loomClockNs(void);

#endif /* LOOM_CORE_H_ */
