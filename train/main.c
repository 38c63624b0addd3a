/*
 * main.c — loom-train: options, the training loop, the per-step log, the
 * memory ledger, and the verdict of --check.
 *
 * Each rank is a process started by loomrun (or mpirun) that joins with
 * loomCommInitFromEnv. One step on every rank:
 *
 *   its batch (data.c) -> strategy step: forward, backward, gradient
 *   communication, Adam (ddp.c, zero.c, moe.c) -> AllReduce of [loss,
 *   squared gradient norm] -> log line (rank 0)
 *
 * Every --verify-every steps, and at the end, the ranks compare a hash of the
 * state each must hold bit for bit (AllGather of the hashes). At the end
 * rank 0 prints the timing, and the memory ledger: the largest figure over
 * ranks of each kind of memory, as allocated, beside the model-state formula
 * of the strategy. With --check the ranks gather their final weights, rank 0
 * trains the single-process reference (check.c) and compares, and
 * broadcasts the verdict, so every rank exits 0 only if the check holds.
 *
 * --elastic (DDP): a step that fails because a rank died is not the end.
 * The survivors ask loomCommGetFailedRanks who failed, make a smaller
 * communicator with loomCommShrink, re-divide the same global batch among
 * themselves, go back to the state saved before the step (the strategy's
 * regroup) and redo it; the pause is printed. The global batches stay those
 * of the original ranks, so --check compares with the same single-process
 * reference, which at the failed step holds the weights the survivors hold.
 * ZeRO and MoE keep a rank's shard of the state only on that rank: there a
 * lost rank ends the run with a line saying what was lost.
 *
 * --grow-file PATH (with --elastic, DDP): after a shrink by one rank, rank 0 writes a grow id
 * to PATH and the survivors wait in loomCommGrow for a replacement, started as loom-train
 * --join PATH with the job's options, which takes the last rank and gets the saved state of
 * the step to redo from rank 0 (the strategy's adopt); then all redo it at the first width.
 */
#include <getopt.h>
#include <limits.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "check.h"
#include "data.h"
#include "optim.h"

#define EXIT_FAILED 1
#define EXIT_USAGE 2

static void usage(FILE *f)
{
    fprintf(f,
            "usage: loomrun -n N loom-train [options]\n"
            "  --mode ddp|zero1|zero2|zero3|moe   parallelism (ddp)\n"
            "  --dtype fp32|bf16      parameters and gradients; bf16 keeps fp32 master weights "
            "(fp32)\n"
            "  --layers L --hidden D --ffn F --classes C   model size (4, 64, 4 D, 16)\n"
            "  --heads H --seq S      self-attention of H heads in every block, over "
            "sequences of S tokens (0: none, 8)\n"
            "  --batch B              tokens per rank per step (32; per replica with --tp/--pp)\n"
            "  --tp T                 tensor parallelism: heads and MLP columns over T ranks "
            "(1)\n"
            "  --pp P                 pipeline parallelism: blocks in P stages (1)\n"
            "  --sp S                 sequence parallelism: ring attention over S ranks (1)\n"
            "  --placement packed|spread   TP groups inside a host where they fit, or across "
            "(packed)\n"
            "  --checkpoint K         keep activations only at every K-th block, recompute "
            "in backward (0: all)\n"
            "  --microbatches M --schedule gpipe|1f1b   pipeline micro-batches (P) and "
            "schedule (1f1b)\n"
            "  --steps S              training steps (20)\n"
            "  --samples S            synthetic data set size (8192)\n"
            "  --seed X               data, teacher and initial weights (1)\n"
            "  --lr R                 Adam learning rate (0.001)\n"
            "  --bucket-mb M          DDP bucket size in MiB (25)\n"
            "  --no-overlap           DDP: AllReduce after backward instead of during it\n"
            "  --compare-overlap      DDP: alternate the two step by step and compare times\n"
            "  --experts E --top-k 1|2 --capacity-factor F --aux-weight A   MoE (8, 2, 1.25, "
            "0.01)\n"
            "  --check                also train a single-process reference and compare\n"
            "  --log-every K          print every K-th step (1)\n"
            "  --verify-every K       compare parameter hashes across ranks every K steps (10)\n"
            "  --elastic              go on without a rank that dies (ddp; see loom-train(1))\n"
            "  --grow-file PATH       with --elastic: after a loss, grow back through PATH\n"
            "  --join PATH            a replacement: join the job that writes PATH\n"
            "  --test-kill R:S        for tests: rank R SIGKILLs itself in step S\n"
            "  -h, --help\n");
}

static int usageError(const char *what, const char *arg)
{
    fprintf(stderr, "loom-train: %s%s%s\n", what, arg ? " " : "", arg ? arg : "");
    usage(stderr);
    return EXIT_USAGE;
}

static int parseLong(const char *s, long lo, long hi, long *out)
{
    char *end;
    long v = strtol(s, &end, 10);
    if (*s == '\0' || *end != '\0' || v < lo || v > hi)
        return -1;
    *out = v;
    return 0;
}

static int parseDouble(const char *s, double lo, double hi, double *out)
{
    char *end;
    double v = strtod(s, &end);
    if (*s == '\0' || *end != '\0' || !(v >= lo && v <= hi))
        return -1;
    *out = v;
    return 0;
}

enum {
    OPT_MODE = 256,
    OPT_DTYPE,
    OPT_LAYERS,
    OPT_HIDDEN,
    OPT_FFN,
    OPT_CLASSES,
    OPT_HEADS,
    OPT_SEQ,
    OPT_TP,
    OPT_PP,
    OPT_SP,
    OPT_CHECKPOINT,
    OPT_PLACEMENT,
    OPT_MICRO,
    OPT_SCHEDULE,
    OPT_BATCH,
    OPT_STEPS,
    OPT_SAMPLES,
    OPT_SEED,
    OPT_LR,
    OPT_BUCKET,
    OPT_NO_OVERLAP,
    OPT_COMPARE,
    OPT_EXPERTS,
    OPT_TOPK,
    OPT_CAPACITY,
    OPT_AUX,
    OPT_CHECK,
    OPT_LOG,
    OPT_VERIFY,
    OPT_ELASTIC,
    OPT_GROW_FILE,
    OPT_JOIN,
    OPT_TEST_KILL
};

static const struct option longOptions[] = {{"mode", required_argument, 0, OPT_MODE},
                                            {"dtype", required_argument, 0, OPT_DTYPE},
                                            {"layers", required_argument, 0, OPT_LAYERS},
                                            {"hidden", required_argument, 0, OPT_HIDDEN},
                                            {"ffn", required_argument, 0, OPT_FFN},
                                            {"classes", required_argument, 0, OPT_CLASSES},
                                            {"heads", required_argument, 0, OPT_HEADS},
                                            {"seq", required_argument, 0, OPT_SEQ},
                                            {"tp", required_argument, 0, OPT_TP},
                                            {"pp", required_argument, 0, OPT_PP},
                                            {"sp", required_argument, 0, OPT_SP},
                                            {"checkpoint", required_argument, 0, OPT_CHECKPOINT},
                                            {"placement", required_argument, 0, OPT_PLACEMENT},
                                            {"microbatches", required_argument, 0, OPT_MICRO},
                                            {"schedule", required_argument, 0, OPT_SCHEDULE},
                                            {"batch", required_argument, 0, OPT_BATCH},
                                            {"steps", required_argument, 0, OPT_STEPS},
                                            {"samples", required_argument, 0, OPT_SAMPLES},
                                            {"seed", required_argument, 0, OPT_SEED},
                                            {"lr", required_argument, 0, OPT_LR},
                                            {"bucket-mb", required_argument, 0, OPT_BUCKET},
                                            {"no-overlap", no_argument, 0, OPT_NO_OVERLAP},
                                            {"compare-overlap", no_argument, 0, OPT_COMPARE},
                                            {"experts", required_argument, 0, OPT_EXPERTS},
                                            {"top-k", required_argument, 0, OPT_TOPK},
                                            {"capacity-factor", required_argument, 0, OPT_CAPACITY},
                                            {"aux-weight", required_argument, 0, OPT_AUX},
                                            {"check", no_argument, 0, OPT_CHECK},
                                            {"log-every", required_argument, 0, OPT_LOG},
                                            {"verify-every", required_argument, 0, OPT_VERIFY},
                                            {"elastic", no_argument, 0, OPT_ELASTIC},
                                            {"grow-file", required_argument, 0, OPT_GROW_FILE},
                                            {"join", required_argument, 0, OPT_JOIN},
                                            {"test-kill", required_argument, 0, OPT_TEST_KILL},
                                            {"help", no_argument, 0, 'h'},
                                            {0, 0, 0, 0}};

static const char *const modeNames[] = {"ddp", "zero1", "zero2", "zero3", "moe"};

/* Options with a numeric value: where each goes and its range. */
static int setNumber(struct trainOptions *o, int c, const char *arg)
{
    const struct {
        int code;
        int *target;
        long lo, hi;
    } ints[] = {{OPT_LAYERS, &o->layers, 1, 1 << 12},
                {OPT_HIDDEN, &o->hidden, 1, 1 << 16},
                {OPT_FFN, &o->ffn, 1, 1 << 18},
                {OPT_CLASSES, &o->classes, 2, 1 << 16},
                {OPT_BATCH, &o->batch, 1, 1 << 20},
                {OPT_STEPS, &o->steps, 1, 1 << 24},
                {OPT_EXPERTS, &o->experts, 1, 1 << 12},
                {OPT_LOG, &o->logEvery, 1, 1 << 30},
                {OPT_HEADS, &o->heads, 0, 1 << 12},
                {OPT_SEQ, &o->seq, 1, 1 << 16},
                {OPT_TP, &o->tp, 1, 1 << 12},
                {OPT_PP, &o->pp, 1, 1 << 12},
                {OPT_SP, &o->sp, 1, 1 << 12},
                {OPT_CHECKPOINT, &o->checkpoint, 0, 1 << 12},
                {OPT_MICRO, &o->microbatches, 0, 1 << 20},
                {OPT_VERIFY, &o->verifyEvery, 0, 1 << 30}};
    const struct {
        int code;
        double *target, lo, hi;
    } reals[] = {{OPT_LR, &o->lr, 1e-9, 1.0},
                 {OPT_BUCKET, &o->bucketMb, 1e-6, 1e6},
                 {OPT_CAPACITY, &o->capacity, 1e-3, 1e3},
                 {OPT_AUX, &o->auxWeight, 0.0, 1e3}};
    long v;
    if (c == OPT_SAMPLES)
        return parseLong(arg, 1, 1L << 40, &o->samples);
    if (c == OPT_SEED) {
        if (parseLong(arg, 0, LONG_MAX, &v) != 0)
            return -1;
        o->seed = (uint64_t)v;
        return 0;
    }
    for (size_t i = 0; i < sizeof(reals) / sizeof(reals[0]); i++)
        if (reals[i].code == c)
            return parseDouble(arg, reals[i].lo, reals[i].hi, reals[i].target);
    for (size_t i = 0; i < sizeof(ints) / sizeof(ints[0]); i++)
        if (ints[i].code == c) {
            if (parseLong(arg, ints[i].lo, ints[i].hi, &v) != 0)
                return -1;
            *ints[i].target = (int)v;
            return 0;
        }
    return -1;
}

static int parseMode(const char *s, struct trainOptions *o)
{
    for (int m = 0; m < 5; m++)
        if (strcmp(s, modeNames[m]) == 0) {
            o->mode = (enum trainMode)m;
            return 0;
        }
    return -1;
}

static int parseKill(const char *s, struct trainOptions *o)
{
    char rank[32];
    const char *colon = strchr(s, ':');
    long r;
    if (colon == NULL || colon - s >= (long)sizeof(rank))
        return -1;
    memcpy(rank, s, (size_t)(colon - s));
    rank[colon - s] = '\0';
    if (parseLong(rank, 0, INT_MAX, &r) != 0 || parseLong(colon + 1, 1, 1L << 24, &o->testKillStep))
        return -1;
    o->testKillRank = (int)r;
    return 0;
}

/* What is wrong with the --tp, --pp and --sp options, or NULL. */
static const char *parallelError(const struct trainOptions *o)
{
    if (o->tp == 1 && o->pp == 1 && o->sp == 1)
        return NULL;
    if (o->mode == MODE_MOE)
        return "--tp, --pp and --sp take --mode ddp or zero1-3 across replicas";
    if (o->elastic)
        return "--tp, --pp and --sp do not go with --elastic";
    if (o->heads > 0 && o->heads % o->tp != 0)
        return "--tp must divide --heads";
    if (o->ffn % o->tp != 0 || o->hidden % o->tp != 0)
        return "--tp must divide --ffn and --hidden";
    if (o->pp > o->layers)
        return "--pp must be at most --layers";
    if (o->batch % o->microbatches != 0)
        return "--microbatches must divide --batch";
    if (o->heads > 0 && (o->batch / o->microbatches) % o->seq != 0)
        return "a micro-batch must hold whole sequences (--seq)";
    if (o->sp > 1 && (o->heads == 0 || o->seq % o->sp != 0))
        return "--sp needs --heads and must divide --seq";
    return NULL;
}

static int parseOptions(int argc, char **argv, struct trainOptions *o)
{
    int c, idx = 0;
    char what[64];
    *o = (struct trainOptions){.mode = MODE_DDP,
                               .layers = 4,
                               .hidden = 64,
                               .classes = 16,
                               .seq = 8,
                               .tp = 1,
                               .pp = 1,
                               .sp = 1,
                               .schedule = SCHEDULE_1F1B,
                               .batch = 32,
                               .steps = 20,
                               .samples = 8192,
                               .seed = 1,
                               .lr = 1e-3,
                               .bucketMb = 25,
                               .overlap = OVERLAP_ALWAYS,
                               .logEvery = 1,
                               .verifyEvery = 10,
                               .experts = 8,
                               .topK = 2,
                               .capacity = 1.25,
                               .auxWeight = 0.01,
                               .testKillRank = -1};
    while ((c = getopt_long(argc, argv, "h", longOptions, &idx)) != -1) {
        switch (c) {
        case OPT_MODE:
            if (parseMode(optarg, o) != 0)
                return usageError("--mode wants ddp, zero1, zero2, zero3 or moe, not", optarg);
            break;
        case OPT_DTYPE:
            if (strcmp(optarg, "fp32") != 0 && strcmp(optarg, "bf16") != 0)
                return usageError("--dtype wants fp32 or bf16, not", optarg);
            o->bf16 = strcmp(optarg, "bf16") == 0;
            break;
        case OPT_PLACEMENT:
            if (strcmp(optarg, "packed") != 0 && strcmp(optarg, "spread") != 0)
                return usageError("--placement wants packed or spread, not", optarg);
            o->placement = strcmp(optarg, "spread") == 0 ? PLACEMENT_SPREAD : PLACEMENT_PACKED;
            break;
        case OPT_SCHEDULE:
            if (strcmp(optarg, "gpipe") != 0 && strcmp(optarg, "1f1b") != 0)
                return usageError("--schedule wants gpipe or 1f1b, not", optarg);
            o->schedule = strcmp(optarg, "1f1b") == 0 ? SCHEDULE_1F1B : SCHEDULE_GPIPE;
            break;
        case OPT_TOPK:
            if (strcmp(optarg, "1") != 0 && strcmp(optarg, "2") != 0)
                return usageError("--top-k wants 1 or 2, not", optarg);
            o->topK = optarg[0] - '0';
            break;
        case OPT_NO_OVERLAP:
            o->overlap = OVERLAP_NEVER;
            break;
        case OPT_COMPARE:
            o->overlap = OVERLAP_ALTERNATE;
            break;
        case OPT_CHECK:
            o->check = 1;
            break;
        case OPT_ELASTIC:
            o->elastic = 1;
            break;
        case OPT_GROW_FILE:
            o->growFile = optarg;
            break;
        case OPT_JOIN:
            o->joinFile = optarg;
            o->elastic = 1;
            break;
        case OPT_TEST_KILL:
            if (parseKill(optarg, o) != 0)
                return usageError("--test-kill wants RANK:STEP (step from 1), not", optarg);
            break;
        case 'h':
            usage(stdout);
            exit(0);
        case '?':
            return usageError("unknown option or missing value", NULL);
        default:
            snprintf(what, sizeof(what), "--%s wants a number in its range, not",
                     longOptions[idx].name);
            if (setNumber(o, c, optarg) != 0)
                return usageError(what, optarg);
        }
    }
    if (optind < argc)
        return usageError("unexpected argument", argv[optind]);

    if (o->ffn == 0)
        o->ffn = 4 * o->hidden;
    if (o->mode == MODE_MOE && o->experts < o->topK)
        return usageError("--experts must be at least --top-k", NULL);
    if (o->heads > 0 && o->hidden % o->heads != 0)
        return usageError("--hidden must be a multiple of --heads", NULL);
    if (o->heads > 0 && o->batch % o->seq != 0)
        return usageError("--batch must be a multiple of --seq (whole sequences per rank)", NULL);
    if (o->microbatches == 0)
        o->microbatches = o->pp;
    const char *why = parallelError(o);
    if (why != NULL)
        return usageError(why, NULL);
    if (o->checkpoint > 0 && o->mode == MODE_MOE)
        return usageError("--checkpoint is for the dense model (not --mode moe)", NULL);
    if ((o->growFile || o->joinFile) && (!o->elastic || o->mode != MODE_DDP))
        return usageError("--grow-file and --join are for --elastic --mode ddp", NULL);
    if (o->heads > 0 && (o->mode == MODE_MOE || o->elastic))
        return usageError("--heads: attention is in the dense blocks of ddp and zero1-3, "
                          "without --elastic",
                          NULL);
    return 0;
}

/* ---- reporting ---- */

static int compareDouble(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(const double *v, int n)
{
    double *s = malloc((size_t)n * sizeof(*s));
    if (s == NULL || n == 0) {
        free(s);
        return 0.0;
    }
    memcpy(s, v, (size_t)n * sizeof(*s));
    qsort(s, (size_t)n, sizeof(*s), compareDouble);
    double m = n % 2 ? s[n / 2] : 0.5 * (s[n / 2 - 1] + s[n / 2]);
    free(s);
    return m;
}

static void printBytes(const char *what, double bytes, const char *extra)
{
    printf("  %-22s %14.0f B  %10.3f MB%s\n", what, bytes, bytes / 1e6, extra);
}

/*
 * --checkpoint: the activations against those without checkpointing and against
 * loom-memplan's estimate of both, and the time the recomputation took (rank 0's).
 */
static void printCheckpoint(const struct trainer *t, double measured)
{
    const struct trainOptions *o = t->opt;
    int K = o->checkpoint, L = t->actsBlocks, k = K < L ? K : L;
    printf("  activation checkpointing every %d blocks: %.0f B measured (%d of %d blocks' "
           "activations kept, and each segment's input); %.0f B without (the same buffers for "
           "every block), %.2fx less\n",
           K, measured, k, L, (double)t->actsWithout, (double)t->actsWithout / measured);
    if (o->heads > 0 && o->tp == 1 && o->sp == 1) {
        /* a = 16: per token x, u, y, LN_a(x), context (D each), qkv (3 D), the MLP's 2 x 4 D;
         * c = 1: the softmax weights; b = 4: activations are fp32 */
        double B = (double)t->actsRows / o->seq, S = o->seq, D = o->hidden, H = o->heads;
        double layer = 4.0 * (16.0 * B * S * D + B * H * S * S), in = 4.0 * B * S * D;
        double with = (double)((L + k - 1) / k) * in + k * layer;
        printf("  loom-memplan --layers %d --hidden %d --heads %d --seq %d --batch %g --bytes 4 "
               "--a 16 --c 1 --checkpoint %d: %.0f B with, %.0f B without (measured/estimate "
               "%.3f and %.3f; the estimate leaves out the norms' statistics and the head)\n",
               L, o->hidden, o->heads, o->seq, B, K, with, L * layer, measured / with,
               (double)t->actsWithout / (L * layer));
    }
    printf("  recomputation: %.3f ms a step, %.1f%% more forward time (forward %.3f ms a "
           "step)\n",
           (double)t->recomputeNs / 1e6 / o->steps,
           t->forwardNs > 0 ? 100.0 * (double)t->recomputeNs / (double)t->forwardNs : 0.0,
           (double)t->forwardNs / 1e6 / o->steps);
}

/* The largest figure of each kind over ranks, beside the strategy's formula. */
static loomResult_t printLedger(struct trainer *t, const struct strategy *s)
{
    uint64_t v[LEDGER_KINDS], mx[LEDGER_KINDS];
    for (int k = 0; k < LEDGER_KINDS; k++)
        v[k] = t->ledger.peak[k];
    uint64_t t0 = nowNs();
    LOOMCHECK(trainComm(t, "loomAllReduce",
                        loomAllReduce(v, mx, LEDGER_KINDS, loomUint64, loomMax, t->comm, NULL),
                        t0));
    if (t->rank != 0)
        return loomSuccess;
    const struct trainOptions *o = t->opt;
    double state = (double)(mx[LEDGER_PARAMS] + mx[LEDGER_GRADS] + mx[LEDGER_OPTIM]);
    char extra[160];
    printf("memory ledger, bytes per rank (largest over %d ranks), measured from the "
           "allocations; Psi = %zu parameters, %s: %s\n",
           t->nranks, s->psi, o->bf16 ? "bf16" : "fp32",
           o->bf16 ? "2 + 2 + 12 bytes a parameter (bf16 weight and gradient; fp32 master, "
                     "momentum, variance)"
                   : "4 + 4 + 8 bytes a parameter (fp32 weight and gradient; momentum, "
                     "variance)");
    printBytes("parameters", (double)mx[LEDGER_PARAMS], "");
    printBytes("gradients", (double)mx[LEDGER_GRADS], "");
    printBytes("optimizer state", (double)mx[LEDGER_OPTIM], "");
    snprintf(extra, sizeof(extra), "   formula %s = %.0f B, measured/formula %.4f", s->formula,
             s->formulaBytes, state / s->formulaBytes);
    printBytes("model state", state, extra);
    printBytes("activations", (double)mx[LEDGER_ACTS], "");
    if (o->checkpoint > 0)
        printCheckpoint(t, (double)mx[LEDGER_ACTS]);
    printBytes("peak temporaries", (double)mx[LEDGER_TEMP],
               "   (communication and gathered-unit buffers, fp32 views, backward work)");
    return loomSuccess;
}

/* ---- the run ---- */

struct run {
    struct trainer t;
    struct trainOptions o;
    struct strategy s;
    struct dataSet data;
    float *x;
    int *labels;
    struct runRecord rec;
    double *stepMs, *commShare;
    int mismatches;
    int rank0, nranks0; /* before any failure */
    int replicas;       /* data-parallel replicas: nranks0 / (tp x pp); each has its batch */
    long failedStep;    /* --elastic: the first step redone after a failure, -1 if none */
    long startStep;     /* --join: the step the replacement starts at */
};

/* Collective: do all ranks hold the same hash? */
static loomResult_t verifyHashes(struct run *r, uint64_t hash, int *same)
{
    uint64_t *all = calloc((size_t)r->t.nranks, sizeof(*all));
    if (all == NULL)
        return trainFail(&r->t, loomSystemError, "out of memory");
    uint64_t t0 = nowNs();
    loomResult_t res = trainComm(&r->t, "loomAllGather",
                                 loomAllGather(&hash, all, 1, loomUint64, r->t.comm, NULL), t0);
    *same = 1;
    for (int i = 0; res == loomSuccess && i < r->t.nranks; i++)
        *same &= all[i] == all[0];
    free(all);
    return res;
}

static loomResult_t trainStep(struct run *r, long step)
{
    struct trainer *t = &r->t;
    struct stepStats st = {0, 0, 0};
    uint64_t start = nowNs(), comm0 = t->commNs;
    LOOMCHECK(dataRows(&r->data, step, t->rowLo, t->rows, r->x, r->labels));
    if (r->o.elastic && r->s.save != NULL)
        r->s.save(r->s.self);
    if (r->rank0 == r->o.testKillRank && step + 1 == r->o.testKillStep) {
        printf("loom-train: rank %d: --test-kill: SIGKILL in step %ld\n", r->rank0, step + 1);
        raise(SIGKILL);
    }
    LOOMCHECK(r->s.step(r->s.self, step + 1, r->x, r->labels, &st));
    double share = (double)t->rows / (double)t->globalRows;
    double local[3] = {st.loss * share, st.gradNormSq, st.dropped / t->nranks}, global[3];
    uint64_t t0 = nowNs();
    LOOMCHECK(trainComm(t, "loomAllReduce",
                        loomAllReduce(local, global, 3, loomFloat64, loomSum, t->comm, NULL), t0));
    double ms = (double)(nowNs() - start) / 1e6;
    r->rec.loss[step] = global[0];
    r->rec.gradNorm[step] = sqrt(global[1]);
    r->stepMs[step] = ms;
    r->commShare[step] = (double)(t->commNs - comm0) / 1e6 / ms;
    if (t->rank == 0 && ((step + 1) % r->o.logEvery == 0 || step == 0 || step + 1 == r->o.steps)) {
        char dropped[32] = "";
        if (r->o.mode == MODE_MOE)
            snprintf(dropped, sizeof(dropped), "  dropped %4.1f%%", 100.0 * global[2]);
        printf("step %5ld  loss %.6f  tokens/s %10.0f  comm %5.1f%%  (%.3f ms)%s\n", step + 1,
               global[0], (double)t->globalRows / (ms / 1e3), 100.0 * r->commShare[step], ms,
               dropped);
    }
    if (r->s.fingerprint != NULL && r->o.verifyEvery > 0 && (step + 1) % r->o.verifyEvery == 0) {
        int same;
        LOOMCHECK(verifyHashes(r, r->s.fingerprint(r->s.self), &same));
        if (!same) {
            r->mismatches++;
            if (t->rank == 0)
                printf("verify: step %ld: the ranks' parameters DIFFER\n", step + 1);
        }
    }
    return loomSuccess;
}

static void printHeader(const struct run *r)
{
    const struct trainOptions *o = &r->o;
    if (r->t.rank != 0)
        return;
    char attn[64] = "";
    if (o->heads > 0)
        snprintf(attn, sizeof(attn), ", attention of %d heads over sequences of %d", o->heads,
                 o->seq);
    printf("loom-train: mode %s, dtype %s, %d ranks; model: %d blocks, hidden %d, ffn %d%s, %d "
           "classes; Psi = %zu parameters\n",
           modeNames[o->mode], o->bf16 ? "bf16" : "fp32", r->t.nranks, o->layers, o->hidden, o->ffn,
           attn, o->classes, r->s.psi);
    printf("data: %ld samples from a random teacher (seed %llu), DistributedSampler shards; "
           "batch %d per %s, %d tokens a step; Adam lr %g\n",
           o->samples, (unsigned long long)o->seed, o->batch,
           r->replicas < r->t.nranks ? "replica" : "rank", o->batch * r->replicas, o->lr);
    printf("comm: the share of each step the training thread spent in or waiting for Loom "
           "calls (exposed communication)\n");
}

/* Median and fastest time, and median communication share, of steps first, first + stride, ... */
static void stepTimes(const struct run *r, int first, int stride, double *med, double *fastest,
                      double *share)
{
    double *ms = calloc((size_t)r->o.steps, sizeof(*ms));
    double *comm = calloc((size_t)r->o.steps, sizeof(*comm));
    int n = 0;
    *med = *fastest = *share = 0.0;
    if (ms != NULL && comm != NULL) {
        *fastest = r->stepMs[first];
        for (int i = first; i < r->o.steps; i += stride, n++) {
            ms[n] = r->stepMs[i];
            comm[n] = r->commShare[i];
            *fastest = ms[n] < *fastest ? ms[n] : *fastest;
        }
        *med = median(ms, n);
        *share = median(comm, n);
    }
    free(ms);
    free(comm);
}

static void printTiming(const struct run *r)
{
    int first = r->o.steps > 1 ? 1 : 0;
    double ms, fastest, share, tokens = (double)r->t.globalRows;
    if (r->t.rank != 0)
        return;
    if (r->o.mode == MODE_DDP && r->o.overlap == OVERLAP_ALTERNATE && r->o.steps >= 4) {
        double noMs, noFastest, noShare;
        stepTimes(r, 2, 2, &ms, &fastest, &share); /* steps 3, 5, ...: overlapped */
        stepTimes(r, 3, 2, &noMs, &noFastest, &noShare);
        printf("time: overlapped steps (3, 5, ...): median %.3f ms (fastest %.3f ms), "
               "communication %.1f%%\n",
               ms, fastest, 100.0 * share);
        printf("time: --no-overlap steps (4, 6, ...): median %.3f ms (fastest %.3f ms), "
               "communication %.1f%%\n",
               noMs, noFastest, 100.0 * noShare);
        printf("time: overlap %s %.1f%% of a --no-overlap step (medians)\n",
               ms <= noMs ? "saves" : "costs", 100.0 * fabs(noMs - ms) / noMs);
        return;
    }
    stepTimes(r, first, 1, &ms, &fastest, &share);
    printf("time: median step %.3f ms (fastest %.3f ms) over steps %d..%d, %.0f tokens/s, "
           "communication %.1f%% (rank 0)\n",
           ms, fastest, first + 1, r->o.steps, tokens / (ms / 1e3), 100.0 * share);
}

/* --elastic: the losses from the redone step on, against the reference, which at that step
 * holds the weights the survivors went back to (checkCompare bounds them too). */
static int checkAfterFailure(const struct run *r, const struct runRecord *ref)
{
    const struct trainOptions o = r->o;
    long from = r->failedStep;
    double worst = 0.0;
    for (long s = from; s < o.steps; s++) {
        double d = fabs(r->rec.loss[s] - ref->loss[s]) / fabs(ref->loss[s]);
        worst = d > worst || d != d ? d : worst;
    }
    double tol = o.bf16 || checkNetCompressed() ? 2e-3 : 1e-6;
    int ok = worst <= tol;
    printf("check: after the failure, steps %ld..%d on %d ranks: max |diff|/loss %.3e against the "
           "reference from the same weights at step %ld, tolerance %.2g (that of every step)  %s\n",
           from + 1, o.steps, r->t.nranks, worst, from + 1, tol, ok ? "ok" : "EXCEEDED");
    return ok;
}

/* Collective: final weights everywhere, identical on every rank; rank 0 compares. */
static loomResult_t runCheck(struct run *r, int *ok)
{
    struct runRecord ref;
    int same;
    int32_t verdict = 0;
    LOOMCHECK(r->s.collect(r->s.self, &r->rec.final));
    uint64_t h = hashBytes(HASH_INIT, r->rec.final.weights, r->rec.final.nweights * 4);
    LOOMCHECK(verifyHashes(r, h, &same));
    if (r->t.rank == 0) {
        printf("check: final weights gathered on every rank are %s\n",
               same ? "bitwise identical across ranks" : "NOT identical across ranks");
        if (referenceRun(&r->o, r->replicas, &ref) == loomSuccess) {
            verdict = same && checkCompare(&r->o, r->replicas, &ref, &r->rec);
            if (r->failedStep >= 0)
                verdict &= checkAfterFailure(r, &ref);
            runRecordFree(&ref);
        }
        /* before the broadcast: a rank that exits first may make the launcher stop this one */
        printf("check: %s\n", verdict && r->mismatches == 0 ? "PASSED" : "FAILED");
    }
    uint64_t t0 = nowNs();
    LOOMCHECK(trainComm(&r->t, "loomBroadcast",
                        loomBroadcast(&verdict, &verdict, 1, loomInt32, 0, r->t.comm, NULL), t0));
    *ok = verdict;
    return loomSuccess;
}

/*
 * --grow-file/--join: what rank 0 of the survivors writes for the replacement (to PATH.tmp,
 * then renamed to PATH, so the replacement never reads half of it).
 */
#define GROW_NOTE_MAGIC "LOOMGRW1"
struct growNote {
    char magic[8];
    int32_t nranks, rank; /* of the grown communicator, and the replacement's */
    int64_t step;         /* the step everyone redoes (from 0) */
    loomUniqueId id;      /* loomCommGetUniqueId's */
};

static int growNoteWrite(const char *path, const struct growNote *note)
{
    char tmp[4096];
    snprintf(tmp, sizeof(tmp), "%s.tmp", path);
    FILE *f = fopen(tmp, "wb");
    int ok = f != NULL && fwrite(note, sizeof(*note), 1, f) == 1;
    if (f != NULL)
        ok &= fclose(f) == 0;
    return ok && rename(tmp, path) == 0 ? 0 : -1;
}

/* The replacement: waits for the note (up to 120 s), joins with loomCommGrow. */
static loomResult_t joinGrow(struct run *r)
{
    struct trainer *t = &r->t;
    struct growNote note;
    uint64_t start = nowNs();
    for (int waited = 0;; waited += 50) {
        FILE *f = fopen(r->o.joinFile, "rb");
        int got = f != NULL && fread(&note, sizeof(note), 1, f) == 1;
        if (f != NULL)
            fclose(f);
        if (got && memcmp(note.magic, GROW_NOTE_MAGIC, 8) == 0)
            break;
        if (waited >= 120000)
            return trainFail(t, loomTimeout, "--join: no grow note in %s within 120 s",
                             r->o.joinFile);
        struct timespec ts = {0, 50 * 1000000L};
        nanosleep(&ts, NULL);
    }
    unlink(r->o.joinFile); /* the note serves one replacement, as its id serves one grow */
    t->rank = note.rank;
    loomResult_t res = loomCommGrow(NULL, note.nranks, &note.id, note.rank, &t->comm, NULL);
    if (res != loomSuccess)
        return trainFail(t, res, "--join: loomCommGrow: %s", loomGetLastError(NULL));
    r->startStep = note.step;
    printf("elastic: rank %d joined a job of %d ranks through %s at step %lld; %.3f s from "
           "reading the note to the grown communicator\n",
           note.rank, note.nranks, r->o.joinFile, (long long)note.step + 1,
           (double)(nowNs() - start) / 1e9);
    return loomSuccess;
}

static loomResult_t runCreate(struct run *r)
{
    struct trainer *t = &r->t;
    loomResult_t res = r->o.joinFile ? joinGrow(r) : loomCommInitFromEnv(&t->comm);
    if (res != loomSuccess && r->o.joinFile)
        return res;
    if (res != loomSuccess) {
        fprintf(stderr, "loom-train: loomCommInitFromEnv: %s: %s (start it with loomrun)\n",
                loomGetErrorString(res), loomGetLastError(NULL));
        return res;
    }
    loomCommUserRank(t->comm, &t->rank);
    loomCommCount(t->comm, &t->nranks);
    r->rank0 = t->rank;
    r->nranks0 = t->nranks;
    r->failedStep = -1;
    int group = r->o.tp * r->o.pp * r->o.sp;
    if (t->nranks % group != 0)
        return trainFail(t, loomInvalidArgument,
                         "%d ranks are not a multiple of --tp x --pp x --sp = %d", t->nranks,
                         group);
    r->replicas = t->nranks / group;
    t->rows = r->o.batch;
    t->rowLo = (long)(t->rank / group) * r->o.batch;
    t->globalRows = (long)r->replicas * r->o.batch;
    t->opt = &r->o;
    LOOMCHECK(dataInit(&r->data, r->o.hidden, r->o.classes, r->o.samples, r->o.batch, r->replicas,
                       r->o.seed));
    r->x = calloc((size_t)r->o.batch * r->o.hidden, sizeof(float));
    r->labels = calloc((size_t)r->o.batch, sizeof(int));
    r->rec.loss = calloc((size_t)r->o.steps, sizeof(double));
    r->rec.gradNorm = calloc((size_t)r->o.steps, sizeof(double));
    r->stepMs = calloc((size_t)r->o.steps, sizeof(double));
    r->commShare = calloc((size_t)r->o.steps, sizeof(double));
    if (r->x == NULL || r->labels == NULL || r->rec.loss == NULL || r->rec.gradNorm == NULL ||
        r->stepMs == NULL || r->commShare == NULL)
        return trainFail(t, loomSystemError, "out of memory");
    if (group > 1)
        return parCreate(t, &r->s);
    switch (r->o.mode) {
    case MODE_DDP:
        LOOMCHECK(ddpCreate(t, &r->s));
        return r->o.joinFile ? r->s.adopt(r->s.self) : loomSuccess;
    case MODE_MOE:
        return moeCreate(t, &r->s);
    default:
        return zeroCreate(t, (int)r->o.mode - MODE_ZERO1 + 1, &r->s);
    }
}

static void runDestroy(struct run *r)
{
    if (r->s.destroy != NULL)
        r->s.destroy(r->s.self);
    if (r->t.comm != NULL)
        loomCommDestroy(r->t.comm);
    dataFree(&r->data);
    runRecordFree(&r->rec);
    free(r->x);
    free(r->labels);
    free(r->stepMs);
    free(r->commShare);
}

/* ---- --elastic ---- */

static void rankList(const int *ranks, int n, char *buf, size_t len)
{
    size_t used = 0;
    buf[0] = '\0';
    for (int i = 0; i < n && used + 12 < len; i++)
        used += (size_t)snprintf(buf + used, len - used, "%s%d", i ? ", " : "", ranks[i]);
}

/* Who failed, as this rank sees it; waits up to 10 s for a failure to show. 0 or -1. */
static int elasticFailed(loomComm_t comm, int *failed, int *n)
{
    for (int waited = 0; waited < 10000; waited += 10) {
        if (loomCommGetFailedRanks(comm, failed, n) == loomSuccess && *n > 0)
            return 0;
        struct timespec ts = {0, 10 * 1000000L};
        nanosleep(&ts, NULL);
    }
    return -1;
}

/*
 * A sharded mode cannot go on: rank 0 of the survivors says what went with the failed
 * ranks. They shrank first, so that all of them agree on who failed before any stops.
 */
static loomResult_t elasticLost(const struct run *r, const char *who, long step)
{
    static const char *const what[] = {
        "", "its shard of the optimizer state", "its shards of the gradients and optimizer state",
        "its shards of the parameters, gradients and optimizer state",
        "its experts of every MoE layer and their optimizer state"};
    if (r->t.rank == 0)
        printf("elastic: rank %s failed in step %ld; in mode %s each rank holds %s (1/%d of it) "
               "and nobody else does, so that part of the model is lost; without a checkpoint "
               "(loom-train keeps none) this run cannot go on: stopping\n",
               who, step + 1, modeNames[r->o.mode], what[r->o.mode], r->nranks0);
    return loomRemoteError;
}

/* Makes the communicator of the ranks left; tries again if ranks disagreed or another died. */
static loomResult_t elasticShrink(struct run *r, long step, loomComm_t *newcomm, char *who,
                                  size_t len)
{
    loomComm_t comm = r->t.comm;
    int *failed = calloc((size_t)r->t.nranks, sizeof(*failed)), n = 0;
    loomResult_t res = loomRemoteError;
    if (failed == NULL)
        return trainFail(&r->t, loomSystemError, "out of memory");
    for (int attempt = 0; attempt < 3; attempt++) {
        if (elasticFailed(comm, failed, &n) != 0) {
            trainFail(&r->t, res, "elastic: step %ld failed, but no rank is known to have failed",
                      step + 1);
            break;
        }
        rankList(failed, n, who, len);
        res = loomCommShrink(comm, failed, n, newcomm, NULL, LOOM_SHRINK_ABORT);
        if (res == loomSuccess)
            break;
        trainFail(&r->t, res, "elastic: loomCommShrink without rank %s: %s%s", who,
                  loomGetLastError(comm),
                  res == loomInvalidUsage || res == loomRemoteError ? "; trying again" : "");
        if (res != loomInvalidUsage && res != loomRemoteError)
            break;
    }
    free(failed);
    return res;
}

/* This rank's share of the global batch on t->comm. */
static loomResult_t elasticRows(struct run *r)
{
    struct trainer *t = &r->t;
    t->rowLo = t->globalRows * t->rank / t->nranks;
    t->rows = (int)(t->globalRows * (t->rank + 1) / t->nranks - t->rowLo);
    float *x = realloc(r->x, (size_t)t->rows * r->o.hidden * sizeof(float));
    int *labels = realloc(r->labels, (size_t)t->rows * sizeof(int));
    r->x = x ? x : r->x;
    r->labels = labels ? labels : r->labels;
    if (x == NULL || labels == NULL)
        return trainFail(t, loomSystemError, "out of memory");
    return loomSuccess;
}

/*
 * --grow-file, after a shrink by one rank: rank 0 makes a grow id and writes it to the file
 * for a replacement (loom-train --join), and all grow back to the first width; the
 * replacement gets the state of the step to redo from rank 0. If no replacement comes within
 * LOOM_TIMEOUT, the survivors go on as they are.
 */
static loomResult_t elasticGrow(struct run *r, long step, uint64_t errAt)
{
    struct trainer *t = &r->t;
    struct growNote note = {.nranks = r->nranks0, .rank = t->nranks, .step = step};
    loomComm_t grown;
    int coordinator = t->rank == 0;
    memcpy(note.magic, GROW_NOTE_MAGIC, 8);
    if (coordinator) {
        LOOMCHECK(
            trainComm(t, "loomCommGetUniqueId", loomCommGetUniqueId(t->comm, &note.id), nowNs()));
        if (growNoteWrite(r->o.growFile, &note) != 0)
            return trainFail(t, loomSystemError, "elastic: cannot write %s", r->o.growFile);
        printf("elastic: waiting for a replacement as rank %d: loom-train --join %s\n", t->nranks,
               r->o.growFile);
    }
    loomResult_t res =
        loomCommGrow(t->comm, r->nranks0, coordinator ? &note.id : NULL, -1, &grown, NULL);
    if (res != loomSuccess) {
        if (coordinator)
            printf("elastic: no replacement joined (%s); going on with %d ranks\n",
                   loomGetLastError(t->comm), t->nranks);
        return loomSuccess;
    }
    loomCommDestroy(t->comm);
    t->comm = grown;
    loomCommUserRank(t->comm, &t->rank);
    loomCommCount(t->comm, &t->nranks);
    LOOMCHECK(elasticRows(r));
    LOOMCHECK(r->s.adopt(r->s.self));
    if (t->rank == 0)
        printf("elastic: grew back to %d ranks (the replacement is rank %d); they redo step %ld; "
               "%.3f s from the error\n",
               t->nranks, t->nranks - 1, step + 1, (double)(nowNs() - errAt) / 1e9);
    return loomSuccess;
}

/* After step `step` failed (at errAt): shrink, re-divide the global batch, redo the step. */
static loomResult_t elasticRecover(struct run *r, long step, uint64_t errAt)
{
    struct trainer *t = &r->t;
    loomComm_t newcomm;
    char who[128];
    LOOMCHECK(elasticShrink(r, step, &newcomm, who, sizeof(who)));
    loomCommDestroy(t->comm);
    t->comm = newcomm;
    loomCommUserRank(t->comm, &t->rank);
    loomCommCount(t->comm, &t->nranks);
    if (r->s.regroup == NULL)
        return elasticLost(r, who, step);
    LOOMCHECK(elasticRows(r));
    LOOMCHECK(r->s.regroup(r->s.self));
    if (r->failedStep < 0)
        r->failedStep = step;
    if (t->rank == 0)
        printf("elastic: rank %s failed in step %ld; %d ranks redo it from the state saved "
               "before it and go on, %ld..%ld tokens each of the same global batch of %ld; pause "
               "%.3f s (from the error to the new communicator)\n",
               who, step + 1, t->nranks, t->globalRows / t->nranks,
               (t->globalRows + t->nranks - 1) / t->nranks, t->globalRows,
               (double)(nowNs() - errAt) / 1e9);
    if (r->o.growFile != NULL && t->nranks == r->nranks0 - 1)
        return elasticGrow(r, step, errAt);
    return loomSuccess;
}

static loomResult_t runTrain(struct run *r, int *ok)
{
    printHeader(r);
    for (long step = r->startStep, recoveries = 0; step < r->o.steps;) {
        loomResult_t res = trainStep(r, step);
        if (res == loomSuccess) {
            step++;
            continue;
        }
        if (!r->o.elastic || recoveries++ == r->nranks0 - 1)
            return res;
        LOOMCHECK(elasticRecover(r, step, nowNs())); /* and the loop redoes the step */
    }
    int same;
    if (r->s.fingerprint != NULL) {
        LOOMCHECK(verifyHashes(r, r->s.fingerprint(r->s.self), &same));
        r->mismatches += !same;
        if (r->t.rank == 0)
            printf("verify: the parameters every rank holds are %s after step %d\n",
                   r->mismatches ? "NOT bitwise identical (see above)" : "bitwise identical",
                   r->o.steps);
    } else if (r->t.rank == 0) {
        printf("verify: every parameter is sharded, none replicated; --check compares the "
               "gathered weights across ranks\n");
    }
    printTiming(r);
    if (r->s.report != NULL)
        LOOMCHECK(r->s.report(r->s.self));
    LOOMCHECK(printLedger(&r->t, &r->s));
    *ok = r->mismatches == 0;
    if (r->o.check) {
        int checked;
        LOOMCHECK(runCheck(r, &checked));
        *ok &= checked;
    }
    return loomSuccess;
}

int main(int argc, char **argv)
{
    struct run r;
    int ok = 0, status;
    memset(&r, 0, sizeof(r));
    status = parseOptions(argc, argv, &r.o);
    if (status != 0)
        return status;
    setvbuf(stdout, NULL, _IOLBF, 0);
    loomResult_t res = runCreate(&r);
    if (res == loomSuccess)
        res = runTrain(&r, &ok);
    if (res != loomSuccess && r.t.comm != NULL) {
        loomCommAbort(r.t.comm);
        r.t.comm = NULL;
    }
    runDestroy(&r);
    return res == loomSuccess && ok ? 0 : EXIT_FAILED;
}
