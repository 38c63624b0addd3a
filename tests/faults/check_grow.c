/*
 * check_grow.c — loomCommGetUniqueId and loomCommGrow on real processes:
 * a communicator of 3 ranks takes in a fourth, and misuse is an error on
 * every rank, never a hang.
 *
 * Ranks 0..2 make a communicator and run an AllReduce on it; rank 0 (the
 * coordinator) makes a grow id with loomCommGetUniqueId and passes it,
 * through a pipe, to a fourth process, the new rank, which was started
 * with nothing. The cases:
 *
 *   grow       the new rank asks for rank 3 of 4: the grown communicator
 *              has the old ranks in their order and the new one last, and
 *              all four run 20 AllReduces of exact-by-construction values.
 *              Then the same id again, on the same parent and by the new
 *              rank: loomInvalidUsage everywhere (an id serves one grow).
 *   count      the new rank asks for 5 ranks, the others for 4
 *   taken      the new rank asks for rank 1, which a rank of the parent keeps
 *
 * In the misuse cases every one of the four gets loomInvalidUsage and a line
 * that names the mistake. The arguments wrong on their own (rank not -1 with
 * comm, id NULL without comm, nranks not above the parent's) are
 * loomInvalidArgument at once.
 *
 * Printed, never asserted (the machine is shared): for the new rank, the
 * seconds from its start (it has the id in hand) to the end of its grow and
 * of its first AllReduce on the grown communicator:
 *
 *   case    rank result             grown_s first_s  line
 *
 * Every rank runs under an alarm() watchdog, and the parent stops waiting
 * for reports after a bound, so a hang is a failure.
 */
#include <check.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "loom.h"
#include "testranks.h"

#define OLD 3
#define NEW_RANK 3 /* the process that joins */
#define AFTER_ALLREDUCES 20
#define TIMEOUT_SEC 20
#define WATCHDOG_SEC 90

enum kase { CASE_GROW, CASE_COUNT, CASE_TAKEN, NCASES };
static const char *caseName[NCASES] = {"grow", "count", "taken"};

struct report {
    int rank;
    int badArgs;    /* loomInvalidArgument from each argument check tried */
    int growResult; /* of the grow */
    char line[400];
    int newRank, newSize, correct;
    int reuseResult; /* grow: of the same id again */
    char reuseLine[400];
    double startAt, grownAt, firstAt;
};

struct job {
    enum kase kase;
    int idFd[2]; /* the coordinator hands the new rank the grow id */
    int reportFd[2];
};

/* ---- a rank ---- */

static void grown(loomComm_t newcomm, struct report *rep)
{
    loomCommCount(newcomm, &rep->newSize);
    loomCommUserRank(newcomm, &rep->newRank);
    rep->correct = testExactAllReduces(newcomm, AFTER_ALLREDUCES, &rep->firstAt);
    loomCommDestroy(newcomm);
}

static int newRankMain(const struct job *job, struct report *rep)
{
    loomUniqueId id;
    loomComm_t newcomm = NULL;
    loomConfig_t config = LOOM_CONFIG_INITIALIZER;
    struct pollfd p = {job->idFd[0], POLLIN, 0};

    config.timeoutSec = TIMEOUT_SEC;
    if (poll(&p, 1, WATCHDOG_SEC * 1000) != 1 || read(job->idFd[0], &id, sizeof(id)) != sizeof(id))
        return testRankFail(NEW_RANK, 20, "no grow id from the coordinator");
    rep->startAt = testNowSec();
    rep->badArgs =
        loomCommGrow(NULL, OLD + 1, NULL, NEW_RANK, &newcomm, &config) == loomInvalidArgument;
    int nranks = job->kase == CASE_COUNT ? OLD + 2 : OLD + 1;
    int rank = job->kase == CASE_TAKEN ? 1 : NEW_RANK;
    rep->growResult = loomCommGrow(NULL, nranks, &id, rank, &newcomm, &config);
    rep->grownAt = testNowSec();
    snprintf(rep->line, sizeof(rep->line), "%s", loomGetLastError(NULL));
    if (rep->growResult != loomSuccess)
        return 0;
    grown(newcomm, rep);
    rep->reuseResult = loomCommGrow(NULL, nranks, &id, rank, &newcomm, &config);
    snprintf(rep->reuseLine, sizeof(rep->reuseLine), "%s", loomGetLastError(NULL));
    return 0;
}

static int oldRankMain(const struct job *job, int rank, const loomUniqueId *id, struct report *rep)
{
    loomComm_t comm, newcomm = NULL;
    loomConfig_t config = LOOM_CONFIG_INITIALIZER;
    loomUniqueId growId;
    float x = 1;

    config.timeoutSec = TIMEOUT_SEC;
    if (loomCommInitRankConfig(&comm, OLD, *id, rank, &config) != loomSuccess)
        return testRankFail(rank, 10, "loomCommInitRankConfig failed: %s", loomGetLastError(NULL));
    if (loomAllReduce(&x, &x, 1, loomFloat32, loomSum, comm, NULL) != loomSuccess || x != OLD)
        return testRankFail(rank, 11, "the AllReduce before the grow failed");
    if (rank == 0) {
        if (loomCommGetUniqueId(comm, &growId) != loomSuccess)
            return testRankFail(rank, 12, "loomCommGetUniqueId: %s", loomGetLastError(comm));
        if (write(job->idFd[1], &growId, sizeof(growId)) != sizeof(growId))
            return testRankFail(rank, 13, "cannot hand the new rank the id");
    }
    const loomUniqueId *mine = rank == 0 ? &growId : NULL;
    rep->badArgs = loomCommGrow(comm, OLD + 1, mine, rank, &newcomm, NULL) == loomInvalidArgument &&
                   loomCommGrow(comm, OLD, mine, -1, &newcomm, NULL) == loomInvalidArgument;
    rep->growResult = loomCommGrow(comm, OLD + 1, mine, -1, &newcomm, NULL);
    snprintf(rep->line, sizeof(rep->line), "%s", loomGetLastError(comm));
    if (rep->growResult == loomSuccess) {
        grown(newcomm, rep);
        rep->reuseResult = loomCommGrow(comm, OLD + 1, mine, -1, &newcomm, NULL);
        snprintf(rep->reuseLine, sizeof(rep->reuseLine), "%s", loomGetLastError(comm));
    }
    loomCommDestroy(comm);
    return 0;
}

static int rankMain(int rank, int nranks, const loomUniqueId *id, void *arg)
{
    struct job *job = arg;
    struct report rep;
    (void)nranks;

    alarm(WATCHDOG_SEC);
    memset(&rep, 0, sizeof(rep));
    rep.rank = rank;
    int res = rank == NEW_RANK ? newRankMain(job, &rep) : oldRankMain(job, rank, id, &rep);
    if (res != 0)
        return res;
    if (write(job->reportFd[1], &rep, sizeof(rep)) != sizeof(rep))
        return testRankFail(rank, 14, "cannot write its report to the test");
    return 0;
}

/* ---- the parent ---- */

static void reportCheck(enum kase k, const struct report *rep)
{
    int r = rep->rank;
    const char *named[NCASES] = {"", "asks for 5 ranks", "asks for rank 1"};
    ck_assert_msg(rep->badArgs,
                  "rank %d: an argument wrong on its own was not "
                  "loomInvalidArgument",
                  r);
    if (k != CASE_GROW) {
        ck_assert_msg(rep->growResult == loomInvalidUsage, "rank %d: %s gave %s: %s", r,
                      caseName[k], loomGetErrorString((loomResult_t)rep->growResult), rep->line);
        ck_assert_msg(strstr(rep->line, named[k]) != NULL, "rank %d: \"%s\" does not say \"%s\"", r,
                      rep->line, named[k]);
        return;
    }
    ck_assert_msg(rep->growResult == loomSuccess, "rank %d: the grow failed: %s", r, rep->line);
    ck_assert_int_eq(rep->newSize, OLD + 1);
    ck_assert_int_eq(rep->newRank, r);
    ck_assert_msg(rep->correct == AFTER_ALLREDUCES, "rank %d: %d of %d AllReduces were right", r,
                  rep->correct, AFTER_ALLREDUCES);
    ck_assert_msg(rep->reuseResult == loomInvalidUsage && strstr(rep->reuseLine, "one grow"),
                  "rank %d: the id used again gave %s: %s", r,
                  loomGetErrorString((loomResult_t)rep->reuseResult), rep->reuseLine);
}

static void runCase(enum kase k)
{
    struct job job = {.kase = k};
    struct testRanks t;
    loomUniqueId id;

    ck_assert_int_eq(pipe(job.idFd), 0);
    ck_assert_int_eq(pipe(job.reportFd), 0);
    ck_assert_int_eq(testRanksFork(&t, OLD + 1, rankMain, &job), 0);
    ck_assert_int_eq(loomGetUniqueId(&id), loomSuccess);
    ck_assert_int_eq(testRanksGo(&t, &id), 0);
    for (int i = 0; i < OLD + 1; i++) {
        struct report rep;
        struct pollfd p = {job.reportFd[0], POLLIN, 0};
        ck_assert_msg(poll(&p, 1, 3 * TIMEOUT_SEC * 1000) == 1,
                      "%d of %d ranks reported within %d s", i, OLD + 1, 3 * TIMEOUT_SEC);
        ck_assert_int_eq(read(job.reportFd[0], &rep, sizeof(rep)), sizeof(rep));
        rep.line[sizeof(rep.line) - 1] = rep.reuseLine[sizeof(rep.reuseLine) - 1] = '\0';
        printf("%-7s %-4d %-18s %-7.3f %-8.3f %s\n", caseName[k], rep.rank,
               loomGetErrorString((loomResult_t)rep.growResult),
               rep.rank == NEW_RANK ? rep.grownAt - rep.startAt : 0.0,
               rep.rank == NEW_RANK && rep.firstAt > 0 ? rep.firstAt - rep.startAt : 0.0,
               rep.growResult == loomSuccess ? rep.reuseLine : rep.line);
        fflush(stdout);
        reportCheck(k, &rep);
    }
    testRanksReap(&t);
}

START_TEST(test_grow)
{
    runCase((enum kase)_i);
}
END_TEST

int main(void)
{
    setenv("LOOM_SOCKET_IFNAME", "lo", 0);
    printf("%-7s %-4s %-18s %-7s %-8s %s\n", "case", "rank", "result", "grown_s", "first_s",
           "line (grow: of the id used again)");
    return testRunCases("grow", test_grow, NCASES, 150);
}
