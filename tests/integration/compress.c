/*
 * compress.c — float32 reductions sent as bfloat16 over the network
 * (LOOM_NET_COMPRESS); a program of one rank, started by loomrun on one
 * machine with every link, or some, on the network
 * (tests/integration/compress.sh).
 *
 *   compress MODE      MODE: bf16 or bf16-sr, what LOOM_NET_COMPRESS says
 *
 * Checks, on the communicator of the environment and on a split of it whose
 * config sets netCompress to MODE:
 *  - a float32 AllReduce (sum and avg) of values spread over six binades,
 *    positive and negative, is within loom(7)'s bound of the exact sum
 *    (computed here in double): |r - s| <= ((1 + u)^n - 1) * sum |x_i|,
 *    u = 2^-8 to nearest even, 2^-7 stochastic (each plus the float32
 *    sum's 2^-23);
 *  - it went over the wire as bfloat16: every result is a bfloat16 value
 *    (the low 16 bits are zero), and most are further from the exact sum
 *    than a float32 sum would be;
 *  - every rank holds the same bits (compared through an uncompressed
 *    AllGather of a hash);
 *  - a float32 ReduceScatter is within the same bound, and as coarse;
 *  - a float64 AllReduce is exact with the environment's setting (untouched),
 *    and is refused (loomInvalidArgument, one line) on the split whose
 *    config forces compression.
 * Exits 0 when all hold, 1 with a line for each that does not.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <loom.h>

#define COUNT 100003 /* a few pieces per channel, and an odd tail */

static int rank, nranks, failures;

static void fail(const char *what, const char *detail)
{
    fprintf(stderr, "compress: rank %d: %s%s%s\n", rank, what, detail ? ": " : "",
            detail ? detail : "");
    failures++;
}

/* Rank r's element i: magnitudes 2^-3 .. 2^3, both signs, not bfloat16 values. */
static double valueAt(int r, size_t i)
{
    uint64_t h = (i + 1) * 0x9e3779b97f4a7c15ULL ^ (uint64_t)(r + 1) * 0xbf58476d1ce4e5b9ULL;
    h ^= h >> 31;
    h *= 0x94d049bb133111ebULL;
    h ^= h >> 29;
    double mant = 1.0 + (double)(h & 0xfffff) / 1048576.0;
    int e = (int)((h >> 20) % 7) - 3;
    return ((h >> 40) & 1 ? -1.0 : 1.0) * ldexp(mant, e);
}

static uint64_t hashOf(const void *p, size_t bytes)
{
    uint64_t h = 1469598103934665603ULL;
    for (size_t i = 0; i < bytes; i++)
        h = (h ^ ((const unsigned char *)p)[i]) * 1099511628211ULL;
    return h;
}

/* Whether every rank holds the same `bytes` at p. */
static int sameEverywhere(loomComm_t comm, const void *p, size_t bytes)
{
    uint64_t mine = hashOf(p, bytes), *all = calloc((size_t)nranks, sizeof(*all));
    int same = all && loomAllGather(&mine, all, 1, loomUint64, comm, NULL) == loomSuccess;
    for (int r = 0; same && r < nranks; r++)
        same = all[r] == mine;
    free(all);
    return same;
}

/*
 * Elements [lo, lo + n) of the reduction (sum, or avg when avg) held in got: within the bound, and
 * counts those that are bfloat16 values and those further from the exact sum than float32 alone
 * would put them (n roundings of 2^-24, with room).
 */
static void checkBound(const float *got, size_t lo, size_t n, int avg, double u, size_t *bf16s,
                       size_t *coarse, const char *what)
{
    double bound = pow(1.0 + u, nranks) - 1.0, f32bound = 4.0 * nranks * ldexp(1, -24);
    for (size_t i = 0; i < n; i++) {
        double exact = 0, mag = 0;
        for (int r = 0; r < nranks; r++) {
            exact += valueAt(r, lo + i);
            mag += fabs(valueAt(r, lo + i));
        }
        if (avg)
            exact /= nranks, mag /= nranks;
        double err = fabs((double)got[i] - exact);
        if (err > bound * mag) {
            char line[200];
            snprintf(line, sizeof(line), "element %zu is %.9g, exact %.9g: error %.3g > %.3g",
                     lo + i, (double)got[i], exact, err / mag, bound);
            fail(what, line);
            return;
        }
        uint32_t bits;
        memcpy(&bits, &got[i], sizeof(bits));
        *bf16s += (bits & 0xffff) == 0;
        *coarse += err > f32bound * mag;
    }
}

static void allReduceCase(loomComm_t comm, loomRedOp_t op, double u, const char *what)
{
    float *buf = malloc(COUNT * sizeof(float));
    for (size_t i = 0; i < COUNT; i++)
        buf[i] = (float)valueAt(rank, i);
    if (loomAllReduce(buf, buf, COUNT, loomFloat32, op, comm, NULL) != loomSuccess) {
        fail(what, loomGetLastError(comm));
        free(buf);
        return;
    }
    size_t bf16s = 0, coarse = 0;
    checkBound(buf, 0, COUNT, op == loomAvg, u, &bf16s, &coarse, what);
    if (bf16s != COUNT)
        fail(what, "some results are not bfloat16 values: the wire carried float32");
    if (coarse < COUNT / 2)
        fail(what, "most results are as close as a float32 sum: nothing was rounded");
    if (!sameEverywhere(comm, buf, COUNT * sizeof(float)))
        fail(what, "the ranks hold different results");
    free(buf);
}

static void reduceScatterCase(loomComm_t comm, double u, const char *what)
{
    float *send = malloc((size_t)nranks * COUNT * sizeof(float)), *recv = malloc(COUNT * 4);
    for (size_t i = 0; i < (size_t)nranks * COUNT; i++)
        send[i] = (float)valueAt(rank, i);
    if (loomReduceScatter(send, recv, COUNT, loomFloat32, loomSum, comm, NULL) != loomSuccess) {
        fail(what, loomGetLastError(comm));
    } else {
        size_t bf16s = 0, coarse = 0;
        checkBound(recv, (size_t)rank * COUNT, COUNT, 0, u, &bf16s, &coarse, what);
        if (coarse < COUNT / 2)
            fail(what, "most results are as close as a float32 sum: nothing was rounded");
    }
    free(send);
    free(recv);
}

/* A float64 AllReduce: exact (small integers) when allowed; refused when forced. */
static void doubleCase(loomComm_t comm, int refused, const char *what)
{
    double buf[64];
    for (int i = 0; i < 64; i++)
        buf[i] = rank * 64 + i + 0.25;
    loomResult_t res = loomAllReduce(buf, buf, 64, loomFloat64, loomSum, comm, NULL);
    const char *why = loomGetLastError(comm);
    if (refused) {
        if (res != loomInvalidArgument || strstr(why, "float32 only, not float64") == NULL ||
            strchr(why, '\n') != NULL)
            fail(what, "a forced compression's float64 AllReduce was not refused with one line");
        else if (rank == 0)
            printf("compress: refused: %s\n", why);
        return;
    }
    if (res != loomSuccess) {
        fail(what, why);
        return;
    }
    for (int i = 0; i < 64; i++) {
        double want = 64.0 * nranks * (nranks - 1) / 2 + nranks * (i + 0.25);
        if (buf[i] != want) {
            fail(what, "a float64 AllReduce was not exact");
            return;
        }
    }
}

static void suite(loomComm_t comm, double u, int forced)
{
    const char *sum = forced ? "config: AllReduce sum" : "env: AllReduce sum";
    allReduceCase(comm, loomSum, u, sum);
    allReduceCase(comm, loomAvg, u, forced ? "config: AllReduce avg" : "env: AllReduce avg");
    reduceScatterCase(comm, u, forced ? "config: ReduceScatter" : "env: ReduceScatter");
    doubleCase(comm, forced, forced ? "config: float64" : "env: float64");
}

int main(int argc, char **argv)
{
    loomComm_t comm, split;
    if (argc != 2 || (strcmp(argv[1], "bf16") != 0 && strcmp(argv[1], "bf16-sr") != 0)) {
        fprintf(stderr, "usage: compress bf16|bf16-sr (run by loomrun)\n");
        return 2;
    }
    /* The float32 sum of n values adds its own 2^-23 (one rounding of float32, a half ulp). */
    double u = (strcmp(argv[1], "bf16") == 0 ? ldexp(1, -8) : ldexp(1, -7)) + ldexp(1, -23);
    if (loomCommInitFromEnv(&comm) != loomSuccess) {
        fprintf(stderr, "compress: init: %s\n", loomGetLastError(NULL));
        return 1;
    }
    loomCommUserRank(comm, &rank);
    loomCommCount(comm, &nranks);
    suite(comm, u, 0);

    loomConfig_t config = LOOM_CONFIG_INITIALIZER;
    config.netCompress = argv[1];
    if (loomCommSplit(comm, 0, rank, &split, &config) != loomSuccess) {
        fail("split with config.netCompress", loomGetLastError(comm));
    } else {
        suite(split, u, 1);
        loomCommDestroy(split);
    }
    loomCommDestroy(comm);
    if (failures == 0)
        printf("compress: rank %d of %d: %s: all checks hold\n", rank, nranks, argv[1]);
    return failures != 0;
}
