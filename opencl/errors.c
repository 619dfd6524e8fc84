#include "opencl/cl_internal.h"

#include <CL/cl_ext.h>
#include <clblast_c.h>
#include <stdio.h>
#include <string.h>

/* X(code, name): OpenCL 1.2 error codes. */
#define KILN_CL_ERRORS(X)                                                          \
    X(0, "CL_SUCCESS") X(-1, "CL_DEVICE_NOT_FOUND") X(-2, "CL_DEVICE_NOT_AVAILABLE") \
    X(-3, "CL_COMPILER_NOT_AVAILABLE") X(-4, "CL_MEM_OBJECT_ALLOCATION_FAILURE")   \
    X(-5, "CL_OUT_OF_RESOURCES") X(-6, "CL_OUT_OF_HOST_MEMORY")                    \
    X(-7, "CL_PROFILING_INFO_NOT_AVAILABLE") X(-8, "CL_MEM_COPY_OVERLAP")          \
    X(-9, "CL_IMAGE_FORMAT_MISMATCH") X(-10, "CL_IMAGE_FORMAT_NOT_SUPPORTED")      \
    X(-11, "CL_BUILD_PROGRAM_FAILURE") X(-12, "CL_MAP_FAILURE")                    \
    X(-13, "CL_MISALIGNED_SUB_BUFFER_OFFSET")                                      \
    X(-14, "CL_EXEC_STATUS_ERROR_FOR_EVENTS_IN_WAIT_LIST")                         \
    X(-15, "CL_COMPILE_PROGRAM_FAILURE") X(-16, "CL_LINKER_NOT_AVAILABLE")         \
    X(-17, "CL_LINK_PROGRAM_FAILURE") X(-18, "CL_DEVICE_PARTITION_FAILED")         \
    X(-19, "CL_KERNEL_ARG_INFO_NOT_AVAILABLE") X(-30, "CL_INVALID_VALUE")          \
    X(-31, "CL_INVALID_DEVICE_TYPE") X(-32, "CL_INVALID_PLATFORM")                 \
    X(-33, "CL_INVALID_DEVICE") X(-34, "CL_INVALID_CONTEXT")                       \
    X(-35, "CL_INVALID_QUEUE_PROPERTIES") X(-36, "CL_INVALID_COMMAND_QUEUE")       \
    X(-37, "CL_INVALID_HOST_PTR") X(-38, "CL_INVALID_MEM_OBJECT")                  \
    X(-39, "CL_INVALID_IMAGE_FORMAT_DESCRIPTOR") X(-40, "CL_INVALID_IMAGE_SIZE")   \
    X(-41, "CL_INVALID_SAMPLER") X(-42, "CL_INVALID_BINARY")                       \
    X(-43, "CL_INVALID_BUILD_OPTIONS") X(-44, "CL_INVALID_PROGRAM")                \
    X(-45, "CL_INVALID_PROGRAM_EXECUTABLE") X(-46, "CL_INVALID_KERNEL_NAME")       \
    X(-47, "CL_INVALID_KERNEL_DEFINITION") X(-48, "CL_INVALID_KERNEL")             \
    X(-49, "CL_INVALID_ARG_INDEX") X(-50, "CL_INVALID_ARG_VALUE")                  \
    X(-51, "CL_INVALID_ARG_SIZE") X(-52, "CL_INVALID_KERNEL_ARGS")                 \
    X(-53, "CL_INVALID_WORK_DIMENSION") X(-54, "CL_INVALID_WORK_GROUP_SIZE")       \
    X(-55, "CL_INVALID_WORK_ITEM_SIZE") X(-56, "CL_INVALID_GLOBAL_OFFSET")         \
    X(-57, "CL_INVALID_EVENT_WAIT_LIST") X(-58, "CL_INVALID_EVENT")                \
    X(-59, "CL_INVALID_OPERATION") X(-60, "CL_INVALID_GL_OBJECT")                  \
    X(-61, "CL_INVALID_BUFFER_SIZE") X(-62, "CL_INVALID_MIP_LEVEL")                \
    X(-63, "CL_INVALID_GLOBAL_WORK_SIZE") X(-64, "CL_INVALID_PROPERTY")            \
    X(-65, "CL_INVALID_IMAGE_DESCRIPTOR") X(-66, "CL_INVALID_COMPILER_OPTIONS")    \
    X(-67, "CL_INVALID_LINKER_OPTIONS") X(-68, "CL_INVALID_DEVICE_PARTITION_COUNT") \
    X(-1001, "CL_PLATFORM_NOT_FOUND_KHR")

/* X(code, name): CLBlast's own codes (it also reuses OpenCL's). */
#define KILN_CLBLAST_ERRORS(X)                                                     \
    X(CLBlastNotImplemented, "CLBlastNotImplemented")                              \
    X(CLBlastInvalidMatrixA, "CLBlastInvalidMatrixA")                              \
    X(CLBlastInvalidMatrixB, "CLBlastInvalidMatrixB")                              \
    X(CLBlastInvalidMatrixC, "CLBlastInvalidMatrixC")                              \
    X(CLBlastInvalidVectorX, "CLBlastInvalidVectorX")                              \
    X(CLBlastInvalidVectorY, "CLBlastInvalidVectorY")                              \
    X(CLBlastInvalidDimension, "CLBlastInvalidDimension")                          \
    X(CLBlastInvalidLeadDimA, "CLBlastInvalidLeadDimA")                            \
    X(CLBlastInvalidLeadDimB, "CLBlastInvalidLeadDimB")                            \
    X(CLBlastInvalidLeadDimC, "CLBlastInvalidLeadDimC")                            \
    X(CLBlastInvalidIncrementX, "CLBlastInvalidIncrementX")                        \
    X(CLBlastInvalidIncrementY, "CLBlastInvalidIncrementY")                        \
    X(CLBlastInsufficientMemoryA, "CLBlastInsufficientMemoryA")                    \
    X(CLBlastInsufficientMemoryB, "CLBlastInsufficientMemoryB")                    \
    X(CLBlastInsufficientMemoryC, "CLBlastInsufficientMemoryC")                    \
    X(CLBlastInsufficientMemoryX, "CLBlastInsufficientMemoryX")                    \
    X(CLBlastInsufficientMemoryY, "CLBlastInsufficientMemoryY")                    \
    X(CLBlastInsufficientMemoryTemp, "CLBlastInsufficientMemoryTemp")              \
    X(CLBlastInvalidBatchCount, "CLBlastInvalidBatchCount")                        \
    X(CLBlastInvalidOverrideKernel, "CLBlastInvalidOverrideKernel")                \
    X(CLBlastMissingOverrideParameter, "CLBlastMissingOverrideParameter")          \
    X(CLBlastInvalidLocalMemUsage, "CLBlastInvalidLocalMemUsage")                  \
    X(CLBlastNoHalfPrecision, "CLBlastNoHalfPrecision")                            \
    X(CLBlastNoDoublePrecision, "CLBlastNoDoublePrecision")                        \
    X(CLBlastInvalidVectorScalar, "CLBlastInvalidVectorScalar")                    \
    X(CLBlastInsufficientMemoryScalar, "CLBlastInsufficientMemoryScalar")          \
    X(CLBlastDatabaseError, "CLBlastDatabaseError")                                \
    X(CLBlastUnknownError, "CLBlastUnknownError")                                  \
    X(CLBlastUnexpectedError, "CLBlastUnexpectedError")

const char *kiln_cl_error_name(int code)
{
    switch (code) {
#define KILN_ERROR_CASE_(c, n) \
    case c:                    \
        return n;
        KILN_CL_ERRORS(KILN_ERROR_CASE_)
        KILN_CLBLAST_ERRORS(KILN_ERROR_CASE_)
#undef KILN_ERROR_CASE_
    default:
        return "unknown OpenCL error";
    }
}

kiln_status kiln_cl_fail(const kiln_device *dev, const char *call, int code)
{
    kiln_status st = KILN_ERROR_DEVICE;
    if (code == CL_MEM_OBJECT_ALLOCATION_FAILURE || code == CL_OUT_OF_HOST_MEMORY ||
        code == CL_OUT_OF_RESOURCES || code == CL_INVALID_BUFFER_SIZE)
        st = KILN_ERROR_OUT_OF_MEMORY;
    /* `call` is the whole expression; its function name is enough. */
    int name_length = (int)strcspn(call, "(");
    return kiln_fail(dev->host, st, "%.*s failed on %s: %s (%d)", name_length, call,
                     dev->label, kiln_cl_error_name(code), code);
}
