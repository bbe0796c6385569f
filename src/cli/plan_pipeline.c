/*
 * `hp plan` for a run config with `groups:` and `pipeline:` (HyperMPMD): the stages, the schedule
 * drawn as text (one row per rank, one column per time slot), the theoretical and simulated bubble
 * fraction, the peak activation memory per stage and the predicted step time. Per-stage F, B and W
 * times come from the stage graphs the pipeline would build, under the flat machine model
 * (HP_MACHINE_MODEL_DEFAULT) until a calibrated one replaces it.
 */
#include "cli/cli.h"

#include "hp/pipeline.h"

#include <stdio.h>
#include <stdlib.h>

int hp_cli_plan_pipeline(const hp_run_config *cfg, int ranks) {
    hp_status st = hp_groups_config_check_world(&cfg->groups, ranks ? ranks : cfg->groups.n_ranks);
    if (st != HP_STATUS_OK) return hp_cli_fail(st, NULL);
    hp_schedule s;
    st = hp_pipeline_schedule_from_config(cfg, &s);
    if (st != HP_STATUS_OK) return hp_cli_fail(st, NULL);
    int n = s.n_stages, p = s.p, m = s.m, rows = (int)(cfg->train.batch / s.m), seq = (int)cfg->model.context;
    hp_gpt_config gc = hp_gpt_config_from_model(&cfg->model);
    gc.context = seq;
    double *f = calloc((size_t)n, sizeof *f), *b = calloc((size_t)n, sizeof *b), *w = calloc((size_t)n, sizeof *w);
    size_t *act = calloc((size_t)n, sizeof *act);
    int *peak = calloc((size_t)p, sizeof *peak);
    char *text = NULL;
    hp_sched_timeline tl = {0};
    bool have_tl = false;
    if (!f || !b || !w || !act || !peak) st = hp_error(HP_STATUS_OUT_OF_MEMORY, "out of memory planning the pipeline");
    hp_machine_model mm = HP_MACHINE_MODEL_DEFAULT;
    printf("== pipeline: %s, %d stage groups on %d ranks, %d virtual stages, m = %d micro-batches of %d rows\n",
           hp_sched_kind_name(s.kind), p, cfg->groups.n_ranks, n, m, rows);
    int *auto_first = NULL; /* split: auto: the cost model's cut points */
    if (st == HP_STATUS_OK && cfg->pipeline.split_auto) {
        auto_first = calloc((size_t)n, sizeof *auto_first);
        double worst = 0;
        st = auto_first ? hp_pipeline_auto_split(&gc, n, rows, seq, m, &mm, auto_first, &worst)
                        : hp_error(HP_STATUS_OUT_OF_MEMORY, "out of memory");
        if (st == HP_STATUS_OK) printf("  split: auto (cost model): the slowest stage %.2f ms per micro-batch\n", 1e3 * worst);
    }
    for (int i = 0; st == HP_STATUS_OK && i < cfg->groups.n_groups; i++) {
        const hp_group_config *g = &cfg->groups.groups[i];
        for (int c = 0; st == HP_STATUS_OK && c < g->n_chunks; c++) {
            const hp_module_chunk *mc = &g->chunks[c];
            int k = mc->virtual_stage;
            if (k < 0 || k >= n) continue;
            hp_gpt_stage part = {.first_layer = mc->first, .last_layer = mc->last, .embedding = mc->embedding,
                                 .head = mc->head};
            if (auto_first)
                part.first_layer = auto_first[k], part.last_layer = k + 1 < n ? auto_first[k + 1] : gc.layers;
            hp_pipeline_stage_plan sp; /* a group's replicas split the rows: the largest share */
            int dp, tp;
            hp_pipeline_group_shape(&g->strategy, g->n_ranks, &dp, &tp);
            int share = (rows + dp - 1) / dp;
            st = hp_pipeline_plan_stage(&gc, &part, share, seq, m, &mm, &sp);
            if (st != HP_STATUS_OK) break;
            /* partitioned ranks (tp, fsdp): the compute split tp ways (collectives not counted) */
            f[k] = sp.f_seconds / tp, b[k] = sp.b_seconds / tp, w[k] = sp.w_seconds / tp, act[k] = sp.activation_bytes;
            char shape[64] = "";
            if (tp > 1) snprintf(shape, sizeof shape, ": %d replica%s x %d partitioned", dp, dp == 1 ? "" : "s", tp);
            printf("  stage %d: group %s (%d rank%s%s, %d rows each), blocks %d-%d%s%s: F %.2f ms, B %.2f ms, W %.2f ms "
                   "per micro-batch%s; %.2f MiB activations each, %.2f MiB persistent%s\n",
                   k, g->name, g->n_ranks, g->n_ranks == 1 ? "" : "s", shape, share, part.first_layer, part.last_layer - 1,
                   mc->embedding ? " + embedding" : "",
                   mc->head ? " + head" : "", 1e3 * f[k], 1e3 * b[k], 1e3 * w[k], tp > 1 ? " (compute / partitioned ranks)" : "",
                   (double)act[k] / (1 << 20), (double)sp.persistent_bytes / (1 << 20),
                   tp > 1 ? " (unsplit model: an upper bound)" : "");
        }
    }
    hp_sched_check_opts co = HP_SCHED_CHECK_OPTS_INIT;
    if (st == HP_STATUS_OK) st = hp_schedule_validate(&s, &co, peak, NULL);
    hp_sched_costs costs = HP_SCHED_COSTS_INIT;
    costs.f_stage = f, costs.b_stage = b, costs.w_stage = w;
    costs.p2p_latency = 0;
    if (st == HP_STATUS_OK) st = hp_schedule_simulate(&s, &costs, &tl);
    have_tl = st == HP_STATUS_OK;
    if (st == HP_STATUS_OK) st = hp_schedule_render(&s, &tl, &text);
    if (st == HP_STATUS_OK) {
        printf("\n== schedule (one row per rank, one column per time slot; B input gradient, W weight gradient, "
               "BW both)\n%s\n", text);
        double fu = 0, bu = 0, wu = 0;
        for (int k = 0; k < n; k++) fu += f[k], bu += b[k], wu += w[k];
        hp_sched_bubble th = hp_schedule_bubble_formula(s.kind, p, m, s.v, fu / n, bu / n, wu / n);
        printf("== bubble: simulated %.3f (each rank's own span: %.3f); formula %.3f at the mean stage times\n",
               tl.bubble, tl.bubble_span, th.sync);
        for (int r = 0; r < p; r++) {
            size_t bytes = 0;
            for (int k = 0; k < n; k++)
                if (s.stage_rank[k] == r && act[k] > bytes) bytes = act[k];
            printf("  rank %d: peak %d micro-batch activations in flight, about %.2f MiB\n", r, peak[r],
                   (double)peak[r] * (double)bytes / (1 << 20));
        }
        printf("== predicted step: %.3f s (simulated schedule at %.0f GFLOP/s, %.0f GB/s, point-to-point not "
               "counted; the optimizer step not counted)\n", tl.step_time, mm.flops_per_s / 1e9, mm.bytes_per_s / 1e9);
    }
    free(text);
    free(auto_first);
    if (have_tl) hp_sched_timeline_free(&tl);
    free(f), free(b), free(w), free(act), free(peak);
    hp_schedule_free(&s);
    return st == HP_STATUS_OK ? 0 : hp_cli_fail(st, NULL);
}
