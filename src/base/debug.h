/*
 * debug.h — logging, the last-error line, and the one propagation macro.
 *
 * Log lines go to stderr (or LOOM_DEBUG_FILE) prefixed with host, pid and
 * rank: "host:1234:2 [LOOM] INFO SHM mapped 3 peers". The level is checked
 * before any formatting, so a disabled TRACE costs one load and a branch.
 *
 * Errors: the first place that detects an error calls loomSetError() (which
 * records the one-line reason for loomGetLastError and logs it at WARN when
 * LOOM_DEBUG is set) and returns the code; callers only pass it on with
 * LOOMCHECK.
 */
#ifndef LOOM_DEBUG_H_
#define LOOM_DEBUG_H_

#include <stdint.h>

#include "loom.h"

typedef enum { LOOM_LOG_NONE = 0, LOOM_LOG_WARN, LOOM_LOG_INFO, LOOM_LOG_TRACE } loomLogLevel_t;

/* Subsystems, a bit each (LOOM_DEBUG_SUBSYS). */
#define LOOM_INIT 0x1
#define LOOM_COLL 0x2
#define LOOM_SHM 0x4
#define LOOM_NET 0x8
#define LOOM_TUNING 0x10
#define LOOM_BOOTSTRAP 0x20
#define LOOM_ALL 0xffff

extern int loomLogLevel;     /* set by debugInit from LOOM_DEBUG */
extern uint32_t loomLogMask; /* set by debugInit from LOOM_DEBUG_SUBSYS */

/* Reads LOOM_DEBUG* from the parameter table; idempotent, thread safe. */
void debugInit(void);
/* Sets the rank printed in log prefixes of this process (-1: none). */
void debugSetRank(int rank);

void loomLog(loomLogLevel_t level, uint32_t subsys, const char *file, int line, const char *fmt,
             ...) __attribute__((format(printf, 5, 6)));

/*
 * A WARN line printed whatever LOOM_DEBUG says: for what a failing rank must
 * always tell (the status table of a timeout, src/exec/recorder.c).
 */
void loomLogReport(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

#define WARN(...) loomLog(LOOM_LOG_WARN, LOOM_ALL, __FILE__, __LINE__, __VA_ARGS__)
#define INFO(sub, ...)                                                                             \
    do {                                                                                           \
        if (loomLogLevel >= LOOM_LOG_INFO && (loomLogMask & (sub)))                                \
            loomLog(LOOM_LOG_INFO, (sub), __FILE__, __LINE__, __VA_ARGS__);                        \
    } while (0)
#define TRACE(sub, ...)                                                                            \
    do {                                                                                           \
        if (loomLogLevel >= LOOM_LOG_TRACE && (loomLogMask & (sub)))                               \
            loomLog(LOOM_LOG_TRACE, (sub), __FILE__, __LINE__, __VA_ARGS__);                       \
    } while (0)

/*
 * Records `fmt` as this thread's last error (and logs it at WARN if
 * LOOM_DEBUG is at least WARN). Returns `res`, so a detection site reads
 * `return loomSetError(loomInvalidArgument, "loomAllReduce: count ...")`.
 */
loomResult_t loomSetError(loomResult_t res, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/* This thread's last error line ("" if none) and its sequence number (0 if none). */
const char *debugLastError(uint64_t *seq);
/* Puts back a line and number taken from debugLastError (an error handled inside). */
void debugRestoreError(const char *line, uint64_t seq);
/* A process-wide increasing number to order errors of threads and comms. */
uint64_t debugNextErrorSeq(void);

/*
 * strerror(err), plus what to do when the cause is a resource limit: "Too
 * many open files (this process may have 1024 open; raise the limit with
 * ulimit -n)". For the messages of failed system calls. The text stays
 * valid until the next call on this thread.
 */
const char *debugErrnoText(int err);

/* The one propagation macro: return the result of `call` if it is not loomSuccess. */
#define LOOMCHECK(call)                                                                            \
    do {                                                                                           \
        loomResult_t res_ = (call);                                                                \
        if (res_ != loomSuccess)                                                                   \
            return res_;                                                                           \
    } while (0)

#endif /* LOOM_DEBUG_H_ */
