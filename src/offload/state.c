/*
 * The runtime state behind an offload program (hp_offload_state, the program's opts.ext): slow-tier
 * homes, the copy stream, the disk store, and the hooks the runtime calls (sync, read, write, before
 * and after a run, the memory report).
 */
#include "offload/planner_internal.h"

#include "ir/op.h"

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>


hp_loc hp__ofl_loc(const hp_offload_state *s, hp_tid t, void *fast) {
    if (t < 0 || t >= s->n_tensors || s->tier[t] == HP_TIER_DEVICE) return hp_loc_mem(HP_TIER_DEVICE, fast);
    if (s->tier[t] == HP_TIER_HOST) return hp_loc_mem(HP_TIER_HOST, s->data[t]);
    return hp_loc_disk(s->disk, s->disk_off[t]);
}

void hp_offload_state_free(hp_offload_state *s) {
    if (!s) return;
    if (s->ce) hp_copy_engine_synchronize(s->ce);
    if (s->ce_disk) hp_copy_engine_synchronize(s->ce_disk);
    for (int t = 0; t < s->n_tensors; t++) {
        if (!s->tier || (s->in_region && s->in_region[t])) continue;
        if (s->tier[t] == HP_TIER_HOST && s->data[t]) hp_mem_free(HP_TIER_HOST, s->data[t], s->bytes[t]);
        if (s->tier[t] == HP_TIER_DISK && s->disk) hp_disk_free(s->disk, s->disk_off[t]);
    }
    if (s->host_region) hp_mem_free(HP_TIER_HOST, s->host_region, s->region_bytes[HP_TIER_HOST]);
    if (s->disk && s->region_bytes[HP_TIER_DISK]) hp_disk_free(s->disk, s->disk_region);
    free(s->in_region);
    for (int k = 0; k < s->n_xfers; k++) hp_event_free(s->xfers[k].ev);
    for (int k = 0; s->async && s->plan && k < s->plan->n_deferred; k++) {
        hp__ofl_async *r = &s->async[k];
        hp_event_free(r->x.ev);
        free(r->chunk);
    }
    for (int q = 0; q < 4; q++)
        if (s->async_stage_raw[q]) hp_mem_free(HP_TIER_HOST, s->async_stage_raw[q], s->async_stage_bytes);
    free(s->async);
    free(s->async_order);
    free(s->touched);
    hp_copy_engine_free(s->ce_disk);
    hp_copy_engine_free(s->ce);
    hp_disk_close(s->disk);
    hp_offload_plan_free(s->plan);
    free(s->tier);
    free(s->data);
    free(s->disk_off);
    free(s->bytes);
    free(s->xfers);
    free(s->write_back);
    free(s);
}

const hp_offload_plan *hp_offload_state_plan(const hp_offload_state *s) { return s ? s->plan : NULL; }
hp_copy_engine *hp_offload_state_copy_engine(hp_offload_state *s) { return s ? s->ce : NULL; }
hp_disk *hp_offload_state_disk(hp_offload_state *s) { return s ? s->disk : NULL; }

void hp_offload_state_copy_stats(hp_offload_state *s, hp_copy_stats *out) {
    memset(out, 0, sizeof *out);
    if (!s) return;
    hp_copy_engine_get_stats(s->ce, out);
    if (!s->ce_disk) return;
    hp_copy_stats b;
    hp_copy_engine_get_stats(s->ce_disk, &b);
    for (int x = 0; x < HP_TIER_COUNT; x++)
        for (int y = 0; y < HP_TIER_COUNT; y++) {
            out->bytes[x][y] += b.bytes[x][y];
            out->copies[x][y] += b.copies[x][y];
            out->busy_s[x][y] += b.busy_s[x][y];
        }
    out->busy_total_s += b.busy_total_s;
    out->wait_s += b.wait_s;
    out->tasks_done += b.tasks_done;
    out->failed += b.failed;
}

void hp_offload_state_reset_copy_stats(hp_offload_state *s) {
    if (!s) return;
    hp_copy_engine_reset_stats(s->ce);
    if (s->ce_disk) hp_copy_engine_reset_stats(s->ce_disk);
}

/* Waits for both copy streams. */
static hp_status sync_all(hp_offload_state *s) {
    hp_first_error fe = {HP_STATUS_OK, ""};
    hp_first_error_add(&fe, hp_copy_engine_synchronize(s->ce));
    if (s->ce_disk) hp_first_error_add(&fe, hp_copy_engine_synchronize(s->ce_disk));
    return hp_first_error_status(&fe);
}

/* t < 0: everything in flight (before the program's memory goes away); else what may write t. */
static hp_status ext_sync(void *user, hp_tid t) {
    hp_offload_state *s = user;
    if (t < 0) return sync_all(s);
    if (!s->ce_disk || t >= s->n_tensors || !s->touched[t]) return HP_STATUS_OK;
    return hp_copy_engine_synchronize(s->ce_disk);
}

static hp_status ext_write(void *user, hp_tid t, const void *src, size_t bytes) {
    hp_offload_state *s = user;
    HP_CHECK(sync_all(s));
    if (s->tier[t] == HP_TIER_HOST) {
        memcpy(s->data[t], src, bytes);
        return HP_STATUS_OK;
    }
    return hp_disk_write(s->disk, s->disk_off[t], src, bytes);
}

static hp_status ext_read(void *user, hp_tid t, void *dst, size_t bytes) {
    hp_offload_state *s = user;
    HP_CHECK(sync_all(s));
    if (s->tier[t] == HP_TIER_HOST) {
        memcpy(dst, s->data[t], bytes);
        return HP_STATUS_OK;
    }
    return hp_disk_read(s->disk, s->disk_off[t], dst, bytes);
}

/* The store keeps working on an unlinked file (Linux), but the data would be lost at the end of
 * the run, and a removed file means someone else is managing that directory: fail loudly. */
static hp_status ext_before_run(void *user) {
    hp_offload_state *s = user;
    for (int k = 0; k < s->n_async; k++) s->async[k].pending = false; /* a failed flush's leftovers */
    if (!s->disk) return HP_STATUS_OK;
    struct stat sb;
    const char *path = hp_disk_path(s->disk);
    if (stat(path, &sb) != 0)
        return hp_error(HP_STATUS_IO, "offload: disk store file '%s' was removed (%s)", path, strerror(errno));
    return HP_STATUS_OK;
}

/* A step leaves nothing in flight but its deferred updates (waited for in the next step or by
 * ext_sync): the host stream drains, and on the disk stream every other transfer's event is waited
 * for (done already after a step that succeeded), so after a failed step nothing of it still
 * reads or writes the arena. Updates a failed step recorded but did not queue are queued. */
static hp_status ext_after_run(void *user) {
    hp_offload_state *s = user;
    hp_first_error fe = {HP_STATUS_OK, ""};
    hp_first_error_add(&fe, hp_copy_engine_synchronize(s->ce));
    if (!s->ce_disk) return hp_first_error_status(&fe);
    for (int k = 0; k < s->n_xfers; k++)
        if (s->xfers[k].ce == s->ce_disk && hp_first_error_add(&fe, hp_event_wait(s->xfers[k].ev)) != HP_STATUS_OK)
            break;
    hp_first_error_add(&fe, hp__ofl_async_flush(s, INT32_MAX));
    return hp_first_error_status(&fe);
}

/*
 * The end of a node range that does not end the step (hp_program_run_nodes: a pipeline stage's F or
 * B phase): the host stream drains as after a whole run, the disk stream keeps going. An activation's
 * write to disk goes on while the caller runs other programs (the other micro-batches' phases), and a
 * read the planner issued for the next range keeps reading. Each such transfer has its OFFLOAD_WAIT
 * later in the step (before its arena bytes are reused or read), and nothing outside the program
 * touches those bytes in between: the disk extents are this state's own (one store file per state),
 * the arena bytes are neither inputs nor kept tensors, and ext_read / ext_write wait for both
 * streams. With deferred updates a program runs only whole (per_range false), so none is pending.
 */
static hp_status ext_after_range(void *user) {
    hp_offload_state *s = user;
    return hp_copy_engine_synchronize(s->ce);
}

static void ext_report(void *user, FILE *f) {
    hp_offload_state *s = user;
    hp_copy_stats cs;
    hp_offload_state_copy_stats(s, &cs);
    for (int a = 0; a < HP_TIER_COUNT; a++)
        for (int b = 0; b < HP_TIER_COUNT; b++)
            if (cs.copies[a][b])
                fprintf(f, "copy: %s -> %s: %llu copies, %.1f MiB, %.1f MiB/s\n", hp_tier_name((hp_tier)a),
                        hp_tier_name((hp_tier)b), (unsigned long long)cs.copies[a][b], (double)cs.bytes[a][b] / 1048576.0,
                        cs.busy_s[a][b] > 0 ? (double)cs.bytes[a][b] / 1048576.0 / cs.busy_s[a][b] : 0.0);
    fprintf(f, "copy: busy %.3f s, compute waited %.3f s, %.1f%% of copy time hidden behind compute%s\n",
            cs.busy_total_s, cs.wait_s, 100.0 * hp_copy_stats_hidden_fraction(&cs),
            s->ce_disk ? " (host and disk streams; deferred updates included)" : "");
    for (int t = HP_TIER_HOST; t < HP_TIER_COUNT; t++)
        if (s->region_naive[t])
            fprintf(f, "offload: %s region for activation copies %zu bytes (one home each: %zu)\n",
                    hp_tier_name((hp_tier)t), s->region_bytes[t], s->region_naive[t]);
    if (s->disk) {
        hp_disk_stats ds;
        hp_disk_get_stats(s->disk, &ds);
        fprintf(f, "disk: %s (%s, %s): %zu bytes in use, peak %zu, read %.1f MiB, written %.1f MiB\n", ds.path,
                ds.direct ? "O_DIRECT" : "buffered", ds.uring ? "io_uring" : "pread/pwrite", ds.in_use, ds.peak,
                (double)ds.bytes_read / 1048576.0, (double)ds.bytes_written / 1048576.0);
    }
}

hp_status hp__ofl_alloc_home(hp_offload_state *s, hp_tid t, hp_tier tier, size_t bytes) {
    s->tier[t] = (uint8_t)tier;
    s->bytes[t] = bytes;
    if (tier == HP_TIER_HOST) {
        s->data[t] = hp_mem_alloc(HP_TIER_HOST, bytes);
        if (!s->data[t]) return hp_error(HP_STATUS_OUT_OF_MEMORY, "offload: %zu host bytes for tensor %d", bytes, t);
        memset(s->data[t], 0, bytes);
        return HP_STATUS_OK;
    }
    hp_status st = hp_disk_alloc(s->disk, bytes, &s->disk_off[t]);
    if (st != HP_STATUS_OK) s->tier[t] = HP_TIER_DEVICE;
    return st;
}

/*
 * The slow-tier copies of activations (OFFLOAD outputs) live from their OFFLOAD node to their last
 * reader (a PREFETCH or a streamed AdamW) in the rewritten program order; copies whose lifetimes do
 * not overlap share bytes. The copy stream is FIFO, so a slot's next offload is queued after its
 * previous prefetch, and streamed AdamW reads it on the compute thread before the next offload is
 * issued: program order is the order the bytes are touched.
 */
hp_status hp__ofl_plan_regions(hp_offload_state *s, const hp_graph *g) {
    int nn = hp_graph_n_nodes(g), nt = s->n_tensors;
    hp_mem_interval *blocks = malloc(((size_t)nt + 1) * sizeof *blocks);
    int32_t *block_of = malloc(((size_t)nt + 1) * sizeof *block_of);
    hp_status st = HP_STATUS_OK;
    if (!blocks || !block_of) {
        st = hp_error(HP_STATUS_OUT_OF_MEMORY, "offload: out of memory planning slow-tier regions");
        goto done;
    }
    for (int tier = HP_TIER_HOST; tier < HP_TIER_COUNT; tier++) {
        int nb = 0;
        for (hp_tid t = 0; t < nt; t++) {
            block_of[t] = -1;
            if (!s->in_region[t] || hp_graph_tensor(g, t)->producer < 0) continue;
            const hp_node *off = hp_graph_node(g, hp_graph_tensor(g, t)->producer);
            if (off->attr.i[0] != tier) continue;
            const hp_tensor *x = hp_graph_tensor(g, t);
            size_t bytes = (size_t)hp_shape_numel(&x->shape) * hp_dtype_size(x->dtype);
            block_of[t] = nb;
            blocks[nb++] = (hp_mem_interval){bytes, x->producer, x->producer, 0};
            s->region_naive[tier] += bytes;
        }
        if (nb == 0) continue;
        for (int i = 0; i < nn; i++) {
            const hp_node *n = hp_graph_node(g, i);
            for (int k = 0; k < n->n_in; k++)
                if (n->in[k] >= 0 && n->in[k] < nt && block_of[n->in[k]] >= 0 && blocks[block_of[n->in[k]]].end < i)
                    blocks[block_of[n->in[k]]].end = i;
        }
        size_t align = tier == HP_TIER_DISK ? HP_DISK_ALIGN : 64, total = 0;
        HP_CHECK_GOTO(hp_memplan_assign(blocks, nb, align, &total), st, done);
        s->region_bytes[tier] = total;
        char *base = NULL;
        if (tier == HP_TIER_HOST) {
            base = s->host_region = hp_mem_alloc(HP_TIER_HOST, total);
            if (!base) {
                st = hp_error(HP_STATUS_OUT_OF_MEMORY, "offload: host region of %zu bytes for activation copies", total);
                goto done;
            }
        } else {
            HP_CHECK_GOTO(hp_disk_alloc(s->disk, total, &s->disk_region), st, done);
        }
        for (hp_tid t = 0; t < nt; t++) {
            if (block_of[t] < 0) continue;
            s->tier[t] = (uint8_t)tier;
            s->bytes[t] = blocks[block_of[t]].bytes;
            if (tier == HP_TIER_HOST) s->data[t] = base + blocks[block_of[t]].offset;
            else s->disk_off[t] = s->disk_region + blocks[block_of[t]].offset;
        }
    }
done:
    free(blocks);
    free(block_of);
    return st;
}

void hp__ofl_set_ext(hp_offload_state *s, size_t device_budget) {
    s->ext = (hp_program_ext){s->n_tensors, s->tier, s->data, device_budget, ext_write, ext_read,
                              ext_before_run, ext_after_run, ext_report, s, ext_sync, hp__ofl_set_trace,
                              /* deferred updates outlive a run by design (they span steps): whole
                               * steps only; else a node range ends with after_run (host tier: both
                               * streams drain) or, with a disk tier, after_range (disk transfers go
                               * on into the next range, each waited for inside the step) */
                              .per_range = s->n_async == 0,
                              .after_range = s->disk && s->n_async == 0 ? ext_after_range : NULL};
}
