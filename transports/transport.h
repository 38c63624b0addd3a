/*
 * transport.h — the ops table every transport fills.
 *
 * A transport connects the connectors of a communicator for the peer pairs
 * it serves (shm: ranks on one host). setup is collective over the
 * communicator (it may use the bootstrap's allgather and barrier); it fills
 * comm->channels[c].send[p] / recv[p] and marks them connected. The core
 * never names a transport's internals: it walks loomTransports[].
 */
#ifndef LOOM_TRANSPORT_H_
#define LOOM_TRANSPORT_H_

#include "core.h"

struct loomTransport {
    const char *name;
    /* 1 if this transport can be used on this host now; otherwise *why says why. */
    int (*usable)(const char **why);
    /* 1 if this transport can connect this rank and `peer` of comm. */
    int (*canConnect)(const struct loomComm *comm, int peer);
    /* Collective: connects every peer pair canConnect accepts. */
    loomResult_t (*setup)(struct loomComm *comm);
    /* Releases what setup built (not collective; safe after a partial setup). */
    void (*teardown)(struct loomComm *comm);
};

extern const struct loomTransport shmTransport;

/* The transports compiled in, in order of preference; NULL-terminated. */
extern const struct loomTransport *const loomTransports[];

#endif /* LOOM_TRANSPORT_H_ */
