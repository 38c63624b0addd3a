/*
 * lifecycle.h — what the files that make and end communicators share
 * (init.c, revoke.c, shrink.c, grow.c): the entry checks of a call that makes
 * a new communicator, and waiting for a revoked one to settle.
 */
#ifndef LOOM_LIFECYCLE_H_
#define LOOM_LIFECYCLE_H_

#include "core.h"

/* The checks of loomCommInitRankConfig's arguments, with `fn` in the error line. */
loomResult_t commCheckInitArgs(loomComm_t *comm, int nranks, int rank, loomConfig_t *config,
                               const char *fn);
/*
 * For a revoked comm: 1 once nothing of it runs any more (then the abort
 * flag is down again, for the bootstrap ring of loomCommSplit), else 0;
 * with `wait`, waits for that. 1 at once for a comm not revoked.
 */
int commRevokeSettle(struct loomComm *comm, int wait);
/*
 * The entry checks of a call that makes a new communicator of comm (split,
 * grow): commCheck, then commCheckReady, except that a revoked comm passes
 * once its stopped operations are out of the way.
 */
loomResult_t commCheckParent(struct loomComm *comm, const char *fn);

#endif /* LOOM_LIFECYCLE_H_ */
