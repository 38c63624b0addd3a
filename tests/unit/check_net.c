/*
 * check_net.c — the parts of the network transport that need no network
 * and no RDMA device: FIFO and credit bookkeeping, how TCP cuts a message
 * over sockets and frames it, the failure notices hosts send each other,
 * and the InfiniBand helpers (connection
 * records, GIDs, LOOM_IB_HCA matching, the registration cache with a fake
 * device behind it).
 */
#include <check.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "net.h"
#include "net_ib_util.h"

/* ---- bookkeeping ---- */

START_TEST(sendable_is_bounded_by_tail_and_credit)
{
    ck_assert_uint_eq(netSendable(0, 0, LOOM_STEPS), 0);
    ck_assert_uint_eq(netSendable(0, 5, LOOM_STEPS), 5);
    ck_assert_uint_eq(netSendable(0, 20, LOOM_STEPS), LOOM_STEPS);
    ck_assert_uint_eq(netSendable(6, 20, LOOM_STEPS), 2);
    ck_assert_uint_eq(netSendable(8, 20, LOOM_STEPS), 0);
    /* The receiver freed three slots: three more may go. */
    ck_assert_uint_eq(netSendable(8, 20, 3 + LOOM_STEPS), 3);
    /* TCP passes no credit at all. */
    ck_assert_uint_eq(netSendable(100, 107, UINT64_MAX), 7);
}
END_TEST

START_TEST(receivable_follows_freed_slots)
{
    ck_assert_uint_eq(netReceivable(0, 0), LOOM_STEPS);
    ck_assert_uint_eq(netReceivable(LOOM_STEPS, 0), 0);
    ck_assert_uint_eq(netReceivable(LOOM_STEPS, 1), 1);
    ck_assert_uint_eq(netReceivable(13, 9), LOOM_STEPS - 4);
}
END_TEST

START_TEST(counter_expand_crosses_32_bits)
{
    ck_assert_uint_eq(netCounterExpand(0, 5), 5);
    ck_assert_uint_eq(netCounterExpand(5, 5), 5);
    ck_assert_uint_eq(netCounterExpand(0xfffffff0ULL, 0xfffffff8u), 0xfffffff8ULL);
    ck_assert_uint_eq(netCounterExpand(0xfffffff0ULL, 3), 0x100000003ULL);
    ck_assert_uint_eq(netCounterExpand(0x3fffffff0ULL, 0x10), 0x400000010ULL);
    /* A step forward of up to 2^31 - 1 is recognised. */
    ck_assert_uint_eq(netCounterExpand(1ULL << 32, 0x7fffffffu), (1ULL << 32) + 0x7fffffffULL);
}
END_TEST

/*
 * Simulates the InfiniBand credit loop around the 2^32 wrap of the
 * immediates: the sender writes message k into the receiver's slot
 * k % LOOM_STEPS only when netSendable allows, the receiver consumes in
 * order and returns its head in 32 bits, late and several at a time. No
 * message may land in a slot still holding an unread one.
 */
START_TEST(credit_walk_never_overruns)
{
    const uint64_t base = 0xffffff00ULL;
    int64_t slot[LOOM_STEPS];
    uint32_t queue[64];
    int queued = 0;
    uint64_t tail = base, posted = base, consumed = base, credit = base;
    unsigned seed = 12345;
    for (int i = 0; i < LOOM_STEPS; i++)
        slot[i] = -1;
    while (consumed < base + 20000) {
        seed = seed * 1103515245u + 12345u;
        tail += (seed >> 16) % 4; /* the sending executor writes */
        for (uint64_t n = netSendable(posted, tail, credit + LOOM_STEPS); n > 0; n--, posted++) {
            ck_assert_int_eq(slot[posted % LOOM_STEPS], -1);
            slot[posted % LOOM_STEPS] = (int64_t)(posted - base);
        }
        while (consumed < posted && (seed >> 9) % 3) { /* the receiving executor reads */
            ck_assert_int_eq(slot[consumed % LOOM_STEPS], (int64_t)(consumed - base));
            slot[consumed % LOOM_STEPS] = -1;
            consumed++;
            seed = seed * 1103515245u + 12345u;
            if (queued < 64)
                queue[queued++] = (uint32_t)consumed;
        }
        if ((seed >> 12) % 4 == 0) { /* credits arrive late, in a burst */
            for (int q = 0; q < queued; q++)
                credit = netCounterExpand(credit, queue[q]);
            queued = 0;
            ck_assert_uint_eq(credit, consumed);
        }
        ck_assert_uint_le(posted, credit + LOOM_STEPS);
    }
    ck_assert_uint_gt(consumed, 1ULL << 32);
}
END_TEST

/* ---- TCP framing ---- */

START_TEST(split_small_is_one_part)
{
    size_t off, len;
    ck_assert_int_eq(netSplit(0, 4, 0, &off, &len), 1);
    ck_assert_uint_eq(len, 0);
    ck_assert_int_eq(netSplit(NET_SPLIT_MIN_BYTES - 1, 4, 0, &off, &len), 1);
    ck_assert_uint_eq(off, 0);
    ck_assert_uint_eq(len, NET_SPLIT_MIN_BYTES - 1);
    ck_assert_int_eq(netSplit(1 << 20, 1, 0, &off, &len), 1);
    ck_assert_uint_eq(len, 1 << 20);
}
END_TEST

START_TEST(split_parts_cover_exactly)
{
    static const size_t sizes[] = {
        NET_SPLIT_MIN_BYTES, NET_SPLIT_MIN_BYTES + 1, 100001, 1 << 20, (1 << 20) + 7, 4 << 20};
    for (size_t k = 0; k < sizeof(sizes) / sizeof(sizes[0]); k++) {
        for (int nsocks = 2; nsocks <= 16; nsocks++) {
            size_t off, len, end = 0;
            int parts = netSplit(sizes[k], nsocks, 0, &off, &len);
            ck_assert_int_ge(parts, 2);
            ck_assert_int_le(parts, nsocks);
            for (int i = 0; i < parts; i++) {
                ck_assert_int_eq(netSplit(sizes[k], nsocks, i, &off, &len), parts);
                ck_assert_uint_eq(off, end);
                ck_assert_uint_eq(off % 64, 0);
                ck_assert_uint_ge(len, NET_SPLIT_MIN_BYTES / 4);
                end = off + len;
            }
            ck_assert_uint_eq(end, sizes[k]);
        }
    }
}
END_TEST

START_TEST(header_round_trip_is_little_endian)
{
    uint8_t h[NET_HEADER_BYTES];
    uint32_t bytes, seq;
    netHeaderEncode(0x01020304u, 0xa0b0c0d0u, h);
    ck_assert_uint_eq(h[0], 0x04);
    ck_assert_uint_eq(h[3], 0x01);
    ck_assert_uint_eq(h[4], 0xd0);
    netHeaderDecode(h, &bytes, &seq);
    ck_assert_uint_eq(bytes, 0x01020304u);
    ck_assert_uint_eq(seq, 0xa0b0c0d0u);
}
END_TEST

/* ---- failure notices between hosts ---- */

START_TEST(notice_round_trip_in_pieces)
{
    struct netNotice in = {.code = 8, .from = 3}, out;
    uint8_t w[NET_NOTICE_MAX_BYTES];
    snprintf(in.text, sizeof(in.text), "rank 2 (pid 42 on h2) exited while rank 3 waited for it");
    size_t len = netNoticeEncode(&in, w);
    ck_assert_uint_eq(len, NET_NOTICE_HEADER_BYTES + strlen(in.text));
    ck_assert_int_eq(memcmp(w, "LMNF", 4), 0);
    ck_assert_uint_eq(w[7], 8); /* big-endian code */
    /* What a non-blocking reader sees as bytes trickle in: how many are still missing. */
    ck_assert_int_eq(netNoticeDecode(w, 0, &out), NET_NOTICE_HEADER_BYTES);
    ck_assert_int_eq(netNoticeDecode(w, 3, &out), NET_NOTICE_HEADER_BYTES - 3);
    ck_assert_int_eq(netNoticeDecode(w, NET_NOTICE_HEADER_BYTES, &out), (long)strlen(in.text));
    ck_assert_int_eq(netNoticeDecode(w, len - 1, &out), 1);
    memset(&out, 0x5a, sizeof(out));
    ck_assert_int_eq(netNoticeDecode(w, len, &out), 0);
    ck_assert_int_eq(out.code, 8);
    ck_assert_int_eq(out.from, 3);
    ck_assert_str_eq(out.text, in.text);
}
END_TEST

START_TEST(notice_long_text_is_cut)
{
    struct netNotice in = {.code = 9, .from = 0}, out;
    uint8_t w[NET_NOTICE_MAX_BYTES];
    memset(in.text, 'x', sizeof(in.text)); /* not terminated: the encoder stops in time */
    size_t len = netNoticeEncode(&in, w);
    ck_assert_uint_eq(len, NET_NOTICE_MAX_BYTES - 1);
    ck_assert_int_eq(netNoticeDecode(w, len, &out), 0);
    ck_assert_uint_eq(strlen(out.text), LOOM_NOTICE_BYTES - 1);
}
END_TEST

START_TEST(notice_rejects_what_is_not_one)
{
    struct netNotice in = {.code = 8, .from = 1}, out;
    uint8_t w[NET_NOTICE_MAX_BYTES];
    snprintf(in.text, sizeof(in.text), "why");
    size_t len = netNoticeEncode(&in, w);
    ck_assert_int_eq(netNoticeDecode((const uint8_t *)"LMX", 3, &out), -1); /* early wrong magic */
    ck_assert_int_eq(netNoticeDecode(w, len + 1, &out), -1);                /* trailing bytes */
    w[0] = 'X';
    ck_assert_int_eq(netNoticeDecode(w, len, &out), -1);
    w[0] = 'L';
    w[12] = 0x7f; /* a length beyond any notice */
    ck_assert_int_eq(netNoticeDecode(w, NET_NOTICE_HEADER_BYTES, &out), -1);
    w[12] = 0;
    w[14] = (uint8_t)(LOOM_NOTICE_BYTES >> 8);
    w[15] = (uint8_t)LOOM_NOTICE_BYTES; /* one over: the text must leave room for its NUL */
    ck_assert_int_eq(netNoticeDecode(w, NET_NOTICE_HEADER_BYTES, &out), -1);
}
END_TEST

/* ---- InfiniBand records ---- */

static struct ibConnInfo sampleInfo(void)
{
    struct ibConnInfo in = {.lid = 0x1234,
                            .qpn = 0xabcdef,
                            .psn = 0x123456,
                            .mtu = 5,
                            .addr = 0x00007f0012345000ULL,
                            .rkey = 0xdeadbeef,
                            .slotBytes = 131072};
    for (int i = 0; i < IB_GID_BYTES; i++)
        in.gid[i] = (uint8_t)(0xf0 + i);
    return in;
}

START_TEST(ib_record_round_trip)
{
    uint8_t buf[IB_CONN_BYTES];
    struct ibConnInfo in = sampleInfo(), out;
    ibConnEncode(&in, buf);
    ck_assert_int_eq(memcmp(buf, "LMIB", 4), 0);
    ck_assert_uint_eq(buf[6], 0x12); /* lid, big-endian */
    ck_assert_uint_eq(buf[7], 0x34);
    ck_assert_int_eq(ibConnDecode(buf, &out), loomSuccess);
    ck_assert_uint_eq(out.lid, in.lid);
    ck_assert_uint_eq(out.qpn, in.qpn);
    ck_assert_uint_eq(out.psn, in.psn);
    ck_assert_uint_eq(out.mtu, in.mtu);
    ck_assert_int_eq(memcmp(out.gid, in.gid, IB_GID_BYTES), 0);
    ck_assert_uint_eq(out.addr, in.addr);
    ck_assert_uint_eq(out.rkey, in.rkey);
    ck_assert_uint_eq(out.slotBytes, in.slotBytes);
}
END_TEST

START_TEST(ib_record_rejects_malformed)
{
    uint8_t good[IB_CONN_BYTES], bad[IB_CONN_BYTES];
    struct ibConnInfo in = sampleInfo(), out;
    ibConnEncode(&in, good);
    /* magic, version, flags, a reserved byte, psn and qpn over 24 bits, mtu out of range */
    static const int at[] = {0, 4, 5, 17, 12, 8, 16, 16, 60};
    static const uint8_t value[] = {'X', 9, 7, 1, 1, 1, 0, 6, 1};
    for (size_t i = 0; i < sizeof(at) / sizeof(at[0]); i++) {
        memcpy(bad, good, sizeof(bad));
        bad[at[i]] = value[i];
        ck_assert_msg(ibConnDecode(bad, &out) == loomInvalidArgument, "byte %d = %d accepted",
                      at[i], value[i]);
    }
}
END_TEST

/* A record the peer never filled (the core's zeroed buffer, or flags 0) is refused. */
START_TEST(ib_record_unfilled)
{
    uint8_t buf[IB_CONN_BYTES] = {0};
    struct ibConnInfo out;
    ck_assert_int_eq(ibConnDecode(buf, &out), loomInvalidArgument);
    struct ibConnInfo in = {.lid = 1, .qpn = 2, .psn = 3, .mtu = 3, .slotBytes = 4096};
    ibConnEncode(&in, buf);
    ck_assert_int_eq(ibConnDecode(buf, &out), loomSuccess);
    buf[5] = 0;
    ck_assert_int_eq(ibConnDecode(buf, &out), loomInvalidArgument);
}
END_TEST

START_TEST(ib_gid_format)
{
    uint8_t gid[IB_GID_BYTES] = {0xfe, 0x80, 0,    0,    0,    0, 0, 0,
                                 0x02, 0x02, 0xc9, 0xff, 0xfe, 0, 0, 1};
    char text[IB_GID_STRLEN];
    ibGidFormat(gid, text, sizeof(text));
    ck_assert_str_eq(text, "fe80:0000:0000:0000:0202:c9ff:fe00:0001");
    ck_assert_int_eq(ibGidIsZero(gid), 0);
    memset(gid, 0, sizeof(gid));
    ck_assert_int_eq(ibGidIsZero(gid), 1);
    char small[10];
    ibGidFormat(gid, small, sizeof(small));
    ck_assert_uint_lt(strlen(small), sizeof(small));
}
END_TEST

START_TEST(ib_gid_choice)
{
    /* A RoCE port as rdma_rxe fills it: link-local v1 and v2, then IPv4-mapped v1 and v2. */
    uint8_t gids[5][IB_GID_BYTES] = {
        {0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0x50, 0x54, 0, 0xff, 0xfe, 0x12, 0x34, 0x56},
        {0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0x50, 0x54, 0, 0xff, 0xfe, 0x12, 0x34, 0x56},
        {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 10, 0, 2, 15},
        {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 10, 0, 2, 15},
        {0}};
    int types[5] = {IB_GID_ROCE_V1, IB_GID_ROCE_V2, IB_GID_ROCE_V1, IB_GID_ROCE_V2, IB_GID_UNSET};
    ck_assert_int_eq(ibGidChoose(gids, types, 5, 1), 3);
    /* No IPv4 address on the interface: the first v2 entry. */
    ck_assert_int_eq(ibGidChoose(gids, types, 2, 1), 1);
    /* Only v1 entries, or an InfiniBand port: 0. */
    int v1[2] = {IB_GID_ROCE_V1, IB_GID_ROCE_V1};
    ck_assert_int_eq(ibGidChoose(gids, v1, 2, 1), 0);
    ck_assert_int_eq(ibGidChoose(gids, types, 5, 0), 0);
    /* An empty v2 entry is never chosen. */
    int emptyV2[5] = {IB_GID_ROCE_V1, IB_GID_ROCE_V1, IB_GID_ROCE_V1, IB_GID_ROCE_V1,
                      IB_GID_ROCE_V2};
    ck_assert_int_eq(ibGidChoose(gids, emptyV2, 5, 1), 0);
}
END_TEST

START_TEST(ib_hca_spec)
{
    ck_assert_int_eq(ibHcaMatches(NULL, "mlx5_0", 1), 1);
    ck_assert_int_eq(ibHcaMatches("", "mlx5_0", 1), 1);
    ck_assert_int_eq(ibHcaMatches("mlx5", "mlx5_3", 1), 1);
    ck_assert_int_eq(ibHcaMatches("mlx4", "mlx5_3", 1), 0);
    ck_assert_int_eq(ibHcaMatches("mlx5_0:1", "mlx5_0", 1), 1);
    ck_assert_int_eq(ibHcaMatches("mlx5_0:1", "mlx5_0", 2), 0);
    ck_assert_int_eq(ibHcaMatches("mlx5_0:2,mlx5_1", "mlx5_1", 2), 1);
    ck_assert_int_eq(ibHcaMatches("=mlx5_1", "mlx5_10", 1), 0);
    ck_assert_int_eq(ibHcaMatches("=mlx5_1", "mlx5_1", 1), 1);
    ck_assert_int_eq(ibHcaMatches("mlx5_1", "mlx5_10", 1), 1); /* a prefix */
    ck_assert_int_eq(ibHcaMatches("^mlx5_0", "mlx5_0", 1), 0);
    ck_assert_int_eq(ibHcaMatches("^mlx5_0", "mlx5_1", 1), 1);
    ck_assert_int_eq(ibHcaMatches("^=mlx5_0:1", "mlx5_0", 2), 1);
    ck_assert_int_eq(ibHcaMatches("^=mlx5_0:1", "mlx5_0", 1), 0);
}
END_TEST

/* ---- the registration cache, over a fake device ---- */

struct fakeDevice {
    int registered, deregistered, failNext;
    uintptr_t lastStart;
    size_t lastLen;
};

static loomResult_t fakeReg(void *ctx, void *addr, size_t len, void **handle, uint32_t *lkey,
                            uint32_t *rkey)
{
    struct fakeDevice *d = ctx;
    if (d->failNext) {
        d->failNext = 0;
        return loomSystemError;
    }
    d->registered++;
    d->lastStart = (uintptr_t)addr;
    d->lastLen = len;
    *handle = (void *)(uintptr_t)d->registered;
    *lkey = 100 + (uint32_t)d->registered;
    *rkey = 200 + (uint32_t)d->registered;
    return loomSuccess;
}

static void fakeDereg(void *ctx, void *handle)
{
    struct fakeDevice *d = ctx;
    ck_assert_ptr_nonnull(handle);
    d->deregistered++;
}

#define PAGE 4096
#define BASE ((char *)0x100000)

START_TEST(regcache_widens_to_pages_and_hits)
{
    struct fakeDevice dev = {0};
    struct ibRegCache c;
    struct ibReg *a, *b, *d;
    ck_assert_int_eq(ibRegCacheInit(&c, 4, PAGE, fakeReg, fakeDereg, &dev), loomSuccess);
    ck_assert_int_eq(ibRegCacheGet(&c, BASE + 100, 200, &a), loomSuccess);
    ck_assert_uint_eq(dev.lastStart, (uintptr_t)BASE);
    ck_assert_uint_eq(dev.lastLen, PAGE);
    /* Another buffer in the same page: the same registration. */
    ck_assert_int_eq(ibRegCacheGet(&c, BASE + 1000, 3000, &b), loomSuccess);
    ck_assert_ptr_eq(a, b);
    ck_assert_int_eq(dev.registered, 1);
    ck_assert_uint_eq(c.hits, 1);
    /* Crossing into the next page needs a new one covering both pages. */
    ck_assert_int_eq(ibRegCacheGet(&c, BASE + 4000, 200, &d), loomSuccess);
    ck_assert_ptr_ne(d, a);
    ck_assert_uint_eq(dev.lastLen, 2 * PAGE);
    ck_assert_uint_eq(d->lkey, 102);
    ck_assert_uint_eq(d->rkey, 202);
    ibRegCacheDestroy(&c);
    ck_assert_int_eq(dev.deregistered, 2);
}
END_TEST

START_TEST(regcache_evicts_least_recent_unused)
{
    struct fakeDevice dev = {0};
    struct ibRegCache c;
    struct ibReg *r[3], *x;
    ck_assert_int_eq(ibRegCacheInit(&c, 3, PAGE, fakeReg, fakeDereg, &dev), loomSuccess);
    for (int i = 0; i < 3; i++)
        ck_assert_int_eq(ibRegCacheGet(&c, BASE + i * 2 * PAGE, 8, &r[i]), loomSuccess);
    ibRegCacheRelease(&c, r[0]);
    ibRegCacheRelease(&c, r[2]);
    /* r[0] is the least recently used free one: it goes; r[1] is held and stays. */
    ck_assert_int_eq(ibRegCacheGet(&c, BASE + 10 * PAGE, 8, &x), loomSuccess);
    ck_assert_int_eq(dev.deregistered, 1);
    ck_assert_ptr_eq(x, r[0]); /* reuses the slot */
    ck_assert_uint_eq(x->start, (uintptr_t)(BASE + 10 * PAGE));
    ck_assert_uint_eq(r[1]->start, (uintptr_t)(BASE + 2 * PAGE));
    /* The old range of r[0] is gone from the cache: asking again registers anew. */
    ibRegCacheRelease(&c, x);
    ck_assert_int_eq(ibRegCacheGet(&c, BASE, 8, &x), loomSuccess);
    ck_assert_int_eq(dev.registered, 5);
    ibRegCacheDestroy(&c);
    ck_assert_int_eq(dev.deregistered, 5);
}
END_TEST

START_TEST(regcache_full_of_held_fails)
{
    struct fakeDevice dev = {0};
    struct ibRegCache c;
    struct ibReg *r[2], *x;
    ck_assert_int_eq(ibRegCacheInit(&c, 2, PAGE, fakeReg, fakeDereg, &dev), loomSuccess);
    ck_assert_int_eq(ibRegCacheGet(&c, BASE, 8, &r[0]), loomSuccess);
    ck_assert_int_eq(ibRegCacheGet(&c, BASE + 4 * PAGE, 8, &r[1]), loomSuccess);
    ck_assert_int_eq(ibRegCacheGet(&c, BASE + 8 * PAGE, 8, &x), loomInternalError);
    ck_assert_int_eq(dev.deregistered, 0);
    ck_assert_uint_eq(r[0]->start, (uintptr_t)BASE);
    ibRegCacheDestroy(&c);
}
END_TEST

START_TEST(regcache_failed_registration_keeps_held_entries)
{
    struct fakeDevice dev = {0};
    struct ibRegCache c;
    struct ibReg *held, *freed, *x;
    ck_assert_int_eq(ibRegCacheInit(&c, 2, PAGE, fakeReg, fakeDereg, &dev), loomSuccess);
    ck_assert_int_eq(ibRegCacheGet(&c, BASE, 8, &freed), loomSuccess);
    ck_assert_int_eq(ibRegCacheGet(&c, BASE + 4 * PAGE, 8, &held), loomSuccess);
    ibRegCacheRelease(&c, freed);
    dev.failNext = 1;
    ck_assert_int_eq(ibRegCacheGet(&c, BASE + 8 * PAGE, 8, &x), loomSystemError);
    /* The held registration neither moved nor changed. */
    ck_assert_uint_eq(held->start, (uintptr_t)(BASE + 4 * PAGE));
    ck_assert_int_eq(held->refs, 1);
    ck_assert_int_eq(ibRegCacheGet(&c, BASE + 4 * PAGE + 16, 8, &x), loomSuccess);
    ck_assert_ptr_eq(x, held);
    /* And the freed slot is usable again. */
    ck_assert_int_eq(ibRegCacheGet(&c, BASE + 8 * PAGE, 8, &x), loomSuccess);
    ibRegCacheDestroy(&c);
    ck_assert_int_eq(dev.deregistered, dev.registered);
}
END_TEST

static void addTest(Suite *s, const char *name, const TTest *test)
{
    TCase *tc = tcase_create(name);
    tcase_add_test(tc, test);
    suite_add_tcase(s, tc);
}

static Suite *netSuite(void)
{
    Suite *s = suite_create("net");
    addTest(s, "sendable_is_bounded_by_tail_and_credit", sendable_is_bounded_by_tail_and_credit);
    addTest(s, "receivable_follows_freed_slots", receivable_follows_freed_slots);
    addTest(s, "counter_expand_crosses_32_bits", counter_expand_crosses_32_bits);
    addTest(s, "credit_walk_never_overruns", credit_walk_never_overruns);
    addTest(s, "split_small_is_one_part", split_small_is_one_part);
    addTest(s, "split_parts_cover_exactly", split_parts_cover_exactly);
    addTest(s, "header_round_trip_is_little_endian", header_round_trip_is_little_endian);
    addTest(s, "notice_round_trip_in_pieces", notice_round_trip_in_pieces);
    addTest(s, "notice_long_text_is_cut", notice_long_text_is_cut);
    addTest(s, "notice_rejects_what_is_not_one", notice_rejects_what_is_not_one);
    addTest(s, "ib_record_round_trip", ib_record_round_trip);
    addTest(s, "ib_record_rejects_malformed", ib_record_rejects_malformed);
    addTest(s, "ib_record_unfilled", ib_record_unfilled);
    addTest(s, "ib_gid_format", ib_gid_format);
    addTest(s, "ib_gid_choice", ib_gid_choice);
    addTest(s, "ib_hca_spec", ib_hca_spec);
    addTest(s, "regcache_widens_to_pages_and_hits", regcache_widens_to_pages_and_hits);
    addTest(s, "regcache_evicts_least_recent_unused", regcache_evicts_least_recent_unused);
    addTest(s, "regcache_full_of_held_fails", regcache_full_of_held_fails);
    addTest(s, "regcache_failed_registration_keeps_held_entries",
            regcache_failed_registration_keeps_held_entries);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(netSuite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
