/*
 * fakecuda.c — a stand-in for the CUDA driver (libcuda.so.1), so that the
 * host side of Loom's GPU support runs under `make check` on machines
 * without a GPU. Tests load it with LOOM_CUDA_LIB=.../libfakecuda.so.
 *
 * It models what Loom relies on, strictly enough to catch the mistakes a
 * GPU would punish:
 *   - device memory is a memfd mapped twice: the address handed out (the
 *     "device pointer") is PROT_NONE, so any CPU access to it by the library
 *     crashes the test, and a private read-write view that only the fake
 *     touches; IPC handles carry (pid, fd), and another process opens them
 *     through /proc, so p2p between ranks works as on one GPU;
 *   - kernels may only touch device memory and registered host memory;
 *   - streams are asynchronous and in order: each has a worker thread, and
 *     FAKECUDA_DELAY_US=N makes every command wait up to N us first, so work
 *     that is used before its event completed shows up as wrong data;
 *   - events, stream waits on events and on 32-bit memory values (cyclic),
 *     stream and context synchronisation behave as documented;
 *   - the module image must be a fatbin that contains the names looked up,
 *     and a reduction kernel is run by its name on the CPU: the host build
 *     of what its threads run (loomDevReduceShare, src/device/interp.h),
 *     thread after thread of the launch's grid;
 *   - loading a module waits for the context's streams (a real driver did, and
 *     hung behind a stream held by Loom's own wait); here it fails after 2 s;
 *   - a launch of loomInterpret (the plan interpreter, src/device/interp.h)
 *     runs the host build of the same interpreter, in stream order: its
 *     blocks and FAKECUDA_THREADS (default 4, at most the block's size)
 *     threads each stand for a block's threads (pthreads). The descriptor
 *     must be device memory or registered host memory, else the launch
 *     fails as an illegal address; when the launch runs, every address in
 *     it must be too (the FIFOs, the positions, the plans, the abort flag),
 *     else the process aborts, as a GPU would fault; the fake runs on a copy
 *     of the descriptor whose addresses are its own views of device memory,
 *     and writes back what the kernel leaves (status, error records, lanes);
 *   - stream capture and graphs: commands queued while a stream is captured
 *     are the graph's nodes, in order, and do not run; synchronising or
 *     querying the stream then fails and invalidates the capture, as the
 *     driver does, and so does an allocation (cuMemAlloc, cuMemHostAlloc,
 *     cuMemHostRegister) while a capture in global mode is under way, unless
 *     the calling thread swapped its mode to relaxed
 *     (cuThreadExchangeStreamCaptureMode). An instantiated graph launched on
 *     a stream queues copies of its nodes there, after the instance's last
 *     launch. Host functions (cuLaunchHostFunc) run in stream order; user
 *     objects retained by a graph are released, and their destructors run on
 *     a thread of their own, once the graph and its instances are destroyed
 *     and their launches have ended; a host function or a destructor that
 *     makes a CUDA call aborts the process (the driver refuses it);
 *   - FAKECUDA_NO_MEMOPS=1 refuses cuStreamWaitValue32 (not supported), so
 *     the library's fallback kernel runs; FAKECUDA_NO_DEVICE=1 fails cuInit;
 *     FAKECUDA_IPC_REFUSE=1 (read at each call, so a forked rank may set it
 *     alone) makes cuIpcOpenMemHandle fail as between GPUs without peer
 *     access.
 * Only the functions Loom and its tools call exist; the types are those of
 * src/cuda/cudalib.h.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "cudalib.h"
#include "interp.h"
#include "kernels.h"
#include "reduce.h"

#define EXPORT __attribute__((visibility("default")))
#define FAKE_MAX_DEVICES 8
#define FAKE_ERROR_INVALID_CONTEXT 201
#define FAKE_ERROR_PEER_ACCESS_UNSUPPORTED 217
#define FAKE_ERROR_NOT_FOUND 500
#define FAKE_ERROR_ILLEGAL_ADDRESS 700
#define FAKE_ERROR_NOT_SUPPORTED 801
#define FAKE_ERROR_CAPTURE_UNSUPPORTED 900
#define FAKE_ERROR_CAPTURE_INVALIDATED 901
#define FAKE_ERROR_UNKNOWN 999
#define FAKE_FATBIN_MAGIC 0xba55ed50u

/* ---- memory ---- */

enum rangeKind { RANGE_DEVICE, RANGE_IPC, RANGE_HOST };

struct range {
    struct range *next;
    enum rangeKind kind;
    char *addr;   /* what the library sees */
    char *shadow; /* where the fake reads and writes (== addr for host ranges) */
    size_t bytes;
    int fd;
    int device;
    int ownsHost; /* cuMemHostAlloc'ed */
};

struct ipcHandle {
    int32_t pid;
    int32_t fd;
    uint64_t bytes;
};

static pthread_mutex_t memLock = PTHREAD_MUTEX_INITIALIZER;
static struct range *ranges;

static struct range *rangeFind(const void *p)
{
    for (struct range *r = ranges; r; r = r->next)
        if ((const char *)p >= r->addr && (const char *)p < r->addr + r->bytes)
            return r;
    return NULL;
}

/* Where the fake may access [p, p+bytes): NULL if not allowed (kernel: device or registered). */
static char *translate(const void *p, size_t bytes, int kernel)
{
    if (p == NULL)
        return NULL;
    pthread_mutex_lock(&memLock);
    struct range *r = rangeFind(p);
    char *out = NULL;
    if (r && (const char *)p + bytes <= r->addr + r->bytes)
        out = r->shadow + ((const char *)p - r->addr);
    else if (r == NULL && !kernel)
        out = (char *)p; /* pageable host memory: copies may use it */
    pthread_mutex_unlock(&memLock);
    return out;
}

static void rangeAdd(struct range *r)
{
    pthread_mutex_lock(&memLock);
    r->next = ranges;
    ranges = r;
    pthread_mutex_unlock(&memLock);
}

static struct range *rangeRemove(const void *addr)
{
    pthread_mutex_lock(&memLock);
    struct range **pp = &ranges;
    while (*pp && (*pp)->addr != addr)
        pp = &(*pp)->next;
    struct range *r = *pp;
    if (r)
        *pp = r->next;
    pthread_mutex_unlock(&memLock);
    return r;
}

/* ---- contexts ---- */

struct cuCtxOpaque {
    int device;
};

static struct cuCtxOpaque contexts[FAKE_MAX_DEVICES];
static __thread cuContext_t current;
static int deviceCount = 1;
static unsigned delayUs;
static int noMemops;

/*
 * Host functions (cuLaunchHostFunc) and user objects' destructors may make no
 * CUDA call: the driver refuses it (CUDA_ERROR_NOT_PERMITTED) or deadlocks.
 * Here such a call aborts the process, so a test sees it.
 */
static __thread int inHostFn;
#define NOT_IN_HOST_FN()                                                                           \
    do {                                                                                           \
        if (inHostFn) {                                                                            \
            fprintf(stderr, "fakecuda: %s called from a host function or a destructor\n",          \
                    __func__);                                                                     \
            abort();                                                                               \
        }                                                                                          \
    } while (0)

static int envInt(const char *name, int fallback)
{
    const char *v = getenv(name);
    return v && *v ? atoi(v) : fallback;
}

EXPORT cuResult_t cuInit(unsigned int flags)
{
    (void)flags;
    if (envInt("FAKECUDA_NO_DEVICE", 0))
        return CUL_ERROR_NO_DEVICE;
    deviceCount = envInt("FAKECUDA_DEVICES", 1);
    if (deviceCount < 1 || deviceCount > FAKE_MAX_DEVICES)
        deviceCount = 1;
    delayUs = (unsigned)envInt("FAKECUDA_DELAY_US", 0);
    noMemops = envInt("FAKECUDA_NO_MEMOPS", 0);
    for (int i = 0; i < FAKE_MAX_DEVICES; i++)
        contexts[i].device = i;
    return CUL_SUCCESS;
}

EXPORT cuResult_t cuGetErrorString(cuResult_t res, const char **str)
{
    NOT_IN_HOST_FN();
    *str = res == CUL_SUCCESS ? "no error" : "fake CUDA error";
    return CUL_SUCCESS;
}

EXPORT cuResult_t cuDeviceGetCount(int *count)
{
    *count = deviceCount;
    return CUL_SUCCESS;
}

EXPORT cuResult_t cuDeviceGet(cuDevice_t *dev, int ordinal)
{
    if (ordinal < 0 || ordinal >= deviceCount)
        return CUL_ERROR_INVALID_VALUE;
    *dev = ordinal;
    return CUL_SUCCESS;
}

EXPORT cuResult_t cuDeviceGetAttribute(int *value, int attr, cuDevice_t dev)
{
    (void)dev;
    *value = attr == CUL_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT ? 4 : 1;
    if (attr == CUL_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR)
        *value = 9;
    if (attr == CUL_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR)
        *value = 0;
    return CUL_SUCCESS;
}

EXPORT cuResult_t cuDeviceGetUuid_v2(cuUuid_t *uuid, cuDevice_t dev)
{
    memset(uuid->bytes, 0x5a, sizeof(uuid->bytes));
    uuid->bytes[0] = (char)dev;
    return CUL_SUCCESS;
}

EXPORT cuResult_t cuDeviceCanAccessPeer(int *can, cuDevice_t dev, cuDevice_t peer)
{
    *can = dev != peer;
    return CUL_SUCCESS;
}

EXPORT cuResult_t cuDevicePrimaryCtxRetain(cuContext_t *ctx, cuDevice_t dev)
{
    if (dev < 0 || dev >= deviceCount)
        return CUL_ERROR_INVALID_VALUE;
    *ctx = &contexts[dev];
    return CUL_SUCCESS;
}

EXPORT cuResult_t cuDevicePrimaryCtxRelease_v2(cuDevice_t dev)
{
    (void)dev;
    return CUL_SUCCESS;
}

EXPORT cuResult_t cuCtxGetCurrent(cuContext_t *ctx)
{
    NOT_IN_HOST_FN();
    *ctx = current;
    return CUL_SUCCESS;
}

EXPORT cuResult_t cuCtxSetCurrent(cuContext_t ctx)
{
    NOT_IN_HOST_FN();
    current = ctx;
    return CUL_SUCCESS;
}

EXPORT cuResult_t cuCtxGetDevice(cuDevice_t *dev)
{
    if (current == NULL)
        return FAKE_ERROR_INVALID_CONTEXT;
    *dev = current->device;
    return CUL_SUCCESS;
}

EXPORT cuResult_t cuCtxGetStreamPriorityRange(int *least, int *greatest)
{
    *least = 0;
    *greatest = -1;
    return CUL_SUCCESS;
}

EXPORT cuResult_t cuPointerGetAttribute(void *data, int attr, cuDevPtr_t ptr)
{
    pthread_mutex_lock(&memLock);
    struct range *r = rangeFind((const void *)(uintptr_t)ptr);
    enum rangeKind kind = r ? r->kind : RANGE_HOST;
    int device = r ? r->device : 0;
    pthread_mutex_unlock(&memLock);
    if (r == NULL)
        return CUL_ERROR_INVALID_VALUE; /* as the driver says of plain host memory */
    switch (attr) {
    case CUL_POINTER_ATTRIBUTE_MEMORY_TYPE:
        *(unsigned int *)data = kind == RANGE_HOST ? CUL_MEMORYTYPE_HOST : CUL_MEMORYTYPE_DEVICE;
        return CUL_SUCCESS;
    case CUL_POINTER_ATTRIBUTE_CONTEXT:
        *(cuContext_t *)data = &contexts[device];
        return CUL_SUCCESS;
    case CUL_POINTER_ATTRIBUTE_DEVICE_ORDINAL:
        *(int *)data = device;
        return CUL_SUCCESS;
    default:
        return CUL_ERROR_INVALID_VALUE;
    }
}

/* Maps fd twice: inaccessible for the library, read-write for the fake. */
static cuResult_t mapDevice(int fd, size_t bytes, enum rangeKind kind, cuDevPtr_t *out)
{
    struct range *r = calloc(1, sizeof(*r));
    if (r == NULL)
        return CUL_ERROR_INVALID_VALUE;
    r->addr = mmap(NULL, bytes, PROT_NONE, MAP_SHARED, fd, 0);
    r->shadow = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (r->addr == MAP_FAILED || r->shadow == MAP_FAILED) {
        free(r);
        return CUL_ERROR_INVALID_VALUE;
    }
    r->bytes = bytes;
    r->fd = fd;
    r->kind = kind;
    r->device = current ? current->device : 0;
    rangeAdd(r);
    *out = (cuDevPtr_t)(uintptr_t)r->addr;
    return CUL_SUCCESS;
}

static int captureForbids(void);

EXPORT cuResult_t cuMemAlloc_v2(cuDevPtr_t *ptr, size_t bytes)
{
    NOT_IN_HOST_FN();
    if (current == NULL)
        return FAKE_ERROR_INVALID_CONTEXT;
    if (captureForbids())
        return FAKE_ERROR_CAPTURE_UNSUPPORTED;
    int fd = memfd_create("fakecuda", MFD_CLOEXEC);
    if (fd < 0 || ftruncate(fd, (off_t)bytes) != 0)
        return CUL_ERROR_INVALID_VALUE;
    return mapDevice(fd, bytes, RANGE_DEVICE, ptr);
}

static void rangeFree(struct range *r)
{
    if (r->kind != RANGE_HOST) {
        munmap(r->addr, r->bytes);
        munmap(r->shadow, r->bytes);
        close(r->fd);
    } else if (r->ownsHost) {
        free(r->addr);
    }
    free(r);
}

EXPORT cuResult_t cuMemFree_v2(cuDevPtr_t ptr)
{
    NOT_IN_HOST_FN();
    struct range *r = rangeRemove((void *)(uintptr_t)ptr);
    if (r == NULL || r->kind != RANGE_DEVICE)
        return CUL_ERROR_INVALID_VALUE;
    rangeFree(r);
    return CUL_SUCCESS;
}

EXPORT cuResult_t cuMemHostRegister_v2(void *p, size_t bytes, unsigned int flags)
{
    (void)flags;
    if (captureForbids())
        return FAKE_ERROR_CAPTURE_UNSUPPORTED;
    pthread_mutex_lock(&memLock);
    for (struct range *r = ranges; r; r = r->next) {
        if ((char *)p < r->addr + r->bytes && r->addr < (char *)p + bytes) {
            pthread_mutex_unlock(&memLock);
            return CUL_ERROR_HOST_MEMORY_ALREADY_REGISTERED;
        }
    }
    pthread_mutex_unlock(&memLock);
    struct range *r = calloc(1, sizeof(*r));
    if (r == NULL)
        return CUL_ERROR_INVALID_VALUE;
    r->kind = RANGE_HOST;
    r->addr = r->shadow = p;
    r->bytes = bytes;
    r->fd = -1;
    rangeAdd(r);
    return CUL_SUCCESS;
}

EXPORT cuResult_t cuMemHostUnregister(void *p)
{
    struct range *r = rangeRemove(p);
    if (r == NULL || r->kind != RANGE_HOST)
        return CUL_ERROR_INVALID_VALUE;
    rangeFree(r);
    return CUL_SUCCESS;
}

EXPORT cuResult_t cuMemHostAlloc(void **p, size_t bytes, unsigned int flags)
{
    NOT_IN_HOST_FN();
    void *mem = NULL;
    if (posix_memalign(&mem, 4096, bytes) != 0)
        return CUL_ERROR_INVALID_VALUE;
    memset(mem, 0, bytes);
    cuResult_t r = cuMemHostRegister_v2(mem, bytes, flags);
    if (r != CUL_SUCCESS) {
        free(mem);
        return r;
    }
    pthread_mutex_lock(&memLock);
    rangeFind(mem)->ownsHost = 1;
    pthread_mutex_unlock(&memLock);
    *p = mem;
    return CUL_SUCCESS;
}

EXPORT cuResult_t cuMemFreeHost(void *p)
{
    return cuMemHostUnregister(p);
}

EXPORT cuResult_t cuMemHostGetDevicePointer_v2(cuDevPtr_t *d, void *p, unsigned int flags)
{
    (void)flags;
    pthread_mutex_lock(&memLock);
    struct range *r = rangeFind(p);
    int ok = r && r->kind == RANGE_HOST;
    pthread_mutex_unlock(&memLock);
    if (!ok)
        return CUL_ERROR_INVALID_VALUE;
    *d = (cuDevPtr_t)(uintptr_t)p;
    return CUL_SUCCESS;
}

EXPORT cuResult_t cuIpcGetMemHandle(cuIpcHandle_t *h, cuDevPtr_t ptr)
{
    pthread_mutex_lock(&memLock);
    struct range *r = rangeFind((void *)(uintptr_t)ptr);
    struct ipcHandle ih = {0, 0, 0};
    int ok = r && r->kind == RANGE_DEVICE && r->addr == (char *)(uintptr_t)ptr;
    if (ok)
        ih = (struct ipcHandle){(int32_t)getpid(), r->fd, r->bytes};
    pthread_mutex_unlock(&memLock);
    if (!ok)
        return CUL_ERROR_INVALID_VALUE;
    memset(h, 0, sizeof(*h));
    memcpy(h->reserved, &ih, sizeof(ih));
    return CUL_SUCCESS;
}

EXPORT cuResult_t cuIpcOpenMemHandle_v2(cuDevPtr_t *ptr, cuIpcHandle_t h, unsigned int flags)
{
    struct ipcHandle ih;
    char path[64];
    (void)flags;
    memcpy(&ih, h.reserved, sizeof(ih));
    if (envInt("FAKECUDA_IPC_REFUSE", 0))
        return FAKE_ERROR_PEER_ACCESS_UNSUPPORTED;
    if (ih.pid == getpid())
        return FAKE_ERROR_INVALID_CONTEXT; /* the driver refuses the exporting process too */
    snprintf(path, sizeof(path), "/proc/%d/fd/%d", (int)ih.pid, (int)ih.fd);
    int fd = open(path, O_RDWR | O_CLOEXEC);
    if (fd < 0)
        return CUL_ERROR_INVALID_VALUE;
    return mapDevice(fd, ih.bytes, RANGE_IPC, ptr);
}

EXPORT cuResult_t cuIpcCloseMemHandle(cuDevPtr_t ptr)
{
    struct range *r = rangeRemove((void *)(uintptr_t)ptr);
    if (r == NULL || r->kind != RANGE_IPC)
        return CUL_ERROR_INVALID_VALUE;
    rangeFree(r);
    return CUL_SUCCESS;
}

/* ---- streams, events, kernels ---- */

enum cmdKind {
    CMD_COPY,
    CMD_REDUCE,
    CMD_WAIT_FLAG,
    CMD_WAIT_EVENT,
    CMD_WAIT_VALUE,
    CMD_INTERPRET,
    CMD_HOST
};

struct cuStreamOpaque;

struct cuEventOpaque {
    struct cuStreamOpaque *stream; /* last recorded on, NULL if never */
    uint64_t ticket;               /* complete when stream->done >= ticket */
};

struct cmd {
    struct cmd *next;
    enum cmdKind kind;
    char *dst;
    const char *src;
    size_t bytes;
    struct loomReduceArgs args; /* pointers already translated */
    loomDataType_t dt;
    loomRedOp_t op;
    const volatile uint32_t *flag;
    uint32_t value;
    struct cuEventOpaque event;     /* CMD_WAIT_EVENT: a copy taken at enqueue */
    struct loomDevBlock *blocks;    /* CMD_INTERPRET: nblocks blocks of nthreads */
    unsigned int nblocks, nthreads; /* CMD_REDUCE: nthreads of the grid, in all */
    cuHostFn_t fn;                  /* CMD_HOST: fn(userData) */
    void *userData;
};

/* A user object: destroy(ptr) once its last reference is released. */
struct cuUserObjectOpaque {
    void *ptr;
    cuHostFn_t destroy;
    _Atomic int refs;
};

/* A graph (captured or instantiated): its nodes in order and the user objects it holds. */
struct cuGraphOpaque {
    struct cmd *head, *tail;
    struct cuUserObjectOpaque **objs;
    unsigned int *objRefs;
    int nobjs;
    struct cuStreamOpaque *lastStream; /* instances: launched last on, up to ticket */
    uint64_t lastTicket;
};

struct cuStreamOpaque {
    cuContext_t ctx;
    pthread_mutex_t lock;
    pthread_cond_t cond;
    struct cmd *head, *tail;
    uint64_t enqueued, done;
    int stop;
    int capturing, invalidated;  /* cuStreamBeginCapture: commands go to the graph, never run */
    int captured;                /* commands in the graph being captured */
    int captureGlobal;           /* the capture's mode is global */
    struct cuGraphOpaque *graph; /* the graph being captured */
    pthread_t thread;
    struct cuStreamOpaque *nextOfAll;
};

struct cuModuleOpaque {
    const void *image;
};

struct cuFunctionOpaque {
    int wait;      /* loomWaitFlag */
    int interpret; /* loomInterpret */
    loomDataType_t dt;
    loomRedOp_t op;
};

static pthread_mutex_t streamsLock = PTHREAD_MUTEX_INITIALIZER;
static struct cuStreamOpaque *allStreams;
static struct cuStreamOpaque *legacy[FAKE_MAX_DEVICES];

static uint64_t streamDone(struct cuStreamOpaque *s)
{
    pthread_mutex_lock(&s->lock);
    uint64_t d = s->done;
    pthread_mutex_unlock(&s->lock);
    return d;
}

static void pause1us(void)
{
    struct timespec ts = {0, 1000};
    nanosleep(&ts, NULL);
}

/* ---- the plan interpreter, run on the CPU ---- */

static _Atomic int interpretLaunches, interpretThreads, fifosOnDevice, fifosOnHost;
static _Atomic int descriptorsOnDevice, descriptorsOnHost;

/* Not driver functions: launches of loomInterpret so far, and its threads alive now (tests find
 * them with dlsym). */
EXPORT int fakecudaInterpretLaunches(void)
{
    return atomic_load(&interpretLaunches);
}

EXPORT int fakecudaInterpretThreads(void)
{
    return atomic_load(&interpretThreads);
}

/* Not driver functions: the connected FIFOs that launches of loomInterpret used so far, by where
 * their tail counter lives (GPU memory, or registered host memory). */
EXPORT int fakecudaFifosOnDevice(void)
{
    return atomic_load(&fifosOnDevice);
}

EXPORT int fakecudaFifosOnHost(void)
{
    return atomic_load(&fifosOnHost);
}

/* Not driver functions: launches so far whose descriptor (blocks, lanes, plans, connector views,
 * staging, and the positions of device FIFOs) was all in GPU memory, or not. */
EXPORT int fakecudaDescriptorsOnDevice(void)
{
    return atomic_load(&descriptorsOnDevice);
}

EXPORT int fakecudaDescriptorsOnHost(void)
{
    return atomic_load(&descriptorsOnHost);
}

/* port.h's host back-off, as the device's: the fake's threads sleep a little; nothing rings. */
__attribute__((visibility("hidden"))) void kexecIdle(void *ctx, uint32_t spins)
{
    (void)ctx;
    if (spins < 64) {
        sched_yield();
    } else {
        struct timespec ts = {0, 20000};
        nanosleep(&ts, NULL);
    }
}

__attribute__((visibility("hidden"))) void kexecNotify(void *bell)
{
    (void)bell;
}

struct interpThread {
    pthread_t thread;
    struct loomDevBlock *block;
    struct loomPortThread t;
};

static void *interpMain(void *arg)
{
    struct interpThread *it = arg;
    loomDevRun(it->block, &it->t);
    atomic_fetch_sub(&interpretThreads, 1);
    return NULL;
}

/* 1 if the kernel may touch [p, p + bytes): device memory or registered host memory. */
static int reachable(const void *p, size_t bytes)
{
    return p == NULL || translate(p, bytes ? bytes : 1, 1) != NULL;
}

/* A buffer of a lane: the device address <-> the fake's view (toView), when it is device memory. */
static void bufsSwap(char **buf, int toView)
{
    pthread_mutex_lock(&memLock);
    for (struct range *r = ranges; r && *buf; r = r->next) {
        const char *from = toView ? r->addr : r->shadow, *to = toView ? r->shadow : r->addr;
        if (r->kind != RANGE_HOST && *buf >= from && *buf < from + r->bytes) {
            *buf = (char *)to + (*buf - from);
            break;
        }
    }
    pthread_mutex_unlock(&memLock);
}

/* The fake's view of a kernel's pointer p (device memory: its shadow; host memory: p). */
static void *viewOf(const void *p)
{
    char *v = (char *)p;
    bufsSwap(&v, 1);
    return v;
}

static void *fakeAlloc(size_t n, size_t size)
{
    void *p = calloc(n ? n : 1, size);
    if (p == NULL) {
        fprintf(stderr, "fakecuda: out of memory running loomInterpret\n");
        abort();
    }
    return p;
}

/* 1 if p is in GPU memory (NULL counts as such: nothing there). */
static int onDevice(const void *p)
{
    pthread_mutex_lock(&memLock);
    struct range *r = p ? rangeFind(p) : NULL;
    int dev = p == NULL || (r && r->kind != RANGE_HOST);
    pthread_mutex_unlock(&memLock);
    return dev;
}

/* A launch whose descriptor names memory the GPU cannot reach: a GPU would fault. */
static void illegalAddress(const char *what)
{
    fprintf(stderr,
            "fakecuda: loomInterpret reached %s at an address the GPU cannot reach (an "
            "illegal address on a GPU)\n",
            what);
    abort();
}

/*
 * A lane's connector views (the kernel's array of 2 x nranks), with every
 * FIFO address and position turned into the fake's view, after checking
 * that the kernel may reach each; counts the FIFOs by where their tail
 * lives. The copy is the caller's to free.
 */
static struct loomDevConn *connsView(const struct loomDevConn *conns, int nranks, int *dev)
{
    size_t n = 2 * (size_t)nranks;
    struct loomDevConn *v = fakeAlloc(n, sizeof(*v));
    if (!reachable(conns, n * sizeof(*conns)))
        illegalAddress("the connectors");
    memcpy(v, viewOf(conns), n * sizeof(*v));
    *dev &= onDevice(conns);
    for (size_t p = 0; p < n; p++) {
        struct loomDevConn *c = &v[p];
        if (c->tail == NULL)
            continue;
        if (c->bell != NULL || !reachable(c->tail, 8) || !reachable(c->head, 8) ||
            !reachable(c->bytes, LOOM_STEPS * 8) || !reachable(c->pos, 8) ||
            !reachable(c->slots, LOOM_STEPS * c->slotBytes) ||
            !reachable(c->ll, LOOM_STEPS * LOOM_LL_LINES * 8))
            illegalAddress("a FIFO");
        int fifoDev = onDevice(c->tail);
        atomic_fetch_add(fifoDev ? &fifosOnDevice : &fifosOnHost, 1);
        *dev &= !fifoDev || onDevice(c->pos);
        c->tail = viewOf(c->tail);
        c->head = viewOf(c->head);
        c->bytes = viewOf(c->bytes);
        c->slots = viewOf(c->slots);
        c->ll = viewOf(c->ll);
        c->pos = viewOf(c->pos);
    }
    return v;
}

/*
 * The fake's copy of a launch's blocks and their lanes (lanes[b]: block
 * b's), read from the kernel's descriptor (GPU or registered host memory)
 * when the launch runs, every address in it checked and turned into the
 * fake's view.
 */
static struct loomDevBlock *descriptorView(const struct loomDevBlock *blocks, unsigned int nblocks,
                                           struct loomDevLane **lanes)
{
    struct loomDevBlock *v = fakeAlloc(nblocks, sizeof(*v));
    if (!reachable(blocks, nblocks * sizeof(*blocks)))
        illegalAddress("its blocks");
    memcpy(v, viewOf(blocks), nblocks * sizeof(*v));
    int dev = onDevice(blocks);
    for (unsigned int b = 0; b < nblocks; b++) {
        struct loomDevBlock *d = &v[b];
        dev &= onDevice(d->lanes) && onDevice(d->owner) && onDevice(d->stage);
        if (!reachable(d->lanes, d->nlanes * sizeof(*d->lanes)) || d->abort == NULL ||
            !reachable(d->abort, 4) || !reachable(d->stage, LOOM_DEV_STAGE_BYTES) ||
            !reachable(d->owner, 2 * (size_t)d->nranks * sizeof(int32_t)) || !reachable(d->beat, 8))
            illegalAddress("a block");
        lanes[b] = fakeAlloc(d->nlanes, sizeof(*lanes[b]));
        memcpy(lanes[b], viewOf(d->lanes), d->nlanes * sizeof(*lanes[b]));
        for (uint32_t i = 0; i < d->nlanes; i++) {
            struct loomDevLane *l = &lanes[b][i];
            if (!reachable(l->steps, l->nsteps * sizeof(*l->steps)) ||
                l->recv != l->send + l->nranks)
                illegalAddress("a lane");
            dev &= onDevice(l->steps);
            l->steps = viewOf(l->steps);
            for (int k = 0; k < 2; k++)
                bufsSwap(&l->bufs[k], 1);
            l->send = connsView(l->send, l->nranks, &dev);
            l->recv = l->send + l->nranks;
        }
        d->lanes = lanes[b];
        d->abort = viewOf(d->abort);
        d->stage = viewOf(d->stage);
        d->owner = viewOf(d->owner);
        d->beat = viewOf(d->beat);
    }
    atomic_fetch_add(dev ? &descriptorsOnDevice : &descriptorsOnHost, 1);
    return v;
}

/*
 * Writes back what the kernel leaves in its descriptor (each block's status
 * and error record, each lane's state), keeping the descriptor's own
 * addresses; frees the fake's copy.
 */
static void descriptorStore(struct loomDevBlock *blocks, unsigned int nblocks,
                            struct loomDevBlock *v, struct loomDevLane **lanes)
{
    struct loomDevBlock *out = viewOf(blocks);
    for (unsigned int b = 0; b < nblocks; b++) {
        struct loomDevLane *outLanes = viewOf(out[b].lanes);
        for (uint32_t i = 0; i < v[b].nlanes; i++) {
            struct loomDevLane l = lanes[b][i];
            free(l.send);
            l.steps = outLanes[i].steps;
            l.send = outLanes[i].send;
            l.recv = outLanes[i].recv;
            l.bufs[0] = outLanes[i].bufs[0];
            l.bufs[1] = outLanes[i].bufs[1];
            outLanes[i] = l;
        }
        struct loomDevBlock d = v[b];
        d.lanes = out[b].lanes;
        d.abort = out[b].abort;
        d.stage = out[b].stage;
        d.owner = out[b].owner;
        d.beat = out[b].beat;
        out[b] = d;
        free(lanes[b]);
    }
    free(v);
}

/*
 * Runs a launch: nthreads pthreads per block, each running the interpreter
 * as a GPU thread would, on the fake's copy of the descriptor (whose
 * addresses are the fake's views of device memory, which the CPU cannot
 * touch at the addresses the library holds).
 */
static void interpretRun(struct loomDevBlock *blocks, unsigned int nblocks, unsigned int nthreads)
{
    struct interpThread *th = fakeAlloc((size_t)nblocks * nthreads, sizeof(*th));
    struct loomPortBarrier *bars = fakeAlloc(nblocks, sizeof(*bars));
    struct loomDevLane **lanes = fakeAlloc(nblocks, sizeof(*lanes));
    struct loomDevBlock *v = descriptorView(blocks, nblocks, lanes);
    atomic_fetch_add(&interpretThreads, (int)(nblocks * nthreads));
    for (unsigned int b = 0; b < nblocks; b++) {
        for (unsigned int t = 0; t < nthreads; t++) {
            struct interpThread *it = &th[b * nthreads + t];
            it->block = &v[b];
            it->t = (struct loomPortThread){t, nthreads, &bars[b], 0};
            if (pthread_create(&it->thread, NULL, interpMain, it) != 0) {
                fprintf(stderr, "fakecuda: cannot start a thread of loomInterpret\n");
                abort();
            }
        }
    }
    for (unsigned int i = 0; i < nblocks * nthreads; i++)
        pthread_join(th[i].thread, NULL);
    descriptorStore(blocks, nblocks, v, lanes);
    free(lanes);
    free(th);
    free(bars);
}

static void cmdRun(struct cmd *c)
{
    if (delayUs)
        usleep((useconds_t)(rand() % (delayUs + 1)));
    switch (c->kind) {
    case CMD_COPY:
        memmove(c->dst, c->src, c->bytes);
        break;
    case CMD_REDUCE: {
        /* What the kernel's threads run (kernels.cu), one after another. */
        const struct loomReduceArgs *a = &c->args;
        char *o[2] = {a->out0, a->out1};
        loomDevKernel_t f = loomDevKernelOf(c->dt, c->op);
        int post = a->final && c->op == loomAvg;
        for (uint64_t t = 0; t < c->nthreads; t++)
            loomDevReduceShare(f, reduceTypeSize(c->dt), o, a->out1 ? 2 : 1, a->a, a->b, a->count,
                               post, a->nranks, t, c->nthreads);
        break;
    }
    case CMD_WAIT_FLAG:
    case CMD_WAIT_VALUE:
        while ((int32_t)(atomic_load((_Atomic uint32_t *)c->flag) - c->value) < 0)
            pause1us();
        break;
    case CMD_WAIT_EVENT:
        while (c->event.stream && streamDone(c->event.stream) < c->event.ticket)
            pause1us();
        break;
    case CMD_INTERPRET:
        interpretRun(c->blocks, c->nblocks, c->nthreads);
        break;
    case CMD_HOST:
        inHostFn = 1;
        c->fn(c->userData);
        inHostFn = 0;
        break;
    }
}

static void *streamWorker(void *arg)
{
    struct cuStreamOpaque *s = arg;
    pthread_mutex_lock(&s->lock);
    for (;;) {
        while (s->head == NULL && !s->stop)
            pthread_cond_wait(&s->cond, &s->lock);
        if (s->head == NULL)
            break;
        struct cmd *c = s->head;
        pthread_mutex_unlock(&s->lock);
        cmdRun(c);
        pthread_mutex_lock(&s->lock);
        s->head = c->next;
        if (s->head == NULL)
            s->tail = NULL;
        s->done++;
        free(c);
        pthread_cond_broadcast(&s->cond);
    }
    pthread_mutex_unlock(&s->lock);
    return NULL;
}

static struct cuStreamOpaque *streamNew(cuContext_t ctx)
{
    struct cuStreamOpaque *s = calloc(1, sizeof(*s));
    if (s == NULL)
        return NULL;
    s->ctx = ctx;
    pthread_mutex_init(&s->lock, NULL);
    pthread_cond_init(&s->cond, NULL);
    if (pthread_create(&s->thread, NULL, streamWorker, s) != 0) {
        free(s);
        return NULL;
    }
    pthread_mutex_lock(&streamsLock);
    s->nextOfAll = allStreams;
    allStreams = s;
    pthread_mutex_unlock(&streamsLock);
    return s;
}

/* NULL and the legacy / per-thread handles are one default stream per context. */
static struct cuStreamOpaque *streamOf(cuStream_t h)
{
    if ((uintptr_t)h > 2)
        return h;
    int dev = current ? current->device : 0;
    pthread_mutex_lock(&streamsLock);
    struct cuStreamOpaque *s = legacy[dev];
    pthread_mutex_unlock(&streamsLock);
    if (s == NULL) {
        s = streamNew(&contexts[dev]);
        pthread_mutex_lock(&streamsLock);
        if (legacy[dev] == NULL)
            legacy[dev] = s;
        s = legacy[dev];
        pthread_mutex_unlock(&streamsLock);
    }
    return s;
}

static cuResult_t enqueue(cuStream_t h, struct cmd *c)
{
    struct cuStreamOpaque *s = streamOf(h);
    if (s == NULL) {
        free(c);
        return CUL_ERROR_INVALID_VALUE;
    }
    c->next = NULL;
    pthread_mutex_lock(&s->lock);
    if (s->capturing) { /* a node of the graph: run when the graph is launched */
        s->captured++;
        if (s->graph->tail)
            s->graph->tail->next = c;
        else
            s->graph->head = c;
        s->graph->tail = c;
        pthread_mutex_unlock(&s->lock);
        return CUL_SUCCESS;
    }
    if (s->tail)
        s->tail->next = c;
    else
        s->head = c;
    s->tail = c;
    s->enqueued++;
    pthread_cond_broadcast(&s->cond);
    pthread_mutex_unlock(&s->lock);
    return CUL_SUCCESS;
}

static void streamDrain(struct cuStreamOpaque *s)
{
    pthread_mutex_lock(&s->lock);
    while (s->done < s->enqueued)
        pthread_cond_wait(&s->cond, &s->lock);
    pthread_mutex_unlock(&s->lock);
}

EXPORT cuResult_t cuStreamCreateWithPriority(cuStream_t *s, unsigned int flags, int priority)
{
    (void)flags, (void)priority;
    if (current == NULL)
        return FAKE_ERROR_INVALID_CONTEXT;
    *s = streamNew(current);
    return *s ? CUL_SUCCESS : CUL_ERROR_INVALID_VALUE;
}

EXPORT cuResult_t cuStreamCreate(cuStream_t *s, unsigned int flags)
{
    return cuStreamCreateWithPriority(s, flags, 0);
}

EXPORT cuResult_t cuStreamDestroy_v2(cuStream_t h)
{
    struct cuStreamOpaque *s = h;
    streamDrain(s);
    pthread_mutex_lock(&s->lock);
    s->stop = 1;
    pthread_cond_broadcast(&s->cond);
    pthread_mutex_unlock(&s->lock);
    pthread_join(s->thread, NULL);
    pthread_mutex_lock(&streamsLock);
    struct cuStreamOpaque **pp = &allStreams;
    while (*pp && *pp != s)
        pp = &(*pp)->nextOfAll;
    if (*pp)
        *pp = s->nextOfAll;
    pthread_mutex_unlock(&streamsLock);
    free(s); /* a wait on one of its events that was already queued keeps only a copy */
    return CUL_SUCCESS;
}

/* A call the driver refuses on a stream being captured: it also invalidates the capture. */
static int captureBroken(struct cuStreamOpaque *s)
{
    pthread_mutex_lock(&s->lock);
    int capturing = s->capturing;
    s->invalidated |= capturing;
    pthread_mutex_unlock(&s->lock);
    return capturing;
}

EXPORT cuResult_t cuStreamSynchronize(cuStream_t h)
{
    NOT_IN_HOST_FN();
    if (streamOf(h) && captureBroken(streamOf(h)))
        return FAKE_ERROR_CAPTURE_UNSUPPORTED;
    streamDrain(streamOf(h));
    return CUL_SUCCESS;
}

/*
 * Capture (cuStreamBeginCapture ... cuStreamEndCapture): commands queued on
 * the stream meanwhile become the graph's nodes and are not run; a
 * synchronisation or query of the stream fails and invalidates the capture,
 * as the driver does.
 */
static int lastCapture = -1;
static _Atomic int globalCaptures;  /* captures under way in global mode */
static __thread int threadMode = 0; /* this thread's capture mode: 0 global, 2 relaxed */

static void graphFree(struct cuGraphOpaque *g);

/*
 * 1 if an allocation on this thread is refused: a capture in global mode is
 * under way and the thread did not swap its mode to relaxed. The captures
 * are invalidated, as the driver does.
 */
static int captureForbids(void)
{
    if (atomic_load(&globalCaptures) == 0 || threadMode == 2)
        return 0;
    pthread_mutex_lock(&streamsLock);
    for (struct cuStreamOpaque *s = allStreams; s; s = s->nextOfAll) {
        pthread_mutex_lock(&s->lock);
        s->invalidated |= s->capturing && s->captureGlobal;
        pthread_mutex_unlock(&s->lock);
    }
    pthread_mutex_unlock(&streamsLock);
    return 1;
}

EXPORT cuResult_t cuThreadExchangeStreamCaptureMode(int *mode)
{
    int was = threadMode;
    threadMode = *mode;
    *mode = was;
    return CUL_SUCCESS;
}

EXPORT cuResult_t cuStreamBeginCapture_v2(cuStream_t h, int mode)
{
    struct cuStreamOpaque *s = streamOf(h);
    struct cuGraphOpaque *g = calloc(1, sizeof(*g));
    if (s == NULL || g == NULL) {
        free(g);
        return CUL_ERROR_INVALID_VALUE;
    }
    pthread_mutex_lock(&s->lock);
    s->capturing = 1;
    s->captureGlobal = mode == 0;
    s->invalidated = s->captured = 0;
    s->graph = g;
    pthread_mutex_unlock(&s->lock);
    if (mode == 0)
        atomic_fetch_add(&globalCaptures, 1);
    return CUL_SUCCESS;
}

EXPORT cuResult_t cuStreamEndCapture(cuStream_t h, cuGraph_t *graph)
{
    struct cuStreamOpaque *s = streamOf(h);
    if (s == NULL)
        return CUL_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&s->lock);
    int bad = !s->capturing || s->invalidated;
    struct cuGraphOpaque *g = s->graph;
    if (s->capturing && s->captureGlobal)
        atomic_fetch_sub(&globalCaptures, 1);
    s->capturing = 0;
    s->graph = NULL;
    lastCapture = s->captured;
    pthread_mutex_unlock(&s->lock);
    if (bad && g)
        graphFree(g);
    *graph = bad ? NULL : g;
    return bad ? FAKE_ERROR_CAPTURE_INVALIDATED : CUL_SUCCESS;
}

EXPORT cuResult_t cuStreamIsCapturing(cuStream_t h, int *status)
{
    NOT_IN_HOST_FN();
    struct cuStreamOpaque *s = streamOf(h);
    if (s == NULL)
        return CUL_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&s->lock);
    *status = s->capturing ? (s->invalidated ? 2 : 1) : 0;
    pthread_mutex_unlock(&s->lock);
    return CUL_SUCCESS;
}

EXPORT cuResult_t cuStreamGetCaptureInfo_v2(cuStream_t h, int *status, uint64_t *id,
                                            cuGraph_t *graph, const void **deps, size_t *ndeps)
{
    NOT_IN_HOST_FN();
    struct cuStreamOpaque *s = streamOf(h);
    if (s == NULL)
        return CUL_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&s->lock);
    *status = s->capturing ? (s->invalidated ? 2 : 1) : 0;
    if (id)
        *id = (uint64_t)(uintptr_t)s->graph;
    if (graph)
        *graph = s->capturing ? s->graph : NULL;
    if (deps)
        *deps = NULL;
    if (ndeps)
        *ndeps = 0;
    pthread_mutex_unlock(&s->lock);
    return CUL_SUCCESS;
}

EXPORT cuResult_t cuLaunchHostFunc(cuStream_t h, cuHostFn_t fn, void *userData)
{
    NOT_IN_HOST_FN();
    struct cmd *c = calloc(1, sizeof(*c));
    if (c == NULL || fn == NULL) {
        free(c);
        return CUL_ERROR_INVALID_VALUE;
    }
    c->kind = CMD_HOST;
    c->fn = fn;
    c->userData = userData;
    return enqueue(h, c);
}

/* ---- user objects and graphs ---- */

static void *userObjectDestroy(void *arg)
{
    struct cuUserObjectOpaque *o = arg;
    inHostFn = 1;
    o->destroy(o->ptr);
    inHostFn = 0;
    free(o);
    return NULL;
}

EXPORT cuResult_t cuUserObjectCreate(cuUserObject_t *obj, void *ptr, cuHostFn_t destroy,
                                     unsigned int refs, unsigned int flags)
{
    if (flags != CUL_USER_OBJECT_NO_DESTRUCTOR_SYNC || refs == 0 || destroy == NULL)
        return CUL_ERROR_INVALID_VALUE;
    struct cuUserObjectOpaque *o = calloc(1, sizeof(*o));
    if (o == NULL)
        return CUL_ERROR_INVALID_VALUE;
    o->ptr = ptr;
    o->destroy = destroy;
    atomic_store(&o->refs, (int)refs);
    *obj = o;
    return CUL_SUCCESS;
}

/* The destructor runs on a thread of its own, as the driver's may. */
EXPORT cuResult_t cuUserObjectRelease(cuUserObject_t obj, unsigned int refs)
{
    if (atomic_fetch_sub(&obj->refs, (int)refs) == (int)refs) {
        pthread_t t;
        if (pthread_create(&t, NULL, userObjectDestroy, obj) != 0)
            userObjectDestroy(obj);
        else
            pthread_detach(t);
    }
    return CUL_SUCCESS;
}

static cuResult_t graphHold(struct cuGraphOpaque *g, cuUserObject_t obj, unsigned int refs)
{
    struct cuUserObjectOpaque **objs = realloc(g->objs, (size_t)(g->nobjs + 1) * sizeof(*objs));
    unsigned int *objRefs = objs ? realloc(g->objRefs, (size_t)(g->nobjs + 1) * sizeof(int)) : NULL;
    if (objs)
        g->objs = objs;
    if (objRefs == NULL)
        return CUL_ERROR_INVALID_VALUE;
    g->objRefs = objRefs;
    g->objs[g->nobjs] = obj;
    g->objRefs[g->nobjs++] = refs;
    return CUL_SUCCESS;
}

EXPORT cuResult_t cuGraphRetainUserObject(cuGraph_t g, cuUserObject_t obj, unsigned int refs,
                                          unsigned int flags)
{
    if (g == NULL || obj == NULL || refs == 0 || (flags & ~CUL_GRAPH_USER_OBJECT_MOVE))
        return CUL_ERROR_INVALID_VALUE;
    if (!(flags & CUL_GRAPH_USER_OBJECT_MOVE))
        atomic_fetch_add(&obj->refs, (int)refs);
    return graphHold(g, obj, refs);
}

/* Its nodes freed and its user objects released, once its launches have ended. */
static void graphFree(struct cuGraphOpaque *g)
{
    while (g->lastStream && streamDone(g->lastStream) < g->lastTicket)
        pause1us();
    for (struct cmd *c = g->head, *next; c; c = next) {
        next = c->next;
        free(c);
    }
    for (int i = 0; i < g->nobjs; i++)
        cuUserObjectRelease(g->objs[i], g->objRefs[i]);
    free(g->objs);
    free(g->objRefs);
    free(g);
}

EXPORT cuResult_t cuGraphDestroy(cuGraph_t g)
{
    if (g == NULL)
        return CUL_ERROR_INVALID_VALUE;
    graphFree(g);
    return CUL_SUCCESS;
}

/* An instance: a copy of the graph's nodes, holding a reference to each of its user objects. */
EXPORT cuResult_t cuGraphInstantiateWithFlags(cuGraph_t *exec, cuGraph_t g,
                                              unsigned long long flags)
{
    (void)flags;
    struct cuGraphOpaque *e = calloc(1, sizeof(*e));
    if (g == NULL || e == NULL) {
        free(e);
        return CUL_ERROR_INVALID_VALUE;
    }
    for (struct cmd *c = g->head; c; c = c->next) {
        struct cmd *copy = malloc(sizeof(*copy));
        if (copy == NULL) {
            graphFree(e);
            return CUL_ERROR_INVALID_VALUE;
        }
        *copy = *c;
        copy->next = NULL;
        if (e->tail)
            e->tail->next = copy;
        else
            e->head = copy;
        e->tail = copy;
    }
    for (int i = 0; i < g->nobjs; i++) {
        atomic_fetch_add(&g->objs[i]->refs, (int)g->objRefs[i]);
        if (graphHold(e, g->objs[i], g->objRefs[i]) != CUL_SUCCESS) {
            cuUserObjectRelease(g->objs[i], g->objRefs[i]);
            graphFree(e);
            return CUL_ERROR_INVALID_VALUE;
        }
    }
    *exec = e;
    return CUL_SUCCESS;
}

/* Queues a copy of each node on the stream, in order, after the instance's last launch. */
EXPORT cuResult_t cuGraphLaunch(cuGraph_t exec, cuStream_t h)
{
    struct cuStreamOpaque *s = streamOf(h);
    if (exec == NULL || s == NULL)
        return CUL_ERROR_INVALID_VALUE;
    if (exec->lastStream && exec->lastStream != s) { /* after the instance's last launch */
        struct cmd *w = calloc(1, sizeof(*w));
        if (w == NULL)
            return CUL_ERROR_INVALID_VALUE;
        w->kind = CMD_WAIT_EVENT;
        w->event = (struct cuEventOpaque){exec->lastStream, exec->lastTicket};
        cuResult_t r = enqueue(h, w);
        if (r != CUL_SUCCESS)
            return r;
    }
    for (struct cmd *c = exec->head; c; c = c->next) {
        struct cmd *copy = malloc(sizeof(*copy));
        if (copy == NULL)
            return CUL_ERROR_INVALID_VALUE;
        *copy = *c;
        cuResult_t r = enqueue(h, copy);
        if (r != CUL_SUCCESS)
            return r;
    }
    pthread_mutex_lock(&s->lock);
    exec->lastStream = s;
    exec->lastTicket = s->enqueued;
    pthread_mutex_unlock(&s->lock);
    return CUL_SUCCESS;
}

EXPORT cuResult_t cuGraphExecDestroy(cuGraph_t exec)
{
    if (exec == NULL)
        return CUL_ERROR_INVALID_VALUE;
    graphFree(exec);
    return CUL_SUCCESS;
}

/* Not a driver function: the commands the last capture ended with (tests find it by dlsym). */
EXPORT int fakecudaLastCapture(void)
{
    return lastCapture;
}

EXPORT cuResult_t cuStreamQuery(cuStream_t h)
{
    NOT_IN_HOST_FN();
    struct cuStreamOpaque *s = streamOf(h);
    if (s && captureBroken(s))
        return FAKE_ERROR_CAPTURE_UNSUPPORTED;
    pthread_mutex_lock(&s->lock);
    int idle = s->done == s->enqueued;
    pthread_mutex_unlock(&s->lock);
    return idle ? CUL_SUCCESS : CUL_ERROR_NOT_READY;
}

EXPORT cuResult_t cuStreamGetCtx(cuStream_t h, cuContext_t *ctx)
{
    if ((uintptr_t)h > 2 && h->ctx == NULL)
        return CUL_ERROR_INVALID_VALUE;
    *ctx = (uintptr_t)h > 2 ? h->ctx : current;
    return *ctx ? CUL_SUCCESS : FAKE_ERROR_INVALID_CONTEXT;
}

EXPORT cuResult_t cuCtxSynchronize(void)
{
    NOT_IN_HOST_FN();
    pthread_mutex_lock(&streamsLock);
    int n = 0;
    struct cuStreamOpaque *list[256];
    for (struct cuStreamOpaque *s = allStreams; s && n < 256; s = s->nextOfAll)
        if (s->ctx == current)
            list[n++] = s;
    pthread_mutex_unlock(&streamsLock);
    for (int i = 0; i < n; i++)
        streamDrain(list[i]);
    return CUL_SUCCESS;
}

EXPORT cuResult_t cuStreamWaitValue32_v2(cuStream_t h, cuDevPtr_t addr, uint32_t value,
                                         unsigned int flags)
{
    if (noMemops)
        return FAKE_ERROR_NOT_SUPPORTED;
    if (flags != CUL_STREAM_WAIT_VALUE_GEQ)
        return CUL_ERROR_INVALID_VALUE;
    const char *flag = translate((const void *)(uintptr_t)addr, sizeof(uint32_t), 1);
    if (flag == NULL)
        return FAKE_ERROR_ILLEGAL_ADDRESS;
    struct cmd *c = calloc(1, sizeof(*c));
    if (c == NULL)
        return CUL_ERROR_INVALID_VALUE;
    c->kind = CMD_WAIT_VALUE;
    c->flag = (const volatile uint32_t *)flag;
    c->value = value;
    return enqueue(h, c);
}

EXPORT cuResult_t cuEventCreate(cuEvent_t *e, unsigned int flags)
{
    (void)flags;
    *e = calloc(1, sizeof(**e));
    return *e ? CUL_SUCCESS : CUL_ERROR_INVALID_VALUE;
}

EXPORT cuResult_t cuEventDestroy_v2(cuEvent_t e)
{
    free(e);
    return CUL_SUCCESS;
}

EXPORT cuResult_t cuEventRecord(cuEvent_t e, cuStream_t h)
{
    NOT_IN_HOST_FN();
    struct cuStreamOpaque *s = streamOf(h);
    pthread_mutex_lock(&s->lock);
    if (s->capturing) { /* a node of the graph: the event itself is not recorded now */
        s->captured++;
        pthread_mutex_unlock(&s->lock);
        return CUL_SUCCESS;
    }
    e->stream = s;
    e->ticket = s->enqueued;
    pthread_mutex_unlock(&s->lock);
    return CUL_SUCCESS;
}

EXPORT cuResult_t cuEventQuery(cuEvent_t e)
{
    NOT_IN_HOST_FN();
    if (e->stream == NULL || streamDone(e->stream) >= e->ticket)
        return CUL_SUCCESS;
    return CUL_ERROR_NOT_READY;
}

EXPORT cuResult_t cuEventSynchronize(cuEvent_t e)
{
    while (cuEventQuery(e) == CUL_ERROR_NOT_READY)
        pause1us();
    return CUL_SUCCESS;
}

EXPORT cuResult_t cuStreamWaitEvent(cuStream_t h, cuEvent_t e, unsigned int flags)
{
    NOT_IN_HOST_FN();
    (void)flags;
    struct cmd *c = calloc(1, sizeof(*c));
    if (c == NULL)
        return CUL_ERROR_INVALID_VALUE;
    c->kind = CMD_WAIT_EVENT;
    c->event = *e;
    return enqueue(h, c);
}

EXPORT cuResult_t cuMemcpyAsync(cuDevPtr_t dst, cuDevPtr_t src, size_t bytes, cuStream_t h)
{
    NOT_IN_HOST_FN();
    char *d = translate((void *)(uintptr_t)dst, bytes, 0);
    const char *s = translate((void *)(uintptr_t)src, bytes, 0);
    if (bytes > 0 && (d == NULL || s == NULL))
        return FAKE_ERROR_ILLEGAL_ADDRESS;
    struct cmd *c = calloc(1, sizeof(*c));
    if (c == NULL)
        return CUL_ERROR_INVALID_VALUE;
    *c = (struct cmd){.kind = CMD_COPY, .dst = d, .src = s, .bytes = bytes};
    return enqueue(h, c);
}

/* The synchronous copies run on the default stream and wait for it (tools and tests use them). */
EXPORT cuResult_t cuMemcpyHtoD_v2(cuDevPtr_t dst, const void *src, size_t bytes)
{
    cuResult_t r = cuMemcpyAsync(dst, (cuDevPtr_t)(uintptr_t)src, bytes, NULL);
    return r == CUL_SUCCESS ? cuStreamSynchronize(NULL) : r;
}

EXPORT cuResult_t cuMemcpyDtoH_v2(void *dst, cuDevPtr_t src, size_t bytes)
{
    cuResult_t r = cuMemcpyAsync((cuDevPtr_t)(uintptr_t)dst, src, bytes, NULL);
    return r == CUL_SUCCESS ? cuStreamSynchronize(NULL) : r;
}

/* 1 once every stream of the current context has run what it held at entry, 0 if one has
 * not after two seconds. */
static int contextDrained(void)
{
    struct cuStreamOpaque *list[256];
    uint64_t upTo[256];
    int n = 0;
    pthread_mutex_lock(&streamsLock);
    for (struct cuStreamOpaque *s = allStreams; s && n < 256; s = s->nextOfAll)
        if (s->ctx == current) {
            pthread_mutex_lock(&s->lock);
            upTo[n] = s->enqueued;
            pthread_mutex_unlock(&s->lock);
            list[n++] = s;
        }
    pthread_mutex_unlock(&streamsLock);
    struct timespec t0, t;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (int i = 0; i < n; i++) {
        while (streamDone(list[i]) < upTo[i]) {
            clock_gettime(CLOCK_MONOTONIC, &t);
            if ((t.tv_sec - t0.tv_sec) * 1000000000L + (t.tv_nsec - t0.tv_nsec) > 2000000000L)
                return 0;
            pause1us();
        }
    }
    return 1;
}

static _Atomic int moduleLoads;

/* Not a driver function: how many times cuModuleLoadData was called (tests find it with
 * dlsym). */
EXPORT int fakecudaModuleLoads(void)
{
    return atomic_load(&moduleLoads);
}

/* As the driver of an H200 (580) behaved: loading a module waits for the context's
 * streams; where one is held by a wait that only the caller can release, the real one
 * spins for good, and this one fails after two seconds, saying why. */
EXPORT cuResult_t cuModuleLoadData(cuModule_t *m, const void *image)
{
    uint32_t magic = 0;
    atomic_fetch_add(&moduleLoads, 1);
    if (image == NULL)
        return CUL_ERROR_INVALID_VALUE;
    if (!contextDrained()) {
        fprintf(stderr, "fakecuda: cuModuleLoadData: a stream of this context is still busy "
                        "after 2 s (a real driver waits for it: a hang)\n");
        return FAKE_ERROR_UNKNOWN;
    }
    memcpy(&magic, image, sizeof(magic));
    if (magic != FAKE_FATBIN_MAGIC)
        return CUL_ERROR_INVALID_VALUE;
    *m = calloc(1, sizeof(**m));
    if (*m == NULL)
        return CUL_ERROR_INVALID_VALUE;
    (*m)->image = image;
    return CUL_SUCCESS;
}

#define FAKE_TYPE_NAME(E, t, T) #t,
#define FAKE_OP_NAME(unused, E, o) #o,
static const char *const fakeTypes[loomNumTypes] = {LOOM_KERNEL_TYPES(FAKE_TYPE_NAME)};
static const char *const fakeOps[loomNumOps] = {LOOM_KERNEL_OPS(FAKE_OP_NAME, 0)};

/* 1 if the fatbin holds the name (uncompressed symbol tables: nvcc -no-compress). */
static int imageHas(const struct cuModuleOpaque *m, const char *name)
{
    /* The fatbin header: magic, version, header size, then the size of what follows. */
    uint64_t size;
    uint16_t hdr;
    memcpy(&hdr, (const char *)m->image + 6, sizeof(hdr));
    memcpy(&size, (const char *)m->image + 8, sizeof(size));
    return memmem(m->image, hdr + size, name, strlen(name) + 1) != NULL;
}

EXPORT cuResult_t cuModuleGetFunction(cuFunction_t *f, cuModule_t m, const char *name)
{
    struct cuFunctionOpaque fn = {.dt = loomInt8, .op = loomSum};
    if (!imageHas(m, name))
        return FAKE_ERROR_NOT_FOUND;
    if (strcmp(name, LOOM_KERNEL_WAIT) == 0) {
        fn.wait = 1;
    } else if (strcmp(name, LOOM_KERNEL_INTERPRET) == 0) {
        fn.interpret = 1;
    } else {
        int found = 0;
        for (int t = 0; t < loomNumTypes && !found; t++) {
            for (int o = 0; o < loomNumOps && !found; o++) {
                char want[64];
                snprintf(want, sizeof(want), LOOM_KERNEL_PREFIX "%s_%s", fakeTypes[t], fakeOps[o]);
                if (strcmp(want, name) == 0) {
                    fn.dt = (loomDataType_t)t, fn.op = (loomRedOp_t)o;
                    found = 1;
                }
            }
        }
        if (!found)
            return FAKE_ERROR_NOT_FOUND;
    }
    *f = malloc(sizeof(**f));
    if (*f == NULL)
        return CUL_ERROR_INVALID_VALUE;
    **f = fn;
    return CUL_SUCCESS;
}

EXPORT cuResult_t cuLaunchKernel(cuFunction_t f, unsigned int gx, unsigned int gy, unsigned int gz,
                                 unsigned int bx, unsigned int by, unsigned int bz,
                                 unsigned int sharedBytes, cuStream_t h, void **params,
                                 void **extra)
{
    NOT_IN_HOST_FN();
    (void)gy, (void)gz, (void)by, (void)bz, (void)sharedBytes, (void)extra;
    if (gx == 0 || bx == 0 || bx > 1024)
        return CUL_ERROR_INVALID_VALUE;
    struct cmd *c = calloc(1, sizeof(*c));
    if (c == NULL)
        return CUL_ERROR_INVALID_VALUE;
    if (f->wait) {
        const struct loomWaitArgs *w = params[0];
        c->kind = CMD_WAIT_FLAG;
        c->flag = (const volatile uint32_t *)translate((const void *)w->flag, 4, 1);
        c->value = w->value;
        if (c->flag == NULL)
            goto illegal;
        return enqueue(h, c);
    }
    if (f->interpret) {
        struct loomDevBlock *blocks = *(struct loomDevBlock **)params[0];
        if (!reachable(blocks, gx * sizeof(*blocks))) /* its contents: when it runs */
            goto illegal;
        int threads = envInt("FAKECUDA_THREADS", 4);
        c->kind = CMD_INTERPRET;
        c->blocks = blocks;
        c->nblocks = gx;
        c->nthreads = threads < 1 ? 1 : (unsigned int)threads < bx ? (unsigned int)threads : bx;
        atomic_fetch_add(&interpretLaunches, 1);
        return enqueue(h, c);
    }
    const struct loomReduceArgs *a = params[0];
    size_t bytes = a->count * reduceTypeSize(f->dt);
    c->kind = CMD_REDUCE;
    c->dt = f->dt;
    c->op = f->op;
    c->nthreads = gx * bx;
    c->args = *a;
    c->args.out0 = translate(a->out0, bytes, 1);
    c->args.out1 = translate(a->out1, bytes, 1);
    c->args.a = translate(a->a, bytes, 1);
    c->args.b = translate(a->b, bytes, 1);
    if (c->args.out0 == NULL || c->args.a == NULL || (a->out1 && c->args.out1 == NULL) ||
        (a->b && c->args.b == NULL))
        goto illegal;
    return enqueue(h, c);

illegal:
    free(c);
    fprintf(stderr, "fakecuda: a kernel was given an address the GPU cannot reach\n");
    return FAKE_ERROR_ILLEGAL_ADDRESS;
}
