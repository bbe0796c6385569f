/*
 * The weight-stationary search of the partitioner (GSPMD-style global choice over purely local
 * sharding rules; see docs/design.md, "Weight-stationary search").
 *
 * A contraction rule picks, per node, the cheapest of its candidates by the bytes of that node
 * alone. That is myopic where one choice only pays off across several nodes: with sequence
 * parallelism (activations split on the sequence, q/k/v/fc column-parallel), gathering each small
 * weight looks cheaper than gathering the large activation, but gathering the activation once lets
 * q, k and v share it, leaves attention's heads split (no all-to-all) and makes the weight
 * gradients local (Megatron-SP; Korthikanti et al. 2022). The rules record every split parameter
 * that could have stayed in its own layout (a conflict); this search then tries, group by group,
 * forcing those parameters to stay, and keeps a group when the whole step's planned bytes per rank
 * drop. Groups: parameters whose contractions read the same activation (q, k and v; Llama's gate
 * and up) are one group, and so are parameters of the same name up to layer numbers
 * (blocks.3.attn.q.weight with blocks.0.attn.q.weight), so one decision covers every layer.
 * Every trial is a full partition at mesh index 0 (so every rank decides alike); a graph without
 * conflicts (data parallelism, FSDP where gathering weights wins anyway, plain Megatron TP) costs one
 * extra partition.
 */
#include "ops/op.h"
#include "shard/partition_internal.h"

#include <stdlib.h>
#include <string.h>

static int find(int *parent, int x) {
    while (parent[x] != x) x = parent[x] = parent[parent[x]];
    return x;
}

static void unite(int *parent, int a, int b) {
    a = find(parent, a), b = find(parent, b);
    if (a != b) parent[a < b ? b : a] = a < b ? a : b;
}

/* Whether names a and b are equal once every run of digits counts as one symbol. */
static bool same_pattern(const char *a, const char *b) {
    while (*a && *b) {
        bool da = *a >= '0' && *a <= '9', db = *b >= '0' && *b <= '9';
        if (da != db) return false;
        if (da) {
            while (*a >= '0' && *a <= '9') a++;
            while (*b >= '0' && *b <= '9') b++;
            continue;
        }
        if (*a++ != *b++) return false;
    }
    return *a == *b;
}

hp_status hp__partition_search(const hp_graph *logical, hp_mesh *mesh, const hp_layout *leaf_layouts,
                               const hp_tid *resolve, int n_resolve, const hp_layout *resolve_layouts, bool ring,
                               uint8_t **stationary, int *n) {
    *stationary = NULL;
    *n = 0;
    int nt = hp_graph_n_tensors(logical);
    uint8_t *conflict = calloc((size_t)nt, 1), *best = calloc((size_t)nt, 1), *trial = calloc((size_t)nt, 1);
    int *parent = malloc(sizeof *parent * (size_t)(nt ? nt : 1)), *by_act = malloc(sizeof *by_act * (size_t)(nt ? nt : 1));
    hp_status st = HP_STATUS_OK;
    if (!conflict || !best || !trial || !parent || !by_act) {
        st = hp_error(HP_STATUS_OUT_OF_MEMORY, "partition search: out of memory for %d tensors", nt);
        goto out;
    }
    int64_t best_bytes;
    st = hp__partition_oracle(logical, mesh, leaf_layouts, resolve, n_resolve, resolve_layouts, ring, NULL, conflict,
                              &best_bytes);
    if (st != HP_STATUS_OK) goto out;
    int n_conflict = 0;
    for (int t = 0; t < nt; t++) n_conflict += conflict[t] != 0;
    if (!n_conflict) goto out;
    /* groups: conflicted parameters read by contractions of one activation, and same-pattern names */
    for (int t = 0; t < nt; t++) parent[t] = t, by_act[t] = -1;
    for (int i = 0; i < hp_graph_n_nodes(logical); i++) {
        const hp_node *nd = hp_graph_node(logical, i);
        if ((nd->op != HP_OP_LINEAR && nd->op != HP_OP_MATMUL) || nd->n_in < 2) continue;
        if (nd->flags & (HP_NODE_FLAG_BACKWARD | HP_NODE_FLAG_OPTIMIZER)) continue;
        hp_tid x = nd->in[0], w = nd->in[1];
        if (x == HP_TID_NONE || w == HP_TID_NONE || !conflict[w]) continue;
        if (by_act[x] < 0) by_act[x] = w;
        else unite(parent, by_act[x], w);
    }
    for (int a = 0; a < nt; a++) {
        const char *na = hp_graph_tensor(logical, a)->name;
        if (!conflict[a] || !na) continue;
        for (int b = 0; b < a; b++) {
            const char *nb = hp_graph_tensor(logical, b)->name;
            if (conflict[b] && nb && same_pattern(na, nb)) {
                unite(parent, a, b);
                break;
            }
        }
    }
    /* greedy: each group (in tensor order of its root) kept when the step's bytes drop */
    for (int root = 0; root < nt; root++) {
        if (!conflict[root] || find(parent, root) != root) continue;
        memcpy(trial, best, (size_t)nt);
        for (int t = 0; t < nt; t++)
            if (conflict[t] && find(parent, t) == root) trial[t] = 1;
        int64_t bytes;
        if (hp__partition_oracle(logical, mesh, leaf_layouts, resolve, n_resolve, resolve_layouts, ring, trial, NULL,
                                 &bytes) != HP_STATUS_OK)
            continue; /* a rule that cannot hold the group in place: not a candidate */
        if (bytes < best_bytes) {
            best_bytes = bytes;
            memcpy(best, trial, (size_t)nt);
        }
    }
    for (int t = 0; t < nt; t++) *n += best[t] != 0;
    if (*n) {
        *stationary = best;
        best = NULL;
    }
out:
    free(conflict);
    free(best);
    free(trial);
    free(parent);
    free(by_act);
    return st;
}
