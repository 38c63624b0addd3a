/*
 * bootstrap.h — unique id, TCP rendezvous, out-of-band allgather and barrier.
 *
 * loomGetUniqueId (bootstrapGetUniqueId) opens a listening socket, starts a
 * root thread and writes into the id the root's address and a random 32-byte
 * job secret. Each rank opens its own listening socket, connects to the root
 * and says hello (secret, rank, nranks, its listen address). When all nranks
 * have said hello the root sends each rank the table of listen addresses and
 * ends. Ranks then connect in a ring (rank r connects to r+1 and accepts
 * r-1), presenting the secret again; the ring carries allgather and barrier.
 * A connection that does not present the secret, or says anything malformed,
 * is closed and forgotten; the job goes on.
 *
 *   root thread              rank r
 *      <------ hello{secret, r, n, addr_r} ---
 *      ------- table{addr_0 .. addr_n-1} ---->
 *                             connect(addr_{r+1}), accept() from r-1
 *
 * All waits are bounded by a deadline and poll an abort flag.
 */
#ifndef LOOM_BOOTSTRAP_H_
#define LOOM_BOOTSTRAP_H_

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "loom.h"
#include "socket.h"

#define BOOTSTRAP_SECRET_BYTES 32

/* The decoded unique id. */
struct bootstrapId {
    uint8_t secret[BOOTSTRAP_SECRET_BYTES];
    struct bootstrapAddr root;
};

/* Hello a rank sends the root, and a ring neighbour. */
struct bootstrapHello {
    uint8_t secret[BOOTSTRAP_SECRET_BYTES];
    int32_t rank;
    int32_t nranks;
    struct bootstrapAddr addr;
};

struct loomBootstrap; /* opaque: one rank's state in one communicator */

/* Starts a root thread for one communicator and fills *id. */
loomResult_t bootstrapGetUniqueId(loomUniqueId *id);
/*
 * The id of a job whose rendezvous is at a fixed address, LOOM_ROOT_ADDR
 * ("host:port", "[v6]:port"): every rank derives the same id from the
 * address and `job` (the launcher's job id, or ""), and the rank with
 * startRoot also starts the root thread listening there. The secret is
 * derived, not random: it tells jobs apart, it does not keep anyone out.
 * Returns loomInvalidArgument for an address that does not parse or
 * resolve, loomSystemError when the root cannot listen there.
 */
loomResult_t bootstrapRootAddrId(const char *rootAddr, const char *job, int startRoot,
                                 loomUniqueId *id);

/*
 * Joins the communicator described by id as `rank` of `nranks`. Returns
 * loomTimeout if the others do not all arrive within timeoutSec seconds,
 * loomRemoteError if *abortFlag becomes non-zero. On success *out is a ring
 * ready for bootstrapAllGather.
 */
loomResult_t bootstrapInit(const loomUniqueId *id, int rank, int nranks, int timeoutSec,
                           atomic_int *abortFlag, struct loomBootstrap **out);
/*
 * data holds nranks blocks of `bytes` each; this rank's block (at
 * rank * bytes) is filled on entry; on return every block is filled.
 * Collective over the communicator.
 */
loomResult_t bootstrapAllGather(struct loomBootstrap *b, void *data, size_t bytes);
/* Returns when every rank has entered the barrier. */
loomResult_t bootstrapBarrier(struct loomBootstrap *b);
/*
 * The rendezvous of loomCommShrink: the ranks not in `exclude` (sorted,
 * without duplicates) meet at the listening socket of the lowest of them,
 * which every rank has known since init, so it needs neither the ring (a
 * death breaks it) nor the id's root (which may be the dead rank). That
 * rank checks that everyone passed the same list and attempt, and hands each
 * a fresh unique id for the new communicator (its own process runs the id's
 * root thread). gone(ctx, r) says whether the communicator knows rank r to
 * have failed: a rank that fails before it arrives ends the wait at once.
 * Returns loomSuccess with *newId; else, on every rank that arrived,
 * loomInvalidUsage for different lists, loomRemoteError for a rank that
 * failed or left, loomTimeout for one that did not come within the timeout
 * (each naming the rank). Never reads the abort flag: the caller may have
 * aborted the communicator's operations to get here.
 */
struct bootstrapShrink {
    const int *exclude;
    int nexclude;
    int (*gone)(void *ctx, int rank);
    void *goneCtx;
};
loomResult_t bootstrapShrink(struct loomBootstrap *b, const struct bootstrapShrink *s,
                             loomUniqueId *newId);
/*
 * The meeting of loomCommGrow (bootgrow.c). bootstrapGrowOpen, for
 * loomCommGetUniqueId, listens on a port of its own with a fresh secret and
 * writes a grow id holding both; nothing serves the port until the
 * coordinator (the rank that made the id) calls bootstrapGrowHost, where the
 * other nranks - 1 ranks (of the parent and new) come with
 * bootstrapGrowJoin. The coordinator checks that they all ask for the same
 * nranks and that each new rank has a number of its own in oldRanks ..
 * nranks - 1, and hands each a fresh unique id for the new communicator
 * (its own process runs the id's root thread); on a misuse
 * (loomInvalidUsage), a rank that fails or leaves (loomRemoteError) or one
 * that does not come within timeoutSec (loomTimeout), every rank that came
 * gets the same error line. The host call closes the port whatever the
 * outcome: a rank that comes later is refused at connect, and told why.
 */
struct bootstrapGrow; /* the coordinator's listening socket and secret */
struct bootstrapGrowReq {
    int oldRanks; /* the parent's size (the coordinator's; others may pass 0) */
    int nranks;   /* the new communicator's */
    int rank;     /* the caller's rank in it */
    int existing; /* 1 for a rank of the parent, 0 for a new rank */
    int timeoutSec;
    int (*gone)(void *ctx, int rank); /* the coordinator: parent ranks known to have failed */
    void *goneCtx;
};
loomResult_t bootstrapGrowOpen(struct bootstrapGrow **out, loomUniqueId *id);
/* 1 if id is the one g wrote. */
int bootstrapGrowOwns(const struct bootstrapGrow *g, const loomUniqueId *id);
loomResult_t bootstrapGrowHost(struct bootstrapGrow *g, const struct bootstrapGrowReq *req,
                               loomUniqueId *newId);
loomResult_t bootstrapGrowJoin(const loomUniqueId *growId, const struct bootstrapGrowReq *req,
                               loomUniqueId *newId);
/* Closes g's port and frees it (NULL is a no-op). */
void bootstrapGrowClose(struct bootstrapGrow *g);
/*
 * Point-to-point messages, for what one rank tells one peer after init (the
 * connection records of src/connect.c). bootstrapSend hands `bytes` (at most
 * BOOTSTRAP_MSG_MAX_BYTES) to `peer` under `tag` and returns without waiting
 * for the peer to receive it (the same w bounds its connection) (one message per rank, peer and
 * tag: two could arrive in either order). bootstrapRecv waits for the message from `peer` under
 * `tag`, keeping others that arrive meanwhile for later calls: loomTimeout at w->deadline,
 * loomRemoteError when w->gone(w->ctx, peer) says the peer failed or the
 * abort flag is set, each naming the peer and w->what. Only after init (the
 * ring's first collective), one thread at a time per communicator.
 */
#define BOOTSTRAP_MSG_MAX_BYTES 4096
struct bootstrapWait {
    uint64_t deadline; /* socketClockNs() */
    int (*gone)(void *ctx, int rank);
    void *ctx;
    const char *what; /* what the wait is for, for the error line */
};
loomResult_t bootstrapSend(struct loomBootstrap *b, int peer, uint32_t tag, const void *data,
                           size_t bytes, const struct bootstrapWait *w);
loomResult_t bootstrapRecv(struct loomBootstrap *b, int peer, uint32_t tag, void *data,
                           size_t bytes, const struct bootstrapWait *w);
/* Closes the ring sockets and frees b (NULL is a no-op). Not collective. */
void bootstrapClose(struct loomBootstrap *b);

/*
 * A rank's status listener (bootstatus.c): a listening socket of its own
 * and a thread that answers queries on it, so that loom-info on any host
 * can read the rank's flight recorder (loomStatusQuery). bootstrapStatusOpen
 * listens on the bootstrap's interface (LOOM_SOCKET_IFNAME) at a free port,
 * whose address it writes into *addr (NULL, with an INFO line, when it
 * cannot: the rank then runs without one). bootstrapStatusStart starts the
 * thread: a connection that presents `secret` (the job's, as every
 * connection between ranks: TLS with its key under LOOM_NET_TLS=1, then a
 * hello) gets answer(ctx)'s bytes (malloc'ed; the thread frees them), any
 * other is dropped with an INFO line. bootstrapStatusClose stops the thread
 * (at once) and closes the socket (NULL is a no-op).
 */
struct bootstrapStatus;
typedef void *(*bootstrapStatusAnswer)(void *ctx, size_t *bytes);
struct bootstrapStatus *bootstrapStatusOpen(struct bootstrapAddr *addr);
loomResult_t bootstrapStatusStart(struct bootstrapStatus *s, const uint8_t *secret,
                                  bootstrapStatusAnswer answer, void *ctx);
void bootstrapStatusClose(struct bootstrapStatus *s);
/*
 * The query: connects to the listener at addr, presents secret, and
 * returns its answer in *reply (malloc'ed) and *bytes. Bounded by deadline
 * (socketClockNs()); loomRemoteError when nothing listens there or the rank
 * refused (another secret, LOOM_NET_TLS differs), loomTimeout when it did
 * not answer in time, each with a line naming the address.
 */
loomResult_t bootstrapStatusQuery(const union socketAddress *addr, const uint8_t *secret,
                                  uint64_t deadline, void **reply, size_t *bytes);

/*
 * Coding, exposed for the unit tests and the fuzz target. Encoders write at
 * most `len` bytes and return the byte count (0 if len is too small).
 * Decoders return loomSuccess, or loomInvalidArgument for a malformed or
 * truncated buffer (never reading past len).
 */
#define BOOTSTRAP_HELLO_BYTES 64
size_t bootstrapEncodeId(const struct bootstrapId *id, loomUniqueId *out);
loomResult_t bootstrapDecodeId(const loomUniqueId *in, struct bootstrapId *id);
size_t bootstrapEncodeHello(const struct bootstrapHello *h, uint8_t *buf, size_t len);
loomResult_t bootstrapDecodeHello(const uint8_t *buf, size_t len, struct bootstrapHello *h);
/* The root's table of listen addresses: header and nranks addresses. */
size_t bootstrapTableBytes(int nranks);
size_t bootstrapEncodeTable(const struct bootstrapAddr *addrs, int nranks, uint8_t *buf,
                            size_t len);
/* len must be exactly bootstrapTableBytes(nranks); fills addrs[0 .. nranks-1]. */
loomResult_t bootstrapDecodeTable(const uint8_t *buf, size_t len, int nranks,
                                  struct bootstrapAddr *addrs);
/* The header of a ring frame: magic, collective number, block length. */
#define BOOTSTRAP_FRAME_BYTES 16
size_t bootstrapEncodeFrame(uint32_t seq, uint64_t bytes, uint8_t *buf, size_t len);
loomResult_t bootstrapDecodeFrame(const uint8_t *buf, size_t len, uint32_t *seq, uint64_t *bytes);
/* The job's secret (from the unique id) that b presents: the root of the TLS key (tls.h). */
const uint8_t *bootstrapSecret(const struct loomBootstrap *b);
/* Constant-time comparison of two secrets: 1 if equal. */
int bootstrapSecretEqual(const uint8_t *a, const uint8_t *b);

#endif /* LOOM_BOOTSTRAP_H_ */
