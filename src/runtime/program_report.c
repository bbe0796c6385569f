/* The program's statistics and reports (hp/runtime.h): the per-operator profile and memory lines. */
#include "runtime/program_internal.h"

#include "hp/ops.h"

void hp_program_get_stats(const hp_program *p, hp_program_stats *s) { *s = p->stats; }

hp_status hp_program_profile_report(const hp_program *p, FILE *f) {
    const hp_program_stats *s = &p->stats;
    int ops[HP_OP_COUNT], n = 0;
    double total = 0, best[HP_OP_COUNT] = {0}, best_total = 0;
    for (int e = 0; e < p->n_exec; e++) {
        best[p->exec[e].node->op] += p->exec_best[e];
        best_total += p->exec_best[e];
    }
    for (int op = 0; op < HP_OP_COUNT; op++)
        if (s->op_calls[op] > 0) {
            ops[n++] = op;
            total += s->op_seconds[op];
        }
    for (int i = 1; i < n; i++) /* insertion sort by decreasing time: at most HP_OP_COUNT kinds */
        for (int j = i; j > 0 && s->op_seconds[ops[j]] > s->op_seconds[ops[j - 1]]; j--) {
            int tmp = ops[j];
            ops[j] = ops[j - 1];
            ops[j - 1] = tmp;
        }
    bool ok = true;
    if (n > 0) {
        ok &= fprintf(f, "%-24s %8s %11s %10s %9s %6s %12s %9s\n", "operator", "calls", "total ms", "ms/call",
                      "GFLOP/s", "share", "best ms/run", "GFLOP/s") > 0;
        for (int i = 0; i < n; i++) {
            int op = ops[i];
            double sec = s->op_seconds[op];
            double fl = s->n_runs ? s->op_flops[op] / s->n_runs : 0.0; /* flops per run */
            ok &= fprintf(f, "%-24s %8d %11.3f %10.4f %9.2f %5.1f%% %12.3f %9.2f\n", hp_op_name((hp_op)op),
                          s->op_calls[op], 1e3 * sec, 1e3 * sec / s->op_calls[op],
                          sec > 0 ? 1e-9 * s->op_flops[op] / sec : 0.0, total > 0 ? 100.0 * sec / total : 0.0,
                          1e3 * best[op], best[op] > 0 ? 1e-9 * fl / best[op] : 0.0) > 0;
        }
        ok &= fprintf(f, "%-24s %8s %11.3f   (%d runs, %.3f ms per run; each node's best run: %.3f ms)\n", "total",
                      "", 1e3 * total, s->n_runs, s->n_runs ? 1e3 * total / s->n_runs : 0.0, 1e3 * best_total) > 0;
    }
    ok &= fprintf(f, "memory: arena %zu bytes for %d activations (naive %zu, %.1f%%; peak live %zu), "
                     "persistent %zu, workspace %zu, %d reshape views, %d nodes per run\n",
                  s->arena_bytes, s->n_planned, s->naive_bytes,
                  s->naive_bytes ? 100.0 * (double)s->arena_bytes / (double)s->naive_bytes : 100.0,
                  s->peak_live_bytes,
                  s->persistent_bytes, s->workspace_bytes, s->n_views, s->n_nodes) > 0;
    if (!ok) return hp_error(HP_STATUS_IO, "profile report: write failed");
    return HP_STATUS_OK;
}

void hp_program_report_memory(const hp_program *p, FILE *f) {
    const hp_program_stats *s = &p->stats;
    const hp_program_ext *e = p->opts.ext;
    fprintf(f, "memory: fast tier %zu bytes (persistent %zu, arena %zu, workspace %zu)", s->device_bytes,
            s->persistent_bytes, s->arena_bytes, s->workspace_bytes);
    if (s->store_bytes) fprintf(f, ", %zu bytes in the state store (counted there)", s->store_bytes);
    if (e && e->device_budget) fprintf(f, ", budget %zu (%.1f%% used)", e->device_budget,
                                       100.0 * (double)(s->device_bytes + s->store_bytes) / (double)e->device_budget);
    fprintf(f, "\n");
    for (int t = 0; t < HP_TIER_COUNT; t++)
        fprintf(f, "memory: tier %-6s in use %zu bytes, peak %zu bytes, program tensors stored there %zu bytes\n",
                hp_tier_name((hp_tier)t), hp_mem_in_use((hp_tier)t), hp_mem_peak((hp_tier)t),
                t == HP_TIER_DEVICE ? s->device_bytes : s->ext_bytes[t]);
    if (e && e->report) e->report(e->user, f);
}
