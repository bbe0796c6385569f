/* Internal: the offload planner's data shared by planner.c, plan_order.c, rewrite.c, state.c, deferred.c and exec.c. */
#ifndef HP_OFFLOAD_PLANNER_INTERNAL_H
#define HP_OFFLOAD_PLANNER_INTERNAL_H

#include "hp/instr.h"
#include "hp/offload_plan.h"
#include "hp/tier.h"

/* One tensor the policy allows to leave the fast tier. Gap j (0 <= j < n_fu) ends at fast use fu[j]
 * and starts at fu[j - 1], or at the def (activations) / program start (persistent) for j = 0. */
typedef struct hp__ofl_cand {
    hp_tid t;
    hp_offload_class cls;
    size_t bytes;
    bool persistent;  /* a leaf: params, optimizer states */
    int32_t def;      /* the defining node (activations), -1 for leaves */
    int n_fu, n_su;
    int32_t *fu;      /* fast uses: nodes that need the bytes in the fast tier */
    int32_t *su;      /* streamed uses: AdamW nodes that read (and write) the home directly */
    bool slow;        /* the home is a slower tier */
    hp_tier tier;     /* that tier */
    bool *off;        /* per gap: not resident in the fast tier (prefetched at pre[j]) */
    int32_t *pre;     /* per off gap: the prefetch is issued before this node */
    int32_t wait;     /* activations with a slow home: the offload is waited for after this node */
    double x_in, x_out; /* transfer seconds in / out under the tier bandwidths */
    /* Early read for the AdamW use (su[0]) of a slow candidate: spre >= 0 reads the whole tensor into
     * the fast tier before node spre (while the backward pass still computes), and the update runs
     * on that copy instead of streaming from the home; written tensors (param, m, v) are written
     * back by the update and the write-back is waited for after node swait. spre = -1: streamed. */
    int32_t spre, swait; /* swait = n_nodes - 1 for the operands of a deferred update (below) */
    bool written;     /* the AdamW use updates it in place (param, m, v; not the gradient) */
} hp__ofl_cand;

struct hp_offload_plan {
    hp_offload_plan_config cfg;
    hp_tier_list tiers;
    int n_nodes, n_tensors;
    hp_liveness lv;
    hp_timeline tl;
    int n_cand;
    hp__ofl_cand *cand;
    int32_t *cand_of;  /* per tensor: candidate index or -1 */
    int32_t *pool;     /* backing store of fu, su, pre */
    bool *bool_pool;   /* backing store of off */
    size_t ws_max;     /* the largest kernel workspace */
    size_t fixed_persistent; /* persistent bytes of non-candidates */
    int64_t *resident; /* per node: resident bytes with the plan */
    /* Deferred updates (cfg.async_update): per original node, -1, or for an AdamW node over disk-tier
     * operands that runs on the disk stream, the node of the next step before which that
     * update is waited for. hold_node[t]: the deferred AdamW node whose fast operand t (a gradient
     * left in the arena) is kept until the end of the step, or -1. */
    int32_t *defer_wait;
    int32_t *hold_node;
    int n_deferred;
    hp_op *node_op;    /* per original node, for the printout */
    const char **node_scope;
    hp_offload_plan_stats stats;
};

/* One entry of the rewritten program order. */
typedef enum {
    HP__OFL_PREFETCH, HP__OFL_PWAIT, HP__OFL_NODE, HP__OFL_OFFLOAD, HP__OFL_OWAIT,
    HP__OFL_EPREFETCH, /* early read of an AdamW operand (before node spre) */
    HP__OFL_EPWAIT,    /* its wait (before the AdamW node) */
    HP__OFL_WBWAIT,    /* the wait for its write-back (after node swait) */
    HP__OFL_DWAIT,     /* the wait for deferred update `gap` (first, before node defer_wait[gap]) */
    HP__OFL_HOLD       /* keeps deferred update `gap`'s fast operands to the end (after the last node) */
} hp__ofl_item_kind;
typedef struct hp__ofl_item {
    hp__ofl_item_kind kind;
    int32_t node; /* HP__OFL_NODE: the original node */
    int32_t cand, gap;
} hp__ofl_item;

/* The rewritten program order (malloc'd into *items). Errors: HP_STATUS_OUT_OF_MEMORY. */
hp_status hp__ofl_emit_order(const hp_offload_plan *p, hp__ofl_item **items, int *n_items);

/* The fast-tier arena of the rewritten program as hp__ofl_pack lays it out: the blocks with their
 * offsets and item intervals, and what each block holds (a tensor's own block: tensor id; a
 * prefetched gap copy: -1; an early-read copy: -2 - candidate index). */
typedef struct hp__ofl_layout {
    hp__ofl_item *items;
    int n_items;
    hp_mem_interval *blocks;
    int32_t *what;
    int n_blocks;
} hp__ofl_layout;
void hp__ofl_layout_free(hp__ofl_layout *l);
/* Packs the arena (exactly as the program will): *device_bytes = persistent + arena + workspace;
 * with `layout` non-NULL, also the blocks (freed with hp__ofl_layout_free). */
hp_status hp__ofl_pack_layout(const hp_offload_plan *p, const hp_graph *g, size_t *device_bytes,
                              hp__ofl_layout *layout);
hp_status hp__ofl_pack(const hp_offload_plan *p, const hp_graph *g, size_t *device_bytes);

/* A transfer node's record (node->extra of PREFETCH, OFFLOAD and their OFFLOAD_WAIT). */
typedef struct hp__ofl_xfer {
    hp_instr instr;     /* the runtime instruction (hp__ofl_execute); first, so node->extra is both */
    hp_offload_state *st;
    hp_tid slow;   /* the tensor whose home is on the slow tier */
    size_t bytes;
    hp_event *ev;
    hp_copy_engine *ce; /* the stream of that tier (st->ce or st->ce_disk) */
} hp__ofl_xfer;

/* Early reads: the AdamW node's fast copy `copy` of a written slow-tier tensor is written back to
 * the home of xfer->slow by the AdamW kernel right after the update (xfer->ev recorded), and waited
 * for by an OFFLOAD_WAIT whose extra is the same record. */

struct hp_offload_state {
    hp_instr instr; /* ADAMW_STREAM nodes' instruction (not deferred); first, so node->extra is both */
    hp_offload_plan *plan;
    hp_copy_engine *ce;
    hp_disk *disk;
    int n_tensors;
    uint8_t *tier;      /* per tensor: home tier (DEVICE: the program's) */
    void **data;        /* per tensor: HOST address */
    uint64_t *disk_off; /* per tensor: DISK offset */
    size_t *bytes;
    hp__ofl_xfer *xfers;
    int n_xfers;
    size_t chunk_bytes;
    hp__ofl_xfer **write_back; /* per tensor: the write-back record of an early-read AdamW copy, or NULL */
    /* The disk stream (with a disk tier): every transfer to or from disk, and the deferred updates,
     * so host-tier copies on `ce` never queue behind a disk request or an update (a GPU has several
     * copy engines the same way); touched[t]: tensor t may be written by a deferred update still in
     * flight (hp_program_ext.sync). */
    hp_copy_engine *ce_disk;
    struct hp__ofl_async *async;
    int n_async;
    int32_t *async_order; /* records by next-step deadline: the disk stream runs them in this order */
    void *async_stage_raw[4]; /* staging for the updates' disk operands (hp_mem_alloc, async_stage_bytes) */
    size_t async_stage_bytes;
    bool *touched;
    hp__ofl_xfer hold; /* the HOLD nodes' record: no event, waits for nothing */
    hp_program_ext ext;
    /* Slow-tier copies of activations share one region per tier, planned from their lifetimes in
     * the rewritten program (the same greedy-by-size packing as the fast arena). */
    bool *in_region;              /* per tensor: its home is inside the tier's region */
    void *host_region;            /* HOST region (hp_mem_alloc) */
    size_t region_bytes[HP_TIER_COUNT]; /* planned region sizes */
    size_t region_naive[HP_TIER_COUNT]; /* what one home per copy would take */
    uint64_t disk_region;         /* DISK region's offset in the store */
};

/*
 * A deferred update (node->extra of its ADAMW_STREAM node, which has attr.i[0] = 1, and of the
 * OFFLOAD_WAIT placed before node defer_wait in the next step): the kernel snapshots the scalars,
 * queues on ce_disk per chunk the reads of disk operands into `stage`, the update, the writes
 * back, then the write-backs of early-read copies, and records x.ev.
 */
typedef struct hp__ofl_async hp__ofl_async;
typedef struct hp__ofl_chunk {
    hp__ofl_async *rec;
    size_t first, count; /* elements */
} hp__ofl_chunk;
struct hp__ofl_async {
    hp__ofl_xfer x;      /* x.ev: recorded after the update's last write; x.slow: the parameter */
    int32_t node;        /* the AdamW node (index in the graph before the rewrite) */
    hp_tid in[4];        /* its param, grad, m, v operands as rewired */
    float coef[8];       /* hp__adamw_coef of the step being applied (the CPU kernel's layout) */
    hp_loc loc[4];       /* param, grad, m, v: where the update reads and writes them */
    void *stage[4];      /* HOST staging of one chunk of each disk operand (NULL: in memory); the
                            state's async_stage_raw, shared: the disk stream runs one chunk at a time */
    bool job;            /* some operand streams from disk: the update itself runs on the disk
                            stream; else the kernel updates in memory and only write-backs are queued */
    bool pending;        /* the kernel filled the record; hp__ofl_async_flush has not queued it */
    int32_t deadline;    /* the node of the next step that waits for it (original numbering) */
    int32_t later_min;   /* the earliest deadline of the deferred updates after this one in the step */
    void (*update)(const void *coef, void *const *bufs, size_t count); /* the backend's update of
                                      one chunk (hp_exec_ctx.update), on the disk stream (job only) */
    void (*chunk_fn)(void *chunk); /* runs `update` on one hp__ofl_chunk (exec.c) */
    hp_loc wb_dst[4], wb_src[4];   /* write-backs of early-read copies (wb_bytes 0: none) */
    size_t wb_bytes[4];
    size_t numel, n_chunks;
    hp__ofl_chunk *chunk;
};

/* Queues the pending deferred updates whose deadline is at most `limit` on the disk stream,
 * earliest next-step deadline first (the updates touch disjoint tensors, so any order is correct;
 * this one makes the first waits short), and records each one's event. Each deferred AdamW node
 * flushes up to the earliest deadline of the updates still to come in the step (so the stream starts
 * early and stays in deadline order); the run's end flushes everything a failed step left pending.
 * Errors: hp_copy_async's. */
hp_status hp__ofl_async_flush(hp_offload_state *s, int32_t limit);

/* A transfer record with its runtime instruction. */
hp__ofl_xfer hp__ofl_xfer_make(hp_offload_state *st, hp_tid slow, size_t bytes, hp_event *ev, hp_copy_engine *ce);

/* The instruction of every offload node (exec.c): PREFETCH and OFFLOAD queue a copy on the record's
 * stream and record its event, OFFLOAD_WAIT waits for it, ADAMW_STREAM streams the update through
 * the backend's chunk update (ctx) or defers it to the disk stream. */
hp_status hp__ofl_execute(hp_instr *self, const hp_node_args *a, const hp_exec_ctx *ctx);

/* Sets the instructions of the state, its records and the hold, and flags every node that carries
 * one (HP_NODE_FLAG_INSTR); after the rewrite and the deferred updates' staging. */
void hp__ofl_mark_instrs(hp_offload_state *s, hp_graph *g);
/* hp_program_ext.set_trace of the state (user): the copy streams record on "copy (host)" and, with
 * a disk tier, "copy (disk)". */
hp_status hp__ofl_set_trace(void *user, hp_trace *tr);

/* Where tensor t's home is; `fast` is its address when the home is the fast tier. */
hp_loc hp__ofl_loc(const hp_offload_state *s, hp_tid t, void *fast);

/* Whether candidate c's gap j starts with the tensor leaving the fast tier (plan_order.c). */
static inline bool hp__ofl_gap_starts(const hp__ofl_cand *c, int j) { return c->off[j] || (c->persistent && j == 0); }

/* Per candidate the index of its first gap in a flat array of all gaps (n_cand + 1 entries, the
 * last one the total, also in *total); malloc'ed, NULL when out of memory (plan_order.c). */
size_t *hp__ofl_gap_base(const hp_offload_plan *p, size_t *total);

/* state.c: a slow-tier home of `bytes` for tensor t (host pool or disk extent); the fast-tier
 * regions of the copies that live in one (an arena over their intervals); the program hooks
 * (s->ext) over a fast tier of `device_budget` bytes. Errors: out of memory, the disk store's. */
hp_status hp__ofl_alloc_home(hp_offload_state *s, hp_tid t, hp_tier tier, size_t bytes);
hp_status hp__ofl_plan_regions(hp_offload_state *s, const hp_graph *g);
void hp__ofl_set_ext(hp_offload_state *s, size_t device_budget);

#endif
