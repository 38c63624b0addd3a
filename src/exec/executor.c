/*
 * executor.c — the table of executors, and what the planner does around
 * every run (executor.h).
 */
#include "executor.h"

static const struct loomExecutor *const executors[LOOM_EXECUTOR_NUM] = {
    [LOOM_EXECUTOR_HOST] = &loomExecHost,
    [LOOM_EXECUTOR_KERNEL] = &loomExecKernel,
    [LOOM_EXECUTOR_CUDA] = &loomExecCuda,
    [LOOM_EXECUTOR_LAUNCH] = &loomExecLaunch,
};

const struct loomExecutor *executorOf(int kind)
{
    return executors[kind];
}

loomResult_t executorRun(const struct loomExecutor *x, struct loomLane *lanes, int nlanes,
                         const struct loomExecCall *call)
{
    loomResult_t err = x->prepare(lanes, nlanes, call);
    return err != loomSuccess ? err : x->run(lanes, nlanes, call);
}

void executorReclaim(const struct loomExecutor *x, struct loomComm *comm)
{
    for (int k = 0; k < LOOM_EXECUTOR_NUM; k++)
        if (executors[k] != x && executors[k]->reclaim != NULL)
            executors[k]->reclaim(comm);
}
