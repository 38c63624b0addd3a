/*
 * tuner.c — the cost model that picks algorithm, chunk size and channels.
 *
 * Ring AllReduce is bandwidth-optimal but needs 2(n-1) hops; the double
 * binary tree needs about 2 log2(n) but touches more bytes per byte
 * reduced. Which wins depends on the size, the rank count and how ranks
 * share cores. When a communicator is built, tunerInit asks the model for
 * every collective and power-of-two size class (at the class's smallest
 * size), on host and on device buffers:
 *
 *   for each algorithm LOOM_ALGO allows and the collective has,
 *   for one tree and two, for chunks from the slot down to 1 KiB:
 *       predicted time = callUs + max(critical path, CPU work / cores)
 *   keep the fastest in comm->tuner's table
 *
 * and every call's tunerChoose is a lookup of its class in that table,
 * logged (TUNING) the first time the class is met. (A search at the first
 * call of each size put the model's work on the path of exactly the calls
 * that are already the slowest.)
 *
 * The model is alpha-beta per (algorithm, transport): a pipeline of time
 * units, each costing a hop's latency plus the busiest rank's steps and
 * bytes; the constants per transport are below (shm; and the network
 * between hosts, whose hops and bytes each algorithm counts on its critical
 * path), and how they were measured is in docs/performance.md. LOOM_ALGO
 * is parsed here, once per process, in NCCL's syntax. Channels: one thread runs all of a rank's
 * lanes on the CPU, so extra channels only add steps and the model keeps one, unless LOOM_NCHANNELS
 * was set, in which case every channel is used. loomTuningGet and loomTuningGetHosts run the same
 * model for tools (loom-info --tuning [-H hosts]).
 */
#include <ctype.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "debug.h"
#include "interp.h"
#include "param.h"
#include "topo.h"
#include "tuner.h"

#define ALGO_BIT(a) (1u << (a))
/* LOOM_ALGO names these; the others are the only algorithm of their collectives. */
#define ALGO_USER                                                                                  \
    (ALGO_BIT(LOOM_ALGO_RING) | ALGO_BIT(LOOM_ALGO_TREE) | ALGO_BIT(LOOM_ALGO_DOUBLING) |          \
     ALGO_BIT(LOOM_ALGO_CMA))
#define ALGO_EVERY ((1u << LOOM_ALGO_NUM) - 1)
/* What a collective runs as when LOOM_ALGO allows none of its algorithms. */
#define ALGO_FALLBACK (ALGO_BIT(LOOM_ALGO_RING) | ALGO_BIT(LOOM_ALGO_DIRECT))
/*
 * What an unset LOOM_ALGO, or a list after ^, allows: all but cma, which runs
 * only where a list names it (on ordinary buffers the FIFOs match or beat
 * single copies for Broadcast, Reduce and ReduceScatter where ranks share
 * cores; docs/performance.md) — except for AlltoAll, whose single copies
 * the model weighs like the other algorithms (see cmaByteNs). AllGather's
 * and AllReduce's are weighed as well (tunerDefaultAllowed), but left out of
 * what LOOM_ALGO allows so that src/exec/cma.c still asks for loomMemAlloc
 * buffers first (tunerAsksMapped).
 */
#define ALGO_DEFAULT (ALGO_EVERY & ~ALGO_BIT(LOOM_ALGO_CMA))

/*
 * zeroCopy: the defaults that decide where src/exec/cma.c may run a call without
 * being asked, when every rank's buffers are loomMemAlloc memory (mapped by
 * the peers: no copy through the kernel, see tunerZeroCopy): cma counts as
 * allowed by default there, so an unset LOOM_ALGO, or a list after ^ that
 * does not name cma, keeps it, and a list that names other algorithms only
 * turns it off.
 */
static uint32_t algoDefault(loomColl_t coll, int zeroCopy)
{
    return ALGO_DEFAULT | (coll == LOOM_COLL_ALLTOALL || zeroCopy ? ALGO_BIT(LOOM_ALGO_CMA) : 0);
}

/* The algorithms coll has a schedule for (algorithms/schedule.c). */
static uint32_t collAlgos(loomColl_t coll)
{
    uint32_t m = 0;
    for (int a = 0; a < LOOM_ALGO_NUM; a++)
        if (scheduleGenerator(coll, (loomAlgo_t)a))
            m |= ALGO_BIT(a);
    return m;
}

/* ---- LOOM_ALGO ---- */

/* Collective names of LOOM_ALGO items, and the collectives each covers. */
static const struct {
    const char *name;
    loomColl_t colls[2];
    int ncolls;
} algoColls[] = {
    {"allreduce", {LOOM_COLL_ALLREDUCE}, 1},
    {"broadcast", {LOOM_COLL_BROADCAST}, 1},
    {"reduce", {LOOM_COLL_REDUCE}, 1},
    {"allgather", {LOOM_COLL_ALLGATHER}, 1},
    {"reducescatter", {LOOM_COLL_REDUCESCATTER}, 1},
    {"alltoall", {LOOM_COLL_ALLTOALL, LOOM_COLL_ALLTOALLV}, 2},
    {"sendrecv", {LOOM_COLL_SEND, LOOM_COLL_RECV}, 2},
};

/* NCCL algorithms Loom does not have: accepted in a list (so NCCL settings carry over), never
 * chosen. */
static const char *const ncclOnly[] = {"collnet", "collnetdirect", "collnetchain",
                                       "nvls",    "nvlstree",      "pat"};

static void trimCopy(char *dst, size_t size, const char *s, size_t len)
{
    while (len > 0 && isspace((unsigned char)*s))
        s++, len--;
    while (len > 0 && isspace((unsigned char)s[len - 1]))
        len--;
    if (len >= size)
        len = size - 1;
    memcpy(dst, s, len);
    dst[len] = '\0';
}

/*
 * One algorithm list ("ring,tree" or "^tree") into the names it gives and
 * whether they are excluded; -1 on an unknown name.
 */
static int parseList(const char *list, uint32_t *mask, int *exclude, char *why, size_t whyLen)
{
    *exclude = list[0] == '^';
    const char *p = list + *exclude;
    uint32_t m = 0;
    for (;;) {
        const char *end = strchr(p, ',');
        size_t len = end ? (size_t)(end - p) : strlen(p);
        char word[32];
        trimCopy(word, sizeof(word), p, len);
        int known = 0;
        for (int a = 0; a < LOOM_ALGO_NUM && !known; a++)
            if (ALGO_USER & ALGO_BIT(a) && strcasecmp(word, scheduleAlgoName(a)) == 0)
                m |= ALGO_BIT(a), known = 1;
        for (size_t i = 0; i < sizeof(ncclOnly) / sizeof(ncclOnly[0]) && !known; i++)
            known = strcasecmp(word, ncclOnly[i]) == 0;
        if (!known) {
            snprintf(why, whyLen, "'%s' is not an algorithm (%s, %s, %s, %s)", word,
                     scheduleAlgoName(LOOM_ALGO_RING), scheduleAlgoName(LOOM_ALGO_TREE),
                     scheduleAlgoName(LOOM_ALGO_DOUBLING), scheduleAlgoName(LOOM_ALGO_CMA));
            return -1;
        }
        if (end == NULL)
            break;
        p = end + 1;
    }
    *mask = m;
    return 0;
}

/*
 * What a list parsed by parseList allows for coll. The algorithms a list
 * cannot name (direct) stay allowed, unless the list names one the
 * collective has: "cma" for AlltoAll forces single copies.
 */
static uint32_t listAllows(loomColl_t coll, uint32_t names, int exclude, int zeroCopy)
{
    uint32_t unnamed = ALGO_EVERY & ~ALGO_USER;
    if (exclude)
        return (ALGO_USER & algoDefault(coll, zeroCopy) & ~names) | unnamed;
    return names | ((names & collAlgos(coll)) ? unnamed & ~collAlgos(coll) : unnamed);
}

/* One item, "list" or "collective:list", applied to allowed[]. */
static int parseItem(const char *item, uint32_t allowed[LOOM_COLL_NUM], int zeroCopy, char *why,
                     size_t whyLen)
{
    const char *colon = strchr(item, ':');
    const char *list = colon ? colon + 1 : item;
    char name[32], words[128];
    uint32_t mask;
    int exclude;
    trimCopy(words, sizeof(words), list, strlen(list));
    if (parseList(words, &mask, &exclude, why, whyLen) != 0)
        return -1;
    if (colon == NULL) {
        for (int c = 0; c < LOOM_COLL_NUM; c++)
            allowed[c] = listAllows((loomColl_t)c, mask, exclude, zeroCopy);
        return 0;
    }
    trimCopy(name, sizeof(name), item, (size_t)(colon - item));
    for (size_t i = 0; i < sizeof(algoColls) / sizeof(algoColls[0]); i++) {
        if (strcasecmp(name, algoColls[i].name) != 0)
            continue;
        for (int k = 0; k < algoColls[i].ncolls; k++)
            allowed[algoColls[i].colls[k]] =
                listAllows(algoColls[i].colls[k], mask, exclude, zeroCopy);
        return 0;
    }
    snprintf(why, whyLen,
             "'%s' is not a collective (allreduce, broadcast, reduce, allgather, reducescatter, "
             "alltoall, sendrecv)",
             name);
    return -1;
}

static int parseAlgo(const char *spec, uint32_t allowed[LOOM_COLL_NUM], int zeroCopy, char *why,
                     size_t whyLen)
{
    uint32_t work[LOOM_COLL_NUM];
    char item[160];
    for (int c = 0; c < LOOM_COLL_NUM; c++)
        allowed[c] = work[c] = algoDefault((loomColl_t)c, zeroCopy);
    if (spec == NULL)
        return 0;
    for (const char *p = spec; p != NULL;) {
        const char *end = strchr(p, ';');
        trimCopy(item, sizeof(item), p, end ? (size_t)(end - p) : strlen(p));
        if (item[0] != '\0' && parseItem(item, work, zeroCopy, why, whyLen) != 0)
            return -1;
        p = end ? end + 1 : NULL;
    }
    memcpy(allowed, work, sizeof(work));
    return 0;
}

int tunerParseAlgo(const char *spec, uint32_t allowed[LOOM_COLL_NUM], char *why, size_t whyLen)
{
    return parseAlgo(spec, allowed, 0, why, whyLen);
}

int tunerParseZeroCopy(const char *spec, uint32_t allowed[LOOM_COLL_NUM], char *why, size_t whyLen)
{
    return parseAlgo(spec, allowed, 1, why, whyLen);
}

/* Read once per process: what LOOM_ALGO allows, and the cores this process may use (the
 * shape loomTuningGet assumes; a communicator's comes from all its ranks, commCrowding). */
static uint32_t algoAllowed[LOOM_COLL_NUM];
static uint32_t zeroCopyAllowed[LOOM_COLL_NUM]; /* tunerParseZeroCopy's */
static int tuneCpus;
static size_t tuneCmaMin; /* LOOM_CMA_MIN_BYTES */
static int tuneKernel;    /* LOOM_EXECUTOR=kernel */
static int tuneProto;     /* LOOM_PROTO: -1 unset, else LOOM_PROTO_* */
static pthread_once_t tuneOnce = PTHREAD_ONCE_INIT;

static void tuneRead(void)
{
    char why[160];
    tuneCpus = commCpuCount();
    tuneCmaMin = (size_t)paramInt(LOOM_PARAM_CMA_MIN_BYTES);
    tuneKernel = strcmp(paramStr(LOOM_PARAM_EXECUTOR), "kernel") == 0;
    const char *proto = paramStr(LOOM_PARAM_PROTO);
    tuneProto = strcmp(proto, "LL") == 0       ? LOOM_PROTO_LL
                : strcmp(proto, "Simple") == 0 ? LOOM_PROTO_SIMPLE
                                               : -1;
    const char *spec = paramStr(LOOM_PARAM_ALGO);
    if (tunerParseAlgo(spec, algoAllowed, why, sizeof(why)) != 0) {
        paramWarn("LOOM_ALGO=%s: %s; ignoring it (the tuner chooses)", spec, why);
        tunerParseZeroCopy(NULL, zeroCopyAllowed, why, sizeof(why));
    } else {
        tunerParseZeroCopy(spec, zeroCopyAllowed, why, sizeof(why));
    }
}

int tunerKernelWanted(void)
{
    pthread_once(&tuneOnce, tuneRead);
    return tuneKernel;
}

int tunerZeroCopy(loomColl_t coll)
{
    pthread_once(&tuneOnce, tuneRead);
    return (unsigned)coll < LOOM_COLL_NUM && (zeroCopyAllowed[coll] & ALGO_BIT(LOOM_ALGO_CMA)) != 0;
}

int tunerAllows(loomColl_t coll, loomAlgo_t algo)
{
    pthread_once(&tuneOnce, tuneRead);
    return (unsigned)coll < LOOM_COLL_NUM && (algoAllowed[coll] & ALGO_BIT(algo)) != 0;
}

/* ---- the model ---- */

/*
 * Costs of one transport. A call is a pipeline of "time units": in each, a
 * rank waits for a message (a hop) and runs its steps on one piece. So
 *
 *   critical = units x (hop + steps x stepUs + bytes touched x byteNs)
 *   cpu      = (every rank's steps x stepUs + bytes touched x byteNs) / cores used
 *              (+ units x switching, when ranks share cores: the same cores
 *              switch and work, so the two add up instead of overlapping)
 *   time     = callUs + max(critical, cpu)
 *
 * where "bytes touched" counts each byte a step reads or writes (a SEND of
 * c bytes touches 2c, a RECV_REDUCE_SEND 3c, a RECV_REDUCE_COPY_SEND 4c),
 * and a hop costs hopUs, plus, when ranks outnumber cores, switchUs (the
 * receiver must be scheduled before it can run) and crowdUs for each
 * further rank on the receiver's core beyond the second. A ring
 * hop wakes one rank for one message; a tree's time unit wakes ranks of
 * both trees, each for up to three messages (two children and a parent),
 * so when ranks outnumber cores it costs treeSwitches times as many
 * switches (tree1Switches when the data takes one tree only).
 */
struct tuneCosts {
    const char *transport;
    double callUs;          /* a call's fixed cost: plan, executor entry and exit */
    double hopUs;           /* a message between two ranks that each have a core */
    double switchUs;        /* added per hop when ranks outnumber cores */
    double crowdUs;         /* and for each rank a core holds beyond two */
    double treeSwitches;    /* switches of a tree time unit, in ring hops */
    double tree1Switches;   /* the same with all data in one tree */
    double ringSparse;      /* the part of a ring hop's switches paid even with no block */
    double rootedSwitches;  /* switches of a Broadcast or Reduce unit over both trees */
    double rooted1Switches; /* the same over one tree */
    double stepUs;          /* the executor's overhead of one step */
    double byteNs;          /* one byte read or written by a copy or a reduction */
    double ringShareSmall;  /* the part of the ring's byte total paid up to ringSmallBytes, */
    double ringSmallBytes;  /* when ranks share cores; */
    double ringShareLarge;  /* and from ringLargeBytes (linear between) */
    double ringLargeBytes;
    double cmaByteNs; /* one byte read from a peer by process_vm_readv */
    double cmaPeerUs; /* one such read's fixed cost */
};

/*
 * shm. Each constant is fitted to forced-algorithm runs of bench/tuning-check
 * (loom-perf -z 1 -c 0 under loomrun, medians of interleaved runs on a quiet
 * 2-core build machine); docs/performance.md, "The tuner's constants", has
 * the figures each was read from, the choices they give, what they replaced
 * and how to redo them on another machine.
 *
 *   callUs          a 1-rank 8 B AllReduce (one COPY step)
 *   hopUs           a 2-rank 8 B AllReduce = callUs + 2 x (hopUs + stepUs)
 *   switchUs        a ring unit with two ranks a core (n=4, 32 B)
 *   crowdUs         what each rank beyond two on a core adds (n=8, 32 B)
 *   ringSparse      a ring whose blocks are mostly empty (n=8, 8 B) still
 *                   pays most of a hop's switches
 *   treeSwitches    small tree AllReduce against the ring, n=4 and 8; 1.25
 *                   rather than 1.2 gives doubling the n=8 16 KiB tie
 *   tree1Switches   one tree against two, 8 B, n=8: equal or a little faster
 *   rootedSwitches  Broadcast and Reduce over two trees lose 1.5-8x to the
 *                   chain where ranks share cores (a rank interior in one
 *                   tree waits for the other every call); 3.0 keeps them
 *                   off that path
 *   rooted1Switches one tree against the chain, n=4 and 8
 *   byteNs          2 ranks, 64 MiB, CPU-bound
 *   stepUs          not separable from hopUs at these sizes; small
 *   ringShare*      where ranks share cores the ring's byte total, (6n-4) S,
 *                   over-predicts it (a block stays in cache while it goes
 *                   round): half up to 1 MiB, 0.85 from 4 MiB fits
 *   cmaByteNs       single-copy AlltoAll of 64 MiB on 2 and 4 ranks
 *   cmaPeerUs       single-copy AlltoAll of 64 KiB on 2 ranks
 */
static const struct tuneCosts shmCosts = {
    .transport = "shm",
    .callUs = 0.1,
    .hopUs = 0.2,
    .switchUs = 2.5,
    .crowdUs = 0.65,
    .treeSwitches = 1.25,
    .tree1Switches = 1.15,
    .ringSparse = 0.6,
    .rootedSwitches = 3.0,
    .rooted1Switches = 1.2,
    .stepUs = 0.05,
    .byteNs = 0.065,
    .ringShareSmall = 0.5,
    .ringSmallBytes = 1024 * 1024,
    .ringShareLarge = 0.85,
    .ringLargeBytes = 4 * 1024 * 1024,
    .cmaByteNs = 0.2,
    .cmaPeerUs = 1.5,
};

/*
 * The network between hosts (net/socket: TCP). Across hosts a pipeline's
 * critical path also crosses host links: netHops messages over them one
 * after the other (the first piece's way, then one a piece behind it: each
 * message costs about a hop here), hopUs each, and netBytes that one
 * host's link carries (byteNs each). The shm terms stay for every unit.
 * Both are fitted between network namespaces of the development VM, a core
 * a rank (tests/multinode/netns.sh, 2 hosts x 1): hopUs from the 8 B
 * AllReduce, doubling (one exchange) against the ring and the tree (two
 * hops; a hop is veth, bridge, TCP and a waiting rank that polls), byteNs
 * from 1 / busbw of the 64 MiB AllReduce (a 2-rank ring's host link
 * carries every byte once). The runs and figures are in docs/performance.md, "The network
 * constants (netCosts)". A real network has shorter hops and cheaper
 * bytes: redo both there as that section says. InfiniBand is priced the
 * same, unmeasured.
 */
struct tuneNetCosts {
    double hopUs;
    double byteNs;
};

static const struct tuneNetCosts netCosts = {.hopUs = 10.0, .byteNs = 0.65};

/* One evaluation: a collective of `bytes` on a shape, cut in pieces of `chunk`. */
struct tuneCase {
    const struct loomTuneShape *s;
    const struct tuneCosts *k;
    loomColl_t coll;
    double bytes;
    double chunk;
    int trees; /* tree: how many carry data */
};

/* A pipeline's shape: what the busiest rank does per unit, and what all ranks do in all. */
struct tunePipe {
    double units;      /* time units on the critical path */
    double switches;   /* switches per unit, in ring hops, when ranks share cores */
    double unitSteps;  /* steps of the busiest rank per unit */
    double unitBytes;  /* bytes it touches per unit */
    double totalSteps; /* steps of every rank, whole call */
    double totalBytes; /* bytes every rank touches, whole call */
    double netHops;    /* host links crossed in a row on the critical path (0: one host) */
    double netBytes;   /* bytes the busiest host link carries on it */
};

/* Hosts of a shape: 1 for one host (0 or 1), at most one a rank. */
static int shapeHosts(const struct loomTuneShape *s)
{
    if (s->nHosts <= 1)
        return 1;
    return s->nHosts < s->nranks ? s->nHosts : s->nranks;
}

/* The host of a rank: the shape's own placement, or hosts of perHost filled in rank order. */
static int hostOfRank(const struct loomTuneShape *s, int rank, int perHost)
{
    return s->hostOf ? s->hostOf[rank] : rank / perHost;
}

static int ceilLog2(int x)
{
    int k = 0;
    while ((1 << k) < x)
        k++;
    return k;
}

static double ceilDiv(double a, double b)
{
    double q = a / b;
    double f = (double)(long long)q;
    return q > f ? f + 1 : f;
}

static int floorLog2(int x)
{
    int k = 0;
    while (x > 1)
        x /= 2, k++;
    return k;
}

static double pipeTime(const struct tuneCase *c, const struct tunePipe *p)
{
    const struct tuneCosts *k = c->k;
    int n = c->s->nranks, cpus = c->s->cpus > 0 ? c->s->cpus : 1;
    double perCore = (double)c->s->localRanks / cpus;
    double wait = perCore > 1 ? (k->switchUs + k->crowdUs * (perCore - 2)) * p->switches : 0;
    double hop = n > 1 ? k->hopUs + wait : 0;
    double critical = p->units * (hop + p->unitSteps * k->stepUs + p->unitBytes * k->byteNs / 1e3);
    double cpu =
        (p->totalSteps * k->stepUs + p->totalBytes * k->byteNs / 1e3) / (n < cpus ? n : cpus);
    if (perCore > 1) /* the cores that do the work also do the switching */
        cpu += p->units * wait;
    critical += p->netHops * netCosts.hopUs + p->netBytes * netCosts.byteNs / 1e3;
    return k->callUs + (critical > cpu ? critical : cpu);
}

/*
 * Ring. AllReduce: loops of n blocks, each block 2(n-1) hops, every rank one
 * step per unit (3 bytes touched per byte on average). The chains
 * (Broadcast, Reduce) and the per-block collectives: a piece per unit once
 * the pipeline of n - 1 hops is full.
 */
/* The part of the ring AllReduce's byte total paid when ranks share cores (see ringShare*). */
static double ringByteShare(const struct tuneCosts *k, double S)
{
    if (S <= k->ringSmallBytes)
        return k->ringShareSmall;
    if (S >= k->ringLargeBytes)
        return k->ringShareLarge;
    double f = (S - k->ringSmallBytes) / (k->ringLargeBytes - k->ringSmallBytes);
    return k->ringShareSmall + (k->ringShareLarge - k->ringShareSmall) * f;
}

static void ringPipe(const struct tuneCase *c, struct tunePipe *p)
{
    const struct tuneCosts *k = c->k;
    double n = c->s->nranks, S = c->bytes, H = shapeHosts(c->s);
    if (c->coll == LOOM_COLL_ALLREDUCE) {
        double loops = ceilDiv(S, n * c->chunk), block = S / (n * (loops > 0 ? loops : 1));
        /* Fewer elements than ranks (4-byte ones, say) leave blocks empty and
         * their steps out: each hop wakes fewer ranks. */
        double blocks = S / 4 < n ? ceilDiv(S, 4) : n;
        p->units = (2 * n - 1) * loops; /* SEND, 2(n-1) hops, per loop: loops do not overlap */
        p->switches = k->ringSparse + (1 - k->ringSparse) * blocks / n;
        p->unitSteps = 1, p->unitBytes = 3 * block;
        p->totalSteps = n * p->units, p->totalBytes = (6 * n - 4) * S;
        if (c->s->localRanks > c->s->cpus)
            p->totalBytes *= ringByteShare(k, S);
        if (H > 1) { /* a host link carries 2(n-1) blocks a loop, one after the other */
            p->netHops = 2 * (n - 1) * (loops > 0 ? loops : 1);
            p->netBytes = p->netHops * block;
        }
        return;
    }
    double perRank = c->coll == LOOM_COLL_BROADCAST || c->coll == LOOM_COLL_REDUCE ? 1 : n;
    double pieces = ceilDiv(S / perRank, c->chunk);
    double piece = pieces > 0 ? S / perRank / pieces : 0;
    p->units = (n - 1) + perRank * pieces - 1, p->switches = 1;
    p->unitSteps = 1, p->unitBytes = 3 * piece;
    p->totalSteps = n * perRank * pieces, p->totalBytes = 3 * n * S;
    if (H > 1) { /* a chain: the first piece crosses every host link, the others follow;
                  * per block: a host link carries n - 1 blocks */
        p->netHops = perRank == 1 ? (H - 1) + (pieces - 1) : (n - 1) * pieces;
        p->netBytes = perRank == 1 ? S + (H - 2) * piece : (n - 1) / n * S;
    }
}

/*
 * Double binary tree: each tree carries half, in pieces (or one tree all of
 * it). AllReduce runs 2H + P - 1 units (H the height, P pieces per tree);
 * per unit the busiest rank reduces two children's pieces, passes one up,
 * takes one down and hands it to two children in the tree it is interior in
 * (4 steps touching 11 piece sizes), and sends and receives a piece in the
 * other (2 steps, 4 sizes, done while it waits on the first tree, so only
 * the 11, in about 3 steps a unit, lie on the critical path). Broadcast and Reduce run H + P - 1
 * units under the root, which serves both trees. The totals are the same
 * with one tree or two: every byte takes one tree.
 */
static void treePipe(const struct tuneCase *c, struct tunePipe *p)
{
    int n = c->s->nranks, two = c->trees == 2, H = shapeHosts(c->s);
    double S = c->bytes, share = two ? S / 2 : S, pieces = ceilDiv(share, c->chunk);
    double piece = pieces > 0 ? share / pieces : 0;
    double leaves = (n + 1) / 2, edges = n - 1;
    p->switches = two ? c->k->treeSwitches : c->k->tree1Switches;
    if (c->coll == LOOM_COLL_ALLREDUCE) {
        double fill = 2 * floorLog2(n);
        p->units = fill + pieces - 1;
        p->unitSteps = n > 2 ? 3 : 2;
        /* The first piece's way up and down touches 6 piece sizes a level
         * (two children's reduced into the parent's slot, or the parent's
         * copied out and to two children); the 11 above are paid only once
         * both directions run at once, by the pieces behind it. */
        p->unitBytes =
            n > 2 ? (fill * 6 + (pieces - 1) * 11) / p->units * piece : (4 + 4 * two) * piece;
        p->totalSteps = (two ? 2 : 1) * pieces * (2 * leaves + 2 * edges - 1);
        p->totalBytes = S * (4 * leaves + 3 * edges + 1 + 3 * (n / 2 - 1) + 2 * (edges - n / 2));
        /* Up and down the tree of hosts; a host interior in one tree sends its
         * half up and to two children (3 halves), and its half up in the
         * other (one): 2S, or 3S through one tree. Two hosts: each is the
         * other's only child in one tree, S either way (the ring's host link
         * carries 2(n-1)/n S: 1.5S on 2 x 2, and the trees measured 1.2-1.8x
         * faster there from 128 KiB). */
        if (H > 1) {
            p->netHops = 2 * ceilLog2(H) + pieces - 1;
            p->netBytes = H == 2 ? S : (two ? 2 : 3) * S;
        }
        return;
    }
    p->switches = two ? c->k->rootedSwitches : c->k->rooted1Switches;
    p->units = (n > 1 ? floorLog2(n - 1) + 1 : 0) + pieces - 1;
    p->unitSteps = 2, p->unitBytes = 5 * piece;
    p->totalSteps = (two ? 2 : 1) * pieces * (leaves + edges + 1);
    p->totalBytes = S * (2 * leaves + 3 * edges + 2);
    /* The root's host, then the trees of the others; an interior host sends
     * to two children: S over both trees (the root's halves), 2S over one
     * (S still where the other hosts' tree has no host with two children). */
    if (H > 1) {
        p->netHops = ceilLog2(H - 1) + 1 + pieces - 1;
        p->netBytes = two || H <= 3 ? S : 2 * S;
    }
}

/*
 * Recursive doubling (AllReduce only): R rounds (log2 n, two more when n is
 * not a power of two), each a hop on which a rank sends its whole piece and
 * adds its partner's (2 steps, 5 piece sizes touched). Pieces do not overlap
 * on a rank: R units per piece. The CPU total counts 3.5 piece sizes a round,
 * not 5: that fits the runs where ranks share cores and the CPU total
 * decides; on 2 ranks, where the critical path decides, 5 fits
 * (docs/performance.md, "The tuner's constants").
 */
/*
 * The most ranks of one host whose partner is on another host in one
 * exchange of algorithms/doubling.c: k < 0 the pairs (2i, 2i + 1) of the
 * first 2(n - p) ranks, else round k, where participant v (rank 2v + 1 for
 * v < n - p, else v + n - p) meets v ^ 2^k. count[] (nHosts entries, zeroed
 * here) tallies each host's crossing ranks.
 */
static int doublingCrossers(const struct loomTuneShape *s, int pow2, int k, int perHost, int *count,
                            int hosts)
{
    int n = s->nranks, extra = n - pow2, most = 0;
    for (int h = 0; count != NULL && h < hosts; h++)
        count[h] = 0;
    for (int v = 0; v < (k < 0 ? extra : pow2); v++) {
        int w = k < 0 ? v : v ^ (1 << k);
        int a = k < 0 ? 2 * v : v < extra ? 2 * v + 1 : v + extra;
        int b = k < 0 ? 2 * v + 1 : w < extra ? 2 * w + 1 : w + extra;
        int ha = hostOfRank(s, a, perHost);
        if (ha == hostOfRank(s, b, perHost) || ha < 0 || ha >= hosts)
            continue;
        if (count == NULL) /* no room to tally: one rank a host, at least */
            return 1;
        most = ++count[ha] > most ? count[ha] : most;
    }
    return most;
}

static void doublingPipe(const struct tuneCase *c, struct tunePipe *p)
{
    int n = c->s->nranks, pow2 = 1 << floorLog2(n);
    double rounds = floorLog2(n) + (pow2 < n ? 2 : 0);
    double S = c->bytes, pieces = ceilDiv(S, c->chunk), piece = pieces > 0 ? S / pieces : 0;
    p->units = rounds * pieces, p->switches = 1;
    p->unitSteps = 2, p->unitBytes = 5 * piece;
    p->totalSteps = n * 2 * p->units, p->totalBytes = n * 3.5 * S * rounds;
    /* The exchanges of doubling.c (the pairs 2i, 2i + 1 before and after,
     * then participant v with v ^ 2^k) are followed rank by rank on the
     * communicator's own placement (loomTuningGetHosts: each host's ranks
     * numbered in a row, mpirun's default mapping): a round with any pair on
     * two hosts costs a network hop a piece, and the host with the most
     * ranks crossing sends the whole vector of each. */
    int H = shapeHosts(c->s);
    int hosts = c->s->hostOf ? c->s->nHosts : H, few[256];
    int *count = hosts <= 256 ? few : calloc((size_t)hosts, sizeof(*count));
    if (H > 1) {
        int perHost = (n + H - 1) / H;
        double hops = 0, bytes = 0;
        for (int k = -1; k < floorLog2(pow2); k++) {
            int most = doublingCrossers(c->s, pow2, k, perHost, count, hosts);
            double times = k < 0 ? 2 : 1; /* the pairs meet before and after the rounds */
            if (most > 0)
                hops += times * pieces, bytes += times * most * S;
        }
        p->netHops = hops, p->netBytes = bytes;
    }
    if (count != few)
        free(count);
}

/*
 * Direct exchanges (AlltoAll, Send/Recv): on one host a ring's count of
 * pieces and hops is close enough. Across hosts a rank's blocks for the
 * ranks of other hosts go one exchange after the other, and its host's link
 * carries every such block of each of its ranks; a Send is one stream.
 */
static void directPipe(const struct tuneCase *c, struct tunePipe *p)
{
    ringPipe(c, p);
    int n = c->s->nranks, H = shapeHosts(c->s);
    if (H == 1)
        return;
    double S = c->bytes;
    if (c->coll == LOOM_COLL_SEND || c->coll == LOOM_COLL_RECV) {
        p->netHops = ceilDiv(S, c->chunk), p->netBytes = S;
        return;
    }
    int perHost = (n + H - 1) / H, far = n - perHost;
    double block = S / n, pieces = ceilDiv(block, c->chunk);
    p->netHops = far * (pieces > 0 ? pieces : 1);
    p->netBytes = (double)perHost * far * block;
}

/*
 * Each algorithm's pipeline, and how many variants the tuner tries (the
 * tree: data over both trees, or one). A new algorithm adds a row.
 */
static const struct {
    void (*pipe)(const struct tuneCase *c, struct tunePipe *p);
    int variants;
} algoModels[LOOM_ALGO_NUM] = {
    [LOOM_ALGO_RING] = {ringPipe, 1},     [LOOM_ALGO_TREE] = {treePipe, 2},
    [LOOM_ALGO_DIRECT] = {directPipe, 1}, [LOOM_ALGO_DOUBLING] = {doublingPipe, 1},
    [LOOM_ALGO_CMA] = {NULL, 1}, /* cmaTime; only where shape->cmaOk */
};

/*
 * Single copies (algorithms/single.c): two hops (the offers, then the
 * drains; AllReduce and Reduce two more, for the reduced pieces pushed),
 * and the busiest rank's own work: n - 1 reads of a block (S / n) by the
 * kernel and a copy of its own (AlltoAll, AllGather, ReduceScatter, whose
 * reads are folded in); AllReduce that and n - 1 writes of its reduced
 * block into the peers' buffers; Reduce one such write, into the root's;
 * Broadcast one read of S. Where ranks share cores their work adds up on
 * the cores. The chunk: a piece of a peer's buffer read and folded while in
 * the cache.
 */
static double cmaTime(const struct tuneCase *c)
{
    const struct tuneCosts *k = c->k;
    int n = c->s->nranks, cpus = c->s->cpus > 0 ? c->s->cpus : 1;
    double S = c->bytes, block = S / n, read = k->cmaPeerUs + block * k->cmaByteNs / 1e3;
    double units = 2, copy = 2 * block * k->byteNs / 1e3, work = (n - 1) * read + copy;
    switch (c->coll) {
    case LOOM_COLL_ALLREDUCE:
        units = 4, work = 2 * (n - 1) * read + copy;
        break;
    case LOOM_COLL_BROADCAST:
        work = k->cmaPeerUs + S * k->cmaByteNs / 1e3;
        break;
    case LOOM_COLL_REDUCE:
        units = 4, work = n * read + copy;
        break;
    default:
        break;
    }
    struct tunePipe p = {.units = units, .switches = 1, .unitSteps = 1, .totalSteps = 2.0 * n};
    double perCore = (double)c->s->localRanks / cpus;
    return pipeTime(c, &p) + work * (perCore > 1 ? perCore : 1);
}

static double algoTime(const struct tuneCase *c, loomAlgo_t algo)
{
    struct tunePipe p = {0};
    if (c->s->nranks == 1 || c->bytes == 0) /* a local copy, or nothing */
        return c->k->callUs + 2 * c->bytes * c->k->byteNs / 1e3;
    if (algo == LOOM_ALGO_CMA)
        return cmaTime(c);
    algoModels[algo].pipe(c, &p);
    return pipeTime(c, &p);
}

/* The best chunk for algo: powers of two from the slot down to 1 KiB. */
static double bestChunk(struct tuneCase *c, loomAlgo_t algo, size_t slot, double *chunk)
{
    double best = -1;
    for (size_t ch = slot; ch >= 1024 || ch == slot; ch /= 2) {
        c->chunk = (double)ch;
        double t = algoTime(c, algo);
        if (best < 0 || t < best)
            best = t, *chunk = (double)ch;
        if (ch < 2)
            break;
    }
    return best;
}

/*
 * Single copies reduce and copy a piece of at most this many bytes at a time
 * (or a slot, if smaller): pieces that stay in the L2 cache between a peer's
 * read and the reduction (where the size comes from: docs/performance.md,
 * "The tuner's constants").
 */
#define CMA_PIECE (128.0 * 1024)

/* Whether the model weighs coll's single copies against its other algorithms. */
static int cmaWeighed(loomColl_t coll)
{
    return coll == LOOM_COLL_ALLTOALL || coll == LOOM_COLL_ALLGATHER || coll == LOOM_COLL_ALLREDUCE;
}

/*
 * What LOOM_ALGO allows for coll. AllGather's and AllReduce's single copies
 * are weighed unless LOOM_ALGO rules them out, since on ordinary buffers
 * they beat the FIFOs from the sizes the cost model gives them where ranks
 * have a core each (the measurements are in docs/performance.md). A call on
 * loomMemAlloc buffers everywhere takes them unweighed (tunerChooseMapped).
 */
uint32_t tunerDefaultAllowed(loomColl_t coll)
{
    pthread_once(&tuneOnce, tuneRead);
    uint32_t allowed = algoAllowed[coll];
    if ((coll == LOOM_COLL_ALLGATHER || coll == LOOM_COLL_ALLREDUCE) &&
        (zeroCopyAllowed[coll] & ALGO_BIT(LOOM_ALGO_CMA)))
        allowed |= ALGO_BIT(LOOM_ALGO_CMA);
    return allowed;
}

int tunerModel(const struct loomTuneShape *shape, loomColl_t coll, size_t bytes, uint32_t allowed,
               struct loomTuning *out)
{
    pthread_once(&tuneOnce, tuneRead);
    uint32_t can = collAlgos(coll) & (allowed ? allowed : tunerDefaultAllowed(coll));
    struct tuneCase c = {shape, &shmCosts, coll, (double)bytes, (double)shape->slotBytes, 2};
    int res = 0;
    if (can == 0) { /* nothing allowed that coll has: its first algorithm */
        can = collAlgos(coll) & ALGO_FALLBACK;
        res = -1;
    }
    out->predictedUs = -1;
    int cma = shape->cmaOk && bytes >= shape->cmaMinBytes;
    if (!cma && (can & ~ALGO_BIT(LOOM_ALGO_CMA)) == 0) { /* cma alone, and not possible */
        can = collAlgos(coll) & ALGO_FALLBACK;
        res = -1;
    }
    /* Single copies named in LOOM_ALGO where the model does not weigh them: taken. */
    if (cma && (can & ALGO_BIT(LOOM_ALGO_CMA)) && !cmaWeighed(coll))
        can = ALGO_BIT(LOOM_ALGO_CMA);
    for (int a = 0; a < LOOM_ALGO_NUM; a++) {
        if (!(can & ALGO_BIT(a)) || (a == LOOM_ALGO_CMA && !cma))
            continue;
        for (int v = 0; v < algoModels[a].variants; v++) {
            c.trees = 2 - v;
            double chunk = (double)shape->slotBytes;
            double t;
            if (a == LOOM_ALGO_CMA) { /* its model needs no chunk */
                chunk = shape->slotBytes < CMA_PIECE ? (double)shape->slotBytes : CMA_PIECE;
                t = algoTime(&c, LOOM_ALGO_CMA);
            } else {
                t = bestChunk(&c, (loomAlgo_t)a, shape->slotBytes, &chunk);
            }
            if (out->predictedUs < 0 || t < out->predictedUs) {
                out->algo = (loomAlgo_t)a;
                out->predictedUs = t;
                out->chunkBytes = (size_t)chunk;
                out->trees = c.trees;
            }
        }
    }
    /* One thread runs every lane of a rank, so more lanes only add steps: use
     * one channel unless LOOM_NCHANNELS asks for more. */
    out->nChannels = shape->channelsSet ? shape->nChannels : 1;
    return res;
}

static int sizeClass(size_t bytes)
{
    int c = 0;
    while (bytes > 1 && c < LOOM_TUNE_CLASSES - 1)
        bytes >>= 1, c++;
    return c;
}

/* The shape the model sees for comm, the same on every rank. */
static struct loomTuneShape commShape(const struct loomComm *comm)
{
    return (struct loomTuneShape){.nranks = comm->nranks,
                                  .nHosts = comm->topo ? comm->topo->nHosts : 1,
                                  .hostOf = comm->topo ? comm->topo->hostOf : NULL,
                                  .localRanks = comm->tuneLocalRanks,
                                  .cpus = comm->tuneCpus,
                                  .slotBytes = comm->slotBytes,
                                  .nChannels = comm->nChannels,
                                  .channelsSet = paramIsSet(LOOM_PARAM_NCHANNELS),
                                  .cmaOk = comm->cmaOk,
                                  .cmaMinBytes = comm->cmaMinBytes};
}

/* The decisions for coll on host (device 0) or device buffers, class by class. */
static void tableFill(struct loomTunerState *st, loomColl_t coll, int device)
{
    struct loomTuneShape shape = st->shape;
    shape.cmaOk = shape.cmaOk && !device;
    uint32_t allowed = tunerDefaultAllowed(coll);
    if (allowed == 0)
        allowed = ALGO_BIT(LOOM_ALGO_RING);
    for (int k = 0; k < LOOM_TUNE_CLASSES; k++) {
        size_t bytes = k == 0 ? 1 : (size_t)1 << k;
        st->fellBack[device][coll][k] =
            tunerModel(&shape, coll, bytes, allowed, &st->table[device][coll][k]) != 0;
    }
}

/*
 * LL up to this many bytes per call (the tuner's size) where the plan
 * interpreter runs, unless LOOM_PROTO says otherwise. It is the CPU's
 * constant, measured on the CPU (docs/performance.md, "LL against Simple on
 * host buffers"): a line buys a CPU nothing past the smallest calls, since an
 * x86 store is already ordered after the data before it. The launched
 * interpreter takes it too until a device tuner has constants of its own.
 */
#define TUNE_LL_MAX_BYTES 16

/*
 * Finding out whether every rank passes loomMemAlloc buffers costs an
 * exchange of descriptors, a barrier, in every call that may qualify, and
 * most calls do not. With a core for each rank that is cheap; where ranks
 * share cores it costs far more, since it stops the ranks' calls from
 * overlapping. So the ranks ask only where each has a core of its own (the
 * most crowded host, agreed at init); elsewhere LOOM_ALGO naming cma turns
 * single copies on, and with loomMemAlloc buffers they then go through the
 * mappings too. And only from TUNE_ASK_MIN_BYTES: below it the exchange cost
 * more than the mappings saved for ordinary buffers. The measurements are in
 * docs/performance.md ("Comparing with Open MPI", loomMemAlloc buffers).
 */
#define TUNE_ASK_MIN_BYTES (512 * 1024)

/* The smallest call of coll from which the ranks ask about mappings (SIZE_MAX: never). */
static size_t askMin(const struct loomComm *comm, loomColl_t coll)
{
    if (!comm->cmaOk || comm->tuneLocalRanks > comm->tuneCpus || !tunerZeroCopy(coll))
        return SIZE_MAX;
    switch (coll) {
    case LOOM_COLL_ALLREDUCE:
    case LOOM_COLL_REDUCESCATTER:
    case LOOM_COLL_BROADCAST:
    case LOOM_COLL_REDUCE:
        if (tunerAllows(coll, LOOM_ALGO_CMA)) /* named: the tuner takes them anyway */
            return SIZE_MAX;
        break;
    case LOOM_COLL_ALLGATHER:
        break;
    default: /* AlltoAll: weighed by the model on any buffers */
        return SIZE_MAX;
    }
    return comm->cmaMinBytes > TUNE_ASK_MIN_BYTES ? comm->cmaMinBytes : TUNE_ASK_MIN_BYTES;
}

loomResult_t tunerInit(struct loomComm *comm, const int served[LOOM_EXECUTOR_NUM])
{
    pthread_once(&tuneOnce, tuneRead);
    struct loomTunerState *st = calloc(1, sizeof(*st));
    if (st == NULL)
        return loomSetError(loomSystemError, "out of memory for the tuner's table (%zu bytes)",
                            sizeof(*st));
    st->shape = commShape(comm);
    for (int device = 0; device < 2; device++)
        for (int c = 0; c < LOOM_COLL_NUM; c++)
            tableFill(st, (loomColl_t)c, device);
    /* The interpreter where it serves comm (asked for and set up: every link shared memory);
     * else the host-driven executors, which serve every communicator. */
    int kernel = served[LOOM_EXECUTOR_KERNEL];
    st->executor[0] = kernel ? LOOM_EXECUTOR_KERNEL : LOOM_EXECUTOR_HOST;
    st->executor[1] = served[LOOM_EXECUTOR_LAUNCH] ? LOOM_EXECUTOR_LAUNCH : LOOM_EXECUTOR_CUDA;
    st->ll = kernel && tuneProto != LOOM_PROTO_SIMPLE; /* LL: only the interpreter's */
    st->llMaxBytes = tuneProto == LOOM_PROTO_LL ? SIZE_MAX : TUNE_LL_MAX_BYTES;
    for (int c = 0; c < LOOM_COLL_NUM; c++)
        st->askMinBytes[c] = askMin(comm, (loomColl_t)c);
    comm->tuner = st;
    return loomSuccess;
}

int tunerExecutor(const struct loomComm *comm, int device)
{
    return comm->tuner->executor[device != 0];
}

int tunerAsksMapped(const struct loomComm *comm, loomColl_t coll, size_t bytes)
{
    return bytes >= comm->tuner->askMinBytes[coll];
}

/*
 * The protocol of a call of coll moving bytes on comm run by executor: the
 * same on every rank whatever its group (AlltoAllv's size differs between
 * ranks: only a forced LL is one they agree on), but never LL on the
 * host-driven CUDA executor, which has no lines. An LL step moves one
 * line's worth.
 */
static void protoChoose(const struct loomTunerState *st, loomColl_t coll, size_t bytes,
                        int executor, struct loomTuning *out)
{
    if (coll == LOOM_COLL_ALLTOALLV)
        bytes = SIZE_MAX;
    out->proto = st->ll && executor != LOOM_EXECUTOR_CUDA && bytes <= st->llMaxBytes
                     ? LOOM_PROTO_LL
                     : LOOM_PROTO_SIMPLE;
    if (out->proto == LOOM_PROTO_LL && out->chunkBytes > LOOM_LL_BYTES)
        out->chunkBytes = LOOM_LL_BYTES;
}

void tunerFree(struct loomComm *comm)
{
    free(comm->tuner);
    comm->tuner = NULL;
}

/* 1 the first time (collective, size class) is met on comm. */
static int tuneFirst(struct loomComm *comm, loomColl_t coll, size_t bytes)
{
    _Atomic uint64_t *logged = &comm->tuner->logged[coll];
    uint64_t bit = 1ULL << sizeClass(bytes);
    return !(atomic_load_explicit(logged, memory_order_relaxed) & bit) &&
           !(atomic_fetch_or_explicit(logged, bit, memory_order_relaxed) & bit);
}

static void tuneLog(struct loomComm *comm, loomColl_t coll, size_t bytes,
                    const struct loomTuning *t, int fellBack)
{
    if (!tuneFirst(comm, coll, bytes))
        return;
    INFO(LOOM_TUNING,
         "%s %zu B (class 2^%d): %s, chunk %zu B, %d channel(s), predicted %.1f us at 2^%d B%s%s%s",
         loomCollName(coll), bytes, sizeClass(bytes), scheduleAlgoName(t->algo), t->chunkBytes,
         t->nChannels, t->predictedUs, sizeClass(bytes),
         t->algo == LOOM_ALGO_TREE && t->trees == 1 ? ", one tree" : "",
         t->proto == LOOM_PROTO_LL ? ", LL" : "",
         fellBack ? " (LOOM_ALGO allows none of its algorithms)" : "");
}

void tunerChooseMapped(struct loomComm *comm, loomColl_t coll, size_t bytes, struct loomTuning *out)
{
    size_t slot = comm->slotBytes;
    *out = comm->tuner->table[0][coll][sizeClass(bytes)];
    out->algo = LOOM_ALGO_CMA;
    out->chunkBytes = slot < (size_t)CMA_PIECE ? slot : (size_t)CMA_PIECE;
    out->trees = 0;
    out->predictedUs = -1;
    out->executor = comm->tuner->executor[0];
    out->mapped = 1;
    protoChoose(comm->tuner, coll, bytes, out->executor, out);
    if (tuneFirst(comm, coll, bytes))
        INFO(LOOM_TUNING,
             "%s %zu B (class 2^%d): %s, chunk %zu B, one copy between the ranks' buffers (all "
             "of them loomMemAlloc memory the peers map)",
             loomCollName(coll), bytes, sizeClass(bytes), scheduleAlgoName(LOOM_ALGO_CMA),
             out->chunkBytes);
}

void tunerChoose(struct loomComm *comm, loomColl_t coll, size_t bytes, int executor,
                 struct loomTuning *out)
{
    const struct loomTunerState *st = comm->tuner;
    int d = executor == LOOM_EXECUTOR_CUDA || executor == LOOM_EXECUTOR_LAUNCH;
    int k = sizeClass(bytes);
    *out = st->table[d][coll][k];
    out->executor = executor;
    out->mapped = 0;
    protoChoose(st, coll, bytes, executor, out);
    tuneLog(comm, coll, bytes, out, st->fellBack[d][coll][k]);
}

static loomResult_t tuningGet(const char *fn, const char *collective, const char *algorithm,
                              int nranks, int nhosts, size_t bytes, loomTuningInfo_t *info)
{
    uint32_t allowed = 0;
    int coll = -1;
    if (info == NULL || collective == NULL || nranks < 1)
        return loomSetError(loomInvalidArgument, "%s: %s", fn,
                            info == NULL         ? "info is NULL"
                            : collective == NULL ? "collective is NULL"
                                                 : "nranks must be at least 1");
    if (nhosts < 1 || nhosts > nranks)
        return loomSetError(loomInvalidArgument, "%s: nhosts %d must be 1..nranks (%d)", fn, nhosts,
                            nranks);
    for (size_t i = 0; i < sizeof(algoColls) / sizeof(algoColls[0]) && coll < 0; i++)
        if (strcasecmp(collective, algoColls[i].name) == 0)
            coll = algoColls[i].colls[0];
    if (coll < 0)
        return loomSetError(loomInvalidArgument,
                            "%s: '%s' is not a collective (allreduce, broadcast, reduce, "
                            "allgather, reducescatter, alltoall, sendrecv)",
                            fn, collective);
    for (int a = 0; algorithm != NULL && a < LOOM_ALGO_NUM; a++)
        if (strcasecmp(algorithm, scheduleAlgoName(a)) == 0)
            allowed = ALGO_BIT(a);
    if (algorithm != NULL && !(allowed & collAlgos((loomColl_t)coll)))
        return loomSetError(loomInvalidArgument, "%s: %s has no '%s' algorithm", fn, collective,
                            algorithm);
    pthread_once(&tuneOnce, tuneRead);
    int channels = (int)paramInt(LOOM_PARAM_NCHANNELS);
    channels = channels < LOOM_MAX_CHANNELS ? channels : LOOM_MAX_CHANNELS;
    int perHost = (nranks + nhosts - 1) / nhosts;
    struct loomTuneShape shape = {.nranks = nranks,
                                  .nHosts = nhosts,
                                  .localRanks = perHost,
                                  .cpus = tuneCpus,
                                  .slotBytes = commSlotBytes(nranks, nhosts, perHost, channels),
                                  .nChannels = channels,
                                  .channelsSet = paramIsSet(LOOM_PARAM_NCHANNELS),
                                  /* single copies need every rank on one host */
                                  .cmaOk = nhosts == 1 && !paramInt(LOOM_PARAM_CMA_DISABLE),
                                  .cmaMinBytes = tuneCmaMin};
    struct loomTuning t;
    tunerModel(&shape, (loomColl_t)coll, bytes, allowed, &t);
    info->algorithm = scheduleAlgoName(t.algo);
    info->trees = t.algo == LOOM_ALGO_TREE ? t.trees : 0;
    info->chunkBytes = t.chunkBytes;
    info->nChannels = t.nChannels;
    info->predictedUs = t.predictedUs;
    return loomSuccess;
}

loomResult_t loomTuningGet(const char *collective, const char *algorithm, int nranks, size_t bytes,
                           loomTuningInfo_t *info)
{
    return tuningGet("loomTuningGet", collective, algorithm, nranks, 1, bytes, info);
}

loomResult_t loomTuningGetHosts(const char *collective, const char *algorithm, int nranks,
                                int nhosts, size_t bytes, loomTuningInfo_t *info)
{
    return tuningGet("loomTuningGetHosts", collective, algorithm, nranks, nhosts, bytes, info);
}
