/*
 * check_nonblocking.c — the non-blocking mode (config.blocking = 0).
 *
 * Init returns loomInProgress with the handle set, and the communicator is
 * built on a thread; collectives with a NULL stream return loomInProgress and
 * run on the communicator's own thread; loomCommGetAsyncError says
 * loomInProgress until everything issued is done, then loomSuccess or the
 * error. Calls that need a finished communicator are refused while init
 * runs; loomCommAbort ends an init or a queued collective that waits on a
 * peer that never comes, and returns itself. Several ranks are forked
 * children of the test process, over the real shared-memory transport.
 */
#include <check.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "loom.h"
#include "testranks.h"

#define POLL_LIMIT_SEC 60

static void sleepMs(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

static double monoNow(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* Polls loomCommGetAsyncError until it is not loomInProgress (or the limit: a hang). */
static loomResult_t pollDone(loomComm_t comm)
{
    loomResult_t state = loomInProgress;
    double end = monoNow() + POLL_LIMIT_SEC;
    while (monoNow() < end) {
        if (loomCommGetAsyncError(comm, &state) != loomSuccess)
            return loomInternalError;
        if (state != loomInProgress)
            return state;
        sleepMs(1);
    }
    return loomInProgress;
}

static loomConfig_t nonBlocking(int timeoutSec)
{
    loomConfig_t config = LOOM_CONFIG_INITIALIZER;
    config.blocking = 0;
    if (timeoutSec > 0)
        config.timeoutSec = timeoutSec;
    return config;
}

/* Asserts `call` returns `res` and the last error line contains `word`. */
#define ck_error(call, res, word)                                                                  \
    do {                                                                                           \
        ck_assert_int_eq((call), (res));                                                           \
        ck_assert_msg(strstr(loomGetLastError(NULL), (word)) != NULL,                              \
                      "last error \"%s\" does not name \"%s\"", loomGetLastError(NULL), (word));   \
    } while (0)

START_TEST(test_solo_init_and_collectives)
{
    loomUniqueId id;
    loomComm_t comm = NULL;
    loomConfig_t config = nonBlocking(0);
    ck_assert_int_eq(loomGetUniqueId(&id), loomSuccess);
    ck_assert_int_eq(loomCommInitRankConfig(&comm, 1, id, 0, &config), loomInProgress);
    ck_assert_ptr_nonnull(comm);
    ck_assert_int_eq(pollDone(comm), loomSuccess);
    int in[64], out[64];
    for (int i = 0; i < 64; i++)
        in[i] = i;
    memset(out, 0, sizeof(out));
    ck_assert_int_eq(loomAllReduce(in, out, 64, loomInt32, loomSum, comm, NULL), loomInProgress);
    ck_assert_int_eq(pollDone(comm), loomSuccess);
    ck_assert(memcmp(in, out, sizeof(in)) == 0);
    /* A group goes to the same queue and is one unit of work. */
    ck_assert_int_eq(loomGroupStart(), loomSuccess);
    ck_assert_int_eq(loomSend(in, 64, loomInt32, 0, comm, NULL), loomSuccess);
    ck_assert_int_eq(loomRecv(out, 64, loomInt32, 0, comm, NULL), loomSuccess);
    ck_assert_int_eq(loomGroupEnd(), loomInProgress);
    ck_assert_int_eq(pollDone(comm), loomSuccess);
    ck_assert(memcmp(in, out, sizeof(in)) == 0);
    ck_assert_int_eq(loomCommFinalize(comm), loomSuccess);
    ck_assert_int_eq(loomCommDestroy(comm), loomSuccess);
}
END_TEST

/* A 2-rank communicator whose second rank never comes: init stays in progress. */
START_TEST(test_calls_refused_while_init_runs)
{
    loomUniqueId id;
    loomComm_t comm = NULL;
    loomConfig_t config = nonBlocking(0);
    int x = 1, n = 0;
    ck_assert_int_eq(loomGetUniqueId(&id), loomSuccess);
    ck_assert_int_eq(loomCommInitRankConfig(&comm, 2, id, 0, &config), loomInProgress);
    loomResult_t state;
    ck_assert_int_eq(loomCommGetAsyncError(comm, &state), loomSuccess);
    ck_assert_int_eq(state, loomInProgress);
    ck_error(loomAllReduce(&x, &x, 1, loomInt32, loomSum, comm, NULL), loomInvalidUsage,
             "still being created");
    loomComm_t sub;
    ck_error(loomCommSplit(comm, 0, 0, &sub, NULL), loomInvalidUsage, "still being created");
    ck_assert_int_eq(loomCommFinalize(comm), loomInProgress);
    ck_assert_int_eq(loomCommCount(comm, &n), loomSuccess);
    ck_assert_int_eq(n, 2);
    /* Abort ends the init thread's wait for rank 1. */
    double t0 = monoNow();
    ck_assert_int_eq(loomCommAbort(comm), loomSuccess);
    ck_assert_msg(monoNow() - t0 < POLL_LIMIT_SEC, "loomCommAbort hung");
    ck_error(loomCommGetAsyncError(comm, &state), loomInvalidUsage, "destroyed");
}
END_TEST

/* An init that fails on its thread is reported by GetAsyncError and named by GetLastError. */
START_TEST(test_init_failure_reported)
{
    loomUniqueId id;
    loomComm_t comm = NULL;
    loomConfig_t config = nonBlocking(0);
    ck_assert_int_eq(loomGetUniqueId(&id), loomSuccess);
    id.internal[0] ^= 0x5a; /* no longer a Loom id */
    ck_assert_int_eq(loomCommInitRankConfig(&comm, 1, id, 0, &config), loomInProgress);
    ck_assert_int_eq(pollDone(comm), loomInvalidArgument);
    ck_assert_msg(strstr(loomGetLastError(comm), "unique id") != NULL, "\"%s\"",
                  loomGetLastError(comm));
    int x = 0;
    ck_assert_int_eq(loomAllReduce(&x, &x, 1, loomInt32, loomSum, comm, NULL), loomInvalidArgument);
    ck_assert_int_eq(loomCommDestroy(comm), loomSuccess);
}
END_TEST

START_TEST(test_bad_blocking_value)
{
    loomUniqueId id;
    loomComm_t comm = NULL;
    loomConfig_t config = LOOM_CONFIG_INITIALIZER;
    config.blocking = 7;
    memset(&id, 0, sizeof(id));
    ck_error(loomCommInitRankConfig(&comm, 1, id, 0, &config), loomInvalidArgument, "blocking");
    ck_assert_ptr_null(comm);
}
END_TEST

/* ---- several ranks ---- */

/* Forks nranks children running fn; `stopped` (or -1) is a rank expected to stop itself. */
static void runRanks(int nranks, testRankFn fn, int stopped)
{
    struct testRanks t;
    loomUniqueId id;
    ck_assert_int_eq(testRanksFork(&t, nranks, fn, NULL), 0);
    ck_assert_int_eq(loomGetUniqueId(&id), loomSuccess);
    ck_assert_int_eq(testRanksGo(&t, &id), 0);
    for (int r = 0; r < nranks; r++) {
        int st;
        if (r == stopped)
            continue;
        ck_assert_int_eq(waitpid(t.pids[r], &st, 0), t.pids[r]);
        ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0, "rank %d failed (status 0x%x)", r, st);
    }
    if (stopped >= 0) {
        kill(t.pids[stopped], SIGKILL);
        waitpid(t.pids[stopped], NULL, 0);
    }
}

/* A non-blocking init polled to its end; NULL if it did not succeed. */
static loomComm_t rankInit(int rank, int n, const loomUniqueId *id, int timeoutSec)
{
    loomComm_t comm;
    loomConfig_t config = nonBlocking(timeoutSec);
    alarm(POLL_LIMIT_SEC + 30); /* a hang is a failure, not a stuck suite */
    if (loomCommInitRankConfig(&comm, n, *id, rank, &config) != loomInProgress)
        return NULL;
    return pollDone(comm) == loomSuccess ? comm : NULL;
}

/* Many calls queued back to back, then one poll: results in issue order. */
static int queuedCollectives(int rank, int n, const loomUniqueId *id, void *arg)
{
    loomComm_t comm = rankInit(rank, n, id, 0);
    if (comm == NULL)
        return testRankFail(rank, 1, "non-blocking init failed: %s", loomGetLastError(NULL));
    enum { COUNT = 10000 };
    static int a[COUNT], b[COUNT], all[4 * COUNT];
    for (int i = 0; i < COUNT; i++)
        a[i] = rank + i;
    if (loomAllReduce(a, b, COUNT, loomInt32, loomSum, comm, NULL) != loomInProgress ||
        loomBroadcast(b, b, COUNT, loomInt32, n - 1, comm, NULL) != loomInProgress ||
        loomAllGather(a, all, COUNT, loomInt32, comm, NULL) != loomInProgress)
        return testRankFail(rank, 3, "a queued call did not return loomInProgress");
    if (pollDone(comm) != loomSuccess)
        return testRankFail(rank, 4, "the queued calls did not end in loomSuccess: %s",
                            loomGetLastError(comm));
    for (int i = 0; i < COUNT; i++)
        if (b[i] != n * (n - 1) / 2 + n * i)
            return testRankFail(rank, 5, "AllReduce then Broadcast: element %d is %d, not %d", i,
                                b[i], n * (n - 1) / 2 + n * i);
    for (int p = 0; p < n; p++)
        if (all[p * COUNT + 7] != p + 7)
            return testRankFail(rank, 6, "AllGather: rank %d's element 7 is %d, not %d", p,
                                all[p * COUNT + 7], p + 7);
    if (loomCommDestroy(comm) != loomSuccess)
        return testRankFail(rank, 7, "loomCommDestroy failed: %s", loomGetLastError(NULL));
    return 0;
}

START_TEST(test_queued_collectives)
{
    runRanks(3, queuedCollectives, -1);
}
END_TEST

/*
 * Rank 1 stops itself after init; rank 0's queued AllReduce waits for it
 * (GetAsyncError keeps saying loomInProgress), until loomCommAbort ends it.
 */
static int abortQueued(int rank, int n, const loomUniqueId *id, void *arg)
{
    loomComm_t comm = rankInit(rank, n, id, POLL_LIMIT_SEC * 4);
    if (comm == NULL)
        return testRankFail(rank, 1, "non-blocking init failed: %s", loomGetLastError(NULL));
    if (rank == 1) {
        raise(SIGSTOP);
        return 0;
    }
    static float buf[1 << 20];
    if (loomAllReduce(buf, buf, 1 << 20, loomFloat32, loomSum, comm, NULL) != loomInProgress)
        return testRankFail(rank, 3, "the queued AllReduce did not return loomInProgress");
    sleepMs(300);
    loomResult_t state;
    if (loomCommGetAsyncError(comm, &state) != loomSuccess || state != loomInProgress)
        return testRankFail(rank, 4, "with its peer stopped, GetAsyncError said %s",
                            loomGetErrorString(state));
    if (loomCommAbort(comm) != loomSuccess)
        return testRankFail(rank, 5, "loomCommAbort failed: %s", loomGetLastError(NULL));
    return 0;
}

START_TEST(test_abort_ends_queued_collective)
{
    runRanks(2, abortQueued, 1);
}
END_TEST

/* With a short timeout the queued call fails by itself, and GetAsyncError says loomTimeout. */
static int timeoutQueued(int rank, int n, const loomUniqueId *id, void *arg)
{
    loomComm_t comm = rankInit(rank, n, id, 1);
    if (comm == NULL)
        return testRankFail(rank, 1, "non-blocking init failed: %s", loomGetLastError(NULL));
    if (rank == 1) {
        raise(SIGSTOP);
        return 0;
    }
    int x = 1;
    if (loomAllReduce(&x, &x, 1, loomInt32, loomSum, comm, NULL) != loomInProgress)
        return testRankFail(rank, 3, "the queued AllReduce did not return loomInProgress");
    if (pollDone(comm) != loomTimeout)
        return testRankFail(rank, 4, "with its peer stopped, the call did not end in loomTimeout");
    if (strstr(loomGetLastError(comm), "LOOM_TIMEOUT") == NULL)
        return testRankFail(rank, 5, "the timeout's line does not name LOOM_TIMEOUT: \"%s\"",
                            loomGetLastError(comm));
    if (loomCommDestroy(comm) != loomSuccess)
        return testRankFail(rank, 6, "loomCommDestroy failed: %s", loomGetLastError(NULL));
    return 0;
}

START_TEST(test_timeout_reported)
{
    runRanks(2, timeoutQueued, 1);
}
END_TEST

static Suite *nonBlockingSuite(void)
{
    Suite *s = suite_create("nonblocking");
    TCase *solo = tcase_create("solo");
    tcase_set_timeout(solo, POLL_LIMIT_SEC + 30);
    tcase_add_test(solo, test_solo_init_and_collectives);
    tcase_add_test(solo, test_calls_refused_while_init_runs);
    tcase_add_test(solo, test_init_failure_reported);
    tcase_add_test(solo, test_bad_blocking_value);
    suite_add_tcase(s, solo);
    TCase *multi = tcase_create("ranks");
    tcase_set_timeout(multi, POLL_LIMIT_SEC + 60);
    tcase_add_test(multi, test_queued_collectives);
    tcase_add_test(multi, test_abort_ends_queued_collective);
    tcase_add_test(multi, test_timeout_reported);
    suite_add_tcase(s, multi);
    return s;
}

int main(void)
{
    setenv("LOOM_SOCKET_IFNAME", "lo", 0);
    SRunner *sr = srunner_create(nonBlockingSuite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
