/*
 * bootint.h — what the bootstrap's files share and nobody else sees: the
 * bootstrap's state, the gathering of hellos at a listening socket
 * (bootgather.c), the root thread's trouble notes (bootroot.c), and the
 * helpers the join, the ring and the shrink have in common (bootstrap.c).
 */
#ifndef LOOM_BOOTINT_H_
#define LOOM_BOOTINT_H_

#include <poll.h>
#include <stdatomic.h>

#include "bootstrap.h"
#include "bootwire.h"
#include "socket.h"
#include "tls.h"

/* A connection gets this long to deliver its whole hello; strangers cost no more. */
#define HELLO_TIMEOUT_SEC 5
/* Connections waiting for their hello at once; beyond this the oldest is dropped. */
#define MAX_PENDING 128
/* Out of descriptors, a connection silent this long gives its place to a new one. */
#define SHED_GRACE_MS 200
/* The root gives each rank this long to take its address table. */
#define TABLE_SEND_TIMEOUT_SEC 10
/* How often the root checks that ranks that said hello are still there. */
#define ROOT_WATCH_MS 100
#define STR_(x) #x
#define STR(x) STR_(x)
/* "rank 12345 ([v6]:port)" */
#define LABEL_LEN (SOCKET_ADDR_STRLEN + 24)

struct loomBootstrap {
    int rank;
    int nranks;
    int timeoutSec;
    atomic_int *abortFlag;
    int listenFd;
    int nextFd;       /* to (rank + 1) % nranks */
    int prevFd;       /* from (rank - 1 + nranks) % nranks */
    uint32_t seq;     /* bootstrap collectives done so far, stamped on ring frames */
    uint32_t shrinks; /* bootstrapShrink calls so far: the ranks must agree on it too */
    union socketAddress listenAddr;
    struct bootstrapAddr *peers; /* every rank's listen address */
    uint8_t secret[BOOTSTRAP_SECRET_BYTES];
    char nextLabel[LABEL_LEN];
    char prevLabel[LABEL_LEN];
    struct bootMsg *inbox;      /* point-to-point messages taken but not yet asked for */
    struct helloGather *gather; /* point-to-point connections still saying hello */
    char owner[32];
};

/* A point-to-point message that arrived before bootstrapRecv asked for it. */
struct bootMsg {
    struct bootMsg *next;
    int from;
    uint32_t tag;
    size_t bytes;
    uint8_t data[];
};

/* ---- accepting hellos from many connections at once (bootgather.c) ---- */

struct helloConn {
    int fd;
    size_t got;
    uint64_t deadline;
    union socketAddress peer;
    uint8_t buf[BOOTSTRAP_HELLO_BYTES];
};

/*
 * Judges a hello that carries the right secret: returns NULL if it took
 * ownership of fd, else why the connection is dropped.
 */
typedef const char *(*helloTakeFn)(void *ctx, const struct bootstrapHello *h, int fd,
                                   const union socketAddress *peer);

struct helloGather {
    int listenFd;
    const uint8_t *secret;
    const char *owner;    /* "root" or "rank 3", for log lines */
    const char *rootName; /* the root's address, NULL for a rank */
    helloTakeFn take;
    void *ctx;
    int nconns;
    struct helloConn conns[MAX_PENDING];
    struct pollfd pfds[MAX_PENDING + 1];
};

/* A gather at the root's or a rank's listening socket (ctx is take's); NULL when out of memory. */
struct helloGather *gatherOpen(const struct loomBootstrap *b, const char *owner, helloTakeFn take,
                               void *ctx);
/* The same at another listening socket, with its own secret (the grow meeting's). */
struct helloGather *gatherOpenAt(int listenFd, const uint8_t *secret, const char *owner,
                                 helloTakeFn take, void *ctx);
/* Accepts, reads and judges hellos for at most maxMs. */
void gatherRound(struct helloGather *g, int maxMs);
/* Closes every connection still saying hello. */
void gatherCloseAll(struct helloGather *g);

/* ---- the root thread's trouble notes (bootroot.c) ---- */

#define BOOT_TROUBLE_BYTES 192
/* Writes down (and logs) what went wrong in the root thread at rootName, for rootTroubleQuote. */
void rootTrouble(const char *rootName, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* "; the root ... reported: <what>" if the root at rootName is in this process and had trouble. */
void rootTroubleQuote(const char *rootName, char *buf, size_t len);

/* ---- shared by joining, the ring, messages and the shrink (bootstrap.c) ---- */

/*
 * The verdict a meeting (shrink, grow) sends every rank that came:
 * magic(4) result(4) unique id(128; zeros unless loomSuccess) text(320, NUL-padded).
 */
#define BOOT_VERDICT_TEXT_BYTES 320
#define BOOT_VERDICT_BYTES (8 + LOOM_UNIQUE_ID_BYTES + BOOT_VERDICT_TEXT_BYTES)
/* Sends it; a rank that went away misses its verdict, the others still get theirs. */
void verdictSend(int fd, uint32_t magic, loomResult_t res, const loomUniqueId *id,
                 const char *text);
/* The text of a verdict received whole (*res, and *id on loomSuccess), or NULL if malformed. */
const char *verdictRead(uint8_t *buf, uint32_t magic, loomResult_t *res, loomUniqueId *id);
/* "rank r (address)", for messages. */
void peerLabel(const struct loomBootstrap *b, int r, char *buf, size_t len);
/* This rank's hello (secret, rank, nranks, listen address), encoded into buf. */
loomResult_t helloMake(const struct loomBootstrap *b, uint8_t *buf);

#endif /* LOOM_BOOTINT_H_ */
