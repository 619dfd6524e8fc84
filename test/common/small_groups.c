/* Linked into the *_small_groups tests with -Wl,--wrap=clGetDeviceInfo:
 * every device answers that its work-groups hold at most 4 items, as a
 * small embedded GPU would, so every kernel runs on groups narrower than
 * its tiles. */
#include "kiln_opencl.h"

#define SMALL_GROUP 4

cl_int __real_clGetDeviceInfo(cl_device_id device, cl_device_info param, size_t size,
                              void *value, size_t *size_ret);
cl_int __wrap_clGetDeviceInfo(cl_device_id device, cl_device_info param, size_t size,
                              void *value, size_t *size_ret);

cl_int __wrap_clGetDeviceInfo(cl_device_id device, cl_device_info param, size_t size,
                              void *value, size_t *size_ret)
{
    const cl_int err = __real_clGetDeviceInfo(device, param, size, value, size_ret);
    if (err == CL_SUCCESS && param == CL_DEVICE_MAX_WORK_GROUP_SIZE && value &&
        size >= sizeof(size_t) && *(size_t *)value > SMALL_GROUP)
        *(size_t *)value = SMALL_GROUP;
    return err;
}
