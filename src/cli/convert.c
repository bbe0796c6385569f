/* `hp convert --from-hf DIR -o RUN_DIR` and `hp convert --to-hf CKPT -o DIR`: Hugging Face
 * checkpoints in and out (hp/hf.h). */
#include "cli/cli.h"

#include "hp/hf.h"

#include <stdio.h>
#include <string.h>

static void usage(FILE *f) {
    fprintf(f, "usage: hp convert --from-hf HF_DIR -o RUN_DIR   import a Hugging Face GPT-2, Llama or Mixtral checkpoint\n"
               "       hp convert --to-hf CKPT -o HF_DIR        export a checkpoint to Hugging Face's layout\n");
}

static void describe(const hp_hf_arch *a, int64_t params) {
    if (a->family == HP_HF_FAMILY_GPT2)
        printf("  %s: %lld layers, %lld heads, width %lld, context %lld, vocab %lld, %s head, %.2fM parameters\n",
               a->model_type, (long long)a->layers, (long long)a->heads, (long long)a->width, (long long)a->context,
               (long long)a->vocab, a->tied_head ? "tied" : "untied", (double)params / 1e6);
    else {
        char mlp[96];
        if (a->experts > 0)
            snprintf(mlp, sizeof mlp, "%lld experts of width %lld (%lld per token)", (long long)a->experts,
                     (long long)a->ffn_width, (long long)a->top_k);
        else
            snprintf(mlp, sizeof mlp, "MLP %lld", (long long)a->ffn_width);
        printf("  %s: %lld layers, %lld heads (%lld key/value), width %lld, %s, context %lld, vocab %lld, "
               "%s head, %.2fM parameters\n",
               a->model_type, (long long)a->layers, (long long)a->heads, (long long)a->kv_heads, (long long)a->width,
               mlp, (long long)a->context, (long long)a->vocab, a->tied_head ? "tied" : "untied", (double)params / 1e6);
    }
}

static void list_copied(int n, char (*names)[32]) {
    if (!n) return;
    printf("  copied");
    for (int i = 0; i < n; i++) printf(" %s", names[i]);
    printf("\n");
}

int hp_cli_convert(int argc, char **argv) {
    const char *from = NULL, *to = NULL, *out = NULL;
    for (int i = 0; i < argc; i++) {
        const char *o = argv[i];
        bool takes = !strcmp(o, "--from-hf") || !strcmp(o, "--to-hf") || !strcmp(o, "-o");
        if (takes && !hp_cli_has_value(argc, argv, i)) return 2;
        if (!strcmp(o, "--from-hf"))
            from = argv[++i];
        else if (!strcmp(o, "--to-hf"))
            to = argv[++i];
        else if (!strcmp(o, "-o"))
            out = argv[++i];
        else if (!strcmp(o, "-h") || !strcmp(o, "--help")) {
            usage(stdout);
            return 0;
        } else {
            fprintf(stderr, "hp: error: unexpected argument '%s' for convert\n", o);
            usage(stderr);
            return 2;
        }
    }
    if (!out || !!from == !!to) {
        usage(stderr);
        return 2;
    }
    if (from) {
        hp_hf_import_info in;
        hp_status st = hp_hf_import(from, out, &in);
        if (st != HP_STATUS_OK) return hp_cli_fail(st, "convert --from-hf");
        printf("imported %s into %s\n", from, in.step_dir);
        describe(&in.arch, in.params);
        list_copied(in.n_copied, in.copied);
        if (in.tokenizer_note[0])
            printf("  the tokenizer is kept in %s/hf_tokenizer/ and runs use bytes meanwhile: %s\n", out,
                   in.tokenizer_note);
        printf("  run config %s (no optimizer state: fine-tuning starts AdamW's moments at zero)\n"
               "  fine-tune: hp train %s --resume    sample: hp generate %s\n",
               in.run_yaml, in.run_yaml, out);
        return 0;
    }
    hp_hf_export_info ex;
    hp_status st = hp_hf_export(to, out, &ex);
    if (st != HP_STATUS_OK) return hp_cli_fail(st, "convert --to-hf");
    printf("exported %s (step %lld) to %s (config.json, model.safetensors)\n", ex.step_dir, (long long)ex.step, out);
    describe(&ex.arch, ex.params);
    list_copied(ex.n_copied, ex.copied);
    return 0;
}
