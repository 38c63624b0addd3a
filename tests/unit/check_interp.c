/*
 * check_interp.c — unit tests of the plan interpreter (src/device/interp.h)
 * in its host build, on FIFOs in this process's memory.
 *
 *   - its arithmetic against reduce.c, bit for bit, for every datatype x
 *     operation (Avg's final division too), aligned (16-byte packs) and not;
 *   - LL with a tiny flag modulus (8 and 16, against 2^31 in the library):
 *     messages of changing lengths through one FIFO across many wraps
 *     arrive exactly, and the receiver of each slot's last message before a
 *     wrap leaves the slot's lines cleared (without that, a line left from
 *     before the wrap could carry the flag a later message expects);
 *   - two blocks of 3 threads each (pthreads, a barrier) moving and reducing
 *     messages concurrently, Simple and LL;
 *   - fan-in and fan-out (schedule.h): the arithmetic of k messages and the
 *     local input in one pass against reduceApplyMany, bit for bit; and a
 *     tree top of four blocks, three children sending their pieces to a
 *     parent that folds the three into its own in one step and sends the
 *     result back to all three in that step, Simple and LL (the LL flags
 *     wrapping every 16 messages);
 *   - the kernel executor's worker threads (src/exec/kexec.c), on 2 forked ranks
 *     with blocks of 2 threads on 2 channels: started by the first call,
 *     the same threads for the calls after it (no thread per call), and
 *     joined when the communicator is destroyed or aborted;
 *   - what a step means, for every executor (src/device/step.h): connector
 *     ownership handed on in plan order as random lanes finish in random
 *     orders; the passes of every op that moves elements, for every count
 *     of peers, FINAL or not, Sum and Avg, in place or not, against the op
 *     table; and which disagreement a size word shows first.
 *
 * The whole-library runs (every collective through LOOM_EXECUTOR=kernel)
 * are in tests/integration/perf-matrix.sh.
 */
#include <check.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "comms.h"
#include "interp.h"
#include "reduce.h"
#include "rng.h"

/* Random elements that stay finite in every float type (small integers and halves). */
static void fill(char *p, size_t count, loomDataType_t dt)
{
    size_t es = reduceTypeSize(dt);
    for (size_t i = 0; i < count; i++) {
        uint64_t r = rngNext();
        float f = (float)((int)(r % 41) - 20) * 0.5f;
        uint16_t h;
        double d = f;
        switch (dt) {
        case loomFloat16:
            h = reduceFloatToHalf(f);
            memcpy(p + i * es, &h, es);
            break;
        case loomBfloat16:
            h = reduceFloatToBf16(f);
            memcpy(p + i * es, &h, es);
            break;
        case loomFloat32:
            memcpy(p + i * es, &f, es);
            break;
        case loomFloat64:
            memcpy(p + i * es, &d, es);
            break;
        default:
            memcpy(p + i * es, &r, es);
            break;
        }
    }
}

START_TEST(arithmetic_matches_reduce)
{
    enum { COUNT = 301, NR = 3 };
    static _Alignas(16) char a[COUNT * 8 + 32], b[COUNT * 8 + 32], want[COUNT * 8 + 32],
        got0[COUNT * 8 + 32], got1[COUNT * 8 + 32];
    for (int dt = 0; dt < loomNumTypes; dt++) {
        size_t es = reduceTypeSize((loomDataType_t)dt);
        for (int op = 0; op < loomNumOps; op++) {
            for (int off = 0; off <= 16; off += 16 - (int)es) { /* aligned, then not */
                for (int post = 0; post <= (op == loomAvg); post++) {
                    for (int withB = 0; withB <= 1; withB++) {
                        fill(a + off, COUNT, (loomDataType_t)dt);
                        fill(b + off, COUNT, (loomDataType_t)dt);
                        if (withB && post)
                            reduceApplyFinal(want, a + off, b + off, COUNT, (loomDataType_t)dt,
                                             (loomRedOp_t)op, NR);
                        else if (withB)
                            reduceApply(want, a + off, b + off, COUNT, (loomDataType_t)dt,
                                        (loomRedOp_t)op);
                        else
                            memcpy(want, a + off, COUNT * es);
                        if (!withB && post)
                            reducePostOp(want, COUNT, (loomDataType_t)dt, (loomRedOp_t)op, NR);
                        char *outs[2] = {got0 + off, got1 + off};
                        const char *ins[1] = {a + off};
                        loomDevReduce(dt, op, outs, 2, ins, 1, withB ? b + off : NULL, COUNT, post,
                                      NR);
                        ck_assert_msg(memcmp(got0 + off, want, COUNT * es) == 0 &&
                                          memcmp(got1 + off, want, COUNT * es) == 0,
                                      "type %s op %s offset %d post %d b %d differs from reduce.c",
                                      reduceTypeName((loomDataType_t)dt),
                                      reduceOpName((loomRedOp_t)op), off, post, withB);
                    }
                }
            }
        }
    }
}
END_TEST

/* A fan-in: k messages folded into b in one pass, to three outputs, as reduceApplyMany does it. */
START_TEST(fanin_arithmetic_matches_reduce)
{
    enum { COUNT = 301, NR = 4, K = LOOM_STEP_MAXPEERS };
    static _Alignas(16) char in[K][COUNT * 8 + 32], b[COUNT * 8 + 32], want[COUNT * 8 + 32],
        got[3][COUNT * 8 + 32];
    for (int dt = 0; dt < loomNumTypes; dt++) {
        size_t es = reduceTypeSize((loomDataType_t)dt);
        for (int op = 0; op < loomNumOps; op++) {
            for (int off = 0; off <= 16; off += 16 - (int)es) {
                for (int post = 0; post <= (op == loomAvg); post++) {
                    for (int k = 1; k <= K; k++) {
                        const char *ins[K];
                        char *outs[3] = {got[0] + off, got[1] + off, got[2] + off};
                        for (int j = 0; j < k; j++) {
                            fill(in[j] + off, COUNT, (loomDataType_t)dt);
                            ins[j] = in[j] + off;
                        }
                        fill(b + off, COUNT, (loomDataType_t)dt);
                        reduceApplyMany(want, b + off, (const void *const *)ins, k, COUNT,
                                        (loomDataType_t)dt, (loomRedOp_t)op, NR, post);
                        loomDevReduce(dt, op, outs, 3, ins, k, b + off, COUNT, post, NR);
                        for (int m = 0; m < 3; m++)
                            ck_assert_msg(memcmp(outs[m], want, COUNT * es) == 0,
                                          "type %s op %s offset %d post %d: %d messages folded, "
                                          "output %d differs from reduceApplyMany",
                                          reduceTypeName((loomDataType_t)dt),
                                          reduceOpName((loomRedOp_t)op), off, post, k, m);
                    }
                }
            }
        }
    }
}
END_TEST

/* ---- one FIFO in this process, as both of its ends see it ---- */

#define SLOT_BYTES 4096
struct fakeFifo {
    uint64_t tail, head, bytes[LOOM_STEPS];
    char slots[LOOM_STEPS * SLOT_BYTES];
    uint64_t ll[LOOM_STEPS * LOOM_LL_LINES];
    uint64_t sendPos, recvPos;
};

static void fifoEnds(struct fakeFifo *f, struct loomDevConn *send, struct loomDevConn *recv)
{
    *send = (struct loomDevConn){&f->tail,   &f->head, f->bytes,    f->slots,
                                 SLOT_BYTES, f->ll,    &f->sendPos, NULL};
    *recv = *send;
    recv->pos = &f->recvPos;
}

/*
 * Appends one step of op over [off, off + len) to p, its own loop of one
 * iteration, receiving from and sending to the first `npeers` of peers (as
 * the op uses them).
 */
static void planStepFan(struct loomPlan *p, int op, const int *peers, int npeers, uint64_t off,
                        uint64_t len, int final)
{
    unsigned uses = loomStepUses((unsigned)op);
    struct loomPlanStep t = {.op = (uint8_t)op,
                             .srcBuf = LOOM_BUF_SEND,
                             .dstBuf = LOOM_BUF_RECV,
                             .flags = final ? LOOM_STEP_FINAL : 0,
                             .nrecv = (uses & LOOM_USES_RECV) ? (uint8_t)npeers : 0,
                             .nsend = (uses & LOOM_USES_SEND) ? (uint8_t)npeers : 0,
                             .nblocks = 1,
                             .len = len,
                             .srcBase = off,
                             .dstBase = off};
    for (int j = 0; j < npeers; j++) {
        t.recvPeers[j] = t.nrecv ? peers[j] : -1;
        t.sendPeers[j] = t.nsend ? peers[j] : -1;
    }
    planLoop(p);
    ck_assert_int_eq(planAppend(p, &t), loomSuccess);
}

static void planStep(struct loomPlan *p, int op, int peer, uint64_t off, uint64_t len, int final)
{
    planStepFan(p, op, &peer, 1, off, len, final);
}

struct side {
    struct loomDevConn conns[4]; /* 2 ranks: send[0..1], recv[0..1] */
    struct loomDevLane lane;
    struct loomDevBlock block;
    struct loomPortBarrier bar;
    char stage[LOOM_DEV_STAGE_BYTES];
    int32_t abort;
};

/* Rank `rank` of two, whose one lane runs plan p on bufs with the FIFO between the ranks. */
static void sideInit(struct side *s, int rank, struct fakeFifo *f, const struct loomPlan *p,
                     char *send, char *recv, loomDataType_t dt, loomRedOp_t op, int proto,
                     uint64_t llMod)
{
    memset(s, 0, sizeof(*s));
    struct loomDevConn tx, rx;
    fifoEnds(f, &tx, &rx);
    if (rank == 0)
        s->conns[1] = tx; /* send[1] */
    else
        s->conns[2] = rx; /* recv[0] */
    s->lane = (struct loomDevLane){.steps = p->steps,
                                   .nsteps = p->nsteps,
                                   .elemSize = (uint32_t)reduceTypeSize(dt),
                                   .dt = dt,
                                   .op = op,
                                   .nranks = 2,
                                   .proto = proto,
                                   .bufs = {send, recv},
                                   .send = s->conns,
                                   .recv = s->conns + 2};
    s->block = (struct loomDevBlock){.lanes = &s->lane,
                                     .nlanes = 1,
                                     .nranks = 2,
                                     .abort = &s->abort,
                                     .llMod = llMod,
                                     .stage = s->stage};
}

static int runAlone(struct side *s)
{
    struct loomPortThread t = {0, 1, &s->bar, 0};
    return loomDevRun(&s->block, &t);
}

/* 1 if every line of slot `slot` is zero. */
static int slotClear(const struct fakeFifo *f, int slot)
{
    for (int i = 0; i < LOOM_LL_LINES; i++)
        if (f->ll[slot * LOOM_LL_LINES + i] != 0)
            return 0;
    return 1;
}

static void llWraps(uint64_t mod)
{
    static struct fakeFifo f;
    static char src[LOOM_STEPS * LOOM_LL_BYTES], dst[LOOM_STEPS * LOOM_LL_BYTES];
    memset(&f, 0, sizeof(f));
    for (int round = 0; round < 40; round++) {
        struct loomPlan tx = {0}, rx = {0};
        /* Long and short messages in turn, so lines outlive the messages that follow. */
        uint64_t len[LOOM_STEPS];
        for (int k = 0; k < LOOM_STEPS; k++) {
            len[k] = (round % 3 == 0) ? LOOM_LL_BYTES / 4 : 1 + rngNext() % (LOOM_LL_BYTES / 4);
            planStep(&tx, LOOM_STEP_SEND, 1, (uint64_t)k * (LOOM_LL_BYTES / 4), len[k], 0);
            planStep(&rx, LOOM_STEP_RECV, 0, (uint64_t)k * (LOOM_LL_BYTES / 4), len[k], 0);
        }
        fill(src, sizeof(src) / 4, loomUint32);
        memset(dst, 0, sizeof(dst));
        struct side a, b;
        sideInit(&a, 0, &f, &tx, src, NULL, loomUint32, loomSum, LOOM_PROTO_LL, mod);
        sideInit(&b, 1, &f, &rx, NULL, dst, loomUint32, loomSum, LOOM_PROTO_LL, mod);
        uint64_t first = f.recvPos;
        ck_assert_int_eq(runAlone(&a), LOOM_DEV_OK); /* 8 messages fit the FIFO */
        ck_assert_int_eq(runAlone(&b), LOOM_DEV_OK);
        for (int k = 0; k < LOOM_STEPS; k++) {
            size_t at = (size_t)k * LOOM_LL_BYTES;
            ck_assert_msg(memcmp(dst + at, src + at, len[k] * 4) == 0,
                          "round %d message %d (%llu elements) arrived wrong", round, k,
                          (unsigned long long)len[k]);
            uint64_t pos = first + (uint64_t)k;
            if (LOOM_LL_WRAPS(pos, mod))
                ck_assert_msg(slotClear(&f, (int)(pos % LOOM_STEPS)),
                              "slot %d not cleared after message %llu, the last before its "
                              "flags wrap (mod %llu)",
                              (int)(pos % LOOM_STEPS), (unsigned long long)pos,
                              (unsigned long long)mod);
        }
        ck_assert_uint_eq(f.head, f.tail);
        planFree(&tx);
        planFree(&rx);
    }
}

START_TEST(ll_flag_wraps_mod8)
{
    llWraps(8);
}
END_TEST

START_TEST(ll_flag_wraps_mod16)
{
    llWraps(16);
}
END_TEST

/* ---- two blocks of three threads, concurrently ---- */

struct worker {
    struct side *side;
    uint32_t tid;
    int status;
};

static void *workerRun(void *arg)
{
    struct worker *w = arg;
    struct loomPortThread t = {w->tid, 3, &w->side->bar, 0};
    w->status = loomDevRun(&w->side->block, &t);
    return NULL;
}

static void threaded(int proto)
{
    enum { N = 20000 };
    static struct fakeFifo f;
    static float src0[N], src1[N], dst[N];
    memset(&f, 0, sizeof(f));
    for (int i = 0; i < N; i++) {
        src0[i] = (float)(i % 97);
        src1[i] = (float)(i % 89) * 3.0f;
    }
    memset(dst, 0, sizeof(dst));
    /* rank 0 sends its vector in chunks; rank 1 adds its own and averages into dst */
    uint64_t chunk = proto == LOOM_PROTO_LL ? LOOM_LL_BYTES / sizeof(float) : SLOT_BYTES / 4;
    struct loomPlan tx = {0}, rx = {0};
    for (uint64_t off = 0; off < N; off += chunk) {
        uint64_t len = N - off < chunk ? N - off : chunk;
        planStep(&tx, LOOM_STEP_SEND, 1, off, len, 0);
        planStep(&rx, LOOM_STEP_RECV_REDUCE_COPY, 0, off, len, 1);
    }
    struct side a, b;
    sideInit(&a, 0, &f, &tx, (char *)src0, NULL, loomFloat32, loomAvg, proto, LOOM_LL_MOD);
    sideInit(&b, 1, &f, &rx, (char *)src1, (char *)dst, loomFloat32, loomAvg, proto, LOOM_LL_MOD);
    struct worker w[6];
    pthread_t th[6];
    for (int i = 0; i < 6; i++) {
        w[i] = (struct worker){i < 3 ? &a : &b, (uint32_t)(i % 3), -1};
        ck_assert_int_eq(pthread_create(&th[i], NULL, workerRun, &w[i]), 0);
    }
    for (int i = 0; i < 6; i++) {
        pthread_join(th[i], NULL);
        ck_assert_int_eq(w[i].status, LOOM_DEV_OK);
    }
    for (int i = 0; i < N; i++)
        ck_assert_msg(dst[i] == (src0[i] + src1[i]) / 2.0f, "element %d: %g, want %g", i,
                      (double)dst[i], (double)((src0[i] + src1[i]) / 2.0f));
    planFree(&tx);
    planFree(&rx);
}

START_TEST(threads_simple)
{
    threaded(LOOM_PROTO_SIMPLE);
}
END_TEST

START_TEST(threads_ll)
{
    threaded(LOOM_PROTO_LL);
}
END_TEST

/* ---- a tree top: fan-in and fan-out across four blocks ---- */

enum { FAN_RANKS = 4, FAN_THREADS = 2, FAN_N = 9000 };

struct fanRank {
    struct loomDevConn conns[2 * FAN_RANKS]; /* send[0..3], recv[0..3] */
    struct loomDevLane lane;
    struct loomDevBlock block;
    struct loomPortBarrier bar;
    char stage[LOOM_DEV_STAGE_BYTES];
    int32_t abort;
    struct loomPlan plan;
};

struct fanWorker {
    struct fanRank *rank;
    uint32_t tid;
    int status;
};

static void *fanWorkerRun(void *arg)
{
    struct fanWorker *w = arg;
    struct loomPortThread t = {w->tid, FAN_THREADS, &w->rank->bar, 0};
    w->status = loomDevRun(&w->rank->block, &t);
    return NULL;
}

/*
 * Rank 0 is the parent of ranks 1-3. Each child sends each piece of its
 * vector up and receives the average back; the parent, per piece, takes the
 * three messages, adds them to its own piece and divides (one
 * RECV_REDUCE_COPY_SEND with nrecv = nsend = 3), and sends the result to all
 * three children. Every rank's output must equal reduceApplyMany's.
 */
static void fanTree(int proto)
{
    static struct fakeFifo fifo[FAN_RANKS][FAN_RANKS]; /* [from][to] */
    static float src[FAN_RANKS][FAN_N], dst[FAN_RANKS][FAN_N], want[FAN_N];
    static struct fanRank r[FAN_RANKS];
    int children[3] = {1, 2, 3}, parent = 0;
    uint64_t chunk = proto == LOOM_PROTO_LL ? LOOM_LL_BYTES / sizeof(float) : SLOT_BYTES / 4;
    memset(fifo, 0, sizeof(fifo));
    memset(dst, 0, sizeof(dst));
    for (int q = 0; q < FAN_RANKS; q++)
        for (int i = 0; i < FAN_N; i++)
            src[q][i] = (float)((i * (q + 3)) % 101) * 0.25f;
    const void *ins[3] = {src[1], src[2], src[3]};
    reduceApplyMany(want, src[0], ins, 3, FAN_N, loomFloat32, loomAvg, FAN_RANKS, 1);
    for (int q = 0; q < FAN_RANKS; q++) {
        struct fanRank *x = &r[q];
        memset(x, 0, sizeof(*x));
        for (int p = 0; p < FAN_RANKS; p++) {
            struct loomDevConn tx, rx;
            fifoEnds(&fifo[q][p], &tx, &rx);
            x->conns[p] = tx; /* send to p */
            fifoEnds(&fifo[p][q], &tx, &rx);
            x->conns[FAN_RANKS + p] = rx; /* receive from p */
        }
        for (uint64_t off = 0; off < FAN_N; off += chunk) {
            uint64_t len = FAN_N - off < chunk ? FAN_N - off : chunk;
            if (q == 0) {
                planStepFan(&x->plan, LOOM_STEP_RECV_REDUCE_COPY_SEND, children, 3, off, len, 1);
            } else {
                planStep(&x->plan, LOOM_STEP_SEND, parent, off, len, 0);
                planStep(&x->plan, LOOM_STEP_RECV, parent, off, len, 0);
            }
        }
        x->lane = (struct loomDevLane){.steps = x->plan.steps,
                                       .nsteps = x->plan.nsteps,
                                       .elemSize = sizeof(float),
                                       .dt = loomFloat32,
                                       .op = loomAvg,
                                       .nranks = FAN_RANKS,
                                       .proto = proto,
                                       .bufs = {(char *)src[q], (char *)dst[q]},
                                       .send = x->conns,
                                       .recv = x->conns + FAN_RANKS};
        x->block = (struct loomDevBlock){.lanes = &x->lane,
                                         .nlanes = 1,
                                         .nranks = FAN_RANKS,
                                         .abort = &x->abort,
                                         .llMod = 16,
                                         .stage = x->stage};
    }
    struct fanWorker w[FAN_RANKS * FAN_THREADS];
    pthread_t th[FAN_RANKS * FAN_THREADS];
    for (int i = 0; i < FAN_RANKS * FAN_THREADS; i++) {
        w[i] = (struct fanWorker){&r[i / FAN_THREADS], (uint32_t)(i % FAN_THREADS), -1};
        ck_assert_int_eq(pthread_create(&th[i], NULL, fanWorkerRun, &w[i]), 0);
    }
    for (int i = 0; i < FAN_RANKS * FAN_THREADS; i++) {
        pthread_join(th[i], NULL);
        ck_assert_int_eq(w[i].status, LOOM_DEV_OK);
    }
    for (int q = 0; q < FAN_RANKS; q++) {
        for (int i = 0; i < FAN_N; i++)
            ck_assert_msg(memcmp(&dst[q][i], &want[i], sizeof(float)) == 0,
                          "rank %d element %d: %g, want %g", q, i, (double)dst[q][i],
                          (double)want[i]);
        planFree(&r[q].plan);
    }
    for (int q = 0; q < FAN_RANKS; q++)
        for (int p = 0; p < FAN_RANKS; p++)
            ck_assert_uint_eq(fifo[q][p].head, fifo[q][p].tail);
}

START_TEST(fan_in_out_simple)
{
    fanTree(LOOM_PROTO_SIMPLE);
}
END_TEST

START_TEST(fan_in_out_ll)
{
    fanTree(LOOM_PROTO_LL);
}
END_TEST

/*
 * The watchdog's part: a block of three threads waits for a message that
 * never comes; another thread raises the abort flag, and every thread of
 * the block returns, having published nothing. Then the same with the flag
 * raised before the block starts.
 */
START_TEST(abort_stops_a_waiting_block)
{
    static struct fakeFifo f;
    static char dst[64];
    memset(&f, 0, sizeof(f));
    struct loomPlan rx = {0};
    planStep(&rx, LOOM_STEP_RECV, 0, 0, 4, 0);
    for (int proto = 0; proto < LOOM_PROTO_NUM; proto++) {
        struct side b;
        sideInit(&b, 1, &f, &rx, NULL, dst, loomUint32, loomSum, proto, LOOM_LL_MOD);
        struct worker w[3];
        pthread_t th[3];
        for (int i = 0; i < 3; i++) {
            w[i] = (struct worker){&b, (uint32_t)i, -1};
            ck_assert_int_eq(pthread_create(&th[i], NULL, workerRun, &w[i]), 0);
        }
        struct timespec pause = {0, 20 * 1000 * 1000};
        nanosleep(&pause, NULL);
        __atomic_store_n(&b.abort, 1, __ATOMIC_RELEASE);
        for (int i = 0; i < 3; i++) {
            pthread_join(th[i], NULL);
            ck_assert_int_eq(w[i].status, LOOM_DEV_STOPPED);
        }
        ck_assert_uint_eq(f.head, 0);
        ck_assert_uint_eq(f.recvPos, 0);
        sideInit(&b, 1, &f, &rx, NULL, dst, loomUint32, loomSum, proto, LOOM_LL_MOD);
        b.abort = 1;
        ck_assert_int_eq(runAlone(&b), LOOM_DEV_STOPPED);
    }
    planFree(&rx);
}
END_TEST

/* Threads of this process now (the kernel's count, /proc/self/status). */
static int taskCount(void)
{
    char line[128];
    int n = -1;
    FILE *f = fopen("/proc/self/status", "r");
    if (f == NULL)
        return -1;
    while (n < 0 && fgets(line, sizeof(line), f) != NULL)
        if (sscanf(line, "Threads: %d", &n) != 1)
            n = -1;
    fclose(f);
    return n;
}

/* Waits (up to 2 s) for an exited thread to leave /proc; the count then. */
static int taskCountSettles(int want)
{
    int n = taskCount();
    for (int i = 0; i < 200 && n != want; i++) {
        struct timespec pause = {0, 10 * 1000 * 1000};
        nanosleep(&pause, NULL);
        n = taskCount();
    }
    return n;
}

/* AllReduces of 64 Ki floats (2 lanes: both channels), results checked; 0 or a failure line. */
static int allReduces(int rank, int n, loomComm_t comm, int calls)
{
    size_t count = 64 * 1024;
    float *buf = malloc(count * sizeof(*buf));
    int bad = buf == NULL;
    for (int c = 0; c < calls && !bad; c++) {
        for (size_t i = 0; i < count; i++)
            buf[i] = (float)(rank + (int)(i % 7) + c);
        if (loomAllReduce(buf, buf, count, loomFloat32, loomSum, comm, NULL) != loomSuccess) {
            free(buf);
            return testRankFail(rank, 1, "AllReduce failed: %s", loomGetLastError(comm));
        }
        for (size_t i = 0; i < count; i++)
            bad |= buf[i] != (float)(n * (n - 1) / 2 + n * ((int)(i % 7) + c));
    }
    free(buf);
    return bad ? testRankFail(rank, 2, "wrong AllReduce result under the kernel executor") : 0;
}

static void workersEnv(int rank)
{
    (void)rank;
    setenv("LOOM_EXECUTOR", "kernel", 1);
    setenv("LOOM_KERNEL_THREADS", "2", 1);
    setenv("LOOM_NCHANNELS", "2", 1);
    setenv("LOOM_TIMEOUT", "20", 1);
}

static int workersLife(int rank, int n, loomComm_t comm)
{
    int before = taskCount(), rc;
    if ((rc = allReduces(rank, n, comm, 1)) != 0)
        return rc;
    /* 2 blocks of 2 threads, the caller being one: 3 workers (and under ThreadSanitizer its
     * own thread, started with the first thread) */
    int started = taskCount();
    if (started < before + 3)
        return testRankFail(rank, 3, "%d threads after the first call, %d before: not 3 workers",
                            started, before);
    if ((rc = allReduces(rank, n, comm, 5)) != 0)
        return rc;
    if (taskCount() != started)
        return testRankFail(rank, 4, "%d threads after 6 calls, %d after the first", taskCount(),
                            started);
    loomComm_t sub = NULL;
    if (loomCommSplit(comm, 0, rank, &sub, NULL) != loomSuccess)
        return testRankFail(rank, 5, "split failed: %s", loomGetLastError(comm));
    if ((rc = allReduces(rank, n, sub, 2)) != 0)
        return rc;
    /* its 3 workers and its status listener's thread (src/base/bootstatus.c) */
    if (taskCount() != started + 4)
        return testRankFail(rank, 6, "%d threads with a second communicator's workers, not %d",
                            taskCount(), started + 4);
    struct timespec pause = {0, 50 * 1000 * 1000}; /* the workers go to sleep */
    nanosleep(&pause, NULL);
    if (loomCommAbort(sub) != loomSuccess)
        return testRankFail(rank, 7, "abort failed: %s", loomGetLastError(NULL));
    if (taskCountSettles(started) != started)
        return testRankFail(rank, 8, "%d threads after an abort, %d before the split", taskCount(),
                            started);
    if (loomCommDestroy(comm) != loomSuccess)
        return testRankFail(rank, 9, "destroy failed: %s", loomGetLastError(NULL));
    if (taskCountSettles(started - 4) != started - 4)
        return testRankFail(rank, 10,
                            "%d threads after destroy, %d with its 3 workers and its status "
                            "listener",
                            taskCount(), started);
    return 0;
}

START_TEST(workers_persist_and_are_joined)
{
    runRanksWith(2, workersLife, workersEnv);
}
END_TEST

/* ---- what a step means (src/device/step.h) ---- */

/*
 * Connector ownership: after the claim and after every lane that finishes
 * (in a random order), each connector's owner is the first lane in plan
 * order that names it and is not done, or none; nothing is left handed on.
 */
START_TEST(owners_take_turns_in_plan_order)
{
    enum { NR = 4, MAXLANES = 6, MAXT = 3 };
    for (int round = 0; round < 300; round++) {
        struct loomPlanStep steps[MAXLANES][MAXT];
        struct loomDevLane lanes[MAXLANES];
        int32_t owner[2 * NR];
        struct loomDevBlock b;
        uint32_t nlanes = 1 + (uint32_t)(rngNext() % MAXLANES);
        memset(steps, 0, sizeof(steps));
        memset(lanes, 0, sizeof(lanes));
        memset(&b, 0, sizeof(b));
        for (uint32_t i = 0; i < nlanes; i++) {
            lanes[i].nsteps = 1 + (uint32_t)(rngNext() % MAXT);
            lanes[i].steps = steps[i];
            for (uint32_t k = 0; k < lanes[i].nsteps; k++) {
                struct loomPlanStep *s = &steps[i][k];
                int sendFirst = (int)(rngNext() % NR), recvFirst = (int)(rngNext() % NR);
                s->nsend = (uint8_t)(rngNext() % 3);
                s->nrecv = (uint8_t)(rngNext() % 3);
                for (int j = 0; j < s->nsend; j++) /* distinct peers, as planAppend wants */
                    s->sendPeers[j] = (sendFirst + j) % NR;
                for (int j = 0; j < s->nrecv; j++)
                    s->recvPeers[j] = (recvFirst + j) % NR;
            }
        }
        b.lanes = lanes;
        b.nlanes = nlanes;
        b.nranks = NR;
        b.owner = owner;
        loomDevOwnersClaim(&b);
        for (uint32_t finished = 0;; finished++) {
            for (int dir = 0; dir < 2; dir++) {
                for (int p = 0; p < NR; p++) {
                    int32_t want = LOOM_OWNER_NONE;
                    for (uint32_t i = 0; i < nlanes && want < 0; i++)
                        if (!lanes[i].done &&
                            loomPlanUsesPeer(lanes[i].steps, lanes[i].nsteps, dir, p))
                            want = (int32_t)i;
                    ck_assert_msg(owner[dir * NR + p] == want,
                                  "round %d, %u lanes done: connector (%d, %d) owned by %d, not %d",
                                  round, finished, dir, p, owner[dir * NR + p], want);
                }
            }
            if (finished == nlanes)
                break;
            uint32_t i;
            do
                i = (uint32_t)(rngNext() % nlanes);
            while (lanes[i].done);
            lanes[i].done = 1;
            loomDevOwnersRelease(&b, i);
        }
    }
}
END_TEST

static int32_t elemAt(const char *p, size_t e)
{
    int32_t v;
    memcpy(&v, p + 4 * e, 4);
    return v;
}

/* Runs a step's passes one element at a time through a temporary: what the record says. */
static void passesRun(const struct loomStepWork *w, size_t count, int nranks)
{
    for (int k = 0; k < w->npass; k++) {
        const struct loomStepPass *p = &w->pass[k];
        int32_t tmp[16];
        ck_assert(p->nto >= 1 && p->nin >= 1);
        ck_assert(p->reduce ? p->with != NULL : p->with == NULL && p->nin == 1);
        ck_assert(!p->overlap || (p->nto == 1 && p->dstFirst && !p->reduce));
        for (size_t e = 0; e < count; e++) {
            int32_t v = p->reduce ? elemAt(p->with, e) : 0;
            for (int j = 0; j < p->nin; j++)
                v += elemAt(p->in[j], e);
            tmp[e] = p->divide ? v / nranks : v;
        }
        for (int m = 0; m < p->nto; m++)
            memcpy(p->to[m], tmp, 4 * count);
    }
}

/*
 * The local work of every op that moves elements, for every count of peers
 * the op table allows, FINAL or not, Sum and Avg, dst apart from src, equal
 * to it or overlapping it (a COPY): the passes leave in dst and the slots
 * what the op table says (slots: the reduction divided when final, else the
 * message or src as is; dst: either, divided when final), and `callers` is
 * set exactly when the values a slot is copied from are in src or dst.
 */
START_TEST(step_work_is_the_op_table)
{
    enum { COUNT = 8 };
    static const int redops[] = {loomSum, loomAvg};
    for (int op = 0; op < LOOM_STEP_OFFER; op++) {
        unsigned uses = loomStepUses((unsigned)op);
        int maxRecv = !(uses & LOOM_USES_RECV) ? 0 : (uses & LOOM_USES_FANIN) ? 3 : 1;
        int maxSend = !(uses & LOOM_USES_SEND) ? 0 : (uses & LOOM_USES_FANOUT) ? 3 : 1;
        int places = (uses & LOOM_USES_DST) && (uses & LOOM_USES_SRC) ? 3 : 1;
        for (int combo = 0; combo < 2 * 2 * 2 * 3 * 3 * 3; combo++) {
            int final = combo & 1, redop = redops[(combo >> 1) & 1];
            int nranks = (combo >> 2) & 1 ? 3 : 1, rest = combo >> 3;
            int nrecv = rest % 3 + (maxRecv > 0), nsend = rest / 3 % 3 + (maxSend > 0);
            int place = rest / 9;
            if (nrecv > maxRecv || nsend > maxSend || place >= places ||
                (place == 2 && (uses & LOOM_USES_REDUCE)))
                continue;
            _Alignas(16) char mem[4 * 256];
            char *src = mem, *dst = place == 0 ? mem + 4 * 32 : place == 1 ? src : src + 4 * 3;
            const char *in[LOOM_STEP_MAXPEERS];
            char *out[LOOM_STEP_MAXPEERS];
            int32_t vals[COUNT], want[COUNT], sentinel = -7;
            for (int e = 0; e < 256; e++)
                memcpy(mem + 4 * e, &sentinel, 4);
            for (int e = 0; e < COUNT; e++) {
                int32_t v = 10 * (e + 1);
                memcpy(src + 4 * e, &v, 4);
            }
            for (int j = 0; j < LOOM_STEP_MAXPEERS; j++) {
                in[j] = mem + 4 * (64 + 16 * j);
                out[j] = mem + 4 * (128 + 16 * j);
                for (int e = 0; e < COUNT; e++) {
                    int32_t v = 1000 * (j + 1) + 3 * e;
                    memcpy((char *)in[j] + 4 * e, &v, 4);
                }
            }
            for (int e = 0; e < COUNT; e++) {
                int32_t v = (uses & LOOM_USES_REDUCE) ? elemAt(src, (size_t)e) : 0;
                for (int j = 0; j < ((uses & LOOM_USES_REDUCE) ? nrecv : 0); j++)
                    v += elemAt(in[j], (size_t)e);
                if (!(uses & LOOM_USES_REDUCE))
                    v = (uses & LOOM_USES_RECV) ? elemAt(in[0], (size_t)e) : elemAt(src, (size_t)e);
                vals[e] = v;
                want[e] = final && redop == loomAvg && nranks > 1 ? v / nranks : v;
            }
            struct loomStep s;
            memset(&s, 0, sizeof(s));
            s.op = (uint8_t)op;
            s.flags = final ? LOOM_STEP_FINAL : 0;
            s.nrecv = (uint8_t)nrecv;
            s.nsend = (uint8_t)nsend;
            s.count = COUNT;
            struct loomStepWork w;
            loomStepWorkOf(&w, &s, redop, nranks, src, dst, in, out, nsend, 4 * COUNT);
            for (int k = 0; k < w.npass; k++) { /* where the host copies a slot from */
                const struct loomStepPass *p = &w.pass[k];
                int first = p->reduce || p->dstFirst;
                const char *from = first ? p->to[0] : p->in[0];
                int caller = (from >= src && from < src + 4 * COUNT) ||
                             (from >= dst && from < dst + 4 * COUNT);
                ck_assert(!p->dstFirst || p->to[0] == dst);
                if (p->nto > first)
                    ck_assert_msg(p->callers == caller, "op %s pass %d: callers %d",
                                  loomStepName((unsigned)op), k, p->callers);
            }
            passesRun(&w, COUNT, nranks);
            for (int e = 0; e < COUNT; e++) {
                for (int j = 0; j < nsend; j++)
                    ck_assert_msg(
                        elemAt(out[j], (size_t)e) ==
                            ((uses & LOOM_USES_REDUCE) ? want[e] : vals[e]),
                        "op %s final %d redop %d nranks %d nrecv %d nsend %d place %d: slot %d "
                        "element %d is %d",
                        loomStepName((unsigned)op), final, redop, nranks, nrecv, nsend, place, j, e,
                        elemAt(out[j], (size_t)e));
                if (uses & LOOM_USES_DST)
                    ck_assert_msg(
                        elemAt(dst, (size_t)e) == want[e],
                        "op %s final %d redop %d nranks %d nrecv %d nsend %d place %d: dst "
                        "element %d is %d, not %d",
                        loomStepName((unsigned)op), final, redop, nranks, nrecv, nsend, place, e,
                        elemAt(dst, (size_t)e), want[e]);
            }
            for (int j = nsend; j < LOOM_STEP_MAXPEERS; j++)
                ck_assert_int_eq(elemAt(out[j], 0), sentinel);
            if (!(uses & LOOM_USES_DST))
                ck_assert_int_eq(elemAt(mem + 4 * 32, 0), sentinel);
        }
    }
}
END_TEST

/* A size word and what a step expects: the first disagreement, path, protocol, size, kind. */
START_TEST(message_check_names_the_first_disagreement)
{
    ck_assert_int_eq(loomMessageCheck(64, 64, 0, 0, 0), LOOM_MSG_OK);
    ck_assert_int_eq(loomMessageCheck(64 | LOOM_FIFO_LL, 64, 0, 1, 0), LOOM_MSG_OK);
    ck_assert_int_eq(loomMessageCheck(64 | LOOM_FIFO_DEVICE_DATA, 64, 0, 0, 1), LOOM_MSG_OK);
    ck_assert_int_eq(loomMessageCheck(40 | LOOM_FIFO_OFFER, 40, 1, 0, 0), LOOM_MSG_OK);
    ck_assert_int_eq(loomMessageCheck(32 | LOOM_FIFO_OFFER | LOOM_FIFO_LL, 64, 0, 0, 0),
                     LOOM_MSG_PATH);
    ck_assert_int_eq(loomMessageCheck(64, 64, 1, 0, 0), LOOM_MSG_PATH);
    ck_assert_int_eq(loomMessageCheck(32 | LOOM_FIFO_LL, 64, 0, 0, 0), LOOM_MSG_PROTO);
    ck_assert_int_eq(loomMessageCheck(64, 64, 0, 1, 0), LOOM_MSG_PROTO);
    ck_assert_int_eq(loomMessageCheck(32 | LOOM_FIFO_DEVICE_DATA, 64, 0, 0, 0), LOOM_MSG_SIZE);
    ck_assert_int_eq(loomMessageCheck(64 | LOOM_FIFO_DEVICE_DATA, 64, 0, 0, 0), LOOM_MSG_KIND);
    /* readiness at the edges */
    ck_assert(!loomMessageIn(5, 5) && loomMessageIn(6, 5));
    ck_assert(loomSlotFree(5, 5 + LOOM_STEPS - 1) && !loomSlotFree(5, 5 + LOOM_STEPS));
    ck_assert(loomDrained(5, 5) && !loomDrained(4, 5));
    ck_assert(loomLineIn((uint64_t)LOOM_LL_FLAG(9, 8) << 32 | 77, 9, 8));
    ck_assert(!loomLineIn((uint64_t)LOOM_LL_FLAG(10, 8) << 32 | 77, 9, 8));
}
END_TEST

static Suite *interpSuite(void)
{
    Suite *s = suite_create("interp");
    TCase *tc = tcase_create("arithmetic");
    tcase_add_test(tc, arithmetic_matches_reduce);
    tcase_add_test(tc, fanin_arithmetic_matches_reduce);
    suite_add_tcase(s, tc);
    tc = tcase_create("step");
    tcase_add_test(tc, owners_take_turns_in_plan_order);
    tcase_add_test(tc, step_work_is_the_op_table);
    tcase_add_test(tc, message_check_names_the_first_disagreement);
    suite_add_tcase(s, tc);
    tc = tcase_create("ll");
    tcase_add_test(tc, ll_flag_wraps_mod8);
    tcase_add_test(tc, ll_flag_wraps_mod16);
    suite_add_tcase(s, tc);
    tc = tcase_create("threads");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, threads_simple);
    tcase_add_test(tc, threads_ll);
    tcase_add_test(tc, fan_in_out_simple);
    tcase_add_test(tc, fan_in_out_ll);
    tcase_add_test(tc, abort_stops_a_waiting_block);
    suite_add_tcase(s, tc);
    tc = tcase_create("workers");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, workers_persist_and_are_joined);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(interpSuite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
