/* --lora, --lora-alpha, --lora-layers, --lora-targets: kiln_model_enable_lora_with's
 * rank, alpha and attention targets on the Dense and MultiHeadAttention
 * layers the prefixes name; the refusals of bad values stay the library's
 * too, but the tool says them first, as a usage error. */
#include "lora_args.h"
#include "report.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char cli_lora_usage[] =
    "--lora RANK        LoRA (Keras's enable_lora) on the Dense and\n"
    "                   MultiHeadAttention layers of --lora-layers: their\n"
    "                   kernels frozen, rank-RANK adapters trained; the saved\n"
    "                   model holds the merged kernels\n"
    "--lora-alpha A     the adapters' scale is A / RANK, A > 0 (Keras's\n"
    "                   lora_alpha; default RANK)\n"
    "--lora-layers PREFIX  the Dense and MultiHeadAttention layers whose names\n"
    "                   start with PREFIX; may be repeated; each must match one\n"
    "--lora-targets LIST  the attention projections adapted, comma-separated:\n"
    "                   query, key, value, attention_output (default\n"
    "                   query,value, KerasHub's); the others frozen whole\n";

int cli_lora_take(cli_options bit, const char *v, cli_args *a)
{
    char *end = NULL;
    errno = 0;
    if (bit == CLI_LORA) {
        const long long n = strtoll(v, &end, 10);
        if (end == v || *end || errno || n < 1 || n > INT32_MAX)
            return cli_usage("--lora needs a whole number >= 1, not '%s'", v), 0;
        a->lora_rank = (int32_t)n;
        return 1;
    }
    if (bit == CLI_LORA_ALPHA) {
        const double x = strtod(v, &end);
        if (end == v || *end || errno || !isfinite(x) || x <= 0.0 || x > 3.4e38)
            return cli_usage("--lora-alpha needs a finite number > 0, not '%s'", v), 0;
        a->lora_alpha = (float)x;
        return 1;
    }
    if (bit == CLI_LORA_TARGETS) {
        /* The names are the library's to check (the layer knows them). */
        if (a->lora_targets)
            return cli_usage("--lora-targets is given twice; name every target in one "
                             "comma-separated list"), 0;
        if (!v[0])
            return cli_usage("--lora-targets needs a comma-separated list of query, key, "
                             "value and attention_output, not ''"), 0;
        a->lora_targets = v;
        return 1;
    }
    if (a->n_lora_layers == CLI_MAX_FREEZE)
        return cli_usage("--lora-layers is given more than %d times", CLI_MAX_FREEZE), 0;
    if (!v[0])
        return cli_usage("--lora-layers needs a layer name prefix, not ''"), 0;
    a->lora_layers[a->n_lora_layers++] = v;
    return 1;
}

int cli_lora_check(const cli_args *a)
{
    if (!(a->given & CLI_LORA_OPTIONS))
        return 1;
    if (a->lora_rank == 0)
        return cli_usage("--lora-alpha, --lora-layers and --lora-targets need --lora RANK"), 0;
    if (a->n_lora_layers == 0)
        return cli_usage("--lora needs --lora-layers PREFIX, the Dense and MultiHeadAttention "
                         "layers it adapts"), 0;
    return 1;
}

int cli_lora_apply(kiln_context *ctx, kiln_model *m, const cli_args *a)
{
    int32_t n = 0, attention = 0;
    kiln_model_layer_count(m, &n);
    for (int p = 0; p < a->n_lora_layers; p++) {
        const size_t len = strlen(a->lora_layers[p]);
        int dense = 0, mha = 0;
        for (int32_t i = 0; i < n; i++) {
            kiln_layer_info info = {.struct_size = sizeof info};
            kiln_status st = kiln_model_layer_info(m, i, &info);
            const int is_dense = st == KILN_OK && strcmp(info.kind, "dense") == 0;
            const int is_mha = st == KILN_OK && strcmp(info.kind, "multi_head_attention") == 0;
            if (st == KILN_OK && strncmp(info.name, a->lora_layers[p], len) == 0 &&
                (is_dense || is_mha)) {
                /* Targets choose among attention projections; a Dense has one kernel. */
                const kiln_lora_options o = {.struct_size = sizeof o, .rank = a->lora_rank,
                                             .alpha = a->lora_alpha,
                                             .targets = is_mha ? a->lora_targets : NULL};
                st = kiln_model_enable_lora_with(m, info.name, &o);
                dense += is_dense;
                mha += is_mha;
            }
            if (st != KILN_OK)
                return cli_failed(ctx, a->command, st);
        }
        if (!dense && !mha)
            return cli_refuse(a->command, KILN_ERROR_INVALID_ARGUMENT, "--lora-layers %s "
                              "matches no Dense or MultiHeadAttention layer of %s (kiln summary "
                              "lists them)", a->lora_layers[p], a->paths[0]);
        if (dense)
            printf("LoRA rank %d on %d Dense layer(s) named %s...\n", (int)a->lora_rank, dense,
                   a->lora_layers[p]);
        if (mha)
            printf("LoRA rank %d on %d MultiHeadAttention layer(s) named %s... (%s)\n",
                   (int)a->lora_rank, mha, a->lora_layers[p],
                   a->lora_targets ? a->lora_targets : "query,value");
        attention += mha;
    }
    if (a->lora_targets && !attention)
        return cli_refuse(a->command, KILN_ERROR_INVALID_ARGUMENT, "--lora-targets %s chooses "
                          "attention projections, but --lora-layers matches no "
                          "MultiHeadAttention layer of %s", a->lora_targets, a->paths[0]);
    return 0;
}
