/*
 * transport.h — the ops table every transport fills.
 *
 * A transport connects the connectors of a communicator for the peer pairs
 * it serves. The core chooses, for every peer pair, the first transport of
 * loomTransports[] that is usable on both ranks and whose canConnect
 * accepts the pair (shm: ranks on one host; net: any pair), and records it
 * in comm->linkTransport[]. Then it calls setup of every transport that
 * serves at least one pair anywhere in the communicator, on every rank, in
 * the table's order: setup is collective (it may use the bootstrap's
 * allgather and barrier), so a rank whose own pairs use none of that
 * transport still takes part. setup fills comm->channels[c].send[p] /
 * recv[p] for the peers transportServes() names and marks them connected.
 * canConnect must be symmetric: both ends of a pair must choose alike. The
 * core never names a transport's internals.
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
    /* Optional: a name for the link to `peer` ("net/socket"); NULL: the transport's name. */
    const char *(*linkName)(const struct loomComm *comm, int peer);
};

extern const struct loomTransport shmTransport;
extern const struct loomTransport netTransport;

/* 1 if transport t is usable on `rank` of comm (as that rank reported at init). */
int transportUsableOn(const struct loomComm *comm, const struct loomTransport *t, int rank);
/* 1 if t carries the link between this rank and `peer` (peer may be this rank). */
int transportServes(const struct loomComm *comm, const struct loomTransport *t, int peer);

/* The transports compiled in, in order of preference; NULL-terminated. */
extern const struct loomTransport *const loomTransports[];

#endif /* LOOM_TRANSPORT_H_ */
