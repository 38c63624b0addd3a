/*
 * fuzz_bootstrap.c — fuzz target for the bootstrap message decoders.
 *
 * Everything a stranger (or a damaged unique id) can put in front of Loom
 * before the job secret is checked goes through these decoders: the hello
 * (64 bytes on every bootstrap port), the unique id (128 bytes from an
 * environment variable or a file), the root's address table and the ring's
 * frame header. The first input byte picks the decoder; the rest is the
 * message, in a heap block of exactly its length, so a read past the end is
 * an ASan error. On top of "no crash, no overread", every message a decoder
 * accepts must encode back to the very same bytes (the formats have one
 * canonical form: reserved bytes must be zero), and the decoded fields must
 * be in range.
 *
 *   input: selector(1) [table: nranks(1)] message...
 *
 * Built two ways: with clang's libFuzzer by tests/fuzz/run-fuzz.sh (not part
 * of make check), and with a plain main (replay.c) that feeds it every file
 * of the corpus in tests/fuzz/corpus/bootstrap, which make check runs.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "bootstrap.h"

enum { SEL_HELLO, SEL_ID, SEL_TABLE, SEL_FRAME, SEL_COUNT };
#define FUZZ_MAX_TABLE_RANKS 64

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
/* Inputs each decoder accepted (so that the replay can tell the round trips did run). */
unsigned long fuzzBootstrapAccepted[SEL_COUNT];

static void require(int ok)
{
    if (!ok)
        abort(); /* the fuzzer reports it with the input */
}

static void fuzzHello(const uint8_t *msg, size_t len)
{
    struct bootstrapHello h;
    uint8_t again[BOOTSTRAP_HELLO_BYTES];
    if (bootstrapDecodeHello(msg, len, &h) != loomSuccess)
        return;
    fuzzBootstrapAccepted[SEL_HELLO]++;
    require(len >= BOOTSTRAP_HELLO_BYTES);
    require(h.nranks >= 1 && h.rank >= 0 && h.rank < h.nranks);
    require(h.addr.family == 4 || h.addr.family == 6);
    require(bootstrapEncodeHello(&h, again, sizeof(again)) == BOOTSTRAP_HELLO_BYTES);
    require(memcmp(again, msg, BOOTSTRAP_HELLO_BYTES) == 0);
}

static void fuzzId(const uint8_t *msg, size_t len)
{
    loomUniqueId in, again;
    struct bootstrapId id;
    memset(&in, 0, sizeof(in));
    memcpy(in.internal, msg, len < sizeof(in.internal) ? len : sizeof(in.internal));
    if (bootstrapDecodeId(&in, &id) != loomSuccess)
        return;
    fuzzBootstrapAccepted[SEL_ID]++;
    require(id.root.port != 0);
    require(bootstrapEncodeId(&id, &again) == LOOM_UNIQUE_ID_BYTES);
    require(memcmp(&again, &in, sizeof(in)) == 0);
}

static void fuzzTable(const uint8_t *msg, size_t len)
{
    if (len < 1)
        return;
    int nranks = msg[0] % FUZZ_MAX_TABLE_RANKS + 1;
    msg++, len--;
    struct bootstrapAddr addrs[FUZZ_MAX_TABLE_RANKS];
    uint8_t again[8 + FUZZ_MAX_TABLE_RANKS * 20];
    if (bootstrapDecodeTable(msg, len, nranks, addrs) != loomSuccess)
        return;
    fuzzBootstrapAccepted[SEL_TABLE]++;
    require(len == bootstrapTableBytes(nranks) && len <= sizeof(again));
    require(bootstrapEncodeTable(addrs, nranks, again, sizeof(again)) == len);
    require(memcmp(again, msg, len) == 0);
}

static void fuzzFrame(const uint8_t *msg, size_t len)
{
    uint32_t seq;
    uint64_t bytes;
    uint8_t again[BOOTSTRAP_FRAME_BYTES];
    if (bootstrapDecodeFrame(msg, len, &seq, &bytes) != loomSuccess)
        return;
    fuzzBootstrapAccepted[SEL_FRAME]++;
    require(bootstrapEncodeFrame(seq, bytes, again, sizeof(again)) == BOOTSTRAP_FRAME_BYTES);
    require(memcmp(again, msg, BOOTSTRAP_FRAME_BYTES) == 0);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    size_t len = size - 1;
    /* An exact copy, so that reading one byte too far is caught (malloc(0) may be NULL). */
    uint8_t *msg = malloc(len ? len : 1);
    if (msg == NULL)
        return 0;
    memcpy(msg, data + 1, len);
    switch (data[0] % SEL_COUNT) {
    case SEL_HELLO:
        fuzzHello(msg, len);
        break;
    case SEL_ID:
        fuzzId(msg, len);
        break;
    case SEL_TABLE:
        fuzzTable(msg, len);
        break;
    default:
        fuzzFrame(msg, len);
        break;
    }
    free(msg);
    return 0;
}
