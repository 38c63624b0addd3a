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

#include "bell.h"
#include "fifo.h"
#include "loom.h"
#include "schedule.h"
#include "socket.h"

#define LOOM_MAX_CHANNELS 32
#define LOOM_CACHELINE 64
#define LOOM_COMM_MAGIC 0x4c4f4f4d434f4d4dULL /* "LOOMCOMM" */
#define LOOM_COMM_DEAD 0x444541444c4f4f4dULL  /* "MOOLDAED" */
#define LOOM_HOSTNAME_BYTES 64

/*
 * The shared part of a FIFO: `tail` counts slots written (by the sender),
 * `head` slots consumed (by the receiver); slot = counter % LOOM_STEPS.
 * `bytes[slot]` is written before `tail` is released, so the receiver can
 * check that both ends agree on the size of every message; its top bits
 * (LOOM_FIFO_*, fifo.h) say where and how the message went.
 * `devEnds` (set once, at connect) says which ends launch kernels over a
 * copy of this FIFO in GPU memory (src/cuda/p2p.c): LOOM_FIFO_END_SEND |
 * LOOM_FIFO_END_RECV when both do, and then launched kernels use that copy.
 */
#define LOOM_FIFO_END_SEND 0x1u
#define LOOM_FIFO_END_RECV 0x2u
struct loomFifo {
    _Alignas(LOOM_CACHELINE) _Atomic uint64_t tail;
    _Atomic uint32_t devEnds;
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
    char *devSlots; /* the same FIFO's slots in the receiving GPU's memory (p2p), or NULL */
    /*
     * Network connectors: moves this link's messages now, from the calling
     * thread (the executor calls it after it advances a counter and while it
     * waits; see src/base/proxy.h). NULL for shared memory.
     */
    void (*progress)(void *ctx);
    void *progressCtx;
    /*
     * Network send connectors whose backend can send a message straight
     * from the caller's memory: the executor then puts the address of the
     * bytes in the slot and flags the size word LOOM_FIFO_REF (fifo.h)
     * instead of copying them in. unref(progressCtx) copies what the backend
     * has not yet sent of every such message into its slot and sends the
     * rest from there, so that no thread reads the address once it returns:
     * the executor calls it before a call returns, and before a step
     * overwrites memory a message still points to. NULL: every message goes
     * through the slot (shared memory, InfiniBand, rails, TLS).
     */
    void (*unref)(void *ctx);
    uint64_t *ll; /* LOOM_STEPS LL slots of LOOM_LL_LINES lines (fifo.h), or NULL: no LL here */
};

struct loomChannel {
    struct loomConnector *send; /* [nranks], by peer */
    struct loomConnector *recv; /* [nranks], by peer */
};

#define LOOM_CPU_WORDS 16 /* CPUs 0..1023 */
struct loomPeerInfo {
    uint64_t hostHash;
    int32_t pid;
    int32_t localRank;
    int32_t numaNode; /* NUMA node the process is bound to, -1 if unbound or unknown */
    uint32_t usable;  /* bit t: loomTransports[t] is usable on that rank */
    char hostname[LOOM_HOSTNAME_BYTES];
    /* The CUDA device the rank bound the communicator to (see src/cuda/p2p.c). */
    char gpuUuid[16];
    int32_t gpu;      /* device ordinal in that process, -1: not bound */
    int32_t gpuFlags; /* LOOM_GPU_* */
    /* CPUs the process may run on (sched_getaffinity): bit i of word i / 64 is CPU i. */
    uint64_t cpuMask[LOOM_CPU_WORDS];
    /* Its status listener (bootstrapStatusOpen), for loom-info --status HOST:PORT; family 0: none.
     */
    struct bootstrapAddr statusAddr;
};
#define LOOM_GPU_P2P 0x1 /* the rank takes part in p2p (LOOM_P2P_DISABLE unset) */

struct loomComm {
    _Atomic uint64_t magic; /* read at every API entry, written by destroy on any thread */
    int rank;
    int nranks;
    int nChannels;
    int timeoutSec;
    int localSize;      /* ranks on this host */
    int spin;           /* busy-poll iterations before yielding */
    int oversubscribed; /* more ranks on this host than CPUs they may use together */
    /* What the tuner assumes, the same on every rank (commSizes): the ranks
     * and the CPUs they may use of the host most crowded. */
    int tuneLocalRanks, tuneCpus;
    size_t buffBytes;
    size_t slotBytes;
    loomConfig_t config;
    /* Float32 reductions over the network (compress.c): COMPRESS_*, whether the config set it
     * (then calls it cannot apply to are refused), whether comm has any network link at all. */
    int compress, compressForced, compressNet;

    atomic_int abortFlag; /* set by loomCommAbort or on a fatal error */
    /* Sleeps of the executor that ran to their cap (100 ms) and then found work:
     * wake-ups somebody missed, told at destroy (LOOM_DEBUG=INFO). */
    _Atomic unsigned long lateWakes;
    atomic_int broken;      /* loomResult_t that made the comm unusable, 0 if none */
    atomic_int asyncError;  /* first error of an operation run on a stream */
    atomic_int activeCalls; /* API calls inside the comm right now */
    atomic_int pending;     /* operations queued on streams, not finished */
    atomic_int revoked;     /* REVOKE_*: loomCommRevoke (revoke.c) */

    /* Non-blocking mode (config.blocking = 0): see init.c. */
    int blocking;
    atomic_int initializing; /* 1 while initThread builds the communicator */
    int initThreadStarted;
    pthread_t initThread;
    struct loomStream *queue; /* runs the calls made with a NULL stream */

    struct loomPeerInfo *peers; /* [nranks] */
    int *ring;                  /* [nranks] ring order: each host's ranks in a row (topo.c) */
    struct loomTopo *topo;      /* hosts and trees (topo.c) */
    signed char *linkTransport; /* [nranks]: index in loomTransports of each peer's link, -1 none */
    /* Links connected so far (src/connect.c: some at init, the rest on first use). */
    unsigned char *linkUp; /* [nranks]: 1 once this rank's connectors to that peer are connected */
    atomic_int nLinksUp;
    pthread_mutex_t connectLock; /* one thread connects at a time */
    int connectLockReady;
    atomic_int *lost; /* [nranks]: a transport saw the link to that peer end */
    struct loomBootstrap *bootstrap;
    struct bootstrapGrow *grow; /* the grow meeting loomCommGetUniqueId opened, until used */
    struct loomChannel channels[LOOM_MAX_CHANNELS];
    struct loomDoorbell *bell; /* this process's doorbell for this comm */
    struct loomDoorbell localBell;
    void *shm; /* transport state */
    void *net;
    /*
     * Set by a transport whose links leave this host: carries a failure
     * notice (code, this rank, text) to `peer`, where it is posted on the
     * peer's doorbell. Returns 0 when the peer is not reached that way (its
     * doorbell is then mapped here). Any thread; never blocks for long.
     */
    int (*notifyPeer)(struct loomComm *comm, int peer, loomResult_t code, const char *text);
    /*
     * Set by the network transport: blocks the calling executor in poll()
     * on the sockets of the n network connectors c[] it waits for, until
     * one may move, the proxy moved something or heard of a failure, or
     * timeoutMs passed; the proxy leaves those sockets alone meanwhile.
     * Returns 1 when it waited (or found one ready), 0 at once when these
     * links cannot be waited on that way (InfiniBand, rails, TLS, parts of
     * a large message in flight): the caller then yields as before.
     */
    int (*netWait)(struct loomComm *comm, struct loomConnector *const *c, int n, int timeoutMs);
    /*
     * The executor stops polling (its call ends, or its wait goes to sleep:
     * `handOver`): the proxy takes the sockets back at once when handOver
     * or when a send is still on its way out, else when the quiet runs out.
     */
    void (*netWaitEnd)(struct loomComm *comm, int handOver);

    struct loomPlanner *planner; /* schedule cache, pool, memo, scratch (src/plan.c) */
    /* Lane ownership of connectors inside one plan (exec.c). */
    int *owner;                   /* [2 * nChannels * nranks] */
    struct loomTunerState *tuner; /* its decisions, built at init (tuner.c) */
    struct cudaComm *cuda;        /* device binding, p2p slots (src/cuda/p2p.c); NULL if none */
    /* Single-copy collectives (cma.c): all ranks agreed they can reach each other's memory. */
    int cmaOk;
    size_t cmaMinBytes; /* LOOM_CMA_MIN_BYTES, the largest any rank set (cmaSetup) */
    struct cmaState *cma;
    struct memViews *memViews;     /* views of peers' loomMemAlloc blocks (mem.c) */
    struct kexecComm *kexec;       /* the kernel executor's view of the connectors (kexec.c) */
    struct devexecComm *devexec;   /* the launched kernel's view of them (src/exec/devexec.c) */
    struct loomRecorder *recorder; /* the flight recorder (src/exec/recorder.c); NULL: none */
    struct bootstrapStatus
        *status; /* its status listener, from the peer exchange to recorderFree */

    pthread_mutex_t errLock;
    char lastError[512];
    uint64_t lastErrorSeq;
    char abortReason[256];
};

/*
 * What every layer asks of a communicator, defined in src/base/comm.c (the
 * collectives' names in src/base/coll.c).
 *
 * Registry: lists comm as created by this process (init, split, shrink, grow);
 * loomSystemError when the registry is full.
 */
loomResult_t commRegister(struct loomComm *comm);
/* 1 if comm was created by this process, destroyed since or not. */
int commRegistered(const struct loomComm *comm);
/* 1 if comm is a live communicator of this process. */
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
/*
 * loomSuccess if comm can run operations now; loomInvalidUsage naming `fn`
 * while a non-blocking init is still in progress, or the error that broke it.
 */
loomResult_t commCheckReady(struct loomComm *comm, const char *fn);

/* States of comm->revoked: not revoked, operations still stopping, quiescent. */
#define REVOKE_NONE 0
#define REVOKE_STOPPING 1
#define REVOKE_DONE 2
/* CPUs this process may run on (its affinity mask), at least 1. */
int commCpuCount(void);
/*
 * Bytes of one connector slot for a communicator of nranks ranks on nHosts
 * hosts, at most crowd of them on one host, with nChannels channels.
 */
size_t commSlotBytes(int nranks, int nHosts, int crowd, int nChannels);

/* The API call's name of a collective ("loomAllReduce"), for messages (coll.c). */
const char *loomCollName(loomColl_t coll);

/* Nanoseconds on CLOCK_MONOTONIC. */
uint64_t loomClockNs(void);

#endif /* LOOM_CORE_H_ */
