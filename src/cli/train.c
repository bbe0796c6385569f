/* `hp train RUN.yaml`: progress lines, validation, metrics JSON lines, checkpoints, a sample. */
#include "cli/cli.h"

#include "hp/backend.h"
#include "hp/checkpoint.h"
#include "hp/config.h"
#include "hp/run_dir.h"
#include "hp/core.h"
#include "hp/trace.h"
#include "hp/train.h"
#ifdef HP_HAVE_MPI
#include "hp/comm_mpi.h"
#endif

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static void fmt_duration(double s, char *buf, size_t n) {
    long t = (long)(s + 0.5);
    if (t >= 3600)
        snprintf(buf, n, "%ldh%02ldm", t / 3600, (t / 60) % 60);
    else if (t >= 60)
        snprintf(buf, n, "%ldm%02lds", t / 60, t % 60);
    else
        snprintf(buf, n, "%lds", t);
}

/* Whether any rank of `world` (NULL: this process alone) failed: every rank calls it with its own
 * status, and all then go on or stop together (no rank is left waiting in a collective). */
static bool any_failed(hp_comm *world, hp_status mine) {
    if (!world || hp_comm_size(world) < 2) return mine != HP_STATUS_OK;
    int32_t f = mine != HP_STATUS_OK, all = f;
    if (hp_comm_all_reduce(world, &f, &all, 1, HP_DTYPE_I32, HP_REDUCE_MAX) != HP_STATUS_OK) return true;
    return all != 0;
}

/* One metrics line; false (errno set) when it cannot be written: a full disk is an error, never
 * silence. */
static bool write_metrics(FILE *f, const hp_step_metrics *m, double val, const hp_val_coverage *vc) {
    /* a skipped step's NaN or Inf is written as null: JSON has no such numbers */
    char loss[32] = "null", gnorm[32] = "null";
    if (isfinite(m->loss)) snprintf(loss, sizeof loss, "%.6f", m->loss);
    if (isfinite(m->grad_norm)) snprintf(gnorm, sizeof gnorm, "%.6f", m->grad_norm);
    int n = fprintf(f, "{\"step\": %lld, \"loss\": %s, \"lr\": %.6e, \"grad_norm\": %s, \"step_s\": %.6f, "
                       "\"tokens_per_s\": %.1f", (long long)m->step, loss, m->lr, gnorm, m->seconds, m->tokens_per_s);
    if (n >= 0 && val >= 0)
        n = fprintf(f, ", \"val_loss\": %.6f, \"val_tokens\": %lld, \"val_coverage\": %.6f", val, (long long)vc->tokens,
                    vc->fraction);
    if (n >= 0 && val >= 0 && vc->bytes_per_token > 0)
        n = fprintf(f, ", \"val_bpb\": %.6f", val / (log(2.0) * vc->bytes_per_token));
    if (n >= 0 && m->skipped) n = fprintf(f, ", \"skipped\": true");
    if (n >= 0 && m->redone) n = fprintf(f, ", \"redone\": true");
    if (n >= 0 && m->skipped_total > 0) n = fprintf(f, ", \"skipped_steps\": %lld", (long long)m->skipped_total);
    if (n >= 0) n = fprintf(f, "}\n");
    return n >= 0 && fflush(f) == 0 && !ferror(f);
}

/* What the step loop's report of each settled step needs. */
typedef struct step_loop {
    const hp_run_config *cfg;
    hp_trainer *t;
    bool lead;
    FILE *metrics;
    const char *metrics_path;
    double t_start;
    int64_t first;   /* steps done before this run's first */
    double last_val; /* the last validation loss (-1: none yet) */
    hp_val_coverage vc;
} step_loop;

static bool every(int64_t k, int64_t step) { return k > 0 && step % k == 0; }

/* Reports step m as it asks: evaluation, the progress line, the metrics line, a checkpoint, a
 * sample. False after reporting an error. */
static bool report_step(step_loop *L, const hp_step_metrics *m) {
    const hp_run_config *cfg = L->cfg;
    hp_trainer *t = L->t;
    hp_status st;
    double val = -1;
    bool last = m->step == cfg->train.steps;
    if (cfg->train.eval_every > 0 && (every(cfg->train.eval_every, m->step) || last)) {
        st = hp_trainer_eval(t, &val);
        if (st != HP_STATUS_OK) {
            hp_cli_fail(st, "evaluation");
            return false;
        }
        L->last_val = val;
        hp_trainer_val_coverage(t, &L->vc); /* its bytes per token, known after the first evaluation */
    }
    double elapsed = hp_now_seconds() - L->t_start;
    double per_step = elapsed / (double)(m->step - L->first);
    if (L->lead && cfg->train.log_every > 0 && (m->step % cfg->train.log_every == 0 || last || m->step == L->first + 1)) {
        char el[32], eta[32];
        fmt_duration(elapsed, el, sizeof el);
        fmt_duration(per_step * (double)(cfg->train.steps - m->step), eta, sizeof eta);
        fprintf(stderr, "step %6lld/%lld | loss %.4f | lr %.2e | gnorm %.3f | %8.0f tok/s | elapsed %s | ETA %s\n",
                (long long)m->step, (long long)cfg->train.steps, m->loss, m->lr, m->grad_norm, m->tokens_per_s, el, eta);
    }
    if (L->lead && val >= 0)
        fprintf(stderr, "step %6lld | val loss %.4f over %lld windows = %lld tokens (%.1f%% of the val split) | "
                "%.4f bits/byte\n", (long long)m->step, val, (long long)L->vc.windows, (long long)L->vc.tokens,
                100 * L->vc.fraction, val / (log(2.0) * L->vc.bytes_per_token));
    if (L->lead && m->redone)
        fprintf(stderr, "step %6lld | post-validation: the check failed (%s): the update was redone as a synchronous "
                "step's\n", (long long)m->step, m->skipped ? "not finite" : "the clip scales");
    if (L->lead && m->skipped)
        fprintf(stderr, "step %6lld | skipped: loss %g, gradient norm %g (not finite; no update applied) | %lld in a "
                "row of at most %lld (train.skip_nonfinite), %lld skipped in all\n", (long long)m->step, m->loss,
                m->grad_norm, (long long)m->skipped_in_row, (long long)cfg->train.skip_nonfinite,
                (long long)m->skipped_total);
    if (L->metrics && !write_metrics(L->metrics, m, val, &L->vc)) {
        hp_cli_fail(hp_error(HP_STATUS_IO, "cannot write metrics file '%s' at step %lld: %s", L->metrics_path,
                             (long long)m->step, strerror(errno)), NULL);
        return false;
    }
    if (every(cfg->train.checkpoint_every, m->step) || last) {
        char path[4096];
        st = hp_trainer_save(t, path, sizeof path);
        if (st != HP_STATUS_OK) {
            hp_cli_fail(st, "checkpoint");
            return false;
        }
        if (L->lead) fprintf(stderr, "step %6lld | checkpoint %s\n", (long long)m->step, path);
    }
    if (every(cfg->train.sample_every, m->step) && !last) {
        char *text = NULL;
        st = hp_trainer_sample(t, cfg->train.sample_prompt, (int)cfg->train.sample_tokens, 0.8f, 40,
                               (uint64_t)m->step, &text);
        if (st != HP_STATUS_OK) {
            hp_cli_fail(st, "sampling");
            return false;
        }
        if (L->lead) fprintf(stderr, "--- sample at step %lld ---\n%s\n---\n", (long long)m->step, text);
        free(text);
    }
    return true;
}

int hp_cli_train(int argc, char **argv) {
    const char *config = NULL, *metrics_path = NULL, *resume = NULL, *trace_path = NULL;
    int64_t trace_capacity = 0;
    bool want_resume = false, want_overwrite = false, force = false, dry_run = false;
    int64_t steps_override = 0;
    for (int i = 0; i < argc; i++) {
        if (!strcmp(argv[i], "--metrics")) {
            if (!hp_cli_has_value(argc, argv, i)) return 2;
            metrics_path = argv[++i];
        } else if (!strcmp(argv[i], "--resume")) {
            want_resume = true;
            if (i + 1 < argc && argv[i + 1][0] != '-') resume = argv[++i];
        } else if (!strcmp(argv[i], "--trace")) {
            if (!hp_cli_has_value(argc, argv, i)) return 2;
            trace_path = argv[++i];
        } else if (!strcmp(argv[i], "--trace-capacity")) {
            if (!hp_cli_has_value(argc, argv, i) ||
                !hp_cli_int("--trace-capacity", argv[++i], 1, (int64_t)1 << 40, &trace_capacity))
                return 2;
        } else if (!strcmp(argv[i], "--overwrite")) {
            want_overwrite = true;
        } else if (!strcmp(argv[i], "--force")) {
            force = true;
        } else if (!strcmp(argv[i], "--dry-run")) {
            dry_run = true;
        } else if (!strcmp(argv[i], "--steps")) {
            /* train.steps' own range (hp/config.h) */
            if (!hp_cli_has_value(argc, argv, i) || !hp_cli_int("--steps", argv[++i], 1, (int64_t)1 << 62, &steps_override))
                return 2;
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
        fprintf(stderr, "usage: hp train RUN.yaml [--metrics FILE] [--resume [CKPT] | --overwrite] [--steps N] [--force] "
                        "[--dry-run]\n"
                        "                     [--trace FILE.json [--trace-capacity SPANS]]\n");
        return 2;
    }
    hp_run_config cfg;
    hp_status st = hp_run_config_load(config, &cfg);
    if (st != HP_STATUS_OK) return hp_cli_fail(st, NULL);
    if (steps_override) cfg.train.steps = steps_override;
    for (int i = 0; cfg.groups.present && i < cfg.groups.n_groups; i++)
        if (cfg.groups.groups[i].kind == HP_GROUP_KIND_ACTOR || cfg.groups.groups[i].kind == HP_GROUP_KIND_LEARNER) {
            fprintf(stderr, "hp: error: %s: groups.%s is of kind %s: an RL job runs with `hp rl %s`\n", config,
                    cfg.groups.groups[i].name, hp_group_kind_name(cfg.groups.groups[i].kind), config);
            hp_run_config_free(&cfg);
            return 2;
        }
    if (!strcmp(cfg.model.family, "multimodal")) return hp_cli_train_mm(&cfg, metrics_path, trace_path); /* train_mm.c */

    FILE *metrics = NULL;
    hp_trainer *t = NULL;
    hp_trace *trace = NULL;
    hp_comm *world = NULL;
    hp_run_dir_lock *lock = NULL;
    bool mpi = false, together = false; /* together: every rank stops with the same error (no abort) */
    int rc = 1;
    st = hp_cli_world(&world, &mpi);
    if (st != HP_STATUS_OK) {
        hp_cli_fail(st, "starting MPI");
        goto out;
    }
    /* train.comm_timeout from the first collective on (the lock's broadcast included) */
    if (world && (st = hp_comm_set_timeout(world, cfg.train.comm_timeout)) != HP_STATUS_OK) {
        hp_cli_fail(st, NULL);
        goto out;
    }
    bool lead = true; /* rank 0 reports; the others stay quiet unless they fail */
    if (world && hp_comm_size(world) > 1) {
        hp_cli_rank = hp_comm_rank(world);
        hp_log_set_rank(hp_cli_rank);
        lead = hp_cli_rank == 0;
    }
    if (cfg.groups.present) {
        /* HyperMPMD groups: checked against the world size first. Every rank reaches the same
         * verdict, so rank 0 alone reports it and no rank needs to abort the others. */
        st = hp_groups_config_check_world(&cfg.groups, world ? hp_comm_size(world) : 1);
        if (st != HP_STATUS_OK) {
            if (lead) hp_cli_fail(st, NULL);
            together = true;
            goto out;
        }
    }
    /* Before anything slow: the run directory is this run's alone (rank 0 locks it, every rank
     * learns the outcome), and every output path exists and is writable. */
    st = hp_run_dir_lock_acquire(cfg.train.checkpoint_dir, world, &lock);
    if (st != HP_STATUS_OK) {
        if (lead) hp_cli_fail(st, NULL);
        together = true;
        goto out;
    }
    if (lead && hp_run_dir_lock_removed(lock) > 0)
        fprintf(stderr, "run directory %s: removed %d temporary step director%s left by a save that did not finish\n",
                cfg.train.checkpoint_dir, hp_run_dir_lock_removed(lock), hp_run_dir_lock_removed(lock) == 1 ? "y" : "ies");
    st = HP_STATUS_OK;
    if (cfg.offload.present && cfg.offload.disk_dir[0]) st = hp_output_dir_prepare("offload.disk_dir", cfg.offload.disk_dir);
    if (st == HP_STATUS_OK && lead && metrics_path) st = hp_output_file_check("--metrics", metrics_path);
    if (st != HP_STATUS_OK) hp_cli_fail(st, NULL);
    if (any_failed(world, st)) {
        together = true;
        goto out;
    }
    /* Sizes against the machine, planned before anything large is allocated (--force: a warning). */
    if (hp_cli_check_memory(&cfg, world, force, lead) != HP_STATUS_OK) {
        together = true;
        goto out;
    }
    if (dry_run) {
        if (lead) fprintf(stderr, "dry run: stopping before the trainer is built (the config, the run directory, the output "
                              "paths and the memory plan were checked)\n");
        rc = 0;
        goto out;
    }
    hp_cli_ticker *tk = hp_cli_ticker_start("building the trainer (the corpus, the step's graphs and programs)", lead);
    st = hp_trainer_new_dist(&cfg, world, &t);
    hp_cli_ticker_stop(tk);
    if (st != HP_STATUS_OK) {
        hp_cli_fail(st, config);
        goto out;
    }
    if (want_resume) {
        const char *from = resume ? resume : cfg.train.checkpoint_dir;
        tk = hp_cli_ticker_start("loading the checkpoint", lead);
        st = hp_trainer_resume(t, from);
        hp_cli_ticker_stop(tk);
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
    if (trace_path) {
        /* Every rank records; the clocks are aligned now, and rank 0 writes the file at the end. */
        hp_trace_opts to = HP_TRACE_OPTS_DEFAULT;
        to.rank = world ? hp_comm_rank(world) : 0;
        to.capacity = (size_t)trace_capacity;
        st = hp_trace_new(&to, &trace);
        if (st == HP_STATUS_OK) st = hp_trace_sync(trace, world);
        if (st == HP_STATUS_OK) st = hp_trainer_set_trace(t, trace);
        if (st != HP_STATUS_OK) {
            hp_cli_fail(st, "trace");
            goto out;
        }
    }
    if (metrics_path && lead) {
        metrics = fopen(metrics_path, want_resume ? "a" : "w");
        if (!metrics) {
            fprintf(stderr, "hp: error: cannot open metrics file '%s': %s\n", metrics_path, strerror(errno));
            goto out;
        }
    }
    if (lead)
        fprintf(stderr,
            "model: %lld layers, %lld heads, width %lld, context %lld, vocab %lld | batch %lld | steps %lld | "
            "threads %d\n"
            "data: %s | unigram entropy %.3f nats/token\n",
            (long long)cfg.model.layers, (long long)cfg.model.heads, (long long)cfg.model.width,
            (long long)cfg.model.context, (long long)cfg.model.vocab, (long long)cfg.train.batch,
            (long long)cfg.train.steps, hp_backend_cpu_threads(), cfg.data.shards[0] ? cfg.data.shards : cfg.data.corpus,
            hp_trainer_unigram_entropy(t));
    if (lead && cfg.groups.present) {
        fprintf(stderr, "pipeline: %s over %d stages, %lld micro-batches of %lld rows, %lld chunk%s per stage\n",
                hp_pipeline_schedule_name(cfg.pipeline.schedule), cfg.groups.n_stages,
                (long long)cfg.pipeline.micro_batches, (long long)(cfg.train.batch / cfg.pipeline.micro_batches),
                (long long)cfg.pipeline.chunks, cfg.pipeline.chunks == 1 ? "" : "s");
    } else if (lead && world && hp_comm_size(world) > 1) {
        const hp_partition *part = hp_trainer_partition(t);
        char mb[128];
        fprintf(stderr, "strategy: %d ranks, mesh %s | %d redistributions, %.2f MiB received per rank per step\n",
                hp_comm_size(world), hp_mesh_str(hp_trainer_mesh(t), mb, sizeof mb), hp_partition_n_collectives(part),
                (double)hp_partition_bytes(part) / (1 << 20));
    }
    step_loop L = {.cfg = &cfg, .t = t, .lead = lead, .metrics = metrics, .metrics_path = metrics_path,
                   .t_start = hp_now_seconds(), .first = hp_trainer_steps_done(t), .last_val = -1};
    hp_trainer_val_coverage(t, &L.vc);
    while (hp_trainer_steps_done(t) < cfg.train.steps) {
        /* a post-validated pipeline step (pipeline.post_validate) is settled at once where the model
         * is read after it; the others' metrics come with the next step (hp_trainer_step_post) */
        int64_t next = hp_trainer_steps_done(t) + 1;
        bool settle = next == cfg.train.steps || every(cfg.train.eval_every, next) ||
                      every(cfg.train.checkpoint_every, next) || every(cfg.train.sample_every, next);
        hp_step_metrics ms[2];
        int nm = 0;
        st = hp_trainer_step_post(t, settle, ms, &nm);
        if (st != HP_STATUS_OK) {
            /* a non-finite step is seen by every rank alike (the loss and norm are replicated) */
            together = st == HP_STATUS_NONFINITE;
            if (lead || !together) hp_cli_fail(st, "training step");
            goto out;
        }
        for (int i = 0; i < nm; i++)
            if (!report_step(&L, &ms[i])) goto out;
    }
    double last_val = L.last_val;
    if (trace) { /* the final sample is not part of the trace */
        st = hp_trainer_set_trace(t, NULL);
        if (st == HP_STATUS_OK) st = hp_trace_write(trace, world, trace_path);
        if (st != HP_STATUS_OK) {
            hp_cli_fail(st, "trace");
            goto out;
        }
        if (lead) {
            uint64_t dropped = hp_trace_dropped(trace);
            fprintf(stderr, "trace: %s (rank 0: %llu spans", trace_path, (unsigned long long)hp_trace_count(trace));
            if (dropped) fprintf(stderr, ", %llu dropped: raise --trace-capacity", (unsigned long long)dropped);
            fprintf(stderr, ")\n");
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
    if (metrics) {
        FILE *f = metrics;
        metrics = NULL;
        if (fclose(f) != 0) {
            fprintf(stderr, "hp: error: cannot write metrics file '%s' at its close: %s\n", metrics_path,
                    strerror(errno));
            goto out;
        }
    }
    rc = 0;
out:
    if (metrics) fflush(metrics);
    hp_cli_world_fault(world, mpi, rc, !together, cfg.train.comm_timeout);
    if (metrics) fclose(metrics);
    hp_trainer_free(t);
    hp_run_dir_lock_release(lock); /* after the last save */
    hp_trace_free(trace); /* after the programs that record into it */
    hp_run_config_free(&cfg);
#ifdef HP_HAVE_MPI
    if (world) hp_comm_free(world);
    if (mpi) {
        /* one failed rank must not leave the others waiting; ranks that all stop together need not abort */
        if (rc != 0 && !together) hp_comm_mpi_abort(rc);
        hp_comm_mpi_finalize();
    }
#else
    (void)together;
#endif
    return rc;
}
