/*
 * check_badargs.c — every public function of include/loom.h with every class
 * of bad argument: NULL, out of range, overflow, a pointer that is not a
 * communicator or stream, a destroyed one, and groups used wrongly.
 *
 * Each case asserts the result code and that loomGetLastError names the
 * argument (or the misuse), and each test then checks that the library is
 * still healthy: the same communicator runs an AllReduce correctly. The
 * collectives are driven from one table, so that a class of bad argument is
 * tried on every function it applies to. Communicators are real: one rank
 * in the test process, over the shared-memory transport.
 *
 * Functions covered (all of loom.h): loomGetVersion, loomGetUniqueId,
 * loomCommInitRank, loomCommInitRankConfig, loomCommInitFromEnv,
 * loomCommSplit, loomCommFinalize, loomCommDestroy, loomCommAbort,
 * loomCommGetAsyncError, loomCommCount, loomCommUserRank,
 * loomGetErrorString, loomGetLastError, the nine collective and
 * point-to-point calls, loomGroupStart/End, the five stream functions,
 * loomMemAlloc/Free, loomParamCount/Get, loomBuildFeatures,
 * loomTransportCount/Info.
 */
#include <check.h>
#include <limits.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "loom.h"

/* Asserts `call` returns `res` and this thread's last error line contains `word`. */
#define ck_error(call, res, word)                                                                  \
    do {                                                                                           \
        loomResult_t got_ = (call);                                                                \
        ck_assert_msg(got_ == (res), "%s returned %d, not %d (%s)", #call, got_, (res),            \
                      loomGetLastError(NULL));                                                     \
        ck_assert_msg(strstr(loomGetLastError(NULL), (word)) != NULL,                              \
                      "%s: last error \"%s\" does not name \"%s\"", #call, loomGetLastError(NULL), \
                      (word));                                                                     \
    } while (0)

static loomComm_t soloComm(void)
{
    loomUniqueId id;
    loomComm_t comm = NULL;
    ck_assert_int_eq(loomGetUniqueId(&id), loomSuccess);
    ck_assert_int_eq(loomCommInitRank(&comm, 1, id, 0), loomSuccess);
    return comm;
}

/* The communicator still works: a checked AllReduce. */
static void assertHealthy(loomComm_t comm)
{
    int in[3] = {4, 5, 6}, out[3] = {0, 0, 0};
    ck_assert_int_eq(loomAllReduce(in, out, 3, loomInt32, loomSum, comm, NULL), loomSuccess);
    ck_assert(memcmp(in, out, sizeof(in)) == 0);
}

/* A pointer to real memory that is no handle: the library must not trust it. */
static char notAHandle[256];
#define FOREIGN_COMM ((loomComm_t)(void *)notAHandle)
#define FOREIGN_STREAM ((loomStream_t)(void *)notAHandle)
/* And one that points nowhere: dereferencing it would crash the test. */
#define WILD_COMM ((loomComm_t)(uintptr_t)0x10)
#define WILD_STREAM ((loomStream_t)(uintptr_t)0x10)

/* ---- small functions ---- */

START_TEST(test_version_id_strings)
{
    ck_error(loomGetVersion(NULL), loomInvalidArgument, "version");
    ck_error(loomGetUniqueId(NULL), loomInvalidArgument, "uniqueId");
    ck_assert_str_eq(loomGetErrorString((loomResult_t)-1), "unknown result code");
    ck_assert_str_eq(loomGetErrorString(loomNumResults), "unknown result code");
    ck_assert_str_eq(loomGetErrorString((loomResult_t)INT_MAX), "unknown result code");
    /* A handle loomGetLastError does not know gives this thread's line, untouched. */
    ck_error(loomGetVersion(NULL), loomInvalidArgument, "version");
    ck_assert_ptr_nonnull(strstr(loomGetLastError(FOREIGN_COMM), "version"));
    ck_assert_ptr_nonnull(strstr(loomGetLastError(WILD_COMM), "version"));
}
END_TEST

START_TEST(test_introspection)
{
    loomParamInfo_t info;
    const char *name, *why;
    int usable;
    int n = loomParamCount();
    ck_assert_int_gt(n, 0);
    ck_error(loomParamGet(-1, &info), loomInvalidArgument, "index");
    ck_error(loomParamGet(n, &info), loomInvalidArgument, "index");
    ck_error(loomParamGet(INT_MIN, &info), loomInvalidArgument, "index");
    ck_error(loomParamGet(0, NULL), loomInvalidArgument, "info");
    ck_assert_ptr_nonnull(loomBuildFeatures());
    int t = loomTransportCount();
    ck_assert_int_gt(t, 0);
    ck_error(loomTransportInfo(-1, &name, &usable, &why), loomInvalidArgument, "index");
    ck_error(loomTransportInfo(t, &name, &usable, &why), loomInvalidArgument, "index");
    ck_error(loomTransportInfo(0, NULL, &usable, &why), loomInvalidArgument, "pointer");
    ck_error(loomTransportInfo(0, &name, NULL, &why), loomInvalidArgument, "pointer");
    ck_error(loomTransportInfo(0, &name, &usable, NULL), loomInvalidArgument, "pointer");
    const char *devices = NULL;
    ck_error(loomTransportDevices(-1, &devices), loomInvalidArgument, "index");
    ck_error(loomTransportDevices(t, &devices), loomInvalidArgument, "index");
    ck_error(loomTransportDevices(0, NULL), loomInvalidArgument, "text");
    for (int i = 0; i < t; i++) {
        devices = NULL;
        ck_assert_int_eq(loomTransportDevices(i, &devices), loomSuccess);
        ck_assert_ptr_nonnull(devices);
    }
}
END_TEST

/* ---- creating communicators ---- */

START_TEST(test_init_arguments)
{
    loomUniqueId id, zero;
    loomComm_t comm = FOREIGN_COMM; /* must stay untouched by every failure */
    memset(&zero, 0, sizeof(zero));
    ck_assert_int_eq(loomGetUniqueId(&id), loomSuccess);
    ck_error(loomCommInitRank(NULL, 1, id, 0), loomInvalidArgument, "comm");
    ck_error(loomCommInitRank(&comm, 0, id, 0), loomInvalidArgument, "nranks");
    ck_error(loomCommInitRank(&comm, -3, id, 0), loomInvalidArgument, "nranks");
    ck_error(loomCommInitRank(&comm, INT_MAX, id, 0), loomInvalidArgument, "nranks");
    ck_error(loomCommInitRank(&comm, 2, id, 2), loomInvalidArgument, "rank");
    ck_error(loomCommInitRank(&comm, 2, id, -1), loomInvalidArgument, "rank");
    ck_error(loomCommInitRank(&comm, 1, zero, 0), loomInvalidArgument, "unique id");
    loomUniqueId bent = id;
    bent.internal[100] = 1; /* a reserved byte */
    ck_error(loomCommInitRank(&comm, 1, bent, 0), loomInvalidArgument, "unique id");
    ck_assert_ptr_eq(comm, FOREIGN_COMM);
}
END_TEST

START_TEST(test_init_config)
{
    loomUniqueId id;
    loomComm_t comm = NULL;
    ck_assert_int_eq(loomGetUniqueId(&id), loomSuccess);
    loomConfig_t config = LOOM_CONFIG_INITIALIZER;
    config.magic = 0;
    ck_error(loomCommInitRankConfig(&comm, 1, id, 0, &config), loomInvalidArgument,
             "LOOM_CONFIG_INITIALIZER");
    config = (loomConfig_t)LOOM_CONFIG_INITIALIZER;
    config.size = 8;
    ck_error(loomCommInitRankConfig(&comm, 1, id, 0, &config), loomInvalidArgument,
             "LOOM_CONFIG_INITIALIZER");
    config = (loomConfig_t)LOOM_CONFIG_INITIALIZER;
    config.timeoutSec = 0;
    ck_error(loomCommInitRankConfig(&comm, 1, id, 0, &config), loomInvalidArgument, "timeoutSec");
    config.timeoutSec = -5;
    ck_error(loomCommInitRankConfig(&comm, 1, id, 0, &config), loomInvalidArgument, "timeoutSec");
    config = (loomConfig_t)LOOM_CONFIG_INITIALIZER;
    config.blocking = 2;
    ck_error(loomCommInitRankConfig(&comm, 1, id, 0, &config), loomInvalidArgument, "blocking");
    ck_assert_ptr_null(comm);
    /* The id was not used up by the refused calls. */
    ck_assert_int_eq(loomCommInitRankConfig(&comm, 1, id, 0, NULL), loomSuccess);
    assertHealthy(comm);
    ck_assert_int_eq(loomCommDestroy(comm), loomSuccess);
}
END_TEST

/* Applied in order, each on top of the ones before: set (or unset) a variable, then init. */
static const struct {
    const char *var, *value; /* value NULL: unset */
    loomResult_t res;
    const char *word;
} envCases[] = {
    {"LOOM_UNIQUE_ID", NULL, loomInvalidUsage, "LOOM_RANK"},
    {"LOOM_RANK", "zero", loomInvalidArgument, "LOOM_RANK"},
    {"LOOM_RANK", "0", loomInvalidUsage, "LOOM_NRANKS"},
    {"LOOM_NRANKS", "-1", loomInvalidArgument, "LOOM_NRANKS"},
    {"LOOM_NRANKS", "99999999999999999999", loomInvalidArgument, "LOOM_NRANKS"},
    {"LOOM_NRANKS", "1", loomInvalidUsage, "LOOM_UNIQUE_ID"},
    {"LOOM_UNIQUE_ID", "abcd", loomInvalidUsage, "LOOM_UNIQUE_ID"},
    {"LOOM_UNIQUE_ID", "HEX-WITH-G", loomInvalidArgument, "non-hex"},
    {"LOOM_UNIQUE_ID", "HEX", loomInvalidArgument, "unique id"}, /* hex, but no Loom id */
    {"LOOM_RANK", "3", loomInvalidArgument, "rank"},
};

START_TEST(test_init_from_env)
{
    loomComm_t comm = NULL;
    char hex[2 * LOOM_UNIQUE_ID_BYTES + 1];
    memset(hex, '0', sizeof(hex) - 1);
    hex[sizeof(hex) - 1] = '\0';
    unsetenv("LOOM_RANK");
    unsetenv("LOOM_NRANKS");
    ck_error(loomCommInitFromEnv(NULL), loomInvalidArgument, "comm");
    for (size_t i = 0; i < sizeof(envCases) / sizeof(envCases[0]); i++) {
        const char *value = envCases[i].value;
        hex[17] = value && strcmp(value, "HEX-WITH-G") == 0 ? 'g' : '0';
        if (value && strncmp(value, "HEX", 3) == 0)
            value = hex;
        if (value)
            setenv(envCases[i].var, value, 1);
        else
            unsetenv(envCases[i].var);
        ck_error(loomCommInitFromEnv(&comm), envCases[i].res, envCases[i].word);
    }
    ck_assert_ptr_null(comm);
}
END_TEST

/* ---- handles: NULL, foreign, wild, destroyed ---- */

/* Every function that takes a communicator, refusing `bad` with `res` and `word`. */
static void assertCommRefused(loomComm_t bad, loomResult_t res, const char *word)
{
    loomComm_t sub;
    loomResult_t async;
    int n;
    void *mem;
    ck_error(loomCommSplit(bad, 0, 0, &sub, NULL), res, word);
    ck_error(loomCommShrink(bad, NULL, 0, &sub, NULL, LOOM_SHRINK_DEFAULT), res, word);
    ck_error(loomCommGetFailedRanks(bad, NULL, &n), res, word);
    ck_error(loomCommFinalize(bad), res, word);
    ck_error(loomCommGetAsyncError(bad, &async), res, word);
    ck_error(loomCommCount(bad, &n), res, word);
    ck_error(loomCommUserRank(bad, &n), res, word);
    ck_error(loomCommDestroy(bad), res, word);
    ck_error(loomCommAbort(bad), res, word);
    if (bad != NULL) /* NULL is allowed there: memory for no communicator in particular */
        ck_error(loomMemAlloc(&mem, 64, bad), res, word);
}

START_TEST(test_comm_handles)
{
    loomComm_t comm = soloComm();
    assertCommRefused(NULL, loomInvalidArgument, "comm is NULL");
    assertCommRefused(FOREIGN_COMM, loomInvalidArgument, "not a communicator");
    assertCommRefused(WILD_COMM, loomInvalidArgument, "not a communicator");
    assertHealthy(comm);
    ck_assert_int_eq(loomCommDestroy(comm), loomSuccess);
    assertCommRefused(comm, loomInvalidUsage, "destroyed");
    /* The comm's last error is readable after destroy (the struct is never freed). */
    ck_assert_ptr_nonnull(loomGetLastError(comm));
}
END_TEST

START_TEST(test_comm_outputs)
{
    loomComm_t comm = soloComm();
    ck_error(loomCommCount(comm, NULL), loomInvalidArgument, "count");
    ck_error(loomCommUserRank(comm, NULL), loomInvalidArgument, "rank");
    ck_error(loomCommGetAsyncError(comm, NULL), loomInvalidArgument, "asyncError");
    ck_error(loomCommSplit(comm, 0, 0, NULL, NULL), loomInvalidArgument, "newcomm");
    loomComm_t sub = FOREIGN_COMM;
    ck_error(loomCommSplit(comm, -7, 0, &sub, NULL), loomInvalidArgument, "color");
    ck_assert_ptr_eq(sub, FOREIGN_COMM);
    loomConfig_t config = LOOM_CONFIG_INITIALIZER;
    config.magic = 1;
    ck_error(loomCommSplit(comm, 0, 0, &sub, &config), loomInvalidArgument,
             "LOOM_CONFIG_INITIALIZER");
    int self = 0, other = 1, failed = -1;
    ck_error(loomCommShrink(comm, NULL, 0, NULL, NULL, 0), loomInvalidArgument, "newcomm");
    ck_error(loomCommShrink(comm, NULL, 0, &sub, NULL, 7), loomInvalidArgument, "flags");
    ck_error(loomCommShrink(comm, &self, 1, &sub, NULL, 0), loomInvalidArgument, "excludeCount");
    ck_error(loomCommShrink(comm, NULL, -1, &sub, NULL, 0), loomInvalidArgument, "excludeCount");
    ck_error(loomCommShrink(comm, &other, 0, &sub, &config, 0), loomInvalidArgument,
             "LOOM_CONFIG_INITIALIZER");
    ck_assert_ptr_eq(sub, FOREIGN_COMM);
    ck_error(loomCommGetFailedRanks(comm, &failed, NULL), loomInvalidArgument, "count");
    ck_assert_int_eq(loomCommGetFailedRanks(comm, &failed, &self), loomSuccess);
    ck_assert_int_eq(self, 0);
    ck_assert_int_eq(failed, -1);
    /* Shrinking a rank alone by nothing makes a communicator of one. */
    ck_assert_int_eq(loomCommShrink(comm, NULL, 0, &sub, NULL, LOOM_SHRINK_DEFAULT), loomSuccess);
    ck_assert_int_eq(loomCommCount(sub, &self), loomSuccess);
    ck_assert_int_eq(self, 1);
    ck_assert_int_eq(loomCommDestroy(sub), loomSuccess);
    loomResult_t async = loomInternalError;
    ck_assert_int_eq(loomCommGetAsyncError(comm, &async), loomSuccess);
    ck_assert_int_eq(async, loomSuccess);
    assertHealthy(comm);
    ck_assert_int_eq(loomCommDestroy(comm), loomSuccess);
}
END_TEST

/* ---- collectives: one table, every class ---- */

struct collArgs {
    const void *send;
    void *recv;
    size_t count;
    loomDataType_t dt;
    loomRedOp_t op;
    int root;
    loomComm_t comm;
    loomStream_t stream;
};

typedef loomResult_t (*collFn)(const struct collArgs *a);

static loomResult_t callAllReduce(const struct collArgs *a)
{
    return loomAllReduce(a->send, a->recv, a->count, a->dt, a->op, a->comm, a->stream);
}
static loomResult_t callBroadcast(const struct collArgs *a)
{
    return loomBroadcast(a->send, a->recv, a->count, a->dt, a->root, a->comm, a->stream);
}
static loomResult_t callReduce(const struct collArgs *a)
{
    return loomReduce(a->send, a->recv, a->count, a->dt, a->op, a->root, a->comm, a->stream);
}
static loomResult_t callAllGather(const struct collArgs *a)
{
    return loomAllGather(a->send, a->recv, a->count, a->dt, a->comm, a->stream);
}
static loomResult_t callReduceScatter(const struct collArgs *a)
{
    return loomReduceScatter(a->send, a->recv, a->count, a->dt, a->op, a->comm, a->stream);
}
static loomResult_t callAlltoAll(const struct collArgs *a)
{
    return loomAlltoAll(a->send, a->recv, a->count, a->dt, a->comm, a->stream);
}
static loomResult_t callAlltoAllv(const struct collArgs *a)
{
    /* One rank: every count is `count`, every displacement 0. */
    size_t counts[1] = {a->count}, displs[1] = {0};
    return loomAlltoAllv(a->send, counts, displs, a->recv, counts, displs, a->dt, a->comm,
                         a->stream);
}
static loomResult_t callSend(const struct collArgs *a)
{
    return loomSend(a->send, a->count, a->dt, a->root, a->comm, a->stream);
}
static loomResult_t callRecv(const struct collArgs *a)
{
    return loomRecv(a->recv, a->count, a->dt, a->root, a->comm, a->stream);
}

enum { NO_ROOT, HAS_ROOT, HAS_PEER };

static const struct coll {
    const char *name;
    collFn fn;
    int reduces;
    int rootKind;
    int needSend, needRecv;
} colls[] = {
    {"loomAllReduce", callAllReduce, 1, NO_ROOT, 1, 1},
    {"loomBroadcast", callBroadcast, 0, HAS_ROOT, 1, 1},
    {"loomReduce", callReduce, 1, HAS_ROOT, 1, 1},
    {"loomAllGather", callAllGather, 0, NO_ROOT, 1, 1},
    {"loomReduceScatter", callReduceScatter, 1, NO_ROOT, 1, 1},
    {"loomAlltoAll", callAlltoAll, 0, NO_ROOT, 1, 1},
    {"loomAlltoAllv", callAlltoAllv, 0, NO_ROOT, 1, 1},
    {"loomSend", callSend, 0, HAS_PEER, 1, 0},
    {"loomRecv", callRecv, 0, HAS_PEER, 0, 1},
};
#define NCOLLS (int)(sizeof(colls) / sizeof(colls[0]))

/* Calls c with a and asserts the refusal, naming the function too. */
static void collRefused(const struct coll *c, struct collArgs a, loomResult_t res, const char *word)
{
    loomResult_t got = c->fn(&a);
    const char *line = loomGetLastError(NULL);
    ck_assert_msg(got == res, "%s returned %d, not %d (%s)", c->name, got, res, line);
    ck_assert_msg(strstr(line, word) != NULL, "%s: \"%s\" does not name \"%s\"", c->name, line,
                  word);
    ck_assert_msg(strstr(line, c->name) != NULL, "\"%s\" does not name %s", line, c->name);
}

START_TEST(test_collective_arguments)
{
    const struct coll *c = &colls[_i];
    loomComm_t comm = soloComm();
    static double buf[64], out[64];
    const struct collArgs good = {buf, out, 8, loomFloat64, loomSum, 0, comm, NULL};
    struct collArgs a;

    a = good, a.comm = NULL;
    collRefused(c, a, loomInvalidArgument, "comm");
    a = good, a.comm = FOREIGN_COMM;
    collRefused(c, a, loomInvalidArgument, "not a communicator");
    a = good, a.comm = WILD_COMM;
    collRefused(c, a, loomInvalidArgument, "not a communicator");
    a = good, a.dt = (loomDataType_t)-1;
    collRefused(c, a, loomInvalidArgument, "datatype");
    a = good, a.dt = loomNumTypes;
    collRefused(c, a, loomInvalidArgument, "datatype");
    if (c->reduces) {
        a = good, a.op = loomNumOps;
        collRefused(c, a, loomInvalidArgument, "op");
        a = good, a.op = (loomRedOp_t)-1;
        collRefused(c, a, loomInvalidArgument, "op");
    }
    if (c->rootKind != NO_ROOT) {
        const char *what = c->rootKind == HAS_ROOT ? "root" : "peer";
        a = good, a.root = 1;
        collRefused(c, a, loomInvalidArgument, what);
        a = good, a.root = -1;
        collRefused(c, a, loomInvalidArgument, what);
        a = good, a.root = INT_MIN;
        collRefused(c, a, loomInvalidArgument, what);
    }
    if (c->needSend) {
        a = good, a.send = NULL;
        collRefused(c, a, loomInvalidArgument, "sendbuff");
    }
    if (c->needRecv) {
        a = good, a.recv = NULL;
        collRefused(c, a, loomInvalidArgument, "recvbuff");
    }
    a = good, a.count = SIZE_MAX / 2;
    collRefused(c, a, loomInvalidArgument, "overflow");
    a = good, a.count = SIZE_MAX;
    collRefused(c, a, loomInvalidArgument, "overflow");
    a = good, a.stream = FOREIGN_STREAM;
    collRefused(c, a, loomInvalidArgument, "not a loomStream_t");
    a = good, a.stream = WILD_STREAM;
    collRefused(c, a, loomInvalidArgument, "not a loomStream_t");
    loomStream_t dead;
    ck_assert_int_eq(loomStreamCreate(&dead), loomSuccess);
    ck_assert_int_eq(loomStreamDestroy(dead), loomSuccess);
    a = good, a.stream = dead;
    collRefused(c, a, loomInvalidUsage, "destroyed");
    /* Zero elements need no buffers at all. */
    if (c->rootKind != HAS_PEER) {
        a = good, a.count = 0, a.send = NULL, a.recv = NULL;
        ck_assert_int_eq(c->fn(&a), loomSuccess);
    }
    assertHealthy(comm);
    ck_assert_int_eq(loomCommDestroy(comm), loomSuccess);
    a = good;
    collRefused(c, a, loomInvalidUsage, "destroyed");
}
END_TEST

START_TEST(test_alltoallv_arguments)
{
    loomComm_t comm = soloComm();
    static int send[16], recv[16];
    size_t c1[1] = {4}, d0[1] = {0}, c2[1] = {5}, huge[1] = {SIZE_MAX / 2}, far[1] = {SIZE_MAX};
    ck_error(loomAlltoAllv(send, NULL, d0, recv, c1, d0, loomInt32, comm, NULL),
             loomInvalidArgument, "sendcounts");
    ck_error(loomAlltoAllv(send, c1, NULL, recv, c1, d0, loomInt32, comm, NULL),
             loomInvalidArgument, "sdispls");
    ck_error(loomAlltoAllv(send, c1, d0, recv, NULL, d0, loomInt32, comm, NULL),
             loomInvalidArgument, "recvcounts");
    ck_error(loomAlltoAllv(send, c1, d0, recv, c1, NULL, loomInt32, comm, NULL),
             loomInvalidArgument, "rdispls");
    ck_error(loomAlltoAllv(send, c1, d0, recv, c2, d0, loomInt32, comm, NULL), loomInvalidArgument,
             "differs");
    ck_error(loomAlltoAllv(send, huge, d0, recv, huge, d0, loomInt32, comm, NULL),
             loomInvalidArgument, "overflow");
    ck_error(loomAlltoAllv(send, c1, far, recv, c1, d0, loomInt32, comm, NULL), loomInvalidArgument,
             "overflow");
    ck_error(loomAlltoAllv(send, c1, d0, send + 2, c1, d0, loomInt32, comm, NULL),
             loomInvalidArgument, "overlap");
    ck_error(loomAlltoAllv(send, c1, d0, send, c1, d0, loomInt32, comm, NULL), loomInvalidArgument,
             "overlap");
    assertHealthy(comm);
    ck_assert_int_eq(loomCommDestroy(comm), loomSuccess);
}
END_TEST

/* ---- groups ---- */

START_TEST(test_group_misuse)
{
    loomComm_t comm = soloComm();
    loomStream_t s1, s2;
    float a = 1, b = 0;
    ck_error(loomGroupEnd(), loomInvalidUsage, "loomGroupStart");
    /* Operations of one group on different streams. */
    ck_assert_int_eq(loomStreamCreate(&s1), loomSuccess);
    ck_assert_int_eq(loomStreamCreate(&s2), loomSuccess);
    ck_assert_int_eq(loomGroupStart(), loomSuccess);
    ck_assert_int_eq(loomSend(&a, 1, loomFloat32, 0, comm, s1), loomSuccess);
    ck_assert_int_eq(loomRecv(&b, 1, loomFloat32, 0, comm, s2), loomSuccess);
    ck_error(loomGroupEnd(), loomInvalidUsage, "stream");
    /* A bad call inside: the end reports it and runs nothing. */
    ck_assert_int_eq(loomGroupStart(), loomSuccess);
    ck_assert_int_eq(loomSend(&a, 1, loomFloat32, 0, comm, NULL), loomSuccess);
    ck_assert_int_eq(loomRecv(NULL, 1, loomFloat32, 0, comm, NULL), loomInvalidArgument);
    ck_error(loomGroupEnd(), loomInvalidArgument, "nothing of the group");
    ck_assert(b == 0);
    /* The communicator is destroyed between the call and the end of its group. */
    loomComm_t gone = soloComm();
    ck_assert_int_eq(loomGroupStart(), loomSuccess);
    ck_assert_int_eq(loomSend(&a, 1, loomFloat32, 0, gone, NULL), loomSuccess);
    ck_assert_int_eq(loomRecv(&b, 1, loomFloat32, 0, gone, NULL), loomSuccess);
    ck_assert_int_eq(loomCommDestroy(gone), loomSuccess);
    ck_error(loomGroupEnd(), loomInvalidUsage, "destroyed");
    ck_assert(b == 0);
    /* The same with an abort, and one End too many afterwards. */
    gone = soloComm();
    ck_assert_int_eq(loomGroupStart(), loomSuccess);
    ck_assert_int_eq(loomAllReduce(&a, &b, 1, loomFloat32, loomSum, gone, NULL), loomSuccess);
    ck_assert_int_eq(loomCommAbort(gone), loomSuccess);
    ck_error(loomGroupEnd(), loomInvalidUsage, "destroyed");
    ck_error(loomGroupEnd(), loomInvalidUsage, "loomGroupStart");
    ck_assert(b == 0);
    /* Nothing is left over from the failed groups: a clean one runs. */
    ck_assert_int_eq(loomGroupStart(), loomSuccess);
    ck_assert_int_eq(loomSend(&a, 1, loomFloat32, 0, comm, NULL), loomSuccess);
    ck_assert_int_eq(loomRecv(&b, 1, loomFloat32, 0, comm, NULL), loomSuccess);
    ck_assert_int_eq(loomGroupEnd(), loomSuccess);
    ck_assert(b == 1);
    ck_assert_int_eq(loomStreamDestroy(s1), loomSuccess);
    ck_assert_int_eq(loomStreamDestroy(s2), loomSuccess);
    assertHealthy(comm);
    ck_assert_int_eq(loomCommDestroy(comm), loomSuccess);
}
END_TEST

/* ---- streams and memory ---- */

START_TEST(test_stream_handles)
{
    loomStream_t s;
    ck_error(loomStreamCreate(NULL), loomInvalidArgument, "stream");
    ck_error(loomStreamCreateCuda(NULL, NULL), loomInvalidArgument, "stream");
    ck_assert_int_eq(loomStreamSynchronize(NULL), loomSuccess); /* the NULL stream: always idle */
    ck_assert_int_eq(loomStreamQuery(NULL), loomSuccess);
    ck_error(loomStreamDestroy(NULL), loomInvalidArgument, "stream");
    loomStream_t bad[2] = {FOREIGN_STREAM, WILD_STREAM};
    for (int i = 0; i < 2; i++) {
        ck_error(loomStreamSynchronize(bad[i]), loomInvalidArgument, "not a loomStream_t");
        ck_error(loomStreamQuery(bad[i]), loomInvalidArgument, "not a loomStream_t");
        ck_error(loomStreamDestroy(bad[i]), loomInvalidArgument, "not a loomStream_t");
    }
    ck_assert_int_eq(loomStreamCreate(&s), loomSuccess);
    ck_assert_int_eq(loomStreamDestroy(s), loomSuccess);
    ck_error(loomStreamSynchronize(s), loomInvalidUsage, "destroyed");
    ck_error(loomStreamQuery(s), loomInvalidUsage, "destroyed");
    ck_error(loomStreamDestroy(s), loomInvalidUsage, "destroyed");
}
END_TEST

START_TEST(test_memory)
{
    void *p = NULL;
    char local[8];
    ck_error(loomMemAlloc(NULL, 64, NULL), loomInvalidArgument, "ptr");
    ck_error(loomMemAlloc(&p, 0, NULL), loomInvalidArgument, "size");
    ck_error(loomMemAlloc(&p, SIZE_MAX, NULL), loomInvalidArgument, "size");
    ck_error(loomMemAlloc(&p, (size_t)PTRDIFF_MAX + 1, NULL), loomInvalidArgument, "size");
    ck_assert_ptr_null(p);
    ck_assert_int_eq(loomMemFree(NULL), loomSuccess);
    ck_error(loomMemFree(local), loomInvalidArgument, "loomMemAlloc");
    ck_assert_int_eq(loomMemAlloc(&p, 4096, NULL), loomSuccess);
    ck_error(loomMemFree((char *)p + 8), loomInvalidArgument, "loomMemAlloc");
    ck_assert_int_eq(loomMemFree(p), loomSuccess);
    ck_error(loomMemFree(p), loomInvalidArgument, "loomMemAlloc");
}
END_TEST

static Suite *badArgsSuite(void)
{
    Suite *s = suite_create("badargs");
    TCase *tc = tcase_create("api");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_version_id_strings);
    tcase_add_test(tc, test_introspection);
    tcase_add_test(tc, test_init_arguments);
    tcase_add_test(tc, test_init_config);
    tcase_add_test(tc, test_init_from_env);
    tcase_add_test(tc, test_comm_handles);
    tcase_add_test(tc, test_comm_outputs);
    tcase_add_loop_test(tc, test_collective_arguments, 0, NCOLLS);
    tcase_add_test(tc, test_alltoallv_arguments);
    tcase_add_test(tc, test_group_misuse);
    tcase_add_test(tc, test_stream_handles);
    tcase_add_test(tc, test_memory);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    setenv("LOOM_SOCKET_IFNAME", "lo", 0);
    SRunner *sr = srunner_create(badArgsSuite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
