/* Private: a device's OpenCL handles, for the public interop call
 * (include/kiln_opencl.h, runtime/context/interop.c). */
#ifndef KILN_OPENCL_INTEROP_H
#define KILN_OPENCL_INTEROP_H

#include "kiln_opencl.h"
#include "opencl/device.h"

/* Any of the out-pointers may be NULL. */
void kiln_device_opencl_handles(const kiln_device *dev, cl_context *context,
                                cl_device_id *device, cl_command_queue *queue);

#endif
