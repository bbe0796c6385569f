/*
 * The cost-model stage split (pipeline.split: auto): the model's blocks cut into contiguous
 * virtual stages so that the slowest stage, embedding and head included, is as fast as possible
 * while every stage fits its group's memory budget (hp/pipeline_plan.h). Also the machine model a
 * plan uses (the calibration cache, else the flat model), the plan options of a run config and the
 * program instances a schedule keeps per stage.
 */
#include "mpmd/pipeline_plan_internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

hp_status hp_pipeline_machine_model(const char *path, int ranks_per_node, hp_calibration *cal, hp_machine_model *mm,
                                    bool *calibrated, char *why, size_t n) {
    char def[4096];
    *mm = HP_MACHINE_MODEL_DEFAULT;
    if (calibrated) *calibrated = false;
    if (why && n) why[0] = 0;
    hp_status st = HP_STATUS_OK;
    if (!path) {
        st = hp_calibration_default_path(def, sizeof def);
        path = def;
    }
    /* the threads each rank will run: OMP_NUM_THREADS when set, else whatever the cache has */
    const char *omp = getenv("OMP_NUM_THREADS");
    int threads = omp ? atoi(omp) : 0;
    hp_machine_key key;
    if (st == HP_STATUS_OK) st = hp_machine_key_local(threads > 0 ? threads : 0, ranks_per_node > 0 ? ranks_per_node : 1, &key);
    if (st == HP_STATUS_OK && threads <= 0) key.threads = 0;
    if (st == HP_STATUS_OK) st = hp_calibration_load(path, &key, 0, cal);
    if (st != HP_STATUS_OK) { /* the flat model: not an error */
        if (why && n) snprintf(why, n, "%s", hp_error_message());
        return HP_STATUS_OK;
    }
    mm->cal = cal;
    if (calibrated) *calibrated = true;
    return HP_STATUS_OK;
}

/* The ranks optimizer.shard splits AdamW's update over beyond the parameters' own layouts: the
 * product of the sizes of its axes that no params rule names. An axis a parameter's layout already
 * splits (FSDP's, tensor parallelism's) leaves the runtime's shard of that parameter's moments
 * nothing more to split; hp_pipeline_stage_plan.moment_bytes makes the same choice per parameter. */
static int opt_shard_ranks(const hp_strategy_config *sc) {
    int n = 1;
    for (int a = 0; a < sc->n_opt_shard; a++) {
        int axis = sc->opt_shard[a];
        bool named = false;
        for (int r = 0; r < sc->n_params && !named; r++)
            for (int d = 0; d < sc->params[r].tensor_map.n && !named; d++)
                for (int k = 0; k < sc->params[r].tensor_map.nmap[d]; k++) named |= sc->params[r].tensor_map.map[d][k] == axis;
        if (!named) n *= (int)sc->device_matrix[axis];
    }
    return n;
}

hp_status hp_pipeline_plan_opts_from_config(const hp_run_config *cfg, const hp_schedule *s, const hp_machine_model *mm,
                                            hp_pipeline_plan_opts *o) {
    memset(o, 0, sizeof *o);
    int p = s->p;
    o->model_storage = hp_gpt_config_from_model(&cfg->model);
    o->model_storage.context = (int)cfg->model.context;
    o->model = &o->model_storage;
    o->schedule = s;
    o->rows = (int)(cfg->train.batch / s->m);
    o->seq = (int)cfg->model.context;
    o->mm = mm;
    o->file = cfg->groups.file ? cfg->groups.file : cfg->source;
    o->optim = &cfg->optim;
    o->world = cfg->groups.n_ranks;
    o->own = true;
    hp_offload_plan_config_from(&cfg->offload, &o->offload_cfg);
    o->offload = cfg->offload.present && o->offload_cfg.device_budget > 0;
    int *dp = calloc((size_t)p, sizeof *dp), *tp = calloc((size_t)p, sizeof *tp), *line = calloc((size_t)p, sizeof *line);
    int *zero = calloc((size_t)p, sizeof *zero);
    size_t *budget = calloc((size_t)p, sizeof *budget);
    const char **name = calloc((size_t)p, sizeof *name);
    hp_strategy_config *strat = calloc((size_t)p, sizeof *strat);
    o->strategy = strat;
    o->dp = dp, o->tp = tp, o->budget_line = line, o->memory_budget = budget, o->group_name = name, o->zero = zero;
    if (!dp || !tp || !line || !budget || !name || !zero || !strat) {
        hp_pipeline_plan_opts_free(o);
        return hp_error(HP_STATUS_OUT_OF_MEMORY, "pipeline plan: out of memory for %d groups", p);
    }
    for (int r = 0; r < p; r++) dp[r] = tp[r] = zero[r] = 1;
    for (int i = 0; i < cfg->groups.n_groups; i++) {
        const hp_group_config *g = &cfg->groups.groups[i];
        if (g->stage < 0 || g->stage >= p) continue;
        hp_pipeline_group_shape(&g->strategy, g->n_ranks, &dp[g->stage], &tp[g->stage]);
        budget[g->stage] = g->memory_budget;
        strat[g->stage] = g->strategy; /* a shallow copy: its rules stay the config's */
        if (g->strategy.present) zero[g->stage] = opt_shard_ranks(&g->strategy);
        line[g->stage] = g->memory_budget_line;
        name[g->stage] = g->name;
    }
    return HP_STATUS_OK;
}

void hp_pipeline_plan_opts_free(hp_pipeline_plan_opts *o) {
    if (!o || !o->own) return;
    free((void *)o->dp), free((void *)o->tp), free((void *)o->budget_line), free((void *)o->memory_budget);
    free((void *)o->group_name), free((void *)o->zero), free((void *)o->strategy);
    memset(o, 0, sizeof *o);
}

hp_status hp_pipeline_stage_slots(const hp_schedule *s, int *slots) {
    int n = s->n_stages, m = s->m;
    size_t cells = (size_t)n * (size_t)m;
    int *slot_of = malloc(cells * sizeof *slot_of), *last = malloc(cells * sizeof *last);
    bool *taken = calloc((size_t)n * (size_t)(m + 1), sizeof *taken);
    hp_status st = slot_of && last && taken ? HP_STATUS_OK
                                            : hp_error(HP_STATUS_OUT_OF_MEMORY, "pipeline: out of memory counting slots");
    for (int k = 0; k < n; k++) slots[k] = 0;
    for (int r = 0; st == HP_STATUS_OK && r < s->p; r++) {
        const hp_sched_action *act = s->actions[r];
        int na = s->n_actions[r];
        for (size_t c = 0; c < cells; c++) slot_of[c] = -1, last[c] = -1;
        for (int i = 0; i < na; i++) { /* the last action reading (stage, mb), a local hand-over included */
            const hp_sched_action *a = &act[i];
            if (a->stage < 0 || a->stage >= n || a->mb < 0 || a->mb >= m) {
                st = hp_error(HP_STATUS_INVALID_ARGUMENT, "pipeline: rank %d's action %d names stage %d mb %d", r, i,
                              a->stage, a->mb);
                break;
            }
            last[(size_t)a->stage * m + a->mb] = i;
            int other = a->op == HP_SCHED_OP_F ? a->stage - 1 : a->op == HP_SCHED_OP_B ? a->stage + 1 : -1;
            if (other >= 0 && other < n && s->stage_rank[other] == r) last[(size_t)other * m + a->mb] = i;
        }
        for (int i = 0; st == HP_STATUS_OK && i < na; i++) {
            const hp_sched_action *a = &act[i];
            int *so = &slot_of[(size_t)a->stage * m + a->mb];
            if (*so < 0) {
                int k = 0;
                while (taken[(size_t)a->stage * (m + 1) + k]) k++;
                *so = k;
                taken[(size_t)a->stage * (m + 1) + k] = true;
                if (k + 1 > slots[a->stage]) slots[a->stage] = k + 1;
            }
            int other = a->op == HP_SCHED_OP_F ? a->stage - 1 : a->op == HP_SCHED_OP_B ? a->stage + 1 : -1;
            int os = other >= 0 && other < n && s->stage_rank[other] == r ? other : -1;
            for (int pass = 0; pass < 2; pass++) {
                int k = pass == 0 ? a->stage : os;
                if (k < 0 || last[(size_t)k * m + a->mb] != i) continue;
                int *sp = &slot_of[(size_t)k * m + a->mb];
                if (*sp < 0) continue;
                taken[(size_t)k * (m + 1) + *sp] = false;
                *sp = -1;
            }
        }
    }
    for (int k = 0; k < n; k++)
        if (slots[k] == 0) slots[k] = 1;
    free(slot_of), free(last), free(taken);
    return st;
}

/* ---------------------------------------------------------------- stage costs */

/* Time and memory of the stages of one group shape (its rows share and tp), per block count k and
 * parts: [combo][k] with combo = embedding + 2 * head. Measured from the stage graphs themselves for
 * every k a stage of that group can take: the times and the state are additive per block, but the
 * activation arena is not (the embedding's and the head's backward transients overlap the blocks'
 * saved activations), so nothing is extrapolated. */
typedef struct group_cost {
    int share, tp, zero;  /* the shape these were measured for */
    const hp_strategy_config *sc; /* and the strategy partitioning it (NULL: whole stages) */
    int rank;             /* a pipeline rank of that shape (hp__pp_stage_cost) */
    double *t, *act, *state; /* [4 * (L + 1)]: seconds (F + B + W of one process), activation bytes, state bytes */
    bool *done;
} group_cost;

hp_status hp__pp_stage_cost(const hp_pipeline_plan_opts *o, int r, const hp_gpt_stage *part, pp_stage_cost *out) {
    int dp = o->dp ? o->dp[r] : 1, tp = o->tp ? o->tp[r] : 1, m = o->schedule->m;
    int share = (o->rows + dp - 1) / dp;
    const hp_strategy_config *sc = o->strategy ? &o->strategy[r] : NULL;
    bool grouped = tp > 1 && sc && sc->present;
    hp_pipeline_stage_plan *sp = &out->plan;
    if (grouped) {
        HP_CHECK(hp_pipeline_plan_stage_group(o->model, part, share, o->seq, m, sc, dp * tp, o->mm, sp));
    } else {
        HP_CHECK(hp_pipeline_plan_stage(o->model, part, share, o->seq, m, o->mm, sp));
        sp->f_seconds /= tp, sp->b_seconds /= tp, sp->w_seconds /= tp;
    }
    out->act = hp_pipeline_stage_activations(sp, o->schedule->split_backward);
    int zero = !grouped && o->zero && o->zero[r] > 1 ? o->zero[r] : 1; /* ZeRO over the group's replicas */
    out->state = sp->persistent_bytes + sp->moment_bytes / (size_t)zero;
    size_t emb = sp->embedding_bytes / 4; /* whole stage: parameter, accumulator and two moments alike */
    out->embedding_state = grouped ? sp->embedding_bytes : 2 * emb + 2 * emb / (size_t)zero;
    return HP_STATUS_OK;
}

/* Measures (once) the stage of `k` blocks with the parts of `combo` for group shape gc. */
static hp_status group_measure(const hp_pipeline_plan_opts *o, group_cost *gc, int combo, int k) {
    size_t i = (size_t)combo * (size_t)(o->model->layers + 1) + (size_t)k;
    if (gc->done[i]) return HP_STATUS_OK;
    hp_gpt_stage part = {0, k, combo & 1, (combo & 2) != 0};
    pp_stage_cost sc;
    HP_CHECK(hp__pp_stage_cost(o, gc->rank, &part, &sc));
    gc->t[i] = sc.plan.f_seconds + sc.plan.b_seconds + sc.plan.w_seconds;
    gc->act[i] = (double)sc.act;
    gc->state[i] = (double)sc.state;
    gc->done[i] = true;
    return HP_STATUS_OK;
}

/* Whether two groups' strategies partition a stage alike (the same mesh, rules and optimizer.shard):
 * their stages then cost the same and are measured once. */
static bool same_map(const hp_tensor_map_config *a, const hp_tensor_map_config *b) {
    if (a->n != b->n) return false;
    for (int d = 0; d < a->n; d++) {
        if (a->nmap[d] != b->nmap[d]) return false;
        for (int k = 0; k < a->nmap[d]; k++)
            if (a->map[d][k] != b->map[d][k]) return false;
    }
    return true;
}

static bool same_rules(const hp_strategy_rule *a, int na, const hp_strategy_rule *b, int nb) {
    if (na != nb) return false;
    for (int i = 0; i < na; i++)
        if (strcmp(a[i].match, b[i].match) || !same_map(&a[i].tensor_map, &b[i].tensor_map)) return false;
    return true;
}

static bool same_strategy(const hp_strategy_config *a, const hp_strategy_config *b) {
    if (!a || !b) return a == b;
    if (a->n_axes != b->n_axes || a->n_opt_shard != b->n_opt_shard) return false;
    for (int i = 0; i < a->n_axes; i++)
        if (a->device_matrix[i] != b->device_matrix[i]) return false;
    for (int i = 0; i < a->n_opt_shard; i++)
        if (a->opt_shard[i] != b->opt_shard[i]) return false;
    return same_rules(a->params, a->n_params, b->params, b->n_params) &&
           same_rules(a->inputs, a->n_inputs, b->inputs, b->n_inputs);
}

static void group_free(group_cost *gc) { free(gc->t), free(gc->act), free(gc->state), free(gc->done); }

static hp_status group_init(group_cost *gc, int share, int tp, int zero, int L) {
    size_t n = 4 * (size_t)(L + 1);
    gc->share = share, gc->tp = tp, gc->zero = zero;
    gc->t = calloc(n, sizeof *gc->t), gc->act = calloc(n, sizeof *gc->act), gc->state = calloc(n, sizeof *gc->state);
    gc->done = calloc(n, sizeof *gc->done);
    if (!gc->t || !gc->act || !gc->state || !gc->done) return hp_error(HP_STATUS_OUT_OF_MEMORY, "pipeline: out of memory");
    return HP_STATUS_OK;
}

/* ---------------------------------------------------------------- the split */

typedef struct split_ctx {
    int n, L;
    const group_cost **gc; /* [n] the cost of each virtual stage's group */
    const int *slots;      /* [n] */
    const double *cap;     /* [n] bytes a stage may take; 0: none */
} split_ctx;

static size_t cost_index(const split_ctx *x, int k, int blocks) {
    int combo = (k == 0) + 2 * (k == x->n - 1);
    return (size_t)combo * (size_t)(x->L + 1) + (size_t)blocks;
}

static double stage_bytes_of(const split_ctx *x, int k, int blocks) {
    size_t i = cost_index(x, k, blocks);
    return x->gc[k]->state[i] + x->slots[k] * x->gc[k]->act[i];
}

/* Min-max partition by dynamic programming; false when nothing fits. */
static bool split_dp(const split_ctx *x, double *best, int *cut, int *first_layer, double *max_seconds) {
    int n = x->n, L = x->L;
#define AT(a, k, j) (a)[(size_t)(k) * (size_t)(L + 1) + (size_t)(j)]
    for (size_t c = 0; c < (size_t)(n + 1) * (size_t)(L + 1); c++) best[c] = INFINITY, cut[c] = 0;
    AT(best, 0, 0) = 0;
    for (int k = 1; k <= n; k++)
        for (int j = 0; j <= L; j++)
            for (int i = 0; i <= j; i++) { /* stage k-1 takes blocks [i, j) */
                if (!isfinite(AT(best, k - 1, i))) continue;
                if (i == j && k != 1 && k != n) continue; /* a stage with no block needs the embedding or head */
                if (x->cap[k - 1] > 0 && stage_bytes_of(x, k - 1, j - i) > x->cap[k - 1]) continue;
                double c = x->gc[k - 1]->t[cost_index(x, k - 1, j - i)];
                double worst = c > AT(best, k - 1, i) ? c : AT(best, k - 1, i);
                if (worst < AT(best, k, j)) AT(best, k, j) = worst, AT(cut, k, j) = i;
            }
    if (!isfinite(AT(best, n, L))) return false;
    for (int k = n, j = L; k >= 1; k--) {
        first_layer[k - 1] = AT(cut, k, j);
        j = AT(cut, k, j);
    }
    if (max_seconds) *max_seconds = AT(best, n, L);
#undef AT
    return true;
}

static double mib(double b) { return b / (1024.0 * 1024.0); }

/* Which group's budget makes the split impossible, as an HP_STATUS_CONFIG error. */
static hp_status budget_error(const hp_pipeline_plan_opts *o, split_ctx *x, double *best, int *cut, int *first,
                              const double *cap) {
    const hp_schedule *s = o->schedule;
    double *one = calloc((size_t)x->n, sizeof *one);
    if (!one) return hp_error(HP_STATUS_OUT_OF_MEMORY, "pipeline plan: out of memory");
    x->cap = one;
    char names[512] = "";
    size_t used = 0;
    for (int r = 0; r < s->p; r++) {
        if (!o->memory_budget || !o->memory_budget[r]) continue;
        for (int k = 0; k < x->n; k++) one[k] = s->stage_rank[k] == r ? cap[k] : 0;
        const char *nm = o->group_name && o->group_name[r] ? o->group_name[r] : "?";
        if (!split_dp(x, best, cut, first, NULL)) { /* this group alone: its least stage */
            double need = INFINITY, act = 0, state = 0;
            int slots = 0;
            for (int k = 0; k < x->n; k++) {
                if (s->stage_rank[k] != r) continue;
                int kmin = k == 0 || k == x->n - 1 ? 0 : 1;
                double b = stage_bytes_of(x, k, kmin);
                if (b < need) {
                    need = b, slots = x->slots[k];
                    act = x->gc[k]->act[cost_index(x, k, kmin)];
                    state = x->gc[k]->state[cost_index(x, k, kmin)];
                }
            }
            int chunks = 0;
            for (int k = 0; k < x->n; k++) chunks += s->stage_rank[k] == r;
            char at[300] = "";
            if (o->file && o->budget_line && o->budget_line[r] > 0) snprintf(at, sizeof at, "%s:%d: ", o->file, o->budget_line[r]);
            free(one);
            return hp_error(HP_STATUS_CONFIG,
                            "%sgroups.%s.memory_budget: %.2f MiB per rank cannot hold any split of %d blocks over %d "
                            "stages: its smallest stage needs %.2f MiB%s (%.2f MiB parameters, gradients and AdamW "
                            "state + %d micro-batches in flight x %.2f MiB activations)",
                            at, nm, mib((double)o->memory_budget[r]), x->L, x->n, mib(need * chunks),
                            chunks > 1 ? " over its chunks" : "", mib(state), slots, mib(act));
        }
        used += (size_t)snprintf(names + used, used < sizeof names ? sizeof names - used : 0, "%s%s", used ? ", " : "", nm);
        if (used >= sizeof names) used = sizeof names - 1;
    }
    free(one);
    return hp_error(HP_STATUS_CONFIG, "%s%spipeline: the memory budgets of groups %s together cannot hold the %d blocks "
                    "(each alone can: raise one of them or add stages)", o->file ? o->file : "", o->file ? ": " : "",
                    names, x->L);
}

hp_status hp_pipeline_split(const hp_pipeline_plan_opts *o, int *first_layer, double *max_seconds, double *stage_bytes) {
    const hp_schedule *s = o->schedule;
    int L = o->model->layers, n = s->n_stages, p = s->p;
    if (n < 1 || n > L + 2)
        return hp_error(HP_STATUS_INVALID_ARGUMENT, "pipeline: %d stages for %d layers", n, L);
    if (o->rows < 1 || o->seq < 1)
        return hp_error(HP_STATUS_INVALID_ARGUMENT, "pipeline: micro-batches of %d rows of %d tokens", o->rows, o->seq);
    size_t cells = (size_t)(n + 1) * (size_t)(L + 1);
    double *best = malloc(cells * sizeof *best), *cap = calloc((size_t)n, sizeof *cap);
    int *cut = malloc(cells * sizeof *cut), *slots = malloc(sizeof *slots * (size_t)n);
    group_cost *gcs = calloc((size_t)p, sizeof *gcs);
    const group_cost **gk = calloc((size_t)n, sizeof *gk);
    split_ctx x = {.n = n, .L = L, .gc = gk, .slots = slots, .cap = cap};
    hp_status st = best && cap && cut && slots && gcs && gk
                       ? HP_STATUS_OK
                       : hp_error(HP_STATUS_OUT_OF_MEMORY, "pipeline: out of memory splitting %d layers", L);
    if (st == HP_STATUS_OK) st = hp_pipeline_stage_slots(s, slots);
    int n_gc = 0;
    for (int k = 0; st == HP_STATUS_OK && k < n; k++) { /* each stage's group shape, measured once */
        int r = s->stage_rank[k];
        int dp = o->dp ? o->dp[r] : 1, tp = o->tp ? o->tp[r] : 1, zero = o->zero ? o->zero[r] : 1;
        int share = (o->rows + dp - 1) / dp;
        const hp_strategy_config *sc = tp > 1 && o->strategy && o->strategy[r].present ? &o->strategy[r] : NULL;
        group_cost *found = NULL;
        for (int i = 0; i < n_gc && !found; i++)
            if (gcs[i].share == share && gcs[i].tp == tp && gcs[i].zero == zero && same_strategy(gcs[i].sc, sc)) found = &gcs[i];
        if (!found) {
            found = &gcs[n_gc++];
            st = group_init(found, share, tp, zero, L);
            found->sc = sc, found->rank = r;
        }
        gk[k] = found;
        int combo = (k == 0) + 2 * (k == n - 1);
        for (int b = combo ? 0 : 1; st == HP_STATUS_OK && b <= L; b++) st = group_measure(o, found, combo, b);
        int chunks = 0;
        for (int j = 0; j < n; j++) chunks += s->stage_rank[j] == r;
        cap[k] = o->memory_budget && o->memory_budget[r] ? (double)o->memory_budget[r] / chunks : 0;
    }
    if (st == HP_STATUS_OK && !split_dp(&x, best, cut, first_layer, max_seconds)) {
        double *none = calloc((size_t)n, sizeof *none);
        x.cap = none;
        if (!none) st = hp_error(HP_STATUS_OUT_OF_MEMORY, "pipeline: out of memory");
        else if (!split_dp(&x, best, cut, first_layer, NULL))
            st = hp_error(HP_STATUS_INVALID_ARGUMENT, "pipeline: %d layers cannot fill %d stages", L, n);
        else
            st = budget_error(o, &x, best, cut, first_layer, cap);
        free(none);
    }
    for (int k = 0; st == HP_STATUS_OK && stage_bytes && k < n; k++) {
        int last = k + 1 < n ? first_layer[k + 1] : L;
        stage_bytes[k] = stage_bytes_of(&x, k, last - first_layer[k]);
    }
    for (int i = 0; gcs && i < n_gc; i++) group_free(&gcs[i]);
    free(best), free(cap), free(cut), free(slots), free(gcs), free(gk);
    return st;
}

hp_status hp_pipeline_split_from_config(const hp_run_config *cfg, const hp_schedule *s, const char *calibration,
                                        int *first_layer, bool *calibrated) {
    hp_calibration *cal = malloc(sizeof *cal);
    if (!cal) return hp_error(HP_STATUS_OUT_OF_MEMORY, "pipeline: out of memory for the calibration");
    hp_machine_model mm;
    hp_status st = hp_pipeline_machine_model(calibration, cfg->groups.n_ranks, cal, &mm, calibrated, NULL, 0);
    hp_pipeline_plan_opts o;
    if (st == HP_STATUS_OK) st = hp_pipeline_plan_opts_from_config(cfg, s, &mm, &o);
    if (st == HP_STATUS_OK) {
        st = hp_pipeline_split(&o, first_layer, NULL, NULL);
        hp_pipeline_plan_opts_free(&o);
    }
    free(cal);
    return st;
}

/* The split without budgets, one process per stage, m micro-batches of `rows` rows (hp/pipeline.h). */
hp_status hp_pipeline_auto_split(const hp_gpt_config *model, int n_stages, int rows, int seq, int m,
                                 const hp_machine_model *mm, int *first_layer, double *max_seconds) {
    if (n_stages < 1 || n_stages > model->layers + 2)
        return hp_error(HP_STATUS_INVALID_ARGUMENT, "pipeline: %d stages for %d layers", n_stages, model->layers);
    /* a schedule with one stage per rank only to count slots; without budgets they do not matter */
    hp_schedule s;
    HP_CHECK(hp_schedule_build(HP_SCHED_KIND_GPIPE, n_stages, m, 1, &s));
    hp_gpt_config c = *model;
    c.context = seq;
    hp_pipeline_plan_opts o = {.model = &c, .schedule = &s, .rows = rows, .seq = seq, .mm = mm};
    hp_status st = hp_pipeline_split(&o, first_layer, max_seconds, NULL);
    hp_schedule_free(&s);
    return st;
}
