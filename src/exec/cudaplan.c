/*
 * cudaplan.c — the CUDA side of a device plan, shared by both executors of
 * device buffers (cudaplan.h): the host-driven one (exec.c's loop with
 * cudaexec.c's device steps) and the launched interpreter (devexec.c).
 *
 *   opcheck.c, plan.c  cudaOpCheck, cudaPlanIsDevice: host or device buffers
 *   plan.c             cudaPlanBegin / cudaPlanEnd around the executor's run:
 *                      the buffers' context current, this thread's stream,
 *                      events and kernels, the work queued before it waited for
 *   devexec.c          cudaPlanContext, cudaPlanStream, cudaPlanOwnStream,
 *                      cudaKernelInterpret (the launch)
 *   stream.c           cudaKernelsPreload, cudaKernelWait
 *
 * Kernels are loaded once per CUDA context from the embedded fatbin. Each
 * thread that runs device plans keeps a struct cudaExec (stream, events,
 * scratch) for the context it last used. Calls no executor.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cudacore.h"
#include "cudalib.h"
#include "cudaplan.h"
#include "debug.h"
#include "kernels.h"

#define CUDA_MAX_CONTEXTS 32

/* ---- kernels, once per context ---- */

static pthread_mutex_t kernelsLock = PTHREAD_MUTEX_INITIALIZER;
static struct cudaKernels kernelsTable[CUDA_MAX_CONTEXTS];
static int kernelsCount;

#define KERNEL_TYPE_NAME(E, t, T) #t,
#define KERNEL_OP_NAME(unused, E, o) #o,
static const char *const kernelTypeNames[loomNumTypes] = {LOOM_KERNEL_TYPES(KERNEL_TYPE_NAME)};
static const char *const kernelOpNames[loomNumOps] = {LOOM_KERNEL_OPS(KERNEL_OP_NAME, 0)};

static double cudaNowSec(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static loomResult_t kernelsLoad(const struct cudaLib *lib, cuContext_t ctx, struct cudaKernels *k)
{
    size_t bytes;
    const void *image = cudaFatbin(&bytes);
    cuModule_t mod;
    cuDevice_t dev;
    int sms = 0;
    if (image == NULL)
        return loomSetError(loomInvalidUsage, "this Loom was built without CUDA kernels "
                                              "(configure --with-cuda)");
    /* Timed and logged: it may wait for the context's streams (see cudaKernelsPreload),
     * and a load that does not return is the first thing to look for in a hang. */
    INFO(LOOM_INIT, "cuda: loading Loom's kernels (%zu-byte fatbin) into context %p", bytes,
         (void *)ctx);
    double t0 = cudaNowSec();
    cuResult_t r = lib->moduleLoadData(&mod, image);
    INFO(LOOM_INIT, "cuda: cuModuleLoadData returned %d after %.3f s", (int)r, cudaNowSec() - t0);
    if (r != CUL_SUCCESS)
        return cudaLibError(lib, r,
                            "loading Loom's kernels (built for sm_80, sm_90 and PTX) on this GPU");
    for (int t = 0; t < loomNumTypes; t++) {
        for (int o = 0; o < loomNumOps; o++) {
            char name[64];
            snprintf(name, sizeof(name), LOOM_KERNEL_PREFIX "%s_%s", kernelTypeNames[t],
                     kernelOpNames[o]);
            r = lib->moduleGetFunction(&k->reduce[t][o], mod, name);
            if (r != CUL_SUCCESS)
                return cudaLibError(lib, r, "finding a kernel of Loom's fatbin");
        }
    }
    r = lib->moduleGetFunction(&k->wait, mod, LOOM_KERNEL_WAIT);
    if (r != CUL_SUCCESS)
        return cudaLibError(lib, r, "finding the kernel " LOOM_KERNEL_WAIT);
    r = lib->moduleGetFunction(&k->interpret, mod, LOOM_KERNEL_INTERPRET);
    if (r != CUL_SUCCESS)
        return cudaLibError(lib, r, "finding the kernel " LOOM_KERNEL_INTERPRET);
    if (lib->ctxGetDevice(&dev) != CUL_SUCCESS ||
        lib->deviceGetAttribute(&sms, CUL_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, dev) !=
            CUL_SUCCESS ||
        sms < 1)
        sms = 32;
    k->maxBlocks = 4 * (unsigned int)sms;
    k->ctx = ctx;
    return loomSuccess;
}

/* The kernels of ctx, which must be current on this thread. */
static loomResult_t kernelsGet(const struct cudaLib *lib, cuContext_t ctx,
                               const struct cudaKernels **out)
{
    loomResult_t res = loomSuccess;
    pthread_mutex_lock(&kernelsLock);
    int i = 0;
    while (i < kernelsCount && kernelsTable[i].ctx != ctx)
        i++;
    if (i == kernelsCount) {
        if (i == CUDA_MAX_CONTEXTS) {
            res = loomSetError(loomInvalidUsage, "device buffers from more than %d CUDA contexts",
                               CUDA_MAX_CONTEXTS);
        } else {
            /* A failed load is kept and not tried again: a retry could come inside a unit
             * whose application stream is held (see cudaKernelsPreload), and hang. */
            struct cudaKernels *k = &kernelsTable[i];
            if ((res = kernelsLoad(lib, ctx, k)) != loomSuccess) {
                k->failed = res;
                snprintf(k->why, sizeof(k->why), "%s", debugLastError(NULL));
            }
            k->ctx = ctx;
            kernelsCount++;
        }
    } else if (kernelsTable[i].failed != loomSuccess) {
        res = loomSetError(kernelsTable[i].failed, "%s", kernelsTable[i].why);
    }
    pthread_mutex_unlock(&kernelsLock);
    if (res == loomSuccess)
        *out = &kernelsTable[i];
    return res;
}

/* Loads the kernels of ctx (current on this thread) now, if this Loom carries any.
 * Called when a CUDA stream is attached, before any wait is queued on it: the driver's
 * cuModuleLoadData waits for the stream (or more), and one held by a wait that only the
 * unit doing the load can release never drains. On an H200 (driver 580) a first load
 * inside such a unit spun in the driver for good (check_gpu's stream test, loom-perf -G 1
 * -z 0); loaded here, both ran. A failure is kept (kernelsGet) and reported by the first
 * device-buffer call, so that host buffers on the stream still work. */
void cudaKernelsPreload(void *ctx)
{
    const struct cudaLib *lib;
    const struct cudaKernels *k;
    size_t bytes;
    uint64_t seq;
    char line[512]; /* as long as debug.c's error line */
    if (cudaFatbin(&bytes) == NULL || cudaLibGet(&lib) != loomSuccess)
        return;
    /* loomStreamCreateCuda succeeds either way: keep the thread's last error as it was. */
    snprintf(line, sizeof(line), "%s", debugLastError(&seq));
    if (kernelsGet(lib, ctx, &k) != loomSuccess) {
        INFO(LOOM_INIT, "cuda: loading the kernels when the stream was attached failed: %s",
             debugLastError(NULL));
        debugRestoreError(line, seq);
    }
}

loomResult_t cudaKernelWait(void *ctx, void *stream, uint64_t flagDev, uint32_t value)
{
    const struct cudaLib *lib;
    const struct cudaKernels *k;
    LOOMCHECK(cudaLibGet(&lib));
    LOOMCHECK(kernelsGet(lib, ctx, &k));
    struct loomWaitArgs args = {(const volatile uint32_t *)(uintptr_t)flagDev, value};
    void *params[] = {&args};
    cuResult_t r = lib->launchKernel(k->wait, 1, 1, 1, 1, 1, 1, 0, stream, params, NULL);
    return r == CUL_SUCCESS ? loomSuccess : cudaLibError(lib, r, "launching loomWaitFlag");
}

/* ---- one per thread: stream, events, scratch ---- */

static pthread_key_t execKey;
static pthread_once_t execKeyOnce = PTHREAD_ONCE_INIT;
static __thread struct cudaExec *tlExec;

static void execFree(void *arg)
{
    struct cudaExec *ex = arg;
    if (ex == NULL)
        return;
    const struct cudaLib *lib = ex->lib;
    cuContext_t cur = NULL;
    lib->ctxGetCurrent(&cur);
    lib->ctxSetCurrent(ex->ctx);
    for (int i = 0; i < CUDA_EXEC_RING; i++)
        if (ex->rec[i].event)
            lib->eventDestroy(ex->rec[i].event);
    if (ex->stream)
        lib->streamDestroy(ex->stream);
    if (ex->scratch)
        lib->memFree(ex->scratch);
    for (int i = 0; i < ex->nRetired; i++)
        lib->memFree(ex->retired[i]);
    lib->ctxSetCurrent(cur);
    free(ex);
}

static void execKeyCreate(void)
{
    pthread_key_create(&execKey, execFree);
}

/* A new CUDA side for ctx (current on this thread). */
static loomResult_t execCreate(const struct cudaLib *lib, cuContext_t ctx, struct cudaExec **out)
{
    struct cudaExec *ex = calloc(1, sizeof(*ex));
    int least = 0, greatest = 0;
    cuResult_t r;
    if (ex == NULL)
        return loomSetError(loomSystemError, "out of memory for a CUDA executor");
    ex->lib = lib;
    ex->ctx = ctx;
    loomResult_t res = kernelsGet(lib, ctx, &ex->kernels);
    if (res != loomSuccess)
        goto fail;
    /* The highest priority: a chunk that peers wait for should not queue behind compute. */
    lib->ctxGetStreamPriorityRange(&least, &greatest);
    r = lib->streamCreateWithPriority(&ex->stream, CUL_STREAM_NON_BLOCKING, greatest);
    if (r != CUL_SUCCESS) {
        res = cudaLibError(lib, r, "creating Loom's CUDA stream");
        goto fail;
    }
    for (int i = 0; i < CUDA_EXEC_RING; i++) {
        r = lib->eventCreate(&ex->rec[i].event, CUL_EVENT_DISABLE_TIMING);
        if (r != CUL_SUCCESS) {
            res = cudaLibError(lib, r, "creating CUDA events");
            goto fail;
        }
    }
    *out = ex;
    return loomSuccess;

fail:
    execFree(ex);
    return res;
}

/* This thread's CUDA side for ctx, made current. */
static loomResult_t execGet(const struct cudaLib *lib, cuContext_t ctx, struct cudaExec **out)
{
    pthread_once(&execKeyOnce, execKeyCreate);
    if (tlExec != NULL && tlExec->ctx == ctx) {
        *out = tlExec;
        return loomSuccess;
    }
    if (tlExec != NULL) {
        execFree(tlExec);
        tlExec = NULL;
        pthread_setspecific(execKey, NULL);
    }
    LOOMCHECK(execCreate(lib, ctx, &tlExec));
    pthread_setspecific(execKey, tlExec);
    *out = tlExec;
    return loomSuccess;
}

/* ---- classifying an operation's buffers ---- */

struct bufferKind {
    const char *name;
    enum cudaMemKind kind;
    cuContext_t ctx;
    int device;
};

static void classify(const void *p, const char *name, struct bufferKind *b)
{
    b->name = name;
    b->ctx = NULL;
    b->device = -1;
    b->kind = cudaLibPointerKind(p, &b->ctx, &b->device);
}

static loomResult_t checkDevice(const struct loomOp *op, const struct bufferKind *b, const char *fn)
{
    size_t bytes;
    int bound = -1;
    if (cudaFatbin(&bytes) == NULL)
        return loomSetError(loomInvalidUsage,
                            "%s: %s is CUDA device memory (device %d), but this Loom was built "
                            "without CUDA (configure --with-cuda)",
                            fn, b->name, b->device);
    void *ctx = p2pContext(op->comm, &bound);
    if (ctx != NULL && ctx != (void *)b->ctx)
        return loomSetError(loomInvalidUsage,
                            "%s: %s is on CUDA device %d, but the communicator was created with "
                            "device %d current; use buffers of that device (or a communicator "
                            "created on this one)",
                            fn, b->name, b->device, bound);
    return loomSuccess;
}

/*
 * The kind of op's buffers: 1 device (with their context), 0 host, -1 none
 * (nothing to move); or an error naming fn when the call mixes them.
 */
static loomResult_t opKind(const struct loomOp *op, const char *fn, int *kind, void **ctx)
{
    int me = op->comm->rank;
    int useSend = op->sendbuff != NULL && op->coll != LOOM_COLL_RECV &&
                  (op->coll != LOOM_COLL_BROADCAST || op->root == me);
    int useRecv = op->recvbuff != NULL && op->coll != LOOM_COLL_SEND &&
                  (op->coll != LOOM_COLL_REDUCE || op->root == me);
    struct bufferKind b[2];
    int n = 0;
    *kind = -1;
    *ctx = NULL;
    if ((op->count == 0 && op->coll != LOOM_COLL_ALLTOALLV) || (!useSend && !useRecv))
        return loomSuccess;
    /* Without the driver in the process every buffer is host memory: ask the loader once. */
    if (!cudaLibLoaded()) {
        *kind = 0;
        return loomSuccess;
    }
    if (useSend)
        classify(op->sendbuff, "sendbuff", &b[n++]);
    if (useRecv)
        classify(op->recvbuff, "recvbuff", &b[n++]);
    if (n == 0)
        return loomSuccess;
    if (n == 2 && b[0].kind != b[1].kind) {
        const struct bufferKind *d = b[0].kind == CUDA_MEM_DEVICE ? &b[0] : &b[1];
        const struct bufferKind *h = d == &b[0] ? &b[1] : &b[0];
        return loomSetError(loomInvalidArgument,
                            "%s: %s is CUDA device memory (device %d) and %s is host memory; "
                            "pass both buffers in the same kind of memory",
                            fn, d->name, d->device, h->name);
    }
    if (n == 2 && b[0].kind == CUDA_MEM_DEVICE && b[0].ctx != b[1].ctx)
        return loomSetError(loomInvalidArgument,
                            "%s: sendbuff is on CUDA device %d and recvbuff on device %d; both "
                            "must be on the same device",
                            fn, b[0].device, b[1].device);
    *kind = b[0].kind == CUDA_MEM_DEVICE;
    if (*kind) {
        LOOMCHECK(checkDevice(op, &b[0], fn));
        *ctx = b[0].ctx;
    }
    return loomSuccess;
}

loomResult_t cudaOpCheck(const struct loomOp *op, const char *fn)
{
    int kind;
    void *ctx;
    return opKind(op, fn, &kind, &ctx);
}

/* ---- plans ---- */

/*
 * The kind of memory of a plan (1 device, with its context; 0 host or no
 * buffer at all); a plan takes one kind, and device buffers of one context.
 */
static loomResult_t planKind(const struct loomOp *ops, int nops, int *device, void **ctx)
{
    static const char *const kindNames[] = {"host", "device"};
    int first = -1, firstKind = -1;
    *ctx = NULL;
    *device = 0;
    for (int i = 0; i < nops; i++) {
        int kind;
        void *c;
        LOOMCHECK(opKind(&ops[i], "loomGroupEnd", &kind, &c));
        if (kind < 0)
            continue;
        if (first < 0) {
            first = i, firstKind = kind, *ctx = c;
            continue;
        }
        if (kind != firstKind)
            return loomSetError(loomInvalidUsage,
                                "loomGroupEnd: operation %d of the group uses %s buffers and "
                                "operation %d %s buffers; a group takes one kind of memory",
                                first, kindNames[firstKind], i, kindNames[kind]);
        if (c != *ctx)
            return loomSetError(loomInvalidUsage,
                                "loomGroupEnd: operations %d and %d of the group use buffers of "
                                "different CUDA devices",
                                first, i);
    }
    *device = firstKind == 1;
    if (*device && *ctx == NULL)
        return loomSetError(loomUnhandledCudaError,
                            "the CUDA driver names no context for the device buffers");
    return loomSuccess;
}

int cudaPlanIsDevice(const struct loomOp *ops, int nops)
{
    int device;
    void *ctx;
    uint64_t seq;
    char line[512]; /* as long as debug.c's error line */
    snprintf(line, sizeof(line), "%s", debugLastError(&seq));
    if (planKind(ops, nops, &device, &ctx) != loomSuccess) {
        debugRestoreError(line, seq); /* cudaPlanBegin reports it when the plan runs */
        return 0;
    }
    return device;
}

loomResult_t cudaPlanBegin(struct loomOp *ops, int nops, int ordered, struct cudaExec **out)
{
    const struct cudaLib *lib;
    struct cudaExec *ex;
    cuContext_t saved = NULL;
    void *ctx;
    int device;
    *out = NULL;
    LOOMCHECK(planKind(ops, nops, &device, &ctx));
    if (!device)
        return loomSuccess;
    LOOMCHECK(cudaLibGet(&lib));
    lib->ctxGetCurrent(&saved);
    cuResult_t r = lib->ctxSetCurrent(ctx);
    if (r != CUL_SUCCESS)
        return cudaLibError(lib, r, "making the buffers' CUDA context current");
    loomResult_t res = execGet(lib, ctx, &ex);
    for (int i = 0; res == loomSuccess && i < nops; i++)
        res = p2pMapHostSlots(ops[i].comm);
    /* Without a CUDA stream to order it, the call comes after all work queued so far. */
    if (res == loomSuccess && !ordered && (r = lib->ctxSynchronize()) != CUL_SUCCESS)
        res = cudaLibError(lib, r, "waiting for the work queued on the device");
    if (res != loomSuccess) {
        lib->ctxSetCurrent(saved);
        return res;
    }
    ex->saved = saved;
    ex->head = ex->tail = 0;
    ex->work = ex->stream;
    *out = ex;
    return loomSuccess;
}

void cudaPlanUseStream(struct cudaExec *ex, void *stream)
{
    ex->work = stream ? (cuStream_t)stream : ex->stream;
}

void *cudaPlanStream(const struct cudaExec *ex)
{
    return ex->work;
}

void *cudaPlanOwnStream(const struct cudaExec *ex)
{
    return ex->stream;
}

void *cudaPlanContext(const struct cudaExec *ex)
{
    return ex->ctx;
}

loomResult_t cudaKernelInterpret(struct cudaExec *ex, void *blocks, unsigned int nblocks,
                                 unsigned int threads)
{
    void *params[] = {&blocks};
    cuResult_t r = ex->lib->launchKernel(ex->kernels->interpret, nblocks, 1, 1, threads, 1, 1, 0,
                                         ex->work, params, NULL);
    return r == CUL_SUCCESS ? loomSuccess
                            : cudaLibError(ex->lib, r, "launching the plan interpreter");
}

void cudaPlanEnd(struct cudaExec *ex, loomResult_t res)
{
    if (ex == NULL)
        return;
    /* Wait out what is still running (after an error, it is dropped unpublished). */
    cuResult_t r = ex->lib->streamSynchronize(ex->stream);
    if (r != CUL_SUCCESS && res == loomSuccess)
        cudaLibError(ex->lib, r, "finishing a collective on the GPU");
    /* Nothing is left to publish: loomExecCuda returns loomSuccess only once every step it
     * issued has been retired (cudaExecPending 0), and after an error nothing is published. */
    ex->head = ex->tail = 0;
    ex->lib->ctxSetCurrent(ex->saved);
}

loomResult_t cudaStageInPlace(struct cudaExec *ex, struct loomOp *op, size_t bytes,
                              const void **send)
{
    if (ex == NULL)
        return loomSetError(loomInternalError, "device staging outside a device plan");
    const struct cudaLib *lib = ex->lib;
    cuResult_t r;
    /*
     * Outgrown scratch is kept until the thread's CUDA side goes: cuMemFree may wait for the whole
     * device, including an application stream that waits for this very plan. Sizes at
     * least double, so few are kept.
     */
    if (ex->scratchBytes < bytes) {
        size_t want = bytes > 2 * ex->scratchBytes ? bytes : 2 * ex->scratchBytes;
        cuDevPtr_t p = 0;
        if (ex->nRetired == CUDA_SCRATCH_GROWTHS)
            return loomSetError(loomSystemError, "the AlltoAll staging buffer grew too often");
        if ((r = lib->memAlloc(&p, want)) != CUL_SUCCESS)
            return cudaLibError(lib, r, "allocating device memory to stage an in-place AlltoAll");
        if (ex->scratch)
            ex->retired[ex->nRetired++] = ex->scratch;
        ex->scratch = p;
        ex->scratchBytes = want;
    }
    r = lib->memcpyAsync(ex->scratch, (cuDevPtr_t)(uintptr_t)op->sendbuff, bytes, ex->work);
    if (r != CUL_SUCCESS)
        return cudaLibError(lib, r, "staging an in-place AlltoAll");
    *send = (const void *)(uintptr_t)ex->scratch;
    return loomSuccess;
}
