/*
 * The compute timeline over a graph's program order (hp/liveness.h, hp_timeline_*): predicted
 * seconds per node from the operators' cost rules under a machine model (hp_node_seconds, in
 * costmodel.c: the flat roofline or the calibrated rates), prefix sums over
 * the live nodes, and the two searches HyperOffload places its transfers with (how early a prefetch
 * must start, how late an offload may be waited for).
 */
#include "hp/liveness.h"
#include "hp/ops.h"

#include <stdlib.h>
#include <string.h>

hp_status hp_timeline_compute(const hp_graph *g, const hp_liveness *lv, const hp_machine_model *m, hp_timeline *out) {
    memset(out, 0, sizeof *out);
    if (lv->n_nodes != hp_graph_n_nodes(g))
        return hp_error(HP_STATUS_INVALID_ARGUMENT, "timeline: liveness has %d nodes, graph %d", lv->n_nodes,
                        hp_graph_n_nodes(g));
    out->at = calloc((size_t)lv->n_nodes + 1, sizeof *out->at);
    if (!out->at) return hp_error(HP_STATUS_OUT_OF_MEMORY, "timeline: out of memory for %d nodes", lv->n_nodes);
    out->n_nodes = lv->n_nodes;
    for (int i = 0; i < lv->n_nodes; i++)
        out->at[i + 1] = out->at[i] + (lv->node_live[i] ? hp_node_seconds(g, i, m) : 0.0);
    return HP_STATUS_OK;
}

void hp_timeline_free(hp_timeline *tl) {
    if (!tl) return;
    free(tl->at);
    memset(tl, 0, sizeof *tl);
}

double hp_liveness_gap_seconds(const hp_liveness *lv, const hp_timeline *tl, hp_tid t, int k) {
    if (t < 0 || t >= lv->n_tensors) return 0.0;
    const hp_tensor_liveness *l = &lv->t[t];
    if (k < 0 || k + 1 >= l->n_uses) return 0.0;
    return hp_timeline_between(tl, l->uses[k], l->uses[k + 1]);
}

int32_t hp_timeline_start_before(const hp_timeline *tl, int32_t lo, int32_t use, double seconds) {
    if (tl->at[use] - tl->at[lo] < seconds) return lo;
    int32_t a = lo, b = use; /* invariant: at[use] - at[a] >= seconds */
    while (a < b) {
        int32_t m = a + (b - a + 1) / 2;
        if (tl->at[use] - tl->at[m] >= seconds) a = m;
        else b = m - 1;
    }
    return a;
}

int32_t hp_timeline_end_after(const hp_timeline *tl, int32_t def, int32_t cap, double seconds) {
    if (cap <= def) return def;
    int32_t a = def, b = cap;
    if (tl->at[cap + 1] - tl->at[def + 1] < seconds) return cap;
    while (a < b) {
        int32_t m = a + (b - a) / 2;
        if (tl->at[m + 1] - tl->at[def + 1] >= seconds) b = m;
        else a = m + 1;
    }
    return a;
}
