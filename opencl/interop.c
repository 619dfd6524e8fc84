#include "opencl/cl_internal.h"
#include "opencl/interop.h"

void kiln_device_opencl_handles(const kiln_device *dev, cl_context *context,
                                cl_device_id *device, cl_command_queue *queue)
{
    if (context)
        *context = dev->cl;
    if (device)
        *device = dev->id;
    if (queue)
        *queue = dev->queue;
}
