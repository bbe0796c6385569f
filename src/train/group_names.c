/* Labels of the world's ranks by their groups, for fault and timeout messages (hp/train.h). */
#include "hp/train.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

hp_status hp_groups_name_ranks(hp_comm *world, const hp_groups_config *g) {
    if (!g->present || hp_comm_size(world) < 2) return HP_STATUS_OK;
    int n = hp_comm_size(world);
    char **names = calloc((size_t)n, sizeof *names);
    hp_status st = names ? HP_STATUS_OK : hp_error(HP_STATUS_OUT_OF_MEMORY, "out of memory for the rank names");
    for (int i = 0; st == HP_STATUS_OK && i < g->n_groups; i++) {
        const hp_group_config *gr = &g->groups[i];
        for (int k = 0; st == HP_STATUS_OK && k < gr->n_ranks; k++) {
            int r = gr->ranks[k];
            if (r < 0 || r >= n || names[r]) continue;
            size_t len = strlen(gr->name) + 64;
            names[r] = malloc(len);
            if (!names[r]) st = hp_error(HP_STATUS_OUT_OF_MEMORY, "out of memory for the rank names");
            else snprintf(names[r], len, "rank %d of group '%s'", k, gr->name);
        }
    }
    if (st == HP_STATUS_OK) st = hp_comm_set_rank_names(world, n, (const char *const *)names);
    for (int r = 0; names && r < n; r++) free(names[r]);
    free(names);
    return st;
}
