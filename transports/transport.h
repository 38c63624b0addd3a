/*
 * transport.h — the ops table every transport fills.
 *
 * A transport connects one peer pair at a time; the core (src/connect.c)
 * decides when, and carries what the two ends must tell each other. The
 * core chooses, for every peer pair, the first transport of
 * loomTransports[] that is usable on both ranks and whose canConnect
 * accepts the pair (shm: ranks on one host; net: any pair), and records it
 * in comm->linkTransport[]. Then:
 *
 *   init        once per communicator, on every rank where the transport
 *               is usable and serves a pair anywhere in the communicator:
 *               builds its state and fills this rank's info (at most
 *               LOOM_TRANSPORT_INFO_BYTES: a listening address, say)
 *   initPeers   once the core has gathered every rank's info (all[r] at
 *               r * LOOM_TRANSPORT_INFO_BYTES; zeros for a rank where the
 *               transport was not initialised)
 *   setup       per peer, when the core connects the pair: fills this
 *               end's connection record (recordBytes, or
 *               LOOM_CONNECT_RECORD_BYTES where the transport has none)
 *   connect     per peer, with the peer's record: fills
 *               comm->channels[c].send[peer] / recv[peer] for every channel
 *               and marks them connected
 *
 * The core calls setup for every peer it connects in one go before it
 * waits for any record, and both ends of a pair call setup and connect (a
 * link to this rank itself gets its own record back), so nothing in setup
 * may wait for the peer. No op is collective: a transport never uses the
 * bootstrap; the core moves the infos (one allgather at init) and the
 * records (point-to-point messages, bootstrap.h). canConnect must be
 * symmetric: both ends of a pair must choose alike. The core never names a
 * transport's internals.
 */
#ifndef LOOM_TRANSPORT_H_
#define LOOM_TRANSPORT_H_

#include "core.h"

#define LOOM_TRANSPORT_INFO_BYTES 128
#define LOOM_CONNECT_RECORD_BYTES 64
/* The most any transport's record for one pair may take (recordBytes). */
#define LOOM_CONNECT_RECORD_MAX 4096

struct loomTransport {
    const char *name;
    /* 1 if this transport can be used on this host now; otherwise *why says why. */
    int (*usable)(const char **why);
    /* 1 if this transport can connect this rank and `peer` of comm. */
    int (*canConnect)(const struct loomComm *comm, int peer);
    loomResult_t (*init)(struct loomComm *comm, void *info);
    loomResult_t (*initPeers)(struct loomComm *comm, const void *all);
    loomResult_t (*setup)(struct loomComm *comm, int peer, void *record);
    /*
     * Optional: the size of the record setup fills for `peer`, at most
     * LOOM_CONNECT_RECORD_MAX, and the same on both ends of the pair; NULL:
     * LOOM_CONNECT_RECORD_BYTES. Known once initPeers has run.
     */
    size_t (*recordBytes)(const struct loomComm *comm, int peer);
    loomResult_t (*connect)(struct loomComm *comm, int peer, const void *record);
    /* Releases what init and connect built (not collective; safe after a partial init). */
    void (*teardown)(struct loomComm *comm);
    /* Optional: a name for the link to `peer` ("net/socket"); NULL: the transport's name. */
    const char *(*linkName)(const struct loomComm *comm, int peer);
    /* Optional: the devices it may use on this host, as lines of text for loom-info. */
    const char *(*devices)(void);
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
