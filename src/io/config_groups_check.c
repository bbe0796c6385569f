/*
 * The checks of the HyperMPMD sections that span several groups or sections, run on the typed
 * values before any graph is built (part of hp_run_config_validate): the schedule's constraints,
 * every rank in exactly one group, each group's mesh against its ranks, the stages' modules covering
 * the model once and in order, micro-batches dividing the batch. Also the world-size check and the
 * rank placement (include/hp/config.h).
 */
#include "io/config_internal.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* HP_STATUS_CONFIG "file:line:col: message" (just "file: message" without a line). */
static hp_status __attribute__((format(printf, 4, 5))) err(const char *file, int line, int column, const char *fmt, ...) {
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (!file) file = "<config>";
    if (line <= 0) return hp_error(HP_STATUS_CONFIG, "%s: %s", file, msg);
    if (column <= 0) return hp_error(HP_STATUS_CONFIG, "%s:%d: %s", file, line, msg);
    return hp_error(HP_STATUS_CONFIG, "%s:%d:%d: %s", file, line, column, msg);
}

int hp__config_virtual_stage(hp_pipeline_schedule schedule, int p, int stage, int c) {
    bool vshape = schedule == HP_PIPELINE_SCHEDULE_ZB_V || schedule == HP_PIPELINE_SCHEDULE_DUALPIPEV;
    if (vshape && c < 2) return c == 0 ? stage : 2 * p - 1 - stage;
    return c * p + stage;
}

/* The place of a pipeline key for messages: the key's line, else the section's. */
static void where(const hp_pipeline_config *p, int line, int column, int *l, int *c) {
    *l = line ? line : p->line;
    *c = line ? column : p->column;
}

/* pipeline: its values and the schedule's constraints on the stages. */
static hp_status check_pipeline(const hp_run_config *cfg, const char *f) {
    const hp_pipeline_config *p = &cfg->pipeline;
    int stages = cfg->groups.n_stages, l, c;
    if ((unsigned)p->schedule >= HP_PIPELINE_SCHEDULE_COUNT)
        return err(f, p->schedule_line, p->schedule_column, "pipeline.schedule %d is not a schedule", (int)p->schedule);
    if (p->schedule == HP_PIPELINE_SCHEDULE_TABLE && !p->table[0])
        return err(f, p->schedule_line, p->schedule_column, "pipeline.schedule: a table schedule needs the table's path");
    where(p, p->micro_batches_line, p->micro_batches_column, &l, &c);
    if (p->micro_batches < 1)
        return err(f, l, c, "pipeline.micro_batches %lld must be >= 1", (long long)p->micro_batches);
    if (cfg->train.batch % p->micro_batches != 0)
        return err(f, l, c, "pipeline.micro_batches %lld does not divide train.batch %lld (each micro-batch is "
                   "train.batch / micro_batches rows)", (long long)p->micro_batches, (long long)cfg->train.batch);
    HP_CHECK(hp__config_check_chunks(p, f));
    if (p->schedule == HP_PIPELINE_SCHEDULE_DUALPIPEV && p->micro_batches < 2 * (int64_t)stages) {
        where(p, p->micro_batches_line, p->micro_batches_column, &l, &c);
        return err(f, l, c, "pipeline.micro_batches %lld: schedule dualpipev needs at least 2 x stages = %d "
                   "micro-batches", (long long)p->micro_batches, 2 * stages);
    }
    return HP_STATUS_OK;
}

hp_status hp__config_check_chunks(const hp_pipeline_config *p, const char *f) {
    int l, c;
    const char *name = hp_pipeline_schedule_name(p->schedule);
    where(p, p->chunks_line, p->chunks_column, &l, &c);
    if (!p->chunks_line) where(p, p->schedule_line, p->schedule_column, &l, &c);
    int64_t v = p->chunks;
    if (v < 1 || v > HP_CONFIG_MAX_CHUNKS)
        return err(f, l, c, "pipeline.chunks %lld must be in [1, %d] (model chunks per stage)", (long long)v,
                   HP_CONFIG_MAX_CHUNKS);
    switch (p->schedule) {
    case HP_PIPELINE_SCHEDULE_GPIPE:
    case HP_PIPELINE_SCHEDULE_1F1B:
    case HP_PIPELINE_SCHEDULE_ZB_H1:
        if (v != 1)
            return err(f, l, c, "pipeline.chunks %lld: schedule %s runs one model chunk per stage (interleaved runs 2 or "
                       "more, zb-v and dualpipev 2)", (long long)v, name);
        break;
    case HP_PIPELINE_SCHEDULE_INTERLEAVED:
        if (v < 2)
            return err(f, l, c, "pipeline.chunks %lld: schedule interleaved needs 2 or more model chunks per stage (with "
                       "1 it is 1f1b)", (long long)v);
        break;
    case HP_PIPELINE_SCHEDULE_ZB_V:
    case HP_PIPELINE_SCHEDULE_DUALPIPEV:
        if (v != 2)
            return err(f, l, c, "pipeline.chunks %lld: schedule %s runs exactly 2 model chunks per stage (a V: stage i "
                       "holds virtual stages i and 2p-1-i)", (long long)v, name);
        break;
    default: break;
    }
    return HP_STATUS_OK;
}

/* Each group alone: kind, ranks, mesh, chunks. */
static hp_status check_group(const hp_run_config *cfg, const hp_group_config *g, const char *f) {
    bool rl = g->kind == HP_GROUP_KIND_ACTOR || g->kind == HP_GROUP_KIND_LEARNER;
    bool mm = strcmp(cfg->model.family, "multimodal") == 0 &&
              (g->kind == HP_GROUP_KIND_ENCODER || g->kind == HP_GROUP_KIND_FUSION);
    if (g->kind != HP_GROUP_KIND_STAGE && !rl && !mm)
        return err(f, g->line, g->column, "groups.%s: kind '%s' is not built yet; kind: stage (a pipeline stage), "
                   "actor and learner (hp rl), and encoder and fusion (model.family: multimodal) run today", g->name,
                   hp_group_kind_name(g->kind));
    if (g->n_ranks < 1 || !g->ranks)
        return err(f, g->line, g->column, "groups.%s has no ranks", g->name);
    for (int i = 0; i < g->n_ranks; i++) {
        if (g->ranks[i] < 0 || g->ranks[i] >= HP_CONFIG_MAX_RANKS)
            return err(f, g->ranks_line, g->ranks_column, "groups.%s.ranks: rank %d must be in [0, %d)", g->name,
                       g->ranks[i], HP_CONFIG_MAX_RANKS);
        for (int j = 0; j < i; j++)
            if (g->ranks[j] == g->ranks[i])
                return err(f, g->ranks_line, g->ranks_column, "groups.%s.ranks: rank %d is listed twice", g->name,
                           g->ranks[i]);
    }
    const hp_strategy_config *s = &g->strategy;
    if (!s->present && g->n_ranks > 1)
        return err(f, g->ranks_line, g->ranks_column, "groups.%s has %d ranks but no mesh (give it mesh: {device_matrix: [%d], "
                   "alias_name: [dp]} and a strategy:, or one rank)", g->name, g->n_ranks, g->n_ranks);
    if (s->present) {
        int64_t devices = 1;
        for (int a = 0; a < s->n_axes; a++) devices *= s->device_matrix[a];
        if (devices != g->n_ranks)
            return err(f, s->mesh_line, s->mesh_column, "groups.%s.mesh has %lld devices but the group has %d ranks "
                       "(groups.%s.ranks, line %d): they must be equal", g->name, (long long)devices, g->n_ranks,
                       g->name, g->ranks_line);
    }
    if (!rl && !mm && g->n_chunks != cfg->pipeline.chunks)
        return err(f, g->module_line ? g->module_line : g->line, g->module_line ? g->module_column : g->column,
                   "groups.%s has %d model chunks but pipeline.chunks is %lld", g->name, g->n_chunks,
                   (long long)cfg->pipeline.chunks);
    return HP_STATUS_OK;
}

/* Every rank 0 .. n_ranks-1 in exactly one group. */
static hp_status check_ranks(const hp_groups_config *gs, const char *f) {
    int n = 0;
    for (int i = 0; i < gs->n_groups; i++)
        for (int k = 0; k < gs->groups[i].n_ranks; k++)
            if (gs->groups[i].ranks[k] + 1 > n) n = gs->groups[i].ranks[k] + 1;
    if (n != gs->n_ranks)
        return err(f, gs->line, gs->column, "groups: n_ranks %d is not the highest rank + 1 (%d)", gs->n_ranks, n);
    int *owner = malloc((size_t)n * sizeof *owner);
    if (!owner) return hp_error(HP_STATUS_OUT_OF_MEMORY, "groups: out of memory checking %d ranks", n);
    for (int r = 0; r < n; r++) owner[r] = -1;
    hp_status st = HP_STATUS_OK;
    for (int i = 0; i < gs->n_groups && st == HP_STATUS_OK; i++) {
        const hp_group_config *g = &gs->groups[i];
        for (int k = 0; k < g->n_ranks && st == HP_STATUS_OK; k++) {
            int r = g->ranks[k], o = owner[r];
            if (o >= 0)
                st = err(f, g->ranks_line, g->ranks_column, "groups.%s.ranks: rank %d is also in groups.%s (line %d): "
                         "every rank is in exactly one group", g->name, r, gs->groups[o].name, gs->groups[o].ranks_line);
            owner[r] = i;
        }
    }
    for (int r = 0; r < n && st == HP_STATUS_OK; r++)
        if (owner[r] < 0) {
            int last = r;
            while (last + 1 < n && owner[last + 1] < 0) last++;
            if (last == r)
                st = err(f, gs->line, gs->column, "groups: rank %d is in no group (the groups name ranks up to %d; every "
                         "rank from 0 is in exactly one group)", r, n - 1);
            else
                st = err(f, gs->line, gs->column, "groups: ranks %d-%d are in no group (the groups name ranks up to %d; "
                         "every rank from 0 is in exactly one group)", r, last, n - 1);
        }
    free(owner);
    return st;
}

/* "blocks.A" or "blocks.A-B" for blocks [a, b) (b > a), written into buf. */
static const char *blocks_str(int a, int b, char *buf, size_t n) {
    if (b == a + 1) snprintf(buf, n, "blocks.%d", a);
    else snprintf(buf, n, "blocks.%d-%d", a, b - 1);
    return buf;
}

/* The stage chunk at each virtual stage. */
typedef struct vslot {
    const hp_group_config *g;
    int c;
} vslot;

/* "groups.NAME.module" or "groups.NAME.module[c]" (several chunks), for messages. */
static const char *mod_name(const vslot *s, int v, char *buf, size_t n) {
    if (v > 1) snprintf(buf, n, "groups.%s.module[%d]", s->g->name, s->c);
    else snprintf(buf, n, "groups.%s.module", s->g->name);
    return buf;
}

/* The virtual stage in slots[0..nv) whose chunk runs block b, from `from` in direction `step`; -1 if none. */
static int find_block(const vslot *slots, int nv, int from, int step, int b) {
    for (int s = from; s >= 0 && s < nv; s += step) {
        const hp_module_chunk *ch = &slots[s].g->chunks[slots[s].c];
        if (ch->first <= b && b < ch->last) return s;
    }
    return -1;
}

/* The stages' modules: the embedding, every block in order and the head, each exactly once. */
static hp_status check_modules(const hp_run_config *cfg, const char *f) {
    const hp_groups_config *gs = &cfg->groups;
    int p = gs->n_stages, v = (int)cfg->pipeline.chunks, nv = p * v;
    int64_t L = cfg->model.layers;
    const hp_pipeline_config *pl = &cfg->pipeline;
    bool vshape = pl->schedule == HP_PIPELINE_SCHEDULE_ZB_V || pl->schedule == HP_PIPELINE_SCHEDULE_DUALPIPEV;
    for (int i = 0; i < gs->n_groups; i++) {
        const hp_group_config *g = &gs->groups[i];
        if (g->module_auto && !pl->split_auto)
            return err(f, g->module_line ? g->module_line : g->line, g->module_line ? g->module_column : g->column,
                       g->module_line ? "groups.%s.module is auto but pipeline.split is manual (set pipeline.split: "
                                        "auto, or give the stage's layers, e.g. [embedding, blocks.0-1])"
                                      : "groups.%s: missing key 'module' (the stage's layers, e.g. [embedding, "
                                        "blocks.0-1]; or auto with pipeline.split: auto)", g->name);
        if (!g->module_auto && pl->split_auto)
            return err(f, g->module_line, g->module_column, "groups.%s.module gives layers but pipeline.split is auto "
                       "(the cost model places every stage's layers: write module: auto or leave it out)", g->name);
    }
    vslot *slots = calloc((size_t)nv, sizeof *slots);
    if (!slots) return hp_error(HP_STATUS_OUT_OF_MEMORY, "groups: out of memory checking %d stages", nv);
    for (int i = 0; i < gs->n_groups; i++) {
        const hp_group_config *g = &gs->groups[i];
        for (int c = 0; g->stage >= 0 && c < v; c++) {
            int s = hp__config_virtual_stage(pl->schedule, p, g->stage, c);
            if (s >= 0 && s < nv) slots[s] = (vslot){g, c};
        }
    }
    hp_status st = HP_STATUS_OK;
    char m[256], m2[256];
    int next = 0; /* the first block no earlier virtual stage runs */
    for (int s = 0; s < nv && st == HP_STATUS_OK; s++) {
        if (!slots[s].g) {
            st = err(f, gs->line, gs->column, "groups: no stage chunk is virtual stage %d (stages must be numbered "
                     "0..%d)", s, p - 1);
            break;
        }
        const hp_module_chunk *ch = &slots[s].g->chunks[slots[s].c];
        mod_name(&slots[s], v, m, sizeof m);
        int l = ch->line, c = ch->column;
        if (ch->first < 0 || ch->last < ch->first)
            st = err(f, l, c, "%s: blocks [%d, %d) is not a range", m, ch->first, ch->last);
        else if (!ch->embedding && !ch->head && ch->first == ch->last)
            st = err(f, l, c, "%s runs nothing (give it blocks, the embedding or the head)", m);
        else if (ch->last > L)
            st = err(f, l, c, "%s: blocks.%d is beyond the model (model.layers %lld: blocks.0-%lld)", m, ch->last - 1,
                     (long long)L, (long long)L - 1);
        else if (ch->embedding && s != 0)
            st = err(f, l, c, "%s runs the embedding, which belongs to the first stage (%s)", m,
                     mod_name(&slots[0], v, m2, sizeof m2));
        else if (!ch->embedding && s == 0)
            st = err(f, l, c, "%s is the first stage and must run the embedding (write it first: [embedding, ...])", m);
        else if (ch->head && s != nv - 1)
            st = err(f, l, c, "%s runs the head, which belongs to the last stage (%s)", m,
                     mod_name(&slots[nv - 1], v, m2, sizeof m2));
        else if (!ch->head && s == nv - 1)
            st = err(f, l, c, "%s is the last stage and must run the head (write it last: [..., head])", m);
        else if (ch->first == ch->last)
            continue;
        else if (ch->first < next) {
            int o = find_block(slots, s, 0, 1, ch->first);
            st = err(f, l, c, "%s: blocks.%d is also run by %s: every block runs on exactly one stage", m, ch->first,
                     o >= 0 ? mod_name(&slots[o], v, m2, sizeof m2) : "an earlier stage");
        } else if (ch->first > next) {
            int o = find_block(slots, nv, s + 1, 1, next);
            char b1[64], b2[64];
            if (o >= 0)
                st = err(f, l, c, "%s runs %s before %s runs blocks.%d: the stages must run the blocks in order%s", m,
                         blocks_str(ch->first, ch->last, b1, sizeof b1), mod_name(&slots[o], v, m2, sizeof m2), next,
                         v == 1 ? ""
                         : vshape ? " (chunk 0 of stage i is virtual stage i, chunk 1 is virtual stage 2p-1-i)"
                                  : " (chunk c of stage i is virtual stage c*p + i)");
            else
                st = err(f, l, c, "%s starts at blocks.%d but %s %s run by no stage", m, ch->first,
                         blocks_str(next, ch->first, b2, sizeof b2), ch->first - next > 1 ? "are" : "is");
        } else {
            next = ch->last;
        }
    }
    if (st == HP_STATUS_OK && next < L) {
        const hp_module_chunk *ch = &slots[nv - 1].g->chunks[slots[nv - 1].c];
        char b1[64];
        st = err(f, ch->line, ch->column, "%s is the last stage but %s %s run by no stage (model.layers is %lld)",
                 mod_name(&slots[nv - 1], v, m, sizeof m), blocks_str(next, (int)L, b1, sizeof b1),
                 L - next > 1 ? "are" : "is", (long long)L);
    }
    free(slots);
    return st;
}

/* model.family multimodal (hp/multimodal.h): encoder a, encoder b (in file order) and one fusion group. */
static hp_status check_mm_groups(const hp_groups_config *gs, const char *f) {
    int enc = 0, fus = 0;
    for (int i = 0; i < gs->n_groups; i++) {
        const hp_group_config *g = &gs->groups[i];
        if (g->kind == HP_GROUP_KIND_ENCODER) enc++;
        else if (g->kind == HP_GROUP_KIND_FUSION) fus++;
        else
            return err(f, g->line, g->column, "groups.%s: kind '%s' with model.family multimodal: the groups are two "
                       "kind: encoder (a, then b) and one kind: fusion (the decoder)", g->name, hp_group_kind_name(g->kind));
    }
    if (enc != 2 || fus != 1)
        return err(f, gs->line, gs->column, "groups: model.family multimodal needs two kind: encoder groups and one kind: "
                   "fusion group, got %d and %d", enc, fus);
    return HP_STATUS_OK;
}

hp_status hp__config_check_groups(const hp_run_config *cfg) {
    const hp_groups_config *gs = &cfg->groups;
    const char *f = gs->file ? gs->file : cfg->source[0] ? cfg->source : "<config>";
    if (!gs->present) {
        if (cfg->rl.present) HP_CHECK(hp__config_check_rl(cfg));
        if (cfg->pipeline.present)
            return err(cfg->source[0] ? cfg->source : "<config>", cfg->pipeline.line, cfg->pipeline.column,
                       "pipeline: needs a groups: section (the pipeline's stages are its kind: stage groups)");
        return HP_STATUS_OK;
    }
    if (cfg->strategy.present)
        return err(f, cfg->strategy.mesh_line, cfg->strategy.mesh_column, "strategy: cannot be used with groups: (each "
                   "group has its own mesh: and strategy:; move it into the groups)");
    if (gs->n_groups < 1 || !gs->groups) return err(f, gs->line, gs->column, "groups: no group is given");
    for (int i = 0; i < gs->n_groups; i++) /* RL groups (actor, learner): config_rl.c */
        if (gs->groups[i].kind == HP_GROUP_KIND_ACTOR || gs->groups[i].kind == HP_GROUP_KIND_LEARNER) {
            if (cfg->pipeline.present)
                return err(f, cfg->pipeline.line, cfg->pipeline.column, "pipeline: cannot be used with RL groups (kind "
                           "actor or learner)");
            for (int k = 0; k < gs->n_groups; k++) HP_CHECK(check_group(cfg, &gs->groups[k], f));
            return hp__config_check_rl(cfg);
        }
    for (int i = 0; i < gs->n_groups; i++) HP_CHECK(check_group(cfg, &gs->groups[i], f));
    HP_CHECK(check_pipeline(cfg, f));
    HP_CHECK(check_ranks(gs, f));
    if (strcmp(cfg->model.family, "multimodal") == 0) return check_mm_groups(gs, f);
    int stage = 0;
    for (int i = 0; i < gs->n_groups; i++)
        if (gs->groups[i].stage >= 0 && gs->groups[i].stage != stage++)
            return err(f, gs->groups[i].line, gs->groups[i].column, "groups.%s: stage %d is not the next stage (%d)",
                       gs->groups[i].name, gs->groups[i].stage, stage - 1);
    if (stage != gs->n_stages) return err(f, gs->line, gs->column, "groups: n_stages %d but %d stage groups", gs->n_stages, stage);
    return check_modules(cfg, f);
}

hp_status hp_groups_config_check_world(const hp_groups_config *g, int world_size) {
    if (world_size < 1)
        return hp_error(HP_STATUS_INVALID_ARGUMENT, "hp_groups_config_check_world: world size %d < 1", world_size);
    if (!g || !g->present) return HP_STATUS_OK;
    const char *f = g->file ? g->file : "<config>";
    for (int i = 0; i < g->n_groups; i++)
        for (int k = 0; k < g->groups[i].n_ranks; k++)
            if (g->groups[i].ranks[k] >= world_size)
                return err(f, g->groups[i].ranks_line, g->groups[i].ranks_column, "groups.%s.ranks: rank %d is out of "
                           "range: the job runs on %d rank%s (0..%d), the groups need %d", g->groups[i].name,
                           g->groups[i].ranks[k], world_size, world_size == 1 ? "" : "s", world_size - 1, g->n_ranks);
    if (world_size > g->n_ranks) {
        char missing[64];
        if (world_size - g->n_ranks == 1) snprintf(missing, sizeof missing, "rank %d is", g->n_ranks);
        else snprintf(missing, sizeof missing, "ranks %d-%d are", g->n_ranks, world_size - 1);
        return err(f, g->line, g->column, "groups: the job runs on %d ranks but the groups take %d: %s in no group "
                   "(every rank is in exactly one group)", world_size, g->n_ranks, missing);
    }
    return HP_STATUS_OK;
}

hp_status hp_groups_config_place(const hp_groups_config *g, int rank, hp_group_placement *out) {
    memset(out, 0, sizeof *out);
    out->group = out->stage = -1;
    if (!g || !g->present)
        return hp_error(HP_STATUS_INVALID_ARGUMENT, "hp_groups_config_place: rank %d: the config has no groups", rank);
    for (int i = 0; i < g->n_groups; i++) {
        const hp_group_config *gr = &g->groups[i];
        for (int k = 0; k < gr->n_ranks; k++) {
            if (gr->ranks[k] != rank) continue;
            out->group = i;
            out->stage = gr->stage;
            out->group_rank = k;
            out->n_chunks = gr->n_chunks;
            out->chunks = gr->chunks;
            if (gr->n_chunks > 0) {
                out->first = gr->chunks[0].first;
                out->last = gr->chunks[0].last;
            }
            for (int c = 0; c < gr->n_chunks; c++) {
                out->embedding = out->embedding || gr->chunks[c].embedding;
                out->head = out->head || gr->chunks[c].head;
            }
            return HP_STATUS_OK;
        }
    }
    return hp_error(HP_STATUS_INVALID_ARGUMENT, "hp_groups_config_place: rank %d is in no group (the groups take ranks "
                    "0..%d)", rank, g->n_ranks - 1);
}
