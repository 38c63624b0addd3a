/*
 * recstatus.c — flight recorders read back (the format is recorder.h): the
 * status of a job, one row a rank, and one line saying what is wrong.
 *
 * Live: a rank's segments are found through /proc/PID/fd (links named
 * "/memfd:loom-recorder (deleted)"), opened there and mapped read-only;
 * one of them is a communicator, and its peer table leads to the other
 * ranks: those of this host are read the same way, those of other hosts
 * are shown as such. A rank of this host whose process runs but holds no
 * segment of the communicator has destroyed it (`done`); one whose process
 * is gone has `exited`.
 *
 * Dumps (LOOM_DUMP_DIR): one JSON file a rank, written when a call of the
 * rank fails. The writer puts each item on a line of its own, and the
 * reader here reads only that layout: it is a format of this file, not a
 * general JSON parser. A rank of the job that left no file was killed, or
 * did not fail.
 *
 * Across hosts (loom-info --status HOST:PORT): each rank's status listener
 * sends a copy of its segment (recWireEncode), which loom-info reads back
 * here (recWireDecode) into the same table; a rank that does not answer is
 * shown as such, with why.
 *
 * Only the C library is used, so loom-info compiles this file in.
 */
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "loom.h"
#include "recstatus.h"

#define STATUS_WAIT_FRESH_NS 2000000000ULL /* a wait seen this recently is still on */
#define STATUS_LINE 512

static uint64_t statusNow(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
}

static void errorf(char *err, size_t len, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void errorf(char *err, size_t len, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, len, fmt, ap);
    va_end(ap);
}

/* ---- live segments ---- */

/* A segment mapped read-only. */
struct statusSeg {
    struct recHeader *h;
    size_t bytes;
};

/* Copies h's entries, oldest first, keeping those no writer changed under the copy. */
static void statusCopyRank(struct recHeader *h, struct recRank *r)
{
    memcpy(&r->h, h, sizeof(r->h));
    struct recEntry *ring = recRing(h);
    uint64_t next = atomic_load_explicit(&h->next, memory_order_acquire);
    uint64_t first = next > REC_RING ? next - REC_RING : 0;
    r->n = 0;
    for (uint64_t k = first; k < next; k++) {
        struct recEntry *e = &ring[k % REC_RING];
        if (atomic_load_explicit(&e->pos, memory_order_acquire) != k + 1)
            continue;
        memcpy(&r->entries[r->n], e, sizeof(*e));
        atomic_thread_fence(memory_order_acquire);
        if (atomic_load_explicit(&e->pos, memory_order_relaxed) == k + 1)
            r->n++;
    }
    r->have = 1;
    r->pid = h->pid;
    snprintf(r->host, sizeof(r->host), "%s", h->host);
}

/* Maps every recorder of process pid; -1 with errno when its descriptors cannot be listed. */
static int statusMapPid(pid_t pid, struct statusSeg **segs, int *nsegs)
{
    char dirPath[64];
    snprintf(dirPath, sizeof(dirPath), "/proc/%d/fd", (int)pid);
    DIR *d = opendir(dirPath);
    *segs = NULL, *nsegs = 0;
    if (d == NULL)
        return -1;
    struct dirent *de;
    while ((de = readdir(d)) != NULL) {
        char path[320], link[256];
        snprintf(path, sizeof(path), "%s/%s", dirPath, de->d_name);
        ssize_t n = readlink(path, link, sizeof(link) - 1);
        if (n <= 0)
            continue;
        link[n] = '\0';
        if (strncmp(link, "/memfd:" REC_MEMFD_NAME, strlen("/memfd:" REC_MEMFD_NAME)) != 0)
            continue;
        int fd = open(path, O_RDONLY | O_CLOEXEC);
        struct stat st;
        if (fd < 0 || fstat(fd, &st) != 0 || (size_t)st.st_size < sizeof(struct recHeader)) {
            if (fd >= 0)
                close(fd);
            continue;
        }
        void *base = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_SHARED, fd, 0);
        close(fd);
        if (base == MAP_FAILED)
            continue;
        struct recHeader *h = base;
        if (atomic_load_explicit((_Atomic uint64_t *)&h->magic, memory_order_acquire) !=
                REC_MAGIC ||
            h->version != REC_VERSION || h->headerBytes != sizeof(*h) || h->nranks < 1 ||
            (size_t)st.st_size < recSegmentBytes(h->nranks)) {
            munmap(base, (size_t)st.st_size);
            continue;
        }
        struct statusSeg *grown = realloc(*segs, (size_t)(*nsegs + 1) * sizeof(**segs));
        if (grown == NULL) {
            munmap(base, (size_t)st.st_size);
            break;
        }
        *segs = grown;
        (*segs)[(*nsegs)++] = (struct statusSeg){h, (size_t)st.st_size};
    }
    closedir(d);
    return 0;
}

static void statusUnmap(struct statusSeg *segs, int n)
{
    for (int i = 0; i < n; i++)
        munmap(segs[i].h, segs[i].bytes);
    free(segs);
}

/* Whether pid runs (a zombie does not). */
static int statusAlive(pid_t pid)
{
    if (kill(pid, 0) != 0 && errno == ESRCH)
        return 0;
    char path[64], line[512];
    snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
    FILE *f = fopen(path, "re");
    if (f == NULL)
        return 0;
    size_t n = fread(line, 1, sizeof(line) - 1, f);
    fclose(f);
    line[n] = '\0';
    const char *close = strrchr(line, ')');
    return !(close && close[1] == ' ' && (close[2] == 'Z' || close[2] == 'X'));
}

/* Fills rank p of job from its process on this host. */
static void statusReadPeer(struct recJob *job, int p, const struct recPeer *peer)
{
    struct recRank *r = &job->ranks[p];
    struct statusSeg *segs;
    int nsegs;
    r->pid = peer->pid;
    snprintf(r->host, sizeof(r->host), "%s", peer->host);
    if (statusMapPid(peer->pid, &segs, &nsegs) == 0) {
        for (int i = 0; i < nsegs; i++)
            if (segs[i].h->commId == job->commId && segs[i].h->rank == p) {
                statusCopyRank(segs[i].h, r);
                break;
            }
        statusUnmap(segs, nsegs);
    }
    if (!r->have)
        r->exited = !statusAlive(peer->pid);
}

/* The job of segment h: every rank, read where this host can. */
static int statusJobOf(struct recHeader *h, struct recJob *job)
{
    memset(job, 0, sizeof(*job));
    job->commId = h->commId;
    job->nranks = h->nranks;
    job->nowNs = statusNow();
    memcpy(&job->names, h, sizeof(job->names));
    job->ranks = calloc((size_t)h->nranks, sizeof(*job->ranks));
    if (job->ranks == NULL)
        return -1;
    const struct recPeer *peers = recPeers(h);
    for (int p = 0; p < h->nranks; p++) {
        snprintf(job->ranks[p].status, REC_ADDR_BYTES, "%s", peers[p].status);
        if (peers[p].hostHash != h->hostHash) {
            job->ranks[p].remote = 1;
            job->ranks[p].pid = peers[p].pid;
            snprintf(job->ranks[p].host, REC_HOST_BYTES, "%s", peers[p].host);
        } else if (p == h->rank) {
            statusCopyRank(h, &job->ranks[p]);
        } else {
            statusReadPeer(job, p, &peers[p]);
        }
    }
    return 0;
}

/* Jobs of pid's segments: every communicator once (only commId's when it is not 0). */
static int statusJobsOfPid(pid_t pid, uint64_t commId, struct recJob **jobs, int *njobs, char *err,
                           size_t errLen)
{
    struct statusSeg *segs;
    int nsegs;
    *jobs = NULL, *njobs = 0;
    if (statusMapPid(pid, &segs, &nsegs) != 0) {
        errorf(err, errLen, "cannot read /proc/%d/fd: %s%s", (int)pid, strerror(errno),
               errno == EACCES ? " (run as the job's user, or root)" : "");
        return -1;
    }
    int rc = 0;
    for (int i = 0; i < nsegs && rc == 0; i++) {
        int seen = commId != 0 && segs[i].h->commId != commId;
        for (int j = 0; j < *njobs; j++)
            seen |= (*jobs)[j].commId == segs[i].h->commId;
        if (seen)
            continue;
        struct recJob *grown = realloc(*jobs, (size_t)(*njobs + 1) * sizeof(**jobs));
        if (grown == NULL || statusJobOf(segs[i].h, &grown[*njobs]) != 0) {
            if (grown)
                *jobs = grown;
            errorf(err, errLen, "out of memory");
            rc = -1;
            break;
        }
        *jobs = grown;
        (*njobs)++;
    }
    statusUnmap(segs, nsegs);
    if (rc == 0 && *njobs == 0) {
        errorf(err, errLen,
               "process %d has no Loom communicator (no flight recorder in /proc/%d/fd)%s",
               (int)pid, (int)pid, statusAlive(pid) ? "" : "; it is not running");
        rc = -1;
    }
    if (rc != 0) {
        recJobsFree(*jobs, *njobs);
        *jobs = NULL, *njobs = 0;
    }
    return rc;
}

int recJobsFromPid(pid_t pid, struct recJob **jobs, int *njobs, char *err, size_t errLen)
{
    return statusJobsOfPid(pid, 0, jobs, njobs, err, errLen);
}

int recJobFromSelf(const struct recHeader *h, struct recJob **job, char *err, size_t errLen)
{
    int n;
    return statusJobsOfPid(getpid(), h->commId, job, &n, err, errLen);
}

void recJobsFree(struct recJob *jobs, int njobs)
{
    for (int i = 0; jobs && i < njobs; i++)
        free(jobs[i].ranks);
    free(jobs);
}

/* ---- dumps ---- */

static void jsonNames(FILE *f, const char *key, const char (*names)[REC_NAME_BYTES], int n)
{
    fprintf(f, "  \"%s\": [", key);
    for (int i = 0; i < n; i++)
        fprintf(f, "%s\"%s\"", i ? ", " : "", names[i]);
    fprintf(f, "],\n");
}

static const char *statusStateWord(int state)
{
    return state == REC_RUNNING ? "running" : state == REC_DONE ? "done" : "failed";
}

/* The rank's recorder h (a live segment) as JSON into f (a dump file, or a status answer). */
static int statusJsonWrite(struct recHeader *h, FILE *f)
{
    struct recRank *r = calloc(1, sizeof(*r));
    if (r == NULL)
        return -1;
    statusCopyRank(h, r);
    fprintf(f, "{\n  \"loom_recorder\": %d,\n", REC_VERSION);
    fprintf(f, "  \"comm\": \"%016llx\",\n", (unsigned long long)h->commId);
    fprintf(f, "  \"rank\": %d,\n  \"nranks\": %d,\n  \"pid\": %d,\n", h->rank, h->nranks, h->pid);
    fprintf(f, "  \"host\": \"%s\",\n  \"host_hash\": \"%016llx\",\n", h->host,
            (unsigned long long)h->hostHash);
    fprintf(f, "  \"written_ns\": %llu,\n", (unsigned long long)statusNow());
    fprintf(f, "  \"timeout_s\": %d,\n", h->timeoutSec);
    jsonNames(f, "coll_names", (const char(*)[REC_NAME_BYTES])h->collNames, REC_COLLS);
    jsonNames(f, "algo_names", (const char(*)[REC_NAME_BYTES])h->algoNames, REC_ALGOS);
    jsonNames(f, "proto_names", (const char(*)[REC_NAME_BYTES])h->protoNames, REC_PROTOS);
    jsonNames(f, "type_names", (const char(*)[REC_NAME_BYTES])h->typeNames, REC_TYPES);
    fprintf(f, "  \"peers\": [\n");
    const struct recPeer *peers = recPeers(h);
    for (int p = 0; p < h->nranks; p++)
        fprintf(f, "    {\"rank\": %d, \"pid\": %d, \"host\": \"%s\", \"status\": \"%s\"}%s\n", p,
                peers[p].pid, peers[p].host, peers[p].status, p + 1 < h->nranks ? "," : "");
    fprintf(f, "  ],\n  \"ops\": [\n");
    for (int i = 0; i < r->n; i++) {
        const struct recEntry *e = &r->entries[i];
        int c = e->coll, a = e->algo, pr = e->proto;
        fprintf(
            f,
            "    {\"n\": %llu, \"seq\": %llu, \"p2p\": %d, \"coll\": %d, \"coll_name\": \"%s\", "
            "\"count\": %llu, \"datatype\": %d, \"op\": %d, \"root\": %d, \"algo\": %d, "
            "\"algo_name\": \"%s\", \"proto\": %d, \"state\": \"%s\", \"result\": %d, "
            "\"wait_rank\": %d, \"wait_step\": %lld, \"wait_ns\": %llu, \"start_ns\": %llu, "
            "\"end_ns\": %llu}%s\n",
            (unsigned long long)(e->pos - 1), (unsigned long long)e->seq, e->p2p, c,
            c >= 0 && c < REC_COLLS ? h->collNames[c] : "?", (unsigned long long)e->count, e->dt,
            e->op, e->root, a, a >= 0 && a < REC_ALGOS ? h->algoNames[a] : "", pr,
            statusStateWord(e->state), e->result, e->waitPeer, (long long)e->waitStep,
            (unsigned long long)e->waitNs, (unsigned long long)e->startNs,
            (unsigned long long)e->endNs, i + 1 < r->n ? "," : "");
    }
    fprintf(f, "  ]\n}\n");
    free(r);
    return ferror(f) ? -1 : 0;
}

int recDumpWrite(struct recHeader *h, const char *path)
{
    char tmp[4200];
    snprintf(tmp, sizeof(tmp), "%s.tmp", path);
    FILE *f = fopen(tmp, "we");
    if (f == NULL)
        return -1;
    int bad = statusJsonWrite(h, f);
    if (fclose(f) != 0 || bad || rename(tmp, path) != 0) {
        int e = errno;
        unlink(tmp);
        errno = e;
        return -1;
    }
    return 0;
}

void *recWireEncode(struct recHeader *h, size_t *bytes)
{
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    if (f == NULL)
        return NULL;
    int bad = statusJsonWrite(h, f);
    if (fclose(f) != 0 || bad) {
        free(buf);
        return NULL;
    }
    *bytes = len;
    return buf;
}

/* The value after "key": on line, or NULL. */
static const char *jsonValue(const char *line, const char *key)
{
    char pat[64];
    snprintf(pat, sizeof(pat), "\"%s\": ", key);
    const char *v = strstr(line, pat);
    return v ? v + strlen(pat) : NULL;
}

static long long jsonInt(const char *line, const char *key, long long fallback)
{
    const char *v = jsonValue(line, key);
    return v ? strtoll(v, NULL, 10) : fallback;
}

static unsigned long long jsonU64(const char *line, const char *key)
{
    const char *v = jsonValue(line, key);
    return v ? strtoull(v, NULL, 10) : 0;
}

/* A string value into out (quotes dropped); 0 if absent. */
static int jsonStr(const char *line, const char *key, char *out, size_t len)
{
    const char *v = jsonValue(line, key);
    if (v == NULL || *v != '"')
        return 0;
    v++;
    size_t n = 0;
    while (v[n] && v[n] != '"')
        n++;
    snprintf(out, len, "%.*s", (int)n, v);
    return 1;
}

/* An array of names ("key": ["a", "b"]) into names[max]. */
static void jsonNameList(const char *line, const char *key, char (*names)[REC_NAME_BYTES], int max)
{
    const char *v = jsonValue(line, key);
    for (int i = 0; v && i < max; i++) {
        v = strchr(v, '"');
        const char *end = v ? strchr(v + 1, '"') : NULL;
        if (end == NULL)
            return;
        snprintf(names[i], REC_NAME_BYTES, "%.*s", (int)(end - v - 1), v + 1);
        v = end + 1;
    }
}

/* One dump file; peers (nranks of them) and its rank are returned; -1 if it is not one. */
struct statusDump {
    struct recRank rank;
    struct recPeer *peers;
    uint64_t writtenNs;
};

static void statusDumpOp(const char *line, struct recRank *r)
{
    if (r->n >= REC_RING)
        return;
    struct recEntry *e = &r->entries[r->n++];
    memset(e, 0, sizeof(*e));
    e->pos = jsonU64(line, "n") + 1;
    e->seq = jsonU64(line, "seq");
    e->p2p = (int8_t)jsonInt(line, "p2p", 0);
    e->coll = (int8_t)jsonInt(line, "coll", 0);
    e->count = jsonU64(line, "count");
    e->dt = (int8_t)jsonInt(line, "datatype", 0);
    e->op = (int8_t)jsonInt(line, "op", 0);
    e->root = (int32_t)jsonInt(line, "root", -1);
    e->algo = (int8_t)jsonInt(line, "algo", -1);
    e->proto = (int8_t)jsonInt(line, "proto", -1);
    char state[16] = "";
    jsonStr(line, "state", state, sizeof(state));
    e->state = strcmp(state, "running") == 0 ? REC_RUNNING
               : strcmp(state, "done") == 0  ? REC_DONE
                                             : REC_FAILED;
    e->result = (int32_t)jsonInt(line, "result", 0);
    e->waitPeer = (int32_t)jsonInt(line, "wait_rank", -1);
    e->waitStep = jsonInt(line, "wait_step", -1);
    e->waitNs = jsonU64(line, "wait_ns");
    e->startNs = jsonU64(line, "start_ns");
    e->endNs = jsonU64(line, "end_ns");
}

/* A dump's JSON (recorder f) into d; -1 if it is not one. */
static int statusReadJson(FILE *f, struct statusDump *d)
{
    char line[2048], word[REC_HOST_BYTES];
    struct recHeader *h = &d->rank.h;
    int section = 0, version = 0; /* 1: peers, 2: ops */
    while (fgets(line, sizeof(line), f)) {
        if (strstr(line, "\"peers\": ["))
            section = 1;
        else if (strstr(line, "\"ops\": ["))
            section = 2;
        else if (section == 1 && jsonValue(line, "rank")) {
            long long p = jsonInt(line, "rank", -1);
            if (d->peers && p >= 0 && p < h->nranks) {
                d->peers[p].pid = (int32_t)jsonInt(line, "pid", 0);
                jsonStr(line, "host", d->peers[p].host, REC_HOST_BYTES);
                jsonStr(line, "status", d->peers[p].status, REC_ADDR_BYTES);
            }
        } else if (section == 2 && jsonValue(line, "seq")) {
            statusDumpOp(line, &d->rank);
        } else if (section == 0) {
            version =
                jsonValue(line, "loom_recorder") ? (int)jsonInt(line, "loom_recorder", 0) : version;
            if (jsonStr(line, "comm", word, sizeof(word)))
                h->commId = strtoull(word, NULL, 16);
            if (jsonValue(line, "nranks")) {
                h->nranks = (int32_t)jsonInt(line, "nranks", 0);
                if (h->nranks > 0 && h->nranks < (1 << 24))
                    d->peers = calloc((size_t)h->nranks, sizeof(*d->peers));
            } else if (jsonValue(line, "rank")) {
                h->rank = (int32_t)jsonInt(line, "rank", -1);
            }
            h->pid = jsonValue(line, "pid") ? (int32_t)jsonInt(line, "pid", 0) : h->pid;
            jsonStr(line, "host", h->host, sizeof(h->host));
            d->writtenNs =
                jsonValue(line, "written_ns") ? jsonU64(line, "written_ns") : d->writtenNs;
            h->timeoutSec = jsonValue(line, "timeout_s") ? (int32_t)jsonInt(line, "timeout_s", 0)
                                                         : h->timeoutSec;
            jsonNameList(line, "coll_names", h->collNames, REC_COLLS);
            jsonNameList(line, "algo_names", h->algoNames, REC_ALGOS);
            jsonNameList(line, "proto_names", h->protoNames, REC_PROTOS);
            jsonNameList(line, "type_names", h->typeNames, REC_TYPES);
        }
    }
    if (version != REC_VERSION || d->peers == NULL || h->rank < 0 || h->rank >= h->nranks) {
        free(d->peers);
        d->peers = NULL;
        return -1;
    }
    d->rank.have = 1, d->rank.fromFile = 1, d->rank.pid = h->pid;
    snprintf(d->rank.host, sizeof(d->rank.host), "%s", h->host);
    snprintf(d->rank.status, sizeof(d->rank.status), "%s", d->peers[h->rank].status);
    return 0;
}

static int statusReadDump(const char *path, struct statusDump *d)
{
    FILE *f = fopen(path, "re");
    if (f == NULL)
        return -1;
    int rc = statusReadJson(f, d);
    fclose(f);
    return rc;
}

/* t moved by off nanoseconds; 0 (never) stays 0. */
static uint64_t statusShift(uint64_t t, int64_t off)
{
    return t ? t + (uint64_t)off : 0;
}

int recWireDecode(const void *buf, size_t len, uint64_t nowNs, struct recRank *r,
                  struct recPeer **peers, char *err, size_t errLen)
{
    struct statusDump *d = calloc(1, sizeof(*d));
    FILE *f = d && len ? fmemopen((void *)buf, len, "r") : NULL;
    int rc = f ? statusReadJson(f, d) : -1;
    if (f)
        fclose(f);
    if (rc != 0) {
        errorf(err, errLen, "%s", d && f ? "not a Loom recorder of this version" : "out of memory");
        free(d);
        return -1;
    }
    /* Its clock is not this host's: its times as if it had been read at nowNs. */
    int64_t off = (int64_t)(nowNs - d->writtenNs);
    *r = d->rank;
    r->fromFile = 0;
    for (int i = 0; i < r->n; i++) {
        struct recEntry *e = &r->entries[i];
        e->startNs = statusShift(e->startNs, off);
        e->endNs = statusShift(e->endNs, off);
        e->waitNs = statusShift(e->waitNs, off);
    }
    *peers = d->peers;
    free(d);
    return 0;
}

/* Puts dump d into its job (made from d's peer table the first time). */
static int statusAddDump(struct recJob **jobs, int *njobs, struct statusDump *d)
{
    struct recJob *job = NULL;
    for (int j = 0; j < *njobs; j++)
        if ((*jobs)[j].commId == d->rank.h.commId && (*jobs)[j].nranks == d->rank.h.nranks)
            job = &(*jobs)[j];
    if (job == NULL) {
        struct recJob *grown = realloc(*jobs, (size_t)(*njobs + 1) * sizeof(**jobs));
        if (grown == NULL)
            return -1;
        *jobs = grown;
        job = &grown[(*njobs)++];
        memset(job, 0, sizeof(*job));
        job->commId = d->rank.h.commId;
        job->nranks = d->rank.h.nranks;
        job->ranks = calloc((size_t)job->nranks, sizeof(*job->ranks));
        if (job->ranks == NULL)
            return -1;
        memcpy(&job->names, &d->rank.h, sizeof(job->names));
        for (int p = 0; p < job->nranks; p++) {
            job->ranks[p].pid = d->peers[p].pid;
            job->ranks[p].exited = 1; /* until its own file says otherwise */
            snprintf(job->ranks[p].host, REC_HOST_BYTES, "%s", d->peers[p].host);
        }
    }
    job->ranks[d->rank.h.rank] = d->rank;
    if (d->writtenNs > job->nowNs)
        job->nowNs = d->writtenNs;
    return 0;
}

/* Ranks that left no file but whose process still runs on this host did not fail. */
static void statusDirAlive(struct recJob *jobs, int njobs)
{
    char here[REC_HOST_BYTES] = "";
    gethostname(here, sizeof(here) - 1);
    for (int j = 0; j < njobs; j++) {
        jobs[j].fromDir = 1;
        for (int p = 0; p < jobs[j].nranks; p++) {
            struct recRank *r = &jobs[j].ranks[p];
            if (!r->have && strcmp(r->host, here) == 0 && r->pid > 0)
                r->exited = !statusAlive(r->pid);
        }
    }
}

int recJobsFromDir(const char *dir, struct recJob **jobs, int *njobs, char *err, size_t errLen)
{
    *jobs = NULL, *njobs = 0;
    DIR *d = opendir(dir);
    if (d == NULL) {
        errorf(err, errLen, "cannot open %s: %s", dir, strerror(errno));
        return -1;
    }
    struct statusDump *dump = calloc(1, sizeof(*dump));
    struct dirent *de;
    int rc = dump ? 0 : -1;
    while (rc == 0 && (de = readdir(d)) != NULL) {
        size_t len = strlen(de->d_name);
        if (strncmp(de->d_name, "loom-rec-", 9) != 0 || len < 5 ||
            strcmp(de->d_name + len - 5, ".json") != 0)
            continue;
        char path[4400];
        snprintf(path, sizeof(path), "%s/%s", dir, de->d_name);
        memset(dump, 0, sizeof(*dump));
        if (statusReadDump(path, dump) != 0)
            continue;
        rc = statusAddDump(jobs, njobs, dump);
        free(dump->peers);
    }
    closedir(d);
    free(dump);
    if (rc != 0)
        errorf(err, errLen, "out of memory");
    else if (*njobs == 0)
        errorf(err, errLen, "%s holds no flight recorder (loom-rec-*.json) that can be read", dir);
    if (rc != 0 || *njobs == 0) {
        recJobsFree(*jobs, *njobs);
        *jobs = NULL, *njobs = 0;
        return -1;
    }
    statusDirAlive(*jobs, *njobs);
    return 0;
}

/* ---- the table ---- */

static const char *statusResultName(int res)
{
    static const char *const names[] = {[loomSuccess] = "loomSuccess",
                                        [loomUnhandledCudaError] = "loomUnhandledCudaError",
                                        [loomSystemError] = "loomSystemError",
                                        [loomInternalError] = "loomInternalError",
                                        [loomInvalidArgument] = "loomInvalidArgument",
                                        [loomInvalidUsage] = "loomInvalidUsage",
                                        [loomRemoteError] = "loomRemoteError",
                                        [loomInProgress] = "loomInProgress",
                                        [loomTimeout] = "loomTimeout"};
    return res >= 0 && res < loomNumResults ? names[res] : "error";
}

static const char *statusCollName(const struct recJob *job, const struct recEntry *e)
{
    return e->coll >= 0 && e->coll < REC_COLLS && job->names.collNames[e->coll][0]
               ? job->names.collNames[e->coll]
               : "loom?";
}

/* The rank's newest entry, or NULL. */
static const struct recEntry *statusLast(const struct recRank *r)
{
    return r->have && r->n > 0 ? &r->entries[r->n - 1] : NULL;
}

/* The rank's newest collective (not Send/Recv), or NULL. */
static const struct recEntry *statusLastColl(const struct recRank *r)
{
    for (int i = r->have ? r->n - 1 : -1; i >= 0; i--)
        if (!r->entries[i].p2p)
            return &r->entries[i];
    return NULL;
}

/* The rank's collective number seq, or NULL when its ring does not hold it. */
static const struct recEntry *statusCollAt(const struct recRank *r, uint64_t seq)
{
    for (int i = r->have ? r->n - 1 : -1; i >= 0; i--)
        if (!r->entries[i].p2p && r->entries[i].seq == seq)
            return &r->entries[i];
    return NULL;
}

static double statusSeconds(uint64_t later, uint64_t earlier)
{
    return later > earlier ? (double)(later - earlier) / 1e9 : 0.0;
}

/* "#12" for a collective, "p2p#3" for a Send/Recv. */
static void statusSeqText(const struct recEntry *e, char *buf, size_t len)
{
    snprintf(buf, len, "%s#%llu", e->p2p ? "p2p" : "", (unsigned long long)e->seq);
}

/* Whether e waits now: running, with a wait seen lately. */
static int statusWaiting(const struct recJob *job, const struct recEntry *e)
{
    return e->state == REC_RUNNING && e->waitPeer >= 0 && e->waitNs > 0 &&
           job->nowNs - e->waitNs < STATUS_WAIT_FRESH_NS;
}

static void statusStateText(const struct recJob *job, const struct recRank *r, char *buf,
                            size_t len)
{
    const struct recEntry *e = statusLast(r);
    char seq[32];
    if (r->remote) {
        if (r->status[0])
            snprintf(buf, len, "on another host (loom-info --status %s asks it)", r->status);
        else
            snprintf(buf, len, "on another host (run loom-info --status there)");
        return;
    }
    if (r->noAnswer) {
        snprintf(buf, len, "no answer: %s", r->why);
        return;
    }
    if (!r->have && job->fromDir) {
        snprintf(buf, len, "%s",
                 r->exited ? "exited (no file: it was killed, or ended before it could write one)"
                           : "running, left no file (it did not fail)");
        return;
    }
    if (!r->have) {
        snprintf(buf, len, "%s", r->exited ? "exited" : "done");
        return;
    }
    if (e == NULL) {
        snprintf(buf, len, "not in a call (none yet)");
        return;
    }
    statusSeqText(e, seq, sizeof(seq));
    if (e->state == REC_DONE) {
        snprintf(buf, len, "not in a call (%.1f s since its last call ended)",
                 statusSeconds(job->nowNs, e->endNs));
        return;
    }
    size_t n;
    if (e->state == REC_RUNNING) {
        n = (size_t)snprintf(buf, len, "in %s %s since %.1f s", statusCollName(job, e), seq,
                             statusSeconds(job->nowNs, e->startNs));
        if (statusWaiting(job, e) && n < len)
            snprintf(buf + n, len - n, ", waiting for rank %d at step %lld", e->waitPeer,
                     (long long)e->waitStep);
        return;
    }
    n = (size_t)snprintf(buf, len, "failed in %s %s (%s) after %.1f s", statusCollName(job, e), seq,
                         statusResultName(e->result), statusSeconds(e->endNs, e->startNs));
    if (e->waitPeer >= 0 && n < len)
        snprintf(buf + n, len - n, ", waiting for rank %d at step %lld", e->waitPeer,
                 (long long)e->waitStep);
}

/* ---- what is wrong ---- */

/* Appends "rank 3" or "ranks 1, 4, 7" (of the ranks flagged in set) to buf. */
static void statusRankList(const struct recJob *job, const char *set, char *buf, size_t len)
{
    int n = 0, shown = 0;
    for (int p = 0; p < job->nranks; p++)
        n += set[p] != 0;
    size_t used = strlen(buf);
    for (int p = 0; p < job->nranks && used + 16 < len; p++) {
        if (!set[p])
            continue;
        if (shown == 8) {
            snprintf(buf + used, len - used, " and %d more", n - shown);
            return;
        }
        int k = shown == 0 ? snprintf(buf + used, len - used, "rank%s %d", n > 1 ? "s" : "", p)
                           : snprintf(buf + used, len - used, ", %d", p);
        used += k > 0 ? (size_t)k : 0;
        shown++;
    }
}

static void statusAppend(char *buf, size_t len, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void statusAppend(char *buf, size_t len, const char *fmt, ...)
{
    size_t used = strlen(buf);
    if (used + 1 >= len)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf + used, len - used, fmt, ap);
    va_end(ap);
}

/* The first collective number where the ranks read disagree on what they called, or 0 with none. */
static int statusMismatch(const struct recJob *job, char *buf, size_t len)
{
    uint64_t lo = 0, hi = UINT64_MAX;
    int any = 0;
    for (int p = 0; p < job->nranks; p++) {
        const struct recRank *r = &job->ranks[p];
        const struct recEntry *last = statusLastColl(r);
        if (last == NULL)
            continue;
        any = 1;
        for (int i = 0; i < r->n; i++)
            if (!r->entries[i].p2p) {
                lo = r->entries[i].seq > lo ? r->entries[i].seq : lo;
                break;
            }
        hi = last->seq < hi ? last->seq : hi;
    }
    /* nranks comes from a file or another process's memory: never trust its sign. */
    size_t n = job->nranks > 0 ? (size_t)(unsigned)job->nranks : 1;
    char *odd = calloc(n, 1), *same = calloc(n, 1);
    int found = 0;
    for (uint64_t s = lo; any && odd && same && s <= hi && !found; s++) {
        const struct recEntry *ref = NULL;
        memset(odd, 0, n);
        memset(same, 0, n);
        for (int p = 0; p < job->nranks; p++) {
            const struct recEntry *e = statusCollAt(&job->ranks[p], s);
            if (e == NULL)
                continue;
            if (ref == NULL)
                ref = e;
            int differs = e->coll != ref->coll || e->count != ref->count || e->dt != ref->dt ||
                          e->root != ref->root;
            (differs ? odd : same)[p] = 1;
            found |= differs;
        }
        if (!found)
            continue;
        const struct recEntry *o = NULL;
        for (int p = 0; p < job->nranks && o == NULL; p++)
            o = odd[p] ? statusCollAt(&job->ranks[p], s) : NULL;
        statusRankList(job, same, buf, len);
        if (o->coll != ref->coll) {
            statusAppend(buf, len, " called %s #%llu but ", statusCollName(job, ref),
                         (unsigned long long)s);
            statusRankList(job, odd, buf, len);
            statusAppend(buf, len, " called %s #%llu", statusCollName(job, o),
                         (unsigned long long)s);
        } else {
            statusAppend(buf, len, " called %s #%llu with count %llu, root %d but ",
                         statusCollName(job, ref), (unsigned long long)s,
                         (unsigned long long)ref->count, ref->root);
            statusRankList(job, odd, buf, len);
            statusAppend(buf, len, " with count %llu, root %d", (unsigned long long)o->count,
                         o->root);
        }
    }
    free(odd);
    free(same);
    return found;
}

/*
 * The ranks in a call at the highest collective number, and those that are
 * not there: behind (in an earlier call, or not in a call), exited, or
 * waited for while not in a call.
 */
static void statusBehind(const struct recJob *job, char *buf, size_t len)
{
    const struct recEntry *lead = NULL;
    for (int p = 0; p < job->nranks; p++) {
        const struct recEntry *e = statusLastColl(&job->ranks[p]);
        if (e && e->state != REC_DONE && (lead == NULL || e->seq > lead->seq))
            lead = e;
    }
    if (lead == NULL)
        return;
    char *in = calloc((size_t)job->nranks, 1), *out = calloc((size_t)job->nranks, 1);
    char *gone = calloc((size_t)job->nranks, 1), *waited = calloc((size_t)job->nranks, 1);
    char *past = calloc((size_t)job->nranks, 1);
    if (in && out && gone && waited && past) {
        int nOut = 0, nGone = 0, nWaited = 0, nPast = 0, nIn = 0;
        for (int p = 0; p < job->nranks; p++) {
            const struct recRank *r = &job->ranks[p];
            const struct recEntry *e = statusLastColl(r);
            if (e && e->seq == lead->seq && e->state != REC_DONE) {
                in[p] = 1;
                const struct recEntry *last = statusLast(r);
                int w = last && last->waitPeer >= 0 && last->waitPeer < job->nranks ? last->waitPeer
                                                                                    : -1;
                const struct recEntry *we = w >= 0 ? statusLast(&job->ranks[w]) : NULL;
                if (w >= 0 && job->ranks[w].have && (we == NULL || we->state == REC_DONE))
                    waited[w] = 1;
            } else if (r->have && e && e->seq >= lead->seq) {
                past[p] = 1; /* it ended that call: whoever is still in it is the odd one */
            } else if (r->have) {
                out[p] = 1;
            } else if (!r->remote && r->exited) {
                gone[p] = 1;
            }
        }
        for (int p = 0; p < job->nranks; p++) {
            out[p] &= !waited[p];
            nOut += out[p], nGone += gone[p], nWaited += waited[p], nPast += past[p];
            nIn += in[p];
        }
        const char *state = lead->state != REC_RUNNING ? "failed in"
                            : nIn > 1                  ? "wait in"
                                                       : "waits in";
        if (nWaited) {
            statusRankList(job, waited, buf, len);
            statusAppend(buf, len,
                         " %s waited for and not in a call: ", nWaited > 1 ? "are" : "is");
            statusRankList(job, in, buf, len);
            statusAppend(buf, len, " %s %s #%llu", state, statusCollName(job, lead),
                         (unsigned long long)lead->seq);
            for (int p = 0; p < job->nranks; p++) {
                const struct recEntry *e = waited[p] ? statusLastColl(&job->ranks[p]) : NULL;
                if (e)
                    statusAppend(buf, len, "; rank %d's last call was %s #%llu", p,
                                 statusCollName(job, e), (unsigned long long)e->seq);
                else if (waited[p])
                    statusAppend(buf, len, "; rank %d made no collective call yet", p);
            }
        }
        if (nOut) {
            statusAppend(buf, len, "%s", buf[0] ? "; " : "");
            statusRankList(job, out, buf, len);
            statusAppend(buf, len, " %s behind: ", nOut > 1 ? "are" : "is");
            statusRankList(job, in, buf, len);
            statusAppend(buf, len, " %s %s #%llu", state, statusCollName(job, lead),
                         (unsigned long long)lead->seq);
        }
        if (nPast && !nWaited) {
            statusAppend(buf, len, "%s", buf[0] ? "; " : "");
            statusRankList(job, in, buf, len);
            statusAppend(buf, len, " %s %s #%llu, which ", state, statusCollName(job, lead),
                         (unsigned long long)lead->seq);
            statusRankList(job, past, buf, len);
            statusAppend(buf, len, " ended");
        }
        if (nGone) {
            statusAppend(buf, len, "%s", buf[0] ? "; " : "");
            statusRankList(job, gone, buf, len);
            statusAppend(buf, len, " exited while ");
            statusRankList(job, in, buf, len);
            statusAppend(buf, len, " %s %s #%llu",
                         lead->state == REC_RUNNING ? "were in" : "failed in",
                         statusCollName(job, lead), (unsigned long long)lead->seq);
        }
    }
    free(in);
    free(out);
    free(gone);
    free(waited);
    free(past);
}

/* Ranks read here that wait for a rank of another host, which only that host can tell about. */
static void statusRemoteWaits(const struct recJob *job, char *buf, size_t len)
{
    for (int p = 0; p < job->nranks; p++) {
        const struct recEntry *e = statusLast(&job->ranks[p]);
        int w = e && e->state != REC_DONE ? e->waitPeer : -1;
        if (w < 0 || w >= job->nranks || !job->ranks[w].remote)
            continue;
        statusAppend(buf, len,
                     "%srank %d %s rank %d at step %lld of %s #%llu; rank %d is on %s, "
                     "another host: run loom-info --status there",
                     buf[0] ? "; " : "", p, e->state == REC_RUNNING ? "waits for" : "waited for", w,
                     (long long)e->waitStep, statusCollName(job, e), (unsigned long long)e->seq, w,
                     job->ranks[w].host);
        return;
    }
}

void recJobDiagnose(const struct recJob *job, char *buf, size_t len)
{
    buf[0] = '\0';
    if (len < 2)
        return;
    if (statusMismatch(job, buf, len))
        return; /* the calls themselves disagree: that is the cause */
    statusBehind(job, buf, len);
    if (buf[0] == '\0')
        statusRemoteWaits(job, buf, len);
}

void recJobPrint(const struct recJob *job, void (*emit)(void *ctx, const char *line), void *ctx)
{
    char line[STATUS_LINE], state[320], seq[32], what[320];
    snprintf(line, sizeof(line), "communicator %016llx: %d rank%s", (unsigned long long)job->commId,
             job->nranks, job->nranks == 1 ? "" : "s");
    emit(ctx, line);
    snprintf(line, sizeof(line), "%-5s %-16s %-8s %-8s %-10s %-18s %s", "rank", "host", "pid",
             "comm", "seq", "collective", "state");
    emit(ctx, line);
    for (int p = 0; p < job->nranks; p++) {
        const struct recRank *r = &job->ranks[p];
        const struct recEntry *e = statusLast(r);
        statusStateText(job, r, state, sizeof(state));
        if (e)
            statusSeqText(e, seq, sizeof(seq));
        snprintf(line, sizeof(line), "%-5d %-16.16s %-8d %08llx %-10s %-18s %s", p, r->host, r->pid,
                 (unsigned long long)(job->commId >> 32), e ? seq : "-",
                 e ? statusCollName(job, e) : "-", state);
        emit(ctx, line);
    }
    recJobDiagnose(job, what, sizeof(what));
    int remote = 0;
    for (int p = 0; p < job->nranks; p++)
        remote += job->ranks[p].remote;
    if (what[0])
        snprintf(line, sizeof(line), "wrong: %s", what);
    else if (remote)
        snprintf(line, sizeof(line), "nothing looks wrong among the %d ranks read here",
                 job->nranks - remote);
    else
        snprintf(line, sizeof(line), "nothing looks wrong");
    emit(ctx, line);
}

void recJobPrintAsk(const struct recJob *job, void (*emit)(void *ctx, const char *line), void *ctx)
{
    char line[STATUS_LINE], hex[2 * REC_SECRET_BYTES + 1];
    uint8_t any = 0;
    for (int i = 0; i < REC_SECRET_BYTES; i++) {
        any |= job->names.secret[i];
        snprintf(hex + 2 * i, 3, "%02x", job->names.secret[i]);
    }
    int listed = 0;
    for (int p = 0; p < job->nranks; p++)
        listed += job->ranks[p].status[0] != '\0';
    if (job->fromDir || !any || !listed)
        return;
    emit(ctx, "from any host, each rank answers for the whole job at its address below, to "
              "the job's secret:");
    snprintf(line, sizeof(line), "  LOOM_STATUS_SECRET=%s loom-info --status HOST:PORT", hex);
    emit(ctx, line);
    size_t used = 0;
    int shown = 0;
    line[0] = '\0';
    for (int p = 0; p < job->nranks && shown < 8; p++) {
        if (!job->ranks[p].status[0])
            continue;
        int k = snprintf(line + used, sizeof(line) - used, "  rank %d %s", p, job->ranks[p].status);
        used += k > 0 ? (size_t)k : 0;
        if (++shown % 4 == 0 || used + 80 > sizeof(line)) {
            emit(ctx, line);
            used = 0, line[0] = '\0';
        }
    }
    if (used)
        emit(ctx, line);
    if (listed > shown) {
        snprintf(line, sizeof(line), "  and %d more", listed - shown);
        emit(ctx, line);
    }
}

/* A name from one of the header's tables, "-" when out of range or empty. */
static const char *statusName(const char (*names)[REC_NAME_BYTES], int n, int i)
{
    return i >= 0 && i < n && names[i][0] ? names[i] : "-";
}

void recJobPrintOps(const struct recJob *job, int n, void (*emit)(void *ctx, const char *line),
                    void *ctx)
{
    char line[STATUS_LINE], seq[32], root[16], when[96];
    for (int p = 0; p < job->nranks; p++) {
        const struct recRank *r = &job->ranks[p];
        for (int i = r->have && r->n > n ? r->n - n : 0; r->have && i < r->n; i++) {
            const struct recEntry *e = &r->entries[i];
            statusSeqText(e, seq, sizeof(seq));
            snprintf(root, sizeof(root), "%d", e->root);
            if (e->state == REC_RUNNING)
                snprintf(when, sizeof(when), "running for %.3f s",
                         statusSeconds(job->nowNs, e->startNs));
            else if (e->state == REC_DONE)
                snprintf(when, sizeof(when), "done in %.3f s", statusSeconds(e->endNs, e->startNs));
            else
                snprintf(when, sizeof(when), "failed (%s) after %.3f s",
                         statusResultName(e->result), statusSeconds(e->endNs, e->startNs));
            snprintf(line, sizeof(line),
                     "rank %-4d %-8s %-18s count %-10llu %-9s root %-4s %s/%s  %s", p, seq,
                     statusCollName(job, e), (unsigned long long)e->count,
                     statusName(job->names.typeNames, REC_TYPES, e->dt), e->root >= 0 ? root : "-",
                     statusName(job->names.algoNames, REC_ALGOS, e->algo),
                     statusName(job->names.protoNames, REC_PROTOS, e->proto), when);
            emit(ctx, line);
        }
    }
}
