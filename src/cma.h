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
 * 1 if op runs single-copy: comm->cmaOk, at least LOOM_CMA_MIN_BYTES, and
 * LOOM_ALGO allows cma (the caller checks for host buffers and no group).
 * Every rank of a call decides alike.
 */
int cmaEligible(const struct loomOp *op);
/*
 * Reads `bytes` at `remote` in process `pid` into `local` (a PULL step);
 * 0, or the errno of the failed read (ESRCH when the process is gone).
 */
int cmaRead(pid_t pid, void *local, uint64_t remote, size_t bytes);
/* Runs op single-copy (collective: every rank of op->comm calls it). */
loomResult_t cmaRun(struct loomOp *op);

#endif /* LOOM_CMA_H_ */
