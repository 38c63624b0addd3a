/*
 * fatbin.c — the kernels of kernels.cu, embedded in the library.
 *
 * nvcc compiles kernels.cu into src/cuda/kernels.fatbin (see Makefile.am);
 * the assembler copies that file into this object's read-only data, so the
 * library carries its kernels without a file to find at run time, and the
 * CUDA executor hands the image to cuModuleLoadData. The path is relative to
 * the build directory, where make runs the compiler. A build without CUDA
 * has no image, and says so to anyone who passes a device buffer.
 */
#include <stddef.h>

#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include "cudalib.h"

#ifdef HAVE_CUDA
__asm__(".section .rodata\n"
        ".balign 64\n"
        ".hidden cudaFatbinStart\n"
        ".hidden cudaFatbinEnd\n"
        "cudaFatbinStart:\n"
        ".incbin \"src/cuda/kernels.fatbin\"\n"
        "cudaFatbinEnd:\n"
        ".byte 0\n"
        ".previous\n");
extern const char cudaFatbinStart[], cudaFatbinEnd[];

const void *cudaFatbin(size_t *bytes)
{
    *bytes = (size_t)(cudaFatbinEnd - cudaFatbinStart);
    return cudaFatbinStart;
}
#else
const void *cudaFatbin(size_t *bytes)
{
    *bytes = 0;
    return NULL;
}
#endif
