/* The schedule a run config's `pipeline:` and `groups:` sections ask for (hp/pipeline.h). */
#include "hp/pipeline.h"

#include <stdlib.h>

static hp_sched_kind kind_of(hp_pipeline_schedule s) {
    switch (s) {
    case HP_PIPELINE_SCHEDULE_GPIPE: return HP_SCHED_KIND_GPIPE;
    case HP_PIPELINE_SCHEDULE_INTERLEAVED: return HP_SCHED_KIND_INTERLEAVED_1F1B;
    case HP_PIPELINE_SCHEDULE_ZB_H1: return HP_SCHED_KIND_ZB_H1;
    case HP_PIPELINE_SCHEDULE_ZB_V: return HP_SCHED_KIND_ZB_V;
    case HP_PIPELINE_SCHEDULE_DUALPIPEV: return HP_SCHED_KIND_DUALPIPE_V;
    case HP_PIPELINE_SCHEDULE_1F1B:
    default: return HP_SCHED_KIND_1F1B;
    }
}

hp_status hp_pipeline_schedule_from_config(const hp_run_config *cfg, hp_schedule *out) {
    const hp_pipeline_config *pc = &cfg->pipeline;
    int p = cfg->groups.n_stages;
    if (pc->schedule != HP_PIPELINE_SCHEDULE_TABLE)
        return hp_schedule_build(kind_of(pc->schedule), p, (int)pc->micro_batches, (int)pc->chunks, out);
    HP_CHECK(hp_schedule_load(pc->table, out));
    if (out->p != p || out->m != pc->micro_batches || out->n_stages != p * (int)pc->chunks) {
        hp_status st = hp_error(HP_STATUS_CONFIG, "pipeline.schedule %s: the table has p=%d m=%d and %d stages, the "
                                "config %d stages of %lld chunks and %lld micro-batches", pc->table, out->p, out->m,
                                out->n_stages, p, (long long)pc->chunks, (long long)pc->micro_batches);
        hp_schedule_free(out);
        return st;
    }
    return HP_STATUS_OK;
}

hp_status hp_pipeline_first_layers(const hp_run_config *cfg, const hp_schedule *s, int **out) {
    *out = calloc((size_t)s->n_stages + 1, sizeof **out);
    if (!*out) return hp_error(HP_STATUS_OUT_OF_MEMORY, "out of memory for %d stages", s->n_stages);
    const hp_groups_config *g = &cfg->groups;
    for (int i = 0; i < g->n_groups; i++)
        for (int c = 0; c < g->groups[i].n_chunks; c++) {
            const hp_module_chunk *mc = &g->groups[i].chunks[c];
            if (mc->virtual_stage >= 0 && mc->virtual_stage < s->n_stages) (*out)[mc->virtual_stage] = mc->first;
        }
    return HP_STATUS_OK;
}
