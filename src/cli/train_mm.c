/*
 * `hp train` for model.family multimodal (hp/multimodal.h): one process over the whole model, or
 * under mpirun with groups (two encoders and a fusion group) the sub-models on their own ranks.
 * Prints a progress line per log_every steps and, at the end, the test-set accuracy of the greedy
 * generated captions.
 */
#include "cli/cli.h"

#include "hp/multimodal.h"
#include "hp/run_dir.h"
#include "hp/trace.h"

#include <stdio.h>
#include <string.h>

int hp_cli_train_mm(hp_run_config *cfg, const char *metrics_path, const char *trace_path) {
    hp_comm *world = NULL;
    bool mpi = false;
    hp_mm_runner *r = NULL;
    hp_trace *trace = NULL;
    FILE *metrics = NULL;
    int rc = 1;
    hp_status st = hp_cli_world(&world, &mpi);
    if (st != HP_STATUS_OK) {
        hp_cli_fail(st, "starting MPI");
        goto out;
    }
    int size = world ? hp_comm_size(world) : 1;
    if (world && size > 1) hp_cli_rank = hp_comm_rank(world);
    bool lead = hp_cli_rank <= 0;
    if (cfg->groups.present) st = hp_groups_config_check_world(&cfg->groups, size);
    else if (size > 1)
        st = hp_error(HP_STATUS_CONFIG, "%s: model.family multimodal on %d ranks needs a groups: section (two kind: "
                      "encoder groups and one kind: fusion)", cfg->source, size);
    if (st == HP_STATUS_OK && world) st = hp_comm_set_timeout(world, cfg->train.comm_timeout);
    if (st == HP_STATUS_OK) st = hp_mm_runner_new(cfg, size > 1 ? world : NULL, HP_MM_MODE_CONCURRENT, &r);
    if (st != HP_STATUS_OK) {
        hp_cli_fail(st, NULL);
        goto out;
    }
    if (trace_path) { /* every rank records, clocks aligned; rank 0 writes the file at the end */
        hp_trace_opts to = HP_TRACE_OPTS_DEFAULT;
        to.rank = world ? hp_comm_rank(world) : 0;
        st = hp_trace_new(&to, &trace);
        if (st == HP_STATUS_OK) st = hp_trace_sync(trace, size > 1 ? world : NULL);
        if (st == HP_STATUS_OK) st = hp_mm_runner_set_trace(r, trace);
        if (st != HP_STATUS_OK) {
            hp_cli_fail(st, "trace");
            goto out;
        }
    }
    if (lead && metrics_path && !(metrics = fopen(metrics_path, "w"))) {
        fprintf(stderr, "hp: error: cannot open metrics file '%s'\n", metrics_path);
        goto out;
    }
    if (lead) {
        const hp_multimodal_config *mm = &cfg->model.multimodal;
        fprintf(stderr, "multimodal: encoder a %lld tokens x %lld layers, encoder b %lld tokens x %lld layers, decoder "
                "%lld layers x %lld wide; %s, %lld steps of %lld rows\n", (long long)((28 / mm->patch_a) * (28 / mm->patch_a)),
                (long long)mm->layers_a, (long long)((28 / mm->patch_b) * (28 / mm->patch_b)), (long long)mm->layers_b,
                (long long)cfg->model.layers, (long long)cfg->model.width,
                cfg->groups.present ? "concurrent sub-models on their groups" : "one device", (long long)cfg->train.steps,
                (long long)cfg->train.batch);
    }
    double busy[HP_MM_ROLES] = {0}, wall = 0;
    for (int64_t s = 0; s < cfg->train.steps; s++) {
        hp_mm_step_stats ms;
        st = hp_mm_runner_step(r, &ms);
        if (st != HP_STATUS_OK) {
            hp_cli_fail(st, "training step");
            goto out;
        }
        wall += ms.seconds;
        for (int k = 0; k < HP_MM_ROLES; k++) busy[k] += ms.busy[k];
        int64_t every = cfg->train.log_every > 0 ? cfg->train.log_every : cfg->train.steps;
        if (lead && ((s + 1) % every == 0 || s + 1 == cfg->train.steps)) {
            fprintf(stderr, "step %lld/%lld loss %.4f grad_norm %.3f %.1f rows/s", (long long)s + 1,
                    (long long)cfg->train.steps, (double)ms.loss, (double)ms.grad_norm, cfg->train.batch / ms.seconds);
            if (cfg->groups.present)
                fprintf(stderr, " busy a/b/dec %.0f/%.0f/%.0f ms inflight %d", ms.busy[0] * 1e3, ms.busy[1] * 1e3,
                        ms.busy[2] * 1e3, ms.inflight);
            fprintf(stderr, "\n");
        }
        if (metrics)
            fprintf(metrics, "{\"step\": %lld, \"loss\": %.6f, \"grad_norm\": %.6f, \"seconds\": %.6f}\n",
                    (long long)s + 1, (double)ms.loss, (double)ms.grad_norm, ms.seconds);
    }
    if (lead && cfg->groups.present && wall > 0) {
        double sum = busy[0] + busy[1] + busy[2];
        fprintf(stderr, "throughput %.1f rows/s; bubble fraction %.3f (1 - busy / (3 ranks x wall))\n",
                cfg->train.steps * cfg->train.batch / wall, 1.0 - sum / (3.0 * wall));
    }
    if (trace) {
        st = hp_mm_runner_set_trace(r, NULL);
        if (st == HP_STATUS_OK) st = hp_trace_write(trace, size > 1 ? world : NULL, trace_path);
        if (st != HP_STATUS_OK) {
            hp_cli_fail(st, "writing the trace");
            goto out;
        }
        if (lead) fprintf(stderr, "trace: %s\n", trace_path);
    }
    double acc, cap;
    st = hp_mm_runner_eval(r, 0, &acc, &cap);
    if (st != HP_STATUS_OK) {
        hp_cli_fail(st, "evaluation");
        goto out;
    }
    if (acc >= 0) /* the rank that decoded (the decoder's, or the only one) */
        printf("test accuracy %.4f (class words of the greedy caption, %lld test images); caption exact %.4f\n", acc,
               (long long)cfg->model.multimodal.test_images, cap);
    if (acc >= 0) {
        char path[HP_CONFIG_STR_MAX + 32];
        snprintf(path, sizeof path, "%s/model.safetensors", cfg->train.checkpoint_dir);
        st = hp_output_dir_prepare("train.checkpoint_dir", cfg->train.checkpoint_dir);
        if (st == HP_STATUS_OK) st = hp_mm_runner_save(r, path);
        if (st != HP_STATUS_OK) {
            hp_cli_fail(st, "saving the model");
            goto out;
        }
        fprintf(stderr, "saved %s\n", path);
    }
    rc = 0;
out:
    if (metrics) fflush(metrics);
    hp_cli_world_fault(world, mpi, rc, r != NULL, cfg->train.comm_timeout); /* before the runner is freed */
    if (metrics) fclose(metrics);
    hp_mm_runner_free(r);
    hp_trace_free(trace); /* after the programs that record into it */
    hp_run_config_free(cfg);
    hp_cli_world_end(world, mpi, rc);
    return rc;
}
