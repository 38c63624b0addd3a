/*
 * net_socket.h — what the TCP backend's files share (net_socket.c: connections, the single-rail
 * protocol, helper threads; net_rails.c: the protocol of a connection striped over several rails,
 * which survives the failure of all but one). Private to transports/.
 */
#ifndef LOOM_NET_SOCKET_H_
#define LOOM_NET_SOCKET_H_

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#include "bell.h"
#include "bootstrap.h"
#include "net.h"
#include "socket.h"

#define SOCK_MAX 16
#define SOCK_RAILS_MAX 4 /* interfaces a rank stripes over (what its public info holds) */
#define SOCK_QUEUE 16    /* transfers a socket holds: > LOOM_STEPS, a power of two */
#define SOCK_NONCE_BYTES BOOTSTRAP_SECRET_BYTES
#define SOCK_HELLO_BYTES (4 + SOCK_NONCE_BYTES + 12)
#define SOCK_HELLO_SEC 5
#define SOCK_HELPER_SLEEP_MS 100
#define SOCK_HELPER_YIELD_NS (200 * 1000ULL)
/* What one TCP flow moves a direction on one core, rounded (measured with iperf3 between
 * namespace hosts: docs/performance.md, "Figures from the code's comments").
 * LOOM_SOCKET_NSOCKS=0 gives a connection a socket per this much of its link's speed. */
#define SOCK_FLOW_MBIT 10000
#define SOCK_AUTO_MIN 2 /* one flow fills a shaped link less well than two (bench/net-rails) */
#define SOCK_AUTO_MAX 8

_Static_assert(SOCK_QUEUE > LOOM_STEPS && (SOCK_QUEUE & (SOCK_QUEUE - 1)) == 0,
               "a socket queue holds every message a FIFO can have in flight");

/* Link errors (besides errno values). */
#define SOCK_ERR_EOF (-1)
#define SOCK_ERR_FRAME (-2)

struct sockConn;

/* One transfer on one socket: an optional header, then data. */
struct sockOp {
    uint8_t *hdr; /* NET_HEADER_BYTES, or NULL */
    char *data;
    size_t len;   /* data bytes; for a receive with a header, set once the header is in */
    size_t done;  /* bytes moved, header included */
    uint64_t msg; /* message number */
    int slot;
};

struct sockLink {
    int fd;
    int watched; /* the proxy watches fd */
    int index;   /* 0 .. nsocks-1 */
    int helper;  /* helper thread that moves it, -1: the proxy */
    int shared;  /* fd belongs to the twin connection's link 0 (duplex): not closed, not watched */
    struct sockConn *conn;
    _Atomic uint32_t qHead; /* transfers finished (consumer) */
    _Atomic uint32_t qTail; /* transfers posted (producer: the proxy) */
    atomic_int err;
    /* A helper's link: held by the helper while it moves the link, and by sockUnref. */
    pthread_mutex_t mu;
    struct sockOp q[SOCK_QUEUE];
};

/* One message in flight, by slot. */
struct sockMsg {
    uint8_t hdr[NET_HEADER_BYTES];
    uint32_t bytes;
    int parts; /* 0 while a receive's header is not in */
    atomic_int partsDone;
};

struct sockConn {
    struct netConn *nc;
    int nsocks;
    int nrails; /* socket s runs over rail s % nrails on both ends */
    int connected;
    /*
     * The other direction of the same peer and channel when socket 0 is one TCP connection for
     * both (duplex: one rail, no TLS); NULL otherwise.
     */
    struct sockConn *twin;
    /* A failure notice (noticeLink): out on a recv connection, in on a send one. */
    uint8_t notice[NET_NOTICE_MAX_BYTES];
    size_t noticeLen;  /* out: bytes queued */
    size_t noticeDone; /* out: bytes sent; in: bytes received */
    int noticeOver;    /* in: the socket ended or sent something else; stop reading it */
    struct sockLink links[SOCK_MAX];
    struct sockMsg msgs[LOOM_STEPS];
    struct railConn *rails; /* over several rails: net_rails.c moves it; NULL: one rail */
};

struct sockHelper {
    struct loomDoorbell bell;
    struct sockState *st;
    pthread_t thread;
    int started;
    atomic_int stop;
    struct sockLink **links;
    int nlinks;
    struct pollfd *fds;
};

/* What each rank publishes. */
struct sockPublic {
    uint8_t nonce[SOCK_NONCE_BYTES];
    int32_t nsocks;
    int32_t nrails;
    struct bootstrapAddr addr[SOCK_RAILS_MAX]; /* one listening address a rail */
};

/* A connection accepted before this rank started to connect its peer (kept for connectStart). */
struct sockEarly {
    int fd, rank, channel, sock, nsocks;
};

struct sockState {
    struct loomComm *comm;
    int listenFd[SOCK_RAILS_MAX];
    struct socketRail rails[SOCK_RAILS_MAX]; /* this rank's interfaces, port 0 */
    struct sockPublic me;
    struct sockConn **conns; /* [cap]: the connections started so far */
    int nconns, cap;
    struct sockConn **recvIndex; /* [nranks * nChannels]: recv connection from (peer, channel) */
    struct sockEarly *early;
    int nearly, capEarly;
    int helpersPlanned, helpersStarted;
    int nthreads; /* helper threads wanted: LOOM_SOCKET_NTHREADS, or chosen (sockChoose) */
    struct loomProxy *proxy; /* once attached */
    struct sockHelper *helpers;
    int nhelpers;
    struct loomDoorbell *proxyBell;
    /* net_rails.c: the rails whose interface is down (bit r), looked at every RAILS_CHECK_NS */
    uint32_t railsDown;
    uint32_t railsWarned; /* rails a failure was reported for */
    uint64_t railsCheckNs;
    /* Sends from the caller's memory (LOOM_FIFO_REF), and the bytes sockUnref copied back. */
    uint64_t refMsgs, refBytes, unrefBytes;
};

struct railConn;

/* net_rails.c: a connection over several rails (sc->rails set). */
loomResult_t railsCreate(struct sockConn *sc);
loomResult_t railsProgress(struct sockState *st, struct sockConn *sc, int *moved);
void railsNotify(struct sockConn *sc, const uint8_t *msg, size_t len);
void railsPollNotice(struct sockState *st, struct sockConn *sc);
void railsFree(struct sockConn *sc);

#endif /* LOOM_NET_SOCKET_H_ */
