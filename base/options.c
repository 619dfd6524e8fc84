#include "base/options.h"

#include <stdio.h>
#include <string.h>

kiln_status kiln_options_take(void *dst, size_t size, const void *src, size_t least,
                              const char *name, kiln_diag *why)
{
    memset(dst, 0, size);
    if (!src)
        return KILN_OK;
    size_t n = *(const size_t *)src;
    if (least < sizeof(size_t))
        least = sizeof(size_t);
    if (n != 0 && n < least) {
        why->status = KILN_ERROR_INVALID_ARGUMENT;
        snprintf(why->message, sizeof why->message,
                 "%s.struct_size is %zu; it must be 0 or at least %zu", name, n, least);
        return why->status;
    }
    /* Fields an older caller does not know stay zero; a newer one's extra
     * fields are not read. */
    if (n == 0 || n > size)
        n = size;
    memcpy(dst, src, n);
    return KILN_OK;
}

void kiln_struct_export(void *dst, const void *src, size_t size)
{
    size_t n = *(const size_t *)dst;
    if (n == 0 || n > size)
        n = size;
    memcpy(dst, src, n);
    *(size_t *)dst = n;
}
