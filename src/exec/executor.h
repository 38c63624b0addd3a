/*
 * executor.h — what runs a plan's lanes: one interface, four executors.
 *
 *   LOOM_EXECUTOR_HOST    the host executor (exec.c): host buffers
 *   LOOM_EXECUTOR_KERNEL  the plan interpreter on the CPU (kexec.c):
 *                         host buffers under LOOM_EXECUTOR=kernel
 *   LOOM_EXECUTOR_CUDA    the host-driven CUDA executor: the host executor's
 *                         loop (exec.c), each step issued to the GPU by its
 *                         device steps (cudaexec.c)
 *   LOOM_EXECUTOR_LAUNCH  the plan interpreter launched on the GPU
 *                         (devexec.c): device buffers under LOOM_EXECUTOR=kernel
 *
 * The tuner asks each which communicators it serves when one is built and
 * names the executor in its decision record (src/tuner.h); the planner
 * takes one per call or group from it and runs the lanes through
 * executorRun: the executor's prepare (execPrepare for all four: a failure
 * heard of, then the peers connected the first time by the core's
 * connectLanes, which the planner hands down in struct loomExecCall), then
 * its run, which marks the communicators broken on its own errors.
 *
 * Who calls whom in src/exec/ (docs/design.md, "Executors"): no executor
 * calls another. What they share are the executor layer's services, which
 * call no executor: the failure services (execfail.h: what ends a wait, a
 * message not as expected, marking the communicators broken and telling the
 * peers), how a thread waits (execwait.h), the interpreter's views
 * (interpview.h, kexec.c's and devexec.c's), the CUDA side of a device plan
 * (cudaplan.h, the two device executors'), and what runs steps on the CPU
 * (reduce.c, cma.c, mem.c). cudaexec.c is the host-driven CUDA executor's
 * device steps, called by exec.c only. This table (executor.c) is the one
 * place that names all four; the core reaches them through it, except
 * plan.c's launched path, which runs on loomExecLaunch by name.
 */
#ifndef LOOM_EXECUTOR_H_
#define LOOM_EXECUTOR_H_

#include "core.h"
#include "exec.h"
#include "op.h"

enum {
    LOOM_EXECUTOR_HOST,
    LOOM_EXECUTOR_KERNEL,
    LOOM_EXECUTOR_CUDA,
    LOOM_EXECUTOR_LAUNCH,
    LOOM_EXECUTOR_NUM
};

struct cudaExec;
struct loomStream;

/*
 * What the launched executor needs of the core's Loom streams (stream.c),
 * handed down with each call rather than called upstairs: whether a stream
 * wraps a CUDA stream, the cudaStream_t it wraps, and recording an error on
 * it (a launch that fails after its call returned).
 */
struct loomExecStreams {
    int (*isCuda)(const struct loomStream *s);
    void *(*handle)(const struct loomStream *s);
    void (*recordError)(struct loomStream *s, loomResult_t res, const char *line);
};

/* What a run is given besides its lanes. */
struct loomExecCall {
    struct cudaExec *dev;      /* device buffers: this thread's CUDA side (cudaplan.h) */
    struct loomStream *stream; /* LAUNCH: the Loom CUDA stream it goes on; NULL: the call waits */
    const struct loomExecStreams *streams; /* LAUNCH: the ops' streams seen through these */
    const struct loomOp *ops;              /* the call, or the group */
    int nops;
    /*
     * Connects the peers the lanes' plans talk to for the first time: the
     * core's (src/connect.c, connectLanes), handed down so that prepare runs
     * it after the failure checks and before the first step. NULL: the
     * caller connected them.
     */
    loomResult_t (*connect)(struct loomLane *lanes, int nlanes);
};

struct loomExecutor {
    const char *name;
    int lines; /* runs LL steps (LOOM_PROTO_LL) */
    /* 1 if it can run comm's calls (asked once, when comm is built). */
    int (*serves)(const struct loomComm *comm);
    /* Before a plan's first step (execPrepare, execfail.h, for all four: it runs call->connect). */
    loomResult_t (*prepare)(struct loomLane *lanes, int nlanes, const struct loomExecCall *call);
    /*
     * Runs the lanes to completion (a launch on a Loom CUDA stream: until it
     * is launched). loomSuccess, or the error, recorded, with the
     * communicators marked broken (execfail.h: execMarkBroken; the host
     * executor's errors are listed in exec.c, above its executors).
     */
    loomResult_t (*run)(struct loomLane *lanes, int nlanes, const struct loomExecCall *call);
    /*
     * Before another executor runs on comm: takes back what this one still
     * holds of comm (NULL: never anything).
     */
    void (*reclaim)(struct loomComm *comm);
};

/* The four, each defined beside its code: host and cuda in exec.c, kernel in kexec.c, launch in
 * devexec.c. */
extern const struct loomExecutor loomExecHost, loomExecKernel, loomExecCuda, loomExecLaunch;

/* The executor of a kind (LOOM_EXECUTOR_*). */
const struct loomExecutor *executorOf(int kind);

/* x's prepare, then x's run. */
loomResult_t executorRun(const struct loomExecutor *x, struct loomLane *lanes, int nlanes,
                         const struct loomExecCall *call);

/* Before x runs on comm: every other executor's reclaim. */
void executorReclaim(const struct loomExecutor *x, struct loomComm *comm);

#endif /* LOOM_EXECUTOR_H_ */
