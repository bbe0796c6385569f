/*
 * Expert parallelism as a layout, without a communicator: the ragged split (hp_layout.ragged:
 * validation, capacity local shape, equality, text form), the planner's RAGGED_ALL_TO_ALLV step
 * and what it refuses, the partition of a MoE layer whose expert weights are split over the token
 * axis (the all-to-all-v's the rules produce, the local shapes), and the config error for an `ep`
 * axis that is not in the mesh. (That the programs compute what one device computes is
 * tests/mpi/test_moe_ep_equiv.c.)
 */
#include "testutil.h"

#include "hp/config.h"
#include "hp/moe.h"
#include "hp/ops.h"
#include "hp/redistribute.h"
#include "hp/shard.h"
#include "hp/strategy.h"

#include <stdlib.h>
#include <string.h>

static hp_mesh *mesh_1d(int n, const char *name) {
    hp_mesh *m;
    assert_ok(hp_mesh_new(1, (int[]){n}, (const char *[]){name}, NULL, 0, &m));
    return m;
}

/* rows (64, 8) over [dp, ep] on a [2, 2] mesh, ragged over ep by tensor 5 */
static void test_ragged_layout(void **state) {
    (void)state;
    hp_mesh *m;
    assert_ok(hp_mesh_new(2, (int[]){2, 2}, (const char *[]){"dp", "ep"}, NULL, 0, &m));
    const hp_shape shp = HP_SHAPE(64, 8);
    hp_layout even, rag;
    assert_ok(hp_layout_parse("[[dp, ep], none]", m, &even));
    rag = even;
    rag.ragged = 1u << 1;
    rag.ragged_by = 5;
    assert_ok(hp_layout_validate(&rag, m, &shp));
    assert_false(hp_layout_equal(&even, &rag));
    hp_shape ls;
    assert_ok(hp_layout_local_shape(&even, m, &shp, 3, &ls));
    assert_int_equal(ls.dim[0], 16);
    assert_ok(hp_layout_local_shape(&rag, m, &shp, 3, &ls));
    assert_int_equal(ls.dim[0], 32); /* the capacity: the dp block, as if ep did not split */
    char buf[128];
    assert_non_null(strstr(hp_layout_format(&rag, m, buf, sizeof buf), "ragged=ep"));
    hp_layout bad = rag; /* the ragged axis must be the last of tensor_map[0] */
    bad.ragged = 1u << 0;
    assert_int_equal(hp_layout_validate(&bad, m, NULL), HP_STATUS_INVALID_ARGUMENT);
    assert_non_null(strstr(hp_error_message(), "last axis"));
    bad = rag;
    bad.ragged_by = -1;
    assert_int_equal(hp_layout_validate(&bad, m, NULL), HP_STATUS_INVALID_ARGUMENT);

    hp_redistribute_plan p;
    assert_ok(hp_redistribute_plan_make(m, &even, &rag, &shp, HP_DTYPE_F32, &p));
    assert_int_equal(p.nsteps, 1);
    assert_int_equal(p.steps[0].kind, HP_REDIST_RAGGED_ALL_TO_ALLV);
    assert_int_equal(p.steps[0].axis, 1);
    assert_int_equal(p.bytes, 16 * 8 * 4 / 2); /* the balanced estimate: half the block */
    assert_ok(hp_redistribute_plan_make(m, &rag, &even, &shp, HP_DTYPE_F32, &p));
    assert_int_equal(p.steps[0].kind, HP_REDIST_RAGGED_ALL_TO_ALLV);
    hp_layout rep; /* from a ragged split anywhere: through its block split */
    assert_ok(hp_layout_parse("[none, none]", m, &rep));
    assert_ok(hp_redistribute_plan_make(m, &rag, &rep, &shp, HP_DTYPE_F32, &p));
    assert_true(p.nsteps >= 2);
    assert_int_equal(p.steps[0].kind, HP_REDIST_RAGGED_ALL_TO_ALLV);
    assert_true(hp_layout_equal(&p.steps[0].after, &even));
    hp_layout rag2 = rag; /* two different ragged splits: refused */
    rag2.ragged_by = 6;
    assert_int_equal(hp_redistribute_plan_make(m, &rag, &rag2, &shp, HP_DTYPE_F32, &p), HP_STATUS_UNSUPPORTED);
    assert_non_null(strstr(hp_error_message(), "two ragged"));
    hp_mesh_free(m);
}

static int count_ragged(const hp_partition *p) {
    int n = 0;
    for (int i = 0; i < hp_partition_n_collectives(p); i++) {
        const hp_collective_info *c = hp_partition_collective(p, i);
        for (int k = 0; k < c->plan.nsteps; k++) n += c->plan.steps[k].kind == HP_REDIST_RAGGED_ALL_TO_ALLV;
    }
    return n;
}

/* A MoE layer's forward and backward with x's rows and the experts over ep: four all-to-all-v's
 * (dispatch, combine; their gradients), each rank holding E/ep experts. */
static void test_partition_ep(void **state) {
    (void)state;
    const int E = 6, F = 8, C = 4, N = 16, EP = 4;
    hp_graph *g = hp_graph_new();
    hp_tid x = hp_input(g, "x", HP_DTYPE_F32, HP_SHAPE(N, C));
    hp_graph_tensor(g, x)->requires_grad = true;
    hp_moe_config c = HP_MOE_CONFIG_INIT;
    c.experts = E, c.top_k = 2, c.expert_width = F;
    hp_moe_layer ml;
    assert_ok(hp_moe_build(g, x, &c, "mlp", &ml));
    hp_tid loss = hp_sum(g, hp_mul(g, ml.y, ml.y), -1);
    assert_ok(hp_graph_status(g));
    hp_tid wrt[8], grads[8];
    int nw = hp_graph_params(g, wrt, 7);
    wrt[nw++] = x;
    assert_ok(hp_autodiff(g, loss, wrt, nw, grads));
    hp_mesh *m = mesh_1d(EP, "ep");
    int nt = hp_graph_n_tensors(g);
    hp_layout *lay = calloc((size_t)nt, sizeof *lay);
    for (int t = 0; t < nt; t++) lay[t].ndim = -1;
    assert_ok(hp_layout_parse("[ep, none]", m, &lay[x]));
    hp_tid wfc = HP_TID_NONE;
    for (int t = 0; t < nt; t++) {
        const char *name = hp_graph_tensor(g, t)->name;
        if (name && strstr(name, "experts.") && hp_graph_tensor(g, t)->producer < 0) {
            assert_ok(hp_layout_parse("[ep, none, none]", m, &lay[t]));
            if (strstr(name, "fc")) wfc = t;
        }
    }
    assert_int_not_equal(wfc, HP_TID_NONE);
    for (int r = 0; r < EP; r++) {
        hp_partition *p;
        assert_ok(hp_partition_new_at(g, m, r, lay, NULL, 0, &p));
        assert_int_equal(count_ragged(p), 4);
        hp_tid lw = hp_partition_local(p, wfc);
        assert_int_equal(hp_graph_tensor(hp_partition_graph(p), lw)->shape.dim[0], r < 3 ? 2 : 0); /* 2, 2, 2, 0 */
        hp_partition_free(p);
    }
    /* experts replicated: data parallelism, no all-to-all-v */
    for (int t = 0; t < nt; t++)
        if (t != x) lay[t].ndim = -1;
    hp_partition *p;
    assert_ok(hp_partition_new_at(g, m, 0, lay, NULL, 0, &p));
    assert_int_equal(count_ragged(p), 0);
    hp_partition_free(p);
    free(lay);
    hp_mesh_free(m);
    hp_graph_free(g);
}

/* An `ep` axis the mesh does not have: the config names the alias and the line. */
static void test_ep_axis_not_in_mesh(void **state) {
    (void)state;
    const char *text = "model: {vocab: 32, context: 8, layers: 1, heads: 2, width: 8,\n"
                       "        moe: {experts: 4, top_k: 2, expert_width: 8}}\n"
                       "strategy:\n"
                       "  mesh: {device_matrix: [2], alias_name: [dp]}\n"
                       "  inputs: {tokens: [dp, none], targets: [dp, none]}\n"
                       "  params:\n"
                       "    - {match: \"*.experts.*\", tensor_map: [ep, none, none]}\n";
    hp_run_config cfg;
    hp_status st = hp_run_config_load_string(text, strlen(text), "bad_ep", &cfg);
    if (st == HP_STATUS_OK) {
        hp_strategy *s = NULL;
        st = hp_strategy_new(&cfg.strategy, 2, &s);
        hp_strategy_free(s);
        hp_run_config_free(&cfg);
    }
    assert_int_not_equal(st, HP_STATUS_OK);
    assert_non_null(strstr(hp_error_message(), "unknown alias 'ep'"));
    assert_non_null(strstr(hp_error_message(), ":7:"));
}

/* model.moe.chunks: out of range in the config (named with its line), not dividing the positions
 * in the layer (named with x's shape). */
static void test_chunks_bad(void **state) {
    (void)state;
    const char *text = "model: {vocab: 32, context: 8, layers: 1, heads: 2, width: 8,\n"
                       "        moe: {experts: 4, top_k: 2, expert_width: 8, chunks: 9}}\n";
    hp_run_config cfg;
    assert_int_not_equal(hp_run_config_load_string(text, strlen(text), "bad_chunks", &cfg), HP_STATUS_OK);
    assert_non_null(strstr(hp_error_message(), "model.moe.chunks 9"));
    assert_non_null(strstr(hp_error_message(), ":2:"));
    hp_graph *g = hp_graph_new();
    hp_tid x = hp_input(g, "x", HP_DTYPE_F32, HP_SHAPE(2, 6, 4));
    hp_moe_config c = HP_MOE_CONFIG_INIT;
    c.experts = 4, c.top_k = 2, c.expert_width = 8, c.chunks = 4;
    hp_moe_layer ml;
    assert_int_equal(hp_moe_build(g, x, &c, "mlp", &ml), HP_STATUS_INVALID_ARGUMENT);
    assert_non_null(strstr(hp_error_message(), "chunks 4"));
    hp_graph_free(g);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_ragged_layout),
        cmocka_unit_test(test_partition_ep),
        cmocka_unit_test(test_ep_axis_not_in_mesh),
        cmocka_unit_test(test_chunks_bad),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
