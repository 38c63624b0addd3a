/*
 * proxy.c — the progress thread of the network transports (see proxy.h).
 *
 * The thread does not poll busily: the executor polls the links it waits
 * on itself (and blocks in poll() on their sockets when it may: proxy.h),
 * and a busy proxy only takes CPU from it and from the peer (a short busy
 * window made small calls between hosts slower, not faster:
 * docs/performance.md, "Figures from the code's comments"). After a pass that
 * moved nothing it sleeps in epoll_wait on the transport's sockets and its
 * own eventfd; the kernel wakes it within microseconds when data, buffer
 * space or the doorbell comes. Before sleeping it flags itself (`sleeping`) and runs one
 * more pass, and ringers look at the flag after publishing, so a wake-up
 * cannot be lost; the sleep is capped at PROXY_SLEEP_MS in any case. The
 * thread blocks every signal: they belong to the application's threads.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "debug.h"
#include "bell.h"
#include "param.h"
#include "proxy.h"

#define PROXY_SLEEP_MS 100
#define PROXY_EVENTS 64
#define PROXY_LATE_NS 1000000ULL

struct loomProxy {
    struct loomDoorbell bell; /* first: the executor rings it */
    struct loomComm *comm;
    struct loomProxyOps ops;
    void *ctx;
    pthread_t thread;
    int eventFd;
    int epollFd;
    atomic_int stop;
    uint64_t drainDeadline;
    unsigned long sleeps;    /* epoll_waits, */
    unsigned long lateWakes; /* and those that ran to PROXY_SLEEP_MS before work was found */
    unsigned long quiets;    /* sleeps on the doorbell alone, while an executor polled */
    struct epoll_event events[PROXY_EVENTS];
};

static void proxyDrainBell(struct loomProxy *p)
{
    uint64_t count;
    ssize_t ignored = read(p->eventFd, &count, sizeof(count));
    (void)ignored;
}

/* Sleeps on the doorbell alone for ns at most (rounded up to a millisecond): an executor polls. */
static void proxyQuiet(struct loomProxy *p, uint64_t ns)
{
    struct pollfd bell = {.fd = p->eventFd, .events = POLLIN};
    int ms = (int)((ns + 999999) / 1000000);
    p->quiets++;
    if (poll(&bell, 1, ms < PROXY_SLEEP_MS ? ms : PROXY_SLEEP_MS) > 0)
        proxyDrainBell(p);
}

/*
 * Sleeps until the bell rings, a socket is ready, or PROXY_SLEEP_MS (unless a
 * last pass moved). Returns 1 when the sleep ran to PROXY_SLEEP_MS: if the
 * next pass then moves, a wake-up was missed (counted in lateWakes). Not
 * when the thread came back later than PROXY_LATE_NS after the cap: then it
 * was descheduled after the kernel last looked for events, and work that
 * came meanwhile was not missed (seen on oversubscribed hosts: more ranks
 * and proxies than CPUs).
 */
static int proxySleep(struct loomProxy *p)
{
    int moved = 0, capped = 0;
    atomic_store_explicit(&p->bell.sleeping, 1, memory_order_seq_cst);
    p->ops.progress(p->ctx, &moved);
    if (!moved && p->ops.beforeSleep(p->ctx) == 0) {
        /* While draining, look again soon: the peer may be slow to take the last bytes. */
        int ms = atomic_load_explicit(&p->stop, memory_order_acquire) ? 1 : PROXY_SLEEP_MS;
        uint64_t now = loomClockNs(), cap = now + (uint64_t)ms * 1000000;
        uint64_t quiet = p->ops.quietUntil ? p->ops.quietUntil(p->ctx) : 0;
        if (quiet > now) {
            proxyQuiet(p, quiet - now);
        } else {
            int n = epoll_wait(p->epollFd, p->events, PROXY_EVENTS, ms);
            p->sleeps++;
            capped = n == 0 && ms == PROXY_SLEEP_MS && loomClockNs() < cap + PROXY_LATE_NS;
            for (int i = 0; i < n; i++)
                if (p->events[i].data.fd == p->eventFd)
                    proxyDrainBell(p);
        }
    }
    atomic_store_explicit(&p->bell.sleeping, 0, memory_order_relaxed);
    return capped;
}

static void *proxyMain(void *arg)
{
    struct loomProxy *p = arg;
    int capped = 0;

    pthread_setname_np(pthread_self(), "loom-proxy");
    for (;;) {
        int moved = 0;
        p->ops.progress(p->ctx, &moved);
        p->lateWakes += capped && moved;
        capped = 0;
        if (atomic_load_explicit(&p->stop, memory_order_acquire) &&
            (p->ops.drained(p->ctx) || loomClockNs() >= p->drainDeadline))
            break;
        if (!moved)
            capped = proxySleep(p);
    }
    return NULL;
}

loomResult_t proxyWatch(struct loomProxy *p, int fd)
{
    struct epoll_event ev = {.events = EPOLLIN | EPOLLOUT | EPOLLET, .data.fd = fd};
    if (epoll_ctl(p->epollFd, EPOLL_CTL_ADD, fd, &ev) != 0)
        return loomSetError(loomSystemError, "network proxy: epoll_ctl: %s", strerror(errno));
    return loomSuccess;
}

/* The eventfd sits above fd 2, so that a wakeFd of 0 keeps meaning "a futex bell". */
static loomResult_t proxyOpenFds(struct loomProxy *p)
{
    int efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    p->eventFd = -1;
    if (efd >= 0) {
        p->eventFd = fcntl(efd, F_DUPFD_CLOEXEC, 3);
        close(efd);
    }
    if (p->eventFd < 0)
        return loomSetError(loomSystemError, "network proxy: eventfd: %s", strerror(errno));
    p->epollFd = epoll_create1(EPOLL_CLOEXEC);
    if (p->epollFd < 0) {
        close(p->eventFd);
        return loomSetError(loomSystemError, "network proxy: epoll_create1: %s", strerror(errno));
    }
    struct epoll_event ev = {.events = EPOLLIN, .data.fd = p->eventFd};
    if (epoll_ctl(p->epollFd, EPOLL_CTL_ADD, p->eventFd, &ev) != 0) {
        close(p->epollFd);
        close(p->eventFd);
        return loomSetError(loomSystemError, "network proxy: epoll_ctl: %s", strerror(errno));
    }
    return loomSuccess;
}

loomResult_t proxyStart(struct loomComm *comm, const struct loomProxyOps *ops, void *ctx,
                        struct loomProxy **out)
{
    sigset_t all, old;
    struct loomProxy *p = calloc(1, sizeof(*p));
    if (p == NULL)
        return loomSetError(loomSystemError, "out of memory for the network proxy");
    p->comm = comm;
    p->ops = *ops;
    p->ctx = ctx;
    loomResult_t res = proxyOpenFds(p);
    if (res != loomSuccess)
        goto fail_free;
    p->bell.wakeFd = p->eventFd;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    int err = pthread_create(&p->thread, NULL, proxyMain, p);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (err != 0) {
        res = loomSetError(loomSystemError, "cannot start the network proxy thread: %s",
                           strerror(err));
        goto fail_close;
    }
    *out = p;
    return loomSuccess;

fail_close:
    close(p->epollFd);
    close(p->eventFd);
fail_free:
    free(p);
    return res;
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
    INFO(LOOM_NET,
         "NET: the proxy slept %lu times; %lu of them ran to the %d ms cap and then "
         "found work (missed wake-ups); %lu more times on its doorbell alone while an "
         "executor polled",
         p->sleeps, p->lateWakes, PROXY_SLEEP_MS, p->quiets);
}

void proxyFree(struct loomProxy *p)
{
    if (p == NULL)
        return;
    close(p->epollFd);
    close(p->eventFd);
    free(p);
}
