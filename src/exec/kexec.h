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
 * leaves comm->kexec NULL, and host buffers keep the host executor
 * (interpServes says which). The tuner then names the executor in its
 * decisions (tunerExecutor).
 * loomSystemError when out of memory.
 */
loomResult_t kexecSetup(struct loomComm *comm, int allShm);
/* Frees comm->kexec (NULL is fine). */
void kexecFree(struct loomComm *comm);
/*
 * Its run is loomExecKernel's (executor.h): host-buffer lanes whose
 * communicators it serves (interpServes, interpview.h), to completion: one
 * block of LOOM_KERNEL_THREADS threads per (communicator, channel), the
 * calling thread being the first. Same results and errors as the host
 * executor's.
 */
/* Frees this thread's run arrays (when a stream thread ends). */
void kexecThreadCleanup(void);

#endif /* LOOM_KEXEC_H_ */
