/*
 * tuner.c — the cost model that picks algorithm, chunk size and channels.
 *
 * PROVISIONAL: the model is filled in after measurement.
 */
#include <ctype.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "debug.h"
#include "param.h"
#include "tuner.h"

#define ALGO_BIT(a) (1u << (a))
#define ALGO_USER (ALGO_BIT(LOOM_ALGO_RING) | ALGO_BIT(LOOM_ALGO_TREE))
#define ALGO_EVERY (ALGO_USER | ALGO_BIT(LOOM_ALGO_DIRECT))

static const char *const algoNames[LOOM_ALGO_NUM] = {"ring", "tree", "direct"};

/* What each collective can run as, and what it runs as when nothing else is allowed. */
static const uint32_t collAlgos[LOOM_COLL_NUM] = {
    [LOOM_COLL_BROADCAST] = ALGO_USER,
    [LOOM_COLL_REDUCE] = ALGO_USER,
    [LOOM_COLL_ALLREDUCE] = ALGO_USER,
    [LOOM_COLL_ALLGATHER] = ALGO_BIT(LOOM_ALGO_RING),
    [LOOM_COLL_REDUCESCATTER] = ALGO_BIT(LOOM_ALGO_RING),
    [LOOM_COLL_ALLTOALL] = ALGO_BIT(LOOM_ALGO_DIRECT),
    [LOOM_COLL_ALLTOALLV] = ALGO_BIT(LOOM_ALGO_DIRECT),
    [LOOM_COLL_SEND] = ALGO_BIT(LOOM_ALGO_DIRECT),
    [LOOM_COLL_RECV] = ALGO_BIT(LOOM_ALGO_DIRECT),
};

static const char *const collNames[LOOM_COLL_NUM] = {"Broadcast", "Reduce",        "AllReduce",
                                                     "AllGather", "ReduceScatter", "AlltoAll",
                                                     "AlltoAllv", "Send",          "Recv"};

const char *tunerAlgoName(loomAlgo_t algo)
{
    return (unsigned)algo < LOOM_ALGO_NUM ? algoNames[algo] : "?";
}

/* ---- LOOM_ALGO ---- */

/* Collective names of LOOM_ALGO items, and the collectives each covers. */
static const struct {
    const char *name;
    loomColl_t colls[2];
    int ncolls;
} algoColls[] = {
    {"allreduce", {LOOM_COLL_ALLREDUCE}, 1},
    {"broadcast", {LOOM_COLL_BROADCAST}, 1},
    {"reduce", {LOOM_COLL_REDUCE}, 1},
    {"allgather", {LOOM_COLL_ALLGATHER}, 1},
    {"reducescatter", {LOOM_COLL_REDUCESCATTER}, 1},
    {"alltoall", {LOOM_COLL_ALLTOALL, LOOM_COLL_ALLTOALLV}, 2},
    {"sendrecv", {LOOM_COLL_SEND, LOOM_COLL_RECV}, 2},
};

/* NCCL algorithms Loom does not have: accepted in a list (so NCCL settings carry over), never
 * chosen. */
static const char *const ncclOnly[] = {"collnet", "collnetdirect", "collnetchain",
                                       "nvls",    "nvlstree",      "pat"};

static void trimCopy(char *dst, size_t size, const char *s, size_t len)
{
    while (len > 0 && isspace((unsigned char)*s))
        s++, len--;
    while (len > 0 && isspace((unsigned char)s[len - 1]))
        len--;
    if (len >= size)
        len = size - 1;
    memcpy(dst, s, len);
    dst[len] = '\0';
}

/* One algorithm list ("ring,tree" or "^tree") into a mask; -1 on an unknown name. */
static int parseList(const char *list, uint32_t *mask, char *why, size_t whyLen)
{
    int exclude = list[0] == '^';
    const char *p = list + exclude;
    uint32_t m = 0;
    for (;;) {
        const char *end = strchr(p, ',');
        size_t len = end ? (size_t)(end - p) : strlen(p);
        char word[32];
        trimCopy(word, sizeof(word), p, len);
        int known = 0;
        for (int a = 0; a < LOOM_ALGO_NUM && !known; a++)
            if (ALGO_USER & ALGO_BIT(a) && strcasecmp(word, algoNames[a]) == 0)
                m |= ALGO_BIT(a), known = 1;
        for (size_t i = 0; i < sizeof(ncclOnly) / sizeof(ncclOnly[0]) && !known; i++)
            known = strcasecmp(word, ncclOnly[i]) == 0;
        if (!known) {
            snprintf(why, whyLen, "'%s' is not an algorithm (ring, tree)", word);
            return -1;
        }
        if (end == NULL)
            break;
        p = end + 1;
    }
    *mask = (exclude ? ALGO_USER & ~m : m) | ALGO_BIT(LOOM_ALGO_DIRECT);
    return 0;
}

/* One item, "list" or "collective:list", applied to allowed[]. */
static int parseItem(const char *item, uint32_t allowed[LOOM_COLL_NUM], char *why, size_t whyLen)
{
    const char *colon = strchr(item, ':');
    const char *list = colon ? colon + 1 : item;
    char name[32], words[128];
    uint32_t mask;
    trimCopy(words, sizeof(words), list, strlen(list));
    if (parseList(words, &mask, why, whyLen) != 0)
        return -1;
    if (colon == NULL) {
        for (int c = 0; c < LOOM_COLL_NUM; c++)
            allowed[c] = mask;
        return 0;
    }
    trimCopy(name, sizeof(name), item, (size_t)(colon - item));
    for (size_t i = 0; i < sizeof(algoColls) / sizeof(algoColls[0]); i++) {
        if (strcasecmp(name, algoColls[i].name) != 0)
            continue;
        for (int k = 0; k < algoColls[i].ncolls; k++)
            allowed[algoColls[i].colls[k]] = mask;
        return 0;
    }
    snprintf(why, whyLen,
             "'%s' is not a collective (allreduce, broadcast, reduce, allgather, reducescatter, "
             "alltoall, sendrecv)",
             name);
    return -1;
}

int tunerParseAlgo(const char *spec, uint32_t allowed[LOOM_COLL_NUM], char *why, size_t whyLen)
{
    uint32_t work[LOOM_COLL_NUM];
    char item[160];
    for (int c = 0; c < LOOM_COLL_NUM; c++)
        allowed[c] = work[c] = ALGO_EVERY;
    if (spec == NULL)
        return 0;
    for (const char *p = spec; p != NULL;) {
        const char *end = strchr(p, ';');
        trimCopy(item, sizeof(item), p, end ? (size_t)(end - p) : strlen(p));
        if (item[0] != '\0' && parseItem(item, work, why, whyLen) != 0)
            return -1;
        p = end ? end + 1 : NULL;
    }
    memcpy(allowed, work, sizeof(work));
    return 0;
}

static uint32_t algoAllowed[LOOM_COLL_NUM];
static pthread_once_t algoOnce = PTHREAD_ONCE_INIT;

static void algoRead(void)
{
    char why[160];
    const char *spec = paramStr(LOOM_PARAM_ALGO);
    if (tunerParseAlgo(spec, algoAllowed, why, sizeof(why)) != 0)
        paramWarn("LOOM_ALGO=%s: %s; ignoring it (the tuner chooses)", spec, why);
}

/* ---- the model ---- */

static double ringTime(const struct loomTuneShape *s, loomColl_t coll, size_t bytes)
{
    (void)coll;
    return 20.0 * (s->nranks - 1) + (double)bytes * 1e-3;
}

static double treeTime(const struct loomTuneShape *s, loomColl_t coll, size_t bytes)
{
    (void)coll;
    int d = 0;
    while ((1 << d) < s->nranks)
        d++;
    return 20.0 * 2 * d + (double)bytes * 1.5e-3;
}

int tunerModel(const struct loomTuneShape *shape, loomColl_t coll, size_t bytes, uint32_t allowed,
               struct loomTuning *out)
{
    pthread_once(&algoOnce, algoRead);
    uint32_t can = collAlgos[coll] & (allowed ? allowed : algoAllowed[coll]);
    out->chunkBytes = shape->slotBytes;
    out->nChannels = 1;
    if (can == 0) {
        out->algo =
            (collAlgos[coll] & ALGO_BIT(LOOM_ALGO_DIRECT)) ? LOOM_ALGO_DIRECT : LOOM_ALGO_RING;
        out->predictedUs = ringTime(shape, coll, bytes);
        return -1;
    }
    out->algo = LOOM_ALGO_DIRECT;
    out->predictedUs = 0;
    if (can & ALGO_BIT(LOOM_ALGO_DIRECT))
        return 0;
    double ring = (can & ALGO_BIT(LOOM_ALGO_RING)) ? ringTime(shape, coll, bytes) : -1;
    double tree = (can & ALGO_BIT(LOOM_ALGO_TREE)) ? treeTime(shape, coll, bytes) : -1;
    if (tree >= 0 && (ring < 0 || tree < ring)) {
        out->algo = LOOM_ALGO_TREE;
        out->predictedUs = tree;
    } else {
        out->algo = LOOM_ALGO_RING;
        out->predictedUs = ring;
    }
    return 0;
}

static int sizeClass(size_t bytes)
{
    int c = 0;
    while (bytes > 1)
        bytes >>= 1, c++;
    return c;
}

void tunerChoose(struct loomComm *comm, loomColl_t coll, size_t bytes, struct loomTuning *out)
{
    struct loomTuneShape shape = {comm->nranks, commCpuCount(), comm->slotBytes, comm->nChannels};
    int res = tunerModel(&shape, coll, bytes, 0, out);
    uint64_t bit = 1ULL << sizeClass(bytes);
    if ((atomic_load_explicit(&comm->tuneLogged[coll], memory_order_relaxed) & bit) ||
        (atomic_fetch_or_explicit(&comm->tuneLogged[coll], bit, memory_order_relaxed) & bit))
        return;
    if (res != 0)
        INFO(LOOM_TUNING, "loom%s: LOOM_ALGO allows no algorithm it has; using %s", collNames[coll],
             tunerAlgoName(out->algo));
    INFO(LOOM_TUNING,
         "loom%s %zu B (class 2^%d): %s, chunk %zu B, %d channel(s), predicted %.1f us",
         collNames[coll], bytes, sizeClass(bytes), tunerAlgoName(out->algo), out->chunkBytes,
         out->nChannels, out->predictedUs);
}
