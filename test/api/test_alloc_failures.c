/* Allocation-failure injection (as dav1d does it): every host allocation
 * kiln makes is failed in turn while creating, compiling, training and
 * evaluating a small model. Each run must end in KILN_ERROR_OUT_OF_MEMORY
 * (never a crash) and release everything it allocated. */
#include "harness.h"

#include <pthread.h>

typedef struct budget {
    long allowed;    /* allocations that succeed before one fails (-1: all) */
    long made;
    long live;       /* allocations not yet freed */
} budget;

/* Replica, loader and reducer threads allocate too (several devices):
 * unlocked, their counts would race and lose updates. */
static pthread_mutex_t budget_lock = PTHREAD_MUTEX_INITIALIZER;

static void *counting_realloc(void *user, void *ptr, size_t size)
{
    budget *b = user;
    void *p = NULL;
    pthread_mutex_lock(&budget_lock);
    if (size == 0) {
        if (ptr)
            b->live--;
        free(ptr);
    } else if (b->allowed < 0 || b->made < b->allowed) {
        b->made++;
        p = realloc(ptr, size);
        if (p && !ptr)
            b->live++;
    }
    pthread_mutex_unlock(&budget_lock);
    return p;
}

/* Returns the first failing status, or KILN_OK. */
static kiln_status run(budget *b)
{
    kiln_context_options o = {.struct_size = sizeof o};
    char err[256];
    o.realloc_fn = counting_realloc;
    o.realloc_user = b;
    o.error_buffer = err;
    o.error_buffer_size = sizeof err;
    kiln_context *ctx = NULL;
    kiln_model *m = NULL;
    kiln_dataset *ds = NULL;
    kiln_status st = kiln_context_create(&o, &ctx);
    if (st != KILN_OK)
        return st;
    float x[10 * 4];
    int32_t y[10];
    for (int i = 0; i < 40; i++)
        x[i] = (float)(i % 7) / 7.0f;
    for (int i = 0; i < 10; i++)
        y[i] = i % 2;
    kiln_arrays_desc d = {.struct_size = sizeof d};
    d.count = 10;
    d.feature_rank = 1;
    d.feature_dims[0] = 4;
    d.features = x;
    d.sparse_labels = y;
    st = kiln_dataset_from_arrays(ctx, &d, &ds);
    if (st == KILN_OK)
        st = kiln_model_create(ctx, &m);
    if (st == KILN_OK) {
        const int32_t dims[] = {4};
        kiln_dense_options h = {.struct_size = sizeof h, .units = 3,
                                .activation = KILN_ACTIVATION_RELU};
        kiln_dense_options out = {.struct_size = sizeof out, .units = 2,
                                  .activation = KILN_ACTIVATION_SOFTMAX};
        kiln_input(m, 1, dims, NULL);
        kiln_dense(m, KILN_NODE_PREVIOUS, &h);
        kiln_dense(m, KILN_NODE_PREVIOUS, &out);
        kiln_compile_options co = {.struct_size = sizeof co};
        co.loss = KILN_LOSS_SPARSE_CATEGORICAL_CROSSENTROPY;
        st = kiln_model_compile(m, &co);
    }
    kiln_fit_options fo = {.struct_size = sizeof fo};
    fo.epochs = 2;
    fo.batch_size = 4;
    fo.verbosity = KILN_VERBOSE_SILENT;
    fo.validation = ds;
    if (st == KILN_OK)
        st = kiln_model_fit(m, ds, &fo);
    kiln_metrics met = {.struct_size = sizeof met};
    if (st == KILN_OK)
        st = kiln_model_evaluate(m, ds, 3, &met);
    kiln_model_destroy(m);
    kiln_dataset_destroy(ds);
    kiln_context_destroy(ctx);
    return st;
}

int main(void)
{
    budget full = {.allowed = -1};
    kiln_status st = run(&full);
    if (st == KILN_ERROR_NO_DEVICE)
        SKIP_MISSING("no OpenCL device");
    CHECK(st == KILN_OK && full.live == 0);
    printf("a full run makes %ld host allocations\n", full.made);
    long failures = 0;
    for (long n = 0; n < full.made; n++) {
        budget b = {.allowed = n};
        st = run(&b);
        if (st != KILN_ERROR_OUT_OF_MEMORY || b.live != 0) {
            fprintf(stderr, "failing allocation %ld: %s, %ld allocations leaked\n", n,
                    kiln_status_name(st), b.live);
            failures++;
        }
    }
    CHECK(failures == 0);
    return test_finish("test_alloc_failures");
}
