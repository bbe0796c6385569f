/* ranks: 2 4 8 */
/*
 * `hp train` with `groups:` and `pipeline:` (the trainer's pipeline mode, src/train/trainer_pipe.c)
 * over real MPI processes: for every schedule, one stage per rank, the 50-step loss trajectory
 * equals the single-rank run's within 1e-4 (relative) and the first step's loss and gradient norm
 * within 1e-5; with uneven layers (5 layers) and a tied head too. A checkpoint the pipeline saves
 * resumes on one rank, and a single-rank checkpoint resumes into the pipeline, with the same
 * losses afterwards; evaluation gives the single-rank validation loss. With 4 ranks also stages over
 * several ranks: pp2 x dp2 (ZeRO-1), pp2 x fsdp2 (its ranks hand blocks of rows: the bytes each
 * sends per step are its blocks, half of a replicated hand-off, and no stage all-gathers its output
 * or input gradient; under ZB-V, an fsdp2 stage handing to a tp2 and a tp2 + SP stage, 1 -> fsdp2
 * -> 1 rank), pp2 x tp2 (with sequence parallelism too: tokens split along the sequence over tp, a
 * dp2 stage handing over to a tp2 + SP one), 3 stages on 1, 2, 1 ranks. With 8 ranks pp2 x dp2 x
 * tp2, pp2 x (dp2 x fsdp2) and pp2 x (fsdp2 x tp2) (each block of rows held by two tp ranks).
 */
#include "hp/comm_mpi.h"
#include "hp/config.h"
#include "hp/pipeline.h"
#include "hp/pipeline_plan.h"
#include "hp/train.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define STEPS 50

#include "mpi_check.h"

/* The run config: no groups (schedule NULL), or p one-rank stages under `schedule` with m
 * micro-batches; `layers` blocks split as evenly as the config's auto split does. */
static const int *g_gsize; /* stage group sizes of the configs load() makes (NULL: one rank each) */
static double g_dropout;   /* model.dropout of the configs load() makes */
static const int *g_tp;    /* each stage group's tensor-parallel size (NULL: 1; the rest of a group is dp) */

static bool g_zero;         /* ZeRO-1 inside the stage groups: optimizer.shard over their dp axis */
static int g_fsdp;          /* FSDP inside the stage groups over an "fsdp" axis of this size (0: none) */
static bool g_sp;           /* sequence parallelism in the tensor-parallel groups: tokens split on dim 1 over tp */

/* Megatron-LM's column- then row-parallel linears over the group's "tp" axis. */
static const char *const TP_PARAMS =
    "params: [{match: \"blocks.*.attn.[qkv].weight\", tensor_map: [tp, none]}, "
    "{match: \"blocks.*.attn.[qkv].bias\", tensor_map: [tp]}, {match: \"blocks.*.mlp.fc.weight\", tensor_map: [tp, none]}, "
    "{match: \"blocks.*.mlp.fc.bias\", tensor_map: [tp]}, {match: \"blocks.*.attn.proj.weight\", tensor_map: [none, tp]}, "
    "{match: \"blocks.*.mlp.proj.weight\", tensor_map: [none, tp]}]";

/* A stage group of d ranks, tp of them tensor parallel: its mesh and strategy. */
static int group_text(char *out, size_t cap, int s, int d, int tp) {
    char mesh[96], strat[1024] = "";
    if (g_fsdp && tp > 1 && d == g_fsdp * tp) { /* rows over fsdp (the partitioner's), Megatron over tp */
        snprintf(mesh, sizeof mesh, "{device_matrix: [%d, %d], alias_name: [fsdp, tp]}", g_fsdp, tp);
        return snprintf(out, cap, "  stage%d: {ranks: %d, mesh: %s, strategy: {inputs: {tokens: [fsdp, none], targets: "
                        "[fsdp, none]}, %s}}\n", s, d, mesh, TP_PARAMS);
    }
    if (g_fsdp && tp == 1) { /* rows and every parameter's dim 0 split over fsdp; the rest of the group replicas */
        if (d == g_fsdp) snprintf(mesh, sizeof mesh, "{device_matrix: [%d], alias_name: [fsdp]}", d);
        else snprintf(mesh, sizeof mesh, "{device_matrix: [%d, %d], alias_name: [dp, fsdp]}", d / g_fsdp, g_fsdp);
        return snprintf(out, cap, "  stage%d: {ranks: %d, mesh: %s, strategy: {inputs: {tokens: [fsdp, none], targets: "
                        "[fsdp, none]}, params: [{match: \"*\", tensor_map: [fsdp]}]}}\n", s, d, mesh);
    }
    if (tp > 1 && d == tp) snprintf(mesh, sizeof mesh, "{device_matrix: [%d], alias_name: [tp]}", d);
    else if (tp > 1) snprintf(mesh, sizeof mesh, "{device_matrix: [%d, %d], alias_name: [dp, tp]}", d / tp, tp);
    else snprintf(mesh, sizeof mesh, "{device_matrix: [%d], alias_name: [dp]}", d);
    bool zero = g_zero && d > tp;
    if (tp > 1 || zero)
        snprintf(strat, sizeof strat, ", strategy: {%s%s%s%s}",
                 tp > 1 && g_sp ? "inputs: {tokens: [none, tp], targets: [none, tp]}, " : "", tp > 1 ? TP_PARAMS : "",
                 tp > 1 && zero ? ", " : "", zero ? "optimizer: {shard: [dp]}" : "");
    return snprintf(out, cap, "  stage%d: {ranks: %d, mesh: %s%s}\n", s, d, mesh, strat);
}

static hp_status load(const char *schedule, int p, int m, int layers, bool tied, const char *ckdir, hp_run_config *cfg) {
    char corpus[1024], text[8192];
    const char *root = getenv("HP_SOURCE_DIR");
    snprintf(corpus, sizeof corpus, "%s/data/kjv.txt", root ? root : ".");
    int off = snprintf(text, sizeof text,
                       "model: {vocab: 256, context: 32, layers: %d, heads: 4, width: 32, tied_head: %s, dropout: %g}\n"
                       "data: {corpus: \"%s\", val_fraction: 0.05}\n"
                       "train: {steps: %d, batch: 8, seed: 3, eval_batches: 2, checkpoint_dir: \"%s\"}\n"
                       "optim: {lr: 3.0e-3, min_lr: 3.0e-4, warmup: 5, weight_decay: 0.1, grad_clip: 1.0}\n",
                       layers, tied ? "true" : "false", g_dropout, corpus, STEPS, ckdir);
    if (schedule) {
        off += snprintf(text + off, sizeof text - (size_t)off,
                        "pipeline: {schedule: %s, micro_batches: %d, split: auto}\ngroups:\n", schedule, m);
        for (int s = 0; s < p; s++) {
            int d = g_gsize ? g_gsize[s] : 1, tp = g_tp ? g_tp[s] : 1;
            if (d == 1)
                off += snprintf(text + off, sizeof text - (size_t)off, "  stage%d: {ranks: 1}\n", s);
            else
                off += group_text(text + off, sizeof text - (size_t)off, s, d, tp);
        }
    }
    return hp_run_config_load_string(text, strlen(text), schedule ? schedule : "single", cfg);
}

static void run(hp_trainer *t, int steps, double *loss, double *gnorm) {
    for (int i = 0; i < steps; i++) {
        hp_step_metrics m;
        OK(hp_trainer_step(t, &m));
        loss[i] = m.loss;
        if (gnorm) gnorm[i] = m.grad_norm;
    }
}

static bool close_rel(double a, double b, double rtol) { return fabs(a - b) <= rtol * fabs(b) + 1e-7; }

/* The single-rank trajectory (every process alone) of the model with `layers` and `tied`. */
static void reference(int layers, bool tied, double *loss, double *gn, double *val) {
    hp_run_config cfg;
    hp_trainer *t = NULL;
    OK(load(NULL, 1, 1, layers, tied, "/tmp/unused", &cfg));
    OK(hp_trainer_new_dist(&cfg, NULL, &t));
    run(t, STEPS, loss, gn);
    OK(hp_trainer_eval(t, val));
    hp_trainer_free(t);
    hp_run_config_free(&cfg);
}

static void check_schedule(hp_comm *world, const char *schedule, int m, int layers, bool tied, const double *ref_loss,
                           const double *ref_gn, double ref_val) {
    int p = hp_comm_size(world);
    if (g_gsize) for (p = 0; p < 8 && g_gsize[p]; p++) {} /* zero-terminated */
    hp_run_config cfg;
    hp_trainer *t = NULL;
    double loss[STEPS], gn[STEPS], val = 0;
    OK(load(schedule, p, m, layers, tied, "/tmp/unused", &cfg));
    OK(hp_trainer_new_dist(&cfg, world, &t));
    run(t, STEPS, loss, gn);
    OK(hp_trainer_eval(t, &val));
    hp_trainer_free(t);
    hp_run_config_free(&cfg);
    CHECK(close_rel(loss[0], ref_loss[0], 1e-5) && close_rel(gn[0], ref_gn[0], 1e-5),
          "%s m=%d layers=%d: step 1 loss %.9g gnorm %.9g, single rank %.9g %.9g", schedule, m, layers, loss[0], gn[0],
          ref_loss[0], ref_gn[0]);
    double worst = 0;
    for (int i = 0; i < STEPS; i++) worst = fmax(worst, fabs(loss[i] - ref_loss[i]) / fabs(ref_loss[i]));
    CHECK(worst <= 1e-4, "%s m=%d layers=%d: %d-step trajectory differs by %.3g (relative)", schedule, m, layers, STEPS,
          worst);
    CHECK(close_rel(val, ref_val, 1e-4), "%s: val loss %.9g, single rank %.9g", schedule, val, ref_val);
    if (g_rank == 0)
        printf("%-11s p=%d m=%d layers=%d%s: step 50 loss %.6f (single rank %.6f), worst relative %.2g\n", schedule, p,
               m, layers, tied ? " tied" : "", loss[STEPS - 1], ref_loss[STEPS - 1], worst);
}

/* pipeline -> one rank, and one rank -> pipeline, through checkpoints at step 4. */
static void check_resume(hp_comm *world) {
    int p = hp_comm_size(world);
    char dir[64] = "/tmp/hp-ppresume-XXXXXX";
    if (g_rank == 0 && !mkdtemp(dir)) dir[0] = 0;
    OK(hp_comm_broadcast(world, dir, sizeof dir / 4, HP_DTYPE_I32, 0));
    char d1[96], d2[96];
    snprintf(d1, sizeof d1, "%s/pp", dir);
    snprintf(d2, sizeof d2, "%s/single", dir);
    hp_run_config cp, c1p, cs, c1s;
    OK(load("1f1b", p, 4, 4, false, d1, &cp));
    OK(load(NULL, 1, 1, 4, false, d1, &c1p));
    OK(load(NULL, 1, 1, 4, false, d2, &cs));
    OK(load("1f1b", p, 4, 4, false, d2, &c1s));
    hp_trainer *t = NULL;
    double a[8], b[4], c[8], d[4];
    /* the pipeline saves at step 4; one rank resumes it */
    OK(hp_trainer_new_dist(&cp, world, &t));
    run(t, 4, a, NULL);
    OK(hp_trainer_save(t, NULL, 0));
    run(t, 4, a + 4, NULL);
    hp_trainer_free(t);
    OK(hp_comm_barrier(world)); /* rank 0 wrote it */
    OK(hp_trainer_new_dist(&c1p, NULL, &t));
    OK(hp_trainer_resume(t, d1));
    run(t, 4, b, NULL);
    hp_trainer_free(t);
    /* one rank (rank 0 alone) saves at step 4; the pipeline resumes it */
    if (g_rank == 0) {
        OK(hp_trainer_new_dist(&cs, NULL, &t));
        run(t, 4, c, NULL);
        OK(hp_trainer_save(t, NULL, 0));
        run(t, 4, c + 4, NULL);
        hp_trainer_free(t);
    }
    OK(hp_comm_broadcast(world, c, 16, HP_DTYPE_I32, 0));
    OK(hp_trainer_new_dist(&c1s, world, &t));
    OK(hp_trainer_resume(t, d2));
    run(t, 4, d, NULL);
    hp_trainer_free(t);
    for (int i = 0; i < 4; i++) {
        CHECK(close_rel(b[i], a[4 + i], 1e-5), "pipeline checkpoint resumed on one rank, step %d: %.9g vs %.9g", 5 + i,
              b[i], a[4 + i]);
        CHECK(close_rel(d[i], c[4 + i], 1e-5), "one-rank checkpoint resumed in the pipeline, step %d: %.9g vs %.9g",
              5 + i, d[i], c[4 + i]);
    }
    if (g_rank == 0) printf("resume: pipeline -> 1 rank and 1 rank -> pipeline, steps 5-8 match (%.6f %.6f)\n", b[3], d[3]);
    OK(hp_comm_barrier(world));
    if (g_rank == 0) {
        char cmd[128];
        snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
        if (system(cmd) != 0) g_failed = 1;
    }
    hp_run_config_free(&cp);
    hp_run_config_free(&c1p);
    hp_run_config_free(&cs);
    hp_run_config_free(&c1s);
}

/* hp plan's memory for a partitioned stage is one process's: the parameter blocks this rank's store
 * holds (hp_pipeline_plan_stage_group's param_bytes), and in the prediction those blocks, their
 * accumulators and AdamW's two moments (FSDP splits them all), plus the stage's small inputs. */
static void check_fsdp_plan(const hp_run_config *cfg, const hp_schedule *s, hp_pipeline *pp) {
    int stage, slots;
    hp_gpt_stage info;
    OK(hp_pipeline_stage_info(pp, 0, &stage, &info, &slots));
    size_t params = 0, accs = 0, moments = 0;
    hp_store *store = hp_pipeline_store(pp);
    for (int i = 0; i < hp_store_n_entries(store); i++) {
        const char *name = hp_store_name(store, i);
        hp_store_entry_info e;
        OK(hp_store_info(store, name, &e));
        if (!strncmp(name, "exp_avg", 7)) moments += e.bytes;
        else if (!strncmp(name, "grad_acc.", 9)) accs += e.bytes;
        else params += e.bytes;
    }
    hp_machine_model mm = HP_MACHINE_MODEL_DEFAULT;
    hp_pipeline_plan_opts po;
    OK(hp_pipeline_plan_opts_from_config(cfg, s, &mm, &po));
    hp_pipeline_stage_plan sp;
    OK(hp_pipeline_plan_stage_group(po.model, &info, po.rows, po.seq, s->m, &po.strategy[stage], 2, &mm, &sp));
    CHECK(sp.param_bytes == params && accs == params && sp.moment_bytes == moments && moments == 2 * params,
          "pp2 x fsdp2: rank %d's stage %d plans %zu parameter bytes; its store holds %zu, accumulators %zu, moments %zu",
          g_rank, stage, sp.param_bytes, params, accs, moments);
    /* the runtime's split (2 stages): stage 1 starts where stage 0 ends */
    int first[2] = {0, stage == 0 ? info.last_layer : info.first_layer};
    hp_pipeline_prediction pr;
    hp_status st = hp_pipeline_predict(&po, first, &pr);
    OK(st);
    if (st == HP_STATUS_OK) {
        size_t want = params + accs + moments, inputs = 64 << 10; /* tokens, targets, x_in of one micro-batch */
        CHECK(pr.state_bytes[stage] >= want && pr.state_bytes[stage] <= want + inputs,
              "pp2 x fsdp2: hp plan gives rank %d's stage %d %zu bytes of state; its store holds %zu", g_rank, stage,
              pr.state_bytes[stage], want);
    }
    hp_pipeline_prediction_free(&pr);
    hp_pipeline_plan_opts_free(&po);
}

/* pp2 x fsdp2 (1F1B, 4 micro-batches of 2 rows): each rank hands its own block of rows (1 row of
 * 32 positions x 32 wide) to the next group's rank holding it, so it sends exactly m such blocks
 * per step (the x_out of stage 0, the dx of stage 1): half of what the replicated hand-off sent; and
 * no stage's collectives include an all-gather of a (rows, seq, width) activation (the output or
 * input gradient resolved to whole rows), nor any redistribution of a gradient accumulator (each
 * rank adds the reduce-scattered gradient to its own shard). The pipeline is built from the run config's groups as
 * the trainer builds it. */
static void check_fsdp_handoff(hp_comm *world) {
    static const int two[] = {2, 2, 0};
    const int m = 4, rows_mb = 2, seq = 32, width = 32;
    const int *gsize_was = g_gsize, *tp_was = g_tp;
    int fsdp_was = g_fsdp;
    g_gsize = two, g_fsdp = 2, g_tp = NULL;
    hp_run_config cfg;
    OK(load("1f1b", 2, m, 4, false, "/tmp/unused", &cfg));
    g_gsize = gsize_was, g_fsdp = fsdp_was, g_tp = tp_was;
    int gsize[2] = {2, 2};
    hp_strategy_config gstrat[2];
    for (int i = 0; i < cfg.groups.n_groups; i++) gstrat[cfg.groups.groups[i].stage] = cfg.groups.groups[i].strategy;
    hp_gpt_config model = {.vocab = 256, .context = seq, .layers = 4, .heads = 4, .width = width};
    hp_schedule s;
    OK(hp_schedule_build(HP_SCHED_KIND_1F1B, 2, m, 0, &s));
    hp_pipeline_opts o = HP_PIPELINE_OPTS_INIT;
    o.model = &model;
    o.batch = m * rows_mb;
    o.seq = seq;
    o.schedule = &s;
    o.optim = &cfg.optim;
    o.comm = world;
    o.group_size = gsize;
    o.group_strategy = gstrat;
    hp_pipeline *pp = NULL;
    OK(hp_pipeline_new(&o, &pp));
    OK(hp_pipeline_init_params(pp, 3));
    int32_t tok[8 * 32], tgt[8 * 32];
    for (int i = 0; i < 8 * 32; i++) tok[i] = (i * 7) % 256, tgt[i] = (i * 7 + 1) % 256;
    const int steps = 3;
    for (int k = 0; k < steps; k++) OK(hp_pipeline_step(pp, tok, tgt, 1e-3f, NULL, NULL));
    hp_pipeline_stats st;
    hp_pipeline_get_stats(pp, &st);
    int64_t want = (int64_t)m * (rows_mb / 2) * seq * width * (int64_t)sizeof(float);
    CHECK(st.bytes_sent == steps * want, "pp2 x fsdp2: rank %d sent %lld bytes per step, its blocks are %lld "
          "(the replicated hand-off sent %lld)", g_rank, (long long)(st.bytes_sent / steps), (long long)want,
          (long long)(2 * want));
    for (int c = 0; c < hp_pipeline_n_chunks(pp); c++) {
        const hp_partition *part = hp_pipeline_stage_partition(pp, c);
        CHECK(part != NULL, "pp2 x fsdp2: rank %d's chunk %d is not partitioned", g_rank, c);
        for (int i = 0; part && i < hp_partition_n_collectives(part); i++) {
            const hp_redistribute_plan *pl = &hp_partition_collective(part, i)->plan;
            /* the accumulation acc <- acc + grad runs on each rank's shard: the gradient is
             * reduce-scattered into it, the accumulator never gathered nor sliced back */
            CHECK(strncmp(hp_partition_collective(part, i)->tensor, "grad_acc.", 9) != 0,
                  "pp2 x fsdp2: rank %d's stage redistributes its accumulator '%s' (%d steps, first kind %d)", g_rank,
                  hp_partition_collective(part, i)->tensor, pl->nsteps, pl->nsteps ? (int)pl->steps[0].kind : -1);
            /* the stage's output and input gradient were resolved as the optimizer phase's */
            bool act = pl->shape.ndim == 3 && pl->shape.dim[0] == rows_mb && pl->shape.dim[1] == seq &&
                       pl->shape.dim[2] == width && (hp_partition_collective(part, i)->flags & HP_NODE_FLAG_OPTIMIZER);
            for (int k = 0; act && k < pl->nsteps; k++)
                CHECK(pl->steps[k].kind != HP_REDIST_ALL_GATHER || pl->steps[k].dim_from != 0,
                      "pp2 x fsdp2: rank %d's stage all-gathers the rows of its output or input gradient ('%s')",
                      g_rank, hp_partition_collective(part, i)->tensor);
        }
    }
    check_fsdp_plan(&cfg, &s, pp);
    if (g_rank == 0)
        printf("pp2 x fsdp2 hand-off: %lld bytes sent per rank per step (its blocks), no all-gather of the rows; "
               "stage 0's collectives receive %lld bytes per micro-batch\n",
               (long long)(st.bytes_sent / steps), (long long)hp_partition_bytes(hp_pipeline_stage_partition(pp, 0)));
    hp_pipeline_free(pp);
    hp_schedule_free(&s);
    hp_run_config_free(&cfg);
}

int main(int argc, char **argv) {
    if (hp_comm_mpi_init(&argc, &argv) != HP_STATUS_OK) return 1;
    hp_comm *world;
    if (hp_comm_mpi_world(&world) != HP_STATUS_OK) return 1;
    g_rank = hp_comm_rank(world);
    int p = hp_comm_size(world);
    double ref_loss[STEPS], ref_gn[STEPS], ref_val = 0;
    if (p == 8) goto eight;
    /* 2p layers: one per virtual stage of the two-chunk schedules, two per stage otherwise */
    reference(2 * p, false, ref_loss, ref_gn, &ref_val);
    const char *schedules[] = {"gpipe", "1f1b", "interleaved", "zb-h1", "zb-v", "dualpipev"};
    for (size_t k = 0; k < sizeof schedules / sizeof schedules[0]; k++)
        check_schedule(world, schedules[k], 2 * p, 2 * p, false, ref_loss, ref_gn, ref_val);
    /* uneven layers (2p + 1 over p stages), a tied head, micro-batches not a multiple of p */
    reference(2 * p + 1, true, ref_loss, ref_gn, &ref_val);
    check_schedule(world, "1f1b", 8, 2 * p + 1, true, ref_loss, ref_gn, ref_val);
    check_schedule(world, "gpipe", p == 4 ? 2 : 1, 2 * p + 1, true, ref_loss, ref_gn, ref_val);
    check_resume(world);
    /* dropout: each micro-batch's masks are the single-device batch's at its rows */
    g_dropout = 0.1;
    reference(2 * p, false, ref_loss, ref_gn, &ref_val);
    check_schedule(world, "1f1b", 2 * p, 2 * p, false, ref_loss, ref_gn, ref_val);
    check_schedule(world, "zb-v", 2 * p, 2 * p, false, ref_loss, ref_gn, ref_val);
    g_dropout = 0;
    if (p == 4) { /* stages over several ranks: pp2 x dp2, pp2 x tp2, and 3 stages on 1, 2 and 1 ranks */
        static const int two[] = {2, 2, 0}, uneq[] = {1, 2, 1, 0}, tp_two[] = {2, 2}, tp_one[] = {1, 2};
        reference(4, false, ref_loss, ref_gn, &ref_val);
        g_gsize = two;
        check_schedule(world, "1f1b", 4, 4, false, ref_loss, ref_gn, ref_val);
        check_schedule(world, "zb-v", 4, 4, false, ref_loss, ref_gn, ref_val);
        g_zero = true; /* ZeRO-1 in each dp2 stage */
        check_schedule(world, "1f1b", 4, 4, false, ref_loss, ref_gn, ref_val);
        g_zero = false;
        g_fsdp = 2; /* FSDP in each stage group */
        check_schedule(world, "1f1b", 4, 4, false, ref_loss, ref_gn, ref_val);
        check_schedule(world, "zb-h1", 4, 4, false, ref_loss, ref_gn, ref_val);
        check_schedule(world, "zb-v", 4, 4, false, ref_loss, ref_gn, ref_val); /* a local hand-over too */
        g_tp = tp_one; /* an fsdp2 stage handing its blocks to a tp2 stage, then to a tp2 + SP one */
        check_schedule(world, "gpipe", 4, 4, false, ref_loss, ref_gn, ref_val);
        g_sp = true;
        check_schedule(world, "1f1b", 4, 4, false, ref_loss, ref_gn, ref_val);
        g_sp = false, g_tp = NULL;
        g_gsize = uneq; /* one rank -> fsdp2 -> one rank: blocks from and to a whole-rows stage */
        check_schedule(world, "1f1b", 4, 4, false, ref_loss, ref_gn, ref_val);
        g_gsize = two;
        g_fsdp = 0;
        check_fsdp_handoff(world);
        g_tp = tp_two; /* pp2 x tp2 */
        check_schedule(world, "1f1b", 4, 4, false, ref_loss, ref_gn, ref_val);
        check_schedule(world, "zb-h1", 4, 4, false, ref_loss, ref_gn, ref_val);
        g_sp = true; /* pp2 x tp2 with sequence parallelism inside each stage */
        check_schedule(world, "1f1b", 4, 4, false, ref_loss, ref_gn, ref_val);
        check_schedule(world, "zb-h1", 4, 4, false, ref_loss, ref_gn, ref_val);
        g_tp = tp_one; /* a dp2 stage handing over to a tp2 + SP stage */
        check_schedule(world, "gpipe", 4, 4, false, ref_loss, ref_gn, ref_val);
        g_sp = false;
        g_tp = tp_one; /* a dp2 stage handing over to a tp2 stage */
        check_schedule(world, "gpipe", 4, 4, false, ref_loss, ref_gn, ref_val);
        g_tp = tp_two, g_dropout = 0.1; /* pp2 x tp2 with dropout */
        reference(4, false, ref_loss, ref_gn, &ref_val);
        check_schedule(world, "1f1b", 4, 4, false, ref_loss, ref_gn, ref_val);
        g_dropout = 0;
        reference(4, false, ref_loss, ref_gn, &ref_val);
        g_tp = NULL;
        g_gsize = uneq;
        check_schedule(world, "1f1b", 4, 4, false, ref_loss, ref_gn, ref_val);
        g_gsize = NULL;
    }
eight:
    if (p == 8) { /* pp2 x dp2 x tp2; a tied head split alike on both ends */
        static const int four[] = {4, 4, 0}, tp_two[] = {2, 2};
        reference(4, false, ref_loss, ref_gn, &ref_val);
        g_gsize = four;
        g_tp = tp_two;
        check_schedule(world, "1f1b", 4, 4, false, ref_loss, ref_gn, ref_val);
        reference(4, true, ref_loss, ref_gn, &ref_val);
        check_schedule(world, "zb-v", 4, 4, true, ref_loss, ref_gn, ref_val);
        g_zero = true; /* and ZeRO-1 over each group's dp axis */
        check_schedule(world, "1f1b", 4, 4, true, ref_loss, ref_gn, ref_val);
        g_zero = false;
        g_tp = NULL, g_fsdp = 2; /* each group 2 replicas x FSDP over 2 (HSDP inside a stage) */
        check_schedule(world, "1f1b", 4, 4, true, ref_loss, ref_gn, ref_val);
        g_tp = tp_two; /* rows over fsdp2 x Megatron tp2: two copies of each block, each receiver one holder */
        check_schedule(world, "zb-v", 4, 4, true, ref_loss, ref_gn, ref_val);
        g_tp = NULL;
        g_fsdp = 0;
        g_gsize = NULL, g_tp = NULL;
    }
    int failed = g_failed, any = 0;
    hp_comm_all_reduce(world, &failed, &any, 1, HP_DTYPE_I32, HP_REDUCE_MAX);
    if (g_rank == 0) printf("%s\n", any ? "FAILED" : "every pipeline schedule trains as the single rank does");
    hp_comm_free(world);
    hp_comm_mpi_finalize();
    return any ? 1 : 0;
}
