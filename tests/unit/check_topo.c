/*
 * check_topo.c — hosts, ring order and the double binary tree (topo.c),
 * computed from made-up peer tables: no processes, no network.
 *
 * Layouts are given as a string, one character per rank naming its host
 * ("aabb": ranks 0, 1 on host a, 2, 3 on host b; "abab": round robin).
 */
#include <check.h>
#include <dirent.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "topo.h"

static struct loomTopo *build(const char *layout, const int *numa)
{
    int n = (int)strlen(layout);
    struct loomPeerInfo *peers = calloc((size_t)n, sizeof(*peers));
    struct loomTopo *t = NULL;
    ck_assert_ptr_nonnull(peers);
    for (int r = 0; r < n; r++) {
        peers[r].hostHash = 1000 + (uint64_t)layout[r];
        peers[r].numaNode = numa ? numa[r] : -1;
    }
    ck_assert_int_eq(topoBuild(peers, n, &t), loomSuccess);
    free(peers);
    return t;
}

/* ---- hosts and ring ---- */

START_TEST(hosts_numbered_by_lowest_rank)
{
    struct loomTopo *t = build("bbaacb", NULL);
    ck_assert_int_eq(t->nHosts, 3);
    ck_assert_int_eq(t->hostOf[0], 0); /* b, first seen */
    ck_assert_int_eq(t->hostOf[2], 1); /* a */
    ck_assert_int_eq(t->hostOf[4], 2); /* c */
    ck_assert_int_eq(t->hostOf[5], 0);
    ck_assert_int_eq(t->hostStart[0], 0);
    ck_assert_int_eq(t->hostStart[1], 3);
    ck_assert_int_eq(t->hostStart[2], 5);
    ck_assert_int_eq(t->hostStart[3], 6);
    topoFree(t);
}
END_TEST

/* The ring is a permutation that crosses from one host to another exactly once per host. */
static void checkRing(const char *layout)
{
    struct loomTopo *t = build(layout, NULL);
    int n = (int)strlen(layout), crossings = 0, seen[64] = {0};
    int ring[64];
    topoRing(t, ring);
    for (int i = 0; i < n; i++) {
        ck_assert_int_eq(seen[ring[i]]++, 0);
        crossings += layout[ring[i]] != layout[ring[(i + 1) % n]];
    }
    ck_assert_msg(crossings == (t->nHosts > 1 ? t->nHosts : 0), "%s: %d crossings for %d hosts",
                  layout, crossings, t->nHosts);
    topoFree(t);
}

START_TEST(ring_crosses_each_boundary_once)
{
    static const char *const layouts[] = {"a",
                                          "aaaa",
                                          "ab",
                                          "aabb",
                                          "abab",
                                          "abcabc",
                                          "aaabbc",
                                          "cbacbacba",
                                          "abcdefgh",
                                          "aabbccddeeffgghh",
                                          "abcdabcdabcdabcdabcdabcdabcdabcdabcdabcdabcdabcdab"};
    for (size_t i = 0; i < sizeof(layouts) / sizeof(layouts[0]); i++)
        checkRing(layouts[i]);
}
END_TEST

START_TEST(ring_orders_a_host_by_numa_then_rank)
{
    static const int numa[] = {1, 0, 1, 0, 0, 1};
    struct loomTopo *t = build("aaabbb", numa);
    int ring[6];
    topoRing(t, ring);
    static const int want[] = {1, 0, 2, 3, 4, 5};
    for (int i = 0; i < 6; i++)
        ck_assert_int_eq(ring[i], want[i]);
    topoFree(t);
}
END_TEST

/* ---- the tree over hosts ---- */

/* Checks tree `tree` over n hosts: one root, parent and child agree, all reachable, shallow. */
static void checkHostTree(int n, int tree, int *inner)
{
    int roots = 0, reached = 0;
    for (int h = 0; h < n; h++) {
        int parent, child[2];
        topoHostTree(n, tree, h, &parent, child);
        inner[h] = child[0] >= 0 || child[1] >= 0;
        if (parent < 0)
            roots++;
        else {
            int pp, pc[2];
            topoHostTree(n, tree, parent, &pp, pc);
            ck_assert_msg(pc[0] == h || pc[1] == h, "n=%d tree %d: %d's parent %d disowns it", n,
                          tree, h, parent);
        }
        /* Walk up: at most log2(n) + 2 steps to the root. */
        int depth = 0;
        for (int x = h; x >= 0 && depth <= 40; depth++) {
            int c[2];
            topoHostTree(n, tree, x, &x, c);
        }
        int limit = 2;
        for (int m = n; m > 1; m /= 2)
            limit++;
        ck_assert_msg(depth <= limit, "n=%d tree %d: host %d is %d deep", n, tree, h, depth);
        reached++;
    }
    ck_assert_int_eq(roots, 1);
    ck_assert_int_eq(reached, n);
}

START_TEST(double_tree_every_host_a_leaf_once)
{
    for (int n = 1; n <= 70; n++) {
        int inner0[70], inner1[70];
        checkHostTree(n, 0, inner0);
        checkHostTree(n, 1, inner1);
        for (int h = 0; h < n; h++)
            ck_assert_msg(!(inner0[h] && inner1[h]), "n=%d: host %d is inner in both trees", n, h);
    }
}
END_TEST

START_TEST(tree_zero_of_four_hosts)
{
    int parent, child[2];
    /* Positions 0..2 make a perfect tree under 1; position 3 is spliced in above 2. */
    ck_assert_int_eq(topoHostTree(4, 0, 1, &parent, child), loomSuccess);
    ck_assert_int_eq(parent, -1);
    ck_assert_int_eq(child[0], 0);
    ck_assert_int_eq(child[1], 3);
    ck_assert_int_eq(topoHostTree(4, 0, 3, &parent, child), loomSuccess);
    ck_assert_int_eq(parent, 1);
    ck_assert_int_eq(child[0], 2);
    ck_assert_int_eq(child[1], -1);
    /* Tree 1 shifts every host one position on: host 0 is its root. */
    ck_assert_int_eq(topoHostTree(4, 1, 0, &parent, child), loomSuccess);
    ck_assert_int_eq(parent, -1);
}
END_TEST

/* Rank links of both trees agree end to end, and inside a host of several they form a chain. */
static void checkRankTrees(const char *layout)
{
    struct loomTopo *t = build(layout, NULL);
    int n = (int)strlen(layout);
    for (int tree = 0; tree < 2; tree++) {
        int roots = 0, crossUp = 0;
        for (int r = 0; r < n; r++) {
            struct loomTreeLinks l, u;
            topoTreeLinks(t, tree, r, &l);
            roots += l.up < 0;
            int sameHostDown = 0;
            for (int d = 0; d < l.ndown; d++) {
                struct loomTreeLinks c;
                topoTreeLinks(t, tree, l.down[d], &c);
                ck_assert_int_eq(c.up, r);
                sameHostDown += layout[l.down[d]] == layout[r];
            }
            /* a chain, not a fan, inside a host of several; on one host, trees of ranks */
            ck_assert_int_le(sameHostDown, t->nHosts > 1 ? 1 : 2);
            if (l.up >= 0) {
                topoTreeLinks(t, tree, l.up, &u);
                int found = 0;
                for (int d = 0; d < u.ndown; d++)
                    found |= u.down[d] == r;
                ck_assert(found);
                crossUp += layout[l.up] != layout[r];
            }
        }
        ck_assert_int_eq(roots, 1);
        ck_assert_int_eq(crossUp, t->nHosts - 1); /* one network link up per non-root host */
    }
    topoFree(t);
}

START_TEST(rank_trees_chain_inside_hosts)
{
    static const char *const layouts[] = {
        "a", "aaaa", "ab", "aabb", "abab", "aabbcc", "abcabc", "aaaabbbbccccdddd", "abcdefghij"};
    for (size_t i = 0; i < sizeof(layouts) / sizeof(layouts[0]); i++)
        checkRankTrees(layouts[i]);
}
END_TEST

START_TEST(tree_heads_differ_between_trees)
{
    struct loomTopo *t = build("aaabbb", NULL);
    struct loomTreeLinks l0, l1;
    /* Tree 0 leaves host a from rank 0, tree 1 from rank 2: the chain runs backwards. */
    topoTreeLinks(t, 0, 0, &l0);
    topoTreeLinks(t, 1, 2, &l1);
    ck_assert_int_eq(l0.up, 3);  /* tree 0: host b (head 3) is the root */
    ck_assert_int_eq(l1.up, -1); /* tree 1: host a (head 2) is the root, over b's head 5 */
    ck_assert_int_eq(l1.ndown, 2);
    ck_assert_int_eq(l1.down[0], 1);
    ck_assert_int_eq(l1.down[1], 5);
    topoTreeLinks(t, 1, 0, &l1);
    ck_assert_int_eq(l1.up, 1);
    ck_assert_int_eq(l1.ndown, 0);
    topoFree(t);
}
END_TEST

/* 1 if every CPU of set is in the list "0-3,8,10-11" (a sysfs cpulist). */
static int cpulistHolds(const char *list, const cpu_set_t *set)
{
    cpu_set_t in;
    CPU_ZERO(&in);
    for (const char *p = list; *p && *p != '\n';) {
        char *end;
        long lo = strtol(p, &end, 10), hi = lo;
        if (*end == '-')
            hi = strtol(end + 1, &end, 10);
        for (long c = lo; c <= hi && c < CPU_SETSIZE; c++)
            CPU_SET((int)c, &in);
        p = *end == ',' ? end + 1 : end;
    }
    cpu_set_t both;
    CPU_AND(&both, &in, set);
    return CPU_EQUAL(&both, set);
}

/*
 * The node topoNumaNode should find for a process bound to set, read from
 * sysfs rather than hwloc: the one node whose CPUs hold all of set, else -1.
 * A machine without /sys/devices/system/node is one node, 0.
 */
static int expectedNode(const cpu_set_t *set)
{
    DIR *d = opendir("/sys/devices/system/node");
    if (d == NULL)
        return 0;
    int node = -1;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        int id;
        char path[300], list[4096];
        if (sscanf(e->d_name, "node%d", &id) != 1)
            continue;
        snprintf(path, sizeof(path), "/sys/devices/system/node/%s/cpulist", e->d_name);
        FILE *f = fopen(path, "r");
        if (f == NULL)
            continue;
        if (fgets(list, sizeof(list), f) != NULL && cpulistHolds(list, set))
            node = id;
        fclose(f);
    }
    closedir(d);
    return node;
}

/* What topoNumaNode says in a child bound to set (its probe runs once a process). */
static int nodeInChild(const cpu_set_t *set)
{
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        if (sched_setaffinity(0, sizeof(*set), set) != 0)
            _exit(255);
        _exit(topoNumaNode() + 1);
    }
    int status;
    ck_assert_int_eq(waitpid(pid, &status, 0), pid);
    ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) != 255,
                  "the child could not bind itself or died (status 0x%x)", status);
    return WEXITSTATUS(status) - 1;
}

START_TEST(numa_node_is_the_bound_node)
{
    cpu_set_t all, one;
    ck_assert_int_eq(sched_getaffinity(0, sizeof(all), &all), 0);
    /* Bound to one CPU (in a child, before this process probes): always
     * inside one node, which the probe must name. */
    CPU_ZERO(&one);
    for (int c = 0; c < CPU_SETSIZE; c++) {
        if (CPU_ISSET(c, &all)) {
            CPU_SET(c, &one);
            break;
        }
    }
    int want = expectedNode(&one);
    ck_assert_int_ge(want, 0);
    ck_assert_int_eq(nodeInChild(&one), want);
    /* As this process is bound: a node only if all its CPUs are in one. */
    ck_assert_int_eq(topoNumaNode(), expectedNode(&all));
    ck_assert_int_eq(topoNumaNode(), expectedNode(&all)); /* probed once */
}
END_TEST

static void addTest(Suite *s, const char *name, const TTest *test)
{
    TCase *tc = tcase_create(name);
    tcase_add_test(tc, test);
    suite_add_tcase(s, tc);
}

static Suite *topoSuite(void)
{
    Suite *s = suite_create("topo");
    addTest(s, "hosts_numbered_by_lowest_rank", hosts_numbered_by_lowest_rank);
    addTest(s, "ring_crosses_each_boundary_once", ring_crosses_each_boundary_once);
    addTest(s, "ring_orders_a_host_by_numa_then_rank", ring_orders_a_host_by_numa_then_rank);
    addTest(s, "double_tree_every_host_a_leaf_once", double_tree_every_host_a_leaf_once);
    addTest(s, "tree_zero_of_four_hosts", tree_zero_of_four_hosts);
    addTest(s, "rank_trees_chain_inside_hosts", rank_trees_chain_inside_hosts);
    addTest(s, "tree_heads_differ_between_trees", tree_heads_differ_between_trees);
    addTest(s, "numa_node_is_the_bound_node", numa_node_is_the_bound_node);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(topoSuite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
