/*
 * check_initall.c — several ranks in one process: loomCommInitAll.
 *
 * One call makes n handles of one communicator in the test process. Every
 * collective (AllReduce, Broadcast, Reduce, AllGather, ReduceScatter,
 * AlltoAll, AlltoAllv, Send/Recv) then runs at 1 to 8 ranks on host
 * buffers, both ways an application drives such ranks:
 *   - a thread per rank, each calling on its own handle;
 *   - one thread calling on every handle between loomGroupStart and
 *     loomGroupEnd (the ranks are each other's peers, so nothing of the
 *     plan may wait on one rank before the others are started: the links a
 *     plan needs first are connected for all of them together).
 * Inputs are exact by construction and every element of every output is
 * checked. Bad arguments, abort and destroy, and binding to devices with
 * the stand-in driver (fakecuda.c; a device listed several times) have
 * cases of their own. Each case runs in a child process (Check's fork
 * mode), so each reads its LOOM_* settings afresh.
 */
#include <check.h>
#include <dirent.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "comms.h"
#include "core.h"
#include "cudacore.h"
#include "cudalib.h"
#include "loom.h"

#define MAXR 8
#define COLLS 8
static const size_t counts[] = {1, 1000, 70001};
#define NCOUNTS (sizeof(counts) / sizeof(counts[0]))

static const char *const collNames[COLLS] = {"AllReduce", "Broadcast",     "Reduce",
                                             "AllGather", "ReduceScatter", "AlltoAll",
                                             "AlltoAllv", "Send/Recv"};

/* One rank's buffers for one call of collective k at `count` elements per block. */
struct rankBufs {
    int32_t *send, *recv;
    size_t scounts[MAXR], sdispls[MAXR], rcounts[MAXR], rdispls[MAXR];
};

/* AlltoAllv: what rank r sends to p, small and different for every pair. */
static size_t vCount(int r, int p)
{
    return (size_t)((r * 3 + p) % 4 + 1);
}

static int32_t value(int from, int to, size_t i)
{
    return (int32_t)((from * MAXR + to) * 100000 + (int)i);
}

/* Elements of a rank's buffers for one call: n blocks, or AlltoAllv's at most 4 per peer. */
static size_t span(int n, size_t count)
{
    return count < 4 ? 4 * (size_t)n : count * (size_t)n;
}

/* Fills rank r's buffers for collective k; recv is filled with -1. */
static void fill(int k, int r, int n, size_t count, struct rankBufs *b)
{
    size_t sn = span(n, count), rn = span(n, count);
    for (size_t i = 0; i < rn; i++)
        b->recv[i] = -1;
    for (size_t i = 0; i < sn; i++)
        b->send[i] = (int32_t)(r + (int)i);
    if (k == 3 || k == 7) /* AllGather, Send/Recv: the block says who sent it */
        for (size_t i = 0; i < count; i++)
            b->send[i] = value(r, 0, i);
    if (k == 5) /* AlltoAll */
        for (int p = 0; p < n; p++)
            for (size_t i = 0; i < count; i++)
                b->send[(size_t)p * count + i] = value(r, p, i);
    if (k == 6) { /* AlltoAllv */
        size_t so = 0, ro = 0;
        for (int p = 0; p < n; p++) {
            b->scounts[p] = vCount(r, p), b->sdispls[p] = so;
            b->rcounts[p] = vCount(p, r), b->rdispls[p] = ro;
            for (size_t i = 0; i < b->scounts[p]; i++)
                b->send[so + i] = value(r, p, i);
            so += b->scounts[p], ro += b->rcounts[p];
        }
    }
}

/* Issues rank r's call of collective k. */
static loomResult_t issue(int k, int r, int n, size_t count, loomComm_t comm, struct rankBufs *b)
{
    loomResult_t res;
    switch (k) {
    case 0:
        return loomAllReduce(b->send, b->recv, count, loomInt32, loomSum, comm, NULL);
    case 1:
        return loomBroadcast(b->send, b->recv, count, loomInt32, n - 1, comm, NULL);
    case 2:
        return loomReduce(b->send, b->recv, count, loomInt32, loomSum, n / 2, comm, NULL);
    case 3:
        return loomAllGather(b->send, b->recv, count, loomInt32, comm, NULL);
    case 4:
        return loomReduceScatter(b->send, b->recv, count, loomInt32, loomSum, comm, NULL);
    case 5:
        return loomAlltoAll(b->send, b->recv, count, loomInt32, comm, NULL);
    case 6:
        return loomAlltoAllv(b->send, b->scounts, b->sdispls, b->recv, b->rcounts, b->rdispls,
                             loomInt32, comm, NULL);
    default:
        loomGroupStart();
        res = loomSend(b->send, count, loomInt32, (r + 1) % n, comm, NULL);
        if (res == loomSuccess)
            res = loomRecv(b->recv, count, loomInt32, (r + n - 1) % n, comm, NULL);
        loomResult_t end = loomGroupEnd();
        return res != loomSuccess ? res : end;
    }
}

/* The value rank r must hold at recv[i] after collective k, -1 where it must be untouched. */
static int32_t expected(int k, int r, int n, size_t count, size_t i)
{
    int32_t tri = (int32_t)(n * (n - 1) / 2);
    switch (k) {
    case 0:
        return i < count ? (int32_t)(n * (int)i) + tri : -1;
    case 1:
        return i < count ? (int32_t)(n - 1 + (int)i) : -1;
    case 2:
        return i < count && r == n / 2 ? (int32_t)(n * (int)i) + tri : -1;
    case 3:
        return i < count * (size_t)n ? value((int)(i / count), 0, i % count) : -1;
    case 4:
        return i < count ? (int32_t)(n * (int)((size_t)r * count + i)) + tri : -1;
    case 5:
        return i < count * (size_t)n ? value((int)(i / count), r, i % count) : -1;
    case 6: {
        size_t at = 0;
        for (int p = 0; p < n; p++) {
            if (i < at + vCount(p, r))
                return value(p, r, i - at);
            at += vCount(p, r);
        }
        return -1;
    }
    default:
        return i < count ? value((r + n - 1) % n, 0, i) : -1;
    }
}

/* 0 if rank r's output of collective k is right; else 1, with what is wrong in why. */
static int verify(int k, int r, int n, size_t count, const struct rankBufs *b, char *why,
                  size_t len)
{
    for (size_t i = 0; i < span(n, count); i++) {
        int32_t want = expected(k, r, n, count, i);
        if (b->recv[i] != want) {
            snprintf(why, len,
                     "%s of %zu element(s) on %d ranks: rank %d element %zu is %d, not %d",
                     collNames[k], count, n, r, i, (int)b->recv[i], (int)want);
            return 1;
        }
    }
    return 0;
}

struct rankState {
    int rank, n;
    loomComm_t comm;
    struct rankBufs b;
    char why[256]; /* empty: every call and every check passed */
};

static void rankAlloc(struct rankState *s, int r, int n, loomComm_t comm)
{
    size_t max = span(n, counts[NCOUNTS - 1]);
    s->rank = r, s->n = n, s->comm = comm, s->why[0] = '\0';
    s->b.send = malloc(max * sizeof(int32_t));
    s->b.recv = malloc(max * sizeof(int32_t));
    ck_assert(s->b.send != NULL && s->b.recv != NULL);
}

static void rankFree(struct rankState *s)
{
    free(s->b.send);
    free(s->b.recv);
}

/* A rank's thread: every collective at every count, twice (the second time from the caches). */
static void *rankThread(void *arg)
{
    struct rankState *s = arg;
    for (int round = 0; round < 2; round++)
        for (size_t c = 0; c < NCOUNTS; c++)
            for (int k = 0; k < COLLS; k++) {
                fill(k, s->rank, s->n, counts[c], &s->b);
                loomResult_t res = issue(k, s->rank, s->n, counts[c], s->comm, &s->b);
                if (res != loomSuccess) {
                    snprintf(s->why, sizeof(s->why), "rank %d: %s of %zu failed: %s", s->rank,
                             collNames[k], counts[c], loomGetLastError(s->comm));
                    return NULL;
                }
                if (verify(k, s->rank, s->n, counts[c], &s->b, s->why, sizeof(s->why)))
                    return NULL;
            }
    return NULL;
}

static int hostOnly[MAXR] = {-1, -1, -1, -1, -1, -1, -1, -1};

/* Files this process left in /dev/shm (segment names carry the maker's pid). */
static int shmLeft(void)
{
    char prefix[32];
    int left = 0;
    snprintf(prefix, sizeof(prefix), "loom-%d-", (int)getpid());
    DIR *d = opendir("/dev/shm");
    if (d == NULL)
        return 0;
    for (struct dirent *e; (e = readdir(d)) != NULL;)
        left += strncmp(e->d_name, prefix, strlen(prefix)) == 0;
    closedir(d);
    return left;
}

static void destroyAll(loomComm_t *comms, int n)
{
    for (int r = 0; r < n; r++)
        ck_assert_int_eq(loomCommDestroy(comms[r]), loomSuccess);
    ck_assert_msg(shmLeft() == 0, "%d segment(s) of this process left in /dev/shm", shmLeft());
}

static void checkRanks(loomComm_t *comms, int n)
{
    for (int r = 0; r < n; r++) {
        int got;
        ck_assert_int_eq(loomCommUserRank(comms[r], &got), loomSuccess);
        ck_assert_int_eq(got, r);
        ck_assert_int_eq(loomCommCount(comms[r], &got), loomSuccess);
        ck_assert_int_eq(got, n);
    }
}

/* ---- a thread per rank ---- */

static void threadsAt(int n)
{
    loomComm_t comms[MAXR];
    struct rankState st[MAXR];
    pthread_t th[MAXR];
    ck_assert_msg(loomCommInitAll(comms, n, hostOnly) == loomSuccess, "init of %d ranks: %s", n,
                  loomGetLastError(NULL));
    checkRanks(comms, n);
    for (int r = 0; r < n; r++) {
        rankAlloc(&st[r], r, n, comms[r]);
        ck_assert_int_eq(pthread_create(&th[r], NULL, rankThread, &st[r]), 0);
    }
    for (int r = 0; r < n; r++)
        ck_assert_int_eq(pthread_join(th[r], NULL), 0);
    for (int r = 0; r < n; r++) {
        ck_assert_msg(st[r].why[0] == '\0', "%s", st[r].why);
        rankFree(&st[r]);
    }
    destroyAll(comms, n);
}

START_TEST(test_threads)
{
    threadsAt(_i);
}
END_TEST

/* Single copies forced (LOOM_ALGO=cma): process_vm_readv between threads of one process. */
START_TEST(test_threads_cma)
{
    setenv("LOOM_ALGO", "cma", 1);
    threadsAt(_i);
}
END_TEST

/* ---- one thread, a group over every rank ---- */

static void groupAt(int n)
{
    loomComm_t comms[MAXR];
    struct rankState st[MAXR];
    ck_assert_msg(loomCommInitAll(comms, n, NULL) == loomSuccess, "init of %d ranks: %s", n,
                  loomGetLastError(NULL));
    for (int r = 0; r < n; r++)
        rankAlloc(&st[r], r, n, comms[r]);
    for (int round = 0; round < 2; round++)
        for (size_t c = 0; c < NCOUNTS; c++)
            for (int k = 0; k < COLLS; k++) {
                ck_assert_int_eq(loomGroupStart(), loomSuccess);
                for (int r = 0; r < n; r++) {
                    fill(k, r, n, counts[c], &st[r].b);
                    ck_assert_msg(issue(k, r, n, counts[c], comms[r], &st[r].b) == loomSuccess,
                                  "rank %d: %s of %zu: %s", r, collNames[k], counts[c],
                                  loomGetLastError(NULL));
                }
                ck_assert_msg(loomGroupEnd() == loomSuccess, "%s of %zu on %d ranks: %s",
                              collNames[k], counts[c], n, loomGetLastError(NULL));
                for (int r = 0; r < n; r++)
                    ck_assert_msg(
                        !verify(k, r, n, counts[c], &st[r].b, st[r].why, sizeof(st[r].why)), "%s",
                        st[r].why);
            }
    for (int r = 0; r < n; r++)
        rankFree(&st[r]);
    destroyAll(comms, n);
}

/* NULL devlist: on this machine (no CUDA driver loadable) the ranks are host-only. */
START_TEST(test_group)
{
    setenv("LOOM_CUDA_LIB", "/nonexistent/libcuda.so.1", 1);
    groupAt(_i);
}
END_TEST

/* The kernel executor (LOOM_EXECUTOR=kernel) runs a group of the process's ranks too. */
START_TEST(test_group_kernel_executor)
{
    setenv("LOOM_CUDA_LIB", "/nonexistent/libcuda.so.1", 1);
    setenv("LOOM_EXECUTOR", "kernel", 1);
    groupAt(_i);
}
END_TEST

/* ---- bad arguments ---- */

START_TEST(test_bad_args)
{
    loomComm_t comms[2] = {NULL, NULL};
    int bad[2] = {-1, -2};
    int dev0[1] = {0};
    setenv("LOOM_CUDA_LIB", "/nonexistent/libcuda.so.1", 1);
    ck_error(loomCommInitAll(NULL, 2, hostOnly), loomInvalidArgument, "comms is NULL");
    ck_error(loomCommInitAll(comms, 0, hostOnly), loomInvalidArgument, "ndev 0");
    ck_error(loomCommInitAll(comms, -3, NULL), loomInvalidArgument, "ndev -3");
    ck_error(loomCommInitAll(comms, 2, bad), loomInvalidArgument, "devlist[1] is -2");
    ck_error(loomCommInitAll(comms, 1, dev0), loomInvalidArgument, "CUDA is not usable");
    ck_assert_ptr_null(comms[0]); /* untouched on failure */
    ck_assert_ptr_null(comms[1]);
    ck_assert_int_eq(shmLeft(), 0);
}
END_TEST

/* ---- abort and destroy ---- */

struct blocked {
    loomComm_t comm;
    loomResult_t res;
    int32_t buf[64];
};

static void *blockedCall(void *arg)
{
    struct blocked *b = arg;
    b->res = loomAllReduce(b->buf, b->buf, 64, loomInt32, loomSum, b->comm, NULL);
    return NULL;
}

/*
 * Ranks 1 and 2 wait in an AllReduce that rank 0 never joins; the main
 * thread aborts them (another thread than the one in the call, as an
 * application's watchdog would): their calls return an error, not at the
 * timeout, and the handles are dead. Rank 0 is destroyed; nothing is left.
 */
START_TEST(test_abort)
{
    loomComm_t comms[3];
    struct blocked b[3];
    pthread_t th[3];
    setenv("LOOM_TIMEOUT", "600", 1); /* a return at the timeout would fail the test's own */
    ck_assert_int_eq(loomCommInitAll(comms, 3, hostOnly), loomSuccess);
    for (int r = 1; r < 3; r++) {
        b[r] = (struct blocked){.comm = comms[r], .res = loomSuccess};
        ck_assert_int_eq(pthread_create(&th[r], NULL, blockedCall, &b[r]), 0);
    }
    usleep(100 * 1000); /* not a timing assertion: the calls are waiting or about to */
    for (int r = 1; r < 3; r++)
        ck_assert_int_eq(loomCommAbort(comms[r]), loomSuccess);
    for (int r = 1; r < 3; r++) {
        ck_assert_int_eq(pthread_join(th[r], NULL), 0);
        ck_assert_msg(b[r].res != loomSuccess, "rank %d's AllReduce succeeded without rank 0", r);
    }
    ck_error(loomAllReduce(b[1].buf, b[1].buf, 1, loomInt32, loomSum, comms[1], NULL),
             loomInvalidUsage, "destroyed");
    ck_assert_int_eq(loomCommDestroy(comms[0]), loomSuccess);
    ck_assert_int_eq(shmLeft(), 0);
}
END_TEST

/* A group over all ranks, then destroy: nothing left, and a destroyed handle is refused. */
START_TEST(test_destroy)
{
    loomComm_t comms[4];
    int32_t x[4][16];
    ck_assert_int_eq(loomCommInitAll(comms, 4, hostOnly), loomSuccess);
    ck_assert_int_eq(loomGroupStart(), loomSuccess);
    for (int r = 0; r < 4; r++) {
        for (int i = 0; i < 16; i++)
            x[r][i] = r;
        ck_assert_int_eq(loomAllReduce(x[r], x[r], 16, loomInt32, loomSum, comms[r], NULL),
                         loomSuccess);
    }
    ck_assert_int_eq(loomGroupEnd(), loomSuccess);
    for (int r = 0; r < 4; r++)
        ck_assert_int_eq(x[r][15], 6);
    destroyAll(comms, 4);
    ck_error(loomCommDestroy(comms[2]), loomInvalidUsage, "destroyed");
}
END_TEST

/* ---- devices, with the stand-in driver ---- */

static char fakePath[4096];

#ifndef __SANITIZE_THREAD__ /* see initAllSuite */

struct devRank {
    loomComm_t comm;
    int dev, rank, n;
    char why[256];
};

/* A rank's thread on device buffers: AllReduce of 1000 floats in its device's context. */
static void *devThread(void *arg)
{
    struct devRank *d = arg;
    const struct cudaLib *lib;
    cuContext_t ctx;
    cuDevPtr_t p;
    float in[1000], out[1000];
    if (cudaLibGet(&lib) != loomSuccess || lib->devicePrimaryCtxRetain(&ctx, d->dev) ||
        lib->ctxSetCurrent(ctx) || lib->memAlloc(&p, sizeof(in))) {
        snprintf(d->why, sizeof(d->why), "rank %d: no device memory", d->rank);
        return NULL;
    }
    for (int i = 0; i < 1000; i++)
        in[i] = (float)(i % 7 + d->rank);
    if (lib->memcpyAsync(p, (cuDevPtr_t)(uintptr_t)in, sizeof(in), NULL) ||
        lib->streamSynchronize(NULL)) {
        snprintf(d->why, sizeof(d->why), "rank %d: copy to the device failed", d->rank);
        return NULL;
    }
    void *dp = (void *)(uintptr_t)p;
    if (loomAllReduce(dp, dp, 1000, loomFloat32, loomSum, d->comm, NULL) != loomSuccess) {
        snprintf(d->why, sizeof(d->why), "rank %d: AllReduce on device buffers: %s", d->rank,
                 loomGetLastError(d->comm));
        return NULL;
    }
    if (lib->memcpyAsync((cuDevPtr_t)(uintptr_t)out, p, sizeof(out), NULL) ||
        lib->streamSynchronize(NULL)) {
        snprintf(d->why, sizeof(d->why), "rank %d: copy from the device failed", d->rank);
        return NULL;
    }
    for (int i = 0; i < 1000; i++) {
        float want = (float)(d->n * (i % 7) + d->n * (d->n - 1) / 2);
        if (out[i] != want) {
            snprintf(d->why, sizeof(d->why), "rank %d: element %d is %g, not %g", d->rank, i,
                     (double)out[i], (double)want);
            return NULL;
        }
    }
    lib->memFree(p);
    return NULL;
}

/*
 * Ranks bound as devlist says: each communicator's context is its device's
 * primary context (shared by the ranks of one device), the link to the next
 * rank has device slots exactly when both are on one device (by address:
 * the driver opens no IPC handle in its own process), and an AllReduce on
 * device buffers, a thread per rank, is right.
 */
static void devicesAt(const int *devlist, int n)
{
    loomComm_t comms[MAXR];
    struct devRank d[MAXR];
    pthread_t th[MAXR];
    const struct cudaLib *lib;
    size_t fatbinBytes;
    ck_assert_msg(loomCommInitAll(comms, n, devlist) == loomSuccess, "%s", loomGetLastError(NULL));
    ck_assert_int_eq(cudaLibGet(&lib), loomSuccess);
    for (int r = 0; r < n; r++) {
        int dev = -1;
        cuContext_t primary;
        void *ctx = p2pContext(comms[r], &dev);
        ck_assert_msg(ctx != NULL, "rank %d is bound to no device", r);
        ck_assert_int_eq(dev, devlist[r]);
        ck_assert_int_eq(lib->devicePrimaryCtxRetain(&primary, devlist[r]), CUL_SUCCESS);
        ck_assert_ptr_eq(ctx, primary);
        int next = (r + 1) % n, shared = devlist[next] == devlist[r];
        ck_assert_msg((comms[r]->channels[0].send[next].devSlots != NULL) == shared,
                      "rank %d's link to rank %d %s device slots", r, next,
                      shared ? "lacks" : "has");
    }
    if (cudaFatbin(&fatbinBytes) != NULL) { /* a build without kernels refuses device buffers */
        for (int r = 0; r < n; r++) {
            d[r] = (struct devRank){.comm = comms[r], .dev = devlist[r], .rank = r, .n = n};
            ck_assert_int_eq(pthread_create(&th[r], NULL, devThread, &d[r]), 0);
        }
        for (int r = 0; r < n; r++) {
            ck_assert_int_eq(pthread_join(th[r], NULL), 0);
            ck_assert_msg(d[r].why[0] == '\0', "%s", d[r].why);
        }
    }
    destroyAll(comms, n);
}

START_TEST(test_fake_repeated_device)
{
    static const int devlist[3] = {0, 0, 0};
    setenv("LOOM_CUDA_LIB", fakePath, 1);
    setenv("FAKECUDA_DELAY_US", "50", 1);
    setenv("LOOM_BUFFSIZE", "4096", 1); /* 512-byte slots: several chunks per block */
    devicesAt(devlist, 3);
}
END_TEST

START_TEST(test_fake_two_devices)
{
    static const int devlist[4] = {1, 0, 0, 1};
    setenv("LOOM_CUDA_LIB", fakePath, 1);
    setenv("FAKECUDA_DEVICES", "2", 1);
    setenv("LOOM_BUFFSIZE", "4096", 1);
    devicesAt(devlist, 4);
}
END_TEST

/* NULL devlist with CUDA present: rank i on device i, as NCCL; more ranks than devices fail. */
START_TEST(test_fake_null_devlist)
{
    static const int identity[2] = {0, 1};
    loomComm_t comms[3] = {NULL, NULL, NULL};
    int one[1] = {2};
    setenv("LOOM_CUDA_LIB", fakePath, 1);
    setenv("FAKECUDA_DEVICES", "2", 1);
    ck_error(loomCommInitAll(comms, 3, NULL), loomInvalidArgument, "2 device(s) are visible");
    ck_error(loomCommInitAll(comms, 1, one), loomInvalidArgument, "devlist[0] is CUDA device 2");
    ck_assert_ptr_null(comms[0]);
    ck_assert_int_eq(loomCommInitAll(comms, 2, NULL), loomSuccess);
    for (int r = 0; r < 2; r++) {
        int dev = -1;
        ck_assert_ptr_nonnull(p2pContext(comms[r], &dev));
        ck_assert_int_eq(dev, identity[r]);
    }
    destroyAll(comms, 2);
}
END_TEST

#endif /* __SANITIZE_THREAD__ */

static Suite *initAllSuite(void)
{
    Suite *s = suite_create("initall");
    TCase *tc = tcase_create("threads");
    tcase_set_timeout(tc, 600);
    tcase_add_loop_test(tc, test_threads, 1, MAXR + 1);
    tcase_add_loop_test(tc, test_threads_cma, 2, 5);
    suite_add_tcase(s, tc);
    tc = tcase_create("group");
    tcase_set_timeout(tc, 600);
    tcase_add_loop_test(tc, test_group, 1, MAXR + 1);
    tcase_add_loop_test(tc, test_group_kernel_executor, 1, 5);
    suite_add_tcase(s, tc);
    tc = tcase_create("lifecycle");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_bad_args);
    tcase_add_test(tc, test_abort);
    tcase_add_test(tc, test_destroy);
    suite_add_tcase(s, tc);
#ifndef __SANITIZE_THREAD__
    tc = tcase_create("devices");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_fake_repeated_device);
    tcase_add_test(tc, test_fake_two_devices);
    tcase_add_test(tc, test_fake_null_devlist);
    suite_add_tcase(s, tc);
#else
    /* The ranks map one shm segment at one address each, so ThreadSanitizer cannot see that
     * the FIFO counters order the stand-in driver's copies into a peer's device slots, which
     * all ranks reach at one address: it would report every such copy. */
    printf("initall: the devices case is skipped under ThreadSanitizer (ranks of one process "
           "map the FIFO counters at different addresses)\n");
#endif
    return s;
}

int main(void)
{
    const char *top = getenv("top_builddir");
    snprintf(fakePath, sizeof(fakePath), "%s/tests/unit/.libs/libfakecuda.so", top ? top : ".");
    setenv("LOOM_SOCKET_IFNAME", "lo", 0);
    setenv("LOOM_TIMEOUT", "60", 0); /* a hang becomes a failure with a line saying where */
    SRunner *sr = srunner_create(initAllSuite());
    srunner_set_fork_status(sr, CK_FORK);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
