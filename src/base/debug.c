/*
 * debug.c — log lines, the per-thread last error, and result-code names.
 *
 * A log line is built whole in a stack buffer and handed to the kernel with
 * one write(), so lines of concurrent threads (and of processes sharing the
 * file, which is opened O_APPEND) never interleave:
 *
 *   node1:4242:3 [LOOM] WARN shm: /dev/shm has 64 MiB free, ...
 *   node1:4242:3 [LOOM] INFO SHM mapped 3 peers
 *   node1:4242:- [LOOM] TRACE NET net_socket.c:212 sent 4096 bytes
 *    host  pid rank ("-" until debugSetRank)
 *
 * WARN lines name no subsystem and pass every LOOM_DEBUG_SUBSYS filter;
 * TRACE lines add file:line. The level and subsystem mask come from the
 * parameter table once (debugInit); until then nothing is logged.
 *
 * Errors: loomSetError keeps the one-line reason in a thread-local buffer
 * with a process-wide sequence number, so loomGetLastError can pick the later
 * of a thread's error and a communicator's asynchronous one.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <sys/resource.h>
#include <unistd.h>

#include "debug.h"
#include "param.h"

#define DEBUG_LINE_MAX 1024
#define DEBUG_ERROR_MAX 512

int loomLogLevel = LOOM_LOG_NONE;
uint32_t loomLogMask = LOOM_ALL;

static pthread_once_t debugOnceControl = PTHREAD_ONCE_INIT;
static char debugHost[64] = "unknown";
static int debugFd = STDERR_FILENO;
static atomic_int debugRank = -1;
static _Atomic uint64_t debugErrorSeq;

static __thread char debugErrorLine[DEBUG_ERROR_MAX];
static __thread uint64_t debugErrorLineSeq;

static const struct {
    uint32_t bit;
    const char *name;
} debugSubsysNames[] = {
    {LOOM_INIT, "INIT"},     {LOOM_COLL, "COLL"},           {LOOM_SHM, "SHM"}, {LOOM_NET, "NET"},
    {LOOM_TUNING, "TUNING"}, {LOOM_BOOTSTRAP, "BOOTSTRAP"}, {LOOM_ALL, "ALL"},
};
#define DEBUG_NUM_SUBSYS (sizeof(debugSubsysNames) / sizeof(debugSubsysNames[0]))

static const char *debugLevelName(loomLogLevel_t level)
{
    switch (level) {
    case LOOM_LOG_WARN:
        return "WARN";
    case LOOM_LOG_INFO:
        return "INFO";
    case LOOM_LOG_TRACE:
        return "TRACE";
    default:
        return "NONE";
    }
}

/* The name printed for a line's subsystem: the first one named in `subsys`. */
static const char *debugSubsysName(uint32_t subsys)
{
    if (subsys == LOOM_ALL)
        return "ALL";
    for (size_t i = 0; i < DEBUG_NUM_SUBSYS; i++)
        if (subsys & debugSubsysNames[i].bit)
            return debugSubsysNames[i].name;
    return "ALL";
}

static void debugWriteAll(int fd, const char *buf, size_t len)
{
    while (len > 0) {
        ssize_t n = write(fd, buf, len);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return;
        buf += n;
        len -= (size_t)n;
    }
}

/* snprintf at buf + used, never moving past the last byte: a long prefix is cut, not overrun. */
static size_t debugAppend(char *buf, size_t size, size_t used, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static size_t debugAppend(char *buf, size_t size, size_t used, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(buf + used, size - used, fmt, ap);
    va_end(ap);
    if (n < 0)
        return used;
    return used + (size_t)n < size ? used + (size_t)n : size - 1;
}

/* Formats one line (prefix, message, newline) and writes it to fd in one call. */
static void debugEmit(int fd, loomLogLevel_t level, uint32_t subsys, const char *file, int line,
                      const char *fmt, va_list ap)
{
    /* One byte is kept back for the newline; a long message is cut, not split over lines. */
    char buf[DEBUG_LINE_MAX];
    const size_t size = sizeof(buf) - 1;
    int rank = atomic_load_explicit(&debugRank, memory_order_relaxed);
    size_t n = debugAppend(buf, size, 0, "%s:%d:", debugHost, (int)getpid());
    n = rank >= 0 ? debugAppend(buf, size, n, "%d", rank) : debugAppend(buf, size, n, "-");
    n = debugAppend(buf, size, n, " [LOOM] %s ", debugLevelName(level));
    if (level != LOOM_LOG_WARN)
        n = debugAppend(buf, size, n, "%s ", debugSubsysName(subsys));
    if (level == LOOM_LOG_TRACE) {
        const char *base = strrchr(file, '/');
        n = debugAppend(buf, size, n, "%s:%d ", base ? base + 1 : file, line);
    }
    size_t prefix = n;
    int m = vsnprintf(buf + n, size - n, fmt, ap);
    if (m > 0)
        n = n + (size_t)m < size ? n + (size_t)m : size - 1;
    while (n > prefix && buf[n - 1] == '\n')
        n--;
    buf[n++] = '\n';
    debugWriteAll(fd, buf, n);
}

/* Warnings about the configuration, printed whatever LOOM_DEBUG says. */
static void debugConfigWarn(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void debugConfigWarn(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    debugEmit(STDERR_FILENO, LOOM_LOG_WARN, LOOM_ALL, __FILE__, __LINE__, fmt, ap);
    va_end(ap);
}

static loomLogLevel_t debugParseLevel(const char *text)
{
    /* paramInit has already reduced LOOM_DEBUG to one canonical word or "". */
    if (strcmp(text, "WARN") == 0)
        return LOOM_LOG_WARN;
    if (strcmp(text, "INFO") == 0)
        return LOOM_LOG_INFO;
    if (strcmp(text, "TRACE") == 0)
        return LOOM_LOG_TRACE;
    return LOOM_LOG_NONE;
}

/* Looks up one subsystem name of LOOM_DEBUG_SUBSYS (len bytes of `name`); 0 if unknown. */
static uint32_t debugSubsysBit(const char *name, size_t len)
{
    for (size_t i = 0; i < DEBUG_NUM_SUBSYS; i++)
        if (strlen(debugSubsysNames[i].name) == len &&
            strncasecmp(debugSubsysNames[i].name, name, len) == 0)
            return debugSubsysNames[i].bit;
    return 0;
}

/*
 * "SHM,NET" selects those subsystems; "^SHM,NET" selects all others. Unknown
 * names are reported and skipped; if no name is known the mask stays ALL,
 * since logging nothing at all is never what the user asked for.
 */
static uint32_t debugParseSubsys(const char *text)
{
    int exclude = text[0] == '^';
    const char *p = text + exclude;
    uint32_t listed = 0;
    int known = 0;
    while (*p != '\0') {
        p += strspn(p, " \t");
        size_t len = strcspn(p, ",");
        size_t nameLen = len;
        while (nameLen > 0 && (p[nameLen - 1] == ' ' || p[nameLen - 1] == '\t'))
            nameLen--;
        uint32_t bit = debugSubsysBit(p, nameLen);
        if (bit != 0) {
            listed |= bit;
            known = 1;
        } else if (nameLen > 0) {
            debugConfigWarn("LOOM_DEBUG_SUBSYS=%s: unknown subsystem '%.*s' ignored (known: "
                            "INIT, COLL, SHM, NET, TUNING, BOOTSTRAP, ALL)",
                            text, (int)nameLen, p);
        }
        p += len;
        if (*p == ',')
            p++;
    }
    if (!known)
        return LOOM_ALL;
    return exclude ? (LOOM_ALL & ~listed) : listed;
}

/* Expands %h (host) and %p (pid) of LOOM_DEBUG_FILE; -1 if the path does not fit. */
static int debugExpandPath(const char *template, char *path, size_t size)
{
    size_t used = 0;
    for (const char *p = template; *p != '\0'; p++) {
        char piece[64];
        const char *add = piece;
        if (p[0] == '%' && p[1] == 'h') {
            add = debugHost;
            p++;
        } else if (p[0] == '%' && p[1] == 'p') {
            snprintf(piece, sizeof(piece), "%d", (int)getpid());
            p++;
        } else {
            piece[0] = *p;
            piece[1] = '\0';
        }
        size_t len = strlen(add);
        if (used + len >= size)
            return -1;
        memcpy(path + used, add, len);
        used += len;
    }
    path[used] = '\0';
    return 0;
}

static void debugOpenFile(const char *template)
{
    char path[PATH_MAX];
    if (debugExpandPath(template, path, sizeof(path)) != 0) {
        debugConfigWarn("LOOM_DEBUG_FILE=%s: path too long; logging to stderr", template);
        return;
    }
    int fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (fd < 0) {
        debugConfigWarn("LOOM_DEBUG_FILE=%s: cannot open %s: %s; logging to stderr", template, path,
                        strerror(errno));
        return;
    }
    debugFd = fd;
}

static void debugOnce(void)
{
    if (gethostname(debugHost, sizeof(debugHost)) != 0)
        strcpy(debugHost, "unknown");
    debugHost[sizeof(debugHost) - 1] = '\0';
    /* The short name, as users see it in their shell prompt and job lists. */
    debugHost[strcspn(debugHost, ".")] = '\0';

    paramInit();
    loomLogMask = debugParseSubsys(paramStr(LOOM_PARAM_DEBUG_SUBSYS));
    loomLogLevel = debugParseLevel(paramStr(LOOM_PARAM_DEBUG));
    /* No file is created when nothing will be written to it. */
    const char *file = paramStr(LOOM_PARAM_DEBUG_FILE);
    if (loomLogLevel > LOOM_LOG_NONE && file[0] != '\0')
        debugOpenFile(file);
}

void debugInit(void)
{
    pthread_once(&debugOnceControl, debugOnce);
}

void debugSetRank(int rank)
{
    atomic_store_explicit(&debugRank, rank < 0 ? -1 : rank, memory_order_relaxed);
}

void loomLog(loomLogLevel_t level, uint32_t subsys, const char *file, int line, const char *fmt,
             ...)
{
    /* A caller's "%m" must see the errno of its failure, not one of ours. */
    int savedErrno = errno;
    debugInit();
    if (level == LOOM_LOG_NONE || (int)level > loomLogLevel)
        goto out;
    if (level != LOOM_LOG_WARN && !(loomLogMask & subsys))
        goto out;
    errno = savedErrno;
    va_list ap;
    va_start(ap, fmt);
    debugEmit(debugFd, level, subsys, file, line, fmt, ap);
    va_end(ap);
out:
    errno = savedErrno;
}

void loomLogReport(const char *fmt, ...)
{
    int savedErrno = errno;
    debugInit();
    va_list ap;
    va_start(ap, fmt);
    debugEmit(debugFd, LOOM_LOG_WARN, LOOM_ALL, __FILE__, __LINE__, fmt, ap);
    va_end(ap);
    errno = savedErrno;
}

loomResult_t loomSetError(loomResult_t res, const char *fmt, ...)
{
    int savedErrno = errno;
    debugInit();
    errno = savedErrno;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(debugErrorLine, sizeof(debugErrorLine), fmt, ap);
    va_end(ap);
    size_t len = strlen(debugErrorLine);
    while (len > 0 && debugErrorLine[len - 1] == '\n')
        debugErrorLine[--len] = '\0';
    debugErrorLineSeq = debugNextErrorSeq();
    if (loomLogLevel >= LOOM_LOG_WARN)
        loomLog(LOOM_LOG_WARN, LOOM_ALL, __FILE__, __LINE__, "%s", debugErrorLine);
    errno = savedErrno;
    return res;
}

void debugRestoreError(const char *line, uint64_t seq)
{
    snprintf(debugErrorLine, sizeof(debugErrorLine), "%s", line);
    debugErrorLineSeq = seq;
}

const char *debugLastError(uint64_t *seq)
{
    if (seq != NULL)
        *seq = debugErrorLineSeq;
    return debugErrorLine;
}

uint64_t debugNextErrorSeq(void)
{
    /* Only the numbers' order matters; no data is published through the counter. */
    return atomic_fetch_add_explicit(&debugErrorSeq, 1, memory_order_relaxed) + 1;
}

const char *debugErrnoText(int err)
{
    static __thread char text[256];
    struct rlimit rl;
    const char *base = strerror(err);
    switch (err) {
    case EMFILE:
        if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY)
            snprintf(text, sizeof(text),
                     "%s (this process may have %llu open; raise the limit with ulimit -n)", base,
                     (unsigned long long)rl.rlim_cur);
        else
            snprintf(text, sizeof(text), "%s (raise the limit with ulimit -n)", base);
        return text;
    case ENFILE:
        snprintf(text, sizeof(text), "%s (the system is out of file descriptors: fs.file-max)",
                 base);
        return text;
    case EADDRINUSE:
    case EADDRNOTAVAIL:
        snprintf(text, sizeof(text),
                 "%s (no free local port: see net.ipv4.ip_local_port_range and connections in "
                 "TIME_WAIT)",
                 base);
        return text;
    case ENOMEM:
        snprintf(text, sizeof(text), "%s (out of memory, or a memory limit: ulimit -v, cgroup)",
                 base);
        return text;
    default:
        return base;
    }
}

const char *loomGetErrorString(loomResult_t result)
{
    switch (result) {
    case loomSuccess:
        return "no error";
    case loomUnhandledCudaError:
        return "unhandled cuda error";
    case loomSystemError:
        return "unhandled system error";
    case loomInternalError:
        return "internal error";
    case loomInvalidArgument:
        return "invalid argument";
    case loomInvalidUsage:
        return "invalid usage";
    case loomRemoteError:
        return "remote process exited or there was a network error";
    case loomInProgress:
        return "operation in progress";
    case loomTimeout:
        return "timeout";
    default:
        return "unknown result code";
    }
}
