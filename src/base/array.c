/* array.c — growing an array by doubling (array.h). */
#include <stdlib.h>

#include "array.h"
#include "debug.h"

loomResult_t arrayReserve(void **array, int *cap, int n, size_t elemSize)
{
    if (n <= *cap)
        return loomSuccess;
    int c = *cap ? *cap : 16;
    while (c < n)
        c *= 2;
    void *p = realloc(*array, (size_t)c * elemSize);
    if (p == NULL)
        return loomSetError(loomSystemError, "out of memory planning %d lanes or operations", n);
    *array = p;
    *cap = c;
    return loomSuccess;
}
