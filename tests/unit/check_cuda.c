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

/*
 * A rank on device buffers: AllReduce of N floats; exits 0 if right and if
 * the send connector to the next rank has device slots exactly when p2p is
 * expected. The fake's streams are made after the fork, in each rank.
 */
static int deviceRank(int rank, int n, loomComm_t comm)
{
    const struct cudaLib *lib;
    cuDevPtr_t d;
    float in[N], out[N];
    int wantP2p = getenv("LOOM_P2P_DISABLE") == NULL;
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
    cuDevPtr_t d, e;
    float in[N], out[N];
    size_t fatbinBytes;
    if (cudaLibGet(&lib) != loomSuccess || lib->memAlloc(&d, sizeof(in)) ||
        lib->memAlloc(&e, sizeof(out)))
        return testRankFail(rank, 10, "no driver, or no device memory from it");
    if (cudaFatbin(&fatbinBytes) == NULL)
        return 0; /* built without CUDA: deviceRank checks the refusal */
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
    tcase_add_test(fake, test_fake_ranks_host_staged);
    tcase_add_test(fake, test_fake_ranks_tree);
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
