/*
 * check_api.c — the public API on one host: results, bad arguments, groups,
 * streams, split, memory, and the handle checks.
 *
 * Communicators here are real: a one-rank communicator in the test process,
 * or several ranks as forked children of it joined through a unique id, all
 * over the real shared-memory transport. Every bad-argument case asserts the
 * result code and that loomGetLastError names the argument, and that the
 * communicator still works afterwards.
 */
#include <check.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>

#include "comms.h"
#include "loom.h"
#include "testranks.h"

START_TEST(test_version_and_strings)
{
    int v = 0;
    ck_assert_int_eq(loomGetVersion(&v), loomSuccess);
    ck_assert_int_eq(v, LOOM_VERSION_CODE);
    ck_error(loomGetVersion(NULL), loomInvalidArgument, "version");
    for (int r = 0; r <= loomNumResults; r++)
        ck_assert_ptr_nonnull(loomGetErrorString((loomResult_t)r));
    ck_assert_str_eq(loomGetErrorString(loomInvalidArgument), "invalid argument");
}
END_TEST

START_TEST(test_solo_collectives)
{
    loomComm_t comm = soloComm();
    float in[5] = {1, 2, 3, 4, 5}, out[5] = {0};
    ck_assert_int_eq(loomAllReduce(in, out, 5, loomFloat32, loomSum, comm, NULL), loomSuccess);
    ck_assert(memcmp(in, out, sizeof(in)) == 0);
    ck_assert_int_eq(loomAllReduce(in, in, 0, loomFloat32, loomAvg, comm, NULL), loomSuccess);
    int n = 0, r = -1;
    ck_assert_int_eq(loomCommCount(comm, &n), loomSuccess);
    ck_assert_int_eq(loomCommUserRank(comm, &r), loomSuccess);
    ck_assert_int_eq(n, 1);
    ck_assert_int_eq(r, 0);
    ck_assert_int_eq(loomCommDestroy(comm), loomSuccess);
}
END_TEST

START_TEST(test_bad_arguments)
{
    loomComm_t comm = soloComm();
    float buf[4] = {1, 2, 3, 4};
    ck_error(loomAllReduce(NULL, buf, 4, loomFloat32, loomSum, comm, NULL), loomInvalidArgument,
             "sendbuff");
    ck_error(loomAllReduce(buf, NULL, 4, loomFloat32, loomSum, comm, NULL), loomInvalidArgument,
             "recvbuff");
    ck_error(loomAllReduce(buf, buf, 4, (loomDataType_t)42, loomSum, comm, NULL),
             loomInvalidArgument, "datatype");
    ck_error(loomAllReduce(buf, buf, 4, loomFloat32, (loomRedOp_t)-1, comm, NULL),
             loomInvalidArgument, "op");
    ck_error(loomAllReduce(buf, buf, SIZE_MAX / 2, loomFloat64, loomSum, comm, NULL),
             loomInvalidArgument, "overflow");
    ck_error(loomBroadcast(buf, buf, 4, loomFloat32, 1, comm, NULL), loomInvalidArgument, "root");
    ck_error(loomReduce(buf, buf, 4, loomFloat32, loomSum, -1, comm, NULL), loomInvalidArgument,
             "root");
    ck_error(loomSend(buf, 4, loomFloat32, 3, comm, NULL), loomInvalidArgument, "peer");
    ck_error(loomRecv(buf, 4, loomFloat32, -2, comm, NULL), loomInvalidArgument, "peer");
    ck_error(loomAllReduce(buf, buf, 4, loomFloat32, loomSum, NULL, NULL), loomInvalidArgument,
             "comm");
    ck_error(loomAllReduce(buf, buf, 4, loomFloat32, loomSum, (loomComm_t)buf, NULL),
             loomInvalidArgument, "not a communicator");
    ck_error(loomAllReduce(buf, buf, 4, loomFloat32, loomSum, comm, (loomStream_t)buf),
             loomInvalidArgument, "stream");
    ck_error(loomAlltoAllv(buf, NULL, NULL, buf, NULL, NULL, loomFloat32, comm, NULL),
             loomInvalidArgument, "sendcounts");
    ck_error(loomCommCount(comm, NULL), loomInvalidArgument, "count");
    ck_error(loomCommInitRank(NULL, 1, (loomUniqueId){{0}}, 0), loomInvalidArgument, "comm");
    loomComm_t c2;
    ck_error(loomCommInitRank(&c2, 2, (loomUniqueId){{0}}, 5), loomInvalidArgument, "rank");
    ck_error(loomCommInitRank(&c2, 0, (loomUniqueId){{0}}, 0), loomInvalidArgument, "nranks");
    loomConfig_t cfg = LOOM_CONFIG_INITIALIZER;
    cfg.netName = "udp";
    ck_error(loomCommInitRankConfig(&c2, 1, (loomUniqueId){{0}}, 0, &cfg), loomInvalidArgument,
             "netName");
    ck_error(loomMemFree(buf), loomInvalidArgument, "loomMemAlloc");
    /* The communicator still works, and the comm's last error is the latest. */
    float out[4];
    ck_assert_int_eq(loomAllReduce(buf, out, 4, loomFloat32, loomMax, comm, NULL), loomSuccess);
    ck_assert(memcmp(buf, out, sizeof(out)) == 0);
    ck_assert_int_eq(loomCommDestroy(comm), loomSuccess);
}
END_TEST

START_TEST(test_use_after_destroy)
{
    loomComm_t comm = soloComm();
    float x = 1;
    ck_assert_int_eq(loomCommDestroy(comm), loomSuccess);
    ck_error(loomAllReduce(&x, &x, 1, loomFloat32, loomSum, comm, NULL), loomInvalidUsage,
             "destroyed");
    ck_error(loomCommDestroy(comm), loomInvalidUsage, "destroyed");
    loomStream_t s;
    ck_assert_int_eq(loomStreamCreate(&s), loomSuccess);
    ck_assert_int_eq(loomStreamDestroy(s), loomSuccess);
    ck_error(loomStreamSynchronize(s), loomInvalidUsage, "destroyed");
}
END_TEST

START_TEST(test_group_errors)
{
    loomComm_t comm = soloComm();
    float a = 1, b = 0;
    ck_error(loomGroupEnd(), loomInvalidUsage, "loomGroupStart");
    ck_assert_int_eq(loomGroupStart(), loomSuccess);
    ck_assert_int_eq(loomSend(&a, 1, loomFloat32, 0, comm, NULL), loomSuccess);
    ck_assert_int_eq(loomRecv(&b, 1, loomFloat32, 9, comm, NULL), loomInvalidArgument);
    ck_error(loomGroupEnd(), loomInvalidArgument, "nothing of the group");
    ck_assert(b == 0);
    /* A clean group afterwards runs: send to self and receive from self. */
    ck_assert_int_eq(loomGroupStart(), loomSuccess);
    ck_assert_int_eq(loomGroupStart(), loomSuccess);
    ck_assert_int_eq(loomSend(&a, 1, loomFloat32, 0, comm, NULL), loomSuccess);
    ck_assert_int_eq(loomRecv(&b, 1, loomFloat32, 0, comm, NULL), loomSuccess);
    ck_assert_int_eq(loomGroupEnd(), loomSuccess);
    ck_assert(b == 0); /* nested: nothing ran yet */
    ck_assert_int_eq(loomGroupEnd(), loomSuccess);
    ck_assert(b == 1);
    loomCommDestroy(comm);
}
END_TEST

START_TEST(test_stream_and_memory)
{
    loomComm_t comm = soloComm();
    loomStream_t s;
    double *buf = NULL;
    ck_assert_int_eq(loomMemAlloc((void **)&buf, 1000 * sizeof(double), comm), loomSuccess);
    for (int i = 0; i < 1000; i++)
        buf[i] = i;
    double out[1000];
    ck_assert_int_eq(loomStreamCreate(&s), loomSuccess);
    for (int k = 0; k < 10; k++)
        ck_assert_int_eq(loomAllReduce(buf, out, 1000, loomFloat64, loomSum, comm, s), loomSuccess);
    ck_assert_int_eq(loomStreamSynchronize(s), loomSuccess);
    ck_assert_int_eq(loomStreamQuery(s), loomSuccess);
    ck_assert(out[999] == 999.0);
    ck_assert_int_eq(loomStreamDestroy(s), loomSuccess);
    ck_assert_int_eq(loomMemFree(buf), loomSuccess);
    ck_error(loomMemFree(buf), loomInvalidArgument, "loomMemAlloc");
    ck_error(loomStreamCreateCuda(NULL, NULL), loomInvalidArgument, "stream");
    loomCommDestroy(comm);
}
END_TEST

START_TEST(test_layout_solo)
{
    loomComm_t comm = soloComm();
    loomPeerInfo_t info;
    int ring[1] = {-1}, up = 7, down[LOOM_TREE_MAX_DOWN], ndown = 7;
    ck_assert_int_eq(loomCommRing(comm, ring), loomSuccess);
    ck_assert_int_eq(ring[0], 0);
    ck_assert_int_eq(loomCommTree(comm, 1, 0, &up, down, &ndown), loomSuccess);
    ck_assert_int_eq(up, -1);
    ck_assert_int_eq(ndown, 0);
    ck_assert_int_eq(loomCommPeerInfo(comm, 0, &info), loomSuccess);
    ck_assert_int_eq(info.host, 0);
    ck_assert_str_eq(info.transport, "shm");
    ck_assert(info.hostname[0] != '\0');
    ck_error(loomCommTree(comm, 2, 0, &up, down, &ndown), loomInvalidArgument, "tree");
    ck_error(loomCommTree(comm, 0, 1, &up, down, &ndown), loomInvalidArgument, "rank");
    ck_error(loomCommPeerInfo(comm, 1, &info), loomInvalidArgument, "peer");
    ck_error(loomCommPeerInfo(comm, 0, NULL), loomInvalidArgument, "info");
    ck_error(loomCommRing(comm, NULL), loomInvalidArgument, "ring");
    loomCommDestroy(comm);
    ck_error(loomCommRing(comm, ring), loomInvalidUsage, "destroyed");
}
END_TEST

/* ---- several ranks: forked children of the test process ---- */

/* Everyone sends first around a ring, with messages much larger than a FIFO. */
static int ringSendFirst(int rank, int n, loomComm_t comm)
{
    size_t count = 3 << 20;
    int *out = malloc(count * sizeof(int)), *in = malloc(count * sizeof(int));
    for (size_t i = 0; i < count; i++)
        out[i] = rank * 7 + (int)i;
    loomGroupStart();
    loomSend(out, count, loomInt32, (rank + 1) % n, comm, NULL);
    loomRecv(in, count, loomInt32, (rank + n - 1) % n, comm, NULL);
    if (loomGroupEnd() != loomSuccess)
        return testRankFail(rank, 1, "the group of Send and Recv failed: %s",
                            loomGetLastError(comm));
    int prev = (rank + n - 1) % n;
    for (size_t i = 0; i < count; i++)
        if (in[i] != prev * 7 + (int)i)
            return testRankFail(rank, 2, "received element %zu is %d, not %d", i, in[i],
                                prev * 7 + (int)i);
    free(out);
    free(in);
    return 0;
}

START_TEST(test_group_ring_send_first)
{
    runRanks(3, ringSendFirst);
}
END_TEST

/* A bad call on one rank does not break the communicator. */
static int errorThenWork(int rank, int n, loomComm_t comm)
{
    long x = rank + 1, sum = 0;
    if (loomAllReduce(&x, &sum, 1, loomInt64, (loomRedOp_t)99, comm, NULL) != loomInvalidArgument)
        return testRankFail(rank, 1, "op 99 was not refused as loomInvalidArgument");
    if (strstr(loomGetLastError(comm), "op") == NULL)
        return testRankFail(rank, 2, "the error for op 99 does not name the op: \"%s\"",
                            loomGetLastError(comm));
    if (loomAllReduce(&x, &sum, 1, loomInt64, loomSum, comm, NULL) != loomSuccess)
        return testRankFail(rank, 3, "the AllReduce after the refused one failed: %s",
                            loomGetLastError(comm));
    if (sum != (long)n * (n + 1) / 2)
        return testRankFail(rank, 4, "AllReduce sum %ld, not %ld", sum, (long)n * (n + 1) / 2);
    return 0;
}

START_TEST(test_error_keeps_comm)
{
    runRanks(4, errorThenWork);
}
END_TEST

/* Split into even and odd ranks, reversed by key; rank 1 opts out. */
static int splitWork(int rank, int n, loomComm_t comm)
{
    loomComm_t sub = NULL;
    int color = rank == 1 ? LOOM_SPLIT_NOCOLOR : rank % 2;
    if (loomCommSplit(comm, color, -rank, &sub, NULL) != loomSuccess)
        return testRankFail(rank, 1, "loomCommSplit failed: %s", loomGetLastError(comm));
    if (rank == 1)
        return sub == NULL ? 0 : testRankFail(rank, 2, "LOOM_SPLIT_NOCOLOR gave a communicator");
    int sr, sn;
    loomCommUserRank(sub, &sr);
    loomCommCount(sub, &sn);
    int expectN = 0, expectR = 0;
    for (int p = 0; p < n; p++)
        if (p != 1 && p % 2 == rank % 2) {
            expectN++;
            expectR += p > rank;
        }
    if (sn != expectN || sr != expectR)
        return testRankFail(rank, 3, "split gave rank %d of %d, not %d of %d", sr, sn, expectR,
                            expectN);
    int v = rank, sum = 0;
    if (loomAllReduce(&v, &sum, 1, loomInt32, loomSum, sub, NULL) != loomSuccess)
        return testRankFail(rank, 4, "AllReduce on the split failed: %s", loomGetLastError(sub));
    int want = 0;
    for (int p = 0; p < n; p++)
        if (p != 1 && p % 2 == rank % 2)
            want += p;
    loomCommDestroy(sub);
    return sum == want ? 0 : testRankFail(rank, 5, "AllReduce on the split: %d, not %d", sum, want);
}

START_TEST(test_split)
{
    runRanks(5, splitWork);
}
END_TEST

/* Mismatched counts between ranks give an error, not garbage or a hang. */
static int mismatch(int rank, int n, loomComm_t comm)
{
    int buf[64] = {0};
    loomResult_t r = loomAllReduce(buf, buf, rank == 0 ? 16 : 32, loomInt32, loomSum, comm, NULL);
    if (r == loomInvalidUsage || r == loomTimeout || r == loomRemoteError)
        return 0;
    return testRankFail(rank, 1, "mismatched counts gave %s, not an error that says so",
                        loomGetErrorString(r));
}

START_TEST(test_mismatch)
{
    setenv("LOOM_TIMEOUT", "3", 1);
    runRanks(2, mismatch);
}
END_TEST

/*
 * Single copies (forced here by LOOM_ALGO) are schedules, so ranks may group
 * them differently, with other calls and in place: rank 0 groups everything,
 * rank 1 nothing, rank 2 the two AlltoAlls and the large AllReduce.
 */
static int cmaGrouping(int rank, int n, loomComm_t comm)
{
    size_t count = 100003, total = (size_t)n * count; /* odd: no block is a whole page */
    int *in = malloc(total * sizeof(int)), *out = malloc(total * sizeof(int));
    int *inplace = malloc(total * sizeof(int)), *gather = malloc(total * sizeof(int));
    int *sums = malloc(count * sizeof(int)), *bcast = malloc(count * sizeof(int));
    int x = rank + 1, sum = 0, bad = 0;
    for (size_t i = 0; i < total; i++)
        in[i] = inplace[i] = rank * 1000003 + (int)i;
    for (size_t i = 0; i < count; i++)
        bcast[i] = rank == 1 ? (int)i * 7 : -1;
    loomResult_t r[6];
    if (rank == 0)
        loomGroupStart();
    r[0] = loomAllReduce(&x, &sum, 1, loomInt32, loomSum, comm, NULL);
    if (rank == 2)
        loomGroupStart();
    r[1] = loomAlltoAll(in, out, count, loomInt32, comm, NULL);
    r[2] = loomAlltoAll(inplace, inplace, count, loomInt32, comm, NULL);
    r[3] = loomAllReduce(in, sums, count, loomInt32, loomSum, comm, NULL);
    if (rank == 2 && loomGroupEnd() != loomSuccess)
        return testRankFail(rank, 1, "the group of two AlltoAlls and an AllReduce failed: %s",
                            loomGetLastError(comm));
    r[4] = loomAllGather(in, gather, count, loomInt32, comm, NULL);
    r[5] = loomBroadcast(bcast, bcast, count, loomInt32, 1, comm, NULL);
    if (rank == 0 && loomGroupEnd() != loomSuccess)
        return testRankFail(rank, 2, "the group of every call failed: %s", loomGetLastError(comm));
    static const char *const calls[6] = {"AllReduce",       "AlltoAll",  "in-place AlltoAll",
                                         "large AllReduce", "AllGather", "Broadcast"};
    for (int k = 0; k < 6; k++)
        if (r[k] != loomSuccess)
            return testRankFail(rank, 3 + k, "%s failed: %s", calls[k], loomGetLastError(comm));
    if (sum != n * (n + 1) / 2)
        return testRankFail(rank, 9, "AllReduce sum %d, not %d", sum, n * (n + 1) / 2);
    for (int p = 0; p < n; p++)
        for (size_t i = 0; i < count; i++) {
            int want = p * 1000003 + (int)((size_t)rank * count + i);
            bad |= out[p * count + i] != want || inplace[p * count + i] != want;
            bad |= gather[p * count + i] != p * 1000003 + (int)i;
        }
    for (size_t i = 0; i < count; i++) {
        bad |= sums[i] != 1000003 * n * (n - 1) / 2 + n * (int)i;
        bad |= bcast[i] != (int)i * 7;
    }
    free(in);
    free(out);
    free(inplace);
    free(gather);
    free(sums);
    free(bcast);
    return bad ? testRankFail(rank, 10,
                              "wrong elements after AlltoAll, AllGather, AllReduce or "
                              "Broadcast")
               : 0;
}

START_TEST(test_cma_grouping)
{
    setenv("LOOM_ALGO", "alltoall:cma;allgather:cma;allreduce:cma;broadcast:cma", 1);
    unsetenv("LOOM_CMA_DISABLE");
    setenv("LOOM_TIMEOUT", "20", 1);
    runRanks(3, cmaGrouping);
}
END_TEST

/*
 * Ranks told different things (single copies on rank 0, the FIFOs on rank 1)
 * get an error that says so, not garbage or a hang. (Where the kernel
 * refuses single copies, every rank takes the FIFOs and the call succeeds.)
 */
static int cmaProbe = 42;

static int cmaMismatch(int rank, int n, loomComm_t comm)
{
    (void)n;
    /* The ranks are siblings forked from the test: reading the parent tells whether the kernel
     * lets them read each other (Yama's ptrace_scope treats both alike). */
    int word = 0;
    struct iovec local = {&word, sizeof(word)}, remote = {&cmaProbe, sizeof(word)};
    int canCma = process_vm_readv(getppid(), &local, 1, &remote, 1, 0) == sizeof(word);
    size_t count = 64 * 1024; /* per peer: above LOOM_CMA_MIN_BYTES */
    int *in = calloc(2 * count, sizeof(int)), *out = calloc(2 * count, sizeof(int));
    loomResult_t r = loomAlltoAll(in, out, count, loomInt32, comm, NULL);
    free(in);
    free(out);
    if (r == loomSuccess)
        return canCma ? testRankFail(rank, 1, "AlltoAll with different LOOM_ALGO succeeded") : 0;
    if (r != loomInvalidUsage && r != loomRemoteError)
        return testRankFail(rank, 2, "AlltoAll with different LOOM_ALGO gave %s",
                            loomGetErrorString(r));
    const char *why = loomGetLastError(comm);
    if (strstr(why, "different algorithms") == NULL)
        return testRankFail(rank, 3, "the error does not say \"different algorithms\": \"%s\"",
                            why);
    return 0;
}

static void cmaMismatchEnv(int rank)
{
    setenv("LOOM_ALGO", rank == 0 ? "alltoall:cma" : "alltoall:ring", 1);
    unsetenv("LOOM_CMA_DISABLE"); /* the probe above stands for the library's */
}

START_TEST(test_cma_mismatch)
{
    setenv("LOOM_TIMEOUT", "5", 1);
    runRanksWith(2, cmaMismatch, cmaMismatchEnv);
}
END_TEST

/*
 * loomMemAlloc buffers: where every rank passes them, AllReduce,
 * ReduceScatter, AllGather, Broadcast and Reduce run as single copies from
 * the peers' mappings of them (src/exec/cma.c, mem.c), and AlltoAll's single
 * copies read through such mappings too; where one rank does not, the others
 * find out and every rank takes the FIFOs. Three rounds on 2 ranks: both
 * loomMemAlloc, rank 0 malloc, both loomMemAlloc again (new blocks each
 * round, the old ones freed), each with exact results. Rank 0 counts the
 * mappings of loomMemAlloc files it holds: its own blocks, plus one view of
 * each block of rank 1 it read or wrote through a mapping, and views of
 * blocks rank 1 has freed must be gone: 4 after rounds 0 and 2 (its own 2,
 * rank 1's send buffer and its receive buffer, which only AllReduce and the
 * Reduce to rank 1 write through a view), 1 after round 1 (no blocks of its
 * own, and only rank 1's send buffer, which AlltoAll's single copies read),
 * or 2 where the tuner weighs AllReduce's single copies in and takes them
 * for ordinary buffers (loomTuningGet says so), which then write rank 1's
 * receive buffer through a view.
 * The ranks ask each other only where each has a core (cmaAsk), and the
 * kernel must allow single copies: otherwise the results are checked, the
 * counts are not (the FIFOs map nothing).
 */
static int loomMemMappings(void)
{
    FILE *f = fopen("/proc/self/maps", "r");
    char line[512];
    int k = 0;
    if (f == NULL)
        return -1;
    while (fgets(line, sizeof(line), f))
        k += strstr(line, "memfd:loom-mem ") != NULL;
    fclose(f);
    return k;
}

static int zeroCopyRound(int rank, int n, loomComm_t comm, int registered, int *mappings)
{
    size_t count = 3 * 65536 + 1, total = (size_t)n * count; /* 768 KiB a rank, odd */
    int *in, *out, bad = 0;
    if (registered) {
        if (loomMemAlloc((void **)&in, total * sizeof(int), comm) != loomSuccess ||
            loomMemAlloc((void **)&out, total * sizeof(int), comm) != loomSuccess)
            return testRankFail(rank, 1, "loomMemAlloc failed: %s", loomGetLastError(comm));
    } else if ((in = malloc(total * sizeof(int))) == NULL ||
               (out = malloc(total * sizeof(int))) == NULL) {
        return testRankFail(rank, 1, "out of memory");
    }
    for (size_t i = 0; i < total; i++)
        in[i] = rank * 1000003 + (int)i;
    int sumRanks = 1000003 * n * (n - 1) / 2;
    if (loomAllReduce(in, out, count, loomInt32, loomSum, comm, NULL) != loomSuccess)
        return testRankFail(rank, 2, "AllReduce failed: %s", loomGetLastError(comm));
    for (size_t i = 0; i < count; i++)
        bad |= out[i] != sumRanks + n * (int)i;
    if (loomReduceScatter(in, out, count, loomInt32, loomSum, comm, NULL) != loomSuccess)
        return testRankFail(rank, 3, "ReduceScatter failed: %s", loomGetLastError(comm));
    for (size_t i = 0; i < count; i++)
        bad |= out[i] != sumRanks + n * (int)((size_t)rank * count + i);
    if (loomAllGather(in, out, count, loomInt32, comm, NULL) != loomSuccess)
        return testRankFail(rank, 4, "AllGather failed: %s", loomGetLastError(comm));
    for (int p = 0; p < n; p++)
        for (size_t i = 0; i < count; i++)
            bad |= out[(size_t)p * count + i] != p * 1000003 + (int)i;
    int root = n - 1;
    if (loomBroadcast(in, out, count, loomInt32, root, comm, NULL) != loomSuccess)
        return testRankFail(rank, 5, "Broadcast failed: %s", loomGetLastError(comm));
    for (size_t i = 0; i < count; i++)
        bad |= out[i] != root * 1000003 + (int)i;
    memset(out, 0, count * sizeof(int));
    if (loomReduce(in, out, count, loomInt32, loomSum, root, comm, NULL) != loomSuccess)
        return testRankFail(rank, 6, "Reduce failed: %s", loomGetLastError(comm));
    for (size_t i = 0; i < count && rank == root; i++)
        bad |= out[i] != sumRanks + n * (int)i;
    if (loomAlltoAll(in, out, count, loomInt32, comm, NULL) != loomSuccess)
        return testRankFail(rank, 7, "AlltoAll failed: %s", loomGetLastError(comm));
    for (int p = 0; p < n; p++)
        for (size_t i = 0; i < count; i++)
            bad |= out[(size_t)p * count + i] != p * 1000003 + (int)((size_t)rank * count + i);
    *mappings = loomMemMappings(); /* before this round's frees */
    if (registered) {
        loomMemFree(in);
        loomMemFree(out);
    } else {
        free(in);
        free(out);
    }
    return bad ? testRankFail(rank, 8, "wrong elements after one of the six collectives") : 0;
}

static int zeroCopy(int rank, int n, loomComm_t comm)
{
    int word = 0; /* as in cmaMismatch: may these siblings read each other? */
    struct iovec local = {&word, sizeof(word)}, remote = {&cmaProbe, sizeof(word)};
    int canCma = process_vm_readv(getppid(), &local, 1, &remote, 1, 0) == sizeof(word);
    cpu_set_t cpus;
    canCma &= sched_getaffinity(0, sizeof(cpus), &cpus) == 0 && CPU_COUNT(&cpus) >= n;
    int want[3] = {4, 1, 4};
    loomTuningInfo_t t;
    if (loomTuningGet("allreduce", NULL, n, (3 * 65536 + 1) * sizeof(int), &t) != loomSuccess)
        return testRankFail(rank, 9, "loomTuningGet failed: %s", loomGetLastError(NULL));
    want[1] += strcmp(t.algorithm, "cma") == 0;
    for (int round = 0; round < 3; round++) {
        int got = -1, rc = zeroCopyRound(rank, n, comm, !(round == 1 && rank == 0), &got);
        if (rc != 0)
            return 10 * round + rc;
        if (rank == 0 && canCma && got != want[round])
            return testRankFail(rank, 10 * round + 9,
                                "zero copy: round %d: %d mappings of loomMemAlloc files, not %d",
                                round, got, want[round]);
    }
    return 0;
}

static void zeroCopyEnv(int rank)
{
    (void)rank;
    setenv("LOOM_ALGO", "alltoall:cma", 1); /* the others as by default */
    unsetenv("LOOM_CMA_DISABLE");
    unsetenv("LOOM_CMA_MIN_BYTES"); /* 128 KiB: below the calls' 768 KiB */
    setenv("LOOM_TIMEOUT", "20", 1);
}

START_TEST(test_zero_copy)
{
    runRanksWith(2, zeroCopy, zeroCopyEnv);
}
END_TEST

/*
 * Rank 0 told to make single copies (LOOM_ALGO=allreduce:cma), rank 1 left
 * to the default, which offers them only for loomMemAlloc buffers: both
 * find out from the descriptors they exchange and fail alike, before either
 * touches the other's memory. (Where the kernel refuses single copies both
 * take the FIFOs and the call succeeds.)
 */
static int zeroCopyMismatch(int rank, int n, loomComm_t comm)
{
    (void)n;
    int word = 0;
    struct iovec local = {&word, sizeof(word)}, remote = {&cmaProbe, sizeof(word)};
    int canCma = process_vm_readv(getppid(), &local, 1, &remote, 1, 0) == sizeof(word);
    cpu_set_t cpus; /* rank 1 asks only where each rank has a core (cmaAsk) */
    int asks = sched_getaffinity(0, sizeof(cpus), &cpus) == 0 && CPU_COUNT(&cpus) >= n;
    size_t count = 256 * 1024; /* 1 MiB */
    float *in = calloc(count, sizeof(float)), *out = calloc(count, sizeof(float));
    loomResult_t r = loomAllReduce(in, out, count, loomFloat32, loomSum, comm, NULL);
    free(in);
    free(out);
    if (r == loomSuccess)
        return canCma ? testRankFail(rank, 1, "AllReduce with different LOOM_ALGO succeeded") : 0;
    if (!asks) /* rank 1 runs a schedule against rank 0's exchange: some mismatch error */
        return 0;
    if (r != loomInvalidUsage)
        return testRankFail(rank, 2,
                            "AllReduce with different LOOM_ALGO gave %s, not "
                            "loomInvalidUsage",
                            loomGetErrorString(r));
    if (strstr(loomGetLastError(comm), "LOOM_ALGO must be equal") == NULL)
        return testRankFail(rank, 3, "the error does not say \"LOOM_ALGO must be equal\": \"%s\"",
                            loomGetLastError(comm));
    return 0;
}

static void zeroCopyMismatchEnv(int rank)
{
    if (rank == 0)
        setenv("LOOM_ALGO", "allreduce:cma", 1);
    else
        unsetenv("LOOM_ALGO");
    unsetenv("LOOM_CMA_DISABLE");
    unsetenv("LOOM_CMA_MIN_BYTES");
}

START_TEST(test_zero_copy_mismatch)
{
    setenv("LOOM_TIMEOUT", "5", 1);
    runRanksWith(2, zeroCopyMismatch, zeroCopyMismatchEnv);
}
END_TEST

/* With shared memory off, every link (to itself too) is on the network, and works. */
static int overTcp(int rank, int n, loomComm_t comm)
{
    loomPeerInfo_t info;
    int sum = rank + 1, want = n * (n + 1) / 2;
    for (int p = 0; p < n; p++) {
        if (loomCommPeerInfo(comm, p, &info) != loomSuccess)
            return testRankFail(rank, 1, "loomCommPeerInfo(%d) failed: %s", p,
                                loomGetLastError(comm));
        if (strcmp(info.transport, p == rank ? "net/self" : "net/socket") != 0)
            return testRankFail(rank, 2, "the link to rank %d is %s, not %s", p, info.transport,
                                p == rank ? "net/self" : "net/socket");
    }
    if (loomAllReduce(&sum, &sum, 1, loomInt32, loomSum, comm, NULL) != loomSuccess || sum != want)
        return testRankFail(rank, 3, "AllReduce over TCP: %d, not %d (%s)", sum, want,
                            loomGetLastError(comm));
    int mine = 40 + rank, got = -1;
    loomGroupStart();
    loomSend(&mine, 1, loomInt32, rank, comm, NULL);
    loomRecv(&got, 1, loomInt32, rank, comm, NULL);
    if (loomGroupEnd() != loomSuccess || got != mine)
        return testRankFail(rank, 4, "Send/Recv to itself over TCP: got %d, not %d (%s)", got, mine,
                            loomGetLastError(comm));
    return 0;
}

START_TEST(test_shm_disabled_uses_tcp)
{
    setenv("LOOM_SHM_DISABLE", "1", 1);
    runRanks(3, overTcp);
}
END_TEST

static Suite *apiSuite(void)
{
    Suite *s = suite_create("api");
    TCase *tc = tcase_create("solo");
    tcase_add_test(tc, test_version_and_strings);
    tcase_add_test(tc, test_solo_collectives);
    tcase_add_test(tc, test_bad_arguments);
    tcase_add_test(tc, test_use_after_destroy);
    tcase_add_test(tc, test_group_errors);
    tcase_add_test(tc, test_stream_and_memory);
    tcase_add_test(tc, test_layout_solo);
    suite_add_tcase(s, tc);
    TCase *multi = tcase_create("ranks");
    tcase_set_timeout(multi, 60);
    tcase_add_test(multi, test_group_ring_send_first);
    tcase_add_test(multi, test_error_keeps_comm);
    tcase_add_test(multi, test_split);
    tcase_add_test(multi, test_mismatch);
    tcase_add_test(multi, test_shm_disabled_uses_tcp);
    tcase_add_test(multi, test_cma_grouping);
    tcase_add_test(multi, test_cma_mismatch);
    tcase_add_test(multi, test_zero_copy);
    tcase_add_test(multi, test_zero_copy_mismatch);
    suite_add_tcase(s, multi);
    return s;
}

int main(void)
{
    setenv("LOOM_SOCKET_IFNAME", "lo", 0);
    SRunner *sr = srunner_create(apiSuite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
