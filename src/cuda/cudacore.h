/*
 * cudacore.h — what the core calls in the CUDA parts; each hook is one line at
 * its call site, so the core reads the same with or without a GPU.
 *
 *   opcheck.c  opCheck      -> cudaOpCheck: host or device buffers, and the errors
 *   plan.c     planExecute  -> cudaPlanBegin / cudaPlanEnd around the executor's run
 *                              (src/exec/executor.h: loomExecCuda's or loomExecLaunch's)
 *              stageInPlace -> cudaStageInPlace for a device AlltoAll in place
 *   exec.c     execRun(dev) -> cudaExecStep instead of computing on the CPU,
 *                              cudaExecRetire publishes the counters of finished steps
 *   stream.c   loomStreamCreateCuda, enqueue, run, sync, destroy -> cudaStream*
 *   init.c     peer exchange, connect, free -> p2pPeerInfo, p2pSetup, p2pFree
 *
 * Every hook is cheap for host buffers: a plan on host memory never touches
 * the driver, and a process that never loaded the driver never loads it.
 */
#ifndef LOOM_CUDACORE_H_
#define LOOM_CUDACORE_H_

#include <stdint.h>

#include "core.h"
#include "enqueue.h"
#include "exec.h"

struct cudaExec;
struct cudaStreamSync;
struct loomDevConn;

/* ---- operations and plans (src/exec/cudaplan.c) ---- */

/*
 * The buffer checks of a call: host and device buffers mixed in one call,
 * buffers of two devices, a device other than the communicator's, or device
 * memory in a build without CUDA give an error with a line naming fn and
 * the buffer. Device or host is found again when the plan runs.
 */
loomResult_t cudaOpCheck(const struct loomOp *op, const char *fn);
/*
 * Before the lanes of a plan are built: NULL in *ex for host plans (nothing
 * else happens); for device plans, makes the buffers' context current,
 * prepares this thread's executor (stream, events, kernels) and the
 * communicators' host slots for the GPU, and unless `ordered` (a CUDA
 * stream already ordered the plan) waits for the work already queued on
 * the device. A plan may not mix host and device operations.
 */
loomResult_t cudaPlanBegin(struct loomOp *ops, int nops, int ordered, struct cudaExec **ex);
/* 1 if the plan of ops is on device buffers (as cudaPlanBegin sees it); no error is recorded. */
int cudaPlanIsDevice(const struct loomOp *ops, int nops);
/* After the executor's run: waits out anything still in flight after an error, restores the
 * context. */
void cudaPlanEnd(struct cudaExec *ex, loomResult_t res);
/*
 * The stream the plan's own device work goes on (an in-place AlltoAll's
 * staging copy, the launched interpreter): Loom's stream of this thread
 * (NULL), or the application's `stream` for a launch ordered on it.
 */
void cudaPlanUseStream(struct cudaExec *ex, void *stream);
void *cudaPlanStream(const struct cudaExec *ex);
/* Loom's own stream of this thread, which no application captures. */
void *cudaPlanOwnStream(const struct cudaExec *ex);
/* The context of the plan's buffers (current on the planning thread). */
void *cudaPlanContext(const struct cudaExec *ex);
/* Launches loomInterpret on the plan's stream: nblocks blocks of `threads` over `blocks`. */
loomResult_t cudaKernelInterpret(struct cudaExec *ex, void *blocks, unsigned int nblocks,
                                 unsigned int threads);
/* Copies an in-place AlltoAll's send buffer to ex's device scratch space; *send is the copy. */
loomResult_t cudaStageInPlace(struct cudaExec *ex, struct loomOp *op, size_t bytes,
                              const void **send);
/* Queues on `stream` (of context ctx) a kernel that waits until *flag >= value (cyclic). */
loomResult_t cudaKernelWait(void *ctx, void *stream, uint64_t flagDev, uint32_t value);
/* Loads ctx's kernels ahead of any wait on its streams (ctx current on this thread). */
void cudaKernelsPreload(void *ctx);

/* ---- the host-driven executor's device steps, which only exec.c calls (cudaexec.c) ---- */

/* 1 if no more steps can be issued until some finish. */
int cudaExecFull(const struct cudaExec *ex);
/*
 * Issues step s of lane l on the GPU: in[0 .. s->nrecv) are the received
 * slots, out[0 .. s->nsend) the slots to send into. The connectors'
 * counters are published when the work has finished (cudaExecRetire):
 * sc[j] for the slot sent into, rc[j] for the slot consumed.
 */
loomResult_t cudaExecStep(struct cudaExec *ex, const struct loomLane *l, const struct loomStep *s,
                          const char *const *in, char *const *out, struct loomConnector *const *rc,
                          struct loomConnector *const *sc);
/* Publishes the counters of every step the GPU has finished; returns how many, -1 on error. */
long cudaExecRetire(struct cudaExec *ex, loomResult_t *err);
/* Steps issued and not yet retired. */
int cudaExecPending(const struct cudaExec *ex);

/* ---- CUDA streams (cudastream.c) ---- */

/* Wraps the application's cudaStream_t: loads the driver, checks the stream. */
loomResult_t cudaStreamAttach(void *cudaStream, struct cudaStreamSync **out);
/*
 * At enqueue, on the application's thread: marks the CUDA stream's current
 * position (for the progress thread to wait on) and makes the stream wait
 * for unit *seq to finish. *event belongs to the unit and is created the
 * first time.
 */
loomResult_t cudaStreamFence(struct cudaStreamSync *cs, void **event, uint32_t *seq);
/* On the progress thread, before a unit runs: waits until the work before it is done. */
loomResult_t cudaStreamUnitBegin(struct cudaStreamSync *cs, void *event);
/* After the unit, whatever its result: lets the CUDA stream go on past it. */
void cudaStreamUnitEnd(struct cudaStreamSync *cs, uint32_t seq);
/*
 * *capturing: 1 when the application is capturing the CUDA stream into a
 * graph, else 0. Only calls that run as one launch (planLaunched, plan.h) may
 * be captured; others are refused by cudaStreamCaptureRefuse.
 */
loomResult_t cudaStreamCapturing(struct cudaStreamSync *cs, int *capturing);
/* loomInvalidUsage naming fn and why: a call that cannot be captured, on a stream being captured.
 */
loomResult_t cudaStreamCaptureRefuse(const char *fn, const char *why);
/*
 * Makes the calling thread's capture mode relaxed (cuThreadExchangeStreamCaptureMode) and
 * returns the mode it had, for cudaStreamCaptureRestore: Loom allocates and waits for its own
 * stream while it captures a call, which a capture in the default global mode forbids.
 */
int cudaStreamCaptureRelax(struct cudaStreamSync *cs);
void cudaStreamCaptureRestore(struct cudaStreamSync *cs, int mode);
/* Waits for the CUDA stream itself (after every unit ran). */
loomResult_t cudaStreamSync(struct cudaStreamSync *cs);
/* loomSuccess if the CUDA stream is idle, loomInProgress if not. */
loomResult_t cudaStreamIdle(struct cudaStreamSync *cs);
/* Frees a unit's event. */
void cudaStreamEventFree(struct cudaStreamSync *cs, void *event);
/* Waits for the CUDA stream, then frees what Attach made. */
void cudaStreamDetach(struct cudaStreamSync *cs);

/* stream.c: 1 if s wraps a CUDA stream (its units are ordered by cudaStreamFence). */
int streamIsCuda(const struct loomStream *s);
/* stream.c: the application's cudaStream_t that s wraps (streamIsCuda). */
void *streamCudaHandle(const struct loomStream *s);
/* stream.c: records res (the line given) as s's first error, if it has none. */
void streamRecordError(struct loomStream *s, loomResult_t res, const char *line);
/* cudastream.c: the application's stream that cs wraps. */
void *cudaStreamHandle(const struct cudaStreamSync *cs);

/* ---- the launched interpreter (devexec.c) ---- */

/*
 * Its run is loomExecLaunch's (src/exec/executor.h): one launch of
 * loomInterpret for a device plan's lanes; its reclaim, before another
 * executor runs on comm, waits for comm's launches to end and takes its
 * positions back.
 */
void devexecReclaim(struct loomComm *comm);
/* After loomStreamSynchronize's wait on the CUDA stream: retires the launches made on s. */
void devexecSettle(const struct loomStream *s);
/* Frees comm's launch state; comm has no launch in flight (destroy waited for them). */
void devexecFree(struct loomComm *comm);

/* ---- device binding and p2p (src/cuda/p2p.c) ---- */

/* Fills this rank's GPU fields of its peer info before the exchange at init. */
void p2pPeerInfo(struct loomPeerInfo *me);
/* Collective, after the host transports: binds comm to its device and opens p2p slots. */
loomResult_t p2pSetup(struct loomComm *comm);
/* Makes the host slots of comm's connectors accessible to kernels (once per comm). */
loomResult_t p2pMapHostSlots(struct loomComm *comm);
/* The context comm is bound to, or NULL; *device its ordinal. */
void *p2pContext(const struct loomComm *comm, int *device);
/*
 * After the core connected comm to peer p (src/connect.c): hangs the
 * device slots on p's connectors and registers their host slots with the
 * driver when those of the earlier peers are. Any failure only matters to
 * device plans, which report it.
 */
void p2pPeerConnected(struct loomComm *comm, int p);
/*
 * The interpreter's view d (all but pos) of the device copy of comm's FIFO
 * to (send) or from peer on a channel, and 1, when both ends launch over it
 * (src/cuda/p2p.c); 0 (d untouched) when launches use the host FIFO.
 */
int p2pDevConn(const struct loomComm *comm, int channel, int peer, int send, struct loomDevConn *d);
/* Releases p2p slots and host registrations; runs before the transports tear down. */
void p2pFree(struct loomComm *comm);

/* ---- loomCommInitAll's devices (src/cuda/p2p.c) ---- */

/* CUDA devices visible; an error (with its line) when the driver does not load. */
loomResult_t p2pDeviceCount(int *count);
/* loomInvalidArgument naming fn and devlist[index] unless CUDA loads and has device dev. */
loomResult_t p2pDeviceCheck(int dev, int index, const char *fn);
/* Makes device dev's primary context current on this thread (retained for good, as the
 * CUDA runtime does), so that a communicator built on this thread binds to dev. */
loomResult_t p2pDeviceEnter(int dev);

#endif /* LOOM_CUDACORE_H_ */
