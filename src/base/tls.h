/*
 * tls.h — TLS 1.3 on Loom's TCP connections, opt-in with LOOM_NET_TLS=1.
 *
 * With the setting on, every TCP connection Loom makes (the bootstrap's:
 * root, ring, point-to-point, shrink, grow; NET/socket's data sockets) is wrapped
 * right after connect() or accept() with tlsWrap, and every byte then goes
 * through tlsSend/tlsSendv/tlsRecv, which behave like non-blocking
 * send/sendmsg/recv on the socket. Without the setting, tlsWrap does
 * nothing and the others are the plain system calls.
 *
 * The key is a TLS 1.3 external pre-shared key derived from the 32-byte
 * secret of the communicator's unique id, so there are no certificates: a
 * peer holding another id, or none (no LOOM_NET_TLS), fails the handshake,
 * and the rank that sees it gets a one-line reason (errno EKEYREJECTED and
 * tlsFailure()).
 *
 * The handshake never makes a caller wait. Loom's protocols rely on a
 * connector being able to write its hello and go on before the other side
 * has accepted (the kernel holds the bytes); a handshake needs both
 * processes to act. So one background thread of the process ("loom-tls")
 * drives every handshake; what a rank sends before its handshake is done
 * is kept and sent by that thread after it, in order, and tlsRecv says
 * EAGAIN until it is done. A socket closed (socketClose) while its
 * handshake or those bytes are still pending is closed by that thread once
 * they are out (or after TLS_LINGER_SEC), as the kernel would deliver them.
 * tlsReady tells whether a socket has settled, for callers (NET/socket)
 * that hand sockets to threads that wait edge-triggered.
 *
 * Kernel TLS: the context asks OpenSSL for it (SSL_OP_ENABLE_KTLS); where
 * the kernel has the "tls" ULP, records are then sealed by the kernel; the
 * first handshake says at INFO (NET) whether it did.
 */
#ifndef LOOM_TLS_H_
#define LOOM_TLS_H_

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <sys/uio.h>

#include "loom.h"

/* Seconds the background thread keeps trying to deliver what a closed socket still holds. */
#define TLS_LINGER_SEC 30

/* 1 if this build has TLS (configure found OpenSSL 3). */
int tlsBuiltIn(void);
/* 1 if LOOM_NET_TLS=1. */
int tlsWanted(void);
/*
 * With LOOM_NET_TLS=1, starts TLS on the connected socket fd (server: it
 * was accepted) with the key derived from secret (BOOTSTRAP_SECRET_BYTES);
 * returns at once, the handshake goes on in the background. Without the
 * setting it does nothing. loomInvalidArgument (with a line) when the
 * setting is on in a build without TLS, loomSystemError when OpenSSL fails.
 */
loomResult_t tlsWrap(int fd, int server, const uint8_t *secret);
/* Like send(fd, buf, len, MSG_DONTWAIT | MSG_NOSIGNAL) and recv(fd, buf, len, MSG_DONTWAIT). */
ssize_t tlsSend(int fd, const void *buf, size_t len);
ssize_t tlsRecv(int fd, void *buf, size_t len);
/* Like sendmsg with iov[0..n-1], MSG_DONTWAIT | MSG_NOSIGNAL. */
ssize_t tlsSendv(int fd, const struct iovec *iov, int n);
/* 1: plain socket, or handshake done and early bytes sent; 0: not yet; -1: failed (errno). */
int tlsReady(int fd);
/* Ends TLS on fd. Returns 1 if the background thread now owns fd and will close it, else 0. */
int tlsClose(int fd);
/* The calling thread's last TLS failure, one line ("" if none). */
const char *tlsFailure(void);

#endif /* LOOM_TLS_H_ */
