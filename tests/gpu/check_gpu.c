/*
 * check_gpu.c — Loom's GPU unit tests: what only a GPU can tell.
 *
 * Run by tests/gpu/run (not by make check: it needs a GPU and exits 77
 * without one). Each case runs in its own process, since a CUDA context does
 * not survive fork; the parent never touches CUDA.
 *   - every reduction kernel of the embedded fatbin, every datatype x
 *     operation, one and two outputs, with and without the local input and
 *     the post-processing, aligned and not, against reduce.c bit for bit;
 *   - every collective on one rank with device buffers, blocking;
 *   - a call on a CUDA stream runs after the copy queued before it and
 *     before the copy queued after it, and returns before it is done;
 *   - host and device buffers mixed in one call are refused;
 *   - launched calls captured into a CUDA graph replay with new inputs.
 * Several ranks on one GPU are exercised by loom-perf in tests/gpu/run.
 */
#include <check.h>
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comms.h"
#include "cudalib.h"
#include "kernels.h"
#include "loom.h"
#include "reduce.h"

#define COUNT 100003 /* a prime: tails in every pack size */

static const struct cudaLib *lib;

/* The driver with device 0's primary context current (as cudaSetDevice(0) leaves it). */
static void gpuUp(void)
{
    cuContext_t ctx;
    cuDevice_t dev;
    ck_assert_msg(cudaLibGet(&lib) == loomSuccess, "%s", loomGetLastError(NULL));
    ck_assert_int_eq(lib->deviceGet(&dev, 0), CUL_SUCCESS);
    ck_assert_int_eq(lib->devicePrimaryCtxRetain(&ctx, dev), CUL_SUCCESS);
    ck_assert_int_eq(lib->ctxSetCurrent(ctx), CUL_SUCCESS);
}

static char *devAlloc(size_t bytes)
{
    cuDevPtr_t p = 0;
    ck_assert_int_eq(lib->memAlloc(&p, bytes), CUL_SUCCESS);
    return (char *)(uintptr_t)p;
}

static void toDevice(void *dst, const void *src, size_t bytes)
{
    ck_assert_int_eq(
        lib->memcpyAsync((cuDevPtr_t)(uintptr_t)dst, (cuDevPtr_t)(uintptr_t)src, bytes, NULL),
        CUL_SUCCESS);
    ck_assert_int_eq(lib->streamSynchronize(NULL), CUL_SUCCESS);
}

#define toHost toDevice /* cuMemcpyAsync is unified: the same call both ways */

/* Random finite values (no NaN or infinity, whose encodings the GPU may choose). */
static void fill(unsigned char *p, size_t count, loomDataType_t dt, unsigned int seed)
{
    size_t es = reduceTypeSize(dt);
    srand(seed);
    for (size_t i = 0; i < count; i++) {
        unsigned char *e = p + i * es;
        for (size_t k = 0; k < es; k++)
            e[k] = (unsigned char)rand();
        if (dt == loomFloat16)
            e[1] = (unsigned char)((e[1] & 0x83) | ((rand() % 29) << 2));
        if (dt == loomBfloat16)
            e[1] = (unsigned char)((e[1] & 0x80) | (0x30 + rand() % 30));
        if (dt == loomFloat32) {
            float f = (float)(rand() % 20001 - 10000) / 7.0f;
            memcpy(e, &f, sizeof(f));
        }
        if (dt == loomFloat64) {
            double d = (double)(rand() % 200001 - 100000) / 3.0;
            memcpy(e, &d, sizeof(d));
        }
    }
}

/* ---- the kernels of the fatbin ---- */

#define TYPE_NAME(E, t, T) #t,
#define OP_NAME(unused, E, o) #o,
static const char *const typeNames[loomNumTypes] = {LOOM_KERNEL_TYPES(TYPE_NAME)};
static const char *const opNames[loomNumOps] = {LOOM_KERNEL_OPS(OP_NAME, 0)};

START_TEST(test_kernels)
{
    loomDataType_t dt = (loomDataType_t)_i;
    size_t es = reduceTypeSize(dt), bytes = COUNT * es, fatbinBytes;
    cuModule_t mod;
    gpuUp();
    ck_assert_int_eq(lib->moduleLoadData(&mod, cudaFatbin(&fatbinBytes)), CUL_SUCCESS);
    unsigned char *a = malloc(bytes + 16), *b = malloc(bytes + 16), *want = malloc(bytes);
    unsigned char *got0 = malloc(bytes), *got1 = malloc(bytes);
    char *da = devAlloc(bytes + 16), *db = devAlloc(bytes + 16);
    char *d0 = devAlloc(bytes + 16), *d1 = devAlloc(bytes + 16);
    for (int op = 0; op < loomNumOps; op++) {
        char name[64];
        cuFunction_t f;
        snprintf(name, sizeof(name), LOOM_KERNEL_PREFIX "%s_%s", typeNames[dt], opNames[op]);
        ck_assert_msg(lib->moduleGetFunction(&f, mod, name) == CUL_SUCCESS, "no kernel %s", name);
        for (int bits = 0; bits < 16; bits++) {
            int withB = bits & 1, final = bits >> 1 & 1, two = bits >> 2 & 1, skew = bits >> 3 & 1;
            size_t off = skew ? es : 0; /* misaligned: the element-wise path */
            fill(a, COUNT, dt, 17 * bits + op);
            fill(b, COUNT, dt, 31 * bits + op + 1);
            toDevice(da + off, a, bytes);
            toDevice(db + off, b, bytes);
            struct loomReduceArgs args = {
                d0 + off, two ? d1 + off : NULL, da + off, withB ? db + off : NULL, COUNT, 3,
                final};
            void *params[] = {&args};
            ck_assert_int_eq(
                lib->launchKernel(f, 64, 1, 1, LOOM_KERNEL_THREADS, 1, 1, 0, NULL, params, NULL),
                CUL_SUCCESS);
            ck_assert_int_eq(lib->ctxSynchronize(), CUL_SUCCESS);
            toHost(got0, d0 + off, bytes);
            if (!withB) {
                memcpy(want, a, bytes);
                if (final)
                    reducePostOp(want, COUNT, dt, (loomRedOp_t)op, 3);
            } else if (final) {
                reduceApplyFinal(want, a, b, COUNT, dt, (loomRedOp_t)op, 3);
            } else {
                reduceApply(want, a, b, COUNT, dt, (loomRedOp_t)op);
            }
            ck_assert_msg(memcmp(got0, want, bytes) == 0, "%s: b %d final %d skew %d: wrong", name,
                          withB, final, skew);
            if (two) {
                toHost(got1, d1 + off, bytes);
                ck_assert_msg(memcmp(got1, want, bytes) == 0, "%s: second output wrong", name);
            }
        }
    }
}
END_TEST

/* ---- collectives on one rank ---- */

START_TEST(test_solo_collectives)
{
    gpuUp();
    loomComm_t comm = soloComm();
    static int32_t in[COUNT];
    int32_t *out = malloc(sizeof(in));
    char *d = devAlloc(sizeof(in)), *e = devAlloc(sizeof(in));
    for (int i = 0; i < COUNT; i++)
        in[i] = i * 7 - 3;
    toDevice(d, in, sizeof(in));
    ck_assert_int_eq(loomAllReduce(d, e, COUNT, loomInt32, loomAvg, comm, NULL), loomSuccess);
    toHost(out, e, sizeof(in));
    ck_assert(memcmp(in, out, sizeof(in)) == 0);
    ck_assert_int_eq(loomBroadcast(d, e, COUNT, loomInt32, 0, comm, NULL), loomSuccess);
    ck_assert_int_eq(loomReduce(d, e, COUNT, loomInt32, loomMax, 0, comm, NULL), loomSuccess);
    ck_assert_int_eq(loomAllGather(d, e, COUNT, loomInt32, comm, NULL), loomSuccess);
    ck_assert_int_eq(loomReduceScatter(d, e, COUNT, loomInt32, loomSum, comm, NULL), loomSuccess);
    ck_assert_int_eq(loomAlltoAll(e, e, COUNT, loomInt32, comm, NULL), loomSuccess);
    toHost(out, e, sizeof(in));
    ck_assert(memcmp(in, out, sizeof(in)) == 0);
    loomGroupStart();
    loomSend(d, COUNT, loomInt32, 0, comm, NULL);
    loomRecv(e, COUNT, loomInt32, 0, comm, NULL);
    ck_assert_int_eq(loomGroupEnd(), loomSuccess);
    toHost(out, e, sizeof(in));
    ck_assert(memcmp(in, out, sizeof(in)) == 0);
    free(out);
    loomCommDestroy(comm);
}
END_TEST

START_TEST(test_mixed_buffers)
{
    gpuUp();
    loomComm_t comm = soloComm();
    float host[16];
    char *d = devAlloc(sizeof(host));
    ck_error(loomAllReduce(d, host, 16, loomFloat32, loomSum, comm, NULL), loomInvalidArgument,
             "host memory");
    ck_assert_int_eq(loomAllReduce(d, d, 16, loomFloat32, loomSum, comm, NULL), loomSuccess);
    loomCommDestroy(comm);
}
END_TEST

/* ---- CUDA streams ---- */

START_TEST(test_stream_order)
{
    size_t n = 16 << 20; /* 64 MiB of int32: the copy before the call takes a while */
    cuStream_t cs;
    loomStream_t s;
    void *pinned;
    gpuUp();
    loomComm_t comm = soloComm();
    ck_assert_int_eq(lib->memHostAlloc(&pinned, n * 4, 0), CUL_SUCCESS);
    int32_t *h = pinned, *back = malloc(n * 4);
    char *d = devAlloc(n * 4), *e = devAlloc(n * 4);
    ck_assert_int_eq(lib->streamCreateWithPriority(&cs, CUL_STREAM_NON_BLOCKING, 0), CUL_SUCCESS);
    ck_assert_int_eq(loomStreamCreateCuda(&s, cs), loomSuccess);
    for (int round = 1; round <= 3; round++) {
        for (size_t i = 0; i < n; i++)
            h[i] = (int32_t)(i * round);
        ck_assert_int_eq(
            lib->memcpyAsync((cuDevPtr_t)(uintptr_t)d, (cuDevPtr_t)(uintptr_t)h, n * 4, cs),
            CUL_SUCCESS);
        ck_assert_int_eq(loomAllReduce(d, e, n, loomInt32, loomSum, comm, s), loomSuccess);
        ck_assert_int_eq(
            lib->memcpyAsync((cuDevPtr_t)(uintptr_t)h, (cuDevPtr_t)(uintptr_t)e, n * 4, cs),
            CUL_SUCCESS);
        ck_assert_int_eq(lib->streamSynchronize(cs), CUL_SUCCESS);
        for (size_t i = 0; i < n; i += 4099)
            ck_assert_msg(h[i] == (int32_t)(i * round), "round %d: element %zu is %d", round, i,
                          h[i]);
    }
    ck_assert_int_eq(loomStreamSynchronize(s), loomSuccess);
    ck_assert_int_eq(loomStreamQuery(s), loomSuccess);
    ck_assert_int_eq(loomStreamDestroy(s), loomSuccess);
    ck_assert_int_eq(lib->streamDestroy(cs), CUL_SUCCESS);
    free(back);
    loomCommDestroy(comm);
}
END_TEST

/* Launches the fatbin's Int32 Sum kernel on stream cs: out = a + b (the application's kernel). */
static void appKernel(cuModule_t mod, cuStream_t cs, void *out, const void *a, const void *b,
                      size_t count)
{
    cuFunction_t f;
    ck_assert_int_eq(lib->moduleGetFunction(&f, mod, LOOM_KERNEL_PREFIX "i32_sum"), CUL_SUCCESS);
    struct loomReduceArgs args = {out, NULL, a, b, count, 1, 0};
    void *params[] = {&args};
    ck_assert_int_eq(
        lib->launchKernel(f, 256, 1, 1, LOOM_KERNEL_THREADS, 1, 1, 0, cs, params, NULL),
        CUL_SUCCESS);
}

/*
 * kernel -> AllReduce -> kernel on each rank's CUDA stream, with no host
 * synchronisation in between: two ranks of this process on the one GPU
 * (loomCommInitAll), each with a stream of its own. The first kernel
 * doubles the input into the send buffer, the second doubles the result;
 * only the final copy back is waited for. Run by tests/gpu/run with and
 * without LOOM_EXECUTOR=kernel (the launched interpreter, or the host-driven
 * executor).
 */
START_TEST(test_kernel_allreduce_kernel)
{
    enum { RANKS = 2 };
    size_t n = 4 << 20, fatbinBytes;
    int devs[RANKS] = {0, 0};
    loomComm_t comms[RANKS];
    cuStream_t cs[RANKS];
    loomStream_t s[RANKS];
    char *x[RANKS], *d[RANKS], *e[RANKS], *f[RANKS];
    cuModule_t mod;
    gpuUp();
    ck_assert_msg(loomCommInitAll(comms, RANKS, devs) == loomSuccess, "%s", loomGetLastError(NULL));
    gpuUp();
    ck_assert_int_eq(lib->moduleLoadData(&mod, cudaFatbin(&fatbinBytes)), CUL_SUCCESS);
    int32_t *h = malloc(n * 4);
    for (int r = 0; r < RANKS; r++) {
        ck_assert_int_eq(lib->streamCreateWithPriority(&cs[r], CUL_STREAM_NON_BLOCKING, 0),
                         CUL_SUCCESS);
        ck_assert_int_eq(loomStreamCreateCuda(&s[r], cs[r]), loomSuccess);
        x[r] = devAlloc(n * 4), d[r] = devAlloc(n * 4), e[r] = devAlloc(n * 4);
        f[r] = devAlloc(n * 4);
        for (size_t i = 0; i < n; i++)
            h[i] = (int32_t)(i % 1000 + r);
        toDevice(x[r], h, n * 4);
    }
    for (int round = 0; round < 3; round++) {
        for (int r = 0; r < RANKS; r++) {
            appKernel(mod, cs[r], d[r], x[r], x[r], n);
            ck_assert_msg(loomAllReduce(d[r], e[r], n, loomInt32, loomSum, comms[r], s[r]) ==
                              loomSuccess,
                          "%s", loomGetLastError(comms[r]));
            appKernel(mod, cs[r], f[r], e[r], e[r], n);
        }
        for (int r = 0; r < RANKS; r++) {
            ck_assert_int_eq(lib->memcpyAsync((cuDevPtr_t)(uintptr_t)h, (cuDevPtr_t)(uintptr_t)f[r],
                                              n * 4, cs[r]),
                             CUL_SUCCESS);
            ck_assert_int_eq(lib->streamSynchronize(cs[r]), CUL_SUCCESS);
            for (size_t i = 0; i < n; i += 997)
                ck_assert_msg(h[i] == (int32_t)(4 * (RANKS * (i % 1000)) + 4 * (RANKS - 1)),
                              "round %d, rank %d: element %zu is %d", round, r, i, h[i]);
        }
    }
    for (int r = 0; r < RANKS; r++) {
        ck_assert_int_eq(loomStreamSynchronize(s[r]), loomSuccess);
        ck_assert_int_eq(loomStreamDestroy(s[r]), loomSuccess);
        ck_assert_int_eq(loomCommDestroy(comms[r]), loomSuccess);
    }
    free(h);
}
END_TEST

/*
 * A forced timeout on the launched path: rank 1 of two (this process, one
 * GPU) never calls; rank 0's AllReduce is launched on its CUDA stream and
 * spins in the kernel until the watchdog raises its abort flag after
 * LOOM_TIMEOUT (2 s): loomStreamSynchronize returns loomTimeout naming
 * rank 1, and the CUDA stream is idle (no kernel left spinning).
 */
START_TEST(test_launch_timeout)
{
    int devs[2] = {0, 0};
    loomComm_t comms[2];
    cuStream_t cs;
    loomStream_t s;
    setenv("LOOM_EXECUTOR", "kernel", 1);
    setenv("LOOM_TIMEOUT", "2", 1);
    gpuUp();
    ck_assert_msg(loomCommInitAll(comms, 2, devs) == loomSuccess, "%s", loomGetLastError(NULL));
    gpuUp();
    char *d = devAlloc(COUNT * 4);
    ck_assert_int_eq(lib->streamCreateWithPriority(&cs, CUL_STREAM_NON_BLOCKING, 0), CUL_SUCCESS);
    ck_assert_int_eq(loomStreamCreateCuda(&s, cs), loomSuccess);
    ck_assert_int_eq(loomAllReduce(d, d, COUNT, loomInt32, loomSum, comms[0], s), loomSuccess);
    loomResult_t res = loomStreamSynchronize(s);
    const char *line = loomGetLastError(NULL);
    ck_assert_msg(res == loomTimeout && strstr(line, "rank 1") != NULL,
                  "loomStreamSynchronize: %d, \"%s\"", res, line);
    ck_assert_int_eq(lib->streamQuery(cs), CUL_SUCCESS);
    loomStreamDestroy(s);
    loomCommAbort(comms[0]);
    loomCommAbort(comms[1]);
}
END_TEST

/* A function of the driver that cudaLib does not carry (the application's graph calls). */
static void *driverSym(const char *name)
{
    const char *driver = getenv("LOOM_CUDA_LIB"); /* as cudalib.c loads it */
    void *h = dlopen(driver && *driver ? driver : "libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
    void *fn = h ? dlsym(h, name) : NULL;
    ck_assert_msg(fn != NULL, "the driver has no %s", name);
    return fn;
}

/*
 * CUDA graph capture of launched calls: two ranks of this process on the one
 * GPU, each capturing 100 AllReduces (into 100 slots) on its own stream in
 * the default global mode; both graphs replayed three times with new inputs,
 * every slot checked; an AllReduce outside the graph between the replays.
 */
START_TEST(test_graph_capture)
{
    enum { RANKS = 2, CALLS = 100, CNT = 1 << 14 };
    int devs[RANKS] = {0, 0};
    loomComm_t comms[RANKS];
    cuStream_t cs[RANKS];
    loomStream_t s[RANKS];
    int32_t *in[RANKS], *out[RANKS];
    void *graph[RANKS], *exec[RANKS];
    setenv("LOOM_EXECUTOR", "kernel", 1);
    gpuUp();
    ck_assert_msg(loomCommInitAll(comms, RANKS, devs) == loomSuccess, "%s", loomGetLastError(NULL));
    gpuUp();
    cuResult_t (*begin)(cuStream_t, int) =
        (cuResult_t(*)(cuStream_t, int))driverSym("cuStreamBeginCapture_v2");
    cuResult_t (*end)(cuStream_t, void **) =
        (cuResult_t(*)(cuStream_t, void **))driverSym("cuStreamEndCapture");
    cuResult_t (*instantiate)(void **, void *, unsigned long long) = (cuResult_t(*)(
        void **, void *, unsigned long long))driverSym("cuGraphInstantiateWithFlags");
    cuResult_t (*launch)(void *, cuStream_t) =
        (cuResult_t(*)(void *, cuStream_t))driverSym("cuGraphLaunch");
    cuResult_t (*execDestroy)(void *) = (cuResult_t(*)(void *))driverSym("cuGraphExecDestroy");
    cuResult_t (*destroy)(void *) = (cuResult_t(*)(void *))driverSym("cuGraphDestroy");
    int32_t *h = malloc((size_t)CALLS * CNT * 4);
    for (int r = 0; r < RANKS; r++) {
        ck_assert_int_eq(lib->streamCreateWithPriority(&cs[r], CUL_STREAM_NON_BLOCKING, 0),
                         CUL_SUCCESS);
        ck_assert_int_eq(loomStreamCreateCuda(&s[r], cs[r]), loomSuccess);
        in[r] = (int32_t *)devAlloc(CNT * 4);
        out[r] = (int32_t *)devAlloc((size_t)CALLS * CNT * 4);
        /* connects the pair before the capture (a call outside it) */
        ck_assert_msg(loomAllReduce(in[r], out[r], CNT, loomInt32, loomSum, comms[r], s[r]) ==
                          loomSuccess,
                      "%s", loomGetLastError(comms[r]));
    }
    for (int r = 0; r < RANKS; r++)
        ck_assert_int_eq(lib->streamSynchronize(cs[r]), CUL_SUCCESS);
    for (int r = 0; r < RANKS; r++) {
        ck_assert_int_eq(begin(cs[r], 0), CUL_SUCCESS);
        for (int k = 0; k < CALLS; k++)
            ck_assert_msg(loomAllReduce(in[r], out[r] + (size_t)k * CNT, CNT, loomInt32, loomSum,
                                        comms[r], s[r]) == loomSuccess,
                          "call %d under capture: %s", k, loomGetLastError(comms[r]));
        ck_assert_int_eq(end(cs[r], &graph[r]), CUL_SUCCESS);
        ck_assert_int_eq(instantiate(&exec[r], graph[r], 0), CUL_SUCCESS);
    }
    for (int round = 0; round < 3; round++) {
        for (int r = 0; r < RANKS; r++) {
            for (size_t i = 0; i < CNT; i++)
                h[i] = (int32_t)(i * (size_t)(round + 2) + (size_t)r);
            toDevice(in[r], h, CNT * 4);
        }
        if (round == 1) /* a call outside the graph between replays */
            for (int r = 0; r < RANKS; r++)
                ck_assert_int_eq(
                    loomAllReduce(in[r], out[r], CNT, loomInt32, loomMax, comms[r], s[r]),
                    loomSuccess);
        for (int r = 0; r < RANKS; r++)
            ck_assert_int_eq(launch(exec[r], cs[r]), CUL_SUCCESS);
        for (int r = 0; r < RANKS; r++) {
            ck_assert_int_eq(lib->streamSynchronize(cs[r]), CUL_SUCCESS);
            toHost(h, out[r], (size_t)CALLS * CNT * 4);
            for (size_t k = 0; k < CALLS; k++)
                for (size_t i = 0; i < CNT; i += 97)
                    ck_assert_msg(h[k * CNT + i] ==
                                      (int32_t)(RANKS * i * (size_t)(round + 2) + RANKS - 1),
                                  "round %d, rank %d, call %zu: element %zu is %d", round, r, k, i,
                                  h[k * CNT + i]);
        }
    }
    for (int r = 0; r < RANKS; r++) {
        loomResult_t async = loomSuccess;
        ck_assert_int_eq(loomCommGetAsyncError(comms[r], &async), loomSuccess);
        ck_assert_msg(async == loomSuccess, "rank %d: %s", r, loomGetLastError(comms[r]));
        ck_assert_int_eq(execDestroy(exec[r]), CUL_SUCCESS);
        ck_assert_int_eq(destroy(graph[r]), CUL_SUCCESS);
        ck_assert_int_eq(loomStreamDestroy(s[r]), loomSuccess);
        ck_assert_int_eq(loomCommDestroy(comms[r]), loomSuccess);
    }
    free(h);
}
END_TEST

int main(void)
{
    const struct cudaLib *probe;
    int n = 0;
    setenv("LOOM_SOCKET_IFNAME", "lo", 0);
    /* Probe in a child: a CUDA context must not exist in the parent of the forked cases. */
    pid_t pid = fork();
    if (pid == 0)
        _exit(cudaLibGet(&probe) == loomSuccess && probe->deviceGetCount(&n) == CUL_SUCCESS && n > 0
                  ? 0
                  : 77);
    int st = 0;
    waitpid(pid, &st, 0);
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
        printf("SKIP: check_gpu: no usable GPU (the CUDA driver is missing or finds no device)\n");
        return 77;
    }
    Suite *s = suite_create("gpu");
    TCase *tc = tcase_create("gpu");
    tcase_set_timeout(tc, 120);
    tcase_add_loop_test(tc, test_kernels, 0, loomNumTypes);
    tcase_add_test(tc, test_solo_collectives);
    tcase_add_test(tc, test_mixed_buffers);
    tcase_add_test(tc, test_stream_order);
    tcase_add_test(tc, test_kernel_allreduce_kernel);
    tcase_add_test(tc, test_launch_timeout);
    tcase_add_test(tc, test_graph_capture);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_set_fork_status(sr, CK_FORK);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
