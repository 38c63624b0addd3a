/*
 * proxy.c — the progress thread of the network transports (see proxy.h).
 *
 * After anything moved, the thread keeps polling the transport for
 * PROXY_BUSY_NS (each pass costs system calls, so this is kept short, and
 * skipped when the host has more ranks than CPUs or LOOM_SPIN=0), then
 * sleeps in poll() on the transport's sockets and its own eventfd; the
 * kernel wakes it within microseconds when data or the doorbell comes. Before sleeping it flags
 * itself
 * (`sleeping`) and runs one more progress pass, and ringers look at the flag
 * after publishing, so a wake-up cannot be lost; the sleep is capped at
 * PROXY_SLEEP_MS in any case. The thread blocks every signal: they belong to
 * the application's threads.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "debug.h"
#include "exec.h"
#include "param.h"
#include "proxy.h"

#define PROXY_BUSY_NS (50 * 1000ULL)
#define PROXY_SLEEP_MS 100

struct loomProxy {
    struct loomDoorbell bell; /* first: the executor rings it */
    struct loomComm *comm;
    struct loomProxyOps ops;
    void *ctx;
    pthread_t thread;
    int eventFd;
    uint64_t busyNs;
    atomic_int stop;
    uint64_t drainDeadline;
    struct pollfd *fds;
    int maxFds;
};

static inline void proxyRelax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield");
#endif
}

/* Sleeps until the bell rings, a socket is ready, or PROXY_SLEEP_MS. Returns 1 if a pass moved. */
static int proxySleep(struct loomProxy *p)
{
    int moved = 0;
    atomic_store_explicit(&p->bell.sleeping, 1, memory_order_seq_cst);
    p->ops.progress(p->ctx, &moved);
    if (!moved) {
        /* While draining, look again soon: the peer may be slow to take the last bytes. */
        int ms = atomic_load_explicit(&p->stop, memory_order_acquire) ? 1 : PROXY_SLEEP_MS;
        p->fds[0] = (struct pollfd){.fd = p->eventFd, .events = POLLIN};
        int n = p->ops.pollSet(p->ctx, p->fds + 1, p->maxFds);
        poll(p->fds, n < 0 ? 1 : (nfds_t)n + 1, n < 0 ? 0 : ms);
        if (p->fds[0].revents & POLLIN) {
            uint64_t count;
            ssize_t ignored = read(p->eventFd, &count, sizeof(count));
            (void)ignored;
        }
    }
    atomic_store_explicit(&p->bell.sleeping, 0, memory_order_relaxed);
    return moved;
}

static void *proxyMain(void *arg)
{
    struct loomProxy *p = arg;
    uint64_t lastMoved = loomClockNs();

    pthread_setname_np(pthread_self(), "loom-proxy");
    for (;;) {
        int moved = 0;
        p->ops.progress(p->ctx, &moved);
        if (atomic_load_explicit(&p->stop, memory_order_acquire) &&
            (p->ops.drained(p->ctx) || loomClockNs() >= p->drainDeadline))
            break;
        if (moved) {
            lastMoved = loomClockNs();
            continue;
        }
        if (loomClockNs() - lastMoved < p->busyNs) {
            proxyRelax();
            continue;
        }
        if (proxySleep(p))
            lastMoved = loomClockNs();
    }
    return NULL;
}

loomResult_t proxyStart(struct loomComm *comm, const struct loomProxyOps *ops, void *ctx,
                        int maxFds, struct loomProxy **out)
{
    sigset_t all, old;
    struct loomProxy *p = calloc(1, sizeof(*p));
    if (p == NULL)
        return loomSetError(loomSystemError, "out of memory for the network proxy");
    p->comm = comm;
    p->ops = *ops;
    p->ctx = ctx;
    p->maxFds = maxFds;
    /* With more ranks than CPUs, a proxy that polls busily only slows the others down. */
    p->busyNs = comm->oversubscribed || comm->spin == 0 ? 0 : PROXY_BUSY_NS;
    p->fds = calloc((size_t)maxFds + 1, sizeof(*p->fds));
    if (p->fds == NULL) {
        loomSetError(loomSystemError, "out of memory for the network proxy");
        goto fail_free;
    }
    /* Above fd 2, so that a wakeFd of 0 keeps meaning "a futex bell". */
    int efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    p->eventFd = -1;
    if (efd >= 0) {
        p->eventFd = fcntl(efd, F_DUPFD_CLOEXEC, 3);
        close(efd);
    }
    if (p->eventFd < 0) {
        loomSetError(loomSystemError, "network proxy: eventfd: %s", strerror(errno));
        goto fail_free;
    }
    p->bell.wakeFd = p->eventFd;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    int err = pthread_create(&p->thread, NULL, proxyMain, p);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (err != 0) {
        loomSetError(loomSystemError, "cannot start the network proxy thread: %s", strerror(err));
        goto fail_close;
    }
    *out = p;
    return loomSuccess;

fail_close:
    close(p->eventFd);
fail_free:
    free(p->fds);
    free(p);
    return loomSystemError;
}

struct loomDoorbell *proxyBell(struct loomProxy *p)
{
    return &p->bell;
}

void proxyStop(struct loomProxy *p, double drainSec)
{
    if (p == NULL)
        return;
    p->drainDeadline = loomClockNs() + (uint64_t)(drainSec * 1e9);
    atomic_store_explicit(&p->stop, 1, memory_order_release);
    uint64_t one = 1;
    ssize_t ignored = write(p->eventFd, &one, sizeof(one));
    (void)ignored;
    pthread_join(p->thread, NULL);
    close(p->eventFd);
    free(p->fds);
    free(p);
}
