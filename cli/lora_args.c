/* --lora, --lora-alpha, --lora-layers: kiln_model_enable_lora's rank and
 * alpha on the Dense layers the prefixes name; the refusals of bad values
 * stay the library's too, but the tool says them first, as a usage error. */
#include "lora_args.h"
#include "report.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

const char cli_lora_usage[] =
    "--lora RANK        LoRA (Keras's enable_lora) on the Dense layers of\n"
    "                   --lora-layers: their kernels frozen, rank-RANK adapters\n"
    "                   trained; the saved model holds the merged kernels\n"
    "--lora-alpha A     the adapters' scale is A / RANK, A > 0 (Keras's\n"
    "                   lora_alpha; default RANK)\n"
    "--lora-layers PREFIX  the Dense layers whose names start with PREFIX; may\n"
    "                   be repeated; each must match a Dense layer\n";

int cli_lora_take(const char *name, const char *v, cli_args *a)
{
    char *end = NULL;
    errno = 0;
    if (strcmp(name, "--lora") == 0) {
        const long long n = strtoll(v, &end, 10);
        if (end == v || *end || errno || n < 1 || n > INT32_MAX)
            return cli_usage("--lora needs a whole number >= 1, not '%s'", v), 0;
        a->lora_rank = (int32_t)n;
        return 1;
    }
    if (strcmp(name, "--lora-alpha") == 0) {
        const double x = strtod(v, &end);
        if (end == v || *end || errno || !isfinite(x) || x <= 0.0 || x > 3.4e38)
            return cli_usage("--lora-alpha needs a finite number > 0, not '%s'", v), 0;
        a->lora_alpha = (float)x;
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
    if (!(a->given & CLI_LORA))
        return 1;
    if (a->lora_rank == 0)
        return cli_usage("--lora-alpha and --lora-layers need --lora RANK"), 0;
    if (a->n_lora_layers == 0)
        return cli_usage("--lora needs --lora-layers PREFIX, the Dense layers it adapts"), 0;
    return 1;
}

int cli_lora_apply(kiln_context *ctx, kiln_model *m, const cli_args *a)
{
    int32_t n = 0;
    kiln_model_layer_count(m, &n);
    for (int p = 0; p < a->n_lora_layers; p++) {
        const size_t len = strlen(a->lora_layers[p]);
        int matched = 0;
        for (int32_t i = 0; i < n; i++) {
            kiln_layer_info info = {.struct_size = sizeof info};
            kiln_status st = kiln_model_layer_info(m, i, &info);
            if (st == KILN_OK && strncmp(info.name, a->lora_layers[p], len) == 0 &&
                strcmp(info.kind, "dense") == 0) {
                st = kiln_model_enable_lora(m, info.name, a->lora_rank, a->lora_alpha);
                matched++;
            }
            if (st != KILN_OK)
                return cli_failed(ctx, a->command, st);
        }
        if (!matched)
            return cli_refuse(a->command, KILN_ERROR_INVALID_ARGUMENT, "--lora-layers %s "
                              "matches no Dense layer of %s (kiln summary lists them)",
                              a->lora_layers[p], a->paths[0]);
        printf("LoRA rank %d on %d Dense layer(s) named %s...\n", (int)a->lora_rank, matched,
               a->lora_layers[p]);
    }
    return 0;
}
