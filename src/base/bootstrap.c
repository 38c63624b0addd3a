/*
 * bootstrap.c — unique id, rendezvous at a root thread, and the socket ring
 * that carries out-of-band allgather and barrier (see bootstrap.h).
 *
 * Trust rests on the 32-byte secret in the unique id: whoever can read the id
 * is part of the job, anyone else who finds the port is a stranger. Strangers
 * must not be able to stall a job, so nobody ever waits on one connection:
 * the root (and each rank, when it waits for its ring predecessor) polls all
 * pending connections at once, gives each at most HELLO_TIMEOUT_SEC to
 * deliver a full hello, and closes anything malformed, silent, or without
 * the secret. Only the first valid hello is believed about nranks.
 *
 * The messages' wire formats and their coding are in bootwire.c.
 *
 * Allgather on the ring: in step s (0 .. n-2) rank r sends block (r - s) to
 * its successor and receives block (r - s - 1) from its predecessor, both at
 * once on non-blocking sockets, so any block size goes through without the
 * two sends of a pair of ranks waiting on each other.
 */
#include "bootstrap.h"

#include <errno.h>
#include <netdb.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include "bootwire.h"
#include "debug.h"
#include "param.h"
#include "socket.h"
#include "wire.h"

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

/* ---- resource trouble of the root threads of this process ---- */

/*
 * A root thread that runs out of memory or descriptors can only close the
 * rank's connection, and the rank would blame the id or its peers. So the
 * root also writes down what happened, under its address, and a rank of the
 * same process (rank 0 often made the id) quotes it in its own error line.
 */
static pthread_mutex_t troubleLock = PTHREAD_MUTEX_INITIALIZER;
static char troubleRoot[SOCKET_ADDR_STRLEN];
static char troubleText[192];

static void rootTrouble(const char *rootName, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static void rootTrouble(const char *rootName, const char *fmt, ...)
{
    va_list ap;
    pthread_mutex_lock(&troubleLock);
    snprintf(troubleRoot, sizeof(troubleRoot), "%s", rootName);
    va_start(ap, fmt);
    vsnprintf(troubleText, sizeof(troubleText), fmt, ap);
    va_end(ap);
    WARN("bootstrap root at %s: %s", rootName, troubleText);
    pthread_mutex_unlock(&troubleLock);
}

/* "; the root ... reported: <what>" if the root at rootName is in this process and had trouble. */
static void rootTroubleQuote(const char *rootName, char *buf, size_t len)
{
    pthread_mutex_lock(&troubleLock);
    if (troubleText[0] && strcmp(troubleRoot, rootName) == 0)
        snprintf(buf, len, "; the root thread (in this process) reported: %s", troubleText);
    else
        buf[0] = '\0';
    pthread_mutex_unlock(&troubleLock);
}

/* ---- accepting hellos from many connections at once ---- */

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

static void gatherDrop(struct helloGather *g, struct helloConn *c, const char *why)
{
    char peer[SOCKET_ADDR_STRLEN];
    socketAddrFormat(&c->peer, peer, sizeof(peer));
    INFO(LOOM_BOOTSTRAP, "bootstrap %s: dropped the connection from %s: %s", g->owner, peer, why);
    socketClose(c->fd);
    c->fd = -1;
}

/* Removes the connections that were dropped or taken, keeping the oldest first. */
static void gatherCompact(struct helloGather *g)
{
    int kept = 0;
    for (int i = 0; i < g->nconns; i++) {
        if (g->conns[i].fd >= 0)
            g->conns[kept++] = g->conns[i];
    }
    g->nconns = kept;
}

static void gatherJudge(struct helloGather *g, struct helloConn *c)
{
    struct bootstrapHello h;
    char why[160];

    if (bootstrapDecodeHello(c->buf, sizeof(c->buf), &h) != loomSuccess) {
        gatherDrop(g, c, "malformed hello");
        return;
    }
    if (!bootstrapSecretEqual(h.secret, g->secret)) {
        gatherDrop(g, c, "wrong secret (a stranger, or a rank holding another job's id)");
        return;
    }
    const char *refused = g->take(g->ctx, &h, c->fd, &c->peer);
    if (refused == NULL) {
        c->fd = -1; /* owned by the taker now */
        return;
    }
    snprintf(why, sizeof(why), "hello of rank %d of %d refused: %s", (int)h.rank, (int)h.nranks,
             refused);
    gatherDrop(g, c, why);
}

static void gatherRead(struct helloGather *g, struct helloConn *c)
{
    /* Read no further than the hello: whatever follows it belongs to the taker. */
    if (socketTryRecv(c->fd, c->buf, sizeof(c->buf), &c->got) != loomSuccess) {
        gatherDrop(g, c, errno == 0 ? "closed before a whole hello" : strerror(errno));
        return;
    }
    if (c->got == sizeof(c->buf))
        gatherJudge(g, c);
}

/* The oldest pending connection if it has been silent long enough to give up its place. */
static struct helloConn *gatherShedVictim(struct helloGather *g)
{
    if (g->nconns == 0)
        return NULL;
    uint64_t start = g->conns[0].deadline - (uint64_t)HELLO_TIMEOUT_SEC * 1000000000ull;
    return socketClockNs() - start >= SHED_GRACE_MS * 1000000ull ? &g->conns[0] : NULL;
}

/*
 * Accepts what is pending. Returns 0, or -1 if accept() fails and nothing can
 * be shed. accept() fails for want of a descriptor even when nothing is
 * pending, so only the first try of a round (made because poll saw a
 * connection) means that someone is kept waiting.
 */
static int gatherAccept(struct helloGather *g)
{
    for (int i = 0; i < MAX_PENDING; i++) {
        union socketAddress peer;
        int fd;
        if (socketTryAccept(g->listenFd, &fd, &peer) != loomSuccess) {
            int err = errno;
            if (i > 0)
                return 0;
            /* Out of descriptors, most likely: the oldest silent connection makes room. */
            struct helloConn *victim = gatherShedVictim(g);
            if (victim != NULL) {
                gatherDrop(g, victim, "dropped to make room (accept failed)");
                gatherCompact(g);
                return 0;
            }
            if (g->nconns == 0 && g->rootName && (err == EMFILE || err == ENFILE || err == ENOMEM))
                rootTrouble(g->rootName, "cannot accept connections: %s", debugErrnoText(err));
            else
                INFO(LOOM_BOOTSTRAP, "bootstrap %s: accept: %s", g->owner, strerror(err));
            return -1;
        }
        if (fd < 0)
            return 0;
        if (g->nconns == MAX_PENDING) {
            gatherDrop(g, &g->conns[0], "too many connections without a hello; oldest dropped");
            gatherCompact(g);
        }
        struct helloConn *c = &g->conns[g->nconns++];
        c->fd = fd;
        c->got = 0;
        c->peer = peer;
        c->deadline = socketDeadline(HELLO_TIMEOUT_SEC);
        gatherRead(g, c); /* the hello usually arrives with the connection */
        gatherCompact(g);
    }
    return 0;
}

/* Waits up to maxMs for connections or hello bytes and handles what came. */
static void gatherRound(struct helloGather *g, int maxMs)
{
    uint64_t now = socketClockNs();
    int ms = maxMs;

    g->pfds[0] = (struct pollfd){.fd = g->listenFd, .events = POLLIN};
    for (int i = 0; i < g->nconns; i++) {
        g->pfds[i + 1] = (struct pollfd){.fd = g->conns[i].fd, .events = POLLIN};
        int left = socketPollMs(g->conns[i].deadline);
        if (left < ms)
            ms = left;
    }
    int n = poll(g->pfds, (nfds_t)g->nconns + 1, ms);
    if (n > 0) {
        for (int i = 0; i < g->nconns; i++) {
            if (g->pfds[i + 1].revents != 0)
                gatherRead(g, &g->conns[i]);
        }
        gatherCompact(g);
        if (g->pfds[0].revents != 0 && gatherAccept(g) != 0)
            poll(NULL, 0, maxMs); /* accept keeps failing: do not spin on it */
    }
    now = socketClockNs();
    for (int i = 0; i < g->nconns; i++) {
        if (g->conns[i].deadline <= now)
            gatherDrop(g, &g->conns[i], "no whole hello within " STR(HELLO_TIMEOUT_SEC) " s");
    }
    gatherCompact(g);
}

static void gatherCloseAll(struct helloGather *g)
{
    for (int i = 0; i < g->nconns; i++)
        socketClose(g->conns[i].fd);
    g->nconns = 0;
}

/* ---- the root thread ---- */

struct rootRank {
    int fd; /* -1 until this rank has said hello */
    struct bootstrapAddr addr;
    union socketAddress peer;
};

struct bootstrapRoot {
    int listenFd;
    uint8_t secret[BOOTSTRAP_SECRET_BYTES];
    char name[SOCKET_ADDR_STRLEN]; /* the root's address, for log lines */
    int timeoutSec;
    uint64_t deadline;
    int nranks; /* 0 until the first valid hello says */
    int joined;
    struct rootRank *ranks;
    struct pollfd *watch;
    /* Allocated with the root, before the id is handed out: a root thread that could not
     * gather would leave every joiner retrying a closed port until its timeout. */
    struct helloGather gather;
};

static void rootForgetRanks(struct bootstrapRoot *root)
{
    for (int r = 0; r < root->nranks; r++)
        socketClose(root->ranks[r].fd);
    free(root->ranks);
    free(root->watch);
    root->ranks = NULL;
    root->watch = NULL;
    root->nranks = 0;
    root->joined = 0;
}

static const char *rootTake(void *ctx, const struct bootstrapHello *h, int fd,
                            const union socketAddress *peer)
{
    struct bootstrapRoot *root = ctx;

    if (root->nranks == 0) {
        root->ranks = calloc((size_t)h->nranks, sizeof(*root->ranks));
        root->watch = calloc((size_t)h->nranks, sizeof(*root->watch));
        if (root->ranks == NULL || root->watch == NULL) {
            free(root->ranks);
            free(root->watch);
            root->ranks = NULL;
            root->watch = NULL;
            rootTrouble(root->name, "out of memory for the table of %d ranks", h->nranks);
            return "out of memory for the rank table";
        }
        for (int r = 0; r < h->nranks; r++)
            root->ranks[r].fd = -1;
        root->nranks = h->nranks;
    } else if (h->nranks != root->nranks) {
        return "nranks differs from that of the ranks already joined";
    }
    struct rootRank *slot = &root->ranks[h->rank];
    if (slot->fd >= 0)
        return "that rank has already joined";
    slot->fd = fd;
    slot->addr = h->addr;
    slot->peer = *peer;
    root->joined++;
    TRACE(LOOM_BOOTSTRAP, "bootstrap root at %s: rank %d of %d joined (%d so far)", root->name,
          (int)h->rank, root->nranks, root->joined);
    return NULL;
}

/*
 * A rank sends nothing after its hello, so any event on its connection means
 * it went away (or misbehaves): free its slot so that a restarted rank can
 * take it, and forget nranks if nobody is left.
 */
static void rootWatch(struct bootstrapRoot *root)
{
    int n = 0;
    for (int r = 0; r < root->nranks; r++) {
        if (root->ranks[r].fd >= 0)
            root->watch[n++] = (struct pollfd){.fd = root->ranks[r].fd, .events = POLLIN};
    }
    if (n == 0 || poll(root->watch, (nfds_t)n, 0) <= 0)
        return;
    for (int i = 0; i < n; i++) {
        if (root->watch[i].revents == 0)
            continue;
        for (int r = 0; r < root->nranks; r++) {
            if (root->ranks[r].fd == root->watch[i].fd) {
                INFO(LOOM_BOOTSTRAP,
                     "bootstrap root at %s: rank %d left before the table was "
                     "sent; its place is free again",
                     root->name, r);
                socketClose(root->ranks[r].fd);
                root->ranks[r].fd = -1;
                root->joined--;
            }
        }
    }
    if (root->joined == 0)
        rootForgetRanks(root);
}

static void rootTimedOut(struct bootstrapRoot *root)
{
    char missing[256] = "";
    size_t used = 0;
    int listed = 0;

    if (root->nranks == 0) {
        WARN("bootstrap root at %s: no rank joined within %d s; giving up", root->name,
             root->timeoutSec);
        return;
    }
    for (int r = 0; r < root->nranks && used < sizeof(missing) - 16; r++) {
        if (root->ranks[r].fd >= 0)
            continue;
        int n = snprintf(missing + used, sizeof(missing) - used, "%s%d", listed ? ", " : "", r);
        used += n > 0 ? (size_t)n : 0;
        listed++;
    }
    if (listed < root->nranks - root->joined)
        snprintf(missing + used, sizeof(missing) - used, ", ...");
    WARN("bootstrap root at %s: %d of %d ranks joined within %d s (missing: %s); giving up",
         root->name, root->joined, root->nranks, root->timeoutSec, missing);
}

static void rootSendTables(struct bootstrapRoot *root)
{
    size_t len = bootstrapTableBytes(root->nranks);
    uint8_t *table = malloc(len);
    struct bootstrapAddr *addrs = calloc((size_t)root->nranks, sizeof(*addrs));

    if (table == NULL || addrs == NULL) {
        rootTrouble(root->name, "out of memory for the address table of %d ranks", root->nranks);
        free(table);
        free(addrs);
        return;
    }
    for (int r = 0; r < root->nranks; r++)
        addrs[r] = root->ranks[r].addr;
    bootstrapEncodeTable(addrs, root->nranks, table, len);
    free(addrs);
    for (int r = 0; r < root->nranks; r++) {
        /* One rank failing to take its table is that rank's error; the others go on. */
        if (socketSendAll(root->ranks[r].fd, table, len, socketDeadline(TABLE_SEND_TIMEOUT_SEC),
                          NULL, NULL) != loomSuccess) {
            char peer[SOCKET_ADDR_STRLEN];
            socketAddrFormat(&root->ranks[r].peer, peer, sizeof(peer));
            WARN("bootstrap root at %s: could not send the address table to rank %d (%s): %s",
                 root->name, r, peer, errno == 0 ? "connection closed" : strerror(errno));
        }
    }
    free(table);
    INFO(LOOM_BOOTSTRAP, "bootstrap root at %s: all %d ranks joined; address tables sent",
         root->name, root->nranks);
}

static void rootRun(struct bootstrapRoot *root)
{
    struct helloGather *g = &root->gather;
    uint64_t lastWatch = 0;

    g->listenFd = root->listenFd;
    g->secret = root->secret;
    g->owner = "root";
    g->rootName = root->name;
    g->take = rootTake;
    g->ctx = root;
    while (root->nranks == 0 || root->joined < root->nranks) {
        if (socketClockNs() >= root->deadline) {
            rootTimedOut(root);
            goto close_all;
        }
        gatherRound(g, socketPollMs(root->deadline));
        uint64_t now = socketClockNs();
        if (now - lastWatch >= ROOT_WATCH_MS * 1000000ull) {
            rootWatch(root);
            lastWatch = now;
        }
    }
    rootSendTables(root);
close_all:
    gatherCloseAll(g);
}

static void *rootMain(void *arg)
{
    struct bootstrapRoot *root = arg;

    pthread_setname_np(pthread_self(), "loom-bootstrap");
    rootRun(root);
    rootForgetRanks(root);
    socketClose(root->listenFd);
    free(root);
    return NULL;
}

/* Starts the detached root thread, which from then on owns root. */
static loomResult_t rootStart(struct bootstrapRoot *root)
{
    pthread_attr_t attr;
    pthread_t thread;
    sigset_t all, old;

    if (pthread_attr_init(&attr) != 0)
        return loomSetError(loomSystemError, "bootstrap: pthread_attr_init failed");
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    /* The application's signals are for its own threads, not for ours. */
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    int err = pthread_create(&thread, &attr, rootMain, root);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    pthread_attr_destroy(&attr);
    if (err != 0)
        return loomSetError(
            loomSystemError, "bootstrap: cannot start the root thread: %s%s", strerror(err),
            err == EAGAIN ? " (out of memory, or the limit of threads: ulimit -u)" : "");
    return loomSuccess;
}

static loomResult_t fillRandom(uint8_t *buf, size_t len)
{
    size_t got = 0;
    while (got < len) {
        ssize_t n = getrandom(buf + got, len - got, 0);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return loomSetError(loomSystemError, "bootstrap: getrandom: %s", strerror(errno));
        got += (size_t)n;
    }
    return loomSuccess;
}

/*
 * Listens at `local` (port 0: any), starts the root thread with `secret`, and
 * writes the id. With a fixed port the id is the one every rank derives
 * itself (bootstrapRootAddrId); on failure nothing is left running.
 */
static loomResult_t rootOpen(const union socketAddress *local, const uint8_t *secret,
                             loomUniqueId *id)
{
    union socketAddress bound;
    struct bootstrapId bid;
    loomUniqueId encoded;
    loomResult_t res;

    struct bootstrapRoot *root = calloc(1, sizeof(*root));
    if (root == NULL)
        return loomSetError(loomSystemError, "bootstrap: out of memory");
    res = socketListen(local, &root->listenFd, &bound);
    if (res != loomSuccess)
        goto fail_free;
    memcpy(root->secret, secret, sizeof(root->secret));
    memcpy(bid.secret, root->secret, sizeof(bid.secret));
    if (socketAddrToBootstrap(&bound, &bid.root) != loomSuccess ||
        bootstrapEncodeId(&bid, &encoded) != LOOM_UNIQUE_ID_BYTES) {
        res = loomSetError(loomInternalError, "bootstrap: cannot encode the unique id");
        goto fail_close;
    }
    socketAddrFormat(&bound, root->name, sizeof(root->name));
    int64_t timeout = paramInt(LOOM_PARAM_TIMEOUT);
    int timeoutSec = timeout < 1 ? 1 : (timeout > 1000000000 ? 1000000000 : (int)timeout);
    root->timeoutSec = timeoutSec;
    root->deadline = socketDeadline(timeoutSec);
    char name[SOCKET_ADDR_STRLEN];
    memcpy(name, root->name, sizeof(name));
    res = rootStart(root);
    if (res != loomSuccess)
        goto fail_close;
    /* root belongs to its thread now. */
    *id = encoded;
    INFO(LOOM_BOOTSTRAP, "bootstrap: root listening at %s for %d s", name, timeoutSec);
    return loomSuccess;

fail_close:
    socketClose(root->listenFd);
fail_free:
    free(root);
    return res;
}

loomResult_t bootstrapGetUniqueId(loomUniqueId *id)
{
    union socketAddress local;
    uint8_t secret[BOOTSTRAP_SECRET_BYTES];

    if (id == NULL)
        return loomSetError(loomInvalidArgument, "loomGetUniqueId: uniqueId is NULL");
    LOOMCHECK(socketFindInterface(&local, NULL, 0));
    LOOMCHECK(fillRandom(secret, sizeof(secret)));
    return rootOpen(&local, secret, id);
}

/* "host:port" or "[v6]:port" -> the address (resolved) and the port. */
static loomResult_t rootAddrParse(const char *text, union socketAddress *addr)
{
    char host[256];
    const char *colon = strrchr(text, ':');
    const char *h = text;
    size_t hlen = colon ? (size_t)(colon - text) : 0;
    if (hlen >= 2 && text[0] == '[' && text[hlen - 1] == ']')
        h++, hlen -= 2;
    char *end = NULL;
    long port = colon ? strtol(colon + 1, &end, 10) : 0;
    if (colon == NULL || hlen == 0 || hlen >= sizeof(host) || *end != '\0' || port < 1 ||
        port > 65535)
        return loomSetError(loomInvalidArgument,
                            "LOOM_ROOT_ADDR=%s is not host:port (e.g. 10.0.0.1:29500 or "
                            "node01:29500)",
                            text);
    memcpy(host, h, hlen);
    host[hlen] = '\0';
    struct addrinfo hints = {.ai_socktype = SOCK_STREAM}, *list = NULL, *best = NULL;
    int err = getaddrinfo(host, NULL, &hints, &list);
    if (err != 0)
        return loomSetError(loomInvalidArgument, "LOOM_ROOT_ADDR=%s: cannot resolve %s: %s", text,
                            host, gai_strerror(err));
    for (struct addrinfo *ai = list; ai != NULL; ai = ai->ai_next)
        if ((ai->ai_family == AF_INET || ai->ai_family == AF_INET6) &&
            (best == NULL || (best->ai_family == AF_INET6 && ai->ai_family == AF_INET)))
            best = ai; /* IPv4 first, as socketFindInterface does */
    if (best == NULL) {
        freeaddrinfo(list);
        return loomSetError(loomInvalidArgument, "LOOM_ROOT_ADDR=%s: %s has no IP address", text,
                            host);
    }
    memset(addr, 0, sizeof(*addr));
    memcpy(addr, best->ai_addr, best->ai_addrlen);
    freeaddrinfo(list);
    if (addr->sa.sa_family == AF_INET)
        addr->sin.sin_port = htons((uint16_t)port);
    else
        addr->sin6.sin6_port = htons((uint16_t)port);
    return loomSuccess;
}

/* The secret every rank of one job derives alike: the address and the launcher's job id. */
static void rootAddrSecret(const char *text, const char *job, uint8_t *secret)
{
    for (int i = 0; i < BOOTSTRAP_SECRET_BYTES / 8; i++) {
        uint64_t h = 0xcbf29ce484222325ULL ^ (uint64_t)i;
        for (const char *parts[] = {"loom-root-addr:", text, "/", job}, **p = parts; p < parts + 4;
             p++)
            for (const char *c = *p; *c; c++)
                h = (h ^ (uint8_t)*c) * 0x100000001b3ULL;
        wirePut64(secret + 8 * i, h);
    }
}

loomResult_t bootstrapRootAddrId(const char *rootAddr, const char *job, int startRoot,
                                 loomUniqueId *id)
{
    union socketAddress addr;
    uint8_t secret[BOOTSTRAP_SECRET_BYTES];
    struct bootstrapId bid;

    LOOMCHECK(rootAddrParse(rootAddr, &addr));
    rootAddrSecret(rootAddr, job ? job : "", secret);
    if (startRoot) {
        loomResult_t res = rootOpen(&addr, secret, id);
        if (res != loomSuccess) {
            char why[400];
            snprintf(why, sizeof(why), "%s", debugLastError(NULL));
            return loomSetError(res,
                                "%s; rank 0 must run on the host LOOM_ROOT_ADDR=%s names, and "
                                "the port must be free",
                                why, rootAddr);
        }
        return loomSuccess;
    }
    memcpy(bid.secret, secret, sizeof(bid.secret));
    if (socketAddrToBootstrap(&addr, &bid.root) != loomSuccess ||
        bootstrapEncodeId(&bid, id) != LOOM_UNIQUE_ID_BYTES)
        return loomSetError(loomInternalError, "bootstrap: cannot encode the unique id");
    return loomSuccess;
}

/* ---- joining: root, then ring ---- */

static void peerLabel(const struct loomBootstrap *b, int r, char *buf, size_t len)
{
    char addr[SOCKET_ADDR_STRLEN];
    bootwireAddrFormat(&b->peers[r], addr, sizeof(addr));
    snprintf(buf, len, "rank %d (%s)", r, addr);
}

static loomResult_t helloMake(const struct loomBootstrap *b, uint8_t *buf)
{
    struct bootstrapHello h;

    memcpy(h.secret, b->secret, sizeof(h.secret));
    h.rank = b->rank;
    h.nranks = b->nranks;
    if (socketAddrToBootstrap(&b->listenAddr, &h.addr) != loomSuccess ||
        bootstrapEncodeHello(&h, buf, BOOTSTRAP_HELLO_BYTES) != BOOTSTRAP_HELLO_BYTES)
        return loomSetError(loomInternalError, "bootstrap: rank %d cannot encode its hello",
                            b->rank);
    return loomSuccess;
}

/* Receives len bytes of the table, turning a quiet failure into a message about the root. */
static loomResult_t tableRecv(struct loomBootstrap *b, int fd, void *buf, size_t len,
                              uint64_t deadline, const char *rootName)
{
    char trouble[sizeof(troubleText) + 64];
    size_t done = 0;
    int err = 0;
    /* Like socketRecvAll, but a root of this process in trouble ends the wait at once. */
    for (;;) {
        if (socketTryRecv(fd, buf, len, &done) != loomSuccess) {
            err = errno;
            break;
        }
        if (done == len)
            return loomSuccess;
        rootTroubleQuote(rootName, trouble, sizeof(trouble));
        if (trouble[0])
            return loomSetError(loomSystemError,
                                "bootstrap: rank %d of %d: no address table from the root at "
                                "%s%s",
                                b->rank, b->nranks, rootName, trouble);
        err = socketAborted(b->abortFlag) ? ECANCELED : socketPollMs(deadline) == 0 ? ETIMEDOUT : 0;
        if (err != 0)
            break;
        struct pollfd p = {.fd = fd, .events = POLLIN};
        poll(&p, 1, socketPollMs(deadline));
    }
    rootTroubleQuote(rootName, trouble, sizeof(trouble));
    if (err == ECANCELED)
        return loomSetError(loomRemoteError,
                            "bootstrap: rank %d aborted while waiting for the root at %s", b->rank,
                            rootName);
    if (err == ETIMEDOUT)
        return loomSetError(loomTimeout,
                            "bootstrap: rank %d of %d: not every rank joined the root at %s "
                            "within %d s%s",
                            b->rank, b->nranks, rootName, b->timeoutSec, trouble);
    if (err == 0 && trouble[0])
        return loomSetError(loomSystemError,
                            "bootstrap: rank %d of %d: the root at %s closed the connection%s",
                            b->rank, b->nranks, rootName, trouble);
    if (err == 0)
        return loomSetError(loomRemoteError,
                            "bootstrap: rank %d of %d: the root at %s closed the connection: it "
                            "refused the hello (the id is from another job, nranks differs "
                            "between ranks, or rank %d joined twice) or gave up waiting",
                            b->rank, b->nranks, rootName, b->rank);
    return loomSetError(trouble[0] ? loomSystemError : loomRemoteError,
                        "bootstrap: rank %d: connection to the root at %s failed: %s%s", b->rank,
                        rootName, strerror(err), trouble);
}

static loomResult_t tableRead(struct loomBootstrap *b, int fd, uint64_t deadline,
                              const char *rootName)
{
    struct bootstrapAddr mine;
    size_t len = bootstrapTableBytes(b->nranks);
    int bad;

    uint8_t *raw = malloc(len);
    b->peers = calloc((size_t)b->nranks, sizeof(*b->peers));
    if (raw == NULL || b->peers == NULL) {
        free(raw);
        return loomSetError(loomSystemError, "bootstrap: out of memory for %d addresses",
                            b->nranks);
    }
    loomResult_t res = tableRecv(b, fd, raw, len, deadline, rootName);
    const char *why =
        res == loomSuccess ? bootwireTableDecode(raw, len, b->nranks, b->peers, &bad) : NULL;
    free(raw);
    LOOMCHECK(res);
    if (why != NULL && bad >= 0)
        return loomSetError(loomInternalError,
                            "bootstrap: rank %d: malformed address of rank %d in the table from "
                            "the root at %s",
                            b->rank, bad, rootName);
    if (why != NULL)
        return loomSetError(loomInternalError,
                            "bootstrap: rank %d: malformed address table (%s) from the root at %s",
                            b->rank, why, rootName);
    socketAddrToBootstrap(&b->listenAddr, &mine);
    if (!bootwireAddrSame(&mine, &b->peers[b->rank]))
        return loomSetError(loomInternalError,
                            "bootstrap: rank %d: the root at %s lists another address for it",
                            b->rank, rootName);
    return loomSuccess;
}

static loomResult_t joinRoot(struct loomBootstrap *b, const struct bootstrapId *id,
                             uint64_t deadline)
{
    union socketAddress rootAddr;
    char rootName[SOCKET_ADDR_STRLEN], who[SOCKET_ADDR_STRLEN + 64];
    uint8_t hello[BOOTSTRAP_HELLO_BYTES];
    int fd;

    socketAddrFromBootstrap(&id->root, &rootAddr);
    socketAddrFormat(&rootAddr, rootName, sizeof(rootName));
    snprintf(who, sizeof(who), "bootstrap: rank %d of %d joining the root (timeout %d s)", b->rank,
             b->nranks, b->timeoutSec);
    LOOMCHECK(helloMake(b, hello));
    loomResult_t res = socketConnect(&rootAddr, deadline, b->abortFlag, who, &fd);
    if (res != loomSuccess) {
        char line[512], trouble[sizeof(troubleText) + 64];
        rootTroubleQuote(rootName, trouble, sizeof(trouble));
        snprintf(line, sizeof(line), "%s", debugLastError(NULL));
        return trouble[0] ? loomSetError(loomSystemError, "%s%s", line, trouble) : res;
    }
    res = socketSendAll(fd, hello, sizeof(hello), deadline, b->abortFlag, who);
    if (res == loomSuccess)
        res = tableRead(b, fd, deadline, rootName);
    socketClose(fd);
    return res;
}

struct ringAccept {
    struct loomBootstrap *b;
    int prev;
    int fd;
};

static const char *ringTake(void *ctx, const struct bootstrapHello *h, int fd,
                            const union socketAddress *peer)
{
    struct ringAccept *ra = ctx;
    (void)peer;

    if (h->nranks != ra->b->nranks)
        return "nranks differs from this rank's";
    if (h->rank != ra->prev)
        return "not this rank's ring predecessor";
    if (!bootwireAddrSame(&h->addr, &ra->b->peers[ra->prev]))
        return "its listen address differs from the root's table";
    if (ra->fd >= 0)
        return "the predecessor is connected already";
    ra->fd = fd;
    return NULL;
}

/* A rank's gather of hellos at its own listening socket; NULL when out of memory. */
static struct helloGather *gatherOpen(const struct loomBootstrap *b, const char *owner,
                                      helloTakeFn take, void *ctx)
{
    struct helloGather *g = calloc(1, sizeof(*g));
    if (g == NULL)
        return NULL;
    g->listenFd = b->listenFd;
    g->secret = b->secret;
    g->owner = owner;
    g->take = take;
    g->ctx = ctx;
    return g;
}

static loomResult_t ringAcceptPrev(struct loomBootstrap *b, uint64_t deadline)
{
    struct ringAccept ra = {.b = b, .prev = (b->rank - 1 + b->nranks) % b->nranks, .fd = -1};
    char owner[32];
    loomResult_t res = loomSuccess;

    snprintf(owner, sizeof(owner), "rank %d", b->rank);
    struct helloGather *g = gatherOpen(b, owner, ringTake, &ra);
    if (g == NULL)
        return loomSetError(loomSystemError, "bootstrap: out of memory");
    while (ra.fd < 0) {
        if (socketAborted(b->abortFlag)) {
            res = loomSetError(loomRemoteError,
                               "bootstrap: rank %d aborted while waiting for %s to connect",
                               b->rank, b->prevLabel);
            break;
        }
        if (socketClockNs() >= deadline) {
            res = loomSetError(loomTimeout, "bootstrap: %s did not connect to rank %d within %d s",
                               b->prevLabel, b->rank, b->timeoutSec);
            break;
        }
        gatherRound(g, socketPollMs(deadline));
    }
    gatherCloseAll(g);
    free(g);
    b->prevFd = ra.fd;
    return res;
}

static loomResult_t ringConnect(struct loomBootstrap *b, uint64_t deadline)
{
    int next = (b->rank + 1) % b->nranks;
    int prev = (b->rank - 1 + b->nranks) % b->nranks;
    union socketAddress nextAddr;
    uint8_t hello[BOOTSTRAP_HELLO_BYTES];
    char who[LABEL_LEN + 64];

    peerLabel(b, next, b->nextLabel, sizeof(b->nextLabel));
    peerLabel(b, prev, b->prevLabel, sizeof(b->prevLabel));
    socketAddrFromBootstrap(&b->peers[next], &nextAddr);
    snprintf(who, sizeof(who), "bootstrap: rank %d connecting to its ring successor %s", b->rank,
             b->nextLabel);
    LOOMCHECK(helloMake(b, hello));
    /* Every rank listened before it said hello to the root, so the successor is listening. */
    LOOMCHECK(socketConnect(&nextAddr, deadline, b->abortFlag, who, &b->nextFd));
    LOOMCHECK(socketSendAll(b->nextFd, hello, sizeof(hello), deadline, b->abortFlag, who));
    LOOMCHECK(ringAcceptPrev(b, deadline));
    INFO(LOOM_BOOTSTRAP, "bootstrap: rank %d of %d: ring up, next %s, prev %s", b->rank, b->nranks,
         b->nextLabel, b->prevLabel);
    return loomSuccess;
}

loomResult_t bootstrapInit(const loomUniqueId *id, int rank, int nranks, int timeoutSec,
                           atomic_int *abortFlag, struct loomBootstrap **out)
{
    struct bootstrapId bid;
    union socketAddress local;
    loomResult_t res;

    if (id == NULL || out == NULL)
        return loomSetError(loomInvalidArgument, "bootstrap: %s is NULL",
                            id == NULL ? "the unique id" : "the output pointer");
    if (nranks < 1 || nranks > BOOTSTRAP_MAX_RANKS)
        return loomSetError(loomInvalidArgument, "bootstrap: nranks %d is not in 1..%d", nranks,
                            BOOTSTRAP_MAX_RANKS);
    if (rank < 0 || rank >= nranks)
        return loomSetError(loomInvalidArgument, "bootstrap: rank %d is not in 0..%d", rank,
                            nranks - 1);
    if (timeoutSec <= 0)
        return loomSetError(loomInvalidArgument, "bootstrap: timeout %d s is not positive",
                            timeoutSec);
    const char *why = bootwireIdDecode(id, &bid);
    if (why != NULL)
        return loomSetError(loomInvalidArgument,
                            "bootstrap: the unique id is not usable: %s; pass every rank the id "
                            "loomGetUniqueId wrote, unchanged",
                            why);
    struct loomBootstrap *b = calloc(1, sizeof(*b));
    if (b == NULL)
        return loomSetError(loomSystemError, "bootstrap: out of memory");
    b->rank = rank;
    b->nranks = nranks;
    b->timeoutSec = timeoutSec;
    b->abortFlag = abortFlag;
    b->listenFd = b->nextFd = b->prevFd = -1;
    memcpy(b->secret, bid.secret, sizeof(b->secret));
    uint64_t deadline = socketDeadline(timeoutSec);

    res = socketFindInterface(&local, NULL, 0);
    if (res != loomSuccess)
        goto fail_close;
    res = socketListen(&local, &b->listenFd, &b->listenAddr);
    if (res != loomSuccess)
        goto fail_close;
    res = joinRoot(b, &bid, deadline);
    if (res != loomSuccess)
        goto fail_close;
    if (nranks > 1) {
        res = ringConnect(b, deadline);
        if (res != loomSuccess)
            goto fail_close;
    }
    *out = b;
    return loomSuccess;

fail_close:
    bootstrapClose(b);
    return res;
}

/* ---- ring collectives ---- */

struct ringXfer {
    uint8_t hdr[BOOTSTRAP_FRAME_BYTES];
    size_t hdrDone;
    size_t dataDone;
};

static loomResult_t frameCheck(const struct loomBootstrap *b, const uint8_t *hdr, uint32_t seq,
                               size_t bytes, int step)
{
    uint32_t gotSeq;
    uint64_t gotBytes;
    if (bootstrapDecodeFrame(hdr, BOOTSTRAP_FRAME_BYTES, &gotSeq, &gotBytes) != loomSuccess)
        return loomSetError(loomInternalError,
                            "bootstrap: malformed allgather frame from %s to rank %d", b->prevLabel,
                            b->rank);
    if (gotSeq != seq)
        return loomSetError(loomInternalError,
                            "bootstrap: %s is at bootstrap collective #%u, rank %d at #%u (the "
                            "ranks called allgather/barrier a different number of times)",
                            b->prevLabel, gotSeq, b->rank, seq);
    if (gotBytes != bytes)
        return loomSetError(loomInternalError,
                            "bootstrap: %s sent a %llu-byte block in allgather step %d, rank %d "
                            "expected %zu bytes (every rank must pass the same size)",
                            b->prevLabel, (unsigned long long)gotBytes, step, b->rank, bytes);
    return loomSuccess;
}

static loomResult_t ringLost(const struct loomBootstrap *b, int sending, int err, int step)
{
    const char *dir = sending ? "to" : "from";
    const char *label = sending ? b->nextLabel : b->prevLabel;

    if (err == 0)
        return loomSetError(loomRemoteError,
                            "bootstrap: connection %s %s closed during allgather (rank %d, step "
                            "%d of %d)",
                            dir, label, b->rank, step + 1, b->nranks - 1);
    return loomSetError(loomRemoteError,
                        "bootstrap: connection %s %s failed during allgather: %s (rank %d)", dir,
                        label, strerror(err), b->rank);
}

static loomResult_t ringStalled(const struct loomBootstrap *b, int sending, size_t done,
                                size_t total, int step)
{
    if (sending)
        return loomSetError(loomTimeout,
                            "bootstrap: rank %d could not send to %s for %d s during allgather "
                            "(step %d of %d, %zu of %zu bytes sent)",
                            b->rank, b->nextLabel, b->timeoutSec, step + 1, b->nranks - 1, done,
                            total);
    return loomSetError(loomTimeout,
                        "bootstrap: rank %d got nothing from %s for %d s during allgather (step "
                        "%d of %d, %zu of %zu bytes received)",
                        b->rank, b->prevLabel, b->timeoutSec, step + 1, b->nranks - 1, done, total);
}

/*
 * One ring step: sends `bytes` from sendBuf to the successor while receiving
 * `bytes` into recvBuf from the predecessor. The deadline restarts whenever
 * bytes move, so only a stall, not a large block, times out.
 */
static loomResult_t ringExchange(struct loomBootstrap *b, uint32_t seq, int step,
                                 const uint8_t *sendBuf, uint8_t *recvBuf, size_t bytes)
{
    struct ringXfer out = {.hdrDone = 0}, in = {.hdrDone = 0};
    uint64_t deadline = socketDeadline(b->timeoutSec);
    int checked = 0;

    bootstrapEncodeFrame(seq, bytes, out.hdr, sizeof(out.hdr));
    for (;;) {
        size_t before = out.hdrDone + out.dataDone + in.hdrDone + in.dataDone;
        loomResult_t res = socketTrySend(b->nextFd, out.hdr, BOOTSTRAP_FRAME_BYTES, &out.hdrDone);
        if (res == loomSuccess && out.hdrDone == BOOTSTRAP_FRAME_BYTES)
            res = socketTrySend(b->nextFd, sendBuf, bytes, &out.dataDone);
        if (res != loomSuccess)
            return ringLost(b, 1, errno, step);
        res = socketTryRecv(b->prevFd, in.hdr, BOOTSTRAP_FRAME_BYTES, &in.hdrDone);
        if (res == loomSuccess && in.hdrDone == BOOTSTRAP_FRAME_BYTES) {
            if (!checked) {
                LOOMCHECK(frameCheck(b, in.hdr, seq, bytes, step));
                checked = 1;
            }
            res = socketTryRecv(b->prevFd, recvBuf, bytes, &in.dataDone);
        }
        if (res != loomSuccess)
            return ringLost(b, 0, errno, step);
        int sendDone = out.hdrDone == BOOTSTRAP_FRAME_BYTES && out.dataDone == bytes;
        int recvDone = checked && in.dataDone == bytes;
        if (sendDone && recvDone)
            return loomSuccess;
        if (out.hdrDone + out.dataDone + in.hdrDone + in.dataDone != before)
            deadline = socketDeadline(b->timeoutSec);
        if (socketAborted(b->abortFlag))
            return loomSetError(loomRemoteError, "bootstrap: rank %d: allgather aborted", b->rank);
        int ms = socketPollMs(deadline);
        if (ms == 0)
            return recvDone ? ringStalled(b, 1, out.dataDone, bytes, step)
                            : ringStalled(b, 0, in.dataDone, bytes, step);
        struct pollfd p[2];
        int n = 0;
        if (!sendDone)
            p[n++] = (struct pollfd){.fd = b->nextFd, .events = POLLOUT};
        if (!recvDone)
            p[n++] = (struct pollfd){.fd = b->prevFd, .events = POLLIN};
        poll(p, (nfds_t)n, ms);
    }
}

loomResult_t bootstrapAllGather(struct loomBootstrap *b, void *data, size_t bytes)
{
    if (b == NULL || (data == NULL && bytes > 0))
        return loomSetError(loomInvalidArgument, "bootstrapAllGather: %s is NULL",
                            b == NULL ? "the bootstrap" : "data");
    if (bytes > SIZE_MAX / (size_t)b->nranks)
        return loomSetError(loomInvalidArgument,
                            "bootstrapAllGather: %zu bytes x %d ranks overflows", bytes, b->nranks);
    uint32_t seq = b->seq++;
    int n = b->nranks;
    uint8_t *blocks = data;
    for (int s = 0; s < n - 1; s++) {
        size_t sendBlock = (size_t)((b->rank - s + n) % n);
        size_t recvBlock = (size_t)((b->rank - s - 1 + 2 * n) % n);
        LOOMCHECK(
            ringExchange(b, seq, s, blocks + sendBlock * bytes, blocks + recvBlock * bytes, bytes));
    }
    return loomSuccess;
}

loomResult_t bootstrapBarrier(struct loomBootstrap *b)
{
    if (b == NULL)
        return loomSetError(loomInvalidArgument, "bootstrapBarrier: the bootstrap is NULL");
    if (b->nranks == 1)
        return loomSuccess;
    uint8_t *tokens = calloc((size_t)b->nranks, 1);
    if (tokens == NULL)
        return loomSetError(loomSystemError, "bootstrap: out of memory");
    /* An allgather returns only after every block, hence every rank, has arrived. */
    loomResult_t res = bootstrapAllGather(b, tokens, 1);
    free(tokens);
    return res;
}

void bootstrapClose(struct loomBootstrap *b)
{
    if (b == NULL)
        return;
    socketClose(b->nextFd);
    socketClose(b->prevFd);
    socketClose(b->listenFd);
    free(b->peers);
    if (b->gather != NULL) {
        gatherCloseAll(b->gather);
        free(b->gather);
    }
    while (b->inbox != NULL) {
        struct bootMsg *m = b->inbox;
        b->inbox = m->next;
        free(m);
    }
    free(b);
}

/* ---- point-to-point messages (bootstrapSend, bootstrapRecv) ---- */

/*
 * A message travels on a connection of its own to the receiver's listening
 * socket: the hello (secret, rank, nranks, listen address, as at init), then
 *
 *   "LMBP"(4) tag(4) length(4) data(length)
 *
 * and the sender closes it. The kernel holds it until the receiver accepts,
 * so a send never waits for the receiver to be ready (only for its
 * kernel to accept the connection); the receiver keeps
 * what it accepted for a later call (b->inbox).
 */
#define P2P_MAGIC 0x4c4d4250u /* "LMBP" */
#define P2P_HEADER 12
#define P2P_POLL_MS 50

static const char *p2pTake(void *ctx, const struct bootstrapHello *h, int fd,
                           const union socketAddress *peer)
{
    struct loomBootstrap *b = ctx;
    uint8_t hdr[P2P_HEADER];
    (void)peer;
    if (h->nranks != b->nranks || h->rank < 0 || h->rank >= b->nranks)
        return "not a rank of this communicator";
    if (!bootwireAddrSame(&h->addr, &b->peers[h->rank]))
        return "its listen address differs from the root's table";
    uint64_t deadline = socketDeadline(HELLO_TIMEOUT_SEC);
    if (socketRecvAll(fd, hdr, sizeof(hdr), deadline, b->abortFlag, NULL) != loomSuccess ||
        wireGet32(hdr) != P2P_MAGIC)
        return "no message after the hello";
    uint32_t bytes = wireGet32(hdr + 8);
    if (bytes > BOOTSTRAP_MSG_MAX_BYTES)
        return "a message larger than any the bootstrap sends";
    struct bootMsg *m = malloc(sizeof(*m) + bytes);
    if (m == NULL)
        return "out of memory for its message";
    if (socketRecvAll(fd, m->data, bytes, deadline, b->abortFlag, NULL) != loomSuccess) {
        free(m);
        return "the message ended early";
    }
    m->from = h->rank;
    m->tag = wireGet32(hdr + 4);
    m->bytes = bytes;
    m->next = NULL;
    struct bootMsg **at = &b->inbox;
    while (*at != NULL)
        at = &(*at)->next;
    *at = m;
    socketClose(fd);
    return NULL;
}

loomResult_t bootstrapSend(struct loomBootstrap *b, int peer, uint32_t tag, const void *data,
                           size_t bytes, const struct bootstrapWait *w)
{
    union socketAddress addr;
    uint8_t hello[BOOTSTRAP_HELLO_BYTES], hdr[P2P_HEADER];
    char label[LABEL_LEN], who[LABEL_LEN + 64];
    int fd = -1;
    if (peer < 0 || peer >= b->nranks || bytes > BOOTSTRAP_MSG_MAX_BYTES)
        return loomSetError(loomInternalError, "bootstrap: no message of %zu bytes to rank %d",
                            bytes, peer);
    peerLabel(b, peer, label, sizeof(label));
    snprintf(who, sizeof(who), "bootstrap: rank %d sending to %s", b->rank, label);
    uint64_t deadline = w->deadline;
    LOOMCHECK(helloMake(b, hello));
    wirePut32(hdr, P2P_MAGIC);
    wirePut32(hdr + 4, tag);
    wirePut32(hdr + 8, (uint32_t)bytes);
    socketAddrFromBootstrap(&b->peers[peer], &addr);
    /*
     * Every rank listens from init until it destroys the communicator, and a full listen
     * queue drops connections rather than refuse them: a refusal means the peer has left.
     */
    loomResult_t res = loomSuccess;
    char where[SOCKET_ADDR_STRLEN];
    socketAddrFormat(&addr, where, sizeof(where));
    for (int backoffMs = 10;; backoffMs = backoffMs < 100 ? 2 * backoffMs : 100) {
        /* Attempts of at most 0.5 s, so that a peer known to have failed ends the wait. */
        uint64_t soon = socketDeadline(0.5);
        int err = socketConnectOnce(&addr, soon < deadline ? soon : deadline, b->abortFlag, &fd);
        if (err == 0)
            break;
        if (err == ECONNREFUSED && w->gone != NULL && w->gone(w->ctx, peer))
            return loomSetError(loomRemoteError,
                                "bootstrap: %s failed while rank %d was sending to it (%s)", label,
                                b->rank, w->what);
        if (err == ECONNREFUSED)
            return loomSetError(loomRemoteError,
                                "bootstrap: %s refused rank %d's connection: it has exited or "
                                "left the communicator (%s)",
                                label, b->rank, w->what);
        if (err == ECANCELED || socketAborted(b->abortFlag))
            return loomSetError(loomRemoteError, "bootstrap: rank %d aborted while sending to %s",
                                b->rank, label);
        if (w->gone != NULL && w->gone(w->ctx, peer))
            return loomSetError(loomRemoteError,
                                "bootstrap: %s failed while rank %d was sending to it (%s)", label,
                                b->rank, w->what);
        if (socketClockNs() >= deadline)
            return loomSetError(loomTimeout,
                                "bootstrap: rank %d could not connect to %s at %s within %d s: %s "
                                "(%s)",
                                b->rank, label, where, b->timeoutSec, debugErrnoText(err), w->what);
        int ms = socketPollMs(deadline);
        poll(NULL, 0, ms < backoffMs ? ms : backoffMs);
    }
    res = socketSendAll(fd, hello, sizeof(hello), deadline, b->abortFlag, who);
    if (res == loomSuccess)
        res = socketSendAll(fd, hdr, sizeof(hdr), deadline, b->abortFlag, who);
    if (res == loomSuccess && bytes > 0)
        res = socketSendAll(fd, data, bytes, deadline, b->abortFlag, who);
    socketClose(fd);
    return res;
}

static struct bootMsg *inboxTake(struct loomBootstrap *b, int from, uint32_t tag)
{
    for (struct bootMsg **at = &b->inbox; *at != NULL; at = &(*at)->next) {
        if ((*at)->from == from && (*at)->tag == tag) {
            struct bootMsg *m = *at;
            *at = m->next;
            return m;
        }
    }
    return NULL;
}

loomResult_t bootstrapRecv(struct loomBootstrap *b, int peer, uint32_t tag, void *data,
                           size_t bytes, const struct bootstrapWait *w)
{
    char label[LABEL_LEN];
    if (b->gather == NULL) {
        snprintf(b->owner, sizeof(b->owner), "rank %d", b->rank);
        b->gather = gatherOpen(b, b->owner, p2pTake, b);
        if (b->gather == NULL)
            return loomSetError(loomSystemError, "bootstrap: out of memory");
    }
    peerLabel(b, peer, label, sizeof(label));
    int drained = 0;
    for (;;) {
        struct bootMsg *m = inboxTake(b, peer, tag);
        if (m != NULL) {
            loomResult_t res = loomSuccess;
            if (m->bytes != bytes)
                res = loomSetError(loomInternalError,
                                   "bootstrap: rank %d got %zu bytes from %s, expected %zu",
                                   b->rank, m->bytes, label, bytes);
            else
                memcpy(data, m->data, bytes);
            free(m);
            return res;
        }
        if (socketAborted(b->abortFlag))
            return loomSetError(loomRemoteError, "bootstrap: rank %d aborted while waiting for %s",
                                b->rank, label);
        if (w->gone != NULL && w->gone(w->ctx, peer)) {
            /* What it sent before it left may wait in the listen queue or a socket: read
             * that in, without waiting, once before giving up on it. */
            if (!drained) {
                drained = 1;
                for (int pass = 0; pass < 4; pass++)
                    gatherRound(b->gather, 0);
                continue;
            }
            return loomSetError(loomRemoteError,
                                "bootstrap: %s failed while rank %d waited for it (%s)", label,
                                b->rank, w->what);
        }
        if (socketClockNs() >= w->deadline)
            return loomSetError(loomTimeout,
                                "bootstrap: %s did not answer rank %d within %d s (%s)", label,
                                b->rank, b->timeoutSec, w->what);
        int ms = socketPollMs(w->deadline);
        gatherRound(b->gather, ms < P2P_POLL_MS ? ms : P2P_POLL_MS);
    }
}

/* ---- shrink: the ranks kept meet without the dead (bootstrapShrink) ---- */

/*
 * After its hello (as at init: secret, rank, nranks, listen address) each
 * rank kept sends its request to the meeting rank, the lowest rank kept,
 * at the listening socket that rank opened at init; the meeting rank
 * answers every one with the same verdict:
 *
 *   request: "LMSK"(4) attempt(4) count(4) then count excluded ranks (4 each), ascending
 *   verdict: "LMSV"(4) result(4) unique id(128) text(256, NUL-padded)
 *
 * The attempt counts the shrinks of this communicator, so a retry after a
 * failed shrink is not mistaken for the first. The meeting rank waits for
 * every rank its own list keeps, no longer than the timeout, and stops at
 * once when one fails (the caller's gone()) or one that arrived closes its
 * connection. Ranks whose lists differ get loomInvalidUsage, all of them,
 * as long as their lists agree on the meeting rank; where they do not, the
 * two groups wait at two meeting ranks and end with loomTimeout naming the
 * ranks that did not come.
 */
#define SHRINK_REQ_MAGIC 0x4c4d534bu     /* "LMSK" */
#define SHRINK_VERDICT_MAGIC 0x4c4d5356u /* "LMSV" */
#define SHRINK_REQ_HEADER 12
#define SHRINK_TEXT_BYTES 320
#define SHRINK_VERDICT_BYTES (8 + LOOM_UNIQUE_ID_BYTES + SHRINK_TEXT_BYTES)
/* How often a wait looks at who has failed. */
#define SHRINK_POLL_MS 50
/* A rank waits for the verdict this much longer than the meeting rank waits for the others. */
#define SHRINK_GRACE_SEC 5

struct shrinkMeet {
    struct loomBootstrap *b;
    const struct bootstrapShrink *s;
    uint32_t attempt;
    int *fds; /* [nranks]: the connection of each rank that arrived, else -1 */
    char mismatch[SHRINK_TEXT_BYTES];
};

static int shrinkExcluded(const struct bootstrapShrink *s, int r)
{
    for (int i = 0; i < s->nexclude; i++)
        if (s->exclude[i] == r)
            return 1;
    return 0;
}

/* "{1, 3}"; a long list ends in "...}". */
static void shrinkListFormat(const int *ranks, int n, char *buf, size_t len)
{
    size_t used = (size_t)snprintf(buf, len, "{");
    int i = 0;
    for (; i < n && used + 16 < len; i++)
        used += (size_t)snprintf(buf + used, len - used, "%s%d", i ? ", " : "", ranks[i]);
    snprintf(buf + used, len - used, "%s}", i < n ? "..." : "");
}

static void shrinkCompare(struct shrinkMeet *m, int rank, uint32_t attempt, const int *list, int n)
{
    const struct bootstrapShrink *s = m->s;
    char theirs[64], mine[64];
    if (m->mismatch[0])
        return;
    if (attempt != m->attempt) {
        snprintf(m->mismatch, sizeof(m->mismatch),
                 "rank %d is at its shrink #%u of this communicator, rank %d (where the ranks "
                 "kept meet) at #%u; every rank kept must call loomCommShrink as often",
                 rank, attempt, m->b->rank, m->attempt);
        return;
    }
    if (n == s->nexclude && memcmp(list, s->exclude, (size_t)n * sizeof(*list)) == 0)
        return;
    shrinkListFormat(list, n, theirs, sizeof(theirs));
    shrinkListFormat(s->exclude, s->nexclude, mine, sizeof(mine));
    snprintf(m->mismatch, sizeof(m->mismatch),
             "rank %d excludes %s, rank %d (where the ranks kept meet) excludes %s; every rank "
             "kept must pass the same exclude list",
             rank, theirs, m->b->rank, mine);
}

static const char *shrinkTake(void *ctx, const struct bootstrapHello *h, int fd,
                              const union socketAddress *peer)
{
    struct shrinkMeet *m = ctx;
    struct loomBootstrap *b = m->b;
    uint8_t hdr[SHRINK_REQ_HEADER];
    (void)peer;

    if (h->nranks != b->nranks)
        return "nranks differs from this communicator's";
    if (h->rank == b->rank)
        return "it claims this rank's number";
    if (!bootwireAddrSame(&h->addr, &b->peers[h->rank]))
        return "its listen address differs from the one it had at init";
    if (m->fds[h->rank] >= 0)
        return "that rank has arrived already";
    uint64_t deadline = socketDeadline(HELLO_TIMEOUT_SEC);
    if (socketRecvAll(fd, hdr, sizeof(hdr), deadline, NULL, NULL) != loomSuccess)
        return "no whole shrink request";
    uint32_t n = wireGet32(hdr + 8);
    if (wireGet32(hdr) != SHRINK_REQ_MAGIC || n > (uint32_t)b->nranks)
        return "malformed shrink request";
    uint8_t *raw = malloc((size_t)n * 4 + 1);
    int *list = calloc((size_t)n + 1, sizeof(*list));
    const char *why = NULL;
    if (raw == NULL || list == NULL)
        why = "out of memory";
    else if (socketRecvAll(fd, raw, (size_t)n * 4, deadline, NULL, NULL) != loomSuccess)
        why = "no whole shrink request";
    for (uint32_t i = 0; why == NULL && i < n; i++)
        list[i] = (int)wireGet32(raw + 4 * i);
    if (why == NULL) {
        m->fds[h->rank] = fd;
        shrinkCompare(m, h->rank, wireGet32(hdr + 4), list, (int)n);
    }
    free(raw);
    free(list);
    return why;
}

/* A rank that arrived sends nothing more: an event on its connection means it went away. */
static int shrinkConnGone(int fd)
{
    struct pollfd p = {.fd = fd, .events = POLLIN};
    return poll(&p, 1, 0) > 0;
}

/* The meeting rank's wait: loomSuccess when every rank kept has arrived, else why not. */
static loomResult_t shrinkAwait(struct shrinkMeet *m, struct helloGather *g, char *why, size_t len)
{
    const struct loomBootstrap *b = m->b;
    const struct bootstrapShrink *s = m->s;
    uint64_t deadline = socketDeadline(b->timeoutSec);
    for (;;) {
        gatherRound(g, SHRINK_POLL_MS);
        int missing = 0, failed = -1, left = -1;
        for (int r = 0; r < b->nranks; r++) {
            if (r == b->rank || shrinkExcluded(s, r))
                continue;
            if (m->fds[r] >= 0 && left < 0 && shrinkConnGone(m->fds[r]))
                left = r;
            if (m->fds[r] < 0 && failed < 0 && s->gone && s->gone(s->goneCtx, r))
                failed = r;
            missing += m->fds[r] < 0;
        }
        if (left >= 0 || failed >= 0) {
            snprintf(why, len,
                     "rank %d %s during loomCommShrink; call loomCommShrink again with it "
                     "excluded too",
                     left >= 0 ? left : failed,
                     left >= 0 ? "closed its connection (it died or gave up)" : "failed");
            return loomRemoteError;
        }
        if (missing == 0)
            return loomSuccess;
        if (socketClockNs() >= deadline) {
            char list[96];
            int *absent = calloc((size_t)missing, sizeof(*absent));
            int k = 0;
            for (int r = 0; absent && r < b->nranks; r++)
                if (r != b->rank && !shrinkExcluded(s, r) && m->fds[r] < 0)
                    absent[k++] = r;
            shrinkListFormat(absent, k, list, sizeof(list));
            free(absent);
            snprintf(why, len,
                     "rank(s) %s did not arrive at loomCommShrink within %d s (LOOM_TIMEOUT): "
                     "stopped, hung, or passing an exclude list that differs from rank %d's",
                     list, b->timeoutSec, b->rank);
            return loomTimeout;
        }
    }
}

static void shrinkSendVerdict(int fd, loomResult_t res, const loomUniqueId *id, const char *text)
{
    uint8_t buf[SHRINK_VERDICT_BYTES];
    memset(buf, 0, sizeof(buf));
    wirePut32(buf, SHRINK_VERDICT_MAGIC);
    wirePut32(buf + 4, (uint32_t)res);
    if (res == loomSuccess)
        memcpy(buf + 8, id->internal, LOOM_UNIQUE_ID_BYTES);
    snprintf((char *)buf + 8 + LOOM_UNIQUE_ID_BYTES, SHRINK_TEXT_BYTES, "%s", text);
    /* A rank that went away misses its verdict; the others still get theirs. */
    socketSendAll(fd, buf, sizeof(buf), socketDeadline(HELLO_TIMEOUT_SEC), NULL, NULL);
}

static loomResult_t shrinkHost(struct loomBootstrap *b, const struct bootstrapShrink *s,
                               uint32_t attempt, loomUniqueId *newId)
{
    struct shrinkMeet m = {.b = b, .s = s, .attempt = attempt};
    char owner[48], why[SHRINK_TEXT_BYTES] = "";
    loomResult_t res;

    snprintf(owner, sizeof(owner), "rank %d (shrink)", b->rank);
    m.fds = malloc((size_t)b->nranks * sizeof(*m.fds));
    struct helloGather *g = gatherOpen(b, owner, shrinkTake, &m);
    if (m.fds == NULL || g == NULL) {
        free(m.fds);
        free(g);
        return loomSetError(loomSystemError, "loomCommShrink: out of memory");
    }
    for (int r = 0; r < b->nranks; r++)
        m.fds[r] = -1;
    res = shrinkAwait(&m, g, why, sizeof(why));
    if (m.mismatch[0]) {
        res = loomInvalidUsage;
        snprintf(why, sizeof(why), "%s", m.mismatch);
    }
    if (res == loomSuccess && bootstrapGetUniqueId(newId) != loomSuccess) {
        res = loomSystemError;
        snprintf(why, sizeof(why), "%s", debugLastError(NULL));
    }
    for (int r = 0; r < b->nranks; r++) {
        if (m.fds[r] >= 0)
            shrinkSendVerdict(m.fds[r], res, newId, why);
        socketClose(m.fds[r]);
    }
    gatherCloseAll(g);
    free(g);
    free(m.fds);
    if (res != loomSuccess)
        return loomSetError(res, "loomCommShrink: rank %d: %s", b->rank, why);
    return loomSuccess;
}

/* Connects to the meeting rank, giving up early if it is known to have failed. */
static loomResult_t shrinkConnect(struct loomBootstrap *b, const struct bootstrapShrink *s,
                                  int meet, uint64_t deadline, int *fd)
{
    union socketAddress addr;
    char label[LABEL_LEN];
    peerLabel(b, meet, label, sizeof(label));
    socketAddrFromBootstrap(&b->peers[meet], &addr);
    for (;;) {
        uint64_t step = socketDeadline(0.5);
        if (socketConnect(&addr, step < deadline ? step : deadline, NULL, NULL, fd) == loomSuccess)
            return loomSuccess;
        if (s->gone && s->gone(s->goneCtx, meet))
            return loomSetError(loomRemoteError,
                                "loomCommShrink: rank %d: %s, where the ranks kept meet (the "
                                "lowest of them), has failed; call loomCommShrink again with it "
                                "excluded too",
                                b->rank, label);
        if (socketClockNs() >= deadline)
            return loomSetError(loomTimeout,
                                "loomCommShrink: rank %d could not reach %s, where the ranks kept "
                                "meet, within %d s",
                                b->rank, label, b->timeoutSec + SHRINK_GRACE_SEC);
    }
}

/* Waits for the verdict on fd; the meeting rank's failure ends the wait. */
static loomResult_t shrinkAwaitVerdict(struct loomBootstrap *b, const struct bootstrapShrink *s,
                                       int meet, int fd, uint64_t deadline, uint8_t *buf)
{
    size_t done = 0;
    const char *lost = NULL;
    while (done < SHRINK_VERDICT_BYTES) {
        if (socketTryRecv(fd, buf, SHRINK_VERDICT_BYTES, &done) != loomSuccess)
            lost = "closed the connection before its verdict (it died or gave up)";
        else if (done < SHRINK_VERDICT_BYTES && s->gone && s->gone(s->goneCtx, meet))
            lost = "failed before its verdict";
        if (lost != NULL)
            return loomSetError(loomRemoteError,
                                "loomCommShrink: rank %d: rank %d, where the ranks kept meet, %s; "
                                "call loomCommShrink again with it excluded too",
                                b->rank, meet, lost);
        if (socketClockNs() >= deadline)
            return loomSetError(loomTimeout,
                                "loomCommShrink: rank %d had no verdict from rank %d, where the "
                                "ranks kept meet, within %d s",
                                b->rank, meet, b->timeoutSec + SHRINK_GRACE_SEC);
        struct pollfd p = {.fd = fd, .events = POLLIN};
        if (done < SHRINK_VERDICT_BYTES)
            poll(&p, 1, SHRINK_POLL_MS);
    }
    return loomSuccess;
}

static loomResult_t shrinkJoin(struct loomBootstrap *b, const struct bootstrapShrink *s,
                               uint32_t attempt, int meet, loomUniqueId *newId)
{
    uint64_t deadline = socketDeadline(b->timeoutSec + SHRINK_GRACE_SEC);
    size_t len = BOOTSTRAP_HELLO_BYTES + SHRINK_REQ_HEADER + (size_t)s->nexclude * 4;
    uint8_t verdict[SHRINK_VERDICT_BYTES];
    int fd = -1;

    uint8_t *req = malloc(len);
    if (req == NULL)
        return loomSetError(loomSystemError, "loomCommShrink: out of memory");
    loomResult_t res = helloMake(b, req);
    uint8_t *p = req + BOOTSTRAP_HELLO_BYTES;
    wirePut32(p, SHRINK_REQ_MAGIC);
    wirePut32(p + 4, attempt);
    wirePut32(p + 8, (uint32_t)s->nexclude);
    for (int i = 0; i < s->nexclude; i++)
        wirePut32(p + SHRINK_REQ_HEADER + 4 * i, (uint32_t)s->exclude[i]);
    if (res == loomSuccess)
        res = shrinkConnect(b, s, meet, deadline, &fd);
    if (res == loomSuccess && socketSendAll(fd, req, len, deadline, NULL, NULL) != loomSuccess)
        res = loomSetError(loomRemoteError,
                           "loomCommShrink: rank %d could not send its request to rank %d, where "
                           "the ranks kept meet: %s",
                           b->rank, meet, strerror(errno));
    free(req);
    if (res == loomSuccess)
        res = shrinkAwaitVerdict(b, s, meet, fd, deadline, verdict);
    socketClose(fd);
    LOOMCHECK(res);
    res = (loomResult_t)wireGet32(verdict + 4);
    verdict[SHRINK_VERDICT_BYTES - 1] = '\0';
    if (wireGet32(verdict) != SHRINK_VERDICT_MAGIC || res >= loomNumResults)
        return loomSetError(loomInternalError,
                            "loomCommShrink: rank %d: malformed verdict from rank %d", b->rank,
                            meet);
    if (res != loomSuccess)
        return loomSetError(res,
                            "loomCommShrink: rank %d: %s (told by rank %d, where the ranks "
                            "kept meet)",
                            b->rank, (const char *)verdict + 8 + LOOM_UNIQUE_ID_BYTES, meet);
    memcpy(newId->internal, verdict + 8, LOOM_UNIQUE_ID_BYTES);
    return loomSuccess;
}

loomResult_t bootstrapShrink(struct loomBootstrap *b, const struct bootstrapShrink *s,
                             loomUniqueId *newId)
{
    if (b == NULL || s == NULL || newId == NULL || (s->exclude == NULL && s->nexclude > 0))
        return loomSetError(loomInvalidArgument, "bootstrapShrink: a NULL argument");
    int meet = -1;
    for (int r = 0; r < b->nranks && meet < 0; r++)
        if (!shrinkExcluded(s, r))
            meet = r;
    if (meet < 0 || shrinkExcluded(s, b->rank))
        return loomSetError(loomInvalidArgument,
                            "bootstrapShrink: rank %d excludes itself or every rank", b->rank);
    uint32_t attempt = ++b->shrinks;
    if (meet == b->rank)
        return shrinkHost(b, s, attempt, newId);
    return shrinkJoin(b, s, attempt, meet, newId);
}
