/* Redistribution plans as data (hp/redist_plan.h); the planner is in src/shard/redistribute.c. */
#include "hp/redist_plan.h"

const char *hp_redist_kind_name(hp_redist_kind k) {
    static const char *names[] = {"local_slice", "local_partial", "all_gather", "all_to_all",
                                  "reduce_scatter", "all_reduce", "all_to_allv", "send_recv", "ragged_all_to_allv"};
    return (int)k >= 0 && k < HP_REDIST_KIND_COUNT ? names[k] : "?";
}
