/*
 * loom-memplan — the memory planner of large-model training: model state per
 * rank under DDP and ZeRO, activations, and the pipeline bubble.
 *
 * Three independent questions, any of them in one call:
 *
 *   --params P --ranks N [--stage 0|1|2|3|all]
 *       Model state per rank for P parameters on N data-parallel ranks,
 *       mixed precision with Adam: 2 bytes of fp16/bf16 weight, 2 of
 *       gradient, 12 of fp32 master, momentum and variance (the ZeRO paper's
 *       K = 12), so 16 bytes a parameter:
 *         stage 0 (DDP)   16 P
 *         stage 1         4 P + 12 P/N      optimizer state sharded
 *         stage 2         2 P + 14 P/N      and gradients
 *         stage 3         16 P/N            and parameters
 *   --layers L --hidden D --heads H --seq S --batch B [--bytes b --a a --c c]
 *       Activations kept for backward: M_act = L b (a B S D + c B H S^2),
 *       a linear term in the sequence length and the attention scores'
 *       quadratic one. The defaults b = 2, a = 17, c = 2.5 give Korthikanti
 *       et al.'s 34 S B D + 5 H S^2 B bytes a layer (16-bit, no recomputation).
 *       With --checkpoint K (activation checkpointing in segments of K
 *       layers) only each segment's input (b B S D) is kept and one segment's
 *       layers are live at a time in backward: ceil(L/K) b B S D + K M_layer;
 *       K = sqrt(L) makes it smallest, about 2 sqrt(L) layers' worth.
 *   --stages p --microbatches m
 *       The pipeline bubble of GPipe / 1F1B schedules: (p - 1) / m of the
 *       ideal time.
 *
 * Sizes are printed in GB of 10^9 bytes. loom-train(1) prints the same
 * model-state formulas beside the bytes it measures.
 */
#include <ctype.h>
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define EXIT_USAGE 2
#define GB 1e9

struct plan {
    double params, ranks;
    int stage; /* 0..3, or -1: all */
    double layers, hidden, heads, seq, batch, bytes, a, c, checkpoint;
    double stages, microbatches;
    int haveState, haveAct, haveBubble;
};

static void usage(FILE *f)
{
    fprintf(f, "usage: loom-memplan --params P --ranks N [--stage 0|1|2|3|all]\n"
               "       loom-memplan --layers L --hidden D --heads H --seq S --batch B\n"
               "                    [--bytes b] [--a a] [--c c] [--checkpoint K]\n"
               "       loom-memplan --stages p --microbatches m\n"
               "  (the three may be combined; P takes K, M, B or T: 7.5B = 7.5e9)\n");
}

static int usageError(const char *what, const char *arg)
{
    fprintf(stderr, "loom-memplan: %s%s%s\n", what, arg ? " " : "", arg ? arg : "");
    usage(stderr);
    return EXIT_USAGE;
}

/* A positive number, with an optional K, M, B (or G) or T suffix of powers of 10^3. */
static int parseNumber(const char *s, double *out)
{
    static const struct {
        char suffix;
        double scale;
    } scales[] = {{'K', 1e3}, {'M', 1e6}, {'B', 1e9}, {'G', 1e9}, {'T', 1e12}};
    char *end;
    double v = strtod(s, &end);
    if (end == s)
        return -1;
    for (size_t i = 0; i < sizeof(scales) / sizeof(scales[0]); i++)
        if (toupper((unsigned char)*end) == scales[i].suffix) {
            v *= scales[i].scale;
            end++;
            break;
        }
    if (*end != '\0' || !(v > 0) || !isfinite(v))
        return -1;
    *out = v;
    return 0;
}

enum {
    OPT_PARAMS = 256,
    OPT_RANKS,
    OPT_STAGE,
    OPT_LAYERS,
    OPT_HIDDEN,
    OPT_HEADS,
    OPT_SEQ,
    OPT_BATCH,
    OPT_BYTES,
    OPT_A,
    OPT_C,
    OPT_STAGES,
    OPT_MICRO,
    OPT_CHECKPOINT
};

static const struct option longOptions[] = {{"params", required_argument, 0, OPT_PARAMS},
                                            {"ranks", required_argument, 0, OPT_RANKS},
                                            {"stage", required_argument, 0, OPT_STAGE},
                                            {"layers", required_argument, 0, OPT_LAYERS},
                                            {"hidden", required_argument, 0, OPT_HIDDEN},
                                            {"heads", required_argument, 0, OPT_HEADS},
                                            {"seq", required_argument, 0, OPT_SEQ},
                                            {"batch", required_argument, 0, OPT_BATCH},
                                            {"bytes", required_argument, 0, OPT_BYTES},
                                            {"a", required_argument, 0, OPT_A},
                                            {"c", required_argument, 0, OPT_C},
                                            {"stages", required_argument, 0, OPT_STAGES},
                                            {"microbatches", required_argument, 0, OPT_MICRO},
                                            {"checkpoint", required_argument, 0, OPT_CHECKPOINT},
                                            {"help", no_argument, 0, 'h'},
                                            {0, 0, 0, 0}};

/* Where each numeric option goes (--stage is not numeric). */
static double *target(struct plan *p, int c)
{
    double *const targets[] = {
        &p->params, &p->ranks, NULL,  &p->layers, &p->hidden, &p->heads,        &p->seq,
        &p->batch,  &p->bytes, &p->a, &p->c,      &p->stages, &p->microbatches, &p->checkpoint};
    return c >= OPT_PARAMS && c <= OPT_CHECKPOINT ? targets[c - OPT_PARAMS] : NULL;
}

static int parseOptions(int argc, char **argv, struct plan *p)
{
    int c;
    *p = (struct plan){.stage = -1, .bytes = 2, .a = 17, .c = 2.5};
    while ((c = getopt_long(argc, argv, "h", longOptions, NULL)) != -1) {
        double *t = target(p, c);
        if (c == 'h') {
            usage(stdout);
            exit(0);
        } else if (c == OPT_STAGE) {
            if (strcmp(optarg, "all") == 0)
                p->stage = -1;
            else if (strlen(optarg) == 1 && optarg[0] >= '0' && optarg[0] <= '3')
                p->stage = optarg[0] - '0';
            else
                return usageError("--stage wants 0, 1, 2, 3 or all, not", optarg);
        } else if (t == NULL) {
            return usageError("unknown option or missing value", NULL);
        } else if (parseNumber(optarg, t) != 0) {
            return usageError("not a positive number:", optarg);
        }
    }
    if (optind < argc)
        return usageError("unexpected argument", argv[optind]);
    p->haveState = p->params > 0 || p->ranks > 0;
    p->haveAct = p->layers > 0 || p->hidden > 0 || p->heads > 0 || p->seq > 0 || p->batch > 0;
    p->haveBubble = p->stages > 0 || p->microbatches > 0;
    if (p->haveState && !(p->params > 0 && p->ranks > 0))
        return usageError("model state needs both --params and --ranks", NULL);
    if (p->haveAct &&
        !(p->layers > 0 && p->hidden > 0 && p->heads > 0 && p->seq > 0 && p->batch > 0))
        return usageError("activations need --layers, --hidden, --heads, --seq and --batch", NULL);
    if (p->checkpoint > 0 && !p->haveAct)
        return usageError("--checkpoint goes with the activation options", NULL);
    if (p->haveBubble && !(p->stages > 0 && p->microbatches > 0))
        return usageError("the bubble needs both --stages and --microbatches", NULL);
    if (!p->haveState && !p->haveAct && !p->haveBubble)
        return usageError("nothing to plan: give --params and --ranks, the activation options, "
                          "or --stages and --microbatches",
                          NULL);
    return 0;
}

static void printState(const struct plan *p)
{
    static const char *const names[4] = {"DDP", "ZeRO-1", "ZeRO-2", "ZeRO-3"};
    static const char *const formulas[4] = {"16 P", "4 P + 12 P/N", "2 P + 14 P/N", "16 P/N"};
    double P = p->params, N = p->ranks;
    double bytes[4] = {16 * P, 4 * P + 12 * P / N, 2 * P + 14 * P / N, 16 * P / N};
    printf("model state per rank: P = %.0f parameters, N = %.0f ranks, mixed precision with "
           "Adam (2 + 2 + 12 = 16 bytes a parameter)\n",
           P, N);
    printf("  %-5s %-7s %-14s %14s\n", "stage", "name", "formula", "GB per rank");
    for (int s = 0; s < 4; s++)
        if (p->stage < 0 || p->stage == s)
            printf("  %-5d %-7s %-14s %14.3f\n", s, names[s], formulas[s], bytes[s] / GB);
}

static void printActivations(const struct plan *p)
{
    double lin = p->layers * p->bytes * p->a * p->batch * p->seq * p->hidden;
    double quad = p->layers * p->bytes * p->c * p->batch * p->heads * p->seq * p->seq;
    printf("activations: M_act = L*b*(a*B*S*D + c*B*H*S^2), L = %g, b = %g, a = %g, c = %g, "
           "B = %g, S = %g, D = %g, H = %g\n",
           p->layers, p->bytes, p->a, p->c, p->batch, p->seq, p->hidden, p->heads);
    printf("  %-30s %12.3f GB\n", "linear term L*b*a*B*S*D", lin / GB);
    printf("  %-30s %12.3f GB\n", "quadratic term L*b*c*B*H*S^2", quad / GB);
    printf("  %-30s %12.3f GB\n", "total", (lin + quad) / GB);
    if (p->checkpoint > 0) {
        double k = p->checkpoint < p->layers ? floor(p->checkpoint) : p->layers;
        double in = ceil(p->layers / k) * p->bytes * p->batch * p->seq * p->hidden;
        double live = (lin + quad) / p->layers * k;
        printf("checkpointing every %g layers: ceil(L/K)*b*B*S*D + K*(M_act/L) (bytes too, for "
               "small models)\n",
               k);
        printf("  %-30s %12.3f GB %16.0f B\n", "segment inputs", in / GB, in);
        printf("  %-30s %12.3f GB %16.0f B\n", "one segment's layers", live / GB, live);
        printf("  %-30s %12.3f GB %16.0f B\n", "total with checkpointing", (in + live) / GB,
               in + live);
        printf("  %-30s %12.3f GB %16.0f B\n", "without", (lin + quad) / GB, lin + quad);
    }
}

static void printBubble(const struct plan *p)
{
    printf("pipeline bubble: p = %g stages, m = %g microbatches, (p-1)/m = %.3f\n", p->stages,
           p->microbatches, (p->stages - 1) / p->microbatches);
}

int main(int argc, char **argv)
{
    struct plan p;
    int status = parseOptions(argc, argv, &p);
    if (status != 0)
        return status;
    if (p.haveState)
        printState(&p);
    if (p.haveAct)
        printActivations(&p);
    if (p.haveBubble)
        printBubble(&p);
    return 0;
}
