/*
 * connect.h — connecting a communicator's peers at init and on demand
 * (see connect.c).
 */
#ifndef LOOM_CONNECT_H_
#define LOOM_CONNECT_H_

#include "core.h"
#include "exec.h"

/*
 * At init, collective: chooses a transport for every pair, initialises the
 * transports (one allgather of their infos) and connects this rank to
 * itself, its ring neighbours and its AllReduce tree neighbours (every pair
 * with LOOM_CONNECT_ALL=1 on any rank).
 */
loomResult_t connectInit(struct loomComm *comm);
/*
 * Connects this rank to each of peers[0..n) not connected yet; each such
 * peer must connect to this rank too (at about the same time: the wait is
 * bounded by the timeout). `why` names the occasion in error lines.
 */
loomResult_t connectPeers(struct loomComm *comm, const int *peers, int n, const char *why);
/* Connects the peers the lanes' plans talk to (the executors' prepare runs it: executor.h). */
loomResult_t connectLanes(struct loomLane *lanes, int nlanes);
/* Releases connect's own state (the transports release theirs). */
void connectFree(struct loomComm *comm);

#endif /* LOOM_CONNECT_H_ */
