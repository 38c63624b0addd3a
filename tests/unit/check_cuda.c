/*
 * check_cuda.c — the host side of Loom's GPU support, on a machine without
 * a GPU: loading without a driver, telling device pointers apart, the
 * errors of wrong buffers, CUDA stream ordering, and the p2p wiring.
 *
 * Cases that need a driver use the stand-in of fakecuda.c (LOOM_CUDA_LIB),
 * whose device memory the CPU cannot touch and whose streams run
 * asynchronously, so these check what the library asks of the driver, not
 * what a GPU computes: kernels run on the CPU there (tests/gpu/run runs the
 * real ones). Each case runs in a child process of its own (Check's fork
 * mode), so each reads LOOM_CUDA_LIB afresh; the parent makes no Loom call.
 */
#include <check.h>
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include "comms.h"
#include "core.h"
#include "cudalib.h"
#include "loom.h"

#ifdef HAVE_CUDA
#include <cuda.h>
#endif

#define N 1000

static char fakePath[4096];

static void useFake(const char *extraVar, const char *value)
{
    setenv("LOOM_CUDA_LIB", fakePath, 1);
    if (extraVar)
        setenv(extraVar, value, 1);
}

/* The fake driver, with device `dev`'s context current, as an application would have it. */
static const struct cudaLib *fakeDriver(int dev)
{
    const struct cudaLib *lib = NULL;
    cuContext_t ctx;
    ck_assert_int_eq(cudaLibGet(&lib), loomSuccess);
    ck_assert_int_eq(lib->devicePrimaryCtxRetain(&ctx, dev), CUL_SUCCESS);
    ck_assert_int_eq(lib->ctxSetCurrent(ctx), CUL_SUCCESS);
    return lib;
}

/*
 * 1 if this build has kernels; without them (configure --without-cuda) a
 * call on device buffers must say so, and the cases that need kernels stop
 * after checking that.
 */
static int kernelsBuilt(void *d, loomComm_t comm)
{
    size_t bytes;
    if (cudaFatbin(&bytes) != NULL)
        return 1;
    ck_error(loomAllReduce(d, d, 1, loomInt8, loomSum, comm, NULL), loomInvalidUsage,
             "built without CUDA");
    return 0;
}

static void *devAlloc(const struct cudaLib *lib, size_t bytes)
{
    cuDevPtr_t p = 0;
    ck_assert_int_eq(lib->memAlloc(&p, bytes), CUL_SUCCESS);
    return (void *)(uintptr_t)p;
}

/* Synchronous copies through the default stream (the fake's, like the driver's, is in order). */
static void copyWait(const struct cudaLib *lib, void *dst, const void *src, size_t bytes)
{
    ck_assert_int_eq(
        lib->memcpyAsync((cuDevPtr_t)(uintptr_t)dst, (cuDevPtr_t)(uintptr_t)src, bytes, NULL),
        CUL_SUCCESS);
    ck_assert_int_eq(lib->streamSynchronize(NULL), CUL_SUCCESS);
}

/* ---- no driver ---- */

START_TEST(test_no_driver_host_buffers)
{
    setenv("LOOM_CUDA_LIB", "/nonexistent/libcuda.so.1", 1);
    loomComm_t comm = soloComm();
    int in[4] = {1, 2, 3, 4}, out[4] = {0};
    ck_assert_int_eq(loomAllReduce(in, out, 4, loomInt32, loomSum, comm, NULL), loomSuccess);
    ck_assert(memcmp(in, out, sizeof(in)) == 0);
    cuContext_t ctx;
    int dev;
    ck_assert_int_eq(cudaLibLoaded(), 0);
    ck_assert_int_eq(cudaLibPointerKind(in, &ctx, &dev), CUDA_MEM_HOST);
    ck_assert_ptr_null(comm->cuda);
    loomCommDestroy(comm);
}
END_TEST

START_TEST(test_no_driver_cuda_stream)
{
    setenv("LOOM_CUDA_LIB", "/nonexistent/libcuda.so.1", 1);
    loomStream_t s = NULL;
    ck_error(loomStreamCreateCuda(NULL, (void *)0x10), loomInvalidArgument, "stream is NULL");
    ck_error(loomStreamCreateCuda(&s, (void *)0x10), loomUnhandledCudaError, "CUDA driver");
    ck_assert_msg(strstr(loomGetLastError(NULL), "/nonexistent/libcuda.so.1") != NULL, "%s",
                  loomGetLastError(NULL));
    ck_assert_ptr_null(s);
    /* The outcome is kept: the second try says the same without loading again. */
    ck_error(loomStreamCreateCuda(&s, (void *)0x10), loomUnhandledCudaError, "no NVIDIA driver");
}
END_TEST

START_TEST(test_no_device)
{
    useFake("FAKECUDA_NO_DEVICE", "1");
    loomStream_t s = NULL;
    ck_error(loomStreamCreateCuda(&s, (void *)0x10), loomUnhandledCudaError, "cuInit failed");
}
END_TEST

/* ---- the fake driver: one rank ---- */

START_TEST(test_fake_pointer_kinds)
{
    useFake(NULL, NULL);
    const struct cudaLib *lib = fakeDriver(0);
    void *d = devAlloc(lib, 4096);
    char host[64];
    cuContext_t ctx = NULL, cur = NULL;
    int dev = -1;
    ck_assert_int_eq(cudaLibLoaded(), 1);
    ck_assert_int_eq(cudaLibPointerKind(d, &ctx, &dev), CUDA_MEM_DEVICE);
    lib->ctxGetCurrent(&cur);
    ck_assert_ptr_eq(ctx, cur);
    ck_assert_int_eq(dev, 0);
    ck_assert_int_eq(cudaLibPointerKind((char *)d + 100, &ctx, &dev), CUDA_MEM_DEVICE);
    ck_assert_int_eq(cudaLibPointerKind(host, &ctx, &dev), CUDA_MEM_HOST);
}
END_TEST

START_TEST(test_fake_wrong_buffers)
{
    useFake("FAKECUDA_DEVICES", "2");
    const struct cudaLib *lib = fakeDriver(0);
    loomComm_t comm = soloComm(); /* bound to device 0 */
    void *d = devAlloc(lib, N * sizeof(float));
    float h[N];
    ck_assert_ptr_nonnull(comm->cuda);
    if (!kernelsBuilt(d, comm))
        return;
    ck_error(loomAllReduce(d, h, N, loomFloat32, loomSum, comm, NULL), loomInvalidArgument,
             "sendbuff is CUDA device memory (device 0) and recvbuff is host memory");
    ck_error(loomBroadcast(h, d, N, loomFloat32, 0, comm, NULL), loomInvalidArgument,
             "recvbuff is CUDA device memory");
    fakeDriver(1);
    void *d1 = devAlloc(lib, N * sizeof(float));
    ck_error(loomAllReduce(d1, d1, N, loomFloat32, loomSum, comm, NULL), loomInvalidUsage,
             "sendbuff is on CUDA device 1, but the communicator was created with device 0");
    fakeDriver(0);
    ck_error(loomAllReduce(d, d1, N, loomFloat32, loomSum, comm, NULL), loomInvalidArgument,
             "sendbuff is on CUDA device 0 and recvbuff on device 1");
    loomGroupStart();
    ck_assert_int_eq(loomAllReduce(d, d, N, loomFloat32, loomSum, comm, NULL), loomSuccess);
    ck_assert_int_eq(loomAllReduce(h, h, N, loomFloat32, loomSum, comm, NULL), loomSuccess);
    ck_error(loomGroupEnd(), loomInvalidUsage, "a group takes one kind of memory");
    /* The communicator still works. */
    ck_assert_int_eq(loomAllReduce(d, d, N, loomFloat32, loomSum, comm, NULL), loomSuccess);
    loomCommDestroy(comm);
}
END_TEST

/* Device buffers on one rank, blocking calls: results come back through the fake. */
START_TEST(test_fake_solo_device)
{
    useFake("FAKECUDA_DELAY_US", "200");
    const struct cudaLib *lib = fakeDriver(0);
    loomComm_t comm = soloComm();
    int32_t in[N], out[N];
    void *d = devAlloc(lib, sizeof(in)), *e = devAlloc(lib, sizeof(in));
    if (!kernelsBuilt(d, comm))
        return;
    for (int i = 0; i < N; i++)
        in[i] = i * 3 - 7;
    copyWait(lib, d, in, sizeof(in));
    ck_assert_int_eq(loomAllReduce(d, e, N, loomInt32, loomAvg, comm, NULL), loomSuccess);
    copyWait(lib, out, e, sizeof(out));
    ck_assert(memcmp(in, out, sizeof(in)) == 0);
    /* An in-place AlltoAll stages its input in device scratch memory. */
    ck_assert_int_eq(loomAlltoAll(d, d, N, loomInt32, comm, NULL), loomSuccess);
    copyWait(lib, out, d, sizeof(out));
    ck_assert(memcmp(in, out, sizeof(in)) == 0);
    /* A device plan on a host stream runs on its thread. */
    loomStream_t s;
    ck_assert_int_eq(loomStreamCreate(&s), loomSuccess);
    ck_assert_int_eq(loomBroadcast(d, e, N, loomInt32, 0, comm, s), loomSuccess);
    ck_assert_int_eq(loomStreamSynchronize(s), loomSuccess);
    ck_assert_int_eq(loomStreamDestroy(s), loomSuccess);
    copyWait(lib, out, e, sizeof(out));
    ck_assert(memcmp(in, out, sizeof(in)) == 0);
    loomCommDestroy(comm);
}
END_TEST

/*
 * On a CUDA stream the call returns at once, runs after the copy queued
 * before it and before the copy queued after it: with every command of the
 * fake delayed, any other order reads stale data.
 */
static void streamOrder(void)
{
    const struct cudaLib *lib = fakeDriver(0);
    loomComm_t comm = soloComm();
    cuStream_t cs;
    loomStream_t s;
    int32_t in[N], out[N];
    ck_assert_int_eq(lib->streamCreateWithPriority(&cs, 0, 0), CUL_SUCCESS);
    ck_assert_int_eq(loomStreamCreateCuda(&s, cs), loomSuccess);
    void *d = devAlloc(lib, sizeof(in)), *e = devAlloc(lib, sizeof(in));
    if (!kernelsBuilt(d, comm))
        return;
    for (int round = 0; round < 3; round++) {
        for (int i = 0; i < N; i++)
            in[i] = i * (round + 2);
        memset(out, 0, sizeof(out));
        ck_assert_int_eq(
            lib->memcpyAsync((cuDevPtr_t)(uintptr_t)d, (cuDevPtr_t)(uintptr_t)in, sizeof(in), cs),
            CUL_SUCCESS);
        ck_assert_int_eq(loomAllReduce(d, e, N, loomInt32, loomMax, comm, s), loomSuccess);
        ck_assert_int_eq(
            lib->memcpyAsync((cuDevPtr_t)(uintptr_t)out, (cuDevPtr_t)(uintptr_t)e, sizeof(out), cs),
            CUL_SUCCESS);
        ck_assert_int_eq(lib->streamSynchronize(cs), CUL_SUCCESS);
        ck_assert_msg(memcmp(in, out, sizeof(in)) == 0, "round %d: out[1] = %d, want %d", round,
                      out[1], in[1]);
    }
    /* Host buffers on a CUDA stream: run in order too, done at loomStreamSynchronize. */
    ck_assert_int_eq(loomAllReduce(in, out, N, loomInt32, loomSum, comm, s), loomSuccess);
    ck_assert_int_eq(loomStreamSynchronize(s), loomSuccess);
    ck_assert(memcmp(in, out, sizeof(in)) == 0);
    ck_assert_int_eq(loomStreamQuery(s), loomSuccess);
    ck_assert_int_eq(loomStreamDestroy(s), loomSuccess);
    ck_assert_int_eq(lib->streamDestroy(cs), CUL_SUCCESS);
    loomCommDestroy(comm);
}

START_TEST(test_fake_stream_order)
{
    useFake("FAKECUDA_DELAY_US", "3000");
    streamOrder();
}
END_TEST

START_TEST(test_fake_stream_order_kernel_wait)
{
    useFake("FAKECUDA_DELAY_US", "3000");
    setenv("FAKECUDA_NO_MEMOPS", "1", 1);
    streamOrder();
}
END_TEST

/*
 * A CUDA stream attached while it is held (here by the test's own wait): the kernels'
 * load at attach fails in the fake, as a real driver would hang. Attaching still
 * succeeds and leaves the thread's last error alone; the first device-buffer call on it
 * reports the failure, and the load is not tried again inside the unit, where the
 * application's stream is held by Loom's own wait.
 */
START_TEST(test_fake_preload_fails_once)
{
    useFake(NULL, NULL);
    const struct cudaLib *lib = fakeDriver(0);
    loomComm_t comm = soloComm();
    cuStream_t cs;
    loomStream_t s;
    void *flag;
    cuDevPtr_t flagDev;
    int32_t in[N];
    void *d = devAlloc(lib, sizeof(in)), *e = devAlloc(lib, sizeof(in));
    if (!kernelsBuilt(d, comm))
        return;
    void *h = dlopen(fakePath, RTLD_NOW | RTLD_NOLOAD);
    ck_assert_ptr_nonnull(h);
    int (*loads)(void) = (int (*)(void))dlsym(h, "fakecudaModuleLoads");
    ck_assert_ptr_nonnull(loads);
    ck_assert_int_eq(lib->streamCreateWithPriority(&cs, 0, 0), CUL_SUCCESS);
    ck_assert_int_eq(lib->memHostAlloc(&flag, 64, CUL_MEMHOSTALLOC_DEVICEMAP), CUL_SUCCESS);
    ck_assert_int_eq(lib->memHostGetDevicePointer(&flagDev, flag, 0), CUL_SUCCESS);
    *(volatile uint32_t *)flag = 0;
    ck_assert_int_eq(lib->streamWaitValue32(cs, flagDev, 1, CUL_STREAM_WAIT_VALUE_GEQ),
                     CUL_SUCCESS);
    ck_error(loomStreamCreateCuda(NULL, cs), loomInvalidArgument, "stream is NULL");
    int before = loads();
    ck_assert_int_eq(loomStreamCreateCuda(&s, cs), loomSuccess);
    ck_assert_int_eq(loads(), before + 1);
    ck_assert_msg(strstr(loomGetLastError(NULL), "stream is NULL") != NULL,
                  "attaching changed the last error to: %s", loomGetLastError(NULL));
    __atomic_store_n((uint32_t *)flag, 1, __ATOMIC_RELEASE);
    ck_assert_int_eq(lib->streamSynchronize(cs), CUL_SUCCESS);
    loomResult_t r = loomAllReduce(d, e, N, loomInt32, loomSum, comm, s);
    if (r == loomSuccess)
        r = loomStreamSynchronize(s);
    ck_assert_int_ne(r, loomSuccess);
    ck_assert_msg(strstr(loomGetLastError(comm), "loading Loom's kernels") != NULL,
                  "the error was: %s", loomGetLastError(comm));
    ck_assert_int_eq(loads(), before + 1);
    ck_assert_int_eq(lib->streamSynchronize(cs), CUL_SUCCESS);
    loomStreamDestroy(s);
    ck_assert_int_eq(lib->streamDestroy(cs), CUL_SUCCESS);
    lib->memFreeHost(flag);
    loomCommDestroy(comm);
}
END_TEST

START_TEST(test_fake_stream_not_a_stream)
{
    useFake(NULL, NULL);
    fakeDriver(0);
    loomStream_t s = NULL;
    /* A handle the driver does not know (the fake takes a zeroed one for that). */
    struct cuStreamOpaque *none = (struct cuStreamOpaque *)calloc(1, 4096);
    ck_error(loomStreamCreateCuda(&s, none), loomInvalidArgument, "not a CUDA stream");
    ck_assert_ptr_null(s);
    free(none);
}
END_TEST

/* ---- the fake driver: ranks in processes ---- */

/* The rank whose driver opens no peer's IPC handle (FAKECUDA_IPC_REFUSE), or -1. */
static int refusingRank = -1;

static void refuseEnv(int rank)
{
    if (rank == refusingRank)
        setenv("FAKECUDA_IPC_REFUSE", "1", 1);
}

/*
 * A rank on device buffers: AllReduce of N floats; exits 0 if right and if
 * the send connector to the next rank has device slots exactly when p2p is
 * expected. The fake's streams are made after the fork, in each rank.
 */
/* deviceRankStart's answer when the rank body goes on. */
#define RANK_GO (-1)

/*
 * The start of a rank body on device buffers: the driver in *lib and nbufs
 * device buffers of `bytes` each in bufs[]. RANK_GO to go on; otherwise
 * what the body returns: 0 in a build without CUDA (no kernels to launch;
 * deviceRank checks the refusal), or a failure (status 10, with its line).
 */
static int deviceRankStart(int rank, const struct cudaLib **lib, size_t bytes, int nbufs,
                           cuDevPtr_t *bufs)
{
    size_t fatbinBytes;
    if (cudaLibGet(lib) != loomSuccess)
        return testRankFail(rank, 10, "no driver: %s", loomGetLastError(NULL));
    for (int i = 0; i < nbufs; i++)
        if ((*lib)->memAlloc(&bufs[i], bytes) != CUL_SUCCESS)
            return testRankFail(rank, 10, "no device memory from the driver");
    return cudaFatbin(&fatbinBytes) == NULL ? 0 : RANK_GO;
}

static int deviceRank(int rank, int n, loomComm_t comm)
{
    const struct cudaLib *lib;
    cuDevPtr_t d;
    float in[N], out[N];
    int wantP2p = getenv("LOOM_P2P_DISABLE") == NULL && rank != refusingRank;
    size_t fatbinBytes;
    if (cudaLibGet(&lib) != loomSuccess || lib->memAlloc(&d, sizeof(in)))
        return testRankFail(rank, 10, "no driver, or no device memory from it");
    if (cudaFatbin(&fatbinBytes) == NULL) { /* built without CUDA: refused, see kernelsBuilt */
        if (loomAllReduce((void *)(uintptr_t)d, (void *)(uintptr_t)d, N, loomFloat32, loomSum, comm,
                          NULL) != loomInvalidUsage)
            return testRankFail(rank, 17, "a build without kernels did not refuse device buffers");
        return 0;
    }
    if ((comm->channels[0].send[(rank + 1) % n].devSlots != NULL) != wantP2p)
        return testRankFail(rank, 12, "the link to the next rank %s device slots",
                            wantP2p ? "lacks" : "has");
    for (int i = 0; i < N; i++)
        in[i] = (float)(i % 13 + rank);
    if (lib->memcpyAsync(d, (cuDevPtr_t)(uintptr_t)in, sizeof(in), NULL) ||
        lib->streamSynchronize(NULL))
        return testRankFail(rank, 13, "copying the input to the device failed");
    void *p = (void *)(uintptr_t)d;
    if (loomAllReduce(p, p, N, loomFloat32, loomSum, comm, NULL) != loomSuccess)
        return testRankFail(rank, 14, "AllReduce on device buffers failed: %s",
                            loomGetLastError(comm));
    if (lib->memcpyAsync((cuDevPtr_t)(uintptr_t)out, d, sizeof(out), NULL) ||
        lib->streamSynchronize(NULL))
        return testRankFail(rank, 15, "copying the result from the device failed");
    for (int i = 0; i < N; i++)
        if (out[i] != (float)(n * (i % 13) + n * (n - 1) / 2))
            return testRankFail(rank, 16, "element %d is %g, not %g", i, (double)out[i],
                                (double)(n * (i % 13) + n * (n - 1) / 2));
    return 0;
}

START_TEST(test_fake_ranks_p2p)
{
    useFake("FAKECUDA_DELAY_US", "100");
    setenv("LOOM_BUFFSIZE", "4096", 1); /* 512-byte slots: 8 chunks per rank's block */
    fakeDriver(0);                      /* the ranks inherit the current context */
    runRanks(3, deviceRank);
}
END_TEST

/* One rank's driver refuses IPC: its pairs fall back to host slots on both ends, the rest not. */
START_TEST(test_fake_ranks_ipc_refused)
{
    useFake("FAKECUDA_DELAY_US", "100");
    setenv("LOOM_BUFFSIZE", "4096", 1);
    refusingRank = 1;
    fakeDriver(0);
    runRanksWith(3, deviceRank, refuseEnv);
}
END_TEST

START_TEST(test_fake_ranks_host_staged)
{
    useFake("FAKECUDA_DELAY_US", "100");
    setenv("LOOM_BUFFSIZE", "4096", 1);
    setenv("LOOM_P2P_DISABLE", "1", 1);
    fakeDriver(0);
    runRanks(3, deviceRank);
}
END_TEST

/*
 * A rank on device buffers with LOOM_ALGO=tree: AllReduce, Reduce and
 * Broadcast, whose steps fold or feed two children at once (fan-in and
 * fan-out: chains of reductions and several slots written on the GPU's
 * stream). A Reduce leaves recvbuff off the root untouched.
 */
static int deviceTreeRank(int rank, int n, loomComm_t comm)
{
    const struct cudaLib *lib;
    cuDevPtr_t b[2];
    float in[N], out[N];
    int st = deviceRankStart(rank, &lib, sizeof(in), 2, b);
    if (st != RANK_GO)
        return st;
    cuDevPtr_t d = b[0], e = b[1];
    static const char *const names[] = {"AllReduce", "Reduce", "Broadcast"};
    for (int c = 0; c < 3; c++) {
        int root = c == 1 ? 1 % n : 2 % n;
        for (int i = 0; i < N; i++)
            in[i] = (float)(i % 13 + rank), out[i] = -1;
        if (lib->memcpyAsync(d, (cuDevPtr_t)(uintptr_t)in, sizeof(in), NULL) ||
            lib->memcpyAsync(e, (cuDevPtr_t)(uintptr_t)out, sizeof(out), NULL) ||
            lib->streamSynchronize(NULL))
            return testRankFail(rank, 13, "copying the input to the device failed");
        void *s = (void *)(uintptr_t)d, *r = (void *)(uintptr_t)e;
        loomResult_t res = c == 0   ? loomAllReduce(s, r, N, loomFloat32, loomSum, comm, NULL)
                           : c == 1 ? loomReduce(s, r, N, loomFloat32, loomSum, root, comm, NULL)
                                    : loomBroadcast(s, r, N, loomFloat32, root, comm, NULL);
        if (res != loomSuccess)
            return testRankFail(rank, 14, "tree %s on device buffers failed: %s", names[c],
                                loomGetLastError(comm));
        if (lib->memcpyAsync((cuDevPtr_t)(uintptr_t)out, e, sizeof(out), NULL) ||
            lib->streamSynchronize(NULL))
            return testRankFail(rank, 15, "copying the result from the device failed");
        for (int i = 0; i < N; i++) {
            float want = c == 2                   ? (float)(i % 13 + root)
                         : c == 1 && rank != root ? -1.0f
                                                  : (float)(n * (i % 13) + n * (n - 1) / 2);
            if (out[i] != want)
                return testRankFail(rank, 16, "tree %s: element %d is %g, not %g", names[c], i,
                                    (double)out[i], (double)want);
        }
    }
    return 0;
}

START_TEST(test_fake_ranks_tree)
{
    useFake("FAKECUDA_DELAY_US", "20");
    setenv("LOOM_BUFFSIZE", "4096", 1);
    setenv("LOOM_ALGO", "tree", 1);
    fakeDriver(0);
    runRanks(4, deviceTreeRank);
}
END_TEST

/* ---- the fake driver: collectives as one launch of the interpreter (LOOM_EXECUTOR=kernel) ---- */

/* A counter the fake exports (fakecudaInterpretLaunches, fakecudaInterpretThreads). */
static int fakeCount(const char *name)
{
    void *h = dlopen(fakePath, RTLD_NOW | RTLD_NOLOAD);
    int (*fn)(void) = h ? (int (*)(void))dlsym(h, name) : NULL;
    return fn ? fn() : -1;
}

static int toDevice(const struct cudaLib *lib, cuDevPtr_t d, const void *h, size_t bytes)
{
    return lib->memcpyAsync(d, (cuDevPtr_t)(uintptr_t)h, bytes, NULL) ||
           lib->streamSynchronize(NULL);
}

static int fromDevice(const struct cudaLib *lib, void *h, cuDevPtr_t d, size_t bytes)
{
    return lib->memcpyAsync((cuDevPtr_t)(uintptr_t)h, d, bytes, NULL) ||
           lib->streamSynchronize(NULL);
}

/*
 * One collective on device buffers of n ranks, blocking: in[i] = i % 13 +
 * rank (x N blocks for AllGather), checked element by element. 0, or the
 * exit status of the failure.
 */
static int launchOne(int rank, int n, loomComm_t comm, const struct cudaLib *lib, cuDevPtr_t d,
                     cuDevPtr_t e, int c)
{
    static const char *const names[] = {"AllReduce", "AllGather", "ReduceScatter",
                                        "Broadcast", "Reduce",    "AlltoAll"};
    static float in[4 * N], out[4 * N];
    size_t count = c == 1 || c == 2 || c == 5 ? N / 4 : N;
    for (int i = 0; i < 4 * N; i++)
        in[i] = (float)(i % 13 + rank), out[i] = -1;
    if (toDevice(lib, d, in, sizeof(in)) || toDevice(lib, e, out, sizeof(out)))
        return testRankFail(rank, 13, "copying the input to the device failed");
    void *s = (void *)(uintptr_t)d, *r = (void *)(uintptr_t)e;
    loomResult_t res = c == 0   ? loomAllReduce(s, r, N, loomFloat32, loomSum, comm, NULL)
                       : c == 1 ? loomAllGather(s, r, count, loomFloat32, comm, NULL)
                       : c == 2 ? loomReduceScatter(s, r, count, loomFloat32, loomSum, comm, NULL)
                       : c == 3 ? loomBroadcast(s, r, N, loomFloat32, 1, comm, NULL)
                       : c == 4 ? loomReduce(s, r, N, loomFloat32, loomSum, n - 1, comm, NULL)
                                : loomAlltoAll(s, r, count, loomFloat32, comm, NULL);
    if (res != loomSuccess)
        return testRankFail(rank, 14, "%s on device buffers failed: %s", names[c],
                            loomGetLastError(comm));
    if (fromDevice(lib, out, e, sizeof(out)))
        return testRankFail(rank, 15, "copying the result from the device failed");
    size_t total = c == 1 ? count * (size_t)n : c == 5 ? count * (size_t)n : count;
    for (size_t i = 0; i < total; i++) {
        size_t blk = i / count, k = i % count;
        float sum = (float)((size_t)n * (i % 13) + (size_t)n * (size_t)(n - 1) / 2);
        float want =
            c == 0   ? sum
            : c == 1 ? (float)(k % 13 + blk)
            : c == 2
                ? (float)((size_t)n * ((rank * count + i) % 13) + (size_t)n * (size_t)(n - 1) / 2)
            : c == 3 ? (float)(i % 13 + 1)
            : c == 4 ? (rank == n - 1 ? sum : -1.0f)
                     : (float)((rank * count + k) % 13 + blk);
        if (out[i] != want)
            return testRankFail(rank, 16, "%s: element %zu is %g, not %g", names[c], i,
                                (double)out[i], (double)want);
    }
    return 0;
}

/* Where the launched kernels' FIFOs must live: GPU memory (1), or the host's shm (0). */
static int fifosOnDevice = 1;

/*
 * Every collective on device buffers, each one launch of loomInterpret
 * (the fake counts them), reading its plans from GPU memory, over FIFOs in
 * GPU memory unless p2p is off (the fake counts where each descriptor and
 * each FIFO a launch used lives); then a host-buffer
 * AllReduce, which takes the host FIFOs' positions back from the
 * launches, and a launch again.
 */
static int launchRank(int rank, int n, loomComm_t comm)
{
    const struct cudaLib *lib;
    cuDevPtr_t b[2];
    int st = deviceRankStart(rank, &lib, 4 * N * sizeof(float), 2, b);
    if (st != RANK_GO)
        return st;
    cuDevPtr_t d = b[0], e = b[1];
    int before = fakeCount("fakecudaInterpretLaunches"), rc;
    for (int c = 0; c < 6; c++)
        if ((rc = launchOne(rank, n, comm, lib, d, e, c)) != 0)
            return rc;
    if (fakeCount("fakecudaInterpretLaunches") != before + 6)
        return testRankFail(rank, 17, "%d launches of loomInterpret for 6 calls",
                            fakeCount("fakecudaInterpretLaunches") - before);
    if (fakeCount("fakecudaDescriptorsOnHost") != 0 || fakeCount("fakecudaDescriptorsOnDevice") < 6)
        return testRankFail(rank, 20,
                            "%d launches read their plans from host memory, %d from GPU "
                            "memory: want them all in GPU memory",
                            fakeCount("fakecudaDescriptorsOnHost"),
                            fakeCount("fakecudaDescriptorsOnDevice"));
    /* A pair whose one end cannot map the other's GPU memory keeps its host FIFOs: on 3
     * ranks the refusing rank's two pairs; the third pair, and each rank's link to itself,
     * are in GPU memory. */
    int dev = fakeCount("fakecudaFifosOnDevice"), host = fakeCount("fakecudaFifosOnHost");
    int wantDev = fifosOnDevice, wantHost = !fifosOnDevice || refusingRank >= 0;
    if ((wantDev ? dev <= 0 : dev != 0) || (wantHost ? host <= 0 : host != 0))
        return testRankFail(rank, 19,
                            "the launches used %d FIFOs in GPU memory and %d in host "
                            "memory: want %s",
                            dev, host,
                            wantDev && wantHost ? "some in each"
                            : wantDev           ? "them all in GPU memory"
                                                : "them all in host memory");
    float h[N], g[N];
    for (int i = 0; i < N; i++)
        h[i] = (float)rank;
    if (loomAllReduce(h, g, N, loomFloat32, loomSum, comm, NULL) != loomSuccess ||
        g[N - 1] != (float)(n * (n - 1) / 2))
        return testRankFail(rank, 18, "a host-buffer AllReduce after the launches failed: %s",
                            loomGetLastError(comm));
    return launchOne(rank, n, comm, lib, d, e, 0);
}

START_TEST(test_fake_launch_ranks)
{
    useFake("FAKECUDA_DELAY_US", "20");
    setenv("LOOM_EXECUTOR", "kernel", 1);
    setenv("LOOM_BUFFSIZE", "4096", 1); /* 512-byte slots: many steps per call */
    fakeDriver(0);
    runRanks(3, launchRank);
}
END_TEST

/*
 * Two ranks of this process on one device (loomCommInitAll), driven by one
 * thread in a group: one launch with a block per rank, whose FIFOs are in
 * GPU memory, shared by address (the driver opens no IPC handle in the
 * process that made it).
 */
START_TEST(test_fake_launch_initall)
{
    int devs[2] = {0, 0};
    loomComm_t comms[2];
    cuDevPtr_t d[2], e[2];
    int32_t in[N], out[N];
    size_t fatbinBytes;
    useFake(NULL, NULL);
    setenv("LOOM_EXECUTOR", "kernel", 1);
    const struct cudaLib *lib = fakeDriver(0);
    ck_assert_msg(loomCommInitAll(comms, 2, devs) == loomSuccess, "%s", loomGetLastError(NULL));
    if (cudaFatbin(&fatbinBytes) == NULL)
        return; /* built without CUDA: deviceRank checks the refusal */
    for (int r = 0; r < 2; r++) {
        for (int i = 0; i < N; i++)
            in[i] = 3 * i + r;
        ck_assert_int_eq(lib->memAlloc(&d[r], sizeof(in)), CUL_SUCCESS);
        ck_assert_int_eq(lib->memAlloc(&e[r], sizeof(out)), CUL_SUCCESS);
        ck_assert_int_eq(toDevice(lib, d[r], in, sizeof(in)), 0);
    }
    int before = fakeCount("fakecudaInterpretLaunches");
    loomGroupStart();
    for (int r = 0; r < 2; r++)
        loomAllReduce((void *)(uintptr_t)d[r], (void *)(uintptr_t)e[r], N, loomInt32, loomSum,
                      comms[r], NULL);
    ck_assert_msg(loomGroupEnd() == loomSuccess, "%s", loomGetLastError(NULL));
    ck_assert_int_eq(fakeCount("fakecudaInterpretLaunches"), before + 1);
    for (int r = 0; r < 2; r++) {
        ck_assert_int_eq(fromDevice(lib, out, e[r], sizeof(out)), 0);
        for (int i = 0; i < N; i++)
            ck_assert_msg(out[i] == 6 * i + 1, "rank %d: out[%d] = %d", r, i, out[i]);
    }
    ck_assert_int_eq(fakeCount("fakecudaFifosOnHost"), 0);
    ck_assert_int_gt(fakeCount("fakecudaFifosOnDevice"), 0);
    for (int r = 0; r < 2; r++)
        ck_assert_int_eq(loomCommDestroy(comms[r]), loomSuccess);
}
END_TEST

/* LOOM_P2P_DISABLE=1: the launched kernels go through the shm FIFOs (host-staged). */
START_TEST(test_fake_launch_ranks_host_staged)
{
    useFake("FAKECUDA_DELAY_US", "20");
    setenv("LOOM_EXECUTOR", "kernel", 1);
    setenv("LOOM_P2P_DISABLE", "1", 1);
    setenv("LOOM_BUFFSIZE", "4096", 1);
    fifosOnDevice = 0;
    fakeDriver(0);
    runRanks(3, launchRank);
}
END_TEST

/* One rank's driver refuses IPC: launches use host FIFOs with it, GPU ones between the others. */
START_TEST(test_fake_launch_ranks_ipc_refused)
{
    useFake("FAKECUDA_DELAY_US", "20");
    setenv("LOOM_EXECUTOR", "kernel", 1);
    setenv("LOOM_BUFFSIZE", "4096", 1);
    refusingRank = 1;
    fakeDriver(0);
    runRanksWith(3, launchRank, refuseEnv);
}
END_TEST

START_TEST(test_fake_launch_ranks_ll)
{
    useFake(NULL, NULL);
    setenv("LOOM_EXECUTOR", "kernel", 1);
    setenv("LOOM_PROTO", "LL", 1);
    setenv("LOOM_NCHANNELS", "2", 1);
    fakeDriver(0);
    runRanks(4, launchRank);
}
END_TEST

/*
 * On a CUDA stream the call is launched on it and returns at once: with the
 * stream held (a wait on a flag the test sets later), the call returns, a
 * launch is queued, and nothing has run; released, the copy queued before
 * the call is what it reduces and the copy queued after it reads its result,
 * with no host synchronisation in between (every command of the fake delayed).
 */
static int streamLaunchRank(int rank, int n, loomComm_t comm)
{
    const struct cudaLib *lib;
    cuDevPtr_t d, e, flagDev;
    cuStream_t cs;
    loomStream_t s;
    void *flag;
    int32_t in[N], out[N];
    size_t fatbinBytes;
    if (cudaLibGet(&lib) != loomSuccess || lib->memAlloc(&d, sizeof(in)) ||
        lib->memAlloc(&e, sizeof(out)) || lib->streamCreateWithPriority(&cs, 0, 0) ||
        lib->memHostAlloc(&flag, 64, CUL_MEMHOSTALLOC_DEVICEMAP) ||
        lib->memHostGetDevicePointer(&flagDev, flag, 0))
        return testRankFail(rank, 10, "no driver, stream or device memory from it");
    if (cudaFatbin(&fatbinBytes) == NULL)
        return 0;
    if (loomStreamCreateCuda(&s, cs) != loomSuccess)
        return testRankFail(rank, 11, "loomStreamCreateCuda: %s", loomGetLastError(NULL));
    for (int round = 0; round < 3; round++) {
        for (int i = 0; i < N; i++)
            in[i] = i * (round + 2) + rank, out[i] = 0;
        __atomic_store_n((uint32_t *)flag, 0, __ATOMIC_RELEASE);
        int before = fakeCount("fakecudaInterpretLaunches");
        if (lib->streamWaitValue32(cs, flagDev, 1, CUL_STREAM_WAIT_VALUE_GEQ) ||
            lib->memcpyAsync(d, (cuDevPtr_t)(uintptr_t)in, sizeof(in), cs))
            return testRankFail(rank, 12, "queueing the wait and the copy failed");
        if (loomAllReduce((void *)(uintptr_t)d, (void *)(uintptr_t)e, N, loomInt32, loomSum, comm,
                          s) != loomSuccess)
            return testRankFail(rank, 13, "AllReduce on the CUDA stream: %s",
                                loomGetLastError(comm));
        if (lib->memcpyAsync((cuDevPtr_t)(uintptr_t)out, e, sizeof(out), cs))
            return testRankFail(rank, 14, "queueing the copy back failed");
        if (fakeCount("fakecudaInterpretLaunches") != before + 1 || out[N - 1] != 0) {
            __atomic_store_n((uint32_t *)flag, 1, __ATOMIC_RELEASE); /* leave the stream free */
            return testRankFail(rank, 15,
                                "round %d: %d launches queued, out[%d] = %d: the call "
                                "did not launch, or ran before the stream let it",
                                round, fakeCount("fakecudaInterpretLaunches") - before, N - 1,
                                out[N - 1]);
        }
        __atomic_store_n((uint32_t *)flag, 1, __ATOMIC_RELEASE);
        if (lib->streamSynchronize(cs))
            return testRankFail(rank, 16, "cuStreamSynchronize failed");
        for (int i = 0; i < N; i++)
            if (out[i] != n * i * (round + 2) + n * (n - 1) / 2)
                return testRankFail(rank, 17, "round %d: out[%d] = %d, want %d", round, i, out[i],
                                    n * i * (round + 2) + n * (n - 1) / 2);
    }
    if (loomStreamSynchronize(s) != loomSuccess || loomStreamQuery(s) != loomSuccess)
        return testRankFail(rank, 18, "the stream reports %s", loomGetLastError(NULL));
    loomStreamDestroy(s);
    lib->streamDestroy(cs);
    lib->memFreeHost(flag);
    return 0;
}

START_TEST(test_fake_launch_stream_order)
{
    useFake("FAKECUDA_DELAY_US", "2000");
    setenv("LOOM_EXECUTOR", "kernel", 1);
    fakeDriver(0);
    runRanks(2, streamLaunchRank);
}
END_TEST

/*
 * A peer that never arrives: rank 1 makes no call. Rank 0's launch on a CUDA
 * stream returns at once; the watchdog stops the kernel after LOOM_TIMEOUT,
 * loomStreamSynchronize returns the host executor's named error, and no
 * thread of the "kernel" is left running.
 */
static int timeoutRank(int rank, int n, loomComm_t comm)
{
    const struct cudaLib *lib;
    cuDevPtr_t d;
    cuStream_t cs;
    loomStream_t s;
    size_t fatbinBytes;
    (void)n;
    if (cudaLibGet(&lib) != loomSuccess || lib->memAlloc(&d, N * sizeof(float)) ||
        lib->streamCreateWithPriority(&cs, 0, 0))
        return testRankFail(rank, 10, "no driver, stream or device memory from it");
    if (cudaFatbin(&fatbinBytes) == NULL || rank == 1) {
        sleep(6); /* never calls; leaves well after rank 0 gave up */
        return 0;
    }
    if (loomStreamCreateCuda(&s, cs) != loomSuccess)
        return testRankFail(rank, 11, "loomStreamCreateCuda: %s", loomGetLastError(NULL));
    void *p = (void *)(uintptr_t)d;
    int before = fakeCount("fakecudaInterpretLaunches");
    if (loomAllReduce(p, p, N, loomFloat32, loomSum, comm, s) != loomSuccess ||
        fakeCount("fakecudaInterpretLaunches") != before + 1)
        return testRankFail(rank, 12, "the call was not launched: %s", loomGetLastError(comm));
    loomResult_t res = loomStreamSynchronize(s);
    const char *line = loomGetLastError(NULL);
    if (res != loomTimeout || strstr(line, "rank 0 made no progress") == NULL ||
        strstr(line, "rank 1") == NULL)
        return testRankFail(rank, 13, "loomStreamSynchronize: %d, \"%s\"", res, line);
    if (fakeCount("fakecudaInterpretThreads") != 0)
        return testRankFail(rank, 14, "%d threads of the kernel still run",
                            fakeCount("fakecudaInterpretThreads"));
    loomResult_t async = loomSuccess;
    if (loomCommGetAsyncError(comm, &async) != loomSuccess || async != loomTimeout)
        return testRankFail(rank, 15, "the async error is %d, not loomTimeout", async);
    if (loomAllReduce(p, p, N, loomFloat32, loomSum, comm, NULL) == loomSuccess)
        return testRankFail(rank, 16, "a call on the broken communicator succeeded");
    loomStreamDestroy(s);
    return 0;
}

START_TEST(test_fake_launch_timeout)
{
    useFake(NULL, NULL);
    setenv("LOOM_EXECUTOR", "kernel", 1);
    setenv("LOOM_TIMEOUT", "1", 1);
    fakeDriver(0);
    runRanks(2, timeoutRank);
}
END_TEST

/*
 * A group on device buffers is one launch: an AllReduce and a Broadcast of
 * one communicator, then a ring of Send/Recv (each rank sends to the next);
 * then AlltoAllv with counts that differ by peer.
 */
static int groupLaunchRank(int rank, int n, loomComm_t comm)
{
    const struct cudaLib *lib;
    cuDevPtr_t b[3];
    int32_t in[N], out[N], got[N];
    int st = deviceRankStart(rank, &lib, sizeof(in), 3, b);
    if (st != RANK_GO)
        return st;
    cuDevPtr_t d = b[0], e = b[1], f = b[2];
    void *pd = (void *)(uintptr_t)d, *pe = (void *)(uintptr_t)e, *pf = (void *)(uintptr_t)f;
    for (int i = 0; i < N; i++)
        in[i] = i + 100 * rank;
    if (toDevice(lib, d, in, sizeof(in)))
        return testRankFail(rank, 11, "copying the input to the device failed");
    int before = fakeCount("fakecudaInterpretLaunches");
    loomGroupStart();
    loomAllReduce(pd, pe, N, loomInt32, loomSum, comm, NULL);
    loomBroadcast(pd, pf, N, loomInt32, n - 1, comm, NULL);
    if (loomGroupEnd() != loomSuccess || fakeCount("fakecudaInterpretLaunches") != before + 1)
        return testRankFail(rank, 12, "a group of two: %s, %d launches", loomGetLastError(comm),
                            fakeCount("fakecudaInterpretLaunches") - before);
    if (fromDevice(lib, out, e, sizeof(out)) || fromDevice(lib, got, f, sizeof(got)))
        return testRankFail(rank, 13, "copying the results from the device failed");
    for (int i = 0; i < N; i++)
        if (out[i] != n * i + 100 * n * (n - 1) / 2 || got[i] != i + 100 * (n - 1))
            return testRankFail(rank, 14, "group: element %d is %d and %d", i, out[i], got[i]);
    loomGroupStart();
    loomSend(pd, N, loomInt32, (rank + 1) % n, comm, NULL);
    loomRecv(pf, N, loomInt32, (rank + n - 1) % n, comm, NULL);
    if (loomGroupEnd() != loomSuccess || fromDevice(lib, got, f, sizeof(got)))
        return testRankFail(rank, 15, "Send/Recv ring: %s", loomGetLastError(comm));
    for (int i = 0; i < N; i++)
        if (got[i] != i + 100 * ((rank + n - 1) % n))
            return testRankFail(rank, 16, "Send/Recv: element %d is %d", i, got[i]);
    /* AlltoAllv: rank r sends peer p p + 1 elements from offset 10 p, and receives r + 1 each. */
    size_t sc[TEST_MAX_RANKS], sd[TEST_MAX_RANKS], rcn[TEST_MAX_RANKS], rd[TEST_MAX_RANKS];
    for (int p = 0; p < n; p++)
        sc[p] = (size_t)p + 1, sd[p] = 10 * (size_t)p, rcn[p] = (size_t)rank + 1,
        rd[p] = 10 * (size_t)p;
    if (loomAlltoAllv(pd, sc, sd, pf, rcn, rd, loomInt32, comm, NULL) != loomSuccess ||
        fromDevice(lib, got, f, sizeof(got)))
        return testRankFail(rank, 17, "AlltoAllv: %s", loomGetLastError(comm));
    for (int p = 0; p < n; p++)
        for (int k = 0; k <= rank; k++)
            if (got[10 * p + k] != 10 * rank + k + 100 * p)
                return testRankFail(rank, 18, "AlltoAllv: from rank %d element %d is %d", p, k,
                                    got[10 * p + k]);
    return 0;
}

START_TEST(test_fake_launch_group)
{
    useFake(NULL, NULL);
    setenv("LOOM_EXECUTOR", "kernel", 1);
    setenv("LOOM_BUFFSIZE", "4096", 1);
    fakeDriver(0);
    runRanks(3, groupLaunchRank);
}
END_TEST

/* A device buffer, a CUDA stream held by a flag (mapped host memory), and its Loom stream. */
struct heldStream {
    cuDevPtr_t in, out, flagDev;
    cuStream_t cs;
    loomStream_t s;
    uint32_t *flag;
};

static int heldStreamMake(const struct cudaLib *lib, size_t bytes, struct heldStream *h)
{
    void *flag;
    if (lib->memAlloc(&h->in, bytes) || lib->memAlloc(&h->out, bytes) ||
        lib->streamCreateWithPriority(&h->cs, 0, 0) ||
        lib->memHostAlloc(&flag, 64, CUL_MEMHOSTALLOC_DEVICEMAP) ||
        lib->memHostGetDevicePointer(&h->flagDev, flag, 0) ||
        loomStreamCreateCuda(&h->s, h->cs) != loomSuccess)
        return -1;
    h->flag = flag;
    return 0;
}

static void heldStreamFree(const struct cudaLib *lib, struct heldStream *h)
{
    loomStreamDestroy(h->s);
    lib->streamDestroy(h->cs);
    lib->memFreeHost(h->flag);
    lib->memFree(h->in);
    lib->memFree(h->out);
}

/*
 * A group whose two AllReduces are on two Loom CUDA streams is one launch,
 * on the first's stream, ordered after the work queued on both and before
 * the work queued on both after it. Both CUDA streams are held, each with
 * the copy of its input queued behind the hold and the copy of its result
 * after the call (every command of the fake delayed). Round 0 releases the
 * first stream alone for a while: the launch must still wait for the second
 * stream's input. Round 1 releases the second alone: its copy back must
 * still wait for the launch, so it reads nothing yet.
 */
static int joinRank(int rank, int n, loomComm_t comm)
{
    const struct cudaLib *lib;
    struct heldStream h[2];
    int32_t in[2][N], out[2][N];
    size_t fatbinBytes;
    if (cudaLibGet(&lib) != loomSuccess || heldStreamMake(lib, sizeof(in[0]), &h[0]) ||
        heldStreamMake(lib, sizeof(in[0]), &h[1]))
        return testRankFail(rank, 10, "no driver, streams or device memory: %s",
                            loomGetLastError(NULL));
    if (cudaFatbin(&fatbinBytes) == NULL)
        return 0;
    for (int round = 0; round < 2; round++) {
        for (int k = 0; k < 2; k++) {
            __atomic_store_n(h[k].flag, round, __ATOMIC_RELEASE);
            for (int i = 0; i < N; i++)
                in[k][i] = (k + 1) * i + rank + round, out[k][i] = 0;
            if (lib->streamWaitValue32(h[k].cs, h[k].flagDev, round + 1,
                                       CUL_STREAM_WAIT_VALUE_GEQ) ||
                lib->memcpyAsync(h[k].in, (cuDevPtr_t)(uintptr_t)in[k], sizeof(in[k]), h[k].cs))
                return testRankFail(rank, 11, "queueing the hold and the copy failed");
        }
        int before = fakeCount("fakecudaInterpretLaunches");
        loomGroupStart();
        for (int k = 0; k < 2; k++)
            loomAllReduce((void *)(uintptr_t)h[k].in, (void *)(uintptr_t)h[k].out, N, loomInt32,
                          loomSum, comm, h[k].s);
        if (loomGroupEnd() != loomSuccess)
            return testRankFail(rank, 12, "a group on two CUDA streams: %s",
                                loomGetLastError(comm));
        for (int k = 0; k < 2; k++)
            if (lib->memcpyAsync((cuDevPtr_t)(uintptr_t)out[k], h[k].out, sizeof(out[k]), h[k].cs))
                return testRankFail(rank, 13, "queueing the copy back failed");
        int launches = fakeCount("fakecudaInterpretLaunches") - before;
        int first = round == 0 ? 0 : 1; /* the stream released alone */
        __atomic_store_n(h[first].flag, round + 1, __ATOMIC_RELEASE);
        usleep(100000);
        int early = out[1][N - 1];
        __atomic_store_n(h[1 - first].flag, round + 1, __ATOMIC_RELEASE);
        if (lib->streamSynchronize(h[1].cs) || lib->streamSynchronize(h[0].cs))
            return testRankFail(rank, 14, "cuStreamSynchronize failed");
        if (launches != 1 || early != 0)
            return testRankFail(rank, 15,
                                "%d launches; with the first stream held, the second "
                                "stream's copy back read %d: it was not ordered after the launch",
                                launches, early);
        for (int k = 0; k < 2; k++)
            for (int i = 0; i < N; i++)
                if (out[k][i] != ((k + 1) * i + round) * n + n * (n - 1) / 2)
                    return testRankFail(rank, 16, "round %d, stream %d: out[%d] = %d, want %d",
                                        round, k, i, out[k][i],
                                        ((k + 1) * i + round) * n + n * (n - 1) / 2);
    }
    for (int k = 0; k < 2; k++)
        if (loomStreamSynchronize(h[k].s) != loomSuccess)
            return testRankFail(rank, 17, "stream %d reports %s", k, loomGetLastError(NULL));
    heldStreamFree(lib, &h[0]);
    heldStreamFree(lib, &h[1]);
    return 0;
}

START_TEST(test_fake_launch_group_streams)
{
    useFake("FAKECUDA_DELAY_US", "2000");
    setenv("LOOM_EXECUTOR", "kernel", 1);
    fakeDriver(0);
    runRanks(2, joinRank);
}
END_TEST

/* A symbol of the fake driver that cudaLib does not carry. */
static void *fakeSym(const char *name)
{
    void *h = dlopen(fakePath, RTLD_NOW | RTLD_NOLOAD);
    return h ? dlsym(h, name) : NULL;
}

/*
 * Loom calls on a CUDA stream being captured into a graph are refused with
 * a line, before anything is queued on the stream (the capture stays valid
 * and holds none of Loom's work); after the capture the same calls run.
 */
static int captureRank(int rank, int n, loomComm_t comm)
{
    const struct cudaLib *lib;
    struct heldStream h;
    int32_t in[N], out[N];
    size_t fatbinBytes;
    void *graph = NULL;
    cuResult_t (*begin)(cuStream_t, int) =
        (cuResult_t(*)(cuStream_t, int))fakeSym("cuStreamBeginCapture_v2");
    cuResult_t (*end)(cuStream_t, void **) =
        (cuResult_t(*)(cuStream_t, void **))fakeSym("cuStreamEndCapture");
    if (cudaLibGet(&lib) != loomSuccess || heldStreamMake(lib, sizeof(in), &h) || !begin || !end)
        return testRankFail(rank, 10, "no driver, stream or device memory: %s",
                            loomGetLastError(NULL));
    if (cudaFatbin(&fatbinBytes) == NULL)
        return 0;
    void *pi = (void *)(uintptr_t)h.in, *po = (void *)(uintptr_t)h.out;
    if (begin(h.cs, 0) != CUL_SUCCESS)
        return testRankFail(rank, 11, "cuStreamBeginCapture failed");
    loomResult_t res = loomAllReduce(pi, po, N, loomInt32, loomSum, comm, h.s);
    if (res != loomInvalidUsage || !strstr(loomGetLastError(NULL), "captured into a CUDA graph"))
        return testRankFail(rank, 12, "AllReduce under capture: %s, '%s'", loomGetErrorString(res),
                            loomGetLastError(NULL));
    loomGroupStart();
    loomAllReduce(pi, po, N, loomInt32, loomSum, comm, h.s);
    loomBroadcast(pi, po, N, loomInt32, 0, comm, h.s);
    res = loomGroupEnd();
    if (res != loomInvalidUsage || !strstr(loomGetLastError(NULL), "loomGroupEnd"))
        return testRankFail(rank, 13, "a group under capture: %s, '%s'", loomGetErrorString(res),
                            loomGetLastError(NULL));
    int (*captured)(void) = (int (*)(void))fakeSym("fakecudaLastCapture");
    if (end(h.cs, &graph) != CUL_SUCCESS || captured == NULL || captured() != 0)
        return testRankFail(rank, 14, "the capture was invalidated, or holds %d commands of Loom",
                            captured ? captured() : -1);
    for (int i = 0; i < N; i++)
        in[i] = i + rank, out[i] = 0;
    __atomic_store_n(h.flag, 1, __ATOMIC_RELEASE);
    if (lib->memcpyAsync(h.in, (cuDevPtr_t)(uintptr_t)in, sizeof(in), h.cs) ||
        loomAllReduce(pi, po, N, loomInt32, loomSum, comm, h.s) != loomSuccess ||
        lib->memcpyAsync((cuDevPtr_t)(uintptr_t)out, h.out, sizeof(out), h.cs) ||
        lib->streamSynchronize(h.cs) || loomStreamSynchronize(h.s) != loomSuccess)
        return testRankFail(rank, 15, "AllReduce after the capture: %s", loomGetLastError(comm));
    for (int i = 0; i < N; i++)
        if (out[i] != n * i + n * (n - 1) / 2)
            return testRankFail(rank, 16, "after the capture: out[%d] = %d", i, out[i]);
    heldStreamFree(lib, &h);
    return 0;
}

START_TEST(test_fake_capture_refused)
{
    useFake(NULL, NULL);
    fakeDriver(0);
    runRanks(2, captureRank);
}
END_TEST

/* The fake driver's graph functions (cudaLib carries only what Loom calls). */
struct graphFns {
    cuResult_t (*begin)(cuStream_t, int);
    cuResult_t (*end)(cuStream_t, void **);
    cuResult_t (*instantiate)(void **, void *, unsigned long long);
    cuResult_t (*launch)(void *, cuStream_t);
    cuResult_t (*execDestroy)(void *);
    cuResult_t (*destroy)(void *);
};

static int graphFnsGet(struct graphFns *g)
{
    g->begin = (cuResult_t(*)(cuStream_t, int))fakeSym("cuStreamBeginCapture_v2");
    g->end = (cuResult_t(*)(cuStream_t, void **))fakeSym("cuStreamEndCapture");
    g->instantiate =
        (cuResult_t(*)(void **, void *, unsigned long long))fakeSym("cuGraphInstantiateWithFlags");
    g->launch = (cuResult_t(*)(void *, cuStream_t))fakeSym("cuGraphLaunch");
    g->execDestroy = (cuResult_t(*)(void *))fakeSym("cuGraphExecDestroy");
    g->destroy = (cuResult_t(*)(void *))fakeSym("cuGraphDestroy");
    return g->begin && g->end && g->instantiate && g->launch && g->execDestroy && g->destroy;
}

#define CAPTURED 100 /* calls captured: 98 AllReduces and a group of two */

/*
 * Captures CAPTURED calls on device buffers into a graph (global capture
 * mode, in which the fake refuses allocations from a thread that is not
 * relaxed): 98 AllReduces into slots 0-97 of `out`, and a group of a Max
 * AllReduce and a Broadcast from rank 1 into slots 98 and 99. A group with a
 * call on `other`, a stream not captured, is refused in between, and the
 * capture goes on.
 */
static int captureCalls(int rank, loomComm_t comm, const struct graphFns *g, struct heldStream *h,
                        loomStream_t other, void **graph)
{
    void *pi = (void *)(uintptr_t)h->in;
    int32_t *po = (int32_t *)(uintptr_t)h->out;
    if (g->begin(h->cs, 0) != CUL_SUCCESS)
        return testRankFail(rank, 20, "cuStreamBeginCapture failed");
    for (int k = 0; k < CAPTURED - 2; k++)
        if (loomAllReduce(pi, po + k * N, N, loomInt32, loomSum, comm, h->s) != loomSuccess)
            return testRankFail(rank, 21, "AllReduce %d under capture: %s", k,
                                loomGetLastError(NULL));
    if (other != NULL) {
        loomGroupStart();
        loomAllReduce(pi, po, N, loomInt32, loomMax, comm, h->s);
        loomBroadcast(pi, po + N, N, loomInt32, 1, comm, other);
        if (loomGroupEnd() != loomInvalidUsage ||
            !strstr(loomGetLastError(NULL), "all its calls are on the stream being captured"))
            return testRankFail(rank, 24, "a group over two streams under capture: '%s'",
                                loomGetLastError(NULL));
    }
    loomGroupStart();
    loomAllReduce(pi, po + (CAPTURED - 2) * N, N, loomInt32, loomMax, comm, h->s);
    loomBroadcast(pi, po + (CAPTURED - 1) * N, N, loomInt32, 1, comm, h->s);
    if (loomGroupEnd() != loomSuccess)
        return testRankFail(rank, 22, "a group under capture: %s", loomGetLastError(NULL));
    if (g->end(h->cs, graph) != CUL_SUCCESS)
        return testRankFail(rank, 23, "the capture was invalidated (allocated in global mode?)");
    return 0;
}

/* Replays the graph with inputs of round r and checks every slot. */
static int replayCheck(int rank, int n, const struct cudaLib *lib, const struct graphFns *g,
                       struct heldStream *h, void *exec, int r, int32_t *out)
{
    int32_t in[N];
    for (int i = 0; i < N; i++)
        in[i] = i * (r + 2) + rank;
    memset(out, 0, CAPTURED * N * sizeof(*out));
    if (lib->memcpyAsync(h->in, (cuDevPtr_t)(uintptr_t)in, sizeof(in), h->cs) ||
        lib->memcpyAsync(h->out, (cuDevPtr_t)(uintptr_t)out, CAPTURED * N * sizeof(*out), h->cs) ||
        g->launch(exec, h->cs) != CUL_SUCCESS ||
        lib->memcpyAsync((cuDevPtr_t)(uintptr_t)out, h->out, CAPTURED * N * sizeof(*out), h->cs) ||
        lib->streamSynchronize(h->cs))
        return testRankFail(rank, 30, "round %d: queueing the replay failed", r);
    for (int k = 0; k < CAPTURED; k++) {
        for (int i = 0; i < N; i++) {
            int32_t want = k < CAPTURED - 2    ? n * i * (r + 2) + n * (n - 1) / 2
                           : k == CAPTURED - 2 ? i * (r + 2) + n - 1
                                               : i * (r + 2) + 1;
            if (out[k * N + i] != want)
                return testRankFail(rank, 31, "round %d: call %d out[%d] = %d, want %d", r, k, i,
                                    out[k * N + i], want);
        }
    }
    return 0;
}

/*
 * Captured calls replay: CAPTURED calls captured once, the graph replayed in
 * three rounds with new inputs, each checked; before round 1 a call on the
 * same device buffers outside the graph and an AllReduce of host buffers
 * (the host-driven run takes the FIFO positions back; the next replay must
 * take them in again), before round 2 nothing. Nothing runs at capture.
 */
static int captureLaunchRank(int rank, int n, loomComm_t comm)
{
    const struct cudaLib *lib;
    struct heldStream h;
    struct graphFns g;
    size_t fatbinBytes;
    void *graph = NULL, *exec = NULL;
    int32_t *out = calloc(CAPTURED * N, sizeof(*out)), host[N];
    int rc;
    if (cudaLibGet(&lib) != loomSuccess ||
        heldStreamMake(lib, CAPTURED * N * sizeof(int32_t), &h) || !graphFnsGet(&g) || out == NULL)
        return testRankFail(rank, 10, "no driver, stream, device memory or graph functions: %s",
                            loomGetLastError(NULL));
    if (cudaFatbin(&fatbinBytes) == NULL)
        return 0;
    __atomic_store_n(h.flag, 1, __ATOMIC_RELEASE);
    if (lib->memcpyAsync(h.out, (cuDevPtr_t)(uintptr_t)out, CAPTURED * N * sizeof(*out), h.cs) ||
        lib->streamSynchronize(h.cs))
        return testRankFail(rank, 11, "zeroing the output failed");
    cuStream_t ocs;
    loomStream_t other;
    if (lib->streamCreateWithPriority(&ocs, 0, 0) || loomStreamCreateCuda(&other, ocs))
        return testRankFail(rank, 11, "a second stream: %s", loomGetLastError(NULL));
    if ((rc = captureCalls(rank, comm, &g, &h, other, &graph)) != 0)
        return rc;
    loomStreamDestroy(other);
    lib->streamDestroy(ocs);
    if (lib->memcpyAsync((cuDevPtr_t)(uintptr_t)out, h.out, CAPTURED * N * sizeof(*out), h.cs) ||
        lib->streamSynchronize(h.cs) || out[0] != 0 || out[(CAPTURED - 1) * N + 1] != 0)
        return testRankFail(rank, 12, "a captured call ran at capture: out[0] = %d", out[0]);
    if (g.instantiate(&exec, graph, 0) != CUL_SUCCESS)
        return testRankFail(rank, 13, "cuGraphInstantiate failed");
    for (int r = 0; r < 3; r++) {
        if (r == 1) {
            for (int i = 0; i < N; i++)
                host[i] = i + rank;
            if (loomAllReduce((void *)(uintptr_t)h.in, (void *)(uintptr_t)h.out, N, loomInt32,
                              loomSum, comm, h.s) != loomSuccess ||
                loomStreamSynchronize(h.s) != loomSuccess ||
                loomAllReduce(host, host, N, loomInt32, loomSum, comm, NULL) != loomSuccess)
                return testRankFail(rank, 14, "calls between replays: %s", loomGetLastError(comm));
            for (int i = 0; i < N; i++)
                if (host[i] != n * i + n * (n - 1) / 2)
                    return testRankFail(rank, 15, "host AllReduce between replays: [%d] = %d", i,
                                        host[i]);
        }
        if ((rc = replayCheck(rank, n, lib, &g, &h, exec, r, out)) != 0)
            return rc;
    }
    loomResult_t async = loomSuccess;
    if (loomCommGetAsyncError(comm, &async) != loomSuccess || async != loomSuccess)
        return testRankFail(rank, 16, "the async error after the replays is %d", async);
    if (g.execDestroy(exec) != CUL_SUCCESS || g.destroy(graph) != CUL_SUCCESS)
        return testRankFail(rank, 17, "destroying the graph failed");
    /* After the graph: launches as before (a launch's record reused once the graph let it go). */
    for (int i = 0; i < N; i++)
        host[i] = 3 * i + rank;
    if (lib->memcpyAsync(h.in, (cuDevPtr_t)(uintptr_t)host, sizeof(host), h.cs) ||
        loomAllReduce((void *)(uintptr_t)h.in, (void *)(uintptr_t)h.out, N, loomInt32, loomSum,
                      comm, h.s) != loomSuccess ||
        lib->memcpyAsync((cuDevPtr_t)(uintptr_t)host, h.out, sizeof(host), h.cs) ||
        lib->streamSynchronize(h.cs) || loomStreamSynchronize(h.s) != loomSuccess)
        return testRankFail(rank, 18, "AllReduce after the graph: %s", loomGetLastError(comm));
    for (int i = 0; i < N; i++)
        if (host[i] != 3 * n * i + n * (n - 1) / 2)
            return testRankFail(rank, 19, "after the graph: out[%d] = %d", i, host[i]);
    heldStreamFree(lib, &h);
    free(out);
    return 0;
}

START_TEST(test_fake_launch_capture)
{
    useFake("FAKECUDA_DELAY_US", "5");
    setenv("LOOM_EXECUTOR", "kernel", 1);
    fakeDriver(0);
    runRanks(2, captureLaunchRank);
}
END_TEST

/* Host FIFOs (no p2p): their positions go between the replays and the host-driven run. */
START_TEST(test_fake_launch_capture_ranks_ll_host_fifos)
{
    useFake(NULL, NULL);
    setenv("LOOM_EXECUTOR", "kernel", 1);
    setenv("LOOM_P2P_DISABLE", "1", 1);
    setenv("LOOM_PROTO", "LL", 1);
    setenv("LOOM_NCHANNELS", "2", 1);
    fakeDriver(0);
    runRanks(3, captureLaunchRank);
}
END_TEST

/*
 * A replay whose peer never replays: both ranks capture, rank 1 never
 * launches its graph. Rank 0's replay is stopped by the watchdog after
 * LOOM_TIMEOUT, its stream goes on, and the communicator's async error
 * says so; the graph's other calls, on the broken communicator, do nothing
 * (else each would wait out its own timeout: the replay would last until
 * rank 1 leaves), and neither does a second replay. Then rank 0 destroys the communicator and
 * replays again: the calls do nothing (their kernels end at once) and nothing crashes.
 */
static int captureTimeoutRank(int rank, int n, loomComm_t comm)
{
    const struct cudaLib *lib;
    struct heldStream h;
    struct graphFns g;
    size_t fatbinBytes;
    void *graph = NULL, *exec = NULL;
    (void)n;
    if (cudaLibGet(&lib) != loomSuccess ||
        heldStreamMake(lib, CAPTURED * N * sizeof(int32_t), &h) || !graphFnsGet(&g))
        return testRankFail(rank, 10, "no driver, stream, device memory or graph functions: %s",
                            loomGetLastError(NULL));
    if (cudaFatbin(&fatbinBytes) == NULL)
        return 0;
    __atomic_store_n(h.flag, 1, __ATOMIC_RELEASE);
    int rc = captureCalls(rank, comm, &g, &h, NULL, &graph);
    if (rc != 0)
        return rc;
    if (rank == 1) {
        sleep(8); /* never replays; leaves well after rank 0 gave up */
        g.destroy(graph);
        return 0;
    }
    double t0 = testNowSec();
    if (g.instantiate(&exec, graph, 0) != CUL_SUCCESS || g.launch(exec, h.cs) != CUL_SUCCESS ||
        lib->streamSynchronize(h.cs) != CUL_SUCCESS)
        return testRankFail(rank, 11, "the replay did not return");
    /* Its first call timed out (1 s); had the others each waited out a timeout of their own,
     * the replay would have lasted until rank 1 left (8 s). */
    if (testNowSec() - t0 > 5)
        return testRankFail(rank, 17, "the replay took %.1f s", testNowSec() - t0);
    loomResult_t async = loomSuccess;
    if (loomCommGetAsyncError(comm, &async) != loomSuccess || async != loomTimeout)
        return testRankFail(rank, 12, "the async error is %d, not loomTimeout", async);
    if (strstr(loomGetLastError(comm), "rank 1") == NULL)
        return testRankFail(rank, 13, "the error does not name rank 1: %s", loomGetLastError(comm));
    if (fakeCount("fakecudaInterpretThreads") != 0)
        return testRankFail(rank, 14, "%d threads of the kernel still run",
                            fakeCount("fakecudaInterpretThreads"));
    if (g.launch(exec, h.cs) != CUL_SUCCESS || lib->streamSynchronize(h.cs) != CUL_SUCCESS ||
        loomCommGetAsyncError(comm, &async) != loomSuccess || async != loomTimeout ||
        strstr(loomGetLastError(comm), "rank 1") == NULL)
        return testRankFail(rank, 16, "a replay on the broken communicator: %d, '%s'", async,
                            loomGetLastError(comm));
    loomStreamDestroy(h.s);
    loomCommDestroy(comm);
    if (g.launch(exec, h.cs) != CUL_SUCCESS || lib->streamSynchronize(h.cs) != CUL_SUCCESS)
        return testRankFail(rank, 15, "a replay after the communicator went did not return");
    g.execDestroy(exec);
    g.destroy(graph);
    return 0;
}

START_TEST(test_fake_launch_capture_timeout)
{
    useFake(NULL, NULL);
    setenv("LOOM_EXECUTOR", "kernel", 1);
    setenv("LOOM_TIMEOUT", "1", 1);
    fakeDriver(0);
    runRanks(2, captureTimeoutRank);
}
END_TEST

/*
 * Ranks that disagree on the count: the kernel stops on the size word it did
 * not expect and writes its error record; the call returns the host
 * executor's line for it on the rank that received the wrong size, and an
 * error on the other.
 */
static int mismatchRank(int rank, int n, loomComm_t comm)
{
    const struct cudaLib *lib;
    cuDevPtr_t d;
    (void)n;
    int st = deviceRankStart(rank, &lib, N * sizeof(float), 1, &d);
    if (st != RANK_GO)
        return st;
    void *p = (void *)(uintptr_t)d;
    loomResult_t res = loomAllReduce(p, p, rank ? N / 2 : N, loomFloat32, loomSum, comm, NULL);
    const char *line = loomGetLastError(NULL);
    if (res == loomSuccess)
        return testRankFail(rank, 11, "mismatched counts succeeded");
    if (res == loomInvalidUsage && strstr(line, "expected") == NULL)
        return testRankFail(rank, 12, "the mismatch line does not say what was expected: %s", line);
    if (res != loomInvalidUsage && res != loomRemoteError)
        return testRankFail(rank, 13, "the call returned %d: %s", res, line);
    return 0;
}

START_TEST(test_fake_launch_mismatch)
{
    useFake(NULL, NULL);
    setenv("LOOM_EXECUTOR", "kernel", 1);
    setenv("LOOM_TIMEOUT", "20", 1);
    fakeDriver(0);
    runRanks(2, mismatchRank);
}
END_TEST

/*
 * A peer that exits without calling: the survivor's launch ends with the
 * line naming it, long before LOOM_TIMEOUT (300 s here, past the case's
 * 60 s limit, so a survivor that only timed out fails the case).
 */
static int deadPeerRank(int rank, int n, loomComm_t comm)
{
    const struct cudaLib *lib;
    cuDevPtr_t d;
    size_t fatbinBytes;
    (void)n;
    if (cudaLibGet(&lib) != loomSuccess || lib->memAlloc(&d, N * sizeof(float)))
        return testRankFail(rank, 10, "no driver, or no device memory from it");
    if (cudaFatbin(&fatbinBytes) == NULL || rank == 1)
        _exit(0); /* gone, without a word */
    void *p = (void *)(uintptr_t)d;
    double t0 = testNowSec();
    loomResult_t res = loomAllReduce(p, p, N, loomFloat32, loomSum, comm, NULL);
    const char *line = loomGetLastError(NULL);
    if (res != loomRemoteError || strstr(line, "rank 1") == NULL || strstr(line, "exited") == NULL)
        return testRankFail(rank, 11, "the call returned %d after %.1f s: %s", res,
                            testNowSec() - t0, line);
    return 0;
}

START_TEST(test_fake_launch_dead_peer)
{
    useFake(NULL, NULL);
    setenv("LOOM_EXECUTOR", "kernel", 1);
    setenv("LOOM_TIMEOUT", "300", 1);
    fakeDriver(0);
    runRanks(2, deadPeerRank);
}
END_TEST

static void *abortLater(void *comm)
{
    usleep(300 * 1000);
    loomCommAbort(comm);
    return NULL;
}

/*
 * loomCommAbort from another thread while a blocking call waits for a peer
 * that never comes: the call returns the abort's error, and the "kernel" has
 * no thread left running.
 */
static int abortRank(int rank, int n, loomComm_t comm)
{
    const struct cudaLib *lib;
    cuDevPtr_t d;
    pthread_t t;
    size_t fatbinBytes;
    (void)n;
    if (cudaLibGet(&lib) != loomSuccess || lib->memAlloc(&d, N * sizeof(float)))
        return testRankFail(rank, 10, "no driver, or no device memory from it");
    if (cudaFatbin(&fatbinBytes) == NULL || rank == 1) {
        sleep(3);
        return 0;
    }
    pthread_create(&t, NULL, abortLater, comm);
    void *p = (void *)(uintptr_t)d;
    int before = fakeCount("fakecudaInterpretLaunches");
    loomResult_t res = loomAllReduce(p, p, N, loomFloat32, loomSum, comm, NULL);
    const char *line = loomGetLastError(NULL);
    pthread_join(t, NULL);
    if (res != loomRemoteError || strstr(line, "aborted") == NULL)
        return testRankFail(rank, 13, "the call returned %d, \"%s\"", res, line);
    if (fakeCount("fakecudaInterpretLaunches") != before + 1)
        return testRankFail(rank, 15, "the call was not launched");
    if (fakeCount("fakecudaInterpretThreads") != 0)
        return testRankFail(rank, 14, "%d threads of the kernel still run",
                            fakeCount("fakecudaInterpretThreads"));
    return 0;
}

START_TEST(test_fake_launch_abort)
{
    useFake(NULL, NULL);
    setenv("LOOM_EXECUTOR", "kernel", 1);
    fakeDriver(0);
    runRanks(2, abortRank);
}
END_TEST

/* ---- the constants against the toolkit's cuda.h ---- */

#ifdef HAVE_CUDA
START_TEST(test_constants_match_cuda_h)
{
    ck_assert_int_eq(CUL_SUCCESS, CUDA_SUCCESS);
    ck_assert_int_eq(CUL_ERROR_INVALID_VALUE, CUDA_ERROR_INVALID_VALUE);
    ck_assert_int_eq(CUL_ERROR_NOT_INITIALIZED, CUDA_ERROR_NOT_INITIALIZED);
    ck_assert_int_eq(CUL_ERROR_NO_DEVICE, CUDA_ERROR_NO_DEVICE);
    ck_assert_int_eq(CUL_ERROR_NOT_READY, CUDA_ERROR_NOT_READY);
    ck_assert_int_eq(CUL_ERROR_HOST_MEMORY_ALREADY_REGISTERED,
                     CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED);
    ck_assert_int_eq(CUL_POINTER_ATTRIBUTE_CONTEXT, CU_POINTER_ATTRIBUTE_CONTEXT);
    ck_assert_int_eq(CUL_POINTER_ATTRIBUTE_MEMORY_TYPE, CU_POINTER_ATTRIBUTE_MEMORY_TYPE);
    ck_assert_int_eq(CUL_POINTER_ATTRIBUTE_DEVICE_ORDINAL, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL);
    ck_assert_int_eq(CUL_MEMORYTYPE_HOST, CU_MEMORYTYPE_HOST);
    ck_assert_int_eq(CUL_MEMORYTYPE_DEVICE, CU_MEMORYTYPE_DEVICE);
    ck_assert_int_eq(CUL_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT,
                     CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT);
    ck_assert_int_eq(CUL_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING,
                     CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING);
    ck_assert_int_eq(CUL_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR,
                     CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR);
    ck_assert_int_eq(CUL_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR,
                     CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR);
    ck_assert_int_eq(CUL_MEMHOSTREGISTER_PORTABLE, CU_MEMHOSTREGISTER_PORTABLE);
    ck_assert_int_eq(CUL_MEMHOSTREGISTER_DEVICEMAP, CU_MEMHOSTREGISTER_DEVICEMAP);
    ck_assert_int_eq(CUL_MEMHOSTALLOC_PORTABLE, CU_MEMHOSTALLOC_PORTABLE);
    ck_assert_int_eq(CUL_MEMHOSTALLOC_DEVICEMAP, CU_MEMHOSTALLOC_DEVICEMAP);
    ck_assert_int_eq(CUL_EVENT_DISABLE_TIMING, CU_EVENT_DISABLE_TIMING);
    ck_assert_int_eq(CUL_STREAM_NON_BLOCKING, CU_STREAM_NON_BLOCKING);
    ck_assert_int_eq(CUL_STREAM_WAIT_VALUE_GEQ, CU_STREAM_WAIT_VALUE_GEQ);
    ck_assert_int_eq(CUL_IPC_MEM_LAZY_ENABLE_PEER_ACCESS, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS);
    ck_assert_int_eq(CUL_STREAM_CAPTURE_STATUS_NONE, CU_STREAM_CAPTURE_STATUS_NONE);
    ck_assert_int_eq(CUL_STREAM_CAPTURE_STATUS_ACTIVE, CU_STREAM_CAPTURE_STATUS_ACTIVE);
    ck_assert_int_eq(CUL_STREAM_CAPTURE_MODE_RELAXED, CU_STREAM_CAPTURE_MODE_RELAXED);
    ck_assert_int_eq(CUL_USER_OBJECT_NO_DESTRUCTOR_SYNC, CU_USER_OBJECT_NO_DESTRUCTOR_SYNC);
    ck_assert_int_eq(CUL_GRAPH_USER_OBJECT_MOVE, CU_GRAPH_USER_OBJECT_MOVE);
    ck_assert_uint_eq(sizeof(cuIpcHandle_t), sizeof(CUipcMemHandle));
    ck_assert_uint_eq(sizeof(cuUuid_t), sizeof(CUuuid));
    ck_assert_uint_eq(sizeof(cuDevPtr_t), sizeof(CUdeviceptr));
    ck_assert_uint_eq(sizeof(cuDevice_t), sizeof(CUdevice));
    ck_assert_uint_eq(sizeof(cuResult_t), sizeof(CUresult));
}
END_TEST

START_TEST(test_fatbin_embedded)
{
    size_t bytes = 0;
    const unsigned char *image = cudaFatbin(&bytes);
    ck_assert_ptr_nonnull(image);
    ck_assert_uint_gt(bytes, 1024);
    ck_assert_uint_eq(image[0] | image[1] << 8 | image[2] << 16 | (uint32_t)image[3] << 24,
                      0xba55ed50u);
}
END_TEST
#endif

static Suite *cudaSuite(void)
{
    Suite *s = suite_create("cuda");
    TCase *none = tcase_create("no driver");
    tcase_add_test(none, test_no_driver_host_buffers);
    tcase_add_test(none, test_no_driver_cuda_stream);
    tcase_add_test(none, test_no_device);
    suite_add_tcase(s, none);
    TCase *fake = tcase_create("fake driver");
    tcase_set_timeout(fake, 60);
    tcase_add_test(fake, test_fake_pointer_kinds);
    tcase_add_test(fake, test_fake_wrong_buffers);
    tcase_add_test(fake, test_fake_solo_device);
    tcase_add_test(fake, test_fake_stream_order);
    tcase_add_test(fake, test_fake_stream_order_kernel_wait);
    tcase_add_test(fake, test_fake_stream_not_a_stream);
    tcase_add_test(fake, test_fake_preload_fails_once);
    tcase_add_test(fake, test_fake_ranks_p2p);
    tcase_add_test(fake, test_fake_ranks_ipc_refused);
    tcase_add_test(fake, test_fake_ranks_host_staged);
    tcase_add_test(fake, test_fake_ranks_tree);
    tcase_add_test(fake, test_fake_launch_ranks);
    tcase_add_test(fake, test_fake_launch_ranks_host_staged);
    tcase_add_test(fake, test_fake_launch_ranks_ipc_refused);
    tcase_add_test(fake, test_fake_launch_initall);
    tcase_add_test(fake, test_fake_launch_ranks_ll);
    tcase_add_test(fake, test_fake_launch_stream_order);
    tcase_add_test(fake, test_fake_launch_timeout);
    tcase_add_test(fake, test_fake_launch_abort);
    tcase_add_test(fake, test_fake_launch_group);
    tcase_add_test(fake, test_fake_launch_group_streams);
    tcase_add_test(fake, test_fake_capture_refused);
    tcase_add_test(fake, test_fake_launch_capture);
    tcase_add_test(fake, test_fake_launch_capture_ranks_ll_host_fifos);
    tcase_add_test(fake, test_fake_launch_capture_timeout);
    tcase_add_test(fake, test_fake_launch_mismatch);
    tcase_add_test(fake, test_fake_launch_dead_peer);
    suite_add_tcase(s, fake);
#ifdef HAVE_CUDA
    TCase *toolkit = tcase_create("toolkit");
    tcase_add_test(toolkit, test_constants_match_cuda_h);
    tcase_add_test(toolkit, test_fatbin_embedded);
    suite_add_tcase(s, toolkit);
#endif
    return s;
}

int main(void)
{
    const char *top = getenv("top_builddir");
    snprintf(fakePath, sizeof(fakePath), "%s/tests/unit/.libs/libfakecuda.so", top ? top : ".");
    setenv("LOOM_SOCKET_IFNAME", "lo", 0);
    SRunner *sr = srunner_create(cudaSuite());
    srunner_set_fork_status(sr, CK_FORK);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
