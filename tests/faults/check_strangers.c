/*
 * check_strangers.c — strangers at every port Loom listens on, while a job
 * runs.
 *
 * Before the ranks join, the root thread of the test process gets every kind
 * of attack below. Then four ranks loop on AllReduces whose results they
 * check exactly, and every few iterations split the communicator (a new
 * unique id, a new root thread in the leader, new listening sockets, a new
 * bootstrap ring) and reduce on the halves. Meanwhile a thread of the test
 * process finds every listening TCP socket of the ranks and of its own
 * (/proc/<pid>/fd and /proc/net/tcp{,6}) and attacks each in turn:
 *
 *   garbage        64 random bytes, then close
 *   truncated      the first 20 bytes of a hello, then silence (kept open)
 *   huge length    a ring-frame header claiming 2^63 bytes, then garbage
 *   wrong secret   a well-formed hello for rank 1 with another job's secret
 *   storm          100 connections at once, closed together
 *   reset          connect, then close with an RST
 *
 * The job must finish with every value right, no rank may crash or hang
 * (each has a watchdog), and the test asserts that attacks did reach the
 * ranks' own ports, not only the test's root. Counts are printed.
 */
#include <arpa/inet.h>
#include <check.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bootstrap.h"
#include "loom.h"
#include "testranks.h"

#define NRANKS 4
#define ITERATIONS 200
#define SPLIT_EVERY 10
#define COUNT 65536
#define WATCHDOG_SEC 120
#define MAX_PORTS 64
#define KEPT_OPEN 64

/* ---- the ranks ---- */

static int checkedAllReduce(loomComm_t comm, int rank, int n, int salt)
{
    static int32_t in[COUNT], out[COUNT];
    for (int i = 0; i < COUNT; i++)
        in[i] = (rank + 1) * (i % 97) + salt;
    if (loomAllReduce(in, out, COUNT, loomInt32, loomSum, comm, NULL) != loomSuccess)
        return 1;
    for (int i = 0; i < COUNT; i++)
        if (out[i] != n * (n + 1) / 2 * (i % 97) + n * salt)
            return 2;
    return 0;
}

static int rankMain(int rank, int nranks, const loomUniqueId *id, void *arg)
{
    loomComm_t comm;
    alarm(WATCHDOG_SEC);
    if (loomCommInitRank(&comm, nranks, *id, rank) != loomSuccess)
        return testRankFail(rank, 10, "loomCommInitRank failed: %s", loomGetLastError(NULL));
    for (int it = 0; it < ITERATIONS; it++) {
        int rc = checkedAllReduce(comm, rank, nranks, it);
        if (rc != 0)
            return testRankFail(rank, 20 + rc, "iteration %d: AllReduce %s: %s", it,
                                rc == 1 ? "failed" : "gave wrong sums", loomGetLastError(comm));
        if (it % SPLIT_EVERY != SPLIT_EVERY - 1)
            continue;
        loomComm_t half;
        int sr, sn;
        if (loomCommSplit(comm, rank % 2, rank, &half, NULL) != loomSuccess)
            return testRankFail(rank, 30, "split: %s", loomGetLastError(comm));
        loomCommUserRank(half, &sr);
        loomCommCount(half, &sn);
        rc = checkedAllReduce(half, sr, sn, it);
        loomCommDestroy(half);
        if (rc != 0)
            return testRankFail(rank, 40 + rc, "iteration %d: AllReduce on the split %s", it,
                                rc == 1 ? "failed" : "gave wrong sums");
    }
    if (loomCommDestroy(comm) != loomSuccess)
        return testRankFail(rank, 50, "loomCommDestroy failed: %s", loomGetLastError(NULL));
    return 0;
}

/* ---- finding the ports ---- */

struct target {
    int nranks;
    pid_t pids[NRANKS + 1]; /* the ranks and the test process (the root) */
};

/* Adds the socket inodes of pid's descriptors to inodes[]; returns the new count. */
static int socketInodes(pid_t pid, unsigned long *inodes, int n, int max)
{
    char dir[64], link[64], path[400];
    snprintf(dir, sizeof(dir), "/proc/%d/fd", (int)pid);
    DIR *d = opendir(dir);
    if (d == NULL)
        return n;
    struct dirent *e;
    while ((e = readdir(d)) != NULL && n < max) {
        snprintf(path, sizeof(path), "%s/%s", dir, e->d_name);
        ssize_t len = readlink(path, link, sizeof(link) - 1);
        if (len <= 0)
            continue;
        link[len] = '\0';
        unsigned long ino;
        if (sscanf(link, "socket:[%lu]", &ino) == 1)
            inodes[n++] = ino;
    }
    closedir(d);
    return n;
}

/* Listening ports (of /proc/net/tcp or tcp6) whose inode is in inodes[]. */
static int listeningPorts(const char *table, const unsigned long *inodes, int ninodes, int *ports,
                          int n)
{
    FILE *f = fopen(table, "r");
    char line[512];
    if (f == NULL)
        return n;
    if (fgets(line, sizeof(line), f) == NULL) { /* the header */
        fclose(f);
        return n;
    }
    while (fgets(line, sizeof(line), f) != NULL && n < MAX_PORTS) {
        char local[64], remote[64];
        unsigned st;
        unsigned long ino;
        if (sscanf(line, "%*d: %63s %63s %x %*s %*s %*s %*d %*d %lu", local, remote, &st, &ino) !=
                4 ||
            st != 0x0A)
            continue;
        const char *colon = strrchr(local, ':');
        for (int i = 0; colon && i < ninodes; i++)
            if (inodes[i] == ino)
                ports[n++] = (int)strtol(colon + 1, NULL, 16);
    }
    fclose(f);
    return n;
}

static int findPorts(const struct target *t, int *ports, int *rankPorts)
{
    unsigned long inodes[1024];
    int ni = 0, n, fromRanks;
    for (int r = 0; r < t->nranks; r++)
        ni = socketInodes(t->pids[r], inodes, ni, 1024);
    fromRanks = ni;
    n = listeningPorts("/proc/net/tcp", inodes, fromRanks, ports, 0);
    n = listeningPorts("/proc/net/tcp6", inodes, fromRanks, ports, n);
    *rankPorts = n;
    ni = socketInodes(getpid(), inodes, ni, 1024);
    n = listeningPorts("/proc/net/tcp", inodes + fromRanks, ni - fromRanks, ports, n);
    return n;
}

/* ---- the attacks ---- */

enum {
    ATTACK_GARBAGE,
    ATTACK_TRUNCATED,
    ATTACK_HUGE,
    ATTACK_SECRET,
    ATTACK_STORM,
    ATTACK_RESET,
    ATTACK_KINDS
};
static const char *const attackNames[ATTACK_KINDS] = {"garbage",      "truncated", "huge length",
                                                      "wrong secret", "storm",     "reset"};

struct attacker {
    const struct target *target;
    atomic_int stop;
    long count[ATTACK_KINDS];
    long onRankPorts;
    int kept[KEPT_OPEN];
    int nkept;
};

/* A connection to 127.0.0.1:port, or -1 (refused: the socket closed meanwhile). */
static int dial(int port)
{
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    int s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (s < 0)
        return -1;
    struct timeval tv = {0, 200000};
    setsockopt(s, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
    if (connect(s, (struct sockaddr *)&a, sizeof(a)) != 0) {
        close(s);
        return -1;
    }
    return s;
}

static void sendSome(int s, const void *buf, size_t len)
{
    if (send(s, buf, len, MSG_NOSIGNAL | MSG_DONTWAIT) < 0)
        return; /* the peer may well have hung up: that is its right */
}

static void keepOpen(struct attacker *a, int s)
{
    if (a->nkept == KEPT_OPEN) {
        close(a->kept[0]);
        memmove(a->kept, a->kept + 1, (KEPT_OPEN - 1) * sizeof(int));
        a->nkept--;
    }
    a->kept[a->nkept++] = s;
}

/* Returns 1 if the attack reached the port. */
static int attack(struct attacker *a, int port, int kind, unsigned *seed)
{
    uint8_t buf[BOOTSTRAP_HELLO_BYTES];
    int s;
    if (kind == ATTACK_STORM) {
        int fds[100], n = 0;
        for (int i = 0; i < 100; i++)
            if ((fds[n] = dial(port)) >= 0)
                n++;
        for (int i = 0; i < n; i++)
            close(fds[i]);
        a->count[kind] += n > 0;
        return n > 0;
    }
    if ((s = dial(port)) < 0)
        return 0;
    for (size_t i = 0; i < sizeof(buf); i++)
        buf[i] = (uint8_t)rand_r(seed);
    switch (kind) {
    case ATTACK_GARBAGE:
        sendSome(s, buf, sizeof(buf));
        close(s);
        break;
    case ATTACK_TRUNCATED: {
        struct bootstrapHello h = {.rank = 1, .nranks = NRANKS};
        h.addr.family = 4, h.addr.port = (uint16_t)port;
        bootstrapEncodeHello(&h, buf, sizeof(buf));
        sendSome(s, buf, 20);
        keepOpen(a, s);
        break;
    }
    case ATTACK_HUGE:
        bootstrapEncodeFrame(0, UINT64_C(1) << 63, buf, sizeof(buf));
        sendSome(s, buf, sizeof(buf));
        close(s);
        break;
    case ATTACK_SECRET: {
        struct bootstrapHello h = {.rank = 1, .nranks = NRANKS};
        memcpy(h.secret, buf, sizeof(h.secret)); /* random: another job's */
        h.addr.family = 4, h.addr.port = (uint16_t)port, h.addr.ip[0] = 127, h.addr.ip[3] = 1;
        bootstrapEncodeHello(&h, buf, sizeof(buf));
        sendSome(s, buf, sizeof(buf));
        keepOpen(a, s);
        break;
    }
    default: { /* ATTACK_RESET */
        struct linger l = {1, 0};
        setsockopt(s, SOL_SOCKET, SO_LINGER, &l, sizeof(l));
        close(s);
        break;
    }
    }
    a->count[kind]++;
    return 1;
}

static void *attackerMain(void *arg)
{
    struct attacker *a = arg;
    unsigned seed = 12345;
    int kind = 0;
    while (!atomic_load(&a->stop)) {
        int ports[MAX_PORTS], rankPorts;
        int n = findPorts(a->target, ports, &rankPorts);
        for (int i = 0; i < n && !atomic_load(&a->stop); i++) {
            a->onRankPorts += attack(a, ports[i], kind, &seed) && i < rankPorts;
            kind = (kind + 1) % ATTACK_KINDS;
        }
        if (n == 0)
            poll(NULL, 0, 5);
    }
    for (int i = 0; i < a->nkept; i++)
        close(a->kept[i]);
    return NULL;
}

START_TEST(test_strangers_during_a_job)
{
    struct testRanks t;
    struct target target = {.nranks = NRANKS};
    struct attacker a = {.target = &target};
    loomUniqueId id;
    pthread_t thread;

    ck_assert_int_eq(testRanksFork(&t, NRANKS, rankMain, NULL), 0);
    memcpy(target.pids, t.pids, sizeof(pid_t) * NRANKS);
    ck_assert_int_eq(loomGetUniqueId(&id), loomSuccess);
    /* Every attack on the root first, while it waits for the ranks. */
    struct bootstrapId bid;
    unsigned seed = 7;
    long onRoot = 0;
    ck_assert_int_eq(bootstrapDecodeId(&id, &bid), loomSuccess);
    for (int kind = 0; kind < ATTACK_KINDS; kind++)
        onRoot += attack(&a, bid.root.port, kind, &seed);
    ck_assert_int_eq(onRoot, ATTACK_KINDS);
    ck_assert_int_eq(pthread_create(&thread, NULL, attackerMain, &a), 0);
    ck_assert_int_eq(testRanksGo(&t, &id), 0);
    for (int r = 0; r < NRANKS; r++) {
        int st;
        ck_assert_int_eq(waitpid(t.pids[r], &st, 0), t.pids[r]);
        ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0, "rank %d ended with status 0x%x", r,
                      st);
    }
    atomic_store(&a.stop, 1);
    pthread_join(thread, NULL);
    long total = 0;
    printf("strangers:");
    for (int k = 0; k < ATTACK_KINDS; k++) {
        printf(" %s %ld,", attackNames[k], a.count[k]);
        total += a.count[k];
    }
    printf(" in all %ld: %ld on the test's root, %ld on the ranks' own ports; every value "
           "right\n",
           total, onRoot, a.onRankPorts);
    ck_assert_msg(a.onRankPorts > 0, "no attack reached a rank's port: the test tested nothing");
}
END_TEST

static Suite *strangerSuite(void)
{
    Suite *s = suite_create("strangers");
    TCase *tc = tcase_create("job");
    tcase_set_timeout(tc, WATCHDOG_SEC + 30);
    tcase_add_test(tc, test_strangers_during_a_job);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    setenv("LOOM_SOCKET_IFNAME", "lo", 0);
    signal(SIGPIPE, SIG_IGN);
    SRunner *sr = srunner_create(strangerSuite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
