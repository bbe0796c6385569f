/*
 * hp/fit.h — sizes against the machine: the memory a run needs per rank, estimated by planning
 * (nothing of the model is allocated), against the memory this process can have. `hp train` checks
 * it before it builds anything large; `hp train --force` skips the verdict.
 *
 *     hp_run_memory need;
 *     hp_machine_memory have;
 *     HP_CHECK(hp_run_memory_estimate(&cfg, world_size, rank, &need));
 *     HP_CHECK(hp_machine_memory_get(&have));
 *     hp_status st = hp_run_memory_check(&cfg, &need, &have);   // HP_STATUS_OUT_OF_MEMORY: too big
 *
 * On the CPU backend every tier but the disk is RAM, so what must fit is the fast tier plus the
 * host tier plus the corpus.
 */
#ifndef HP_FIT_H
#define HP_FIT_H

#include "hp/config.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The memory one process can have, in bytes (0 in a field: that limit is absent or unknown). */
typedef struct hp_machine_memory {
    uint64_t physical;   /* sysconf(_SC_PHYS_PAGES) x page size: the machine's RAM */
    uint64_t cgroup;     /* the smallest cgroup limit on this process: v2 memory.max of its cgroup
                            and their parents, v1 memory.limit_in_bytes */
    uint64_t rlimit;     /* the smaller soft limit of RLIMIT_AS and RLIMIT_DATA */
    int local_ranks;     /* processes of this job on this machine, which share physical and cgroup
                            memory: the launcher's OMPI_COMM_WORLD_LOCAL_SIZE or MPI_LOCALNRANKS, else 1 */
    uint64_t limit;      /* what this process can have: the least of physical / local_ranks,
                            cgroup / local_ranks and rlimit (0 when none is known); the environment
                            variable HP_MEMORY_LIMIT (bytes, or a number with K, M or G: powers of
                            1024) replaces it, for machines whose limits cannot be read */
    const char *limited_by; /* which of them gives `limit`: "physical memory", "cgroup memory limit",
                               "RLIMIT_AS/RLIMIT_DATA", "HP_MEMORY_LIMIT" or "nothing known" */
} hp_machine_memory;

/* Reads the limits of the calling process (sysconf, /proc/self/cgroup and /sys/fs/cgroup,
 * getrlimit, the launcher's environment). A missing file leaves that limit 0. Errors:
 * HP_STATUS_INVALID_ARGUMENT naming HP_MEMORY_LIMIT's value when it is not a size. */
hp_status hp_machine_memory_get(hp_machine_memory *out);

/* The memory a run needs on one rank, in bytes, as planned. */
typedef struct hp_run_memory {
    uint64_t params;       /* this rank's parameter blocks */
    uint64_t optimizer;    /* AdamW states (exp_avg, exp_avg_sq) */
    uint64_t activations;  /* everything else of the training program: planned activation and
                              gradient arena, kernel workspace, inputs, pipeline micro-batch slots */
    uint64_t fast;         /* the fast tier in all: params + optimizer + activations, or with an
                              offload budget what the residency plan keeps there */
    uint64_t host;         /* offloaded to the host tier (HyperOffload's homes) */
    uint64_t disk;         /* offloaded to the disk tier (not RAM) */
    uint64_t corpus;       /* the corpus file, read whole into memory */
    uint64_t ram;          /* what must be in RAM: fast + host + corpus */
    bool offload;          /* an offload budget planned the tiers */
    bool pipeline;         /* the pipeline's stage programs (and the full model copy every rank keeps) */
} hp_run_memory;

/*
 * Plans the run of `cfg` for `rank` of `world_size` ranks without allocating its tensors: the
 * training step through the compile driver up to the shard pass, then the offload planner
 * (hp_offload_plan_new) when offload.device_budget is set, else the memory planner
 * (hp_program_plan), for mesh index 0, whose blocks are the largest (uneven shards are shorter at
 * the end). With `groups:` the pipeline's stage programs of this rank's group (hp_pipeline_plan_stage:
 * the micro-batches in flight at the schedule's peak, parameters, gradient accumulators and AdamW
 * states counted as the persistent bytes twice), plus the full copy of the model (parameters and
 * AdamW states) every pipeline rank keeps for evaluation and checkpoints. Errors: the config's
 * (strategy against world_size, groups), the planners' (an offload budget that cannot be met is
 * HP_STATUS_OUT_OF_MEMORY naming the node).
 */
hp_status hp_run_memory_estimate(const hp_run_config *cfg, int world_size, int rank, hp_run_memory *out);

/*
 * HP_STATUS_OK when `need` fits `have` (need->ram <= have->limit, or no limit known) and the offload
 * budgets (the fast tier within offload.device_budget, the host tier within a non-zero
 * offload.host_budget); else HP_STATUS_OUT_OF_MEMORY with the estimate (each part), the limit and
 * where it comes from, and what to change: a smaller model.context or train.batch (the
 * activations), a strategy that shards parameters and optimizer states over more ranks or a
 * smaller model (the parameters), offload to the disk tier, or `hp train --force`.
 */
hp_status hp_run_memory_check(const hp_run_config *cfg, const hp_run_memory *need, const hp_machine_memory *have);

#ifdef __cplusplus
}
#endif
#endif /* HP_FIT_H */
