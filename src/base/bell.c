/*
 * bell.c — ringing doorbells and posting failure notices (see bell.h).
 *
 * The owner of a bell that found nothing to do flags `sleeping` and waits
 * on the futex over `seq` (or on its eventfd, `wakeFd`, when it also waits
 * for sockets); a ringer bumps `seq` and wakes it only when the flag says
 * somebody sleeps, so that a ring costs a fence and a load while everyone
 * is awake. The fence pairs with the owner's: either the owner sees the new
 * data before it sleeps, or the ringer sees the flag.
 */
#include <limits.h>
#include <linux/futex.h>
#include <stdio.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "bell.h"

void bellRing(struct loomDoorbell *bell)
{
    atomic_thread_fence(memory_order_seq_cst);
    if (atomic_load_explicit(&bell->sleeping, memory_order_relaxed)) {
        atomic_fetch_add_explicit(&bell->seq, 1, memory_order_seq_cst);
        if (bell->wakeFd > 0) {
            uint64_t one = 1;
            ssize_t ignored = write(bell->wakeFd, &one, sizeof(one)); /* full counter: awake */
            (void)ignored;
        } else {
            syscall(SYS_futex, (uint32_t *)&bell->seq, FUTEX_WAKE, INT_MAX, NULL, NULL, 0);
        }
    }
}

void bellWakeAll(struct loomDoorbell *bell)
{
    atomic_fetch_add_explicit(&bell->seq, 1, memory_order_seq_cst);
    syscall(SYS_futex, (uint32_t *)&bell->seq, FUTEX_WAKE, INT_MAX, NULL, NULL, 0);
}

int bellPostNotice(struct loomDoorbell *bell, loomResult_t res, int from, const char *text)
{
    uint32_t free = 0;
    if (!atomic_compare_exchange_strong(&bell->noticeState, &free, 1))
        return 0;
    bell->noticeCode = (int32_t)res;
    bell->noticeFrom = from;
    snprintf(bell->notice, sizeof(bell->notice), "%s", text);
    atomic_store_explicit(&bell->noticeState, 2, memory_order_release);
    bellWakeAll(bell);
    return 1;
}
