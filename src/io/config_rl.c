/*
 * The `rl:` section of the run config (hp_rl_config, include/hp/config.h) and the checks of the RL
 * groups (kind actor and learner): one of each, no stage groups, sharing all their ranks
 * (co-located) or none (disjoint).
 */
#include "io/config_internal.h"

#include <string.h>

static const char *const k_keys[] = {"task",        "digits",  "prompts",     "group_size", "steps",
                                     "sft_steps",   "sft_batch", "sft_lr",    "temperature", "clip_eps",
                                     "kl_beta",     "off_policy", "eval_prompts", "iterations"};

static void defaults(hp_rl_config *r) {
    memset(r, 0, sizeof *r);
    strcpy(r->task, "reverse");
    r->min_digits = 3, r->max_digits = 5;
    r->prompts = 8, r->group_size = 8, r->steps = 100, r->sft_steps = 150, r->sft_batch = 32;
    r->eval_prompts = 64, r->iterations = 1;
    r->sft_lr = 1e-3, r->temperature = 1.0, r->clip_eps = 0.2, r->kl_beta = 0.04;
}

static hp_status read_int(const hp_yaml_node *map, const char *key, int64_t lo, int64_t hi, int64_t *out) {
    const hp_yaml_node *n = hp_yaml_map_get(map, key);
    if (!n || hp_yaml_is_null(n)) return HP_STATUS_OK;
    char what[48];
    snprintf(what, sizeof what, "rl.%s", key);
    int64_t v;
    HP_CHECK(hp_yaml_as_int(n, what, &v));
    if (v < lo || v > hi) return hp__config_error(n, "%s %lld must be in [%lld, %lld]", what, (long long)v, (long long)lo, (long long)hi);
    *out = v;
    return HP_STATUS_OK;
}

/* lo_open: v > lo (else v >= lo); hi < 0: no upper bound; hi_open: v < hi. */
static hp_status read_num(const hp_yaml_node *map, const char *key, double lo, bool lo_open, double hi, bool hi_open,
                          double *out) {
    const hp_yaml_node *n = hp_yaml_map_get(map, key);
    if (!n || hp_yaml_is_null(n)) return HP_STATUS_OK;
    char what[48];
    snprintf(what, sizeof what, "rl.%s", key);
    double v;
    HP_CHECK(hp_yaml_as_double(n, what, &v));
    bool ok = lo_open ? v > lo : v >= lo;
    if (hi >= 0) ok = ok && (hi_open ? v < hi : v <= hi);
    if (!ok) {
        char range[64];
        if (hi < 0) snprintf(range, sizeof range, "%s %g", lo_open ? ">" : ">=", lo);
        else snprintf(range, sizeof range, "in %c%g, %g%c", lo_open ? '(' : '[', lo, hi, hi_open ? ')' : ']');
        return hp__config_error(n, "%s %g must be %s", what, v, range);
    }
    *out = v;
    return HP_STATUS_OK;
}

hp_status hp__config_read_rl(const hp_yaml_node *node, hp_rl_config *r) {
    defaults(r);
    if (hp_yaml_is_null(node)) return HP_STATUS_OK;
    HP_CHECK(hp_yaml_check_keys(node, k_keys, sizeof k_keys / sizeof k_keys[0], "rl"));
    r->present = true;
    r->line = node->line, r->column = node->column;
    const hp_yaml_node *t = hp_yaml_map_get(node, "task");
    if (t && !hp_yaml_is_null(t)) {
        const char *s;
        HP_CHECK(hp_yaml_as_string(t, "rl.task", &s));
        if (strcmp(s, "reverse") != 0 && strcmp(s, "sort") != 0)
            return hp__config_error(t, "rl.task: unknown task '%s' (known: reverse, sort)", s);
        strcpy(r->task, s);
    }
    const hp_yaml_node *d = hp_yaml_map_get(node, "digits");
    if (d && !hp_yaml_is_null(d)) {
        r->digits_line = d->line, r->digits_column = d->column;
        if (d->kind != HP_YAML_KIND_SEQ || d->count != 2)
            return hp__config_error(d, "rl.digits expects [MIN, MAX] (prompt lengths in digits), got %s", hp__config_node_text(d));
        HP_CHECK(hp_yaml_as_int(d->items[0], "rl.digits[0]", &r->min_digits));
        HP_CHECK(hp_yaml_as_int(d->items[1], "rl.digits[1]", &r->max_digits));
        if (r->min_digits < 1 || r->max_digits > 16 || r->min_digits > r->max_digits)
            return hp__config_error(d, "rl.digits [%lld, %lld] must satisfy 1 <= MIN <= MAX <= 16", (long long)r->min_digits,
                                    (long long)r->max_digits);
    }
    HP_CHECK(read_int(node, "prompts", 1, 1 << 20, &r->prompts));
    HP_CHECK(read_int(node, "group_size", 2, 1 << 16, &r->group_size));
    HP_CHECK(read_int(node, "steps", 1, (int64_t)1 << 40, &r->steps));
    HP_CHECK(read_int(node, "sft_steps", 0, (int64_t)1 << 40, &r->sft_steps));
    HP_CHECK(read_int(node, "sft_batch", 1, 1 << 20, &r->sft_batch));
    HP_CHECK(read_int(node, "off_policy", 0, 1, &r->off_policy));
    HP_CHECK(read_int(node, "eval_prompts", 0, 1 << 20, &r->eval_prompts));
    HP_CHECK(read_int(node, "iterations", 1, 64, &r->iterations));
    HP_CHECK(read_num(node, "sft_lr", 0, true, -1, false, &r->sft_lr));
    HP_CHECK(read_num(node, "temperature", 0, true, -1, false, &r->temperature));
    HP_CHECK(read_num(node, "clip_eps", 0, true, 1, true, &r->clip_eps));
    HP_CHECK(read_num(node, "kl_beta", 0, false, -1, false, &r->kl_beta));
    if (r->prompts * r->group_size > (1 << 20))
        return hp__config_error(node, "rl.prompts %lld x rl.group_size %lld: more than %d sequences per step",
                                (long long)r->prompts, (long long)r->group_size, 1 << 20);
    return HP_STATUS_OK;
}

cJSON *hp__config_rl_json(const hp_rl_config *r) {
    cJSON *o = cJSON_CreateObject();
    if (!o) return NULL;
    cJSON *d = cJSON_CreateArray();
    bool ok = cJSON_AddStringToObject(o, "task", r->task) && d && cJSON_AddItemToObject(o, "digits", d);
    if (!ok) cJSON_Delete(d);
    ok = ok && cJSON_AddItemToArray(d, cJSON_CreateNumber((double)r->min_digits)) &&
         cJSON_AddItemToArray(d, cJSON_CreateNumber((double)r->max_digits));
    const int64_t ints[] = {r->prompts, r->group_size, r->steps, r->sft_steps, r->sft_batch};
    for (int i = 0; ok && i < 5; i++) ok = cJSON_AddNumberToObject(o, k_keys[2 + i], (double)ints[i]) != NULL;
    const double nums[] = {r->sft_lr, r->temperature, r->clip_eps, r->kl_beta};
    for (int i = 0; ok && i < 4; i++) {
        cJSON *v = hp__config_json_number(nums[i]);
        ok = v && cJSON_AddItemToObject(o, k_keys[7 + i], v);
        if (!ok) cJSON_Delete(v);
    }
    ok = ok && cJSON_AddNumberToObject(o, "off_policy", (double)r->off_policy) &&
         cJSON_AddNumberToObject(o, "eval_prompts", (double)r->eval_prompts) &&
         cJSON_AddNumberToObject(o, "iterations", (double)r->iterations);
    if (!ok) {
        cJSON_Delete(o);
        return NULL;
    }
    return o;
}

/* HP_STATUS_CONFIG "file:line:col: message". */
#define ERR(f_, l_, c_, ...) hp__config_error(&(hp_yaml_node){.file = (f_), .line = (l_), .column = (c_)}, __VA_ARGS__)

hp_status hp__config_check_rl(const hp_run_config *cfg) {
    const hp_rl_config *r = &cfg->rl;
    const char *f = cfg->source[0] ? cfg->source : "<config>";
    if (r->present && cfg->model.context < 2 * r->max_digits + 2)
        return ERR(f, r->digits_line ? r->digits_line : r->line, r->digits_line ? r->digits_column : r->column,
                   "rl.digits: prompts of up to %lld digits need model.context >= %lld (prompt, '>', answer, '\\n'), "
                   "it is %lld", (long long)r->max_digits, (long long)(2 * r->max_digits + 2), (long long)cfg->model.context);
    const hp_groups_config *gs = &cfg->groups;
    int actor = -1, learner = -1, other = -1;
    for (int i = 0; gs->present && i < gs->n_groups; i++) {
        hp_group_kind k = gs->groups[i].kind;
        int *slot = k == HP_GROUP_KIND_ACTOR ? &actor : k == HP_GROUP_KIND_LEARNER ? &learner : &other;
        if (*slot >= 0 && slot != &other)
            return ERR(f, gs->groups[i].line, gs->groups[i].column, "groups.%s: a second group of kind %s (groups.%s, "
                       "line %d); an RL job has one actor and one learner group", gs->groups[i].name,
                       hp_group_kind_name(k), gs->groups[*slot].name, gs->groups[*slot].line);
        if (*slot < 0) *slot = i;
    }
    if (actor < 0 && learner < 0) return HP_STATUS_OK;
    const hp_group_config *rg = &gs->groups[actor >= 0 ? actor : learner];
    if (actor < 0 || learner < 0)
        return ERR(f, rg->line, rg->column, "groups.%s: an RL job needs a group of kind %s too", rg->name,
                   actor < 0 ? "actor" : "learner");
    if (other >= 0)
        return ERR(f, gs->groups[other].line, gs->groups[other].column, "groups.%s: kind %s cannot be in an RL job "
                   "(only one actor and one learner group)", gs->groups[other].name, hp_group_kind_name(gs->groups[other].kind));
    if (!r->present) return ERR(f, rg->line, rg->column, "groups.%s: RL groups need an rl: section", rg->name);
    const hp_group_config *a = &gs->groups[actor], *l = &gs->groups[learner];
    int shared = 0;
    for (int i = 0; i < a->n_ranks; i++)
        for (int j = 0; j < l->n_ranks; j++) shared += a->ranks[i] == l->ranks[j];
    if (a->strategy.present) {
        const hp_strategy_config *s = &a->strategy;
        if (s->n_axes > (s->n_params > 0 ? 2 : 1) || s->n_inputs > 0)
            return ERR(f, s->mesh_line, s->mesh_column, "groups.%s.mesh: the actor's mesh has one axis of whole "
                       "replicas (e.g. {device_matrix: [%d], alias_name: [dp]}), or with params rules tensor "
                       "parallelism over its last axis and replicas over an optional first one (e.g. alias_name: "
                       "[tp] or [dp, tp]); no inputs rules", a->name, a->n_ranks);
        for (int i = 0; s->n_axes == 2 && i < s->n_params; i++) /* the first axis holds replicas */
            for (int d = 0; d < s->params[i].tensor_map.n; d++)
                for (int k = 0; k < s->params[i].tensor_map.nmap[d]; k++)
                    if (s->params[i].tensor_map.map[d][k] == 0)
                        return ERR(f, s->params[i].line, 1, "groups.%s.strategy.params: '%s' splits over %s, the "
                                   "axis of the actor's replicas; tensor parallelism uses the last axis (%s)", a->name,
                                   s->params[i].match, s->alias_name[0], s->alias_name[1]);
        if (s->n_params > 0) { /* tensor parallelism: the heads split over the last axis */
            const hp_model_config *mc = &cfg->model;
            int64_t tp = s->device_matrix[s->n_axes - 1];
            int64_t kv = !strcmp(mc->family, "llama") && mc->kv_heads ? mc->kv_heads : mc->heads;
            if (mc->heads % tp != 0 || kv % tp != 0)
                return ERR(f, s->mesh_line, s->mesh_column, "groups.%s.mesh: tensor parallelism of degree %lld does "
                           "not divide model.%s %lld: the actor splits the heads over its ranks", a->name,
                           (long long)tp, mc->heads % tp ? "heads" : "kv_heads",
                           (long long)(mc->heads % tp ? mc->heads : kv));
            const hp_strategy_config *ls = &l->strategy;
            bool same_mesh = ls->present && ls->n_axes == s->n_axes;
            for (int k = 0; same_mesh && k < s->n_axes; k++) same_mesh = ls->device_matrix[k] == s->device_matrix[k];
            if (shared > 0 && !same_mesh)
                return ERR(f, s->mesh_line, s->mesh_column, "groups.%s: a tensor-parallel actor on the learner's ranks "
                           "(co-located) needs the learner's mesh shape (groups.%s.mesh: %d axes, the actor's %d, "
                           "sizes equal axis by axis; e.g. both [2, 2], the learner splitting over [[dp, tp]]): the "
                           "actor's views of the learner's weights are laid out over the learner's mesh",
                           a->name, l->name, ls->present ? ls->n_axes : 0, s->n_axes);
        }
    }
    bool same = shared == a->n_ranks && shared == l->n_ranks;
    for (int i = 0; same && i < a->n_ranks; i++) same = a->ranks[i] == l->ranks[i];
    if (shared > 0 && !same)
        return ERR(f, a->ranks_line, a->ranks_column, "groups.%s.ranks and groups.%s.ranks (line %d) share %d rank%s: "
                   "the actor and the learner take the same ranks in the same order (co-located) or none (disjoint)",
                   a->name, l->name, l->ranks_line, shared, shared == 1 ? "" : "s");
    /* every rank 0 .. n_ranks-1 in some group */
    for (int rank = 0; rank < gs->n_ranks; rank++) {
        bool in = false;
        for (int i = 0; i < a->n_ranks; i++) in |= a->ranks[i] == rank;
        for (int i = 0; i < l->n_ranks; i++) in |= l->ranks[i] == rank;
        if (!in) return ERR(f, gs->line, gs->column, "groups: rank %d is in no group", rank);
    }
    if (r->prompts * r->group_size < a->n_ranks)
        return ERR(f, a->ranks_line, a->ranks_column, "groups.%s has %d ranks but a step samples only rl.prompts x "
                   "rl.group_size = %lld sequences", a->name, a->n_ranks, (long long)(r->prompts * r->group_size));
    return HP_STATUS_OK;
}
