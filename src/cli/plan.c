/*
 * `hp plan RUN.yaml [--ranks N]`: what a run would do, without running it — the mesh, the layout of
 * every parameter, input and optimizer state, each inserted collective with its bytes, the bytes per
 * rank per step, the memory per rank, and a predicted step time.
 */
#include "cli/cli.h"

#include "hp/config.h"
#include "hp/runtime.h"
#include "hp/nn.h"
#include "hp/offload_plan.h"
#include "hp/ops.h"
#include "hp/shard.h"
#include "hp/strategy.h"
#include "hp/train.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A simple machine model for the prediction: sustained GEMM rate and network bandwidth. */
#define PLAN_FLOPS_PER_S 150e9
#define PLAN_NET_BYTES_PER_S 10e9

static const char *phase_name(uint32_t flags) {
    if (flags & HP_NODE_FLAG_OPTIMIZER) return "optimizer";
    if (flags & HP_NODE_FLAG_BACKWARD) return "backward";
    return "forward";
}

static double mib(double b) { return b / (1024.0 * 1024.0); }

static int print_plan(const hp_run_config *cfg, int ranks, int rank) {
    hp_strategy *s = NULL;
    hp_graph *g = NULL;
    hp_partition *part = NULL;
    hp_layout *lay = NULL;
    int rc = 1;
    hp_status st = hp_strategy_parse(cfg->strategy, ranks, &s);
    if (st != HP_STATUS_OK) return hp_cli_fail(st, "strategy");
    hp_mesh *mesh = hp_strategy_mesh(s);
    if (rank < 0 || rank >= hp_mesh_size(mesh)) {
        fprintf(stderr, "hp: error: --rank %d is outside the mesh of %d devices\n", rank, hp_mesh_size(mesh));
        goto out;
    }
    /* The training step's graph: with the run's dropout, as the trainer builds it. */
    hp_gpt_config gc = {.vocab = (int)cfg->model.vocab, .context = (int)cfg->model.context,
                        .layers = (int)cfg->model.layers, .heads = (int)cfg->model.heads,
                        .width = (int)cfg->model.width, .tied_head = cfg->model.tied_head,
                        .dropout = (float)cfg->model.dropout, .seed = (uint64_t)cfg->train.seed};
    g = hp_graph_new();
    hp_gpt gpt;
    hp_train_step ts;
    st = hp_gpt_build(g, &gc, (int)cfg->train.batch, (int)cfg->model.context, true, &gpt);
    if (st == HP_STATUS_OK) st = hp_train_step_build(g, gpt.loss, &cfg->optim, &ts);
    int nt = hp_graph_n_tensors(g);
    lay = calloc((size_t)nt, sizeof *lay);
    int warnings = 0;
    if (st == HP_STATUS_OK) st = hp_strategy_annotate(s, g, lay, &warnings);
    hp_tid resolve[2] = {gpt.loss, ts.grad_sq};
    if (st == HP_STATUS_OK) st = hp_partition_new_at(g, mesh, rank, lay, resolve, 2, &part);
    if (st != HP_STATUS_OK) {
        hp_cli_fail(st, cfg->source);
        goto out;
    }
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
    printf("  steps:");
    for (int k = 0; k < HP_REDIST_KIND_COUNT; k++)
        if (count[k]) printf(" %s x%d", hp_redist_kind_name((hp_redist_kind)k), count[k]);
    printf("\n");

    /* memory: what hp_program_new would allocate for this rank's graph (the same liveness, arena
     * plan, reshape views and workspace rule), planned without allocating */
    hp_tid keep[2] = {hp_partition_resolved(part, 0), hp_partition_resolved(part, 1)};
    hp_program_opts po = HP_PROGRAM_OPTS_DEFAULT;
    po.keep = keep;
    po.n_keep = 2;
    hp_program_stats ps;
    st = hp_program_plan(lg, &po, &ps);
    if (st != HP_STATUS_OK) {
        hp_cli_fail(st, "memory plan");
        goto out;
    }
    double flops = 0;
    for (int i = 0; i < hp_graph_n_nodes(lg); i++) flops += hp_node_cost(lg, i).flops;
    printf("\n== memory per rank\n");
    printf("  parameters %.2f MiB | optimizer state %.2f MiB | inputs %.2f MiB | activations + gradients (planned arena) "
           "%.2f MiB | kernel workspace %.2f MiB\n",
           mib(bytes_by_kind[HP_TENSOR_KIND_PARAM]), mib(bytes_by_kind[HP_TENSOR_KIND_OPT_STATE]),
           mib(bytes_by_kind[HP_TENSOR_KIND_INPUT]), mib((double)ps.arena_bytes), mib((double)ps.workspace_bytes));
    printf("  total %.2f MiB\n", mib((double)ps.device_bytes));
    double tc = flops / PLAN_FLOPS_PER_S, tn = (double)total / PLAN_NET_BYTES_PER_S;
    printf("\n== predicted step\n  %.2f GFLOP per rank -> %.3f s compute at %.0f GFLOP/s; %.3f s communication at %.0f GB/s"
           " (%.3f s if not overlapped)\n",
           flops / 1e9, tc, PLAN_FLOPS_PER_S / 1e9, tn, PLAN_NET_BYTES_PER_S / 1e9, tc + tn);
    if (warnings) printf("  (%d strategy rule(s) matched no parameter)\n", warnings);
    if (cfg->offload) { /* the residency plan of this rank's step under the offload budgets */
        hp_offload_plan_config oc;
        hp_offload_plan *op = NULL;
        st = hp_offload_config_parse(cfg->offload, &oc);
        if (st == HP_STATUS_OK && oc.device_budget) st = hp_offload_plan_new(lg, keep, 2, &oc, &op);
        if (st != HP_STATUS_OK) {
            hp_cli_fail(st, "offload plan");
            goto out;
        }
        if (op) {
            printf("\n== offload (residency plan)\n");
            hp_offload_plan_print(op, lg, stdout);
            hp_offload_plan_free(op);
        }
    }
    rc = 0;
out:
    hp_partition_free(part);
    free(lay);
    hp_graph_free(g);
    hp_strategy_free(s);
    return rc;
}

int hp_cli_plan(int argc, char **argv) {
    const char *config = NULL;
    long ranks = 0, rank = 0;
    for (int i = 0; i < argc; i++) {
        if (!strcmp(argv[i], "--ranks") && i + 1 < argc)
            ranks = strtol(argv[++i], NULL, 10);
        else if (!strcmp(argv[i], "--rank") && i + 1 < argc)
            rank = strtol(argv[++i], NULL, 10);
        else if (argv[i][0] == '-') {
            fprintf(stderr, "hp: error: unknown option '%s' for plan\n", argv[i]);
            return 2;
        } else
            config = argv[i];
    }
    if (!config || ranks < 0) {
        fprintf(stderr, "usage: hp plan RUN.yaml [--ranks N] [--rank R]\n");
        return 2;
    }
    hp_run_config cfg;
    hp_status st = hp_run_config_load(config, &cfg);
    if (st != HP_STATUS_OK) return hp_cli_fail(st, NULL);
    if (ranks == 0) { /* default: the strategy's own device count */
        hp_strategy *s = NULL;
        st = hp_strategy_parse(cfg.strategy, 0, &s);
        if (st != HP_STATUS_OK) {
            hp_run_config_free(&cfg);
            return hp_cli_fail(st, "strategy");
        }
        ranks = hp_mesh_size(hp_strategy_mesh(s));
        hp_strategy_free(s);
    }
    int rc = print_plan(&cfg, (int)ranks, (int)rank);
    hp_run_config_free(&cfg);
    return rc;
}
