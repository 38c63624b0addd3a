/*
 * bootstatus.c — a rank's status listener, and the query loom-info sends it
 * (see bootstrap.h): what lets `loom-info --status HOST:PORT` read the flight
 * recorder of a rank on another host.
 *
 * The listener is a socket of its own (the bootstrap's listening socket
 * belongs to the thread that calls the communicator: point-to-point
 * messages and the shrink meeting accept there), served by a thread of its
 * own that sleeps in poll() until someone connects: the call path never sees
 * it. A query is a connection like every other between hosts: TLS with the
 * job's key under LOOM_NET_TLS=1, then a hello with the job's secret, read
 * and judged by the same code as the bootstrap's (bootgather.c), so a
 * stranger or a wrong secret is dropped with an INFO line and the rank goes
 * on. The hello of a query says rank 0 of 1 and the address it asked;
 * nothing else is checked. The answer is
 *
 *   "LMST"(4) version(4) length(8) then `length` bytes
 *
 * whatever the owner's answer function gave (the recorder: recorder.h),
 * and the rank closes the connection.
 */
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "bootint.h"
#include "debug.h"
#include "wire.h"

#define STATUS_MAGIC 0x4c4d5354u /* "LMST" */
#define STATUS_VERSION 1
#define STATUS_HEADER_BYTES 16
#define STATUS_MAX_BYTES ((uint64_t)1 << 30)
/* After a connection ended, the thread naps this long before it looks again: a listening
 * socket that stays readable (accept failing for want of descriptors) costs no CPU. */
#define STATUS_NAP_MS 10

struct bootstrapStatus {
    int listenFd;
    int wakeFd; /* eventfd: bootstrapStatusClose wakes the thread */
    int started;
    atomic_int stop;
    pthread_t thread;
    struct helloGather *gather;
    uint8_t secret[BOOTSTRAP_SECRET_BYTES];
    bootstrapStatusAnswer answer;
    void *ctx;
};

struct bootstrapStatus *bootstrapStatusOpen(struct bootstrapAddr *addr)
{
    union socketAddress local, bound;
    struct bootstrapStatus *s = calloc(1, sizeof(*s));
    if (s == NULL)
        return NULL;
    s->listenFd = s->wakeFd = -1;
    if (socketFindInterface(&local, NULL, 0) != loomSuccess ||
        socketListen(&local, &s->listenFd, &bound) != loomSuccess ||
        socketAddrToBootstrap(&bound, addr) != loomSuccess) {
        INFO(LOOM_INIT, "no status listener: %s", debugLastError(NULL));
        bootstrapStatusClose(s);
        return NULL;
    }
    return s;
}

/* A hello with the secret came: answer it and hang up (a query is one answer). */
static const char *statusTake(void *ctx, const struct bootstrapHello *h, int fd,
                              const union socketAddress *peer)
{
    struct bootstrapStatus *s = ctx;
    uint8_t hdr[STATUS_HEADER_BYTES];
    size_t bytes = 0;
    char from[SOCKET_ADDR_STRLEN];
    (void)h;
    void *body = s->answer(s->ctx, &bytes);
    if (body == NULL)
        return "out of memory for the answer";
    wirePut32(hdr, STATUS_MAGIC);
    wirePut32(hdr + 4, STATUS_VERSION);
    wirePut64(hdr + 8, bytes);
    uint64_t deadline = socketDeadline(HELLO_TIMEOUT_SEC);
    loomResult_t res = socketSendAll(fd, hdr, sizeof(hdr), deadline, &s->stop, NULL);
    if (res == loomSuccess)
        res = socketSendAll(fd, body, bytes, deadline, &s->stop, NULL);
    free(body);
    socketAddrFormat(peer, from, sizeof(from));
    INFO(LOOM_INIT, "status: %s the recorder to %s", res == loomSuccess ? "sent" : "could not send",
         from);
    socketClose(fd);
    return NULL;
}

static void *statusMain(void *arg)
{
    struct bootstrapStatus *s = arg;
    while (!atomic_load_explicit(&s->stop, memory_order_acquire)) {
        if (s->gather->nconns == 0) {
            struct pollfd p[2] = {{.fd = s->listenFd, .events = POLLIN},
                                  {.fd = s->wakeFd, .events = POLLIN}};
            poll(p, 2, -1);
            if (atomic_load_explicit(&s->stop, memory_order_acquire))
                break;
        }
        gatherRound(s->gather, SOCKET_POLL_SLICE_MS);
        if (s->gather->nconns == 0)
            poll(NULL, 0, STATUS_NAP_MS);
    }
    return NULL;
}

loomResult_t bootstrapStatusStart(struct bootstrapStatus *s, const uint8_t *secret,
                                  bootstrapStatusAnswer answer, void *ctx)
{
    sigset_t all, old;
    memcpy(s->secret, secret, sizeof(s->secret));
    s->answer = answer;
    s->ctx = ctx;
    s->gather = gatherOpenAt(s->listenFd, s->secret, "status", statusTake, s);
    s->wakeFd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (s->gather == NULL || s->wakeFd < 0)
        return loomSetError(loomSystemError, "status listener: %s",
                            s->gather == NULL ? "out of memory" : debugErrnoText(errno));
    /* The thread takes no signal: they belong to the application's threads. */
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    int err = pthread_create(&s->thread, NULL, statusMain, s);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (err != 0)
        return loomSetError(loomSystemError, "cannot start the status listener's thread: %s",
                            debugErrnoText(err));
    pthread_setname_np(s->thread, "loom-status");
    s->started = 1;
    return loomSuccess;
}

void bootstrapStatusClose(struct bootstrapStatus *s)
{
    if (s == NULL)
        return;
    if (s->started) {
        atomic_store_explicit(&s->stop, 1, memory_order_release);
        uint64_t one = 1;
        ssize_t ignored = write(s->wakeFd, &one, sizeof(one));
        (void)ignored;
        pthread_join(s->thread, NULL);
    }
    if (s->gather != NULL) {
        gatherCloseAll(s->gather);
        free(s->gather);
    }
    if (s->wakeFd >= 0)
        close(s->wakeFd);
    socketClose(s->listenFd);
    free(s);
}

/* ---- the query (loom-info's side) ---- */

/* Why the connection ended before an answer (errno err), as one line. */
static loomResult_t queryRefused(const char *where, int err)
{
    if (err == ETIMEDOUT)
        return loomSetError(loomTimeout,
                            "the rank at %s did not answer in time (its process is stopped, or "
                            "its host is unreachable or overloaded)",
                            where);
    if (err == 0 || err == ECONNRESET || err == EPIPE)
        return loomSetError(loomRemoteError,
                            "the rank at %s refused the query: the secret is not its job's, or "
                            "LOOM_NET_TLS differs from the job's (it is %d here)",
                            where, tlsWanted());
    return loomSetError(loomRemoteError, "the rank at %s refused the query: %s", where,
                        socketErrText(err));
}

loomResult_t bootstrapStatusQuery(const union socketAddress *addr, const uint8_t *secret,
                                  uint64_t deadline, void **reply, size_t *bytes)
{
    char where[SOCKET_ADDR_STRLEN];
    uint8_t hello[BOOTSTRAP_HELLO_BYTES], hdr[STATUS_HEADER_BYTES];
    struct bootstrapHello h = {.rank = 0, .nranks = 1};
    int fd = -1;
    socketAddrFormat(addr, where, sizeof(where));
    memcpy(h.secret, secret, sizeof(h.secret));
    if (socketAddrToBootstrap(addr, &h.addr) != loomSuccess ||
        bootstrapEncodeHello(&h, hello, sizeof(hello)) != sizeof(hello))
        return loomSetError(loomInvalidArgument, "status query: %s is not an IPv4 or IPv6 address",
                            where);
    int err = socketConnectOnce(addr, deadline, NULL, &fd);
    if (err == ECONNREFUSED)
        return loomSetError(loomRemoteError,
                            "nothing listens at %s (the rank has exited, or destroyed its "
                            "communicator)",
                            where);
    if (err != 0)
        return err == ETIMEDOUT ? queryRefused(where, err)
                                : loomSetError(loomSystemError, "cannot connect to %s: %s", where,
                                               debugErrnoText(err));
    loomResult_t res = tlsWrap(fd, 0, secret);
    if (res != loomSuccess) {
        socketClose(fd);
        return res;
    }
    if (socketSendAll(fd, hello, sizeof(hello), deadline, NULL, NULL) != loomSuccess ||
        socketRecvAll(fd, hdr, sizeof(hdr), deadline, NULL, NULL) != loomSuccess) {
        res = queryRefused(where, errno);
        socketClose(fd);
        return res;
    }
    uint64_t len = wireGet64(hdr + 8);
    if (wireGet32(hdr) != STATUS_MAGIC || wireGet32(hdr + 4) != STATUS_VERSION ||
        len > STATUS_MAX_BYTES) {
        socketClose(fd);
        return loomSetError(loomRemoteError,
                            "%s answered something that is not a Loom status (another program, "
                            "or another version of Loom)",
                            where);
    }
    void *body = malloc(len ? len : 1);
    if (body == NULL) {
        socketClose(fd);
        return loomSetError(loomSystemError, "out of memory for the status of %s", where);
    }
    if (socketRecvAll(fd, body, len, deadline, NULL, NULL) != loomSuccess) {
        res = queryRefused(where, errno);
        free(body);
        socketClose(fd);
        return res;
    }
    socketClose(fd);
    *reply = body;
    *bytes = len;
    return loomSuccess;
}

/* ---- loomStatusQuery (loom.h) ---- */

static int hexDigit(int c)
{
    return c >= '0' && c <= '9'   ? c - '0'
           : c >= 'a' && c <= 'f' ? c - 'a' + 10
           : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                  : -1;
}

/* bytes bytes from exactly 2 * bytes hex digits; -1 if text is not that. */
static int hexDecode(const char *text, uint8_t *out, size_t bytes)
{
    if (strlen(text) != 2 * bytes)
        return -1;
    for (size_t i = 0; i < bytes; i++) {
        int hi = hexDigit(text[2 * i]), lo = hexDigit(text[2 * i + 1]);
        if (hi < 0 || lo < 0)
            return -1;
        out[i] = (uint8_t)(hi << 4 | lo);
    }
    return 0;
}

/* The job's secret from 64 hex digits (itself) or 256 (the unique id, as loomrun passes it). */
static loomResult_t secretParse(const char *text, uint8_t *secret)
{
    loomUniqueId id;
    struct bootstrapId bid;
    int kind;
    if (hexDecode(text, secret, BOOTSTRAP_SECRET_BYTES) == 0)
        return loomSuccess;
    if (hexDecode(text, (uint8_t *)id.internal, sizeof(id.internal)) == 0 &&
        bootwireIdDecodeKind(&id, &kind, &bid) == NULL) {
        memcpy(secret, bid.secret, BOOTSTRAP_SECRET_BYTES);
        return loomSuccess;
    }
    return loomSetError(loomInvalidArgument,
                        "loomStatusQuery: the secret is neither %d hex digits (as loom-info "
                        "--status PID prints it) nor the job's unique id in %d hex digits (as "
                        "loomrun sets LOOM_UNIQUE_ID)",
                        2 * BOOTSTRAP_SECRET_BYTES, 2 * LOOM_UNIQUE_ID_BYTES);
}

loomResult_t loomStatusQuery(const char *address, const char *secret, int timeoutMs, void **reply,
                             size_t *bytes)
{
    union socketAddress addr;
    uint8_t key[BOOTSTRAP_SECRET_BYTES];
    char why[320];
    if (address == NULL || secret == NULL || reply == NULL || bytes == NULL || timeoutMs < 1)
        return loomSetError(loomInvalidArgument, "loomStatusQuery: %s",
                            timeoutMs < 1 ? "timeoutMs must be at least 1"
                                          : "address, secret, reply and bytes must not be NULL");
    if (socketAddrParse(address, &addr, why, sizeof(why)) != NULL)
        return loomSetError(loomInvalidArgument, "loomStatusQuery: %s%s", address, why);
    LOOMCHECK(secretParse(secret, key));
    return bootstrapStatusQuery(&addr, key, socketDeadline(timeoutMs / 1000.0), reply, bytes);
}
