/*
 * execwait.c — how an executor's thread waits (execwait.h): the futex sleep
 * on a doorbell, waking the threads that sleep there, and the same-core
 * check of a thread that waits for a whole channel. Shared by the
 * executors; calls none of them.
 */
#include <linux/futex.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "execwait.h"

long execFutexWait(_Atomic uint32_t *addr, uint32_t val, uint64_t ns)
{
    struct timespec ts = {.tv_sec = (time_t)(ns / 1000000000ULL),
                          .tv_nsec = (long)(ns % 1000000000ULL)};
    return syscall(SYS_futex, (uint32_t *)addr, FUTEX_WAIT, val, &ts, NULL, 0);
}

void execWake(struct loomComm *comm)
{
    if (comm->bell != NULL)
        bellWakeAll(comm->bell);
}

int execChannelPeerOnThisCore(struct loomComm *comm, int channel)
{
    int32_t mine = execThisCore();
    if (!mine)
        return 0;
    execBellMarkCore(comm->bell, mine);
    const struct loomChannel *ch = &comm->channels[channel];
    for (int p = 0; p < comm->nranks; p++) {
        for (int dir = 0; dir < 2; dir++) {
            const struct loomConnector *c = dir ? &ch->recv[p] : &ch->send[p];
            if (p != comm->rank && c->connected && execPeerSeenOn(c, comm->bell, mine))
                return 1;
        }
    }
    return 0;
}
