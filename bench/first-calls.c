/*
 * first-calls — what the first calls of each new message size cost, call by
 * call: the cold start that a benchmark with few warm-up iterations (nccl-tests
 * runs 5) or a job whose sizes change from step to step meets.
 *
 *   tools/loomrun -n 2 bench/first-calls [COLL] [MIN] [MAX] [CALLS] [one-core]
 *
 * COLL: allreduce, allgather (default), reducescatter, alltoall, broadcast,
 * reduce. For each size from MIN to MAX floats per rank (doubling; defaults
 * 4096 and 65536), CALLS (default 12) blocking calls on ordinary buffers,
 * written once before the first call; every rank prints, per call, the wall
 * time, this thread's CPU time (which a descheduled peer does not inflate)
 * and the minor page faults of the process, all in us and counts:
 *
 *   rank 0 allgather 16384 floats
 *     wall   T1 T2 ... (us, call by call)
 *     cpu    C1 C2 ...
 *     minflt F1 F2 ...
 *
 * A fault count that stays above zero for the first calls of a size and
 * then drops means the call reaches memory mapped on first touch; the
 * wall and CPU columns say what that costs.
 *
 * With `one-core` every rank binds itself, after init, to the first core it
 * may run on: the ranks share one core although init saw them each on a
 * core of their own, which is where the scheduler can put two ranks of a
 * 2-core machine after a wake-up. A rank that spins for a peer waiting for
 * that very core costs about a millisecond a call there (src/exec/exec.c).
 * Built with the project (never installed).
 */
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#include "loom.h"

#define MAX_CALLS 1000

static double clockUs(clockid_t id)
{
    struct timespec ts;
    clock_gettime(id, &ts);
    return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec / 1e3;
}

static long minorFaults(void)
{
    struct rusage r;
    getrusage(RUSAGE_SELF, &r);
    return r.ru_minflt;
}

/* One call of coll on count floats per rank; s and r hold count x nranks. */
static loomResult_t runCall(const char *coll, const float *s, float *r, size_t count, int nranks,
                            loomComm_t comm)
{
    if (strcmp(coll, "allreduce") == 0)
        return loomAllReduce(s, r, count, loomFloat32, loomSum, comm, NULL);
    if (strcmp(coll, "reducescatter") == 0)
        return loomReduceScatter(s, r, count / nranks, loomFloat32, loomSum, comm, NULL);
    if (strcmp(coll, "alltoall") == 0)
        return loomAlltoAll(s, r, count / nranks, loomFloat32, comm, NULL);
    if (strcmp(coll, "broadcast") == 0)
        return loomBroadcast(s, r, count, loomFloat32, 0, comm, NULL);
    if (strcmp(coll, "reduce") == 0)
        return loomReduce(s, r, count, loomFloat32, loomSum, 0, comm, NULL);
    return loomAllGather(s, r, count, loomFloat32, comm, NULL);
}

static void printRow(const char *name, const double *v, int calls)
{
    printf("  %-6s", name);
    for (int i = 0; i < calls; i++)
        printf(" %.0f", v[i]);
    printf("\n");
}

int main(int argc, char **argv)
{
    const char *coll = argc > 1 ? argv[1] : "allgather";
    size_t lo = argc > 2 ? strtoul(argv[2], NULL, 0) : 4096;
    size_t hi = argc > 3 ? strtoul(argv[3], NULL, 0) : 65536;
    int calls = argc > 4 ? atoi(argv[4]) : 12;
    int oneCore = argc > 5 && strcmp(argv[5], "one-core") == 0;
    if (lo == 0 || hi < lo || calls < 1 || calls > MAX_CALLS || (argc > 5 && !oneCore)) {
        fprintf(stderr, "usage: first-calls [COLL] [MIN] [MAX] [CALLS <= %d] [one-core]\n",
                MAX_CALLS);
        return 2;
    }
    loomComm_t comm;
    if (loomCommInitFromEnv(&comm) != loomSuccess) {
        fprintf(stderr, "first-calls: loomCommInitFromEnv failed: %s (run under tools/loomrun)\n",
                loomGetLastError(NULL));
        return 1;
    }
    int rank, nranks;
    loomCommUserRank(comm, &rank);
    loomCommCount(comm, &nranks);
    cpu_set_t set;
    if (oneCore && sched_getaffinity(0, sizeof(set), &set) == 0) {
        int first = 0;
        while (first < CPU_SETSIZE && !CPU_ISSET(first, &set))
            first++;
        CPU_ZERO(&set);
        CPU_SET(first, &set);
        if (sched_setaffinity(0, sizeof(set), &set) != 0) {
            perror("first-calls: sched_setaffinity");
            return 1;
        }
        printf("rank %d bound to core %d after init\n", rank, first);
    }
    size_t bytes = hi * (size_t)nranks * sizeof(float);
    float *s = malloc(bytes), *r = malloc(bytes);
    if (s == NULL || r == NULL) {
        fprintf(stderr, "first-calls: out of memory for 2 x %zu bytes\n", bytes);
        return 1;
    }
    /* Every page faulted in before the first timed call (not zeros: the compiler may turn
     * malloc and a memset to 0 into calloc, which leaves fresh pages untouched). */
    memset(s, 1, bytes);
    memset(r, 1, bytes);
    static double wall[MAX_CALLS], cpu[MAX_CALLS], faults[MAX_CALLS];
    for (size_t count = lo; count <= hi; count *= 2) {
        for (int i = 0; i < calls; i++) {
            long f0 = minorFaults();
            double t0 = clockUs(CLOCK_MONOTONIC), c0 = clockUs(CLOCK_THREAD_CPUTIME_ID);
            loomResult_t res = runCall(coll, s, r, count, nranks, comm);
            cpu[i] = clockUs(CLOCK_THREAD_CPUTIME_ID) - c0;
            wall[i] = clockUs(CLOCK_MONOTONIC) - t0;
            faults[i] = (double)(minorFaults() - f0);
            if (res != loomSuccess) {
                fprintf(stderr, "first-calls: rank %d: %s of %zu floats failed: %s\n", rank, coll,
                        count, loomGetLastError(comm));
                return 1;
            }
        }
        printf("rank %d %s %zu floats\n", rank, coll, count);
        printRow("wall", wall, calls);
        printRow("cpu", cpu, calls);
        printRow("minflt", faults, calls);
        fflush(stdout);
    }
    loomCommDestroy(comm);
    free(s);
    free(r);
    return 0;
}
