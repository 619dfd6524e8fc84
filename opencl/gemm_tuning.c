/* CLBlast's GEMM parameters per device: searched once, stored in kiln's
 * cache folder, applied with CLBlastOverrideParameters whenever a context
 * opens the device.
 *
 * Only the direct GEMM kernel (XgemmDirect, no padded copies of the
 * operands) is tuned, and CLBlast is then told to use it at every size:
 * the shapes of training are thin (a batch dimension of tens to hundreds),
 * where the indirect kernel's copies cost more than they save. The search
 * times each candidate on the GEMMs of a dense layer and of a 3x3
 * convolution (forward, weight and input gradients: NN, TN, NT) and keeps
 * the smallest total, or CLBlast's defaults if no candidate beats them. */
#include "opencl/cl_internal.h"

#include <clblast_c.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define N_PARAMS 10
#define STORE_VERSION 1u

static const char *const param_names[N_PARAMS] = {
    "WGD", "MDIMCD", "NDIMCD", "MDIMAD", "NDIMBD", "KWID", "VWMD", "VWND", "PADA", "PADB",
};

/* Candidates, cheapest to compile first: wide vectors and tiles for CPU
 * devices (PoCL), and smaller ones of the kind GPUs' entries in CLBlast's
 * database hold. A set the device rejects is skipped. */
static const size_t candidates[][N_PARAMS] = {
    {32, 8, 8, 8, 8, 2, 4, 4, 1, 1},
    {64, 8, 8, 8, 8, 16, 8, 8, 1, 1},
    {64, 32, 8, 8, 8, 16, 1, 8, 1, 1},
    {64, 32, 8, 8, 8, 16, 1, 4, 1, 1},
    {32, 16, 8, 16, 8, 8, 2, 4, 1, 1},
    {32, 16, 16, 16, 16, 2, 2, 2, 1, 1},
    {16, 8, 8, 8, 8, 1, 2, 2, 1, 1},
};
#define N_CANDIDATES ((int)(sizeof candidates / sizeof candidates[0]))

typedef struct probe {
    int m, n, k, trans_a, trans_b;
} probe;

/* A dense layer 5408 -> 64 at batch 128 (the seed CNN's) and a 3x3 conv
 * with 64 channels over 2048 output pixels: forward, weight and input
 * gradients of each. */
static const probe probes[] = {
    {.m = 128, .n = 64, .k = 5408, .trans_a = 0, .trans_b = 0},
    {.m = 5408, .n = 64, .k = 128, .trans_a = 1, .trans_b = 0},
    {.m = 128, .n = 5408, .k = 64, .trans_a = 0, .trans_b = 1},
    {.m = 2048, .n = 64, .k = 576, .trans_a = 0, .trans_b = 0},
    {.m = 576, .n = 64, .k = 2048, .trans_a = 1, .trans_b = 0},
    {.m = 2048, .n = 576, .k = 64, .trans_a = 0, .trans_b = 1},
};
#define N_PROBES ((int)(sizeof probes / sizeof probes[0]))

/* What the cache holds for a device (host byte order: the cache is local). */
typedef struct stored_tuning {
    uint32_t version;
    uint32_t tuned;             /* 0: CLBlast's defaults won */
    uint64_t values[N_PARAMS];
    double seconds, default_seconds;
} stored_tuning;

static kiln_cache_key device_key(const kiln_device *dev)
{
    const kiln_device_info *i = &dev->info;
    const char *tag = "clblast-xgemmdirect-tuning-1";
    const char *parts[] = {tag, i->name, i->vendor, i->platform, i->driver_version};
    size_t lengths[5];
    for (int j = 0; j < 5; j++)
        lengths[j] = strlen(parts[j]);
    return kiln_cache_key_of(parts, lengths, 5);
}

static void describe(kiln_device *dev, const stored_tuning *t)
{
    char *out = dev->info.gemm_parameters;
    const size_t size = sizeof dev->info.gemm_parameters;
    if (!t->tuned) {
        snprintf(out, size, "CLBlast defaults");
        return;
    }
    size_t used = 0;
    for (int i = 0; i < N_PARAMS && used < size; i++)
        used += (size_t)snprintf(out + used, size - used, "%s%s=%llu", i ? " " : "",
                                 param_names[i], (unsigned long long)t->values[i]);
}

static CLBlastStatusCode override(kiln_device *dev, const size_t *values)
{
    CLBlastStatusCode s = CLBlastOverrideParameters(dev->id, "XgemmDirect",
                                                    CLBlastPrecisionSingle, N_PARAMS,
                                                    (const char **)param_names, values);
    if (s != CLBlastSuccess)
        return s;
    /* Above this m * n * k cube root CLBlast would switch to the untuned
     * indirect kernel. */
    const char *routine[] = {"XGEMM_MIN_INDIRECT_SIZE"};
    const size_t never[] = {1u << 20};
    return CLBlastOverrideParameters(dev->id, "GemmRoutine", CLBlastPrecisionSingle, 1, routine,
                                     never);
}

static kiln_status apply(kiln_device *dev, const stored_tuning *t)
{
    describe(dev, t);
    dev->gemm_tuned = t->tuned != 0;   /* the GEMM choice (gemm_choice.c) reads it */
    if (!t->tuned)
        return KILN_OK;
    size_t v[N_PARAMS];
    for (int i = 0; i < N_PARAMS; i++)
        v[i] = (size_t)t->values[i];
    CLBlastStatusCode s = override(dev, v);
    if (s != CLBlastSuccess)
        return kiln_fail(dev->host, KILN_ERROR_DEVICE, "applying tuned GEMM parameters (%s) on "
                         "%s failed: %s (%d)", dev->info.gemm_parameters, dev->label,
                         kiln_cl_error_name(s), (int)s);
    return KILN_OK;
}

/* Seconds for one pass over the probes (best of three after a warm-up,
 * which compiles); a negative value when the parameters fail. */
static double time_probes(kiln_device *dev, cl_mem a, cl_mem b, cl_mem c)
{
    double total = 0;
    for (int p = 0; p < N_PROBES; p++) {
        const probe *q = &probes[p];
        const size_t lda = q->trans_a ? (size_t)q->m : (size_t)q->k;
        const size_t ldb = q->trans_b ? (size_t)q->k : (size_t)q->n;
        double best = 1e30;
        for (int rep = 0; rep < 4; rep++) {
            const double t0 = kiln_now();
            CLBlastStatusCode s = CLBlastSgemm(
                CLBlastLayoutRowMajor, q->trans_a ? CLBlastTransposeYes : CLBlastTransposeNo,
                q->trans_b ? CLBlastTransposeYes : CLBlastTransposeNo, (size_t)q->m,
                (size_t)q->n, (size_t)q->k, 1.0f, a, 0, lda, b, 0, ldb, 0.0f, c, 0,
                (size_t)q->n, &dev->queue, NULL);
            if (s != CLBlastSuccess || clFinish(dev->queue) != CL_SUCCESS)
                return -1;
            const double dt = kiln_now() - t0;
            if (rep > 0 && dt < best)
                best = dt;
        }
        total += best;
    }
    return total;
}

static size_t probe_floats(char which)
{
    size_t most = 0;
    for (int p = 0; p < N_PROBES; p++) {
        const probe *q = &probes[p];
        const size_t n = which == 'a'   ? (size_t)q->m * q->k
                         : which == 'b' ? (size_t)q->k * q->n
                                        : (size_t)q->m * q->n;
        most = n > most ? n : most;
    }
    return most;
}

static kiln_status search(kiln_device *dev, stored_tuning *out)
{
    kiln_host *host = dev->host;
    kiln_buffer *buf[3] = {NULL, NULL, NULL};
    const char which[3] = {'a', 'b', 'c'};
    kiln_status st = KILN_OK;
    for (int i = 0; i < 3 && st == KILN_OK; i++) {
        const size_t bytes = probe_floats(which[i]) * sizeof(float);
        st = kiln_buffer_create(dev, bytes, "GEMM tuning operands", &buf[i]);
        if (st == KILN_OK)
            st = kiln_buffer_zero(dev, buf[i], 0, bytes);
    }
    if (st != KILN_OK)
        goto done;
    memset(out, 0, sizeof *out);
    out->version = STORE_VERSION;
    out->default_seconds = time_probes(dev, buf[0]->mem, buf[1]->mem, buf[2]->mem);
    int n = kiln_gemm_tuning_candidates(N_CANDIDATES);
    if (n <= 0 || n > N_CANDIDATES)
        n = N_CANDIDATES;
    /* A shortened search (the tests') keeps its best candidate even where
     * CLBlast's defaults are faster: the candidates' results are what it
     * checks. */
    const int all = n == N_CANDIDATES;
    out->seconds = out->default_seconds > 0 && all ? out->default_seconds : 1e30;
    kiln_host_log(host, KILN_LOG_INFO, "tuning GEMM on %s: CLBlast defaults %.1f ms; trying %d "
                  "parameter sets", dev->label, 1e3 * out->default_seconds, n);
    for (int c = 0; c < n; c++) {
        double t = -1;
        if (override(dev, candidates[c]) == CLBlastSuccess)
            t = time_probes(dev, buf[0]->mem, buf[1]->mem, buf[2]->mem);
        kiln_host_log(host, KILN_LOG_INFO, "tuning GEMM on %s: candidate %d: %.1f ms",
                      dev->label, c, t < 0 ? -1.0 : 1e3 * t);
        if (t > 0 && t < out->seconds) {
            out->seconds = t;
            out->tuned = 1;
            for (int i = 0; i < N_PARAMS; i++)
                out->values[i] = candidates[c][i];
        }
    }
    /* The last candidate's parameters are in force; CLBlast has no way back
     * to its defaults but forgetting every override. */
    if (!out->tuned)
        CLBlastClearCache();
done:
    for (int i = 0; i < 3; i++)
        kiln_buffer_destroy(buf[i]);
    return st;
}

static int load(kiln_host *host, const char *dir, const kiln_cache_key *key, stored_tuning *out)
{
    if (!kiln_cache_load_record(host, dir, key, out, sizeof *out) ||
        out->version != STORE_VERSION || out->tuned > 1)
        return 0;
    for (int i = 0; i < N_PARAMS && out->tuned; i++)
        if (out->values[i] == 0 || out->values[i] > 1024)
            return 0;
    return 1;
}

kiln_status kiln_gemm_tuning_setup(kiln_host *host, kiln_device *const *devices,
                                   int32_t n_devices, kiln_gemm_tuning mode)
{
    stored_tuning *found = kiln_host_calloc(host, (size_t)n_devices, sizeof *found);
    kiln_cache_key *keys = kiln_host_calloc(host, (size_t)n_devices, sizeof *keys);
    kiln_status st = found && keys ? KILN_OK
                                   : kiln_fail_oom(host, "GEMM tuning records",
                                                   (size_t)n_devices * sizeof *found);
    for (int32_t d = 0; d < n_devices && st == KILN_OK; d++) {
        kiln_device *dev = devices[d];
        stored_tuning *t = &found[d];
        memset(t, 0, sizeof *t);
        keys[d] = device_key(dev);
        if (mode == KILN_GEMM_TUNING_OFF) {
            describe(dev, t);
            continue;
        }
        /* Devices of one kind share a search (two PoCL devices, four GPUs). */
        int32_t same = -1;
        for (int32_t e = 0; e < d && same < 0; e++)
            if (!memcmp(&keys[e], &keys[d], sizeof keys[d]))
                same = e;
        if (same >= 0) {
            *t = found[same];
        } else if (!load(host, dev->cache_dir, &keys[d], t)) {
            memset(t, 0, sizeof *t);
            if (mode == KILN_GEMM_TUNING_SEARCH) {
                st = search(dev, t);
                if (st == KILN_OK)
                    kiln_cache_store(host, dev->cache_dir, &keys[d], (const unsigned char *)t,
                                     sizeof *t);
                /* Forgetting the search's overrides forgot the earlier devices' too. */
                for (int32_t e = 0; e < d && st == KILN_OK && !t->tuned; e++)
                    st = apply(devices[e], &found[e]);
            }
        }
        if (st == KILN_OK)
            st = apply(dev, t);
    }
    kiln_host_free(host, found);
    kiln_host_free(host, keys);
    return st;
}
