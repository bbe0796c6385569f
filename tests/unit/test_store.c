/*
 * The state store (hp/store.h): training, evaluation and generation programs bound to one store
 * share the parameters' bytes (same pointers, memory counted once, the evaluation program sees a
 * training step's writes with no sync call); a sharded entry's replicated view goes through the
 * redistribution planner only after a write (simulated ranks); HyperOffload homes reach an
 * evaluation program through the copy path; bad names, shapes and dtypes are named.
 */
#include "testutil.h"

#include "hp/comm.h"
#include "hp/nn.h"
#include "hp/offload_plan.h"
#include "hp/redistribute.h"
#include "hp/ops.h"
#include "hp/runtime.h"
#include "hp/store.h"
#include "hp/train.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const hp_gpt_config tiny = {.vocab = 64, .context = 8, .layers = 1, .heads = 2, .width = 16, .tied_head = true};

typedef struct built {
    hp_graph *g;
    hp_gpt gpt;
    hp_train_step step;
    hp_program *p;
} built;

/* A GPT program bound to `s` (NULL: none): training step, evaluation (forward + loss) or generation
 * (batch 1, logits only). */
static void build(built *b, hp_store *s, bool training, bool with_loss, int batch) {
    memset(b, 0, sizeof *b);
    b->g = hp_graph_new();
    assert_non_null(b->g);
    assert_ok(hp_gpt_build(b->g, &tiny, batch, tiny.context, with_loss, &b->gpt));
    hp_optim_config o = {.lr = 1e-2, .beta1 = 0.9, .beta2 = 0.95, .eps = 1e-8, .weight_decay = 0.1, .grad_clip = 1.0};
    if (training) assert_ok(hp_train_step_build(b->g, b->gpt.loss, &o, &b->step));
    hp_tid keep = with_loss ? b->gpt.loss : b->gpt.logits;
    hp_program_opts po = HP_PROGRAM_OPTS_DEFAULT;
    po.keep = &keep;
    po.n_keep = 1;
    po.store = s;
    assert_ok(hp_program_new(b->g, &po, &b->p));
}

static void unbuild(built *b) {
    hp_program_free(b->p);
    hp_graph_free(b->g);
}

static size_t bytes_of(const hp_graph *g, hp_tid t) {
    const hp_tensor *x = hp_graph_tensor(g, t);
    return (size_t)hp_shape_numel(&x->shape) * hp_dtype_size(x->dtype);
}

static void set_batch(built *b, int batch, uint64_t seed) {
    int32_t tok[64], tgt[64];
    int n = batch * tiny.context;
    for (int i = 0; i < n; i++) {
        tok[i] = (int32_t)((seed * 31 + (uint64_t)i * 7) % (uint64_t)tiny.vocab);
        tgt[i] = (int32_t)((seed * 17 + (uint64_t)i * 5 + 3) % (uint64_t)tiny.vocab);
    }
    assert_ok(hp_program_set_input(b->p, b->gpt.tokens, tok, (size_t)n * sizeof *tok));
    if (b->gpt.targets != HP_TID_NONE) assert_ok(hp_program_set_input(b->p, b->gpt.targets, tgt, (size_t)n * sizeof *tgt));
}

static float run_loss(built *b) {
    float l;
    assert_ok(hp_program_run(b->p));
    assert_ok(hp_program_get_output(b->p, b->gpt.loss, &l, sizeof l));
    return l;
}

/* Writes deterministic small values into every parameter of the store through hp_store_write. */
static void init_store(hp_store *s, const built *train) {
    for (int i = 0; i < train->step.n_params; i++) {
        hp_tid p = train->step.params[i];
        size_t n = bytes_of(train->g, p);
        float *w = malloc(n);
        hp_test_fill_uniform(w, n / sizeof *w, 100 + (uint64_t)i, -0.1f, 0.1f);
        assert_ok(hp_store_write(s, hp_graph_tensor(train->g, p)->name, w, n));
        free(w);
    }
}

/* The evaluation loss of a program with private parameters copied from the store (the reference). */
static float private_eval_loss(hp_store *s, const built *train) {
    built e;
    build(&e, NULL, false, true, 2);
    for (int i = 0; i < train->step.n_params; i++) {
        const char *name = hp_graph_tensor(train->g, train->step.params[i])->name;
        hp_tid q = hp_graph_find(e.g, name);
        size_t n = bytes_of(e.g, q);
        void *buf = malloc(n);
        assert_ok(hp_store_read(s, name, buf, n));
        assert_ok(hp_program_set_input(e.p, q, buf, n));
        free(buf);
    }
    set_batch(&e, 2, 9);
    float l = run_loss(&e);
    unbuild(&e);
    return l;
}

static void test_three_programs_share_bytes(void **state) {
    (void)state;
    hp_store *s;
    assert_ok(hp_store_new(NULL, NULL, &s));
    built tr, ev, gen;
    build(&tr, s, true, true, 2);
    build(&ev, s, false, true, 2);
    build(&gen, s, false, false, 1);
    init_store(s, &tr);

    /* Same bytes: every parameter has one address, the store's, in all three programs. */
    size_t param_bytes = 0, state_bytes = 0;
    for (int i = 0; i < tr.step.n_params; i++) {
        hp_tid p = tr.step.params[i];
        const char *name = hp_graph_tensor(tr.g, p)->name;
        void *d = hp_store_data(s, name);
        assert_non_null(d);
        assert_ptr_equal(hp_program_data(tr.p, p), d);
        assert_ptr_equal(hp_program_data(ev.p, hp_graph_find(ev.g, name)), d);
        assert_ptr_equal(hp_program_data(gen.p, hp_graph_find(gen.g, name)), d);
        param_bytes += bytes_of(tr.g, p);
        state_bytes += bytes_of(tr.g, tr.step.m[i]) + bytes_of(tr.g, tr.step.v[i]);
        assert_ptr_equal(hp_program_data(tr.p, tr.step.m[i]),
                         hp_store_data(s, hp_graph_tensor(tr.g, tr.step.m[i])->name));
    }

    /* Counted once: the programs' persistent bytes leave the parameters to the store. */
    hp_program_stats st_tr, st_ev, st_gen;
    hp_program_get_stats(tr.p, &st_tr);
    hp_program_get_stats(ev.p, &st_ev);
    hp_program_get_stats(gen.p, &st_gen);
    assert_int_equal(st_tr.store_bytes, param_bytes + state_bytes);
    assert_int_equal(st_ev.store_bytes, param_bytes);
    assert_int_equal(st_gen.store_bytes, param_bytes);
    hp_store_stats ss;
    hp_store_get_stats(s, &ss);
    assert_int_equal(ss.n_entries, 3 * tr.step.n_params);
    assert_int_equal(ss.bytes[HP_TIER_DEVICE], param_bytes + state_bytes);
    assert_int_equal(ss.n_views, 0);
    built priv;
    build(&priv, NULL, false, true, 2);
    hp_program_stats st_priv;
    hp_program_get_stats(priv.p, &st_priv);
    assert_int_equal(st_priv.store_bytes, 0);
    assert_int_equal(st_priv.persistent_bytes, st_ev.persistent_bytes + param_bytes);
    unbuild(&priv);

    /* The memory report names the store-bound bytes once. */
    char *text = NULL;
    size_t len = 0;
    FILE *mf = open_memstream(&text, &len);
    hp_program_report_memory(ev.p, mf);
    hp_store_report_memory(s, mf);
    fclose(mf);
    char want[128];
    snprintf(want, sizeof want, "%zu bytes in the state store", param_bytes);
    assert_non_null(strstr(text, want));
    snprintf(want, sizeof want, "state store %d entries: device %zu bytes", 3 * tr.step.n_params,
             param_bytes + state_bytes);
    assert_non_null(strstr(text, want));
    free(text);

    /* A training step writes the parameters in place; the evaluation program sees them at once. */
    set_batch(&ev, 2, 9);
    float before = run_loss(&ev);
    assert_true(before == private_eval_loss(s, &tr));
    hp_store_entry_info info;
    char w0[128]; /* outlives the graphs */
    snprintf(w0, sizeof w0, "%s", hp_graph_tensor(tr.g, tr.step.params[0])->name);
    assert_ok(hp_store_info(s, w0, &info));
    uint64_t v0 = info.version;
    float lr = 1e-2f, step = 1.0f;
    assert_ok(hp_program_set_input(tr.p, tr.step.lr, &lr, sizeof lr));
    assert_ok(hp_program_set_input(tr.p, tr.step.step, &step, sizeof step));
    set_batch(&tr, 2, 3);
    (void)run_loss(&tr);
    assert_ok(hp_store_info(s, w0, &info));
    assert_int_equal(info.version, v0 + 1); /* the writer's run bumped it */
    float after = run_loss(&ev);
    assert_true(after != before);
    assert_true(after == private_eval_loss(s, &tr)); /* bitwise: the eval program read the new bytes */
    assert_ok(hp_store_info(s, w0, &info));
    assert_int_equal(info.version, v0 + 1); /* readers do not bump */
    assert_ok(hp_program_run(gen.p));

    /* Entries outlive programs. */
    unbuild(&tr);
    unbuild(&ev);
    unbuild(&gen);
    assert_ok(hp_store_info(s, w0, &info));
    assert_true(info.has_storage);
    assert_non_null(hp_store_data(s, w0));
    hp_store_free(s);
}

/* ---------------------------------------------------------------- views on simulated ranks */

typedef struct sim_job {
    pthread_mutex_t mu;
    char failure[1024];
} sim_job;

static void record(sim_job *j, const char *fmt, ...) {
    pthread_mutex_lock(&j->mu);
    if (!j->failure[0]) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(j->failure, sizeof j->failure, fmt, ap);
        va_end(ap);
    }
    pthread_mutex_unlock(&j->mu);
}

#define SIM_EXPECT(j, cond, ...)                                                                   \
    do {                                                                                           \
        if (!(cond)) record(j, __VA_ARGS__);                                                       \
    } while (0)

/* Checks that full (5, 4) holds base + global index everywhere. */
static bool full_is(const float *full, float base) {
    for (int i = 0; i < 20; i++)
        if (full[i] != base + (float)i) return false;
    return true;
}

/* Writes base + global index into this rank's block of "w" (5, 4), sharded by rows. */
static hp_status write_block(hp_store *s, hp_mesh *mesh, float base) {
    hp_store_entry_info e;
    HP_CHECK(hp_store_info(s, "w", &e));
    int64_t start[2], len[2];
    HP_CHECK(hp_layout_slice_of(&e.layout, mesh, &e.shape, hp_mesh_my_index(mesh), start, len));
    float blk[20];
    for (int64_t r = 0; r < len[0]; r++)
        for (int c = 0; c < 4; c++) blk[r * 4 + c] = base + (float)((start[0] + r) * 4 + c);
    return hp_store_write(s, "w", blk, e.bytes);
}

static hp_status view_rank(hp_comm *comm, int rank, void *user) {
    sim_job *j = user;
    int n = hp_comm_size(comm);
    hp_mesh *mesh = NULL;
    hp_store *s = NULL;
    hp_graph *g = NULL, *lg = NULL;
    hp_program *p = NULL, *lp = NULL;
    hp_status st;
    HP_CHECK_GOTO(hp_mesh_new(1, (int[]){n}, (const char *[]){"dp"}, NULL, 0, &mesh), st, out);
    HP_CHECK_GOTO(hp_mesh_attach(mesh, comm), st, out);
    HP_CHECK_GOTO(hp_store_new(mesh, NULL, &s), st, out);
    hp_store_set_redistribute(s, hp_redistribute_tensor);
    hp_shape s54 = HP_SHAPE(5, 4);
    hp_layout rows;
    hp_layout_init(&rows, 2);
    HP_CHECK_GOTO(hp_layout_set(&rows, mesh, 0, 1, (const char *[]){"dp"}), st, out);
    HP_CHECK_GOTO(hp_store_declare(s, "w", HP_DTYPE_F32, &s54, &rows), st, out);
    HP_CHECK_GOTO(write_block(s, mesh, 0.0f), st, out);

    /* The replicated view: one planner run. */
    float *full = NULL;
    HP_CHECK_GOTO(hp_store_view(s, "w", NULL, (void **)&full), st, out);
    hp_store_stats ss;
    hp_store_get_stats(s, &ss);
    SIM_EXPECT(j, full_is(full, 0.0f), "rank %d: the replicated view does not hold the gathered values", rank);
    SIM_EXPECT(j, ss.n_refresh == 1 && ss.refresh_bytes > 0 && ss.n_views == 1,
               "rank %d: %lld refreshes (%lld bytes), %d views after the first view; want 1, > 0, 1", rank,
               (long long)ss.n_refresh, (long long)ss.refresh_bytes, ss.n_views);

    /* No write since: no refresh, the same buffer. */
    float *again = NULL;
    HP_CHECK_GOTO(hp_store_view(s, "w", NULL, (void **)&again), st, out);
    HP_CHECK_GOTO(hp_store_views_refresh(s), st, out);
    hp_store_get_stats(s, &ss);
    SIM_EXPECT(j, again == full && ss.n_refresh == 1, "rank %d: unchanged entry refreshed (%lld refreshes)", rank,
               (long long)ss.n_refresh);

    /* A single-device program binds to the view; a program of the sharded layout to the entry. */
    g = hp_graph_new();
    hp_tid w = hp_leaf(g, "w", HP_TENSOR_KIND_PARAM, HP_DTYPE_F32, HP_SHAPE(5, 4));
    hp_tid y = hp_scale(g, w, 2.0f);
    hp_program_opts o = HP_PROGRAM_OPTS_DEFAULT;
    o.keep = &y;
    o.n_keep = 1;
    o.store = s;
    HP_CHECK_GOTO(hp_program_new(g, &o, &p), st, out);
    SIM_EXPECT(j, hp_program_data(p, w) == full, "rank %d: the full-shape program is not bound to the view", rank);
    float wrong[20] = {0};
    SIM_EXPECT(j, hp_program_set_input(p, w, wrong, sizeof wrong) == HP_STATUS_INVALID_ARGUMENT,
               "rank %d: a view accepted a write", rank);
    hp_store_entry_info e;
    HP_CHECK_GOTO(hp_store_info(s, "w", &e), st, out);
    lg = hp_graph_new();
    hp_tid lw = hp_leaf(lg, "w", HP_TENSOR_KIND_PARAM, HP_DTYPE_F32, e.local_shape);
    hp_tid ly = hp_scale(lg, lw, 1.0f);
    o.keep = &ly;
    HP_CHECK_GOTO(hp_program_new(lg, &o, &lp), st, out);
    SIM_EXPECT(j, hp_program_data(lp, lw) == e.data, "rank %d: the sharded program is not bound to the entry", rank);

    /* A write through a program bumps the version; the next refresh runs the planner again and
     * the bound single-device program reads the new values with no call of its own. */
    float blk[20];
    for (int64_t r = 0; r < e.local_shape.dim[0]; r++)
        for (int c = 0; c < 4; c++) {
            int64_t start[2], len[2];
            HP_CHECK_GOTO(hp_layout_slice_of(&e.layout, mesh, &e.shape, hp_mesh_my_index(mesh), start, len), st, out);
            blk[r * 4 + c] = 100.0f + (float)((start[0] + r) * 4 + c);
        }
    HP_CHECK_GOTO(hp_program_set_input(lp, lw, blk, e.bytes), st, out);
    HP_CHECK_GOTO(hp_store_views_refresh(s), st, out);
    hp_store_get_stats(s, &ss);
    SIM_EXPECT(j, ss.n_refresh == 2 && full_is(full, 100.0f), "rank %d: after a write: %lld refreshes, view %s",
               rank, (long long)ss.n_refresh, full_is(full, 100.0f) ? "fresh" : "stale");
    HP_CHECK_GOTO(hp_program_run(p), st, out);
    const float *yd = hp_program_data(p, y);
    SIM_EXPECT(j, yd && yd[19] == 2.0f * 119.0f, "rank %d: the full-shape program computed %g, want %g", rank,
               yd ? yd[19] : -1.0f, 2.0f * 119.0f);
    HP_CHECK_GOTO(hp_store_views_refresh(s), st, out);
    HP_CHECK_GOTO(write_block(s, mesh, 7.0f), st, out);
    HP_CHECK_GOTO(hp_store_view(s, "w", NULL, (void **)&again), st, out);
    hp_store_get_stats(s, &ss);
    SIM_EXPECT(j, ss.n_refresh == 3 && full_is(full, 7.0f), "rank %d: after hp_store_write: %lld refreshes", rank,
               (long long)ss.n_refresh);
out:
    hp_program_free(p);
    hp_program_free(lp);
    hp_graph_free(g);
    hp_graph_free(lg);
    hp_store_free(s);
    hp_mesh_free(mesh);
    return st;
}

static void run_views(int n) {
    sim_job j = {.failure = ""};
    pthread_mutex_init(&j.mu, NULL);
    hp_status st = hp_comm_sim_run(n, view_rank, &j);
    pthread_mutex_destroy(&j.mu);
    if (st != HP_STATUS_OK) fail_msg("%d ranks: %s: %s", n, hp_status_str(st), hp_error_message());
    if (j.failure[0]) fail_msg("%d ranks: %s", n, j.failure);
}

static void test_sharded_view_through_planner(void **state) {
    (void)state;
    run_views(2);
    run_views(3); /* uneven: 5 rows over 3 ranks are blocks of 2, 2 and 1 */
}

/* ---------------------------------------------------------------- HyperOffload homes */

/* A trainer whose parameters and optimizer states live on disk (HyperOffload) evaluates and samples
 * through the store's copy path exactly as a trainer without offload. */
static void test_offload_home_reaches_eval(void **state) {
    (void)state;
    char disk[] = "/tmp/hp_store_XXXXXX";
    assert_non_null(mkdtemp(disk));
    char base[1024], text[2048];
    snprintf(base, sizeof base,
             "model: {vocab: 256, context: 32, layers: 2, heads: 2, width: 32}\n"
             "data: {corpus: \"%s\"}\n"
             "train: {steps: 20, batch: 4, seed: 7, eval_batches: 2}\n",
             hp_test_source_path("data/kjv.txt"));
    snprintf(text, sizeof text,
             "%soffload:\n  device_budget: 380KiB\n  host_budget: 64MiB\n  disk_dir: \"%s\"\n  disk_budget: 64MiB\n"
             "  policy: {params: disk, grads: host, optimizer: disk, activations: host}\n",
             base, disk);
    hp_run_config co, cp;
    assert_ok(hp_run_config_load_string(text, strlen(text), "offload", &co));
    assert_ok(hp_run_config_load_string(base, strlen(base), "plain", &cp));
    hp_trainer *to, *tp;
    assert_ok(hp_trainer_new(&co, &to));
    assert_ok(hp_trainer_new(&cp, &tp));
    double lo[3], lp[3], vo, vp;
    for (int round = 0; round < 2; round++) {
        hp_test_run_steps(to, 3, lo);
        hp_test_run_steps(tp, 3, lp);
        for (int i = 0; i < 3; i++) assert_true(lo[i] == lp[i]);
        assert_ok(hp_trainer_eval(to, &vo));
        assert_ok(hp_trainer_eval(tp, &vp));
        assert_true(vo == vp);
        assert_ok(hp_trainer_eval(to, &vo)); /* no write since: no copy, same value */
        assert_true(vo == vp);
        char *so, *sp;
        assert_ok(hp_trainer_sample(to, "In the", 8, 0.8f, 40, 1, &so));
        assert_ok(hp_trainer_sample(tp, "In the", 8, 0.8f, 40, 1, &sp));
        assert_string_equal(so, sp);
        free(so);
        free(sp);
    }
    char *rep = NULL;
    size_t len = 0;
    FILE *mf = open_memstream(&rep, &len);
    hp_trainer_report_memory(to, mf);
    fclose(mf);
    /* the offloaded parameters reach eval and sample by the copy path; the others are bound */
    assert_non_null(strstr(rep, "memory: state store"));
    assert_non_null(strstr(rep, "memory: eval program"));
    if (getenv("HP_TEST_VERBOSE")) fputs(rep, stderr);
    assert_null(strstr(rep, ", 0 copies"));
    free(rep);
    mf = open_memstream(&rep, &len);
    hp_trainer_report_memory(tp, mf);
    fclose(mf);
    assert_non_null(strstr(rep, ", 0 copies"));
    assert_non_null(strstr(rep, "in the state store (counted there)"));
    if (getenv("HP_TEST_VERBOSE")) fputs(rep, stderr);
    free(rep);
    hp_trainer_free(to);
    hp_trainer_free(tp);
    hp_run_config_free(&co);
    hp_run_config_free(&cp);
    char cmd[256];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", disk);
    assert_int_equal(system(cmd), 0);
}

/* A training program whose offload pass holds parameters on the host tier is their home: the
 * entries record the tier, an evaluation program gets the values through the copy path, and
 * when the training program is freed the values move into store memory (entries outlive it). */
static void test_home_outlives_program(void **state) {
    (void)state;
    hp_store *s;
    assert_ok(hp_store_new(NULL, NULL, &s));
    built tr;
    memset(&tr, 0, sizeof tr);
    tr.g = hp_graph_new();
    assert_ok(hp_gpt_build(tr.g, &tiny, 2, tiny.context, true, &tr.gpt));
    hp_optim_config oc = {.lr = 1e-2, .beta1 = 0.9, .beta2 = 0.95, .eps = 1e-8, .grad_clip = 1.0};
    assert_ok(hp_train_step_build(tr.g, tr.gpt.loss, &oc, &tr.step));
    hp_program_opts o = HP_PROGRAM_OPTS_DEFAULT;
    o.keep = &tr.gpt.loss;
    o.n_keep = 1;
    hp_program_stats plain;
    assert_ok(hp_program_plan(tr.g, &o, &plain));
    hp_offload_plan_config c;
    hp_offload_plan_config_init(&c);
    c.device_budget = plain.device_bytes * 5 / 10;
    c.machine = (hp_machine_model){.flops_per_s = 1e9, .bytes_per_s = 1e9};
    hp_offload_state *ofl = NULL;
    assert_ok(hp_offload_apply_config(&c, tr.g, &o, &ofl));
    o.store = s;
    assert_ok(hp_program_new(tr.g, &o, &tr.p));
    init_store(s, &tr);
    int on_host = 0;
    for (int i = 0; i < tr.step.n_params; i++) {
        hp_store_entry_info e;
        assert_ok(hp_store_info(s, hp_graph_tensor(tr.g, tr.step.params[i])->name, &e));
        on_host += e.tier == HP_TIER_HOST;
    }
    assert_true(on_host > 0);
    float lr = 1e-2f, step = 1.0f;
    assert_ok(hp_program_set_input(tr.p, tr.step.lr, &lr, sizeof lr));
    assert_ok(hp_program_set_input(tr.p, tr.step.step, &step, sizeof step));
    set_batch(&tr, 2, 3);
    (void)run_loss(&tr);

    built ev;
    build(&ev, s, false, true, 2);
    set_batch(&ev, 2, 9);
    float want = private_eval_loss(s, &tr);
    assert_true(run_loss(&ev) == want);
    hp_store_stats ss;
    hp_store_get_stats(s, &ss);
    assert_int_equal(ss.n_copies, on_host);
    assert_true(run_loss(&ev) == want);
    hp_store_get_stats(s, &ss);
    assert_int_equal(ss.n_copies, on_host); /* unchanged entries are not copied again */

    size_t total = 0;
    for (int i = 0; i < tr.step.n_params; i++) total += bytes_of(tr.g, tr.step.params[i]);
    char *before = malloc(total), *after = malloc(total);
    assert_true(tr.step.n_params > 0 && tr.step.n_params <= 64);
    static char names[64][128];
    size_t off = 0;
    for (int i = 0; i < tr.step.n_params; i++) {
        size_t n = bytes_of(tr.g, tr.step.params[i]);
        snprintf(names[i], sizeof names[i], "%s", hp_graph_tensor(tr.g, tr.step.params[i])->name);
        assert_ok(hp_store_read(s, names[i], before + off, n));
        off += n;
    }
    int n_params = tr.step.n_params;
    unbuild(&tr);
    hp_offload_state_free(ofl);
    off = 0;
    for (int i = 0; i < n_params; i++) {
        hp_store_entry_info e;
        assert_ok(hp_store_info(s, names[i], &e));
        assert_int_equal(e.tier, HP_TIER_DEVICE);
        assert_true(e.has_storage);
        assert_ok(hp_store_read(s, names[i], after + off, e.bytes));
        off += e.bytes;
    }
    assert_memory_equal(before, after, total);
    assert_true(run_loss(&ev) == want); /* the copy path now reads store memory */
    unbuild(&ev);
    free(before);
    free(after);
    hp_store_free(s);
}

/* ---------------------------------------------------------------- errors */

static void test_errors_name_the_value(void **state) {
    (void)state;
    hp_store *s;
    assert_ok(hp_store_new(NULL, NULL, &s));
    hp_shape s44 = HP_SHAPE(4, 4), s45 = HP_SHAPE(4, 5), s4 = HP_SHAPE(4);
    hp_store_entry_info info;
    void *d;
    float buf[16];
    assert_int_equal(hp_store_info(s, "nope", &info), HP_STATUS_NOT_FOUND);
    hp_test_assert_error_contains("'nope'");
    assert_int_equal(hp_store_view(s, "nope", NULL, &d), HP_STATUS_NOT_FOUND);
    hp_test_assert_error_contains("'nope'");
    assert_int_equal(hp_store_read(s, "nope", buf, sizeof buf), HP_STATUS_NOT_FOUND);
    assert_null(hp_store_data(s, "nope"));

    assert_ok(hp_store_declare(s, "w", HP_DTYPE_F32, &s44, NULL));
    assert_ok(hp_store_declare(s, "w", HP_DTYPE_F32, &s44, NULL)); /* the same again: no-op */
    assert_int_equal(hp_store_declare(s, "w", HP_DTYPE_F32, &s45, NULL), HP_STATUS_INVALID_ARGUMENT);
    hp_test_assert_error_contains("[4, 5]");
    assert_int_equal(hp_store_write(s, "w", buf, 12), HP_STATUS_INVALID_ARGUMENT);
    hp_test_assert_error_contains("12 bytes");
    hp_test_assert_error_contains("64");
    assert_ok(hp_store_declare(s, "b", HP_DTYPE_I32, &s4, NULL));

    /* a program whose "w" has another shape */
    hp_graph *g = hp_graph_new();
    hp_tid w = hp_leaf(g, "w", HP_TENSOR_KIND_PARAM, HP_DTYPE_F32, HP_SHAPE(4, 5));
    hp_tid y = hp_scale(g, w, 2.0f);
    hp_program_opts o = HP_PROGRAM_OPTS_DEFAULT;
    o.keep = &y;
    o.n_keep = 1;
    o.store = s;
    hp_program *p = NULL;
    assert_int_equal(hp_program_new(g, &o, &p), HP_STATUS_SHAPE);
    hp_test_assert_error_contains("'w'");
    hp_test_assert_error_contains("[4, 4]");
    hp_test_assert_error_contains("[4, 5]");
    assert_null(p);
    hp_graph_free(g);

    /* a program whose "b" has another dtype */
    g = hp_graph_new();
    hp_tid b = hp_leaf(g, "b", HP_TENSOR_KIND_PARAM, HP_DTYPE_F32, HP_SHAPE(4));
    y = hp_scale(g, b, 2.0f);
    assert_int_equal(hp_program_new(g, &o, &p), HP_STATUS_SHAPE);
    hp_test_assert_error_contains("'b'");
    hp_test_assert_error_contains("i32");
    hp_test_assert_error_contains("f32");
    hp_graph_free(g);

    /* a planned program reports the same error and leaves the store alone */
    g = hp_graph_new();
    w = hp_leaf(g, "w", HP_TENSOR_KIND_PARAM, HP_DTYPE_F32, HP_SHAPE(4, 5));
    y = hp_scale(g, w, 2.0f);
    hp_program_stats ps;
    assert_int_equal(hp_program_plan(g, &o, &ps), HP_STATUS_SHAPE);
    hp_graph_free(g);
    assert_int_equal(hp_store_n_entries(s), 2);
    hp_store_free(s);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_three_programs_share_bytes),
        cmocka_unit_test(test_sharded_view_through_planner),
        cmocka_unit_test(test_offload_home_reaches_eval),
        cmocka_unit_test(test_home_outlives_program),
        cmocka_unit_test(test_errors_name_the_value),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
