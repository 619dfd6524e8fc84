/* Private: the .cl files embedded at build time (see embed.py). */
#ifndef KILN_OPENCL_KERNEL_SOURCES_H
#define KILN_OPENCL_KERNEL_SOURCES_H

#include <stddef.h>

typedef struct kiln_kernel_source {
    const char *name;   /* file name without .cl */
    const char *text;   /* not NUL-terminated */
    size_t length;
} kiln_kernel_source;

extern const kiln_kernel_source kiln_kernel_sources[];
extern const int kiln_kernel_source_count;

#endif
