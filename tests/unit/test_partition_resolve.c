/*
 * Resolving a tensor to a given layout (hp_partition_opts.resolve_layouts, hp/shard.h): a tensor
 * whose rows are split over the mesh resolves replicated by default (an all-gather of the rows is
 * inserted), stays in its block when resolved to its own layout (no collective; the resolved copy
 * is the producer's tensor), is redistributed when resolved to another split; an entry of ndim -1
 * is the default; a layout of the wrong rank or an invalid one is an error naming the entry.
 */
#include "testutil.h"

#include "hp/ops.h"
#include "hp/shard.h"

#include <stdlib.h>
#include <string.h>

typedef struct fixture {
    hp_graph *g;
    hp_mesh *m;
    hp_layout *lay;
    hp_tid x, y;
} fixture;

/* y = 2 x for x (8, 4) with rows split over a mesh of 2 ("dp"). */
static void make(fixture *f) {
    memset(f, 0, sizeof *f);
    f->g = hp_graph_new();
    f->x = hp_input(f->g, "x", HP_DTYPE_F32, HP_SHAPE(8, 4));
    f->y = hp_scale(f->g, f->x, 2.0f);
    assert_ok(hp_graph_status(f->g));
    assert_ok(hp_mesh_new(1, (int[]){2}, (const char *[]){"dp"}, NULL, 0, &f->m));
    f->lay = calloc((size_t)hp_graph_n_tensors(f->g), sizeof *f->lay);
    for (int t = 0; t < hp_graph_n_tensors(f->g); t++) f->lay[t].ndim = -1;
    assert_ok(hp_layout_parse("[dp, none]", f->m, &f->lay[f->x]));
}

static void drop(fixture *f) {
    free(f->lay);
    hp_mesh_free(f->m);
    hp_graph_free(f->g);
}

static hp_status run(fixture *f, const hp_layout *want, hp_partition **p) {
    hp_partition_opts o = HP_PARTITION_OPTS_DEFAULT;
    o.index = 1;
    o.resolve_layouts = want;
    return hp_partition_new_opts(f->g, f->m, f->lay, &f->y, 1, &o, p);
}

static int n_gathers(const hp_partition *p) {
    int n = 0;
    for (int i = 0; i < hp_partition_n_collectives(p); i++) {
        const hp_redistribute_plan *pl = &hp_partition_collective(p, i)->plan;
        for (int k = 0; k < pl->nsteps; k++) n += pl->steps[k].kind == HP_REDIST_ALL_GATHER;
    }
    return n;
}

static void test_default_replicated(void **state) {
    (void)state;
    fixture f;
    make(&f);
    hp_partition *p;
    assert_ok(run(&f, NULL, &p)); /* NULL: replicated, as before resolve_layouts existed */
    assert_int_equal(n_gathers(p), 1);
    assert_int_equal(hp_graph_tensor(hp_partition_graph(p), hp_partition_resolved(p, 0))->shape.dim[0], 8);
    hp_partition_free(p);
    hp_layout rep = {.ndim = -1}; /* an entry of ndim -1: the same */
    assert_ok(run(&f, &rep, &p));
    assert_int_equal(n_gathers(p), 1);
    hp_partition_free(p);
    drop(&f);
}

static void test_split_stays(void **state) {
    (void)state;
    fixture f;
    make(&f);
    hp_layout rows;
    assert_ok(hp_layout_parse("[dp, none]", f.m, &rows));
    hp_partition *p;
    assert_ok(run(&f, &rows, &p));
    assert_int_equal(hp_partition_n_collectives(p), 0);
    hp_tid r = hp_partition_resolved(p, 0);
    assert_int_equal(r, hp_partition_local(p, f.y)); /* the block the producer made */
    assert_int_equal(hp_graph_tensor(hp_partition_graph(p), r)->shape.dim[0], 4);
    assert_int_equal(hp_partition_bytes(p), 0);
    hp_partition_free(p);
    hp_layout cols; /* another split: redistributed (all-to-all), not gathered */
    assert_ok(hp_layout_parse("[none, dp]", f.m, &cols));
    assert_ok(run(&f, &cols, &p));
    assert_int_equal(n_gathers(p), 0);
    assert_true(hp_partition_n_collectives(p) >= 1);
    const hp_tensor *t = hp_graph_tensor(hp_partition_graph(p), hp_partition_resolved(p, 0));
    assert_int_equal(t->shape.dim[0], 8);
    assert_int_equal(t->shape.dim[1], 2);
    hp_partition_free(p);
    drop(&f);
}

static void test_bad_layouts(void **state) {
    (void)state;
    fixture f;
    make(&f);
    hp_layout one;
    hp_layout_init(&one, 1);
    hp_partition *p = (hp_partition *)1;
    assert_int_equal(run(&f, &one, &p), HP_STATUS_INVALID_ARGUMENT);
    assert_null(p);
    hp_test_assert_error_contains("resolve layout 0");
    hp_layout bad;
    hp_layout_init(&bad, 2);
    bad.nmap[0] = 1, bad.map[0][0] = 3; /* no axis 3 on a 1-axis mesh */
    assert_true(run(&f, &bad, &p) != HP_STATUS_OK);
    hp_test_assert_error_contains("resolve layout 0");
    drop(&f);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_default_replicated),
        cmocka_unit_test(test_split_stays),
        cmocka_unit_test(test_bad_layouts),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
