/*
 * check_revoke.c — loomCommRevoke stops an AllReduce blocked on a rank that
 * never comes, on real processes, and the communicator then serves only as
 * the parent of a new one.
 *
 * Three ranks; rank 2 never calls the AllReduce that ranks 0 and 1 enter.
 *
 *   blocking     ranks 0 and 1 block in loomAllReduce on a thread of their
 *                own; the main thread revokes after 300 ms. The AllReduce
 *                must return loomRemoteError saying "revoked", the revoke
 *                loomSuccess, loomCommGetAsyncError loomSuccess after it. Then
 *                all three (rank 2 revokes with nothing in flight) split the
 *                revoked communicator and run 20 exact AllReduces on the new
 *                one.
 *   non-blocking config.blocking = 0: the AllReduce is queued (loomInProgress);
 *                the revoke returns loomInProgress (or loomSuccess if the
 *                AllReduce stopped before it looked), loomCommGetAsyncError
 *                loomInProgress until the queued AllReduce has stopped (the
 *                window can be microseconds: whether it was seen is printed),
 *                then loomSuccess and nothing else. Ranks 0 and 1 shrink without rank 2
 *                (LOOM_SHRINK_DEFAULT) and run 20 exact AllReduces; rank 2
 *                waits until they are done.
 *
 * In both, a collective and loomCommFinalize on the revoked communicator
 * return loomInvalidUsage with a line saying it was revoked, and a flag
 * other than LOOM_REVOKE_DEFAULT is loomInvalidArgument.
 *
 * Printed, never asserted (the machine is shared): the seconds from the
 * revoke to the end of the stopped AllReduce, and to the new communicator's
 * first AllReduce, and whether loomCommGetAsyncError was seen giving
 * loomInProgress:
 *
 *   case          rank op-result          stop_s  first_s  seen
 *
 * Every rank runs under an alarm() watchdog, and the parent stops waiting
 * for reports after a bound, so a hang is a failure.
 */
#include <check.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "loom.h"
#include "testranks.h"

#define NRANKS 3
#define ABSENT 2 /* the rank that never calls the AllReduce */
#define COUNT 4096
#define AFTER_ALLREDUCES 20
#define TIMEOUT_SEC 30
#define WATCHDOG_SEC 90

enum kase { CASE_BLOCKING, CASE_NONBLOCKING, NCASES };
static const char *caseName[NCASES] = {"blocking", "non-blocking"};

struct report {
    int rank;
    int opResult; /* the AllReduce the revoke stopped */
    char opLine[300];
    int revokeResult;
    int sawInProgress; /* loomCommGetAsyncError gave loomInProgress after the revoke */
    int asyncAfter;    /* and then this */
    int afterResult;   /* an AllReduce on the revoked comm */
    char afterLine[300];
    int finalizeResult;
    int badFlagsResult;
    int newResult; /* the split or shrink */
    char newLine[300];
    int newSize, correct;
    double revokeAt, stoppedAt, firstAt;
};

struct job {
    enum kase kase;
    int reportFd[2];
    int releaseFd[2]; /* the parent releases the absent rank when the others are done */
};

/* ---- a rank ---- */

struct blocked {
    loomComm_t comm;
    float *buf;
    loomResult_t res;
    char line[300];
    double endAt;
};

static void *blockedAllReduce(void *arg)
{
    struct blocked *b = arg;
    b->res = loomAllReduce(b->buf, b->buf, COUNT, loomFloat32, loomSum, b->comm, NULL);
    b->endAt = testNowSec();
    snprintf(b->line, sizeof(b->line), "%s", loomGetLastError(b->comm));
    return NULL;
}

/* Ranks 0 and 1: an AllReduce that cannot end, revoked. */
static void revokeBlocked(const struct job *job, loomComm_t comm, struct report *rep)
{
    static float buf[COUNT];
    struct blocked b = {.comm = comm, .buf = buf, .res = loomSuccess};
    pthread_t thread;
    int threaded = job->kase == CASE_BLOCKING;

    if (threaded)
        pthread_create(&thread, NULL, blockedAllReduce, &b);
    else
        b.res = loomAllReduce(buf, buf, COUNT, loomFloat32, loomSum, comm, NULL);
    testSleepMs(300);
    rep->revokeAt = testNowSec();
    rep->revokeResult = loomCommRevoke(comm, LOOM_REVOKE_DEFAULT);
    loomResult_t e = loomInProgress;
    for (int ms = 0; ms < 10000 && e == loomInProgress; ms++) {
        loomCommGetAsyncError(comm, &e);
        rep->sawInProgress |= e == loomInProgress;
        if (e == loomInProgress)
            testSleepMs(1);
    }
    rep->asyncAfter = e;
    if (threaded) {
        pthread_join(thread, NULL);
        rep->opResult = b.res;
        rep->stoppedAt = b.endAt;
        snprintf(rep->opLine, sizeof(rep->opLine), "%s", b.line);
    } else {
        /* The queued AllReduce's own outcome is gone with the revoke; what it was is kept. */
        rep->opResult = b.res;
        rep->stoppedAt = testNowSec();
    }
    rep->afterResult = loomAllReduce(buf, buf, COUNT, loomFloat32, loomSum, comm, NULL);
    snprintf(rep->afterLine, sizeof(rep->afterLine), "%s", loomGetLastError(comm));
    rep->finalizeResult = loomCommFinalize(comm);
    rep->badFlagsResult = loomCommRevoke(comm, 0x4);
}

static void makeNew(const struct job *job, loomComm_t comm, int rank, struct report *rep)
{
    loomComm_t newcomm = NULL;
    loomResult_t res;
    int absent[] = {ABSENT};
    if (job->kase == CASE_BLOCKING)
        res = loomCommSplit(comm, 0, rank, &newcomm, NULL);
    else
        res = loomCommShrink(comm, absent, 1, &newcomm, NULL, LOOM_SHRINK_DEFAULT);
    if (res == loomInProgress)
        res = testSettle(newcomm, res, TIMEOUT_SEC);
    rep->newResult = res;
    snprintf(rep->newLine, sizeof(rep->newLine), "%s", loomGetLastError(comm));
    if (res != loomSuccess)
        return;
    loomCommCount(newcomm, &rep->newSize);
    rep->correct = testExactAllReduces(newcomm, AFTER_ALLREDUCES, &rep->firstAt);
    loomCommDestroy(newcomm);
}

static int rankMain(int rank, int nranks, const loomUniqueId *id, void *arg)
{
    struct job *job = arg;
    struct report rep;
    loomComm_t comm;
    loomConfig_t config = LOOM_CONFIG_INITIALIZER;

    alarm(WATCHDOG_SEC);
    memset(&rep, 0, sizeof(rep));
    rep.rank = rank;
    config.timeoutSec = TIMEOUT_SEC;
    config.blocking = job->kase == CASE_BLOCKING;
    loomResult_t res = loomCommInitRankConfig(&comm, nranks, *id, rank, &config);
    if (res == loomInProgress)
        res = testSettle(comm, res, TIMEOUT_SEC);
    if (res != loomSuccess)
        return testRankFail(rank, 10, "loomCommInitRankConfig failed: %s", loomGetLastError(NULL));
    if (rank != ABSENT) {
        revokeBlocked(job, comm, &rep);
        makeNew(job, comm, rank, &rep);
    } else if (job->kase == CASE_BLOCKING) {
        rep.revokeResult = loomCommRevoke(comm, LOOM_REVOKE_DEFAULT);
        makeNew(job, comm, rank, &rep);
    } else {
        char c;
        struct pollfd p = {job->releaseFd[0], POLLIN, 0};
        if (poll(&p, 1, WATCHDOG_SEC * 1000) != 1 || read(job->releaseFd[0], &c, 1) != 1)
            return testRankFail(rank, 12, "never released by the test");
    }
    loomCommDestroy(comm);
    if (write(job->reportFd[1], &rep, sizeof(rep)) != sizeof(rep))
        return testRankFail(rank, 14, "cannot write its report to the test");
    return 0;
}

/* ---- the parent ---- */

static void reportCheck(enum kase k, const struct report *rep)
{
    int r = rep->rank;
    int expectSize = k == CASE_BLOCKING ? NRANKS : NRANKS - 1;
    if (r != ABSENT) {
        if (k == CASE_BLOCKING) {
            ck_assert_msg(rep->opResult == loomRemoteError,
                          "rank %d: the revoked AllReduce returned %s: %s", r,
                          loomGetErrorString((loomResult_t)rep->opResult), rep->opLine);
            ck_assert_msg(strstr(rep->opLine, "revoked") != NULL,
                          "rank %d: the stopped AllReduce's line does not say revoked: %s", r,
                          rep->opLine);
            ck_assert_msg(rep->revokeResult == loomSuccess, "rank %d: revoke gave %s", r,
                          loomGetErrorString((loomResult_t)rep->revokeResult));
        } else {
            ck_assert_msg(rep->opResult == loomInProgress,
                          "rank %d: the queued AllReduce returned %s", r,
                          loomGetErrorString((loomResult_t)rep->opResult));
            /* loomSuccess when the stopped AllReduce was out of the way before the revoke
             * looked: quiescence can come within microseconds. */
            ck_assert_msg(rep->revokeResult == loomInProgress || rep->revokeResult == loomSuccess,
                          "rank %d: a non-blocking revoke of a queued AllReduce gave %s", r,
                          loomGetErrorString((loomResult_t)rep->revokeResult));
        }
        ck_assert_msg(rep->asyncAfter == loomSuccess,
                      "rank %d: loomCommGetAsyncError after the revoke: %s", r,
                      loomGetErrorString((loomResult_t)rep->asyncAfter));
        ck_assert_msg(rep->afterResult == loomInvalidUsage && strstr(rep->afterLine, "revoked"),
                      "rank %d: an AllReduce on the revoked comm gave %s: %s", r,
                      loomGetErrorString((loomResult_t)rep->afterResult), rep->afterLine);
        ck_assert_int_eq(rep->finalizeResult, loomInvalidUsage);
        ck_assert_int_eq(rep->badFlagsResult, loomInvalidArgument);
    } else if (k == CASE_NONBLOCKING) {
        return;
    } else {
        ck_assert_msg(rep->revokeResult == loomSuccess,
                      "rank %d: a revoke with nothing in flight gave %s", r,
                      loomGetErrorString((loomResult_t)rep->revokeResult));
    }
    ck_assert_msg(rep->newResult == loomSuccess, "rank %d: %s of the revoked comm failed: %s", r,
                  k == CASE_BLOCKING ? "the split" : "the shrink", rep->newLine);
    ck_assert_int_eq(rep->newSize, expectSize);
    ck_assert_msg(rep->correct == AFTER_ALLREDUCES, "rank %d: %d of %d AllReduces were right", r,
                  rep->correct, AFTER_ALLREDUCES);
}

static void runCase(enum kase k)
{
    struct job job = {.kase = k};
    struct testRanks t;
    loomUniqueId id;

    ck_assert_int_eq(pipe(job.reportFd), 0);
    ck_assert_int_eq(pipe(job.releaseFd), 0);
    ck_assert_int_eq(testRanksFork(&t, NRANKS, rankMain, &job), 0);
    ck_assert_int_eq(loomGetUniqueId(&id), loomSuccess);
    ck_assert_int_eq(testRanksGo(&t, &id), 0);
    int reports = k == CASE_BLOCKING ? NRANKS : NRANKS - 1;
    for (int i = 0; i < reports + (k == CASE_NONBLOCKING); i++) {
        struct report rep;
        struct pollfd p = {job.reportFd[0], POLLIN, 0};
        if (i == reports)
            ck_assert_int_eq(write(job.releaseFd[1], "go", 1), 1);
        ck_assert_msg(poll(&p, 1, 2 * TIMEOUT_SEC * 1000) == 1, "%d of %d ranks reported", i,
                      reports);
        ck_assert_int_eq(read(job.reportFd[0], &rep, sizeof(rep)), sizeof(rep));
        rep.opLine[sizeof(rep.opLine) - 1] = rep.afterLine[sizeof(rep.afterLine) - 1] = '\0';
        rep.newLine[sizeof(rep.newLine) - 1] = '\0';
        if (rep.rank != ABSENT)
            printf("%-13s %-4d %-18s %-7.3f %-8.3f %-4s %s\n", caseName[k], rep.rank,
                   loomGetErrorString((loomResult_t)rep.opResult), rep.stoppedAt - rep.revokeAt,
                   rep.firstAt - rep.revokeAt, rep.sawInProgress ? "yes" : "no", rep.opLine);
        fflush(stdout);
        reportCheck(k, &rep);
    }
    testRanksReap(&t);
}

START_TEST(test_revoke)
{
    runCase((enum kase)_i);
}
END_TEST

int main(void)
{
    setenv("LOOM_SOCKET_IFNAME", "lo", 0);
    printf("%-13s %-4s %-18s %-7s %-8s %-4s %s\n", "case", "rank", "op-result", "stop_s", "first_s",
           "seen", "line of the stopped AllReduce");
    return testRunCases("revoke", test_revoke, NCASES, 150);
}
