/* `hp train RUN.yaml`: progress lines, validation, metrics JSON lines, checkpoints, a sample. */
#include "cli/cli.h"

#include "hp/checkpoint.h"
#include "hp/config.h"
#include "hp/core.h"
#include "hp/train.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void fmt_duration(double s, char *buf, size_t n) {
    long t = (long)(s + 0.5);
    if (t >= 3600)
        snprintf(buf, n, "%ldh%02ldm", t / 3600, (t / 60) % 60);
    else if (t >= 60)
        snprintf(buf, n, "%ldm%02lds", t / 60, t % 60);
    else
        snprintf(buf, n, "%lds", t);
}

int hp_cli_train(int argc, char **argv) {
    const char *config = NULL, *metrics_path = NULL, *resume = NULL;
    bool want_resume = false, want_overwrite = false;
    long long steps_override = 0;
    for (int i = 0; i < argc; i++) {
        if (!strcmp(argv[i], "--metrics") && i + 1 < argc)
            metrics_path = argv[++i];
        else if (!strcmp(argv[i], "--resume")) {
            want_resume = true;
            if (i + 1 < argc && argv[i + 1][0] != '-') resume = argv[++i];
        } else if (!strcmp(argv[i], "--overwrite")) {
            want_overwrite = true;
        } else if (!strcmp(argv[i], "--steps") && i + 1 < argc) {
            char *end;
            steps_override = strtoll(argv[++i], &end, 10);
            if (*end || steps_override < 1) {
                fprintf(stderr, "hp: error: --steps wants a positive integer, got '%s'\n", argv[i]);
                return 2;
            }
        } else if (argv[i][0] == '-') {
            fprintf(stderr, "hp: error: unknown option '%s' for train\n", argv[i]);
            return 2;
        } else if (!config)
            config = argv[i];
        else {
            fprintf(stderr, "hp: error: unexpected argument '%s'\n", argv[i]);
            return 2;
        }
    }
    if (!config) {
        fprintf(stderr, "usage: hp train RUN.yaml [--metrics FILE] [--resume [CKPT] | --overwrite] [--steps N]\n");
        return 2;
    }
    hp_run_config cfg;
    hp_status st = hp_run_config_load(config, &cfg);
    if (st != HP_STATUS_OK) return hp_cli_fail(st, NULL);
    if (steps_override) cfg.train.steps = steps_override;

    FILE *metrics = NULL;
    hp_trainer *t = NULL;
    hp_comm *world = NULL;
    bool mpi = false;
    int rc = 1;
    st = hp_cli_world(&world, &mpi);
    if (st != HP_STATUS_OK) {
        hp_cli_fail(st, "starting MPI");
        goto out;
    }
    bool lead = true; /* rank 0 reports; the others stay quiet unless they fail */
    if (world && hp_comm_size(world) > 1) {
        hp_cli_rank = hp_comm_rank(world);
        hp_log_set_rank(hp_cli_rank);
        lead = hp_cli_rank == 0;
    }
    st = hp_trainer_new_dist(&cfg, world, &t);
    if (st != HP_STATUS_OK) {
        hp_cli_fail(st, config);
        goto out;
    }
    if (want_resume) {
        const char *from = resume ? resume : cfg.train.checkpoint_dir;
        st = hp_trainer_resume(t, from);
        if (st != HP_STATUS_OK) {
            hp_cli_fail(st, "resume");
            goto out;
        }
        if (lead) fprintf(stderr, "resumed from %s at step %lld\n", from, (long long)hp_trainer_steps_done(t));
    }
    /* The run-directory guard, before any step: a new run does not write into another run's
     * checkpoints, and a resumed one does not move `latest` backwards. Only rank 0 deletes. */
    hp_run_dir_mode mode = want_overwrite ? HP_RUN_DIR_MODE_OVERWRITE
                           : want_resume  ? HP_RUN_DIR_MODE_RESUME
                                          : HP_RUN_DIR_MODE_FRESH;
    if (lead || mode != HP_RUN_DIR_MODE_OVERWRITE) {
        st = hp_run_dir_prepare(cfg.train.checkpoint_dir, mode, hp_trainer_steps_done(t));
        if (st != HP_STATUS_OK) {
            hp_cli_fail(st, NULL);
            goto out;
        }
    }
    if (metrics_path && lead) {
        metrics = fopen(metrics_path, want_resume ? "a" : "w");
        if (!metrics) {
            fprintf(stderr, "hp: error: cannot open metrics file '%s'\n", metrics_path);
            goto out;
        }
    }
    if (lead)
        fprintf(stderr,
            "model: %lld layers, %lld heads, width %lld, context %lld, vocab %lld | batch %lld | steps %lld\n"
            "data: %s | unigram entropy %.3f nats/token\n",
            (long long)cfg.model.layers, (long long)cfg.model.heads, (long long)cfg.model.width,
            (long long)cfg.model.context, (long long)cfg.model.vocab, (long long)cfg.train.batch,
            (long long)cfg.train.steps, cfg.data.corpus, hp_trainer_unigram_entropy(t));
    if (lead && world && hp_comm_size(world) > 1) {
        const hp_partition *part = hp_trainer_partition(t);
        char mb[128];
        fprintf(stderr, "strategy: %d ranks, mesh %s | %d redistributions, %.2f MiB received per rank per step\n",
                hp_comm_size(world), hp_mesh_str(hp_trainer_mesh(t), mb, sizeof mb), hp_partition_n_collectives(part),
                (double)hp_partition_bytes(part) / (1 << 20));
    }
    double t_start = hp_now_seconds();
    int64_t first = hp_trainer_steps_done(t);
    double last_val = -1;
    while (hp_trainer_steps_done(t) < cfg.train.steps) {
        hp_step_metrics m;
        st = hp_trainer_step(t, &m);
        if (st != HP_STATUS_OK) {
            hp_cli_fail(st, "training step");
            goto out;
        }
        double val = -1;
        bool last = m.step == cfg.train.steps;
        if (cfg.train.eval_every > 0 && (m.step % cfg.train.eval_every == 0 || last)) {
            st = hp_trainer_eval(t, &val);
            if (st != HP_STATUS_OK) {
                hp_cli_fail(st, "evaluation");
                goto out;
            }
            last_val = val;
        }
        double elapsed = hp_now_seconds() - t_start;
        double per_step = elapsed / (double)(m.step - first);
        if (lead && cfg.train.log_every > 0 && (m.step % cfg.train.log_every == 0 || last || m.step == first + 1)) {
            char el[32], eta[32];
            fmt_duration(elapsed, el, sizeof el);
            fmt_duration(per_step * (double)(cfg.train.steps - m.step), eta, sizeof eta);
            fprintf(stderr, "step %6lld/%lld | loss %.4f | lr %.2e | gnorm %.3f | %8.0f tok/s | elapsed %s | ETA %s\n",
                    (long long)m.step, (long long)cfg.train.steps, m.loss, m.lr, m.grad_norm, m.tokens_per_s, el, eta);
        }
        if (lead && val >= 0) fprintf(stderr, "step %6lld | val loss %.4f\n", (long long)m.step, val);
        if (metrics) {
            fprintf(metrics,
                    "{\"step\": %lld, \"loss\": %.6f, \"lr\": %.6e, \"grad_norm\": %.6f, \"step_s\": %.6f, "
                    "\"tokens_per_s\": %.1f",
                    (long long)m.step, m.loss, m.lr, m.grad_norm, m.seconds, m.tokens_per_s);
            if (val >= 0) fprintf(metrics, ", \"val_loss\": %.6f", val);
            fprintf(metrics, "}\n");
            fflush(metrics);
        }
        if ((cfg.train.checkpoint_every > 0 && m.step % cfg.train.checkpoint_every == 0) || last) {
            char path[4096];
            st = hp_trainer_save(t, path, sizeof path);
            if (st != HP_STATUS_OK) {
                hp_cli_fail(st, "checkpoint");
                goto out;
            }
            if (lead) fprintf(stderr, "step %6lld | checkpoint %s\n", (long long)m.step, path);
        }
        if (cfg.train.sample_every > 0 && m.step % cfg.train.sample_every == 0 && !last) {
            char *text = NULL;
            st = hp_trainer_sample(t, cfg.train.sample_prompt, (int)cfg.train.sample_tokens, 0.8f, 40,
                                   (uint64_t)m.step, &text);
            if (st != HP_STATUS_OK) {
                hp_cli_fail(st, "sampling");
                goto out;
            }
            if (lead) fprintf(stderr, "--- sample at step %lld ---\n%s\n---\n", (long long)m.step, text);
            free(text);
        }
    }
    if (cfg.train.sample_tokens > 0) {
        char *text = NULL;
        st = hp_trainer_sample(t, cfg.train.sample_prompt, (int)cfg.train.sample_tokens, 0.8f, 40,
                               (uint64_t)cfg.train.seed, &text);
        if (st != HP_STATUS_OK) {
            hp_cli_fail(st, "sampling");
            goto out;
        }
        if (lead) printf("--- sample ---\n%s\n", text);
        free(text);
    }
    if (lead) hp_trainer_report_memory(t, stderr);
    if (lead && last_val >= 0)
        fprintf(stderr, "done: final val loss %.4f (unigram entropy %.4f)\n", last_val, hp_trainer_unigram_entropy(t));
    rc = 0;
out:
    if (metrics) fclose(metrics);
    hp_trainer_free(t);
    hp_run_config_free(&cfg);
    hp_cli_world_end(world, mpi, rc);
    return rc;
}
