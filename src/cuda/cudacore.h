/*
 * cudacore.h — what the core calls in the CUDA parts (src/cuda/ and the two
 * CUDA executors of src/exec/, all a layer below the core); each hook is one
 * line at its call site, so the core reads the same with or without a GPU.
 *
 *   opcheck.c  opCheck      -> cudaOpCheck: host or device buffers, and the errors
 *   plan.c     planExecute  -> cudaPlanBegin / cudaPlanEnd around the executor's run
 *                              (src/exec/executor.h: loomExecCuda's or loomExecLaunch's)
 *              stageInPlace -> cudaStageInPlace for a device AlltoAll in place
 *   exec.c     execRun(dev) -> cudaExecStep instead of computing on the CPU,
 *                              cudaExecRetire publishes the counters of finished steps
 *   stream.c   loomStreamSynchronize, destroy -> devexecSettle (the CUDA
 *              streams themselves are the core's: src/cudastream.h)
 *   init.c     peer exchange, connect, free -> p2pPeerInfo, p2pSetup, p2pFree,
 *              devexecFree
 *
 * Every hook is cheap for host buffers: a plan on host memory never touches
 * the driver, and a process that never loaded the driver never loads it.
 */
#ifndef LOOM_CUDACORE_H_
#define LOOM_CUDACORE_H_

#include <stdint.h>

#include "core.h"
#include "exec.h"
#include "op.h"

struct cudaExec;
struct loomDevConn;
struct loomStream;

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
