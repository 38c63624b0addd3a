/*
 * exec.h — a lane, what every executor runs (executor.h), and the services
 * of the executor layer: what ends a wait and how the peers hear of a
 * failure (execfail.h), how a thread waits (execwait.h).
 *
 * A lane is one plan applied to one operation's buffers on one channel; the
 * executor expands the plan into steps as it goes (loomPlanNext).
 * A plan (one call, or one group) is a set of lanes run together: each lane
 * goes step by step in order, but lanes progress independently, so any
 * matching set of sends and receives completes. Two lanes that use the same
 * connector take turns in plan order (the order the user issued them, the
 * same on both ends). The host executor that runs them on the CPU is
 * exec.c; it is reached, as every executor is, through executor.h.
 */
#ifndef LOOM_EXEC_H_
#define LOOM_EXEC_H_

#include "core.h"
#include "schedule.h"

struct loomLane {
    struct loomComm *comm;
    int channel;
    const struct loomPlan *plan; /* expanded step by step as the lane runs */
    char *bufs[2];               /* LOOM_BUF_SEND, LOOM_BUF_RECV */
    loomDataType_t dt;
    loomRedOp_t op;
    size_t elemSize;
    int proto;    /* LOOM_PROTO_* (src/device/interp.h): LL only in the kernel executor */
    int compress; /* COMPRESS_* (compress.h): float32 as bfloat16 on network links */
    /* Set by the executor that runs it: */
    struct loomPlanIter it;
    struct loomStep step; /* the step to run next, while `more` */
    int more;
    size_t cur; /* steps run */
    int done;
    /* Send connectors that took a message by reference (LOOM_FIFO_REF) in this run: */
#define EXEC_REF_LINKS 4
    struct loomConnector *refs[EXEC_REF_LINKS];
    int nrefs;
};

/* The executor layer's services, which every executor and the core use. */
#include "execfail.h"
#include "execwait.h"

#endif /* LOOM_EXEC_H_ */
