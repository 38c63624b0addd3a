/*
 * check_param.c — the parameter table (param.c) and logging/errors (debug.c).
 *
 * The table is read from the environment once per process, so every test
 * that sets variables relies on Check running each test in its own forked
 * child (main forces fork mode): a checked fixture clears all LOOM_*
 * variables in the child, the test sets what it needs, and the first Loom
 * call then reads them. Warnings go to stderr, which a test captures by
 * pointing fd 2 at a temporary file.
 */
#include <check.h>
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "debug.h"
#include "loom.h"
#include "param.h"

extern char **environ;

static char capturePath[64];

/* Runs in the forked child before each test: no LOOM_* setting of the caller leaks in. */
static void clearLoomEnvironment(void)
{
    char names[256][128];
    int count = 0;
    for (char **e = environ; *e != NULL && count < 256; e++) {
        if (strncmp(*e, "LOOM_", 5) != 0)
            continue;
        size_t len = strcspn(*e, "=");
        if (len < sizeof(names[0]))
            snprintf(names[count++], sizeof(names[0]), "%.*s", (int)len, *e);
    }
    for (int i = 0; i < count; i++)
        unsetenv(names[i]);
}

/* Points stderr at a fresh temporary file; captureRead returns what was written. */
static void captureStderr(void)
{
    strcpy(capturePath, "/tmp/check_param.XXXXXX");
    int fd = mkstemp(capturePath);
    ck_assert_int_ge(fd, 0);
    ck_assert_int_eq(dup2(fd, STDERR_FILENO), STDERR_FILENO);
    close(fd);
}

static const char *readFile(const char *path)
{
    static char text[8192];
    FILE *f = fopen(path, "r");
    ck_assert_msg(f != NULL, "cannot open %s", path);
    size_t n = fread(text, 1, sizeof(text) - 1, f);
    text[n] = '\0';
    fclose(f);
    return text;
}

static const char *captureRead(void)
{
    const char *text = readFile(capturePath);
    unlink(capturePath);
    return text;
}

static void shortHostName(char *host, size_t size)
{
    ck_assert_int_eq(gethostname(host, size), 0);
    host[size - 1] = '\0';
    host[strcspn(host, ".")] = '\0';
}

/* ---- paramParseInt */

START_TEST(parse_int_accepts_decimal_and_suffixes)
{
    int64_t v = -1;
    ck_assert_int_eq(paramParseInt("0", 0, 10, &v), 0);
    ck_assert_int_eq(v, 0);
    ck_assert_int_eq(paramParseInt("600", 1, 86400, &v), 0);
    ck_assert_int_eq(v, 600);
    ck_assert_int_eq(paramParseInt("+7", 0, 10, &v), 0);
    ck_assert_int_eq(v, 7);
    ck_assert_int_eq(paramParseInt("-5", -10, 10, &v), 0);
    ck_assert_int_eq(v, -5);
    ck_assert_int_eq(paramParseInt("1K", 0, INT64_MAX, &v), 0);
    ck_assert_int_eq(v, 1024);
    ck_assert_int_eq(paramParseInt("4m", 0, INT64_MAX, &v), 0);
    ck_assert_int_eq(v, 4 << 20);
    ck_assert_int_eq(paramParseInt("3G", 0, INT64_MAX, &v), 0);
    ck_assert_int_eq(v, INT64_C(3) << 30);
    ck_assert_int_eq(paramParseInt("-2k", INT64_MIN, 0, &v), 0);
    ck_assert_int_eq(v, -2048);
    ck_assert_int_eq(paramParseInt("9223372036854775807", INT64_MIN, INT64_MAX, &v), 0);
    ck_assert(v == INT64_MAX);
    ck_assert_int_eq(paramParseInt("-9223372036854775808", INT64_MIN, INT64_MAX, &v), 0);
    ck_assert(v == INT64_MIN);
}
END_TEST

START_TEST(parse_int_rejects_junk)
{
    const char *bad[] = {"",  "abc", "12x", "1KB",  "1k2", " 1", "1 ",
                         "-", "+",   "K",   "0x10", "1.5", "--1"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        int64_t v = 77;
        ck_assert_msg(paramParseInt(bad[i], INT64_MIN, INT64_MAX, &v) == -1, "'%s' accepted",
                      bad[i]);
        ck_assert_msg(v == 77, "'%s' changed the output on failure", bad[i]);
    }
    int64_t v = 77;
    ck_assert_int_eq(paramParseInt(NULL, 0, 10, &v), -1);
    ck_assert_int_eq(v, 77);
}
END_TEST

START_TEST(parse_int_detects_overflow)
{
    const char *bad[] = {"9223372036854775808", "-9223372036854775809", "99999999999999999999999",
                         "8589934592G",         "9007199254740992M",    "9223372036854775807K"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        int64_t v = 77;
        ck_assert_msg(paramParseInt(bad[i], INT64_MIN, INT64_MAX, &v) == -1, "'%s' accepted",
                      bad[i]);
        ck_assert(v == 77);
    }
    /* Just below the edge still fits: (2^33 - 1) G = 2^63 - 2^30. */
    int64_t v = 0;
    ck_assert_int_eq(paramParseInt("8589934591G", 0, INT64_MAX, &v), 0);
    ck_assert(v == INT64_MAX - ((INT64_C(1) << 30) - 1));
}
END_TEST

START_TEST(parse_int_enforces_range)
{
    int64_t v = 77;
    ck_assert_int_eq(paramParseInt("0", 1, 10, &v), -1);
    ck_assert_int_eq(paramParseInt("11", 1, 10, &v), -1);
    ck_assert_int_eq(paramParseInt("1K", 1, 1023, &v), -1);
    ck_assert_int_eq(paramParseInt("-1", 0, 10, &v), -1);
    ck_assert_int_eq(v, 77);
    ck_assert_int_eq(paramParseInt("1", 1, 10, &v), 0);
    ck_assert_int_eq(v, 1);
    ck_assert_int_eq(paramParseInt("10", 1, 10, &v), 0);
    ck_assert_int_eq(v, 10);
}
END_TEST

/* ---- the table read from the environment */

START_TEST(env_unset_gives_defaults)
{
    ck_assert_int_eq(paramInt(LOOM_PARAM_TIMEOUT), 600);
    ck_assert_int_eq(paramInt(LOOM_PARAM_BUFFSIZE), 1048576);
    ck_assert_int_eq(paramInt(LOOM_PARAM_NCHANNELS), 1);
    ck_assert_int_eq(paramInt(LOOM_PARAM_SPIN), 20000);
    ck_assert_int_eq(paramInt(LOOM_PARAM_CMA_DISABLE), 0);
    ck_assert_int_eq(paramInt(LOOM_PARAM_CMA_MIN_BYTES), 131072);
    ck_assert_int_eq(paramInt(LOOM_PARAM_SHM_DISABLE), 0);
    ck_assert_str_eq(paramStr(LOOM_PARAM_DEBUG_SUBSYS), "ALL");
    ck_assert_str_eq(paramStr(LOOM_PARAM_DEBUG), "");
    ck_assert_str_eq(paramStr(LOOM_PARAM_NET), "");
    /* Every row: value in force is its default, and an integer default is a valid value. */
    for (int i = 0; i < loomParamCount(); i++) {
        loomParamInfo_t info;
        ck_assert_int_eq(loomParamGet(i, &info), loomSuccess);
        ck_assert_int_eq(info.isSet, 0);
        ck_assert_str_eq(info.value, info.defaultValue);
    }
}
END_TEST

START_TEST(env_bad_int_keeps_default_and_warns)
{
    setenv("LOOM_TIMEOUT", "abc", 1);
    setenv("LOOM_NCHANNELS", "33", 1);
    setenv("LOOM_BUFFSIZE", "256", 1);
    captureStderr();
    ck_assert_int_eq(paramInt(LOOM_PARAM_TIMEOUT), 600);
    ck_assert_int_eq(paramInt(LOOM_PARAM_NCHANNELS), 1);
    ck_assert_int_eq(paramInt(LOOM_PARAM_BUFFSIZE), 1048576);
    const char *err = captureRead();
    ck_assert_msg(strstr(err, "[LOOM] WARN LOOM_TIMEOUT=abc is not a number of seconds in "
                              "1..86400; using 600\n") != NULL,
                  "stderr was: %s", err);
    ck_assert_msg(strstr(err, "LOOM_NCHANNELS=33 is not") != NULL, "stderr was: %s", err);
    loomParamInfo_t info;
    ck_assert_int_eq(loomParamGet(LOOM_PARAM_TIMEOUT, &info), loomSuccess);
    ck_assert_int_eq(info.isSet, 0);
    ck_assert_str_eq(info.value, "600");
}
END_TEST

START_TEST(env_good_int_is_taken)
{
    setenv("LOOM_TIMEOUT", "30", 1);
    setenv("LOOM_BUFFSIZE", "4M", 1);
    captureStderr();
    ck_assert_int_eq(paramInt(LOOM_PARAM_TIMEOUT), 30);
    ck_assert_int_eq(paramInt(LOOM_PARAM_BUFFSIZE), 4 << 20);
    ck_assert_str_eq(captureRead(), "");
    loomParamInfo_t info;
    ck_assert_int_eq(loomParamGet(LOOM_PARAM_TIMEOUT, &info), loomSuccess);
    ck_assert_int_eq(info.isSet, 1);
    ck_assert_str_eq(info.value, "30");
    ck_assert_str_eq(info.defaultValue, "600");
    ck_assert_str_eq(paramStr(LOOM_PARAM_BUFFSIZE), "4194304");
}
END_TEST

START_TEST(env_empty_is_unset)
{
    setenv("LOOM_TIMEOUT", "", 1);
    setenv("LOOM_DEBUG_SUBSYS", "", 1);
    captureStderr();
    ck_assert_int_eq(paramInt(LOOM_PARAM_TIMEOUT), 600);
    ck_assert_str_eq(paramStr(LOOM_PARAM_DEBUG_SUBSYS), "ALL");
    ck_assert_str_eq(captureRead(), "");
    loomParamInfo_t info;
    ck_assert_int_eq(loomParamGet(LOOM_PARAM_TIMEOUT, &info), loomSuccess);
    ck_assert_int_eq(info.isSet, 0);
}
END_TEST

START_TEST(env_value_read_once)
{
    setenv("LOOM_SOCKET_IFNAME", "eth1", 1);
    ck_assert_str_eq(paramStr(LOOM_PARAM_SOCKET_IFNAME), "eth1");
    setenv("LOOM_SOCKET_IFNAME", "eth2", 1);
    ck_assert_str_eq(paramStr(LOOM_PARAM_SOCKET_IFNAME), "eth1");
}
END_TEST

START_TEST(env_words_are_canonical_or_rejected)
{
    setenv("LOOM_DEBUG", "info", 1);
    setenv("LOOM_NET", "tcp", 1);
    captureStderr();
    ck_assert_str_eq(paramStr(LOOM_PARAM_DEBUG), "INFO");
    ck_assert_str_eq(paramStr(LOOM_PARAM_NET), "");
    const char *err = captureRead();
    ck_assert_msg(strstr(err, "LOOM_NET=tcp is not one of socket, ib") != NULL, "stderr: %s", err);
}
END_TEST

START_TEST(param_get_lists_every_row)
{
    int count = loomParamCount();
    ck_assert_int_eq(count, LOOM_PARAM_NUM);
    for (int i = 0; i < count; i++) {
        loomParamInfo_t info;
        memset(&info, 0, sizeof(info));
        ck_assert_int_eq(loomParamGet(i, &info), loomSuccess);
        ck_assert_ptr_nonnull(info.name);
        ck_assert_ptr_nonnull(info.value);
        ck_assert_ptr_nonnull(info.defaultValue);
        ck_assert_ptr_nonnull(info.help);
        ck_assert_msg(strncmp(info.name, "LOOM_", 5) == 0, "row %d is %s", i, info.name);
        ck_assert_msg(strlen(info.help) > 10, "%s has no help", info.name);
        for (int j = 0; j < i; j++) {
            loomParamInfo_t other;
            ck_assert_int_eq(loomParamGet(j, &other), loomSuccess);
            ck_assert_str_ne(other.name, info.name);
        }
    }
    /* Rows follow loomParamId_t. */
    loomParamInfo_t info;
    ck_assert_int_eq(loomParamGet(LOOM_PARAM_DEBUG, &info), loomSuccess);
    ck_assert_str_eq(info.name, "LOOM_DEBUG");
    ck_assert_int_eq(loomParamGet(LOOM_PARAM_HOSTID, &info), loomSuccess);
    ck_assert_str_eq(info.name, "LOOM_HOSTID");
    ck_assert_int_eq(loomParamGet(LOOM_PARAM_SPIN, &info), loomSuccess);
    ck_assert_str_eq(info.name, "LOOM_SPIN");
}
END_TEST

START_TEST(param_get_rejects_bad_index)
{
    loomParamInfo_t info;
    char want[32];
    int bad[] = {-1, loomParamCount(), 1000};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        ck_assert_int_eq(loomParamGet(bad[i], &info), loomInvalidArgument);
        snprintf(want, sizeof(want), "index %d ", bad[i]);
        const char *line = debugLastError(NULL);
        ck_assert_msg(strstr(line, want) != NULL, "last error: %s", line);
    }
    ck_assert_int_eq(loomParamGet(0, NULL), loomInvalidArgument);
}
END_TEST

/* ---- errors */

static void *lastErrorOfNewThread(void *arg)
{
    uint64_t *seq = arg;
    const char *line = debugLastError(seq);
    return (void *)line;
}

START_TEST(set_error_round_trip)
{
    uint64_t seq0 = 99;
    ck_assert_str_eq(debugLastError(&seq0), "");
    ck_assert(seq0 == 0);
    ck_assert_int_eq(loomSetError(loomTimeout, "wait %d took too long\n", 5), loomTimeout);
    uint64_t seq1 = 0, seq2 = 0;
    ck_assert_str_eq(debugLastError(&seq1), "wait 5 took too long");
    ck_assert_int_eq(loomSetError(loomInvalidUsage, "second"), loomInvalidUsage);
    ck_assert_str_eq(debugLastError(&seq2), "second");
    ck_assert(seq1 > 0 && seq2 > seq1);
    ck_assert(debugNextErrorSeq() > seq2);

    /* The line belongs to the thread that set it. */
    pthread_t t;
    uint64_t otherSeq = 99;
    void *otherLine = NULL;
    ck_assert_int_eq(pthread_create(&t, NULL, lastErrorOfNewThread, &otherSeq), 0);
    ck_assert_int_eq(pthread_join(t, &otherLine), 0);
    ck_assert_str_eq((const char *)otherLine, "");
    ck_assert(otherSeq == 0);
}
END_TEST

START_TEST(set_error_truncates)
{
    char longText[2000];
    memset(longText, 'x', sizeof(longText) - 1);
    longText[sizeof(longText) - 1] = '\0';
    loomSetError(loomInternalError, "%s", longText);
    size_t len = strlen(debugLastError(NULL));
    ck_assert(len > 100 && len < sizeof(longText) - 1);
}
END_TEST

/*
 * The first call initialises logging, and here opening the log file fails
 * with ENOENT: "%m" must still print the caller's errno.
 */
START_TEST(set_error_keeps_errno)
{
    setenv("LOOM_DEBUG", "WARN", 1);
    setenv("LOOM_DEBUG_FILE", "/nonexistent-dir/loom.log", 1);
    captureStderr();
    errno = EPERM;
    loomSetError(loomSystemError, "open /nowhere: %m");
    ck_assert_int_eq(errno, EPERM);
    char want[128];
    snprintf(want, sizeof(want), "open /nowhere: %s", strerror(EPERM));
    ck_assert_str_eq(debugLastError(NULL), want);
    unlink(capturePath);
}
END_TEST

START_TEST(log_keeps_errno)
{
    setenv("LOOM_DEBUG", "WARN", 1);
    setenv("LOOM_DEBUG_FILE", "/nonexistent-dir/loom.log", 1);
    captureStderr();
    errno = EPERM;
    WARN("mmap: %m");
    ck_assert_int_eq(errno, EPERM);
    const char *err = captureRead();
    char want[128];
    snprintf(want, sizeof(want), "[LOOM] WARN mmap: %s\n", strerror(EPERM));
    ck_assert_msg(strstr(err, want) != NULL, "stderr: %s", err);
}
END_TEST

START_TEST(set_error_is_silent_without_debug)
{
    captureStderr();
    loomSetError(loomInvalidArgument, "quiet");
    ck_assert_str_eq(captureRead(), "");
}
END_TEST

START_TEST(set_error_logs_at_warn)
{
    setenv("LOOM_DEBUG", "WARN", 1);
    captureStderr();
    loomSetError(loomInvalidArgument, "count %d is too large", 7);
    const char *err = captureRead();
    ck_assert_msg(strstr(err, ":- [LOOM] WARN count 7 is too large\n") != NULL, "stderr: %s", err);
}
END_TEST

START_TEST(error_strings)
{
    ck_assert_str_eq(loomGetErrorString(loomSuccess), "no error");
    ck_assert_str_eq(loomGetErrorString(loomUnhandledCudaError), "unhandled cuda error");
    ck_assert_str_eq(loomGetErrorString(loomSystemError), "unhandled system error");
    ck_assert_str_eq(loomGetErrorString(loomInternalError), "internal error");
    ck_assert_str_eq(loomGetErrorString(loomInvalidArgument), "invalid argument");
    ck_assert_str_eq(loomGetErrorString(loomInvalidUsage), "invalid usage");
    ck_assert_str_eq(loomGetErrorString(loomRemoteError),
                     "remote process exited or there was a network error");
    ck_assert_str_eq(loomGetErrorString(loomInProgress), "operation in progress");
    ck_assert_str_eq(loomGetErrorString(loomTimeout), "timeout");
    ck_assert_str_eq(loomGetErrorString(loomNumResults), "unknown result code");
    ck_assert_str_eq(loomGetErrorString((loomResult_t)-3), "unknown result code");
}
END_TEST

START_TEST(build_features_named)
{
    const char *f = loomBuildFeatures();
    ck_assert_ptr_nonnull(f);
    ck_assert_ptr_nonnull(strstr(f, "hwloc="));
    ck_assert_ptr_nonnull(strstr(f, "cuda="));
    ck_assert_ptr_nonnull(strstr(f, "mpi="));
}
END_TEST

/* ---- logging */

START_TEST(subsys_list_selects)
{
    setenv("LOOM_DEBUG_SUBSYS", "SHM,net", 1);
    debugInit();
    ck_assert_uint_eq(loomLogMask, LOOM_SHM | LOOM_NET);
}
END_TEST

START_TEST(subsys_caret_excludes)
{
    setenv("LOOM_DEBUG_SUBSYS", "^SHM, TUNING", 1);
    debugInit();
    ck_assert_uint_eq(loomLogMask, LOOM_ALL & ~(uint32_t)(LOOM_SHM | LOOM_TUNING));
}
END_TEST

START_TEST(subsys_unknown_warns)
{
    setenv("LOOM_DEBUG_SUBSYS", "FOO,COLL", 1);
    captureStderr();
    debugInit();
    ck_assert_uint_eq(loomLogMask, LOOM_COLL);
    const char *err = captureRead();
    ck_assert_msg(strstr(err, "unknown subsystem 'FOO'") != NULL, "stderr: %s", err);
}
END_TEST

START_TEST(subsys_default_all)
{
    debugInit();
    ck_assert_uint_eq(loomLogMask, LOOM_ALL);
    ck_assert_int_eq(loomLogLevel, LOOM_LOG_NONE);
}
END_TEST

START_TEST(log_line_format_and_filter)
{
    setenv("LOOM_DEBUG", "trace", 1);
    setenv("LOOM_DEBUG_SUBSYS", "SHM", 1);
    captureStderr();
    debugInit();
    ck_assert_int_eq(loomLogLevel, LOOM_LOG_TRACE);
    INFO(LOOM_NET, "filtered out");
    WARN("before rank");
    debugSetRank(3);
    INFO(LOOM_SHM, "mapped %d peers", 3);
    int traceLine = __LINE__ + 1;
    TRACE(LOOM_SHM | LOOM_NET, "step %d", 9);
    const char *err = captureRead();

    char host[256], want[1024];
    shortHostName(host, sizeof(host));
    int pid = (int)getpid();
    snprintf(want, sizeof(want),
             "%s:%d:- [LOOM] WARN before rank\n"
             "%s:%d:3 [LOOM] INFO SHM mapped 3 peers\n"
             "%s:%d:3 [LOOM] TRACE SHM check_param.c:%d step 9\n",
             host, pid, host, pid, host, pid, traceLine);
    ck_assert_str_eq(err, want);
}
END_TEST

START_TEST(log_file_expands_pid_and_host)
{
    char dir[] = "/tmp/check_param_log.XXXXXX";
    ck_assert_ptr_nonnull(mkdtemp(dir));
    char template[PATH_MAX];
    snprintf(template, sizeof(template), "%s/loom.%%h.%%p.log", dir);
    setenv("LOOM_DEBUG", "WARN", 1);
    setenv("LOOM_DEBUG_FILE", template, 1);
    WARN("into the file %d", 12);

    char host[256], path[PATH_MAX];
    shortHostName(host, sizeof(host));
    snprintf(path, sizeof(path), "%s/loom.%s.%d.log", dir, host, (int)getpid());
    const char *text = readFile(path);
    ck_assert_msg(strstr(text, " [LOOM] WARN into the file 12\n") != NULL, "file: %s", text);
    unlink(path);
    rmdir(dir);
}
END_TEST

START_TEST(log_file_unopenable_falls_back)
{
    setenv("LOOM_DEBUG", "WARN", 1);
    setenv("LOOM_DEBUG_FILE", "/nonexistent-dir/loom.%p.log", 1);
    captureStderr();
    WARN("still here");
    const char *err = captureRead();
    ck_assert_msg(strstr(err, "cannot open /nonexistent-dir/loom.") != NULL, "stderr: %s", err);
    ck_assert_msg(strstr(err, "[LOOM] WARN still here\n") != NULL, "stderr: %s", err);
}
END_TEST

static void addTest(Suite *s, const char *name, const TTest *test)
{
    TCase *tc = tcase_create(name);
    tcase_add_checked_fixture(tc, clearLoomEnvironment, NULL);
    tcase_add_test(tc, test);
    suite_add_tcase(s, tc);
}

static Suite *paramSuite(void)
{
    Suite *s = suite_create("param");
    addTest(s, "parse_int_accepts_decimal_and_suffixes", parse_int_accepts_decimal_and_suffixes);
    addTest(s, "parse_int_rejects_junk", parse_int_rejects_junk);
    addTest(s, "parse_int_detects_overflow", parse_int_detects_overflow);
    addTest(s, "parse_int_enforces_range", parse_int_enforces_range);
    addTest(s, "env_unset_gives_defaults", env_unset_gives_defaults);
    addTest(s, "env_bad_int_keeps_default_and_warns", env_bad_int_keeps_default_and_warns);
    addTest(s, "env_good_int_is_taken", env_good_int_is_taken);
    addTest(s, "env_empty_is_unset", env_empty_is_unset);
    addTest(s, "env_value_read_once", env_value_read_once);
    addTest(s, "env_words_are_canonical_or_rejected", env_words_are_canonical_or_rejected);
    addTest(s, "param_get_lists_every_row", param_get_lists_every_row);
    addTest(s, "param_get_rejects_bad_index", param_get_rejects_bad_index);
    addTest(s, "set_error_round_trip", set_error_round_trip);
    addTest(s, "set_error_truncates", set_error_truncates);
    addTest(s, "set_error_keeps_errno", set_error_keeps_errno);
    addTest(s, "log_keeps_errno", log_keeps_errno);
    addTest(s, "set_error_is_silent_without_debug", set_error_is_silent_without_debug);
    addTest(s, "set_error_logs_at_warn", set_error_logs_at_warn);
    addTest(s, "error_strings", error_strings);
    addTest(s, "build_features_named", build_features_named);
    addTest(s, "subsys_list_selects", subsys_list_selects);
    addTest(s, "subsys_caret_excludes", subsys_caret_excludes);
    addTest(s, "subsys_unknown_warns", subsys_unknown_warns);
    addTest(s, "subsys_default_all", subsys_default_all);
    addTest(s, "log_line_format_and_filter", log_line_format_and_filter);
    addTest(s, "log_file_expands_pid_and_host", log_file_expands_pid_and_host);
    addTest(s, "log_file_unopenable_falls_back", log_file_unopenable_falls_back);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(paramSuite());
    /* The table is read once per process: each test needs its own child, even under CK_FORK=no. */
    srunner_set_fork_status(sr, CK_FORK);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
