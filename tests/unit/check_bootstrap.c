/*
 * check_bootstrap.c — the bootstrap: message coding, interface choice, and
 * real rendezvous of forked processes over loopback.
 *
 * The coding tests feed the decoders round trips, every truncation and many
 * random buffers (each in a heap block of exactly its length, so a read past
 * the end shows under valgrind or ASan). The process tests run the root
 * thread in the test process and fork ranks that join it; a rank reports
 * through its exit status, which the test checks. Strangers (wrong secret,
 * garbage, silence, the wrong ring neighbour) connect while ranks join and
 * must change nothing but their own fate. LOOM_SOCKET_IFNAME=lo keeps all of
 * it on loopback; everything together takes a few seconds.
 */
#include <check.h>
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "bootstrap.h"
#include "debug.h"
#include "socket.h"
#include "testranks.h"

#define CHILD_WAIT_SEC 12
/* Exit statuses of a forked rank: 0 is success, 10 + a loomResult_t a failed step. */
#define EXIT_RESULT(res) (10 + (int)(res))
#define EXIT_BAD_DATA 3

/* ---- helpers ---- */

static uint32_t testFnv(const uint8_t *p, size_t len)
{
    uint32_t h = 2166136261u;
    for (size_t i = 0; i < len; i++) {
        h ^= p[i];
        h *= 16777619u;
    }
    return h;
}

/* Re-stamps the id's checksum (bytes 60..63), so a test can reach the checks behind it. */
static void idRestamp(loomUniqueId *id)
{
    uint8_t *p = (uint8_t *)id->internal;
    uint32_t h = testFnv(p, 60);
    p[60] = (uint8_t)(h >> 24);
    p[61] = (uint8_t)(h >> 16);
    p[62] = (uint8_t)(h >> 8);
    p[63] = (uint8_t)h;
}

static struct bootstrapId sampleId(int family)
{
    struct bootstrapId id;
    memset(&id, 0, sizeof(id));
    for (int i = 0; i < BOOTSTRAP_SECRET_BYTES; i++)
        id.secret[i] = (uint8_t)(i * 7 + 1);
    id.root.family = (uint8_t)family;
    for (int i = 0; i < (family == 4 ? 4 : 16); i++)
        id.root.ip[i] = (uint8_t)(10 + i);
    id.root.port = 4567;
    return id;
}

static double nowSec(void)
{
    return (double)socketClockNs() / 1e9;
}

/* Waits for pid; returns its exit status, or -1 (after killing it) if it ran too long. */
static int waitChild(pid_t pid)
{
    double end = nowSec() + CHILD_WAIT_SEC;
    int status;
    for (;;) {
        pid_t r = waitpid(pid, &status, WNOHANG);
        if (r == pid)
            return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
        if (nowSec() > end) {
            kill(pid, SIGKILL);
            waitpid(pid, &status, 0);
            return -1;
        }
        poll(NULL, 0, 10);
    }
}

static uint8_t pattern(int rank, size_t i, int salt)
{
    return (uint8_t)(rank * 131 + (int)i * 7 + salt);
}

/* One allgather of `bytes` per rank with distinct, checked contents. */
static int gatherChecked(struct loomBootstrap *b, int rank, int nranks, size_t bytes, int salt)
{
    uint8_t *data = malloc(bytes * (size_t)nranks);
    if (data == NULL)
        return EXIT_RESULT(loomSystemError);
    memset(data, 0xee, bytes * (size_t)nranks);
    for (size_t i = 0; i < bytes; i++)
        data[(size_t)rank * bytes + i] = pattern(rank, i, salt);
    loomResult_t res = bootstrapAllGather(b, data, bytes);
    int code = res == loomSuccess ? 0 : EXIT_RESULT(res);
    for (int r = 0; code == 0 && r < nranks; r++) {
        for (size_t i = 0; i < bytes; i++) {
            if (data[(size_t)r * bytes + i] != pattern(r, i, salt)) {
                code = testRankFail(rank, EXIT_BAD_DATA,
                                    "allgather of %zu bytes: rank %d's byte %zu is %u, not %u",
                                    bytes, r, i, data[(size_t)r * bytes + i], pattern(r, i, salt));
                break;
            }
        }
    }
    free(data);
    return code;
}

/* A rank's whole life: join, two allgathers (small, and large enough to fill socket buffers),
 * barrier, leave. Returns its exit status. */
static int rankLife(const loomUniqueId *id, int rank, int nranks)
{
    struct loomBootstrap *b;
    loomResult_t res = bootstrapInit(id, rank, nranks, 10, NULL, &b);
    if (res != loomSuccess) {
        fprintf(stderr, "rank %d: %s\n", rank, debugLastError(NULL));
        return EXIT_RESULT(res);
    }
    int code = gatherChecked(b, rank, nranks, 37, 1);
    if (code == 0)
        code = gatherChecked(b, rank, nranks, (1 << 20) + 3, 2);
    if (code == 0 && (res = bootstrapBarrier(b)) != loomSuccess)
        code = EXIT_RESULT(res);
    if (code != 0)
        fprintf(stderr, "rank %d: exit %d: %s\n", rank, code, debugLastError(NULL));
    bootstrapClose(b);
    return code;
}

static int rankMain(int rank, int nranks, const loomUniqueId *id, void *arg)
{
    return rankLife(id, rank, nranks);
}

/* Forks the ranks (before the root thread exists: see testranks.h), waiting for an id. */
static void forkRanks(struct testRanks *t, int nranks, testRankFn fn)
{
    ck_assert_int_eq(testRanksFork(t, nranks, fn, NULL), 0);
}

static void waitRanks(struct testRanks *t, int want)
{
    for (int r = 0; r < t->nranks; r++) {
        int status = waitChild(t->pids[r]);
        ck_assert_msg(status == want, "rank %d of %d exited with %d", r, t->nranks, status);
    }
}

/* A whole job: fork, make an id, hand it over, wait. */
static void runRanks(int nranks)
{
    struct testRanks t;
    loomUniqueId id;
    forkRanks(&t, nranks, rankMain);
    ck_assert_int_eq(bootstrapGetUniqueId(&id), loomSuccess);
    ck_assert_int_eq(testRanksGo(&t, &id), 0);
    waitRanks(&t, 0);
}

static int rootConnect(const struct bootstrapId *id)
{
    union socketAddress addr;
    int fd = -1;
    ck_assert_int_eq(socketAddrFromBootstrap(&id->root, &addr), loomSuccess);
    ck_assert_int_eq(socketConnect(&addr, socketDeadline(2), NULL, "test", &fd), loomSuccess);
    return fd;
}

static void sendHello(int fd, const uint8_t *secret, int rank, int nranks,
                      const struct bootstrapAddr *addr)
{
    struct bootstrapHello h;
    uint8_t buf[BOOTSTRAP_HELLO_BYTES];
    memcpy(h.secret, secret, BOOTSTRAP_SECRET_BYTES);
    h.rank = rank;
    h.nranks = nranks;
    h.addr = *addr;
    ck_assert_int_eq(bootstrapEncodeHello(&h, buf, sizeof(buf)), BOOTSTRAP_HELLO_BYTES);
    ck_assert_int_eq(socketSendAll(fd, buf, sizeof(buf), socketDeadline(2), NULL, "test"),
                     loomSuccess);
}

/* 1 if the peer closes fd within `sec` seconds. */
static int closedByPeer(int fd, double sec)
{
    uint8_t junk[256];
    size_t got = 0;
    double end = nowSec() + sec;
    while (nowSec() < end) {
        got = 0;
        if (socketTryRecv(fd, junk, sizeof(junk), &got) != loomSuccess)
            return 1;
        struct pollfd p = {.fd = fd, .events = POLLIN};
        poll(&p, 1, 50);
    }
    return 0;
}

/* ---- coding ---- */

START_TEST(test_id_round_trip)
{
    for (int family = 4; family <= 6; family += 2) {
        struct bootstrapId in = sampleId(family), out;
        loomUniqueId id;
        memset(&out, 0xaa, sizeof(out));
        ck_assert_int_eq(bootstrapEncodeId(&in, &id), LOOM_UNIQUE_ID_BYTES);
        ck_assert_int_eq(bootstrapDecodeId(&id, &out), loomSuccess);
        ck_assert_mem_eq(out.secret, in.secret, BOOTSTRAP_SECRET_BYTES);
        ck_assert_int_eq(out.root.family, family);
        ck_assert_int_eq(out.root.port, 4567);
        ck_assert_mem_eq(out.root.ip, in.root.ip, family == 4 ? 4 : 16);
    }
}
END_TEST

START_TEST(test_id_rejects_corruption)
{
    struct bootstrapId in = sampleId(4), out;
    loomUniqueId good, bad;
    ck_assert_int_eq(bootstrapEncodeId(&in, &good), LOOM_UNIQUE_ID_BYTES);

    bad = good; /* magic */
    bad.internal[0] ^= 1;
    idRestamp(&bad);
    ck_assert_int_eq(bootstrapDecodeId(&bad, &out), loomInvalidArgument);
    bad = good; /* family, with a consistent checksum so only the family check can catch it */
    bad.internal[40] = 5;
    idRestamp(&bad);
    ck_assert_int_eq(bootstrapDecodeId(&bad, &out), loomInvalidArgument);
    bad = good; /* a port of 0 */
    bad.internal[42] = bad.internal[43] = 0;
    idRestamp(&bad);
    ck_assert_int_eq(bootstrapDecodeId(&bad, &out), loomInvalidArgument);
    bad = good; /* one secret bit, checksum left alone */
    bad.internal[9] ^= 0x10;
    ck_assert_int_eq(bootstrapDecodeId(&bad, &out), loomInvalidArgument);
    bad = good; /* trailing bytes must be zero */
    bad.internal[100] = 1;
    ck_assert_int_eq(bootstrapDecodeId(&bad, &out), loomInvalidArgument);
    /* An id cut short anywhere (the rest zeroed, as a truncated string would leave it). */
    for (int cut = 0; cut < 64; cut++) {
        bad = good;
        memset(bad.internal + cut, 0, LOOM_UNIQUE_ID_BYTES - cut);
        ck_assert_msg(bootstrapDecodeId(&bad, &out) == loomInvalidArgument, "id cut at %d accepted",
                      cut);
    }
    ck_assert_int_eq(bootstrapDecodeId(&good, &out), loomSuccess);
}
END_TEST

START_TEST(test_id_encode_rejects_bad_address)
{
    struct bootstrapId in = sampleId(4);
    loomUniqueId id;
    in.root.family = 0;
    ck_assert_int_eq(bootstrapEncodeId(&in, &id), 0);
    in = sampleId(6);
    in.root.port = 0;
    ck_assert_int_eq(bootstrapEncodeId(&in, &id), 0);
}
END_TEST

START_TEST(test_hello_round_trip)
{
    struct bootstrapHello in, out;
    uint8_t buf[BOOTSTRAP_HELLO_BYTES + 8];
    struct bootstrapId id = sampleId(6);
    memcpy(in.secret, id.secret, sizeof(in.secret));
    in.rank = 1000;
    in.nranks = 1001;
    in.addr = id.root;
    ck_assert_int_eq(bootstrapEncodeHello(&in, buf, BOOTSTRAP_HELLO_BYTES - 1), 0);
    ck_assert_int_eq(bootstrapEncodeHello(&in, buf, sizeof(buf)), BOOTSTRAP_HELLO_BYTES);
    ck_assert_int_eq(bootstrapDecodeHello(buf, BOOTSTRAP_HELLO_BYTES, &out), loomSuccess);
    ck_assert_mem_eq(out.secret, in.secret, BOOTSTRAP_SECRET_BYTES);
    ck_assert_int_eq(out.rank, 1000);
    ck_assert_int_eq(out.nranks, 1001);
    ck_assert_int_eq(out.addr.family, 6);
    ck_assert_int_eq(out.addr.port, 4567);
    ck_assert_mem_eq(out.addr.ip, in.addr.ip, 16);
}
END_TEST

START_TEST(test_hello_rejects_malformed)
{
    struct bootstrapHello in, out;
    uint8_t good[BOOTSTRAP_HELLO_BYTES], bad[BOOTSTRAP_HELLO_BYTES];
    struct bootstrapId id = sampleId(4);
    memcpy(in.secret, id.secret, sizeof(in.secret));
    in.rank = 2;
    in.nranks = 4;
    in.addr = id.root;
    ck_assert_int_eq(bootstrapEncodeHello(&in, good, sizeof(good)), BOOTSTRAP_HELLO_BYTES);
    for (size_t len = 0; len < BOOTSTRAP_HELLO_BYTES; len++) {
        uint8_t *copy = malloc(len ? len : 1);
        memcpy(copy, good, len);
        ck_assert_int_eq(bootstrapDecodeHello(copy, len, &out), loomInvalidArgument);
        free(copy);
    }
    memcpy(bad, good, sizeof(bad)); /* rank == nranks */
    bad[39] = 4;
    ck_assert_int_eq(bootstrapDecodeHello(bad, sizeof(bad), &out), loomInvalidArgument);
    memcpy(bad, good, sizeof(bad)); /* negative rank */
    bad[36] = 0xff;
    ck_assert_int_eq(bootstrapDecodeHello(bad, sizeof(bad), &out), loomInvalidArgument);
    memcpy(bad, good, sizeof(bad)); /* huge nranks */
    bad[40] = 0x7f;
    ck_assert_int_eq(bootstrapDecodeHello(bad, sizeof(bad), &out), loomInvalidArgument);
    memcpy(bad, good, sizeof(bad)); /* version */
    bad[3] = 99;
    ck_assert_int_eq(bootstrapDecodeHello(bad, sizeof(bad), &out), loomInvalidArgument);
    memcpy(bad, good, sizeof(bad)); /* IPv4 with stray bytes in the unused part of ip */
    bad[60] = 1;
    ck_assert_int_eq(bootstrapDecodeHello(bad, sizeof(bad), &out), loomInvalidArgument);
    ck_assert_int_eq(bootstrapDecodeHello(good, sizeof(good), &out), loomSuccess);
}
END_TEST

START_TEST(test_decode_random_garbage)
{
    struct bootstrapHello h;
    struct bootstrapId id;
    unsigned seed = 12345;
    int accepted = 0;
    for (int iter = 0; iter < 20000; iter++) {
        size_t len = (size_t)(rand_r(&seed) % (BOOTSTRAP_HELLO_BYTES + 16));
        uint8_t *buf = malloc(len ? len : 1);
        for (size_t i = 0; i < len; i++)
            buf[i] = (uint8_t)rand_r(&seed);
        /* Half the time keep a valid prefix, so the deeper checks are reached too. */
        if (len >= 4 && (iter & 1))
            memcpy(buf, "LMH\1", 4);
        accepted += bootstrapDecodeHello(buf, len, &h) == loomSuccess;
        free(buf);

        loomUniqueId u;
        for (size_t i = 0; i < sizeof(u.internal); i++)
            u.internal[i] = (char)rand_r(&seed);
        if (iter & 1)
            memcpy(u.internal, "LMID\0\1\0\0", 8);
        accepted += bootstrapDecodeId(&u, &id) == loomSuccess;
    }
    ck_assert_int_eq(accepted, 0);
}
END_TEST

START_TEST(test_secret_equal)
{
    uint8_t a[BOOTSTRAP_SECRET_BYTES], b[BOOTSTRAP_SECRET_BYTES];
    for (int i = 0; i < BOOTSTRAP_SECRET_BYTES; i++)
        a[i] = b[i] = (uint8_t)(i * 13);
    ck_assert_int_eq(bootstrapSecretEqual(a, b), 1);
    for (int i = 0; i < BOOTSTRAP_SECRET_BYTES; i++) {
        b[i] ^= 0x80;
        ck_assert_int_eq(bootstrapSecretEqual(a, b), 0);
        b[i] ^= 0x80;
    }
}
END_TEST

/* ---- interfaces ---- */

START_TEST(test_ifname_spec)
{
    ck_assert_int_eq(socketIfnameMatches(NULL, "eth0"), 1);
    ck_assert_int_eq(socketIfnameMatches("", "eth0"), 1);
    ck_assert_int_eq(socketIfnameMatches("eth", "eth0"), 1);
    ck_assert_int_eq(socketIfnameMatches("ib,eth", "eth0"), 1);
    ck_assert_int_eq(socketIfnameMatches("ib", "eth0"), 0);
    ck_assert_int_eq(socketIfnameMatches("=eth", "eth0"), 0);
    ck_assert_int_eq(socketIfnameMatches("=eth0", "eth0"), 1);
    ck_assert_int_eq(socketIfnameMatches("=eth0", "eth01"), 0);
    ck_assert_int_eq(socketIfnameMatches("^docker,lo", "lo"), 0);
    ck_assert_int_eq(socketIfnameMatches("^docker,lo", "eth0"), 1);
    ck_assert_int_eq(socketIfnameMatches("^=eth0", "eth0"), 0);
    ck_assert_int_eq(socketIfnameMatches("^=eth0", "eth01"), 1);
}
END_TEST

START_TEST(test_interface_choice)
{
    union socketAddress addr;
    char name[32], text[SOCKET_ADDR_STRLEN];
    ck_assert_int_eq(socketFindInterfaceSpec("lo", &addr, name, sizeof(name)), loomSuccess);
    ck_assert_str_eq(name, "lo");
    socketAddrFormat(&addr, text, sizeof(text));
    ck_assert_str_eq(text, "127.0.0.1:0"); /* IPv4 before ::1 */
    ck_assert_int_eq(socketFindInterfaceSpec("nosuchif9", &addr, name, sizeof(name)),
                     loomInvalidArgument);
    const char *err = debugLastError(NULL);
    ck_assert_msg(strstr(err, "LOOM_SOCKET_IFNAME=nosuchif9") != NULL, "message: %s", err);
    ck_assert_msg(strstr(err, "lo") != NULL, "message does not list lo: %s", err);
    /* Without a spec, loopback is the last resort only. */
    int haveOther = socketFindInterfaceSpec("^lo", &addr, NULL, 0) == loomSuccess;
    ck_assert_int_eq(socketFindInterfaceSpec("", &addr, name, sizeof(name)), loomSuccess);
    if (haveOther)
        ck_assert_str_ne(name, "lo");
    else
        ck_assert_str_eq(name, "lo");
    /* Rails: every match, one address each (IPv4 first), sorted by name; none without a list. */
    struct socketRail rails[4];
    ck_assert_int_eq(socketFindRails("lo", rails, 4), 1);
    ck_assert_str_eq(rails[0].ifname, "lo");
    socketAddrFormat(&rails[0].addr, text, sizeof(text));
    ck_assert_str_eq(text, "127.0.0.1:0");
    ck_assert_int_eq(socketFindRails("", rails, 4), 0);
    ck_assert_int_eq(socketFindRails(NULL, rails, 4), 0);
    ck_assert_int_eq(socketFindRails("nosuchif9", rails, 4), 0);
    int n = socketFindRails("^nosuchif9", rails, 4);
    for (int i = 1; i < n; i++)
        ck_assert_int_lt(strcmp(rails[i - 1].ifname, rails[i].ifname), 0);
    ck_assert_int_eq(socketInterfaceUp("lo"), 1);
    ck_assert_int_eq(socketInterfaceUp("nosuchif9"), 0);
}
END_TEST

/* ---- argument checks ---- */

START_TEST(test_init_rejects_bad_arguments)
{
    struct bootstrapId bid = sampleId(4);
    loomUniqueId id, garbage;
    struct loomBootstrap *b = NULL;
    ck_assert_int_eq(bootstrapEncodeId(&bid, &id), LOOM_UNIQUE_ID_BYTES);
    memset(&garbage, 0x5a, sizeof(garbage));
    ck_assert_int_eq(bootstrapInit(NULL, 0, 1, 5, NULL, &b), loomInvalidArgument);
    ck_assert_int_eq(bootstrapInit(&id, 0, 0, 5, NULL, &b), loomInvalidArgument);
    ck_assert_int_eq(bootstrapInit(&id, 2, 2, 5, NULL, &b), loomInvalidArgument);
    ck_assert_int_eq(bootstrapInit(&id, -1, 2, 5, NULL, &b), loomInvalidArgument);
    ck_assert_int_eq(bootstrapInit(&id, 0, 1, 0, NULL, &b), loomInvalidArgument);
    ck_assert_int_eq(bootstrapInit(&garbage, 0, 1, 5, NULL, &b), loomInvalidArgument);
    ck_assert_msg(strstr(debugLastError(NULL), "unique id") != NULL, "message: %s",
                  debugLastError(NULL));
    ck_assert_ptr_null(b);
    bootstrapClose(NULL);
}
END_TEST

/* ---- rendezvous of real processes ---- */

static const int ringSizes[] = {1, 2, 3, 5};

START_TEST(test_ring_allgather)
{
    runRanks(ringSizes[_i]);
}
END_TEST

START_TEST(test_root_ignores_strangers)
{
    loomUniqueId id;
    struct bootstrapId bid;
    uint8_t wrong[BOOTSTRAP_SECRET_BYTES], junk[BOOTSTRAP_HELLO_BYTES];
    static uint8_t flood[1 << 16];
    int fds[8], nfds = 0;

    struct testRanks t;
    forkRanks(&t, 3, rankMain);
    ck_assert_int_eq(bootstrapGetUniqueId(&id), loomSuccess);
    ck_assert_int_eq(bootstrapDecodeId(&id, &bid), loomSuccess);
    memcpy(wrong, bid.secret, sizeof(wrong));
    wrong[0] ^= 1;
    for (size_t i = 0; i < sizeof(junk); i++)
        junk[i] = (uint8_t)(i * 37 + 5);
    memset(flood, 0xff, sizeof(flood));

    fds[nfds] = rootConnect(&bid); /* a well-formed hello with the wrong secret, for rank 0 */
    sendHello(fds[nfds++], wrong, 0, 3, &bid.root);
    fds[nfds] = rootConnect(&bid); /* garbage */
    ck_assert_int_eq(
        socketSendAll(fds[nfds++], junk, sizeof(junk), socketDeadline(2), NULL, "test"),
        loomSuccess);
    fds[nfds] = rootConnect(&bid); /* a huge stream of 0xff (rank -1, huge lengths) */
    size_t sent = 0;
    ck_assert_int_eq(socketTrySend(fds[nfds++], flood, sizeof(flood), &sent), loomSuccess);
    fds[nfds++] = rootConnect(&bid); /* silence */
    fds[nfds] = rootConnect(&bid);   /* a third of a hello, then silence */
    ck_assert_int_eq(socketSendAll(fds[nfds++], junk, 20, socketDeadline(2), NULL, "test"),
                     loomSuccess);
    socketClose(rootConnect(&bid)); /* a connection that closes at once */
    /* Once the root has dropped this one it has accepted all of the above (the accept queue is
     * FIFO): the silent ones are pending when the ranks arrive. */
    int sentinel = rootConnect(&bid);
    sendHello(sentinel, wrong, 2, 3, &bid.root);
    ck_assert_msg(closedByPeer(sentinel, 3.0), "the root kept a hello with the wrong secret");
    socketClose(sentinel);

    /* One more speaks while the ranks join; the root may be done (and gone) by then. */
    int late = rootConnect(&bid);
    struct bootstrapHello lateHello = {.rank = 1, .nranks = 3, .addr = bid.root};
    uint8_t lateBuf[BOOTSTRAP_HELLO_BYTES];
    size_t lateSent = 0;
    memcpy(lateHello.secret, wrong, sizeof(wrong));
    ck_assert_int_eq(bootstrapEncodeHello(&lateHello, lateBuf, sizeof(lateBuf)), sizeof(lateBuf));
    double start = nowSec();
    ck_assert_int_eq(testRanksGo(&t, &id), 0);
    socketTrySend(late, lateBuf, sizeof(lateBuf), &lateSent);
    waitRanks(&t, 0);
    socketClose(late);
    /* Silent strangers hold a slot for 5 s each; the ranks must not have waited on them. */
    ck_assert_msg(nowSec() - start < 4.0, "ranks took %.1f s", nowSec() - start);
    for (int i = 0; i < nfds; i++) {
        ck_assert_msg(closedByPeer(fds[i], 3.0), "stranger %d was not disconnected", i);
        socketClose(fds[i]);
    }
}
END_TEST

START_TEST(test_wrong_secret_rank_rejected)
{
    loomUniqueId id, forged;
    struct bootstrapId bid;
    struct loomBootstrap *b = NULL;

    struct testRanks t;
    forkRanks(&t, 2, rankMain);
    ck_assert_int_eq(bootstrapGetUniqueId(&id), loomSuccess);
    ck_assert_int_eq(bootstrapDecodeId(&id, &bid), loomSuccess);
    bid.secret[BOOTSTRAP_SECRET_BYTES - 1] ^= 0x40;
    ck_assert_int_eq(bootstrapEncodeId(&bid, &forged), LOOM_UNIQUE_ID_BYTES);
    /* The impostor claims rank 1 first; the root must refuse it and keep the place free. */
    ck_assert_int_eq(bootstrapInit(&forged, 1, 2, 3, NULL, &b), loomRemoteError);
    ck_assert_ptr_null(b);
    ck_assert_msg(strstr(debugLastError(NULL), "closed the connection") != NULL, "message: %s",
                  debugLastError(NULL));
    ck_assert_int_eq(testRanksGo(&t, &id), 0);
    waitRanks(&t, 0);
}
END_TEST

START_TEST(test_missing_rank_times_out)
{
    loomUniqueId id;
    struct loomBootstrap *b = NULL;

    ck_assert_int_eq(bootstrapGetUniqueId(&id), loomSuccess);
    double start = nowSec();
    ck_assert_int_eq(bootstrapInit(&id, 0, 2, 2, NULL, &b), loomTimeout);
    double took = nowSec() - start;
    /* The upper bounds tell a timeout from a hang, with room for sanitizer builds (TSan: 5-10x). */
    ck_assert_msg(took > 1.8 && took < 8.0, "timed out after %.2f s", took);
    ck_assert_ptr_null(b);
    ck_assert_msg(strstr(debugLastError(NULL), "within 2 s") != NULL, "message: %s",
                  debugLastError(NULL));
}
END_TEST

START_TEST(test_dead_root_times_out)
{
    struct bootstrapId bid = sampleId(4);
    union socketAddress lo, bound;
    loomUniqueId id;
    struct loomBootstrap *b = NULL;
    int fd;

    /* A port that was just free and is closed again: every connection attempt is refused. */
    ck_assert_int_eq(socketFindInterfaceSpec("lo", &lo, NULL, 0), loomSuccess);
    ck_assert_int_eq(socketListen(&lo, &fd, &bound), loomSuccess);
    socketClose(fd);
    ck_assert_int_eq(socketAddrToBootstrap(&bound, &bid.root), loomSuccess);
    ck_assert_int_eq(bootstrapEncodeId(&bid, &id), LOOM_UNIQUE_ID_BYTES);
    double start = nowSec();
    ck_assert_int_eq(bootstrapInit(&id, 0, 2, 1, NULL, &b), loomTimeout);
    double took = nowSec() - start;
    ck_assert_msg(took > 0.9 && took < 5.0, "gave up after %.2f s", took);
    const char *err = debugLastError(NULL);
    ck_assert_msg(strstr(err, "refused") != NULL && strstr(err, "timeout 1 s") != NULL,
                  "message: %s", err);
}
END_TEST

START_TEST(test_listener_refusal_is_final)
{
    union socketAddress lo, bound;
    int fd = -1, conn = -1;

    /* A peer's listening socket that has closed: its refusal ends socketConnectListener at
     * once, where socketConnect (for a root that may not listen yet) retries it to the end. */
    ck_assert_int_eq(socketFindInterfaceSpec("lo", &lo, NULL, 0), loomSuccess);
    ck_assert_int_eq(socketListen(&lo, &fd, &bound), loomSuccess);
    ck_assert_int_eq(socketConnectListener(&bound, socketDeadline(2), NULL, "test", &conn),
                     loomSuccess);
    socketClose(conn);
    socketClose(fd);
    double start = nowSec();
    ck_assert_int_eq(socketConnectListener(&bound, socketDeadline(15), NULL, "test", &conn),
                     loomRemoteError);
    double took = nowSec() - start;
    ck_assert_msg(took < 10.0, "a refusal was retried for %.2f s", took);
    const char *err = debugLastError(NULL);
    ck_assert_msg(strstr(err, "refused by") != NULL, "message: %s", err);
    ck_assert_int_eq(socketConnect(&bound, socketDeadline(0.3), NULL, "test", &conn), loomTimeout);
    err = debugLastError(NULL);
    ck_assert_msg(strstr(err, "before the deadline") != NULL && strstr(err, "refused") != NULL,
                  "message: %s", err);
}
END_TEST

static void *setFlagLater(void *arg)
{
    poll(NULL, 0, 300);
    atomic_store_explicit((atomic_int *)arg, 1, memory_order_release);
    return NULL;
}

START_TEST(test_abort_ends_wait)
{
    loomUniqueId id;
    struct loomBootstrap *b = NULL;
    atomic_int abortFlag = 0;
    pthread_t t;

    ck_assert_int_eq(bootstrapGetUniqueId(&id), loomSuccess);
    ck_assert_int_eq(pthread_create(&t, NULL, setFlagLater, &abortFlag), 0);
    double start = nowSec();
    ck_assert_int_eq(bootstrapInit(&id, 0, 2, 30, &abortFlag, &b), loomRemoteError);
    double took = nowSec() - start;
    pthread_join(t, NULL);
    ck_assert_msg(took > 0.25 && took < 5.0, "abort took %.2f s", took);
    ck_assert_ptr_null(b);
}
END_TEST

/* Rank 0 of a 2-rank job: the test plays rank 1. */
static int rankZeroOfTwo(int rank, int nranks, const loomUniqueId *id, void *arg)
{
    return rankLife(id, 0, 2);
}

/* Plays rank 1 of 2 by hand, so that strangers can be sent to rank 0's own port. */
START_TEST(test_ring_ignores_strangers)
{
    loomUniqueId id;
    struct bootstrapId bid;
    union socketAddress lo, mine, rank0;
    struct bootstrapAddr myAddr, otherAddr, rank0Addr;
    uint8_t table[8 + 2 * 20], wrong[BOOTSTRAP_SECRET_BYTES], junk[BOOTSTRAP_HELLO_BYTES];
    int listenFd, fds[8], nfds = 0;

    struct testRanks t;
    forkRanks(&t, 1, rankZeroOfTwo);
    ck_assert_int_eq(bootstrapGetUniqueId(&id), loomSuccess);
    ck_assert_int_eq(bootstrapDecodeId(&id, &bid), loomSuccess);
    ck_assert_int_eq(socketFindInterfaceSpec("lo", &lo, NULL, 0), loomSuccess);
    ck_assert_int_eq(socketListen(&lo, &listenFd, &mine), loomSuccess);
    ck_assert_int_eq(socketAddrToBootstrap(&mine, &myAddr), loomSuccess);
    ck_assert_int_eq(testRanksGo(&t, &id), 0);
    pid_t pid = t.pids[0];

    int rootFd = rootConnect(&bid);
    sendHello(rootFd, bid.secret, 1, 2, &myAddr);
    ck_assert_int_eq(socketRecvAll(rootFd, table, sizeof(table), socketDeadline(5), NULL, "test"),
                     loomSuccess);
    socketClose(rootFd);
    ck_assert_mem_eq(table, "LMT\1\0\0\0\2", 8);
    memset(&rank0Addr, 0, sizeof(rank0Addr));
    rank0Addr.family = table[8];
    rank0Addr.port = (uint16_t)((table[10] << 8) | table[11]);
    memcpy(rank0Addr.ip, table + 12, 16);
    ck_assert_int_eq(socketAddrFromBootstrap(&rank0Addr, &rank0), loomSuccess);

    memcpy(wrong, bid.secret, sizeof(wrong));
    wrong[5] ^= 2;
    memset(junk, 0x41, sizeof(junk));
    otherAddr = myAddr;
    otherAddr.port ^= 1;
    const struct {
        const uint8_t *secret;
        int rank, nranks;
        const struct bootstrapAddr *addr;
    } fakes[] = {
        {wrong, 1, 2, &myAddr},        /* wrong secret */
        {bid.secret, 0, 2, &myAddr},   /* right secret, but rank 0 is not its own predecessor */
        {bid.secret, 1, 3, &myAddr},   /* nranks differs */
        {bid.secret, 1, 2, &otherAddr} /* not the address the root announced */
    };
    for (size_t i = 0; i < sizeof(fakes) / sizeof(fakes[0]); i++) {
        ck_assert_int_eq(socketConnect(&rank0, socketDeadline(2), NULL, "test", &fds[nfds]),
                         loomSuccess);
        sendHello(fds[nfds++], fakes[i].secret, fakes[i].rank, fakes[i].nranks, fakes[i].addr);
    }
    ck_assert_int_eq(socketConnect(&rank0, socketDeadline(2), NULL, "test", &fds[nfds]),
                     loomSuccess);
    ck_assert_int_eq(
        socketSendAll(fds[nfds++], junk, sizeof(junk), socketDeadline(2), NULL, "test"),
        loomSuccess);
    ck_assert_int_eq(socketConnect(&rank0, socketDeadline(2), NULL, "test", &fds[nfds++]),
                     loomSuccess); /* silence */

    /* Rank 0 connects to us (its successor) and presents the secret. */
    int fromRank0, toRank0;
    uint8_t helloBuf[BOOTSTRAP_HELLO_BYTES];
    struct bootstrapHello h;
    ck_assert_int_eq(socketAccept(listenFd, socketDeadline(5), NULL, "test", &fromRank0, NULL),
                     loomSuccess);
    ck_assert_int_eq(
        socketRecvAll(fromRank0, helloBuf, sizeof(helloBuf), socketDeadline(5), NULL, "test"),
        loomSuccess);
    ck_assert_int_eq(bootstrapDecodeHello(helloBuf, sizeof(helloBuf), &h), loomSuccess);
    ck_assert_int_eq(bootstrapSecretEqual(h.secret, bid.secret), 1);
    ck_assert_int_eq(h.rank, 0);
    ck_assert_int_eq(h.nranks, 2);

    /* When rank 0 has dropped this one, the silent strangers above are pending there. */
    int sentinel;
    ck_assert_int_eq(socketConnect(&rank0, socketDeadline(2), NULL, "test", &sentinel),
                     loomSuccess);
    sendHello(sentinel, wrong, 1, 2, &myAddr);
    ck_assert_msg(closedByPeer(sentinel, 3.0), "rank 0 kept a hello with the wrong secret");
    socketClose(sentinel);

    /* Only now the real predecessor connects; rank 0 must take it despite the strangers. */
    double start = nowSec();
    ck_assert_int_eq(socketConnect(&rank0, socketDeadline(2), NULL, "test", &toRank0), loomSuccess);
    sendHello(toRank0, bid.secret, 1, 2, &myAddr);
    /* Rank 0's allgather then fails when we hang up; it must have got past init first. */
    socketClose(toRank0);
    socketClose(fromRank0);
    int status = waitChild(pid);
    ck_assert_msg(status == EXIT_RESULT(loomRemoteError), "rank 0 exited with %d", status);
    ck_assert_msg(nowSec() - start < 4.5, "rank 0 took %.1f s", nowSec() - start);
    for (int i = 0; i < nfds; i++) {
        ck_assert_msg(closedByPeer(fds[i], 2.0), "stranger %d was not disconnected", i);
        socketClose(fds[i]);
    }
    socketClose(listenFd);
}
END_TEST

/* Ranks that disagree about the block size get loomInternalError, not a corrupted buffer. */
static int mismatchLife(int rank, int nranks, const loomUniqueId *id, void *arg)
{
    struct loomBootstrap *b;
    uint8_t data[2 * 16] = {0};
    loomResult_t res = bootstrapInit(id, rank, 2, 10, NULL, &b);
    if (res != loomSuccess)
        return EXIT_RESULT(res);
    res = bootstrapAllGather(b, data, rank == 0 ? 8 : 16);
    bootstrapClose(b);
    return EXIT_RESULT(res);
}

START_TEST(test_allgather_size_mismatch)
{
    loomUniqueId id;
    struct testRanks t;
    forkRanks(&t, 2, mismatchLife);
    ck_assert_int_eq(bootstrapGetUniqueId(&id), loomSuccess);
    ck_assert_int_eq(testRanksGo(&t, &id), 0);
    waitRanks(&t, EXIT_RESULT(loomInternalError));
}
END_TEST

static Suite *bootstrapSuite(void)
{
    Suite *s = suite_create("bootstrap");
    struct {
        const char *name;
        const TTest *test;
    } unit[] = {
        {"id_round_trip", test_id_round_trip},
        {"id_rejects_corruption", test_id_rejects_corruption},
        {"id_encode_rejects_bad_address", test_id_encode_rejects_bad_address},
        {"hello_round_trip", test_hello_round_trip},
        {"hello_rejects_malformed", test_hello_rejects_malformed},
        {"decode_random_garbage", test_decode_random_garbage},
        {"secret_equal", test_secret_equal},
        {"ifname_spec", test_ifname_spec},
        {"interface_choice", test_interface_choice},
        {"init_rejects_bad_arguments", test_init_rejects_bad_arguments},
        {"root_ignores_strangers", test_root_ignores_strangers},
        {"wrong_secret_rank_rejected", test_wrong_secret_rank_rejected},
        {"missing_rank_times_out", test_missing_rank_times_out},
        {"dead_root_times_out", test_dead_root_times_out},
        {"abort_ends_wait", test_abort_ends_wait},
        {"listener_refusal_is_final", test_listener_refusal_is_final},
        {"ring_ignores_strangers", test_ring_ignores_strangers},
        {"allgather_size_mismatch", test_allgather_size_mismatch},
    };
    for (size_t i = 0; i < sizeof(unit) / sizeof(unit[0]); i++) {
        TCase *tc = tcase_create(unit[i].name);
        tcase_set_timeout(tc, 20);
        tcase_add_test(tc, unit[i].test);
        suite_add_tcase(s, tc);
    }
    TCase *ring = tcase_create("ring_allgather");
    tcase_set_timeout(ring, 20);
    tcase_add_loop_test(ring, test_ring_allgather, 0, sizeof(ringSizes) / sizeof(ringSizes[0]));
    suite_add_tcase(s, ring);
    return s;
}

int main(void)
{
    /* Before anything reads the parameter table: loopback only, and roots that give up soon. */
    setenv("LOOM_SOCKET_IFNAME", "lo", 1);
    setenv("LOOM_TIMEOUT", "10", 1);
    debugInit(); /* LOOM_DEBUG=INFO LOOM_DEBUG_SUBSYS=BOOTSTRAP shows every dropped stranger */
    SRunner *sr = srunner_create(bootstrapSuite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
