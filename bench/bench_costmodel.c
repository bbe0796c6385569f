/*
 * Cost model benchmark: the step time `hp plan` predicts for a run config against the step time
 * measured by training it, on this machine, with as many ranks as the command runs (under mpirun for
 * a strategy). One JSON line per run (rank 0):
 *   {"config", "pair", "ranks", "threads", "model", "predicted_s", "measured_s" (median step),
 *    "measured_mean_s", "measured_min_s", "ratio" (predicted / measured median), "ratio_min"
 *    (predicted / fastest step), "compute_s", "comm_s", "exposed_comm_s", "probe_s", "steps"}
 *
 *   ./build/bench/bench_costmodel examples/kjv.yaml --calibrate --steps 20
 *   mpirun --oversubscribe -n 4 ./build/bench/bench_costmodel examples/dp4.yaml --calibrate
 *   ./build/bench/bench_costmodel examples/kjv.yaml --calibration FILE     # a cached calibration
 *
 * --calibrate runs the probe (hp/calibrate.h) in the same processes right before the training
 * steps (the machine's load then is the load the steps see; with --calibration FILE it is also
 * saved there; --fastest keeps each probe's fastest run); --pairs N repeats calibration,
 * prediction and measurement until N pairs are clean (other work on the machine used at most
 * --max-foreign, default 0.1, of the cores during the probe and during the steps; at most
 * --attempts pairs, default 3 N), a line each ("foreign_probe", "foreign_steps", "clean"), then
 * one line with the median ratio over the clean pairs; --wait-quiet S waits before each attempt (up
 * to S seconds, every rank asleep) until other work uses at most --max-foreign of the cores; otherwise the calibration is read from FILE (default: hp calibrate's cache) and a
 * missing entry falls back to the flat model, as `hp plan` does. --name sets "config" (default the
 * file name). The prediction is the compile driver's plan of each rank (hp_compiled_predict; the
 * largest over the ranks); the measurement skips --warmup steps (default 3) and takes --steps
 * (default 20). --by-op also runs the step compiled with profiling and prints, per operator kind,
 * the measured seconds per step against the model's (stderr).
 */
#include "hp/calibrate.h"
#include "hp/comm_mpi.h"
#include "hp/compile.h"
#include "hp/config.h"
#include "hp/costmodel.h"
#include "hp/train.h"

#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

/*
 * Other work on the machine: the CPU time every process used (/proc/stat) minus this run's own (every
 * rank's getrusage, summed), as a fraction of the machine's CPU capacity over the interval. A
 * machine shared with other work changes the speed of whichever side of the ratio it overlaps.
 */
typedef struct cpu_mark {
    double wall, machine_busy, own;
} cpu_mark;

static double machine_busy_s(void) {
    FILE *f = fopen("/proc/stat", "r");
    unsigned long long v[8] = {0};
    if (!f) return 0;
    int n = fscanf(f, "cpu %llu %llu %llu %llu %llu %llu %llu %llu", &v[0], &v[1], &v[2], &v[3], &v[4], &v[5], &v[6],
                   &v[7]);
    fclose(f);
    if (n < 8) return 0;
    double busy = (double)(v[0] + v[1] + v[2] + v[5] + v[6] + v[7]); /* all but idle and iowait */
    return busy / (double)sysconf(_SC_CLK_TCK);
}

static double own_cpu_s(void) {
    struct rusage r;
    getrusage(RUSAGE_SELF, &r);
    return (double)r.ru_utime.tv_sec + 1e-6 * r.ru_utime.tv_usec + (double)r.ru_stime.tv_sec + 1e-6 * r.ru_stime.tv_usec;
}

static cpu_mark cpu_now(void) { return (cpu_mark){hp_now_seconds(), machine_busy_s(), own_cpu_s()}; }

/* The fraction of the cores other work used since `a` (the same on every rank). */
static hp_status foreign_since(hp_comm *world, cpu_mark a, double *out) {
    cpu_mark b = cpu_now();
    float v[2] = {(float)(b.own - a.own), (float)(b.machine_busy - a.machine_busy)};
    if (world) HP_CHECK(hp_comm_all_reduce(world, v, v, 1, HP_DTYPE_F32, HP_REDUCE_SUM)); /* own: every rank's */
    if (world) HP_CHECK(hp_comm_broadcast(world, &v[1], 1, HP_DTYPE_F32, 0));             /* machine: rank 0's */
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    double cap = (b.wall - a.wall) * (double)(cores > 0 ? cores : 1);
    double f = cap > 0 ? ((double)v[1] - (double)v[0]) / cap : 0;
    *out = f < 0 ? 0 : f;
    return HP_STATUS_OK;
}

/* Waits (every rank sleeping) until other work used at most max_foreign of the cores over 2 s, for at
 * most `limit` seconds; *waited gets the seconds spent. */
static hp_status wait_quiet(hp_comm *world, double max_foreign, double limit, double *waited) {
    double t0 = hp_now_seconds();
    for (;;) {
        cpu_mark a = cpu_now();
        usleep(2000000);
        double f;
        HP_CHECK(foreign_since(world, a, &f));
        double el = hp_now_seconds() - t0;
        if (world) {
            float e = (float)el; /* one decision for every rank */
            HP_CHECK(hp_comm_broadcast(world, &e, 1, HP_DTYPE_F32, 0));
            el = e;
        }
        if (f <= max_foreign || el >= limit) {
            *waited = el;
            return HP_STATUS_OK;
        }
    }
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static int fail(hp_status st, const char *what) {
    fprintf(stderr, "bench_costmodel: %s: %s (%s)\n", what, hp_error_message(), hp_status_str(st));
    return 1;
}

/* The largest of v over the ranks (through f32). */
static hp_status rank_max(hp_comm *world, double *v) {
    if (!world) return HP_STATUS_OK;
    float f = (float)*v;
    HP_CHECK(hp_comm_all_reduce(world, &f, &f, 1, HP_DTYPE_F32, HP_REDUCE_MAX));
    *v = f;
    return HP_STATUS_OK;
}

/*
 * --by-op: the step compiled with profiling and run `steps` times after `warmup` (zero tokens, lr 0):
 * per operator kind, the measured seconds per step (each node's mean) against the model's, on
 * stderr (rank 0). Communication nodes are listed with their measured compute-thread time.
 */
static hp_status by_op(const hp_run_config *cfg, hp_comm *world, const hp_machine_model *m, int warmup, int steps) {
    hp_compile_opts co = HP_COMPILE_OPTS_INIT;
    co.train = true;
    co.comm = world;
    co.program.profile = true;
    hp_compiled *c = NULL;
    HP_CHECK(hp_compile_run(cfg, &co, &c));
    hp_program *p = hp_compiled_program(c);
    const hp_graph *g = hp_compiled_graph(c);
    hp_partition *part = hp_compiled_partition(c);
    const hp_train_step *ts = hp_compiled_step(c);
    float one = 1.0f, zero = 0.0f;
    hp_status st = hp_program_set_input(p, hp_partition_local(part, ts->step), &one, sizeof one);
    if (st == HP_STATUS_OK) st = hp_program_set_input(p, hp_partition_local(part, ts->lr), &zero, sizeof zero);
    int nn = hp_graph_n_nodes(g);
    double *meas = calloc((size_t)nn, sizeof *meas), t_run = 0;
    for (int s = 0; s < warmup + steps && st == HP_STATUS_OK; s++) {
        double t0 = hp_now_seconds();
        st = hp_program_run(p);
        if (s < warmup) continue;
        t_run += hp_now_seconds() - t0;
        for (int i = 0; i < nn; i++) {
            double last;
            if (hp_program_node_seconds(p, i, &last, NULL)) meas[i] += last / steps;
        }
    }
    double pm[HP_OP_COUNT] = {0}, mm[HP_OP_COUNT] = {0}, tp = 0, tm = 0;
    int cnt[HP_OP_COUNT] = {0};
    const hp_liveness *lv = hp_program_liveness(p);
    for (int i = 0; i < nn && st == HP_STATUS_OK; i++) {
        if (!lv->node_live[i]) continue;
        const hp_node *n = hp_graph_node(g, i);
        double pr = (n->flags & HP_NODE_FLAG_ASYNC) ? 0.0 : hp_node_seconds(g, i, m);
        if (getenv("HP_BENCH_NODES") && (!world || hp_comm_rank(world) == 0)) {
            hp_op_cost x = hp_node_cost(g, i);
            fprintf(stderr, "node %4d %-22s m %5lld n %5lld k %5lld b %3lld%s %9.0f B  measured %8.1f us  model %8.1f us\n",
                    i, hp_op_name(n->op), (long long)x.m, (long long)x.n, (long long)x.k, (long long)x.batch,
                    x.trans_a ? " T" : "  ", x.bytes_read + x.bytes_written, 1e6 * meas[i], 1e6 * pr);
        }
        pm[n->op] += pr;
        mm[n->op] += meas[i];
        cnt[n->op]++;
        tp += pr;
        tm += meas[i];
    }
    if (st == HP_STATUS_OK && (!world || hp_comm_rank(world) == 0)) {
        fprintf(stderr, "%-24s %5s %12s %12s %7s\n", "operator", "nodes", "measured ms", "model ms", "ratio");
        for (int op = 0; op < HP_OP_COUNT; op++)
            if (cnt[op])
                fprintf(stderr, "%-24s %5d %12.3f %12.3f %7.2f\n", hp_op_name((hp_op)op), cnt[op], 1e3 * mm[op],
                        1e3 * pm[op], mm[op] > 0 ? pm[op] / mm[op] : 0.0);
        fprintf(stderr, "%-24s %5s %12.3f %12.3f %7.2f   (run %.3f ms per step)\n", "sum of nodes", "", 1e3 * tm,
                1e3 * tp, tm > 0 ? tp / tm : 0.0, 1e3 * t_run / steps);
    }
    free(meas);
    hp_compiled_free(c);
    return st;
}

typedef struct bench_opts {
    const char *config, *calpath, *name;
    int steps, warmup, pairs, attempts;
    double max_foreign, wait, gemm_flops;
    bool calibrate, op_table, fastest;
} bench_opts;

/* One pair: (calibrate,) predict, measure; one JSON line; *ratio = predicted / measured median; *clean:
 * other work used at most max_foreign of the cores during the probe and during the steps. */
static int pair(const bench_opts *b, hp_comm *world, int k, hp_run_config *cfg, hp_calibration *cal, double *ratio,
                bool *clean) {
    int rank = world ? hp_comm_rank(world) : 0, size = world ? hp_comm_size(world) : 1;
    hp_machine_model m = {.flops_per_s = 150e9, .bytes_per_s = 10e9, .cal = NULL};
    hp_status st;
    double f_probe = 0, f_steps = 0;
    cpu_mark mark = cpu_now();
    if (b->calibrate) {
        hp_calibrate_opts o = HP_CALIBRATE_OPTS_DEFAULT;
        if (b->fastest) o.stat = HP_CALIBRATE_STAT_MIN;
        if (b->gemm_flops > 0) o.gemm_flops = b->gemm_flops;
        st = hp_calibrate(world, &o, cal);
        if (st != HP_STATUS_OK) return fail(st, "calibrate");
        if (rank == 0 && b->calpath && (st = hp_calibration_save(b->calpath, cal)) != HP_STATUS_OK)
            return fail(st, "save");
        m.cal = cal;
        if ((st = foreign_since(world, mark, &f_probe)) != HP_STATUS_OK) return fail(st, "load");
    } else {
        hp_machine_key key;
        st = hp_machine_key_local(0, size, &key);
        if (st == HP_STATUS_OK && b->calpath) st = hp_calibration_load(b->calpath, &key, 0, cal);
        if (st == HP_STATUS_OK && b->calpath) m.cal = cal;
        else if (rank == 0) fprintf(stderr, "bench_costmodel: flat model: %s\n", hp_error_message());
    }
    /* the prediction: this rank's plan, as `hp plan --rank R` */
    hp_compile_opts co = HP_COMPILE_OPTS_INIT;
    co.train = true;
    co.plan_only = true;
    co.plan_world_size = size;
    co.plan_index = rank;
    hp_compiled *c = NULL;
    hp_step_prediction p;
    st = hp_compile_run(cfg, &co, &c);
    if (st == HP_STATUS_OK) st = hp_compiled_predict(c, &m, &p);
    hp_compiled_free(c);
    if (st != HP_STATUS_OK) return fail(st, "predict");
    double pred = p.total_s;
    if ((st = rank_max(world, &pred)) != HP_STATUS_OK) return fail(st, "reduce");
    if (b->op_table && (st = by_op(cfg, world, &m, b->warmup, b->steps)) != HP_STATUS_OK) return fail(st, "--by-op");
    /* the measurement */
    hp_trainer *t = NULL;
    st = hp_trainer_new_dist(cfg, world, &t);
    if (st != HP_STATUS_OK) return fail(st, "trainer");
    int steps = b->steps;
    double *sec = malloc(sizeof(double) * (size_t)steps), sum = 0;
    for (int s = 0; s < b->warmup + steps && st == HP_STATUS_OK; s++) {
        if (s == b->warmup) mark = cpu_now();
        hp_step_metrics mt;
        st = hp_trainer_step(t, &mt);
        if (s >= b->warmup) sum += sec[s - b->warmup] = mt.seconds;
    }
    if (st == HP_STATUS_OK) st = foreign_since(world, mark, &f_steps);
    hp_trainer_free(t);
    if (st != HP_STATUS_OK) {
        free(sec);
        return fail(st, "step");
    }
    qsort(sec, (size_t)steps, sizeof *sec, cmp_double);
    double med = steps % 2 ? sec[steps / 2] : 0.5 * (sec[steps / 2 - 1] + sec[steps / 2]);
    *ratio = pred / med;
    *clean = f_probe <= b->max_foreign && f_steps <= b->max_foreign;
    if (rank == 0)
        printf("{\"config\": \"%s\", \"pair\": %d, \"ranks\": %d, \"threads\": %d, \"model\": \"%s\", "
               "\"predicted_s\": %.4f, \"measured_s\": %.4f, \"measured_mean_s\": %.4f, \"measured_min_s\": %.4f, "
               "\"ratio\": %.3f, \"ratio_min\": %.3f, \"compute_s\": %.4f, \"comm_s\": %.4f, \"comm_on_compute_s\": %.4f, "
               "\"exposed_comm_s\": %.4f, "
               "\"probe_s\": %.1f, \"steps\": %d, \"foreign_probe\": %.2f, \"foreign_steps\": %.2f, "
               "\"clean\": %s}\n",
               b->name, k, size, omp_get_max_threads(), m.cal ? (m.cal->fastest ? "calibrated-min" : "calibrated")
                                                               : "flat",
               pred, med, sum / steps, sec[0], pred / med, pred / sec[0], p.compute_s, p.comm_s, p.comm_compute_s,
               p.exposed_comm_s,
               m.cal ? m.cal->probe_seconds : 0.0, steps, f_probe, f_steps, *clean ? "true" : "false");
    fflush(stdout);
    free(sec);
    return 0;
}

static int run(int argc, char **argv, hp_comm *world) {
    bench_opts b = {.steps = 20, .warmup = 3, .pairs = 1, .attempts = 0, .max_foreign = 0.1};
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--steps") && i + 1 < argc) b.steps = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--warmup") && i + 1 < argc) b.warmup = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--pairs") && i + 1 < argc) b.pairs = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--attempts") && i + 1 < argc) b.attempts = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--max-foreign") && i + 1 < argc) b.max_foreign = atof(argv[++i]);
        else if (!strcmp(argv[i], "--wait-quiet") && i + 1 < argc) b.wait = atof(argv[++i]);
        else if (!strcmp(argv[i], "--gemm-flops") && i + 1 < argc) b.gemm_flops = atof(argv[++i]);
        else if (!strcmp(argv[i], "--calibration") && i + 1 < argc) b.calpath = argv[++i];
        else if (!strcmp(argv[i], "--name") && i + 1 < argc) b.name = argv[++i];
        else if (!strcmp(argv[i], "--calibrate")) b.calibrate = true;
        else if (!strcmp(argv[i], "--fastest")) b.fastest = true;
        else if (!strcmp(argv[i], "--by-op")) b.op_table = true;
        else if (argv[i][0] != '-' && !b.config) b.config = argv[i];
        else {
            fprintf(stderr, "usage: bench_costmodel RUN.yaml [--calibrate [--fastest]] [--calibration FILE] [--steps N] "
                            "[--warmup N] [--pairs N] [--attempts N] [--max-foreign F] [--wait-quiet S] [--name NAME] "
                            "[--by-op]\n");
            return 2;
        }
    }
    if (!b.config || b.steps < 1 || b.warmup < 0 || b.pairs < 1) {
        fprintf(stderr, "bench_costmodel: a config, --steps >= 1 and --pairs >= 1 are needed\n");
        return 2;
    }
    if (!b.name) {
        const char *s = strrchr(b.config, '/');
        b.name = s ? s + 1 : b.config;
    }
    char def[4096];
    if (!b.calpath && hp_calibration_default_path(def, sizeof def) == HP_STATUS_OK) b.calpath = def;
    hp_calibration *cal = malloc(sizeof *cal);
    hp_run_config cfg;
    hp_status st = hp_run_config_load(b.config, &cfg);
    if (st != HP_STATUS_OK) return fail(st, b.config);
    cfg.train.steps = b.warmup + b.steps;
    cfg.train.eval_every = 0;
    if (b.attempts < b.pairs) b.attempts = 3 * b.pairs;
    double *ratios = malloc(sizeof(double) * (size_t)b.attempts);
    int rc = 0, n = 0, k = 0;
    for (; k < b.attempts && n < b.pairs && rc == 0; k++) {
        bool clean = false;
        double waited = 0;
        if (b.wait > 0 && (st = wait_quiet(world, b.max_foreign, b.wait, &waited)) != HP_STATUS_OK) {
            rc = fail(st, "wait");
            break;
        }
        rc = pair(&b, world, k, &cfg, cal, &ratios[n], &clean);
        if (clean) n++;
    }
    if (rc == 0 && (!world || hp_comm_rank(world) == 0)) {
        qsort(ratios, (size_t)n, sizeof *ratios, cmp_double);
        double medr = n == 0 ? 0 : n % 2 ? ratios[n / 2] : 0.5 * (ratios[n / 2 - 1] + ratios[n / 2]);
        printf("{\"config\": \"%s\", \"clean_pairs\": %d, \"attempts\": %d, \"median_ratio\": %.3f, "
               "\"min_ratio\": %.3f, \"max_ratio\": %.3f}\n",
               b.name, n, k, medr, n ? ratios[0] : 0.0, n ? ratios[n - 1] : 0.0);
    }
    free(ratios);
    free(cal);
    hp_run_config_free(&cfg);
    return rc;
}

int main(int argc, char **argv) {
    hp_comm *world = NULL;
    bool mpi = getenv("OMPI_COMM_WORLD_SIZE") || getenv("PMI_SIZE") || getenv("PMIX_RANK");
    if (mpi) {
        setenv("OMPI_MCA_mpi_yield_when_idle", "1", 0); /* as `hp train` */
        if (hp_comm_mpi_init(&argc, &argv) != HP_STATUS_OK || hp_comm_mpi_world(&world) != HP_STATUS_OK)
            return fail(HP_STATUS_COMM, "MPI");
    }
    int rc = run(argc, argv, world);
    if (world) hp_comm_free(world);
    if (mpi) {
        if (rc) hp_comm_mpi_abort(rc);
        hp_comm_mpi_finalize();
    }
    return rc;
}
