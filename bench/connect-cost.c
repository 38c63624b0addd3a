/*
 * connect-cost — what creating a communicator costs each rank, and what its
 * first AlltoAll adds: the time of loomCommInitFromEnv and of the first
 * AlltoAll (4 bytes to each peer), the descriptors the
 * process holds (/proc/self/fd), the /dev/shm segments it maps and their
 * bytes (/proc/self/maps), and the peers it is connected to.
 *
 *   tools/loomrun -n 64 bench/connect-cost
 *
 * Rank 0 prints, for "after init" and "after AlltoAll", the minimum,
 * average and maximum over the ranks of each figure (the init time is each
 * rank's own; ranks start within a few milliseconds of each other under
 * loomrun). Built with the project (never installed); with
 * -DCONNECT_COST_NO_FIELD it builds against a loom.h whose loomPeerInfo_t
 * has no `connected` (to measure an older tree the same way).
 */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "loom.h"

enum { F_INIT_MS, F_CALL_MS, F_FDS, F_SHM_MAPS, F_SHM_KIB, F_PEERS, F_NUM };
static const char *const names[F_NUM] = {"init ms",      "AlltoAll ms",    "descriptors",
                                         "shm mappings", "shm KiB mapped", "peers connected"};

static double nowMs(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

static double countFds(void)
{
    DIR *d = opendir("/proc/self/fd");
    int n = 0;
    if (d == NULL)
        return -1;
    for (struct dirent *e; (e = readdir(d)) != NULL;)
        n += e->d_name[0] != '.';
    closedir(d);
    return n - 1; /* the directory's own */
}

static void shmMaps(double *maps, double *kib)
{
    char line[1024];
    FILE *f = fopen("/proc/self/maps", "r");
    *maps = *kib = 0;
    if (f == NULL)
        return;
    while (fgets(line, sizeof(line), f)) {
        unsigned long lo, hi;
        if (strstr(line, "/dev/shm/") == NULL || sscanf(line, "%lx-%lx", &lo, &hi) != 2)
            continue;
        *maps += 1;
        *kib += (double)(hi - lo) / 1024;
    }
    fclose(f);
}

static double peersConnected(loomComm_t comm, int nranks)
{
#ifdef CONNECT_COST_NO_FIELD
    (void)comm;
    return nranks; /* every pair, at init */
#else
    int n = 0;
    for (int p = 0; p < nranks; p++) {
        loomPeerInfo_t info;
        n += loomCommPeerInfo(comm, p, &info) == loomSuccess && info.connected;
    }
    return n;
#endif
}

static void measure(loomComm_t comm, int nranks, double initMs, double callMs, double *f)
{
    f[F_INIT_MS] = initMs;
    f[F_CALL_MS] = callMs;
    f[F_FDS] = countFds();
    shmMaps(&f[F_SHM_MAPS], &f[F_SHM_KIB]);
    f[F_PEERS] = peersConnected(comm, nranks);
}

static void report(const char *when, const double *all, int nranks)
{
    printf("%s (%d ranks):\n", when, nranks);
    for (int k = 0; k < F_NUM; k++) {
        double lo = all[k], hi = all[k], sum = 0;
        for (int r = 0; r < nranks; r++) {
            double v = all[r * F_NUM + k];
            lo = v < lo ? v : lo;
            hi = v > hi ? v : hi;
            sum += v;
        }
        printf("  %-16s min %9.1f  avg %9.1f  max %9.1f\n", names[k], lo, sum / nranks, hi);
    }
}

int main(void)
{
    loomComm_t comm;
    int rank, nranks;
    double t0 = nowMs();
    if (loomCommInitFromEnv(&comm) != loomSuccess) {
        fprintf(stderr, "connect-cost: loomCommInitFromEnv failed: %s (run under tools/loomrun)\n",
                loomGetLastError(NULL));
        return 1;
    }
    double initMs = nowMs() - t0;
    loomCommUserRank(comm, &rank);
    loomCommCount(comm, &nranks);
    double *all = calloc((size_t)nranks * F_NUM, sizeof(double));
    int *s = calloc((size_t)nranks, sizeof(int)), *r = calloc((size_t)nranks, sizeof(int));
    if (all == NULL || s == NULL || r == NULL)
        return 1;
    double callMs = 0;
    for (int pass = 0; pass < 2; pass++) {
        measure(comm, nranks, initMs, callMs, &all[rank * F_NUM]);
        if (loomAllGather(&all[rank * F_NUM], all, F_NUM, loomFloat64, comm, NULL) != loomSuccess) {
            fprintf(stderr, "connect-cost: AllGather failed: %s\n", loomGetLastError(comm));
            return 1;
        }
        if (rank == 0)
            report(pass == 0 ? "after init" : "after an AlltoAll", all, nranks);
        double t1 = nowMs();
        if (pass == 0 && loomAlltoAll(s, r, 1, loomInt32, comm, NULL) != loomSuccess) {
            fprintf(stderr, "connect-cost: AlltoAll failed: %s\n", loomGetLastError(comm));
            return 1;
        }
        callMs = nowMs() - t1;
    }
    loomCommDestroy(comm);
    free(all);
    free(s);
    free(r);
    return 0;
}
