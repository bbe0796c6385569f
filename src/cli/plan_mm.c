/*
 * `hp plan` for model.family multimodal (hp/multimodal.h): each group's pass times from the cost
 * model (calibrated when hp calibrate's cache has this machine, else the flat model), the dynamic
 * scheduler's step for the concurrent sub-models against the same sub-models as one linear 1F1B
 * pipeline, the bubble of each, and the split of the ranks over the groups the cost model suggests.
 */
#include "cli/cli.h"

#include "hp/costmodel.h"
#include "hp/multimodal.h"
#include "hp/pipeline_plan.h"

#include <stdio.h>
#include <stdlib.h>

static const char *const k_names[HP_MM_ROLES] = {"encoder a", "encoder b", "decoder"};

int hp_cli_plan_mm(const hp_run_config *cfg, int ranks, const char *calibration) {
    hp_mm_config mc = hp_mm_config_from_run(cfg);
    int m = cfg->groups.present ? (int)cfg->pipeline.micro_batches : 1;
    int rows = (int)(cfg->train.batch / m), world = ranks > 0 ? ranks : cfg->groups.present ? cfg->groups.n_ranks : 3;
    hp_calibration *cal = malloc(sizeof *cal);
    hp_machine_model mm = HP_MACHINE_MODEL_DEFAULT;
    bool calibrated = false;
    char why[1024] = "";
    double tf[HP_MM_ROLES], tb[HP_MM_ROLES];
    hp_status st = cal ? hp_mm_config_check(&mc) : hp_error(HP_STATUS_OUT_OF_MEMORY, "out of memory");
    if (st == HP_STATUS_OK) st = hp_pipeline_machine_model(calibration, world, cal, &mm, &calibrated, why, sizeof why);
    if (st == HP_STATUS_OK) st = hp_mm_predict_passes(&mc, rows, m, &mm, tf, tb);
    hp_mm_schedule con, chain;
    if (st == HP_STATUS_OK) st = hp_mm_schedule_make(HP_MM_MODE_CONCURRENT, m, tf, tb, 0.0, &con);
    if (st == HP_STATUS_OK) st = hp_mm_schedule_make(HP_MM_MODE_CHAIN, m, tf, tb, 0.0, &chain);
    int best[HP_MM_ROLES];
    double best_t = 0;
    if (st == HP_STATUS_OK && world >= HP_MM_ROLES) st = hp_mm_suggest_split(tf, tb, m, world, best, &best_t);
    if (st != HP_STATUS_OK) {
        free(cal);
        return hp_cli_fail(st, NULL);
    }
    printf("== multimodal: %d micro-batches of %d rows; encoder a %d tokens x %d layers, encoder b %d tokens x %d "
           "layers, decoder %d layers x %d\n", m, rows, hp_mm_tokens(&mc, 0), mc.enc[0].layers, hp_mm_tokens(&mc, 1),
           mc.enc[1].layers, mc.dec_layers, mc.width);
    if (calibrated) printf("  machine model: calibrated\n");
    else printf("  machine model: flat (%.0f GFLOP/s, %.0f GB/s): %s\n", mm.flops_per_s / 1e9, mm.bytes_per_s / 1e9, why);
    printf("  per micro-batch (ms):   forward   backward\n");
    for (int r = 0; r < HP_MM_ROLES; r++)
        printf("    %-10s %14.3f %10.3f%s\n", k_names[r], 1e3 * tf[r], 1e3 * tb[r],
               r == HP_MM_ROLE_DEC ? "   (forward and backward in one pass)" : "");
    double busy = 0;
    for (int r = 0; r < HP_MM_ROLES; r++) busy += con.busy[r];
    printf("  concurrent sub-models (one rank per group): step %.3f ms, bubble %.3f, encoders run ahead %d / %d "
           "micro-batches\n", 1e3 * con.makespan, 1 - busy / (3 * con.makespan), con.inflight[0], con.inflight[1]);
    printf("  as one linear 1F1B pipeline (a -> b -> decoder): step %.3f ms, bubble %.3f; concurrent is %.2fx its "
           "throughput\n", 1e3 * chain.makespan, 1 - busy / (3 * chain.makespan), chain.makespan / con.makespan);
    if (world >= HP_MM_ROLES) {
        printf("  suggested split of %d ranks (encoder a, encoder b, decoder): %d, %d, %d: step %.3f ms (data parallel "
               "groups, gradient all-reduce not counted)", world, best[0], best[1], best[2], 1e3 * best_t);
        if (cfg->groups.present) {
            int cur[HP_MM_ROLES] = {0}, ne = 0;
            for (int i = 0; i < cfg->groups.n_groups; i++) {
                const hp_group_config *g = &cfg->groups.groups[i];
                cur[g->kind == HP_GROUP_KIND_FUSION ? HP_MM_ROLE_DEC : ne++ > 0] = g->n_ranks;
            }
            printf("; the config's %d, %d, %d", cur[0], cur[1], cur[2]);
        }
        printf("\n");
    }
    free(cal);
    return 0;
}
