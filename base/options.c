#include "base/options.h"

#include <stdio.h>
#include <string.h>

/* `n`: the caller's struct_size (0: ours). */
static kiln_status take_sized(void *dst, size_t size, const void *src, size_t n, size_t least,
                              const char *name, kiln_diag *why)
{
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

kiln_status kiln_options_take(void *dst, size_t size, const void *src, size_t least,
                              const char *name, kiln_diag *why)
{
    memset(dst, 0, size);
    if (!src)
        return KILN_OK;
    return take_sized(dst, size, src, *(const size_t *)src, least, name, why);
}

kiln_status kiln_options_take_at(void *dst, size_t size, const void *array, size_t index,
                                 size_t least, const char *name, kiln_diag *why)
{
    char label[96];
    memset(dst, 0, size);
    const size_t first = *(const size_t *)array;
    snprintf(label, sizeof label, "%s[0]", name);
    kiln_status st = take_sized(dst, size, array, first, least, label, why);
    if (st != KILN_OK || index == 0)
        return st;
    memset(dst, 0, size);   /* element 0 was only checked */
    const size_t stride = first ? first : size;
    const char *src = (const char *)array + index * stride;
    const size_t n = *(const size_t *)src;
    if (n != 0 && n != stride) {
        why->status = KILN_ERROR_INVALID_ARGUMENT;
        snprintf(why->message, sizeof why->message,
                 "%s[%zu].struct_size is %zu but %s's is %zu; every element of an array has "
                 "the same (it is also their distance)", name, index, n, label, stride);
        return why->status;
    }
    /* Element 0 said how far apart they are: an element left 0 is as long. */
    snprintf(label, sizeof label, "%s[%zu]", name, index);
    return take_sized(dst, size, src, stride, least, label, why);
}

void kiln_struct_export(void *dst, const void *src, size_t size)
{
    size_t n = *(const size_t *)dst;
    if (n == 0 || n > size)
        n = size;
    memcpy(dst, src, n);
    *(size_t *)dst = n;
}
