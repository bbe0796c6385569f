/* Internal: the offload planner's data shared by planner.c, planner_apply.c and the CPU kernels. */
#ifndef HP_OFFLOAD_PLANNER_INTERNAL_H
#define HP_OFFLOAD_PLANNER_INTERNAL_H

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
    int32_t spre, swait;
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
    hp_op *node_op;    /* per original node, for the printout */
    const char **node_scope;
    hp_offload_plan_stats stats;
};

/* One entry of the rewritten program order. */
typedef enum {
    HP__OFL_PREFETCH, HP__OFL_PWAIT, HP__OFL_NODE, HP__OFL_OFFLOAD, HP__OFL_OWAIT,
    HP__OFL_EPREFETCH, /* early read of an AdamW operand (before node spre) */
    HP__OFL_EPWAIT,    /* its wait (before the AdamW node) */
    HP__OFL_WBWAIT     /* the wait for its write-back (after node swait) */
} hp__ofl_item_kind;
typedef struct hp__ofl_item {
    hp__ofl_item_kind kind;
    int32_t node; /* HP__OFL_NODE: the original node */
    int32_t cand, gap;
} hp__ofl_item;

/* The rewritten program order (malloc'd into *items). Errors: HP_STATUS_OUT_OF_MEMORY. */
hp_status hp__ofl_emit_order(const hp_offload_plan *p, hp__ofl_item **items, int *n_items);

/* A transfer node's record (node->extra of PREFETCH, OFFLOAD and their OFFLOAD_WAIT). */
typedef struct hp__ofl_xfer {
    hp_offload_state *st;
    hp_tid slow;   /* the tensor whose home is on the slow tier */
    size_t bytes;
    hp_event *ev;
} hp__ofl_xfer;

/* Early reads: the AdamW node's fast copy `copy` of a written slow-tier tensor is written back to
 * the home of xfer->slow by the AdamW kernel right after the update (xfer->ev recorded), and waited
 * for by an OFFLOAD_WAIT whose extra is the same record. */

struct hp_offload_state {
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
    hp_program_ext ext;
    /* Slow-tier copies of activations share one region per tier, planned from their lifetimes in
     * the rewritten program (the same greedy-by-size packing as the fast arena). */
    bool *in_region;              /* per tensor: its home is inside the tier's region */
    void *host_region;            /* HOST region (hp_mem_alloc) */
    size_t region_bytes[HP_TIER_COUNT]; /* planned region sizes */
    size_t region_naive[HP_TIER_COUNT]; /* what one home per copy would take */
    uint64_t disk_region;         /* DISK region's offset in the store */
};

/* Where tensor t's home is; `fast` is its address when the home is the fast tier. */
hp_loc hp__ofl_loc(const hp_offload_state *s, hp_tid t, void *fast);

#endif
