/*
 * `hp plan RUN.yaml [--ranks N] [--rank R] [--dump-after PASS] [--calibration FILE]`: what a run
 * would do, without running it — the mesh, the layout of every parameter, input and optimizer
 * state, each inserted collective with its bytes, the bytes per rank per step, the memory per rank,
 * a predicted step time and the compile driver's pass times (hp/compile.h); or the IR after one
 * pass. The prediction uses the calibrated cost model (hp/costmodel.h) when the calibration file
 * (default: hp calibrate's cache) has an entry for this machine and the run's ranks per node, else
 * the flat model below.
 * A config with HyperMPMD groups gets the pipeline's plan instead (plan_pipeline.c).
 */
#include "cli/cli.h"

#include "hp/compile.h"
#include "hp/config.h"
#include "hp/costmodel.h"
#include "hp/ops.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The flat machine model, without a calibration: sustained GEMM rate and network bandwidth. */
#define PLAN_FLOPS_PER_S 150e9
#define PLAN_NET_BYTES_PER_S 10e9

static const char *phase_name(uint32_t flags) {
    if (flags & HP_NODE_FLAG_OPTIMIZER) return "optimizer";
    if (flags & HP_NODE_FLAG_BACKWARD) return "backward";
    return "forward";
}

static double mib(double b) { return b / (1024.0 * 1024.0); }

/* The predicted step: under the calibration of this machine with `world` ranks on it when `path`
 * (NULL: the default cache) has one, else the flat model, saying which and why. */
static void print_prediction(const hp_compiled *c, double flops, int64_t total, int world, const char *path) {
    char def[4096], ks[256];
    hp_machine_key key;
    hp_calibration *cal = malloc(sizeof *cal);
    hp_status st = cal ? HP_STATUS_OK : hp_error(HP_STATUS_OUT_OF_MEMORY, "calibration");
    if (st == HP_STATUS_OK && !path) {
        st = hp_calibration_default_path(def, sizeof def);
        path = def;
    }
    /* the threads each rank will run: OMP_NUM_THREADS when set, else whatever the cache has */
    const char *omp = getenv("OMP_NUM_THREADS");
    int threads = omp ? atoi(omp) : 0;
    if (st == HP_STATUS_OK) st = hp_machine_key_local(threads > 0 ? threads : 0, world, &key);
    if (threads <= 0) key.threads = 0; /* any: mpirun's binding decides, which plan cannot see */
    if (st == HP_STATUS_OK) st = hp_calibration_load(path, &key, 0, cal);
    printf("\n== predicted step\n");
    hp_machine_model m = {.flops_per_s = PLAN_FLOPS_PER_S, .bytes_per_s = PLAN_NET_BYTES_PER_S, .cal = NULL};
    if (st != HP_STATUS_OK) {
        printf("  model: flat (%.0f GFLOP/s, %.0f GB/s): %s\n", PLAN_FLOPS_PER_S / 1e9, PLAN_NET_BYTES_PER_S / 1e9,
               hp_error_message());
        double tc = flops / PLAN_FLOPS_PER_S, tn = (double)total / PLAN_NET_BYTES_PER_S;
        printf("  %.2f GFLOP per rank -> %.3f s compute at %.0f GFLOP/s; %.3f s communication at %.0f GB/s"
               " (%.3f s if not overlapped)\n",
               flops / 1e9, tc, PLAN_FLOPS_PER_S / 1e9, tn, PLAN_NET_BYTES_PER_S / 1e9, tc + tn);
        free(cal);
        return;
    }
    m.cal = cal;
    hp_step_prediction p;
    st = hp_compiled_predict(c, &m, &p);
    if (st != HP_STATUS_OK) {
        printf("  (no prediction: %s)\n", hp_error_message());
        free(cal);
        return;
    }
    printf("  model: calibrated (%s: %s, probed in %.0f s)\n", path, hp_machine_key_str(&cal->key, ks, sizeof ks),
           cal->probe_seconds);
    printf("  compute %.3f s over %d nodes (%.2f GFLOP): GEMM %.3f s, attention %.3f s, memory-bound %.3f s\n",
           p.compute_s, p.n_nodes, flops / 1e9, p.gemm_s, p.attention_s, p.memory_s);
    if (p.dispatch_s != 0)
        printf("  (of which %.3f s node dispatch: the program runs %s, the kernels were probed %s)\n", p.dispatch_s,
               p.by_node ? "node by node" : "in a team", cal->by_node ? "node by node" : "in a team");
    if (p.n_comm)
        printf("  communication %.3f s on the queues for %d collective nodes (alpha-beta per operation and group "
               "size): %.3f s of it also on the compute cores, %.3f s exposed waiting\n",
               p.comm_s, p.n_comm, p.comm_compute_s, p.exposed_comm_s);
    printf("  predicted step: %.3f s\n", p.total_s);
    if (p.n_comm)
        printf("  assumptions: collectives start in program order on their group's queue once their input is ready "
               "and overlap compute until their result's first use; %.0f%% of their time also occupies the compute "
               "cores (%s)\n",
               100 * cal->comm_compute_share,
               cal->comm_compute_share > 0 ? "no core is left for the progress threads" : "a core is left for them");
    free(cal);
}

/* The plan of `rank` of `ranks`; with `dump` (not HP_PASS_NONE) only the IR after that pass and
 * the pass times (`--dump-after PASS`). */
static int print_plan(const hp_run_config *cfg, int ranks, int rank, hp_pass dump, const char *calibration) {
    hp_compile_opts o = HP_COMPILE_OPTS_INIT;
    o.train = true;
    o.plan_only = true;
    o.plan_world_size = ranks;
    o.plan_index = rank;
    if (dump != HP_PASS_NONE) {
        o.stop_after = o.dump_after = dump;
        o.dump = stdout;
    }
    hp_compiled *c = NULL;
    hp_status st = hp_compile_run(cfg, &o, &c);
    if (st != HP_STATUS_OK) return hp_cli_fail(st, cfg->source);
    if (dump != HP_PASS_NONE) {
        printf("\n== compile passes (seconds)\n");
        hp_compile_report_print(hp_compiled_report(c), stdout);
        hp_compiled_free(c);
        return 0;
    }
    hp_strategy *s = hp_compiled_strategy(c);
    hp_mesh *mesh = hp_compiled_mesh(c);
    hp_partition *part = hp_compiled_partition(c);
    const hp_graph *g = hp_compiled_logical(c);
    int nt = hp_graph_n_tensors(g);
    hp_graph *lg = hp_partition_graph(part);
    printf("== strategy (%d ranks; showing rank %d)\n", hp_mesh_size(mesh), rank);
    hp_strategy_describe(s, stdout);
    printf("\n== layouts (global shape -> this rank's block)\n");
    double bytes_by_kind[HP_TENSOR_KIND_COUNT] = {0};
    char lb[256], gs[96], ls[96];
    for (int t = 0; t < nt; t++) {
        const hp_tensor *x = hp_graph_tensor(g, t);
        if (x->producer >= 0 || !x->name) continue;
        const hp_tensor *y = hp_graph_tensor(lg, hp_partition_local(part, t));
        bytes_by_kind[x->kind] += (double)hp_shape_numel(&y->shape) * (double)hp_dtype_size(y->dtype);
        printf("  %-40s %-9s %-16s %-28s %s\n", x->name, hp_tensor_kind_name(x->kind), hp_shape_str(&x->shape, gs, sizeof gs),
               hp_layout_format(hp_partition_layout(part, t), mesh, lb, sizeof lb), hp_shape_str(&y->shape, ls, sizeof ls));
    }
    printf("\n== collectives (per step, this rank)\n");
    int64_t by_phase[3] = {0};
    int count[HP_REDIST_KIND_COUNT] = {0};
    for (int i = 0; i < hp_partition_n_collectives(part); i++) {
        const hp_collective_info *c = hp_partition_collective(part, i);
        if (c->plan.nsteps == 0) continue;
        int ph = (c->flags & HP_NODE_FLAG_OPTIMIZER) ? 2 : (c->flags & HP_NODE_FLAG_BACKWARD) ? 1 : 0;
        by_phase[ph] += c->plan.bytes;
        printf("  %-9s %-44s", phase_name(c->flags), c->tensor);
        for (int k = 0; k < c->plan.nsteps; k++) {
            const hp_redist_step *stp = &c->plan.steps[k];
            count[stp->kind]++;
            printf(" %s%s%s", k ? "+ " : "", hp_redist_kind_name(stp->kind),
                   stp->axis >= 0 ? "(" : "");
            if (stp->axis >= 0) printf("%s)", hp_mesh_axis_name(mesh, stp->axis));
        }
        printf("  %lld B\n", (long long)c->plan.bytes);
    }
    int64_t total = by_phase[0] + by_phase[1] + by_phase[2];
    printf("  total: %lld bytes received per rank per step (forward %lld, backward %lld, optimizer %lld)\n",
           (long long)total, (long long)by_phase[0], (long long)by_phase[1], (long long)by_phase[2]);
    int64_t p2p[2] = {0};
    int n_p2p = 0;
    for (int i = 0; i < hp_graph_n_nodes(lg); i++) { /* ring attention's transfers (hp_partition_p2p_bytes) */
        const hp_node *n = hp_graph_node(lg, i);
        if ((n->op != HP_OP_SENDRECV && n->op != HP_OP_RECV) || !(n->flags & HP_NODE_FLAG_INSTR)) continue;
        const hp_tensor *y = hp_graph_tensor(lg, n->out[0]);
        p2p[(n->flags & HP_NODE_FLAG_BACKWARD) ? 1 : 0] += hp_shape_numel(&y->shape) * (int64_t)hp_dtype_size(y->dtype);
        n_p2p++;
    }
    if (n_p2p) {
        printf("  point to point (ring attention): %lld bytes received per rank per step (forward %lld, backward %lld) in "
               "%d receives\n", (long long)(p2p[0] + p2p[1]), (long long)p2p[0], (long long)p2p[1], n_p2p);
        const hp_gpt *gpt = hp_compiled_gpt(c);
        if (gpt && gpt->cfg.cp_balance > 1)
            printf("  causal load balancing: each of the %d ring ranks holds chunks i and %d - i of the sequence\n",
                   gpt->cfg.cp_balance, 2 * gpt->cfg.cp_balance - 1);
    }
    printf("  steps:");
    for (int k = 0; k < HP_REDIST_KIND_COUNT; k++)
        if (count[k]) printf(" %s x%d", hp_redist_kind_name((hp_redist_kind)k), count[k]);
    printf("\n");
    printf("  gradient buckets: %d", hp_partition_n_buckets(part));
    if (hp_strategy_bucket_size(s) == 0) printf(" (bucketing off: strategy.bucket_size 0)");
    else printf(" (strategy.bucket_size %lld bytes)", (long long)hp_strategy_bucket_size(s));
    printf("%s\n", hp_partition_n_buckets(part) ? ", in issue order:" : "");
    for (int b = 0; b < hp_partition_n_buckets(part); b++) {
        const hp_bucket_info *bi = hp_partition_bucket(part, b);
        printf("    bucket %-3d %s(%s) %3d tensors %10lld B packed, %10lld B received\n", b, hp_redist_kind_name(bi->kind),
               hp_mesh_axis_name(mesh, bi->axis), bi->n_tensors, (long long)bi->bytes,
               (long long)hp_partition_collective(part, bi->collective)->plan.bytes);
    }

    /* the partitioner's weight-stationary search (hp_partition_opts.search): parameters kept in place */
    printf("  weight-stationary (search): %d parameter%s kept in their own layout%s", hp_partition_n_stationary(part),
           hp_partition_n_stationary(part) == 1 ? "" : "s", hp_partition_n_stationary(part) ? ":" : "");
    const hp_graph *logical = hp_compiled_logical(c);
    for (int t = 0, shown = 0; t < hp_graph_n_tensors(logical); t++)
        if (hp_partition_is_stationary(part, t) && shown++ < 8) printf(" %s", hp_graph_tensor(logical, t)->name);
    printf("%s\n", hp_partition_n_stationary(part) > 8 ? " ..." : "");

    /* memory: what hp_program_new would allocate for this rank's graph after the offload pass (the
     * same liveness, arena plan, reshape views and workspace rule), planned without allocating */
    const hp_program_stats ps = *hp_compiled_memory(c);
    double flops = 0;
    for (int i = 0; i < hp_graph_n_nodes(lg); i++) flops += hp_node_cost(lg, i).flops;
    printf("\n== memory per rank\n");
    printf("  parameters %.2f MiB | optimizer state %.2f MiB | inputs %.2f MiB | activations + gradients (planned arena) "
           "%.2f MiB | kernel workspace %.2f MiB\n",
           mib(bytes_by_kind[HP_TENSOR_KIND_PARAM]), mib(bytes_by_kind[HP_TENSOR_KIND_OPT_STATE]),
           mib(bytes_by_kind[HP_TENSOR_KIND_INPUT]), mib((double)ps.arena_bytes), mib((double)ps.workspace_bytes));
    printf("  total %.2f MiB%s\n", mib((double)ps.device_bytes),
           hp_compiled_offload(c) ? " in the fast tier after the offload pass (the residency plan is below)" : "");
    print_prediction(c, flops, total, hp_mesh_size(mesh), calibration);
    if (hp_compiled_report(c)->strategy_warnings)
        printf("  (%d strategy rule(s) matched no parameter)\n", hp_compiled_report(c)->strategy_warnings);
    if (hp_compiled_offload(c)) { /* the residency plan of this rank's step under the offload budgets */
        printf("\n== offload (residency plan)\n");
        hp_offload_plan_print(hp_offload_state_plan(hp_compiled_offload(c)), lg, stdout);
    }
    printf("\n== compile passes (seconds)\n");
    hp_compile_report_print(hp_compiled_report(c), stdout);
    hp_compiled_free(c);
    return 0;
}
int hp_cli_plan(int argc, char **argv) {
    const char *config = NULL, *calibration = NULL;
    int64_t ranks = 0, rank = 0;
    hp_pass dump = HP_PASS_NONE;
    for (int i = 0; i < argc; i++) {
        if (!strcmp(argv[i], "--ranks")) {
            if (!hp_cli_has_value(argc, argv, i) || !hp_cli_int("--ranks", argv[++i], 1, HP_CLI_MAX_RANKS, &ranks))
                return 2;
        } else if (!strcmp(argv[i], "--rank")) {
            if (!hp_cli_has_value(argc, argv, i) || !hp_cli_int("--rank", argv[++i], 0, HP_CLI_MAX_RANKS - 1, &rank))
                return 2;
        } else if (!strcmp(argv[i], "--calibration")) {
            if (!hp_cli_has_value(argc, argv, i)) return 2;
            calibration = argv[++i];
        } else if (!strcmp(argv[i], "--dump-after")) {
            if (!hp_cli_has_value(argc, argv, i)) return 2;
            hp_status st = hp_pass_parse(argv[++i], &dump);
            if (st != HP_STATUS_OK) return hp_cli_fail(st, "--dump-after");
        } else if (argv[i][0] == '-') {
            fprintf(stderr, "hp: error: unknown option '%s' for plan\n", argv[i]);
            return 2;
        } else if (!config) {
            config = argv[i];
        } else {
            fprintf(stderr, "hp: error: unexpected argument '%s'\n", argv[i]);
            return 2;
        }
    }
    if (!config) {
        fprintf(stderr, "usage: hp plan RUN.yaml [--ranks N] [--rank R] [--dump-after PASS] [--calibration FILE]\n");
        return 2;
    }
    if (ranks > 0 && rank >= ranks) {
        fprintf(stderr, "hp: error: --rank %lld is not a rank of --ranks %lld (ranks are 0 to %lld)\n", (long long)rank,
                (long long)ranks, (long long)ranks - 1);
        return 2;
    }
    hp_run_config cfg;
    hp_status st = hp_run_config_load(config, &cfg);
    if (st != HP_STATUS_OK) return hp_cli_fail(st, NULL);
    if (!strcmp(cfg.model.family, "multimodal")) { /* plan_mm.c: the sub-models' groups */
        int rc = hp_cli_plan_mm(&cfg, (int)ranks, calibration);
        hp_run_config_free(&cfg);
        return rc;
    }
    if (cfg.groups.present && cfg.groups.n_stages == 0) { /* RL groups (actor, learner): no plan yet */
        fprintf(stderr, "hp: error: %s: the groups are an RL job's (kind actor and learner): run it with `hp rl %s`; "
                "hp plan plans pipelines and single programs\n", config, config);
        hp_run_config_free(&cfg);
        return 2;
    }
    if (cfg.groups.present) { /* HyperMPMD: the stages and the schedule */
        int rc = hp_cli_plan_pipeline(&cfg, (int)ranks, calibration);
        hp_run_config_free(&cfg);
        return rc;
    }
    /* ranks 0: the strategy's own device count */
    int rc = print_plan(&cfg, (int)ranks, (int)rank, dump, calibration);
    hp_run_config_free(&cfg);
    return rc;
}
