/* Numerical and device faults during fit, under every strategy there is:
 * a poisoned sample (NaN) stops training naming the step, without touching
 * the parameters, or is skipped and counted; a kernel launch that fails
 * (clEnqueueNDRangeKernel wrapped at link time, below) returns an error
 * naming the device and kernel.
 * Each time the last checkpoint still loads, teardown is clean and no host
 * allocation is left. Run with POCL_DEVICES="basic basic". */
#include "counting_alloc.h"
#include "harness.h"
#include "kiln_opencl.h"
#include "runtime/data/dataset.h"

#include <pthread.h>
#include <unistd.h>

/* Linked with -Wl,--wrap=clEnqueueNDRangeKernel: launch number fail_at on
 * fail_queue fails as if the driver had run out of resources. Replica
 * threads launch at once, hence the lock. */
cl_int __real_clEnqueueNDRangeKernel(cl_command_queue queue, cl_kernel kernel, cl_uint dims,
                                     const size_t *offset, const size_t *global,
                                     const size_t *local, cl_uint n_wait, const cl_event *wait,
                                     cl_event *event);
cl_int __wrap_clEnqueueNDRangeKernel(cl_command_queue queue, cl_kernel kernel, cl_uint dims,
                                     const size_t *offset, const size_t *global,
                                     const size_t *local, cl_uint n_wait, const cl_event *wait,
                                     cl_event *event);

static pthread_mutex_t launch_lock = PTHREAD_MUTEX_INITIALIZER;
static cl_command_queue fail_queue;
static long fail_at, launches;

cl_int __wrap_clEnqueueNDRangeKernel(cl_command_queue queue, cl_kernel kernel, cl_uint dims,
                                     const size_t *offset, const size_t *global,
                                     const size_t *local, cl_uint n_wait, const cl_event *wait,
                                     cl_event *event)
{
    pthread_mutex_lock(&launch_lock);
    const int fail = queue == fail_queue && ++launches == fail_at;
    pthread_mutex_unlock(&launch_lock);
    if (fail)
        return CL_OUT_OF_RESOURCES;
    return __real_clEnqueueNDRangeKernel(queue, kernel, dims, offset, global, local, n_wait,
                                         wait, event);
}

static void fail_launch(kiln_context *ctx, int32_t device, long n)
{
    cl_command_queue queue = NULL;
    CHECK_OK(ctx, kiln_context_opencl_device(ctx, device, NULL, NULL, &queue));
    pthread_mutex_lock(&launch_lock);
    fail_queue = queue;
    fail_at = n;
    launches = 0;
    pthread_mutex_unlock(&launch_lock);
}

/* Before the context goes: a later queue may reuse the address. */
static void stop_failing(void)
{
    pthread_mutex_lock(&launch_lock);
    fail_queue = NULL;
    pthread_mutex_unlock(&launch_lock);
}

static kiln_context *context(counter *c)
{
    kiln_context_options o = {.struct_size = sizeof o, .seed = 4, .realloc_fn = counting_realloc,
                              .realloc_user = c};
    kiln_context *ctx = NULL;
    kiln_context_create(&o, &ctx);
    return ctx;
}

static kiln_dataset *data(kiln_context *ctx, int poison)
{
    float x[40 * 6];
    int32_t y[40];
    for (int i = 0; i < 40 * 6; i++)
        x[i] = (float)(i % 13) / 13.0f;
    for (int i = 0; i < 40; i++)
        y[i] = i % 2;
    kiln_arrays_desc d = {.struct_size = sizeof d, .count = 40, .feature_rank = 1,
                          .feature_dims = {6}, .features = x, .sparse_labels = y};
    kiln_dataset *ds = NULL;
    CHECK_OK(ctx, kiln_dataset_from_arrays(ctx, &d, &ds));
    /* from_arrays refuses a NaN; a NaN made on the device is what fit must
     * stop or skip, and this one stands for it. */
    if (poison && ds)
        ds->features[17 * 6 + 2] = NAN;
    return ds;
}

static kiln_model *model(kiln_context *ctx, kiln_strategy strategy)
{
    kiln_model *m = NULL;
    CHECK_OK(ctx, kiln_model_create(ctx, &m));
    const int32_t dims[] = {6};
    kiln_dense_options h = {.struct_size = sizeof h, .units = 5,
                            .activation = KILN_ACTIVATION_TANH};
    kiln_dense_options o = {.struct_size = sizeof o, .units = 2,
                            .activation = KILN_ACTIVATION_SOFTMAX};
    kiln_input(m, 1, dims, NULL);
    kiln_dense(m, KILN_NODE_PREVIOUS, &h);
    kiln_dense(m, KILN_NODE_PREVIOUS, &o);
    kiln_compile_options co = {.struct_size = sizeof co, .strategy = strategy,
                               .loss = KILN_LOSS_SPARSE_CATEGORICAL_CROSSENTROPY};
    CHECK_OK(ctx, kiln_model_compile(m, &co));
    return m;
}

static int all_finite(kiln_model *m)
{
    float w[64];
    int64_t n = 0;
    kiln_model_parameter_count(m, &n);
    if (n > 64 || kiln_model_get_weights(m, w, n) != KILN_OK)
        return 0;
    for (int64_t i = 0; i < n; i++)
        if (!isfinite(w[i]))
            return 0;
    return 1;
}

static const char *names[] = {"auto", "one_device", "mirrored", "central_storage"};

static void test_nan(kiln_strategy strategy, const char *dir)
{
    counter c = {0};
    kiln_context *ctx = context(&c);
    kiln_dataset *ds = data(ctx, 1);
    kiln_model *m = model(ctx, strategy);
    kiln_fit_options fo = {.struct_size = sizeof fo};
    fo.epochs = 2;
    fo.batch_size = 4;   /* sample 17 is in step 5 */
    fo.no_shuffle = 1;
    fo.verbosity = KILN_VERBOSE_SILENT;
    fo.checkpoint_dir = dir;
    fo.checkpoint_every_steps = 2;
    CHECK_FAILS(ctx, KILN_ERROR_NUMERIC, "the loss or a gradient is NaN at epoch 1, step 5",
                kiln_model_fit(m, ds, &fo));
    CHECK(all_finite(m));   /* the NaN step was never applied */
    char path[256];
    snprintf(path, sizeof path, "%s/ckpt-000000000004.safetensors", dir);
    kiln_model *again = model(ctx, strategy);
    CHECK_OK(ctx, kiln_model_load_checkpoint(again, path));
    kiln_model_destroy(again);

    fo.skip_nonfinite = 1;
    fo.checkpoint_dir = NULL;
    fo.checkpoint_every_steps = 0;
    CHECK_OK(ctx, kiln_model_fit(m, ds, &fo));
    kiln_epoch_record r = {.struct_size = sizeof r};
    CHECK_OK(ctx, kiln_model_history_epoch(m, 1, &r));
    CHECK(r.skipped_steps == 1 && r.samples == 36 && isfinite(r.loss));
    CHECK(all_finite(m));
    printf("NaN under %s: stopped at the poisoned step, then skipped it (%lld skipped)\n",
           names[strategy], (long long)r.skipped_steps);
    kiln_model_destroy(m);
    kiln_dataset_destroy(ds);
    kiln_context_destroy(ctx);
    CHECK(c.live == 0);
}

static void test_failed_launch(kiln_strategy strategy, int device, const char *dir)
{
    counter c = {0};
    kiln_context *ctx = context(&c);
    fail_launch(ctx, device, 60);
    kiln_dataset *ds = data(ctx, 0);
    kiln_model *m = model(ctx, strategy);
    kiln_fit_options fo = {.struct_size = sizeof fo};
    fo.epochs = 3;
    fo.batch_size = 4;
    fo.verbosity = KILN_VERBOSE_SILENT;
    fo.checkpoint_dir = dir;
    fo.checkpoint_every_steps = 1;
    /* Messages name a device by its index among all devices, which is the
     * context's own only when KILN_DEVICES leaves the first ones in. */
    kiln_device_info info = {.struct_size = sizeof info};
    CHECK_OK(ctx, kiln_context_device_info(ctx, device, &info));
    char want[64];
    snprintf(want, sizeof want, "on device %d", (int)info.index);
    CHECK_FAILS(ctx, KILN_ERROR_OUT_OF_MEMORY, want, kiln_model_fit(m, ds, &fo));
    CHECK(strstr(kiln_context_last_error(ctx), "launching kiln_") != NULL);
    printf("failed launch under %s: %s\n", names[strategy], kiln_context_last_error(ctx));
    stop_failing();
    kiln_model *again = model(ctx, KILN_STRATEGY_ONE_DEVICE);
    char path[256];
    int loaded = 0;
    for (int step = 40; step > 0 && !loaded; step--) {
        snprintf(path, sizeof path, "%s/ckpt-%012d.safetensors", dir, step);
        loaded = access(path, F_OK) == 0 && kiln_model_load_checkpoint(again, path) == KILN_OK;
    }
    CHECK(loaded);
    kiln_model_destroy(again);
    kiln_model_destroy(m);
    kiln_dataset_destroy(ds);
    kiln_context_destroy(ctx);
    CHECK(c.live == 0);
}

int main(void)
{
    counter c = {0};
    kiln_context *probe = context(&c);
    if (!probe)
        SKIP_MISSING("no OpenCL device");
    const int32_t devices = test_device_count(probe);
    kiln_context_destroy(probe);
    char dir[] = "/tmp/kiln-faults-XXXXXX";
    if (!mkdtemp(dir))
        return 1;
    test_nan(KILN_STRATEGY_ONE_DEVICE, dir);
    test_failed_launch(KILN_STRATEGY_ONE_DEVICE, 0, dir);
    if (test_has_devices(devices, 2, "the faults under mirrored and central_storage")) {
        test_nan(KILN_STRATEGY_MIRRORED, dir);
        test_nan(KILN_STRATEGY_CENTRAL_STORAGE, dir);
        test_failed_launch(KILN_STRATEGY_MIRRORED, 1, dir);
        test_failed_launch(KILN_STRATEGY_CENTRAL_STORAGE, 1, dir);
    }
    char cmd[64];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    CHECK(system(cmd) == 0);
    return test_finish("test_faults");
}
