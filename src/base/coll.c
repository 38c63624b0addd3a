/*
 * coll.c — the collectives' names, one table for every message, log line
 * and error that names one: the name of the API call ("loomAllReduce"), so
 * that what a user reads matches what the user called. (LOOM_ALGO's and the
 * tools' lower-case words are parse tables of their own: tuner.c,
 * tools/.)
 */
#include "core.h"

static const char *const collNames[LOOM_COLL_NUM] = {
    [LOOM_COLL_BROADCAST] = "loomBroadcast",
    [LOOM_COLL_REDUCE] = "loomReduce",
    [LOOM_COLL_ALLREDUCE] = "loomAllReduce",
    [LOOM_COLL_ALLGATHER] = "loomAllGather",
    [LOOM_COLL_REDUCESCATTER] = "loomReduceScatter",
    [LOOM_COLL_ALLTOALL] = "loomAlltoAll",
    [LOOM_COLL_ALLTOALLV] = "loomAlltoAllv",
    [LOOM_COLL_SEND] = "loomSend",
    [LOOM_COLL_RECV] = "loomRecv",
};

const char *loomCollName(loomColl_t coll)
{
    return (unsigned)coll < LOOM_COLL_NUM ? collNames[coll] : "loom?";
}
