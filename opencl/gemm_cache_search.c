/* The CPU variant's own GEMM (gemm.cl) per device: how many bytes of
 * operand rows its tiles may count on finding in the core's cache, which
 * decides its chunks of k and when a column's tiles run one after another
 * (gemm_choice.c), and whether B is packed in panels where its rows lie a
 * page apart (blas.c's packs_b). The best values follow the cache and
 * prefetchers of the CPU at hand, so
 * it is searched there, as CLBlast's parameters are (gemm_tuning.c), under
 * the same mode: KILN_GEMM_TUNING=search (or `kiln tune`) times each
 * candidate on GEMMs of the seed ResNet's shapes, in turns, and stores the fastest in
 * kiln's cache folder; later contexts read it back; with nothing stored, or
 * KILN_GEMM_TUNING=off, the default (KILN_GEMM_CACHE_BYTES, measured on
 * this project's machine). A search is opt-in because the budget changes
 * the order of a GEMM's sums: results stay the same run after run until
 * the user searches. */
#include "opencl/cl_internal.h"

#include <stdio.h>
#include <string.h>

#define STORE_VERSION 2u

/* Candidates: a quarter of the default to eight times it. */
static const size_t budgets[] = {
    (size_t)256 << 10, (size_t)512 << 10, (size_t)1 << 20,
    (size_t)2 << 20,   (size_t)4 << 20,   (size_t)8 << 20,
};
#define N_BUDGETS ((int)(sizeof budgets / sizeof budgets[0]))
/* Each budget with B packed where that pays, then never packed. */
#define N_CANDIDATES (2 * N_BUDGETS)

typedef struct probe {
    size_t m, n, k;
    kiln_gemm_op trans_a;
} probe;

/* Where the budget decides something at the default or near it: a square
 * NN product (chunks of k), the seed ResNet's 3x3 weight gradient at
 * 224x224 (TN, chunks), its 512-channel forward at 7x7 (NN, chunks) and a
 * dense layer's input gradient on a transposed copy (NN with a short k:
 * rows first below 2 MiB). */
static const probe probes[] = {
    {.m = 1024, .n = 1024, .k = 1024, .trans_a = KILN_GEMM_N},
    {.m = 576, .n = 64, .k = 25088, .trans_a = KILN_GEMM_T},
    {.m = 392, .n = 512, .k = 4608, .trans_a = KILN_GEMM_N},
    {.m = 128, .n = 5408, .k = 64, .trans_a = KILN_GEMM_N},
};
#define N_PROBES ((int)(sizeof probes / sizeof probes[0]))

/* A candidate must beat the default by this share to replace it: the
 * timings' own spread on a busy machine is a few per cent. */
#define MARGIN 0.03

typedef struct stored_budget {
    uint32_t version;
    uint32_t pack;               /* dev->gemm_pack */
    uint64_t bytes;
    double seconds[N_CANDIDATES];   /* each candidate's, for the log and docs */
} stored_budget;

static kiln_cache_key device_key(const kiln_device *dev)
{
    const kiln_device_info *i = &dev->info;
    const char *parts[] = {"kiln-gemm-cache-budget-2", i->name, i->vendor, i->platform,
                           i->driver_version};
    size_t lengths[5];
    for (int j = 0; j < 5; j++)
        lengths[j] = strlen(parts[j]);
    return kiln_cache_key_of(parts, lengths, 5);
}

static size_t operand_floats(char which)
{
    size_t most = 0;
    for (int p = 0; p < N_PROBES; p++) {
        const probe *q = &probes[p];
        const size_t n = which == 'a' ? q->m * q->k : which == 'b' ? q->k * q->n : q->m * q->n;
        most = n > most ? n : most;
    }
    return most;
}

/* Seconds for one run of each probe at the device's current budget. */
static kiln_status time_probes(kiln_device *dev, kiln_buffer *const *buf, double *seconds)
{
    const double t0 = kiln_now();
    for (int p = 0; p < N_PROBES; p++) {
        const probe *q = &probes[p];
        const size_t lda = q->trans_a == KILN_GEMM_T ? q->m : q->k;
        const kiln_status st = kiln_gemm(dev, q->trans_a, KILN_GEMM_N, q->m, q->n, q->k, 1.0f,
                                         buf[0], 0, lda, buf[1], 0, q->n, 0.0f, buf[2], 0, q->n);
        if (st != KILN_OK)
            return st;
    }
    const kiln_status st = kiln_device_finish(dev);
    *seconds = kiln_now() - t0;
    return st;
}

/* ROUNDS rounds, each timing every candidate once in turn (so that a
 * machine's drift and other work touch all of them alike), after one
 * untimed round (which compiles); each candidate's best. */
#define ROUNDS 3

static kiln_status search(kiln_device *dev, stored_budget *out)
{
    kiln_buffer *buf[3] = {NULL, NULL, NULL};
    const char which[3] = {'a', 'b', 'c'};
    kiln_status st = KILN_OK;
    for (int i = 0; i < 3 && st == KILN_OK; i++) {
        const size_t bytes = operand_floats(which[i]) * sizeof(float);
        st = kiln_buffer_create(dev, bytes, "GEMM cache search operands", &buf[i]);
        if (st == KILN_OK)
            st = kiln_buffer_zero(dev, buf[i], 0, bytes);
    }
    memset(out, 0, sizeof *out);
    out->version = STORE_VERSION;
    out->bytes = KILN_GEMM_CACHE_BYTES;
    out->pack = 1;
    for (int c = 0; c < N_CANDIDATES; c++)
        out->seconds[c] = 1e30;
    for (int round = -1; round < ROUNDS && st == KILN_OK; round++)
        for (int c = 0; c < N_CANDIDATES && st == KILN_OK; c++) {
            double t = 0;
            dev->gemm_cache_bytes = budgets[c % N_BUDGETS];
            dev->gemm_pack = c < N_BUDGETS;
            st = time_probes(dev, buf, &t);
            if (round >= 0 && t < out->seconds[c])
                out->seconds[c] = t;
        }
    double fallback = 0, best = 1e30;
    for (int c = 0; c < N_CANDIDATES && st == KILN_OK; c++) {
        const size_t bytes = budgets[c % N_BUDGETS];
        const int pack = c < N_BUDGETS;
        kiln_host_log(dev->host, KILN_LOG_INFO, "searching kiln's GEMM cache budget on %s: "
                      "%zu KiB, B %s: %.1f ms", dev->label, bytes >> 10,
                      pack ? "packed where it pays" : "never packed", 1e3 * out->seconds[c]);
        if (bytes == KILN_GEMM_CACHE_BYTES && pack)
            fallback = out->seconds[c];
        if (out->seconds[c] < best) {
            best = out->seconds[c];
            out->bytes = bytes;
            out->pack = (uint32_t)pack;
        }
    }
    if (best > (1.0 - MARGIN) * fallback) {
        out->bytes = KILN_GEMM_CACHE_BYTES;
        out->pack = 1;
    }
    dev->gemm_cache_bytes = KILN_GEMM_CACHE_BYTES;
    dev->gemm_pack = 1;
    for (int i = 0; i < 3; i++)
        kiln_buffer_destroy(buf[i]);
    return st;
}

static int candidate(uint64_t bytes)
{
    for (int c = 0; c < N_BUDGETS; c++)
        if (bytes == budgets[c])
            return 1;
    return 0;
}

static int load(kiln_host *host, const char *dir, const kiln_cache_key *key, stored_budget *out)
{
    return kiln_cache_load_record(host, dir, key, out, sizeof *out) &&
           out->version == STORE_VERSION && candidate(out->bytes) && out->pack <= 1;
}

/* "...; kiln GEMM cache 1024 KiB (searched)" after CLBlast's parameters,
 * ", unpacked" before the parenthesis where the search chose never to pack
 * B (the field holds 127 characters). */
static void describe(kiln_device *dev, int searched)
{
    char *text = dev->info.gemm_parameters;
    const size_t size = sizeof dev->info.gemm_parameters, used = strlen(text);
    if (used < size)
        snprintf(text + used, size - used, "; kiln GEMM cache %zu KiB%s (%s)",
                 dev->gemm_cache_bytes >> 10, dev->gemm_pack ? "" : ", unpacked",
                 searched ? "searched" : "default");
}

kiln_status kiln_gemm_cache_setup(kiln_host *host, kiln_device *const *devices,
                                  int32_t n_devices, kiln_gemm_tuning mode)
{
    kiln_status st = KILN_OK;
    for (int32_t d = 0; d < n_devices && st == KILN_OK; d++) {
        kiln_device *dev = devices[d];
        dev->gemm_cache_bytes = KILN_GEMM_CACHE_BYTES;
        dev->gemm_pack = 1;
        if (dev->gpu_kernels)   /* the GPU variant's GEMM has no chunks */
            continue;
        stored_budget t;
        const kiln_cache_key key = device_key(dev);
        int found = 0;
        /* Devices of one kind share a search (two PoCL devices). */
        for (int32_t e = 0; e < d && !found && mode != KILN_GEMM_TUNING_OFF; e++) {
            const kiln_cache_key other = device_key(devices[e]);
            if (!devices[e]->gpu_kernels && !memcmp(&other, &key, sizeof key)) {
                dev->gemm_cache_bytes = devices[e]->gemm_cache_bytes;
                dev->gemm_pack = devices[e]->gemm_pack;
                found = strstr(devices[e]->info.gemm_parameters, "(searched)") != NULL;
                if (!found)
                    break;
            }
        }
        if (!found && mode != KILN_GEMM_TUNING_OFF && load(host, dev->cache_dir, &key, &t)) {
            dev->gemm_cache_bytes = (size_t)t.bytes;
            dev->gemm_pack = (int)t.pack;
            found = 1;
        } else if (!found && mode == KILN_GEMM_TUNING_SEARCH) {
            st = search(dev, &t);
            if (st == KILN_OK) {
                kiln_cache_store(host, dev->cache_dir, &key, (const unsigned char *)&t,
                                 sizeof t);
                dev->gemm_cache_bytes = (size_t)t.bytes;
                dev->gemm_pack = (int)t.pack;
                found = 1;
            }
        }
        describe(dev, found);
    }
    return st;
}
