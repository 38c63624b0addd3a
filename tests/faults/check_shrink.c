/*
 * check_shrink.c — going on after a rank dies: loomCommGetFailedRanks and
 * loomCommShrink on real processes.
 *
 * The test forks 4 ranks that loop on AllReduce; the parent SIGKILLs rank 3
 * in the middle of the loop, noting the time on CLOCK_MONOTONIC (one clock
 * for every process of the host). Each survivor, once its AllReduce fails,
 * asks loomCommGetFailedRanks (it must list rank 3), shrinks with
 * LOOM_SHRINK_ABORT, checks its new rank and size, runs 20 AllReduces of
 * exact-by-construction values on the new communicator, and sends back one
 * report. The cases:
 *
 *   shm kill     4 ranks on one host (shared memory)
 *   tcp kill     2 hosts x 2 ranks (LOOM_HOSTID hosts over loopback): TCP
 *                between the hosts, shared memory inside each
 *   mismatch     rank 2 passes {1, 3}, ranks 0 and 1 pass {3}: every one of
 *                the three gets loomInvalidUsage, naming both lists
 *   second death rank 2 dies (SIGKILL of itself) while 0 and 1 are in the
 *                shrink: they get loomRemoteError naming rank 2, shrink
 *                again without 2 and 3, and go on (2 ranks)
 *
 * Printed, never asserted (the machine is shared): for each survivor the
 * seconds from the kill to the error, to the end of the shrink, and to the
 * end of the first AllReduce on the new communicator:
 *
 *   case     rank result   error_s shrunk_s first_s  line
 *
 * Every rank runs under an alarm() watchdog, and the parent stops waiting
 * for reports after a bound, so a hang is a failure.
 */
#include <check.h>
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "loom.h"
#include "testranks.h"

#define NRANKS 4
#define VICTIM 3
#define SECOND 2 /* the rank that dies during the shrink in "second death" */
#define COUNT (1u << 16)
#define AFTER_ALLREDUCES 20
#define TIMEOUT_SEC 20
#define WATCHDOG_SEC 90

enum kase { CASE_SHM, CASE_TCP, CASE_MISMATCH, CASE_SECOND, NCASES };
static const char *caseName[NCASES] = {"shm kill", "tcp kill", "mismatch", "second death"};

struct report {
    int rank;
    int loopResult; /* of the AllReduce that failed */
    int nfailed;    /* loomCommGetFailedRanks */
    int failed[NRANKS];
    int shrinkResult; /* of the (last) loomCommShrink */
    int firstShrink;  /* second death: of the first one */
    int newRank, newSize;
    int correct; /* AllReduces on the new communicator with exact results */
    double errorAt, shrunkAt, firstAt;
    char error[400];
};

struct job {
    enum kase kase;
    int readyFd[2];
    int reportFd[2];
};

/* ---- a rank ---- */

/* The ranks this one knows to have failed, waiting up to 5 s for `want` to show. */
static void failedRanks(loomComm_t comm, int want, struct report *rep)
{
    for (int waited = 0; waited < 5000; waited += 10) {
        if (loomCommGetFailedRanks(comm, rep->failed, &rep->nfailed) != loomSuccess)
            return;
        for (int i = 0; i < rep->nfailed; i++)
            if (rep->failed[i] == want)
                return;
        testSleepMs(10);
    }
}

static loomResult_t shrinkOnce(loomComm_t comm, const int *ex, int nex, loomComm_t *newcomm,
                               struct report *rep)
{
    loomResult_t res = loomCommShrink(comm, ex, nex, newcomm, NULL, LOOM_SHRINK_ABORT);
    rep->shrunkAt = testNowSec();
    if (res != loomSuccess)
        snprintf(rep->error, sizeof(rep->error), "%s", loomGetLastError(comm));
    return res;
}

static void afterFailure(const struct job *job, loomComm_t comm, int rank, struct report *rep)
{
    int justVictim[] = {VICTIM}, both[] = {SECOND, VICTIM}, wrong[] = {1, VICTIM};
    loomComm_t newcomm = NULL;

    failedRanks(comm, VICTIM, rep);
    if (job->kase == CASE_SECOND && rank == SECOND) {
        testSleepMs(300); /* the others are waiting in the shrink by now */
        kill(getpid(), SIGKILL);
    }
    int mismatched = job->kase == CASE_MISMATCH && rank == 2;
    loomResult_t res =
        shrinkOnce(comm, mismatched ? wrong : justVictim, mismatched ? 2 : 1, &newcomm, rep);
    rep->firstShrink = res;
    if (job->kase == CASE_SECOND && res != loomSuccess)
        res = shrinkOnce(comm, both, 2, &newcomm, rep);
    rep->shrinkResult = res;
    if (res == loomSuccess) {
        loomCommCount(newcomm, &rep->newSize);
        loomCommUserRank(newcomm, &rep->newRank);
        rep->correct = testExactAllReduces(newcomm, AFTER_ALLREDUCES, &rep->firstAt);
        loomCommDestroy(newcomm);
    }
}

static int rankMain(int rank, int nranks, const loomUniqueId *id, void *arg)
{
    struct job *job = arg;
    struct report rep;
    loomComm_t comm;
    loomConfig_t config = LOOM_CONFIG_INITIALIZER;
    char host[32];

    alarm(WATCHDOG_SEC);
    memset(&rep, 0, sizeof(rep));
    rep.rank = rank;
    config.timeoutSec = TIMEOUT_SEC;
    snprintf(host, sizeof(host), "shrink-host-%d", rank / 2 + 1);
    if (job->kase == CASE_TCP && setenv("LOOM_HOSTID", host, 1) != 0)
        return testRankFail(rank, 15, "setenv LOOM_HOSTID failed");
    if (loomCommInitRankConfig(&comm, nranks, *id, rank, &config) != loomSuccess)
        return testRankFail(rank, 10, "loomCommInitRankConfig failed: %s", loomGetLastError(NULL));
    float *buf = malloc(COUNT * sizeof(*buf));
    if (buf == NULL)
        return testRankFail(rank, 11, "out of memory for %u floats", COUNT);
    for (size_t i = 0; i < COUNT; i++)
        buf[i] = (float)(i % 3);
    loomResult_t res = loomSuccess;
    for (int it = 0; res == loomSuccess; it++) {
        res = loomAllReduce(buf, buf, COUNT, loomFloat32, loomMax, comm, NULL);
        if (res == loomSuccess && it == 0 && write(job->readyFd[1], "r", 1) != 1)
            return testRankFail(rank, 13, "cannot tell the test it started looping");
    }
    rep.errorAt = testNowSec();
    rep.loopResult = res;
    afterFailure(job, comm, rank, &rep);
    loomCommDestroy(comm);
    free(buf);
    if (write(job->reportFd[1], &rep, sizeof(rep)) != sizeof(rep))
        return testRankFail(rank, 14, "cannot write its report to the test");
    return 0;
}

/* ---- the parent ---- */

static void waitReady(struct job *job, const pid_t *pids)
{
    for (int got = 0, waitedMs = 0; got < NRANKS; waitedMs += 200) {
        struct pollfd p = {job->readyFd[0], POLLIN, 0};
        char c;
        if (poll(&p, 1, 200) == 1) {
            got += read(job->readyFd[0], &c, 1) == 1;
            continue;
        }
        for (int r = 0; r < NRANKS; r++) {
            int st;
            ck_assert_msg(waitpid(pids[r], &st, WNOHANG) != pids[r],
                          "rank %d exited before its first AllReduce ended", r);
        }
        ck_assert_msg(waitedMs < 60000, "only %d of %d ranks started looping", got, NRANKS);
    }
}

static void reportPrint(enum kase k, const struct report *rep, double killAt)
{
    printf("%-13s %-4d %-18s %-7.3f %-8.3f %-8.3f %s\n", caseName[k], rep->rank,
           loomGetErrorString((loomResult_t)rep->shrinkResult), rep->errorAt - killAt,
           rep->shrunkAt - killAt, rep->shrinkResult == loomSuccess ? rep->firstAt - killAt : 0.0,
           rep->shrinkResult == loomSuccess ? "" : rep->error);
    fflush(stdout);
}

static void reportCheck(enum kase k, const struct report *rep)
{
    int listed = 0;
    for (int i = 0; i < rep->nfailed; i++)
        listed |= rep->failed[i] == VICTIM;
    ck_assert_msg(rep->loopResult != loomSuccess, "rank %d: the loop ended without an error",
                  rep->rank);
    ck_assert_msg(listed, "rank %d: loomCommGetFailedRanks does not list rank %d (%d listed)",
                  rep->rank, VICTIM, rep->nfailed);
    if (k == CASE_MISMATCH) {
        ck_assert_msg(rep->shrinkResult == loomInvalidUsage,
                      "rank %d: mismatched lists gave %s: %s", rep->rank,
                      loomGetErrorString((loomResult_t)rep->shrinkResult), rep->error);
        ck_assert_msg(strstr(rep->error, "{1, 3}") && strstr(rep->error, "{3}"),
                      "rank %d: \"%s\" does not name both lists", rep->rank, rep->error);
        return;
    }
    if (k == CASE_SECOND)
        ck_assert_msg(rep->firstShrink == loomRemoteError,
                      "rank %d: a death during the shrink gave %s, not loomRemoteError", rep->rank,
                      loomGetErrorString((loomResult_t)rep->firstShrink));
    int expectSize = k == CASE_SECOND ? NRANKS - 2 : NRANKS - 1;
    ck_assert_msg(rep->shrinkResult == loomSuccess, "rank %d: shrink failed: %s", rep->rank,
                  rep->error);
    ck_assert_int_eq(rep->newSize, expectSize);
    ck_assert_int_eq(rep->newRank, rep->rank); /* every rank excluded is above the survivors */
    ck_assert_msg(rep->correct == AFTER_ALLREDUCES, "rank %d: %d of %d AllReduces were right",
                  rep->rank, rep->correct, AFTER_ALLREDUCES);
}

static void runCase(enum kase k)
{
    struct job job = {.kase = k};
    struct testRanks t;
    loomUniqueId id;
    int survivors = k == CASE_SECOND ? NRANKS - 2 : NRANKS - 1;

    ck_assert_int_eq(pipe(job.readyFd), 0);
    ck_assert_int_eq(pipe(job.reportFd), 0);
    ck_assert_int_eq(testRanksFork(&t, NRANKS, rankMain, &job), 0);
    ck_assert_int_eq(loomGetUniqueId(&id), loomSuccess);
    ck_assert_int_eq(testRanksGo(&t, &id), 0);
    waitReady(&job, t.pids);
    testSleepMs(50);
    double killAt = testNowSec();
    kill(t.pids[VICTIM], SIGKILL);
    /* The dead stay unreaped (zombies) until every report is in, as under a real launcher. */
    for (int i = 0; i < survivors; i++) {
        struct report rep;
        struct pollfd p = {job.reportFd[0], POLLIN, 0};
        ck_assert_msg(poll(&p, 1, 3 * TIMEOUT_SEC * 1000) == 1,
                      "%d of %d survivors reported within %d s", i, survivors, 3 * TIMEOUT_SEC);
        ck_assert_int_eq(read(job.reportFd[0], &rep, sizeof(rep)), sizeof(rep));
        rep.error[sizeof(rep.error) - 1] = '\0';
        reportPrint(k, &rep, killAt);
        reportCheck(k, &rep);
    }
    for (int r = 0; r < NRANKS; r++) {
        int st;
        ck_assert_int_eq(waitpid(t.pids[r], &st, 0), t.pids[r]);
        if (r != VICTIM && !(k == CASE_SECOND && r == SECOND))
            ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0, "rank %d ended with status %d", r,
                          st);
    }
}

START_TEST(test_shrink)
{
    runCase((enum kase)_i);
}
END_TEST

int main(void)
{
    setenv("LOOM_SOCKET_IFNAME", "lo", 0);
    printf("%-13s %-4s %-18s %-7s %-8s %-8s %s\n", "case", "rank", "shrink", "error_s", "shrunk_s",
           "first_s", "error");
    return testRunCases("shrink", test_shrink, NCASES, 150);
}
