/*
 * cma.h — single copies between the processes of one host: whether they are
 * possible, whether a call takes them, the reads of PULL steps
 * (process_vm_readv) and the writes of PUT steps (process_vm_writev). The
 * schedules are algorithms/direct.c's. See cma.c.
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
 * 1 if op (one call, not in a group, on host buffers: the caller checks)
 * takes single copies where every rank passes loomMemAlloc buffers, which
 * cmaAgree finds out (tunerZeroCopy, a core for each rank, LOOM_CMA_MIN_BYTES,
 * comm->cmaOk); 0 where it does not, or where LOOM_ALGO names cma, which
 * the tuner then picks by itself. Every rank of a call decides alike.
 */
int cmaEligible(const struct loomOp *op);
/*
 * Collective (every rank of op->comm, for an op cmaEligible took): the ranks
 * exchange their buffers' descriptors over the FIFOs; *mapped is 1 where
 * every buffer the call's single-copy schedule reads on another rank is
 * loomMemAlloc memory, the same on every rank.
 */
loomResult_t cmaAgree(struct loomOp *op, int *mapped);
/*
 * Reads `bytes` at `remote` in process `pid` into `local` (a PULL step);
 * 0, or the errno of the failed read (ESRCH when the process is gone).
 */
int cmaRead(pid_t pid, void *local, uint64_t remote, size_t bytes);
/* Writes `bytes` from `local` at `remote` in process `pid` (a PUT step); as cmaRead. */
int cmaWrite(pid_t pid, const void *local, uint64_t remote, size_t bytes);
/*
 * Where a PULL_REDUCE_COPY reads the pieces of peers it cannot map:
 * LOOM_STEP_MAXPEERS areas of *each bytes (NULL, 0 without single copies).
 */
char *cmaScratch(struct loomComm *comm, size_t *each);

#endif /* LOOM_CMA_H_ */
