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
#include <stdlib.h>
#include <sys/wait.h>
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

loomResult_t testSettle(loomComm_t comm, loomResult_t res, int timeoutSec)
{
    for (int ms = 0; res == loomInProgress && ms < timeoutSec * 1000; ms++) {
        if (loomCommGetAsyncError(comm, &res) != loomSuccess)
            return loomInternalError;
        if (res == loomInProgress)
            testSleepMs(1);
    }
    return res;
}

int testExactAllReduces(loomComm_t comm, int iters, double *firstAt)
{
    int r = 0, n = 0, good = 0;
    loomCommUserRank(comm, &r);
    loomCommCount(comm, &n);
    float *buf = malloc((1001 + (size_t)iters * 37) * sizeof(*buf));
    for (int it = 0; buf && it < iters; it++) {
        size_t count = 1001 + (size_t)it * 37;
        for (size_t j = 0; j < count; j++)
            buf[j] = (float)((r + 1) * (it + 1) + (int)(j % 5));
        loomResult_t res = loomAllReduce(buf, buf, count, loomFloat32, loomSum, comm, NULL);
        if (testSettle(comm, res, 60) != loomSuccess)
            break;
        if (it == 0 && firstAt != NULL)
            *firstAt = testNowSec();
        int ok = 1;
        for (size_t j = 0; j < count; j++)
            ok &= buf[j] == (float)((it + 1) * n * (n + 1) / 2 + n * (int)(j % 5));
        good += ok;
    }
    free(buf);
    return good;
}

int testRunCases(const char *name, const TTest *test, int ncases, int timeoutSec)
{
    Suite *s = suite_create(name);
    TCase *tc = tcase_create(name);
    tcase_set_timeout(tc, timeoutSec);
    tcase_add_loop_test(tc, test, 0, ncases);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? 0 : 1;
}

void testRanksReap(const struct testRanks *t)
{
    for (int r = 0; r < t->nranks; r++) {
        int st;
        ck_assert_int_eq(waitpid(t->pids[r], &st, 0), t->pids[r]);
        ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0, "rank %d ended with status %d", r, st);
    }
}
