/*
 * cudaexec.c — the device steps of the host-driven CUDA executor
 * (loomExecCuda): schedules run over connectors, with the data moved and
 * reduced by the GPU.
 *
 * exec.c walks the lanes of a plan exactly as for host buffers: a step may
 * go when its receive FIFO holds a message and its send FIFO has a free
 * slot, both read from the counters in host memory. For a device plan the
 * step's work is not done by the CPU but issued here, on this thread's own
 * CUDA stream: a copy (cuMemcpyAsync) or a reduction kernel (kernels.cu)
 * between the user's device buffers and the slots, followed by an event.
 * The counters that let the peer go on (tail of the sent slot, head of the
 * consumed one) are published only when that event has completed
 * (cudaExecRetire), so a peer never sees a slot before the GPU has filled
 * or drained it. Steps are issued as soon as they are ready, up to
 * CUDA_EXEC_RING of them in flight, so the GPU works through a pipeline of
 * chunks while the host waits on the FIFOs.
 *
 *   host: wait for FIFO -> issue copy/kernel + event ---------> event done?
 *                                                                 -> publish tail/head
 *   GPU:                   [ step k ][ step k+1 ][ step k+2 ] ...
 *
 * Why the host drives the steps rather than one kernel that waits on the
 * counters itself (NCCL's way): a kernel spinning on a counter that another
 * process must advance holds the GPU, and processes sharing one GPU take
 * turns on it only by time slices, so several ranks on one GPU — which Loom
 * supports, and which is how its multi-rank GPU paths are tested on a
 * one-GPU machine — would advance one hop per time slice. Host-driven
 * steps keep every kernel short and free of waits, whatever shares the GPU,
 * and let one executor serve every transport (p2p slots in GPU memory, host
 * slots in /dev/shm that the GPU reads and writes directly once registered).
 * The price is a few microseconds of launch per chunk; larger slots
 * (LOOM_BUFFSIZE) amortise it. For GPUs that each run one rank, the
 * device-resident way is devexec.c (LOOM_EXECUTOR=kernel): the whole plan
 * as one launch of the interpreter; this executor stays the default.
 *
 * This file is the host-driven executor's device steps, called by exec.c's
 * loop only (loomExecCuda is defined there) and calling nothing back; the
 * stream, events and kernels it issues on are this thread's CUDA side of
 * the plan (cudaplan.c, shared with the launched interpreter).
 */
#include "cudacore.h"
#include "cudaplan.h"
#include "debug.h"
#include "kernels.h"
#include "step.h"

/* ---- steps ---- */

int cudaExecFull(const struct cudaExec *ex)
{
    return ex->tail - ex->head >= CUDA_EXEC_RING;
}

int cudaExecPending(const struct cudaExec *ex)
{
    return (int)(ex->tail - ex->head);
}

static loomResult_t copyAsync(struct cudaExec *ex, void *dst, const void *src, size_t bytes)
{
    if (dst == src)
        return loomSuccess;
    cuResult_t r = ex->lib->memcpyAsync((cuDevPtr_t)(uintptr_t)dst, (cuDevPtr_t)(uintptr_t)src,
                                        bytes, ex->stream);
    return r == CUL_SUCCESS ? loomSuccess : cudaLibError(ex->lib, r, "cuMemcpyAsync of a chunk");
}

/* out0 (and out1) = post(a op b), or post(a) when b is NULL; see kernels.h. */
static loomResult_t reduceAsync(struct cudaExec *ex, const struct loomLane *l, void *out0,
                                void *out1, const void *a, const void *b, size_t count, int final)
{
    struct loomReduceArgs args = {out0, out1, a, b, count, l->comm->nranks, final};
    void *params[] = {&args};
    size_t per = 16 / l->elemSize;
    size_t units = count / per + count % per;
    size_t blocks = (units + LOOM_KERNEL_THREADS - 1) / LOOM_KERNEL_THREADS;
    if (blocks > ex->kernels->maxBlocks)
        blocks = ex->kernels->maxBlocks;
    cuResult_t r = ex->lib->launchKernel(ex->kernels->reduce[l->dt][l->op], (unsigned int)blocks, 1,
                                         1, LOOM_KERNEL_THREADS, 1, 1, 0, ex->stream, params, NULL);
    return r == CUL_SUCCESS ? loomSuccess : cudaLibError(ex->lib, r, "launching a reduction");
}

/*
 * The device work of one step, as the op table declares it (loomStepWorkOf,
 * src/device/step.h), pass by pass: a reduction is a chain of kernels into
 * the pass's first output, in the host's order (the same bits), the last
 * writing its second output too, and copies of the first to the rest; a copy
 * is a cuMemcpyAsync to each output, or a kernel where it divides (Avg).
 */
static loomResult_t stepIssue(struct cudaExec *ex, const struct loomLane *l,
                              const struct loomStep *s, const char *const *in, char *const *out)
{
    size_t es = l->elemSize, bytes = s->count * es;
    const char *src = l->bufs[s->srcBuf] + s->srcOff * es;
    unsigned uses = loomStepUses(s->op);
    char *dst = (uses & LOOM_USES_DST) ? l->bufs[s->dstBuf] + s->dstOff * es : NULL;
    struct loomStepWork w;

    if (uses == 0 || (uses & LOOM_USES_SLOTLESS))
        return loomSetError(loomInternalError, "step operation %d on the GPU", s->op);
    loomStepWorkOf(&w, s, l->op, l->comm->nranks, src, dst, in, out, s->nsend, bytes);
    for (int k = 0; k < w.npass; k++) {
        const struct loomStepPass *p = &w.pass[k];
        if (p->reduce) {
            const char *acc = p->with;
            for (int j = 0; j + 1 < p->nin; j++, acc = p->to[0])
                LOOMCHECK(reduceAsync(ex, l, p->to[0], NULL, p->in[j], acc, s->count, 0));
            char *also = p->nto > 1 ? p->to[1] : NULL;
            LOOMCHECK(
                reduceAsync(ex, l, p->to[0], also, p->in[p->nin - 1], acc, s->count, p->divide));
            for (int j = 2; j < p->nto; j++)
                LOOMCHECK(copyAsync(ex, p->to[j], p->to[0], bytes));
        } else if (p->divide) {
            LOOMCHECK(reduceAsync(ex, l, p->to[0], NULL, p->in[0], NULL, s->count, 1));
        } else {
            for (int j = 0; j < p->nto; j++)
                LOOMCHECK(copyAsync(ex, p->to[j], p->in[0], bytes));
        }
    }
    return loomSuccess;
}

loomResult_t cudaExecStep(struct cudaExec *ex, const struct loomLane *l, const struct loomStep *s,
                          const char *const *in, char *const *out, struct loomConnector *const *rc,
                          struct loomConnector *const *sc)
{
    LOOMCHECK(stepIssue(ex, l, s, in, out));
    if (s->nrecv == 0 && s->nsend == 0)
        return loomSuccess; /* nothing to publish: cudaPlanEnd waits for it */
    struct cudaRecord *rec = &ex->rec[ex->tail % CUDA_EXEC_RING];
    cuResult_t r = ex->lib->eventRecord(rec->event, ex->stream);
    if (r != CUL_SUCCESS)
        return cudaLibError(ex->lib, r, "cuEventRecord after a chunk");
    rec->nsend = s->nsend;
    rec->nrecv = s->nrecv;
    for (int j = 0; j < s->nsend; j++) {
        rec->sc[j] = sc[j];
        rec->sendPos[j] = sc[j]->pos + 1;
    }
    for (int j = 0; j < s->nrecv; j++) {
        rec->rc[j] = rc[j];
        rec->recvPos[j] = rc[j]->pos + 1;
    }
    ex->tail++;
    return loomSuccess;
}

long cudaExecRetire(struct cudaExec *ex, loomResult_t *err)
{
    long n = 0;
    while (ex->head != ex->tail) {
        struct cudaRecord *rec = &ex->rec[ex->head % CUDA_EXEC_RING];
        cuResult_t r = ex->lib->eventQuery(rec->event);
        if (r == CUL_ERROR_NOT_READY)
            break;
        if (r != CUL_SUCCESS) {
            *err = cudaLibError(ex->lib, r, "a chunk's work on the GPU");
            return -1;
        }
        for (int j = 0; j < rec->nsend; j++) {
            atomic_store_explicit(&rec->sc[j]->fifo->tail, rec->sendPos[j], memory_order_release);
            bellRing(rec->sc[j]->peerBell);
        }
        for (int j = 0; j < rec->nrecv; j++) {
            atomic_store_explicit(&rec->rc[j]->fifo->head, rec->recvPos[j], memory_order_release);
            bellRing(rec->rc[j]->peerBell);
        }
        ex->head++;
        n++;
    }
    return n;
}
