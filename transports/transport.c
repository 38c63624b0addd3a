/*
 * transport.c — the transports compiled in, in order of preference, and
 * what a transport may ask of that table: whether a transport is usable on a
 * rank, and whether it carries the link to a peer (transport.h). Here, below
 * the core, so that a transport calls nothing upstairs; the core
 * (src/connect.c) chooses the links.
 */
#include "transport.h"

const struct loomTransport *const loomTransports[] = {&shmTransport, &netTransport, NULL};

int transportUsableOn(const struct loomComm *comm, const struct loomTransport *t, int rank)
{
    for (int i = 0; loomTransports[i]; i++)
        if (loomTransports[i] == t)
            return (comm->peers[rank].usable >> i) & 1;
    return 0;
}

int transportServes(const struct loomComm *comm, const struct loomTransport *t, int peer)
{
    int i = comm->linkTransport[peer];
    return i >= 0 && loomTransports[i] == t;
}
