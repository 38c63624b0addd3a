/*
 * comms.h — communicators for the Check suites, and one assertion.
 *
 * soloComm() is a one-rank communicator in the test process. runRanks(n,
 * fn) forks n children joined through a unique id the parent creates; each
 * creates its communicator and runs fn, whose return value is its exit
 * status, and the test fails unless every child exits 0. A child inherits
 * the parent's state at the fork (a CUDA context made current there, for
 * instance), so set that up first. ck_error(call, res, word) asserts that
 * call returns res and that the last error line names word.
 */
#ifndef LOOM_TEST_COMMS_H_
#define LOOM_TEST_COMMS_H_

#include <check.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "loom.h"
#include "testranks.h"

static inline loomComm_t soloComm(void)
{
    loomUniqueId id;
    loomComm_t comm = NULL;
    ck_assert_int_eq(loomGetUniqueId(&id), loomSuccess);
    ck_assert_int_eq(loomCommInitRank(&comm, 1, id, 0), loomSuccess);
    ck_assert_ptr_nonnull(comm);
    return comm;
}

#define ck_error(call, res, word)                                                                  \
    do {                                                                                           \
        ck_assert_int_eq((call), (res));                                                           \
        ck_assert_msg(strstr(loomGetLastError(NULL), (word)) != NULL,                              \
                      "last error \"%s\" does not name \"%s\"", loomGetLastError(NULL), (word));   \
    } while (0)

typedef int (*rankFn)(int rank, int nranks, loomComm_t comm);

struct rankWork {
    rankFn fn;
    void (*before)(int rank); /* runs first in each rank (setenv: parameters are read at init) */
};

static inline int rankMain(int rank, int nranks, const loomUniqueId *id, void *arg)
{
    const struct rankWork *work = arg;
    loomComm_t comm;
    if (work->before)
        work->before(rank);
    if (loomCommInitRank(&comm, nranks, *id, rank) != loomSuccess)
        return testRankFail(rank, 100, "loomCommInitRank failed: %s", loomGetLastError(NULL));
    int rc = work->fn(rank, nranks, comm);
    loomCommDestroy(comm);
    return rc;
}

/* Ranks are forked before the unique id exists, so none inherits the rendezvous socket. */
static inline void runRanksWith(int nranks, rankFn fn, void (*before)(int rank))
{
    struct rankWork work = {fn, before};
    struct testRanks t;
    loomUniqueId id;
    ck_assert_int_eq(testRanksFork(&t, nranks, rankMain, &work), 0);
    ck_assert_int_eq(loomGetUniqueId(&id), loomSuccess);
    ck_assert_int_eq(testRanksGo(&t, &id), 0);
    for (int r = 0; r < nranks; r++) {
        int st;
        ck_assert_int_eq(waitpid(t.pids[r], &st, 0), t.pids[r]);
        ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0,
                      "rank %d failed (status 0x%x; its line above says why)", r, st);
    }
}

static inline void runRanks(int nranks, rankFn fn)
{
    runRanksWith(nranks, fn, NULL);
}

#endif /* LOOM_TEST_COMMS_H_ */
