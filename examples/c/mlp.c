/*
 * examples/c/mlp.c — a model of your own on the public API of an installed hyperparallel.
 *
 * A two-layer MLP regression y = w2 gelu(w1 x + b1) + b2 on synthetic data (a fixed "teacher"
 * function of the inputs). The program
 *   1. builds the single-device forward graph with the IR builders (hp/ops.h) and the mean
 *      squared error; the compile driver (hp/compile.h) appends the training step (autodiff +
 *      clipping + AdamW), partitions it for this rank and compiles the program;
 *   2. trains it STEPS steps on one device;
 *   3. builds and trains the same model again under a strategy given as a YAML string (data parallel with
 *      ZeRO, or Megatron tensor parallel) over every rank of the job (MPI when run under mpirun);
 *   4. checks that the two runs have the same loss at every step (relative 1e-4; the sums run in
 *      a different order) and exits non-zero if not.
 *
 *     PKG_CONFIG_PATH=PREFIX/lib/pkgconfig make
 *     ./mlp dp                 # one rank: the strategy's mesh has one device
 *     mpirun -n 2 ./mlp tp     # two ranks: w1 split by rows, w2 by columns
 *
 * compile_step() is the one place that turns the logical graph into this rank's program: one call
 * of the compile driver with the strategy section of a run config given as text.
 */
#include <hp/hp.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { N = 64, D_IN = 8, HIDDEN = 32, D_OUT = 4, STEPS = 30 };

/* The strategies, as a user writes them in a run config's `strategy:` section. %d: the ranks. */
static const char *const STRATEGY_DP =
    "strategy:\n"
    "  mesh: {device_matrix: [%d], alias_name: [dp]}\n"
    "  inputs: {x: [dp, none], y: [dp, none]}\n"
    "  optimizer: {shard: [dp]}\n";
static const char *const STRATEGY_TP =
    "strategy:\n"
    "  mesh: {device_matrix: [%d], alias_name: [tp]}\n"
    "  params:\n"
    "    - {match: fc1.weight, tensor_map: [tp, none]}\n"
    "    - {match: fc1.bias, tensor_map: [tp]}\n"
    "    - {match: fc2.weight, tensor_map: [none, tp]}\n";

/* AdamW with a short warmup and cosine decay, gradients clipped to norm 1. */
static const hp_optim_config OPTIM = {.lr = 1e-2, .min_lr = 1e-3, .warmup = 5, .weight_decay = 0.01,
                                      .beta1 = 0.9, .beta2 = 0.95, .eps = 1e-8, .grad_clip = 1.0};

/* The logical (single-device) forward model. */
typedef struct model {
    hp_graph *g;
    hp_tid x, y, loss;
} model;

static hp_status model_build(model *m) {
    m->g = hp_graph_new();
    if (!m->g) return hp_error(HP_STATUS_OUT_OF_MEMORY, "out of memory for a graph");
    hp_graph *g = m->g;
    m->x = hp_input(g, "x", HP_DTYPE_F32, HP_SHAPE(N, D_IN));
    m->y = hp_input(g, "y", HP_DTYPE_F32, HP_SHAPE(N, D_OUT));
    hp_tid w1 = hp_param(g, "fc1.weight", HP_SHAPE(HIDDEN, D_IN));
    hp_tid b1 = hp_param(g, "fc1.bias", HP_SHAPE(HIDDEN));
    hp_tid w2 = hp_param(g, "fc2.weight", HP_SHAPE(D_OUT, HIDDEN));
    hp_tid b2 = hp_param(g, "fc2.bias", HP_SHAPE(D_OUT));
    hp_tid h = hp_gelu(g, hp_linear(g, m->x, w1, b1));
    hp_tid d = hp_sub(g, hp_linear(g, h, w2, b2), m->y);
    m->loss = hp_mean(g, hp_mul(g, d, d), -1);
    return hp_graph_status(g); /* builder errors are sticky: checked once here */
}

/* The global values of a tensor: data and parameters are pure functions of (name, index). */
static float value_of(const char *name, int64_t i, const float *x) {
    if (!strcmp(name, "y")) { /* teacher: y[n][j] = sin(sum_k x[n][k] (k + j + 1) / D_IN) */
        int64_t n = i / D_OUT, j = i % D_OUT;
        float s = 0;
        for (int k = 0; k < D_IN; k++) s += x[n * D_IN + k] * (float)(k + j + 1) / D_IN;
        return sinf(s);
    }
    if (!strcmp(name, "x")) return 2.0f * hp_rng_uniform(hp_rng_hash("x"), (uint64_t)i) - 1.0f;
    if (strstr(name, ".bias")) return 0.0f;
    return 0.3f * hp_rng_normal(hp_rng_hash(name), (uint64_t)i);
}

/* One compiled training step on this rank (the model's graph is owned here: the driver appends
 * the backward pass and the optimizer to it). */
typedef struct compiled {
    model m;
    hp_strategy *strategy; /* owns the mesh; outlives the compiled step */
    hp_compiled *c;
    hp_partition *part;
    hp_program *prog;
    const hp_train_step *step; /* logical ids: parameters, lr, step counter */
    hp_tid loss;               /* this rank's replicated copy of the loss */
} compiled;

static void compiled_free(compiled *c) {
    hp_compiled_free(c->c);
    hp_strategy_free(c->strategy);
    hp_graph_free(c->m.g);
    memset(c, 0, sizeof *c);
}

/*
 * The compile pipeline, one driver call: model -> autodiff + AdamW -> this rank's partition under
 * the strategy (YAML text of a run config's `strategy:` section, or NULL for one device) ->
 * program. Collective over `world`.
 */
static hp_status compile_step(const char *strategy_yaml, hp_comm *world, compiled *c) {
    HP_CHECK(model_build(&c->m));
    hp_run_config cfg = hp_run_config_defaults();
    if (strategy_yaml) /* checked here, with file:line errors, before anything is built */
        HP_CHECK(hp_run_config_load_string(strategy_yaml, strlen(strategy_yaml), "mlp-strategy", &cfg));
    hp_status st = hp_strategy_new(&cfg.strategy, hp_comm_size(world), &c->strategy);
    hp_run_config_free(&cfg); /* the strategy keeps copies */
    HP_CHECK(st);
    hp_compile_opts o = HP_COMPILE_OPTS_INIT;
    o.loss = c->m.loss;
    o.train = true;
    o.optim = &OPTIM;
    o.strategy = c->strategy;
    o.comm = world;
    HP_CHECK(hp_compile(c->m.g, &o, &c->c));
    c->part = hp_compiled_partition(c->c);
    c->prog = hp_compiled_program(c->c);
    c->step = hp_compiled_step(c->c);
    c->loss = hp_compiled_loss(c->c);
    return HP_STATUS_OK;
}

/* Writes this rank's block of logical tensor t (global values from value_of) into the program. */
static hp_status set_block(compiled *c, hp_tid t, const float *x) {
    const hp_tensor *lt = hp_graph_tensor(c->m.g, t);
    hp_mesh *mesh = hp_compiled_mesh(c->c);
    int64_t start[HP_MAX_DIMS], len[HP_MAX_DIMS];
    HP_CHECK(hp_layout_slice_of(hp_partition_layout(c->part, t), mesh, &lt->shape, hp_mesh_my_index(mesh), start,
                                len));
    int nd = lt->shape.ndim;
    int64_t cols = nd == 2 ? lt->shape.dim[1] : 1, rows = nd == 2 ? len[0] : 1, inner = nd ? len[nd - 1] : 1;
    int64_t r0 = nd == 2 ? start[0] : 0, c0 = nd ? start[nd - 1] : 0;
    float *buf = malloc(sizeof(float) * (size_t)(rows * inner + 1));
    if (!buf) return hp_error(HP_STATUS_OUT_OF_MEMORY, "out of memory for '%s'", lt->name);
    for (int64_t r = 0; r < rows; r++)
        for (int64_t j = 0; j < inner; j++) buf[r * inner + j] = value_of(lt->name, (r0 + r) * cols + c0 + j, x);
    hp_status st = hp_program_set_input(c->prog, hp_partition_local(c->part, t), buf,
                                        sizeof(float) * (size_t)(rows * inner));
    free(buf);
    return st;
}

static hp_status set_scalar(compiled *c, hp_tid t, float v) {
    return hp_program_set_input(c->prog, hp_partition_local(c->part, t), &v, sizeof v);
}

/* Compiles the step under `strategy_yaml`, sets the data and the initial weights, trains STEPS
 * steps and records the loss of each. */
static hp_status train(const char *strategy_yaml, hp_comm *world, double *losses) {
    compiled c = {0};
    float x[N * D_IN];
    for (int i = 0; i < N * D_IN; i++) x[i] = value_of("x", i, NULL);
    hp_status st = compile_step(strategy_yaml, world, &c);
    if (st == HP_STATUS_OK) st = set_block(&c, c.m.x, x);
    if (st == HP_STATUS_OK) st = set_block(&c, c.m.y, x);
    for (int i = 0; st == HP_STATUS_OK && i < c.step->n_params; i++) st = set_block(&c, c.step->params[i], x);
    for (int s = 1; s <= STEPS && st == HP_STATUS_OK; s++) {
        st = set_scalar(&c, c.step->lr, (float)hp_lr_at(&OPTIM, s, STEPS));
        if (st == HP_STATUS_OK) st = set_scalar(&c, c.step->step, (float)s);
        if (st == HP_STATUS_OK) st = hp_program_run(c.prog);
        float l = NAN;
        if (st == HP_STATUS_OK) st = hp_program_get_output(c.prog, c.loss, &l, sizeof l);
        losses[s - 1] = l;
    }
    compiled_free(&c);
    return st;
}

int main(int argc, char **argv) {
    const char *which = argc > 1 ? argv[1] : "dp";
    if (strcmp(which, "dp") && strcmp(which, "tp")) {
        fprintf(stderr, "usage: %s [dp|tp]\n", argv[0]);
        return 2;
    }
    hp_comm *world = NULL, *self = hp_comm_self_new();
    bool mpi = getenv("OMPI_COMM_WORLD_SIZE") || getenv("PMI_SIZE") || getenv("PMIX_RANK");
#ifdef HP_HAVE_MPI
    if (mpi && (hp_comm_mpi_init(&argc, &argv) != HP_STATUS_OK || hp_comm_mpi_world(&world) != HP_STATUS_OK)) {
        fprintf(stderr, "mlp: %s\n", hp_error_message());
        return 1;
    }
#else
    if (mpi) {
        fprintf(stderr, "mlp: run under MPI, but the library was built without the MPI communicator\n");
        return 1;
    }
#endif
    if (!world) world = self;
    int rank = hp_comm_rank(world), size = hp_comm_size(world);

    double ref[STEPS], dist[STEPS];
    char strategy[512];
    snprintf(strategy, sizeof strategy, strcmp(which, "dp") ? STRATEGY_TP : STRATEGY_DP, size);
    hp_status st = train(NULL, self, ref); /* one device, on every rank */
    if (st == HP_STATUS_OK) st = train(strategy, world, dist);
    int bad = st != HP_STATUS_OK;
    if (bad) fprintf(stderr, "mlp: rank %d: %s: %s\n", rank, hp_status_str(st), hp_error_message());
    for (int s = 0; s < STEPS && !bad; s++) {
        double err = fabs(dist[s] - ref[s]) / fmax(fabs(ref[s]), 1e-6);
        if (rank == 0 && (s % 5 == 0 || s == STEPS - 1))
            printf("step %2d  loss 1 device %.6f  %s over %d ranks %.6f\n", s + 1, ref[s], which, size, dist[s]);
        if (!(err <= 1e-4)) {
            fprintf(stderr, "mlp: rank %d step %d: loss %.7g under %s differs from %.7g on one device (rel %.2g)\n",
                    rank, s + 1, dist[s], which, ref[s], err);
            bad = 1;
        }
    }
    if (!bad && !(ref[STEPS - 1] < 0.5 * ref[0])) {
        fprintf(stderr, "mlp: the loss did not halve in %d steps (%.6f -> %.6f)\n", STEPS, ref[0], ref[STEPS - 1]);
        bad = 1;
    }
    if (rank == 0 && !bad) printf("mlp: %s over %d ranks matches the single-device run (%d steps)\n", which, size, STEPS);
    if (world != self) hp_comm_free(world);
    hp_comm_free(self);
#ifdef HP_HAVE_MPI
    if (mpi) hp_comm_mpi_finalize();
#endif
    return bad;
}
