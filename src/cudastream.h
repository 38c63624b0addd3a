/*
 * cudastream.h — Loom streams ordered on an application's CUDA stream
 * (cudastream.c); stream.c is the one caller.
 */
#ifndef LOOM_CUDASTREAM_H_
#define LOOM_CUDASTREAM_H_

#include <stdint.h>

#include "loom.h"

struct cudaStreamSync;

/* Wraps the application's cudaStream_t: loads the driver, checks the stream. */
loomResult_t cudaStreamAttach(void *cudaStream, struct cudaStreamSync **out);
/*
 * At enqueue, on the application's thread: marks the CUDA stream's current
 * position (for the progress thread to wait on) and makes the stream wait
 * for unit *seq to finish. *event belongs to the unit and is created the
 * first time.
 */
loomResult_t cudaStreamFence(struct cudaStreamSync *cs, void **event, uint32_t *seq);
/* On the progress thread, before a unit runs: waits until the work before it is done. */
loomResult_t cudaStreamUnitBegin(struct cudaStreamSync *cs, void *event);
/* After the unit, whatever its result: lets the CUDA stream go on past it. */
void cudaStreamUnitEnd(struct cudaStreamSync *cs, uint32_t seq);
/*
 * *capturing: 1 when the application is capturing the CUDA stream into a
 * graph, else 0. Only calls that run as one launch (planLaunched, plan.h) may
 * be captured; others are refused by cudaStreamCaptureRefuse.
 */
loomResult_t cudaStreamCapturing(struct cudaStreamSync *cs, int *capturing);
/* loomInvalidUsage naming fn and why: a call that cannot be captured, on a stream being captured.
 */
loomResult_t cudaStreamCaptureRefuse(const char *fn, const char *why);
/*
 * Makes the calling thread's capture mode relaxed (cuThreadExchangeStreamCaptureMode) and
 * returns the mode it had, for cudaStreamCaptureRestore: Loom allocates and waits for its own
 * stream while it captures a call, which a capture in the default global mode forbids.
 */
int cudaStreamCaptureRelax(struct cudaStreamSync *cs);
void cudaStreamCaptureRestore(struct cudaStreamSync *cs, int mode);
/* Waits for the CUDA stream itself (after every unit ran). */
loomResult_t cudaStreamSync(struct cudaStreamSync *cs);
/* loomSuccess if the CUDA stream is idle, loomInProgress if not. */
loomResult_t cudaStreamIdle(struct cudaStreamSync *cs);
/* Frees a unit's event. */
void cudaStreamEventFree(struct cudaStreamSync *cs, void *event);
/* Waits for the CUDA stream, then frees what Attach made. */
void cudaStreamDetach(struct cudaStreamSync *cs);
/* The application's stream that cs wraps. */
void *cudaStreamHandle(const struct cudaStreamSync *cs);

#endif /* LOOM_CUDASTREAM_H_ */
