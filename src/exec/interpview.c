/*
 * interpview.c — the interpreter's view of connectors and lanes, shared by
 * the kernel executor (kexec.c) and the launched one (devexec.c); see
 * interpview.h.
 */
#include <string.h>

#include "debug.h"
#include "interp.h"
#include "interpview.h"

int interpServes(const struct loomComm *comm)
{
    return comm->kexec != NULL;
}

void interpConnView(struct loomDevConn *d, const struct loomConnector *c, uint64_t *pos, void *bell)
{
    memset(d, 0, sizeof(*d));
    if (!c->connected || c->fifo == NULL)
        return;
    d->tail = (uint64_t *)(uintptr_t)&c->fifo->tail;
    d->head = (uint64_t *)(uintptr_t)&c->fifo->head;
    d->bytes = c->fifo->bytes;
    d->slots = c->slots;
    d->slotBytes = c->slotBytes;
    d->ll = c->ll;
    d->pos = pos;
    d->bell = bell;
}

void interpLanesSync(const struct loomDevLane *dev, struct loomLane *lanes, int n)
{
    for (int i = 0; i < n; i++) {
        lanes[i].step = dev[i].step;
        lanes[i].cur = dev[i].cur;
        lanes[i].more = dev[i].more;
        lanes[i].done = dev[i].done;
    }
}

loomResult_t interpBlockError(const struct loomDevBlock *d, const struct loomLane *lanes,
                              int device)
{
    const struct loomLane *l = &lanes[d->errLane];
    const struct loomStep *s = &d->lanes[d->errLane].step;
    if (d->status == LOOM_DEV_MISMATCH) {
        loomResult_t res = execMessageMismatch(l, s, d->errPeer, d->errGot, device);
        if (res != loomSuccess)
            return res;
    }
    return loomSetError(loomInternalError,
                        "rank %d: the kernel executor cannot run step %llu (%s) of its plan "
                        "(a single copy, or LL on a link without LL lines)",
                        l->comm->rank, (unsigned long long)d->lanes[d->errLane].cur,
                        loomStepName(s->op));
}
