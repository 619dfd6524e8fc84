/* With no OpenCL platform installed (meson points OCL_ICD_VENDORS at an
 * empty folder), context creation fails with a message saying what to do. */
#include "harness.h"

int main(void)
{
    char err[512] = "";
    kiln_context_options o = {.struct_size = sizeof o};
    o.error_buffer = err;
    o.error_buffer_size = sizeof err;
    kiln_context *ctx = NULL;
    kiln_status st = kiln_context_create(&o, &ctx);
    CHECK(st == KILN_ERROR_NO_DEVICE);
    CHECK(ctx == NULL);
    CHECK(strstr(err, "no OpenCL platform found") != NULL);
    printf("message: %s\n", err);
    return test_finish("test_no_platform");
}
