/*
 * testranks.h — ranks for the tests, as children forked before any thread.
 *
 * A process that has threads must not fork and then allocate: a lock that
 * another thread held at the moment of the fork stays held in the child
 * forever. glibc's malloc guards itself against this; the allocator of
 * AddressSanitizer (as shipped with gcc 12) does not, so a rank forked while
 * the bootstrap root thread was allocating hung in its first calloc. Getting
 * a unique id starts that thread, so the tests fork their ranks first; each
 * child waits on a pipe until the test has made the id and hands it over.
 *
 *   struct testRanks t;
 *   testRanksFork(&t, 4, rankMain, arg);   // children wait
 *   loomGetUniqueId(&id);                   // the root thread starts here
 *   testRanksGo(&t, &id);                   // children run rankMain(r, 4, &id, arg)
 */
#ifndef LOOM_TEST_RANKS_H_
#define LOOM_TEST_RANKS_H_

#include <check.h>
#include <sys/types.h>

#include "loom.h"

#define TEST_MAX_RANKS 16

/* A rank's life; its result is the child's exit status. */
typedef int (*testRankFn)(int rank, int nranks, const loomUniqueId *id, void *arg);

struct testRanks {
    int nranks;
    pid_t pids[TEST_MAX_RANKS];
    int idFds[TEST_MAX_RANKS]; /* write ends of the pipes the children wait on */
};

/* Forks nranks children that wait for the id, then _exit(fn(rank, nranks, &id, arg)). 0 or -1. */
int testRanksFork(struct testRanks *t, int nranks, testRankFn fn, void *arg);
/* Hands every waiting child the id. 0 or -1. */
int testRanksGo(struct testRanks *t, const loomUniqueId *id);

/*
 * A rank's failure in words: prints "rank R: <what> (exit status CODE)" on
 * stderr, which the test's log keeps, and returns code for the rank to
 * return. Every nonzero result of a testRankFn goes through it, so that a
 * failed test says what went wrong rather than only which number.
 */
int testRankFail(int rank, int code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* Seconds on CLOCK_MONOTONIC, one clock for every process of the host. */
double testNowSec(void);
/* Sleeps ms milliseconds, signals or not. */
void testSleepMs(int ms);

/*
 * loomInProgress (a non-blocking comm's) waited out, up to timeoutSec, by
 * polling loomCommGetAsyncError; any other res is returned as it is.
 */
loomResult_t testSettle(loomComm_t comm, loomResult_t res, int timeoutSec);
/*
 * The exact AllReduces of the recovery tests on the communicator they made
 * (shrunk, grown, split): `iters` float sums of odd, growing counts, element
 * j of rank r being (r + 1) * (it + 1) + j % 5, each result checked to the
 * bit; non-blocking comms are waited out. Returns how many were right, and
 * the time the first one ended in *firstAt (may be NULL).
 */
int testExactAllReduces(loomComm_t comm, int iters, double *firstAt);
/* Waits for every rank; each must have exited with status 0 (a Check failure if not). */
void testRanksReap(const struct testRanks *t);
/* Runs `test` (START_TEST) as the loop cases 0 .. ncases-1 of one suite; the exit status. */
int testRunCases(const char *name, const TTest *test, int ncases, int timeoutSec);

#endif /* LOOM_TEST_RANKS_H_ */
