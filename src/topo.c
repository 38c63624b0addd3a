/*
 * topo.c — hosts, the ring order and the double binary tree (see topo.h).
 *
 * Everything here is computed from the peer table every rank gathered at
 * init, so all ranks derive the same hosts, ring and trees without talking
 * again. The trees are the double binary tree of algorithms/tree.c over
 * these hosts and this order: what loomCommTree reports is what AllReduce
 * runs. Only topoNumaNode looks at the machine, through hwloc, to place
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
#include "schedule.h"
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

/* ---- the trees: algorithms/tree.c's AllReduce trees ---- */

static loomResult_t treeLinksOf(const struct loomSchedArgs *a, int tree, struct loomTreeLinks *out)
{
    struct loomTreeNode nd;
    loomResult_t res = treeNodeOf(a, tree, &nd);
    if (res == loomSystemError)
        return loomSetError(res, "out of memory laying out a tree of %d ranks", a->nranks);
    if (res != loomSuccess)
        return loomSetError(res, "no tree for rank %d of %d", a->rank, a->nranks);
    out->up = nd.up;
    out->ndown = nd.ndown;
    memcpy(out->down, nd.down, sizeof(out->down));
    return loomSuccess;
}

loomResult_t topoHostTree(int n, int tree, int h, int *parent, int child[2])
{
    struct loomSchedArgs a = {.coll = LOOM_COLL_ALLREDUCE, .nranks = n, .rank = h, .chunkElems = 1};
    struct loomTreeLinks l;
    LOOMCHECK(treeLinksOf(&a, tree, &l));
    *parent = l.up;
    child[0] = l.ndown > 0 ? l.down[0] : -1;
    child[1] = l.ndown > 1 ? l.down[1] : -1;
    return loomSuccess;
}

loomResult_t topoTreeLinks(const struct loomTopo *t, int tree, int rank, struct loomTreeLinks *out)
{
    struct loomSchedArgs a = {.coll = LOOM_COLL_ALLREDUCE,
                              .nranks = t->nranks,
                              .rank = rank,
                              .chunkElems = 1,
                              .hosts = topoTreeHosts(t),
                              .order = t->order};
    return treeLinksOf(&a, tree, out);
}

const int *topoTreeHosts(const struct loomTopo *t)
{
    return t->nHosts > 1 ? t->hostOf : NULL;
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
