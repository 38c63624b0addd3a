/*
 * net.h — the network transport's connections and the backends that move them.
 *
 * net.c owns what every backend shares: the connector memory, the choice of
 * backend for each peer pair, the proxy thread and the bookkeeping of the
 * FIFO counters. A backend (net_socket.c: TCP; net_ib.c: InfiniBand verbs)
 * only establishes its connections and moves messages:
 *
 *   send connection (this rank -> peer)      recv connection (peer -> this rank)
 *   executor: slot, bytes[], tail++          backend: slot, bytes[], tail = done
 *   backend: ship messages posted..tail      executor: reads, head++
 *            head = done when they left      backend: receives while space (head + STEPS)
 *
 * A message is at most one slot; message k uses slot k % LOOM_STEPS on both
 * ends, so both ends agree on where it lives without saying so.
 */
#ifndef LOOM_NET_H_
#define LOOM_NET_H_

#include <stdint.h>

#include "core.h"

/*
 * A failure notice between hosts (see exec.c): a rank that stopped on an
 * error tells its peers on other hosts, whose proxies post it on their
 * doorbells. Wire form, integers big-endian:
 *
 *   "LMNF"(4) code(4) from rank(4) length(4) text(length, < LOOM_NOTICE_BYTES)
 */
#define NET_NOTICE_HEADER_BYTES 16
#define NET_NOTICE_MAX_BYTES (NET_NOTICE_HEADER_BYTES + LOOM_NOTICE_BYTES)
struct netNotice {
    int32_t code;
    int32_t from;
    char text[LOOM_NOTICE_BYTES];
};

/* One direction of one (peer, channel) link, as the proxy sees it. */
struct netConn {
    int peer;
    int channel;
    int isSend;
    struct loomFifo *fifo; /* the executor's end of the FIFO, in this process */
    char *slots;           /* LOOM_STEPS slots of slotBytes */
    size_t slotBytes;
    uint64_t posted; /* send: messages handed to the wire; recv: receives started */
    uint64_t done;   /* messages finished (send: left this process; recv: landed) */
    int lost;        /* the connection ended; nothing moves on it any more */
    int sendsRef;    /* send: the backend takes LOOM_FIFO_REF messages (set at connect; unref) */
    char why[160];   /* why it ended, set by the backend with loomRemoteError */
    /* A failure notice the backend received from the peer (send connections), for net.c. */
    int noticeIn;
    struct netNotice notice;
    void *priv;  /* the backend's per-connection state */
    void *owner; /* net.c's state */
};

struct loomProxy;

/* What a backend publishes of this rank in the transport's init info. */
#define NET_PUBLIC_BYTES 120

struct netBackend {
    const char *name; /* "socket", "ib" */
    /*
     * A backend connects pair by pair, when the core connects the pair
     * (transport.h): init builds this rank's state in *state (set even on
     * failure, for teardown) and may fill pub (NET_PUBLIC_BYTES), which
     * every peer gets at init. connectStart starts the connections to one
     * peer (conns: its send and recv connections, every channel; peerPub:
     * what the peer published) without waiting for the peer, and fills
     * record (recordBytes(comm), or nothing where NULL), which the core
     * carries to the peer; connectFinish, given the peer's record, waits at
     * most the timeout until the peer's side has come. None is collective.
     */
    loomResult_t (*init)(struct loomComm *comm, void **state, void *pub);
    size_t (*recordBytes)(const struct loomComm *comm);
    loomResult_t (*connectStart)(void *state, struct netConn **conns, int nconns,
                                 const void *peerPub, void *record);
    loomResult_t (*connectFinish)(void *state, struct netConn **conns, int nconns,
                                  const void *record);
    /*
     * Moves what can move on c without blocking, advancing c->posted and
     * c->done; *moved is set to 1 if anything did. loomRemoteError when the
     * connection ended (the caller marks it lost), with the reason in c->why
     * and nothing recorded: a peer closing at the end of the job is normal.
     * Called with net.c's lock held, by the proxy or by an executor.
     */
    loomResult_t (*progress)(void *state, struct netConn *c, int *moved);
    /* Before the proxy sleeps (lock held): 0 to sleep, -1 when it must look again at once. */
    int (*beforeSleep)(void *state);
    /*
     * Once the proxy runs, and again after each connect (lock held, as the
     * proxy may be moving connections published before): the backend has it
     * watch the descriptors it does not watch yet (proxyWatch) and, the
     * first time, starts what rings its doorbell. Failures are reported and
     * recovered from inside (nothing returned).
     */
    void (*attach)(void *state, struct loomProxy *proxy);
    /* Releases the state and closes its connections (NULL is a no-op). */
    void (*teardown)(void *state);
    /*
     * Optional, both or neither (NULL: notices do not travel on this
     * backend). notify queues the encoded notice `msg` on c, a recv
     * connection, to travel against its data to the peer, and sends what
     * goes without blocking; progress sends the rest. pollNotice reads, without
     * blocking, what arrived that way on c, a send connection, and sets
     * c->noticeIn and c->notice once a whole notice is in. Lock held.
     */
    void (*notify)(void *state, struct netConn *c, const uint8_t *msg, size_t len);
    void (*pollNotice)(void *state, struct netConn *c);
    /*
     * Optional (NULL: executors never block on this backend's links): the
     * descriptor an executor waiting for c to move may block on in poll(),
     * with *events (POLLIN, POLLOUT), when everything c waits for arrives
     * through it and its readiness says so; -1 when not. Lock held.
     */
    int (*waitFd)(void *state, struct netConn *c, short *events);
    /*
     * Optional, for the send connections it sets sendsRef on at connect: a
     * message whose size word is flagged LOOM_FIFO_REF (fifo.h) is sent from
     * the address its slot holds, not from the slot. unref copies what is
     * not yet sent of each such message of c into its slot, and the rest
     * goes from there; once it returns no thread of the backend (helpers
     * included, which work without the lock) reads those addresses. Lock held.
     */
    void (*unref)(void *state, struct netConn *c);
};

extern const struct netBackend netSocketBackend;
#ifdef HAVE_VERBS
extern const struct netBackend netIbBackend;
/* 1 if an InfiniBand device and port pass LOOM_IB_HCA and are active; else *why says why. */
int netIbUsable(const char **why);
/* Every RDMA device's ports and GIDs as text, the port and GID Loom takes marked (loom-info). */
const char *netIbDescribe(void);
#endif

/* ---- the FIFO bookkeeping both backends follow (pure; unit-tested) ---- */

/* Messages a send connection may hand over now: written by the executor, and credited. */
uint64_t netSendable(uint64_t posted, uint64_t tail, uint64_t credit);
/* Receives a recv connection may start now: slots the executor has freed. */
uint64_t netReceivable(uint64_t posted, uint64_t head);
/*
 * The 64-bit counter nearest above `last` whose low 32 bits are `low` (a
 * counter sent in 32 bits, e.g. an InfiniBand immediate), given that it
 * moved forward less than 2^31 since `last`.
 */
uint64_t netCounterExpand(uint64_t last, uint32_t low);

/*
 * How a message of `bytes` is cut over `nsocks` sockets: returns the number
 * of parts (1 for messages under NET_SPLIT_MIN_BYTES), and part i's offset
 * and length in *off and *len (64-byte aligned boundaries; the parts cover
 * the message exactly).
 */
#define NET_SPLIT_MIN_BYTES (64 * 1024)
int netSplit(size_t bytes, int nsocks, int part, size_t *off, size_t *len);

/* Wire header of a TCP message: its size and the low bits of its number, little-endian. */
#define NET_HEADER_BYTES 8
void netHeaderEncode(uint32_t bytes, uint32_t seq, uint8_t *out);
void netHeaderDecode(const uint8_t *in, uint32_t *bytes, uint32_t *seq);

/* Writes the notice's wire form into out (NET_NOTICE_MAX_BYTES); returns its length. */
size_t netNoticeEncode(const struct netNotice *n, uint8_t *out);
/*
 * Reads a notice from the len bytes at in: returns 0 with *n filled when they
 * hold exactly one, the number of bytes still missing when they hold its
 * beginning (len < NET_NOTICE_HEADER_BYTES: the header's), -1 when they are
 * not a notice (wrong magic, length out of range, more bytes than it).
 */
long netNoticeDecode(const uint8_t *in, size_t len, struct netNotice *n);

#endif /* LOOM_NET_H_ */
