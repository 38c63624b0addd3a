/*
 * bootgather.c — accepting hellos from many connections at once, for the
 * root thread, a rank waiting for its ring predecessor, point-to-point
 * messages and the shrink meeting. Nobody waits on one connection: each
 * round polls them all, gives each HELLO_TIMEOUT_SEC to deliver a full
 * hello, and drops anything malformed, silent or without the secret; out of
 * descriptors, a silent connection gives its place to a new one.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bootint.h"
#include "debug.h"

/* ---- accepting hellos from many connections at once ---- */

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
        gatherDrop(g, c, errno == 0 ? "closed before a whole hello" : socketErrText(errno));
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
        if (tlsWrap(fd, 1, g->secret) != loomSuccess) {
            INFO(LOOM_BOOTSTRAP, "bootstrap %s: %s", g->owner, debugLastError(NULL));
            socketClose(fd);
            continue;
        }
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
void gatherRound(struct helloGather *g, int maxMs)
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

void gatherCloseAll(struct helloGather *g)
{
    for (int i = 0; i < g->nconns; i++)
        socketClose(g->conns[i].fd);
    g->nconns = 0;
}

struct helloGather *gatherOpen(const struct loomBootstrap *b, const char *owner, helloTakeFn take,
                               void *ctx)
{
    return gatherOpenAt(b->listenFd, b->secret, owner, take, ctx);
}

struct helloGather *gatherOpenAt(int listenFd, const uint8_t *secret, const char *owner,
                                 helloTakeFn take, void *ctx)
{
    struct helloGather *g = calloc(1, sizeof(*g));
    if (g == NULL)
        return NULL;
    g->listenFd = listenFd;
    g->secret = secret;
    g->owner = owner;
    g->take = take;
    g->ctx = ctx;
    return g;
}
