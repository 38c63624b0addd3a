/*
 * param.c — the table of LOOM_* environment parameters.
 *
 * Every setting a user can change lives in one row of paramTable below:
 * name, type, default, range (integers) or accepted words (enumerated
 * strings), and a one-line help that loom-info -c prints. paramInit reads
 * the environment once, under pthread_once, so no other file calls getenv()
 * for a LOOM_* variable and every part of Loom sees the same values for the
 * life of the process.
 *
 * A value that does not parse, is out of range or is not one of the accepted
 * words is reported on stderr, naming the variable, the value and the
 * default kept, and the default stays in force. These warnings are printed
 * whatever LOOM_DEBUG says: they are about the configuration itself, and
 * LOOM_DEBUG may be the very variable that is wrong. An empty variable counts
 * as unset.
 *
 * Values are copied out of the environment at paramInit, so a later
 * setenv() by the application neither changes nor invalidates them.
 */
#include <ctype.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include "debug.h"
#include "param.h"

typedef enum { PARAM_INT, PARAM_STR } paramType_t;

struct paramRow {
    const char *name;
    paramType_t type;
    const char *defaultValue; /* text; integer defaults are parsed with the row's range */
    int64_t min, max;         /* integers only */
    const char *what;         /* integers: "a number of seconds", for the warning */
    const char *const *words; /* enumerated strings: accepted words, NULL-terminated */
    const char *help;
};

static const char *const paramDebugWords[] = {"NONE", "WARN", "INFO", "TRACE", NULL};
static const char *const paramNetWords[] = {"socket", "ib", NULL};
static const char *const paramExecutorWords[] = {"kernel", "host", "auto", NULL};
static const char *const paramProtoWords[] = {"Simple", "LL", NULL};
static const char *const paramNetCompressWords[] = {"none", "bf16", "bf16-sr", NULL};
static const char *const paramIbMtuWords[] = {"256", "512", "1024", "2048", "4096", NULL};

/* Rows are placed by loomParamId_t so the table cannot drift from the enum's order. */
static const struct paramRow paramTable[] = {
    [LOOM_PARAM_DEBUG] = {"LOOM_DEBUG", PARAM_STR, "", 0, 0, NULL, paramDebugWords,
                          "log level: NONE, WARN, INFO or TRACE (any case); unset prints "
                          "nothing and errors are reported only by loomGetLastError"},
    [LOOM_PARAM_DEBUG_SUBSYS] = {"LOOM_DEBUG_SUBSYS", PARAM_STR, "ALL", 0, 0, NULL, NULL,
                                 "subsystems logged at INFO/TRACE, comma list of INIT, COLL, "
                                 "SHM, NET, TUNING, BOOTSTRAP, ALL; a leading ^ excludes them"},
    [LOOM_PARAM_DEBUG_FILE] = {"LOOM_DEBUG_FILE", PARAM_STR, "", 0, 0, NULL, NULL,
                               "file log lines are appended to (%h host, %p pid); unset: "
                               "stderr; use %p for one file per process"},
    [LOOM_PARAM_ALGO] = {"LOOM_ALGO", PARAM_STR, "", 0, 0, NULL, NULL,
                         "algorithms allowed: ring, tree, doubling (AllReduce), cma (single "
                         "copies: weighed for AlltoAll, AllGather and AllReduce; for the "
                         "others taken "
                         "where every rank passes loomMemAlloc "
                         "buffers; else off unless named), e.g. ring "
                         "or ^tree (NCCL list syntax); unset: the tuner chooses per call"},
    [LOOM_PARAM_NCHANNELS] = {"LOOM_NCHANNELS", PARAM_INT, "1", 1, 32, "a channel count", NULL,
                              "channels (parallel rings/trees) per communicator, 1..32"},
    [LOOM_PARAM_BUFFSIZE] = {"LOOM_BUFFSIZE", PARAM_INT, "1048576", 512, 1073741824,
                             "a size in bytes", NULL,
                             "bytes of each connector FIFO (8 slots), 512..1G; K/M/G suffixes "
                             "accepted"},
    [LOOM_PARAM_TIMEOUT] = {"LOOM_TIMEOUT", PARAM_INT, "600", 1, 86400, "a number of seconds", NULL,
                            "seconds a wait may go without progress before the call returns "
                            "loomTimeout, 1..86400"},
    [LOOM_PARAM_SHM_DISABLE] = {"LOOM_SHM_DISABLE", PARAM_INT, "0", 0, 1, "a switch", NULL,
                                "1: do not use shared memory between ranks of one host"},
    [LOOM_PARAM_P2P_DISABLE] = {"LOOM_P2P_DISABLE", PARAM_INT, "0", 0, 1, "a switch", NULL,
                                "1: do not use GPU peer-to-peer (CUDA IPC) between GPUs"},
    [LOOM_PARAM_NET] = {"LOOM_NET", PARAM_STR, "", 0, 0, NULL, paramNetWords,
                        "network transport between hosts: socket or ib; unset: ib if a "
                        "device is usable, else socket"},
    [LOOM_PARAM_SOCKET_IFNAME] = {"LOOM_SOCKET_IFNAME", PARAM_STR, "", 0, 0, NULL, NULL,
                                  "interfaces for TCP and the bootstrap, NCCL syntax (eth,ib; "
                                  "^docker,lo excludes; =eth0 exact; several matches: TCP "
                                  "stripes over them all); unset: the first one up that is not "
                                  "loopback"},
    [LOOM_PARAM_IB_HCA] = {"LOOM_IB_HCA", PARAM_STR, "", 0, 0, NULL, NULL,
                           "InfiniBand devices and ports, NCCL syntax (mlx5_0:1,mlx5_1; ^ "
                           "excludes; = exact); unset: all, the first active port is used"},
    [LOOM_PARAM_HOSTID] = {"LOOM_HOSTID", PARAM_STR, "", 0, 0, NULL, NULL,
                           "overrides this host's identity (ranks with equal ids share "
                           "memory); unset: hash of hostname and boot id"},
    [LOOM_PARAM_SPIN] = {"LOOM_SPIN", PARAM_INT, "20000", 0, 10000000, "a number of iterations",
                         NULL,
                         "busy-poll iterations (pause instructions) of a wait before it "
                         "yields the CPU (capped at 32 with more ranks than cores); a "
                         "network wait polls its sockets instead, for at most 100 us, "
                         "0..10000000"},
    [LOOM_PARAM_CUDA_LIB] = {"LOOM_CUDA_LIB", PARAM_STR, "libcuda.so.1", 0, 0, NULL, NULL,
                             "the CUDA driver library loaded at run time for device buffers "
                             "(a name or a path); tests point it at a stand-in"},
    [LOOM_PARAM_IB_DISABLE] = {"LOOM_IB_DISABLE", PARAM_INT, "0", 0, 1, "a switch", NULL,
                               "1: do not use InfiniBand verbs; hosts talk over TCP"},
    [LOOM_PARAM_IB_GID_INDEX] = {"LOOM_IB_GID_INDEX", PARAM_INT, "-1", -1, 255, "a GID index", NULL,
                                 "GID table index of the InfiniBand port used on RoCE (Ethernet "
                                 "link layer), 0..255; -1: a RoCE v2 IPv4-mapped GID if the "
                                 "port has one, else RoCE v2, else 0"},
    [LOOM_PARAM_SOCKET_NSOCKS] = {"LOOM_SOCKET_NSOCKS", PARAM_INT, "0", 0, 16, "a socket count",
                                  NULL,
                                  "TCP sockets per connection; a large message is cut into "
                                  "that many parts sent side by side, 1..16; 0: chosen from "
                                  "the link's speed, a socket per 10 Gbit/s, 2..8"},
    [LOOM_PARAM_SOCKET_NTHREADS] = {"LOOM_SOCKET_NTHREADS", PARAM_INT, "-1", -1, 16,
                                    "a thread count", NULL,
                                    "helper threads per communicator that move the parts of "
                                    "large TCP messages; 0: the proxy thread moves all, 0..16; "
                                    "-1: chosen from the cores a rank has on its host, less 2, "
                                    "at most a socket less than a connection has"},
    [LOOM_PARAM_NET_TLS] = {"LOOM_NET_TLS", PARAM_INT, "0", 0, 1, "a switch", NULL,
#ifdef HAVE_OPENSSL
                            "1: TLS 1.3 with a key derived from the unique id on every TCP "
                            "connection (bootstrap and NET/socket); set it on every rank "
                            "(this build has TLS)"},
#else
                            "1: TLS 1.3 on every TCP connection; this build has no TLS "
                            "(configure found no OpenSSL 3), so 1 is refused"},
#endif
    [LOOM_PARAM_ROOT_ADDR] = {"LOOM_ROOT_ADDR", PARAM_STR, "", 0, 0, NULL, NULL,
                              "host:port where rank 0 listens for the others when "
                              "loomCommInitFromEnv runs without loomrun (mpirun, srun)"},
    [LOOM_PARAM_CMA_DISABLE] = {"LOOM_CMA_DISABLE", PARAM_INT, "0", 0, 1, "a switch", NULL,
                                "1: no single-copy collectives between the ranks of one host "
                                "(process_vm_readv/writev, mappings of loomMemAlloc buffers): not "
                                "AlltoAll's by default, not on loomMemAlloc buffers, nor where "
                                "LOOM_ALGO names cma"},
    [LOOM_PARAM_CMA_MIN_BYTES] = {"LOOM_CMA_MIN_BYTES", PARAM_INT, "131072", 4096, 1099511627776LL,
                                  "a size in bytes", NULL,
                                  "smallest collective (largest buffer, as loom-perf's size) "
                                  "run single-copy when all ranks share a host (without "
                                  "LOOM_ALGO naming cma, on loomMemAlloc buffers from 512 KiB "
                                  "at least); the largest any rank sets holds for all; K/M/G "
                                  "suffixes accepted"},
    [LOOM_PARAM_CONNECT_ALL] = {"LOOM_CONNECT_ALL", PARAM_INT, "0", 0, 1, "a switch", NULL,
                                "1 (on any rank): connect every pair of ranks at init; 0: only "
                                "ring and tree neighbours, the others when a call first needs "
                                "them"},
    [LOOM_PARAM_EXECUTOR] = {"LOOM_EXECUTOR", PARAM_STR, "auto", 0, 0, NULL, paramExecutorWords,
                             "what runs calls: kernel (the GPU kernel's plan interpreter: "
                             "built for the CPU on host buffers, one launch on the caller's "
                             "stream on device buffers, which CUDA graphs can capture; "
                             "shared-memory links only, single "
                             "copies off), host (the host executor; device buffers "
                             "host-driven) or auto (host); the same on every rank"},
    [LOOM_PARAM_PROTO] = {"LOOM_PROTO", PARAM_STR, "", 0, 0, NULL, paramProtoWords,
                          "protocol of the kernel executor: Simple (slots and counters) or LL "
                          "(8-byte lines with flags); unset: LL for small calls (NCCL syntax)"},
    [LOOM_PARAM_KERNEL_THREADS] = {"LOOM_KERNEL_THREADS", PARAM_INT, "1", 1, 64, "a thread count",
                                   NULL,
                                   "threads of each block (one per channel) of the kernel "
                                   "executor on the CPU, 1..64"},
    [LOOM_PARAM_IB_TC] = {"LOOM_IB_TC", PARAM_INT, "0", 0, 255, "a traffic class", NULL,
                          "InfiniBand traffic class of Loom's queue pairs (RoCE: DSCP times "
                          "4, e.g. 106 for DSCP 26), 0..255"},
    [LOOM_PARAM_IB_SL] = {"LOOM_IB_SL", PARAM_INT, "0", 0, 15, "a service level", NULL,
                          "InfiniBand service level of Loom's queue pairs, 0..15"},
    [LOOM_PARAM_IB_TIMEOUT] = {"LOOM_IB_TIMEOUT", PARAM_INT, "14", 1, 31, "a timeout exponent",
                               NULL,
                               "InfiniBand ACK timeout, 4.096 us * 2^value (14: 67 ms), "
                               "1..31; a dead peer is found after about this times "
                               "LOOM_IB_RETRY_CNT + 1"},
    [LOOM_PARAM_IB_RETRY_CNT] = {"LOOM_IB_RETRY_CNT", PARAM_INT, "6", 0, 7, "a retry count", NULL,
                                 "InfiniBand retries of an unacknowledged write, 0..7 (soft-RoCE "
                                 "takes 7 as forever and then never reports a dead peer)"},
    [LOOM_PARAM_IB_MTU] = {"LOOM_IB_MTU", PARAM_STR, "", 0, 0, NULL, paramIbMtuWords,
                           "InfiniBand path MTU cap in bytes: 256, 512, 1024, 2048 or 4096; "
                           "unset: the port's active MTU (the smaller of the two ends')"},
    [LOOM_PARAM_IB_QPS_PER_CONNECTION] = {"LOOM_IB_QPS_PER_CONNECTION", PARAM_INT, "1", 1, 8,
                                          "a queue pair count", NULL,
                                          "InfiniBand queue pairs per connection; a message of "
                                          "64 KiB or more is cut over them (fabrics that route "
                                          "flows apart), 1..8, the same on every rank"},
    [LOOM_PARAM_DUMP_DIR] = {"LOOM_DUMP_DIR", PARAM_STR, "", 0, 0, NULL, NULL,
                             "directory where a rank whose call fails writes its flight recorder "
                             "(JSON, one file a rank); loom-info --status DIR reads them"},
    [LOOM_PARAM_NET_COMPRESS] = {"LOOM_NET_COMPRESS", PARAM_STR, "none", 0, 0, NULL,
                                 paramNetCompressWords,
                                 "float32 AllReduce and ReduceScatter send bfloat16 over network "
                                 "links, summing in float32: bf16 (round to nearest even), "
                                 "bf16-sr (stochastic rounding) or none; the same on every rank"},
};

_Static_assert(sizeof(paramTable) / sizeof(paramTable[0]) == LOOM_PARAM_NUM,
               "paramTable needs one row per loomParamId_t");

/* The values in force; written only inside paramOnce, read-only afterwards. */
struct paramValue {
    int64_t intValue;
    const char *text; /* value as text; for strings the value itself */
    int isSet;
    char intText[24]; /* holds text for integer rows */
};

static struct paramValue paramValues[LOOM_PARAM_NUM];
static pthread_once_t paramOnceControl = PTHREAD_ONCE_INIT;

int paramParseInt(const char *text, int64_t min, int64_t max, int64_t *out)
{
    if (text == NULL || out == NULL)
        return -1;
    const char *p = text;
    int negative = 0;
    if (*p == '-' || *p == '+')
        negative = (*p++ == '-');
    /* Accumulate the magnitude unsigned so INT64_MIN stays representable. */
    uint64_t limit = negative ? (uint64_t)INT64_MAX + 1 : (uint64_t)INT64_MAX;
    uint64_t magnitude = 0;
    const char *digits = p;
    for (; *p >= '0' && *p <= '9'; p++) {
        uint64_t d = (uint64_t)(*p - '0');
        if (magnitude > (limit - d) / 10)
            return -1;
        magnitude = magnitude * 10 + d;
    }
    if (p == digits)
        return -1;
    const char *suffixes = "KMG";
    const char *suffix = *p != '\0' ? strchr(suffixes, toupper((unsigned char)*p)) : NULL;
    int shift = suffix != NULL ? 10 * (int)(suffix - suffixes + 1) : 0;
    if (suffix != NULL)
        p++;
    if (*p != '\0' || magnitude > (limit >> shift))
        return -1;
    magnitude <<= shift;
    int64_t value;
    if (!negative)
        value = (int64_t)magnitude;
    else if (magnitude == (uint64_t)INT64_MAX + 1)
        value = INT64_MIN;
    else
        value = -(int64_t)magnitude;
    if (value < min || value > max)
        return -1;
    *out = value;
    return 0;
}

/*
 * Configuration warnings go straight to stderr with the log prefix: the log
 * level and file are themselves parameters, so they cannot be used yet.
 * One write per line keeps lines of concurrent processes whole.
 */
void paramWarn(const char *fmt, ...)
{
    char host[64] = "unknown";
    if (gethostname(host, sizeof(host)) != 0)
        strcpy(host, "unknown");
    host[sizeof(host) - 1] = '\0';
    host[strcspn(host, ".")] = '\0';

    char line[1024];
    int n = snprintf(line, sizeof(line), "%s:%d:- [LOOM] WARN ", host, (int)getpid());
    if (n < 0 || (size_t)n >= sizeof(line))
        return;
    va_list ap;
    va_start(ap, fmt);
    int m = vsnprintf(line + n, sizeof(line) - (size_t)n - 1, fmt, ap);
    va_end(ap);
    if (m < 0)
        return;
    size_t len = strlen(line);
    line[len++] = '\n';
    ssize_t ignored = write(STDERR_FILENO, line, len);
    (void)ignored;
}

/* Accepted words listed for a warning: "NONE, WARN, INFO, TRACE". */
static void paramWordList(const char *const *words, char *buf, size_t size)
{
    buf[0] = '\0';
    for (int i = 0; words[i] != NULL; i++) {
        size_t used = strlen(buf);
        snprintf(buf + used, size - used, "%s%s", i ? ", " : "", words[i]);
    }
}

static void paramSetInt(struct paramValue *v, int64_t value)
{
    v->intValue = value;
    snprintf(v->intText, sizeof(v->intText), "%" PRId64, value);
    v->text = v->intText;
}

static void paramReadInt(const struct paramRow *row, struct paramValue *v, const char *env)
{
    int64_t value = 0;
    /* The built-in default must satisfy its own row; the unit test checks every row. */
    if (paramParseInt(row->defaultValue, row->min, row->max, &value) != 0)
        value = row->min;
    paramSetInt(v, value);
    if (env == NULL)
        return;
    if (paramParseInt(env, row->min, row->max, &value) != 0) {
        paramWarn("%s=%s is not %s in %" PRId64 "..%" PRId64 "; using %s", row->name, env,
                  row->what, row->min, row->max, v->text);
        return;
    }
    paramSetInt(v, value);
    v->isSet = 1;
}

static void paramReadStr(const struct paramRow *row, struct paramValue *v, const char *env)
{
    v->text = row->defaultValue;
    if (env == NULL)
        return;
    const char *value = env;
    if (row->words != NULL) {
        value = NULL;
        /* Store the canonical spelling so users of the value compare with strcmp. */
        for (int i = 0; row->words[i] != NULL && value == NULL; i++)
            if (strcasecmp(env, row->words[i]) == 0)
                value = row->words[i];
        if (value == NULL) {
            char list[128];
            paramWordList(row->words, list, sizeof(list));
            if (row->defaultValue[0] != '\0')
                paramWarn("%s=%s is not one of %s; using %s", row->name, env, list,
                          row->defaultValue);
            else
                paramWarn("%s=%s is not one of %s; ignoring it", row->name, env, list);
            return;
        }
    } else {
        value = strdup(env);
        if (value == NULL) {
            paramWarn("%s: no memory to keep its value; using the default", row->name);
            return;
        }
    }
    v->text = value;
    v->isSet = 1;
}

static void paramOnce(void)
{
    for (int id = 0; id < LOOM_PARAM_NUM; id++) {
        const struct paramRow *row = &paramTable[id];
        const char *env = getenv(row->name);
        if (env != NULL && env[0] == '\0')
            env = NULL;
        if (row->type == PARAM_INT)
            paramReadInt(row, &paramValues[id], env);
        else
            paramReadStr(row, &paramValues[id], env);
    }
}

void paramInit(void)
{
    pthread_once(&paramOnceControl, paramOnce);
}

/* Integer value of row `id`; 0 for a string row or an id out of range (a Loom bug). */
int64_t paramInt(loomParamId_t id)
{
    paramInit();
    if ((unsigned)id >= LOOM_PARAM_NUM || paramTable[id].type != PARAM_INT)
        return 0;
    return paramValues[id].intValue;
}

/* String value of row `id`; integer rows give their value as text. */
const char *paramStr(loomParamId_t id)
{
    paramInit();
    if ((unsigned)id >= LOOM_PARAM_NUM)
        return "";
    return paramValues[id].text;
}

int paramIsSet(loomParamId_t id)
{
    paramInit();
    return (unsigned)id < LOOM_PARAM_NUM && paramValues[id].isSet;
}

int loomParamCount(void)
{
    return LOOM_PARAM_NUM;
}

loomResult_t loomParamGet(int index, loomParamInfo_t *info)
{
    if (index < 0 || index >= LOOM_PARAM_NUM)
        return loomSetError(loomInvalidArgument,
                            "loomParamGet: index %d is out of range 0..%d (see loomParamCount)",
                            index, LOOM_PARAM_NUM - 1);
    if (info == NULL)
        return loomSetError(loomInvalidArgument, "loomParamGet: info is NULL");
    paramInit();
    info->name = paramTable[index].name;
    info->value = paramValues[index].text;
    info->defaultValue = paramTable[index].defaultValue;
    info->help = paramTable[index].help;
    info->isSet = paramValues[index].isSet;
    return loomSuccess;
}

const char *loomBuildFeatures(void)
{
#ifdef LOOM_BUILD_FEATURES
    return LOOM_BUILD_FEATURES;
#else
    return "hwloc=yes cuda=no verbs=no mpi=no";
#endif
}
