/*
 * cma.h — what the single-copy schedules (algorithms/single.c) need besides
 * their steps: cross-memory attach (process_vm_readv, process_vm_writev)
 * between the processes of one host, probed and agreed at connect. See
 * cma.c.
 */
#ifndef LOOM_CMA_H_
#define LOOM_CMA_H_

#include "core.h"
#include "exec.h"
#include "op.h"

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
 * Whether op's single copies may go through loomMemAlloc mappings, asked
 * where the tuner says to (tunerAsksMapped, src/tuner.h) by every rank of
 * op->comm: the ranks exchange their buffers' descriptors as *lane (a lane
 * of its own, which the planner runs on the host executor: not through its
 * lanes, so the exchange neither touches the schedule cache nor spoils the
 * memo of the call's schedule); then cmaAllMapped is 1 where every buffer
 * op's single copies read on another rank is loomMemAlloc memory (the same
 * answer on every rank): the caller then runs op's single-copy schedule.
 */
void cmaMappedLane(struct loomOp *op, struct loomLane *lane);
int cmaAllMapped(const struct loomOp *op);
/*
 * Reads `bytes` at `remote` in process `pid` into `local` (a PULL step);
 * 0, or the errno of the failed read (ESRCH when the process is gone).
 */
int cmaRead(pid_t pid, void *local, uint64_t remote, size_t bytes);
/* Writes `bytes` from `local` at `remote` in process `pid` (a PUSH step); as cmaRead. */
int cmaWrite(pid_t pid, const void *local, uint64_t remote, size_t bytes);
/* A buffer of comm->slotBytes where a PULL_REDUCE stages a peer's piece (comm->cmaOk only). */
char *cmaStage(const struct loomComm *comm);

#endif /* LOOM_CMA_H_ */
