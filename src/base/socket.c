/*
 * socket.c — TCP sockets with deadlines and abort flags (see socket.h).
 *
 * Every socket is non-blocking from birth (SOCK_NONBLOCK | SOCK_CLOEXEC) and
 * every wait is poll() in slices of at most SOCKET_POLL_SLICE_MS, so the
 * caller's abort flag and deadline are looked at ten times a second however
 * the peer behaves. Sends use MSG_NOSIGNAL: a peer that vanished is an error
 * code, never a SIGPIPE that kills the process.
 *
 * Connecting retries refusals until the deadline, because in a rendezvous the
 * peer we were told about may simply not have reached listen() yet. A
 * connection to our own ephemeral port (TCP's simultaneous open, possible on
 * loopback while the peer is not listening) is treated as a refusal.
 */
#include "socket.h"

#include <arpa/inet.h>
#include <errno.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netdb.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "debug.h"
#include "param.h"
#include "tls.h"

#define NS_PER_SEC 1000000000ull
#define NS_PER_MS 1000000ull
/* First and longest pause between two connection attempts to a peer that refuses. */
#define CONNECT_BACKOFF_MIN_MS 10
#define CONNECT_BACKOFF_MAX_MS 100

uint64_t socketClockNs(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * NS_PER_SEC + (uint64_t)ts.tv_nsec;
}

uint64_t socketDeadline(double seconds)
{
    uint64_t now = socketClockNs();
    if (seconds <= 0)
        return now;
    return now + (uint64_t)(seconds * (double)NS_PER_SEC);
}

int socketPollMs(uint64_t deadlineNs)
{
    uint64_t now = socketClockNs();
    if (now >= deadlineNs)
        return 0;
    uint64_t ms = (deadlineNs - now + NS_PER_MS - 1) / NS_PER_MS;
    return ms < SOCKET_POLL_SLICE_MS ? (int)ms : SOCKET_POLL_SLICE_MS;
}

int socketAborted(atomic_int *abortFlag)
{
    return abortFlag != NULL && atomic_load_explicit(abortFlag, memory_order_acquire) != 0;
}

static socklen_t addrLen(const union socketAddress *addr)
{
    return addr->sa.sa_family == AF_INET6 ? sizeof(addr->sin6) : sizeof(addr->sin);
}

void socketAddrFormat(const union socketAddress *addr, char *buf, size_t len)
{
    char ip[INET6_ADDRSTRLEN];

    if (len == 0)
        return;
    if (addr->sa.sa_family == AF_INET) {
        inet_ntop(AF_INET, &addr->sin.sin_addr, ip, sizeof(ip));
        snprintf(buf, len, "%s:%u", ip, ntohs(addr->sin.sin_port));
    } else if (addr->sa.sa_family == AF_INET6) {
        inet_ntop(AF_INET6, &addr->sin6.sin6_addr, ip, sizeof(ip));
        snprintf(buf, len, "[%s]:%u", ip, ntohs(addr->sin6.sin6_port));
    } else {
        snprintf(buf, len, "?");
    }
}

void socketPeerFormat(int fd, char *buf, size_t len)
{
    union socketAddress peer;
    socklen_t plen = sizeof(peer);
    int saved = errno;

    memset(&peer, 0, sizeof(peer));
    if (getpeername(fd, &peer.sa, &plen) != 0)
        peer.sa.sa_family = AF_UNSPEC;
    socketAddrFormat(&peer, buf, len);
    errno = saved;
}

loomResult_t socketAddrFromBootstrap(const struct bootstrapAddr *in, union socketAddress *out)
{
    memset(out, 0, sizeof(*out));
    if (in->family == 4) {
        out->sin.sin_family = AF_INET;
        memcpy(&out->sin.sin_addr, in->ip, 4);
        out->sin.sin_port = htons(in->port);
    } else if (in->family == 6) {
        out->sin6.sin6_family = AF_INET6;
        memcpy(&out->sin6.sin6_addr, in->ip, 16);
        out->sin6.sin6_port = htons(in->port);
    } else {
        return loomInvalidArgument;
    }
    return loomSuccess;
}

loomResult_t socketAddrToBootstrap(const union socketAddress *in, struct bootstrapAddr *out)
{
    memset(out, 0, sizeof(*out));
    if (in->sa.sa_family == AF_INET) {
        out->family = 4;
        memcpy(out->ip, &in->sin.sin_addr, 4);
        out->port = ntohs(in->sin.sin_port);
    } else if (in->sa.sa_family == AF_INET6) {
        out->family = 6;
        memcpy(out->ip, &in->sin6.sin6_addr, 16);
        out->port = ntohs(in->sin6.sin6_port);
    } else {
        return loomInvalidArgument;
    }
    return loomSuccess;
}

int socketAddrEqual(const union socketAddress *a, const union socketAddress *b)
{
    if (a->sa.sa_family != b->sa.sa_family)
        return 0;
    if (a->sa.sa_family == AF_INET)
        return a->sin.sin_port == b->sin.sin_port &&
               a->sin.sin_addr.s_addr == b->sin.sin_addr.s_addr;
    if (a->sa.sa_family == AF_INET6)
        return a->sin6.sin6_port == b->sin6.sin6_port &&
               memcmp(&a->sin6.sin6_addr, &b->sin6.sin6_addr, sizeof(a->sin6.sin6_addr)) == 0;
    return 0;
}

/* ---- interface selection ---- */

int socketIfnameMatches(const char *spec, const char *ifname)
{
    int exclude = 0, exact = 0, found = 0;

    if (spec == NULL)
        return 1;
    while (*spec == ' ')
        spec++;
    if (*spec == '\0')
        return 1;
    if (*spec == '^') {
        exclude = 1;
        spec++;
    }
    if (*spec == '=') {
        exact = 1;
        spec++;
    }
    while (*spec != '\0') {
        size_t n = strcspn(spec, ",");
        const char *item = spec;
        size_t itemLen = n;
        while (itemLen > 0 && *item == ' ') {
            item++;
            itemLen--;
        }
        while (itemLen > 0 && item[itemLen - 1] == ' ')
            itemLen--;
        if (itemLen > 0 && strncmp(ifname, item, itemLen) == 0 &&
            (!exact || ifname[itemLen] == '\0'))
            found = 1;
        spec += n;
        if (*spec == ',')
            spec++;
    }
    return exclude ? !found : found;
}

/*
 * Lower is better: real interfaces, then docker bridges (up with an IPv4 address on many hosts,
 * yet unreachable from the others), then loopback; within each, IPv4 before IPv6.
 */
static int interfaceRank(const struct ifaddrs *ifa)
{
    int kind = (ifa->ifa_flags & IFF_LOOPBACK) ? 2 : (strncmp(ifa->ifa_name, "docker", 6) == 0);
    return kind * 2 + (ifa->ifa_addr->sa_family == AF_INET6);
}

static int interfaceUsable(const struct ifaddrs *ifa, const char *spec)
{
    if (ifa->ifa_addr == NULL || !(ifa->ifa_flags & IFF_UP))
        return 0;
    if (ifa->ifa_addr->sa_family == AF_INET6) {
        const struct sockaddr_in6 *s6 = (const struct sockaddr_in6 *)ifa->ifa_addr;
        if (IN6_IS_ADDR_LINKLOCAL(&s6->sin6_addr))
            return 0;
    } else if (ifa->ifa_addr->sa_family != AF_INET) {
        return 0;
    }
    return socketIfnameMatches(spec, ifa->ifa_name);
}

/* "lo, eth0, ib0 (down)": every interface name once, for error messages. */
static void interfaceList(const struct ifaddrs *list, char *buf, size_t len)
{
    size_t used = 0;

    buf[0] = '\0';
    for (const struct ifaddrs *ifa = list; ifa != NULL; ifa = ifa->ifa_next) {
        int seen = 0;
        for (const struct ifaddrs *p = list; p != ifa && !seen; p = p->ifa_next)
            seen = strcmp(p->ifa_name, ifa->ifa_name) == 0;
        if (seen || used >= len)
            continue;
        int n = snprintf(buf + used, len - used, "%s%s%s", used ? ", " : "", ifa->ifa_name,
                         (ifa->ifa_flags & IFF_UP) ? "" : " (down)");
        used += n > 0 ? (size_t)n : 0;
    }
    if (used == 0)
        snprintf(buf, len, "none");
}

loomResult_t socketFindInterfaceSpec(const char *spec, union socketAddress *addr, char *ifname,
                                     size_t ifnameLen)
{
    struct ifaddrs *list, *best = NULL;

    if (getifaddrs(&list) != 0)
        return loomSetError(loomSystemError, "socket: getifaddrs: %s", debugErrnoText(errno));
    for (struct ifaddrs *ifa = list; ifa != NULL; ifa = ifa->ifa_next) {
        if (!interfaceUsable(ifa, spec))
            continue;
        if (best == NULL || interfaceRank(ifa) < interfaceRank(best))
            best = ifa;
    }
    if (best == NULL) {
        char names[512];
        interfaceList(list, names, sizeof(names));
        freeifaddrs(list);
        if (spec != NULL && spec[0] != '\0')
            return loomSetError(loomInvalidArgument,
                                "LOOM_SOCKET_IFNAME=%s matches no interface that is up with an IP "
                                "address; this host has: %s",
                                spec, names);
        return loomSetError(loomSystemError,
                            "socket: no network interface is up with an IP address; this host "
                            "has: %s",
                            names);
    }
    memset(addr, 0, sizeof(*addr));
    if (best->ifa_addr->sa_family == AF_INET) {
        addr->sin.sin_family = AF_INET;
        addr->sin.sin_addr = ((const struct sockaddr_in *)best->ifa_addr)->sin_addr;
    } else {
        addr->sin6.sin6_family = AF_INET6;
        addr->sin6.sin6_addr = ((const struct sockaddr_in6 *)best->ifa_addr)->sin6_addr;
    }
    if (ifname != NULL && ifnameLen > 0)
        snprintf(ifname, ifnameLen, "%s", best->ifa_name);
    freeifaddrs(list);
    return loomSuccess;
}

/* Sorts rails by interface name, so that rail r is the same network on every host. */
static int railCompare(const void *a, const void *b)
{
    return strcmp(((const struct socketRail *)a)->ifname, ((const struct socketRail *)b)->ifname);
}

int socketFindRails(const char *spec, struct socketRail *rails, int max)
{
    struct ifaddrs *list;
    int n = 0, bestKind = 3;

    if (spec == NULL || spec[0] == '\0' || getifaddrs(&list) != 0)
        return 0;
    /* Only interfaces of the best kind (interfaceRank without the family): "^docker" on a host
     * with eth0, eth1 and lo gives two rails, not three. */
    for (struct ifaddrs *ifa = list; ifa != NULL; ifa = ifa->ifa_next)
        if (interfaceUsable(ifa, spec) && interfaceRank(ifa) / 2 < bestKind)
            bestKind = interfaceRank(ifa) / 2;
    for (struct ifaddrs *ifa = list; ifa != NULL; ifa = ifa->ifa_next) {
        if (!interfaceUsable(ifa, spec) || interfaceRank(ifa) / 2 != bestKind)
            continue;
        int have = -1;
        for (int i = 0; i < n && have < 0; i++)
            have = strcmp(rails[i].ifname, ifa->ifa_name) == 0 ? i : -1;
        if (have < 0 && n == max)
            continue;
        if (have >= 0 && interfaceRank(ifa) >= rails[have].rank)
            continue; /* one address an interface: IPv4 before IPv6 */
        struct socketRail *r = &rails[have >= 0 ? have : n++];
        memset(&r->addr, 0, sizeof(r->addr));
        memcpy(&r->addr, ifa->ifa_addr,
               ifa->ifa_addr->sa_family == AF_INET ? sizeof(r->addr.sin) : sizeof(r->addr.sin6));
        snprintf(r->ifname, sizeof(r->ifname), "%s", ifa->ifa_name);
        r->rank = interfaceRank(ifa);
    }
    freeifaddrs(list);
    qsort(rails, (size_t)n, sizeof(*rails), railCompare);
    return n;
}

int socketInterfaceUp(const char *ifname)
{
    struct ifaddrs *list;
    int up = 0;

    if (getifaddrs(&list) != 0)
        return 1; /* cannot tell: assume it is */
    for (struct ifaddrs *ifa = list; ifa != NULL && !up; ifa = ifa->ifa_next)
        up = strcmp(ifa->ifa_name, ifname) == 0 && (ifa->ifa_flags & IFF_UP) &&
             (ifa->ifa_flags & IFF_RUNNING);
    freeifaddrs(list);
    return up;
}

loomResult_t socketFindInterface(union socketAddress *addr, char *ifname, size_t ifnameLen)
{
    return socketFindInterfaceSpec(paramStr(LOOM_PARAM_SOCKET_IFNAME), addr, ifname, ifnameLen);
}

/* ---- listen, connect, accept ---- */

static void setNoDelay(int fd)
{
    int one = 1;
    /* Bootstrap and transport messages are small and latency-bound; Nagle only delays them. */
    (void)setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

loomResult_t socketListen(const union socketAddress *addr, int *fd, union socketAddress *bound)
{
    char name[SOCKET_ADDR_STRLEN];
    int one = 1;
    socklen_t blen = sizeof(*bound);

    socketAddrFormat(addr, name, sizeof(name));
    int s = socket(addr->sa.sa_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (s < 0)
        return loomSetError(loomSystemError, "socket: socket() for %s: %s", name,
                            debugErrnoText(errno));
    if (setsockopt(s, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) != 0)
        goto fail_close;
    if (bind(s, &addr->sa, addrLen(addr)) != 0)
        goto fail_close;
    if (listen(s, SOMAXCONN) != 0)
        goto fail_close;
    memset(bound, 0, sizeof(*bound));
    if (getsockname(s, &bound->sa, &blen) != 0)
        goto fail_close;
    *fd = s;
    return loomSuccess;

fail_close:;
    int err = errno;
    close(s);
    return loomSetError(loomSystemError, "socket: cannot listen on %s: %s", name,
                        debugErrnoText(err));
}

/* A refusal or a transient network hiccup: the peer may come up before the deadline. */
static int connectRetryable(int err)
{
    return err == ECONNREFUSED || err == ECONNRESET || err == ETIMEDOUT || err == EHOSTUNREACH ||
           err == EAGAIN || err == EADDRNOTAVAIL || err == EINTR || err == ECONNABORTED;
}

/* 1 if fd is connected to itself (simultaneous open onto our own ephemeral port). */
static int selfConnected(int fd)
{
    union socketAddress me, peer;
    socklen_t mlen = sizeof(me), plen = sizeof(peer);

    memset(&me, 0, sizeof(me));
    memset(&peer, 0, sizeof(peer));
    if (getsockname(fd, &me.sa, &mlen) != 0 || getpeername(fd, &peer.sa, &plen) != 0)
        return 0;
    return socketAddrEqual(&me, &peer);
}

/* One connection attempt. Returns 0 with *fd set, or the errno-style reason it failed
 * (ECANCELED: aborted, ETIMEDOUT: deadline). */
static int connectOnce(const union socketAddress *from, const union socketAddress *addr,
                       uint64_t deadlineNs, atomic_int *abortFlag, int *fd)
{
    int s = socket(addr->sa.sa_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (s < 0)
        return errno;
    int err = 0;
    if (from != NULL && bind(s, &from->sa, addrLen(from)) != 0) {
        err = errno;
        close(s);
        return err;
    }
    if (connect(s, &addr->sa, addrLen(addr)) != 0) {
        err = errno;
        while (err == EINPROGRESS || err == EALREADY || err == EINTR) {
            if (socketAborted(abortFlag)) {
                err = ECANCELED;
                break;
            }
            int ms = socketPollMs(deadlineNs);
            if (ms == 0) {
                err = ETIMEDOUT;
                break;
            }
            struct pollfd p = {.fd = s, .events = POLLOUT};
            int n = poll(&p, 1, ms);
            if (n < 0 && errno != EINTR) {
                err = errno;
                break;
            }
            if (n > 0) {
                socklen_t elen = sizeof(err);
                if (getsockopt(s, SOL_SOCKET, SO_ERROR, &err, &elen) != 0)
                    err = errno;
                break;
            }
        }
    }
    if (err == 0 && selfConnected(s))
        err = ECONNREFUSED;
    if (err != 0) {
        close(s);
        return err;
    }
    setNoDelay(s);
    *fd = s;
    return 0;
}

int socketConnectOnce(const union socketAddress *addr, uint64_t deadlineNs, atomic_int *abortFlag,
                      int *fd)
{
    return connectOnce(NULL, addr, deadlineNs, abortFlag, fd);
}

static loomResult_t connectFailed(const union socketAddress *addr, int err, int lastErr,
                                  const char *who)
{
    char name[SOCKET_ADDR_STRLEN];

    if (who == NULL) {
        errno = err;
        return err == ETIMEDOUT ? loomTimeout
                                : (err == ECANCELED ? loomRemoteError : loomSystemError);
    }
    socketAddrFormat(addr, name, sizeof(name));
    if (err == ECANCELED)
        return loomSetError(loomRemoteError, "%s: aborted while connecting to %s", who, name);
    if (err == ETIMEDOUT)
        return loomSetError(loomTimeout, "%s: could not connect to %s before the deadline (%s)",
                            who, name, lastErr ? debugErrnoText(lastErr) : "no answer");
    return loomSetError(loomSystemError, "%s: cannot connect to %s: %s", who, name,
                        debugErrnoText(err));
}

/*
 * socketConnect and socketConnectListener: attempts with backoff until one
 * succeeds, the deadline passes, an abort, or an error retrying cannot fix.
 * refusedFinal makes a refusal such an error.
 */
static int connectRetrying(const union socketAddress *from, const union socketAddress *addr,
                           uint64_t deadlineNs, atomic_int *abortFlag, int refusedFinal,
                           int *lastErr, int *fd)
{
    int backoffMs = CONNECT_BACKOFF_MIN_MS;

    *lastErr = 0;
    for (;;) {
        if (socketAborted(abortFlag))
            return ECANCELED;
        if (socketClockNs() >= deadlineNs)
            return ETIMEDOUT;
        int err = connectOnce(from, addr, deadlineNs, abortFlag, fd);
        if (err == 0 || err == ECANCELED || !connectRetryable(err) ||
            (refusedFinal && err == ECONNREFUSED))
            return err;
        if (err != ETIMEDOUT)
            *lastErr = err;
        int ms = socketPollMs(deadlineNs);
        poll(NULL, 0, ms < backoffMs ? ms : backoffMs);
        backoffMs = backoffMs * 2 > CONNECT_BACKOFF_MAX_MS ? CONNECT_BACKOFF_MAX_MS : backoffMs * 2;
    }
}

loomResult_t socketConnect(const union socketAddress *addr, uint64_t deadlineNs,
                           atomic_int *abortFlag, const char *who, int *fd)
{
    int lastErr;
    int err = connectRetrying(NULL, addr, deadlineNs, abortFlag, 0, &lastErr, fd);

    return err == 0 ? loomSuccess : connectFailed(addr, err, lastErr, who);
}

loomResult_t socketConnectListener(const union socketAddress *addr, uint64_t deadlineNs,
                                   atomic_int *abortFlag, const char *who, int *fd)
{
    return socketConnectListenerFrom(NULL, addr, deadlineNs, abortFlag, who, fd);
}

loomResult_t socketConnectListenerFrom(const union socketAddress *from,
                                       const union socketAddress *addr, uint64_t deadlineNs,
                                       atomic_int *abortFlag, const char *who, int *fd)
{
    char name[SOCKET_ADDR_STRLEN];
    int lastErr;
    int err = connectRetrying(from, addr, deadlineNs, abortFlag, 1, &lastErr, fd);

    if (err != ECONNREFUSED)
        return err == 0 ? loomSuccess : connectFailed(addr, err, lastErr, who);
    socketAddrFormat(addr, name, sizeof(name));
    return loomSetError(loomRemoteError,
                        "%s: refused by %s: it has exited or left the communicator", who, name);
}

loomResult_t socketTryAccept(int listenFd, int *fd, union socketAddress *peer)
{
    union socketAddress from;

    *fd = -1;
    for (;;) {
        socklen_t flen = sizeof(from);
        memset(&from, 0, sizeof(from));
        int s = accept4(listenFd, &from.sa, &flen, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (s >= 0) {
            setNoDelay(s);
            if (peer != NULL)
                *peer = from;
            *fd = s;
            return loomSuccess;
        }
        switch (errno) {
        case EINTR:
        case ECONNABORTED:
            continue; /* that connection died in the queue; look at the next */
        case EAGAIN:
#if EWOULDBLOCK != EAGAIN
        case EWOULDBLOCK:
#endif
        /* Linux hands the new socket's pending network errors to accept(): not ours to fail on. */
        case EPROTO:
        case ENOPROTOOPT:
        case EHOSTDOWN:
        case ENONET:
        case EHOSTUNREACH:
        case EOPNOTSUPP:
        case ENETUNREACH:
        case ENETDOWN:
            return loomSuccess;
        default:
            return loomSystemError;
        }
    }
}

loomResult_t socketAccept(int listenFd, uint64_t deadlineNs, atomic_int *abortFlag, const char *who,
                          int *fd, union socketAddress *peer)
{
    for (;;) {
        int s;
        if (socketTryAccept(listenFd, &s, peer) != loomSuccess) {
            if (who == NULL)
                return loomSystemError;
            return loomSetError(loomSystemError, "%s: accept: %s", who, debugErrnoText(errno));
        }
        if (s >= 0) {
            *fd = s;
            return loomSuccess;
        }
        if (socketAborted(abortFlag)) {
            errno = ECANCELED;
            return who ? loomSetError(loomRemoteError, "%s: aborted while waiting for a connection",
                                      who)
                       : loomRemoteError;
        }
        int ms = socketPollMs(deadlineNs);
        if (ms == 0) {
            errno = ETIMEDOUT;
            return who ? loomSetError(loomTimeout, "%s: no connection before the deadline", who)
                       : loomTimeout;
        }
        struct pollfd p = {.fd = listenFd, .events = POLLIN};
        poll(&p, 1, ms);
    }
}

/* ---- data ---- */

loomResult_t socketTrySend(int fd, const void *buf, size_t len, size_t *done)
{
    while (*done < len) {
        ssize_t n = tlsSend(fd, (const char *)buf + *done, len - *done);
        if (n > 0) {
            *done += (size_t)n;
            continue;
        }
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            return loomSuccess;
        if (n == 0)
            errno = 0;
        return loomRemoteError;
    }
    return loomSuccess;
}

loomResult_t socketTryRecv(int fd, void *buf, size_t len, size_t *done)
{
    while (*done < len) {
        ssize_t n = tlsRecv(fd, (char *)buf + *done, len - *done);
        if (n > 0) {
            *done += (size_t)n;
            continue;
        }
        if (n == 0) {
            errno = 0; /* orderly close by the peer */
            return loomRemoteError;
        }
        if (errno == EINTR)
            continue;
        if (errno == EAGAIN || errno == EWOULDBLOCK)
            return loomSuccess;
        return loomRemoteError;
    }
    return loomSuccess;
}

static loomResult_t transferFailed(int fd, int cause, int sending, size_t done, size_t len,
                                   const char *who)
{
    char peer[SOCKET_ADDR_STRLEN];
    const char *verb = sending ? "sent" : "received";
    loomResult_t res = cause == ETIMEDOUT ? loomTimeout : loomRemoteError;

    if (who == NULL) {
        errno = cause;
        return res;
    }
    socketPeerFormat(fd, peer, sizeof(peer));
    if (cause == ECANCELED)
        return loomSetError(res, "%s: aborted with %zu of %zu bytes %s (peer %s)", who, done, len,
                            verb, peer);
    if (cause == ETIMEDOUT)
        return loomSetError(res, "%s: timed out with %zu of %zu bytes %s (peer %s)", who, done, len,
                            verb, peer);
    if (cause == 0)
        return loomSetError(res, "%s: connection closed by the peer %s with %zu of %zu bytes %s",
                            who, peer, done, len, verb);
    return loomSetError(res, "%s: %s (peer %s) with %zu of %zu bytes %s", who, socketErrText(cause),
                        peer, done, len, verb);
}

static loomResult_t transferAll(int fd, void *buf, size_t len, int sending, uint64_t deadlineNs,
                                atomic_int *abortFlag, const char *who)
{
    size_t done = 0;

    for (;;) {
        loomResult_t res =
            sending ? socketTrySend(fd, buf, len, &done) : socketTryRecv(fd, buf, len, &done);
        if (res != loomSuccess)
            return transferFailed(fd, errno, sending, done, len, who);
        if (done == len)
            return loomSuccess;
        if (socketAborted(abortFlag))
            return transferFailed(fd, ECANCELED, sending, done, len, who);
        int ms = socketPollMs(deadlineNs);
        if (ms == 0)
            return transferFailed(fd, ETIMEDOUT, sending, done, len, who);
        struct pollfd p = {.fd = fd, .events = sending ? POLLOUT : POLLIN};
        if (poll(&p, 1, ms) < 0 && errno != EINTR)
            return transferFailed(fd, errno, sending, done, len, who);
    }
}

loomResult_t socketSendAll(int fd, const void *buf, size_t len, uint64_t deadlineNs,
                           atomic_int *abortFlag, const char *who)
{
    return transferAll(fd, (void *)buf, len, 1, deadlineNs, abortFlag, who);
}

loomResult_t socketRecvAll(int fd, void *buf, size_t len, uint64_t deadlineNs,
                           atomic_int *abortFlag, const char *who)
{
    return transferAll(fd, buf, len, 0, deadlineNs, abortFlag, who);
}

void socketClose(int fd)
{
    if (fd >= 0) {
        int saved = errno;
        if (!tlsClose(fd)) /* else TLS's thread closes it once its last bytes are out */
            close(fd);
        errno = saved;
    }
}

const char *socketErrText(int err)
{
    if ((err == EKEYREJECTED || err == EPROTO) && tlsFailure()[0] != '\0')
        return tlsFailure();
    return debugErrnoText(err);
}

const char *socketAddrParse(const char *text, union socketAddress *addr, char *why, size_t len)
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
        port > 65535) {
        snprintf(why, len, " is not host:port (e.g. 10.0.0.1:29500 or node01:29500)");
        return why;
    }
    memcpy(host, h, hlen);
    host[hlen] = '\0';
    struct addrinfo hints = {.ai_socktype = SOCK_STREAM}, *list = NULL, *best = NULL;
    int err = getaddrinfo(host, NULL, &hints, &list);
    if (err != 0) {
        snprintf(why, len, ": cannot resolve %s: %s", host, gai_strerror(err));
        return why;
    }
    for (struct addrinfo *ai = list; ai != NULL; ai = ai->ai_next)
        if ((ai->ai_family == AF_INET || ai->ai_family == AF_INET6) &&
            (best == NULL || (best->ai_family == AF_INET6 && ai->ai_family == AF_INET)))
            best = ai; /* IPv4 first, as socketFindInterface does */
    if (best == NULL) {
        freeaddrinfo(list);
        snprintf(why, len, ": %s has no IP address", host);
        return why;
    }
    memset(addr, 0, sizeof(*addr));
    memcpy(addr, best->ai_addr, best->ai_addrlen);
    freeaddrinfo(list);
    if (addr->sa.sa_family == AF_INET)
        addr->sin.sin_port = htons((uint16_t)port);
    else
        addr->sin6.sin6_port = htons((uint16_t)port);
    return NULL;
}
