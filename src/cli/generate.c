/* `hp generate CKPT --prompt TEXT`: sample text from a checkpoint. */
#include "cli/cli.h"

#include "hp/train.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int hp_cli_generate(int argc, char **argv) {
    const char *ckpt = NULL, *prompt = "";
    int64_t tokens = 200, top_k = 40;
    double temp = 0.8;
    uint64_t seed = 1;
    for (int i = 0; i < argc; i++) {
        const char *o = argv[i];
        bool takes = !strcmp(o, "--prompt") || !strcmp(o, "--tokens") || !strcmp(o, "--temp") || !strcmp(o, "--top-k") ||
                     !strcmp(o, "--seed");
        if (takes && !hp_cli_has_value(argc, argv, i)) return 2;
        if (!strcmp(o, "--prompt"))
            prompt = argv[++i];
        else if (!strcmp(o, "--tokens")) {
            if (!hp_cli_int(o, argv[++i], 0, INT32_MAX, &tokens)) return 2;
        } else if (!strcmp(o, "--temp")) {
            if (!hp_cli_double(o, argv[++i], 0.0, 1e6, &temp)) return 2;
        } else if (!strcmp(o, "--top-k")) {
            if (!hp_cli_int(o, argv[++i], 0, INT32_MAX, &top_k)) return 2;
        } else if (!strcmp(o, "--seed")) {
            if (!hp_cli_u64(o, argv[++i], &seed)) return 2;
        } else if (o[0] == '-') {
            fprintf(stderr, "hp: error: unknown option '%s' for generate\n", o);
            return 2;
        } else if (!ckpt) {
            ckpt = o;
        } else {
            fprintf(stderr, "hp: error: unexpected argument '%s'\n", o);
            return 2;
        }
    }
    if (!ckpt) {
        fprintf(stderr, "usage: hp generate CKPT [--prompt TEXT] [--tokens N] [--temp T] [--top-k K] [--seed S]\n");
        return 2;
    }
    char *text = NULL;
    hp_status st = hp_generate_from_checkpoint(ckpt, prompt, (int)tokens, (float)temp, (int)top_k, seed, &text);
    if (st != HP_STATUS_OK) return hp_cli_fail(st, ckpt);
    printf("%s\n", text);
    free(text);
    return 0;
}
