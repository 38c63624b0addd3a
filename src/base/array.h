/*
 * array.h — growing an array by doubling, for the planner's and the
 * executors' per-thread arrays alike.
 */
#ifndef LOOM_ARRAY_H_
#define LOOM_ARRAY_H_

#include <stddef.h>

#include "loom.h"

/* Grows a per-thread array *array of *cap elements of elemSize to hold n; loomSystemError if out of
 * memory. */
loomResult_t arrayReserve(void **array, int *cap, int n, size_t elemSize);

#endif /* LOOM_ARRAY_H_ */
