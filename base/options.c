#include "base/options.h"

#include <string.h>

void kiln_options_copy(void *dst, size_t size, const void *src)
{
    memset(dst, 0, size);
    if (!src)
        return;
    size_t n = *(const size_t *)src;
    if (n == 0 || n > size)
        n = size;
    memcpy(dst, src, n);
}

void kiln_struct_export(void *dst, const void *src, size_t size)
{
    size_t n = *(const size_t *)dst;
    if (n == 0 || n > size)
        n = size;
    memcpy(dst, src, n);
    *(size_t *)dst = n;
}
