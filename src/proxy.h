/*
 * proxy.h — the progress thread of the network transports.
 *
 * A network connector is local memory on both ends: the executor writes a
 * send slot and advances its tail, or reads a receive slot and advances its
 * head, exactly as over shared memory. Something must then carry the slot
 * across the wire and advance the counters the executor waits for: that is
 * the proxy, one thread per communicator that uses the network. The
 * transport gives it three callbacks (move what can move, the sockets to
 * wait for when nothing can, whether all outgoing data has left) and the
 * proxy decides when to run them:
 *
 *   executor: write slot, tail++ -> ring proxyBell ----+
 *                                                      v
 *   proxy:  progress() -> ...moved? ring comm->bell    spin -> yield -> poll(sockets + eventfd)
 *
 * The proxy's doorbell has an eventfd (struct loomDoorbell.wakeFd), so one
 * poll() waits for the executor and the network at once.
 */
#ifndef LOOM_PROXY_H_
#define LOOM_PROXY_H_

#include <poll.h>

#include "core.h"

struct loomProxyOps {
    /* Moves whatever can move now, never blocking; sets *moved to 1 if anything did. */
    void (*progress)(void *ctx, int *moved);
    /* Fills at most max pollfds to wait on when idle; returns how many, or -1: do not sleep. */
    int (*pollSet)(void *ctx, struct pollfd *fds, int max);
    /* 1 when every message the executor handed over has left this process. */
    int (*drained)(void *ctx);
};

struct loomProxy;

/*
 * Starts the progress thread of comm, serving ops on ctx; maxFds bounds what
 * pollSet may return. On failure nothing is left running.
 */
loomResult_t proxyStart(struct loomComm *comm, const struct loomProxyOps *ops, void *ctx,
                        int maxFds, struct loomProxy **out);
/* The doorbell the executor rings after it advances a counter of a network connector. */
struct loomDoorbell *proxyBell(struct loomProxy *p);
/*
 * Stops the thread: it first keeps going until drained() or for drainSec
 * seconds (0: stop at once, as for an abort), then exits; joins and frees p.
 * NULL is a no-op.
 */
void proxyStop(struct loomProxy *p, double drainSec);

#endif /* LOOM_PROXY_H_ */
