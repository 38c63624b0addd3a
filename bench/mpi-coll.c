/*
 * mpi-coll — Open MPI's collectives measured the way loom-perf measures Loom's.
 *
 * This is the project's own yardstick: it takes the subset of loom-perf's
 * options that MPI can answer (-C allreduce|allgather|reducescatter|
 * broadcast|reduce|alltoall|all, -b -e -f -i -n -w -c -a, -d float|double|
 * int32, -o sum) and prints the same table, with the same sizes, timing
 * (warmups, barrier, clock_gettime(CLOCK_MONOTONIC) around the timed loop,
 * times combined across ranks by -a) and bus-bandwidth factors, so that
 *
 *   mpirun -np 4 bench/mpi-coll -C allreduce -b 8 -e 64M -f 2
 *   loomrun -n 4 tools/loom-perf -C allreduce -b 8 -e 64M -f 2
 *
 * can be read side by side. The MPI calls are MPI_Allreduce, MPI_Allgather,
 * MPI_Reduce_scatter_block, MPI_Bcast, MPI_Reduce and MPI_Alltoall; in place
 * means MPI_IN_PLACE (MPI_Bcast is always in place). With -c 1 the result of
 * one call per size and mode is checked against inputs that are exact by
 * construction, as in loom-perf. Built with mpicc only; never installed.
 */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define SUM_LIMIT 100
#define EXIT_WRONG 1
#define EXIT_USAGE 2

enum coll {
    COLL_ALLREDUCE,
    COLL_ALLGATHER,
    COLL_REDUCESCATTER,
    COLL_BROADCAST,
    COLL_REDUCE,
    COLL_ALLTOALL,
    COLL_COUNT
};

static const char *const collNames[COLL_COUNT] = {
    "allreduce", "allgather", "reducescatter", "broadcast", "reduce", "alltoall",
};

struct typeInfo {
    const char *name;
    size_t size;
    int isInt;
};

static const struct typeInfo typeTable[] = {
    {"float", sizeof(float), 0},
    {"double", sizeof(double), 0},
    {"int32", sizeof(int32_t), 1},
};
#define NTYPES ((int)(sizeof(typeTable) / sizeof(typeTable[0])))

struct options {
    int colls[COLL_COUNT];
    int nColls;
    int type;
    uint64_t minBytes, maxBytes, stepBytes;
    double stepFactor;
    int iters, warmup, check, agg;
    int allocMem; /* -R 1: buffers from MPI_Alloc_mem (loom-perf -R 1's counterpart) */
};

struct bench {
    struct options opt;
    int rank, nranks;
    char *send, *recv;
    int64_t totalWrong;
    double busbwSum;
    long busbwRows;
};

struct test {
    enum coll coll;
    size_t count; /* as passed to the call */
    size_t sendElems, recvElems;
    size_t bytes;
};

static MPI_Datatype mpiType(int type)
{
    return type == 0 ? MPI_FLOAT : type == 1 ? MPI_DOUBLE : MPI_INT32_T;
}

static double nowUs(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec * 1e-3;
}

/* ---- exact inputs: sums stay <= SUM_LIMIT whatever the order ------------- */

static int isReduction(enum coll c)
{
    return c == COLL_ALLREDUCE || c == COLL_REDUCE || c == COLL_REDUCESCATTER;
}

static double sumInput(int nranks, int r, size_t i)
{
    size_t n = (size_t)nranks, ur = (size_t)r;
    size_t active = n < SUM_LIMIT ? n : SUM_LIMIT;
    if (n > SUM_LIMIT && (i + ur) % n >= SUM_LIMIT) {
        return 0;
    }
    return (double)((i * 13 + ur * 7) % (SUM_LIMIT / active + 1));
}

static double dataInput(int r, size_t i)
{
    return (double)((i * 31 + (size_t)r * 17 + 5) % 121) - 60;
}

static double inputValue(const struct bench *b, const struct test *t, int r, size_t i)
{
    return isReduction(t->coll) ? sumInput(b->nranks, r, i) : dataInput(r, i);
}

static double sumExpected(int nranks, size_t i)
{
    double acc = 0;
    for (int r = 0; r < nranks; r++) {
        acc += sumInput(nranks, r, i);
    }
    return acc;
}

/* Element j of this rank's result; root is 0. */
static double expectedValue(const struct bench *b, const struct test *t, size_t j)
{
    size_t c = t->count, me = (size_t)b->rank;
    switch (t->coll) {
    case COLL_ALLREDUCE:
    case COLL_REDUCE:
        return sumExpected(b->nranks, j);
    case COLL_REDUCESCATTER:
        return sumExpected(b->nranks, me * c + j);
    case COLL_BROADCAST:
        return dataInput(0, j);
    case COLL_ALLGATHER:
        return dataInput((int)(j / c), j % c);
    case COLL_ALLTOALL:
    default:
        return dataInput((int)(j / c), me * c + j % c);
    }
}

static void storeValue(int type, double v, char *buf, size_t i)
{
    if (type == 0) {
        ((float *)buf)[i] = (float)v;
    } else if (type == 1) {
        ((double *)buf)[i] = v;
    } else {
        ((int32_t *)buf)[i] = (int32_t)v;
    }
}

static double loadValue(int type, const char *buf, size_t i)
{
    if (type == 0) {
        return ((const float *)buf)[i];
    }
    if (type == 1) {
        return ((const double *)buf)[i];
    }
    return ((const int32_t *)buf)[i];
}

/* ---- one call ------------------------------------------------------------ */

/*
 * In place, MPI's layouts: MPI_Allgather takes this rank's block from its
 * place in recvbuf; MPI_Reduce_scatter_block reduces recvbuf and leaves this
 * rank's block at its start; MPI_Reduce passes MPI_IN_PLACE at the root only.
 */
static void runOp(struct bench *b, const struct test *t, int inPlace)
{
    MPI_Datatype dt = mpiType(b->opt.type);
    int count = (int)t->count;
    void *send = inPlace ? MPI_IN_PLACE : b->send;
    switch (t->coll) {
    case COLL_ALLREDUCE:
        MPI_Allreduce(send, b->recv, count, dt, MPI_SUM, MPI_COMM_WORLD);
        break;
    case COLL_ALLGATHER:
        MPI_Allgather(send, count, dt, b->recv, count, dt, MPI_COMM_WORLD);
        break;
    case COLL_REDUCESCATTER:
        MPI_Reduce_scatter_block(send, b->recv, count, dt, MPI_SUM, MPI_COMM_WORLD);
        break;
    case COLL_BROADCAST:
        MPI_Bcast(b->recv, count, dt, 0, MPI_COMM_WORLD);
        break;
    case COLL_REDUCE:
        if (inPlace && b->rank != 0) {
            send = b->recv;
        }
        MPI_Reduce(send, b->recv, count, dt, MPI_SUM, 0, MPI_COMM_WORLD);
        break;
    case COLL_ALLTOALL:
    default:
        MPI_Alltoall(send, count, dt, b->recv, count, dt, MPI_COMM_WORLD);
        break;
    }
}

/* Runs the collective once on fresh inputs; returns this rank's wrong elements. */
static int64_t checkOnce(struct bench *b, const struct test *t, int inPlace)
{
    int type = b->opt.type;
    size_t ts = typeTable[type].size;
    char *in = inPlace ? b->recv : b->send;
    size_t inBase = 0;
    memset(b->recv, 0xa5, (t->recvElems > t->sendElems ? t->recvElems : t->sendElems) * ts);
    if (inPlace && t->coll == COLL_ALLGATHER) {
        inBase = (size_t)b->rank * t->count;
    }
    for (size_t i = 0; i < t->sendElems; i++) {
        double v = inputValue(b, t, b->rank, i);
        /* Broadcast sends from the root's recvbuf; the others start with their own data. */
        storeValue(type, v, t->coll == COLL_BROADCAST ? b->recv : in, inBase + i);
    }
    runOp(b, t, inPlace);
    if (t->coll == COLL_REDUCE && b->rank != 0) {
        return 0;
    }
    int64_t wrong = 0;
    for (size_t j = 0; j < t->recvElems; j++) {
        if (loadValue(type, b->recv, j) != expectedValue(b, t, j)) {
            if (wrong == 0) {
                fprintf(stderr,
                        "mpi-coll: rank %d: %s count %zu %s: recvbuf[%zu] is %g, "
                        "expected %g\n",
                        b->rank, collNames[t->coll], t->count,
                        inPlace ? "in-place" : "out-of-place", j, loadValue(type, b->recv, j),
                        expectedValue(b, t, j));
            }
            wrong++;
        }
    }
    return wrong;
}

static double timeOps(struct bench *b, const struct test *t, int inPlace)
{
    for (int i = 0; i < b->opt.warmup; i++) {
        runOp(b, t, inPlace);
    }
    MPI_Barrier(MPI_COMM_WORLD);
    double start = nowUs();
    for (int i = 0; i < b->opt.iters; i++) {
        runOp(b, t, inPlace);
    }
    return (nowUs() - start) / b->opt.iters;
}

static double busFactor(enum coll c, int n)
{
    switch (c) {
    case COLL_ALLREDUCE:
        return 2.0 * (n - 1) / n;
    case COLL_ALLGATHER:
    case COLL_REDUCESCATTER:
    case COLL_ALLTOALL:
        return (double)(n - 1) / n;
    default:
        return 1.0;
    }
}

static void printModeColumns(struct bench *b, const struct test *t, double us, int64_t wrong)
{
    double algbw = us > 0 ? (double)t->bytes / us / 1e3 : 0;
    double busbw = algbw * busFactor(t->coll, b->nranks);
    char wrongText[24];
    if (b->opt.check) {
        snprintf(wrongText, sizeof(wrongText), "%" PRId64, wrong);
    } else {
        snprintf(wrongText, sizeof(wrongText), "N/A");
    }
    printf("  %9.2f  %7.2f  %7.2f  %6s", us, algbw, busbw, wrongText);
    b->busbwSum += busbw;
    b->busbwRows++;
}

static void runTest(struct bench *b, const struct test *t)
{
    double times[2];
    int64_t wrong[2] = {0, 0};
    for (int m = 0; m < 2; m++) {
        if (b->opt.check) {
            wrong[m] = checkOnce(b, t, m);
        }
        times[m] = timeOps(b, t, m);
    }
    static const MPI_Op aggOps[] = {MPI_SUM, MPI_SUM, MPI_MIN, MPI_MAX};
    if (b->opt.agg != 0) {
        MPI_Allreduce(MPI_IN_PLACE, times, 2, MPI_DOUBLE, aggOps[b->opt.agg], MPI_COMM_WORLD);
        if (b->opt.agg == 1) {
            times[0] /= b->nranks;
            times[1] /= b->nranks;
        }
    }
    if (b->opt.check) {
        MPI_Allreduce(MPI_IN_PLACE, wrong, 2, MPI_INT64_T, MPI_SUM, MPI_COMM_WORLD);
        b->totalWrong += wrong[0] + wrong[1];
    }
    if (b->rank != 0) {
        return;
    }
    printf("%12zu  %12zu  %8s  %6s  %6d", t->bytes, t->count, typeTable[b->opt.type].name,
           isReduction(t->coll) ? "sum" : "none",
           t->coll == COLL_BROADCAST || t->coll == COLL_REDUCE ? 0 : -1);
    printModeColumns(b, t, times[0], wrong[0]);
    printModeColumns(b, t, times[1], wrong[1]);
    printf("\n");
    fflush(stdout);
}

/* Counts from a size as loom-perf does; 0 for sizes below one element. */
static int makeTest(const struct bench *b, enum coll c, uint64_t size, struct test *t)
{
    size_t ts = typeTable[b->opt.type].size, n = (size_t)b->nranks;
    if ((size > 0 && size < ts) || size / ts > INT32_MAX) {
        return 0;
    }
    size_t elems = (size_t)(size / ts);
    *t = (struct test){c, elems, elems, elems, 0};
    if (c == COLL_ALLGATHER || c == COLL_REDUCESCATTER || c == COLL_ALLTOALL) {
        t->count = elems / n;
        t->sendElems = c == COLL_ALLGATHER ? t->count : t->count * n;
        t->recvElems = c == COLL_REDUCESCATTER ? t->count : t->count * n;
    }
    t->bytes = (t->sendElems > t->recvElems ? t->sendElems : t->recvElems) * ts;
    return 1;
}

/* ---- options ----------------------------------------------------------------- */

static void usage(FILE *f)
{
    fprintf(f, "usage: mpirun -np N mpi-coll [-C allreduce|allgather|reducescatter|broadcast|"
               "reduce|alltoall|all]\n"
               "       [-b bytes] [-e bytes] [-f factor] [-i bytes] [-n iters] [-w iters]\n"
               "       [-c 0|1] [-d float|double|int32] [-o sum] [-a 0..3] [-R 0|1]\n"
               "Options mean what they mean to loom-perf; K, M, G are powers of 1024.\n"
               "-R 1 takes the buffers from MPI_Alloc_mem, as loom-perf -R 1 takes them from\n"
               "loomMemAlloc.\n");
}

static int parseBytes(const char *s, uint64_t *out)
{
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    int shift = 0;
    if (errno != 0 || end == s || *s == '-') {
        return -1;
    }
    switch (*end) {
    case 'k':
    case 'K':
        shift = 10;
        end++;
        break;
    case 'm':
    case 'M':
        shift = 20;
        end++;
        break;
    case 'g':
    case 'G':
        shift = 30;
        end++;
        break;
    default:
        break;
    }
    if (*end != '\0') {
        return -1;
    }
    *out = (uint64_t)v << shift;
    return 0;
}

static int parseInt(const char *s, long lo, long hi, int *out)
{
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno != 0 || end == s || *end != '\0' || v < lo || v > hi) {
        return -1;
    }
    *out = (int)v;
    return 0;
}

static int parseOptions(int argc, char **argv, int quiet, struct options *o)
{
    *o = (struct options){.colls = {COLL_ALLREDUCE},
                          .nColls = 1,
                          .type = 0,
                          .minBytes = 32 << 20,
                          .maxBytes = 32 << 20,
                          .stepBytes = 1 << 20,
                          .stepFactor = 1,
                          .iters = 20,
                          .warmup = 5,
                          .check = 1,
                          .agg = 1};
    int c, bad = 0;
    char *end;
    opterr = 0;
    while (!bad && (c = getopt(argc, argv, "C:b:e:f:i:n:w:c:d:o:a:R:h")) != -1) {
        switch (c) {
        case 'C':
            o->nColls = 0;
            for (int k = 0; k < COLL_COUNT; k++) {
                if (strcmp(optarg, "all") == 0 || strcmp(optarg, collNames[k]) == 0) {
                    o->colls[o->nColls++] = k;
                }
            }
            bad = o->nColls == 0;
            break;
        case 'b':
            bad = parseBytes(optarg, &o->minBytes) != 0;
            break;
        case 'e':
            bad = parseBytes(optarg, &o->maxBytes) != 0;
            break;
        case 'i':
            bad = parseBytes(optarg, &o->stepBytes) != 0;
            break;
        case 'f':
            o->stepFactor = strtod(optarg, &end);
            bad = end == optarg || *end != '\0' || !(o->stepFactor >= 1);
            break;
        case 'n':
            bad = parseInt(optarg, 1, 1000000000, &o->iters) != 0;
            break;
        case 'w':
            bad = parseInt(optarg, 0, 1000000000, &o->warmup) != 0;
            break;
        case 'c':
            bad = parseInt(optarg, 0, 1, &o->check) != 0;
            break;
        case 'a':
            bad = parseInt(optarg, 0, 3, &o->agg) != 0;
            break;
        case 'R':
            bad = parseInt(optarg, 0, 1, &o->allocMem) != 0;
            break;
        case 'o':
            bad = strcmp(optarg, "sum") != 0;
            break;
        case 'd':
            o->type = -1;
            for (int k = 0; k < NTYPES; k++) {
                if (strcmp(optarg, typeTable[k].name) == 0) {
                    o->type = k;
                }
            }
            bad = o->type < 0;
            break;
        case 'h':
            if (!quiet) {
                usage(stdout);
            }
            return -1;
        default:
            bad = 1;
            break;
        }
    }
    if (!bad && (optind < argc || o->minBytes > o->maxBytes ||
                 (o->stepFactor <= 1 && o->stepBytes == 0 && o->minBytes < o->maxBytes))) {
        bad = 1;
    }
    if (bad) {
        if (!quiet) {
            fprintf(stderr, "mpi-coll: bad option or value (%s)\n", argv[optind - 1]);
            usage(stderr);
        }
        return EXIT_USAGE;
    }
    return 0;
}

static void printHeader(const struct bench *b)
{
    const struct options *o = &b->opt;
    static const char *const aggNames[] = {"rank 0", "average", "min", "max"};
    char host[64] = "";
    gethostname(host, sizeof(host) - 1);
    int pid = (int)getpid();
    int *pids = calloc((size_t)b->nranks, sizeof(*pids));
    char *hosts = calloc((size_t)b->nranks, sizeof(host));
    MPI_Gather(&pid, 1, MPI_INT, pids, 1, MPI_INT, 0, MPI_COMM_WORLD);
    MPI_Gather(host, sizeof(host), MPI_CHAR, hosts, sizeof(host), MPI_CHAR, 0, MPI_COMM_WORLD);
    if (b->rank == 0) {
        printf("# mpi-coll  nranks %d  collective %s  datatype %s  redop sum  root 0\n", b->nranks,
               o->nColls > 1 ? "all" : collNames[o->colls[0]], typeTable[o->type].name);
        printf("# minBytes %" PRIu64 " maxBytes %" PRIu64 " step: %g(%s) warmup iters: %d "
               "iters: %d validation: %d time: %s\n",
               o->minBytes, o->maxBytes, o->stepFactor > 1 ? o->stepFactor : (double)o->stepBytes,
               o->stepFactor > 1 ? "factor" : "bytes", o->warmup, o->iters, o->check,
               aggNames[o->agg]);
        printf("#\n");
        for (int r = 0; r < b->nranks; r++) {
            printf("#  Rank %2d Pid %6d on %s\n", r, pids[r], hosts + (size_t)r * sizeof(host));
        }
        printf("#\n");
        printf("%-52s  %37s  %37s\n", "#", "out-of-place            ", "in-place            ");
        printf("# %10s  %12s  %8s  %6s  %6s  %9s  %7s  %7s  %6s  %9s  %7s  %7s  %6s\n", "size",
               "count", "type", "redop", "root", "time", "algbw", "busbw", "#wrong", "time",
               "algbw", "busbw", "#wrong");
        printf("# %10s  %12s  %8s  %6s  %6s  %9s  %7s  %7s  %6s  %9s  %7s  %7s  %6s\n", "(B)",
               "(elements)", "", "", "", "(us)", "(GB/s)", "(GB/s)", "", "(us)", "(GB/s)", "(GB/s)",
               "");
        fflush(stdout);
    }
    free(pids);
    free(hosts);
}

static void runAll(struct bench *b)
{
    const struct options *o = &b->opt;
    for (int ci = 0; ci < o->nColls; ci++) {
        enum coll c = (enum coll)o->colls[ci];
        if (o->nColls > 1 && b->rank == 0) {
            printf("# %s  type %s  redop %s  root %d\n", collNames[c], typeTable[o->type].name,
                   isReduction(c) ? "sum" : "none",
                   c == COLL_BROADCAST || c == COLL_REDUCE ? 0 : -1);
        }
        for (uint64_t size = o->minBytes;;) {
            struct test t;
            if (makeTest(b, c, size, &t)) {
                runTest(b, &t);
            }
            double next = o->stepFactor > 1 ? (double)size * o->stepFactor
                                            : (double)size + (double)o->stepBytes;
            if (next > (double)o->maxBytes) {
                break;
            }
            size = (uint64_t)next > size ? (uint64_t)next : size + 1;
        }
    }
}

int main(int argc, char **argv)
{
    struct bench b = {0};
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &b.rank);
    MPI_Comm_size(MPI_COMM_WORLD, &b.nranks);
    int rc = parseOptions(argc, argv, b.rank != 0, &b.opt);
    if (rc != 0) {
        MPI_Finalize();
        return rc < 0 ? 0 : rc;
    }
    if (b.opt.allocMem) {
        MPI_Aint bytes = (MPI_Aint)(b.opt.maxBytes + 64);
        if (MPI_Alloc_mem(bytes, MPI_INFO_NULL, &b.send) != MPI_SUCCESS ||
            MPI_Alloc_mem(bytes, MPI_INFO_NULL, &b.recv) != MPI_SUCCESS) {
            b.send = b.recv = NULL;
        }
    } else {
        b.send = malloc(b.opt.maxBytes + 64);
        b.recv = malloc(b.opt.maxBytes + 64);
    }
    if (b.send == NULL || b.recv == NULL) {
        fprintf(stderr, "mpi-coll: rank %d: cannot allocate 2 buffers of %" PRIu64 " bytes\n",
                b.rank, b.opt.maxBytes);
        MPI_Abort(MPI_COMM_WORLD, EXIT_WRONG);
    }
    printHeader(&b);
    runAll(&b);
    if (b.rank == 0) {
        printf("# Out of bounds values : 0 OK\n");
        printf("# Avg bus bandwidth    : %g \n", b.busbwRows > 0 ? b.busbwSum / b.busbwRows : 0);
        printf("#\n");
        if (b.totalWrong > 0) {
            printf("# %" PRId64 " wrong values: FAILED\n", b.totalWrong);
        }
        fflush(stdout);
    }
    if (b.opt.allocMem) {
        MPI_Free_mem(b.send);
        MPI_Free_mem(b.recv);
    } else {
        free(b.send);
        free(b.recv);
    }
    MPI_Finalize();
    return b.totalWrong > 0 ? EXIT_WRONG : 0;
}
