/*
 * `hp plan` for a run config with `groups:` and `pipeline:` (HyperMPMD): the stages, the schedule
 * drawn as text (one row per rank, one column per time slot), the theoretical and simulated bubble
 * fraction, the memory per stage against each group's budget and the predicted step time. Per-stage
 * F, B and W times come from the stage graphs the pipeline would build, under the calibrated cost
 * model (hp calibrate's cache, or --calibration FILE) when it has an entry for this machine and the
 * groups' rank count, else the flat machine model (HP_MACHINE_MODEL_DEFAULT); `split: auto` uses
 * the same model and the budgets (hp/pipeline_plan.h).
 */
#include "cli/cli.h"

#include "hp/pipeline_plan.h"

#include <stdio.h>
#include <stdlib.h>

static double mib(double b) { return b / (1 << 20); }

/* The `offload:` section inside the stages (pr->offload, planned by hp_pipeline_predict): per stage,
 * what the planner moves out of one micro-batch's activations under the rank's budget split over
 * its micro-batches in flight. */
static void print_offload(const hp_pipeline_plan_opts *o, const hp_schedule *s, const hp_pipeline_prediction *pr) {
    if (!o->offload || !pr->offload) return;
    bool disk = o->offload_cfg.policy[HP_OFFLOAD_CLASS_ACTIVATIONS] == HP_TIER_DISK;
    hp_tier tier = disk ? HP_TIER_DISK : HP_TIER_HOST;
    printf("== offload inside the stages (activations to %s; device budget %.2f MiB per rank, split over its "
           "micro-batches in flight, plus the parameters each reads)\n", disk ? "disk" : "host memory",
           mib((double)o->offload_cfg.device_budget));
    for (int k = 0; k < s->n_stages; k++) {
        int r = s->stage_rank[k], slots = pr->rank_slots[r];
        const hp_offload_plan_stats *os = &pr->offload[k];
        printf("  stage %d (rank %d, %d micro-batch%s in flight): one micro-batch's peak %.2f -> %.2f MiB, %.2f MiB "
               "offloaded and %.2f MiB read back per micro-batch, predicted stall %.2f ms (in its B)%s\n",
               k, r, slots, slots == 1 ? "" : "es", mib((double)os->peak_before), mib((double)os->peak_after),
               mib((double)os->bytes_out[tier]), mib((double)os->bytes_in[tier]), 1e3 * os->stall_s,
               o->tp && o->tp[r] > 1 ? " (one rank of the partitioned stage)" : "");
    }
}

int hp_cli_plan_pipeline(const hp_run_config *cfg, int ranks, const char *calibration) {
    hp_status st = hp_groups_config_check_world(&cfg->groups, ranks ? ranks : cfg->groups.n_ranks);
    if (st != HP_STATUS_OK) return hp_cli_fail(st, NULL);
    hp_schedule s;
    st = hp_pipeline_schedule_from_config(cfg, &s);
    if (st != HP_STATUS_OK) return hp_cli_fail(st, NULL);
    int n = s.n_stages, p = s.p, m = s.m;
    hp_calibration *cal = malloc(sizeof *cal);
    hp_machine_model mm = HP_MACHINE_MODEL_DEFAULT;
    bool calibrated = false;
    char why[1024] = "";
    hp_pipeline_plan_opts o = {0};
    bool have_o = false;
    int *first = NULL;
    double *split_bytes = NULL;
    hp_pipeline_prediction pr = {0};
    char *text = NULL;
    int *peak = calloc((size_t)p, sizeof *peak);
    if (!cal || !peak) st = hp_error(HP_STATUS_OUT_OF_MEMORY, "out of memory planning the pipeline");
    if (st == HP_STATUS_OK) st = hp_pipeline_machine_model(calibration, cfg->groups.n_ranks, cal, &mm, &calibrated, why, sizeof why);
    if (st == HP_STATUS_OK) st = hp_pipeline_plan_opts_from_config(cfg, &s, &mm, &o);
    have_o = st == HP_STATUS_OK;
    if (st == HP_STATUS_OK) st = hp_pipeline_first_layers(cfg, &s, &first);
    if (st == HP_STATUS_OK) {
        printf("== pipeline: %s, %d stage groups on %d ranks, %d virtual stages, m = %d micro-batches of %d rows\n",
               hp_sched_kind_name(s.kind), p, cfg->groups.n_ranks, n, m, o.rows);
        char ks[256];
        if (calibrated)
            printf("  machine model: calibrated (%s, probed in %.0f s)\n", hp_machine_key_str(&cal->key, ks, sizeof ks),
                   cal->probe_seconds);
        else
            printf("  machine model: flat (%.0f GFLOP/s, %.0f GB/s): %s\n", mm.flops_per_s / 1e9, mm.bytes_per_s / 1e9, why);
    }
    if (st == HP_STATUS_OK && cfg->pipeline.split_auto) { /* the cost model's cut points, under the budgets */
        double worst = 0;
        split_bytes = calloc((size_t)n, sizeof *split_bytes);
        st = split_bytes ? hp_pipeline_split(&o, first, &worst, split_bytes) : hp_error(HP_STATUS_OUT_OF_MEMORY, "out of memory");
        if (st == HP_STATUS_OK)
            printf("  split: auto (cost model%s): the slowest stage %.2f ms per micro-batch\n",
                   calibrated ? ", calibrated" : ", flat", 1e3 * worst);
    }
    if (st == HP_STATUS_OK) st = hp_pipeline_predict(&o, first, &pr);
    for (int i = 0; st == HP_STATUS_OK && i < cfg->groups.n_groups; i++) {
        const hp_group_config *g = &cfg->groups.groups[i];
        for (int c = 0; c < g->n_chunks; c++) {
            const hp_module_chunk *mc = &g->chunks[c];
            int k = mc->virtual_stage;
            if (k < 0 || k >= n) continue;
            int r = s.stage_rank[k], dp = o.dp[r], tp = o.tp[r];
            int last = k + 1 < n ? first[k + 1] : o.model->layers;
            char shape[64] = "", blocks[64] = "no blocks";
            if (last > first[k]) snprintf(blocks, sizeof blocks, "blocks %d-%d", first[k], last - 1);
            if (tp > 1) snprintf(shape, sizeof shape, ": %d replica%s x %d partitioned", dp, dp == 1 ? "" : "s", tp);
            printf("  stage %d: group %s (%d rank%s%s, %d rows each), %s%s%s: F %.2f ms, B %.2f ms, W %.2f ms "
                   "per micro-batch%s; %.2f MiB activations each x %d in flight, %.2f MiB parameters + gradients + "
                   "AdamW state%s\n",
                   k, g->name, g->n_ranks, g->n_ranks == 1 ? "" : "s", shape, (o.rows + dp - 1) / dp, blocks,
                   k == 0 ? " + embedding" : "", k == n - 1 ? " + head" : "", 1e3 * pr.f[k], 1e3 * pr.b[k],
                   1e3 * pr.w[k], tp > 1 ? " (one rank of the partitioned stage, its collectives included)" : "", mib((double)pr.activation_bytes[k]), pr.slots[k],
                   mib((double)pr.state_bytes[k]), tp > 1 ? " (one rank's blocks)" : "");
        }
    }
    hp_sched_check_opts co = HP_SCHED_CHECK_OPTS_INIT;
    if (st == HP_STATUS_OK) st = hp_schedule_validate(&s, &co, peak, NULL);
    if (st == HP_STATUS_OK) st = hp_schedule_render(&s, &pr.tl, &text);
    if (st == HP_STATUS_OK) {
        printf("\n== schedule (one row per rank, one column per time slot; B input gradient, W weight gradient, "
               "BW both)\n%s\n", text);
        double fu = 0, bu = 0, wu = 0;
        for (int k = 0; k < n; k++) fu += pr.f[k], bu += pr.b[k], wu += pr.w[k];
        hp_sched_bubble th = hp_schedule_bubble_formula(s.kind, p, m, s.v, fu / n, bu / n, wu / n);
        printf("== bubble: simulated %.3f (each rank's own span: %.3f); formula %.3f at the mean stage times\n",
               pr.tl.bubble, pr.tl.bubble_span, th.sync);
        if (cfg->pipeline.post_validate)
            printf("== post_validate: consecutive steps overlap (each step checked during the next), so a step pays "
                   "about the span bubble %.3f, not %.3f; a check that fails (a NaN or Inf, or a norm over "
                   "optim.grad_clip %g) runs a step's schedule twice\n",
                   pr.tl.bubble_span, pr.tl.bubble, cfg->optim.grad_clip);
        printf("== memory per rank (parameters, gradients, AdamW state and the micro-batches in flight%s)\n",
               o.offload ? "; the activations under the offload plan below" : "");
        for (int r = 0; r < p; r++) {
            const char *nm = o.group_name[r] ? o.group_name[r] : "?";
            printf("  rank %d (group %s): peak %d micro-batch activations in flight (formula %d), %.2f MiB",
                   r, nm, peak[r], hp_schedule_peak_formula(s.kind, p, m, s.v, r), mib(pr.rank_bytes[r]));
            if (o.memory_budget[r]) printf(" of its %.2f MiB budget", mib((double)o.memory_budget[r]));
            printf("\n");
        }
        print_offload(&o, &s, &pr);
        double opt = 0;
        for (int r = 0; r < p; r++)
            if (pr.optimizer_seconds[r] > opt) opt = pr.optimizer_seconds[r];
        printf("== predicted step: %.3f s = schedule %.3f s (point-to-point %.3f ms per hand-over) + optimizer %.3f s "
               "(slowest rank: norm, gradient all-reduce over the group, AdamW) + the loss and norm all-reduces "
               "%.3f ms (%s model)\n",
               pr.step_seconds, pr.schedule_seconds, 1e3 * pr.p2p_seconds, opt, 1e3 * pr.reduce_seconds,
               calibrated ? "calibrated" : "flat");
    }
    free(text);
    free(first), free(split_bytes), free(peak), free(cal);
    hp_pipeline_prediction_free(&pr);
    if (have_o) hp_pipeline_plan_opts_free(&o);
    hp_schedule_free(&s);
    return st == HP_STATUS_OK ? 0 : hp_cli_fail(st, NULL);
}
