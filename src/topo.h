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
 * Trees: a double binary tree across hosts, with a chain inside each host.
 * Tree 0 is the in-order binary tree over hosts 0..H-1 (host h has 1-based
 * label h+1; a range's root is the label with the most trailing zero bits),
 * whose leaves include every even host; tree 1 is tree 0 relabelled so that
 * every host that is inner in one tree is a leaf in the other (mirrored,
 * h -> H-1-h, for an even H; shifted, h -> h+1 mod H, for an odd one). Inside
 * a host the ranks form a chain hanging from the host's head: the first rank
 * of the host's ring order in tree 0, the last in tree 1 (the chain runs the
 * other way), so the two trees' network traffic leaves from different ranks.
 *
 *   tree 0, 4 hosts of 2 ranks:   host 3 (root) -> host 1 -> host 0, host 2
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
/* The links of `rank` in tree `tree` (0 or 1). */
void topoTreeLinks(const struct loomTopo *t, int tree, int rank, struct loomTreeLinks *out);
/*
 * The binary tree `tree` (0 or 1) over n hosts: parent of host h (-1 at the
 * root) and its children (child[i] = -1 where absent). Pure; for the tests.
 */
void topoHostTree(int n, int tree, int h, int *parent, int child[2]);
/* The NUMA node this process is bound to (hwloc), or -1 when unbound or unknown. */
int topoNumaNode(void);

#endif /* LOOM_TOPO_H_ */
