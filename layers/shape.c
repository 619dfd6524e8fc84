#include "layers/layer.h"

#include <stdint.h>
#include <stdio.h>

int64_t kiln_shape_size(const kiln_shape *shape)
{
    int64_t n = 1;
    for (int32_t i = 0; i < shape->rank; i++) {
        if (shape->dims[i] > 0 && n > INT64_MAX / shape->dims[i])
            return -1;
        n *= shape->dims[i];
    }
    return n;
}

const char *kiln_shape_str(const kiln_shape *shape, char *buf, size_t size)
{
    size_t used = 0;
    buf[0] = '\0';
    used += (size_t)snprintf(buf, size, "(");
    for (int32_t i = 0; i < shape->rank && used < size; i++)
        used += (size_t)snprintf(buf + used, size - used, "%s%d", i ? ", " : "",
                                 (int)shape->dims[i]);
    if (used < size)
        snprintf(buf + used, size - used, shape->rank == 1 ? ",)" : ")");
    return buf;
}
