/*
 * recstatus.h — reading flight recorders (recorder.h) back: from the live
 * segments of a job's ranks on this host, or from the JSON files
 * LOOM_DUMP_DIR holds after a failure, into one table a rank and one line
 * that says what is wrong. Used by loom-info --status and by a rank that
 * times out. Needs only the C library (loom-info compiles it in).
 */
#ifndef LOOM_RECSTATUS_H_
#define LOOM_RECSTATUS_H_

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/types.h>

#include "recorder.h"

/* What is known of one rank of a job. */
struct recRank {
    int have;   /* its recorder was read (live or from a file) */
    int pid;    /* from the peer table when not read */
    int exited; /* its process is not running here (or it left no file) */
    int remote; /* on another host: not readable from here */
    int fromFile;
    int noAnswer; /* asked over the network (recWireDecode), it did not answer: why says why */
    char host[REC_HOST_BYTES];
    char status[REC_ADDR_BYTES]; /* its status listener ("" if unknown) */
    char why[256];
    struct recHeader h;                /* its header, when read */
    struct recEntry entries[REC_RING]; /* oldest first */
    int n;                             /* valid entries */
};

/* One communicator of a job, every rank. */
struct recJob {
    uint64_t commId;
    int nranks;
    uint64_t nowNs; /* CLOCK_REALTIME when read (a dump: when the newest file was written) */
    int fromDir;    /* read from LOOM_DUMP_DIR's files */
    struct recHeader names; /* the name tables (any rank's header) */
    struct recRank *ranks;  /* [nranks] */
};

/*
 * The communicators of process pid, each with its ranks on this host read
 * from their live segments. 0, or -1 with the reason in err.
 */
int recJobsFromPid(pid_t pid, struct recJob **jobs, int *njobs, char *err, size_t errLen);
/* The communicators whose ranks left files in dir (LOOM_DUMP_DIR). 0, or -1 with err. */
int recJobsFromDir(const char *dir, struct recJob **jobs, int *njobs, char *err, size_t errLen);
/* The job of a segment this process maps itself (the rank that timed out): h is its own. */
int recJobFromSelf(const struct recHeader *h, struct recJob **job, char *err, size_t errLen);
void recJobsFree(struct recJob *jobs, int njobs);

/*
 * A recorder sent by a rank's status listener: recWireEncode writes segment
 * h as the JSON of a dump file (without the secret) into a buffer
 * (malloc'ed; *bytes long); recWireDecode reads one back into *r, with its
 * peer table in *peers (malloc'ed, r->h.nranks of them), its times moved
 * onto this host's clock as if it was read at nowNs (CLOCK_REALTIME). 0, or
 * -1 with the reason in err.
 */
void *recWireEncode(struct recHeader *h, size_t *bytes);
int recWireDecode(const void *buf, size_t len, uint64_t nowNs, struct recRank *r,
                  struct recPeer **peers, char *err, size_t errLen);

/*
 * How to ask the job from another host (loom-info --status HOST:PORT): the
 * job's secret and each rank's status listener, a few lines through emit;
 * nothing when job was not read from live segments.
 */
void recJobPrintAsk(const struct recJob *job, void (*emit)(void *ctx, const char *line), void *ctx);

/* Prints the table, then the diagnosis: each line through emit(ctx, line). */
void recJobPrint(const struct recJob *job, void (*emit)(void *ctx, const char *line), void *ctx);
/* Each rank's last n operations (as read), a line each, through emit. */
void recJobPrintOps(const struct recJob *job, int n, void (*emit)(void *ctx, const char *line),
                    void *ctx);
/* The one-line diagnosis into buf ("" when nothing looks wrong). */
void recJobDiagnose(const struct recJob *job, char *buf, size_t len);

/* Writes the rank's recorder h (a live segment) to path as JSON. 0, or -1 with errno. */
int recDumpWrite(struct recHeader *h, const char *path);

#endif /* LOOM_RECSTATUS_H_ */
