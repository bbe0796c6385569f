/*
 * hp/strategy.h — the `strategy:` section of a run config: a device mesh and the layout of every
 * leaf tensor (parameters, inputs, optimizer states), ready for the partitioner (hp/shard.h).
 *
 * This is the user-facing form of the HyperParallel paper's Layout(device_matrix, alias_name,
 * tensor_map) (HyperShard, section 3.4): the user names the mesh axes once, then gives a tensor_map
 * for the few tensors that matter; everything else is derived by propagation (GSPMD, Xu et al.
 * 2021). Data, tensor, sequence, ZeRO and FSDP parallelism are all just such declarations.
 *
 *     hp_run_config cfg;
 *     HP_CHECK(hp_run_config_load("examples/dp2xtp2.yaml", &cfg));
 *     hp_strategy *s;
 *     HP_CHECK(hp_strategy_new(&cfg.strategy, world_size, &s));  // s does not borrow from cfg
 *     hp_layout *lay = malloc(hp_graph_n_tensors(g) * sizeof *lay);
 *     int warnings;
 *     HP_CHECK(hp_strategy_annotate(s, g, lay, &warnings));
 *     HP_CHECK(hp_partition_new(g, hp_strategy_mesh(s), lay, &loss, 1, &part));
 *
 * YAML format:
 *
 *     strategy:
 *       mesh:
 *         device_matrix: [2, 2]     # the mesh shape; its product must equal the job's ranks
 *         alias_name: [dp, tp]      # one name per axis (not "none")
 *         ranks: [0, 1, 2, 3]       # optional: the world rank of each mesh index, row-major
 *       inputs:                     # tensor_map per input name; inputs not listed are replicated
 *         tokens: [dp, none]
 *         targets: [dp, none]
 *       params:                     # ordered rules; the first whose pattern matches a name wins
 *         - match: "blocks.*.attn.[qkv].weight"
 *           tensor_map: [tp, none]
 *         - match: "blocks.*.attn.proj.weight"
 *           tensor_map: [none, tp]
 *       optimizer:
 *         shard: [dp]               # ZeRO: optimizer states also split over these axes
 *       bucket_size: 25MiB          # gradient bytes per all-reduce bucket (a size; 0: off); default 25MiB
 *       context_parallel: ring      # attention under a sequence split: ulysses (default) or ring
 *       ring_load_balance: true     # ring: each cp rank holds chunks i and 2n-1-i (default true)
 *
 * Every key is optional except mesh (with device_matrix and alias_name). A tensor_map is a
 * sequence with one entry per leading tensor dimension; an entry is an alias, `none` (or `[]`),
 * or a sequence of aliases splitting that dimension over their product (the first listed
 * slowest, as in hp/mesh.h). A tensor_map shorter than the tensor's rank leaves the trailing
 * dimensions unsplit, so `match: "*"` with `tensor_map: [dp]` splits dim 0 of every parameter
 * (FSDP). Patterns are fnmatch(3) globs without FNM_PATHNAME: `*` matches across dots, `?` one
 * character, `[qkv]` one of a set. Partial axes cannot be declared: they are derived by the
 * partitioner. optimizer.shard takes a sequence of aliases, `[]` or `none`.
 *
 * The section is read and checked by hp_run_config_load (hp/config.h) into hp_strategy_config,
 * before any graph is built. Errors there, all HP_STATUS_CONFIG with a message starting
 * "FILE:LINE:" and naming the key, the value and what was expected:
 *   - unknown keys anywhere in the section (a `partial` key says partial axes are derived, not set),
 *     a missing mesh, device_matrix or alias_name, wrong value types;
 *   - device_matrix and alias_name of different lengths, a size outside [1, 2^20] (or more than
 *     2^30 devices), a bad or repeated axis name;
 *   - a ranks list whose length is not the device count, or a rank out of [0, devices) or listed
 *     twice;
 *   - in a tensor_map or optimizer.shard: an unknown alias (the mesh's aliases are listed), an
 *     alias used twice, more entries than HP_MAX_DIMS;
 *   - params not a sequence of {match, tensor_map} maps, an empty pattern, a malformed glob (an
 *     unclosed '[' or a trailing '\');
 *   - bucket_size not a size; context_parallel neither ulysses nor ring; ring_load_balance not a
 *     boolean.
 */
#ifndef HP_STRATEGY_H
#define HP_STRATEGY_H

#include <stdio.h>

#include "hp/config.h"
#include "hp/core.h"
#include "hp/ir.h"
#include "hp/mesh.h"

#ifdef __cplusplus
extern "C" {
#endif

/* A parsed strategy: a mesh plus the input, parameter and optimizer rules. Opaque. */
typedef struct hp_strategy hp_strategy;

/*
 * Makes the strategy of a checked `strategy:` section (hp_run_config's `strategy`, see above) for a
 * job of world_size ranks (the MPI world size); the mesh must have exactly that many devices.
 * world_size 0 means "no job yet" (`hp plan`, `hp check` without --ranks): the mesh's own device
 * count is taken, and hp_mesh_size(hp_strategy_mesh(s)) tells it. `cfg` may be NULL or not
 * present: then the mesh is the 1-device mesh [1] with axis "dp" and there are no rules, which
 * requires world_size 0 or 1.
 *
 * The world-size checks happen here; those that need the tensors (rank, conflicting rules) happen
 * in hp_strategy_annotate. Errors: HP_STATUS_CONFIG "FILE:LINE:COL: strategy mesh [2, 2] has 4
 * devices but the job runs on 2 ranks" (at device_matrix), or, with no strategy and world_size > 1,
 * a message saying the config runs on 1 device. HP_STATUS_INVALID_ARGUMENT for world_size < 0 or
 * out == NULL; HP_STATUS_OUT_OF_MEMORY. The strategy copies what it keeps (names, patterns, file
 * name), so the run config may be freed afterwards. The caller owns *out (hp_strategy_free); *out
 * is NULL on failure.
 */
hp_status hp_strategy_new(const hp_strategy_config *cfg, int world_size, hp_strategy **out);

/* Frees the strategy and its mesh. NULL is allowed. */
void hp_strategy_free(hp_strategy *s);

/* The mesh (owned by the strategy; valid until hp_strategy_free). Callers attach it to their
 * communicator (hp_mesh_attach) before running the partitioned program. */
hp_mesh *hp_strategy_mesh(hp_strategy *s);

/* strategy.bucket_size in bytes per rank (HP_BUCKET_SIZE_DEFAULT when not given, also for NULL s;
 * 0: bucketing off), for hp_partition_opts.bucket_size. */
int64_t hp_strategy_bucket_size(const hp_strategy *s);

/* strategy.context_parallel (HP_CP_ULYSSES when not given, also for NULL s), for
 * hp_partition_opts.context_parallel. */
hp_cp_algo hp_strategy_context_parallel(const hp_strategy *s);

/*
 * Causal load balancing for ring attention (strategy.ring_load_balance, on by default under
 * context_parallel: ring): *n_out = n, the size of the one mesh axis that splits the sequence dim
 * of the input "tokens", when the strategy runs ring attention with balancing not turned off and
 * n > 1; else 0 (also for NULL s). The model is then built with hp_gpt_config.cp_balance = n and
 * the tokens and targets permuted by hp_ring_balance_positions(seq, n). Errors: HP_STATUS_CONFIG
 * "FILE:LINE: strategy.ring_load_balance: ..." when seq < 2n (a chunk would be empty); naming
 * ring_load_balance's line (context_parallel's where it is not given). HP_STATUS_INVALID_ARGUMENT
 * for NULL n_out.
 */
hp_status hp_strategy_ring_balance(const hp_strategy *s, int64_t seq, int *n_out);

/*
 * Fills layouts[t] for every tensor t of `g` (an array of hp_graph_n_tensors(g) entries, as the
 * partitioner's leaf_layouts):
 *   - PARAM: the tensor_map of the first params rule whose pattern matches the name, padded with
 *     unsplit dims to the tensor's rank;
 *   - INPUT: the tensor_map given under inputs for exactly that name;
 *   - OPT_STATE named exp_avg.X or exp_avg_sq.X: the layout of parameter X, plus the
 *     optimizer.shard axes that X does not already use appended to dim 0's axis list (always
 *     dim 0, even where it does not divide evenly: uneven block shards are supported). A rank-0
 *     state keeps X's layout.
 *   - every other tensor (activations, constants, unannotated leaves): ndim = -1 (replicated).
 * Annotated layouts have no partial axes and are checked with hp_layout_validate.
 * *n_warnings (n_warnings may be NULL) receives the number of params rules that matched no
 * parameter plus the inputs entries naming no input of g; each is also logged with
 * hp_log(HP_LOG_LEVEL_WARN, ...) naming the pattern or name and its file:line.
 * Errors (HP_STATUS_CONFIG, naming the file:line of the rule): a tensor_map with more entries than
 * the tensor's rank (naming the tensor and its shape); two rules matching the same parameter with
 * different layouts (naming both patterns with their lines and the parameter; equal layouts are
 * fine); an inputs entry naming a tensor of g that is not an INPUT. HP_STATUS_INVALID_ARGUMENT
 * for NULL s, g or layouts. On failure the contents of layouts are unspecified.
 */
hp_status hp_strategy_annotate(const hp_strategy *s, const hp_graph *g, hp_layout *layouts, int *n_warnings);
/*
 * hp_strategy_annotate for a graph that is a part of the model (a pipeline stage, a decode graph):
 * rules and inputs entries that match nothing in g are expected there (the stage without the head
 * has no "targets") and are not logged; the whole model's check is hp_strategy_annotate's. Same
 * layouts and errors.
 */
hp_status hp_strategy_annotate_part(const hp_strategy *s, const hp_graph *g, hp_layout *layouts);

/*
 * Writes a readable description for `hp plan`: the mesh (shape, axes with sizes, rank list), one
 * line per input entry and per params rule (pattern, tensor_map, file:line, in match order) and
 * the optimizer shard axes. Writes to f only; never fails.
 */
void hp_strategy_describe(const hp_strategy *s, FILE *f);

#ifdef __cplusplus
}
#endif
#endif /* HP_STRATEGY_H */
