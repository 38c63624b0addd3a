/*
 * loomrun — start N ranks of a Loom program on this host.
 *
 * loomrun is the single-host launcher: it creates one unique id with
 * loomGetUniqueId (whose rendezvous thread therefore lives in this process),
 * then forks N children and execs the program in each with the variables that
 * loomCommInitFromEnv reads:
 *
 *   LOOM_UNIQUE_ID   the 128-byte id as 256 lowercase hex characters
 *   LOOM_RANK        i            LOOM_NRANKS      N
 *   LOOM_LOCAL_RANK  i            LOOM_LOCAL_SIZE  N
 *
 * After that it is a small supervisor built around one poll loop. Signals are
 * read from a signalfd (they are blocked in every thread, including the
 * library's rendezvous thread, which is why the mask is set before
 * loomGetUniqueId), so SIGCHLD, the signals to forward and the rank output
 * pipes are all plain file descriptors:
 *
 *   signalfd ---- SIGCHLD -> reap; first failure -> SIGTERM the rest,
 *             |              SIGKILL 3 s later (unless --keep-going)
 *             `-- SIGINT/SIGTERM/SIGHUP -> forwarded to every live rank
 *   pipes ------- (--tag-output) lines prefixed "[rank] ", partial last
 *                 lines flushed at EOF
 *   deadlines --- --timeout, the kill grace, the drain after the last exit
 *
 * Exit status: 0 when every rank exits 0; the first failing rank's status
 * (128 + signal when it was killed); 124 after --timeout; 128 + signal when
 * loomrun was interrupted and the ranks all exited 0 anyway; 2 for usage
 * errors; 127 when the program cannot be found.
 *
 * Ranks other than 0 get /dev/null as standard input, so that only one
 * process reads a terminal or a pipe given to loomrun.
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <limits.h>
#include <math.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "loom.h"

#define MAX_RANKS 4096
#define KILL_GRACE_NS (3 * 1000000000LL)
/* After the last rank exits, a grandchild may still hold a pipe open: read
 * what is already there, but stop waiting after this long. */
#define DRAIN_NS (300 * 1000000LL)
#define LINE_MAX_BYTES 65536
#define EXIT_USAGE 2
#define EXIT_TIMEOUT 124
#define EXIT_NOT_FOUND 127
#define EXIT_CANNOT_EXEC 126

extern char **environ;

/* One rank's output stream (stdout or stderr) when --tag-output is on. */
struct stream {
    int fd;      /* read end of the pipe, -1 once closed */
    int outFd;   /* where its lines go: 1 or 2 */
    int midLine; /* the last write ended without a newline */
    size_t len;
    char buf[LINE_MAX_BYTES];
};

struct rank {
    pid_t pid;
    int alive;
    struct stream *out[2];
};

struct job {
    int nranks;
    int tagOutput;
    int keepGoing;       /* --keep-going: a failed rank does not stop the others */
    double timeoutSec;   /* 0: none */
    const char *program; /* as given */
    char *path;          /* resolved */
    char **argv;         /* program and its arguments */
    struct rank *ranks;
    int live;        /* ranks not yet reaped */
    int openStreams; /* pipes not yet at EOF */
    int terminating; /* SIGTERM sent because of a failure or the timeout */
    int timedOut;
    int firstFailure;    /* exit status to report, -1 while none */
    int interruptSignal; /* last signal forwarded, 0 if none */
    int64_t killAt;      /* when to SIGKILL survivors, 0 if not armed */
    int64_t timeoutAt;   /* 0 if no timeout */
    int64_t drainUntil;  /* 0 until every rank has been reaped */
    int stdoutBroken[3]; /* writes to fd 1 or 2 failed with EPIPE */
};

static void usage(FILE *f)
{
    fprintf(f,
            "usage: loomrun -n N [--tag-output] [--timeout SEC] [--keep-going] program [args...]\n"
            "Starts N ranks of program on this host, each with LOOM_UNIQUE_ID, LOOM_RANK,\n"
            "LOOM_NRANKS, LOOM_LOCAL_RANK and LOOM_LOCAL_SIZE set for loomCommInitFromEnv.\n"
            "  -n, --nranks N   number of ranks, 1 to %d (required)\n"
            "  --tag-output     prefix every line the ranks print with \"[rank] \"\n"
            "  --timeout SEC    stop the job after SEC seconds (exit status 124)\n"
            "  --keep-going     let the other ranks run on when one fails (programs that\n"
            "                   survive a lost rank, such as loom-train --elastic)\n"
            "  -h, --help       print this help\n"
            "If a rank fails, the others get SIGTERM, then SIGKILL 3 s later (unless\n"
            "--keep-going), and loomrun exits with that rank's status (128 + signal if it\n"
            "was killed).\n",
            MAX_RANKS);
}

static int usageError(const char *fmt, const char *arg)
{
    fputs("loomrun: ", stderr);
    fprintf(stderr, fmt, arg);
    fputs("\nusage: loomrun -n N [--tag-output] [--timeout SEC] [--keep-going] program [args...]\n"
          "Run 'loomrun --help' for more.\n",
          stderr);
    return EXIT_USAGE;
}

static int64_t nowNs(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

/* Parses the command line into job; returns 0, or an exit status. */
static int parseArgs(int argc, char **argv, struct job *job)
{
    static const struct option longOpts[] = {
        {"nranks", required_argument, NULL, 'n'},  {"tag-output", no_argument, NULL, 't'},
        {"timeout", required_argument, NULL, 'T'}, {"keep-going", no_argument, NULL, 'k'},
        {"help", no_argument, NULL, 'h'},          {NULL, 0, NULL, 0},
    };
    int haveN = 0;
    int c;
    char *end;

    opterr = 0;
    /* "+": options stop at the program name, whose own options are its own. */
    while ((c = getopt_long(argc, argv, "+n:h", longOpts, NULL)) != -1) {
        switch (c) {
        case 'n': {
            errno = 0;
            long n = strtol(optarg, &end, 10);
            if (errno != 0 || end == optarg || *end != '\0' || n < 1 || n > MAX_RANKS) {
                return usageError("-n wants a number of ranks from 1 to 4096, not '%s'", optarg);
            }
            job->nranks = (int)n;
            haveN = 1;
            break;
        }
        case 't':
            job->tagOutput = 1;
            break;
        case 'k':
            job->keepGoing = 1;
            break;
        case 'T': {
            errno = 0;
            double t = strtod(optarg, &end);
            if (errno != 0 || end == optarg || *end != '\0' || !(t > 0) || !isfinite(t)) {
                return usageError("--timeout wants a positive number of seconds, not '%s'", optarg);
            }
            job->timeoutSec = t;
            break;
        }
        case 'h':
            usage(stdout);
            exit(0);
        case ':':
            return usageError("option '%s' needs a value", argv[optind - 1]);
        default:
            return usageError("unknown option '%s'", argv[optind - 1]);
        }
    }
    if (!haveN) {
        return usageError("%s", "the number of ranks (-n N) is required");
    }
    if (optind >= argc) {
        return usageError("%s", "no program to run");
    }
    job->program = argv[optind];
    job->argv = &argv[optind];
    return 0;
}

/* Why path cannot be executed, or NULL if it can; *notFound tells the two exit statuses apart. */
static const char *programProblem(const char *path, int *notFound)
{
    struct stat st;
    *notFound = 0;
    if (stat(path, &st) != 0) {
        *notFound = errno == ENOENT || errno == ENOTDIR;
        return strerror(errno);
    }
    if (!S_ISREG(st.st_mode)) {
        return "not a regular file";
    }
    if (access(path, X_OK) != 0) {
        return strerror(errno);
    }
    return NULL;
}

/*
 * Finds the program as execvp would, once, in the parent: the children then
 * call execve, which is safe after fork in a threaded process, and a missing
 * program is reported once instead of once per rank.
 */
static char *resolveProgram(const char *prog)
{
    if (strchr(prog, '/') != NULL) {
        return strdup(prog);
    }
    const char *path = getenv("PATH");
    if (path == NULL || *path == '\0') {
        path = "/usr/local/bin:/usr/bin:/bin";
    }
    size_t progLen = strlen(prog);
    for (const char *p = path;; p++) {
        const char *colon = strchr(p, ':');
        size_t dirLen = colon != NULL ? (size_t)(colon - p) : strlen(p);
        char *cand = malloc(dirLen + progLen + 3);
        if (cand == NULL) {
            return NULL;
        }
        /* An empty PATH element means the current directory. */
        if (dirLen == 0) {
            sprintf(cand, "./%s", prog);
        } else {
            sprintf(cand, "%.*s/%s", (int)dirLen, p, prog);
        }
        int notFound;
        if (programProblem(cand, &notFound) == NULL) {
            return cand;
        }
        free(cand);
        if (colon == NULL) {
            return NULL;
        }
        p = colon;
    }
}

static int isLoomLaunchVar(const char *entry)
{
    static const char *const names[] = {
        "LOOM_UNIQUE_ID=", "LOOM_RANK=", "LOOM_NRANKS=", "LOOM_LOCAL_RANK=", "LOOM_LOCAL_SIZE="};
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
        if (strncmp(entry, names[i], strlen(names[i])) == 0) {
            return 1;
        }
    }
    return 0;
}

/*
 * The children's environment: ours without any launch variables inherited
 * from an enclosing job, then ours. rankVar and localRankVar are rewritten
 * before each fork; the child gets its own copy of the memory.
 */
static char **buildEnv(const char *idVar, const char *nranksVar, const char *localSizeVar,
                       char *rankVar, char *localRankVar)
{
    size_t n = 0;
    while (environ[n] != NULL) {
        n++;
    }
    char **env = calloc(n + 6, sizeof(*env));
    if (env == NULL) {
        return NULL;
    }
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        if (!isLoomLaunchVar(environ[i])) {
            env[k++] = environ[i];
        }
    }
    env[k++] = (char *)idVar;
    env[k++] = rankVar;
    env[k++] = (char *)nranksVar;
    env[k++] = localRankVar;
    env[k++] = (char *)localSizeVar;
    env[k] = NULL;
    return env;
}

/* Writes all of buf; async-signal-safe, so the child may use it after fork. */
static int writeAll(int fd, const char *buf, size_t len)
{
    while (len > 0) {
        ssize_t w = write(fd, buf, len);
        if (w < 0) {
            if (errno == EINTR) {
                continue;
            }
            return -1;
        }
        buf += w;
        len -= (size_t)w;
    }
    return 0;
}

/* In the child between fork and exec: only async-signal-safe calls. */
static void childExec(const struct job *job, char **env, int stdinFd, const int outFds[2],
                      const sigset_t *origMask, const struct sigaction *origPipe)
{
    if (stdinFd >= 0 && dup2(stdinFd, 0) < 0) {
        _exit(EXIT_CANNOT_EXEC);
    }
    for (int s = 0; s < 2; s++) {
        if (outFds[s] >= 0 && dup2(outFds[s], s + 1) < 0) {
            _exit(EXIT_CANNOT_EXEC);
        }
    }
    sigaction(SIGPIPE, origPipe, NULL);
    sigprocmask(SIG_SETMASK, origMask, NULL);
    execve(job->path, job->argv, env);

    int err = errno;
    const char *why = strerror(err);
    writeAll(2, "loomrun: cannot execute '", 25);
    writeAll(2, job->path, strlen(job->path));
    writeAll(2, "': ", 3);
    writeAll(2, why, strlen(why));
    writeAll(2, "\n", 1);
    _exit(err == ENOENT ? EXIT_NOT_FOUND : EXIT_CANNOT_EXEC);
}

static void signalLiveRanks(struct job *job, int sig)
{
    for (int i = 0; i < job->nranks; i++) {
        if (job->ranks[i].alive) {
            kill(job->ranks[i].pid, sig);
        }
    }
}

/*
 * SIGTERM every live rank now and SIGKILL the survivors after the grace. If a
 * signal was already forwarded, the ranks are handling it: a second SIGTERM
 * would only interrupt their handlers, so they just get the grace.
 */
static void terminateJob(struct job *job)
{
    job->terminating = 1;
    if (job->interruptSignal == 0)
        signalLiveRanks(job, SIGTERM);
    if (job->live > 0) {
        job->killAt = nowNs() + KILL_GRACE_NS;
    }
}

static void killEveryone(struct job *job)
{
    signalLiveRanks(job, SIGKILL);
}

/* Output: with --tag-output every line gets its rank's prefix. */
static void emit(struct job *job, int fd, const char *buf, size_t len)
{
    if (job->stdoutBroken[fd]) {
        return;
    }
    if (writeAll(fd, buf, len) < 0 && errno == EPIPE) {
        job->stdoutBroken[fd] = 1;
    }
}

static void emitLine(struct job *job, int rank, struct stream *s, const char *line, size_t len,
                     int complete)
{
    char prefix[24];
    if (!s->midLine) {
        int n = snprintf(prefix, sizeof(prefix), "[%d] ", rank);
        emit(job, s->outFd, prefix, (size_t)n);
    }
    emit(job, s->outFd, line, len);
    s->midLine = !complete;
}

/* Emits every complete line in s->buf and keeps the rest. */
static void flushLines(struct job *job, int rank, struct stream *s)
{
    size_t start = 0;
    for (size_t i = 0; i < s->len; i++) {
        if (s->buf[i] == '\n') {
            emitLine(job, rank, s, s->buf + start, i + 1 - start, 1);
            start = i + 1;
        }
    }
    memmove(s->buf, s->buf + start, s->len - start);
    s->len -= start;
    /*
     * A line longer than the buffer is broken into lines of its own, each
     * prefixed, so that another rank's output never lands inside it.
     */
    if (s->len == sizeof(s->buf)) {
        emitLine(job, rank, s, s->buf, s->len, 0);
        emit(job, s->outFd, "\n", 1);
        s->midLine = 0;
        s->len = 0;
    }
}

static void closeStream(struct job *job, int rank, struct stream *s)
{
    if (s->len > 0) {
        emitLine(job, rank, s, s->buf, s->len, 0);
        s->len = 0;
    }
    /* Whatever followed a partial last line starts on a line of its own. */
    if (s->midLine) {
        emit(job, s->outFd, "\n", 1);
        s->midLine = 0;
    }
    close(s->fd);
    s->fd = -1;
    job->openStreams--;
}

static void readStream(struct job *job, int rank, struct stream *s)
{
    ssize_t r = read(s->fd, s->buf + s->len, sizeof(s->buf) - s->len);
    if (r < 0 && (errno == EINTR || errno == EAGAIN)) {
        return;
    }
    if (r <= 0) {
        closeStream(job, rank, s);
        return;
    }
    s->len += (size_t)r;
    flushLines(job, rank, s);
}

static void describeEnd(int status, char *buf, size_t size, int *exitCode)
{
    if (WIFEXITED(status)) {
        snprintf(buf, size, "exited with status %d", WEXITSTATUS(status));
        *exitCode = WEXITSTATUS(status);
    } else {
        int sig = WTERMSIG(status);
        snprintf(buf, size, "killed by signal %d (%s)%s", sig, strsignal(sig),
                 WCOREDUMP(status) ? ", core dumped" : "");
        *exitCode = 128 + sig;
    }
}

static void rankEnded(struct job *job, int i, int status)
{
    job->ranks[i].alive = 0;
    job->live--;
    if ((WIFEXITED(status) && WEXITSTATUS(status) == 0) || job->terminating) {
        return;
    }
    char how[96];
    int code;
    describeEnd(status, how, sizeof(how), &code);
    if (job->firstFailure >= 0 && job->keepGoing) {
        fprintf(stderr, "loomrun: rank %d (pid %ld) %s\n", i, (long)job->ranks[i].pid, how);
        return;
    }
    job->firstFailure = code;
    if (job->live > 0 && job->keepGoing) {
        fprintf(stderr, "loomrun: rank %d (pid %ld) %s; the other %d rank%s go on (--keep-going)\n",
                i, (long)job->ranks[i].pid, how, job->live, job->live == 1 ? "" : "s");
        return;
    }
    if (job->live > 0) {
        fprintf(stderr, "loomrun: rank %d (pid %ld) %s; terminating the other %d rank%s\n", i,
                (long)job->ranks[i].pid, how, job->live, job->live == 1 ? "" : "s");
    } else {
        fprintf(stderr, "loomrun: rank %d (pid %ld) %s\n", i, (long)job->ranks[i].pid, how);
    }
    terminateJob(job);
}

static void reapChildren(struct job *job)
{
    int status;
    pid_t pid;
    while ((pid = waitpid(-1, &status, WNOHANG)) > 0) {
        for (int i = 0; i < job->nranks; i++) {
            if (job->ranks[i].alive && job->ranks[i].pid == pid) {
                rankEnded(job, i, status);
                break;
            }
        }
    }
    if (job->live == 0 && job->drainUntil == 0) {
        job->drainUntil = nowNs() + DRAIN_NS;
    }
}

static void handleSignals(struct job *job, int sfd)
{
    struct signalfd_siginfo si;
    while (read(sfd, &si, sizeof(si)) == (ssize_t)sizeof(si)) {
        int sig = (int)si.ssi_signo;
        if (sig == SIGCHLD) {
            reapChildren(job);
            continue;
        }
        if (job->live > 0) {
            fprintf(stderr, "loomrun: received %s; forwarding it to %d rank%s\n", strsignal(sig),
                    job->live, job->live == 1 ? "" : "s");
        }
        job->interruptSignal = sig;
        signalLiveRanks(job, sig);
    }
    /* A SIGCHLD may have been merged with one already read; reaping is cheap. */
    reapChildren(job);
}

static void checkDeadlines(struct job *job, int64_t now)
{
    if (job->timeoutAt != 0 && now >= job->timeoutAt && job->live > 0 && !job->timedOut) {
        fprintf(stderr, "loomrun: the job ran past --timeout %g s; terminating %d rank%s\n",
                job->timeoutSec, job->live, job->live == 1 ? "" : "s");
        job->timedOut = 1;
        terminateJob(job);
    }
    if (job->killAt != 0 && now >= job->killAt) {
        if (job->live > 0) {
            fprintf(stderr, "loomrun: %d rank%s still running 3 s after SIGTERM; sending SIGKILL\n",
                    job->live, job->live == 1 ? "" : "s");
            killEveryone(job);
        }
        job->killAt = 0;
    }
    if (job->drainUntil != 0 && now >= job->drainUntil) {
        for (int i = 0; i < job->nranks; i++) {
            for (int s = 0; s < 2; s++) {
                struct stream *st = job->ranks[i].out[s];
                if (st != NULL && st->fd >= 0) {
                    closeStream(job, i, st);
                }
            }
        }
    }
}

static int pollTimeoutMs(const struct job *job, int64_t now)
{
    int64_t next = INT64_MAX;
    if (job->timeoutAt != 0 && !job->timedOut && job->timeoutAt < next) {
        next = job->timeoutAt;
    }
    if (job->killAt != 0 && job->killAt < next) {
        next = job->killAt;
    }
    if (job->drainUntil != 0 && job->drainUntil < next) {
        next = job->drainUntil;
    }
    if (next == INT64_MAX) {
        return -1;
    }
    int64_t ms = (next - now + 999999) / 1000000;
    return ms < 0 ? 0 : (ms > INT_MAX ? INT_MAX : (int)ms);
}

static int superviseJob(struct job *job, int sfd)
{
    size_t maxFds = 1 + 2 * (size_t)job->nranks;
    struct pollfd *pfds = calloc(maxFds, sizeof(*pfds));
    struct stream **owners = calloc(maxFds, sizeof(*owners));
    int *ownerRank = calloc(maxFds, sizeof(*ownerRank));
    if (pfds == NULL || owners == NULL || ownerRank == NULL) {
        fprintf(stderr, "loomrun: out of memory\n");
        killEveryone(job);
        return 1;
    }
    while (job->live > 0 || job->openStreams > 0) {
        size_t nfds = 0;
        pfds[nfds++] = (struct pollfd){.fd = sfd, .events = POLLIN};
        for (int i = 0; i < job->nranks; i++) {
            for (int s = 0; s < 2; s++) {
                struct stream *st = job->ranks[i].out[s];
                if (st != NULL && st->fd >= 0) {
                    owners[nfds] = st;
                    ownerRank[nfds] = i;
                    pfds[nfds++] = (struct pollfd){.fd = st->fd, .events = POLLIN};
                }
            }
        }
        int n = poll(pfds, nfds, pollTimeoutMs(job, nowNs()));
        if (n < 0 && errno != EINTR) {
            fprintf(stderr, "loomrun: poll: %s\n", strerror(errno));
            killEveryone(job);
            break;
        }
        for (size_t k = 1; n > 0 && k < nfds; k++) {
            if (pfds[k].revents != 0 && owners[k]->fd >= 0) {
                readStream(job, ownerRank[k], owners[k]);
            }
        }
        if (n > 0 && pfds[0].revents != 0) {
            handleSignals(job, sfd);
        }
        checkDeadlines(job, nowNs());
    }
    /* Ranks killed after a poll error still need reaping, so none is left a zombie. */
    while (job->live > 0) {
        int status;
        pid_t pid = waitpid(-1, &status, 0);
        if (pid < 0 && errno != EINTR) {
            break;
        }
        for (int i = 0; pid > 0 && i < job->nranks; i++) {
            if (job->ranks[i].alive && job->ranks[i].pid == pid) {
                rankEnded(job, i, status);
            }
        }
    }
    free(pfds);
    free(owners);
    free(ownerRank);
    if (job->timedOut) {
        return EXIT_TIMEOUT;
    }
    if (job->firstFailure >= 0) {
        return job->firstFailure;
    }
    return job->interruptSignal != 0 ? 128 + job->interruptSignal : 0;
}

/* Makes room for two pipes per rank when --tag-output asks for them. */
static void raiseFdLimit(int nranks)
{
    struct rlimit rl;
    rlim_t want = 2 * (rlim_t)nranks + 64;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < want) {
        rl.rlim_cur = rl.rlim_max == RLIM_INFINITY || rl.rlim_max > want ? want : rl.rlim_max;
        setrlimit(RLIMIT_NOFILE, &rl);
    }
}

static struct stream *openStream(int outFd, int *writeEnd)
{
    int fds[2];
    struct stream *s = calloc(1, sizeof(*s));
    if (s == NULL) {
        return NULL;
    }
    if (pipe2(fds, O_CLOEXEC) < 0) {
        free(s);
        return NULL;
    }
    s->fd = fds[0];
    s->outFd = outFd;
    *writeEnd = fds[1];
    return s;
}

/* Forks and execs every rank; returns 0, or 1 after cleaning up the ones started. */
static int startRanks(struct job *job, char **env, char *rankVar, char *localRankVar,
                      const sigset_t *origMask, const struct sigaction *origPipe)
{
    int devNull = open("/dev/null", O_RDONLY | O_CLOEXEC);
    for (int i = 0; i < job->nranks; i++) {
        int outFds[2] = {-1, -1};
        struct rank *r = &job->ranks[i];
        if (job->tagOutput) {
            for (int s = 0; s < 2; s++) {
                r->out[s] = openStream(s + 1, &outFds[s]);
                if (r->out[s] == NULL) {
                    fprintf(stderr, "loomrun: cannot create the output pipes of rank %d: %s\n", i,
                            strerror(errno));
                    goto fail_kill;
                }
                job->openStreams++;
            }
        }
        sprintf(rankVar, "LOOM_RANK=%d", i);
        sprintf(localRankVar, "LOOM_LOCAL_RANK=%d", i);
        pid_t pid = fork();
        if (pid < 0) {
            fprintf(stderr, "loomrun: cannot fork rank %d: %s\n", i, strerror(errno));
            for (int s = 0; s < 2; s++) {
                if (outFds[s] >= 0) {
                    close(outFds[s]);
                }
            }
            goto fail_kill;
        }
        if (pid == 0) {
            childExec(job, env, i == 0 ? -1 : devNull, outFds, origMask, origPipe);
        }
        r->pid = pid;
        r->alive = 1;
        job->live++;
        for (int s = 0; s < 2; s++) {
            if (outFds[s] >= 0) {
                close(outFds[s]);
            }
        }
    }
    if (devNull >= 0) {
        close(devNull);
    }
    return 0;

fail_kill:
    if (devNull >= 0) {
        close(devNull);
    }
    job->terminating = 1;
    killEveryone(job);
    while (job->live > 0) {
        int status;
        pid_t pid = waitpid(-1, &status, 0);
        if (pid < 0 && errno != EINTR) {
            break;
        }
        for (int i = 0; pid > 0 && i < job->nranks; i++) {
            if (job->ranks[i].alive && job->ranks[i].pid == pid) {
                job->ranks[i].alive = 0;
                job->live--;
            }
        }
    }
    return 1;
}

int main(int argc, char **argv)
{
    struct job job = {.firstFailure = -1};
    int rc = parseArgs(argc, argv, &job);
    if (rc != 0) {
        return rc;
    }
    job.path = resolveProgram(job.program);
    if (job.path == NULL) {
        fprintf(stderr, "loomrun: cannot run '%s': not found in PATH\n", job.program);
        return EXIT_NOT_FOUND;
    }
    int notFound;
    const char *problem = programProblem(job.path, &notFound);
    if (problem != NULL) {
        fprintf(stderr, "loomrun: cannot run '%s': %s\n", job.program, problem);
        free(job.path);
        return notFound ? EXIT_NOT_FOUND : EXIT_CANNOT_EXEC;
    }
    if (job.tagOutput) {
        raiseFdLimit(job.nranks);
    }

    /*
     * Block the signals we supervise before loomGetUniqueId starts its
     * rendezvous thread: the thread inherits the mask, so every one of them
     * reaches the signalfd instead of killing loomrun in that thread.
     */
    sigset_t supervised, origMask;
    sigemptyset(&supervised);
    sigaddset(&supervised, SIGCHLD);
    sigaddset(&supervised, SIGINT);
    sigaddset(&supervised, SIGTERM);
    sigaddset(&supervised, SIGHUP);
    sigprocmask(SIG_BLOCK, &supervised, &origMask);
    struct sigaction ignore = {.sa_handler = SIG_IGN}, origPipe;
    sigaction(SIGPIPE, &ignore, &origPipe);
    int sfd = signalfd(-1, &supervised, SFD_CLOEXEC | SFD_NONBLOCK);
    if (sfd < 0) {
        fprintf(stderr, "loomrun: signalfd: %s\n", strerror(errno));
        return 1;
    }

    loomUniqueId id;
    loomResult_t res = loomGetUniqueId(&id);
    if (res != loomSuccess) {
        fprintf(stderr, "loomrun: cannot create a unique id: %s (%s)\n", loomGetErrorString(res),
                loomGetLastError(NULL));
        return 1;
    }
    char idVar[sizeof("LOOM_UNIQUE_ID=") + 2 * LOOM_UNIQUE_ID_BYTES];
    int off = sprintf(idVar, "LOOM_UNIQUE_ID=");
    for (int i = 0; i < LOOM_UNIQUE_ID_BYTES; i++) {
        off += sprintf(idVar + off, "%02x", (unsigned char)id.internal[i]);
    }
    char nranksVar[32], localSizeVar[32], rankVar[32], localRankVar[40];
    snprintf(nranksVar, sizeof(nranksVar), "LOOM_NRANKS=%d", job.nranks);
    snprintf(localSizeVar, sizeof(localSizeVar), "LOOM_LOCAL_SIZE=%d", job.nranks);
    char **env = buildEnv(idVar, nranksVar, localSizeVar, rankVar, localRankVar);
    job.ranks = calloc((size_t)job.nranks, sizeof(*job.ranks));
    if (env == NULL || job.ranks == NULL) {
        fprintf(stderr, "loomrun: out of memory\n");
        return 1;
    }
    /* The ranks' output goes straight out; nothing of ours is buffered across fork. */
    fflush(NULL);
    if (startRanks(&job, env, rankVar, localRankVar, &origMask, &origPipe) != 0) {
        return 1;
    }
    if (job.timeoutSec > 0) {
        job.timeoutAt = nowNs() + (int64_t)(job.timeoutSec * 1e9);
    }
    rc = superviseJob(&job, sfd);
    /* The rendezvous thread may still be waiting for ranks that never came; exit ends it. */
    fflush(NULL);
    _exit(rc);
}
