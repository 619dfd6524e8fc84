/*
 * kiln_opencl.h: optional interop between kiln and an application's own
 * OpenCL code. Include it after kiln.h; it needs the OpenCL headers.
 */
#ifndef KILN_OPENCL_H
#define KILN_OPENCL_H

#include "kiln.h"

#ifndef CL_TARGET_OPENCL_VERSION
#define CL_TARGET_OPENCL_VERSION 120
#endif
#include <CL/cl.h>

#ifdef __cplusplus
extern "C" {
#endif

/**
 * The OpenCL objects behind device i of a context, so an application can
 * enqueue its own work beside kiln's (on the same in-order queue, work is
 * ordered with kiln's). Any pointer may be NULL. The objects stay owned by
 * kiln: retain them to keep them past kiln_context_destroy().
 * KILN_ERROR_INVALID_ARGUMENT if i is out of range.
 */
KILN_API kiln_status kiln_context_opencl_device(const kiln_context *ctx, int32_t i,
                                                cl_context *context, cl_device_id *device,
                                                cl_command_queue *queue);

#ifdef __cplusplus
}
#endif

#endif /* KILN_OPENCL_H */
