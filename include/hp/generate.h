/*
 * hp/generate.h — batched text generation with a KV cache (incremental decoding).
 *
 *     hp_store *store;
 *     HP_CHECK(hp_store_new(NULL, NULL, &store));
 *     hp_generator_opts go = HP_GENERATOR_OPTS_DEFAULT;
 *     go.slots = 4;                                          // up to 4 sequences per call
 *     hp_generator *gen;
 *     HP_CHECK(hp_generator_new(&cfg, store, &go, &gen));    // binds weights + cache in the store
 *     ... write the weights into the store (hp_store_write, or hp_checkpoint_load_model into
 *         hp_store_data of each parameter of hp_generator_graph(gen), then hp_store_touch) ...
 *     hp_generate_opts o = HP_GENERATE_OPTS_DEFAULT;
 *     o.max_new_tokens = 64; o.temperature = 0.8f; o.top_p = 0.9f;
 *     HP_CHECK(hp_generate(gen, 2, prompts, prompt_lens, &o, out));   // out: (2, 64) token ids
 *     hp_generator_free(gen); hp_store_free(store);
 *
 * With the cache (the default), a call runs one prefill program over the prompts (seq = the
 * longest prompt; shorter prompts are padded on the right with rows at position -1, which write
 * nothing and are attended by nothing), then one decode program run per further token (seq = 1,
 * every sequence at its own position). Both programs are built from hp_gpt_build_decode and bound
 * to the same state store, so they share the weights and the cache entries "kv.L.k" / "kv.L.v"
 * (slots, kv_heads, t_max, D): one slot per sequence; a call overwrites what it needs, so slots are
 * reused across calls without clearing. Per token and layer the decode program reads the cache
 * rows [0, p] once instead of recomputing every earlier position (Pope et al. 2022).
 * Without the cache (use_cache = false, `hp generate --no-cache`) each token re-runs hp_gpt_build's
 * forward over a whole window of `context` positions (the sequence so far, left-aligned) and reads
 * the logits at its last position: the same numbers up to float rounding (the tests require the same
 * greedy tokens and logits within 1e-5), at O(context) work per token.
 *
 * Memory: the cache is 2 L slots kv_heads t_max D floats of the store (hp_store_get_stats counts it
 * with the weights; hp_generator_stats.cache_bytes gives it alone). The generator's programs run
 * without an offload pass. Under HyperOffload the cache is state like any other store entry: a
 * program bound to it with hp_program_opts.ext counts its bytes in the fast-tier total checked
 * against device_budget at build, and the offload planner keeps it resident (its writer works in
 * place and is not AdamW, the only in-place writer the planner streams), so such a budget must
 * hold weights on the fast tier + cache + activations, or the build fails naming the bytes.
 *
 * Sampling (hp_sample_token) is deterministic for the seed: sequence j's token i uses the uniform
 * draw hp_rng_uniform(hp_rng_hash("sample") ^ seed ^ j * 0x9e3779b97f4a7c15, first_draw + i), the draws of the
 * single-sequence sampler of hp_trainer_sample for j = 0.
 *
 * Tensor parallelism (hp_generator_opts.strategy): the decode and prefill graphs are partitioned
 * like training graphs. The strategy's params rules lay out the weights (Megatron-LM: q/k/v and
 * fc/gate/up column-parallel, split on dim 0; proj/o/down row-parallel, split on dim 1; see
 * examples/rl_tp.yaml); each layer's cache pair "kv.L.k" / "kv.L.v" is split over kv heads (dim 1)
 * by the axes that split its key projection's dim 0, so ATTENTION_CACHE reads and writes the
 * cache in place, each rank holding 1/tp of it (hp_generator_stats.cache_bytes is this rank's
 * part). The logits are resolved replicated (the
 * row-parallel sums all-reduced, the head replicated), so every rank samples the same tokens from
 * the same draws; each step the first rank of the ranks that split the parameters (the mesh axes
 * some params rule names) broadcasts its tokens to them, so they agree even where an all-reduce
 * hands ranks different bytes or their seeds differ (replicas over other axes sample their own). The store must be made over the strategy's mesh (hp_store_new(mesh, ...)); the
 * generator declares every parameter's and cache entry's logical shape and layout in it
 * (hp_store_info gives them: load a rank's block of a parameter with hp_redistribute_tensor from a
 * replicated copy, or with a cross-mesh redistribution); entries declared already keep their
 * layout, and the generator's programs bind to their views of its layout (hp_store_view, made by
 * the caller before hp_generator_new and refreshed before hp_generate: a co-located RL actor on the
 * learner's store, whose mesh has the same single axis over the same ranks). The inputs stay replicated (a strategy
 * splitting tokens or positions is refused). Errors at hp_generator_new, HP_STATUS_INVALID_ARGUMENT:
 * a degree (the shards of a key projection's dim 0) that does not divide heads or kv_heads (naming
 * the value), q and k projections split differently; then hp_compile's.
 *
 * Threads: a generator is used by one thread at a time; it must be freed before its store.
 */
#ifndef HP_GENERATE_H
#define HP_GENERATE_H

#include "hp/comm.h"
#include "hp/nn.h"
#include "hp/store.h"
#include "hp/strategy.h"

#ifdef __cplusplus
extern "C" {
#endif

/*
 * Picks a token from `logits` (V values) with uniform draw u in [0, 1):
 *   temperature <= 0: the arg max (lowest id among equal maxima), whatever top_k and top_p;
 *   otherwise the ids sorted by decreasing logit (ties: lower id first), kept are the first top_k
 *   (top_k <= 0: all), then of those the shortest prefix whose probability (softmax of logit /
 *   temperature over the kept ids) sums to at least top_p (nucleus sampling, Holtzman et al. 2020;
 *   top_p >= 1: all); the token is the first kept id whose cumulative renormalized probability
 *   reaches u. top_k = 1 is greedy. With neither filter the ids are scanned in id order (no sort).
 * Errors: HP_STATUS_INVALID_ARGUMENT for V < 1, u outside [0, 1), top_p <= 0 or a NaN logit;
 * HP_STATUS_OUT_OF_MEMORY (the sort uses V ids of scratch).
 */
hp_status hp_sample_token(const float *logits, int V, float temperature, int top_k, float top_p, double u, int *token);

typedef struct hp_generator hp_generator;

typedef struct hp_generator_opts {
    int slots;      /* most sequences per hp_generate call (cache slots); >= 1 */
    int t_max;      /* cache length per sequence, in tokens; 0: the model's context */
    bool use_cache; /* false: recompute the whole window for every token (no cache, no prefill) */
    /* Tensor parallelism (borrowed; must outlive the generator). NULL: one device. Otherwise the
     * decode and prefill programs are compiled by the compile driver (hp_compile: shard pass and
     * memplan) under this strategy on its mesh, and hp_generator_new, hp_generate and
     * hp_generator_free are collective over that mesh: every rank calls them with the same
     * arguments. See "Tensor parallelism" above. Needs use_cache. */
    hp_strategy *strategy;
    /* The communicator the strategy's mesh is attached to when it is not attached yet (borrowed);
     * NULL: the mesh must be attached already. */
    hp_comm *comm;
} hp_generator_opts;
#define HP_GENERATOR_OPTS_DEFAULT                                                                  \
    ((hp_generator_opts){.slots = 1, .t_max = 0, .use_cache = true, .strategy = NULL, .comm = NULL})

/*
 * A generator for model `c` over `store` (borrowed; it must outlive the generator): builds and
 * binds the decode program (with the cache) or the recompute program (without), which creates the
 * store entries of every parameter (zeroed until written) and of the cache. Errors:
 * hp_gpt_build_decode's / hp_gpt_build's; HP_STATUS_INVALID_ARGUMENT for slots < 1 or a t_max
 * outside [0, context]; hp_program_new's.
 */
hp_status hp_generator_new(const hp_gpt_config *c, hp_store *store, const hp_generator_opts *o, hp_generator **out);
/* Frees the programs and graphs (not the store's entries). NULL is allowed. */
void hp_generator_free(hp_generator *gen);
/* The graph whose PARAM tensors are the model's weights (to load them by name). */
const hp_graph *hp_generator_graph(const hp_generator *gen);

typedef struct hp_generate_opts {
    int max_new_tokens; /* tokens generated per sequence, >= 0 */
    float temperature;  /* <= 0: greedy */
    int top_k;          /* <= 0: off */
    float top_p;        /* in (0, 1]; 1: off */
    uint64_t seed;
    int sample_vocab;   /* ids are sampled below it (a tokenizer smaller than model.vocab); 0: vocab */
    uint64_t first_draw; /* token i uses draw counter first_draw + i (a continuation in windows) */
    float *logits;      /* optional output (n_seq, max_new_tokens, V): the logits each token was
                           sampled from; NULL: not kept */
} hp_generate_opts;
#define HP_GENERATE_OPTS_DEFAULT                                                                   \
    ((hp_generate_opts){.max_new_tokens = 16, .temperature = 0.0f, .top_k = 0, .top_p = 1.0f, .seed = 1, \
                        .sample_vocab = 0, .first_draw = 0, .logits = NULL})

/* Counters of a generator since it was made. */
typedef struct hp_generator_stats {
    int64_t prefill_runs, decode_runs; /* program runs (without the cache: every run is a decode run) */
    int64_t tokens;                    /* tokens generated */
    double prefill_seconds, decode_seconds;
    size_t cache_bytes;                /* bytes of this rank's blocks of the kv.* entries (0 without the cache) */
} hp_generator_stats;
void hp_generator_get_stats(const hp_generator *gen, hp_generator_stats *out);

/*
 * Generates o->max_new_tokens tokens after each of n_seq prompts (prompts[j]: prompt_lens[j] ids;
 * an empty prompt is the single id 0, as hp_trainer_sample conditions on a zero byte) into
 * out[j * max_new_tokens + i]. Sequences are independent: each is what a call with it alone would
 * give (up to float rounding of the batched GEMMs). Errors (nothing is run): HP_STATUS_INVALID_ARGUMENT
 * for n_seq outside [1, slots], a negative length or max_new_tokens, a prompt id outside [0, vocab)
 * (naming sequence, position and id), a prompt longer than the cache length (context) or a prompt
 * plus max_new_tokens beyond it (both named), top_p outside (0, 1]; then the programs' errors.
 */
hp_status hp_generate(hp_generator *gen, int n_seq, const int32_t *const *prompts, const int *prompt_lens,
                      const hp_generate_opts *o, int32_t *out);

/* What `hp generate` asks for (hp_generate_checkpoint). */
typedef struct hp_generate_text_opts {
    int batch;       /* sequences generated together (cache slots); 0: one per prompt */
    bool use_cache;  /* false: recompute the window for every token (`--no-cache`) */
    hp_generate_opts gen; /* tokens, temperature, top-k, top-p, seed (logits ignored) */
    /* Tensor parallelism (`hp generate --strategy RUN.yaml` under mpirun): a checked `strategy:`
     * section whose mesh has as many devices as `world` has ranks (borrowed); NULL: one device. */
    const hp_strategy_config *strategy;
    hp_comm *world;  /* the ranks (borrowed); NULL: one rank */
} hp_generate_text_opts;

/*
 * Rebuilds the model of a checkpoint (path: a run or step directory; the checks and loading of
 * hp_generate_from_checkpoint: paths, the saved config against the tensors, checksums, finite
 * values; the run's tokenizer, or bytes) into a fresh state store and generates with an
 * hp_generator: max(batch, n_prompts) sequences, sequence j continuing prompts[j % n_prompts],
 * in hp_generate calls. When the longest prompt plus the tokens exceed the context C, generation
 * goes on in windows (a context shift): each call generates n = ceil(C / 2) tokens (or what is
 * left) after the last C - n tokens of every sequence, so the cache is refilled by a prefill
 * every n tokens; a prompt longer than C is cut to its last C - n tokens. With the cache and
 * without (use_cache false) the windows are the same, so both give the same tokens. texts_out[j] (malloc'd, caller frees each) is the prompt and its
 * continuation, decoded. *stats_out (may be NULL) receives the generator's counters. With
 * o->strategy the generator runs under it over o->world (every rank calls this with the same
 * arguments and gets the same texts; each reads the whole checkpoint and keeps its blocks).
 * Errors: the checkpoint's (naming the file and the tensor or field); hp_generate's (a prompt
 * or prompt + tokens beyond the context); HP_STATUS_INVALID_ARGUMENT for n_prompts < 1 or a
 * negative batch; with a strategy hp_strategy_new's (its device count against the ranks, naming
 * file:line) and hp_generator_new's (a degree not dividing heads or kv_heads, naming the value).
 */
hp_status hp_generate_checkpoint(const char *path, const char *const *prompts, int n_prompts,
                                 const hp_generate_text_opts *o, char **texts_out, hp_generator_stats *stats_out);

#ifdef __cplusplus
}
#endif
#endif
