/*
 * loom.h — the public API of Loom, a collective communication library.
 *
 * Loom has the shape of NCCL: a communicator of `nranks` processes, each
 * identified by a rank, runs collectives (AllReduce, Broadcast, Reduce,
 * AllGather, ReduceScatter, AlltoAll[v]) and point-to-point Send/Recv on
 * buffers. Names follow NCCL with `loom` for `nccl`; datatype and operation
 * enums keep NCCL's numbering.
 *
 * Every function returns a loomResult_t. On failure nothing the caller can
 * see has changed (output parameters are left untouched unless stated) and
 * loomGetLastError() returns one line saying what went wrong and why.
 *
 * This is the only installed header.
 */
#ifndef LOOM_H_
#define LOOM_H_

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

#define LOOM_MAJOR 0
#define LOOM_MINOR 1
#define LOOM_PATCH 0
/* LOOM_VERSION_CODE encodes major*10000 + minor*100 + patch, as NCCL does. */
#define LOOM_VERSION_CODE (LOOM_MAJOR * 10000 + LOOM_MINOR * 100 + LOOM_PATCH)

typedef struct loomComm *loomComm_t;
/* A stream orders operations. NULL means "no stream": the call blocks until done. */
typedef struct loomStream *loomStream_t;

#define LOOM_UNIQUE_ID_BYTES 128
typedef struct {
    char internal[LOOM_UNIQUE_ID_BYTES];
} loomUniqueId;

typedef enum {
    loomSuccess = 0,
    loomUnhandledCudaError = 1,
    loomSystemError = 2,
    loomInternalError = 3,
    loomInvalidArgument = 4,
    loomInvalidUsage = 5,
    loomRemoteError = 6,
    loomInProgress = 7,
    loomTimeout = 8,
    loomNumResults = 9
} loomResult_t;

typedef enum {
    loomInt8 = 0,
    loomChar = 0,
    loomUint8 = 1,
    loomInt32 = 2,
    loomInt = 2,
    loomUint32 = 3,
    loomInt64 = 4,
    loomUint64 = 5,
    loomFloat16 = 6,
    loomHalf = 6,
    loomFloat32 = 7,
    loomFloat = 7,
    loomFloat64 = 8,
    loomDouble = 8,
    loomBfloat16 = 9,
    loomNumTypes = 10
} loomDataType_t;

typedef enum {
    loomSum = 0,
    loomProd = 1,
    loomMax = 2,
    loomMin = 3,
    loomAvg = 4,
    loomNumOps = 5
} loomRedOp_t;

/* Passed as `color` to loomCommSplit by ranks that want no new communicator. */
#define LOOM_SPLIT_NOCOLOR (-1)
/* Value of an unset integer field in loomConfig_t: take the default. */
#define LOOM_CONFIG_UNDEF_INT (-2147483647 - 1)

/*
 * Communicator configuration. Always start from LOOM_CONFIG_INITIALIZER and
 * set only the fields you need; unset fields take the defaults (and the
 * environment, see loom(7)).
 *   blocking     1 (default): init and collectives return when done or
 *                failed. 0: non-blocking mode, as in NCCL: init returns
 *                loomInProgress with *comm set and builds the communicator
 *                on a thread; calls with a NULL stream are queued and return
 *                loomInProgress; poll loomCommGetAsyncError for the outcome.
 *   timeoutSec   seconds a wait may go without progress before the call
 *                returns loomTimeout (default: LOOM_TIMEOUT).
 *   netName      network transport between hosts, "socket" or "ib" (as
 *                LOOM_NET); NULL: LOOM_NET.
 *   netCompress  "bf16", "bf16-sr" or "none" (as LOOM_NET_COMPRESS): float32
 *                AllReduce and ReduceScatter send bfloat16 over network
 *                links; NULL: LOOM_NET_COMPRESS. Set here, an AllReduce or
 *                ReduceScatter of another datatype is refused
 *                (loomInvalidArgument); the same on every rank.
 */
typedef struct {
    size_t size;
    unsigned int magic;
    unsigned int version;
    int blocking;
    int timeoutSec;
    const char *netName;
    const char *netCompress;
} loomConfig_t;

#define LOOM_CONFIG_MAGIC 0x4c4f4f4dU /* "LOOM" */
#define LOOM_CONFIG_INITIALIZER                                                                    \
    {                                                                                              \
        sizeof(loomConfig_t), LOOM_CONFIG_MAGIC, LOOM_VERSION_CODE, LOOM_CONFIG_UNDEF_INT,         \
            LOOM_CONFIG_UNDEF_INT, NULL, NULL                                                      \
    }

/* Stores LOOM_VERSION_CODE of the library in *version. */
loomResult_t loomGetVersion(int *version);

/*
 * Creates a unique id for a new communicator. The calling process starts a
 * rendezvous thread that serves exactly one communicator creation; pass the
 * id (by any means: MPI_Bcast, a file, an environment variable) to every
 * rank, which then calls loomCommInitRank. The id holds this host's address
 * and a random secret; connections that do not present the secret are
 * dropped.
 */
loomResult_t loomGetUniqueId(loomUniqueId *uniqueId);

/*
 * Creates a communicator of `nranks` ranks; this process is `rank`. Collective
 * over all ranks: every rank must call it with the same id and nranks.
 * Returns when all ranks have joined and every link is connected, or with
 * loomTimeout after LOOM_TIMEOUT seconds. On failure *comm is untouched.
 */
loomResult_t loomCommInitRank(loomComm_t *comm, int nranks, loomUniqueId commId, int rank);
/* As loomCommInitRank with a configuration (NULL: defaults). */
loomResult_t loomCommInitRankConfig(loomComm_t *comm, int nranks, loomUniqueId commId, int rank,
                                    loomConfig_t *config);
/*
 * Creates, in this one process, a communicator of `ndev` ranks and its ndev
 * handles: comms[i] is rank i. Each handle is used as a communicator of its
 * own: one thread per rank calling collectives, or one thread calling them
 * on every handle between loomGroupStart and loomGroupEnd. Rank i is bound
 * to CUDA device devlist[i] (its primary context; ranks given the same
 * device share it), or to no device where devlist[i] is -1. devlist NULL:
 * devices 0..ndev-1 as in NCCL when CUDA and a device are present, else
 * host-only ranks. Returns loomInvalidArgument for ndev < 1, comms NULL, a
 * device that does not exist, or a device named where CUDA is not usable.
 * Returns when every rank is ready; on failure no communicator is left and
 * comms is untouched.
 */
loomResult_t loomCommInitAll(loomComm_t *comms, int ndev, const int *devlist);
/*
 * Creates a communicator from the launcher's environment: LOOM_UNIQUE_ID,
 * LOOM_RANK and LOOM_NRANKS as set by loomrun(1); or, under mpirun, srun or
 * another launcher, LOOM_ROOT_ADDR=host:port (where rank 0 runs and
 * listens) with the launcher's rank and size (OMPI_COMM_WORLD_RANK/SIZE,
 * PMIX_RANK, SLURM_PROCID/NTASKS, PMI_RANK/SIZE). See loom(7).
 */
loomResult_t loomCommInitFromEnv(loomComm_t *comm);

/*
 * Splits `comm`: ranks passing the same color form a new communicator, ranked
 * by (key, rank in comm). Collective over comm. Ranks passing
 * LOOM_SPLIT_NOCOLOR get *newcomm = NULL. config NULL: inherit comm's.
 */
loomResult_t loomCommSplit(loomComm_t comm, int color, int key, loomComm_t *newcomm,
                           loomConfig_t *config);

/* Flags of loomCommShrink. */
#define LOOM_SHRINK_DEFAULT 0x00 /* comm is healthy: wait for its operations to finish first */
#define LOOM_SHRINK_ABORT 0x01   /* comm is broken by a failure: abort what is in flight first */

/*
 * Makes *newcomm of the ranks of comm not in excludeRanks[0 .. excludeCount-1],
 * ranked in their order in comm (ranks below the first excluded keep their
 * number). Collective over the ranks kept, which must all pass the same list
 * (in any order); the excluded ranks do not call it. Works on a comm that a
 * failure made unusable (pass LOOM_SHRINK_ABORT to stop its operations in
 * flight, which then return loomRemoteError); with LOOM_SHRINK_DEFAULT it
 * first waits for comm's operations on streams to end. The ranks kept meet
 * at the lowest of them, through the addresses exchanged when comm was made,
 * so neither a dead rank nor the unique id's root is needed. config NULL:
 * inherit comm's. comm is left as it was for loomCommDestroy (or Abort),
 * which the caller still calls.
 * Returns loomInvalidArgument for a bad list (a rank out of range, or the
 * caller's own rank) or flags; loomInvalidUsage, on every rank kept, when
 * their lists differ (as long as they agree on the lowest rank kept; else
 * loomTimeout); loomRemoteError naming a rank kept that failed or left
 * during the shrink (call it again with that rank excluded too);
 * loomTimeout naming the ranks kept that did not arrive within LOOM_TIMEOUT.
 * On failure *newcomm is untouched. See loom(7) for the recovery pattern.
 */
loomResult_t loomCommShrink(loomComm_t comm, const int *excludeRanks, int excludeCount,
                            loomComm_t *newcomm, loomConfig_t *config, int flags);
/* Flags of loomCommRevoke. */
#define LOOM_REVOKE_DEFAULT 0x00
/*
 * Stops every operation in flight on comm, on any thread, and those queued
 * on streams (a blocked call returns loomRemoteError saying so), as NCCL's
 * ncclCommRevoke. Local: peers are not told, each
 * rank revokes its own. loomCommGetAsyncError then gives loomInProgress
 * until nothing of comm runs any more, and loomSuccess after. A blocking
 * communicator returns loomSuccess once that is so; a non-blocking one
 * returns loomInProgress at once (or loomSuccess when nothing ran). After
 * it comm serves only loomCommDestroy, loomCommAbort, loomCommSplit,
 * loomCommShrink, loomCommGrow and loomCommGetUniqueId (and the queries);
 * every other call returns loomInvalidUsage with a line saying it was
 * revoked. Calling it again is harmless. loomInvalidArgument for flags other
 * than LOOM_REVOKE_DEFAULT; loomInvalidUsage while a non-blocking init runs.
 */
loomResult_t loomCommRevoke(loomComm_t comm, int revokeFlags);
/*
 * Makes an id for loomCommGrow (NCCL 2.29's ncclCommGetUniqueId). Called by
 * one rank of comm, the coordinator, which hands the id to the new ranks by
 * any means and passes it to its own loomCommGrow. The rank opens a port for
 * the grow's meeting, served from its loomCommGrow; a new rank may come
 * before (it waits). An id serves one grow: loomCommGrow spends it,
 * succeeded or not, and a second call here withdraws an id not yet used.
 * Not collective. Works on a revoked comm.
 */
loomResult_t loomCommGetUniqueId(loomComm_t comm, loomUniqueId *uniqueId);
/*
 * Makes *newcomm of the ranks of comm and nranks - (comm's size) new ranks
 * (NCCL 2.29's ncclCommGrow). Ranks of comm keep their numbers and pass
 * comm and rank -1; the coordinator (the rank that made the id with
 * loomCommGetUniqueId) passes the id, the others NULL. New ranks pass comm
 * NULL, the id and their rank, each a number of its own from comm's size to
 * nranks - 1. Collective over all of them. Waits for comm's operations to
 * end first (none should be in flight). config NULL: comm's configuration
 * (ranks of comm), the defaults (new ranks). comm is left as it was, for
 * loomCommDestroy. Returns loomInvalidArgument for arguments wrong on their
 * own (rank not -1 with comm, nranks not above comm's size, id NULL without
 * comm); loomInvalidUsage, on every rank that came, for ranks that pass
 * different nranks, a new rank whose number is taken (by a rank of comm or
 * another new rank), no id or two among the ranks of comm, or an id used
 * already (a new rank holding a spent id is told that no meeting listens
 * any more); loomRemoteError naming a rank that failed or left meanwhile;
 * loomTimeout naming the ranks that did not come within LOOM_TIMEOUT. On
 * failure *newcomm is untouched. See loom(7) for the recovery pattern.
 */
loomResult_t loomCommGrow(loomComm_t comm, int nranks, const loomUniqueId *uniqueId, int rank,
                          loomComm_t *newcomm, loomConfig_t *config);
/*
 * Stores in ranks[0 .. *count-1], ascending, the ranks of comm that this
 * rank knows to have failed: exited or killed, lost their connection, or
 * (on this host) stopped past LOOM_TIMEOUT. ranks must have room for
 * loomCommCount entries; NULL only counts. Looks afresh at each call; other
 * ranks may know of more or fewer failures (exchange the lists, or use the
 * union, before loomCommShrink). Local: no communication.
 */
loomResult_t loomCommGetFailedRanks(loomComm_t comm, int *ranks, int *count);

/* Waits for every operation issued on comm to finish. The comm stays usable. */
loomResult_t loomCommFinalize(loomComm_t comm);
/*
 * Frees the communicator and its resources. After it, any use of comm returns
 * loomInvalidUsage. Not collective: returns at once even if peers are gone.
 */
loomResult_t loomCommDestroy(loomComm_t comm);
/*
 * Stops every operation in flight on comm (they return loomRemoteError within
 * 100 ms) and frees the communicator as loomCommDestroy does. Safe to call
 * from another thread while a collective is blocked; local (peers are not
 * told).
 */
loomResult_t loomCommAbort(loomComm_t comm);
/*
 * Stores in *asyncError the first error an asynchronous operation on comm
 * met, or the error that made comm unusable (a peer's failure included), else
 * loomSuccess; in non-blocking mode loomInProgress while init or queued
 * operations are still running.
 */
loomResult_t loomCommGetAsyncError(loomComm_t comm, loomResult_t *asyncError);
/* Number of ranks in comm. */
loomResult_t loomCommCount(const loomComm_t comm, int *count);
/* This process's rank in comm. */
loomResult_t loomCommUserRank(const loomComm_t comm, int *rank);

/*
 * How comm is laid out (loom-info --comm prints it). Hosts are numbered
 * 0 .. nhosts-1 in the order of their lowest rank. The ring visits each
 * host's ranks in a row; ring[i] is the rank at position i, and data flows
 * from ring[i] to ring[(i + 1) % nranks]. The two trees (AllReduce's
 * double binary tree) span the hosts with a chain inside each host, or the
 * ranks on a single host. The strings are owned by the library and valid
 * until comm is destroyed.
 */
typedef struct {
    int host;              /* the peer's host */
    const char *hostname;  /* its hostname */
    const char *transport; /* this rank's link to it: "shm", "net/socket", "net/ib", "net/self" */
    int connected;         /* 1 once that link is connected (at init or on first use) */
} loomPeerInfo_t;
#define LOOM_TREE_MAX_DOWN 3
/* Where `peer` is and how this rank reaches it. */
loomResult_t loomCommPeerInfo(const loomComm_t comm, int peer, loomPeerInfo_t *info);
/* Stores the ring order in ring[0 .. nranks-1]. */
loomResult_t loomCommRing(const loomComm_t comm, int *ring);
/*
 * The links of `rank` in tree `tree` (0 or 1): *up is -1 at the root, and
 * down[0 .. *ndown-1] (at most LOOM_TREE_MAX_DOWN) are its children.
 */
loomResult_t loomCommTree(const loomComm_t comm, int tree, int rank, int *up,
                          int down[LOOM_TREE_MAX_DOWN], int *ndown);

/* A short name for a result code ("invalid argument"). Never NULL. */
const char *loomGetErrorString(loomResult_t result);
/*
 * One line describing the last error met by this thread or on comm,
 * whichever came later ("" if none). comm may be NULL. The string stays valid
 * until the next Loom call on this thread.
 */
const char *loomGetLastError(loomComm_t comm);

/*
 * Collectives. `count` is in elements of `datatype`. A NULL stream makes the
 * call block until the operation is complete on this rank (in non-blocking
 * mode: queue it and return loomInProgress). In place when
 * sendbuff == recvbuff (AllGather: sendbuff == recvbuff + rank * sendcount;
 * ReduceScatter: recvbuff == sendbuff + rank * recvcount). Every rank must
 * call the same collectives in the same order.
 */
loomResult_t loomAllReduce(const void *sendbuff, void *recvbuff, size_t count,
                           loomDataType_t datatype, loomRedOp_t op, loomComm_t comm,
                           loomStream_t stream);
/* Root's sendbuff is copied to every rank's recvbuff (sendbuff ignored elsewhere). */
loomResult_t loomBroadcast(const void *sendbuff, void *recvbuff, size_t count,
                           loomDataType_t datatype, int root, loomComm_t comm, loomStream_t stream);
/* Reduction of every rank's sendbuff lands in root's recvbuff (recvbuff ignored elsewhere). */
loomResult_t loomReduce(const void *sendbuff, void *recvbuff, size_t count, loomDataType_t datatype,
                        loomRedOp_t op, int root, loomComm_t comm, loomStream_t stream);
/* recvbuff (nranks * sendcount elements) receives every rank's sendbuff in rank order. */
loomResult_t loomAllGather(const void *sendbuff, void *recvbuff, size_t sendcount,
                           loomDataType_t datatype, loomComm_t comm, loomStream_t stream);
/* Reduces sendbuff (nranks * recvcount) and leaves block `rank` in recvbuff. */
loomResult_t loomReduceScatter(const void *sendbuff, void *recvbuff, size_t recvcount,
                               loomDataType_t datatype, loomRedOp_t op, loomComm_t comm,
                               loomStream_t stream);
/* Block p (count elements) of sendbuff goes to rank p; block p of recvbuff comes from p. */
loomResult_t loomAlltoAll(const void *sendbuff, void *recvbuff, size_t count,
                          loomDataType_t datatype, loomComm_t comm, loomStream_t stream);
/*
 * As loomAlltoAll with per-peer counts and displacements, in elements, indexed
 * by peer. sendcounts[p] on this rank must equal recvcounts[me] on rank p.
 * Not in place: sendbuff and recvbuff must not overlap.
 */
loomResult_t loomAlltoAllv(const void *sendbuff, const size_t sendcounts[], const size_t sdispls[],
                           void *recvbuff, const size_t recvcounts[], const size_t rdispls[],
                           loomDataType_t datatype, loomComm_t comm, loomStream_t stream);

/* Point to point: count and datatype must match the peer's loomRecv/loomSend. */
loomResult_t loomSend(const void *sendbuff, size_t count, loomDataType_t datatype, int peer,
                      loomComm_t comm, loomStream_t stream);
loomResult_t loomRecv(void *recvbuff, size_t count, loomDataType_t datatype, int peer,
                      loomComm_t comm, loomStream_t stream);

/*
 * Groups: calls between loomGroupStart and the matching loomGroupEnd are
 * collected and run together at loomGroupEnd, so any matching set of sends
 * and receives completes (everyone may send first). Groups nest; only the
 * outermost End runs them. Every operation in a group must use the same
 * stream. If one call in the group failed its checks, loomGroupEnd returns
 * that error and runs nothing. The operations of a group run side by side:
 * a buffer one of them writes must not overlap a buffer another reads or
 * writes (as in NCCL); what is read then is undefined.
 */
loomResult_t loomGroupStart(void);
loomResult_t loomGroupEnd(void);

/*
 * Host streams: operations issued on a stream run in issue order on the
 * stream's progress thread while the caller goes on.
 */
loomResult_t loomStreamCreate(loomStream_t *stream);
/* Wraps a cudaStream_t (needs a build with CUDA; otherwise loomInvalidUsage). */
loomResult_t loomStreamCreateCuda(loomStream_t *stream, void *cudaStream);
/* Waits until every operation issued on stream is done; returns the first error met. */
loomResult_t loomStreamSynchronize(loomStream_t stream);
/* loomSuccess if the stream is idle, loomInProgress if work is pending, or its first error. */
loomResult_t loomStreamQuery(loomStream_t stream);
/* Waits for pending work (queued callbacks are called), then frees the stream. */
loomResult_t loomStreamDestroy(loomStream_t stream);
/*
 * Per-operation completion, as cudaStreamAddCallback: fn(stream, result,
 * userData) is called on the stream's progress thread once every operation
 * issued on the host stream before it is complete; result is loomSuccess, or
 * the first error an operation on the stream met (loomGetLastError in fn
 * gives its line). Callbacks run in issue order, with the operations; fn
 * must not wait for its own stream (Synchronize and Destroy on it are
 * refused there). Not part of a group: it is queued at once. A stream that
 * wraps a cudaStream_t refuses it (use cudaLaunchHostFunc there).
 */
typedef void (*loomStreamCallback_t)(loomStream_t stream, loomResult_t result, void *userData);
loomResult_t loomStreamAddCallback(loomStream_t stream, loomStreamCallback_t fn, void *userData);

/*
 * Allocates `size` bytes of host memory that peers on this host can map
 * (a shared memory file). Freed with loomMemFree. comm may be NULL.
 */
loomResult_t loomMemAlloc(void **ptr, size_t size, loomComm_t comm);
loomResult_t loomMemFree(void *ptr);

/*
 * Introspection, used by loom-info(1). Parameters are the LOOM_* environment
 * variables of loom(7); index runs from 0 to loomParamCount() - 1. The
 * strings are owned by the library and stay valid for the process lifetime.
 */
typedef struct {
    const char *name;         /* "LOOM_TIMEOUT" */
    const char *value;        /* value in force ("600") */
    const char *defaultValue; /* built-in default */
    const char *help;         /* one line */
    int isSet;                /* 1 if taken from the environment */
} loomParamInfo_t;
int loomParamCount(void);
loomResult_t loomParamGet(int index, loomParamInfo_t *info);
/* Build features, one "name=yes|no" word each: "hwloc=yes cuda=no verbs=yes pmix=yes mpi=yes". */
const char *loomBuildFeatures(void);
/*
 * Transports compiled in, index 0 .. loomTransportCount()-1: name ("shm"), and
 * whether it is usable on this host now, with a reason when it is not.
 */
int loomTransportCount(void);
loomResult_t loomTransportInfo(int index, const char **name, int *usable, const char **why);
/*
 * The devices transport `index` may use on this host, as lines of text
 * (net: every RDMA device's ports, link layers, MTUs and GID tables, the
 * port and GID Loom takes marked "*"); "" when it has none to list.
 */
loomResult_t loomTransportDevices(int index, const char **text);
/*
 * The tuner's decision for one call, as if made on a communicator of nranks
 * ranks on this host with the LOOM_* settings in force: collective is
 * "allreduce", "broadcast", "reduce", "allgather", "reducescatter",
 * "alltoall" or "sendrecv"; bytes is the size loom-perf reports (count x
 * element size; for AllGather, ReduceScatter and AlltoAll, times nranks).
 * algorithm NULL gives the tuner's choice within LOOM_ALGO; "ring", "tree" or
 * "doubling" gives the model's figures for that algorithm. loomInvalidArgument for an
 * unknown collective, an algorithm the collective does not have, nranks < 1
 * or a NULL info; *info is then unchanged.
 */
typedef struct {
    const char *algorithm; /* "ring", "tree", "doubling", "direct" or "cma"; library-owned */
    int trees;             /* tree: 2 when the data is split over both trees, 1 when
                              it all takes one (latency-bound sizes); else 0 */
    size_t chunkBytes;     /* the largest piece one step moves */
    int nChannels;         /* channels the call is cut into */
    double predictedUs;    /* the model's time for the call, in microseconds */
} loomTuningInfo_t;
loomResult_t loomTuningGet(const char *collective, const char *algorithm, int nranks, size_t bytes,
                           loomTuningInfo_t *info);
/*
 * The same for nranks ranks on nhosts hosts (1..nranks; as many ranks on each
 * as can be, each host with as many CPUs as this one), the hosts joined by the
 * network: links between hosts priced with the network's costs, single
 * copies only on one host. loomTuningGet is nhosts = 1.
 */
loomResult_t loomTuningGetHosts(const char *collective, const char *algorithm, int nranks,
                                int nhosts, size_t bytes, loomTuningInfo_t *info);
/*
 * Asks a rank of a running job, on any host, for its flight recorder
 * (loom-info --status HOST:PORT). `address` ("host:port", "[v6]:port") is a
 * rank's status listener, as loom-info --status PID prints them; `secret`
 * is the job's, as 64 hex digits (loom-info --status PID prints it) or the
 * job's unique id in 256 (LOOM_UNIQUE_ID as loomrun sets it); with
 * LOOM_NET_TLS=1 the query goes through TLS like every connection between
 * hosts. Waits at most timeoutMs. On loomSuccess *reply (free it with free)
 * holds *bytes bytes: the recorder as JSON, in the layout of the files
 * LOOM_DUMP_DIR holds. loomRemoteError when nothing listens there or the rank
 * refused (another secret, or LOOM_NET_TLS differs), loomTimeout when it did
 * not answer, loomInvalidArgument for a malformed address or secret.
 */
loomResult_t loomStatusQuery(const char *address, const char *secret, int timeoutMs, void **reply,
                             size_t *bytes);

#ifdef __cplusplus
}
#endif

#endif /* LOOM_H_ */
