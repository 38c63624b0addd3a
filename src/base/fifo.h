/*
 * fifo.h — the format of a connector FIFO's shared words, for host code
 * (core.h, exec.c, the transports) and device code (src/device/interp.h)
 * alike: nothing here needs more than C99 and <stdint.h>.
 *
 * Each FIFO has LOOM_STEPS slots; message k lives in slot k % LOOM_STEPS.
 * Besides its counters (core.h, struct loomFifo) it carries, per slot, the
 * size of the message in bytes with flags in the top bits, and, on shared
 * memory, an LL area: LOOM_STEPS slots of LOOM_LL_LINES 8-byte lines.
 *
 * The LL (low-latency) protocol writes a message as lines of 4 bytes of
 * data and a 4-byte flag, each line in one 8-byte store:
 *
 *   line i = data[4i .. 4i+4) | (uint64_t)flag << 32     flag = (k % mod) + 1
 *
 * so a receiver that sees the flag of message k in a line has that line's
 * data, with no counter to read first. A slot's lines are overwritten only
 * by later messages of the same slot, whose flags differ from k's until the
 * flag wraps (mod, a multiple of LOOM_STEPS, is LOOM_LL_MOD outside tests):
 * so the receiver of the last message of each wrap of a slot clears the
 * slot's lines (loomLLWraps), whatever protocol that message used, and a
 * line that survives from before the wrap can never carry a valid flag.
 */
#ifndef LOOM_FIFO_H_
#define LOOM_FIFO_H_

#include <stdint.h>

#include "schedule.h" /* LOOM_STEPS */

/*
 * Top bits of a slot's size word: the message sits in the connector's device
 * slots (p2p) rather than its host slots; the slot holds the address of the
 * sender's elements (an OFFER step of a single-copy schedule) rather than the
 * elements; the message went as LL lines; the slot holds the address of the
 * message's bytes in this process, for the network backend to send from
 * there (a network send FIFO only: the flag never travels, see
 * loomConnector.unref in core.h).
 */
#define LOOM_FIFO_DEVICE_DATA (1ULL << 63)
#define LOOM_FIFO_OFFER (1ULL << 62)
#define LOOM_FIFO_LL (1ULL << 61)
#define LOOM_FIFO_REF (1ULL << 60)
#define LOOM_FIFO_FLAGS (LOOM_FIFO_DEVICE_DATA | LOOM_FIFO_OFFER | LOOM_FIFO_LL | LOOM_FIFO_REF)

/* Lines of one LL slot, and the data bytes they carry. */
#define LOOM_LL_LINES 256
#define LOOM_LL_BYTES (4 * LOOM_LL_LINES)
/* The modulus of LL flags. */
#define LOOM_LL_MOD (1ULL << 31)

/* The LL flag of message k. */
#define LOOM_LL_FLAG(k, mod) ((uint32_t)((k) % (mod)) + 1)
/* 1 when message k is its slot's last before the flags wrap: its receiver clears the slot's lines.
 */
#define LOOM_LL_WRAPS(k, mod) ((k) % (mod) + LOOM_STEPS >= (mod))

#endif /* LOOM_FIFO_H_ */
