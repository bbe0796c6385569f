/* The `offload:` section of a run config: defaults and the planner config from the typed section. */
#include "hp/offload_plan.h"

_Static_assert(HP_OFFLOAD_CLASS_COUNT == 4, "offload.policy in hp/config.h lists four classes");

#include <string.h>

void hp_offload_plan_config_init(hp_offload_plan_config *c) {
    memset(c, 0, sizeof *c);
    for (int k = 0; k < HP_OFFLOAD_CLASS_COUNT; k++) c->policy[k] = HP_TIER_HOST;
    c->bandwidth[HP_TIER_HOST] = 10e9;
    c->bandwidth[HP_TIER_DISK] = 1e9;
    c->machine = HP_MACHINE_MODEL_DEFAULT;
    c->chunk_bytes = 1u << 20;
    c->read_ahead = true;
    c->async_update = true;
}

void hp_offload_plan_config_from(const hp_offload_run_config *rc, hp_offload_plan_config *out) {
    hp_offload_plan_config_init(out);
    if (!rc || !rc->present) return;
    static const hp_tier tiers[] = {[HP_CONFIG_TIER_DEVICE] = HP_TIER_DEVICE, [HP_CONFIG_TIER_HOST] = HP_TIER_HOST,
                                    [HP_CONFIG_TIER_DISK] = HP_TIER_DISK};
    out->device_budget = rc->device_budget;
    out->host_budget = rc->host_budget;
    out->disk_dir = rc->disk_dir[0] ? rc->disk_dir : NULL;
    out->disk_budget = rc->disk_budget;
    for (int c = 0; c < HP_OFFLOAD_CLASS_COUNT; c++) out->policy[c] = tiers[rc->policy[c]];
    out->bandwidth[HP_TIER_HOST] = rc->bandwidth_host;
    out->bandwidth[HP_TIER_DISK] = rc->bandwidth_disk;
    if (rc->machine_flops > 0) out->machine.flops_per_s = rc->machine_flops;
    if (rc->machine_bytes > 0) out->machine.bytes_per_s = rc->machine_bytes;
    out->chunk_bytes = rc->chunk;
    out->read_ahead = rc->read_ahead;
    out->async_update = rc->async_update;
}
