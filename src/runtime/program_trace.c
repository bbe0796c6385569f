/*
 * The program's hooks for the timeline recorder (hp/trace.h, hp_program_set_trace): each exec
 * entry's span fields are prepared once at attach (names interned, phase from the node's flags,
 * the program's tags), so a run only reads the clock and fills a slot per node.
 */
#include "runtime/program_internal.h"

#include <stdio.h>
#include <stdlib.h>

/* The kind of span a node makes where the compute thread runs it. */
static hp_trace_kind node_kind(const hp_node *n) {
    const hp_instr *x = hp_node_instr(n);
    if (n->op == HP_OP_OFFLOAD_WAIT) return HP_TRACE_KIND_WAIT;
    if (!x) return HP_TRACE_KIND_COMPUTE;
    switch (x->queue) {
    case HP_QUEUE_COLLECTIVE: return HP_TRACE_KIND_COMM;
    case HP_QUEUE_P2P: return HP_TRACE_KIND_P2P;
    case HP_QUEUE_COPY: return HP_TRACE_KIND_COPY;
    default: return HP_TRACE_KIND_COMPUTE;
    }
}

static hp_trace_phase node_phase(const hp_node *n) {
    if (n->flags & HP_NODE_FLAG_OPTIMIZER) return HP_TRACE_PHASE_OPT;
    if (n->flags & HP_NODE_FLAG_BACKWARD) return HP_TRACE_PHASE_B;
    return HP_TRACE_PHASE_F;
}

/* Interns every entry's name and detail into p->trace_span (tags applied later). */
static hp_status build_spans(hp_program *p, hp_trace *tr) {
    if (!p->trace_span) p->trace_span = calloc((size_t)p->n_exec + 1, sizeof *p->trace_span);
    if (!p->trace_issue) p->trace_issue = calloc((size_t)p->n_exec + 1, sizeof *p->trace_issue);
    if (!p->trace_span || !p->trace_issue) return hp_error(HP_STATUS_OUT_OF_MEMORY, "program: out of memory for %d trace spans", p->n_exec);
    for (int e = 0; e < p->n_exec; e++) {
        const hp_node *n = p->exec[e].node;
        const hp_instr *x = hp_node_instr(n);
        hp_trace_span *s = &p->trace_span[e];
        *s = HP_TRACE_SPAN_INIT;
        s->op = (int32_t)n->op;
        s->node = p->exec_node[e];
        s->kind = (uint8_t)node_kind(n);
        s->name = hp_trace_intern(tr, x && x->label ? x->label : hp_op_name(n->op));
        /* the detail: the scope, and the parameter the node reads or else the first named tensor
         * it reads or writes (for a transfer the tensor it moves: its input), then a collective's
         * group */
        char detail[256];
        const char *scope = n->scope ? n->scope : "", *tname = "";
        for (int pass = 0; pass < 2 && !*tname; pass++)
            for (int k = 0; k < n->n_in + n->n_out && !*tname; k++) {
                hp_tid id = k < n->n_in ? n->in[k] : n->out[k - n->n_in];
                const hp_tensor *t = id != HP_TID_NONE ? hp_graph_tensor(p->g, id) : NULL;
                if (t && t->name && (pass == 1 || t->kind == HP_TENSOR_KIND_PARAM)) tname = t->name;
                if (x && k == 0) break;
            }
        const char *group = x && x->queue == HP_QUEUE_COLLECTIVE && x->group_name ? x->group_name : "";
        snprintf(detail, sizeof detail, "%s%s%s%s%s%s%s", scope, *scope && *tname ? ": " : "", tname,
                 *group && (*scope || *tname) ? " " : "", *group ? "[" : "", group, *group ? "]" : "");
        if (detail[0]) s->detail = hp_trace_intern(tr, detail);
        if (x && x->bytes > 0) s->bytes = x->bytes;
        p->trace_issue[e] = -1;
        if (p->exec_kind[e] == EXEC_ASYNC) {
            char issue[96];
            snprintf(issue, sizeof issue, "issue %s", x && x->label ? x->label : hp_op_name(n->op));
            if ((p->trace_issue[e] = hp_trace_intern(tr, issue)) < 0) s->name = -1;
        }
        if (s->name < 0 || (detail[0] && s->detail < 0))
            return hp_error(HP_STATUS_OUT_OF_MEMORY, "program: out of memory interning trace names");
    }
    return HP_STATUS_OK;
}

hp_status hp__program_trace_attach(hp_program *p, hp_trace *tr, const hp_trace_tags *tags) {
    const hp_program_ext *ext = p->opts.ext;
    if (!tr) {
        if (!p->trace) return HP_STATUS_OK;
        hp_first_error fe = {HP_STATUS_OK, ""};
        hp_first_error_add(&fe, hp__queues_set_trace(p->q, NULL, NULL));
        if (ext && ext->set_trace) hp_first_error_add(&fe, ext->set_trace(ext->user, NULL));
        p->trace = NULL;
        return hp_first_error_status(&fe);
    }
    hp_trace_tags tg = tags ? *tags : HP_TRACE_TAGS_NONE;
    if (tr != p->trace) HP_CHECK(build_spans(p, tr));
    for (int e = 0; e < p->n_exec; e++) {
        hp_trace_span *s = &p->trace_span[e];
        s->stage = (int16_t)tg.stage;
        s->microbatch = (int16_t)tg.microbatch;
        s->phase = (uint8_t)(tg.phase != HP_TRACE_PHASE_NONE ? tg.phase : node_phase(p->exec[e].node));
    }
    p->trace_wait = HP_TRACE_SPAN_INIT;
    p->trace_wait.kind = HP_TRACE_KIND_WAIT;
    p->trace_wait.stage = (int16_t)tg.stage;
    p->trace_wait.microbatch = (int16_t)tg.microbatch;
    p->trace_wait.phase = (uint8_t)tg.phase;
    if ((p->trace_record_name = hp_trace_intern(tr, "trace record")) < 0)
        return hp_error(HP_STATUS_OUT_OF_MEMORY, "program: out of memory interning trace names");
    HP_CHECK(hp_trace_track(tr, "compute", 0, &p->trace_track));
    HP_CHECK(hp__queues_set_trace(p->q, tr, p->trace_span));
    if (ext && ext->set_trace) HP_CHECK(ext->set_trace(ext->user, tr));
    p->trace = tr;
    p->trace_tags = tg;
    return HP_STATUS_OK;
}

hp_status hp_program_set_trace(hp_program *p, hp_trace *tr, const hp_trace_tags *tags) {
    if (p->dry) return HP_STATUS_OK;
    if (p->trace && tr && tr != p->trace) HP_CHECK(hp__program_trace_attach(p, NULL, NULL));
    return hp__program_trace_attach(p, tr, tags);
}

void hp__program_trace_batch(hp_program *p, double t0, int e0, int e1) {
    /* The backend times each node; what it spends between them (dispatch, the timers) is the
     * batch's wall time less their sum. Spread evenly after each node, so the spans fill the batch
     * as it ran: laid end to end they would end early, and a bubble measured from the trace would
     * count the batch's own overhead as idle time after it (about 0.05 ms an action of 700 nodes).
     * The recording itself is one more span, "trace record", tagged as the batch's last node: the
     * rank is busy then, not waiting (another 0.04 ms an action). */
    double t_end = hp_now_seconds(), wall = t_end - t0, sum = 0;
    for (int e = e0; e < e1; e++) sum += p->exec_seconds[e];
    double gap = e1 > e0 && wall > sum ? (wall - sum) / (e1 - e0) : 0;
    double t = t0;
    for (int e = e0; e < e1; e++) {
        double t1 = t + p->exec_seconds[e];
        if (p->exec_kind[e] != EXEC_VIEW) hp_trace_record(p->trace, p->trace_track, t, t1, &p->trace_span[e]);
        t = t1 + gap;
    }
    if (e1 > e0) {
        hp_trace_span s = p->trace_span[e1 - 1];
        s.name = p->trace_record_name, s.detail = -1, s.op = -1, s.node = -1, s.bytes = -1, s.kind = HP_TRACE_KIND_COMPUTE;
        hp_trace_record(p->trace, p->trace_track, t_end, hp_now_seconds(), &s);
    }
}

void hp__program_trace_node(hp_program *p, int e, double t0) {
    hp_trace_end(p->trace, p->trace_track, t0, &p->trace_span[e]);
}

void hp__program_trace_issue(hp_program *p, int e, double t0) {
    hp_trace_span s = p->trace_span[e];
    s.name = p->trace_issue[e];
    s.bytes = -1; /* the queue's span carries them */
    hp_trace_end(p->trace, p->trace_track, t0, &s);
}

void hp__program_trace_wait(hp_program *p, double t0) {
    double t1 = hp_now_seconds();
    if (t1 - t0 >= 1e-6) hp_trace_record(p->trace, p->trace_track, t0, t1, &p->trace_wait);
}
