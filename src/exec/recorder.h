/*
 * recorder.h — the flight recorder: what each rank of a communicator did
 * last, readable by other processes of the host while the rank runs, and
 * written to a file when it fails.
 *
 * One format, shared by the writer (recorder.c, in every rank) and the
 * readers (recstatus.c: loom-info --status, and the table a rank that
 * times out prints). Each communicator of a process has one segment: a
 * memfd named "loom-recorder" (so nothing is ever left in /dev/shm, even
 * after a SIGKILL), mapped by the rank and kept open for as long as the
 * communicator lives. Another process of the same user finds it through
 * /proc/PID/fd (a link to "/memfd:loom-recorder (deleted)") and maps it
 * read-only. The segment is
 *
 *   struct recHeader | struct recPeer[nranks] | struct recEntry[REC_RING]
 *
 * The header says who the rank is and holds the name tables of collectives,
 * algorithms, protocols and datatypes, so a reader needs no library to turn
 * codes into words; the peer table is the communicator's (rank -> pid, host
 * and status listener), through which a reader finds the other ranks of the
 * job. The header also holds the job's secret, which a query of a status
 * listener must present (loom-info --status PID prints it): whoever can
 * map the segment can read the process's memory and environment anyway.
 *
 * Across hosts, each rank's status listener (bootstrap.h,
 * bootstrapStatusStart) answers a query with its recorder in the JSON of
 * the files LOOM_DUMP_DIR holds (recstatus.c, recWireEncode): text, so
 * hosts of any byte order read it, and no secret in it.
 */
#ifndef LOOM_RECORDER_H_
#define LOOM_RECORDER_H_

#include <stdatomic.h>
#include <stdint.h>

#define REC_MAGIC 0x314345524d4f4f4cULL /* "LOOMREC1" */
#define REC_VERSION 2
#define REC_RING 256 /* entries kept a communicator */
#define REC_MEMFD_NAME "loom-recorder"
#define REC_NAME_BYTES 24
#define REC_HOST_BYTES 64
#define REC_ADDR_BYTES 56   /* "[v6 address]:port" */
#define REC_SECRET_BYTES 32 /* BOOTSTRAP_SECRET_BYTES */
#define REC_COLLS 16
#define REC_ALGOS 8
#define REC_PROTOS 4
#define REC_TYPES 16

/* An entry's state. */
enum { REC_EMPTY = 0, REC_RUNNING = 1, REC_DONE = 2, REC_FAILED = 3 };
/* A rank's state (recHeader.state). */
enum { REC_RANK_LIVE = 0, REC_RANK_FAILED = 1, REC_RANK_DESTROYED = 2 };

struct recEntry {
    _Atomic uint64_t pos; /* k + 1 for the k-th operation of the comm; 0 while written */
    uint64_t seq;         /* collectives: their number (0, 1, ...); Send/Recv: theirs */
    uint64_t count;
    uint64_t startNs; /* CLOCK_REALTIME_COARSE (to a tick: 1-4 ms) */
    _Atomic uint64_t endNs;
    _Atomic uint64_t waitNs; /* when the wait below was last seen */
    _Atomic int64_t waitStep;
    _Atomic int32_t waitPeer; /* -1: not seen waiting */
    _Atomic int32_t state;    /* REC_RUNNING, REC_DONE, REC_FAILED */
    _Atomic int32_t result;   /* loomResult_t once it ended */
    int32_t root;             /* Broadcast/Reduce root, Send/Recv peer, else -1 */
    int8_t coll, dt, op, p2p; /* p2p: 1 for Send/Recv (their own numbering) */
    _Atomic int8_t algo;      /* -1 until the plan chose */
    _Atomic int8_t proto;
    int8_t pad[6];
};

struct recPeer {
    int32_t pid;
    int32_t pad;
    uint64_t hostHash;
    char host[REC_HOST_BYTES];
    char status[REC_ADDR_BYTES]; /* its status listener, "" if it has none */
};

struct recHeader {
    uint64_t magic;
    uint32_t version;
    uint32_t headerBytes; /* sizeof(struct recHeader): peers start there */
    uint64_t commId;      /* the same on every rank of the communicator */
    int32_t rank, nranks, pid, ring;
    uint64_t hostHash;
    char host[REC_HOST_BYTES];
    uint64_t createdNs;
    _Atomic uint64_t next; /* operations begun: the next entry's k */
    _Atomic int32_t state; /* REC_RANK_* */
    int32_t timeoutSec;
    uint8_t secret[REC_SECRET_BYTES]; /* the job's: what a status query presents */
    char collNames[REC_COLLS][REC_NAME_BYTES];
    char algoNames[REC_ALGOS][REC_NAME_BYTES];
    char protoNames[REC_PROTOS][REC_NAME_BYTES];
    char typeNames[REC_TYPES][REC_NAME_BYTES];
};

static inline uint64_t recSegmentBytes(int nranks)
{
    return sizeof(struct recHeader) + (uint64_t)nranks * sizeof(struct recPeer) +
           REC_RING * sizeof(struct recEntry);
}
static inline struct recPeer *recPeers(struct recHeader *h)
{
    return (struct recPeer *)((char *)h + h->headerBytes);
}
static inline struct recEntry *recRing(struct recHeader *h)
{
    return (struct recEntry *)((char *)recPeers(h) + (uint64_t)h->nranks * sizeof(struct recPeer));
}

/* ---- the writer (recorder.c), on the rank's own communicator ---- */
struct loomComm;
struct loomOp;
/*
 * Makes comm's segment (after the peer table is gathered); id names the
 * communicator. Best effort: without one (no memfd, no descriptor left) the
 * rank runs unrecorded, with an INFO line saying why.
 */
void recorderInit(struct loomComm *comm, const void *id, unsigned idBytes);
/* Unmaps and closes it (destroy, abort, a failed init). */
void recorderFree(struct loomComm *comm);
/* An operation begins: its entry, running; op->recPos says where it is. */
void recorderBegin(struct loomOp *op);
/* What the plan chose for op. */
void recorderChose(const struct loomOp *op, int algo, int proto);
/* The wait of comm's newest running operation: for `peer` at `step`. */
void recorderWaiting(struct loomComm *comm, int peer, int64_t step);
/* op ended with res. */
void recorderEnd(const struct loomOp *op, int res);
/*
 * comm failed with res: its running entries end failed, and then, once per
 * communicator, LOOM_DUMP_DIR gets its file and, when `printTable` (this
 * rank found the timeout itself), the job's status table goes to the log.
 */
void recorderFailed(struct loomComm *comm, int res, int printTable);

#endif /* LOOM_RECORDER_H_ */
