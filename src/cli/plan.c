/* `hp plan RUN.yaml`: what a run would do, without running it. */
#include "cli/cli.h"

#include "hp/config.h"
#include "hp/nn.h"
#include "hp/ops.h"
#include "hp/runtime.h"
#include "hp/train.h"

#include <stdio.h>
#include <string.h>

int hp_cli_plan(int argc, char **argv) {
    const char *config = NULL;
    for (int i = 0; i < argc; i++)
        if (argv[i][0] != '-') config = argv[i];
    if (!config) {
        fprintf(stderr, "usage: hp plan RUN.yaml [--ranks N]\n");
        return 2;
    }
    hp_run_config cfg;
    hp_status st = hp_run_config_load(config, &cfg);
    if (st != HP_STATUS_OK) return hp_cli_fail(st, NULL);
    hp_gpt_config gc = {(int)cfg.model.vocab, (int)cfg.model.context, (int)cfg.model.layers, (int)cfg.model.heads,
                        (int)cfg.model.width, cfg.model.tied_head};
    hp_graph *g = hp_graph_new();
    hp_gpt gpt;
    hp_train_step ts;
    int rc = 1;
    st = hp_gpt_build(g, &gc, (int)cfg.train.batch, (int)cfg.model.context, true, &gpt);
    if (st == HP_STATUS_OK) st = hp_train_step_build(g, gpt.loss, &cfg.optim, &ts);
    if (st != HP_STATUS_OK) {
        hp_cli_fail(st, config);
        goto out;
    }
    double flops = 0;
    for (int i = 0; i < hp_graph_n_nodes(g); i++) flops += hp_node_cost(g, i).flops;
    size_t param_bytes = 0;
    for (int i = 0; i < ts.n_params; i++)
        param_bytes += (size_t)hp_shape_numel(&hp_graph_tensor(g, ts.params[i])->shape) * 4;
    printf("model: %lld parameters (%.1f MiB), %d nodes in the training-step graph\n",
           (long long)hp_gpt_n_params(&gc), (double)param_bytes / (1 << 20), hp_graph_n_nodes(g));
    printf("step: %.3f GFLOP (graph cost model), %.3f GFLOP (6N + 12LCT estimate)\n", flops / 1e9,
           hp_gpt_train_flops_per_token(&gc, (int)cfg.model.context) * (double)cfg.train.batch *
               (double)cfg.model.context / 1e9);
    printf("memory per rank: params %.1f MiB, gradients up to %.1f MiB, AdamW state %.1f MiB\n",
           (double)param_bytes / (1 << 20), (double)param_bytes / (1 << 20), 2.0 * (double)param_bytes / (1 << 20));
    rc = 0;
out:
    hp_graph_free(g);
    hp_run_config_free(&cfg);
    return rc;
}
