/*
 * check_resources.c — running out of things: file descriptors, memory,
 * ports. (A /dev/shm too small is tests/integration/shm.sh.)
 *
 * Each case drives one rank's whole life (unique id, init, AllReduce, a host
 * stream, loomMemAlloc, split, destroy) in a forked child, with the resource
 * cut at a different point each time, and asserts that every call either
 * works or returns an error whose loomGetLastError line says what ran out
 * and what to do; never a crash, never a hang (each child runs under an
 * alarm and a 10-second LOOM_TIMEOUT). The child reports through its exit
 * status:
 *
 *   0  the whole life worked             1  a call failed with a clear line
 *   2  a call failed with an unclear one  3  a call succeeded with a wrong result
 *   a signal: it crashed (or hung, and the alarm went off)
 *
 * - file descriptors: every descriptor taken but 0, 1, 2 ... up to the
 *   point where everything works;
 * - memory: malloc, calloc and realloc are wrapped (in this program only) so
 *   that the k-th allocation after the start fails, for every k until a run
 *   makes no more allocations than k (skipped in sanitizer builds, whose
 *   allocator cannot be wrapped so);
 * - ports: in a private network namespace (root only; skipped otherwise, on
 *   one line) whose only two ephemeral ports are taken by listeners.
 *
 * The file is built three times, once per case (RESOURCES_CASE, see
 * Makefile.am: check_resources, check_resources_alloc, check_resources_ports),
 * so that a case this machine or build cannot run is reported by `make
 * check` as SKIP (exit status 77, with the reason on one line) while the
 * others still count as passed.
 */
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <net/if.h>
#include <netinet/in.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "loom.h"

enum { LIFE_OK, LIFE_CLEAR, LIFE_UNCLEAR, LIFE_WRONG };
/* Long enough for a loaded machine; what hangs on a dead root waits this long. */
#define LIFE_TIMEOUT_SEC 10
#define CHILD_ALARM_SEC 60

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define ALLOC_WRAPPED 0
#else
#define ALLOC_WRAPPED 1
#endif

/* ---- failing allocations ---- */

#if ALLOC_WRAPPED
extern void *__libc_malloc(size_t size);
extern void *__libc_calloc(size_t n, size_t size);
extern void *__libc_realloc(void *p, size_t size);

static _Atomic long allocCount;  /* allocations since the count was armed */
static _Atomic long allocFailAt; /* the one that fails (1-based); 0: none */

static int allocShouldFail(void)
{
    long at = atomic_load_explicit(&allocFailAt, memory_order_relaxed);
    if (at <= 0)
        return 0;
    if (atomic_fetch_add_explicit(&allocCount, 1, memory_order_relaxed) + 1 != at)
        return 0;
    errno = ENOMEM;
    return 1;
}

void *malloc(size_t size)
{
    return allocShouldFail() ? NULL : __libc_malloc(size);
}

void *calloc(size_t n, size_t size)
{
    return allocShouldFail() ? NULL : __libc_calloc(n, size);
}

void *realloc(void *p, size_t size)
{
    return allocShouldFail() ? NULL : __libc_realloc(p, size);
}

/* Fails the k-th allocation from now on (k = 0: counts without failing). */
static void allocArm(long k)
{
    atomic_store(&allocCount, 0);
    atomic_store(&allocFailAt, k > 0 ? k : LONG_MAX);
}

static long allocDisarm(void)
{
    atomic_store(&allocFailAt, 0);
    return atomic_load(&allocCount);
}
#endif

/* ---- one rank's life ---- */

/* Words one of which a clear line about a resource must hold. */
static const char *const clearWords[] = {"ulimit -n", "out of memory", "open files",
                                         "ip_local_port_range", "cannot start a thread"};

static int lineIsClear(const char *line)
{
    for (size_t i = 0; i < sizeof(clearWords) / sizeof(clearWords[0]); i++)
        if (strstr(line, clearWords[i]) != NULL)
            return 1;
    return 0;
}

static int lifeFailed(loomComm_t comm, const char *what)
{
    const char *line = loomGetLastError(comm);
    if (lineIsClear(line))
        return LIFE_CLEAR;
    fprintf(stderr, "unclear error from %s: \"%s\"\n", what, line);
    return LIFE_UNCLEAR;
}

/* Returns LIFE_*; any failure ends the life (the comm is aborted, not leaked). */
static int rankLife(void)
{
    loomUniqueId id;
    loomComm_t comm = NULL, sub = NULL;
    loomStream_t stream = NULL;
    loomConfig_t config = LOOM_CONFIG_INITIALIZER;
    int in[4] = {1, 2, 3, 4}, out[4] = {0};
    void *mem = NULL;
    int rc = LIFE_OK;

    config.timeoutSec = LIFE_TIMEOUT_SEC;
    if (loomGetUniqueId(&id) != loomSuccess)
        return lifeFailed(NULL, "loomGetUniqueId");
    if (loomCommInitRankConfig(&comm, 1, id, 0, &config) != loomSuccess)
        return lifeFailed(NULL, "loomCommInitRankConfig");
    if (loomAllReduce(in, out, 4, loomInt32, loomSum, comm, NULL) != loomSuccess)
        rc = lifeFailed(comm, "loomAllReduce");
    else if (memcmp(in, out, sizeof(in)) != 0)
        rc = LIFE_WRONG;
    if (rc == LIFE_OK && loomStreamCreate(&stream) != loomSuccess)
        rc = lifeFailed(NULL, "loomStreamCreate");
    if (rc == LIFE_OK &&
        (loomAllReduce(in, out, 4, loomInt32, loomMax, comm, stream) != loomSuccess ||
         loomStreamSynchronize(stream) != loomSuccess))
        rc = lifeFailed(comm, "loomAllReduce on a stream");
    if (stream)
        loomStreamDestroy(stream);
    if (rc == LIFE_OK && loomMemAlloc(&mem, 1 << 16, comm) != loomSuccess)
        rc = lifeFailed(comm, "loomMemAlloc");
    loomMemFree(mem);
    if (rc == LIFE_OK && loomCommSplit(comm, 0, 0, &sub, NULL) != loomSuccess)
        rc = lifeFailed(comm, "loomCommSplit");
    if (sub)
        loomCommDestroy(sub);
    if (rc == LIFE_OK)
        loomCommDestroy(comm);
    else
        loomCommAbort(comm);
    return rc;
}

/* Forks a child that calls setup(arg) then lives; returns its exit status or 128 + signal. */
static int lifeInChild(void (*setup)(long), long arg)
{
    fflush(NULL);
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        alarm(CHILD_ALARM_SEC);
        setup(arg);
        _exit(rankLife());
    }
    int st;
    ck_assert_int_eq(waitpid(pid, &st, 0), pid);
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

/*
 * 127 is the dynamic loader's own exit: it prints "out of memory" and ends
 * the process when an allocation inside dlopen fails (hwloc loads its
 * plugins when the topology is first probed). That allocation is not
 * Loom's to handle; the message is clear and nothing crashed or hung.
 */
#define LIFE_LOADER_OOM 127

static void assertClean(int status, const char *what, long k)
{
    if (status == LIFE_LOADER_OOM)
        return;
    ck_assert_msg(status == LIFE_OK || status == LIFE_CLEAR, "%s %ld: the rank %s (status %d)",
                  what, k,
                  status == LIFE_UNCLEAR ? "failed with an unclear message"
                  : status == LIFE_WRONG ? "computed a wrong result"
                  : status >= 128        ? "crashed or hung"
                                         : "failed",
                  status);
}

/* ---- file descriptors ---- */

/* Leaves exactly `spare` descriptors free: fills every free one, then gives back `spare`. */
static void limitFds(long spare)
{
    struct rlimit rl;
    getrlimit(RLIMIT_NOFILE, &rl);
    rl.rlim_cur = 256;
    setrlimit(RLIMIT_NOFILE, &rl);
    int last = -1;
    for (int fd; (fd = open("/dev/null", O_RDONLY)) >= 0;)
        last = fd;
    for (long i = 0; i < spare && last >= 0; i++)
        close(last--);
}

START_TEST(test_fd_exhaustion)
{
    int clear = 0;
    long extra;
    for (extra = 0; extra < 64; extra++) {
        int status = lifeInChild(limitFds, extra);
        assertClean(status, "descriptors to spare:", extra);
        if (status == LIFE_OK)
            break;
        clear++;
    }
    printf("file descriptors: %d limits failed with a clear line; everything works with %ld to "
           "spare\n",
           clear, extra);
    ck_assert_msg(clear > 0, "no limit made anything fail: the test tested nothing");
    ck_assert_msg(extra < 64, "the rank never worked, even with 63 descriptors to spare");
}
END_TEST

/* ---- memory ---- */

#if ALLOC_WRAPPED
static void armAlloc(long k)
{
    allocArm(k);
}

static void countAllocs(long unused)
{
    (void)unused;
    allocArm(0);
}
#endif

START_TEST(test_allocation_failures)
{
#if ALLOC_WRAPPED /* else main skips it */
    /* How many allocations a whole life makes: the child counts, and reports through a pipe. */
    int fds[2];
    ck_assert_int_eq(pipe(fds), 0);
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        countAllocs(0);
        int rc = rankLife();
        long n = allocDisarm();
        _exit(write(fds[1], &n, sizeof(n)) == sizeof(n) ? rc : 9);
    }
    long total = 0;
    int st;
    ck_assert_int_eq(read(fds[0], &total, sizeof(total)), sizeof(total));
    ck_assert_int_eq(waitpid(pid, &st, 0), pid);
    ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == LIFE_OK, "a life without failures failed");
    close(fds[0]);
    close(fds[1]);
    int clear = 0, ok = 0, bad = 0;
    long firstBad = 0, slowestK = 0;
    double slowest = 0, spent = 0;
    for (long k = 1; k <= total + 8; k++) {
        struct timespec t0, t1;
        clock_gettime(CLOCK_MONOTONIC, &t0);
        int status = lifeInChild(armAlloc, k);
        clock_gettime(CLOCK_MONOTONIC, &t1);
        double took = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) * 1e-9;
        if (took > slowest)
            slowest = took, slowestK = k;
        spent += took;
        /* Near LIFE_TIMEOUT_SEC: a failure that made something wait for the timeout (not an
         * error here, since the life still ends cleanly, but worth a look). */
        if (took > LIFE_TIMEOUT_SEC / 2)
            printf("allocations: failing allocation %ld: the life took %.2f s (status %d)\n", k,
                   took, status);
        clear += status == LIFE_CLEAR;
        ok += status == LIFE_OK;
        if (status != LIFE_CLEAR && status != LIFE_OK && bad++ == 0)
            firstBad = k;
    }
    if (bad)
        assertClean(lifeInChild(armAlloc, firstBad), "failing allocation", firstBad);
    printf("allocations: a life makes %ld; failing each in turn: %d clear errors, %d lives "
           "unaffected (the allocation was optional or retried)\n",
           total, clear, ok);
    printf("allocations: the lives took %.1f s, the slowest %.2f s (failing allocation %ld)\n",
           spent, slowest, slowestK);
    ck_assert_int_gt(clear, 0);
#endif
}
END_TEST

/* ---- ports ---- */

static void noSetup(long unused)
{
    (void)unused;
}

static int loopbackUp(void)
{
    struct ifreq ifr;
    int s = socket(AF_INET, SOCK_DGRAM, 0);
    if (s < 0)
        return -1;
    memset(&ifr, 0, sizeof(ifr));
    strcpy(ifr.ifr_name, "lo");
    int rc = ioctl(s, SIOCGIFFLAGS, &ifr);
    ifr.ifr_flags |= IFF_UP;
    if (rc == 0)
        rc = ioctl(s, SIOCSIFFLAGS, &ifr);
    close(s);
    return rc;
}

static int listenOn(int port)
{
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    int s = socket(AF_INET, SOCK_STREAM, 0);
    if (s < 0 || bind(s, (struct sockaddr *)&a, sizeof(a)) != 0 || listen(s, 4) != 0)
        return -1;
    return s;
}

START_TEST(test_ports_in_use)
{
    /* main checked that a child can do this */
    ck_assert_msg(unshare(CLONE_NEWNET) == 0 && loopbackUp() == 0,
                  "no private network namespace with loopback up: %s", strerror(errno));
    FILE *f = fopen("/proc/sys/net/ipv4/ip_local_port_range", "w");
    ck_assert_ptr_nonnull(f);
    ck_assert_int_gt(fprintf(f, "40000 40001\n"), 0);
    ck_assert_int_eq(fclose(f), 0);
    int a = listenOn(40000), b = listenOn(40001);
    ck_assert_int_ge(a, 0);
    ck_assert_int_ge(b, 0);
    setenv("LOOM_SOCKET_IFNAME", "lo", 1);
    loomUniqueId id;
    ck_assert_int_eq(loomGetUniqueId(&id), loomSystemError);
    const char *line = loomGetLastError(NULL);
    printf("no port free: %s\n", line);
    ck_assert_msg(strstr(line, "Address already in use") != NULL &&
                      strstr(line, "ip_local_port_range") != NULL,
                  "\"%s\"", line);
    /* One port free: the id gets it, and the rank finds none for itself. */
    close(a);
    ck_assert_int_eq(lifeInChild(noSetup, 0), LIFE_CLEAR);
    close(b);
}
END_TEST

#ifndef RESOURCES_CASE
#define RESOURCES_CASE RESOURCES_FDS
#endif
enum { RESOURCES_FDS, RESOURCES_ALLOC, RESOURCES_PORTS };

/* 1 if a child can enter a network namespace of its own and bring its loopback up. */
static int privateNetworkWorks(void)
{
    pid_t pid = fork();
    if (pid < 0)
        return 0;
    if (pid == 0)
        _exit(unshare(CLONE_NEWNET) == 0 && loopbackUp() == 0 ? 0 : 1);
    int status;
    return waitpid(pid, &status, 0) == pid && WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

/* Why this program's case cannot run here, or NULL. */
static const char *skipReason(void)
{
    if (RESOURCES_CASE == RESOURCES_ALLOC && !ALLOC_WRAPPED)
        return "failing allocations: a sanitizer owns malloc in this build";
    if (RESOURCES_CASE == RESOURCES_PORTS && geteuid() != 0)
        return "ports: needs root for a private network namespace";
    if (RESOURCES_CASE == RESOURCES_PORTS && !privateNetworkWorks())
        return "ports: no private network namespace here (unshare(CLONE_NEWNET) refused)";
    return NULL;
}

static Suite *resourceSuite(void)
{
    const struct {
        const char *name;
        const TTest *test;
    } cases[] = {[RESOURCES_FDS] = {"file descriptors", test_fd_exhaustion},
                 [RESOURCES_ALLOC] = {"allocations", test_allocation_failures},
                 [RESOURCES_PORTS] = {"ports", test_ports_in_use}};
    Suite *s = suite_create("resources");
    TCase *tc = tcase_create(cases[RESOURCES_CASE].name);
    /* The allocation case runs one life per allocation (about 600): 17-57 s on the 2-core
     * machine at load 15, over 240 s in a run of .ci/run at a higher load. A hung life ends at
     * its own alarm (CHILD_ALARM_SEC), so this bound only needs to leave room for the load. */
    tcase_set_timeout(tc, RESOURCES_CASE == RESOURCES_ALLOC ? 900 : 240);
    tcase_add_test(tc, cases[RESOURCES_CASE].test);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    const char *skip = skipReason();
    if (skip) {
        printf("SKIP: %s\n", skip);
        return 77; /* the automake test driver's SKIP */
    }
    setenv("LOOM_SOCKET_IFNAME", "lo", 0);
    setenv("LOOM_TIMEOUT", "10", 0); /* the root thread of an id nobody can use gives up */
    SRunner *sr = srunner_create(resourceSuite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
