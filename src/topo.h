/*
 * topo.h — who shares a host, and the order in which rings and trees visit
 * the ranks.
 *
 * Hosts are told apart by the host identity each rank publishes at init
 * (hash of hostname and boot id, or LOOM_HOSTID). Hosts are numbered in the
 * order of their lowest rank; inside a host, ranks are ordered by NUMA node,
 * then by rank. The ring visits every rank of a host in a row, so it crosses
 * the network once per host boundary:
 *
 *   host 0         host 1         host 2
 *   r0 -> r3  ==>  r1 -> r4  ==>  r2 -> r5  ==> (back to r0)     ==> network hop
 *
 * Trees: the double binary tree of algorithms/tree.c (one source for the
 * schedules and for loomCommTree): with several hosts, two complementary
 * binary trees over the hosts (in-order layout over positions, tree 1 the
 * same shifted by one position, so a host inner in one tree is a leaf in
 * the other), and inside each host a chain of its ranks in the order above,
 * hanging from the host's head: the first rank in tree 0, the last in tree
 * 1 (the chain runs the other way), so the two trees' network traffic
 * leaves from different ranks. On one host the trees span the ranks
 * themselves, in the same order.
 *
 *   tree 0, 4 hosts:  host 1 (root) -> host 0, host 3;  host 3 -> host 2
 *   a host head's links:  up = parent host's head,  down = next in chain + child hosts' heads
 */
#ifndef LOOM_TOPO_H_
#define LOOM_TOPO_H_

#include "core.h"

/* A rank's links are at most (LOOM_TREE_MAX_DOWN, loom.h): the next rank of its chain, and
 * two child hosts' heads. */

/* One rank's place in one tree. */
struct loomTreeLinks {
    int up; /* rank towards the root, -1 at the root */
    int down[LOOM_TREE_MAX_DOWN];
    int ndown;
};

struct loomTopo {
    int nranks;
    int nHosts;
    int *hostOf;    /* [nranks]: host index of each rank */
    int *hostStart; /* [nHosts + 1]: host h's ranks are order[hostStart[h] .. hostStart[h + 1]) */
    int *order;     /* [nranks]: ranks host after host, each host's in (NUMA node, rank) order */
};

/*
 * Groups the ranks described by peers[0..nranks) into hosts and orders
 * them (see above). Returns loomSystemError when out of memory (recorded).
 */
loomResult_t topoBuild(const struct loomPeerInfo *peers, int nranks, struct loomTopo **out);
/* Frees t (NULL is a no-op). */
void topoFree(struct loomTopo *t);
/* The ring: ring[i] = rank at position i; data flows from ring[i] to ring[i + 1]. */
void topoRing(const struct loomTopo *t, int *ring);
/*
 * The links of `rank` in AllReduce's tree `tree` (0 or 1); loomSystemError
 * (recorded) when out of memory.
 */
loomResult_t topoTreeLinks(const struct loomTopo *t, int tree, int rank, struct loomTreeLinks *out);
/* What the tree schedules take as their hosts[] argument: hostOf with several hosts, else NULL. */
const int *topoTreeHosts(const struct loomTopo *t);
/*
 * The binary tree `tree` (0 or 1) over n hosts: parent of host h (-1 at the
 * root) and its children (child[i] = -1 where absent). For the tests.
 */
loomResult_t topoHostTree(int n, int tree, int h, int *parent, int child[2]);
/* The NUMA node this process is bound to (hwloc), or -1 when unbound or unknown. */
int topoNumaNode(void);

#endif /* LOOM_TOPO_H_ */
