/*
 * socket.h — TCP sockets with deadlines, for the bootstrap and the TCP transport.
 *
 * Loom never blocks in a socket call: every socket this module hands out is
 * non-blocking and close-on-exec, and every wait is a poll() of at most
 * 100 ms, after which the caller's abort flag and its deadline are checked.
 * So a dead peer, a stalled network or loomCommAbort() ends a wait in bounded
 * time, with loomRemoteError or loomTimeout and a line saying who and what.
 *
 * Deadlines are absolute times on CLOCK_MONOTONIC, in nanoseconds
 * (socketClockNs, socketDeadline), so one deadline can bound a sequence of
 * calls. Abort flags are atomic_int pointers that may be NULL (no abort).
 *
 * Error reporting: the functions that wait take `who`, a phrase naming the
 * operation and the peer ("bootstrap: rank 2 sending its hello to the root");
 * they record "<who>: <what happened> (<peer address>)" with loomSetError. A
 * NULL `who` makes them quiet: nothing is recorded and errno says why
 * (0: the peer closed the connection, ETIMEDOUT: the deadline passed,
 * ECANCELED: the abort flag was set, else the system error). The Try
 * functions never wait and are always quiet: they are the building blocks of
 * callers that poll many sockets at once and decide themselves whether a
 * failed connection is an error (a stranger hanging up is not).
 *
 * Interface selection follows NCCL's NCCL_SOCKET_IFNAME syntax in
 * LOOM_SOCKET_IFNAME: a comma-separated list of name prefixes ("eth,ib");
 * a leading '^' excludes instead ("^docker,lo"); a '=' (after the optional
 * '^') makes the names exact ("=eth0", "^=eth0"). Among the interfaces that
 * are up and pass the filter, the first wins in this order: not loopback and
 * not docker*, then docker* (a bridge other hosts cannot reach), then
 * loopback; IPv4 before IPv6 within each. So unset means "the first real
 * interface, loopback only when nothing else is up". IPv6 link-local
 * addresses are never chosen: their scope is local to one host, so they
 * cannot be handed to peers.
 */
#ifndef LOOM_SOCKET_H_
#define LOOM_SOCKET_H_

#include <netinet/in.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#include "loom.h"

/* Any address this module deals in: IPv4 or IPv6, with a port. */
union socketAddress {
    struct sockaddr sa;
    struct sockaddr_in sin;
    struct sockaddr_in6 sin6;
};

/* Room for "[v6 address]:port" and its terminating NUL. */
#define SOCKET_ADDR_STRLEN (INET6_ADDRSTRLEN + 8)
/* Longest wait between two checks of the abort flag and the deadline. */
#define SOCKET_POLL_SLICE_MS 100

/* The wire form of an address (bootstrap messages, unique ids): fixed layout, IPv4 or IPv6. */
struct bootstrapAddr {
    uint8_t family; /* 4 or 6 */
    uint8_t ip[16]; /* IPv4 in the first 4 bytes */
    uint16_t port;  /* host order */
};

/* Now on CLOCK_MONOTONIC, in nanoseconds. */
uint64_t socketClockNs(void);
/* The deadline `seconds` from now (seconds <= 0: now). */
uint64_t socketDeadline(double seconds);
/* Milliseconds to poll before the next check: min(SOCKET_POLL_SLICE_MS, time to deadline). */
int socketPollMs(uint64_t deadlineNs);
/* 1 if abortFlag is non-NULL and set. */
int socketAborted(atomic_int *abortFlag);

/* Writes "a.b.c.d:port" or "[v6]:port" into buf (always NUL-terminated). */
void socketAddrFormat(const union socketAddress *addr, char *buf, size_t len);
/* Address of the peer of a connected socket, formatted ("?" if unknown). */
void socketPeerFormat(int fd, char *buf, size_t len);
/* Converts between the wire form and sockaddr. Returns loomInvalidArgument (quietly) for a
 * family other than IPv4/IPv6. */
loomResult_t socketAddrFromBootstrap(const struct bootstrapAddr *in, union socketAddress *out);
loomResult_t socketAddrToBootstrap(const union socketAddress *in, struct bootstrapAddr *out);
/*
 * "host:port" or "[v6]:port" (host a name or an address, resolved, IPv4
 * first as socketFindInterface) into *addr. NULL, or why not written into
 * why: the end of a sentence that begins with the text (" is not
 * host:port ...", ": cannot resolve ...").
 */
const char *socketAddrParse(const char *text, union socketAddress *addr, char *why, size_t len);
/* 1 if a and b are the same family, address and port. */
int socketAddrEqual(const union socketAddress *a, const union socketAddress *b);

/* 1 if interface `ifname` passes the LOOM_SOCKET_IFNAME-style `spec` (NULL or "": all pass). */
int socketIfnameMatches(const char *spec, const char *ifname);
/*
 * Chooses the interface to listen on, by LOOM_SOCKET_IFNAME (see above).
 * Stores its address with port 0 in *addr and its name in ifname (may be
 * NULL). Returns loomInvalidArgument when LOOM_SOCKET_IFNAME matches no
 * usable interface (the message lists the interfaces this host has), or
 * loomSystemError when no interface is up with an IP address at all.
 */
loomResult_t socketFindInterface(union socketAddress *addr, char *ifname, size_t ifnameLen);
/* As socketFindInterface with an explicit spec instead of LOOM_SOCKET_IFNAME. */
loomResult_t socketFindInterfaceSpec(const char *spec, union socketAddress *addr, char *ifname,
                                     size_t ifnameLen);

/*
 * Rails: every interface LOOM_SOCKET_IFNAME-style `spec` matches, for
 * striping over several links. Fills rails[0..max-1] with one address each
 * (port 0; IPv4 before IPv6), sorted by interface name so that rail r is the
 * same network on every host, and returns how many (0 when spec is NULL or
 * empty: no list was given, so the single socketFindInterface choice holds).
 * Only interfaces of the best kind count (real, then docker*, then loopback),
 * as socketFindInterface ranks them.
 */
struct socketRail {
    union socketAddress addr;
    char ifname[32];
    int rank; /* internal: how good the address is */
};
int socketFindRails(const char *spec, struct socketRail *rails, int max);
/* 1 if the interface is up and running (has carrier), or if that cannot be told. */
int socketInterfaceUp(const char *ifname);

/*
 * Opens a listening socket bound to addr (port 0: an ephemeral port), with
 * SO_REUSEADDR. Stores the socket in *fd and the address actually bound in
 * *bound. On failure nothing is left open.
 */
loomResult_t socketListen(const union socketAddress *addr, int *fd, union socketAddress *bound);
/*
 * Connects to addr, retrying while the peer refuses (it may not listen yet)
 * until the deadline. Returns loomTimeout at the deadline, loomRemoteError on
 * abort, loomSystemError on an error retrying cannot fix (no route). *fd is
 * set only on success.
 */
loomResult_t socketConnect(const union socketAddress *addr, uint64_t deadlineNs,
                           atomic_int *abortFlag, const char *who, int *fd);
/*
 * socketConnect to an address that has listened since before it was
 * published (a peer's listening socket): a refusal there means the peer has
 * gone, so it ends the attempts at once with loomRemoteError, while the
 * errors retrying can fix (a full listen queue, a reset) are retried until
 * the deadline as socketConnect does.
 */
loomResult_t socketConnectListener(const union socketAddress *addr, uint64_t deadlineNs,
                                   atomic_int *abortFlag, const char *who, int *fd);
/* As socketConnectListener, from the local address `from` (port 0; NULL: the kernel's choice). */
loomResult_t socketConnectListenerFrom(const union socketAddress *from,
                                       const union socketAddress *addr, uint64_t deadlineNs,
                                       atomic_int *abortFlag, const char *who, int *fd);
/*
 * One attempt of socketConnect: 0 with *fd set, or the errno value that
 * ended it (ECONNREFUSED: nothing listens there; ETIMEDOUT at the deadline;
 * ECANCELED on abort). Nothing is recorded.
 */
int socketConnectOnce(const union socketAddress *addr, uint64_t deadlineNs, atomic_int *abortFlag,
                      int *fd);
/*
 * Accepts one connection on listenFd (waiting until the deadline). *fd and
 * *peer (may be NULL) are set only on success.
 */
loomResult_t socketAccept(int listenFd, uint64_t deadlineNs, atomic_int *abortFlag, const char *who,
                          int *fd, union socketAddress *peer);
/*
 * Accepts a connection if one is pending, without waiting: *fd is the new
 * socket, or -1 if none is pending. Quiet; loomSystemError with errno set
 * when accept fails for a reason other than "nothing pending".
 */
loomResult_t socketTryAccept(int listenFd, int *fd, union socketAddress *peer);

/*
 * Sends (receives) exactly len bytes before the deadline. EOF or a connection
 * error is loomRemoteError, the deadline loomTimeout, the abort flag
 * loomRemoteError. On failure an unknown part of the data has moved.
 */
loomResult_t socketSendAll(int fd, const void *buf, size_t len, uint64_t deadlineNs,
                           atomic_int *abortFlag, const char *who);
loomResult_t socketRecvAll(int fd, void *buf, size_t len, uint64_t deadlineNs,
                           atomic_int *abortFlag, const char *who);
/*
 * Moves what the socket takes (holds) now, at most len - *done bytes from
 * (into) buf + *done, and advances *done; never waits, never raises SIGPIPE.
 * Returns loomSuccess (possibly having moved nothing), or loomRemoteError
 * when the connection is over, quietly, with errno 0 if the peer closed it
 * in order, else the error.
 */
loomResult_t socketTrySend(int fd, const void *buf, size_t len, size_t *done);
loomResult_t socketTryRecv(int fd, void *buf, size_t len, size_t *done);

/* Closes fd if it is >= 0 (keeping errno), ending its TLS session (tls.h) if it has one. */
void socketClose(int fd);
/* The text of an errno value from these functions: a TLS failure's own line (tls.h), else
 * debugErrnoText. */
const char *socketErrText(int err);

#endif /* LOOM_SOCKET_H_ */
