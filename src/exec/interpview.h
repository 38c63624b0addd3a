/*
 * interpview.h — what the two executors that run the plan interpreter
 * (src/device/interp.h) share: kexec.c, its host build on threads, and
 * devexec.c, its launch on the GPU. The interpreter sees a connector and a
 * lane through structs of its own (struct loomDevConn, loomDevLane); these
 * build the one from a connector, bring a lane's view back for the failure
 * services (execfail.h), and turn a block's error record into the error
 * line. interpview.c; it calls no executor.
 */
#ifndef LOOM_INTERPVIEW_H_
#define LOOM_INTERPVIEW_H_

#include <stdint.h>

#include "exec.h"

struct loomDevConn;
struct loomDevLane;
struct loomDevBlock;

/*
 * 1 if the interpreter runs comm's calls: at init kexecSetup built its view
 * of comm's connectors (comm->kexec: LOOM_EXECUTOR=kernel and every link
 * over shared memory). The kernel executor serves host buffers of such a
 * communicator, the launched one device buffers.
 */
int interpServes(const struct loomComm *comm);
/*
 * The interpreter's view d of connector c (zeroed when c is not connected):
 * its position at pos, the peer's doorbell `bell` (NULL: none to ring).
 */
void interpConnView(struct loomDevConn *d, const struct loomConnector *c, uint64_t *pos,
                    void *bell);
/* Brings the lanes' step, cur, more and done up to date from the interpreter's view dev of n. */
void interpLanesSync(const struct loomDevLane *dev, struct loomLane *lanes, int n);
/*
 * The error, recorded, of block d that stopped on an error of its own (a
 * size word that does not match, an unsupported step), lanes being the
 * executor's view of d's lanes (device: they are on device buffers).
 */
loomResult_t interpBlockError(const struct loomDevBlock *d, const struct loomLane *lanes,
                              int device);

#endif /* LOOM_INTERPVIEW_H_ */
