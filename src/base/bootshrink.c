/*
 * bootshrink.c — the ranks kept after a failure meet without the dead
 * (bootstrapShrink), at the lowest rank kept, on the listening socket it
 * opened at init, and leave with a fresh unique id or the same error.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bootint.h"
#include "debug.h"
#include "wire.h"

/* ---- shrink: the ranks kept meet without the dead (bootstrapShrink) ---- */

/*
 * After its hello (as at init: secret, rank, nranks, listen address) each
 * rank kept sends its request to the meeting rank, the lowest rank kept,
 * at the listening socket that rank opened at init; the meeting rank
 * answers every one with the same verdict:
 *
 *   request: "LMSK"(4) attempt(4) count(4) then count excluded ranks (4 each), ascending
 *   verdict: "LMSV"(4) result(4) unique id(128) text(BOOT_VERDICT_TEXT_BYTES, NUL-padded)
 *
 * The attempt counts the shrinks of this communicator, so a retry after a
 * failed shrink is not mistaken for the first. The meeting rank waits for
 * every rank its own list keeps, no longer than the timeout, and stops at
 * once when one fails (the caller's gone()) or one that arrived closes its
 * connection. Ranks whose lists differ get loomInvalidUsage, all of them,
 * as long as their lists agree on the meeting rank; where they do not, the
 * two groups wait at two meeting ranks and end with loomTimeout naming the
 * ranks that did not come.
 */
#define SHRINK_REQ_MAGIC 0x4c4d534bu     /* "LMSK" */
#define SHRINK_VERDICT_MAGIC 0x4c4d5356u /* "LMSV" */
#define SHRINK_REQ_HEADER 12
/* How often a wait looks at who has failed. */
#define SHRINK_POLL_MS 50
/* A rank waits for the verdict this much longer than the meeting rank waits for the others. */
#define SHRINK_GRACE_SEC 5

struct shrinkMeet {
    struct loomBootstrap *b;
    const struct bootstrapShrink *s;
    uint32_t attempt;
    int *fds; /* [nranks]: the connection of each rank that arrived, else -1 */
    char mismatch[BOOT_VERDICT_TEXT_BYTES];
};

static int shrinkExcluded(const struct bootstrapShrink *s, int r)
{
    for (int i = 0; i < s->nexclude; i++)
        if (s->exclude[i] == r)
            return 1;
    return 0;
}

/* "{1, 3}"; a long list ends in "...}". */
static void shrinkListFormat(const int *ranks, int n, char *buf, size_t len)
{
    size_t used = (size_t)snprintf(buf, len, "{");
    int i = 0;
    for (; i < n && used + 16 < len; i++)
        used += (size_t)snprintf(buf + used, len - used, "%s%d", i ? ", " : "", ranks[i]);
    snprintf(buf + used, len - used, "%s}", i < n ? "..." : "");
}

static void shrinkCompare(struct shrinkMeet *m, int rank, uint32_t attempt, const int *list, int n)
{
    const struct bootstrapShrink *s = m->s;
    char theirs[64], mine[64];
    if (m->mismatch[0])
        return;
    if (attempt != m->attempt) {
        snprintf(m->mismatch, sizeof(m->mismatch),
                 "rank %d is at its shrink #%u of this communicator, rank %d (where the ranks "
                 "kept meet) at #%u; every rank kept must call loomCommShrink as often",
                 rank, attempt, m->b->rank, m->attempt);
        return;
    }
    if (n == s->nexclude && memcmp(list, s->exclude, (size_t)n * sizeof(*list)) == 0)
        return;
    shrinkListFormat(list, n, theirs, sizeof(theirs));
    shrinkListFormat(s->exclude, s->nexclude, mine, sizeof(mine));
    snprintf(m->mismatch, sizeof(m->mismatch),
             "rank %d excludes %s, rank %d (where the ranks kept meet) excludes %s; every rank "
             "kept must pass the same exclude list",
             rank, theirs, m->b->rank, mine);
}

static const char *shrinkTake(void *ctx, const struct bootstrapHello *h, int fd,
                              const union socketAddress *peer)
{
    struct shrinkMeet *m = ctx;
    struct loomBootstrap *b = m->b;
    uint8_t hdr[SHRINK_REQ_HEADER];
    (void)peer;

    if (h->nranks != b->nranks)
        return "nranks differs from this communicator's";
    if (h->rank == b->rank)
        return "it claims this rank's number";
    if (!bootwireAddrSame(&h->addr, &b->peers[h->rank]))
        return "its listen address differs from the one it had at init";
    if (m->fds[h->rank] >= 0)
        return "that rank has arrived already";
    uint64_t deadline = socketDeadline(HELLO_TIMEOUT_SEC);
    if (socketRecvAll(fd, hdr, sizeof(hdr), deadline, NULL, NULL) != loomSuccess)
        return "no whole shrink request";
    uint32_t n = wireGet32(hdr + 8);
    if (wireGet32(hdr) != SHRINK_REQ_MAGIC || n > (uint32_t)b->nranks)
        return "malformed shrink request";
    uint8_t *raw = malloc((size_t)n * 4 + 1);
    int *list = calloc((size_t)n + 1, sizeof(*list));
    const char *why = NULL;
    if (raw == NULL || list == NULL)
        why = "out of memory";
    else if (socketRecvAll(fd, raw, (size_t)n * 4, deadline, NULL, NULL) != loomSuccess)
        why = "no whole shrink request";
    for (uint32_t i = 0; why == NULL && i < n; i++)
        list[i] = (int)wireGet32(raw + 4 * i);
    if (why == NULL) {
        m->fds[h->rank] = fd;
        shrinkCompare(m, h->rank, wireGet32(hdr + 4), list, (int)n);
    }
    free(raw);
    free(list);
    return why;
}

/* A rank that arrived sends nothing more: an event on its connection means it went away. */
static int shrinkConnGone(int fd)
{
    struct pollfd p = {.fd = fd, .events = POLLIN};
    return poll(&p, 1, 0) > 0;
}

/* The meeting rank's wait: loomSuccess when every rank kept has arrived, else why not. */
static loomResult_t shrinkAwait(struct shrinkMeet *m, struct helloGather *g, char *why, size_t len)
{
    const struct loomBootstrap *b = m->b;
    const struct bootstrapShrink *s = m->s;
    uint64_t deadline = socketDeadline(b->timeoutSec);
    for (;;) {
        gatherRound(g, SHRINK_POLL_MS);
        int missing = 0, failed = -1, left = -1;
        for (int r = 0; r < b->nranks; r++) {
            if (r == b->rank || shrinkExcluded(s, r))
                continue;
            if (m->fds[r] >= 0 && left < 0 && shrinkConnGone(m->fds[r]))
                left = r;
            if (m->fds[r] < 0 && failed < 0 && s->gone && s->gone(s->goneCtx, r))
                failed = r;
            missing += m->fds[r] < 0;
        }
        if (left >= 0 || failed >= 0) {
            snprintf(why, len,
                     "rank %d %s during loomCommShrink; call loomCommShrink again with it "
                     "excluded too",
                     left >= 0 ? left : failed,
                     left >= 0 ? "closed its connection (it died or gave up)" : "failed");
            return loomRemoteError;
        }
        if (missing == 0)
            return loomSuccess;
        if (socketClockNs() >= deadline) {
            char list[96];
            int *absent = calloc((size_t)missing, sizeof(*absent));
            int k = 0;
            for (int r = 0; absent && r < b->nranks; r++)
                if (r != b->rank && !shrinkExcluded(s, r) && m->fds[r] < 0)
                    absent[k++] = r;
            shrinkListFormat(absent, k, list, sizeof(list));
            free(absent);
            snprintf(why, len,
                     "rank(s) %s did not arrive at loomCommShrink within %d s (LOOM_TIMEOUT): "
                     "stopped, hung, or passing an exclude list that differs from rank %d's",
                     list, b->timeoutSec, b->rank);
            return loomTimeout;
        }
    }
}

static loomResult_t shrinkHost(struct loomBootstrap *b, const struct bootstrapShrink *s,
                               uint32_t attempt, loomUniqueId *newId)
{
    struct shrinkMeet m = {.b = b, .s = s, .attempt = attempt};
    char owner[48], why[BOOT_VERDICT_TEXT_BYTES] = "";
    loomResult_t res;

    snprintf(owner, sizeof(owner), "rank %d (shrink)", b->rank);
    m.fds = malloc((size_t)b->nranks * sizeof(*m.fds));
    struct helloGather *g = gatherOpen(b, owner, shrinkTake, &m);
    if (m.fds == NULL || g == NULL) {
        free(m.fds);
        free(g);
        return loomSetError(loomSystemError, "loomCommShrink: out of memory");
    }
    for (int r = 0; r < b->nranks; r++)
        m.fds[r] = -1;
    res = shrinkAwait(&m, g, why, sizeof(why));
    if (m.mismatch[0]) {
        res = loomInvalidUsage;
        snprintf(why, sizeof(why), "%s", m.mismatch);
    }
    if (res == loomSuccess && bootstrapGetUniqueId(newId) != loomSuccess) {
        res = loomSystemError;
        snprintf(why, sizeof(why), "%s", debugLastError(NULL));
    }
    for (int r = 0; r < b->nranks; r++) {
        if (m.fds[r] >= 0)
            verdictSend(m.fds[r], SHRINK_VERDICT_MAGIC, res, newId, why);
        socketClose(m.fds[r]);
    }
    gatherCloseAll(g);
    free(g);
    free(m.fds);
    if (res != loomSuccess)
        return loomSetError(res, "loomCommShrink: rank %d: %s", b->rank, why);
    return loomSuccess;
}

/* Connects to the meeting rank, giving up early if it is known to have failed. */
static loomResult_t shrinkConnect(struct loomBootstrap *b, const struct bootstrapShrink *s,
                                  int meet, uint64_t deadline, int *fd)
{
    union socketAddress addr;
    char label[LABEL_LEN];
    peerLabel(b, meet, label, sizeof(label));
    socketAddrFromBootstrap(&b->peers[meet], &addr);
    for (;;) {
        uint64_t step = socketDeadline(0.5);
        if (socketConnect(&addr, step < deadline ? step : deadline, NULL, NULL, fd) ==
            loomSuccess) {
            loomResult_t res = tlsWrap(*fd, 0, b->secret);
            if (res != loomSuccess)
                socketClose(*fd);
            return res;
        }
        if (s->gone && s->gone(s->goneCtx, meet))
            return loomSetError(loomRemoteError,
                                "loomCommShrink: rank %d: %s, where the ranks kept meet (the "
                                "lowest of them), has failed; call loomCommShrink again with it "
                                "excluded too",
                                b->rank, label);
        if (socketClockNs() >= deadline)
            return loomSetError(loomTimeout,
                                "loomCommShrink: rank %d could not reach %s, where the ranks kept "
                                "meet, within %d s",
                                b->rank, label, b->timeoutSec + SHRINK_GRACE_SEC);
    }
}

/* Waits for the verdict on fd; the meeting rank's failure ends the wait. */
static loomResult_t shrinkAwaitVerdict(struct loomBootstrap *b, const struct bootstrapShrink *s,
                                       int meet, int fd, uint64_t deadline, uint8_t *buf)
{
    size_t done = 0;
    const char *lost = NULL;
    while (done < BOOT_VERDICT_BYTES) {
        if (socketTryRecv(fd, buf, BOOT_VERDICT_BYTES, &done) != loomSuccess)
            lost = "closed the connection before its verdict (it died or gave up)";
        else if (done < BOOT_VERDICT_BYTES && s->gone && s->gone(s->goneCtx, meet))
            lost = "failed before its verdict";
        if (lost != NULL)
            return loomSetError(loomRemoteError,
                                "loomCommShrink: rank %d: rank %d, where the ranks kept meet, %s; "
                                "call loomCommShrink again with it excluded too",
                                b->rank, meet, lost);
        if (socketClockNs() >= deadline)
            return loomSetError(loomTimeout,
                                "loomCommShrink: rank %d had no verdict from rank %d, where the "
                                "ranks kept meet, within %d s",
                                b->rank, meet, b->timeoutSec + SHRINK_GRACE_SEC);
        struct pollfd p = {.fd = fd, .events = POLLIN};
        if (done < BOOT_VERDICT_BYTES)
            poll(&p, 1, SHRINK_POLL_MS);
    }
    return loomSuccess;
}

static loomResult_t shrinkJoin(struct loomBootstrap *b, const struct bootstrapShrink *s,
                               uint32_t attempt, int meet, loomUniqueId *newId)
{
    uint64_t deadline = socketDeadline(b->timeoutSec + SHRINK_GRACE_SEC);
    size_t len = BOOTSTRAP_HELLO_BYTES + SHRINK_REQ_HEADER + (size_t)s->nexclude * 4;
    uint8_t verdict[BOOT_VERDICT_BYTES];
    int fd = -1;

    uint8_t *req = malloc(len);
    if (req == NULL)
        return loomSetError(loomSystemError, "loomCommShrink: out of memory");
    loomResult_t res = helloMake(b, req);
    uint8_t *p = req + BOOTSTRAP_HELLO_BYTES;
    wirePut32(p, SHRINK_REQ_MAGIC);
    wirePut32(p + 4, attempt);
    wirePut32(p + 8, (uint32_t)s->nexclude);
    for (int i = 0; i < s->nexclude; i++)
        wirePut32(p + SHRINK_REQ_HEADER + 4 * i, (uint32_t)s->exclude[i]);
    if (res == loomSuccess)
        res = shrinkConnect(b, s, meet, deadline, &fd);
    if (res == loomSuccess && socketSendAll(fd, req, len, deadline, NULL, NULL) != loomSuccess)
        res = loomSetError(loomRemoteError,
                           "loomCommShrink: rank %d could not send its request to rank %d, where "
                           "the ranks kept meet: %s",
                           b->rank, meet, strerror(errno));
    free(req);
    if (res == loomSuccess)
        res = shrinkAwaitVerdict(b, s, meet, fd, deadline, verdict);
    socketClose(fd);
    LOOMCHECK(res);
    const char *text = verdictRead(verdict, SHRINK_VERDICT_MAGIC, &res, newId);
    if (text == NULL)
        return loomSetError(loomInternalError,
                            "loomCommShrink: rank %d: malformed verdict from rank %d", b->rank,
                            meet);
    if (res != loomSuccess)
        return loomSetError(res,
                            "loomCommShrink: rank %d: %s (told by rank %d, where the ranks "
                            "kept meet)",
                            b->rank, text, meet);
    return loomSuccess;
}

loomResult_t bootstrapShrink(struct loomBootstrap *b, const struct bootstrapShrink *s,
                             loomUniqueId *newId)
{
    if (b == NULL || s == NULL || newId == NULL || (s->exclude == NULL && s->nexclude > 0))
        return loomSetError(loomInvalidArgument, "bootstrapShrink: a NULL argument");
    int meet = -1;
    for (int r = 0; r < b->nranks && meet < 0; r++)
        if (!shrinkExcluded(s, r))
            meet = r;
    if (meet < 0 || shrinkExcluded(s, b->rank))
        return loomSetError(loomInvalidArgument,
                            "bootstrapShrink: rank %d excludes itself or every rank", b->rank);
    uint32_t attempt = ++b->shrinks;
    if (meet == b->rank)
        return shrinkHost(b, s, attempt, newId);
    return shrinkJoin(b, s, attempt, meet, newId);
}
