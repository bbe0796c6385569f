/*
 * `hp check RUN.yaml [--ranks N]`: validates a run config without building a graph. Every section
 * is checked as hp_run_config_load checks it; the strategy is also made for N ranks (without
 * --ranks, for the mesh's own device count). With HyperMPMD groups the groups are checked against N
 * ranks (without --ranks, the ranks they name) and each group's strategy is made for its own ranks.
 * Prints nothing and exits 0 when the config is good; otherwise prints the error (naming file:line)
 * and exits 1.
 */
#include "cli/cli.h"

#include "hp/config.h"
#include "hp/strategy.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int hp_cli_check(int argc, char **argv) {
    const char *config = NULL;
    int64_t ranks = 0;
    for (int i = 0; i < argc; i++) {
        if (!strcmp(argv[i], "--ranks")) {
            if (!hp_cli_has_value(argc, argv, i) || !hp_cli_int("--ranks", argv[++i], 1, HP_CLI_MAX_RANKS, &ranks))
                return 2;
        } else if (argv[i][0] == '-') {
            fprintf(stderr, "hp: error: unknown option '%s' for check\n", argv[i]);
            return 2;
        } else if (!config) {
            config = argv[i];
        } else {
            fprintf(stderr, "hp: error: unexpected argument '%s'\n", argv[i]);
            return 2;
        }
    }
    if (!config) {
        fprintf(stderr, "usage: hp check RUN.yaml [--ranks N]\n");
        return 2;
    }
    hp_run_config cfg;
    hp_status st = hp_run_config_load(config, &cfg);
    if (st != HP_STATUS_OK) return hp_cli_fail(st, NULL);
    hp_strategy *s = NULL;
    if (cfg.groups.present) {
        st = hp_groups_config_check_world(&cfg.groups, ranks ? (int)ranks : cfg.groups.n_ranks);
        for (int i = 0; i < cfg.groups.n_groups && st == HP_STATUS_OK; i++) {
            const hp_group_config *g = &cfg.groups.groups[i];
            st = hp_strategy_new(&g->strategy, g->n_ranks, &s);
            hp_strategy_free(s);
            s = NULL;
            if (st != HP_STATUS_OK) hp_error_prefix(st, "groups.%s: ", g->name);
        }
    } else {
        st = hp_strategy_new(&cfg.strategy, (int)ranks, &s);
        hp_strategy_free(s);
    }
    hp_run_config_free(&cfg);
    if (st != HP_STATUS_OK) return hp_cli_fail(st, NULL);
    return 0;
}
