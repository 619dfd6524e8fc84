/* The public interop call (kiln_opencl.h): the one runtime file that names
 * OpenCL types, and only those the public interop header declares. */
#include "opencl/interop.h"
#include "runtime/context/context.h"

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
    kiln_device_opencl_handles(ctx->devices[i], context, device, queue);
    return KILN_OK;
}
