/*
 * compress.h — float32 reductions sent as bfloat16 over network links
 * (LOOM_NET_COMPRESS, loomConfig_t.netCompress); see compress.c. Below the
 * core, beside the executor that runs the steps: the core calls it when a
 * communicator is made, when a call is checked and when it is planned.
 */
#ifndef LOOM_COMPRESS_H_
#define LOOM_COMPRESS_H_

#include <stddef.h>
#include <stdint.h>

#include "exec.h"
#include "op.h"

/* What a communicator does with float32 AllReduce and ReduceScatter on its network links. */
enum {
    COMPRESS_NONE = 0,
    COMPRESS_BF16,    /* bfloat16 on the wire, round to nearest even */
    COMPRESS_BF16_SR, /* bfloat16 on the wire, stochastic rounding */
};

/* COMPRESS_* for a word of LOOM_NET_COMPRESS ("none", "bf16", "bf16-sr"), -1 for another. */
int compressParse(const char *word);
/* The word of mode m. */
const char *compressName(int m);

/*
 * When the communicator is made: sets comm->compress from the config
 * (config.netCompress, checked, else LOOM_NET_COMPRESS) and compressForced.
 */
void compressConfig(struct loomComm *comm);
/*
 * At init, once the ranks' infos are in: sets comm->compressNet, whether any
 * two ranks of comm talk over the network (the same answer on every rank):
 * multiHost (its ranks are on more than one host, topo.c), or a rank
 * without shared memory.
 */
void compressSetup(struct loomComm *comm, int multiHost);

/*
 * loomInvalidArgument with one line naming fn when the communicator's config
 * forces compression and op is an AllReduce or ReduceScatter it cannot apply
 * to (not float32); loomSuccess otherwise. Set by the environment alone, the
 * other calls simply run uncompressed.
 */
loomResult_t compressOpCheck(const struct loomOp *op, const char *fn);

/*
 * The mode lanes of op run with: comm->compress for a float32 AllReduce or
 * ReduceScatter on host buffers of a communicator with a network link, else
 * COMPRESS_NONE. The same on every rank of a call.
 */
int compressOpMode(const struct loomOp *op, int device);

/*
 * One step of a compressing lane (l->compress), in place of the executor's
 * own: like it, but a message to a peer whose bit is set in netOut is sent as
 * bfloat16, a message from one in netIn arrives as bfloat16 and is widened
 * as it is reduced, and the result of a FINAL step that sends is rounded to
 * bfloat16 once, there, so that every rank ends with the same values.
 */
void compressStep(const struct loomLane *l, const struct loomStep *s, const char *const *in,
                  unsigned netIn, char *const *out, unsigned netOut);

/* float32 to bfloat16, n elements: mode COMPRESS_BF16 or COMPRESS_BF16_SR. For the tests too. */
void compressPack(uint16_t *dst, const float *src, size_t n, int mode);
/* bfloat16 to float32 (exact). */
void compressUnpack(float *dst, const uint16_t *src, size_t n);

#endif /* LOOM_COMPRESS_H_ */
