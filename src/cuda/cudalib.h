/*
 * cudalib.h — the CUDA driver API, loaded at run time.
 *
 * Loom never links against CUDA: libloom loads and runs host buffers on any
 * machine, with or without a GPU, a driver or a toolkit. When a device
 * buffer or a CUDA stream shows up, this module dlopens the driver
 * (libcuda.so.1, or LOOM_CUDA_LIB) once, looks up the functions below, and
 * keeps them for the life of the process. The driver API rather than
 * libcudart: the driver library is installed wherever a GPU can run, in the
 * system's library path, while libcudart lives in a toolkit directory the
 * loader may not search. Handles are interchangeable with the runtime's
 * (a cudaStream_t is a CUstream, a cudaMalloc'ed pointer a CUdeviceptr),
 * so applications that use the runtime pass them straight in.
 *
 * The types and constants are declared here, not taken from cuda.h, so this
 * compiles without the toolkit (and a build without CUDA can still tell a
 * device pointer apart and say so). Their values are the driver's ABI;
 * tests/unit/check_cuda.c compares them with cuda.h when the toolkit is
 * present.
 */
#ifndef LOOM_CUDALIB_H_
#define LOOM_CUDALIB_H_

#include <stddef.h>
#include <stdint.h>

#include "loom.h"

typedef int cuResult_t;
typedef int cuDevice_t;
typedef uint64_t cuDevPtr_t;
typedef struct cuCtxOpaque *cuContext_t;
typedef struct cuStreamOpaque *cuStream_t;
typedef struct cuEventOpaque *cuEvent_t;
typedef struct cuModuleOpaque *cuModule_t;
typedef struct cuFunctionOpaque *cuFunction_t;
typedef struct cuGraphOpaque *cuGraph_t;
typedef struct cuUserObjectOpaque *cuUserObject_t;
typedef void (*cuHostFn_t)(void *userData);
typedef struct {
    char reserved[64];
} cuIpcHandle_t;
typedef struct {
    char bytes[16];
} cuUuid_t;

#define CUL_SUCCESS 0
#define CUL_ERROR_INVALID_VALUE 1
#define CUL_ERROR_NOT_INITIALIZED 3
#define CUL_ERROR_NO_DEVICE 100
#define CUL_ERROR_NOT_READY 600
#define CUL_ERROR_HOST_MEMORY_ALREADY_REGISTERED 712

#define CUL_POINTER_ATTRIBUTE_CONTEXT 1
#define CUL_POINTER_ATTRIBUTE_MEMORY_TYPE 2
#define CUL_POINTER_ATTRIBUTE_DEVICE_ORDINAL 9
#define CUL_MEMORYTYPE_HOST 1
#define CUL_MEMORYTYPE_DEVICE 2

#define CUL_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT 16
#define CUL_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING 41
#define CUL_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR 75
#define CUL_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR 76
#define CUL_DEVICE_ATTRIBUTE_CAN_USE_STREAM_MEM_OPS_V1 92

#define CUL_MEMHOSTREGISTER_PORTABLE 0x1
#define CUL_MEMHOSTREGISTER_DEVICEMAP 0x2
#define CUL_MEMHOSTALLOC_PORTABLE 0x1
#define CUL_MEMHOSTALLOC_DEVICEMAP 0x2
#define CUL_EVENT_DISABLE_TIMING 0x2
#define CUL_STREAM_NON_BLOCKING 0x1
#define CUL_STREAM_WAIT_VALUE_GEQ 0x0
#define CUL_IPC_MEM_LAZY_ENABLE_PEER_ACCESS 0x1
#define CUL_STREAM_CAPTURE_STATUS_NONE 0
#define CUL_STREAM_CAPTURE_STATUS_ACTIVE 1
#define CUL_STREAM_CAPTURE_MODE_RELAXED 2
#define CUL_USER_OBJECT_NO_DESTRUCTOR_SYNC 1
#define CUL_GRAPH_USER_OBJECT_MOVE 1

/* The driver functions Loom uses; each member is named for the driver's function without "cu". */
struct cudaLib {
    cuResult_t (*init)(unsigned int flags);
    cuResult_t (*getErrorString)(cuResult_t res, const char **str);
    cuResult_t (*deviceGetCount)(int *count);
    cuResult_t (*deviceGet)(cuDevice_t *dev, int ordinal);
    cuResult_t (*deviceGetAttribute)(int *value, int attr, cuDevice_t dev);
    cuResult_t (*deviceGetUuid)(cuUuid_t *uuid, cuDevice_t dev);
    cuResult_t (*deviceCanAccessPeer)(int *can, cuDevice_t dev, cuDevice_t peer);
    cuResult_t (*devicePrimaryCtxRetain)(cuContext_t *ctx, cuDevice_t dev);
    cuResult_t (*devicePrimaryCtxRelease)(cuDevice_t dev);
    cuResult_t (*ctxGetCurrent)(cuContext_t *ctx);
    cuResult_t (*ctxSetCurrent)(cuContext_t ctx);
    cuResult_t (*ctxGetDevice)(cuDevice_t *dev);
    cuResult_t (*ctxSynchronize)(void);
    cuResult_t (*ctxGetStreamPriorityRange)(int *least, int *greatest);
    cuResult_t (*pointerGetAttribute)(void *data, int attr, cuDevPtr_t ptr);
    cuResult_t (*memAlloc)(cuDevPtr_t *ptr, size_t bytes);
    cuResult_t (*memFree)(cuDevPtr_t ptr);
    cuResult_t (*memHostRegister)(void *p, size_t bytes, unsigned int flags);
    cuResult_t (*memHostUnregister)(void *p);
    cuResult_t (*memHostAlloc)(void **p, size_t bytes, unsigned int flags);
    cuResult_t (*memFreeHost)(void *p);
    cuResult_t (*memHostGetDevicePointer)(cuDevPtr_t *dptr, void *p, unsigned int flags);
    cuResult_t (*memcpyAsync)(cuDevPtr_t dst, cuDevPtr_t src, size_t bytes, cuStream_t s);
    cuResult_t (*streamCreateWithPriority)(cuStream_t *s, unsigned int flags, int priority);
    cuResult_t (*streamDestroy)(cuStream_t s);
    cuResult_t (*streamSynchronize)(cuStream_t s);
    cuResult_t (*streamQuery)(cuStream_t s);
    cuResult_t (*streamGetCtx)(cuStream_t s, cuContext_t *ctx);
    cuResult_t (*streamWaitValue32)(cuStream_t s, cuDevPtr_t addr, uint32_t value,
                                    unsigned int flags);
    cuResult_t (*streamWaitEvent)(cuStream_t s, cuEvent_t e, unsigned int flags);
    cuResult_t (*streamIsCapturing)(cuStream_t s, int *status);
    cuResult_t (*streamGetCaptureInfo)(cuStream_t s, int *status, uint64_t *id, cuGraph_t *graph,
                                       const void **deps, size_t *ndeps);
    cuResult_t (*threadExchangeStreamCaptureMode)(int *mode);
    cuResult_t (*launchHostFunc)(cuStream_t s, cuHostFn_t fn, void *userData);
    cuResult_t (*userObjectCreate)(cuUserObject_t *obj, void *ptr, cuHostFn_t destroy,
                                   unsigned int refs, unsigned int flags);
    cuResult_t (*userObjectRelease)(cuUserObject_t obj, unsigned int refs);
    cuResult_t (*graphRetainUserObject)(cuGraph_t graph, cuUserObject_t obj, unsigned int refs,
                                        unsigned int flags);
    cuResult_t (*eventCreate)(cuEvent_t *e, unsigned int flags);
    cuResult_t (*eventRecord)(cuEvent_t e, cuStream_t s);
    cuResult_t (*eventQuery)(cuEvent_t e);
    cuResult_t (*eventSynchronize)(cuEvent_t e);
    cuResult_t (*eventDestroy)(cuEvent_t e);
    cuResult_t (*moduleLoadData)(cuModule_t *m, const void *image);
    cuResult_t (*moduleGetFunction)(cuFunction_t *f, cuModule_t m, const char *name);
    cuResult_t (*launchKernel)(cuFunction_t f, unsigned int gx, unsigned int gy, unsigned int gz,
                               unsigned int bx, unsigned int by, unsigned int bz,
                               unsigned int sharedBytes, cuStream_t s, void **params, void **extra);
    cuResult_t (*ipcGetMemHandle)(cuIpcHandle_t *h, cuDevPtr_t ptr);
    cuResult_t (*ipcOpenMemHandle)(cuDevPtr_t *ptr, cuIpcHandle_t h, unsigned int flags);
    cuResult_t (*ipcCloseMemHandle)(cuDevPtr_t ptr);
};

/*
 * The driver, loaded and initialised (cuInit) on first use. Returns
 * loomSuccess and *lib, or loomUnhandledCudaError / loomSystemError with a
 * line saying why (no driver library, a symbol missing, cuInit failed); the
 * outcome is kept, so later calls answer at once and the same way.
 */
loomResult_t cudaLibGet(const struct cudaLib **lib);
/*
 * 1 if the driver is loaded in this process (by Loom or the application).
 * When it is not, no pointer can be device memory, so host-only programs
 * never load it. While the answer is no it costs a read of the coarse clock,
 * and a loader query once a clock tick.
 */
int cudaLibLoaded(void);
/*
 * Records a failed driver call: "what failed: CUDA_ERROR_NAME (code): the
 * driver's description" as the last error; returns loomUnhandledCudaError.
 */
loomResult_t cudaLibError(const struct cudaLib *lib, cuResult_t res, const char *what);

/* Where a buffer lives, as the driver says. */
enum cudaMemKind { CUDA_MEM_HOST = 0, CUDA_MEM_DEVICE = 1 };

/*
 * Classifies p: CUDA_MEM_DEVICE for memory the CPU must not touch (device
 * and managed allocations, and IPC mappings), with the owning context (the
 * device's primary context for memory no context owns) and device ordinal;
 * CUDA_MEM_HOST for everything else, including pinned and registered host
 * memory and any pointer when no driver is loaded.
 */
enum cudaMemKind cudaLibPointerKind(const void *p, cuContext_t *ctx, int *device);

/* The kernels compiled into this build (kernels.fatbin), or NULL in a build without CUDA. */
const void *cudaFatbin(size_t *bytes);

#endif /* LOOM_CUDALIB_H_ */
