/*
 * kexec.h — the kernel executor of host buffers: the plan interpreter of
 * src/device/interp.h, compiled for the CPU, with pthreads as a block's
 * threads (kexec.c).
 */
#ifndef LOOM_KEXEC_H_
#define LOOM_KEXEC_H_

#include "core.h"
#include "exec.h"

/*
 * At init, after the transports, where LOOM_EXECUTOR=kernel (the tuner read
 * it: tunerKernelWanted): when every link of comm is shared memory (allShm),
 * builds the interpreter's view of the connectors (comm->kexec); otherwise
 * leaves comm->kexec NULL, and host buffers keep the host executor. The
 * tuner then names the executor in its decisions (tunerExecutor).
 * loomSystemError when out of memory.
 */
loomResult_t kexecSetup(struct loomComm *comm, int allShm);
/* Frees comm->kexec (NULL is fine). */
void kexecFree(struct loomComm *comm);
/* 1 if comm has the kernel executor (kexecSetup made it). */
int kexecUsable(const struct loomComm *comm);
/*
 * Its run is loomExecKernel's (executor.h): host-buffer lanes whose
 * communicators kexecUsable accepts, to completion: one block of
 * LOOM_KERNEL_THREADS threads per (communicator, channel), the calling
 * thread being the first. Same results and errors as execRun.
 */
/*
 * Shared with the launched kernel's watchdog (src/exec/devexec.c): brings
 * exec.c's view of n lanes (step, cur, more, done) up to date from the
 * interpreter's; and the error, recorded, of block d that stopped on an
 * error of its own (a size word that does not match, an unsupported step),
 * lanes being exec.c's view of d's lanes (device: the lanes are on device
 * buffers).
 */
struct loomDevLane;
struct loomDevBlock;
struct loomDevConn;
/* The interpreter's view d of connector c (zeroed when c is not connected): its position at pos,
 * the peer's doorbell `bell` (NULL: none to ring). */
void kexecConnView(struct loomDevConn *d, const struct loomConnector *c, uint64_t *pos, void *bell);
void kexecLanesSync(const struct loomDevLane *dev, struct loomLane *lanes, int n);
loomResult_t kexecBlockError(const struct loomDevBlock *d, const struct loomLane *lanes,
                             int device);
/* Frees this thread's run arrays (when a stream thread ends). */
void kexecThreadCleanup(void);

#endif /* LOOM_KEXEC_H_ */
