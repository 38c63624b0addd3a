/*
 * cma.h — single-copy collectives between the processes of one host, with
 * cross-memory attach (process_vm_readv / process_vm_writev). See cma.c.
 */
#ifndef LOOM_CMA_H_
#define LOOM_CMA_H_

#include "core.h"
#include "enqueue.h"

/*
 * Collective (called by every rank from the shm transport's setup): probes
 * whether this rank may read and write every peer's memory, and agrees with
 * all ranks on comm->cmaOk. `present`: this rank maps the shm segments of all
 * ranks (0 where shm is disabled or some rank lives on another host).
 */
loomResult_t cmaSetup(struct loomComm *comm, int present);
/* Releases what cmaSetup allocated (not collective). */
void cmaTeardown(struct loomComm *comm);
/*
 * Whether op runs here (the caller checks for host buffers and no group):
 * CMA_NO; CMA_ASKED, LOOM_ALGO names cma for it; CMA_IF_MAPPED, it runs here
 * if every rank passes loomMemAlloc buffers (tunerZeroCopy), which cmaRun
 * finds out. Never CMA_ASKED for AlltoAll and AllGather, whose single copies
 * are schedules. All need comm->cmaOk and LOOM_CMA_MIN_BYTES. Every rank of
 * a call decides alike.
 */
enum { CMA_NO = 0, CMA_ASKED, CMA_IF_MAPPED };
int cmaEligible(const struct loomOp *op);
/*
 * Reads `bytes` at `remote` in process `pid` into `local` (a PULL step);
 * 0, or the errno of the failed read (ESRCH when the process is gone).
 */
int cmaRead(pid_t pid, void *local, uint64_t remote, size_t bytes);
/*
 * Runs op single-copy (collective: every rank of op->comm calls it), `mode`
 * cmaEligible's answer. With CMA_IF_MAPPED the ranks first exchange their
 * buffers' descriptors, and where some rank's are not loomMemAlloc memory
 * every rank returns loomSuccess with *declined set, having moved nothing:
 * the caller then runs op as a schedule.
 */
loomResult_t cmaRun(struct loomOp *op, int mode, int *declined);

#endif /* LOOM_CMA_H_ */
