/*
 * topo.c — hosts, the ring order and the double binary tree (see topo.h).
 *
 * Everything here is computed from the peer table every rank gathered at
 * init, so all ranks derive the same hosts, ring and trees without talking
 * again. Only topoNumaNode looks at the machine, through hwloc, to place
 * this process: ranks of one host are ordered by NUMA node so that a ring
 * crosses the inter-socket link as rarely as it can. hwloc is asked for CPUs
 * and memory only (no I/O devices), which keeps its discovery to a few
 * milliseconds per rank.
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include <hwloc.h>

#include "debug.h"
#include "topo.h"

struct rankKey {
    int host, numa, rank;
};

static int rankKeyCompare(const void *a, const void *b)
{
    const struct rankKey *x = a, *y = b;
    if (x->host != y->host)
        return x->host < y->host ? -1 : 1;
    if (x->numa != y->numa)
        return x->numa < y->numa ? -1 : 1;
    return x->rank < y->rank ? -1 : x->rank > y->rank;
}

/* Numbers hosts by their lowest rank: the first rank with a new identity opens a host. */
static int numberHosts(const struct loomPeerInfo *peers, int nranks, int *hostOf)
{
    int nHosts = 0;
    for (int r = 0; r < nranks; r++) {
        hostOf[r] = -1;
        for (int q = 0; q < r && hostOf[r] < 0; q++)
            if (peers[q].hostHash == peers[r].hostHash)
                hostOf[r] = hostOf[q];
        if (hostOf[r] < 0)
            hostOf[r] = nHosts++;
    }
    return nHosts;
}

loomResult_t topoBuild(const struct loomPeerInfo *peers, int nranks, struct loomTopo **out)
{
    struct loomTopo *t = calloc(1, sizeof(*t));
    struct rankKey *keys = calloc((size_t)nranks, sizeof(*keys));
    if (t == NULL || keys == NULL)
        goto fail_nomem;
    t->nranks = nranks;
    t->hostOf = calloc((size_t)nranks, sizeof(*t->hostOf));
    t->order = calloc((size_t)nranks, sizeof(*t->order));
    t->hostStart = calloc((size_t)nranks + 1, sizeof(*t->hostStart));
    if (t->hostOf == NULL || t->order == NULL || t->hostStart == NULL)
        goto fail_nomem;
    t->nHosts = numberHosts(peers, nranks, t->hostOf);
    for (int r = 0; r < nranks; r++)
        keys[r] = (struct rankKey){t->hostOf[r], peers[r].numaNode, r};
    qsort(keys, (size_t)nranks, sizeof(*keys), rankKeyCompare);
    for (int i = 0; i < nranks; i++) {
        t->order[i] = keys[i].rank;
        t->hostStart[keys[i].host + 1] = i + 1;
    }
    free(keys);
    *out = t;
    return loomSuccess;

fail_nomem:
    free(keys);
    topoFree(t);
    return loomSetError(loomSystemError, "out of memory for the topology of %d ranks", nranks);
}

void topoFree(struct loomTopo *t)
{
    if (t == NULL)
        return;
    free(t->hostOf);
    free(t->hostStart);
    free(t->order);
    free(t);
}

void topoRing(const struct loomTopo *t, int *ring)
{
    memcpy(ring, t->order, (size_t)t->nranks * sizeof(*ring));
}

/* ---- the binary tree over hosts ---- */

/* The label in [lo, hi] (1-based, lo <= hi) with the most trailing zero bits. */
static int rangeRoot(int lo, int hi)
{
    for (int k = 30; k > 0; k--) {
        int m = (hi >> k) << k;
        if (m >= lo && m >= 1)
            return m;
    }
    return hi;
}

/* Tree 0 over labels 1..n: parent and children of label v (0 where absent). */
static void labelTree(int n, int v, int *parent, int child[2])
{
    int lo = 1, hi = n, up = 0;
    for (;;) {
        int m = rangeRoot(lo, hi);
        if (m == v) {
            *parent = up;
            child[0] = lo <= m - 1 ? rangeRoot(lo, m - 1) : 0;
            child[1] = m + 1 <= hi ? rangeRoot(m + 1, hi) : 0;
            return;
        }
        up = m;
        if (v < m)
            hi = m - 1;
        else
            lo = m + 1;
    }
}

/* Tree 1 is tree 0 relabelled by sigma: mirror for an even n, shift by one for an odd n. */
static int sigma(int n, int h)
{
    return n % 2 == 0 ? n - 1 - h : (h + 1) % n;
}

static int sigmaInverse(int n, int h)
{
    return n % 2 == 0 ? n - 1 - h : (h - 1 + n) % n;
}

void topoHostTree(int n, int tree, int h, int *parent, int child[2])
{
    int p, c[2];
    int h0 = tree == 0 ? h : sigmaInverse(n, h);
    labelTree(n, h0 + 1, &p, c);
    *parent = p ? p - 1 : -1;
    for (int i = 0; i < 2; i++)
        child[i] = c[i] ? c[i] - 1 : -1;
    if (tree == 0)
        return;
    if (*parent >= 0)
        *parent = sigma(n, *parent);
    for (int i = 0; i < 2; i++)
        if (child[i] >= 0)
            child[i] = sigma(n, child[i]);
}

/* Rank at position i of host h's chain in `tree` (tree 1 runs the host's ranks backwards). */
static int chainAt(const struct loomTopo *t, int tree, int h, int i)
{
    int first = t->hostStart[h], last = t->hostStart[h + 1] - 1;
    return tree == 0 ? t->order[first + i] : t->order[last - i];
}

void topoTreeLinks(const struct loomTopo *t, int tree, int rank, struct loomTreeLinks *out)
{
    int h = t->hostOf[rank];
    int size = t->hostStart[h + 1] - t->hostStart[h];
    int i = 0;
    while (chainAt(t, tree, h, i) != rank)
        i++;
    out->ndown = 0;
    out->up = -1;
    if (i + 1 < size)
        out->down[out->ndown++] = chainAt(t, tree, h, i + 1);
    if (i > 0) {
        out->up = chainAt(t, tree, h, i - 1);
        return;
    }
    int parent, child[2];
    topoHostTree(t->nHosts, tree, h, &parent, child);
    if (parent >= 0)
        out->up = chainAt(t, tree, parent, 0);
    for (int c = 0; c < 2; c++)
        if (child[c] >= 0)
            out->down[out->ndown++] = chainAt(t, tree, child[c], 0);
}

/* ---- this process's NUMA node ---- */

static pthread_once_t numaOnce = PTHREAD_ONCE_INIT;
static int numaNode = -1;

static void numaProbe(void)
{
    hwloc_topology_t topo;
    int node = -1;

    if (hwloc_topology_init(&topo) != 0)
        return;
    hwloc_topology_set_io_types_filter(topo, HWLOC_TYPE_FILTER_KEEP_NONE);
    hwloc_topology_set_cache_types_filter(topo, HWLOC_TYPE_FILTER_KEEP_NONE);
    hwloc_bitmap_t set = hwloc_bitmap_alloc();
    if (set == NULL || hwloc_topology_load(topo) != 0 ||
        hwloc_get_cpubind(topo, set, HWLOC_CPUBIND_PROCESS) != 0)
        goto out;
    /* Bound within one NUMA node: that node. Spread over several (or unbound): unknown. */
    int n = hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_NUMANODE);
    for (int i = 0; i < n; i++) {
        hwloc_obj_t obj = hwloc_get_obj_by_type(topo, HWLOC_OBJ_NUMANODE, (unsigned)i);
        if (obj->cpuset == NULL || !hwloc_bitmap_intersects(obj->cpuset, set))
            continue;
        if (node >= 0 || !hwloc_bitmap_isincluded(set, obj->cpuset)) {
            node = -1;
            break;
        }
        node = (int)obj->os_index;
    }
out:
    hwloc_bitmap_free(set);
    hwloc_topology_destroy(topo);
    numaNode = node;
}

/* Probed once per process (a few milliseconds): a rank rarely changes its binding between inits. */
int topoNumaNode(void)
{
    pthread_once(&numaOnce, numaProbe);
    return numaNode;
}
