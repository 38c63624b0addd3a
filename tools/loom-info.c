/*
 * loom-info — what this Loom is, how it was built, and what it finds here.
 *
 * The first thing to run when a job misbehaves on a new machine: it prints
 * the library version and build features, this host's topology as hwloc
 * sees it (packages, NUMA nodes and their memory, cores, hardware threads,
 * caches, GPUs and network devices), and whether each transport compiled in
 * can be used here and, if not, why. With -c it prints every LOOM_*
 * parameter: the value in force, the built-in default, where the value came
 * from, and a line of help. With --tuning it prints what the tuner would
 * choose for a communicator of N ranks on this host (-n N), size by size:
 * the algorithm, chunk and channels, with the model's predicted time, and
 * the model's time for each algorithm the collective has. With --comm, run
 * as every rank of a job (under loomrun, mpirun or srun), it joins the
 * job's communicator and rank 0 prints its hosts, its ring and its two
 * trees, with the transport of every link as the rank at its start sees it.
 * With --status PID|DIR it prints what every rank of a job is doing, from
 * the ranks' flight recorders (src/exec/recstatus.c, compiled in: it reads the
 * recorders' memory or files, not the library); with --status HOST:PORT it
 * asks the ranks themselves, on any host, through loomStatusQuery.
 *
 * Otherwise it reads the library only through include/loom.h; the topology is hwloc's
 * own view, printed directly, so a report from this tool shows what Loom's
 * topology code starts from.
 */
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <hwloc.h>

#include "loom.h"
#include "recstatus.h"
#include "toolcomm.h"

#define EXIT_USAGE 2

/* The tuning sweep: 8 B to 64 MiB by factors of 2. */
#define TUNE_MIN_BYTES 8
#define TUNE_MAX_BYTES ((size_t)64 << 20)

static void usage(FILE *out)
{
    fprintf(out, "Usage: loom-info [-c] [--comm] [--tuning [-n N] [-H HOSTS] [-k COLL]]\n"
                 "                 [--status PID|DIR|HOST:PORT [--ops N]] [-h]\n"
                 "Prints the Loom version, build features, this host's topology and the\n"
                 "transports usable here.\n"
                 "  -c, --config   print every LOOM_* parameter: value, default, source, help\n"
                 "  -C, --comm     run as every rank of a job (loomrun, mpirun, srun): print\n"
                 "                 the communicator's hosts, ring and trees, and the transport\n"
                 "                 of every link\n"
                 "  -t, --tuning   print the tuner's choice and predicted time, 8 B to 64 MiB\n"
                 "  -n N           ranks for --tuning (default: this host's CPU count)\n"
                 "  -H, --hosts HOSTS\n"
                 "                 hosts the N ranks are on for --tuning, 1..N (default 1); each\n"
                 "                 has this host's CPUs, and the links between them are priced\n"
                 "                 as the network's\n"
                 "  -k, --collective COLL\n"
                 "                 collective for --tuning: allreduce, broadcast, reduce,\n"
                 "                 allgather, reducescatter, alltoall, sendrecv or all\n"
                 "                 (default: allreduce, broadcast and reduce)\n"
                 "  -s, --status PID|DIR|HOST:PORT\n"
                 "                 what every rank of a job is doing, from the flight recorders:\n"
                 "                 PID is any rank of the job on this host; DIR holds the files\n"
                 "                 LOOM_DUMP_DIR made failing ranks write; HOST:PORT is any\n"
                 "                 rank's status listener, from any host, with the job's secret\n"
                 "                 in LOOM_STATUS_SECRET (--status PID prints both)\n"
                 "  -o, --ops N    with --status, also each rank's last N operations (1..256)\n"
                 "  -h, --help     print this help\n");
}

/* Formats a byte count with a binary unit ("15.6 GiB") into buf. */
static const char *formatBytes(unsigned long long bytes, char *buf, size_t len)
{
    static const char *const units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
    double value = (double)bytes;
    size_t unit = 0;

    while (value >= 1024.0 && unit + 1 < sizeof(units) / sizeof(units[0])) {
        value /= 1024.0;
        unit++;
    }
    if (unit == 0 || value >= 100.0 || value == (double)(unsigned long long)value)
        snprintf(buf, len, "%.0f %s", value, units[unit]);
    else
        snprintf(buf, len, "%.1f %s", value, units[unit]);
    return buf;
}

static int printVersion(void)
{
    int code;

    if (loomGetVersion(&code) != loomSuccess) {
        fprintf(stderr, "loom-info: loomGetVersion failed: %s\n", loomGetLastError(NULL));
        return -1;
    }
    printf("Loom %d.%d.%d\n", code / 10000, code / 100 % 100, code % 100);
    printf("Build: %s\n", loomBuildFeatures());
#ifdef LOOM_TOOLS_MPI
    printf("Tools: join by MPI_Bcast under mpirun: yes\n");
#else
    printf("Tools: join by MPI_Bcast under mpirun: no (use LOOM_ROOT_ADDR)\n");
#endif
    return 0;
}

static void printHost(void)
{
    char host[HOST_NAME_MAX + 1];

    if (gethostname(host, sizeof(host)) != 0)
        snprintf(host, sizeof(host), "unknown (%s)", strerror(errno));
    host[sizeof(host) - 1] = '\0';
    printf("Host: %s\n", host);
}

static void printNumaNodes(hwloc_topology_t topo)
{
    int n = hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_NUMANODE);
    char size[32];

    printf("  NUMA nodes: %d\n", n);
    for (int i = 0; i < n; i++) {
        hwloc_obj_t node = hwloc_get_obj_by_type(topo, HWLOC_OBJ_NUMANODE, (unsigned)i);
        int cores = hwloc_get_nbobjs_inside_cpuset_by_type(topo, node->cpuset, HWLOC_OBJ_CORE);
        unsigned long long bytes = node->attr->numanode.local_memory;

        printf("    node %u: %s, %d cores\n", node->os_index,
               formatBytes(bytes, size, sizeof(size)), cores);
    }
}

/*
 * One summary line for the caches: level, kind, size of one cache and how
 * many there are ("L1d 48 KiB x 8, L1i 32 KiB x 8, L2 2 MiB x 8, L3 ...").
 */
static void printCaches(hwloc_topology_t topo)
{
    static const struct {
        hwloc_obj_type_t type;
        const char *name;
    } levels[] = {
        {HWLOC_OBJ_L1CACHE, "L1d"}, {HWLOC_OBJ_L1ICACHE, "L1i"}, {HWLOC_OBJ_L2CACHE, "L2"},
        {HWLOC_OBJ_L3CACHE, "L3"},  {HWLOC_OBJ_L4CACHE, "L4"},   {HWLOC_OBJ_L5CACHE, "L5"},
    };
    const char *sep = "";
    char size[32];

    printf("  Caches: ");
    for (size_t i = 0; i < sizeof(levels) / sizeof(levels[0]); i++) {
        int n = hwloc_get_nbobjs_by_type(topo, levels[i].type);
        hwloc_obj_t first = hwloc_get_obj_by_type(topo, levels[i].type, 0);

        if (n <= 0 || first == NULL)
            continue;
        printf("%s%s %s x %d", sep, levels[i].name,
               formatBytes((unsigned long long)first->attr->cache.size, size, sizeof(size)), n);
        sep = ", ";
    }
    printf("%s\n", *sep ? "" : "none reported");
}

/* hwloc 3 turned the OS device type into a bit set; hwloc 2 has one value per device. */
static int osdevIs(hwloc_obj_t obj, unsigned long type)
{
#if HWLOC_API_VERSION >= 0x00030000
    return ((unsigned long)obj->attr->osdev.type & type) != 0;
#else
    return (unsigned long)obj->attr->osdev.type == type;
#endif
}

/*
 * Lists OS devices of the two given kinds (GPUs: GPU and co-processor
 * devices; NICs: network and OpenFabrics devices) with the NUMA nodes they
 * sit next to, since that is what decides which ranks should use which.
 */
static void printDevices(hwloc_topology_t topo, const char *title, unsigned long a, unsigned long b)
{
    hwloc_obj_t obj = NULL;
    int found = 0;

    printf("  %s:", title);
    while ((obj = hwloc_get_next_osdev(topo, obj)) != NULL) {
        hwloc_obj_t near;
        char nodes[64] = "";

        if (!osdevIs(obj, a) && !osdevIs(obj, b))
            continue;
        near = hwloc_get_non_io_ancestor_obj(topo, obj);
        if (near != NULL && near->nodeset != NULL)
            hwloc_bitmap_list_snprintf(nodes, sizeof(nodes), near->nodeset);
        printf("%s %s", found ? "," : "", obj->name ? obj->name : "?");
        if (obj->subtype != NULL)
            printf(" (%s%s%s)", obj->subtype, *nodes ? ", NUMA " : "", nodes);
        else if (*nodes)
            printf(" (NUMA %s)", nodes);
        found++;
    }
    printf("%s\n", found ? "" : " none found");
}

/* Topology is informative: if hwloc cannot load it, say why and go on. */
static void printTopology(void)
{
    hwloc_topology_t topo;
    unsigned long long bytes;
    char size[32];

    if (hwloc_topology_init(&topo) != 0) {
        printf("Topology: unavailable (hwloc_topology_init: %s)\n", strerror(errno));
        return;
    }
    hwloc_topology_set_io_types_filter(topo, HWLOC_TYPE_FILTER_KEEP_IMPORTANT);
    if (hwloc_topology_load(topo) != 0) {
        printf("Topology: unavailable (hwloc_topology_load: %s)\n", strerror(errno));
        goto fail_destroy;
    }
    printf("Topology (hwloc):\n");
    printf("  Packages: %d\n", hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_PACKAGE));
    bytes = hwloc_get_root_obj(topo)->total_memory;
    printf("  Memory: %s\n", formatBytes(bytes, size, sizeof(size)));
    printNumaNodes(topo);
    printf("  Cores: %d\n", hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_CORE));
    printf("  Hardware threads: %d\n", hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_PU));
    printCaches(topo);
    printDevices(topo, "GPUs", HWLOC_OBJ_OSDEV_GPU, HWLOC_OBJ_OSDEV_COPROC);
    printDevices(topo, "NICs", HWLOC_OBJ_OSDEV_NETWORK, HWLOC_OBJ_OSDEV_OPENFABRICS);
fail_destroy:
    hwloc_topology_destroy(topo);
}

static int printTransports(void)
{
    int n = loomTransportCount();
    int width = 0;

    for (int i = 0; i < n; i++) {
        const char *name = NULL, *why = NULL;
        int usable = 0;

        if (loomTransportInfo(i, &name, &usable, &why) == loomSuccess && name != NULL &&
            (int)strlen(name) > width)
            width = (int)strlen(name);
    }
    printf("Transports:%s\n", n > 0 ? "" : " none compiled in");
    for (int i = 0; i < n; i++) {
        const char *name = NULL, *why = NULL;
        int usable = 0;

        if (loomTransportInfo(i, &name, &usable, &why) != loomSuccess) {
            fprintf(stderr, "loom-info: loomTransportInfo(%d) failed: %s\n", i,
                    loomGetLastError(NULL));
            return -1;
        }
        printf("  %-*s  %s%s%s\n", width, name ? name : "?", usable ? "usable" : "not usable",
               why != NULL && *why ? ": " : "", why != NULL ? why : "");
        const char *devices = NULL;
        if (loomTransportDevices(i, &devices) == loomSuccess && devices != NULL && *devices) {
            printf("  %-*s  RDMA devices (* = what Loom uses):\n", width, "");
            for (const char *line = devices; *line;) {
                const char *end = strchr(line, '\n');
                int len = end ? (int)(end - line) : (int)strlen(line);
                printf("  %-*s  %.*s\n", width, "", len, line);
                line += len + (end != NULL);
            }
        }
    }
    return 0;
}

/* An empty value prints as "-" so that the columns stay readable. */
static const char *orDash(const char *s)
{
    return s != NULL && *s ? s : "-";
}

static int printParams(void)
{
    int n = loomParamCount();
    int wName = (int)strlen("NAME"), wValue = (int)strlen("VALUE");
    int wDefault = (int)strlen("DEFAULT");
    loomParamInfo_t info;

    for (int i = 0; i < n; i++) {
        if (loomParamGet(i, &info) != loomSuccess) {
            fprintf(stderr, "loom-info: loomParamGet(%d) failed: %s\n", i, loomGetLastError(NULL));
            return -1;
        }
        if ((int)strlen(orDash(info.name)) > wName)
            wName = (int)strlen(orDash(info.name));
        if ((int)strlen(orDash(info.value)) > wValue)
            wValue = (int)strlen(orDash(info.value));
        if ((int)strlen(orDash(info.defaultValue)) > wDefault)
            wDefault = (int)strlen(orDash(info.defaultValue));
    }
    printf("%-*s  %-*s  %-*s  %-7s  %s\n", wName, "NAME", wValue, "VALUE", wDefault, "DEFAULT",
           "SOURCE", "HELP");
    for (int i = 0; i < n; i++) {
        if (loomParamGet(i, &info) != loomSuccess)
            return -1;
        printf("%-*s  %-*s  %-*s  %-7s  %s\n", wName, orDash(info.name), wValue, orDash(info.value),
               wDefault, orDash(info.defaultValue), info.isSet ? "set" : "default",
               info.help ? info.help : "");
    }
    return 0;
}

/* One row: the choice, then the model's time for ring, tree, recursive doubling, direct exchange
 * and single copies ("-" where the collective has none, or single copies cannot run). */
#define TUNE_ALGOS 5
static int printTuningRow(const char *coll, int nranks, int nhosts, size_t bytes)
{
    static const char *const algos[TUNE_ALGOS] = {"ring", "tree", "doubling", "direct", "cma"};
    loomTuningInfo_t choice, forced;
    char size[32], chunk[32], alt[TUNE_ALGOS][32], trees[16] = "-";

    if (loomTuningGetHosts(coll, NULL, nranks, nhosts, bytes, &choice) != loomSuccess) {
        fprintf(stderr, "loom-info: loomTuningGetHosts failed: %s\n", loomGetLastError(NULL));
        return -1;
    }
    if (choice.trees > 0)
        snprintf(trees, sizeof(trees), "%d", choice.trees);
    for (int i = 0; i < TUNE_ALGOS; i++) {
        if (loomTuningGetHosts(coll, algos[i], nranks, nhosts, bytes, &forced) == loomSuccess &&
            strcmp(forced.algorithm, algos[i]) == 0)
            snprintf(alt[i], sizeof(alt[i]), "%.1f", forced.predictedUs);
        else
            snprintf(alt[i], sizeof(alt[i]), "-");
    }
    printf("%-13s %10s  %-8s %5s %9s %8d %13.1f %10s %10s %12s %10s %10s\n", coll,
           formatBytes(bytes, size, sizeof(size)), choice.algorithm, trees,
           formatBytes(choice.chunkBytes, chunk, sizeof(chunk)), choice.nChannels,
           choice.predictedUs, alt[0], alt[1], alt[2], alt[3], alt[4]);
    return 0;
}

static int printTuning(int nranks, int nhosts, const char *only)
{
    static const char *const colls[] = {"allreduce",     "broadcast", "reduce",  "allgather",
                                        "reducescatter", "alltoall",  "sendrecv"};
    int ncolls = only == NULL ? 3 : (int)(sizeof(colls) / sizeof(colls[0])), known = 0;
    loomParamInfo_t algo = {0};

    for (int c = 0; only != NULL && c < ncolls; c++)
        known |= strcmp(only, colls[c]) == 0;
    if (only != NULL && !known && strcmp(only, "all") != 0) {
        fprintf(stderr,
                "loom-info: -k wants allreduce, broadcast, reduce, allgather, "
                "reducescatter, alltoall, sendrecv or all, not '%s'\n",
                only);
        return -2;
    }

    for (int i = 0; i < loomParamCount(); i++)
        if (loomParamGet(i, &algo) == loomSuccess && strcmp(algo.name, "LOOM_ALGO") == 0)
            break;
    if (nhosts > 1)
        printf("Tuner's choice for %d ranks on %d hosts (up to %d a host, %ld CPUs each), "
               "LOOM_ALGO%s%s\n",
               nranks, nhosts, (nranks + nhosts - 1) / nhosts, sysconf(_SC_NPROCESSORS_ONLN),
               algo.isSet ? "=" : " unset", algo.isSet ? algo.value : "");
    else
        printf("Tuner's choice for %d rank%s on this host (%ld CPUs), LOOM_ALGO%s%s\n", nranks,
               nranks == 1 ? "" : "s", sysconf(_SC_NPROCESSORS_ONLN), algo.isSet ? "=" : " unset",
               algo.isSet ? algo.value : "");
    printf("%-13s %10s  %-8s %5s %9s %8s %13s %10s %10s %12s %10s %10s\n", "collective", "size",
           "algo", "trees", "chunk", "channels", "predicted(us)", "ring(us)", "tree(us)",
           "doubling(us)", "direct(us)", "cma(us)");
    for (int c = 0; c < ncolls; c++) {
        if (only != NULL && strcmp(only, "all") != 0 && strcmp(only, colls[c]) != 0)
            continue;
        for (size_t bytes = TUNE_MIN_BYTES; bytes <= TUNE_MAX_BYTES; bytes *= 2)
            if (printTuningRow(colls[c], nranks, nhosts, bytes) != 0)
                return -1;
    }
    return 0;
}

/* -n: a rank count, 1..65536. */
static int parseRanks(const char *arg, int *out)
{
    char *end;
    errno = 0;
    long v = strtol(arg, &end, 10);
    if (errno != 0 || end == arg || *end != '\0' || v < 1 || v > 65536)
        return -1;
    *out = (int)v;
    return 0;
}

/* ---- --comm: the communicator of the job ---- */

#define NAME_BYTES 16

struct linkView {
    int peer;
    char transport[NAME_BYTES];
};

/* One rank's own links: its ring successor and its tree neighbours. */
struct rankView {
    struct linkView next;
    struct linkView up[2];
    struct linkView down[2][LOOM_TREE_MAX_DOWN];
    int ndown[2];
};

static void linkOf(loomComm_t comm, int peer, struct linkView *out)
{
    loomPeerInfo_t info;
    out->peer = peer;
    snprintf(out->transport, sizeof(out->transport), "-");
    if (peer >= 0 && loomCommPeerInfo(comm, peer, &info) == loomSuccess && info.transport)
        snprintf(out->transport, sizeof(out->transport), "%s", info.transport);
}

static int viewMine(loomComm_t comm, int rank, int nranks, struct rankView *v)
{
    int *ring = calloc((size_t)nranks, sizeof(*ring));
    if (ring == NULL || loomCommRing(comm, ring) != loomSuccess) {
        free(ring);
        return -1;
    }
    for (int i = 0; i < nranks; i++)
        if (ring[i] == rank)
            linkOf(comm, ring[(i + 1) % nranks], &v->next);
    free(ring);
    for (int t = 0; t < 2; t++) {
        int up, down[LOOM_TREE_MAX_DOWN];
        if (loomCommTree(comm, t, rank, &up, down, &v->ndown[t]) != loomSuccess)
            return -1;
        linkOf(comm, up, &v->up[t]);
        for (int d = 0; d < v->ndown[t]; d++)
            linkOf(comm, down[d], &v->down[t][d]);
    }
    return 0;
}

static void printHosts(loomComm_t comm, int nranks)
{
    int printed = 0;
    for (int h = 0; printed < nranks; h++) {
        loomPeerInfo_t info;
        int first = 1;
        for (int r = 0; r < nranks; r++) {
            if (loomCommPeerInfo(comm, r, &info) != loomSuccess || info.host != h)
                continue;
            if (first)
                printf("  host %d  %-16s ranks", h, info.hostname);
            printf(" %d", r);
            first = 0;
            printed++;
        }
        printf("\n");
    }
}

static void printLinks(const struct rankView *all, int nranks, const int *ring)
{
    printf("Ring:");
    for (int i = 0; i < nranks; i++)
        printf(" %d", ring[i]);
    printf("\n");
    for (int i = 0; i < nranks; i++)
        printf("  %d -> %d  %s\n", ring[i], all[ring[i]].next.peer, all[ring[i]].next.transport);
    for (int t = 0; t < 2; t++) {
        printf("Tree %d:\n", t);
        for (int r = 0; r < nranks; r++) {
            const struct rankView *v = &all[r];
            if (v->up[t].peer < 0)
                printf("  %d  root      ", r);
            else
                printf("  %d  up %d (%s)", r, v->up[t].peer, v->up[t].transport);
            printf("  down");
            for (int d = 0; d < v->ndown[t]; d++)
                printf(" %d (%s)", v->down[t][d].peer, v->down[t][d].transport);
            printf("%s\n", v->ndown[t] ? "" : " -");
        }
    }
}

static int printComm(int *argc, char ***argv)
{
    loomComm_t comm;
    int rank, nranks, rc = EXIT_FAILURE;
    if (toolCommInit(argc, argv, "loom-info", &comm) != loomSuccess) {
        toolCommFinalize();
        return EXIT_FAILURE;
    }
    loomCommUserRank(comm, &rank);
    loomCommCount(comm, &nranks);
    struct rankView *all = calloc((size_t)nranks, sizeof(*all));
    int *ring = calloc((size_t)nranks, sizeof(*ring));
    if (all == NULL || ring == NULL || viewMine(comm, rank, nranks, &all[rank]) != 0 ||
        loomCommRing(comm, ring) != loomSuccess) {
        fprintf(stderr, "loom-info: rank %d: cannot describe the communicator: %s\n", rank,
                loomGetLastError(comm));
        goto out;
    }
    if (loomAllGather(&all[rank], all, sizeof(*all), loomUint8, comm, NULL) != loomSuccess) {
        fprintf(stderr, "loom-info: rank %d: loomAllGather failed: %s\n", rank,
                loomGetLastError(comm));
        goto out;
    }
    if (rank == 0) {
        loomPeerInfo_t last;
        loomCommPeerInfo(comm, ring[nranks - 1], &last);
        printf("Communicator: %d ranks on %d host(s), joined through %s\n", nranks, last.host + 1,
               toolCommHow());
        printf("Hosts:\n");
        printHosts(comm, nranks);
        printLinks(all, nranks, ring);
    }
    rc = EXIT_SUCCESS;
out:
    free(all);
    free(ring);
    loomCommDestroy(comm);
    toolCommFinalize();
    return rc;
}

static void emitLine(void *ctx, const char *line)
{
    fprintf((FILE *)ctx, "%s\n", line);
}

/* ---- --status HOST:PORT: the ranks asked over the network ---- */

#define STATUS_NET_MS 5000    /* a rank that does not answer within this is shown as such */
#define STATUS_NET_THREADS 16 /* ranks asked at once */

struct netAsk {
    const char *secret;
    const struct recPeer *peers;
    int nranks;
    void **replies; /* [nranks]: each rank's answer, NULL if none */
    size_t *lens;
    char (*why)[256]; /* [nranks]: why not */
    atomic_int next;
};

static void *netAskMain(void *arg)
{
    struct netAsk *a = arg;
    for (int p; (p = atomic_fetch_add(&a->next, 1)) < a->nranks;) {
        if (a->replies[p] != NULL)
            continue; /* the rank first asked */
        if (a->peers[p].status[0] == '\0')
            snprintf(a->why[p], sizeof(a->why[p]), "it has no status listener");
        else if (loomStatusQuery(a->peers[p].status, a->secret, STATUS_NET_MS, &a->replies[p],
                                 &a->lens[p]) != loomSuccess)
            snprintf(a->why[p], sizeof(a->why[p]), "%s", loomGetLastError(NULL));
    }
    return NULL;
}

static uint64_t nowNs(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
}

/* Rank p of job from its answer, or as not answering (why). */
static void netRank(struct recJob *job, int p, const struct recPeer *peer, const void *reply,
                    size_t len, const char *why)
{
    struct recRank *r = &job->ranks[p];
    struct recPeer *peers = NULL;
    char err[256] = "";
    if (reply == NULL)
        snprintf(err, sizeof(err), "%s", why);
    else if (recWireDecode(reply, len, job->nowNs, r, &peers, err, sizeof(err)) != 0)
        ; /* err says why */
    else if (r->h.commId != job->commId || r->h.rank != p)
        snprintf(err, sizeof(err), "%s answered for another communicator", peer->status);
    free(peers);
    if (err[0]) {
        memset(r, 0, sizeof(*r));
        r->noAnswer = 1;
        r->pid = peer->pid;
        snprintf(r->host, sizeof(r->host), "%s", peer->host);
        snprintf(r->why, sizeof(r->why), "%s", err);
    }
    snprintf(r->status, sizeof(r->status), "%s", peer->status);
}

static int printStatusNet(const char *target, int ops)
{
    const char *secret = getenv("LOOM_STATUS_SECRET");
    if (secret == NULL || secret[0] == '\0')
        secret = getenv("LOOM_UNIQUE_ID");
    if (secret == NULL || secret[0] == '\0') {
        fprintf(stderr,
                "loom-info: --status %s needs the job's secret: set LOOM_STATUS_SECRET to what "
                "loom-info --status PID prints on a host of the job (or LOOM_UNIQUE_ID to the "
                "job's unique id)\n",
                target);
        return EXIT_FAILURE;
    }
    void *first = NULL;
    size_t firstLen = 0;
    if (loomStatusQuery(target, secret, STATUS_NET_MS, &first, &firstLen) != loomSuccess) {
        fprintf(stderr, "loom-info: --status %s: %s\n", target, loomGetLastError(NULL));
        return EXIT_FAILURE;
    }
    struct recRank *r0 = calloc(1, sizeof(*r0));
    struct recPeer *peers = NULL;
    char err[256];
    if (r0 == NULL || recWireDecode(first, firstLen, nowNs(), r0, &peers, err, sizeof(err)) != 0) {
        fprintf(stderr, "loom-info: --status %s: %s\n", target, r0 ? err : "out of memory");
        free(first);
        free(r0);
        return EXIT_FAILURE;
    }
    int n = r0->h.nranks;
    struct recJob job = {.commId = r0->h.commId, .nranks = n, .names = r0->h};
    struct netAsk a = {.secret = secret, .peers = peers, .nranks = n};
    job.ranks = calloc((size_t)n, sizeof(*job.ranks));
    a.replies = calloc((size_t)n, sizeof(*a.replies));
    a.lens = calloc((size_t)n, sizeof(*a.lens));
    a.why = calloc((size_t)n, sizeof(*a.why));
    int rc = EXIT_FAILURE;
    if (job.ranks == NULL || a.replies == NULL || a.lens == NULL || a.why == NULL) {
        fprintf(stderr, "loom-info: --status %s: out of memory for %d ranks\n", target, n);
        goto out;
    }
    a.replies[r0->h.rank] = first, a.lens[r0->h.rank] = firstLen;
    first = NULL;
    pthread_t threads[STATUS_NET_THREADS];
    int nthreads = 0;
    while (nthreads < STATUS_NET_THREADS && nthreads < n - 1 &&
           pthread_create(&threads[nthreads], NULL, netAskMain, &a) == 0)
        nthreads++;
    if (nthreads == 0)
        netAskMain(&a);
    for (int t = 0; t < nthreads; t++)
        pthread_join(threads[t], NULL);
    job.nowNs = nowNs();
    for (int p = 0; p < n; p++)
        netRank(&job, p, &peers[p], a.replies[p], a.lens[p], a.why[p]);
    recJobPrint(&job, emitLine, stdout);
    if (ops > 0) {
        printf("last %d operations of each rank (times to the clock's tick, a few ms):\n", ops);
        recJobPrintOps(&job, ops, emitLine, stdout);
    }
    rc = EXIT_SUCCESS;
out:
    for (int p = 0; a.replies && p < n; p++)
        free(a.replies[p]);
    free(a.replies);
    free(a.lens);
    free(a.why);
    free(job.ranks);
    free(peers);
    free(r0);
    free(first);
    return rc;
}

/*
 * --status: the flight recorders (src/exec/recstatus.c) of the job that process
 * `target` is a rank of, or of the files in directory `target`.
 */
static int printStatus(const char *target, int ops)
{
    struct recJob *jobs = NULL;
    int njobs = 0, rc;
    char err[512], *end;
    struct stat st;
    long pid = strtol(target, &end, 10);
    if (stat(target, &st) == 0 && S_ISDIR(st.st_mode)) {
        rc = recJobsFromDir(target, &jobs, &njobs, err, sizeof(err));
    } else if (*target && *end == '\0' && pid > 0 && pid <= INT_MAX) {
        rc = recJobsFromPid((pid_t)pid, &jobs, &njobs, err, sizeof(err));
    } else if (strchr(target, ':')) {
        return printStatusNet(target, ops);
    } else {
        fprintf(stderr,
                "loom-info: --status wants the pid of a rank, a directory or HOST:PORT, not '%s'\n",
                target);
        return EXIT_USAGE;
    }
    if (rc != 0) {
        fprintf(stderr, "loom-info: --status %s: %s\n", target, err);
        return EXIT_FAILURE;
    }
    for (int j = 0; j < njobs; j++) {
        if (j)
            printf("\n");
        recJobPrint(&jobs[j], emitLine, stdout);
        recJobPrintAsk(&jobs[j], emitLine, stdout);
        if (ops > 0) {
            printf("last %d operations of each rank (times to the clock's tick, a few ms):\n", ops);
            recJobPrintOps(&jobs[j], ops, emitLine, stdout);
        }
    }
    recJobsFree(jobs, njobs);
    return EXIT_SUCCESS;
}

int main(int argc, char **argv)
{
    static const struct option longOptions[] = {
        {"config", no_argument, NULL, 'c'},
        {"comm", no_argument, NULL, 'C'},
        {"tuning", no_argument, NULL, 't'},
        {"collective", required_argument, NULL, 'k'},
        {"hosts", required_argument, NULL, 'H'},
        {"status", required_argument, NULL, 's'},
        {"ops", required_argument, NULL, 'o'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    int config = 0, comm = 0, tuning = 0, nranks = (int)sysconf(_SC_NPROCESSORS_ONLN);
    int nhosts = 0;
    const char *coll = NULL, *status = NULL;
    int ops = 0;
    int opt;

    while ((opt = getopt_long(argc, argv, "cCtn:H:k:s:o:h", longOptions, NULL)) != -1) {
        switch (opt) {
        case 'c':
            config = 1;
            break;
        case 'C':
            comm = 1;
            break;
        case 't':
            tuning = 1;
            break;
        case 'n':
            if (parseRanks(optarg, &nranks) != 0) {
                fprintf(stderr, "loom-info: -n wants a rank count 1..65536, not '%s'\n", optarg);
                return EXIT_USAGE;
            }
            break;
        case 'H':
            if (parseRanks(optarg, &nhosts) != 0) {
                fprintf(stderr, "loom-info: -H wants a host count 1..65536, not '%s'\n", optarg);
                return EXIT_USAGE;
            }
            break;
        case 'k':
            coll = optarg;
            break;
        case 's':
            status = optarg;
            break;
        case 'o':
            if (parseRanks(optarg, &ops) != 0 || ops > 256) {
                fprintf(stderr, "loom-info: --ops wants a count 1..256, not '%s'\n", optarg);
                return EXIT_USAGE;
            }
            break;
        case 'h':
            usage(stdout);
            return EXIT_SUCCESS;
        default:
            usage(stderr);
            return EXIT_USAGE;
        }
    }
    if (optind < argc) {
        fprintf(stderr, "loom-info: unexpected argument '%s'\n", argv[optind]);
        usage(stderr);
        return EXIT_USAGE;
    }

    if (ops && !status) {
        fprintf(stderr, "loom-info: --ops goes with --status\n");
        return EXIT_USAGE;
    }
    if (status)
        return printStatus(status, ops);
    if (config)
        return printParams() == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
    if (tuning) {
        if (nhosts > (nranks < 1 ? 1 : nranks)) {
            fprintf(stderr, "loom-info: -H %d: more hosts than the %d ranks\n", nhosts, nranks);
            return EXIT_USAGE;
        }
        int res = printTuning(nranks < 1 ? 1 : nranks, nhosts > 0 ? nhosts : 1, coll);
        return res == 0 ? EXIT_SUCCESS : res == -2 ? EXIT_USAGE : EXIT_FAILURE;
    }
    if (coll != NULL || nhosts != 0 || nranks != (int)sysconf(_SC_NPROCESSORS_ONLN)) {
        fprintf(stderr, "loom-info: -n, -H and -k go with --tuning\n");
        usage(stderr);
        return EXIT_USAGE;
    }
    if (comm)
        return printComm(&argc, &argv);

    if (printVersion() != 0)
        return EXIT_FAILURE;
    printHost();
    printTopology();
    return printTransports() == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
