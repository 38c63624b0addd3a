/*
 * check_train.c — the pieces of loom-train that --check cannot vouch for.
 *
 * --check compares a distributed run with a single-process reference, but
 * both run the same backward pass, the same routing and the same Adam: a
 * wrong derivative would agree with itself. So the derivatives are checked
 * here against central finite differences (the dense model end to end, with
 * and without attention, and
 * the MoE router's gate and load-balancing gradients), with every parameter
 * perturbed away from its initial value so that no gradient is trivially 0.
 * Also: DistributedSampler's sharding covers each sample once an epoch,
 * bf16 rounding is to nearest even, layouts pad units to whole shards, and
 * Adam's first step moves each weight by lr against its gradient's sign.
 */
#include <check.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "train/data.h"
#include "train/model.h"
#include "train/moe.h"
#include "train/optim.h"

/* ---- the dense model's gradient ---- */

struct flat {
    const struct unitLayout *lay;
    float *p, *g;
};

static loomResult_t flatParams(void *ctx, int unit, const float **p)
{
    struct flat *f = ctx;
    *p = f->p + f->lay->offset[unit];
    return loomSuccess;
}

static loomResult_t flatGrads(void *ctx, int unit, float **g)
{
    struct flat *f = ctx;
    *g = f->g + f->lay->offset[unit];
    return loomSuccess;
}

static loomResult_t flatNothing(void *ctx, int unit)
{
    return loomSuccess;
}

static loomResult_t flatReady(void *ctx, int unit, size_t lo)
{
    return loomSuccess;
}

static double denseLoss(const struct modelShape *s, const struct modelHooks *h, struct modelActs *a,
                        const float *x, const int *labels)
{
    double loss;
    ck_assert_int_eq(modelForward(s, h, a, x, labels, &loss), loomSuccess);
    return loss;
}

/* The gradient of the model of shape s on `rows` rows against central differences. */
static void checkDenseGradient(const struct modelShape s, const int rows)
{
    struct unitSpec *specs;
    struct unitLayout lay;
    struct modelActs acts;
    int nunits;
    ck_assert_int_eq(modelSpecs(&s, &specs, &nunits), loomSuccess);
    ck_assert_int_eq(layoutInit(&lay, specs, nunits, 1), loomSuccess);
    struct flat f = {&lay, calloc(lay.total, sizeof(float)), calloc(lay.total, sizeof(float))};
    struct modelHooks h = {&f, flatParams, flatNothing, flatGrads, flatReady, NULL, NULL};
    float x[6 * 6];
    int labels[6] = {0, 1, 2, 3, 1, 2};
    for (int u = 0; u < nunits; u++)
        unitInitRange(&specs[u], 7, 0, specs[u].count, f.p + lay.offset[u]);
    for (size_t i = 0; i < lay.total; i++) /* gains off 1, biases off 0 */
        f.p[i] += 0.2f * (float)rngNormal(11, 1, i);
    for (int i = 0; i < rows * s.hidden; i++)
        x[i] = (float)rngNormal(11, 2, (uint64_t)i);
    ck_assert_int_eq(modelActsInit(&acts, &s, rows, NULL), loomSuccess);
    denseLoss(&s, &h, &acts, x, labels);
    ck_assert_int_eq(modelBackward(&s, &h, &acts, labels), loomSuccess);

    /*
     * Every third weight, so that each tensor of each unit has some. The
     * float passes agree with the differences to about 5e-5 absolute and 1e-3
     * relative; a derivative off by 1% (GELU's cubic term 2 for 3) misses by
     * 2e-3.
     */
    for (size_t i = 0; i < lay.total; i += 3) {
        const float eps = 1e-2f, keep = f.p[i];
        f.p[i] = keep + eps;
        double up = denseLoss(&s, &h, &acts, x, labels);
        f.p[i] = keep - eps;
        double down = denseLoss(&s, &h, &acts, x, labels);
        f.p[i] = keep;
        double fd = (up - down) / (2 * eps);
        ck_assert_msg(fabs(fd - f.g[i]) <= 1e-4 + 5e-3 * fabs(fd),
                      "weight %zu: backward %.6g, finite difference %.6g", i, f.g[i], fd);
    }
    modelActsFree(&acts, &s, NULL);
    layoutFree(&lay);
    free(specs);
    free(f.p);
    free(f.g);
}

START_TEST(test_dense_gradient)
{
    checkDenseGradient((struct modelShape){2, 6, 10, 4, 0, 0, 1, 0, 1, 0}, 5);
}
END_TEST

/* Blocks with self-attention: 2 heads of 3, over 2 sequences of 3 rows. */
START_TEST(test_attention_gradient)
{
    checkDenseGradient((struct modelShape){2, 6, 10, 4, 2, 3, 1, 0, 1, 0}, 6);
}
END_TEST

/* The same with activation checkpointing: each block a segment, the first recomputed. */
START_TEST(test_checkpoint_gradient)
{
    checkDenseGradient((struct modelShape){2, 6, 10, 4, 2, 3, 1, 0, 1, 1}, 6);
}
END_TEST

/* ---- the MoE router ---- */

/* sum of dgate x gate over the fixed choices, plus auxScale x the auxiliary loss */
static double routerLoss(const struct moeShape *m, const float *z, const float *dgate,
                         double auxScale, float *p, struct moeRouting *r)
{
    memcpy(p, z, (size_t)m->group * m->experts * sizeof(float));
    softmaxRows(p, m->group, m->experts);
    moeRoute(m, p, r);
    double l = auxScale * r->aux;
    for (int i = 0; i < m->group * m->topK; i++)
        l += (double)dgate[i] * r->gate[i];
    return l;
}

static void checkRouter(int topK)
{
    struct moeShape m = {4, 8, 5, topK, 6, 2, 0.3};
    int n = m.group * m.experts;
    float z[30], p[30], dz[30], dgate[12];
    int choice[12];
    struct moeRouting r;
    ck_assert_int_eq(moeRoutingInit(&r, &m, NULL), loomSuccess);
    for (int i = 0; i < n; i++)
        z[i] = 2.0f * (float)rngNormal(5, 3, (uint64_t)i);
    for (int i = 0; i < m.group * topK; i++)
        dgate[i] = (float)rngNormal(5, 4, (uint64_t)i);
    routerLoss(&m, z, dgate, 0.5, p, &r);
    memcpy(choice, r.expert, (size_t)m.group * topK * sizeof(int));
    ck_assert_int_gt(r.dropped, 0); /* capacity 2 of 6 tokens over 5 experts: some drop */
    moeRouterBackward(&m, p, &r, dgate, 0.5, dz);
    for (int i = 0; i < n; i++) {
        const float eps = 1e-3f, keep = z[i];
        z[i] = keep + eps;
        double up = routerLoss(&m, z, dgate, 0.5, p, &r);
        ck_assert_msg(memcmp(choice, r.expert, sizeof(int) * m.group * topK) == 0,
                      "a perturbation changed the routing; pick other values");
        z[i] = keep - eps;
        double down = routerLoss(&m, z, dgate, 0.5, p, &r);
        z[i] = keep;
        double fd = (up - down) / (2 * eps);
        ck_assert_msg(fabs(fd - dz[i]) <= 3e-4 + 5e-3 * fabs(fd),
                      "top-%d logit %d: backward %.6g, finite difference %.6g", topK, i, dz[i], fd);
    }
    moeRoutingFree(&r, &m, NULL);
}

START_TEST(test_router_gradient_top1)
{
    checkRouter(1);
}
END_TEST

START_TEST(test_router_gradient_top2)
{
    checkRouter(2);
}
END_TEST

START_TEST(test_capacity_order)
{
    /* 4 tokens all preferring expert 0, then expert 1; capacity 2 */
    struct moeShape m = {4, 8, 3, 2, 4, 2, 0.0};
    float p[12];
    struct moeRouting r;
    for (int t = 0; t < 4; t++) {
        p[t * 3] = 0.6f;
        p[t * 3 + 1] = 0.3f;
        p[t * 3 + 2] = 0.1f;
    }
    ck_assert_int_eq(moeRoutingInit(&r, &m, NULL), loomSuccess);
    moeRoute(&m, p, &r);
    /* first choices in token order take expert 0's places, second choices expert 1's */
    int slots[8] = {0, 0, 1, 1, -1, -1, -1, -1};
    for (int i = 0; i < 8; i++)
        ck_assert_int_eq(r.slot[i], slots[i]);
    ck_assert_int_eq(r.dropped, 4);
    ck_assert_float_eq_tol(r.gate[0], 0.6f / 0.9f, 1e-6f);
    moeRoutingFree(&r, &m, NULL);
}
END_TEST

/* ---- data, rounding, layout, Adam ---- */

START_TEST(test_sampler_covers_epoch)
{
    struct dataSet d;
    const int nranks = 3, batch = 4;
    int seen[96] = {0};
    long first[96];
    ck_assert_int_eq(dataInit(&d, 8, 4, 96, batch, nranks, 1), loomSuccess);
    ck_assert_int_eq(d.stepsPerEpoch, 8);
    for (long s = 0; s < 8; s++)
        for (int r = 0; r < nranks; r++)
            for (int j = 0; j < batch; j++)
                seen[dataIndex(&d, r, s, j)]++;
    for (int i = 0; i < 96; i++)
        ck_assert_int_eq(seen[i], 1);
    for (int i = 0; i < 96; i++)
        first[i] = dataIndex(&d, i % nranks, (i / nranks) / batch, (i / nranks) % batch);
    int moved = 0;
    for (int i = 0; i < 96; i++)
        moved +=
            dataIndex(&d, i % nranks, 8 + (i / nranks) / batch, (i / nranks) % batch) != first[i];
    ck_assert_int_gt(moved, 48); /* the second epoch is shuffled anew */
    dataFree(&d);
}
END_TEST

START_TEST(test_sampler_pads_like_distributed_sampler)
{
    struct dataSet d;
    /* 10 samples over 4 ranks: 3 each, the first two of the order repeated */
    ck_assert_int_eq(dataInit(&d, 8, 4, 10, 3, 4, 1), loomSuccess);
    ck_assert_int_eq(d.perRank, 3);
    long last2 = dataIndex(&d, 2, 0, 2), last3 = dataIndex(&d, 3, 0, 2);
    ck_assert_int_eq(last2, d.perm[0]); /* position 2 + 4 x 2 = 10 */
    ck_assert_int_eq(last3, d.perm[1]);
    dataFree(&d);
}
END_TEST

START_TEST(test_bf16_rounding)
{
    ck_assert_uint_eq(floatToBf16(1.0f), 0x3f80);
    ck_assert_uint_eq(floatToBf16(1.00390625f), 0x3f80);   /* 1 + 2^-8: a tie, to even */
    ck_assert_uint_eq(floatToBf16(1.01171875f), 0x3f82);   /* 1 + 3 2^-8: a tie, to even */
    ck_assert_uint_eq(floatToBf16(1.0048828125f), 0x3f81); /* above the tie */
    ck_assert(isnan(bf16ToFloat(floatToBf16(NAN))));
    ck_assert_float_eq(bf16ToFloat(floatToBf16(-2.5f)), -2.5f);
}
END_TEST

START_TEST(test_layout_pads_to_shards)
{
    struct unitSpec u[2] = {{0}, {0}};
    struct unitLayout lay;
    unitSpecAdd(&u[0], 10, INIT_ZERO, 0);
    unitSpecAdd(&u[1], 3, INIT_ONE, 0);
    unitSpecAdd(&u[1], 5, INIT_ZERO, 0);
    ck_assert_int_eq(layoutInit(&lay, u, 2, 4), loomSuccess);
    ck_assert_uint_eq(lay.padded[0], 12);
    ck_assert_uint_eq(lay.padded[1], 8);
    ck_assert_uint_eq(lay.shard[0], 3);
    ck_assert_uint_eq(lay.offset[1], 12);
    ck_assert_uint_eq(lay.shardOffset[1], 3);
    ck_assert_uint_eq(lay.params, 18);
    float v[8];
    unitInitRange(&u[1], 1, 0, 8, v);
    ck_assert_float_eq(v[2], 1.0f);
    ck_assert_float_eq(v[3], 0.0f);
    layoutFree(&lay);
}
END_TEST

START_TEST(test_adam_first_step)
{
    struct optimState o;
    struct adamConfig c = {0.01f, 0.9f, 0.999f, 1e-8f};
    float w[3] = {1.0f, 1.0f, 1.0f}, g[3] = {0.5f, -3.0f, 1e-3f};
    ck_assert_int_eq(optimInit(&o, 0, 3, NULL), loomSuccess);
    optimStep(&o, &c, 1, 0, 3, w, g);
    ck_assert_float_eq_tol(w[0], 0.99f, 1e-6f);
    ck_assert_float_eq_tol(w[1], 1.01f, 1e-6f);
    ck_assert_float_eq_tol(w[2], 0.99f, 1e-5f);
    optimFree(&o, NULL);
}
END_TEST

static void addCase(Suite *s, const char *name, const TTest *test)
{
    TCase *tc = tcase_create(name);
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test);
    suite_add_tcase(s, tc);
}

static Suite *trainSuite(void)
{
    Suite *s = suite_create("train");
    addCase(s, "dense_gradient", test_dense_gradient);
    addCase(s, "attention_gradient", test_attention_gradient);
    addCase(s, "checkpoint_gradient", test_checkpoint_gradient);
    addCase(s, "router_gradient_top1", test_router_gradient_top1);
    addCase(s, "router_gradient_top2", test_router_gradient_top2);
    addCase(s, "capacity_order", test_capacity_order);
    addCase(s, "sampler_covers_epoch", test_sampler_covers_epoch);
    addCase(s, "sampler_pads_like_distributed_sampler", test_sampler_pads_like_distributed_sampler);
    addCase(s, "bf16_rounding", test_bf16_rounding);
    addCase(s, "layout_pads_to_shards", test_layout_pads_to_shards);
    addCase(s, "adam_first_step", test_adam_first_step);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(trainSuite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? 0 : 1;
}
