/*
 * The schedule generators: each fills per-rank lists of compute actions (F, B, W with stage and
 * micro-batch); hp_schedule_build then inserts sends and receives. Stage numbering: loop placement
 * (stage c*p + r is chunk c of rank r) for GPipe, 1F1B, interleaved 1F1B and ZB-H1; V placement
 * (rank r holds stage r as chunk 0 and stage 2p-1-r as chunk 1) for ZB-V and DualPipeV.
 *
 * The orders follow the papers and PyTorch's torch.distributed.pipelining (Schedule1F1B,
 * ScheduleInterleaved1F1B, ScheduleInterleavedZeroBubble with one chunk = ZB-H1,
 * ScheduleZBVZeroBubble, ScheduleDualPipeV); the code is written from the descriptions below.
 */
#include "mpmd/schedule_internal.h"

#include <stdlib.h>

#define FULL HP_SCHED_FLAG_FULL_BACKWARD

static int imin(int a, int b) { return a < b ? a : b; }
static int imax(int a, int b) { return a > b ? a : b; }

/* GPipe (Huang et al. 2019): every forward, then every full backward, micro-batches in order. */
void hp__sched_gen_gpipe(hp__sched_lists *l, int p, int m) {
    for (int r = 0; r < p; r++) {
        for (int i = 0; i < m; i++) hp__sched_push(l, r, HP_SCHED_OP_F, r, i, 0);
        for (int i = 0; i < m; i++) hp__sched_push(l, r, HP_SCHED_OP_B, r, i, FULL);
    }
}

/* 1F1B (PipeDream-Flush): rank r runs p-1-r warm-up forwards (at most m), then alternates one
 * forward and one full backward, then drains the remaining backwards. At most p-r micro-batches
 * are in flight on rank r. */
void hp__sched_gen_1f1b(hp__sched_lists *l, int p, int m) {
    for (int r = 0; r < p; r++) {
        int warm = imin(p - 1 - r, m);
        for (int i = 0; i < warm; i++) hp__sched_push(l, r, HP_SCHED_OP_F, r, i, 0);
        for (int i = 0; i < m - warm; i++) {
            hp__sched_push(l, r, HP_SCHED_OP_F, r, warm + i, 0);
            hp__sched_push(l, r, HP_SCHED_OP_B, r, i, FULL);
        }
        for (int i = m - warm; i < m; i++) hp__sched_push(l, r, HP_SCHED_OP_B, r, i, FULL);
    }
}

/*
 * Interleaved 1F1B (Narayanan et al., SC 2021): rank r holds chunks c = 0..v-1 (stage c*p + r).
 * Micro-batches go in rounds (Megatron-LM's order, as PyTorch's ScheduleInterleaved1F1B): the
 * forward order runs a round through chunk 0, then chunk 1, ..., then the next round; the backward
 * order the same with the chunks reversed. A round must hold at least p micro-batches (a shorter one
 * deadlocks the chunk hand-over from the last rank back to rank 0), so m >= p micro-batches go in
 * max(1, m / p) rounds whose sizes differ by at most one (larger rounds first), which makes any m
 * work; m < p is one round of m. Rank r warms up with (v-1)g + 2(p-1-r) forwards, g the first
 * round's size (the first backward, of chunk v-1, needs the round through every chunk, and two
 * slots per hop back from the last rank), then alternates forward and backward, then drains.
 */
void hp__sched_gen_interleaved(hp__sched_lists *l, int p, int m, int v) {
    int total = v * m, rounds = imax(1, m / p), base = m / rounds, extra = m % rounds;
    int g = base + (extra > 0);
    int *fc = malloc((size_t)total * sizeof *fc), *fm = malloc((size_t)total * sizeof *fm);
    int *bc = malloc((size_t)total * sizeof *bc), *bm = malloc((size_t)total * sizeof *bm);
    if (!fc || !fm || !bc || !bm) {
        l->st = hp_error(HP_STATUS_OUT_OF_MEMORY, "interleaved order of %d actions", total);
        goto done;
    }
    int k = 0, start = 0;
    for (int round = 0; round < rounds; round++) {
        int n = base + (round < extra);
        for (int c = 0; c < v; c++)
            for (int j = 0; j < n; j++, k++) {
                fc[k] = c, fm[k] = start + j;
                bc[k] = v - 1 - c, bm[k] = start + j;
            }
        start += n;
    }
    HP_ASSERT(k == total && start == m);
    for (int r = 0; r < p; r++) {
        int warm = imin((v - 1) * g + 2 * (p - 1 - r), total);
        for (int i = 0; i < warm; i++) hp__sched_push(l, r, HP_SCHED_OP_F, fc[i] * p + r, fm[i], 0);
        for (int i = 0; i < total - warm; i++) {
            hp__sched_push(l, r, HP_SCHED_OP_F, fc[warm + i] * p + r, fm[warm + i], 0);
            hp__sched_push(l, r, HP_SCHED_OP_B, bc[i] * p + r, bm[i], FULL);
        }
        for (int i = total - warm; i < total; i++) hp__sched_push(l, r, HP_SCHED_OP_B, bc[i] * p + r, bm[i], FULL);
    }
done:
    free(fc), free(fm), free(bc), free(bm);
}

/*
 * ZB-H1 (Qi et al. 2024, section 2.1): 1F1B's order with the backward split into B (input
 * gradient) and W (weight gradient). Rank r keeps its first r W's back (the k-th B after the
 * warm-up is followed by the oldest pending W only when k >= r), so every rank holds p micro-batches
 * in flight like rank 0 of 1F1B, the B's of later ranks start earlier, and the held-back W's fill
 * the tail: the bubble drops from (p-1)(F+B+W) to (p-1)(F+B-W).
 */
void hp__sched_gen_zb_h1(hp__sched_lists *l, int p, int m) {
    for (int r = 0; r < p; r++) {
        int warm = imin(p - 1 - r, m), wnext = 0, k = 0;
        for (int i = 0; i < warm; i++) hp__sched_push(l, r, HP_SCHED_OP_F, r, i, 0);
        for (int i = 0; i < m; i++) {
            if (warm + i < m) hp__sched_push(l, r, HP_SCHED_OP_F, r, warm + i, 0);
            hp__sched_push(l, r, HP_SCHED_OP_B, r, i, 0);
            if (k++ >= r) hp__sched_push(l, r, HP_SCHED_OP_W, r, wnext++, 0);
        }
        while (wnext < m) hp__sched_push(l, r, HP_SCHED_OP_W, r, wnext++, 0);
    }
}

/*
 * ZB-V (Qi et al. 2024, section 6): V placement, rank r holds stage r (chunk 0) and stage 2p-1-r
 * (chunk 1). For n >= 2p-1 micro-batches, rank r runs
 *   warm-up: 2(p-r)-1 forwards of chunk 0; r pairs (F chunk 1, F chunk 0); p-r triples
 *            (F, B, W of chunk 1);
 *   steady:  (F chunk 0 while any is left, B W chunk 0, F B W chunk 1) until every forward ran;
 *   cool-down: r pairs (B chunk 0, B chunk 1) with their W's held back; p-r pairs (B chunk 0,
 *            W chunk 0); then the held-back W's of chunk 1 and of chunk 0.
 * With F = B = W every rank then works without a gap from its first action to its last, and
 * 2p chunk activations (p full stages, as 1F1B's rank 0) are in flight. For m < 2p-1 the order
 * is built for 2p-1 micro-batches and the extra ones removed.
 */
void hp__sched_gen_zb_v(hp__sched_lists *l, int p, int m) {
    int n = imax(2 * p - 1, m);
    hp__sched_lists full;
    l->st = hp__sched_lists_init(&full, p);
    if (l->st != HP_STATUS_OK) return;
    for (int r = 0; r < p; r++) {
        int s0 = r, s1 = 2 * p - 1 - r, f0 = 0, f1 = 0, b0 = 0, b1 = 0;
        for (int i = 0; i < 2 * (p - r) - 1; i++) hp__sched_push(&full, r, HP_SCHED_OP_F, s0, f0++, 0);
        for (int i = 0; i < r; i++) {
            hp__sched_push(&full, r, HP_SCHED_OP_F, s1, f1++, 0);
            hp__sched_push(&full, r, HP_SCHED_OP_F, s0, f0++, 0);
        }
        for (int i = 0; i < p - r; i++) {
            hp__sched_push(&full, r, HP_SCHED_OP_F, s1, f1++, 0);
            hp__sched_push(&full, r, HP_SCHED_OP_B, s1, b1, 0);
            hp__sched_push(&full, r, HP_SCHED_OP_W, s1, b1++, 0);
        }
        while (f1 < f0 || f0 < n) {
            if (f0 < n) hp__sched_push(&full, r, HP_SCHED_OP_F, s0, f0++, 0);
            hp__sched_push(&full, r, HP_SCHED_OP_B, s0, b0, 0);
            hp__sched_push(&full, r, HP_SCHED_OP_W, s0, b0++, 0);
            hp__sched_push(&full, r, HP_SCHED_OP_F, s1, f1++, 0);
            hp__sched_push(&full, r, HP_SCHED_OP_B, s1, b1, 0);
            hp__sched_push(&full, r, HP_SCHED_OP_W, s1, b1++, 0);
        }
        int w0 = b0, w1 = b1;
        for (int i = 0; i < r; i++) {
            hp__sched_push(&full, r, HP_SCHED_OP_B, s0, b0++, 0);
            hp__sched_push(&full, r, HP_SCHED_OP_B, s1, b1++, 0);
        }
        for (int i = 0; i < p - r; i++) {
            hp__sched_push(&full, r, HP_SCHED_OP_B, s0, b0++, 0);
            hp__sched_push(&full, r, HP_SCHED_OP_W, s0, w0++, 0);
        }
        while (w1 < b1) hp__sched_push(&full, r, HP_SCHED_OP_W, s1, w1++, 0);
        while (w0 < b0) hp__sched_push(&full, r, HP_SCHED_OP_W, s0, w0++, 0);
        HP_ASSERT(f0 == n && b0 == n && w0 == n && f1 == n && b1 == n && w1 == n);
    }
    if (full.st == HP_STATUS_OK) hp__sched_lists_truncate(&full, m);
    l->st = full.st;
    /* Hand the lists over. */
    hp__sched_lists tmp = *l;
    *l = full;
    hp__sched_lists_free(&tmp);
}

/* DualPipeV state of one rank: per-chunk forward and backward counters and the FIFO of split B's
 * whose W is still to run. */
typedef struct dpv_rank {
    hp__sched_lists *l;
    int r, stage[2], f[2], b[2];
    int *wq_chunk, *wq_mb, wq_head, wq_tail;
} dpv_rank;

static void dpv_f(dpv_rank *d, int c, unsigned flags) {
    hp__sched_push(d->l, d->r, HP_SCHED_OP_F, d->stage[c], d->f[c]++, flags);
}

static void dpv_b(dpv_rank *d, int c, bool split) {
    int mb = d->b[c]++;
    hp__sched_push(d->l, d->r, HP_SCHED_OP_B, d->stage[c], mb, split ? 0 : FULL);
    if (split) {
        d->wq_chunk[d->wq_tail] = c;
        d->wq_mb[d->wq_tail++] = mb;
    }
}

static void dpv_w(dpv_rank *d) {
    if (d->wq_head == d->wq_tail) return;
    int c = d->wq_chunk[d->wq_head], mb = d->wq_mb[d->wq_head++];
    hp__sched_push(d->l, d->r, HP_SCHED_OP_W, d->stage[c], mb, 0);
}

/* An overlapped pair: F of chunk fc with a full B of chunk bc. */
static void dpv_fb(dpv_rank *d, int fc, int bc) {
    dpv_f(d, fc, HP_SCHED_FLAG_OVERLAP);
    dpv_b(d, bc, false);
}

/*
 * DualPipeV (DeepSeek-V3 report; the V variant of DeepSeek's DualPipe, as PyTorch's
 * ScheduleDualPipeV): V placement, chunk 0 = stage r, chunk 1 = stage 2p-1-r. For n >= 2p
 * micro-batches rank r runs eight phases:
 *   1. 2(p-r-1) forwards of chunk 0;            2. r+1 pairs (F chunk 0, F chunk 1);
 *   3. p-r-1 times: split B chunk 1, a pending W, F chunk 1;
 *   4. n-2p+r+1 times: overlapped (F chunk 0 & B chunk 1) (the first on rank p-1 not overlapped,
 *      to shorten the bubble), overlapped (F chunk 1 & B chunk 0);
 *   5. p-r-1 times: full B chunk 1, overlapped (F chunk 1 & B chunk 0);
 *   6. r+1 pairs (B chunk 1, B chunk 0), switching to split B's halfway (before chunk 1's B on odd
 *      ranks, before chunk 0's on even ones);
 *   7. p-r-1 times: a pending W, B chunk 0 (split);  8. the pending W's.
 * For m < 2p the order is built for 2p micro-batches and the extra ones removed.
 */
void hp__sched_gen_dualpipe_v(hp__sched_lists *l, int p, int m) {
    int n = imax(2 * p, m);
    hp__sched_lists full;
    l->st = hp__sched_lists_init(&full, p);
    if (l->st != HP_STATUS_OK) return;
    int *wq = malloc((size_t)4 * n * sizeof *wq);
    if (!wq) {
        full.st = hp_error(HP_STATUS_OUT_OF_MEMORY, "DualPipeV weight queue of %d entries", 2 * n);
        goto done;
    }
    for (int r = 0; r < p; r++) {
        dpv_rank d = {.l = &full, .r = r, .stage = {r, 2 * p - 1 - r}, .wq_chunk = wq, .wq_mb = wq + 2 * n};
        for (int i = 0; i < 2 * (p - r - 1); i++) dpv_f(&d, 0, 0);
        for (int i = 0; i < r + 1; i++) {
            dpv_f(&d, 0, 0);
            dpv_f(&d, 1, 0);
        }
        for (int i = 0; i < p - r - 1; i++) {
            dpv_b(&d, 1, true);
            dpv_w(&d);
            dpv_f(&d, 1, 0);
        }
        for (int i = 0; i < n - 2 * p + r + 1; i++) {
            if (i == 0 && r == p - 1) {
                dpv_f(&d, 0, 0);
                dpv_b(&d, 1, false);
            } else {
                dpv_fb(&d, 0, 1);
            }
            dpv_fb(&d, 1, 0);
        }
        for (int i = 0; i < p - r - 1; i++) {
            dpv_b(&d, 1, false);
            dpv_fb(&d, 1, 0);
        }
        bool zb = false;
        int half = (r + 1) / 2;
        for (int i = 0; i < r + 1; i++) {
            if (i == half && r % 2 == 1) zb = true;
            dpv_b(&d, 1, zb);
            if (i == half && r % 2 == 0) zb = true;
            dpv_b(&d, 0, zb);
        }
        for (int i = 0; i < p - r - 1; i++) {
            dpv_w(&d);
            dpv_b(&d, 0, zb);
        }
        while (d.wq_head < d.wq_tail) dpv_w(&d);
        HP_ASSERT(d.f[0] == n && d.f[1] == n && d.b[0] == n && d.b[1] == n);
    }
    if (full.st == HP_STATUS_OK) hp__sched_lists_truncate(&full, m);
done:
    free(wq);
    l->st = full.st;
    hp__sched_lists tmp = *l;
    *l = full;
    hp__sched_lists_free(&tmp);
}
