/*
 * `hp rl RUN.yaml [--steps N] [--verify-sync] [--metrics FILE.jsonl] [--quiet]`: GRPO under one
 * controller (hp/rl.h). The controller prints one line per step and a JSON line per step to
 * --metrics; the other ranks print only errors.
 */
#include "cli/cli.h"
#include "hp/rl.h"

#include <stdio.h>
#include <string.h>

static int usage_rl(void) {
    fprintf(stderr, "usage: hp rl RUN.yaml [--steps N] [--verify-sync] [--metrics FILE.jsonl] [--quiet]\n");
    return 2;
}

int hp_cli_rl(int argc, char **argv) {
    const char *path = NULL, *metrics = NULL;
    int64_t steps = 0;
    bool quiet = false;
    hp_rl_opts opts = HP_RL_OPTS_DEFAULT;
    for (int i = 0; i < argc; i++) {
        if (!strcmp(argv[i], "--steps")) {
            if (!hp_cli_has_value(argc, argv, i) || !hp_cli_int("--steps", argv[++i], 1, (int64_t)1 << 40, &steps)) return 2;
        } else if (!strcmp(argv[i], "--metrics")) {
            if (!hp_cli_has_value(argc, argv, i)) return 2;
            metrics = argv[++i];
        } else if (!strcmp(argv[i], "--verify-sync")) opts.verify_sync = true;
        else if (!strcmp(argv[i], "--quiet")) quiet = true;
        else if (argv[i][0] == '-' || path) return usage_rl();
        else path = argv[i];
    }
    if (!path) return usage_rl();
    hp_comm *world = NULL;
    bool mpi = false;
    hp_status st = hp_cli_world(&world, &mpi);
    if (st != HP_STATUS_OK) return hp_cli_fail(st, "starting MPI");
    hp_run_config cfg;
    int rc = 0;
    hp_rl *rl = NULL;
    FILE *mf = NULL;
    st = hp_run_config_load(path, &cfg);
    if (st != HP_STATUS_OK) {
        rc = hp_cli_fail(st, "loading the run config");
        goto end;
    }
    if (!cfg.rl.present) {
        fprintf(stderr, "hp: error: %s has no rl: section (the task, group size and steps of a GRPO job; see "
                "examples/rl_reverse.yaml)\n", path);
        rc = 2;
        goto end_cfg;
    }
    if (steps > 0) cfg.rl.steps = steps;
    st = hp_rl_new(&cfg, world, &opts, &rl);
    if (st != HP_STATUS_OK) {
        rc = hp_cli_fail(st, "setting up the RL job");
        goto end_cfg;
    }
    bool ctrl = hp_rl_is_controller(rl);
    if (ctrl && metrics && !(mf = fopen(metrics, "w"))) {
        fprintf(stderr, "hp: error: cannot write %s\n", metrics);
        rc = 1;
        goto end_rl;
    }
    double acc0 = 0, acc1 = 0;
    if ((st = hp_rl_eval(rl, &acc0)) != HP_STATUS_OK) {
        rc = hp_cli_fail(st, "evaluating the start");
        goto end_rl;
    }
    if (ctrl)
        printf("rl: %s, task %s, %lld prompts x %lld samples per step, %lld update%s each, off_policy %lld; greedy "
               "accuracy at start %.3f\n", hp_rl_mode(rl), cfg.rl.task, (long long)cfg.rl.prompts,
               (long long)cfg.rl.group_size, (long long)cfg.rl.iterations, cfg.rl.iterations == 1 ? "" : "s",
               (long long)cfg.rl.off_policy, acc0);
    double total = 0, gen = 0, train = 0, sync = 0;
    int64_t bytes = 0, samples = 0, checked = 0, mismatched = 0;
    for (int64_t i = 0; i < cfg.rl.steps; i++) {
        hp_rl_step_metrics m;
        if ((st = hp_rl_step(rl, &m)) != HP_STATUS_OK) {
            rc = hp_cli_fail(st, "running an RL step");
            goto end_rl;
        }
        if (!ctrl) continue;
        total += m.seconds, gen += m.gen_seconds, train += m.train_seconds, sync += m.sync_seconds;
        bytes += m.sync_bytes, samples += m.samples, checked += m.sync_checked, mismatched += m.sync_mismatch;
        if (!quiet)
            printf("step %5lld | reward %.3f | loss %+.4f | kl %.4f | grad %.3f | %.3f s (gen %.3f, wait %.3f, train %.3f, "
                   "sync %.4f s %lld B)%s\n", (long long)m.step, m.reward_mean, m.loss, m.kl, m.grad_norm, m.seconds,
                   m.gen_seconds, m.wait_seconds, m.train_seconds, m.sync_seconds, (long long)m.sync_bytes,
                   m.sync_checked ? (m.sync_mismatch ? " SYNC MISMATCH" : " sync verified") : "");
        if (mf)
            fprintf(mf, "{\"step\": %lld, \"reward\": %.6f, \"loss\": %.6g, \"kl\": %.6g, \"grad_norm\": %.6g, "
                    "\"seconds\": %.6f, \"gen_seconds\": %.6f, \"wait_seconds\": %.6f, \"train_seconds\": %.6f, "
                    "\"sync_seconds\": %.6f, \"sync_bytes\": %lld, \"samples\": %lld, \"sync_checked\": %d, "
                    "\"sync_mismatch\": %d}\n", (long long)m.step, m.reward_mean, m.loss, m.kl, m.grad_norm, m.seconds,
                    m.gen_seconds, m.wait_seconds, m.train_seconds, m.sync_seconds, (long long)m.sync_bytes,
                    (long long)m.samples, m.sync_checked, m.sync_mismatch);
    }
    if ((st = hp_rl_eval(rl, &acc1)) != HP_STATUS_OK) {
        rc = hp_cli_fail(st, "evaluating the end");
        goto end_rl;
    }
    if (ctrl) {
        printf("rl: done: greedy accuracy %.3f -> %.3f; %.1f samples/s; time gen %.2f s, train %.2f s, sync %.3f s "
               "(%lld bytes)\n", acc0, acc1, total > 0 ? (double)samples / total : 0.0, gen, train, sync, (long long)bytes);
        if (opts.verify_sync) printf("rl: syncs verified: %lld parameters compared, %lld differ\n", (long long)checked,
                                     (long long)mismatched);
        if (mismatched) rc = 1;
    }
end_rl:
    if (mf) fflush(mf);
    hp_cli_world_fault(world, mpi, rc, st != HP_STATUS_OK, cfg.train.comm_timeout); /* before the job is freed */
    if (mf) fclose(mf);
    hp_rl_free(rl);
end_cfg:
    hp_run_config_free(&cfg);
end:
    hp_cli_world_end(world, mpi, rc);
    return rc;
}
