/*
 * check_tuner.c — LOOM_ALGO's syntax and the tuner's choices.
 *
 * The parser is checked on NCCL's forms (a list, an excluded list,
 * per-collective lists) and on the mistakes a user makes; the model on the
 * properties any calibration must keep: the choice is the fastest of the
 * allowed algorithms as the model itself prices them, a restriction is
 * obeyed, predicted times grow with the size and with hops that cross the
 * network, chunks fit the slot, and loomTuningGet reports what the plan
 * would use; the decision record on the executor, the protocol and when
 * the ranks ask about mappings. Which algorithm wins at which size depends on the calibration
 * and is checked against measurements by bench/tuning-check, not here; no
 * timing is measured here either.
 */
#include <check.h>
#include <stdlib.h>
#include <string.h>

#include "interp.h"
#include "loom.h"
#include "tuner.h"

#define RING (1u << LOOM_ALGO_RING)
#define TREE (1u << LOOM_ALGO_TREE)
#define DIRECT (1u << LOOM_ALGO_DIRECT)
#define DOUBLING (1u << LOOM_ALGO_DOUBLING)
#define CMA (1u << LOOM_ALGO_CMA)

static void parseOk(const char *spec, uint32_t allowed[LOOM_COLL_NUM])
{
    char why[160] = "";
    ck_assert_msg(tunerParseAlgo(spec, allowed, why, sizeof(why)) == 0, "'%s' refused: %s", spec,
                  why);
}

START_TEST(test_parse_lists)
{
    uint32_t a[LOOM_COLL_NUM];
    parseOk(NULL, a);
    for (int c = 0; c < LOOM_COLL_NUM; c++) /* cma only when named, but AlltoAll's is weighed */
        ck_assert_uint_eq(a[c],
                          RING | TREE | DIRECT | DOUBLING | (c == LOOM_COLL_ALLTOALL ? CMA : 0));
    parseOk("alltoall:cma", a); /* forced: no direct exchange beside it */
    ck_assert_uint_eq(a[LOOM_COLL_ALLTOALL] & (DIRECT | CMA), CMA);
    ck_assert_uint_ne(a[LOOM_COLL_ALLTOALLV] & DIRECT, 0); /* which has no single copies */
    parseOk("alltoall:ring", a);                           /* the FIFOs */
    ck_assert_uint_eq(a[LOOM_COLL_ALLTOALL] & (DIRECT | CMA), DIRECT);
    parseOk("^cma", a);
    ck_assert_uint_eq(a[LOOM_COLL_ALLTOALL] & (DIRECT | CMA), DIRECT);
    parseOk("ring", a);
    ck_assert_uint_eq(a[LOOM_COLL_ALLREDUCE] & CMA, 0);
    parseOk("^tree", a);
    ck_assert_uint_eq(a[LOOM_COLL_ALLGATHER] & (RING | TREE | CMA), RING);
    ck_assert_uint_eq(a[LOOM_COLL_ALLREDUCE] & (RING | TREE | DOUBLING), RING | DOUBLING);
    parseOk("allreduce:doubling", a);
    ck_assert_uint_eq(a[LOOM_COLL_ALLREDUCE] & (RING | TREE | DOUBLING | CMA), DOUBLING);
    ck_assert_uint_eq(a[LOOM_COLL_BROADCAST] & DOUBLING, DOUBLING); /* untouched */
    parseOk("ring,tree,cma", a);
    ck_assert_uint_eq(a[LOOM_COLL_BROADCAST] & (RING | TREE | CMA), RING | TREE | CMA);
    parseOk("allreduce:cma,ring", a);
    ck_assert_uint_eq(a[LOOM_COLL_ALLREDUCE] & (RING | TREE | CMA), RING | CMA);
    parseOk("ring", a);
    ck_assert_uint_eq(a[LOOM_COLL_ALLREDUCE] & (RING | TREE), RING);
    ck_assert_uint_eq(a[LOOM_COLL_BROADCAST] & (RING | TREE), RING);
    parseOk(" Tree ", a); /* any case, spaces around */
    ck_assert_uint_eq(a[LOOM_COLL_REDUCE] & (RING | TREE), TREE);
    parseOk("tree,ring", a);
    ck_assert_uint_eq(a[LOOM_COLL_ALLREDUCE] & (RING | TREE), RING | TREE);
    parseOk("^ring", a);
    ck_assert_uint_eq(a[LOOM_COLL_ALLREDUCE] & (RING | TREE), TREE);
    parseOk("tree,collnetdirect,nvls", a); /* NCCL's other algorithms: accepted, never chosen */
    ck_assert_uint_eq(a[LOOM_COLL_ALLREDUCE] & (RING | TREE), TREE);
    for (int c = 0; c < LOOM_COLL_NUM;
         c++) /* direct is never excluded: AlltoAll has nothing else */
        ck_assert_uint_ne(a[c] & DIRECT, 0);
}
END_TEST

START_TEST(test_parse_per_collective)
{
    uint32_t a[LOOM_COLL_NUM];
    parseOk("allreduce:tree;broadcast:ring", a);
    ck_assert_uint_eq(a[LOOM_COLL_ALLREDUCE] & (RING | TREE), TREE);
    ck_assert_uint_eq(a[LOOM_COLL_BROADCAST] & (RING | TREE), RING);
    ck_assert_uint_eq(a[LOOM_COLL_REDUCE] & (RING | TREE), RING | TREE); /* untouched */
    parseOk("ring; AllReduce : ^ring ;", a); /* later items win; empty items are skipped */
    ck_assert_uint_eq(a[LOOM_COLL_ALLREDUCE] & (RING | TREE), TREE);
    ck_assert_uint_eq(a[LOOM_COLL_REDUCE] & (RING | TREE), RING);
    parseOk("sendrecv:ring;alltoall:tree", a); /* legal, though they only have direct */
    ck_assert_uint_eq(a[LOOM_COLL_SEND], a[LOOM_COLL_RECV]);
    ck_assert_uint_eq(a[LOOM_COLL_ALLTOALL], a[LOOM_COLL_ALLTOALLV]);
}
END_TEST

/* Where single copies from loomMemAlloc mappings may run unasked (tunerZeroCopy). */
static int zeroCopyIn(const char *spec, loomColl_t coll)
{
    uint32_t a[LOOM_COLL_NUM];
    char why[160] = "";
    ck_assert_msg(tunerParseZeroCopy(spec, a, why, sizeof(why)) == 0, "'%s' refused: %s", spec,
                  why);
    return (a[coll] & CMA) != 0;
}

START_TEST(test_parse_zero_copy)
{
    for (int c = 0; c < LOOM_COLL_NUM; c++) /* unset: everywhere */
        ck_assert(zeroCopyIn(NULL, (loomColl_t)c));
    ck_assert(zeroCopyIn("^tree", LOOM_COLL_ALLREDUCE)); /* an exclusion keeps it */
    ck_assert(!zeroCopyIn("^cma", LOOM_COLL_ALLREDUCE));
    ck_assert(!zeroCopyIn("ring", LOOM_COLL_BROADCAST)); /* a list of others turns it off */
    ck_assert(!zeroCopyIn("allreduce:ring", LOOM_COLL_ALLREDUCE));
    ck_assert(zeroCopyIn("allreduce:ring", LOOM_COLL_REDUCE)); /* untouched */
    ck_assert(zeroCopyIn("allreduce:cma", LOOM_COLL_ALLREDUCE));
    ck_assert(zeroCopyIn("alltoall:cma", LOOM_COLL_ALLGATHER));
    uint32_t a[LOOM_COLL_NUM]; /* and the ordinary parse is unchanged by it */
    parseOk("^tree", a);
    ck_assert_uint_eq(a[LOOM_COLL_ALLREDUCE] & CMA, 0);
}
END_TEST

START_TEST(test_parse_errors)
{
    static const char *const bad[] = {"bogus", "ring,bogus", "allreduce:",  "foo:ring",
                                      "^",     "ring,,tree", "allreduce:x", ":ring"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        uint32_t a[LOOM_COLL_NUM];
        char why[160] = "";
        ck_assert_msg(tunerParseAlgo(bad[i], a, why, sizeof(why)) == -1, "'%s' accepted", bad[i]);
        ck_assert_msg(why[0] != '\0', "'%s': no reason given", bad[i]);
        for (int c = 0; c < LOOM_COLL_NUM; c++) /* a bad value changes nothing */
            ck_assert_uint_eq(a[c], RING | TREE | DIRECT | DOUBLING |
                                        (c == LOOM_COLL_ALLTOALL ? CMA : 0));
    }
}
END_TEST

static struct loomTuneShape shape(int n)
{
    struct loomTuneShape s = {.nranks = n,
                              .localRanks = n,
                              .cpus = 2,
                              .slotBytes = 128 * 1024,
                              .nChannels = 4,
                              .channelsSet = 0};
    return s;
}

/*
 * The fastest of the algorithms in `allowed` that coll has, each priced alone
 * (the tree over the variants the model tries): what a choice among all of
 * them must equal.
 */
static double fastestAlone(const struct loomTuneShape *s, loomColl_t coll, size_t bytes,
                           uint32_t allowed)
{
    double best = -1;
    for (int a = 0; a < LOOM_ALGO_NUM; a++) {
        struct loomTuning t;
        if (!(allowed & (1u << a)) || tunerModel(s, coll, bytes, 1u << a, &t) != 0 ||
            t.algo != (loomAlgo_t)a)
            continue;
        if (best < 0 || t.predictedUs < best)
            best = t.predictedUs;
    }
    return best;
}

/* The choice among `allowed` on s is allowed, fits the slot, and is the fastest alone. */
static void checkChoice(const struct loomTuneShape *s, loomColl_t coll, size_t bytes,
                        uint32_t allowed)
{
    struct loomTuning t;
    ck_assert_int_eq(tunerModel(s, coll, bytes, allowed, &t), 0);
    ck_assert_msg(allowed & (1u << t.algo), "coll %d, %zu B: %s is not allowed (0x%x)", coll, bytes,
                  scheduleAlgoName(t.algo), allowed);
    ck_assert_uint_le(t.chunkBytes, s->slotBytes);
    ck_assert_uint_gt(t.chunkBytes, 0);
    double alone = fastestAlone(s, coll, bytes, allowed);
    ck_assert_msg(t.predictedUs == alone,
                  "coll %d, %zu B on %d ranks: chose %s at %g us, but %g alone", coll, bytes,
                  s->nranks, scheduleAlgoName(t.algo), t.predictedUs, alone);
}

START_TEST(test_model_latency_and_bandwidth)
{
    const uint32_t all = RING | TREE | DOUBLING | DIRECT;
    const loomColl_t colls[] = {LOOM_COLL_ALLREDUCE, LOOM_COLL_BROADCAST,     LOOM_COLL_REDUCE,
                                LOOM_COLL_ALLGATHER, LOOM_COLL_REDUCESCATTER, LOOM_COLL_ALLTOALL};
    for (int n = 2; n <= 16; n *= 2) {
        for (int crowded = 0; crowded <= 1; crowded++) {
            struct loomTuneShape s = shape(n);
            s.cpus = crowded ? 2 : 64;
            for (size_t i = 0; i < sizeof(colls) / sizeof(colls[0]); i++)
                for (size_t bytes = 8; bytes <= (64 << 20); bytes *= 8)
                    checkChoice(&s, colls[i], bytes, all);
        }
    }
    /* For any one algorithm, a larger message never costs less. */
    struct loomTuneShape s = shape(8);
    struct loomTuning t;
    static const uint32_t allReduces[] = {RING, TREE, DOUBLING};
    for (size_t a = 0; a < sizeof(allReduces) / sizeof(allReduces[0]); a++) {
        uint32_t algo = allReduces[a];
        double last = 0;
        for (size_t bytes = 8; bytes <= (64 << 20); bytes *= 2) {
            ck_assert_int_eq(tunerModel(&s, LOOM_COLL_ALLREDUCE, bytes, algo, &t), 0);
            ck_assert_msg(t.predictedUs >= last,
                          "algo bit %u: predicted time falls from %g to %g at %zu B", algo, last,
                          t.predictedUs, bytes);
            ck_assert_int_eq(t.nChannels, 1);
            last = t.predictedUs;
        }
    }
}
END_TEST

/*
 * Across hosts: the network's hops and bytes join the critical path, so
 * every algorithm costs more there, its pieces grow, and recursive doubling
 * is priced on the ranks' actual placement.
 */
START_TEST(test_model_across_hosts)
{
    const uint32_t all = RING | TREE | DOUBLING;
    struct loomTuning one, t;
    for (int hosts = 0; hosts <= 1; hosts++) { /* 0 and 1 both mean one host */
        struct loomTuneShape a = shape(4), b = shape(4);
        b.nHosts = hosts;
        for (size_t bytes = 8; bytes <= (64 << 20); bytes *= 8) {
            ck_assert_int_eq(tunerModel(&a, LOOM_COLL_ALLREDUCE, bytes, all, &one), 0);
            ck_assert_int_eq(tunerModel(&b, LOOM_COLL_ALLREDUCE, bytes, all, &t), 0);
            ck_assert_int_eq(t.algo, one.algo);
            ck_assert(t.predictedUs == one.predictedUs);
        }
    }
    /* Every algorithm costs more when its hops cross the network. */
    for (size_t bytes = 8; bytes <= (64 << 20); bytes *= 8) {
        for (uint32_t algo = RING; algo <= DOUBLING; algo <<= 1) {
            if (!(algo & all))
                continue;
            struct loomTuneShape a = shape(4), b = shape(4);
            b.nHosts = 2, b.localRanks = 2;
            ck_assert_int_eq(tunerModel(&a, LOOM_COLL_ALLREDUCE, bytes, algo, &one), 0);
            ck_assert_int_eq(tunerModel(&b, LOOM_COLL_ALLREDUCE, bytes, algo, &t), 0);
            ck_assert_msg(t.predictedUs > one.predictedUs, "algo bit %u, %zu B: %g vs %g", algo,
                          bytes, t.predictedUs, one.predictedUs);
        }
    }
    /* On hosts, too, the choice is the fastest alone (2 x 1, 2 x 2, 2 x 4, 2 x 3). */
    static const int layouts[][2] = {{2, 1}, {2, 2}, {2, 4}, {2, 3}};
    for (size_t l = 0; l < sizeof(layouts) / sizeof(layouts[0]); l++) {
        struct loomTuneShape h = shape(layouts[l][0] * layouts[l][1]);
        h.nHosts = layouts[l][0], h.localRanks = layouts[l][1], h.slotBytes = 512 * 1024;
        for (size_t bytes = 8; bytes <= (32 << 20); bytes *= 4)
            checkChoice(&h, LOOM_COLL_ALLREDUCE, bytes, all);
    }
    /* Each piece is a message over the network: fewer, larger pieces there
     * (2 ranks, 512 KiB through the trees: 16 KiB pieces on one host). */
    struct loomTuneShape local = shape(2), apart = shape(2);
    local.slotBytes = apart.slotBytes = 512 * 1024;
    apart.nHosts = 2, apart.localRanks = 1;
    ck_assert_int_eq(tunerModel(&local, LOOM_COLL_ALLREDUCE, 512 * 1024, TREE, &one), 0);
    ck_assert_int_eq(tunerModel(&apart, LOOM_COLL_ALLREDUCE, 512 * 1024, TREE, &t), 0);
    ck_assert_uint_ge(t.chunkBytes, 4 * one.chunkBytes);
    struct loomTuneShape s = shape(6);
    s.nHosts = 2, s.localRanks = 3, s.slotBytes = 512 * 1024;
    /* A communicator's own placement: 6 ranks round robin over 2 hosts
     * (--map-by node) put both pairs (0, 1) and (2, 3) across hosts, where
     * hosts filled in rank order cross with (2, 3) only. */
    static const int roundRobin[6] = {0, 1, 0, 1, 0, 1}, inOrder[6] = {0, 0, 0, 1, 1, 1};
    struct loomTuning byOrder;
    s.hostOf = inOrder;
    ck_assert_int_eq(tunerModel(&s, LOOM_COLL_ALLREDUCE, 8, DOUBLING, &byOrder), 0);
    s.hostOf = NULL; /* the same placement, assumed */
    ck_assert_int_eq(tunerModel(&s, LOOM_COLL_ALLREDUCE, 8, DOUBLING, &t), 0);
    ck_assert(t.predictedUs == byOrder.predictedUs);
    s.hostOf = roundRobin;
    ck_assert_int_eq(tunerModel(&s, LOOM_COLL_ALLREDUCE, 8, DOUBLING, &t), 0);
    ck_assert_msg(t.predictedUs > byOrder.predictedUs, "round robin %g, in order %g", t.predictedUs,
                  byOrder.predictedUs);
    s.hostOf = NULL;
    /* More hosts than ranks is read as one rank a host; every collective's
     * network terms give a finite time, above the one-host figure. */
    s = shape(3);
    s.nHosts = 99;
    struct loomTuneShape same = shape(3);
    same.nHosts = 3;
    for (int c = 0; c < LOOM_COLL_NUM; c++) {
        struct loomTuning u;
        struct loomTuneShape host1 = shape(3);
        /* allowed 0: LOOM_ALGO's defaults, which every collective has an algorithm in */
        ck_assert_int_eq(tunerModel(&s, (loomColl_t)c, 1 << 20, 0, &t), 0);
        ck_assert_int_eq(tunerModel(&same, (loomColl_t)c, 1 << 20, 0, &u), 0);
        ck_assert_int_eq(tunerModel(&host1, (loomColl_t)c, 1 << 20, 0, &one), 0);
        ck_assert(t.predictedUs > 0 && t.predictedUs < 1e9);
        ck_assert(t.predictedUs == u.predictedUs);
        ck_assert_msg(t.predictedUs > one.predictedUs, "collective %d: %g vs %g", c, t.predictedUs,
                      one.predictedUs);
    }
}
END_TEST

START_TEST(test_model_obeys_restrictions)
{
    struct loomTuneShape s = shape(8);
    struct loomTuning t;
    ck_assert_int_eq(tunerModel(&s, LOOM_COLL_ALLREDUCE, 1024, RING, &t), 0);
    ck_assert_int_eq(t.algo, LOOM_ALGO_RING);
    ck_assert_int_eq(tunerModel(&s, LOOM_COLL_BROADCAST, 64 << 20, TREE, &t), 0);
    ck_assert_int_eq(t.algo, LOOM_ALGO_TREE);
    /* Nothing allowed that AllGather has: its ring, and -1 to say so. */
    ck_assert_int_eq(tunerModel(&s, LOOM_COLL_ALLGATHER, 1024, TREE, &t), -1);
    ck_assert_int_eq(t.algo, LOOM_ALGO_RING);
    ck_assert_int_eq(tunerModel(&s, LOOM_COLL_ALLTOALL, 1024, RING | TREE | DIRECT, &t), 0);
    ck_assert_int_eq(t.algo, LOOM_ALGO_DIRECT);
    /* Single copies: only where the communicator has them, and from cmaMinBytes on. */
    s.cmaMinBytes = 64 * 1024;
    ck_assert_int_eq(tunerModel(&s, LOOM_COLL_ALLTOALL, 16 << 20, DIRECT | CMA, &t), 0);
    ck_assert_int_eq(t.algo, LOOM_ALGO_DIRECT); /* cmaOk 0 */
    ck_assert_int_eq(tunerModel(&s, LOOM_COLL_ALLTOALL, 16 << 20, CMA, &t), -1);
    ck_assert_int_eq(t.algo, LOOM_ALGO_DIRECT);
    s.cmaOk = 1;
    checkChoice(&s, LOOM_COLL_ALLTOALL, 16 << 20, DIRECT | CMA); /* now weighed */
    ck_assert_int_eq(tunerModel(&s, LOOM_COLL_ALLTOALL, 32 * 1024, CMA, &t), -1);
    ck_assert_int_eq(t.algo, LOOM_ALGO_DIRECT); /* below cmaMinBytes */
    ck_assert_int_eq(tunerModel(&s, LOOM_COLL_ALLGATHER, 16 << 20, CMA, &t), 0);
    ck_assert_int_eq(t.algo, LOOM_ALGO_CMA); /* named: AllGather has the schedule too */
    if (getenv("LOOM_ALGO") == NULL) {       /* unnamed: weighed, ranks sharing cores or not */
        /* tunerChoose passes tunerDefaultAllowed; tunerModel takes it for 0 */
        static const loomColl_t weighed[] = {LOOM_COLL_ALLGATHER, LOOM_COLL_ALLREDUCE};
        for (size_t i = 0; i < sizeof(weighed) / sizeof(weighed[0]); i++) {
            for (s.cpus = 2; s.cpus <= 64; s.cpus *= 32) {
                ck_assert_uint_ne(tunerDefaultAllowed(weighed[i]) & CMA, 0);
                checkChoice(&s, weighed[i], 16 << 20, tunerDefaultAllowed(weighed[i]));
                checkChoice(&s, weighed[i], 256 * 1024, tunerDefaultAllowed(weighed[i]));
            }
            /* not what LOOM_ALGO allows: cma.c still asks for loomMemAlloc buffers first */
            ck_assert_int_eq(tunerAllows(weighed[i], LOOM_ALGO_CMA), 0);
        }
        s.cpus = 2;
        ck_assert_uint_eq(tunerDefaultAllowed(LOOM_COLL_BROADCAST) & CMA, 0);
    }
    /* The other collectives' single copies are taken where named, not weighed; AllReduce's
     * too, where LOOM_ALGO names only them. */
    static const loomColl_t named[] = {LOOM_COLL_ALLREDUCE, LOOM_COLL_REDUCESCATTER,
                                       LOOM_COLL_BROADCAST, LOOM_COLL_REDUCE};
    for (size_t i = 0; i < sizeof(named) / sizeof(named[0]); i++) {
        uint32_t with = named[i] == LOOM_COLL_ALLREDUCE ? CMA : RING | TREE | CMA;
        ck_assert_int_eq(tunerModel(&s, named[i], 16 << 20, with, &t), 0);
        ck_assert_int_eq(t.algo, LOOM_ALGO_CMA);
        ck_assert_uint_le(t.chunkBytes, 128 * 1024); /* a piece folded while in the cache */
        ck_assert_int_eq(tunerModel(&s, named[i], 32 * 1024, RING | CMA, &t), 0);
        ck_assert_int_eq(t.algo, LOOM_ALGO_RING); /* below cmaMinBytes */
    }
    s.cmaOk = 0;
    ck_assert_int_eq(tunerModel(&s, LOOM_COLL_ALLREDUCE, 16 << 20, CMA, &t), -1);
    ck_assert_int_eq(t.algo, LOOM_ALGO_RING); /* none possible: the ring */
    s.cmaOk = 1;
    s.channelsSet = 1; /* LOOM_NCHANNELS set: every channel is used */
    ck_assert_int_eq(tunerModel(&s, LOOM_COLL_ALLREDUCE, 1 << 20, RING, &t), 0);
    ck_assert_int_eq(t.nChannels, 4);
}
END_TEST

START_TEST(test_tuning_get)
{
    loomTuningInfo_t info, ring;
    /* The automatic answer is the fastest of the forced ones, tree variants and single
     * copies included (one host, LOOM_CMA_MIN_BYTES 128 KiB by default). */
    static const char *const names[] = {"ring", "tree", "doubling", "cma"};
    for (int n = 2; n <= 8; n *= 2) {
        for (size_t bytes = 8; bytes <= (64 << 20); bytes *= 16) {
            ck_assert_int_eq(loomTuningGet("allreduce", NULL, n, bytes, &info), loomSuccess);
            double best = -1;
            for (int a = 0; a < 4; a++) {
                ck_assert_int_eq(loomTuningGet("AllReduce", names[a], n, bytes, &ring),
                                 loomSuccess);
                if (a == 3 && strcmp(ring.algorithm, "cma") != 0)
                    continue; /* below LOOM_CMA_MIN_BYTES: the fallback, not a choice */
                ck_assert_str_eq(ring.algorithm, names[a]);
                ck_assert_int_eq(ring.trees > 0, a == 1);
                best = best < 0 || ring.predictedUs < best ? ring.predictedUs : best;
            }
            ck_assert_msg(info.predictedUs == best, "n=%d, %zu B: %s at %g us, best forced %g", n,
                          bytes, info.algorithm, info.predictedUs, best);
            ck_assert_int_eq(info.trees > 0, strcmp(info.algorithm, "tree") == 0);
        }
    }
    ck_assert_int_eq(loomTuningGet("alltoall", NULL, 4, 4096, &info), loomSuccess);
    ck_assert_str_eq(info.algorithm, "direct");
    ck_assert_int_eq(loomTuningGet("allreduce", NULL, 1, 0, &info), loomSuccess);

    /* Across hosts: nhosts 1 is loomTuningGet; 2 hosts price the network. */
    loomTuningInfo_t hosts;
    ck_assert_int_eq(loomTuningGet("allreduce", NULL, 4, 1 << 20, &info), loomSuccess);
    ck_assert_int_eq(loomTuningGetHosts("allreduce", NULL, 4, 1, 1 << 20, &hosts), loomSuccess);
    ck_assert_str_eq(hosts.algorithm, info.algorithm);
    ck_assert(hosts.predictedUs == info.predictedUs);
    ck_assert_int_eq(loomTuningGetHosts("allreduce", NULL, 4, 2, 1 << 20, &hosts), loomSuccess);
    ck_assert(hosts.predictedUs > info.predictedUs);
    ck_assert_int_eq(loomTuningGetHosts("alltoall", "cma", 4, 2, 64 << 20, &hosts), loomSuccess);
    ck_assert_str_eq(hosts.algorithm, "direct"); /* no single copies between hosts */
    memset(&ring, 0x5a, sizeof(ring));
    hosts = ring;
    ck_assert_int_eq(loomTuningGetHosts("allreduce", NULL, 4, 0, 8, &hosts), loomInvalidArgument);
    ck_assert_ptr_nonnull(strstr(loomGetLastError(NULL), "nhosts 0"));
    ck_assert_int_eq(loomTuningGetHosts("allreduce", NULL, 4, 5, 8, &hosts), loomInvalidArgument);
    ck_assert_mem_eq(&hosts, &ring, sizeof(hosts));

    memset(&ring, 0x5a, sizeof(ring));
    info = ring;
    ck_assert_int_eq(loomTuningGet("allgather", "tree", 4, 8, &info), loomInvalidArgument);
    ck_assert_ptr_nonnull(strstr(loomGetLastError(NULL), "tree"));
    ck_assert_int_eq(loomTuningGet("gather", NULL, 4, 8, &info), loomInvalidArgument);
    ck_assert_int_eq(loomTuningGet("allreduce", "nvls", 4, 8, &info), loomInvalidArgument);
    ck_assert_int_eq(loomTuningGet("allreduce", NULL, 0, 8, &info), loomInvalidArgument);
    ck_assert_int_eq(loomTuningGet(NULL, NULL, 4, 8, &info), loomInvalidArgument);
    ck_assert_int_eq(loomTuningGet("allreduce", NULL, 4, 8, NULL), loomInvalidArgument);
    ck_assert_mem_eq(&info, &ring, sizeof(info)); /* untouched on failure */
}
END_TEST

/*
 * A communicator as tunerInit reads it: ranks each with a core, single
 * copies possible unless `kernel`: the plan interpreter serves it.
 */
static struct loomComm *recordComm(int kernel, int localRanks, size_t cmaMin)
{
    int served[LOOM_EXECUTOR_NUM] = {[LOOM_EXECUTOR_HOST] = 1,
                                     [LOOM_EXECUTOR_KERNEL] = kernel,
                                     [LOOM_EXECUTOR_CUDA] = 1,
                                     [LOOM_EXECUTOR_LAUNCH] = kernel};
    struct loomComm *comm = calloc(1, sizeof(*comm));
    ck_assert_ptr_nonnull(comm);
    comm->nranks = 4;
    comm->nChannels = 1;
    comm->slotBytes = 64 << 10;
    comm->tuneLocalRanks = localRanks;
    comm->tuneCpus = 4;
    comm->cmaOk = !kernel;
    comm->cmaMinBytes = cmaMin;
    ck_assert_int_eq(tunerInit(comm, served), loomSuccess);
    return comm;
}

static void recordFree(struct loomComm *comm)
{
    tunerFree(comm);
    free(comm);
}

/* The decision record with LOOM_PROTO, LOOM_ALGO and LOOM_CMA_MIN_BYTES unset. */
START_TEST(test_decision_record)
{
    struct loomTuning t;
    struct loomComm *host = recordComm(0, 4, 0), *kernel = recordComm(1, 4, 0);
    ck_assert_int_eq(tunerExecutor(host, 0), LOOM_EXECUTOR_HOST);
    ck_assert_int_eq(tunerExecutor(host, 1), LOOM_EXECUTOR_CUDA);
    ck_assert_int_eq(tunerExecutor(kernel, 0), LOOM_EXECUTOR_KERNEL);
    ck_assert_int_eq(tunerExecutor(kernel, 1), LOOM_EXECUTOR_LAUNCH);
    /* The protocol: LL for the smallest calls where the interpreter runs, a step a line. */
    tunerChoose(host, LOOM_COLL_ALLREDUCE, 8, LOOM_EXECUTOR_HOST, &t);
    ck_assert_int_eq(t.proto, LOOM_PROTO_SIMPLE);
    ck_assert_int_eq(t.executor, LOOM_EXECUTOR_HOST);
    ck_assert_int_eq(t.mapped, 0);
    int runs[] = {LOOM_EXECUTOR_KERNEL, LOOM_EXECUTOR_LAUNCH};
    for (int i = 0; i < 2; i++) {
        tunerChoose(kernel, LOOM_COLL_ALLREDUCE, 16, runs[i], &t);
        ck_assert_int_eq(t.proto, LOOM_PROTO_LL);
        ck_assert_uint_le(t.chunkBytes, LOOM_LL_BYTES);
        ck_assert_int_eq(t.executor, runs[i]);
        tunerChoose(kernel, LOOM_COLL_ALLREDUCE, 17, runs[i], &t);
        ck_assert_int_eq(t.proto, LOOM_PROTO_SIMPLE);
        tunerChoose(kernel, LOOM_COLL_ALLTOALLV, 8, runs[i], &t); /* sizes differ by rank */
        ck_assert_int_eq(t.proto, LOOM_PROTO_SIMPLE);
    }
    /* A group that falls back to the host-driven executors: the CUDA one has no lines; the
     * host executor keeps the communicator's protocol, which the plan refuses (plan.c). */
    tunerChoose(kernel, LOOM_COLL_ALLREDUCE, 8, LOOM_EXECUTOR_CUDA, &t);
    ck_assert_int_eq(t.proto, LOOM_PROTO_SIMPLE);
    tunerChoose(kernel, LOOM_COLL_ALLREDUCE, 8, LOOM_EXECUTOR_HOST, &t);
    ck_assert_int_eq(t.proto, LOOM_PROTO_LL);
    /* Mappings: asked from 512 KiB, for the collectives that have them unasked. */
    ck_assert(!tunerAsksMapped(host, LOOM_COLL_ALLGATHER, (512 << 10) - 1));
    ck_assert(tunerAsksMapped(host, LOOM_COLL_ALLGATHER, 512 << 10));
    ck_assert(tunerAsksMapped(host, LOOM_COLL_ALLREDUCE, 1 << 20));
    ck_assert(!tunerAsksMapped(host, LOOM_COLL_ALLTOALL, 1 << 20));    /* weighed, never asked */
    ck_assert(!tunerAsksMapped(kernel, LOOM_COLL_ALLGATHER, 1 << 20)); /* no single copies */
    tunerChooseMapped(host, LOOM_COLL_ALLREDUCE, 1 << 20, &t);
    ck_assert_int_eq(t.algo, LOOM_ALGO_CMA);
    ck_assert_int_eq(t.mapped, 1);
    ck_assert_int_eq(t.executor, LOOM_EXECUTOR_HOST);
    ck_assert_int_eq(t.proto, LOOM_PROTO_SIMPLE);
    recordFree(host);
    recordFree(kernel);
    /* Ranks that share cores never ask; LOOM_CMA_MIN_BYTES above 512 KiB moves the bound. */
    host = recordComm(0, 8, 0);
    ck_assert(!tunerAsksMapped(host, LOOM_COLL_ALLGATHER, 64 << 20));
    recordFree(host);
    host = recordComm(0, 4, 2 << 20);
    ck_assert(!tunerAsksMapped(host, LOOM_COLL_ALLGATHER, 1 << 20));
    ck_assert(tunerAsksMapped(host, LOOM_COLL_ALLGATHER, 2 << 20));
    recordFree(host);
}
END_TEST

static TCase *tcase(const char *name, const TTest *test)
{
    TCase *tc = tcase_create(name);
    tcase_add_test(tc, test);
    return tc;
}

static Suite *tunerSuite(void)
{
    Suite *s = suite_create("tuner");
    suite_add_tcase(s, tcase("LOOM_ALGO lists", test_parse_lists));
    suite_add_tcase(s, tcase("LOOM_ALGO per collective", test_parse_per_collective));
    suite_add_tcase(s, tcase("LOOM_ALGO errors", test_parse_errors));
    suite_add_tcase(s, tcase("LOOM_ALGO and zero copy", test_parse_zero_copy));
    suite_add_tcase(s, tcase("latency and bandwidth", test_model_latency_and_bandwidth));
    suite_add_tcase(s, tcase("across hosts", test_model_across_hosts));
    suite_add_tcase(s, tcase("restrictions", test_model_obeys_restrictions));
    suite_add_tcase(s, tcase("loomTuningGet", test_tuning_get));
    suite_add_tcase(s, tcase("decision record", test_decision_record));
    return s;
}

int main(void)
{
    /* loomTuningGet's default answers depend on these; the environment must not decide them. */
    unsetenv("LOOM_ALGO");
    unsetenv("LOOM_NCHANNELS");
    unsetenv("LOOM_BUFFSIZE");
    SRunner *sr = srunner_create(tunerSuite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
