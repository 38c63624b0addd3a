/*
 * check_connect.c — connections made when a call first needs them.
 *
 * A communicator connects each rank at init to itself, its ring neighbours
 * and its tree neighbours only (src/connect.c). The cases check, through
 * loomCommPeerInfo's `connected`, on 8 ranks of one host (shared memory)
 * and on 8 ranks over 2 LOOM_HOSTID hosts (TCP between them):
 *
 *   - after init a rank holds exactly those links, fewer than all;
 *   - an AlltoAll connects every pair, and its results are right;
 *   - a Send/Recv between two ranks that were not connected connects that
 *     pair and no other, and carries the data;
 *   - a sender that connects, sends a message the FIFO holds and leaves at
 *     once (destroys its communicator) before its receiver has finished
 *     connecting still delivers it: the receiver's connect must not find
 *     the pair's resources gone (repeated on fresh communicators, since it
 *     is a race);
 *   - LOOM_CONNECT_ALL=1 connects every pair at init;
 *   - a rank that exits before a call that would connect to it makes every
 *     other rank's call fail, well within LOOM_TIMEOUT, naming it (on its
 *     host its process is seen gone; from the other host its sockets refuse
 *     the connection, and a rank there that meets a survivor that failed and
 *     left first may name that one instead);
 *   - on communicators made by loomCommSplit and loomCommShrink the same
 *     calls connect what they need and give the right results.
 */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "comms.h"

#define NRANKS 8
#define DEAD_RANK 5
#define TIMEOUT_SEC "30"

/* want[p] = 1 for the links a rank holds after init: itself, ring and tree neighbours. */
static int initialLinks(loomComm_t comm, int rank, int n, int self, int *want)
{
    int ring[NRANKS];
    memset(want, 0, (size_t)n * sizeof(*want));
    if (loomCommRing(comm, ring) != loomSuccess)
        return -1;
    want[rank] = self;
    for (int i = 0; i < n; i++) {
        if (ring[i] == rank) {
            want[ring[(i + 1) % n]] = 1;
            want[ring[(i + n - 1) % n]] = 1;
        }
    }
    for (int t = 0; t < 2; t++) {
        int up, down[LOOM_TREE_MAX_DOWN], ndown;
        if (loomCommTree(comm, t, rank, &up, down, &ndown) != loomSuccess)
            return -1;
        if (up >= 0)
            want[up] = 1;
        for (int d = 0; d < ndown; d++)
            want[down[d]] = 1;
    }
    return 0;
}

/* Which links this rank holds now: a bit per peer. */
static unsigned linksNow(loomComm_t comm, int n)
{
    unsigned bits = 0;
    for (int p = 0; p < n; p++) {
        loomPeerInfo_t info;
        if (loomCommPeerInfo(comm, p, &info) == loomSuccess && info.connected)
            bits |= 1u << p;
    }
    return bits;
}

static unsigned bitsOf(const int *want, int n)
{
    unsigned bits = 0;
    for (int p = 0; p < n; p++)
        bits |= want[p] ? 1u << p : 0;
    return bits;
}

static int checkInitial(int rank, int n, loomComm_t comm, unsigned *initial)
{
    int want[NRANKS];
    if (initialLinks(comm, rank, n, 1, want) != 0)
        return testRankFail(rank, 1, "cannot read the ring or trees: %s", loomGetLastError(comm));
    unsigned got = linksNow(comm, n);
    if (got != bitsOf(want, n))
        return testRankFail(rank, 2, "after init the links are 0x%x, not 0x%x (self, ring, trees)",
                            got, bitsOf(want, n));
    if (got == (1u << n) - 1)
        return testRankFail(rank, 3, "every pair is connected at init (0x%x)", got);
    *initial = got;
    return 0;
}

static int alltoallAll(int rank, int n, loomComm_t comm, int base)
{
    int send[NRANKS * 4] = {0}, recv[NRANKS * 4] = {0};
    for (int p = 0; p < n; p++)
        for (int k = 0; k < 4; k++)
            send[p * 4 + k] = base + rank * 1000 + p * 10 + k, recv[p * 4 + k] = -1;
    if (loomAlltoAll(send, recv, 4, loomInt32, comm, NULL) != loomSuccess)
        return testRankFail(rank, 10, "AlltoAll failed: %s", loomGetLastError(comm));
    for (int p = 0; p < n; p++)
        for (int k = 0; k < 4; k++)
            if (recv[p * 4 + k] != base + p * 1000 + rank * 10 + k)
                return testRankFail(rank, 11, "AlltoAll: element %d from rank %d is %d, not %d", k,
                                    p, recv[p * 4 + k], base + p * 1000 + rank * 10 + k);
    return 0;
}

static int alltoallConnects(int rank, int n, loomComm_t comm)
{
    unsigned initial;
    int rc = checkInitial(rank, n, comm, &initial);
    if (rc != 0)
        return rc;
    if ((rc = alltoallAll(rank, n, comm, 0)) != 0)
        return rc;
    unsigned got = linksNow(comm, n);
    if (got != (1u << n) - 1)
        return testRankFail(rank, 12, "after an AlltoAll the links are 0x%x, not all", got);
    return alltoallAll(rank, n, comm, 50000); /* and again, over the links made */
}

/* The first pair (a < b) that neither rank links at init, from the ring and trees every rank sees
 * alike. */
static int unlinkedPair(loomComm_t comm, int n, int *a, int *b)
{
    for (int i = 0; i < n; i++) {
        int want[NRANKS];
        if (initialLinks(comm, i, n, 1, want) != 0)
            return -1;
        for (int j = i + 1; j < n; j++) {
            if (!want[j]) {
                *a = i, *b = j;
                return 0;
            }
        }
    }
    return -1;
}

static int sendRecvConnectsPair(int rank, int n, loomComm_t comm)
{
    unsigned initial;
    int a, b, rc = checkInitial(rank, n, comm, &initial);
    if (rc != 0)
        return rc;
    if (unlinkedPair(comm, n, &a, &b) != 0)
        return testRankFail(rank, 20, "no pair is left unconnected at init");
    float data[1000];
    loomResult_t res = loomSuccess;
    if (rank == a) {
        for (int i = 0; i < 1000; i++)
            data[i] = (float)(i * 3 + a);
        res = loomSend(data, 1000, loomFloat32, b, comm, NULL);
    } else if (rank == b) {
        res = loomRecv(data, 1000, loomFloat32, a, comm, NULL);
        for (int i = 0; res == loomSuccess && i < 1000; i++)
            if (data[i] != (float)(i * 3 + a))
                return testRankFail(rank, 21, "Recv from rank %d: element %d is %g", a, i,
                                    (double)data[i]);
    }
    if (res != loomSuccess)
        return testRankFail(rank, 22, "Send/Recv between ranks %d and %d failed: %s", a, b,
                            loomGetLastError(comm));
    unsigned want = initial;
    if (rank == a)
        want |= 1u << b;
    if (rank == b)
        want |= 1u << a;
    unsigned got = linksNow(comm, n);
    if (got != want)
        return testRankFail(rank, 23,
                            "after a Send/Recv between ranks %d and %d the links are 0x%x, not "
                            "0x%x",
                            a, b, got, want);
    int sum = 1; /* everyone is still there, over the links made at init */
    if (loomAllReduce(&sum, &sum, 1, loomInt32, loomSum, comm, NULL) != loomSuccess || sum != n)
        return testRankFail(rank, 24, "AllReduce after the Send/Recv: %d (%s)", sum,
                            loomGetLastError(comm));
    return 0;
}

/*
 * For SENDER_LEAVES_ROUNDS fresh communicators (split from comm): the lower rank of a pair not
 * connected at init sends a small message and destroys the communicator at once; the higher
 * receives it. Before connect waited for both ends, the lower rank (which makes a pair's shared
 * memory) could unlink the segment before the higher had opened it.
 */
#define SENDER_LEAVES_ROUNDS 40
static int senderLeaves(int rank, int n, loomComm_t comm)
{
    int a, b;
    if (unlinkedPair(comm, n, &a, &b) != 0)
        return testRankFail(rank, 25, "no pair is left unconnected at init");
    for (int round = 0; round < SENDER_LEAVES_ROUNDS; round++) {
        loomComm_t fresh = NULL;
        if (loomCommSplit(comm, 0, rank, &fresh, NULL) != loomSuccess)
            return testRankFail(rank, 26, "split %d failed: %s", round, loomGetLastError(comm));
        int data[16];
        loomResult_t res = loomSuccess;
        if (rank == a) {
            for (int i = 0; i < 16; i++)
                data[i] = round * 100 + i;
            res = loomSend(data, 16, loomInt32, b, fresh, NULL);
        } else if (rank == b) {
            res = loomRecv(data, 16, loomInt32, a, fresh, NULL);
            for (int i = 0; res == loomSuccess && i < 16; i++)
                if (data[i] != round * 100 + i)
                    return testRankFail(rank, 27, "round %d: element %d is %d", round, i, data[i]);
        }
        if (res != loomSuccess)
            return testRankFail(rank, 28, "round %d: %s between ranks %d and %d failed: %s", round,
                                rank == a ? "Send" : "Recv", a, b, loomGetLastError(fresh));
        loomCommDestroy(fresh);
    }
    return 0;
}

static int allAtInit(int rank, int n, loomComm_t comm)
{
    unsigned got = linksNow(comm, n);
    if (got != (1u << n) - 1)
        return testRankFail(rank, 30, "with LOOM_CONNECT_ALL=1 the links are 0x%x, not all", got);
    return alltoallAll(rank, n, comm, 0);
}

/*
 * How many ranks have finished the AllReduce before the death, in memory the parent maps
 * shared before it forks the ranks: a test's own channel, outside Loom.
 */
static atomic_int *survivorsReady;

/*
 * Rank DEAD_RANK exits once every other rank has finished an AllReduce; the others' AlltoAll,
 * which would connect to it, must fail.
 */
static int peerDies(int rank, int n, loomComm_t comm)
{
    int one = 1;
    if (loomAllReduce(&one, &one, 1, loomInt32, loomSum, comm, NULL) != loomSuccess || one != n)
        return testRankFail(rank, 39, "AllReduce before the death: %d (%s)", one,
                            loomGetLastError(comm));
    /*
     * A rank's AllReduce can end before another's has (its last piece in flight), and a
     * survivor's failed AlltoAll notifies everyone: without this wait that notice could end
     * an AllReduce that was still finishing, which is not what is tested here.
     */
    if (rank != DEAD_RANK) {
        atomic_fetch_add(survivorsReady, 1);
    } else {
        double t0 = testNowSec();
        while (atomic_load(survivorsReady) < n - 1)
            if (testNowSec() - t0 > 60)
                return testRankFail(rank, 38, "the other ranks did not finish the AllReduce");
            else
                usleep(1000);
        _exit(0); /* gone, without a word: no destroy, no notice */
    }
    int send[NRANKS] = {0}, recv[NRANKS] = {0};
    for (int p = 0; p < n; p++)
        send[p] = p;
    double t0 = testNowSec();
    loomResult_t res = loomAlltoAll(send, recv, 1, loomInt32, comm, NULL);
    double took = testNowSec() - t0;
    const char *line = loomGetLastError(comm);
    char name[16];
    snprintf(name, sizeof(name), "rank %d", DEAD_RANK);
    if (res == loomSuccess)
        return testRankFail(rank, 40, "AlltoAll with rank %d gone succeeded", DEAD_RANK);
    /*
     * Across hosts a rank hears of a failure on another host only from a peer it is connected
     * to: one that meets a survivor that failed on its own and left first may name that one
     * ("refused ...: it has exited or left the communicator") instead of the rank killed.
     */
    int named = strstr(line, name) != NULL ||
                (getenv("LOOM_HOSTID") != NULL && strstr(line, "left the communicator") != NULL);
    if (res != loomRemoteError || !named)
        return testRankFail(rank, 41, "AlltoAll with rank %d gone: result %d, \"%s\"", DEAD_RANK,
                            (int)res, line);
    if (took > 15)
        return testRankFail(rank, 42, "AlltoAll took %.1f s to notice rank %d gone", took,
                            DEAD_RANK);
    return 0;
}

/* Split into even and odd ranks, and shrink the last rank away: both new comms connect on use. */
static int splitAndShrink(int rank, int n, loomComm_t comm)
{
    loomComm_t half = NULL, rest = NULL;
    if (loomCommSplit(comm, rank % 2, rank, &half, NULL) != loomSuccess)
        return testRankFail(rank, 50, "split failed: %s", loomGetLastError(comm));
    int rc = alltoallAll(rank / 2, n / 2, half, 0);
    if (rc == 0 && linksNow(half, n / 2) != (1u << (n / 2)) - 1)
        rc = testRankFail(rank, 51, "after an AlltoAll on the split comm not every link is up");
    loomCommDestroy(half);
    if (rc != 0)
        return rc;
    int gone = n - 1;
    if (rank == gone)
        return 0; /* takes no part in the shrink */
    if (loomCommShrink(comm, &gone, 1, &rest, NULL, LOOM_SHRINK_DEFAULT) != loomSuccess)
        return testRankFail(rank, 52, "shrink failed: %s", loomGetLastError(comm));
    rc = alltoallAll(rank, n - 1, rest, 0);
    if (rc == 0 && linksNow(rest, n - 1) != (1u << (n - 1)) - 1)
        rc = testRankFail(rank, 53, "after an AlltoAll on the shrunk comm not every link is up");
    loomCommDestroy(rest);
    return rc;
}

static void oneHost(int rank)
{
    (void)rank;
    unsetenv("LOOM_HOSTID");
}

static void twoHosts(int rank)
{
    setenv("LOOM_HOSTID", rank < NRANKS / 2 ? "connect-host-a" : "connect-host-b", 1);
}

START_TEST(test_alltoall_connects)
{
    runRanksWith(NRANKS, alltoallConnects, _i ? twoHosts : oneHost);
}
END_TEST

START_TEST(test_sendrecv_connects_pair)
{
    runRanksWith(NRANKS, sendRecvConnectsPair, _i ? twoHosts : oneHost);
}
END_TEST

START_TEST(test_sender_leaves_first)
{
    runRanksWith(NRANKS, senderLeaves, _i ? twoHosts : oneHost);
}
END_TEST

START_TEST(test_connect_all)
{
    setenv("LOOM_CONNECT_ALL", "1", 1);
    runRanksWith(NRANKS, allAtInit, _i ? twoHosts : oneHost);
    setenv("LOOM_CONNECT_ALL", "0", 1);
}
END_TEST

START_TEST(test_peer_dies_before_connect)
{
    survivorsReady = mmap(NULL, sizeof(*survivorsReady), PROT_READ | PROT_WRITE,
                          MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    ck_assert_ptr_ne(survivorsReady, MAP_FAILED);
    atomic_init(survivorsReady, 0);
    runRanksWith(NRANKS, peerDies, _i ? twoHosts : oneHost);
    munmap(survivorsReady, sizeof(*survivorsReady));
}
END_TEST

START_TEST(test_split_and_shrink)
{
    runRanksWith(NRANKS, splitAndShrink, _i ? twoHosts : oneHost);
}
END_TEST

static Suite *connectSuite(void)
{
    Suite *s = suite_create("connect");
    TCase *tc = tcase_create("on demand");
    tcase_set_timeout(tc, 120);
    /* _i: 0 one host (shm), 1 two LOOM_HOSTID hosts (TCP between them) */
    tcase_add_loop_test(tc, test_alltoall_connects, 0, 2);
    tcase_add_loop_test(tc, test_sendrecv_connects_pair, 0, 2);
    tcase_add_loop_test(tc, test_sender_leaves_first, 0, 2);
    tcase_add_loop_test(tc, test_connect_all, 0, 2);
    tcase_add_loop_test(tc, test_peer_dies_before_connect, 0, 2);
    tcase_add_loop_test(tc, test_split_and_shrink, 0, 2);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    setenv("LOOM_TIMEOUT", TIMEOUT_SEC, 1);
    setenv("LOOM_CONNECT_ALL", "0", 1); /* what is tested here (the default) */
    SRunner *sr = srunner_create(connectSuite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
