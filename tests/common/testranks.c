/*
 * testranks.c — ranks forked before any thread (see testranks.h).
 *
 * A child that cannot read a whole id (the test failed before handing it
 * over and closed the pipe) exits with status 99 without running anything.
 */
#include "testranks.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <time.h>
#include <unistd.h>

#define EXIT_NO_ID 99

static int readAll(int fd, void *buf, size_t len)
{
    char *p = buf;
    while (len > 0) {
        ssize_t n = read(fd, p, len);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return -1;
        p += n;
        len -= (size_t)n;
    }
    return 0;
}

int testRanksFork(struct testRanks *t, int nranks, testRankFn fn, void *arg)
{
    t->nranks = 0;
    if (nranks < 1 || nranks > TEST_MAX_RANKS)
        return -1;
    for (int r = 0; r < nranks; r++) {
        int fds[2];
        if (pipe(fds) != 0)
            return -1;
        pid_t pid = fork();
        if (pid < 0) {
            close(fds[0]);
            close(fds[1]);
            return -1;
        }
        if (pid == 0) {
            loomUniqueId id;
            close(fds[1]);
            for (int k = 0; k < r; k++)
                close(t->idFds[k]);
            if (readAll(fds[0], &id, sizeof(id)) != 0)
                _exit(EXIT_NO_ID);
            close(fds[0]);
            _exit(fn(r, nranks, &id, arg));
        }
        close(fds[0]);
        t->pids[r] = pid;
        t->idFds[r] = fds[1];
        t->nranks = r + 1;
    }
    return 0;
}

int testRanksGo(struct testRanks *t, const loomUniqueId *id)
{
    int rc = 0;
    for (int r = 0; r < t->nranks; r++) {
        if (t->idFds[r] < 0)
            continue;
        if (write(t->idFds[r], id, sizeof(*id)) != (ssize_t)sizeof(*id))
            rc = -1;
        close(t->idFds[r]);
        t->idFds[r] = -1;
    }
    return rc;
}

int testRankFail(int rank, int code, const char *fmt, ...)
{
    char what[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof(what), fmt, ap);
    va_end(ap);
    fprintf(stderr, "rank %d: %s (exit status %d)\n", rank, what, code);
    return code;
}

double testNowSec(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

void testSleepMs(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
        ;
}
