/*
 * HyperMPMD pipeline benchmark, under mpirun with 2 ranks (2 stages):
 *   1. per schedule, the measured bubble of a 2-stage pipeline (1 - busy / (ranks x step time), busy
 *      = time in F, B and W programs) against the formula at the measured F, B, W times and against
 *      the simulator driven by them; the peak activation memory per rank: the program instances
 *      allocated (slots x one micro-batch's planned arena + workspace, per stage) against the
 *      schedule's peak formula x one micro-batch and the peak of the rank's list in bytes
 *      (hp_schedule_validate), one pipeline_peak_memory line per rank;
 *   2. the simulator driven by the measured F, B, W times (ZB-H1's, the ranks' means) for 4, 8 and
 *      16 stages at m = 2p and 4p, against the closed forms at the same times;
 *   3. the same model trained as pp2 (1F1B), dp2 and tp2 (hp train's trainer): tokens/s and bytes
 *      sent per rank per step side by side.
 *   4. with --offload BYTES: 1F1B with HyperOffload inside the stages under BYTES of device budget per
 *      rank, the activations to the host tier and to the disk tier (in $TMPDIR or /tmp), against no
 *      offload: step time and bytes offloaded, written to and read from disk per rank per step
 *      (--offload-only: this section alone).
 * With --fsdp under mpirun with 4 ranks, only pp2 x fsdp2 (bench_fsdp): the bytes each rank sends
 * per step between the groups and the step time.
 * Prints JSON lines (rank 0).
 *
 *   OMP_NUM_THREADS=1 mpirun -n 2 ./build/bench/bench_pipeline [--steps N] [--m M] [--offload BYTES [--offload-only]]
 *   OMP_NUM_THREADS=1 mpirun -n 4 ./build/bench/bench_pipeline --fsdp [--steps N] [--m M]
 */
#include "hp/comm_mpi.h"
#include "hp/config.h"
#include "hp/pipeline.h"
#include "hp/rng.h"
#include "hp/shard.h"
#include "hp/train.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const hp_optim_config OPTIM = {.lr = 1e-3, .min_lr = 1e-3, .weight_decay = 0.1, .beta1 = 0.9, .beta2 = 0.95,
                                      .eps = 1e-8, .grad_clip = 1.0};

#define BATCH 16
#define SEQ 128

static int g_rank;

static void fail(const char *what) {
    fprintf(stderr, "bench_pipeline [rank %d]: %s: %s\n", g_rank, what, hp_error_message());
    exit(1);
}

/* One schedule on the world's ranks: measured bubble and per-phase times. */
/* The bench's pipeline options for model c under schedule s on world (the caller adds groups or
 * offload). */
static hp_pipeline_opts base_opts(hp_comm *world, const hp_gpt_config *c, const hp_schedule *s) {
    hp_pipeline_opts o = HP_PIPELINE_OPTS_INIT;
    o.model = c;
    o.batch = BATCH;
    o.seq = SEQ;
    o.schedule = s;
    o.optim = &OPTIM;
    o.comm = world;
    return o;
}

/* A pipeline of o (`what` names it in a failure) with its parameters initialised and one warm-up
 * step run on the bench's batch, which *tok and *tgt receive (BATCH x SEQ ids each; the caller
 * frees them). */
static hp_pipeline *start(const hp_pipeline_opts *o, const char *what, int32_t **tok, int32_t **tgt) {
    hp_pipeline *pp;
    if (hp_pipeline_new(o, &pp) != HP_STATUS_OK) fail(what);
    if (hp_pipeline_init_params(pp, 1) != HP_STATUS_OK) fail("init");
    *tok = malloc(sizeof(int32_t) * BATCH * SEQ), *tgt = malloc(sizeof(int32_t) * BATCH * SEQ);
    if (!*tok || !*tgt) fail("the batch");
    for (int i = 0; i < BATCH * SEQ; i++)
        (*tok)[i] = (int32_t)(hp_rng_u64(1, (uint64_t)i) % 256), (*tgt)[i] = ((*tok)[i] + 1) % 256;
    float loss, gn;
    if (hp_pipeline_step(pp, *tok, *tgt, 1e-3f, &loss, &gn) != HP_STATUS_OK) fail("warm-up step");
    return pp;
}

static void bench_schedule(hp_comm *world, hp_sched_kind kind, int m, int steps, double *fbw) {
    int p = hp_comm_size(world);
    int v = kind == HP_SCHED_KIND_GPIPE || kind == HP_SCHED_KIND_1F1B || kind == HP_SCHED_KIND_ZB_H1 ? 1 : 2;
    (void)v;
    hp_gpt_config c = {.vocab = 256, .context = SEQ, .layers = 4, .heads = 4, .width = 128}; /* every schedule */
    hp_schedule s;
    if (hp_schedule_build(kind, p, m, 0, &s) != HP_STATUS_OK) fail("schedule");
    hp_pipeline_opts o = base_opts(world, &c, &s);
    int32_t *tok, *tgt;
    hp_pipeline *pp = start(&o, "pipeline", &tok, &tgt);
    float loss, gn;
    hp_pipeline_reset_stats(pp);
    for (int k = 0; k < steps; k++) {
        hp_comm_barrier(world); /* each step starts together: the barrier-ended step of the formulas */
        if (hp_pipeline_forward_backward(pp, tok, tgt, &loss) != HP_STATUS_OK) fail("step");
        if (hp_pipeline_update(pp, 1e-3f, &gn) != HP_STATUS_OK) fail("update");
    }
    hp_pipeline_stats st;
    hp_pipeline_get_stats(pp, &st);
    /* per rank: busy and step; the step is the slowest rank's */
    float mine[5] = {(float)(st.busy_seconds / steps), (float)(st.f_seconds / fmax(1, (double)st.n_f)),
                     (float)(st.b_seconds / fmax(1, (double)st.n_b)), (float)(st.n_w ? st.w_seconds / (double)st.n_w : 0),
                     (float)st.bytes_sent / (float)steps};
    float sum[5], step_max, step_mine = (float)(st.step_seconds / steps);
    hp_comm_all_reduce(world, mine, sum, 5, HP_DTYPE_F32, HP_REDUCE_SUM);
    hp_comm_all_reduce(world, &step_mine, &step_max, 1, HP_DTYPE_F32, HP_REDUCE_MAX);
    double f = sum[1] / p, b = sum[2] / p, w = sum[3] / p;
    bool split = s.split_backward;
    /* a full backward's time is b here; the formulas want b and w separately: split it evenly */
    double fb = split ? b : b / 2, fw = split ? w : b / 2;
    double measured = 1.0 - sum[0] / (p * step_max);
    hp_sched_bubble th = hp_schedule_bubble_formula(kind, p, m, s.v, f, fb, fw);
    /* each rank's own times for its stages (stages are not balanced: the embedding and the head) */
    float per[16] = {0}, all[16];
    int me = hp_comm_rank(world);
    if (p <= 4) {
        per[4 * me] = mine[1], per[4 * me + 1] = split ? mine[2] : mine[2] / 2, per[4 * me + 2] = split ? mine[3] : mine[2] / 2;
        per[4 * me + 3] = mine[0];
    }
    hp_comm_all_reduce(world, per, all, 16, HP_DTYPE_F32, HP_REDUCE_SUM);
    double *fs = calloc((size_t)s.n_stages, sizeof *fs), *bs = calloc((size_t)s.n_stages, sizeof *bs),
           *ws = calloc((size_t)s.n_stages, sizeof *ws);
    for (int k = 0; k < s.n_stages; k++) {
        int r = s.stage_rank[k];
        fs[k] = all[4 * r], bs[k] = all[4 * r + 1], ws[k] = all[4 * r + 2];
    }
    hp_sched_costs costs = HP_SCHED_COSTS_INIT;
    costs.f = f, costs.b = fb, costs.w = fw;
    if (p <= 4) costs.f_stage = fs, costs.b_stage = bs, costs.w_stage = ws;
    hp_sched_timeline tl;
    double sim = NAN;
    if (hp_schedule_simulate(&s, &costs, &tl) == HP_STATUS_OK) {
        sim = tl.bubble;
        hp_sched_timeline_free(&tl);
    }
    int slots = 0, nslots_max = 0;
    for (int ch = 0; ch < hp_pipeline_n_chunks(pp); ch++) {
        hp_pipeline_stage_info(pp, ch, NULL, NULL, &slots);
        nslots_max += slots;
    }
    int peak_max = 0;
    hp_comm_all_reduce(world, &nslots_max, &peak_max, 1, HP_DTYPE_I32, HP_REDUCE_MAX);
    if (g_rank == 0)
        printf("{\"bench\": \"pipeline_bubble\", \"schedule\": \"%s\", \"p\": %d, \"m\": %d, \"v\": %d, \"step_s\": %.4f, "
               "\"f_ms\": %.3f, \"b_ms\": %.3f, \"w_ms\": %.3f, \"bubble_measured\": %.3f, \"bubble_simulated\": %.3f, "
               "\"bubble_formula\": %.3f, \"measured_over_formula\": %.2f, \"peak_slots_max_rank\": %d, "
               "\"bytes_sent_per_rank_step\": %.0f}\n",
               hp_sched_kind_name(kind), p, m, s.v, step_max, 1e3 * f, 1e3 * b, 1e3 * w, measured, sim, th.sync,
               th.sync > 0 ? measured / th.sync : NAN, peak_max, sum[4] / p);
    fflush(stdout);
    if (g_rank == 0)
        for (int r = 0; r < p && p <= 4; r++)
            printf("{\"bench\": \"pipeline_rank\", \"schedule\": \"%s\", \"rank\": %d, \"f_ms\": %.3f, \"b_ms\": %.3f, "
                   "\"w_ms\": %.3f, \"busy_s\": %.4f, \"busy_fraction\": %.3f}\n",
                   hp_sched_kind_name(kind), r, 1e3 * all[4 * r], 1e3 * all[4 * r + 1], 1e3 * all[4 * r + 2],
                   all[4 * r + 3], all[4 * r + 3] / step_max);
    free(fs), free(bs), free(ws);
    /* peak activation memory per rank: the program instances allocated (slots x one micro-batch's
     * planned arena + workspace, per chunk) against the schedule's peak formula x the largest chunk's
     * micro-batch and against the peak bytes of the rank's list (hp_schedule_validate) */
    {
        enum { MAXC = 4 };
        int32_t mine_i[4 * MAXC * 3] = {0}, all_i[4 * MAXC * 3];
        for (int ch = 0; ch < hp_pipeline_n_chunks(pp) && ch < MAXC && me < 4; ch++) {
            int stage, ns;
            hp_gpt_stage info;
            hp_pipeline_stage_plan sp;
            hp_machine_model mm = HP_MACHINE_MODEL_DEFAULT;
            if (hp_pipeline_stage_info(pp, ch, &stage, &info, &ns) != HP_STATUS_OK) fail("stage info");
            if (hp_pipeline_plan_stage(&c, &info, BATCH / m, SEQ, m, &mm, &sp) != HP_STATUS_OK) fail("plan stage");
            int32_t *e = &mine_i[(me * MAXC + ch) * 3];
            e[0] = stage + 1, e[1] = ns, e[2] = (int32_t)hp_pipeline_stage_activations(&sp, s.split_backward);
        }
        hp_comm_all_reduce(world, mine_i, all_i, 4 * MAXC * 3, HP_DTYPE_I32, HP_REDUCE_SUM);
        double *act = calloc((size_t)s.n_stages, sizeof *act), *pb = calloc((size_t)p, sizeof *pb);
        int *pk = calloc((size_t)p, sizeof *pk);
        for (int r = 0; r < p && r < 4; r++)
            for (int ch = 0; ch < MAXC; ch++) {
                const int32_t *e = &all_i[(r * MAXC + ch) * 3];
                if (e[0] > 0) act[e[0] - 1] = e[2];
            }
        hp_sched_check_opts co = HP_SCHED_CHECK_OPTS_INIT;
        co.act_bytes = act;
        if (hp_schedule_validate(&s, &co, pk, pb) != HP_STATUS_OK) fail("validate");
        for (int r = 0; g_rank == 0 && r < p && r < 4; r++) {
            double alloc = 0, act_max = 0;
            int slots_r = 0;
            char stages[128] = "";
            size_t used = 0;
            for (int ch = 0; ch < MAXC; ch++) {
                const int32_t *e = &all_i[(r * MAXC + ch) * 3];
                if (e[0] <= 0) continue;
                alloc += (double)e[1] * e[2], slots_r += e[1];
                if (e[2] > act_max) act_max = e[2];
                used += (size_t)snprintf(stages + used, sizeof stages - used, "%s{\"stage\": %d, \"slots\": %d, "
                                         "\"activation_mib\": %.3f}", used ? ", " : "", e[0] - 1, e[1],
                                         (double)e[2] / (1 << 20));
            }
            int pf = hp_schedule_peak_formula(kind, p, m, s.v, r);
            printf("{\"bench\": \"pipeline_peak_memory\", \"schedule\": \"%s\", \"rank\": %d, \"stages\": [%s], "
                   "\"slots\": %d, \"allocated_mib\": %.3f, \"list_peak\": %d, \"list_peak_mib\": %.3f, "
                   "\"formula_peak\": %d, \"formula_mib\": %.3f}\n",
                   hp_sched_kind_name(kind), r, stages, slots_r, alloc / (1 << 20), pk[r], pb[r] / (1 << 20), pf,
                   pf * act_max / (1 << 20));
        }
        free(act), free(pb), free(pk);
    }
    fbw[0] = f, fbw[1] = fb, fbw[2] = fw;
    hp_pipeline_free(pp);
    hp_schedule_free(&s);
    free(tok);
    free(tgt);
}

/* The simulator with measured per-stage times, for more stages than this machine has. */
static void simulate_larger(const double *fbw) {
    const hp_sched_kind kinds[] = {HP_SCHED_KIND_GPIPE, HP_SCHED_KIND_1F1B, HP_SCHED_KIND_INTERLEAVED_1F1B,
                                   HP_SCHED_KIND_ZB_H1, HP_SCHED_KIND_ZB_V, HP_SCHED_KIND_DUALPIPE_V};
    const int ps[] = {4, 8, 16};
    for (size_t pi = 0; pi < 3; pi++)
        for (int mf = 2; mf <= 4; mf += 2)
        for (size_t k = 0; k < 6; k++) {
            int p = ps[pi], m = mf * p;
            hp_schedule s;
            if (hp_schedule_build(kinds[k], p, m, 0, &s) != HP_STATUS_OK) continue;
            hp_sched_costs c = HP_SCHED_COSTS_INIT;
            c.f = fbw[0], c.b = fbw[1], c.w = fbw[2];
            hp_sched_timeline tl;
            if (hp_schedule_simulate(&s, &c, &tl) == HP_STATUS_OK) {
                hp_sched_bubble th = hp_schedule_bubble_formula(kinds[k], p, m, s.v, c.f, c.b, c.w);
                printf("{\"bench\": \"pipeline_bubble_simulated\", \"schedule\": \"%s\", \"p\": %d, \"m\": %d, "
                       "\"f_ms\": %.3f, \"b_ms\": %.3f, \"w_ms\": %.3f, \"bubble_simulated\": %.4f, "
                       "\"bubble_span\": %.4f, \"bubble_formula\": %.4f, \"simulated_over_formula\": %.3f}\n",
                       hp_sched_kind_name(kinds[k]), p, m, 1e3 * c.f, 1e3 * c.b, 1e3 * c.w, tl.bubble, tl.bubble_span,
                       th.sync, th.sync > 0 ? tl.bubble / th.sync : NAN);
                hp_sched_timeline_free(&tl);
            }
            hp_schedule_free(&s);
        }
}

/* The same model through hp train's trainer as pp2, dp2 and tp2. */
static void compare_strategies(hp_comm *world, int steps) {
    const char *root = getenv("HP_SOURCE_DIR");
    char corpus[1024];
    snprintf(corpus, sizeof corpus, "%s/data/kjv.txt", root ? root : ".");
    const char *names[] = {"pp2", "dp2", "tp2"};
    const char *sections[] = {
        "pipeline: {schedule: 1f1b, micro_batches: 8}\ngroups:\n  s0: {ranks: [0], module: [embedding, blocks.0-1]}\n"
        "  s1: {ranks: [1], module: [blocks.2-3, head]}\n",
        "strategy:\n  mesh: {device_matrix: [2], alias_name: [dp]}\n  inputs: {tokens: [dp, none], targets: [dp, none]}\n",
        "strategy:\n  mesh: {device_matrix: [2], alias_name: [tp]}\n  params:\n"
        "    - {match: \"blocks.*.attn.[qkv].weight\", tensor_map: [tp, none]}\n"
        "    - {match: \"blocks.*.attn.[qkv].bias\", tensor_map: [tp]}\n"
        "    - {match: \"blocks.*.mlp.fc.weight\", tensor_map: [tp, none]}\n"
        "    - {match: \"blocks.*.mlp.fc.bias\", tensor_map: [tp]}\n"
        "    - {match: \"blocks.*.attn.proj.weight\", tensor_map: [none, tp]}\n"
        "    - {match: \"blocks.*.mlp.proj.weight\", tensor_map: [none, tp]}\n"};
    for (int k = 0; k < 3; k++) {
        char text[4096];
        snprintf(text, sizeof text,
                 "model: {vocab: 256, context: %d, layers: 4, heads: 4, width: 128}\n"
                 "data: {corpus: \"%s\", val_fraction: 0.05}\n"
                 "train: {steps: %d, batch: %d, seed: 1, checkpoint_dir: /tmp/unused}\n"
                 "optim: {lr: 1.0e-3, min_lr: 1.0e-4, warmup: 2, grad_clip: 1.0}\n%s",
                 SEQ, corpus, steps + 1, BATCH, sections[k]);
        hp_run_config cfg;
        hp_trainer *t;
        if (hp_run_config_load_string(text, strlen(text), names[k], &cfg) != HP_STATUS_OK) fail("config");
        if (hp_trainer_new_dist(&cfg, world, &t) != HP_STATUS_OK) fail(names[k]);
        hp_step_metrics m;
        if (hp_trainer_step(t, &m) != HP_STATUS_OK) fail("warm-up");
        double best = 1e30, sum = 0;
        for (int i = 0; i < steps; i++) {
            hp_comm_barrier(world);
            if (hp_trainer_step(t, &m) != HP_STATUS_OK) fail("step");
            float mine_s = (float)m.seconds, mx;
            hp_comm_all_reduce(world, &mine_s, &mx, 1, HP_DTYPE_F32, HP_REDUCE_MAX);
            sum += mx;
            best = fmin(best, mx);
        }
        /* pp: each rank sends one direction, the activations or their gradients: batch x seq x width f32 */
        double bytes = k == 0 ? (double)BATCH * SEQ * 128 * 4 : (double)hp_partition_bytes(hp_trainer_partition(t));
        if (g_rank == 0)
            printf("{\"bench\": \"pipeline_vs_spmd\", \"strategy\": \"%s\", \"ranks\": 2, \"step_s_mean\": %.4f, "
                   "\"step_s_min\": %.4f, \"tokens_per_s\": %.1f, \"bytes_per_rank_step\": %.0f}\n",
                   names[k], sum / steps, best, BATCH * SEQ / (sum / steps), bytes);
        fflush(stdout);
        hp_trainer_free(t);
        hp_run_config_free(&cfg);
    }
}

/* 1F1B under an offload budget per rank: none (tier 0), activations to the host (1) or disk (2). */
static void bench_offload(hp_comm *world, int m, int steps, size_t budget, int tier) {
    hp_gpt_config c = {.vocab = 256, .context = SEQ, .layers = 4, .heads = 4, .width = 128};
    hp_schedule s;
    if (hp_schedule_build(HP_SCHED_KIND_1F1B, hp_comm_size(world), m, 0, &s) != HP_STATUS_OK) fail("schedule");
    hp_pipeline_opts o = base_opts(world, &c, &s);
    hp_offload_plan_config oc;
    hp_offload_plan_config_init(&oc);
    oc.device_budget = budget;
    oc.bandwidth[HP_TIER_HOST] = 1e10, oc.bandwidth[HP_TIER_DISK] = 1e9; /* no probe */
    const char *tmp = getenv("TMPDIR");
    if (tier == 2) oc.disk_dir = tmp && *tmp ? tmp : "/tmp", oc.policy[HP_OFFLOAD_CLASS_ACTIVATIONS] = HP_TIER_DISK;
    if (tier) o.offload = &oc;
    int32_t *tok, *tgt;
    hp_pipeline *pp = start(&o, "pipeline with offload", &tok, &tgt);
    float loss, gn;
    hp_pipeline_stats st0, st;
    hp_pipeline_get_stats(pp, &st0); /* the offload bytes count from the start: take the warm-up off */
    hp_pipeline_reset_stats(pp);
    for (int k = 0; k < steps; k++) {
        hp_comm_barrier(world);
        if (hp_pipeline_forward_backward(pp, tok, tgt, &loss) != HP_STATUS_OK) fail("step with offload");
        if (hp_pipeline_update(pp, 1e-3f, &gn) != HP_STATUS_OK) fail("update");
    }
    hp_pipeline_get_stats(pp, &st);
    float mine[4] = {(float)(st.bytes_offloaded - st0.bytes_offloaded) / (float)steps,
                     (float)(st.bytes_to_disk - st0.bytes_to_disk) / (float)steps,
                     (float)(st.bytes_from_disk - st0.bytes_from_disk) / (float)steps, 0};
    float all[4 * 2] = {0}, step_mine = (float)(st.step_seconds / steps), step_max;
    int me = hp_comm_rank(world), p = hp_comm_size(world);
    float per[8] = {0};
    for (int k = 0; k < 3 && me < 2; k++) per[4 * me + k] = mine[k];
    hp_comm_all_reduce(world, per, all, 8, HP_DTYPE_F32, HP_REDUCE_SUM);
    hp_comm_all_reduce(world, &step_mine, &step_max, 1, HP_DTYPE_F32, HP_REDUCE_MAX);
    static const char *const names[] = {"none", "host", "disk"};
    if (g_rank == 0)
        for (int r = 0; r < p && r < 2; r++)
            printf("{\"bench\": \"pipeline_offload\", \"schedule\": \"1f1b\", \"p\": %d, \"m\": %d, \"tier\": \"%s\", "
                   "\"device_budget\": %zu, \"step_s\": %.4f, \"rank\": %d, \"offloaded_bytes_per_step\": %.0f, "
                   "\"disk_written_per_step\": %.0f, \"disk_read_per_step\": %.0f, \"loss\": %.5f}\n",
                   p, m, names[tier], tier ? budget : 0, step_max, r, all[4 * r], all[4 * r + 1], all[4 * r + 2],
                   (double)loss);
    fflush(stdout);
    free(tok), free(tgt);
    hp_pipeline_free(pp);
    hp_schedule_free(&s);
}

/* pp2 x fsdp2 on 4 ranks (examples/pp2fsdp2.yaml's model and groups: width 128, context 128, batch
 * 16, 1F1B over m micro-batches): the bytes each rank sends per step (activations and input
 * gradients handed between the groups; the stage's own collectives are not counted) and the step
 * time (per step the slowest rank's, median over the steps). */
static void bench_fsdp(hp_comm *world, int m, int steps) {
    const char *text =
        "model: {vocab: 256, context: 128, layers: 4, heads: 4, width: 128}\n"
        "data: {corpus: data/kjv.txt, val_fraction: 0.05}\n"
        "train: {steps: 1, batch: 16, seed: 1, checkpoint_dir: /tmp/unused}\n"
        "pipeline: {schedule: 1f1b, micro_batches: 4}\ngroups:\n"
        "  stage0: {ranks: [0, 1], module: [embedding, blocks.0-1], mesh: {device_matrix: [2], alias_name: [fsdp]}, strategy: {inputs: {tokens: "
        "[fsdp, none], targets: [fsdp, none]}, params: [{match: \"*\", tensor_map: [fsdp]}]}}\n"
        "  stage1: {ranks: [2, 3], module: [blocks.2-3, head], mesh: {device_matrix: [2], alias_name: [fsdp]}, strategy: {inputs: {tokens: "
        "[fsdp, none], targets: [fsdp, none]}, params: [{match: \"*\", tensor_map: [fsdp]}]}}\n";
    hp_run_config cfg;
    if (hp_run_config_load_string(text, strlen(text), "pp2fsdp2", &cfg) != HP_STATUS_OK) fail("config");
    int gsize[2] = {2, 2};
    hp_strategy_config gstrat[2];
    for (int i = 0; i < cfg.groups.n_groups && i < 2; i++) gstrat[cfg.groups.groups[i].stage] = cfg.groups.groups[i].strategy;
    hp_gpt_config c = {.vocab = 256, .context = SEQ, .layers = 4, .heads = 4, .width = 128};
    hp_schedule s;
    if (hp_schedule_build(HP_SCHED_KIND_1F1B, 2, m, 0, &s) != HP_STATUS_OK) fail("schedule");
    hp_pipeline_opts o = base_opts(world, &c, &s);
    o.group_size = gsize;
    o.group_strategy = gstrat;
    int32_t *tok, *tgt;
    hp_pipeline *pp = start(&o, "pipeline", &tok, &tgt);
    float loss, gn;
    hp_pipeline_reset_stats(pp);
    double *step_s = calloc((size_t)steps, sizeof *step_s);
    for (int k = 0; k < steps; k++) {
        hp_comm_barrier(world);
        double t0 = hp_now_seconds();
        if (hp_pipeline_step(pp, tok, tgt, 1e-3f, &loss, &gn) != HP_STATUS_OK) fail("step");
        float mine = (float)(hp_now_seconds() - t0), mx;
        hp_comm_all_reduce(world, &mine, &mx, 1, HP_DTYPE_F32, HP_REDUCE_MAX);
        step_s[k] = mx;
    }
    for (int a = 0; a < steps; a++) /* sort for the median */
        for (int b = a + 1; b < steps; b++)
            if (step_s[b] < step_s[a]) {
                double t = step_s[a];
                step_s[a] = step_s[b], step_s[b] = t;
            }
    hp_pipeline_stats st;
    hp_pipeline_get_stats(pp, &st);
    float bytes = (float)st.bytes_sent / (float)steps, bmax, bsum;
    hp_comm_all_reduce(world, &bytes, &bmax, 1, HP_DTYPE_F32, HP_REDUCE_MAX);
    hp_comm_all_reduce(world, &bytes, &bsum, 1, HP_DTYPE_F32, HP_REDUCE_SUM);
    if (g_rank == 0)
        printf("{\"bench\": \"pipeline_fsdp_handoff\", \"groups\": \"pp2 x fsdp2\", \"m\": %d, \"steps\": %d, "
               "\"step_s_median\": %.4f, \"step_s_min\": %.4f, \"bytes_sent_per_rank_step_mean\": %.0f, "
               "\"bytes_sent_per_rank_step_max\": %.0f, \"loss\": %.4f}\n",
               m, steps, step_s[steps / 2], step_s[0], bsum / 4, bmax, (double)loss);
    fflush(stdout);
    free(step_s), free(tok), free(tgt);
    hp_pipeline_free(pp);
    hp_schedule_free(&s);
    hp_run_config_free(&cfg);
}

int main(int argc, char **argv) {
    if (hp_comm_mpi_init(&argc, &argv) != HP_STATUS_OK) return 1;
    hp_comm *world;
    if (hp_comm_mpi_world(&world) != HP_STATUS_OK) return 1;
    g_rank = hp_comm_rank(world);
    int steps = 3, m = 8;
    size_t offload = 0;
    bool offload_only = false, fsdp = false;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--steps") && i + 1 < argc) steps = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--m") && i + 1 < argc) m = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--offload") && i + 1 < argc) offload = (size_t)strtoull(argv[++i], NULL, 10);
        else if (!strcmp(argv[i], "--offload-only")) offload_only = true;
        else if (!strcmp(argv[i], "--fsdp")) fsdp = true;
    }
    if (fsdp) { /* 4 ranks: the pp2 x fsdp2 hand-off only */
        if (hp_comm_size(world) != 4) {
            fprintf(stderr, "bench_pipeline --fsdp runs on 4 ranks (pp2 x fsdp2), not %d\n", hp_comm_size(world));
            return 1;
        }
        bench_fsdp(world, m, steps);
        hp_comm_free(world);
        hp_comm_mpi_finalize();
        return 0;
    }
    if (offload)
        for (int tier = 0; tier < 3; tier++) bench_offload(world, m, steps, offload, tier);
    if (offload_only) {
        hp_comm_free(world);
        hp_comm_mpi_finalize();
        return 0;
    }
    const hp_sched_kind kinds[] = {HP_SCHED_KIND_GPIPE, HP_SCHED_KIND_1F1B, HP_SCHED_KIND_INTERLEAVED_1F1B,
                                   HP_SCHED_KIND_ZB_H1, HP_SCHED_KIND_ZB_V, HP_SCHED_KIND_DUALPIPE_V};
    double fbw[3] = {0};
    for (size_t k = 0; k < 6; k++) {
        double x[3];
        bench_schedule(world, kinds[k], m, steps, x);
        if (kinds[k] == HP_SCHED_KIND_ZB_H1) memcpy(fbw, x, sizeof fbw); /* one chunk per rank, split B/W */
    }
    if (g_rank == 0) simulate_larger(fbw);
    compare_strategies(world, steps);
    hp_comm_free(world);
    hp_comm_mpi_finalize();
    return 0;
}
