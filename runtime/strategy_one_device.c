/* one_device: a single replica on the context's first device, driven from
 * the calling thread. One host synchronisation per step (reading the loss). */
#include "runtime/optimizer.h"
#include "runtime/replica.h"

typedef struct one_device {
    kiln_model *model;
    kiln_replica *replica;
} one_device;

static void one_destroy(void *impl)
{
    one_device *s = impl;
    if (!s)
        return;
    kiln_replica_destroy(s->replica);
    kiln_free(s->model->ctx, s);
}

static kiln_status one_create(kiln_model *m, void **impl)
{
    one_device *s = kiln_calloc(m->ctx, 1, sizeof *s);
    if (!s)
        return kiln_error_oom(m->ctx, "a strategy", sizeof *s);
    s->model = m;
    float *init = kiln_calloc(m->ctx, m->n_param_floats, sizeof(float));
    kiln_status st = init ? KILN_OK
                          : kiln_error_oom(m->ctx, "initial weights",
                                           m->n_param_floats * sizeof(float));
    if (st == KILN_OK)
        st = kiln_replica_create(m, m->ctx->devices[0], &s->replica);
    if (st == KILN_OK)
        st = kiln_model_init_params(m, init);
    if (st == KILN_OK)
        st = kiln_replica_write_params(s->replica, init);
    kiln_free(m->ctx, init);
    if (st != KILN_OK) {
        one_destroy(s);
        return st;
    }
    *impl = s;
    return KILN_OK;
}

static kiln_status one_train_step(void *impl, const kiln_batch *b, double sums[2])
{
    one_device *s = impl;
    kiln_replica *r = s->replica;
    kiln_model *m = s->model;
    kiln_status st = kiln_replica_upload(r, b);
    if (st == KILN_OK)
        st = kiln_replica_forward(r, b->n, 1);
    if (st == KILN_OK)
        st = kiln_replica_loss(r, b->n, 1.0f / (float)b->n);
    if (st == KILN_OK)
        st = kiln_replica_backward(r, b->n);
    if (st == KILN_OK)
        st = kiln_optimizer_apply(r->dev, &m->optimizer, r->params, r->grads, r->slots,
                                  m->n_param_floats, m->n_optimizer_steps + 1);
    if (st == KILN_OK)
        st = kiln_replica_read_sums(r, sums);
    if (st == KILN_OK)
        m->n_optimizer_steps++;
    return st;
}

static kiln_status one_eval_step(void *impl, const kiln_batch *b, double sums[2])
{
    one_device *s = impl;
    kiln_replica *r = s->replica;
    kiln_status st = kiln_replica_upload(r, b);
    if (st == KILN_OK)
        st = kiln_replica_forward(r, b->n, 0);
    if (st == KILN_OK)
        st = kiln_replica_loss(r, b->n, 1.0f / (float)b->n);
    if (st == KILN_OK)
        st = kiln_replica_read_sums(r, sums);
    return st;
}

static kiln_status one_predict_step(void *impl, const kiln_batch *b, float *outputs)
{
    one_device *s = impl;
    kiln_status st = kiln_replica_upload(s->replica, b);
    if (st == KILN_OK)
        st = kiln_replica_forward(s->replica, b->n, 0);
    if (st == KILN_OK)
        st = kiln_replica_read_output(s->replica, b->n, outputs);
    return st;
}

static kiln_status one_get_params(void *impl, float *flat)
{
    return kiln_replica_read_params(((one_device *)impl)->replica, flat);
}

static kiln_status one_set_params(void *impl, const float *flat)
{
    return kiln_replica_write_params(((one_device *)impl)->replica, flat);
}

static int32_t one_replica_count(void *impl)
{
    (void)impl;
    return 1;
}

static kiln_replica *one_replica(void *impl, int32_t i)
{
    return i == 0 ? ((one_device *)impl)->replica : NULL;
}

const kiln_strategy_ops kiln_strategy_one_device = {
    "one_device", one_create, one_destroy, one_train_step, one_eval_step, one_predict_step,
    one_get_params, one_set_params, one_replica_count, one_replica,
};
