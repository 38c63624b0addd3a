/*
 * tls.c — TLS 1.3 with a pre-shared key on Loom's TCP sockets (see tls.h).
 *
 * A session is found by its socket's descriptor in a two-level table, so
 * that socket.c and net_socket.c keep passing descriptors around; a process
 * without LOOM_NET_TLS never creates one and every call is the system call
 * after one load of `active`.
 *
 * Life of a session: tlsWrap puts it on the pump's list; the pump thread
 * runs the handshake (SSL_do_handshake, non-blocking, polling the socket for
 * what OpenSSL wants), then writes out the bytes the owner sent meanwhile,
 * and takes the session off its list: from then on only the owner touches
 * it. Each session has a mutex because until then both threads may; OpenSSL
 * objects are never used by two threads at once. The lock order is
 * pumpLock, then a session's lock.
 *
 * The key: SHA-256 over a label and the unique id's secret, as the
 * external PSK of identity "loom"; TLS_AES_128_GCM_SHA256 only, psk_dhe_ke
 * (an ephemeral key exchange as well, so a key found later does not open
 * recorded traffic), no session tickets, no certificates.
 */
#include "tls.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include "config.h"
#include "bootstrap.h"
#include "debug.h"
#include "param.h"
#include "socket.h"

static _Thread_local char tlsWhy[320];

const char *tlsFailure(void)
{
    return tlsWhy;
}

int tlsWanted(void)
{
    return paramInt(LOOM_PARAM_NET_TLS) != 0;
}

#ifndef HAVE_OPENSSL

int tlsBuiltIn(void)
{
    return 0;
}

loomResult_t tlsWrap(int fd, int server, const uint8_t *secret)
{
    (void)fd, (void)server, (void)secret;
    if (!tlsWanted())
        return loomSuccess;
    return loomSetError(loomInvalidArgument,
                        "LOOM_NET_TLS=1, but this build of Loom has no TLS (configure found no "
                        "OpenSSL 3: apt-get install libssl-dev and build again), or unset it");
}

ssize_t tlsSend(int fd, const void *buf, size_t len)
{
    return send(fd, buf, len, MSG_DONTWAIT | MSG_NOSIGNAL);
}

ssize_t tlsSendv(int fd, const struct iovec *iov, int n)
{
    struct msghdr mh = {.msg_iov = (struct iovec *)iov, .msg_iovlen = (size_t)n};
    return sendmsg(fd, &mh, MSG_DONTWAIT | MSG_NOSIGNAL);
}

ssize_t tlsRecv(int fd, void *buf, size_t len)
{
    return recv(fd, buf, len, MSG_DONTWAIT);
}

int tlsReady(int fd)
{
    (void)fd;
    return 1;
}

int tlsClose(int fd)
{
    (void)fd;
    return 0;
}

#else /* HAVE_OPENSSL */

#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/ssl.h>

#define TLS_KEY_BYTES 32
#define TLS_CHUNK 4096  /* descriptors a table chunk holds */
#define TLS_CHUNKS 1024 /* chunks: descriptors up to 4M */
#define TLS_POLL_MS 100
#define TLS_COALESCE_BYTES 4096 /* small iovecs go out as one record */

static const char tlsIdentity[] = "loom";
static const char tlsKeyLabel[] = "loom LOOM_NET_TLS external PSK v1";

struct tlsSession {
    int fd;
    SSL *ssl;
    pthread_mutex_t lock;
    int done;   /* handshake complete */
    int failed; /* errno for the owner: EKEYREJECTED (handshake), EPROTO */
    char why[320];
    char peer[SOCKET_ADDR_STRLEN]; /* for messages: gone once the peer resets */
    uint8_t key[TLS_KEY_BYTES];
    uint8_t *out; /* bytes the owner sent before the handshake was done */
    size_t outLen, outDone, outCap;
    int pumped;  /* on the pump's list */
    int closing; /* the owner closed it: the pump closes fd when finished */
    uint64_t lingerEnd;
    struct tlsSession *next;
};

struct tlsChunk {
    _Atomic(struct tlsSession *) s[TLS_CHUNK];
};

static _Atomic(struct tlsChunk *) table[TLS_CHUNKS];
static atomic_int active; /* a session was ever created */

static pthread_once_t ctxOnce = PTHREAD_ONCE_INIT;
static SSL_CTX *ctx;
static char ctxWhy[160];

static pthread_mutex_t pumpLock = PTHREAD_MUTEX_INITIALIZER;
static struct tlsSession *pumpList;
static int pumpStarted, pumpWake = -1;
static char offload[64] = "not tried";

int tlsBuiltIn(void)
{
    return 1;
}

/* ---- the descriptor table ---- */

static _Atomic(struct tlsSession *) *slotOf(int fd, int create)
{
    if (fd < 0 || fd >= TLS_CHUNK * TLS_CHUNKS)
        return NULL;
    _Atomic(struct tlsChunk *) *cp = &table[fd / TLS_CHUNK];
    struct tlsChunk *c = atomic_load_explicit(cp, memory_order_acquire);
    if (c == NULL && create) {
        struct tlsChunk *fresh = calloc(1, sizeof(*fresh));
        if (fresh == NULL)
            return NULL;
        if (atomic_compare_exchange_strong(cp, &c, fresh))
            c = fresh;
        else
            free(fresh); /* another thread was first; c is its chunk */
    }
    return c ? &c->s[fd % TLS_CHUNK] : NULL;
}

static struct tlsSession *sessionOf(int fd)
{
    if (!atomic_load_explicit(&active, memory_order_relaxed))
        return NULL;
    _Atomic(struct tlsSession *) *slot = slotOf(fd, 0);
    return slot ? atomic_load_explicit(slot, memory_order_acquire) : NULL;
}

/* ---- the socket BIO, with MSG_NOSIGNAL ----
 *
 * OpenSSL's socket BIO writes with write(), which raises SIGPIPE on a
 * connection the peer has reset, and that kills a process that has not
 * ignored it (Loom's own sends use MSG_NOSIGNAL). So sessions write through
 * a copy of the socket BIO whose write is send(MSG_NOSIGNAL); everything
 * else, kernel TLS included, is the socket BIO's own. A record kTLS must
 * send as a control message goes through the original write, which knows
 * how (OpenSSL marks the BIO for it with BIO_FLAGS_KTLS_TX_CTRL_MSG, an
 * internal flag: 0x1000 in OpenSSL 3).
 */
#define TLS_BIO_KTLS_TX_CTRL_MSG 0x1000

static BIO_METHOD *bioMethod;
static int (*bioWriteOrig)(BIO *, const char *, int);

static int bioWrite(BIO *b, const char *buf, int len)
{
    if (BIO_test_flags(b, TLS_BIO_KTLS_TX_CTRL_MSG))
        return bioWriteOrig(b, buf, len);
    errno = 0;
    int n = (int)send((int)BIO_get_fd(b, NULL), buf, (size_t)len, MSG_NOSIGNAL);
    BIO_clear_retry_flags(b);
    if (n <= 0 && BIO_sock_should_retry(n))
        BIO_set_retry_write(b);
    return n;
}

static int bioMake(void)
{
    const BIO_METHOD *base = BIO_s_socket();
    bioMethod = BIO_meth_new(BIO_TYPE_SOCKET, "loom socket");
    bioWriteOrig = BIO_meth_get_write(base);
    return bioMethod != NULL && bioWriteOrig != NULL && BIO_meth_set_write(bioMethod, bioWrite) &&
           BIO_meth_set_read(bioMethod, BIO_meth_get_read(base)) &&
           BIO_meth_set_puts(bioMethod, BIO_meth_get_puts(base)) &&
           BIO_meth_set_ctrl(bioMethod, BIO_meth_get_ctrl(base)) &&
           BIO_meth_set_create(bioMethod, BIO_meth_get_create(base)) &&
           BIO_meth_set_destroy(bioMethod, BIO_meth_get_destroy(base));
}

/* ---- the context and the key ---- */

static SSL_SESSION *pskSession(SSL *ssl, const uint8_t *key)
{
    static const unsigned char aes128gcm[2] = {0x13, 0x01};
    const SSL_CIPHER *cipher = SSL_CIPHER_find(ssl, aes128gcm);
    SSL_SESSION *sess = SSL_SESSION_new();
    if (cipher == NULL || sess == NULL || !SSL_SESSION_set1_master_key(sess, key, TLS_KEY_BYTES) ||
        !SSL_SESSION_set_cipher(sess, cipher) ||
        !SSL_SESSION_set_protocol_version(sess, TLS1_3_VERSION)) {
        SSL_SESSION_free(sess);
        return NULL;
    }
    return sess;
}

static int pskUse(SSL *ssl, const EVP_MD *md, const unsigned char **id, size_t *idlen,
                  SSL_SESSION **sess)
{
    struct tlsSession *s = SSL_get_app_data(ssl);
    *sess = NULL;
    if (md != NULL && md != EVP_sha256())
        return 1; /* a retry asking for another hash: offer no key */
    *sess = pskSession(ssl, s->key);
    *id = (const unsigned char *)tlsIdentity;
    *idlen = sizeof(tlsIdentity) - 1;
    return *sess != NULL;
}

static int pskFind(SSL *ssl, const unsigned char *id, size_t idlen, SSL_SESSION **sess)
{
    struct tlsSession *s = SSL_get_app_data(ssl);
    *sess = NULL;
    if (idlen != sizeof(tlsIdentity) - 1 || memcmp(id, tlsIdentity, idlen) != 0)
        return 1; /* unknown identity: no key, the handshake fails */
    *sess = pskSession(ssl, s->key);
    return *sess != NULL;
}

static void ctxMake(void)
{
    ctx = SSL_CTX_new(TLS_method());
    if (ctx == NULL || !SSL_CTX_set_min_proto_version(ctx, TLS1_3_VERSION) ||
        !SSL_CTX_set_max_proto_version(ctx, TLS1_3_VERSION) ||
        !SSL_CTX_set_ciphersuites(ctx, "TLS_AES_128_GCM_SHA256") ||
        !SSL_CTX_set_num_tickets(ctx, 0) || !bioMake()) {
        snprintf(ctxWhy, sizeof(ctxWhy), "%s",
                 ERR_reason_error_string(ERR_peek_last_error()) ?: "unknown error");
        SSL_CTX_free(ctx);
        ctx = NULL;
        return;
    }
    SSL_CTX_set_options(ctx, SSL_OP_ENABLE_KTLS | SSL_OP_IGNORE_UNEXPECTED_EOF | SSL_OP_NO_TICKET);
    SSL_CTX_set_mode(ctx, SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
    SSL_CTX_set_psk_use_session_callback(ctx, pskUse);
    SSL_CTX_set_psk_find_session_callback(ctx, pskFind);
}

static int keyDerive(const uint8_t *secret, uint8_t *key)
{
    uint8_t in[sizeof(tlsKeyLabel) + BOOTSTRAP_SECRET_BYTES];
    unsigned int len = 0;
    memcpy(in, tlsKeyLabel, sizeof(tlsKeyLabel));
    memcpy(in + sizeof(tlsKeyLabel), secret, BOOTSTRAP_SECRET_BYTES);
    return EVP_Digest(in, sizeof(in), key, &len, EVP_sha256(), NULL) && len == TLS_KEY_BYTES;
}

/* ---- failures ---- */

/* Records why the handshake of s failed (pump thread, s locked). */
static void handshakeFailed(struct tlsSession *s, int sslErr)
{
    unsigned long e = ERR_peek_last_error();
    const char *reason = e ? ERR_reason_error_string(e) : NULL;
    if (reason == NULL)
        reason = sslErr == SSL_ERROR_ZERO_RETURN || (sslErr == SSL_ERROR_SYSCALL && errno == 0)
                     ? "the peer closed the connection"
                     : strerror(errno);
    char head[SOCKET_ADDR_STRLEN + 96];
    snprintf(head, sizeof(head), "TLS handshake with %s failed (%.48s)", s->peer, reason);
    snprintf(s->why, sizeof(s->why), "%s: %s", head,
             "the other side has another key (another job's unique id) or does not run with "
             "LOOM_NET_TLS=1");
    s->failed = EKEYREJECTED;
    ERR_clear_error();
}

/* Hands the session's failure to the calling thread: -1 with errno set. */
static ssize_t ownerFailed(struct tlsSession *s)
{
    snprintf(tlsWhy, sizeof(tlsWhy), "%s", s->why);
    errno = s->failed;
    return -1;
}

/* What an SSL_read/SSL_write that returned r <= 0 means for the owner: -1 with errno, or 0. */
static ssize_t ownerResult(struct tlsSession *s, int r, int reading)
{
    int e = SSL_get_error(s->ssl, r), saved = errno;
    if (e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE) {
        errno = EAGAIN;
        return -1;
    }
    if (e == SSL_ERROR_ZERO_RETURN || (e == SSL_ERROR_SYSCALL && saved == 0)) {
        if (reading)
            return 0; /* the peer closed the connection in order */
        errno = EPIPE;
        return -1;
    }
    if (e == SSL_ERROR_SYSCALL) {
        errno = saved;
        return -1;
    }
    unsigned long err = ERR_peek_last_error();
    snprintf(s->why, sizeof(s->why), "TLS: %s", ERR_reason_error_string(err) ?: "protocol error");
    s->failed = EPROTO;
    ERR_clear_error();
    return ownerFailed(s);
}

/* ---- the pump thread: handshakes, early bytes, lingering closes ---- */

static void kernelOffloadNote(struct tlsSession *s)
{
    static atomic_int noted;
    if (atomic_exchange(&noted, 1))
        return;
#ifdef OPENSSL_NO_KTLS
    snprintf(offload, sizeof(offload), "not in this OpenSSL");
    (void)s;
#else
    snprintf(offload, sizeof(offload), "send %s, receive %s",
             BIO_get_ktls_send(SSL_get_wbio(s->ssl)) ? "yes" : "no",
             BIO_get_ktls_recv(SSL_get_rbio(s->ssl)) ? "yes" : "no");
#endif
    INFO(LOOM_NET, "TLS 1.3 (%s) up; kernel TLS offload: %s", SSL_get_cipher_name(s->ssl), offload);
}

/* One step of s (locked). Returns the poll events it waits for, or 0 when the pump is done
 * with it. */
static short pumpStep(struct tlsSession *s)
{
    if (s->failed)
        return 0;
    if (s->closing && socketClockNs() >= s->lingerEnd)
        return 0;
    if (!s->done) {
        ERR_clear_error();
        errno = 0;
        int r = SSL_do_handshake(s->ssl);
        if (r != 1) {
            int e = SSL_get_error(s->ssl, r);
            if (e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE)
                return e == SSL_ERROR_WANT_READ ? POLLIN : POLLOUT;
            handshakeFailed(s, e);
            INFO(LOOM_NET, "%s", s->why);
            return 0;
        }
        s->done = 1;
        kernelOffloadNote(s);
    }
    while (s->outDone < s->outLen) {
        ERR_clear_error();
        int r = SSL_write(s->ssl, s->out + s->outDone, (int)(s->outLen - s->outDone));
        if (r > 0) {
            s->outDone += (size_t)r;
            continue;
        }
        int e = SSL_get_error(s->ssl, r);
        if (e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE)
            return e == SSL_ERROR_WANT_READ ? POLLIN : POLLOUT;
        ownerResult(s, r, 0);
        if (!s->failed) {
            snprintf(s->why, sizeof(s->why), "TLS: the connection ended: %s", strerror(errno));
            s->failed = errno ? errno : EPIPE;
        }
        return 0;
    }
    free(s->out);
    s->out = NULL;
    s->outLen = s->outDone = s->outCap = 0;
    return 0;
}

static void sessionFree(struct tlsSession *s)
{
    if (s->done && !s->failed) {
        ERR_clear_error();
        SSL_shutdown(s->ssl); /* close_notify, best effort: the peer reads an orderly end */
        ERR_clear_error();
    }
    SSL_free(s->ssl);
    pthread_mutex_destroy(&s->lock);
    free(s->out);
    free(s);
}

static void pumpUnlink(struct tlsSession *s)
{
    for (struct tlsSession **at = &pumpList; *at != NULL; at = &(*at)->next) {
        if (*at == s) {
            *at = s->next;
            break;
        }
    }
    s->pumped = 0;
}

static void *pumpMain(void *arg)
{
    size_t cap = 64;
    struct pollfd *fds = calloc(cap, sizeof(*fds));
    (void)arg;
    if (fds == NULL) {
        WARN("TLS: out of memory for its thread; no handshake will finish");
        return NULL;
    }
    pthread_setname_np(pthread_self(), "loom-tls");
    for (;;) {
        size_t n = 1;
        struct tlsSession *finished = NULL;
        pthread_mutex_lock(&pumpLock);
        for (struct tlsSession *s = pumpList, *next; s != NULL; s = next) {
            next = s->next;
            pthread_mutex_lock(&s->lock);
            short ev = pumpStep(s);
            pthread_mutex_unlock(&s->lock);
            if (ev == 0) {
                pumpUnlink(s);
                if (s->closing) {
                    s->next = finished;
                    finished = s;
                }
                continue;
            }
            if (n == cap) {
                size_t ncap = cap ? 2 * cap : 64;
                struct pollfd *f = realloc(fds, ncap * sizeof(*f));
                if (f == NULL)
                    break; /* poll fewer this round; the timeout brings the rest back */
                fds = f, cap = ncap;
            }
            fds[n++] = (struct pollfd){.fd = s->fd, .events = ev};
        }
        pthread_mutex_unlock(&pumpLock);
        while (finished != NULL) {
            struct tlsSession *s = finished;
            finished = s->next;
            int fd = s->fd;
            sessionFree(s);
            close(fd);
        }
        fds[0] = (struct pollfd){.fd = pumpWake, .events = POLLIN};
        poll(fds, (nfds_t)n, TLS_POLL_MS);
        if (fds[0].revents & POLLIN) {
            uint64_t count;
            ssize_t ignored = read(pumpWake, &count, sizeof(count));
            (void)ignored;
        }
    }
    return NULL;
}

static void pumpKick(void)
{
    uint64_t one = 1;
    ssize_t ignored = write(pumpWake, &one, sizeof(one));
    (void)ignored;
}

static void pumpForked(void)
{
    /* A child of fork() has no pump thread: the next session starts one; sessions of the
     * parent stay the parent's. */
    pthread_mutex_init(&pumpLock, NULL);
    pumpList = NULL;
    pumpStarted = 0;
}

/* Starts the pump thread once (pumpLock held). */
static loomResult_t pumpStart(void)
{
    static int atforkDone;
    pthread_t thread;
    sigset_t all, old;
    if (pumpStarted)
        return loomSuccess;
    if (pumpWake < 0)
        pumpWake = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (pumpWake < 0)
        return loomSetError(loomSystemError, "TLS: eventfd: %s", strerror(errno));
    if (!atforkDone)
        atforkDone = pthread_atfork(NULL, NULL, pumpForked) == 0;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    int err = pthread_create(&thread, NULL, pumpMain, NULL);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (err != 0)
        return loomSetError(loomSystemError, "TLS: cannot start its thread: %s", strerror(err));
    pthread_detach(thread);
    pumpStarted = 1;
    return loomSuccess;
}

/* ---- the interface ---- */

loomResult_t tlsWrap(int fd, int server, const uint8_t *secret)
{
    if (!tlsWanted())
        return loomSuccess;
    pthread_once(&ctxOnce, ctxMake);
    if (ctx == NULL)
        return loomSetError(loomSystemError,
                            "LOOM_NET_TLS=1: OpenSSL cannot make a TLS 1.3 "
                            "context: %s",
                            ctxWhy);
    _Atomic(struct tlsSession *) *slot = slotOf(fd, 1);
    struct tlsSession *s = calloc(1, sizeof(*s));
    if (slot == NULL || s == NULL) {
        free(s);
        return loomSetError(loomSystemError, "TLS: out of memory for socket %d", fd);
    }
    s->fd = fd;
    socketPeerFormat(fd, s->peer, sizeof(s->peer));
    pthread_mutex_init(&s->lock, NULL);
    s->ssl = SSL_new(ctx);
    BIO *bio = BIO_new(bioMethod);
    if (s->ssl == NULL || bio == NULL || !keyDerive(secret, s->key)) {
        SSL_free(s->ssl);
        BIO_free(bio);
        free(s);
        return loomSetError(loomSystemError, "TLS: OpenSSL cannot start a session on socket %d",
                            fd);
    }
    BIO_set_fd(bio, fd, BIO_NOCLOSE);
    SSL_set_bio(s->ssl, bio, bio);
    SSL_set_app_data(s->ssl, s);
    if (server)
        SSL_set_accept_state(s->ssl);
    else
        SSL_set_connect_state(s->ssl);
    /* A session left by a descriptor closed without tlsClose (a bug) must not be reused. */
    struct tlsSession *stale = atomic_exchange(slot, NULL);
    if (stale != NULL) {
        WARN("TLS: socket %d was closed without ending its TLS session", fd);
        pthread_mutex_lock(&pumpLock);
        if (stale->pumped)
            pumpUnlink(stale);
        pthread_mutex_unlock(&pumpLock);
        stale->done = 0; /* no close_notify onto a new connection */
        sessionFree(stale);
    }
    pthread_mutex_lock(&pumpLock);
    loomResult_t res = pumpStart();
    if (res == loomSuccess) {
        s->pumped = 1;
        s->next = pumpList;
        pumpList = s;
        atomic_store_explicit(&active, 1, memory_order_relaxed);
        atomic_store_explicit(slot, s, memory_order_release);
    }
    pthread_mutex_unlock(&pumpLock);
    if (res != loomSuccess) {
        SSL_free(s->ssl);
        free(s);
        return res;
    }
    pumpKick();
    return loomSuccess;
}

/* Keeps bytes sent before the handshake is done, for the pump (s locked). */
static ssize_t earlyKeep(struct tlsSession *s, const void *buf, size_t len)
{
    if (s->outLen + len > s->outCap) {
        size_t cap = s->outCap ? s->outCap : 4096;
        while (cap < s->outLen + len)
            cap *= 2;
        uint8_t *out = realloc(s->out, cap);
        if (out == NULL) {
            errno = EAGAIN; /* the pump empties it; try again */
            return -1;
        }
        s->out = out, s->outCap = cap;
    }
    memcpy(s->out + s->outLen, buf, len);
    s->outLen += len;
    return (ssize_t)len;
}

/* SSL_read or SSL_write on a settled session (s locked), with send/recv's results. */
static ssize_t sslMove(struct tlsSession *s, void *buf, size_t len, int reading)
{
    int cap = len > INT32_MAX ? INT32_MAX : (int)len;
    ERR_clear_error();
    errno = 0;
    int n = reading ? SSL_read(s->ssl, buf, cap) : SSL_write(s->ssl, buf, cap);
    return n > 0 ? n : ownerResult(s, n, reading);
}

ssize_t tlsSend(int fd, const void *buf, size_t len)
{
    struct tlsSession *s = sessionOf(fd);
    if (s == NULL)
        return send(fd, buf, len, MSG_DONTWAIT | MSG_NOSIGNAL);
    ssize_t r;
    pthread_mutex_lock(&s->lock);
    if (s->failed) {
        r = ownerFailed(s);
    } else if (!s->done || s->outDone < s->outLen) {
        r = earlyKeep(s, buf, len); /* the pump has s on its list until these are out */
    } else {
        r = sslMove(s, (void *)buf, len, 0);
    }
    pthread_mutex_unlock(&s->lock);
    return r;
}

ssize_t tlsSendv(int fd, const struct iovec *iov, int n)
{
    struct msghdr mh = {.msg_iov = (struct iovec *)iov, .msg_iovlen = (size_t)n};
    if (sessionOf(fd) == NULL)
        return sendmsg(fd, &mh, MSG_DONTWAIT | MSG_NOSIGNAL);
    size_t total = 0;
    for (int i = 0; i < n; i++)
        total += iov[i].iov_len;
    if (n > 1 && total <= TLS_COALESCE_BYTES) {
        /* A header and a small message in one record: one seal, one segment. */
        uint8_t buf[TLS_COALESCE_BYTES];
        size_t at = 0;
        for (int i = 0; i < n; i++) {
            memcpy(buf + at, iov[i].iov_base, iov[i].iov_len);
            at += iov[i].iov_len;
        }
        return tlsSend(fd, buf, total);
    }
    ssize_t moved = 0;
    for (int i = 0; i < n; i++) {
        ssize_t r = tlsSend(fd, iov[i].iov_base, iov[i].iov_len);
        if (r < 0)
            return moved > 0 && errno == EAGAIN ? moved : r;
        moved += r;
        if ((size_t)r < iov[i].iov_len)
            break;
    }
    return moved;
}

ssize_t tlsRecv(int fd, void *buf, size_t len)
{
    struct tlsSession *s = sessionOf(fd);
    if (s == NULL)
        return recv(fd, buf, len, MSG_DONTWAIT);
    ssize_t r;
    pthread_mutex_lock(&s->lock);
    if (s->failed) {
        r = ownerFailed(s);
    } else if (!s->done) {
        errno = EAGAIN; /* the pump is still shaking hands */
        r = -1;
    } else {
        r = sslMove(s, buf, len, 1);
    }
    pthread_mutex_unlock(&s->lock);
    return r;
}

int tlsReady(int fd)
{
    struct tlsSession *s = sessionOf(fd);
    if (s == NULL)
        return 1;
    pthread_mutex_lock(&s->lock);
    int r = s->failed ? -1 : s->done && s->outDone == s->outLen;
    if (r < 0)
        ownerFailed(s);
    pthread_mutex_unlock(&s->lock);
    return r;
}

int tlsClose(int fd)
{
    struct tlsSession *s = sessionOf(fd);
    if (s == NULL)
        return 0;
    atomic_store_explicit(slotOf(fd, 0), NULL, memory_order_release);
    pthread_mutex_lock(&pumpLock);
    pthread_mutex_lock(&s->lock);
    if (s->pumped && !s->failed && s->outDone < s->outLen) {
        /* Early bytes still to go: the pump delivers them, then closes. */
        s->closing = 1;
        s->lingerEnd = socketClockNs() + (uint64_t)TLS_LINGER_SEC * 1000000000ull;
        pthread_mutex_unlock(&s->lock);
        pthread_mutex_unlock(&pumpLock);
        pumpKick();
        return 1;
    }
    if (s->pumped)
        pumpUnlink(s);
    pthread_mutex_unlock(&s->lock);
    pthread_mutex_unlock(&pumpLock);
    sessionFree(s);
    return 0;
}

#endif /* HAVE_OPENSSL */
