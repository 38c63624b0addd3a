/*
 * reduce.h — copy and element-wise reduction for every datatype x operation.
 *
 * The executor calls these on chunks of at most one FIFO slot. fp16 and bf16
 * are computed in float and rounded to nearest even. loomAvg reduces as a sum;
 * reducePostOp then divides the complete sum by nranks (integer division for
 * integer types).
 */
#ifndef LOOM_REDUCE_H_
#define LOOM_REDUCE_H_

#include <stddef.h>
#include <stdint.h>

#include "loom.h"

/* Bytes of one element of dt (0 for an invalid dt). */
size_t reduceTypeSize(loomDataType_t dt);
/* "float32", "bfloat16", ... and "sum", "avg", ... (NULL for invalid values). */
const char *reduceTypeName(loomDataType_t dt);
const char *reduceOpName(loomRedOp_t op);

/*
 * dst[i] = a[i] (op) b[i] for count elements. dst may equal a or b; otherwise
 * the three do not overlap. No alignment is required of any pointer.
 */
void reduceApply(void *dst, const void *a, const void *b, size_t count, loomDataType_t dt,
                 loomRedOp_t op);
/*
 * Post-processing of a complete reduction in place: for loomAvg divides every
 * element by nranks; a no-op for other operations.
 */
void reducePostOp(void *buf, size_t count, loomDataType_t dt, loomRedOp_t op, int nranks);
/*
 * reduceApply followed by reducePostOp, fused in one pass: dst = post(a op b).
 * The executor calls it for the step that completes a reduction.
 */
void reduceApplyFinal(void *dst, const void *a, const void *b, size_t count, loomDataType_t dt,
                      loomRedOp_t op, int nranks);
/*
 * A fan-in: dst = (((b (+) in[0]) (+) in[1]) ... (+) in[nin - 1]), post-processed
 * (reducePostOp) when `final`, for nin >= 1 inputs, in one pass over
 * memory: the elements are combined a cache-sized tile at a time, so each
 * input is read once and dst written once. Same bits as the chain of
 * reduceApply calls in that order (each in[k] as `a`). dst may equal b.
 */
void reduceApplyMany(void *dst, const void *b, const void *const *in, int nin, size_t count,
                     loomDataType_t dt, loomRedOp_t op, int nranks, int final);
/* memcpy tuned for large chunks; src and dst do not overlap. */
void reduceCopy(void *dst, const void *src, size_t bytes);
/* The same, with non-temporal stores from REDUCE_STREAM_BYTES on (large copies to user buffers). */
void reduceCopyStream(void *dst, const void *src, size_t bytes);

/* Half-precision conversions (round to nearest even), exposed for tests and tools. */
float reduceHalfToFloat(uint16_t h);
uint16_t reduceFloatToHalf(float f);
float reduceBf16ToFloat(uint16_t b);
uint16_t reduceFloatToBf16(float f);

#endif /* LOOM_REDUCE_H_ */
