/*
 * execwait.h — how an executor's thread waits, for every executor (exec.c,
 * kexec.c; execfail.c times its checks by the same stages): spin with a
 * pause, yield for EXEC_YIELD_NS, then sleep on the doorbell's futex,
 * EXEC_SLEEP_NS at most; and the hint that skips the spin stage, a peer
 * this wait is for last seen on this thread's core (each rank publishes
 * its core in its doorbell, struct loomDoorbell's `cpu`). execwait.c.
 */
#ifndef LOOM_EXECWAIT_H_
#define LOOM_EXECWAIT_H_

#include <sched.h>
#include <stdint.h>

#include "bell.h"
#include "core.h"

#define EXEC_SLEEP_NS (100 * 1000 * 1000ULL) /* the longest sleep on the doorbell */
#define EXEC_YIELD_NS (1000 * 1000ULL)       /* a wait yields this long before it sleeps */

/* Sleeps on the futex at addr while it holds val, ns at most; the syscall's result. */
long execFutexWait(_Atomic uint32_t *addr, uint32_t val, uint64_t ns);

/* Wakes a thread of this process blocked in an executor on comm (abort, revoke, shrink). */
void execWake(struct loomComm *comm);

/* The core this thread runs on, plus one (0: not known). */
static inline int32_t execThisCore(void)
{
    int cpu = sched_getcpu();
    return cpu < 0 ? 0 : cpu + 1;
}

/* Publishes core `mine` in a doorbell, only when it changed, so the line stays shared. */
static inline void execBellMarkCore(struct loomDoorbell *own, int32_t mine)
{
    if (atomic_load_explicit(&own->cpu, memory_order_relaxed) != mine)
        atomic_store_explicit(&own->cpu, mine, memory_order_relaxed);
}

/* Whether c's peer, on this host (its bell is not ours: a network one is), was last on `mine`. */
static inline int execPeerSeenOn(const struct loomConnector *c, const struct loomDoorbell *own,
                                 int32_t mine)
{
    return c->peerBell != NULL && c->peerBell != own &&
           atomic_load_explicit(&c->peerBell->cpu, memory_order_relaxed) == mine;
}

/*
 * The same-core check of a thread that does not know which peer it waits
 * for (a kernel executor's block): marks this thread's core in comm's
 * doorbell and says whether any peer of the channel's links on this host
 * was last seen on it. A hint: a wrong guess costs yields, not pauses.
 */
int execChannelPeerOnThisCore(struct loomComm *comm, int channel);

#endif /* LOOM_EXECWAIT_H_ */
