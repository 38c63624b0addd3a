/*
 * stream.c — host streams: an ordered queue of work run by a progress thread.
 *
 * loomStreamCreate starts one thread per stream. Each enqueued unit (one
 * call, or one group) is a small array of operations; the thread runs units
 * in order with planExecute, so communication proceeds while the caller
 * computes (DDP overlaps gradient AllReduce with backward this way). The
 * first error is kept and returned by Synchronize and Query, and recorded as
 * the communicator's async error. Stream structs are never freed, like
 * communicators, and every one ever created is on a list, so a destroyed
 * stream is reported, not dereferenced freed, and a pointer that is no
 * stream at all is reported without being dereferenced.
 *
 * loomStreamAddCallback queues a unit with no operations and a function:
 * the thread calls it when it reaches it, so once everything issued before
 * it is done, with the stream's first error so far. This is the stream's
 * per-operation completion (torch_loom completes each Work this way).
 *
 * A CUDA stream (loomStreamCreateCuda) is a host stream whose units are
 * also ordered on the application's cudaStream_t (src/cudastream.c):
 * at enqueue the CUDA stream is marked and made to wait for the unit; the
 * progress thread waits for the mark (the work queued before the call),
 * runs the unit, and then lets the CUDA stream go on. So a call returns at
 * once and acts as if it were a kernel on the caller's stream. A unit that
 * runs as one launch of the interpreter (src/exec/devexec.c) is not queued:
 * once the units before it have run, it is launched on the CUDA stream by
 * the calling thread itself, and is then a kernel on the caller's stream.
 */
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cudacore.h"
#include "cudastream.h"
#include "debug.h"
#include "enqueue.h"
#include "plan.h"

#define STREAM_MAGIC 0x4c4f4f4d53545245ULL /* "LOOMSTRE" */
#define STREAM_DEAD 0x4445414453545245ULL

struct streamUnit {
    struct streamUnit *next;
    int nops;
    int cap;                 /* ops the allocation holds */
    void *event;             /* CUDA streams: marks the work queued before the unit */
    uint32_t seq;            /* CUDA streams: the value that releases the CUDA stream */
    loomStreamCallback_t fn; /* a callback (nops 0, loomStreamAddCallback), or NULL */
    void *userData;
    struct loomOp ops[];
};

#define STREAM_SPIN_NS 20000 /* the thread polls this long for more work before sleeping */

struct loomStream {
    _Atomic uint64_t magic;
    pthread_t thread;
    pthread_mutex_t lock;
    pthread_cond_t cond; /* work arrived, or stop */
    pthread_cond_t idle; /* queue drained */
    struct streamUnit *head, *tail, *free;
    int running;  /* a unit is being executed */
    int sleeping; /* the thread waits on `cond`: enqueue must signal */
    int waiters;  /* threads in Synchronize/Destroy wait on `idle` */
    int stop;
    loomResult_t error;          /* the first error, under `lock` */
    char errorLine[256];         /* and its line */
    struct loomStream *allNext;  /* the registry: every stream ever created */
    struct cudaStreamSync *cuda; /* the wrapped cudaStream_t, or NULL for a host stream */
};

int streamIsCuda(const struct loomStream *s)
{
    return s->cuda != NULL;
}

void *streamCudaHandle(const struct loomStream *s)
{
    return cudaStreamHandle(s->cuda);
}

static pthread_mutex_t streamsLock = PTHREAD_MUTEX_INITIALIZER;
static struct loomStream *_Atomic streams;

/* Lock-free: streams are only ever pushed at the head, and never freed. */
static int streamKnown(const struct loomStream *s)
{
    for (struct loomStream *p = atomic_load_explicit(&streams, memory_order_acquire); p;
         p = p->allNext)
        if (p == s)
            return 1;
    return 0;
}

static void streamRegister(struct loomStream *s)
{
    pthread_mutex_lock(&streamsLock);
    s->allNext = atomic_load_explicit(&streams, memory_order_relaxed);
    atomic_store_explicit(&streams, s, memory_order_release);
    pthread_mutex_unlock(&streamsLock);
}

loomResult_t streamCheck(struct loomStream *s, const char *fn)
{
    if (!streamKnown(s))
        return loomSetError(loomInvalidArgument, "%s: stream %p is not a loomStream_t", fn,
                            (void *)s);
    if (s->magic == STREAM_DEAD)
        return loomSetError(loomInvalidUsage, "%s: the stream was destroyed", fn);
    if (s->magic != STREAM_MAGIC)
        return loomSetError(loomInvalidArgument, "%s: stream %p is not a loomStream_t", fn,
                            (void *)s);
    return loomSuccess;
}

/* The first error of s and its line; `lock` held. */
static void errorKeep(struct loomStream *s, loomResult_t res, const char *line)
{
    if (s->error == loomSuccess) {
        s->error = res;
        snprintf(s->errorLine, sizeof(s->errorLine), "%s", line);
    }
}

void streamRecordError(struct loomStream *s, loomResult_t res, const char *line)
{
    pthread_mutex_lock(&s->lock);
    errorKeep(s, res, line);
    pthread_mutex_unlock(&s->lock);
}

static void unitRun(struct loomStream *s, struct streamUnit *u)
{
    loomResult_t res = s->cuda ? cudaStreamUnitBegin(s->cuda, u->event) : loomSuccess;
    if (res == loomSuccess)
        res = planExecute(u->ops, u->nops);
    if (s->cuda)
        cudaStreamUnitEnd(s->cuda, u->seq);
    for (int i = 0; i < u->nops; i++) {
        struct loomComm *comm = u->ops[i].comm;
        if (res != loomSuccess) {
            commRecordError(comm);
            int none = loomSuccess;
            atomic_compare_exchange_strong(&comm->asyncError, &none, (int)res);
        }
        opRelease(&u->ops[i]);
        atomic_fetch_sub_explicit(&comm->pending, 1, memory_order_acq_rel);
    }
    if (res != loomSuccess)
        streamRecordError(s, res, debugLastError(NULL));
}

/*
 * A callback: every unit before it has run, so the stream's first error so
 * far is the result of everything issued before it. Its line is made this
 * thread's last error, for loomGetLastError in the callback.
 */
static void callbackRun(struct loomStream *s, struct streamUnit *u)
{
    char line[sizeof(s->errorLine)];
    pthread_mutex_lock(&s->lock);
    loomResult_t res = s->error;
    memcpy(line, s->errorLine, sizeof(line));
    pthread_mutex_unlock(&s->lock);
    if (res != loomSuccess)
        debugRestoreError(line, debugNextErrorSeq());
    u->fn(s, res, u->userData);
}

/* Waits for work: polls briefly (back-to-back calls are the common case), then sleeps. */
static void streamWaitWork(struct loomStream *s)
{
    uint64_t until = loomClockNs() + STREAM_SPIN_NS;
    while (s->head == NULL && !s->stop && loomClockNs() < until) {
        pthread_mutex_unlock(&s->lock);
        sched_yield();
        pthread_mutex_lock(&s->lock);
    }
    while (s->head == NULL && !s->stop) {
        s->sleeping = 1;
        pthread_cond_wait(&s->cond, &s->lock);
        s->sleeping = 0;
    }
}

static void *streamMain(void *arg)
{
    struct loomStream *s = arg;
    pthread_mutex_lock(&s->lock);
    for (;;) {
        streamWaitWork(s);
        if (s->head == NULL)
            break;
        struct streamUnit *u = s->head;
        s->head = u->next;
        if (s->head == NULL)
            s->tail = NULL;
        s->running = 1;
        pthread_mutex_unlock(&s->lock);
        if (u->fn)
            callbackRun(s, u);
        else
            unitRun(s, u);
        pthread_mutex_lock(&s->lock);
        s->running = 0;
        u->next = s->free; /* keep it for the next enqueue: no malloc per call */
        s->free = u;
        if (s->head == NULL && s->waiters)
            pthread_cond_broadcast(&s->idle);
    }
    while (s->free) {
        struct streamUnit *u = s->free;
        s->free = u->next;
        if (u->event)
            cudaStreamEventFree(s->cuda, u->event);
        free(u);
    }
    pthread_mutex_unlock(&s->lock);
    planThreadCleanup();
    return NULL;
}

/* A unit for nops operations: from the free list if one is large enough. Lock held. */
static struct streamUnit *unitTake(struct loomStream *s, int nops)
{
    struct streamUnit **pp = &s->free;
    while (*pp && (*pp)->cap < nops)
        pp = &(*pp)->next;
    struct streamUnit *u = *pp;
    if (u) {
        *pp = u->next;
        return u;
    }
    int cap = nops < 4 ? 4 : nops;
    u = malloc(sizeof(*u) + (size_t)cap * sizeof(struct loomOp));
    if (u) {
        u->cap = cap;
        u->event = NULL;
    }
    return u;
}

/* Puts a unit that was taken but not queued back on the free list. Lock held. */
static void unitReturn(struct loomStream *s, struct streamUnit *u)
{
    u->next = s->free;
    s->free = u;
}

/* Appends u to the queue and wakes the thread if it sleeps. `lock` held. */
static void unitQueue(struct loomStream *s, struct streamUnit *u)
{
    u->next = NULL;
    if (s->tail)
        s->tail->next = u;
    else
        s->head = u;
    s->tail = u;
    if (s->sleeping)
        pthread_cond_signal(&s->cond);
}

/* Waits until the progress thread has run every unit queued. `lock` held. */
static void drainLocked(struct loomStream *s)
{
    s->waiters++;
    while (s->head || s->running)
        pthread_cond_wait(&s->idle, &s->lock);
    s->waiters--;
}

/*
 * Device buffers that run as one launch (src/exec/devexec.c): launched now,
 * on this thread, onto the CUDA stream, once the units queued before them
 * have run; the call returns without waiting for the GPU.
 */
static loomResult_t launchNow(struct loomStream *s, struct loomOp *ops, int nops)
{
    for (int i = 0; i < nops; i++) { /* a group's ops may be on several streams (devexec.c) */
        struct loomStream *t = ops[i].stream ? ops[i].stream : s;
        pthread_mutex_lock(&t->lock);
        drainLocked(t);
        pthread_mutex_unlock(&t->lock);
    }
    loomResult_t res = planExecute(ops, nops);
    for (int i = 0; i < nops; i++)
        opRelease(&ops[i]);
    return res;
}

/*
 * *capturing: s, the stream of every op, is being captured into a graph.
 * Only a launch can be (devexec.c keeps its host work in the graph), and
 * only from that one stream; anything else under capture is refused with
 * loomInvalidUsage (ops released).
 */
static loomResult_t captureCheck(struct loomStream *s, struct loomOp *ops, int nops, int launch,
                                 int *capturing)
{
    loomResult_t res = loomSuccess;
    int any = 0, others = 0;
    *capturing = 0;
    for (int i = -1; i < nops && res == loomSuccess; i++) {
        struct loomStream *t = i < 0 ? s : ops[i].stream;
        int c = 0;
        if (t && t->cuda)
            res = cudaStreamCapturing(t->cuda, &c);
        any |= c;
        if (i < 0)
            *capturing = c;
        others |= t != NULL && t != s;
    }
    const char *fn = nops > 1 ? "loomGroupEnd" : loomCollName(ops[0].coll);
    if (res == loomSuccess && any && !launch)
        res = cudaStreamCaptureRefuse(fn, "only calls that run as one launch of Loom's kernel "
                                          "can be captured (device buffers, "
                                          "LOOM_EXECUTOR=kernel, every peer on this host)");
    else if (res == loomSuccess && any && others)
        res = cudaStreamCaptureRefuse(fn, "a group can be captured only when all its calls are "
                                          "on the stream being captured");
    for (int i = 0; res != loomSuccess && i < nops; i++)
        opRelease(&ops[i]);
    return res;
}

loomResult_t streamEnqueue(struct loomStream *s, struct loomOp *ops, int nops)
{
    int capturing, launch = s->cuda && planLaunched(ops, nops);
    LOOMCHECK(captureCheck(s, ops, nops, launch, &capturing));
    if (launch && capturing) { /* Loom allocates and waits for its own stream meanwhile */
        int mode = cudaStreamCaptureRelax(s->cuda);
        loomResult_t res = launchNow(s, ops, nops);
        cudaStreamCaptureRestore(s->cuda, mode);
        return res;
    }
    if (launch)
        return launchNow(s, ops, nops);
    pthread_mutex_lock(&s->lock);
    struct streamUnit *u = unitTake(s, nops);
    if (u == NULL) {
        pthread_mutex_unlock(&s->lock);
        for (int i = 0; i < nops; i++)
            opRelease(&ops[i]);
        return loomSetError(loomSystemError, "out of memory queueing %d operation(s)", nops);
    }
    u->nops = nops;
    u->fn = NULL;
    if (s->cuda) {
        loomResult_t res = cudaStreamFence(s->cuda, &u->event, &u->seq);
        if (res != loomSuccess) {
            unitReturn(s, u);
            pthread_mutex_unlock(&s->lock);
            return res;
        }
    }
    memcpy(u->ops, ops, (size_t)nops * sizeof(*ops));
    for (int i = 0; i < nops; i++) {
        ops[i].v = NULL;
        atomic_fetch_add_explicit(&ops[i].comm->pending, 1, memory_order_acq_rel);
    }
    unitQueue(s, u);
    pthread_mutex_unlock(&s->lock);
    return loomSuccess;
}

loomResult_t loomStreamAddCallback(loomStream_t s, loomStreamCallback_t fn, void *userData)
{
    if (s == NULL)
        return loomSetError(loomInvalidArgument,
                            "loomStreamAddCallback: stream is NULL (a call on the NULL stream is "
                            "complete when it returns: there is nothing to wait for)");
    LOOMCHECK(streamCheck(s, "loomStreamAddCallback"));
    if (fn == NULL)
        return loomSetError(loomInvalidArgument, "loomStreamAddCallback: fn is NULL");
    /* Device launches on it are not units of the queue (launchNow): a unit cannot follow them. */
    if (s->cuda)
        return loomSetError(loomInvalidUsage,
                            "loomStreamAddCallback: the stream wraps a cudaStream_t, on which "
                            "Loom's calls act as kernels: use cudaLaunchHostFunc on the CUDA "
                            "stream, and loomStreamQuery for Loom's errors");
    pthread_mutex_lock(&s->lock);
    struct streamUnit *u = unitTake(s, 0);
    if (u == NULL) {
        pthread_mutex_unlock(&s->lock);
        return loomSetError(loomSystemError, "loomStreamAddCallback: out of memory");
    }
    u->nops = 0;
    u->fn = fn;
    u->userData = userData;
    unitQueue(s, u);
    pthread_mutex_unlock(&s->lock);
    return loomSuccess;
}

/* A callback of s that waits for s would wait for itself. */
static loomResult_t notFromCallback(struct loomStream *s, const char *fn)
{
    if (pthread_equal(pthread_self(), s->thread))
        return loomSetError(loomInvalidUsage,
                            "%s: called from a callback of the same stream, which would wait "
                            "for itself",
                            fn);
    return loomSuccess;
}

/* A new stream with its progress thread; cuda (owned from here on) makes it a CUDA stream. */
static loomResult_t streamStart(struct cudaStreamSync *cuda, const char *fn, loomStream_t *stream)
{
    struct loomStream *s = calloc(1, sizeof(*s));
    if (s == NULL) {
        if (cuda)
            cudaStreamDetach(cuda);
        return loomSetError(loomSystemError, "%s: out of memory", fn);
    }
    pthread_mutex_init(&s->lock, NULL);
    pthread_cond_init(&s->cond, NULL);
    pthread_cond_init(&s->idle, NULL);
    s->magic = STREAM_MAGIC;
    s->cuda = cuda;
    streamRegister(s);
    int e = pthread_create(&s->thread, NULL, streamMain, s);
    if (e != 0) {
        s->magic = STREAM_DEAD;
        if (cuda)
            cudaStreamDetach(cuda);
        return loomSetError(loomSystemError, "%s: cannot start a thread: %s%s", fn, strerror(e),
                            e == EAGAIN ? " (out of memory, or the limit of threads: ulimit -u)"
                                        : "");
    }
    *stream = s;
    return loomSuccess;
}

loomResult_t loomStreamCreate(loomStream_t *stream)
{
    if (stream == NULL)
        return loomSetError(loomInvalidArgument, "loomStreamCreate: stream is NULL");
    return streamStart(NULL, "loomStreamCreate", stream);
}

loomResult_t loomStreamCreateCuda(loomStream_t *stream, void *cudaStream)
{
    struct cudaStreamSync *cuda;
    if (stream == NULL)
        return loomSetError(loomInvalidArgument, "loomStreamCreateCuda: stream is NULL");
    LOOMCHECK(cudaStreamAttach(cudaStream, &cuda));
    return streamStart(cuda, "loomStreamCreateCuda", stream);
}

loomResult_t loomStreamSynchronize(loomStream_t s)
{
    if (s == NULL)
        return loomSuccess; /* the NULL stream: every call already completed */
    LOOMCHECK(streamCheck(s, "loomStreamSynchronize"));
    LOOMCHECK(notFromCallback(s, "loomStreamSynchronize"));
    pthread_mutex_lock(&s->lock);
    drainLocked(s);
    loomResult_t res = s->error;
    pthread_mutex_unlock(&s->lock);
    if (res == loomSuccess && s->cuda) {
        LOOMCHECK(cudaStreamSync(s->cuda));
        devexecSettle(s); /* the launches on it have ended: their errors are in s->error now */
    }
    pthread_mutex_lock(&s->lock);
    res = s->error;
    char line[sizeof(s->errorLine)];
    memcpy(line, s->errorLine, sizeof(line));
    pthread_mutex_unlock(&s->lock);
    if (res != loomSuccess)
        loomSetError(res, "loomStreamSynchronize: an operation on the stream failed: %s", line);
    return res;
}

loomResult_t loomStreamQuery(loomStream_t s)
{
    if (s == NULL)
        return loomSuccess;
    LOOMCHECK(streamCheck(s, "loomStreamQuery"));
    pthread_mutex_lock(&s->lock);
    loomResult_t res = s->error != loomSuccess   ? s->error
                       : (s->head || s->running) ? loomInProgress
                                                 : loomSuccess;
    pthread_mutex_unlock(&s->lock);
    if (res != loomSuccess || s->cuda == NULL)
        return res;
    LOOMCHECK(cudaStreamIdle(s->cuda));
    devexecSettle(s);
    pthread_mutex_lock(&s->lock);
    res = s->error;
    pthread_mutex_unlock(&s->lock);
    return res;
}

loomResult_t loomStreamDestroy(loomStream_t s)
{
    if (s == NULL)
        return loomSetError(loomInvalidArgument, "loomStreamDestroy: stream is NULL");
    LOOMCHECK(streamCheck(s, "loomStreamDestroy"));
    LOOMCHECK(notFromCallback(s, "loomStreamDestroy"));
    pthread_mutex_lock(&s->lock);
    s->stop = 1;
    pthread_cond_signal(&s->cond);
    pthread_mutex_unlock(&s->lock);
    pthread_join(s->thread, NULL);
    if (s->cuda)
        cudaStreamDetach(s->cuda);
    s->cuda = NULL;
    s->magic = STREAM_DEAD;
    pthread_mutex_destroy(&s->lock);
    pthread_cond_destroy(&s->cond);
    pthread_cond_destroy(&s->idle);
    return loomSuccess;
}
