/*
 * The sharding context's cost callback (src/ir/op.h): hp__lay_cost asks the callback (and only
 * for a real change), and an operator's sharding rule chooses by the callback's costs, so the
 * operators never need the redistribution planner (the partitioner passes it in).
 */
#include "testutil.h"

#include "hp/ops.h"
#include "ops/op.h"

#include <string.h>

typedef struct probe {
    int calls;
    const hp_layout *a, *b;
    hp_shape shape;
    hp_dtype dt;
    bool dim0_cheap; /* moving to a layout that splits dim 0 costs 10, any other change 1000 */
} probe;

static int64_t probe_cost(void *user, const hp_layout *a, const hp_layout *b, const hp_shape *shape, hp_dtype dt) {
    probe *p = user;
    p->calls++;
    p->a = a, p->b = b, p->shape = *shape, p->dt = dt;
    bool dim0 = b->ndim > 0 && b->nmap[0] > 0;
    return dim0 == p->dim0_cheap ? 10 : 1000;
}

typedef struct fixture {
    hp_mesh *mesh;
    hp_graph *g;
    hp_layout rows, cols; /* [dp, none], [none, dp] */
} fixture;

static void setup_fixture(fixture *f) {
    memset(f, 0, sizeof *f);
    assert_ok(hp_mesh_new(1, (int[]){2}, (const char *[]){"dp"}, NULL, 0, &f->mesh));
    assert_ok(hp_layout_parse("[dp, none]", f->mesh, &f->rows));
    assert_ok(hp_layout_parse("[none, dp]", f->mesh, &f->cols));
    f->g = hp_graph_new();
    assert_non_null(f->g);
}

static void free_fixture(fixture *f) {
    hp_graph_free(f->g);
    hp_mesh_free(f->mesh);
}

static void test_lay_cost_asks_the_callback(void **state) {
    (void)state;
    fixture f;
    setup_fixture(&f);
    probe p = {.dim0_cheap = true};
    hp_shard_ctx c = {.g = f.g, .mesh = f.mesh, .cost = probe_cost, .cost_user = &p};
    hp_shape s = HP_SHAPE(8, 16);

    assert_int_equal(hp__lay_cost(&c, &f.rows, &f.rows, &s, HP_DTYPE_F32), 0);
    assert_int_equal(p.calls, 0); /* equal layouts cost nothing without asking */

    assert_int_equal(hp__lay_cost(&c, &f.cols, &f.rows, &s, HP_DTYPE_F32), 10);
    assert_int_equal(p.calls, 1);
    assert_ptr_equal(p.a, &f.cols);
    assert_ptr_equal(p.b, &f.rows);
    assert_true(hp_shape_equal(&p.shape, &s));
    assert_int_equal(p.dt, HP_DTYPE_F32);
    assert_int_equal(hp__lay_cost(&c, &f.rows, &f.cols, &s, HP_DTYPE_F32), 1000);

    c.cost = NULL; /* no cost model: every change costs 1 */
    assert_int_equal(hp__lay_cost(&c, &f.rows, &f.cols, &s, HP_DTYPE_F32), 1);
    assert_int_equal(hp__lay_cost(&c, &f.rows, &f.rows, &s, HP_DTYPE_F32), 0);
    free_fixture(&f);
}

/* ADD of x [dp, none] and y [none, dp]: the rule moves whichever operand the callback says is
 * cheaper to move, and lays the output out like the other one. */
static void test_rule_chooses_by_callback(void **state) {
    (void)state;
    for (int cheap = 0; cheap < 2; cheap++) {
        fixture f;
        setup_fixture(&f);
        hp_tid x = hp_input(f.g, "x", HP_DTYPE_F32, HP_SHAPE(8, 16));
        hp_tid y = hp_input(f.g, "y", HP_DTYPE_F32, HP_SHAPE(8, 16));
        hp_tid z = hp_add(f.g, x, y);
        assert_true(z != HP_TID_NONE);
        const hp_node *n = hp_graph_node(f.g, hp_graph_n_nodes(f.g) - 1);
        assert_int_equal(n->op, HP_OP_ADD);

        probe p = {.dim0_cheap = cheap != 0};
        hp_layout hint[HP_MAX_NODE_INPUTS];
        for (int k = 0; k < HP_MAX_NODE_INPUTS; k++) hint[k].ndim = -1;
        hp_shard_ctx c = {.g = f.g, .mesh = f.mesh, .index = 0, .hint = hint, .cost = probe_cost, .cost_user = &p};
        hp_layout in[HP_MAX_NODE_INPUTS] = {f.rows, f.cols}, req[HP_MAX_NODE_INPUTS] = {f.rows, f.cols}, out[1];
        hp_layout_init(&out[0], 2);
        hp_attrs local = n->attr;
        bool drop[HP_MAX_NODE_INPUTS] = {0};
        const hp_op_def *d = hp__op_def(HP_OP_ADD);
        assert_non_null(d->shard);
        assert_ok(d->shard(&c, n, in, req, out, &local, drop));

        assert_true(p.calls > 0);
        const hp_layout *want = cheap ? &f.rows : &f.cols; /* the layout reached at cost 10 */
        assert_true(hp_layout_equal(&out[0], want));
        assert_true(hp_layout_equal(&req[0], want));
        assert_true(hp_layout_equal(&req[1], want));
        free_fixture(&f);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_lay_cost_asks_the_callback),
        cmocka_unit_test(test_rule_chooses_by_callback),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
