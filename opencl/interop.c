#include "kiln_opencl.h"
#include "opencl/cl_internal.h"

kiln_status kiln_context_opencl_device(const kiln_context *ctx, int32_t i,
                                       cl_context *context, cl_device_id *device,
                                       cl_command_queue *queue)
{
    if (!ctx)
        return KILN_ERROR_INVALID_ARGUMENT;
    if (i < 0 || i >= ctx->n_devices)
        return kiln_error((kiln_context *)ctx, KILN_ERROR_INVALID_ARGUMENT,
                          "kiln_context_opencl_device: device %d does not exist (the context "
                          "has %d)", (int)i, (int)ctx->n_devices);
    const kiln_device *dev = ctx->devices[i];
    if (context)
        *context = dev->cl;
    if (device)
        *device = dev->id;
    if (queue)
        *queue = dev->queue;
    return KILN_OK;
}
