/*
 * check_callback.c — per-operation completion on a host stream
 * (loomStreamAddCallback).
 *
 * Callbacks run in issue order with the operations, each once everything
 * before it is complete (its results in place) and never before; many in
 * flight are all called; bad input is refused with a reason; a call refused
 * at issue leaves the stream alone; and a peer that dies makes the
 * callback after its operation see the error, naming it, within the
 * communicator's timeout. Real streams and communicators (one rank in the
 * test process, or forked ranks over shared memory); the gate below is the
 * only helper, a callback that holds the stream's thread until released.
 */
#include <check.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "comms.h"
#include "loom.h"
#include "testranks.h"

#define NOPS 64
#define COUNT 16

/* What a callback saw. */
struct seen {
    atomic_int calls;
    int order;           /* its place among the callbacks of the test */
    loomResult_t result; /* as passed */
    loomStream_t stream; /* as passed */
    const float *out;    /* the output of the operation before it */
    float want;          /* what out must hold by then */
    int outReady;        /* out held want when called */
    char line[256];      /* loomGetLastError(NULL) in the callback, if result failed */
};

static atomic_int nextOrder;

static void record(loomStream_t s, loomResult_t r, void *arg)
{
    struct seen *e = arg;
    e->order = atomic_fetch_add(&nextOrder, 1);
    e->result = r;
    e->stream = s;
    e->outReady = 1;
    for (int i = 0; e->out && i < COUNT; i++)
        e->outReady &= e->out[i] == e->want;
    if (r != loomSuccess)
        snprintf(e->line, sizeof(e->line), "%s", loomGetLastError(NULL));
    atomic_fetch_add(&e->calls, 1);
}

START_TEST(test_order_on_two_streams)
{
    loomComm_t comm = soloComm();
    loomStream_t s[2];
    static float in[NOPS][COUNT], out[NOPS][COUNT];
    static struct seen seen[NOPS];
    atomic_store(&nextOrder, 0);
    ck_assert_int_eq(loomStreamCreate(&s[0]), loomSuccess);
    ck_assert_int_eq(loomStreamCreate(&s[1]), loomSuccess);
    for (int k = 0; k < NOPS; k++) {
        for (int i = 0; i < COUNT; i++) {
            in[k][i] = (float)k;
            out[k][i] = -1;
        }
        seen[k].out = out[k];
        seen[k].want = (float)k;
        /* one stream only: ops of one communicator on two streams would not be ordered */
        ck_assert_int_eq(loomAllReduce(in[k], out[k], COUNT, loomFloat32, loomSum, comm, s[0]),
                         loomSuccess);
        ck_assert_int_eq(loomStreamAddCallback(s[0], record, &seen[k]), loomSuccess);
    }
    struct seen other = {0};
    ck_assert_int_eq(loomStreamAddCallback(s[1], record, &other), loomSuccess);
    ck_assert_int_eq(loomStreamSynchronize(s[0]), loomSuccess);
    ck_assert_int_eq(loomStreamSynchronize(s[1]), loomSuccess);
    int order = -1;
    for (int k = 0; k < NOPS; k++) {
        ck_assert_int_eq(atomic_load(&seen[k].calls), 1);
        ck_assert_msg(seen[k].outReady,
                      "callback %d ran before its AllReduce's result was in place", k);
        ck_assert_int_eq(seen[k].result, loomSuccess);
        ck_assert_ptr_eq(seen[k].stream, s[0]);
        ck_assert_msg(seen[k].order > order, "callback %d was called out of issue order", k);
        order = seen[k].order;
    }
    ck_assert_int_eq(atomic_load(&other.calls), 1);
    ck_assert_ptr_eq(other.stream, s[1]);
    ck_assert_int_eq(loomStreamDestroy(s[0]), loomSuccess);
    ck_assert_int_eq(loomStreamDestroy(s[1]), loomSuccess);
    loomCommDestroy(comm);
}
END_TEST

/* Holds the stream's thread until released: what is queued behind it cannot have run. */
struct gate {
    pthread_mutex_t lock;
    pthread_cond_t cond;
    int open;
};

static void gateWait(loomStream_t s, loomResult_t r, void *arg)
{
    (void)s;
    (void)r;
    struct gate *g = arg;
    pthread_mutex_lock(&g->lock);
    while (!g->open)
        pthread_cond_wait(&g->cond, &g->lock);
    pthread_mutex_unlock(&g->lock);
}

START_TEST(test_not_before_done)
{
    loomComm_t comm = soloComm();
    loomStream_t s;
    struct gate g = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0};
    float in[COUNT], out[COUNT];
    for (int i = 0; i < COUNT; i++) {
        in[i] = 7;
        out[i] = -1;
    }
    struct seen e = {.out = out, .want = 7};
    ck_assert_int_eq(loomStreamCreate(&s), loomSuccess);
    ck_assert_int_eq(loomStreamAddCallback(s, gateWait, &g), loomSuccess);
    ck_assert_int_eq(loomAllReduce(in, out, COUNT, loomFloat32, loomSum, comm, s), loomSuccess);
    ck_assert_int_eq(loomStreamAddCallback(s, record, &e), loomSuccess);
    /* before: the AllReduce waits behind the gate, and so does its callback */
    ck_assert_int_eq(loomStreamQuery(s), loomInProgress);
    ck_assert_int_eq(atomic_load(&e.calls), 0);
    ck_assert(out[0] == -1);
    pthread_mutex_lock(&g.lock);
    g.open = 1;
    pthread_cond_broadcast(&g.cond);
    pthread_mutex_unlock(&g.lock);
    /* after */
    ck_assert_int_eq(loomStreamSynchronize(s), loomSuccess);
    ck_assert_int_eq(atomic_load(&e.calls), 1);
    ck_assert(e.outReady);
    ck_assert_int_eq(e.result, loomSuccess);
    ck_assert_int_eq(loomStreamQuery(s), loomSuccess);
    ck_assert_int_eq(loomStreamDestroy(s), loomSuccess);
    loomCommDestroy(comm);
}
END_TEST

#define MANY 2000

static atomic_int manyCalls;

static void count(loomStream_t s, loomResult_t r, void *arg)
{
    (void)s;
    (void)arg;
    if (r == loomSuccess)
        atomic_fetch_add(&manyCalls, 1);
}

/* From a callback: waiting for its own stream is refused; queueing on it is fine. */
struct inside {
    loomResult_t sync, destroy, add;
    char syncLine[256];
};

static void fromInside(loomStream_t s, loomResult_t r, void *arg)
{
    (void)r;
    struct inside *in = arg;
    in->sync = loomStreamSynchronize(s);
    snprintf(in->syncLine, sizeof(in->syncLine), "%s", loomGetLastError(NULL));
    in->destroy = loomStreamDestroy(s);
    in->add = loomStreamAddCallback(s, count, NULL);
}

START_TEST(test_many_in_flight)
{
    loomComm_t comm = soloComm();
    loomStream_t s;
    static float buf[MANY / 10][COUNT];
    atomic_store(&manyCalls, 0);
    ck_assert_int_eq(loomStreamCreate(&s), loomSuccess);
    for (int k = 0; k < MANY; k++) {
        if (k % 10 == 0)
            ck_assert_int_eq(
                loomAllReduce(buf[k / 10], buf[k / 10], COUNT, loomFloat32, loomSum, comm, s),
                loomSuccess);
        ck_assert_int_eq(loomStreamAddCallback(s, count, NULL), loomSuccess);
    }
    struct inside in;
    ck_assert_int_eq(loomStreamAddCallback(s, fromInside, &in), loomSuccess);
    ck_assert_int_eq(loomStreamSynchronize(s), loomSuccess);
    /* the one queued from inside ran before Synchronize returned: it was queued before it saw idle
     */
    ck_assert_int_eq(atomic_load(&manyCalls), MANY + 1);
    ck_assert_int_eq(in.sync, loomInvalidUsage);
    ck_assert_msg(strstr(in.syncLine, "itself") != NULL, "line \"%s\"", in.syncLine);
    ck_assert_int_eq(in.destroy, loomInvalidUsage);
    ck_assert_int_eq(in.add, loomSuccess);
    /* the stream lives on after the refused calls */
    ck_assert_int_eq(loomStreamAddCallback(s, count, NULL), loomSuccess);
    ck_assert_int_eq(loomStreamDestroy(s), loomSuccess); /* calls what is still queued */
    ck_assert_int_eq(atomic_load(&manyCalls), MANY + 2);
    loomCommDestroy(comm);
}
END_TEST

START_TEST(test_bad_input)
{
    int notAStream = 0;
    loomStream_t s;
    ck_error(loomStreamAddCallback(NULL, count, NULL), loomInvalidArgument, "stream is NULL");
    ck_error(loomStreamAddCallback((loomStream_t)(void *)&notAStream, count, NULL),
             loomInvalidArgument, "not a loomStream_t");
    ck_error(loomStreamAddCallback((loomStream_t)(uintptr_t)0x10, count, NULL), loomInvalidArgument,
             "not a loomStream_t");
    ck_assert_int_eq(loomStreamCreate(&s), loomSuccess);
    ck_error(loomStreamAddCallback(s, NULL, NULL), loomInvalidArgument, "fn is NULL");
    ck_assert_int_eq(loomStreamDestroy(s), loomSuccess);
    ck_error(loomStreamAddCallback(s, count, NULL), loomInvalidUsage, "destroyed");
}
END_TEST

/* A call refused at issue queues nothing: the callback after it sees success. */
START_TEST(test_refused_call_leaves_stream)
{
    loomComm_t comm = soloComm();
    loomStream_t s;
    float buf[COUNT] = {0};
    struct seen e = {0};
    ck_assert_int_eq(loomStreamCreate(&s), loomSuccess);
    ck_assert_int_eq(loomAllReduce(buf, buf, COUNT, (loomDataType_t)1234, loomSum, comm, s),
                     loomInvalidArgument);
    ck_assert_int_eq(loomStreamAddCallback(s, record, &e), loomSuccess);
    ck_assert_int_eq(loomStreamSynchronize(s), loomSuccess);
    ck_assert_int_eq(atomic_load(&e.calls), 1);
    ck_assert_int_eq(e.result, loomSuccess);
    ck_assert_int_eq(loomStreamDestroy(s), loomSuccess);
    loomCommDestroy(comm);
}
END_TEST

#define DEAD_TIMEOUT_SEC 10

/*
 * Rank 1 dies after one good AllReduce; rank 0's next AllReduce on a stream
 * fails, and the callbacks after it (and after a second callback) get the
 * error with a line naming rank 1, within the timeout (Synchronize returns).
 */
static int deadPeerRank(int rank, int nranks, const loomUniqueId *id, void *arg)
{
    (void)arg;
    loomConfig_t config = LOOM_CONFIG_INITIALIZER;
    config.timeoutSec = DEAD_TIMEOUT_SEC;
    loomComm_t comm;
    if (loomCommInitRankConfig(&comm, nranks, *id, rank, &config) != loomSuccess)
        return testRankFail(rank, 10, "init: %s", loomGetLastError(NULL));
    float buf[COUNT] = {1};
    if (loomAllReduce(buf, buf, COUNT, loomFloat32, loomSum, comm, NULL) != loomSuccess)
        return testRankFail(rank, 11, "first AllReduce: %s", loomGetLastError(NULL));
    if (rank == 1)
        _exit(0); /* dies without a word */
    loomStream_t s;
    struct seen e[2];
    memset(e, 0, sizeof(e));
    if (loomStreamCreate(&s) != loomSuccess)
        return testRankFail(rank, 12, "stream: %s", loomGetLastError(NULL));
    double t0 = testNowSec();
    /* refused at issue if the failure is already known: nothing queued then */
    loomAllReduce(buf, buf, COUNT, loomFloat32, loomSum, comm, s);
    loomAllReduce(buf, buf, COUNT, loomFloat32, loomSum, comm, s);
    loomStreamAddCallback(s, record, &e[0]);
    loomStreamAddCallback(s, record, &e[1]);
    loomResult_t r = loomStreamSynchronize(s);
    double dt = testNowSec() - t0;
    if (r == loomSuccess)
        return testRankFail(rank, 13, "the AllReduces with a dead peer succeeded");
    if (dt > DEAD_TIMEOUT_SEC + 5)
        return testRankFail(rank, 14, "the error took %.1f s (timeout %d s)", dt, DEAD_TIMEOUT_SEC);
    for (int i = 0; i < 2; i++) {
        if (atomic_load(&e[i].calls) != 1)
            return testRankFail(rank, 15, "callback %d called %d times", i,
                                atomic_load(&e[i].calls));
        if (e[i].result != r)
            return testRankFail(rank, 16, "callback %d got %s, Synchronize %s", i,
                                loomGetErrorString(e[i].result), loomGetErrorString(r));
        if (strstr(e[i].line, "rank 1") == NULL)
            return testRankFail(rank, 17, "callback %d's line does not name rank 1: %s", i,
                                e[i].line);
    }
    loomStreamDestroy(s);
    loomCommAbort(comm);
    return 0;
}

START_TEST(test_dead_peer)
{
    struct testRanks t;
    loomUniqueId id;
    ck_assert_int_eq(testRanksFork(&t, 2, deadPeerRank, NULL), 0);
    ck_assert_int_eq(loomGetUniqueId(&id), loomSuccess);
    ck_assert_int_eq(testRanksGo(&t, &id), 0);
    for (int r = 0; r < 2; r++) {
        int st;
        ck_assert_int_eq(waitpid(t.pids[r], &st, 0), t.pids[r]);
        ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0,
                      "rank %d failed (status 0x%x; its line above says why)", r, st);
    }
}
END_TEST

static Suite *callbackSuite(void)
{
    Suite *s = suite_create("callback");
    TCase *tc = tcase_create("callback");
    tcase_add_test(tc, test_order_on_two_streams);
    tcase_add_test(tc, test_not_before_done);
    tcase_add_test(tc, test_many_in_flight);
    tcase_add_test(tc, test_bad_input);
    tcase_add_test(tc, test_refused_call_leaves_stream);
    tcase_add_test(tc, test_dead_peer);
    tcase_set_timeout(tc, 3 * DEAD_TIMEOUT_SEC + 30);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(callbackSuite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
