/*
 * init.c — communicator lifecycle: unique id, init, split, finalize,
 * destroy, abort, and the handle checks every API entry makes.
 *
 * Init, in order: bootstrap ring (bootstrap.c) -> allgather of each rank's
 * host identity, pid, NUMA node, GPU and usable transports -> hosts, ring
 * order and trees (topo.c) -> a transport for every peer pair (the first
 * usable on both ends that accepts the pair: shm inside a host, net across
 * hosts) -> the transports connect this rank to itself and its ring and
 * tree neighbours (connect.c; other peers when a plan first needs them) ->
 * single copies (cma.c) -> p2p slots in GPU
 * memory for ranks bound to a GPU (src/cuda/p2p.c) -> barrier. Every step
 * is bounded by the timeout; on failure everything built so far is released
 * and *comm is left untouched.
 *
 * Handles: a struct loomComm is never freed. Destroy releases what it owns
 * and marks it dead, and every communicator ever created is listed in a
 * registry (src/base/comm.c), so a NULL, foreign or destroyed handle gives a
 * one-line error instead of a crash.
 */
#include <errno.h>
#include <sched.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bootstrap.h"
#include "cma.h"
#include "compress.h"
#include "connect.h"
#include "cudacore.h"
#include "debug.h"
#include "enqueue.h"
#include "plan.h"
#include "exec.h"
#include "executor.h"
#include "interpview.h"
#include "kexec.h"
#include "lifecycle.h"
#include "mem.h"
#include "param.h"
#include "reduce.h"
#include "recorder.h"
#include "topo.h"
#include "transport.h"
#include "tuner.h"

/* ---- small public functions ---- */

loomResult_t loomGetVersion(int *version)
{
    if (version == NULL)
        return loomSetError(loomInvalidArgument, "loomGetVersion: version is NULL");
    *version = LOOM_VERSION_CODE;
    return loomSuccess;
}

loomResult_t loomGetUniqueId(loomUniqueId *uniqueId)
{
    debugInit();
    if (uniqueId == NULL)
        return loomSetError(loomInvalidArgument, "loomGetUniqueId: uniqueId is NULL");
    return bootstrapGetUniqueId(uniqueId);
}

const char *loomGetLastError(loomComm_t comm)
{
    static __thread char copy[512];
    uint64_t seq;
    const char *mine = debugLastError(&seq);
    if (comm == NULL || !commRegistered(comm))
        return mine;
    pthread_mutex_lock(&comm->errLock);
    if (comm->lastErrorSeq > seq)
        snprintf(copy, sizeof(copy), "%s", comm->lastError);
    else
        snprintf(copy, sizeof(copy), "%s", mine);
    pthread_mutex_unlock(&comm->errLock);
    return copy;
}

loomResult_t loomCommCount(const loomComm_t comm, int *count)
{
    LOOMCHECK(commCheck(comm, "loomCommCount"));
    if (count == NULL)
        return loomSetError(loomInvalidArgument, "loomCommCount: count is NULL");
    *count = comm->nranks;
    return loomSuccess;
}

loomResult_t loomCommUserRank(const loomComm_t comm, int *rank)
{
    LOOMCHECK(commCheck(comm, "loomCommUserRank"));
    if (rank == NULL)
        return loomSetError(loomInvalidArgument, "loomCommUserRank: rank is NULL");
    *rank = comm->rank;
    return loomSuccess;
}

loomResult_t loomCommPeerInfo(const loomComm_t comm, int peer, loomPeerInfo_t *info)
{
    LOOMCHECK(commCheck(comm, "loomCommPeerInfo"));
    if (info == NULL || peer < 0 || peer >= comm->nranks)
        return loomSetError(loomInvalidArgument, "loomCommPeerInfo: %s",
                            info == NULL ? "info is NULL" : "peer is not a rank of comm");
    int t = comm->linkTransport[peer];
    info->host = comm->topo->hostOf[peer];
    info->hostname = comm->peers[peer].hostname;
    info->transport = t < 0                         ? NULL
                      : loomTransports[t]->linkName ? loomTransports[t]->linkName(comm, peer)
                                                    : loomTransports[t]->name;
    info->connected = comm->linkUp != NULL && comm->linkUp[peer];
    return loomSuccess;
}

loomResult_t loomCommRing(const loomComm_t comm, int *ring)
{
    LOOMCHECK(commCheck(comm, "loomCommRing"));
    if (ring == NULL)
        return loomSetError(loomInvalidArgument, "loomCommRing: ring is NULL");
    memcpy(ring, comm->ring, (size_t)comm->nranks * sizeof(*ring));
    return loomSuccess;
}

loomResult_t loomCommTree(const loomComm_t comm, int tree, int rank, int *up,
                          int down[LOOM_TREE_MAX_DOWN], int *ndown)
{
    struct loomTreeLinks l;
    LOOMCHECK(commCheck(comm, "loomCommTree"));
    if ((tree != 0 && tree != 1) || rank < 0 || rank >= comm->nranks || !up || !down || !ndown)
        return loomSetError(loomInvalidArgument,
                            "loomCommTree: tree must be 0 or 1, rank a rank of comm, and the "
                            "outputs not NULL");
    LOOMCHECK(topoTreeLinks(comm->topo, tree, rank, &l));
    *up = l.up;
    *ndown = l.ndown;
    memcpy(down, l.down, (size_t)l.ndown * sizeof(*down));
    return loomSuccess;
}

loomResult_t loomCommGetAsyncError(loomComm_t comm, loomResult_t *asyncError)
{
    LOOMCHECK(commCheck(comm, "loomCommGetAsyncError"));
    if (asyncError == NULL)
        return loomSetError(loomInvalidArgument, "loomCommGetAsyncError: asyncError is NULL");
    if (atomic_load_explicit(&comm->initializing, memory_order_acquire)) {
        *asyncError = loomInProgress;
        return loomSuccess;
    }
    /* A revoked comm's own errors are what the revoke caused: only its progress counts. */
    if (atomic_load_explicit(&comm->revoked, memory_order_acquire)) {
        *asyncError = commRevokeSettle(comm, 0) ? loomSuccess : loomInProgress;
        return loomSuccess;
    }
    int e = atomic_load(&comm->asyncError);
    if (e == loomSuccess)
        e = atomic_load_explicit(&comm->broken, memory_order_acquire);
    if (e == loomSuccess && comm->bell != NULL)
        e = execPeerFailure(comm);
    if (e == loomSuccess && !comm->blocking && atomic_load(&comm->pending) > 0)
        e = loomInProgress;
    *asyncError = (loomResult_t)e;
    return loomSuccess;
}

int loomTransportCount(void)
{
    int n = 0;
    while (loomTransports[n])
        n++;
    return n;
}

loomResult_t loomTransportInfo(int index, const char **name, int *usable, const char **why)
{
    if (index < 0 || index >= loomTransportCount())
        return loomSetError(loomInvalidArgument, "loomTransportInfo: index %d is not in 0..%d",
                            index, loomTransportCount() - 1);
    if (name == NULL || usable == NULL || why == NULL)
        return loomSetError(loomInvalidArgument, "loomTransportInfo: an output pointer is NULL");
    *name = loomTransports[index]->name;
    *usable = loomTransports[index]->usable(why);
    return loomSuccess;
}

loomResult_t loomTransportDevices(int index, const char **text)
{
    if (index < 0 || index >= loomTransportCount())
        return loomSetError(loomInvalidArgument, "loomTransportDevices: index %d is not in 0..%d",
                            index, loomTransportCount() - 1);
    if (text == NULL)
        return loomSetError(loomInvalidArgument, "loomTransportDevices: text is NULL");
    *text = loomTransports[index]->devices ? loomTransports[index]->devices() : "";
    return loomSuccess;
}

/* ---- init ---- */

static uint64_t fnv1a(uint64_t h, const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        h ^= (unsigned char)s[i];
        h *= 0x100000001b3ULL;
    }
    return h;
}

/* Host identity: LOOM_HOSTID, else hostname + boot id (containers share a boot id). */
static void hostIdentity(struct loomPeerInfo *me)
{
    char boot[64] = "";
    gethostname(me->hostname, sizeof(me->hostname) - 1);
    const char *forced = paramStr(LOOM_PARAM_HOSTID);
    if (forced[0]) {
        me->hostHash = fnv1a(0xcbf29ce484222325ULL, forced, strlen(forced));
        return;
    }
    FILE *f = fopen("/proc/sys/kernel/random/boot_id", "r");
    if (f) {
        if (fgets(boot, sizeof(boot), f) == NULL)
            boot[0] = '\0';
        fclose(f);
    }
    uint64_t h = fnv1a(0xcbf29ce484222325ULL, me->hostname, strlen(me->hostname));
    me->hostHash = fnv1a(h, boot, strlen(boot));
}

static uint32_t usableTransports(void)
{
    uint32_t mask = 0;
    for (int t = 0; loomTransports[t]; t++) {
        const char *why;
        if (loomTransports[t]->usable(&why))
            mask |= 1u << t;
        else
            INFO(LOOM_INIT, "transport %s not usable: %s", loomTransports[t]->name, why);
    }
    return mask;
}

static loomResult_t commExchangePeers(struct loomComm *comm)
{
    comm->peers = calloc((size_t)comm->nranks, sizeof(*comm->peers));
    if (comm->peers == NULL)
        return loomSetError(loomSystemError, "out of memory for %d peers", comm->nranks);
    struct loomPeerInfo *me = &comm->peers[comm->rank];
    hostIdentity(me);
    me->pid = (int32_t)getpid();
    p2pPeerInfo(me);
    me->numaNode = topoNumaNode();
    me->usable = usableTransports();
    cpu_set_t set;
    CPU_ZERO(&set);
    if (sched_getaffinity(0, sizeof(set), &set) != 0) {
        long n = sysconf(_SC_NPROCESSORS_ONLN);
        for (long c = 0; c < (n > 0 ? n : 1) && c < CPU_SETSIZE; c++)
            CPU_SET((int)c, &set);
    }
    for (int c = 0; c < CPU_SETSIZE && c < 64 * LOOM_CPU_WORDS; c++)
        if (CPU_ISSET(c, &set))
            me->cpuMask[c / 64] |= 1ULL << (c % 64);
    /* Listening before the exchange, so that every rank knows where every other answers. */
    comm->status = bootstrapStatusOpen(&me->statusAddr);
    LOOMCHECK(bootstrapAllGather(comm->bootstrap, comm->peers, sizeof(*comm->peers)));
    comm->localSize = 0;
    for (int p = 0; p < comm->nranks; p++) {
        comm->peers[p].hostname[LOOM_HOSTNAME_BYTES - 1] = '\0';
        comm->peers[p].localRank = -1;
        if (comm->peers[p].hostHash == me->hostHash)
            comm->peers[p].localRank = comm->localSize++;
    }
    LOOMCHECK(topoBuild(comm->peers, comm->nranks, &comm->topo));
    if (comm->topo->nHosts > 1)
        INFO(LOOM_INIT, "%d ranks on %d hosts, %d on this one (%s)", comm->nranks,
             comm->topo->nHosts, comm->localSize, me->hostname);
    return loomSuccess;
}

static int configInt(int value, int fallback)
{
    return value == LOOM_CONFIG_UNDEF_INT ? fallback : value;
}

/* CPUs the ranks of host h may use between them: the union of their affinity masks. */
static int hostCpus(const struct loomComm *comm, int h)
{
    const struct loomTopo *t = comm->topo;
    int cpus = 0;
    for (int w = 0; w < LOOM_CPU_WORDS; w++) {
        uint64_t m = 0;
        for (int i = t->hostStart[h]; i < t->hostStart[h + 1]; i++)
            m |= comm->peers[t->order[i]].cpuMask[w];
        cpus += __builtin_popcountll(m);
    }
    return cpus > 0 ? cpus : 1;
}

/*
 * Whether ranks share cores, from what every rank published, so that all
 * ranks see the same: the tuner's choice must not differ between the ranks
 * of one call (were it taken from each process's own CPU mask, a rank bound
 * to one core and a peer unbound would choose different algorithms and
 * mismatch). The tuner is shown the host with the most ranks per CPU; each
 * process's own waiting (spin or yield) follows its own host.
 */
static void commCrowding(struct loomComm *comm)
{
    const struct loomTopo *t = comm->topo;
    double worst = -1;
    for (int h = 0; h < t->nHosts; h++) {
        int ranks = t->hostStart[h + 1] - t->hostStart[h], cpus = hostCpus(comm, h);
        double ratio = (double)ranks / cpus;
        if (ratio > worst || (ratio == worst && ranks > comm->tuneLocalRanks)) {
            worst = ratio;
            comm->tuneLocalRanks = ranks, comm->tuneCpus = cpus;
        }
        if (h == t->hostOf[comm->rank])
            comm->oversubscribed = ranks > cpus;
    }
}

static void commSizes(struct loomComm *comm)
{
    int crowd = 0;
    comm->nChannels = (int)paramInt(LOOM_PARAM_NCHANNELS);
    if (comm->nChannels > LOOM_MAX_CHANNELS)
        comm->nChannels = LOOM_MAX_CHANNELS;
    for (int h = 0; h < comm->topo->nHosts; h++) {
        int size = comm->topo->hostStart[h + 1] - comm->topo->hostStart[h];
        crowd = size > crowd ? size : crowd;
    }
    comm->slotBytes = commSlotBytes(comm->nranks, comm->topo->nHosts, crowd, comm->nChannels);
    comm->buffBytes = comm->slotBytes * LOOM_STEPS;
    comm->spin = (int)paramInt(LOOM_PARAM_SPIN);
    commCrowding(comm);
    if (comm->oversubscribed)
        comm->spin = comm->spin < 32 ? comm->spin : 32; /* yield early */
}

static loomResult_t commAllocChannels(struct loomComm *comm)
{
    size_t n = (size_t)comm->nranks;
    comm->ring = calloc(n, sizeof(*comm->ring));
    comm->owner = malloc(2 * (size_t)comm->nChannels * n * sizeof(*comm->owner));
    if (comm->ring == NULL || comm->owner == NULL)
        return loomSetError(loomSystemError, "out of memory for a communicator of %zu ranks", n);
    for (size_t i = 0; i < 2 * (size_t)comm->nChannels * n; i++)
        comm->owner[i] = -1;
    topoRing(comm->topo, comm->ring);
    comm->linkTransport = malloc(n * sizeof(*comm->linkTransport));
    comm->lost = calloc(n, sizeof(*comm->lost));
    if (comm->linkTransport == NULL || comm->lost == NULL)
        return loomSetError(loomSystemError, "out of memory for a communicator of %zu ranks", n);
    for (int c = 0; c < comm->nChannels; c++) {
        comm->channels[c].send = calloc(n, sizeof(struct loomConnector));
        comm->channels[c].recv = calloc(n, sizeof(struct loomConnector));
        if (!comm->channels[c].send || !comm->channels[c].recv)
            return loomSetError(loomSystemError, "out of memory for connectors");
    }
    return loomSuccess;
}

/* Connects what init connects (connect.c), then single copies (cma.c), where every link of
 * this rank is on one host's shared memory; collective, on every rank, whatever the transports. */
static loomResult_t commConnect(struct loomComm *comm)
{
    LOOMCHECK(connectInit(comm));
    int allShm = 1;
    for (int p = 0; p < comm->nranks; p++)
        allShm &= transportServes(comm, &shmTransport, p);
    /* The kernel executor turns single copies off: it runs no OFFER, PULL or DRAIN. */
    if (tunerKernelWanted())
        LOOMCHECK(kexecSetup(comm, allShm));
    return cmaSetup(comm, allShm && !interpServes(comm));
}

/* Releases what the communicator owns (not the struct itself). */
static void commFree(struct loomComm *comm)
{
    devexecFree(comm); /* no launch is in flight: waitQuiet waited for them */
    p2pFree(comm);     /* unmaps GPU views of the slots before the transports unmap them */
    memPeerViewsFree(comm);
    cmaTeardown(comm);
    kexecFree(comm);
    /* In reverse: the network proxy rings the doorbell shm may own. */
    for (int t = loomTransportCount() - 1; t >= 0; t--)
        loomTransports[t]->teardown(comm);
    bootstrapClose(comm->bootstrap);
    comm->bootstrap = NULL;
    bootstrapGrowClose(comm->grow);
    comm->grow = NULL;
    connectFree(comm);
    for (int c = 0; c < LOOM_MAX_CHANNELS; c++) {
        free(comm->channels[c].send);
        free(comm->channels[c].recv);
        comm->channels[c].send = comm->channels[c].recv = NULL;
    }
    plannerFree(comm);
    recorderFree(comm);
    free(comm->peers);
    topoFree(comm->topo);
    free(comm->linkTransport);
    free((void *)comm->lost);
    free(comm->ring);
    free(comm->owner);
    tunerFree(comm);
    comm->peers = NULL, comm->ring = NULL, comm->owner = NULL;
    comm->topo = NULL, comm->linkTransport = NULL, comm->lost = NULL;
}

loomResult_t commCheckInitArgs(loomComm_t *comm, int nranks, int rank, loomConfig_t *config,
                               const char *fn)
{
    if (comm == NULL)
        return loomSetError(loomInvalidArgument, "%s: comm is NULL", fn);
    if (nranks < 1)
        return loomSetError(loomInvalidArgument, "%s: nranks %d must be at least 1", fn, nranks);
    if (rank < 0 || rank >= nranks)
        return loomSetError(loomInvalidArgument, "%s: rank %d is out of range 0..%d", fn, rank,
                            nranks - 1);
    /* A program built before netCompress was added passes the shorter size. */
    if (config &&
        (config->magic != LOOM_CONFIG_MAGIC || config->size < offsetof(loomConfig_t, netCompress)))
        return loomSetError(loomInvalidArgument,
                            "%s: config was not initialised with LOOM_CONFIG_INITIALIZER", fn);
    if (config && config->netName && strcmp(config->netName, "socket") != 0 &&
        strcmp(config->netName, "ib") != 0)
        return loomSetError(loomInvalidArgument,
                            "%s: config->netName \"%s\" is neither \"socket\" nor \"ib\"", fn,
                            config->netName);
    if (config && config->size >= sizeof(loomConfig_t) && config->netCompress &&
        compressParse(config->netCompress) < 0)
        return loomSetError(loomInvalidArgument,
                            "%s: config->netCompress \"%s\" is none of \"bf16\", \"bf16-sr\" "
                            "and \"none\"",
                            fn, config->netCompress);
    if (config && config->timeoutSec != LOOM_CONFIG_UNDEF_INT && config->timeoutSec < 1)
        return loomSetError(loomInvalidArgument, "%s: config->timeoutSec %d must be at least 1", fn,
                            config->timeoutSec);
    if (config && config->blocking != LOOM_CONFIG_UNDEF_INT && config->blocking != 0 &&
        config->blocking != 1)
        return loomSetError(loomInvalidArgument, "%s: config->blocking %d must be 0 or 1", fn,
                            config->blocking);
    return loomSuccess;
}

static loomResult_t commBuild(struct loomComm *comm, const loomUniqueId *id)
{
    LOOMCHECK(bootstrapInit(id, comm->rank, comm->nranks, comm->timeoutSec, &comm->abortFlag,
                            &comm->bootstrap));
    LOOMCHECK(commExchangePeers(comm));
    recorderInit(comm, id, sizeof(*id));
    commSizes(comm);
    LOOMCHECK(commAllocChannels(comm));
    LOOMCHECK(commConnect(comm));
    LOOMCHECK(p2pSetup(comm));
    int served[LOOM_EXECUTOR_NUM];
    for (int k = 0; k < LOOM_EXECUTOR_NUM; k++)
        served[k] = executorOf(k)->serves(comm);
    LOOMCHECK(tunerInit(comm, served)); /* the shape is final: ranks, hosts, CPUs, slots, cma */
    compressSetup(comm, comm->topo && comm->topo->nHosts > 1);
    LOOMCHECK(plannerInit(comm));
    return bootstrapBarrier(comm->bootstrap);
}

/* ---- non-blocking mode ---- */

/*
 * With config.blocking = 0 the handle is registered and returned at once
 * (loomInProgress) while a thread builds the communicator; it publishes the
 * outcome through `initializing` and `broken`, which loomCommGetAsyncError
 * reads. Calls made with a NULL stream then go to the communicator's own
 * host stream (`queue`) and return loomInProgress; pending counts them.
 * Destroy and abort join the thread (abort makes every bootstrap wait end
 * within 100 ms) before releasing anything.
 */
struct initJob {
    struct loomComm *comm;
    loomUniqueId id;
};

static void *initMain(void *arg)
{
    struct initJob *job = arg;
    struct loomComm *comm = job->comm;
    loomResult_t res = commBuild(comm, &job->id);
    if (res != loomSuccess) {
        commRecordError(comm);
        commSetBroken(comm, res, debugLastError(NULL));
    } else {
        debugSetRank(comm->rank);
        INFO(LOOM_INIT, "comm %p rank %d of %d ready (non-blocking init)", (void *)comm, comm->rank,
             comm->nranks);
    }
    free(job);
    atomic_store_explicit(&comm->initializing, 0, memory_order_release);
    return NULL;
}

static loomResult_t initStartAsync(struct loomComm *comm, const loomUniqueId *id)
{
    struct initJob *job = calloc(1, sizeof(*job));
    if (job == NULL)
        return loomSetError(loomSystemError, "loomCommInitRank: out of memory");
    job->comm = comm;
    job->id = *id;
    loomResult_t res = loomStreamCreate(&comm->queue);
    if (res != loomSuccess) {
        free(job);
        return res;
    }
    res = commRegister(comm);
    if (res != loomSuccess) {
        free(job);
        return res;
    }
    comm->magic = LOOM_COMM_MAGIC;
    atomic_store(&comm->initializing, 1);
    int e = pthread_create(&comm->initThread, NULL, initMain, job);
    if (e != 0) {
        atomic_store(&comm->initializing, 0);
        free(job);
        res = loomSetError(loomSystemError, "loomCommInitRank: cannot start the init thread: %s",
                           strerror(e));
        commRecordError(comm);
        commSetBroken(comm, res, debugLastError(NULL));
        return loomSuccess; /* the handle exists: GetAsyncError reports, Destroy frees */
    }
    comm->initThreadStarted = 1;
    return loomSuccess;
}

/* A communicator record for `rank` of `nranks`, before anything is built; NULL: out of memory. */
static struct loomComm *commNew(int nranks, int rank, const loomConfig_t *config)
{
    struct loomComm *comm = calloc(1, sizeof(*comm));
    if (comm == NULL)
        return NULL;
    loomConfig_t defaults = LOOM_CONFIG_INITIALIZER;
    comm->config = defaults;
    if (config) /* of its size: a program built against an older loom.h passes a shorter one */
        memcpy(&comm->config, config,
               config->size < sizeof(defaults) ? config->size : sizeof(defaults));
    comm->config.size = sizeof(defaults);
    compressConfig(comm);
    comm->rank = rank;
    comm->nranks = nranks;
    comm->timeoutSec = configInt(comm->config.timeoutSec, (int)paramInt(LOOM_PARAM_TIMEOUT));
    comm->bell = &comm->localBell;
    pthread_mutex_init(&comm->errLock, NULL);
    comm->blocking = comm->config.blocking != 0;
    return comm;
}

/* Releases a communicator that was never handed out (what commBuild built of it, and it). */
static void commDiscard(struct loomComm *comm)
{
    commFree(comm);
    pthread_mutex_destroy(&comm->errLock);
    free(comm);
}

/* Hands out a communicator commBuild built: registered, live. */
static loomResult_t commPublish(struct loomComm *comm)
{
    LOOMCHECK(commRegister(comm));
    comm->magic = LOOM_COMM_MAGIC;
    return loomSuccess;
}

loomResult_t loomCommInitRankConfig(loomComm_t *newcomm, int nranks, loomUniqueId commId, int rank,
                                    loomConfig_t *config)
{
    const char *fn = "loomCommInitRank";
    debugInit();
    LOOMCHECK(commCheckInitArgs(newcomm, nranks, rank, config, fn));
    struct loomComm *comm = commNew(nranks, rank, config);
    if (comm == NULL)
        return loomSetError(loomSystemError, "%s: out of memory", fn);
    if (!comm->blocking) {
        loomResult_t started = initStartAsync(comm, &commId);
        if (started != loomSuccess) {
            if (comm->queue)
                loomStreamDestroy(comm->queue);
            pthread_mutex_destroy(&comm->errLock);
            free(comm);
            return started;
        }
        *newcomm = comm;
        return loomInProgress;
    }

    loomResult_t res = commBuild(comm, &commId);
    if (res == loomSuccess)
        res = commPublish(comm);
    if (res != loomSuccess) {
        commDiscard(comm);
        return res;
    }
    debugSetRank(rank);
    INFO(LOOM_INIT, "comm %p rank %d of %d ready (%d local, %zu KiB per FIFO)", (void *)comm, rank,
         nranks, comm->localSize, comm->buffBytes >> 10);
    *newcomm = comm;
    return loomSuccess;
}

loomResult_t loomCommInitRank(loomComm_t *comm, int nranks, loomUniqueId commId, int rank)
{
    return loomCommInitRankConfig(comm, nranks, commId, rank, NULL);
}

/* ---- several ranks in this process: loomCommInitAll ---- */

static loomResult_t commRelease(struct loomComm *comm);

/*
 * One thread per rank builds its communicator, since init is collective and
 * each rank waits for the others in the bootstrap; the caller waits for all.
 * A rank whose build fails raises the abort flag of every other, so that
 * their waits end within 100 ms instead of at the timeout, and the first
 * failure is the one reported. Rank i makes device devs[i]'s primary
 * context current on its thread first (-1: none), so that it binds to it
 * as a process that called cudaSetDevice would (src/cuda/p2p.c); ranks
 * given the same device share that context, which stays retained for the
 * life of the process, as the CUDA runtime keeps a device's primary context.
 */
struct initAllRank {
    struct loomComm *comm;
    struct initAllJob *job;
    int dev;
    loomResult_t res;
    char why[512];
    pthread_t thread;
    int started;
};

struct initAllJob {
    struct initAllRank *ranks;
    int n;
    loomUniqueId id;
    atomic_int firstFailed; /* rank whose failure is reported, -1 none */
};

static void initAllFail(struct initAllRank *r)
{
    struct initAllJob *job = r->job;
    snprintf(r->why, sizeof(r->why), "%s", debugLastError(NULL));
    int none = -1;
    atomic_compare_exchange_strong(&job->firstFailed, &none, r->comm->rank);
    for (int i = 0; i < job->n; i++)
        if (job->ranks[i].comm != r->comm)
            atomic_store_explicit(&job->ranks[i].comm->abortFlag, 1, memory_order_release);
}

static void *initAllMain(void *arg)
{
    struct initAllRank *r = arg;
    r->res = r->dev >= 0 ? p2pDeviceEnter(r->dev) : loomSuccess;
    if (r->res != loomSuccess) {
        initAllFail(r);
        return NULL;
    }
    r->res = commBuild(r->comm, &r->job->id);
    if (r->res != loomSuccess)
        initAllFail(r);
    return NULL;
}

/* The device of each rank (-1: none), from devlist or, when it is NULL, as NCCL: 0..ndev-1. */
static loomResult_t initAllDevices(int ndev, const int *devlist, int *devs, const char *fn)
{
    int count = 0;
    if (devlist == NULL) {
        /* With no CUDA, or no device, the ranks are host-only: what host buffers need. */
        if (p2pDeviceCount(&count) != loomSuccess || count == 0) {
            for (int i = 0; i < ndev; i++)
                devs[i] = -1;
            return loomSuccess;
        }
        if (count < ndev)
            return loomSetError(loomInvalidArgument,
                                "%s: devlist is NULL, so rank i takes CUDA device i, but %d "
                                "rank(s) were asked for and %d device(s) are visible; pass a "
                                "devlist (it may repeat a device, or give -1 for a host-only rank)",
                                fn, ndev, count);
        for (int i = 0; i < ndev; i++)
            devs[i] = i;
        return loomSuccess;
    }
    for (int i = 0; i < ndev; i++) {
        devs[i] = devlist[i];
        if (devlist[i] < -1)
            return loomSetError(loomInvalidArgument,
                                "%s: devlist[%d] is %d: a CUDA device ordinal, or -1 for a "
                                "host-only rank",
                                fn, i, devlist[i]);
        if (devlist[i] >= 0)
            LOOMCHECK(p2pDeviceCheck(devlist[i], i, fn));
    }
    return loomSuccess;
}

/* Starts every rank's thread and waits for them all; the first failure is returned. */
static loomResult_t initAllRun(struct initAllJob *job, const char *fn)
{
    loomResult_t res = loomSuccess;
    for (int i = 0; i < job->n; i++) {
        struct initAllRank *r = &job->ranks[i];
        int e = pthread_create(&r->thread, NULL, initAllMain, r);
        if (e != 0) {
            res = loomSetError(loomSystemError, "%s: cannot start a thread for rank %d: %s", fn, i,
                               strerror(e));
            for (int j = 0; j < job->n; j++)
                atomic_store_explicit(&job->ranks[j].comm->abortFlag, 1, memory_order_release);
            break;
        }
        r->started = 1;
    }
    for (int i = 0; i < job->n; i++)
        if (job->ranks[i].started)
            pthread_join(job->ranks[i].thread, NULL);
    int first = atomic_load(&job->firstFailed);
    if (res == loomSuccess && first >= 0) {
        struct initAllRank *r = &job->ranks[first];
        res = loomSetError(r->res, "%s: rank %d (device %d): %s", fn, first, r->dev, r->why);
    }
    return res;
}

loomResult_t loomCommInitAll(loomComm_t *comms, int ndev, const int *devlist)
{
    const char *fn = "loomCommInitAll";
    debugInit();
    if (comms == NULL)
        return loomSetError(loomInvalidArgument, "%s: comms is NULL", fn);
    if (ndev < 1)
        return loomSetError(loomInvalidArgument, "%s: ndev %d must be at least 1", fn, ndev);
    struct initAllJob job = {.n = ndev, .firstFailed = -1};
    int *devs = calloc((size_t)ndev, sizeof(*devs));
    job.ranks = calloc((size_t)ndev, sizeof(*job.ranks));
    loomResult_t res =
        devs && job.ranks ? loomSuccess : loomSetError(loomSystemError, "%s: out of memory", fn);
    if (res == loomSuccess)
        res = initAllDevices(ndev, devlist, devs, fn);
    for (int i = 0; i < ndev && res == loomSuccess; i++) {
        job.ranks[i] =
            (struct initAllRank){.comm = commNew(ndev, i, NULL), .job = &job, .dev = devs[i]};
        if (job.ranks[i].comm == NULL)
            res = loomSetError(loomSystemError, "%s: out of memory", fn);
    }
    if (res == loomSuccess)
        res = loomGetUniqueId(&job.id);
    /* The process's own probes once, before the ranks' threads would race to them (hwloc
     * loads its plugins while another thread's scan for the CUDA driver walks the loader's
     * list, under a lock of the loader that race detectors do not see). */
    (void)topoNumaNode();
    if (res == loomSuccess)
        res = initAllRun(&job, fn);
    for (int i = 0; i < ndev && res == loomSuccess; i++)
        res = commPublish(job.ranks[i].comm);
    for (int i = 0; res != loomSuccess && job.ranks && i < ndev; i++) {
        struct initAllRank *r = &job.ranks[i];
        if (r->comm && r->comm->magic != LOOM_COMM_MAGIC)
            commDiscard(r->comm);
        else if (r->comm)
            commRelease(r->comm); /* published before a later one failed */
    }
    if (res == loomSuccess) {
        for (int i = 0; i < ndev; i++)
            comms[i] = job.ranks[i].comm;
        INFO(LOOM_INIT, "%d ranks of one communicator ready in this process (%zu KiB per FIFO)",
             ndev, comms[0]->buffBytes >> 10);
    }
    free(job.ranks);
    free(devs);
    return res;
}

/* ---- split ---- */

struct splitEntry {
    int32_t color, key, rank;
};

static int splitCompare(const void *a, const void *b)
{
    const struct splitEntry *x = a, *y = b;
    if (x->key != y->key)
        return x->key < y->key ? -1 : 1;
    return x->rank < y->rank ? -1 : x->rank > y->rank;
}

static loomResult_t splitRanks(struct loomComm *comm, int color, int key, int *newRank,
                               int *newSize, int *leader)
{
    int n = comm->nranks;
    struct splitEntry *all = calloc((size_t)n, sizeof(*all));
    if (all == NULL)
        return loomSetError(loomSystemError, "loomCommSplit: out of memory");
    all[comm->rank] = (struct splitEntry){color, key, comm->rank};
    loomResult_t res = bootstrapAllGather(comm->bootstrap, all, sizeof(*all));
    if (res == loomSuccess) {
        int m = 0;
        for (int p = 0; p < n; p++)
            if (all[p].color == color)
                all[m++] = all[p];
        qsort(all, (size_t)m, sizeof(*all), splitCompare);
        for (int i = 0; i < m; i++)
            if (all[i].rank == comm->rank)
                *newRank = i;
        *newSize = m;
        *leader = all[0].rank;
    }
    free(all);
    return res;
}

loomResult_t loomCommSplit(loomComm_t comm, int color, int key, loomComm_t *newcomm,
                           loomConfig_t *config)
{
    const char *fn = "loomCommSplit";
    LOOMCHECK(commCheckParent(comm, fn));
    if (newcomm == NULL)
        return loomSetError(loomInvalidArgument, "%s: newcomm is NULL", fn);
    if (color < 0 && color != LOOM_SPLIT_NOCOLOR)
        return loomSetError(loomInvalidArgument, "%s: color %d must be >= 0 or LOOM_SPLIT_NOCOLOR",
                            fn, color);
    int newRank = 0, newSize = 0, leader = -1;
    LOOMCHECK(splitRanks(comm, color, key, &newRank, &newSize, &leader));
    loomUniqueId *ids = calloc((size_t)comm->nranks, sizeof(*ids));
    if (ids == NULL)
        return loomSetError(loomSystemError, "%s: out of memory", fn);
    loomResult_t res = loomSuccess;
    if (color != LOOM_SPLIT_NOCOLOR && leader == comm->rank)
        res = bootstrapGetUniqueId(&ids[comm->rank]);
    /* Everyone takes part in the exchange even if its own id failed, so nobody hangs. */
    loomResult_t ex = bootstrapAllGather(comm->bootstrap, ids, sizeof(*ids));
    if (res == loomSuccess)
        res = ex;
    if (res == loomSuccess && color == LOOM_SPLIT_NOCOLOR)
        *newcomm = NULL;
    else if (res == loomSuccess)
        res = loomCommInitRankConfig(newcomm, newSize, ids[leader], newRank,
                                     config ? config : &comm->config);
    free(ids);
    return res;
}

/* ---- teardown ---- */

static void waitQuiet(struct loomComm *comm)
{
    while (atomic_load(&comm->pending) > 0 || atomic_load(&comm->activeCalls) > 0) {
        execWake(comm);
        struct timespec ts = {0, 1000000};
        nanosleep(&ts, NULL);
    }
}

loomResult_t loomCommFinalize(loomComm_t comm)
{
    LOOMCHECK(commCheck(comm, "loomCommFinalize"));
    if (atomic_load(&comm->revoked))
        return loomSetError(loomInvalidUsage,
                            "loomCommFinalize: the communicator was revoked (loomCommRevoke); "
                            "its operations were stopped, not finished: destroy it");
    if (!comm->blocking && (atomic_load(&comm->initializing) || atomic_load(&comm->pending) > 0))
        return loomInProgress;
    while (atomic_load(&comm->pending) > 0) {
        struct timespec ts = {0, 200000};
        nanosleep(&ts, NULL);
    }
    int e = atomic_load(&comm->asyncError);
    if (e != loomSuccess)
        return loomSetError((loomResult_t)e, "loomCommFinalize: an operation failed: %s",
                            comm->lastError);
    return loomSuccess;
}

static loomResult_t commRelease(struct loomComm *comm)
{
    comm->magic = LOOM_COMM_DEAD; /* new calls are refused from here on */
    if (comm->initThreadStarted)
        pthread_join(comm->initThread, NULL);
    comm->initThreadStarted = 0;
    waitQuiet(comm);
    if (comm->queue)
        loomStreamDestroy(comm->queue);
    comm->queue = NULL;
    INFO(LOOM_INIT,
         "comm %p rank %d: %lu of its sleeps ran to the 100 ms cap and then found work "
         "(missed wake-ups)",
         (void *)comm, comm->rank, atomic_load(&comm->lateWakes));
    commFree(comm);
    return loomSuccess;
}

loomResult_t loomCommDestroy(loomComm_t comm)
{
    LOOMCHECK(commCheck(comm, "loomCommDestroy"));
    return commRelease(comm);
}

loomResult_t loomCommAbort(loomComm_t comm)
{
    LOOMCHECK(commCheck(comm, "loomCommAbort"));
    atomic_store_explicit(&comm->abortFlag, 1, memory_order_release);
    execWake(comm);
    return commRelease(comm);
}
