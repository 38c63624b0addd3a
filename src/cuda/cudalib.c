/*
 * cudalib.c — loads the CUDA driver at run time (see cudalib.h for why).
 *
 * The first caller that needs the driver runs cudaLibLoad under
 * pthread_once: dlopen of LOOM_CUDA_LIB (default libcuda.so.1), dlsym of
 * every function of struct cudaLib from one table, then cuInit. The result,
 * good or bad, is kept with its reason, so a machine without a driver pays
 * for the attempt once and every later call gets the same one-line error.
 *
 * cudaLibLoaded answers "could any pointer be device memory?" without
 * loading anything: only if the driver is in the process already. It asks
 * the dynamic loader (dl_iterate_phdr) and, while the answer is no, only
 * rescans when the loader reports that objects were added since the last
 * look. Even that look costs: glibc's dl_iterate_phdr takes the loader's
 * lock and searches every loaded object's headers for the caller before
 * the first callback (a quarter of a 1-rank call's time, growing with the
 * objects a process has loaded; a collective asks twice: docs/performance.md,
 * "no loader query on most calls"). So a "no" is trusted while the coarse
 * monotonic clock (a read of the kernel's tick, about a tenth of what
 * CLOCK_MONOTONIC costs) still shows the tick
 * of the scan that gave it: at most one tick, 1-10 ms. A device pointer can
 * exist only after the driver was loaded, initialised (cuInit), given a
 * context and asked for memory, which takes far longer (on the order of
 * 100 ms), so none can be passed within a tick of a scan that did not find
 * the driver. (tests/unit/fakecuda.c, a test double, loads in no time; its
 * tests load it before their first call.)
 */
#include <dlfcn.h>
#include <link.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "cudalib.h"
#include "debug.h"
#include "param.h"

#define SYM(fn, member)                                                                            \
    {                                                                                              \
        fn, offsetof(struct cudaLib, member)                                                       \
    }

static const struct {
    const char *name;
    size_t offset;
} cudaSyms[] = {
    SYM("cuInit", init),
    SYM("cuGetErrorString", getErrorString),
    SYM("cuDeviceGetCount", deviceGetCount),
    SYM("cuDeviceGet", deviceGet),
    SYM("cuDeviceGetAttribute", deviceGetAttribute),
    SYM("cuDeviceGetUuid_v2", deviceGetUuid),
    SYM("cuDeviceCanAccessPeer", deviceCanAccessPeer),
    SYM("cuDevicePrimaryCtxRetain", devicePrimaryCtxRetain),
    SYM("cuDevicePrimaryCtxRelease_v2", devicePrimaryCtxRelease),
    SYM("cuCtxGetCurrent", ctxGetCurrent),
    SYM("cuCtxSetCurrent", ctxSetCurrent),
    SYM("cuCtxGetDevice", ctxGetDevice),
    SYM("cuCtxSynchronize", ctxSynchronize),
    SYM("cuCtxGetStreamPriorityRange", ctxGetStreamPriorityRange),
    SYM("cuPointerGetAttribute", pointerGetAttribute),
    SYM("cuMemAlloc_v2", memAlloc),
    SYM("cuMemFree_v2", memFree),
    SYM("cuMemHostRegister_v2", memHostRegister),
    SYM("cuMemHostUnregister", memHostUnregister),
    SYM("cuMemHostAlloc", memHostAlloc),
    SYM("cuMemFreeHost", memFreeHost),
    SYM("cuMemHostGetDevicePointer_v2", memHostGetDevicePointer),
    SYM("cuMemcpyAsync", memcpyAsync),
    SYM("cuStreamCreateWithPriority", streamCreateWithPriority),
    SYM("cuStreamDestroy_v2", streamDestroy),
    SYM("cuStreamSynchronize", streamSynchronize),
    SYM("cuStreamQuery", streamQuery),
    SYM("cuStreamGetCtx", streamGetCtx),
    SYM("cuStreamWaitValue32_v2", streamWaitValue32),
    SYM("cuStreamWaitEvent", streamWaitEvent),
    SYM("cuStreamIsCapturing", streamIsCapturing),
    SYM("cuStreamGetCaptureInfo_v2", streamGetCaptureInfo),
    SYM("cuThreadExchangeStreamCaptureMode", threadExchangeStreamCaptureMode),
    SYM("cuLaunchHostFunc", launchHostFunc),
    SYM("cuUserObjectCreate", userObjectCreate),
    SYM("cuUserObjectRelease", userObjectRelease),
    SYM("cuGraphRetainUserObject", graphRetainUserObject),
    SYM("cuEventCreate", eventCreate),
    SYM("cuEventRecord", eventRecord),
    SYM("cuEventQuery", eventQuery),
    SYM("cuEventSynchronize", eventSynchronize),
    SYM("cuEventDestroy_v2", eventDestroy),
    SYM("cuModuleLoadData", moduleLoadData),
    SYM("cuModuleGetFunction", moduleGetFunction),
    SYM("cuLaunchKernel", launchKernel),
    SYM("cuIpcGetMemHandle", ipcGetMemHandle),
    SYM("cuIpcOpenMemHandle_v2", ipcOpenMemHandle),
    SYM("cuIpcCloseMemHandle", ipcCloseMemHandle),
};

static pthread_once_t cudaOnce = PTHREAD_ONCE_INIT;
static struct cudaLib cudaFns;
static loomResult_t cudaState = loomInternalError;
static char cudaWhy[384];
static atomic_int cudaSeenLoaded;
static _Atomic unsigned long long cudaScannedAdds = ~0ULL;
static _Atomic unsigned long long cudaScannedTick; /* CLOCK_MONOTONIC_COARSE (ns) of the last
                                                       scan that found no driver, 0: none */

static void cudaLibLoad(void)
{
    const char *name = paramStr(LOOM_PARAM_CUDA_LIB);
    void *h = dlopen(name, RTLD_NOW | RTLD_LOCAL);
    if (h == NULL) {
        const char *e = dlerror();
        snprintf(cudaWhy, sizeof(cudaWhy),
                 "cannot load the CUDA driver %s (%s): no NVIDIA driver on this machine? Device "
                 "buffers and CUDA streams need one; set LOOM_CUDA_LIB if it lives elsewhere",
                 name, e ? e : "not found");
        cudaState = loomUnhandledCudaError;
        return;
    }
    for (size_t i = 0; i < sizeof(cudaSyms) / sizeof(cudaSyms[0]); i++) {
        void *sym = dlsym(h, cudaSyms[i].name);
        if (sym == NULL) {
            snprintf(cudaWhy, sizeof(cudaWhy),
                     "the CUDA driver %s has no %s: the driver is too old for Loom (it needs the "
                     "CUDA 12 driver API or newer)",
                     name, cudaSyms[i].name);
            cudaState = loomUnhandledCudaError;
            return; /* the handle stays open: unloading a driver is never safe */
        }
        memcpy((char *)&cudaFns + cudaSyms[i].offset, &sym, sizeof(sym));
    }
    cuResult_t r = cudaFns.init(0);
    if (r != CUL_SUCCESS) {
        const char *s = NULL;
        cudaFns.getErrorString(r, &s);
        snprintf(cudaWhy, sizeof(cudaWhy),
                 "cuInit failed: CUDA error %d (%s): no usable GPU here? (check nvidia-smi and "
                 "CUDA_VISIBLE_DEVICES)",
                 r, s ? s : "unknown");
        cudaState = loomUnhandledCudaError;
        return;
    }
    atomic_store(&cudaSeenLoaded, 1);
    cudaState = loomSuccess;
}

/* The driver, or NULL; records nothing (for callers that only probe). */
static const struct cudaLib *cudaLibTry(void)
{
    pthread_once(&cudaOnce, cudaLibLoad);
    return cudaState == loomSuccess ? &cudaFns : NULL;
}

loomResult_t cudaLibGet(const struct cudaLib **lib)
{
    if (cudaLibTry() == NULL)
        return loomSetError(cudaState, "%s", cudaWhy);
    *lib = &cudaFns;
    return loomSuccess;
}

loomResult_t cudaLibError(const struct cudaLib *lib, cuResult_t res, const char *what)
{
    const char *s = NULL;
    if (lib != NULL && lib->getErrorString(res, &s) != CUL_SUCCESS)
        s = NULL;
    return loomSetError(loomUnhandledCudaError, "%s failed: CUDA error %d (%s)", what, res,
                        s ? s : "unknown");
}

/* ---- is the driver in this process? ---- */

struct libScan {
    const char *base; /* basename of LOOM_CUDA_LIB */
    unsigned long long skipIfAdds;
    unsigned long long adds;
    int first;
    int found;
};

static int libScanVisit(struct dl_phdr_info *info, size_t size, void *arg)
{
    struct libScan *s = arg;
    if (s->first) {
        s->first = 0;
        int counted = size >= offsetof(struct dl_phdr_info, dlpi_adds) + sizeof(info->dlpi_adds);
        s->adds = counted ? info->dlpi_adds : ~0ULL; /* an old loader: scan every time */
        if (counted && s->adds == s->skipIfAdds)
            return 1; /* nothing was loaded since the last scan found no driver */
    }
    const char *name = info->dlpi_name ? info->dlpi_name : "";
    const char *slash = strrchr(name, '/');
    const char *base = slash ? slash + 1 : name;
    if (strcmp(base, s->base) == 0 || strncmp(base, "libcuda.so", 10) == 0) {
        s->found = 1;
        return 1;
    }
    return 0;
}

int cudaLibLoaded(void)
{
    if (atomic_load_explicit(&cudaSeenLoaded, memory_order_acquire))
        return 1;
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
    unsigned long long now =
        (unsigned long long)ts.tv_sec * 1000000000ULL + (unsigned long long)ts.tv_nsec;
    if (now != 0 && now == atomic_load_explicit(&cudaScannedTick, memory_order_acquire))
        return 0;
    const char *name = paramStr(LOOM_PARAM_CUDA_LIB);
    const char *slash = strrchr(name, '/');
    struct libScan s = {slash ? slash + 1 : name, atomic_load(&cudaScannedAdds), 0, 1, 0};
    dl_iterate_phdr(libScanVisit, &s);
    if (s.found) {
        atomic_store(&cudaSeenLoaded, 1);
        return 1;
    }
    atomic_store(&cudaScannedAdds, s.adds);
    atomic_store_explicit(&cudaScannedTick, now, memory_order_release);
    return 0;
}

/*
 * Device `ordinal`'s primary context (what the runtime uses), retained once,
 * for memory no context owns (cuMemCreate + cuMemMap, as PyTorch's
 * expandable segments); NULL if there is none.
 */
static cuContext_t primaryContext(const struct cudaLib *lib, int ordinal)
{
    static _Atomic(cuContext_t) primary[64];
    cuDevice_t dev;
    cuContext_t ctx = NULL;
    if (ordinal < 0 || ordinal >= 64)
        return NULL;
    ctx = atomic_load(&primary[ordinal]);
    if (ctx == NULL && lib->deviceGet(&dev, ordinal) == CUL_SUCCESS &&
        lib->devicePrimaryCtxRetain(&ctx, dev) == CUL_SUCCESS) {
        cuContext_t none = NULL;
        if (!atomic_compare_exchange_strong(&primary[ordinal], &none, ctx))
            lib->devicePrimaryCtxRelease(dev); /* another thread retained it first */
        ctx = atomic_load(&primary[ordinal]);
    }
    return ctx;
}

enum cudaMemKind cudaLibPointerKind(const void *p, cuContext_t *ctx, int *device)
{
    if (p == NULL || !cudaLibLoaded())
        return CUDA_MEM_HOST;
    const struct cudaLib *lib = cudaLibTry();
    if (lib == NULL)
        return CUDA_MEM_HOST;
    unsigned int type = 0;
    cuDevPtr_t dp = (cuDevPtr_t)(uintptr_t)p;
    /* Plain host memory is unknown to the driver: the call fails, and that means host. */
    if (lib->pointerGetAttribute(&type, CUL_POINTER_ATTRIBUTE_MEMORY_TYPE, dp) != CUL_SUCCESS ||
        type == CUL_MEMORYTYPE_HOST)
        return CUDA_MEM_HOST;
    *ctx = NULL;
    *device = -1;
    lib->pointerGetAttribute(ctx, CUL_POINTER_ATTRIBUTE_CONTEXT, dp);
    lib->pointerGetAttribute(device, CUL_POINTER_ATTRIBUTE_DEVICE_ORDINAL, dp);
    if (*ctx == NULL)
        *ctx = primaryContext(lib, *device);
    return CUDA_MEM_DEVICE;
}
