/*
 * bell.h — a process's doorbell and the failure notices posted on it: the
 * one way a rank wakes another, below both the executor (exec.c, which
 * waits on its own bell and rings its peers') and the transports (the
 * network proxy rings the bells of the threads it serves and posts the
 * notices that arrive over a socket).
 */
#ifndef LOOM_BELL_H_
#define LOOM_BELL_H_

#include <stdatomic.h>
#include <stdint.h>

#include "loom.h"

#ifndef LOOM_CACHELINE
#define LOOM_CACHELINE 64
#endif

#define LOOM_NOTICE_BYTES 320

/*
 * A process's doorbell, in shared memory: peers bump `seq` and wake the
 * futex on it when `sleeping` says the owner went to sleep waiting for them.
 * The notice is how a peer that stopped on a fatal error (a dead rank, a
 * timeout, mismatched calls) tells this process to stop waiting too: the
 * first poster moves `noticeState` from 0 to 1, fills code, rank and text,
 * then publishes 2 (release) and rings; later posters find it taken.
 * A thread that sleeps in poll() rather than on the futex (the network
 * proxy, which also waits for sockets) sets `wakeFd` to an eventfd of its
 * own, which ringers write instead; 0 (as in zeroed shared memory) means
 * the futex. Such bells are process-local.
 *
 * `cpu` is the core its owner's thread was on when it last began a call or a wait,
 * plus one (0: not known yet). A peer about to spin for this owner on that
 * same core yields instead (exec.c): the owner it waits for cannot run
 * there while it spins.
 */
struct loomDoorbell {
    _Alignas(LOOM_CACHELINE) _Atomic uint32_t seq;
    _Alignas(LOOM_CACHELINE) _Atomic uint32_t sleeping;
    _Alignas(LOOM_CACHELINE) _Atomic int32_t cpu;
    _Alignas(LOOM_CACHELINE) _Atomic uint32_t noticeState;
    int32_t noticeCode; /* loomResult_t */
    int32_t noticeFrom; /* rank that posted it */
    char notice[LOOM_NOTICE_BYTES];
    int32_t wakeFd;
};

/* Rings a doorbell: wakes its owner if it sleeps. Any thread, any process that maps it. */
void bellRing(struct loomDoorbell *bell);
/* Wakes every thread sleeping on bell, whether or not it flagged itself (abort). */
void bellWakeAll(struct loomDoorbell *bell);
/*
 * Posts one failure notice (code, posting rank, text) on `bell` and wakes
 * its owner. Returns 1, or 0 when the bell already holds a notice (the
 * first one stays).
 */
int bellPostNotice(struct loomDoorbell *bell, loomResult_t res, int from, const char *text);

#endif /* LOOM_BELL_H_ */
