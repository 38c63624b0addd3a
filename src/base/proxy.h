/*
 * proxy.h — the progress thread of the network transports.
 *
 * A network connector is local memory on both ends: the executor writes a
 * send slot and advances its tail, or reads a receive slot and advances its
 * head, exactly as over shared memory. Something must then carry the slot
 * across the wire and advance the counters the executor waits for. Two
 * threads may: the executor itself, through the connector's progress hook,
 * right after it published a slot and while it spins waiting (no thread
 * hand-off on the latency path); and the proxy, one thread per
 * communicator that uses the network, which moves whatever the executor
 * left (large messages, waits that went to sleep, a busy executor). The
 * transport serialises them with a lock the executor only tries.
 *
 *   executor: write slot, tail++ -> hook: try the lock, send now ----------+
 *                                   (lock busy: the proxy is in a pass and |
 *                                    makes one more before it sleeps)      v
 *   proxy:  progress() -> moved? ring comm->bell   busy poll -> epoll_wait(sockets, eventfd)
 *
 * The proxy watches the transport's sockets edge-triggered (readable and
 * writable), so what it waits for never has to be recomputed: any new data
 * or buffer space wakes it once. While an executor blocks in poll() on the
 * sockets of small messages itself (quietUntil), the proxy sleeps on its
 * doorbell only, for as long as that lasts: the edges that come meanwhile
 * stay in the epoll set and wake it once the executor is done. Its doorbell has an eventfd
 * (struct loomDoorbell.wakeFd) for the executor to ring when it leaves work
 * behind.
 */
#ifndef LOOM_PROXY_H_
#define LOOM_PROXY_H_

#include "core.h"

struct loomProxyOps {
    /* Moves whatever can move now, never blocking; sets *moved to 1 if anything did. */
    void (*progress)(void *ctx, int *moved);
    /* Called before the thread sleeps: 0 to sleep, -1 when there is work it cannot wait for. */
    int (*beforeSleep)(void *ctx);
    /* 1 when every message the executor handed over has left this process. */
    int (*drained)(void *ctx);
    /*
     * Optional: until when (loomClockNs) an executor polls its sockets
     * itself, or 0. Until then the thread sleeps on its doorbell alone, not
     * on the sockets, so that a message the executor waits for does not
     * also wake this thread (a second wake-up a message, and a race for
     * the bytes); it still makes a pass when the time is up.
     */
    uint64_t (*quietUntil)(void *ctx);
};

struct loomProxy;

/* Starts the progress thread of comm, serving ops on ctx. On failure nothing is left running. */
loomResult_t proxyStart(struct loomComm *comm, const struct loomProxyOps *ops, void *ctx,
                        struct loomProxy **out);
/* Wakes the thread whenever fd becomes readable or writable (edge-triggered). */
loomResult_t proxyWatch(struct loomProxy *p, int fd);
/* The doorbell that wakes the thread (helper threads and the executor ring it). */
struct loomDoorbell *proxyBell(struct loomProxy *p);
/*
 * Stops the thread: it first keeps going until drained() or for drainSec
 * seconds (0: stop at once, as for an abort), then exits; joins it. The
 * doorbell stays valid until proxyFree, so threads of the transport that
 * ring it (socket helpers) may be stopped after the proxy. NULL is a no-op.
 */
void proxyStop(struct loomProxy *p, double drainSec);
/* Frees a stopped proxy, once nothing rings its doorbell any more. NULL is a no-op. */
void proxyFree(struct loomProxy *p);

#endif /* LOOM_PROXY_H_ */
