/* Private: gradient clipping (kiln_optimizer_options' clipnorm, clipvalue
 * and global_clipnorm) over the flat gradient buffer, on a device or on the
 * host, before the optimizer's update. Only trainable parameters take part:
 * frozen layers' weights and non-trainable state lie past the trainable
 * prefix the strategies hand in. */
#ifndef KILN_RUNTIME_MODEL_CLIP_H
#define KILN_RUNTIME_MODEL_CLIP_H

#include "runtime/context/context.h"
#include "opencl/device.h"

typedef enum kiln_clip_mode {
    KILN_CLIP_OFF = 0,
    KILN_CLIP_NORM = 1,      /* per tensor (clip.cl's numbers) */
    KILN_CLIP_VALUE = 2,
    KILN_CLIP_GLOBAL = 3
} kiln_clip_mode;

/* Which mode resolved options ask for, and its limit. */
kiln_clip_mode kiln_clip_mode_of(const kiln_optimizer_options *o, float *limit);

/* Checks the three settings: each finite and >= 0, at most one nonzero
 * (Keras 3's rule). */
kiln_status kiln_clip_check(kiln_context *ctx, const kiln_optimizer_options *o);

/* Clipping on one device over the model's trainable floats [begin, end)
 * (a pipeline stage's, or the whole prefix), which the device's gradient
 * buffer holds from offset 0. NULL *out (and KILN_OK) when clipping is
 * off or the range holds no trainable parameter. */
typedef struct kiln_clip kiln_clip;
kiln_status kiln_clip_create(const kiln_model *m, kiln_device *dev, size_t begin, size_t end,
                             kiln_clip **out);
void kiln_clip_destroy(kiln_clip *c);
/* Device bytes it holds. */
size_t kiln_clip_bytes(const kiln_clip *c);

/* Enqueues the squared norms of grads (each tensor's and the range's). */
kiln_status kiln_clip_measure(kiln_clip *c, const kiln_buffer *grads);
/* Blocking: the range's squared norm, as measured. */
kiln_status kiln_clip_read_squares(kiln_clip *c, double *squares);
/* Makes `squares` (every stage's, summed) the global norm's. */
kiln_status kiln_clip_set_squares(kiln_clip *c, double squares);
/* Enqueues the clip of grads in place (measured before, for the norms). A
 * non-finite norm makes the gradient NaN, and clipvalue keeps a NaN or
 * infinity non-finite, so the optimizer's guard skips the step. */
kiln_status kiln_clip_scale(kiln_clip *c, kiln_buffer *grads);
/* Measure and scale, for a range that is the whole model. */
kiln_status kiln_clip_gradients(kiln_clip *c, kiln_buffer *grads);

/* The same clip of a whole model's trainable gradient g on the host (the
 * squares in double, in tensor order); a no-op when clipping is off. g
 * must be finite (the callers skip the step before). */
void kiln_clip_host(const kiln_model *m, float *g);

#endif
