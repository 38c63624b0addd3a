/*
 * bootroot.c — the unique id and the root thread: the root listens where the
 * id says, gathers every rank's hello, checks that they agree on the number
 * of ranks, and sends each the table of listen addresses; it watches the
 * ranks that said hello until all have, so that one that dies meanwhile is
 * named rather than waited for. A root that runs out of memory or
 * descriptors writes down what happened, for a rank of its process to quote.
 */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include "bootint.h"
#include "debug.h"
#include "param.h"
#include "wire.h"

/* ---- resource trouble of the root threads of this process ---- */

/*
 * A root thread that runs out of memory or descriptors can only close the
 * rank's connection, and the rank would blame the id or its peers. So the
 * root also writes down what happened, under its address, and a rank of the
 * same process (rank 0 often made the id) quotes it in its own error line.
 */
static pthread_mutex_t troubleLock = PTHREAD_MUTEX_INITIALIZER;
static char troubleRoot[SOCKET_ADDR_STRLEN];
static char troubleText[BOOT_TROUBLE_BYTES];

void rootTrouble(const char *rootName, const char *fmt, ...)
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

void rootTroubleQuote(const char *rootName, char *buf, size_t len)
{
    pthread_mutex_lock(&troubleLock);
    if (troubleText[0] && strcmp(troubleRoot, rootName) == 0)
        snprintf(buf, len, "; the root thread (in this process) reported: %s", troubleText);
    else
        buf[0] = '\0';
    pthread_mutex_unlock(&troubleLock);
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

/* LOOM_ROOT_ADDR's "host:port" or "[v6]:port" -> the address (resolved) and the port. */
static loomResult_t rootAddrParse(const char *text, union socketAddress *addr)
{
    char why[320];
    if (socketAddrParse(text, addr, why, sizeof(why)) != NULL)
        return loomSetError(loomInvalidArgument, "LOOM_ROOT_ADDR=%s%s", text, why);
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
