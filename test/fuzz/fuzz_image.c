/* Fuzz target: the PNG and JPEG decoders (told apart by magic bytes), in
 * memory, at 1 and then 3 channels, so the seeds are plain image files; a
 * decoded image is resized to 5 x 7, as a sample would be. */
#include "runtime/context/context.h"
#include "runtime/formats/image_decode.h"

#include <stdlib.h>

int LLVMFuzzerTestOneInput(const unsigned char *data, size_t size);

int LLVMFuzzerTestOneInput(const unsigned char *data, size_t size)
{
    kiln_context ctx;
    kiln_context_init_host_only(&ctx, NULL, NULL, NULL);
    for (int32_t channels = 1; channels <= 3; channels += 2) {
        kiln_image img;
        if (kiln_image_decode(&ctx, "input", data, size, channels, &img) != KILN_OK)
            break;
        float out[5 * 7 * 3];
        kiln_image_resize_bilinear(img.pixels, img.height, img.width, img.channels, out, 5, 7,
                                   1.0f / 255.0f, 0.0f);
        kiln_image_free(&ctx, &img);
    }
    kiln_context_release_host_only(&ctx);
    return 0;
}
