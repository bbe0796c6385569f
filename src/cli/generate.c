/* `hp generate CKPT [--prompt TEXT]...`: sample text from a checkpoint, with a KV cache (default)
 * or by recomputing the whole window for every token (--no-cache), several sequences at once. */
#include "cli/cli.h"

#include "hp/generate.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_PROMPTS 256

static const char *usage = "usage: hp generate CKPT [--prompt TEXT]... [--batch N] [--tokens N] [--temp T] "
                           "[--top-k K] [--top-p P] [--seed S] [--no-cache] [--stats] [--strategy RUN.yaml]\n";

int hp_cli_generate(int argc, char **argv) {
    const char *ckpt = NULL, *prompts[MAX_PROMPTS], *strategy = NULL;
    int n_prompts = 0;
    int64_t tokens = 200, top_k = 40, batch = 0;
    double temp = 0.8, top_p = 1.0;
    uint64_t seed = 1;
    bool no_cache = false, stats = false;
    for (int i = 0; i < argc; i++) {
        const char *o = argv[i];
        bool takes = !strcmp(o, "--prompt") || !strcmp(o, "--tokens") || !strcmp(o, "--temp") || !strcmp(o, "--top-k") ||
                     !strcmp(o, "--seed") || !strcmp(o, "--top-p") || !strcmp(o, "--batch") ||
                     !strcmp(o, "--strategy");
        if (takes && !hp_cli_has_value(argc, argv, i)) return 2;
        if (!strcmp(o, "--prompt")) {
            if (n_prompts == MAX_PROMPTS) {
                fprintf(stderr, "hp: error: more than %d --prompt options\n", MAX_PROMPTS);
                return 2;
            }
            prompts[n_prompts++] = argv[++i];
        } else if (!strcmp(o, "--tokens")) {
            if (!hp_cli_int(o, argv[++i], 0, INT32_MAX, &tokens)) return 2;
        } else if (!strcmp(o, "--temp")) {
            if (!hp_cli_double(o, argv[++i], 0.0, 1e6, &temp)) return 2;
        } else if (!strcmp(o, "--top-k")) {
            if (!hp_cli_int(o, argv[++i], 0, INT32_MAX, &top_k)) return 2;
        } else if (!strcmp(o, "--top-p")) {
            if (!hp_cli_double(o, argv[++i], 1e-9, 1.0, &top_p)) return 2;
        } else if (!strcmp(o, "--batch")) {
            if (!hp_cli_int(o, argv[++i], 1, 4096, &batch)) return 2;
        } else if (!strcmp(o, "--seed")) {
            if (!hp_cli_u64(o, argv[++i], &seed)) return 2;
        } else if (!strcmp(o, "--strategy")) {
            strategy = argv[++i];
        } else if (!strcmp(o, "--no-cache")) {
            no_cache = true;
        } else if (!strcmp(o, "--stats")) {
            stats = true;
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
        fputs(usage, stderr);
        return 2;
    }
    if (n_prompts == 0) prompts[n_prompts++] = "";
    hp_generate_text_opts go = {.batch = (int)batch, .use_cache = !no_cache, .gen = HP_GENERATE_OPTS_DEFAULT};
    go.gen.max_new_tokens = (int)tokens;
    go.gen.temperature = (float)temp;
    go.gen.top_k = (int)top_k;
    go.gen.top_p = (float)top_p;
    go.gen.seed = seed;
    int n_seq = (int)batch > n_prompts ? (int)batch : n_prompts;
    /* --strategy: the strategy section of a run config, tensor parallelism over the MPI ranks */
    hp_run_config cfg;
    hp_comm *world = NULL;
    bool mpi = false, lead = true, have_cfg = false;
    hp_status st = HP_STATUS_OK;
    if (strategy) {
        st = hp_run_config_load(strategy, &cfg);
        if (st != HP_STATUS_OK) return hp_cli_fail(st, strategy);
        have_cfg = true;
        if (!cfg.strategy.present) {
            hp_run_config_free(&cfg);
            fprintf(stderr, "hp: error: %s has no strategy: section for --strategy\n", strategy);
            return 2;
        }
        go.strategy = &cfg.strategy;
        st = hp_cli_world(&world, &mpi);
        if (st != HP_STATUS_OK) {
            hp_run_config_free(&cfg);
            return hp_cli_fail(st, "starting MPI");
        }
        go.world = world;
        if (world && hp_comm_size(world) > 1) {
            hp_cli_rank = hp_comm_rank(world);
            lead = hp_cli_rank == 0;
        }
    }
    char **texts = calloc((size_t)n_seq, sizeof *texts);
    hp_generator_stats gs;
    int rc = 0;
    if (!texts) st = HP_STATUS_OUT_OF_MEMORY;
    if (st == HP_STATUS_OK) st = hp_generate_checkpoint(ckpt, prompts, n_prompts, &go, texts, &gs);
    if (st != HP_STATUS_OK) rc = hp_cli_fail(st, ckpt);
    for (int j = 0; texts && j < n_seq; j++) {
        if (rc == 0 && lead && n_seq > 1) printf("=== sequence %d ===\n", j);
        if (rc == 0 && lead) printf("%s\n", texts[j]);
        free(texts[j]);
    }
    free(texts);
    if (rc == 0 && lead && stats) {
        double secs = gs.prefill_seconds + gs.decode_seconds;
        fprintf(stderr, "generate: %d sequences x %lld tokens, %s: prefill %.3f s (%lld runs), decode %.3f s "
                "(%lld runs), %.1f tokens/s, KV cache %zu bytes%s\n", n_seq, (long long)tokens,
                no_cache ? "recomputed (no cache)" : "KV cache", gs.prefill_seconds, (long long)gs.prefill_runs,
                gs.decode_seconds, (long long)gs.decode_runs, secs > 0 ? (double)gs.tokens / secs : 0.0,
                gs.cache_bytes, strategy ? " on this rank" : "");
    }
    fflush(stdout);
    if (have_cfg) {
        hp_cli_world_end(world, mpi, rc);
        hp_run_config_free(&cfg);
    }
    return rc;
}
