/* `hp eval CKPT [--data FILE] [--batch B] [--tokenizer T] [--json]`: loss, perplexity and bits per byte
 * of a checkpoint over the run's whole held-out split or a file (hp/eval.h); under mpirun the
 * windows are dealt to the ranks and rank 0 prints. */
#include "cli/cli.h"

#include "hp/eval.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* s as a JSON string body (quotes and backslashes escaped, control bytes as \u00XX). */
static void json_str(FILE *f, const char *s) {
    fputc('"', f);
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\') fprintf(f, "\\%c", c);
        else if (c < 0x20) fprintf(f, "\\u%04x", c);
        else fputc(c, f);
    }
    fputc('"', f);
}

static void print_json(FILE *f, const hp_eval_result *r, int ranks) {
    fprintf(f, "{\"checkpoint\": ");
    json_str(f, r->step_dir);
    fprintf(f, ", \"step\": %lld, \"data\": ", (long long)r->step);
    json_str(f, r->source);
    fprintf(f, ", \"split\": \"%s\"", r->held_out ? "val" : "file");
    if (r->shards) fprintf(f, ", \"shards\": true");
    else if (r->held_out) fprintf(f, ", \"val_fraction\": %g", r->val_fraction);
    fprintf(f, ", \"tokenizer\": \"%s\", \"loss\": %.6f, \"perplexity\": %.6f, \"bpb\": %.6f, \"nats\": %.6f, "
               "\"tokens\": %lld, \"bytes\": %lld, \"windows\": %lld, \"context\": %lld, \"batch\": %lld, "
               "\"ranks\": %d, \"seconds\": %.3f}\n",
            r->tokenizer, r->loss, r->perplexity, r->bpb, r->nats, (long long)r->tokens, (long long)r->bytes,
            (long long)r->windows, (long long)r->context, (long long)r->batch, ranks, r->seconds);
}

int hp_cli_eval(int argc, char **argv) {
    const char *ckpt = NULL;
    hp_eval_opts o = HP_EVAL_OPTS_INIT;
    bool json = false;
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        bool takes = !strcmp(a, "--data") || !strcmp(a, "--batch") || !strcmp(a, "--tokenizer");
        if (takes && !hp_cli_has_value(argc, argv, i)) return 2;
        if (!strcmp(a, "--data"))
            o.data = argv[++i];
        else if (!strcmp(a, "--tokenizer"))
            o.tokenizer = argv[++i];
        else if (!strcmp(a, "--batch")) {
            if (!hp_cli_int(a, argv[++i], 1, 1 << 20, &o.batch)) return 2;
        } else if (!strcmp(a, "--json"))
            json = true;
        else if (a[0] == '-') {
            fprintf(stderr, "hp: error: unknown option '%s' for eval\n", a);
            return 2;
        } else if (!ckpt)
            ckpt = a;
        else {
            fprintf(stderr, "hp: error: unexpected argument '%s'\n", a);
            return 2;
        }
    }
    if (!ckpt) {
        fprintf(stderr, "usage: hp eval CKPT [--data FILE] [--batch B] [--tokenizer T] [--json]\n");
        return 2;
    }
    hp_comm *world = NULL;
    bool mpi = false;
    hp_status st = hp_cli_world(&world, &mpi);
    if (st != HP_STATUS_OK) return hp_cli_fail(st, "starting MPI");
    int ranks = world ? hp_comm_size(world) : 1;
    bool lead = true;
    if (ranks > 1) {
        hp_cli_rank = hp_comm_rank(world);
        lead = hp_cli_rank == 0;
    }
    o.world = ranks > 1 ? world : NULL;
    hp_eval_result r;
    st = hp_eval_checkpoint(ckpt, &o, &r);
    int rc = 0;
    if (st != HP_STATUS_OK) {
        rc = hp_cli_fail(st, "eval");
    } else if (lead && json) {
        print_json(stdout, &r, ranks);
    } else if (lead) {
        printf("checkpoint: %s (step %lld)\n", r.step_dir, (long long)r.step);
        if (r.shards)
            printf("data: %s, the shard set's validation split\n", r.source);
        else if (r.held_out)
            printf("data: %s, held-out split (last %g of the corpus)\n", r.source, r.val_fraction);
        else
            printf("data: %s (whole file)\n", r.source);
        printf("tokens: %lld targets, %lld bytes, tokenizer %s | %lld windows of %lld (stride %lld), batch %lld, %d "
               "rank%s, %.2f s\n", (long long)r.tokens, (long long)r.bytes, r.tokenizer, (long long)r.windows,
               (long long)r.context, (long long)r.context, (long long)r.batch, ranks, ranks == 1 ? "" : "s", r.seconds);
        printf("loss %.4f nats/token | perplexity %.3f | %.4f bits/byte\n", r.loss, r.perplexity, r.bpb);
    }
    fflush(stdout);
    /* every rank returned the same verdict (hp_eval_checkpoint combines the ranks' failures) */
    hp_cli_world_end(world, mpi, 0);
    return rc;
}
