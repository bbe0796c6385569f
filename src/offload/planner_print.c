/* The residency plan as text (hp_offload_plan_print): what moves when, bytes per tier, stalls. */
#include "offload/planner_internal.h"

static double mib(size_t b) { return (double)b / 1048576.0; }

void hp_offload_plan_print(const hp_offload_plan *p, const hp_graph *g, FILE *f) {
    const hp_offload_plan_stats *s = &p->stats;
    fprintf(f, "offload plan: fast-tier budget %zu bytes (%.2f MiB); without offload %zu bytes (%.2f MiB), "
               "with the plan %zu bytes (%.2f MiB; %zu resident at the fullest point)\n",
            s->budget, mib(s->budget), s->peak_before, mib(s->peak_before), s->peak_after, mib(s->peak_after),
            s->peak_live_after);
    fprintf(f, "  bandwidth: host %.2f GB/s in, %.2f GB/s out; disk %.2f GB/s in, %.2f GB/s out; machine %.1f GFLOP/s, "
               "%.1f GB/s\n",
            1e-9 * p->tiers.tier[HP_TIER_HOST].read_bw, 1e-9 * p->tiers.tier[HP_TIER_HOST].write_bw,
            1e-9 * p->tiers.tier[HP_TIER_DISK].read_bw, 1e-9 * p->tiers.tier[HP_TIER_DISK].write_bw,
            1e-9 * p->cfg.machine.flops_per_s, 1e-9 * p->cfg.machine.bytes_per_s);
    fprintf(f, "  offloaded tensors:");
    for (int c = 0; c < HP_OFFLOAD_CLASS_COUNT; c++)
        fprintf(f, " %s %d%s", hp_offload_class_name((hp_offload_class)c), s->n_offloaded[c],
                p->cfg.policy[c] == HP_TIER_DEVICE ? " (policy: off)" : "");
    fprintf(f, "\n  inserted: %d prefetch, %d offload, %d wait; %d AdamW updates over slow-tier operands (%d operands "
               "read early, the rest streamed)\n",
            s->n_prefetch, s->n_offload, s->n_wait, s->n_streamed, s->n_early);
    if (s->n_deferred > 0)
        fprintf(f, "  deferred: %d AdamW updates over disk operands run on the disk stream and finish during "
                   "the next step\n",
                s->n_deferred);
    for (int t = HP_TIER_HOST; t < HP_TIER_COUNT; t++)
        fprintf(f, "  tier %-4s: homes %.2f MiB; per step %.2f MiB in, %.2f MiB out\n", hp_tier_name((hp_tier)t),
                mib(s->home_bytes[t]), mib(s->bytes_in[t]), mib(s->bytes_out[t]));
    fprintf(f, "  predicted: compute %.3f ms per step, stall %.3f ms (%.1f%%)\n", 1e3 * s->compute_s, 1e3 * s->stall_s,
            s->compute_s > 0 ? 100.0 * s->stall_s / s->compute_s : 0.0);
    const hp_timeline *tl = &p->tl;
    for (int ci = 0; ci < p->n_cand; ci++) {
        const hp__ofl_cand *c = &p->cand[ci];
        if (!c->slow) continue;
        const char *name = hp_graph_tensor(g, c->t)->name;
        fprintf(f, "  %%%d %s [%s, %zu bytes] home %s", c->t, name ? name : "(activation)", hp_offload_class_name(c->cls),
                c->bytes, hp_tier_name(c->tier));
        if (!c->persistent) {
            double hidden = tl->at[c->wait + 1] - tl->at[c->def + 1];
            fprintf(f, "; offload after node %d (%s), waited after node %d%s", c->def, hp_op_name(p->node_op[c->def]),
                    c->wait, hidden >= c->x_out ? " (hidden)" : " (exposed)");
        }
        fprintf(f, "\n");
        for (int j = 0; j < c->n_fu; j++) {
            if (!(c->off[j] || (c->persistent && j == 0))) continue;
            double ahead = tl->at[c->fu[j]] - tl->at[c->pre[j]];
            fprintf(f, "      prefetch before node %d (%s in '%s') for use at node %d (%s), %.3f ms ahead, copy %.3f ms%s\n",
                    c->pre[j], hp_op_name(p->node_op[c->pre[j]]), p->node_scope[c->pre[j]], c->fu[j],
                    hp_op_name(p->node_op[c->fu[j]]), 1e3 * ahead, 1e3 * c->x_in,
                    ahead >= c->x_in ? " (hidden)" : " (stalls)");
        }
        if (c->spre >= 0) {
            double ahead = tl->at[c->su[0]] - tl->at[c->spre];
            fprintf(f, "      early read before node %d (%s in '%s') for adamw at node %d, %.3f ms ahead, copy %.3f ms%s",
                    c->spre, hp_op_name(p->node_op[c->spre]), p->node_scope[c->spre], c->su[0], 1e3 * ahead,
                    1e3 * c->x_in, ahead >= c->x_in ? " (hidden)" : " (stalls)");
            if (p->defer_wait[c->su[0]] >= 0)
                fprintf(f, "; deferred update%s, waited before node %d of the next step", c->written ? ", written back" : "",
                        p->defer_wait[c->su[0]]);
            else if (c->written)
                fprintf(f, "; written back, waited after node %d", c->swait);
            fprintf(f, "\n");
        } else {
            for (int k = 0; k < c->n_su; k++) {
                fprintf(f, "      adamw at node %d streams it from the %s tier", c->su[k], hp_tier_name(c->tier));
                if (p->defer_wait[c->su[k]] >= 0)
                    fprintf(f, " (deferred, waited before node %d of the next step)", p->defer_wait[c->su[k]]);
                fprintf(f, "\n");
            }
        }
    }
}
