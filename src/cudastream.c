/*
 * cudastream.c — ordering Loom's work on an application's CUDA stream
 * (the core's, beside stream.c: the driver and the kernels it uses are
 * src/cuda/'s, a layer below).
 *
 * loomStreamCreateCuda wraps a cudaStream_t S in a Loom stream (stream.c),
 * whose progress thread runs each unit (one call or one group). Two marks
 * tie a unit to S, both made at enqueue, so the call returns at once:
 *
 *   S:  ... app work ... [record event E_k] [wait until flag >= k] ... later app work ...
 *   progress thread:        wait for E_k -> run unit k -> flag = k
 *
 * E_k tells the progress thread when the work queued on S before the call
 * is done (so the buffers hold what the application wrote); the wait holds
 * back whatever the application queues on S after the call until unit k has
 * finished. The flag is a 32-bit counter in pinned host memory that the GPU
 * can read; it is compared cyclically, so it may wrap.
 *
 * The wait is cuStreamWaitValue32 on the flag: no kernel, no SM held.
 * Where the device cannot wait on memory (stream memory operations not
 * supported), a one-thread kernel (loomWaitFlag) polls the flag instead.
 * Either way S's queue is blocked until the flag moves, and the driver
 * cannot see why: work Loom issues for the unit goes on its own stream
 * (cudaexec.c), created with the highest priority so that it is not queued
 * behind S in the same hardware queue. An application that uses more
 * streams than the GPU has hardware queues (CUDA_DEVICE_MAX_CONNECTIONS,
 * default 8) should raise that limit, as with any library that orders
 * streams by waiting on memory.
 */
#include <stdatomic.h>
#include <stdlib.h>

#include "cudacore.h"
#include "cudalib.h"
#include "cudastream.h"
#include "debug.h"

#define CUL_ERROR_NOT_SUPPORTED 801

struct cudaStreamSync {
    const struct cudaLib *lib;
    cuStream_t stream;
    cuContext_t ctx;
    uint32_t *flag; /* pinned, mapped for the GPU; written only by the progress thread */
    cuDevPtr_t flagDev;
    uint32_t seq;    /* last value handed out (under the Loom stream's lock) */
    int useKernel;   /* the device cannot wait on memory: poll with loomWaitFlag */
    int threadBound; /* the progress thread made ctx current */
};

/* Makes cs's context current on this thread; *saved receives the previous one. */
static loomResult_t enter(struct cudaStreamSync *cs, cuContext_t *saved)
{
    *saved = NULL;
    cs->lib->ctxGetCurrent(saved);
    cuResult_t r = cs->lib->ctxSetCurrent(cs->ctx);
    return r == CUL_SUCCESS ? loomSuccess
                            : cudaLibError(cs->lib, r, "making the CUDA stream's context current");
}

loomResult_t cudaStreamAttach(void *cudaStream, struct cudaStreamSync **out)
{
    const char *fn = "loomStreamCreateCuda";
    const struct cudaLib *lib;
    cuContext_t saved;
    void *flag = NULL;
    LOOMCHECK(cudaLibGet(&lib));
    struct cudaStreamSync *cs = calloc(1, sizeof(*cs));
    if (cs == NULL)
        return loomSetError(loomSystemError, "%s: out of memory", fn);
    cs->lib = lib;
    cs->stream = cudaStream;
    cuResult_t r = lib->streamGetCtx(cs->stream, &cs->ctx);
    if (r != CUL_SUCCESS) {
        free(cs);
        return loomSetError(loomInvalidArgument,
                            "%s: %p is not a CUDA stream the driver knows (cuStreamGetCtx: CUDA "
                            "error %d)",
                            fn, cudaStream, r);
    }
    loomResult_t res = enter(cs, &saved);
    if (res != loomSuccess)
        goto fail_free;
    cudaKernelsPreload(cs->ctx);
    r = lib->memHostAlloc(&flag, 64, CUL_MEMHOSTALLOC_PORTABLE | CUL_MEMHOSTALLOC_DEVICEMAP);
    if (r == CUL_SUCCESS)
        r = lib->memHostGetDevicePointer(&cs->flagDev, flag, 0);
    lib->ctxSetCurrent(saved);
    if (r != CUL_SUCCESS) {
        res = cudaLibError(lib, r, "loomStreamCreateCuda: allocating the stream's flag");
        goto fail_host;
    }
    cs->flag = flag;
    atomic_store_explicit((_Atomic uint32_t *)cs->flag, 0, memory_order_relaxed);
    *out = cs;
    return loomSuccess;

fail_host:
    if (flag)
        lib->memFreeHost(flag);
fail_free:
    free(cs);
    return res;
}

loomResult_t cudaStreamCapturing(struct cudaStreamSync *cs, int *capturing)
{
    int status = CUL_STREAM_CAPTURE_STATUS_NONE;
    cuResult_t r = cs->lib->streamIsCapturing(cs->stream, &status);
    if (r != CUL_SUCCESS)
        return cudaLibError(cs->lib, r, "asking whether the CUDA stream is being captured");
    *capturing = status != CUL_STREAM_CAPTURE_STATUS_NONE;
    return loomSuccess;
}

loomResult_t cudaStreamCaptureRefuse(const char *fn, const char *why)
{
    /* A call the progress thread runs would be replayed without it (nothing would order, watch
     * or retire the replay), so it is refused before anything touches the stream: the capture
     * stays valid. A launch carries its host work in the graph (devexec.c). */
    return loomSetError(loomInvalidUsage,
                        "%s: the CUDA stream is being captured into a CUDA graph, and %s; make "
                        "the call outside the capture",
                        fn, why);
}

int cudaStreamCaptureRelax(struct cudaStreamSync *cs)
{
    int mode = CUL_STREAM_CAPTURE_MODE_RELAXED;
    cs->lib->threadExchangeStreamCaptureMode(&mode);
    return mode;
}

void cudaStreamCaptureRestore(struct cudaStreamSync *cs, int mode)
{
    cs->lib->threadExchangeStreamCaptureMode(&mode);
}

void *cudaStreamHandle(const struct cudaStreamSync *cs)
{
    return cs->stream;
}

/* Holds S back until the flag reaches seq. */
static loomResult_t streamHold(struct cudaStreamSync *cs, uint32_t seq)
{
    if (!cs->useKernel) {
        cuResult_t r =
            cs->lib->streamWaitValue32(cs->stream, cs->flagDev, seq, CUL_STREAM_WAIT_VALUE_GEQ);
        if (r == CUL_SUCCESS)
            return loomSuccess;
        if (r != CUL_ERROR_NOT_SUPPORTED)
            return cudaLibError(cs->lib, r, "cuStreamWaitValue32 on the application's stream");
        INFO(LOOM_COLL, "this GPU cannot wait on memory in a stream; a kernel polls instead");
        cs->useKernel = 1;
    }
    return cudaKernelWait(cs->ctx, cs->stream, cs->flagDev, seq);
}

loomResult_t cudaStreamFence(struct cudaStreamSync *cs, void **event, uint32_t *seq)
{
    cuContext_t saved;
    cuResult_t r = CUL_SUCCESS;
    LOOMCHECK(enter(cs, &saved));
    if (*event == NULL)
        r = cs->lib->eventCreate((cuEvent_t *)event, CUL_EVENT_DISABLE_TIMING);
    if (r == CUL_SUCCESS)
        r = cs->lib->eventRecord(*event, cs->stream);
    loomResult_t res = r == CUL_SUCCESS
                           ? streamHold(cs, cs->seq + 1)
                           : cudaLibError(cs->lib, r, "marking the application's CUDA stream");
    cs->lib->ctxSetCurrent(saved);
    if (res != loomSuccess)
        return res;
    *seq = ++cs->seq;
    return loomSuccess;
}

loomResult_t cudaStreamUnitBegin(struct cudaStreamSync *cs, void *event)
{
    cuResult_t r;
    if (!cs->threadBound) {
        if ((r = cs->lib->ctxSetCurrent(cs->ctx)) != CUL_SUCCESS)
            return cudaLibError(cs->lib, r, "making the CUDA stream's context current");
        cs->threadBound = 1;
    }
    r = cs->lib->eventSynchronize(event);
    if (r != CUL_SUCCESS)
        return cudaLibError(cs->lib, r,
                            "waiting for the work queued before the call on its "
                            "CUDA stream");
    return loomSuccess;
}

void cudaStreamUnitEnd(struct cudaStreamSync *cs, uint32_t seq)
{
    atomic_store_explicit((_Atomic uint32_t *)cs->flag, seq, memory_order_release);
}

loomResult_t cudaStreamSync(struct cudaStreamSync *cs)
{
    cuResult_t r = cs->lib->streamSynchronize(cs->stream);
    return r == CUL_SUCCESS ? loomSuccess
                            : cudaLibError(cs->lib, r, "loomStreamSynchronize: the CUDA stream");
}

loomResult_t cudaStreamIdle(struct cudaStreamSync *cs)
{
    cuResult_t r = cs->lib->streamQuery(cs->stream);
    if (r == CUL_ERROR_NOT_READY)
        return loomInProgress;
    return r == CUL_SUCCESS ? loomSuccess
                            : cudaLibError(cs->lib, r, "loomStreamQuery: the CUDA stream");
}

void cudaStreamEventFree(struct cudaStreamSync *cs, void *event)
{
    cuContext_t saved;
    if (enter(cs, &saved) == loomSuccess) {
        cs->lib->eventDestroy(event);
        cs->lib->ctxSetCurrent(saved);
    }
}

void cudaStreamDetach(struct cudaStreamSync *cs)
{
    cuContext_t saved;
    /* A wait still queued on S reads the flag: it must have run before the flag is freed. */
    cs->lib->streamSynchronize(cs->stream);
    if (enter(cs, &saved) == loomSuccess) {
        cs->lib->memFreeHost(cs->flag);
        cs->lib->ctxSetCurrent(saved);
    }
    free(cs);
}
