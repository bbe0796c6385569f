/* Sizes against the machine (hp/fit.h): the planned memory of a run per rank, the memory this
 * process can have, and the verdict with what to change. */
#include "hp/fit.h"

#include "hp/compile.h"
#include "hp/offload_plan.h"
#include "hp/pipeline.h"
#include "hp/schedule.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

/* ---------------------------------------------------------------- the machine */

/* The number in `path` ("max" or a missing file: 0). */
static uint64_t read_limit(const char *path) {
    FILE *f = fopen(path, "r");
    if (!f) return 0;
    char buf[64] = "";
    uint64_t v = 0;
    if (fgets(buf, sizeof buf, f) && buf[0] >= '0' && buf[0] <= '9') v = strtoull(buf, NULL, 10);
    fclose(f);
    return v;
}

static uint64_t min_set(uint64_t a, uint64_t b) { return !a ? b : !b ? a : a < b ? a : b; }

/* The least cgroup memory limit on this process: v2's memory.max of its cgroup and every parent
 * visible under /sys/fs/cgroup, and v1's memory.limit_in_bytes (whose "unlimited" is a number near
 * 2^63, treated as none). */
static uint64_t cgroup_limit(void) {
    uint64_t lim = 0;
    FILE *f = fopen("/proc/self/cgroup", "r");
    char line[4096];
    while (f && fgets(line, sizeof line, f)) {
        if (strncmp(line, "0::", 3) != 0) continue;
        char *path = line + 3;
        path[strcspn(path, "\n")] = '\0';
        for (;;) {
            char file[4200];
            snprintf(file, sizeof file, "/sys/fs/cgroup%s%smemory.max", path, path[strlen(path) - 1] == '/' ? "" : "/");
            lim = min_set(lim, read_limit(file));
            char *slash = strrchr(path, '/');
            if (!slash || slash == path) {
                if (strcmp(path, "/") != 0) {
                    strcpy(path, "/");
                    continue;
                }
                break;
            }
            *slash = '\0';
        }
    }
    if (f) fclose(f);
    uint64_t v1 = read_limit("/sys/fs/cgroup/memory/memory.limit_in_bytes");
    if (v1 && v1 < ((uint64_t)1 << 60)) lim = min_set(lim, v1);
    return lim;
}

static uint64_t rlimit_of(int which) {
    struct rlimit r;
    if (getrlimit(which, &r) != 0 || r.rlim_cur == RLIM_INFINITY) return 0;
    return (uint64_t)r.rlim_cur;
}

hp_status hp_machine_memory_get(hp_machine_memory *out) {
    memset(out, 0, sizeof *out);
    long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    if (pages > 0 && page > 0) out->physical = (uint64_t)pages * (uint64_t)page;
    out->cgroup = cgroup_limit();
    out->rlimit = min_set(rlimit_of(RLIMIT_AS), rlimit_of(RLIMIT_DATA));
    const char *local = getenv("OMPI_COMM_WORLD_LOCAL_SIZE");
    if (!local) local = getenv("MPI_LOCALNRANKS");
    long n = local ? strtol(local, NULL, 10) : 1;
    out->local_ranks = n >= 1 && n <= 1 << 20 ? (int)n : 1;
    out->limited_by = "nothing known";
    uint64_t share[3] = {out->physical / (uint64_t)out->local_ranks, out->cgroup / (uint64_t)out->local_ranks,
                         out->rlimit};
    const char *why[3] = {"physical memory", "cgroup memory limit", "RLIMIT_AS/RLIMIT_DATA"};
    for (int i = 0; i < 3; i++)
        if (share[i] && (!out->limit || share[i] < out->limit)) {
            out->limit = share[i];
            out->limited_by = why[i];
        }
    const char *env = getenv("HP_MEMORY_LIMIT");
    if (env && *env) {
        char *end;
        errno = 0;
        unsigned long long v = strtoull(env, &end, 10);
        uint64_t unit = *end == 'K' ? 1024 : *end == 'M' ? (uint64_t)1 << 20 : *end == 'G' ? (uint64_t)1 << 30 : 1;
        if (unit > 1) end++;
        if (errno || end == env || *end || env[0] == '-' || v > UINT64_MAX / unit)
            return hp_error(HP_STATUS_INVALID_ARGUMENT, "HP_MEMORY_LIMIT='%s' is not a number of bytes (a whole number, "
                            "optionally followed by K, M or G)", env);
        out->limit = (uint64_t)v * unit;
        out->limited_by = "HP_MEMORY_LIMIT";
    }
    return HP_STATUS_OK;
}

/* ---------------------------------------------------------------- the run */

static uint64_t tensor_bytes(const hp_tensor *x) { return (uint64_t)hp_shape_numel(&x->shape) * hp_dtype_size(x->dtype); }

/* One program per rank (no groups): the compile driver up to the shard pass, then the offload or
 * the memory planner, for mesh index 0 (the largest blocks). */
static hp_status estimate_spmd(const hp_run_config *cfg, int world_size, hp_run_memory *out) {
    hp_offload_plan_config oc;
    HP_CHECK(hp_compile_config_objects(cfg, world_size, NULL, &oc));
    bool offload = cfg->offload.present && oc.device_budget > 0;
    hp_compile_opts o = HP_COMPILE_OPTS_INIT;
    o.train = true;
    o.plan_only = true;
    o.plan_world_size = world_size;
    o.plan_index = 0;
    o.stop_after = offload ? HP_PASS_SHARD : HP_PASS_MEMPLAN; /* the offload pass allocates its homes */
    hp_compiled *c;
    HP_CHECK(hp_compile_run(cfg, &o, &c));
    const hp_graph *lg = hp_compiled_logical(c);
    hp_partition *part = hp_compiled_partition(c);
    hp_graph *g = hp_partition_graph(part);
    for (int t = 0; t < hp_graph_n_tensors(lg); t++) {
        const hp_tensor *x = hp_graph_tensor(lg, t);
        if (x->producer >= 0 || !x->name) continue;
        uint64_t b = tensor_bytes(hp_graph_tensor(g, hp_partition_local(part, t)));
        if (x->kind == HP_TENSOR_KIND_PARAM) out->params += b;
        else if (x->kind == HP_TENSOR_KIND_OPT_STATE) out->optimizer += b;
    }
    hp_status st = HP_STATUS_OK;
    if (offload) {
        hp_tid keep[2] = {hp_compiled_loss(c), hp_compiled_grad_sq(c)};
        hp_offload_plan *plan = NULL;
        st = hp_offload_plan_new(g, keep, keep[1] >= 0 ? 2 : 1, &oc, &plan);
        if (st == HP_STATUS_OK) {
            hp_offload_plan_stats s;
            hp_offload_plan_get_stats(plan, &s);
            out->fast = s.peak_after;
            out->host = s.home_bytes[HP_TIER_HOST];
            out->disk = s.home_bytes[HP_TIER_DISK];
            uint64_t all = s.peak_before; /* what the fast tier would hold without offload */
            out->activations = all > out->params + out->optimizer ? all - out->params - out->optimizer : 0;
            out->offload = true;
        }
        hp_offload_plan_free(plan);
    } else {
        const hp_program_stats *ps = hp_compiled_memory(c);
        out->fast = ps->device_bytes + ps->store_bytes;
        out->activations = out->fast > out->params + out->optimizer ? out->fast - out->params - out->optimizer : 0;
    }
    hp_compiled_free(c);
    return st;
}

/* A pipeline rank: its group's stage programs at the schedule's peak of micro-batches in flight,
 * plus the full model copy (parameters and AdamW states) every pipeline rank keeps. */
static hp_status estimate_pipeline(const hp_run_config *cfg, int world_size, int rank, hp_run_memory *out) {
    HP_CHECK(hp_groups_config_check_world(&cfg->groups, world_size));
    hp_group_placement pl;
    HP_CHECK(hp_groups_config_place(&cfg->groups, rank, &pl));
    hp_schedule s;
    HP_CHECK(hp_pipeline_schedule_from_config(cfg, &s));
    int *peak = calloc((size_t)s.p + 1, sizeof *peak);
    hp_status st = peak ? HP_STATUS_OK : hp_error(HP_STATUS_OUT_OF_MEMORY, "out of memory planning the pipeline");
    hp_sched_check_opts co = HP_SCHED_CHECK_OPTS_INIT;
    if (st == HP_STATUS_OK) st = hp_schedule_validate(&s, &co, peak, NULL);
    const hp_group_config *gr = &cfg->groups.groups[pl.group];
    hp_gpt_config gc = hp_gpt_config_from_model(&cfg->model);
    int rows = (int)(cfg->train.batch / s.m), share = (rows + gr->n_ranks - 1) / gr->n_ranks;
    uint64_t act = 0;
    hp_machine_model mm = HP_MACHINE_MODEL_DEFAULT;
    for (int k = 0; st == HP_STATUS_OK && k < gr->n_chunks; k++) {
        const hp_module_chunk *mc = &gr->chunks[k];
        hp_gpt_stage part = {.first_layer = mc->first, .last_layer = mc->last, .embedding = mc->embedding, .head = mc->head};
        hp_pipeline_stage_plan sp;
        st = hp_pipeline_plan_stage(&gc, &part, share, (int)cfg->model.context, s.m, &mm, &sp);
        if (st != HP_STATUS_OK) break;
        size_t a = hp_pipeline_stage_activations(&sp, s.split_backward);
        if (a > act) act = a;
        out->params += sp.persistent_bytes;    /* parameters, accumulators, inputs */
        out->optimizer += sp.persistent_bytes; /* AdamW's two states, about as large */
    }
    int p = pl.stage >= 0 && pl.stage < s.p ? peak[pl.stage] : 1;
    out->activations = (uint64_t)(p > 0 ? p : 1) * act;
    uint64_t copy = 3 * (uint64_t)hp_gpt_n_params(&gc) * sizeof(float); /* the trainer's full model copy */
    out->params += copy / 3;
    out->optimizer += 2 * copy / 3;
    out->fast = out->params + out->optimizer + out->activations;
    out->pipeline = true;
    free(peak);
    hp_schedule_free(&s);
    return st;
}

hp_status hp_run_memory_estimate(const hp_run_config *cfg, int world_size, int rank, hp_run_memory *out) {
    memset(out, 0, sizeof *out);
    if (world_size < 1 || rank < 0 || rank >= world_size)
        return hp_error(HP_STATUS_INVALID_ARGUMENT, "memory estimate: rank %d is not a rank of %d", rank, world_size);
    HP_CHECK(cfg->groups.present ? estimate_pipeline(cfg, world_size, rank, out) : estimate_spmd(cfg, world_size, out));
    struct stat sb;
    /* a shard set is memory-mapped and read window by window: nothing of it stays resident */
    if (!cfg->data.shards[0] && stat(cfg->data.corpus, &sb) == 0 && S_ISREG(sb.st_mode)) out->corpus = (uint64_t)sb.st_size;
    out->ram = out->fast + out->host + out->corpus;
    return HP_STATUS_OK;
}

/* ---------------------------------------------------------------- the verdict */

/* "1.50 GiB", "12.0 MiB", "512 bytes" */
static const char *sz(uint64_t b, char *buf, size_t n) {
    if (b >= (uint64_t)1 << 40) snprintf(buf, n, "%.2f TiB", (double)b / (double)((uint64_t)1 << 40));
    else if (b >= (uint64_t)1 << 30) snprintf(buf, n, "%.2f GiB", (double)b / (double)((uint64_t)1 << 30));
    else if (b >= (uint64_t)1 << 20) snprintf(buf, n, "%.1f MiB", (double)b / (double)(1 << 20));
    else if (b >= 1024) snprintf(buf, n, "%.1f KiB", (double)b / 1024.0);
    else snprintf(buf, n, "%" PRIu64 " bytes", b);
    return buf;
}

hp_status hp_run_memory_check(const hp_run_config *cfg, const hp_run_memory *need, const hp_machine_memory *have) {
    char a[32], b[32], c[32], d[32], e[32], f[32], g[32];
    const hp_offload_run_config *o = &cfg->offload;
    if (need->offload && o->device_budget && need->fast > o->device_budget)
        return hp_error(HP_STATUS_OUT_OF_MEMORY, "the offload plan keeps %s in the fast tier, more than offload.device_budget "
                        "%s: raise the budget, or use a smaller model.context (now %lld) or train.batch (now %lld)",
                        sz(need->fast, a, sizeof a), sz(o->device_budget, b, sizeof b), (long long)cfg->model.context,
                        (long long)cfg->train.batch);
    if (need->offload && o->host_budget && need->host > o->host_budget)
        return hp_error(HP_STATUS_OUT_OF_MEMORY, "the offload plan puts %s in the host tier, more than offload.host_budget %s: "
                        "raise it or send more to the disk tier (offload.policy ...: disk with offload.disk_dir)",
                        sz(need->host, a, sizeof a), sz(o->host_budget, b, sizeof b));
    if (!have->limit || need->ram <= have->limit) return HP_STATUS_OK;
    char where[256];
    snprintf(where, sizeof where, "%s", have->limited_by);
    if (have->local_ranks > 1 && strcmp(have->limited_by, "RLIMIT_AS/RLIMIT_DATA") != 0)
        snprintf(where, sizeof where, "%s %s shared by %d ranks of this job on this machine", have->limited_by,
                 sz(!strcmp(have->limited_by, "physical memory") ? have->physical : have->cgroup, g, sizeof g),
                 have->local_ranks);
    char parts[640] = "";
    size_t n = (size_t)snprintf(parts, sizeof parts, "parameters %s, optimizer state %s, activations, gradients and "
                                "workspace %s%s", sz(need->params, a, sizeof a), sz(need->optimizer, b, sizeof b),
                                sz(need->activations, c, sizeof c),
                                need->pipeline ? " (this rank's pipeline stages and a full model copy)" : "");
    if (need->offload && n < sizeof parts)
        n += (size_t)snprintf(parts + n, sizeof parts - n, "; after the offload plan: fast tier %s, host tier %s, disk "
                              "tier %s (not RAM)", sz(need->fast, d, sizeof d), sz(need->host, e, sizeof e),
                              sz(need->disk, f, sizeof f));
    if (n < sizeof parts) snprintf(parts + n, sizeof parts - n, "; corpus %s", sz(need->corpus, a, sizeof a));
    /* what to change, the larger part first */
    char acts[160], weights[256];
    snprintf(acts, sizeof acts, "a smaller model.context (now %lld) or train.batch (now %lld), or a strategy that "
             "splits them over more ranks, for the activations", (long long)cfg->model.context,
             (long long)cfg->train.batch);
    snprintf(weights, sizeof weights, "a strategy that shards parameters and optimizer state over more ranks (FSDP: "
             "strategy.params; ZeRO: strategy.optimizer.shard) or a smaller model.width (now %lld) or model.layers (now "
             "%lld)", (long long)cfg->model.width, (long long)cfg->model.layers);
    bool act_first = need->activations >= need->params + need->optimizer;
    return hp_error(HP_STATUS_OUT_OF_MEMORY,
                    "the run needs about %s of memory per rank (%s), more than this process can have: %s (%s). To "
                    "fit: %s; %s; or offload: with a device_budget and the disk tier; or hp train --force to run it "
                    "anyway", sz(need->ram, a, sizeof a), parts, sz(have->limit, b, sizeof b), where,
                    act_first ? acts : weights, act_first ? weights : acts);
}
