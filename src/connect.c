/*
 * connect.c — connecting a communicator's peers: the links every
 * communicator uses at init, the others when a plan first needs them.
 *
 * Init connects each rank to itself, to its two ring neighbours and to its
 * neighbours in the two AllReduce trees (topo.c): what the ring and tree
 * schedules, which every communicator runs, talk over. Any other pair is
 * connected by the first plan that uses it (connectLanes, which the
 * planner hands the executor with each call, struct loomExecCall: its
 * prepare runs it before the first step): AlltoAll, Send/Recv, recursive
 * doubling, the trees of a Broadcast or Reduce. With LOOM_CONNECT_ALL=1 on any rank
 * every pair is connected at init (the ranks agree at init, since a pair's
 * two ends must connect together).
 *
 * The transports (transports/transport.h) connect one pair at a time; the
 * core moves what the two ends must tell each other. At init it gathers
 * every rank's transport infos in one allgather. For each set of peers to
 * connect, on both ends of every pair:
 *
 *   1. setup, for every peer of the set: this end's record;
 *   2. the record to each peer, by bootstrapSend (it never waits for the peer);
 *   3. each peer's record, by bootstrapRecv, and connect;
 *   4. a word to each peer that this end is connected, and each peer's word.
 *
 * Step 4 is why neither end can leave before the other has connected. An
 * end may still need the other's resources while it connects (the shared
 * memory a pair's lower rank made, until the higher has opened it), and
 * without it a sender whose message fit in the FIFO could destroy its
 * communicator, unlinking that segment, before its receiver had opened it.
 *
 * Every rank sends all its records before it waits for any, so ranks that
 * reach a pair at different times, or connect overlapping sets in
 * different orders, never wait on each other in a cycle: whoever is first
 * waits until the other comes. A wait ends at LOOM_TIMEOUT (loomTimeout
 * naming the peer), or as soon as the peer is known to have failed (its
 * process on this host is gone, a network link to it ended) or a failure
 * notice reached this rank's doorbell (loomRemoteError naming who failed).
 * One thread at a time connects a communicator (connectLock). One thread
 * may connect several communicators together: the ranks of one process
 * that loomCommInitAll made, driven by one thread in a group, are each
 * other's peers, so each step is taken by all of them before the next
 * (connectMany); connecting them one after the other would wait for a
 * record the same thread has yet to send.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bootstrap.h"
#include "connect.h"
#include "cudacore.h"
#include "debug.h"
#include "exec.h"
#include "param.h"
#include "socket.h"
#include "topo.h"
#include "transport.h"

#define CONNECT_TAG 0x434f4e4eu   /* "CONN": one record per pair and communicator */
#define CONNECTED_TAG 0x434f4e44u /* "COND": then one word that the sender is connected */
#define CONNECT_SMALL 64
_Static_assert(LOOM_CONNECT_RECORD_MAX <= BOOTSTRAP_MSG_MAX_BYTES, "a record is one message");
#define CONNECT_SCAN_NS (250 * 1000 * 1000ULL)

/* The first transport usable on both ends that accepts the pair, for every peer. */
static uint32_t chooseLinks(struct loomComm *comm, int *unreachable)
{
    uint32_t used = 0;
    *unreachable = -1;
    for (int p = 0; p < comm->nranks; p++) {
        uint32_t both = comm->peers[comm->rank].usable & comm->peers[p].usable;
        comm->linkTransport[p] = -1;
        for (int t = 0; loomTransports[t] && comm->linkTransport[p] < 0; t++)
            if (((both >> t) & 1) && loomTransports[t]->canConnect(comm, p))
                comm->linkTransport[p] = (signed char)t;
        if (comm->linkTransport[p] >= 0)
            used |= 1u << comm->linkTransport[p];
        else if (*unreachable < 0)
            *unreachable = p;
    }
    return used;
}

/* ---- connecting a set of peers ---- */

struct connectWait {
    struct loomComm *comm;
    int heard;         /* a failure notice is on this rank's doorbell */
    uint64_t lastScan; /* when the ranks of this host were last looked at */
};

/*
 * Whether a wait for peer's record should end: the peer failed, a notice came, or a rank of
 * this host is gone (the call cannot succeed then; the peer may be waiting on it, or have
 * left because of it).
 */
static int connectPeerGone(void *ctx, int peer)
{
    struct connectWait *w = ctx;
    struct loomComm *comm = w->comm;
    if (execPeerFailure(comm) != loomSuccess) {
        w->heard = 1;
        return 1;
    }
    if (execPeerFailed(comm, peer))
        return 1;
    uint64_t now = loomClockNs();
    if (now - w->lastScan < CONNECT_SCAN_NS)
        return 0;
    w->lastScan = now;
    for (int p = 0; p < comm->nranks; p++)
        if (comm->peers[p].hostHash == comm->peers[comm->rank].hostHash && execPeerFailed(comm, p))
            return 1;
    return 0;
}

static const struct loomTransport *linkOf(const struct loomComm *comm, int peer)
{
    return loomTransports[comm->linkTransport[peer]];
}

/*
 * The error to report for a connect that failed with res: the first failure, not the one it
 * caused. A peer that failed on its own and left refuses connections as a dead one does, so
 * a failure notice on this rank's doorbell, then the peers on this host known to be gone, come
 * before what this rank saw itself. Every such peer is named (up to CONNECT_BLAME_MAX): one
 * may have left only because another died, and a peer that had not connected to this rank
 * could not post it a notice saying so.
 */
#define CONNECT_BLAME_MAX 4
static loomResult_t connectBlame(struct loomComm *comm, loomResult_t res, int heard)
{
    if (atomic_load(&comm->abortFlag))
        return res;
    loomResult_t told = execPeerFailure(comm);
    if (told != loomSuccess || heard)
        return told != loomSuccess ? told : res;
    char who[CONNECT_BLAME_MAX * 96] = "";
    size_t used = 0;
    int gone = 0;
    for (int p = 0; p < comm->nranks; p++) {
        if (comm->peers[p].hostHash != comm->peers[comm->rank].hostHash ||
            !execPeerFailed(comm, p) || ++gone > CONNECT_BLAME_MAX)
            continue;
        int k = snprintf(who + used, sizeof(who) - used, "%srank %d (pid %d on %.40s)",
                         gone > 1 ? ", " : "", p, (int)comm->peers[p].pid, comm->peers[p].hostname);
        used += k > 0 && (size_t)k < sizeof(who) - used ? (size_t)k : 0;
    }
    if (gone == 0)
        return res;
    if (gone > CONNECT_BLAME_MAX)
        return loomSetError(loomRemoteError,
                            "%s and %d more ranks exited while rank %d was connecting to its "
                            "peers",
                            who, gone - CONNECT_BLAME_MAX, comm->rank);
    return loomSetError(loomRemoteError, "%s exited while rank %d was connecting to its peers", who,
                        comm->rank);
}

/*
 * Connecting one communicator's list of peers (none connected yet, no
 * duplicates), in the four steps above. The steps are separate so that one
 * thread can connect several communicators whose ranks are each other's
 * peers (ranks of one process driven by one thread in a group,
 * loomCommInitAll): every communicator takes step 1-2 before any waits in
 * step 3, and step 4's word before any waits for a word.
 */
struct connectJob {
    struct loomComm *comm;
    int *list;
    int n;
    uint8_t *recs; /* list[i]'s record at recs + at[i], of at[i + 1] - at[i] bytes */
    size_t *at;
    struct connectWait cw;
    struct bootstrapWait w;
};

static loomResult_t jobStart(struct connectJob *j, struct loomComm *comm, int *list, int n,
                             const char *why)
{
    *j = (struct connectJob){.comm = comm, .list = list, .n = n};
    j->at = calloc((size_t)n + 1, sizeof(*j->at));
    for (int i = 0; j->at && i < n; i++) {
        const struct loomTransport *t = linkOf(comm, list[i]);
        size_t bytes = t->recordBytes ? t->recordBytes(comm, list[i]) : LOOM_CONNECT_RECORD_BYTES;
        if (bytes == 0 || bytes > LOOM_CONNECT_RECORD_MAX)
            return loomSetError(loomInternalError, "the %s record for rank %d takes %zu bytes",
                                t->name, list[i], bytes);
        j->at[i + 1] = j->at[i] + bytes;
    }
    j->recs = j->at ? calloc(j->at[n] + 1, 1) : NULL;
    if (j->recs == NULL)
        return loomSetError(loomSystemError, "out of memory connecting %d peers", n);
    j->cw = (struct connectWait){comm, 0, loomClockNs()};
    j->w = (struct bootstrapWait){socketDeadline(comm->timeoutSec), connectPeerGone, &j->cw, why};
    return loomSuccess;
}

/* Steps 1 and 2: this end's records, sent. */
static loomResult_t jobSetup(struct connectJob *j)
{
    struct loomComm *comm = j->comm;
    for (int i = 0; i < j->n; i++)
        LOOMCHECK(linkOf(comm, j->list[i])->setup(comm, j->list[i], j->recs + j->at[i]));
    for (int i = 0; i < j->n; i++)
        if (j->list[i] != comm->rank)
            LOOMCHECK(bootstrapSend(comm->bootstrap, j->list[i], CONNECT_TAG, j->recs + j->at[i],
                                    j->at[i + 1] - j->at[i], &j->w));
    return loomSuccess;
}

/* Step 3: each peer's record, and connect. */
static loomResult_t jobConnect(struct connectJob *j)
{
    struct loomComm *comm = j->comm;
    for (int i = 0; i < j->n; i++) {
        uint8_t *rec = j->recs + j->at[i];
        if (j->list[i] != comm->rank)
            LOOMCHECK(bootstrapRecv(comm->bootstrap, j->list[i], CONNECT_TAG, rec,
                                    j->at[i + 1] - j->at[i], &j->w));
        LOOMCHECK(linkOf(comm, j->list[i])->connect(comm, j->list[i], rec));
        p2pPeerConnected(comm, j->list[i]);
        comm->linkUp[j->list[i]] = 1;
        comm->nLinksUp++;
    }
    return loomSuccess;
}

/* Step 4: the word that this end is connected (recv 0), or each peer's (recv 1). */
static loomResult_t jobWord(struct connectJob *j, int recv)
{
    struct loomComm *comm = j->comm;
    uint32_t word = CONNECTED_TAG;
    for (int i = 0; i < j->n; i++) {
        if (j->list[i] == comm->rank)
            continue;
        if (recv)
            LOOMCHECK(bootstrapRecv(comm->bootstrap, j->list[i], CONNECTED_TAG, &word, sizeof(word),
                                    &j->w));
        else
            LOOMCHECK(bootstrapSend(comm->bootstrap, j->list[i], CONNECTED_TAG, &word, sizeof(word),
                                    &j->w));
    }
    return loomSuccess;
}

/* Runs every job's step, one step at a time over all jobs; stops at the first failure. */
static loomResult_t jobsRun(struct connectJob *jobs, int njobs)
{
    loomResult_t res = loomSuccess;
    int step, i = 0;
    for (step = 0; step < 4 && res == loomSuccess; step++)
        for (i = 0; i < njobs && res == loomSuccess; i++)
            res = step == 0   ? jobSetup(&jobs[i])
                  : step == 1 ? jobConnect(&jobs[i])
                              : jobWord(&jobs[i], step == 3);
    if (res != loomSuccess)
        res = connectBlame(jobs[i - 1].comm, res, jobs[i - 1].cw.heard);
    return res;
}

/* Communicators by address: the order their connect locks are taken in, so that two threads
 * that take overlapping sets never wait on each other. */
static int commAddrCompare(const void *a, const void *b)
{
    uintptr_t x = (uintptr_t) * (struct loomComm *const *)a;
    uintptr_t y = (uintptr_t) * (struct loomComm *const *)b;
    return x < y ? -1 : x > y;
}

/* The peers of list[0..n) still to connect, without duplicates, into out; their count. */
static int connectMissing(const struct loomComm *comm, const int *peers, int n, int *out)
{
    int m = 0;
    for (int i = 0; i < n; i++) {
        int p = peers[i], dup = 0;
        for (int j = 0; j < m && !dup; j++)
            dup = out[j] == p;
        if (!dup && p >= 0 && p < comm->nranks && !comm->linkUp[p])
            out[m++] = p;
    }
    return m;
}

/*
 * Connects, for each communicator comms[k], the peers lists[k][0..counts[k]) not connected
 * yet (each such peer must connect to it too, at about the same time).
 */
static loomResult_t connectMany(struct loomComm **comms, int **lists, const int *counts, int ncomms,
                                const char *why)
{
    struct connectJob *jobs = calloc((size_t)ncomms, sizeof(*jobs));
    struct loomComm **locked = calloc((size_t)ncomms, sizeof(*locked));
    int *missing = NULL, total = 0;
    for (int k = 0; k < ncomms; k++)
        total += comms[k]->nranks;
    missing = malloc(((size_t)total + 1) * sizeof(*missing));
    if (jobs == NULL || locked == NULL || missing == NULL) {
        free(jobs), free(locked), free(missing);
        return loomSetError(loomSystemError, "out of memory connecting peers");
    }
    memcpy(locked, comms, (size_t)ncomms * sizeof(*locked));
    qsort(locked, (size_t)ncomms, sizeof(*locked), commAddrCompare);
    for (int k = 0; k < ncomms; k++)
        pthread_mutex_lock(&locked[k]->connectLock);
    loomResult_t res = loomSuccess;
    int njobs = 0, used = 0;
    uint64_t t0 = loomClockNs();
    for (int k = 0; k < ncomms && res == loomSuccess; k++) {
        int m = connectMissing(comms[k], lists[k], counts[k], missing + used);
        if (m > 0)
            res = jobStart(&jobs[njobs++], comms[k], missing + used, m, why);
        used += m;
    }
    if (res == loomSuccess)
        res = jobsRun(jobs, njobs);
    for (int k = 0; k < njobs; k++) {
        if (res == loomSuccess)
            INFO(LOOM_INIT, "rank %d connected %d peer(s) for %s in %.1f ms (%d of %d now)",
                 jobs[k].comm->rank, jobs[k].n, why, (double)(loomClockNs() - t0) / 1e6,
                 jobs[k].comm->nLinksUp, jobs[k].comm->nranks);
        free(jobs[k].recs);
        free(jobs[k].at);
    }
    for (int k = ncomms - 1; k >= 0; k--)
        pthread_mutex_unlock(&locked[k]->connectLock);
    free(jobs), free(locked), free(missing);
    return res;
}

loomResult_t connectPeers(struct loomComm *comm, const int *peers, int n, const char *why)
{
    int *list = (int *)peers;
    return connectMany(&comm, &list, &n, 1, why);
}

/* Adds the peers lane's plan talks to and that are not connected yet. */
static void lanePeers(const struct loomLane *lane, int *list, int *n)
{
    const struct loomComm *comm = lane->comm;
    const struct loomPlan *p = lane->plan;
    for (uint32_t k = 0; k < p->nsteps; k++) {
        const struct loomPlanStep *t = &p->steps[k];
        for (int d = 0; d < t->nsend + t->nrecv; d++) {
            int q = d < t->nsend ? t->sendPeers[d] : t->recvPeers[d - t->nsend];
            if (q < 0 || q >= comm->nranks || comm->linkUp[q])
                continue;
            int seen = 0;
            for (int j = 0; j < *n && !seen; j++)
                seen = list[j] == q;
            if (!seen)
                list[(*n)++] = q;
        }
    }
}

/*
 * Every communicator of the lanes that is not fully connected looks for peers its plans
 * name that are not connected yet; all of them are connected together (connectMany), since
 * the lanes of a group may be ranks of one process that are each other's peers.
 */
loomResult_t connectLanes(struct loomLane *lanes, int nlanes)
{
    struct loomComm *small[CONNECT_SMALL];
    int *smallLists[CONNECT_SMALL], smallCounts[CONNECT_SMALL];
    struct loomComm **comms = small;
    int **lists = smallLists, *counts = smallCounts, ncomms = 0;
    loomResult_t res = loomSuccess;
    for (int i = 0; i < nlanes && res == loomSuccess; i++) {
        struct loomComm *comm = lanes[i].comm;
        int first = 1;
        for (int j = 0; j < i; j++)
            first &= lanes[j].comm != comm;
        /* Every call of a communicator not fully connected looks. */
        if (!first || comm->nLinksUp == comm->nranks)
            continue;
        if (ncomms == CONNECT_SMALL && comms == small) {
            comms = malloc((size_t)nlanes * sizeof(*comms));
            lists = malloc((size_t)nlanes * sizeof(*lists));
            counts = malloc((size_t)nlanes * sizeof(*counts));
            if (comms == NULL || lists == NULL || counts == NULL) {
                res = loomSetError(loomSystemError, "out of memory connecting peers");
                break;
            }
            memcpy(comms, small, sizeof(small));
            memcpy(lists, smallLists, sizeof(smallLists));
            memcpy(counts, smallCounts, sizeof(smallCounts));
        }
        /* No allocation unless a peer is missing (for communicators of up to CONNECT_SMALL). */
        int scan[CONNECT_SMALL], n = 0;
        int *list =
            comm->nranks <= CONNECT_SMALL ? scan : malloc((size_t)comm->nranks * sizeof(int));
        if (list == NULL) {
            res = loomSetError(loomSystemError, "out of memory connecting peers");
            break;
        }
        for (int j = i; j < nlanes; j++)
            if (lanes[j].comm == comm)
                lanePeers(&lanes[j], list, &n);
        if (n > 0 && list == scan && (list = malloc((size_t)n * sizeof(int))) != NULL)
            memcpy(list, scan, (size_t)n * sizeof(int));
        if (n > 0 && list == NULL) {
            res = loomSetError(loomSystemError, "out of memory connecting peers");
            break;
        }
        if (n == 0) {
            if (list != scan)
                free(list);
            continue;
        }
        comms[ncomms] = comm, lists[ncomms] = list, counts[ncomms] = n;
        ncomms++;
    }
    if (res == loomSuccess && ncomms > 0)
        res = connectMany(comms, lists, counts, ncomms, "a plan's first use of them");
    for (int k = 0; k < ncomms; k++)
        free(lists[k]);
    if (comms != small) {
        free(comms), free(lists), free(counts);
    }
    return res;
}

/* ---- init ---- */

/* This rank's links at init: itself, its ring neighbours, its AllReduce tree neighbours. */
static loomResult_t initialPeers(struct loomComm *comm, int all, int *list, int *n)
{
    *n = 0;
    if (all) {
        for (int p = 0; p < comm->nranks; p++)
            list[(*n)++] = p;
        return loomSuccess;
    }
    list[(*n)++] = comm->rank;
    for (int i = 0; i < comm->nranks; i++) {
        if (comm->ring[i] != comm->rank)
            continue;
        list[(*n)++] = comm->ring[(i + 1) % comm->nranks];
        list[(*n)++] = comm->ring[(i + comm->nranks - 1) % comm->nranks];
    }
    for (int t = 0; t < 2; t++) {
        struct loomTreeLinks l;
        LOOMCHECK(topoTreeLinks(comm->topo, t, comm->rank, &l));
        if (l.up >= 0)
            list[(*n)++] = l.up;
        for (int d = 0; d < l.ndown; d++)
            list[(*n)++] = l.down[d];
    }
    return loomSuccess;
}

/* Gathers every rank's info of every transport anyone needs; each transport then reads them. */
static loomResult_t initTransports(struct loomComm *comm, uint32_t needed)
{
    int nt = loomTransportCount();
    size_t rec = (size_t)nt * LOOM_TRANSPORT_INFO_BYTES;
    uint8_t *all = calloc((size_t)comm->nranks, rec);
    if (all == NULL)
        return loomSetError(loomSystemError, "out of memory for the transports' infos");
    loomResult_t res = loomSuccess;
    /* Every rank gathers even when its own init failed, so that nobody waits for it. */
    for (int t = 0; t < nt && res == loomSuccess; t++)
        if (((needed >> t) & 1) && transportUsableOn(comm, loomTransports[t], comm->rank))
            res = loomTransports[t]->init(comm, all + comm->rank * rec +
                                                    (size_t)t * LOOM_TRANSPORT_INFO_BYTES);
    loomResult_t ex = bootstrapAllGather(comm->bootstrap, all, rec);
    res = res != loomSuccess ? res : ex;
    uint8_t *mine = malloc((size_t)comm->nranks * LOOM_TRANSPORT_INFO_BYTES);
    if (res == loomSuccess && mine == NULL)
        res = loomSetError(loomSystemError, "out of memory for the transports' infos");
    for (int t = 0; t < nt && res == loomSuccess; t++) {
        if (!((needed >> t) & 1) || !transportUsableOn(comm, loomTransports[t], comm->rank))
            continue;
        for (int r = 0; r < comm->nranks; r++)
            memcpy(mine + (size_t)r * LOOM_TRANSPORT_INFO_BYTES,
                   all + r * rec + (size_t)t * LOOM_TRANSPORT_INFO_BYTES,
                   LOOM_TRANSPORT_INFO_BYTES);
        res = loomTransports[t]->initPeers(comm, mine);
    }
    free(mine);
    free(all);
    return res;
}

#define LINKS_UNREACHABLE 0x80000000u
#define LINKS_CONNECT_ALL 0x40000000u

loomResult_t connectInit(struct loomComm *comm)
{
    int unreachable;
    uint32_t *used = calloc((size_t)comm->nranks, sizeof(*used));
    comm->linkUp = calloc((size_t)comm->nranks, sizeof(*comm->linkUp));
    if (used == NULL || comm->linkUp == NULL) {
        free(used);
        return loomSetError(loomSystemError, "out of memory choosing transports");
    }
    pthread_mutex_init(&comm->connectLock, NULL);
    comm->connectLockReady = 1;
    used[comm->rank] = chooseLinks(comm, &unreachable);
    if (unreachable >= 0)
        used[comm->rank] |= LINKS_UNREACHABLE;
    if (paramInt(LOOM_PARAM_CONNECT_ALL))
        used[comm->rank] |= LINKS_CONNECT_ALL;
    /* Everyone learns which transports anyone needs, and whether anyone is stuck. */
    loomResult_t res = bootstrapAllGather(comm->bootstrap, used, sizeof(*used));
    uint32_t needed = 0, any = 0;
    int stuck = -1;
    for (int p = 0; res == loomSuccess && p < comm->nranks; p++) {
        needed |= used[p] & ~(LINKS_UNREACHABLE | LINKS_CONNECT_ALL);
        any |= used[p];
        if ((used[p] & LINKS_UNREACHABLE) && stuck < 0)
            stuck = p;
    }
    free(used);
    LOOMCHECK(res);
    if (unreachable >= 0)
        return loomSetError(loomInvalidUsage,
                            "rank %d on %s has no transport to rank %d on %s (shared memory "
                            "needs one host and no LOOM_SHM_DISABLE=1; the network needs an "
                            "interface that is up: see loom-info on both hosts)",
                            comm->rank, comm->peers[comm->rank].hostname, unreachable,
                            comm->peers[unreachable].hostname);
    if (stuck >= 0)
        return loomSetError(loomInvalidUsage,
                            "rank %d on %s has no transport to one of its peers (its log says "
                            "which); this rank gives up too",
                            stuck, comm->peers[stuck].hostname);
    LOOMCHECK(initTransports(comm, needed));
    int *list = malloc(((size_t)comm->nranks + 8) * sizeof(*list)), n;
    if (list == NULL)
        return loomSetError(loomSystemError, "out of memory connecting peers");
    res = initialPeers(comm, (any & LINKS_CONNECT_ALL) != 0, list, &n);
    if (res == loomSuccess)
        res = connectPeers(comm, list, n, "init");
    free(list);
    return res;
}

void connectFree(struct loomComm *comm)
{
    free(comm->linkUp);
    comm->linkUp = NULL;
    comm->nLinksUp = 0;
    if (comm->connectLockReady)
        pthread_mutex_destroy(&comm->connectLock);
    comm->connectLockReady = 0;
}
