/* `hp generate CKPT --prompt TEXT`: sample text from a checkpoint. */
#include "cli/cli.h"

#include "hp/train.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int hp_cli_generate(int argc, char **argv) {
    const char *ckpt = NULL, *prompt = "";
    long tokens = 200, top_k = 40;
    double temp = 0.8;
    unsigned long long seed = 1;
    for (int i = 0; i < argc; i++) {
        if (!strcmp(argv[i], "--prompt") && i + 1 < argc)
            prompt = argv[++i];
        else if (!strcmp(argv[i], "--tokens") && i + 1 < argc)
            tokens = strtol(argv[++i], NULL, 10);
        else if (!strcmp(argv[i], "--temp") && i + 1 < argc)
            temp = strtod(argv[++i], NULL);
        else if (!strcmp(argv[i], "--top-k") && i + 1 < argc)
            top_k = strtol(argv[++i], NULL, 10);
        else if (!strcmp(argv[i], "--seed") && i + 1 < argc)
            seed = strtoull(argv[++i], NULL, 10);
        else if (argv[i][0] == '-') {
            fprintf(stderr, "hp: error: unknown option '%s' for generate\n", argv[i]);
            return 2;
        } else
            ckpt = argv[i];
    }
    if (!ckpt || tokens < 0) {
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
