/*
 * Pipeline schedules (hp/schedule.h): each generator against hand-checked lists, the validator on
 * broken lists (deadlock, memory budget, missing or misordered actions), every schedule valid over
 * a grid of p and m, peak in-flight activations and simulated bubbles against their formulas, the
 * text table rendered and parsed back.
 */
#include "hp/schedule.h"
#include "testutil.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

/* ---------------------------------------------------------------- helpers */

/* Rank r's compute actions as tokens ("0F3&3BW1" for an overlapped pair), with the stage prefix
 * when `prefix`. */
static const char *compute_str(const hp_schedule *s, int r, bool prefix) {
    static char buf[8192];
    size_t n = 0;
    buf[0] = '\0';
    for (int i = 0; i < s->n_actions[r]; i++) {
        const hp_sched_action *a = &s->actions[r][i];
        if (a->op > HP_SCHED_OP_W) continue;
        const char *op = a->op == HP_SCHED_OP_F ? "F"
                         : a->op == HP_SCHED_OP_W ? "W"
                         : (a->flags & HP_SCHED_FLAG_FULL_BACKWARD) ? "BW"
                                                                     : "B";
        bool joined = n > 0 && buf[n - 1] == '&';
        char pre[16] = "";
        if (prefix) snprintf(pre, sizeof pre, "%d", (int)a->stage);
        n += (size_t)snprintf(buf + n, sizeof buf - n, "%s%s%s%d%s", n && !joined ? " " : "", pre, op, (int)a->mb,
                              (a->flags & HP_SCHED_FLAG_OVERLAP) ? "&" : "");
    }
    return buf;
}

/* Rank r's whole list, sends and receives as SF/RF/SB/RB with the micro-batch and the peer. */
static const char *full_str(const hp_schedule *s, int r) {
    static char buf[8192];
    static const char *names[] = {"F", "B", "W", "SF", "RF", "SB", "RB"};
    size_t n = 0;
    buf[0] = '\0';
    for (int i = 0; i < s->n_actions[r]; i++) {
        const hp_sched_action *a = &s->actions[r][i];
        const char *op = a->op == HP_SCHED_OP_B && (a->flags & HP_SCHED_FLAG_FULL_BACKWARD) ? "BW" : names[a->op];
        n += (size_t)snprintf(buf + n, sizeof buf - n, "%s%s%d", n ? " " : "", op, (int)a->mb);
        if (a->peer >= 0) n += (size_t)snprintf(buf + n, sizeof buf - n, "@%d", (int)a->peer);
    }
    return buf;
}

static void build(hp_sched_kind k, int p, int m, int v, hp_schedule *s) { assert_ok(hp_schedule_build(k, p, m, v, s)); }

static void expect_error(hp_status got, hp_status want, const char *needle) {
    if (got != want)
        fail_msg("expected %s, got %s: %s", hp_status_str(want), hp_status_str(got), hp_error_message());
    hp_test_assert_error_contains(needle);
}

static const hp_sched_kind BUILT[] = {HP_SCHED_KIND_GPIPE, HP_SCHED_KIND_1F1B, HP_SCHED_KIND_INTERLEAVED_1F1B,
                                      HP_SCHED_KIND_ZB_H1, HP_SCHED_KIND_ZB_V, HP_SCHED_KIND_DUALPIPE_V};

/* ---------------------------------------------------------------- hand-checked lists */

static void test_1f1b_p2_m4_exact(void **state) {
    (void)state;
    hp_schedule s;
    build(HP_SCHED_KIND_1F1B, 2, 4, 0, &s);
    assert_int_equal(s.n_stages, 2);
    assert_false(s.split_backward);
    /* Rank 0: one warm-up forward, then F/B pairs; every activation goes to rank 1, every gradient
     * comes back from it. Rank 1 (the last stage) computes the loss, so each F is followed by B. */
    assert_string_equal(full_str(&s, 0), "F0 SF0@1 F1 SF1@1 RB0@1 BW0 F2 SF2@1 RB1@1 BW1 F3 SF3@1 RB2@1 BW2 RB3@1 BW3");
    assert_string_equal(full_str(&s, 1),
                        "RF0@0 F0 BW0 SB0@0 RF1@0 F1 BW1 SB1@0 RF2@0 F2 BW2 SB2@0 RF3@0 F3 BW3 SB3@0");
    assert_ok(hp_schedule_validate(&s, NULL, NULL, NULL));
    hp_schedule_free(&s);
    hp_schedule_free(&s); /* freeing twice is allowed */
}

static void test_gpipe_exact(void **state) {
    (void)state;
    hp_schedule s;
    build(HP_SCHED_KIND_GPIPE, 3, 3, 0, &s);
    for (int r = 0; r < 3; r++) assert_string_equal(compute_str(&s, r, false), "F0 F1 F2 BW0 BW1 BW2");
    assert_string_equal(full_str(&s, 1), "RF0@0 F0 SF0@2 RF1@0 F1 SF1@2 RF2@0 F2 SF2@2 RB0@2 BW0 SB0@0 RB1@2 BW1 "
                                         "SB1@0 RB2@2 BW2 SB2@0");
    hp_schedule_free(&s);
}

static void test_interleaved_exact(void **state) {
    (void)state;
    hp_schedule s;
    /* p=2, m=4, v=2: rounds of 2 micro-batches; rank 0 holds stages 0 and 2, rank 1 stages 1 and 3.
     * Rank 0 warms up with (v-1)*2 + 2*(p-1) = 4 forwards, rank 1 with 2. */
    build(HP_SCHED_KIND_INTERLEAVED_1F1B, 2, 4, 2, &s);
    assert_int_equal(s.v, 2);
    assert_int_equal(s.stage_rank[2], 0);
    assert_int_equal(s.stage_chunk[2], 1);
    assert_string_equal(compute_str(&s, 0, true), "0F0 0F1 2F0 2F1 0F2 2BW0 0F3 2BW1 2F2 0BW0 2F3 0BW1 2BW2 2BW3 0BW2 0BW3");
    assert_string_equal(compute_str(&s, 1, true), "1F0 1F1 3F0 3BW0 3F1 3BW1 1F2 1BW0 1F3 1BW1 3F2 3BW2 3F3 3BW3 1BW2 1BW3");
    /* The chunk hand-over from the last rank back to rank 0 is a message too. */
    const hp_sched_action *a = &s.actions[0][0];
    int i = 0;
    while (!(s.actions[0][i].op == HP_SCHED_OP_RECV_F && s.actions[0][i].stage == 2)) i++;
    a = &s.actions[0][i];
    assert_int_equal(a->peer, 1);
    assert_int_equal(a->chunk, 1);
    assert_int_equal(a->mb, 0);
    hp_schedule_free(&s);
}

static void test_zb_h1_exact(void **state) {
    (void)state;
    hp_schedule s;
    /* Rank r holds back its first r W's; the held-back W's fill the tail. */
    build(HP_SCHED_KIND_ZB_H1, 3, 4, 0, &s);
    assert_true(s.split_backward);
    assert_string_equal(compute_str(&s, 0, false), "F0 F1 F2 B0 W0 F3 B1 W1 B2 W2 B3 W3");
    assert_string_equal(compute_str(&s, 1, false), "F0 F1 B0 F2 B1 W0 F3 B2 W1 B3 W2 W3");
    assert_string_equal(compute_str(&s, 2, false), "F0 B0 F1 B1 F2 B2 W0 F3 B3 W1 W2 W3");
    /* A split B sends the input gradient; W sends nothing. */
    assert_string_equal(full_str(&s, 2), "RF0@1 F0 B0 SB0@1 RF1@1 F1 B1 SB1@1 RF2@1 F2 B2 SB2@1 W0 RF3@1 F3 B3 SB3@1 "
                                         "W1 W2 W3");
    hp_schedule_free(&s);
}

static void test_zb_v_exact(void **state) {
    (void)state;
    hp_schedule s;
    /* V placement: rank 0 holds stages 0 and 3, rank 1 stages 1 and 2 (the turn is local). */
    build(HP_SCHED_KIND_ZB_V, 2, 4, 0, &s);
    assert_int_equal(s.n_stages, 4);
    assert_int_equal(s.stage_rank[3], 0);
    assert_int_equal(s.stage_rank[2], 1);
    assert_string_equal(compute_str(&s, 0, true), "0F0 0F1 0F2 3F0 3B0 3W0 3F1 3B1 3W1 0F3 0B0 0W0 3F2 3B2 3W2 0B1 "
                                                  "0W1 3F3 3B3 3W3 0B2 0W2 0B3 0W3");
    assert_string_equal(compute_str(&s, 1, true), "1F0 2F0 1F1 2F1 2B0 2W0 1F2 1B0 1W0 2F2 2B1 2W1 1F3 1B1 1W1 2F3 "
                                                  "2B2 2W2 1B2 2B3 1B3 1W2 2W3 1W3");
    /* Rank 1 receives stage 1's input from rank 0 and hands stage 1 -> 2 over locally. */
    int sends_f = 0;
    for (int i = 0; i < s.n_actions[1]; i++) sends_f += s.actions[1][i].op == HP_SCHED_OP_SEND_F;
    assert_int_equal(sends_f, 4); /* stage 2 -> 3 only */
    hp_schedule_free(&s);
}

static void test_dualpipe_v_exact(void **state) {
    (void)state;
    hp_schedule s;
    build(HP_SCHED_KIND_DUALPIPE_V, 2, 4, 0, &s);
    assert_true(s.split_backward);
    assert_string_equal(compute_str(&s, 0, true),
                        "0F0 0F1 0F2 3F0 3B0 3W0 3F1 0F3&3BW1 3F2&0BW0 3BW2 3F3&0BW1 3BW3 0B2 0W2 0B3 0W3");
    assert_string_equal(compute_str(&s, 1, true),
                        "1F0 2F0 1F1 2F1 1F2 2BW0 2F2&1BW0 1F3&2BW1 2F3&1BW1 2BW2 1BW2 2B3 1B3 2W3 1W3");
    hp_schedule_free(&s);
}

static void test_build_errors(void **state) {
    (void)state;
    hp_schedule s;
    expect_error(hp_schedule_build(HP_SCHED_KIND_1F1B, 0, 4, 0, &s), HP_STATUS_INVALID_ARGUMENT, "p=0");
    expect_error(hp_schedule_build(HP_SCHED_KIND_1F1B, 2, 0, 0, &s), HP_STATUS_INVALID_ARGUMENT, "m=0");
    expect_error(hp_schedule_build(HP_SCHED_KIND_ZB_V, 2, 4, 3, &s), HP_STATUS_INVALID_ARGUMENT, "v=3");
    expect_error(hp_schedule_build(HP_SCHED_KIND_GPIPE, 2, 4, 2, &s), HP_STATUS_INVALID_ARGUMENT, "interleaved");
    expect_error(hp_schedule_build(HP_SCHED_KIND_USER, 2, 4, 0, &s), HP_STATUS_INVALID_ARGUMENT, "parsed");
    expect_error(hp_schedule_build(HP_SCHED_KIND_INTERLEAVED_1F1B, 2, 4, -1, &s), HP_STATUS_INVALID_ARGUMENT, "v=-1");
    hp_sched_kind k;
    assert_ok(hp_sched_kind_parse("ZB-V", &k));
    assert_int_equal(k, HP_SCHED_KIND_ZB_V);
    assert_ok(hp_sched_kind_parse("interleaved", &k));
    assert_int_equal(k, HP_SCHED_KIND_INTERLEAVED_1F1B);
    assert_ok(hp_sched_kind_parse("DualPipeV", &k));
    assert_int_equal(k, HP_SCHED_KIND_DUALPIPE_V);
    expect_error(hp_sched_kind_parse("zb-h3", &k), HP_STATUS_INVALID_ARGUMENT, "'zb-h3'");
    for (int i = 0; i < HP_SCHED_KIND_COUNT; i++) {
        assert_ok(hp_sched_kind_parse(hp_sched_kind_name((hp_sched_kind)i), &k));
        assert_int_equal(k, i);
    }
}

/* ---------------------------------------------------------------- validator */

static void test_validator_rejects_deadlock(void **state) {
    (void)state;
    /* Rank 0 waits for the gradient of micro-batch 0 before it sends micro-batch 1's activation,
     * but rank 1 runs both forwards before its first backward: a cycle. */
    const char *text = "rank 0: F0 BW0 F1 BW1\n"
                       "rank 1: F0 F1 BW0 BW1\n";
    hp_schedule s;
    assert_ok(hp_schedule_parse(text, "cycle.txt", &s));
    hp_status st = hp_schedule_validate(&s, NULL, NULL, NULL);
    expect_error(st, HP_STATUS_INVALID_ARGUMENT, "deadlock");
    /* Rank 0 list: F0 SF0 RB0 ... -> blocked at action 2 on the gradient from rank 1. */
    hp_test_assert_error_contains("rank 0 blocks at action 2 (RECV_B stage 0 mb 0 from rank 1)");
    hp_test_assert_error_contains("waiting for rank 1's SEND_B stage 1 mb 0");
    hp_test_assert_error_contains("rank 1 blocks at action 2 (RECV_F stage 1 mb 1 from rank 0)");
    /* The simulator refuses the same list with the same message. */
    hp_sched_timeline tl;
    expect_error(hp_schedule_simulate(&s, NULL, &tl), HP_STATUS_INVALID_ARGUMENT, "deadlock");
    hp_schedule_free(&s);

    /* A hand-edited list: rank 0 (F0 SF0 F1 SF1 RB0 BW0 RB1 BW1) moves its first send after the
     * receive of the gradient that send leads to, so rank 1 waits for activation 0 forever. */
    build(HP_SCHED_KIND_1F1B, 2, 2, 0, &s);
    hp_sched_action *a = s.actions[0];
    assert_int_equal(a[1].op, HP_SCHED_OP_SEND_F);
    assert_int_equal(a[4].op, HP_SCHED_OP_RECV_B);
    hp_sched_action sf0 = a[1];
    memmove(&a[1], &a[2], 3 * sizeof *a); /* F0 F1 SF1 RB0 SF0 ... */
    a[4] = sf0;
    expect_error(hp_schedule_validate(&s, NULL, NULL, NULL), HP_STATUS_INVALID_ARGUMENT,
                 "rank 0 blocks at action 3 (RECV_B stage 0 mb 0 from rank 1)");
    hp_test_assert_error_contains("rank 1 blocks at action 0 (RECV_F stage 1 mb 0 from rank 0)");
    hp_schedule_free(&s);
}

static void test_validator_rendezvous(void **state) {
    (void)state;
    /* With synchronous sends (MPI_Ssend) 1F1B's send-after-compute placement deadlocks: rank 0
     * sends activation 1 while rank 1 sends gradient 0, each waiting for the other's receive. With
     * eager sends (the runtime's queue) it runs. */
    hp_schedule s;
    build(HP_SCHED_KIND_1F1B, 2, 4, 0, &s);
    hp_sched_check_opts o = HP_SCHED_CHECK_OPTS_INIT;
    assert_ok(hp_schedule_validate(&s, &o, NULL, NULL));
    o.p2p = HP_SCHED_P2P_RENDEZVOUS;
    expect_error(hp_schedule_validate(&s, &o, NULL, NULL), HP_STATUS_INVALID_ARGUMENT, "rendezvous");
    hp_test_assert_error_contains("rank 0 blocks at action 3 (SEND_F stage 0 mb 1 to rank 1)");
    hp_test_assert_error_contains("rank 1 blocks at action 3 (SEND_B stage 1 mb 0 to rank 0)");
    hp_schedule_free(&s);
    /* GPipe's order is safe under both. */
    build(HP_SCHED_KIND_GPIPE, 3, 4, 0, &s);
    assert_ok(hp_schedule_validate(&s, &o, NULL, NULL));
    hp_schedule_free(&s);
}

static void test_validator_memory_budget(void **state) {
    (void)state;
    hp_schedule s;
    build(HP_SCHED_KIND_1F1B, 4, 8, 0, &s);
    int peak[4];
    double bytes[4];
    hp_sched_check_opts o = HP_SCHED_CHECK_OPTS_INIT;
    o.max_inflight = 4;
    assert_ok(hp_schedule_validate(&s, &o, peak, NULL));
    for (int r = 0; r < 4; r++) assert_int_equal(peak[r], 4 - r);
    o.max_inflight = 3;
    expect_error(hp_schedule_validate(&s, &o, peak, NULL), HP_STATUS_OUT_OF_MEMORY,
                 "rank 0 holds 4 micro-batch activations in flight after action 6 (F stage 0 mb 3), over the budget of 3");
    assert_int_equal(peak[3], 1); /* filled for every rank also on failure */

    /* Bytes: stage 0's activations are 1000 bytes, the others 250. */
    double act[4] = {1000, 250, 250, 250};
    o = (hp_sched_check_opts)HP_SCHED_CHECK_OPTS_INIT;
    o.act_bytes = act;
    assert_ok(hp_schedule_validate(&s, &o, NULL, bytes));
    assert_close(bytes[0], 4000, 0, 1e-9);
    assert_close(bytes[1], 750, 0, 1e-9);
    o.max_bytes = 3500;
    expect_error(hp_schedule_validate(&s, &o, NULL, NULL), HP_STATUS_OUT_OF_MEMORY,
                 "rank 0 holds 4000 bytes of activations");
    hp_test_assert_error_contains("budget of 3500 bytes");
    double caps[4] = {4000, 700, 1e9, 1e9};
    o.max_bytes_rank = caps;
    expect_error(hp_schedule_validate(&s, &o, NULL, NULL), HP_STATUS_OUT_OF_MEMORY, "rank 1 holds 750 bytes");
    hp_schedule_free(&s);

    /* ZB-H1 keeps p micro-batches in flight on every rank, but only the W part (w_fraction) of the
     * held-back ones: with w_fraction 0.25 the last rank peaks at 1 + 3 * 0.25 stage activations,
     * below rank 0's p, so its peak memory is 1F1B's (Qi et al. 2.1). */
    build(HP_SCHED_KIND_ZB_H1, 4, 8, 0, &s);
    double unit[4] = {1, 1, 1, 1};
    o = (hp_sched_check_opts)HP_SCHED_CHECK_OPTS_INIT;
    o.act_bytes = unit;
    o.w_fraction = 0.25;
    assert_ok(hp_schedule_validate(&s, &o, peak, bytes));
    for (int r = 0; r < 4; r++) assert_int_equal(peak[r], 4);
    assert_close(bytes[0], 4.0, 0, 1e-12);
    assert_close(bytes[3], 1.75, 0, 1e-12);
    o.w_fraction = 1.5;
    expect_error(hp_schedule_validate(&s, &o, NULL, NULL), HP_STATUS_INVALID_ARGUMENT, "w_fraction 1.5");
    hp_schedule_free(&s);
}

static void test_validator_structure(void **state) {
    (void)state;
    hp_schedule s;
    /* A missing W after a split B. */
    assert_ok(hp_schedule_parse("rank 0: F0 F1 B0 B1 W0\n", "t", &s));
    expect_error(hp_schedule_validate(&s, NULL, NULL, NULL), HP_STATUS_INVALID_ARGUMENT,
                 "stage 0 (rank 0) micro-batch 1 has a split B (action 3) and no W");
    hp_schedule_free(&s);
    /* A W after a full backward. */
    assert_ok(hp_schedule_parse("rank 0: F0 BW0 W0\n", "t", &s));
    expect_error(hp_schedule_validate(&s, NULL, NULL, NULL), HP_STATUS_INVALID_ARGUMENT,
                 "rank 0 action 2 (W stage 0 mb 0): its B (action 1) is a full backward");
    hp_schedule_free(&s);
    /* A repeated F. */
    assert_ok(hp_schedule_parse("rank 0: F0 F0 BW0\n", "t", &s));
    expect_error(hp_schedule_validate(&s, NULL, NULL, NULL), HP_STATUS_INVALID_ARGUMENT,
                 "rank 0 action 1 (F stage 0 mb 0) repeats action 0");
    hp_schedule_free(&s);
    /* A micro-batch the header counts but no row runs. */
    assert_ok(hp_schedule_parse("schedule x p=1 m=2\nrank 0: F0 BW0\n", "t", &s));
    expect_error(hp_schedule_validate(&s, NULL, NULL, NULL), HP_STATUS_INVALID_ARGUMENT,
                 "stage 0 (rank 0, chunk 0) micro-batch 1 has no F");
    hp_schedule_free(&s);
    /* B before F, W before B, and a local hand-over out of order (stage 1 before stage 0). */
    assert_ok(hp_schedule_parse("rank 0: BW0 F0\n", "t", &s));
    expect_error(hp_schedule_validate(&s, NULL, NULL, NULL), HP_STATUS_INVALID_ARGUMENT,
                 "rank 0 action 0 (B stage 0 mb 0) comes before its F (action 1)");
    hp_schedule_free(&s);
    assert_ok(hp_schedule_parse("rank 0: F0 W0 B0\n", "t", &s));
    expect_error(hp_schedule_validate(&s, NULL, NULL, NULL), HP_STATUS_INVALID_ARGUMENT,
                 "rank 0 action 1 (W stage 0 mb 0) comes before its B (action 2)");
    hp_schedule_free(&s);
    assert_ok(hp_schedule_parse("rank 0: 1F0 0F0 1BW0 0BW0\n", "t", &s));
    expect_error(hp_schedule_validate(&s, NULL, NULL, NULL), HP_STATUS_INVALID_ARGUMENT,
                 "rank 0 action 0 (F stage 1 mb 0) comes before F of the previous stage (action 1)");
    hp_schedule_free(&s);
    assert_ok(hp_schedule_parse("rank 0: 0F0 1F0 0BW0 1BW0\n", "t", &s));
    expect_error(hp_schedule_validate(&s, NULL, NULL, NULL), HP_STATUS_INVALID_ARGUMENT,
                 "rank 0 action 2 (B stage 0 mb 0) comes before B of the next stage (action 3)");
    hp_schedule_free(&s);

    /* A hand-built list: a missing receive, a wrong peer, a send before its F. */
    build(HP_SCHED_KIND_1F1B, 2, 1, 0, &s);
    /* Rank 1: RF0 F0 BW0 SB0. */
    s.actions[1][0].peer = 1;
    expect_error(hp_schedule_validate(&s, NULL, NULL, NULL), HP_STATUS_INVALID_ARGUMENT,
                 "rank 1 action 0 (RECV_F stage 1 mb 0): peer 1, but stage 0 is on rank 0");
    s.actions[1][0].peer = 0;
    s.actions[1][0].mb = 3;
    expect_error(hp_schedule_validate(&s, NULL, NULL, NULL), HP_STATUS_INVALID_ARGUMENT, "micro-batch 3 outside 0..0");
    s.actions[1][0].mb = 0;
    s.actions[1][0].op = HP_SCHED_OP_RECV_B; /* a receive of a gradient from a stage that does not exist */
    expect_error(hp_schedule_validate(&s, NULL, NULL, NULL), HP_STATUS_INVALID_ARGUMENT, "there is no stage 2");
    s.actions[1][0].op = HP_SCHED_OP_RECV_F;
    /* Rank 0: F0 SF0 RB0 BW0 -> swap F0 and SF0. */
    hp_sched_action t = s.actions[0][0];
    s.actions[0][0] = s.actions[0][1];
    s.actions[0][1] = t;
    expect_error(hp_schedule_validate(&s, NULL, NULL, NULL), HP_STATUS_INVALID_ARGUMENT,
                 "rank 0 action 0 (SEND_F stage 0 mb 0) comes before its F (action 1)");
    s.actions[0][1] = s.actions[0][0];
    s.actions[0][0] = t;
    s.n_actions[0] = 1; /* drop SF0 RB0 BW0 */
    expect_error(hp_schedule_validate(&s, NULL, NULL, NULL), HP_STATUS_INVALID_ARGUMENT,
                 "stage 0 (rank 0, chunk 0) micro-batch 0 has no B");
    s.n_actions[0] = 4;
    s.actions[0][3].flags |= HP_SCHED_FLAG_OVERLAP;
    expect_error(hp_schedule_validate(&s, NULL, NULL, NULL), HP_STATUS_INVALID_ARGUMENT, "the overlap flag needs an F");
    s.actions[0][3].flags = HP_SCHED_FLAG_FULL_BACKWARD;
    assert_ok(hp_schedule_validate(&s, NULL, NULL, NULL));
    hp_schedule_free(&s);
}

/* ---------------------------------------------------------------- every schedule over a grid */

static void test_grid_valid_and_peaks(void **state) {
    (void)state;
    static const int P[] = {1, 2, 3, 4, 8};
    int checked = 0;
    for (size_t k = 0; k < sizeof BUILT / sizeof BUILT[0]; k++)
        for (size_t pi = 0; pi < sizeof P / sizeof P[0]; pi++)
            for (int m = 1; m <= 12; m++)
                for (int v = 0; v <= (BUILT[k] == HP_SCHED_KIND_INTERLEAVED_1F1B ? 4 : 0); v++) {
                    if (BUILT[k] == HP_SCHED_KIND_INTERLEAVED_1F1B && v == 0) continue;
                    int p = P[pi];
                    hp_schedule s;
                    hp_status st = hp_schedule_build(BUILT[k], p, m, v, &s);
                    if (st != HP_STATUS_OK)
                        fail_msg("%s p=%d m=%d v=%d: %s", hp_sched_kind_name(BUILT[k]), p, m, v, hp_error_message());
                    int peak[8];
                    st = hp_schedule_validate(&s, NULL, peak, NULL);
                    if (st != HP_STATUS_OK)
                        fail_msg("%s p=%d m=%d v=%d: %s", hp_sched_kind_name(BUILT[k]), p, m, v, hp_error_message());
                    /* F and B for every (stage, mb), W for every split B (the validator checked which). */
                    int w = 0;
                    for (int r = 0; r < p; r++)
                        for (int i = 0; i < s.n_actions[r]; i++) w += s.actions[r][i].op == HP_SCHED_OP_W;
                    assert_int_equal(hp_schedule_count_compute(&s, -1), 2 * s.n_stages * m + w);
                    assert_int_equal(w > 0, s.split_backward);
                    for (int r = 0; r < p; r++) {
                        int f = hp_schedule_peak_formula(BUILT[k], p, m, v, r);
                        if (peak[r] != f)
                            fail_msg("%s p=%d m=%d v=%d rank %d: peak %d, formula %d", hp_sched_kind_name(BUILT[k]), p,
                                     m, v, r, peak[r], f);
                    }
                    hp_schedule_free(&s);
                    checked++;
                }
    assert_int_equal(checked, 5 * 12 * (5 + 4));
}

/* ---------------------------------------------------------------- simulation */

static void sim(hp_sched_kind k, int p, int m, int v, double f, double b, double w, hp_sched_timeline *tl) {
    hp_schedule s;
    build(k, p, m, v, &s);
    hp_sched_costs c = HP_SCHED_COSTS_INIT;
    c.f = f, c.b = b, c.w = w;
    assert_ok(hp_schedule_simulate(&s, &c, tl));
    hp_schedule_free(&s);
}

static void test_simulated_timeline(void **state) {
    (void)state;
    hp_schedule s;
    build(HP_SCHED_KIND_1F1B, 2, 1, 0, &s);
    /* F0 on rank 0 [0,1], 0.5 s on the wire, F0 on rank 1 [1.5,2.5], the full backward [2.5,4.5],
     * back at 5.0, rank 0's backward [5,7]. */
    hp_sched_costs c = HP_SCHED_COSTS_INIT;
    c.p2p_latency = 0.5;
    hp_sched_timeline tl;
    assert_ok(hp_schedule_simulate(&s, &c, &tl));
    /* Rank 1: RF0 F0 BW0 SB0. */
    assert_close(tl.end[1][0], 1.5, 0, 1e-12);
    assert_close(tl.start[1][1], 1.5, 0, 1e-12);
    assert_close(tl.end[1][2], 4.5, 0, 1e-12);
    /* Rank 0: F0 SF0 RB0 BW0. */
    assert_close(tl.start[0][2], 1.0, 0, 1e-12);
    assert_close(tl.end[0][2], 5.0, 0, 1e-12);
    assert_close(tl.end[0][3], 7.0, 0, 1e-12);
    assert_close(tl.step_time, 7.0, 0, 1e-12);
    assert_close(tl.busy[0], 3.0, 0, 1e-12);
    assert_close(tl.first_start[1], 1.5, 0, 1e-12);
    assert_close(tl.bubble, 1.0 - 6.0 / 14.0, 0, 1e-12);
    /* Per-stage times override the scalars. */
    hp_sched_timeline_free(&tl);
    double fs[2] = {2, 1};
    c = (hp_sched_costs)HP_SCHED_COSTS_INIT;
    c.f_stage = fs;
    assert_ok(hp_schedule_simulate(&s, &c, &tl));
    assert_close(tl.step_time, 2 + 1 + 2 + 2, 0, 1e-12);
    hp_sched_timeline_free(&tl);
    c.p2p_latency = -1;
    expect_error(hp_schedule_simulate(&s, &c, &tl), HP_STATUS_INVALID_ARGUMENT, "p2p_latency = -1");
    c.p2p_latency = 0;
    fs[1] = NAN;
    expect_error(hp_schedule_simulate(&s, &c, &tl), HP_STATUS_INVALID_ARGUMENT, "f_stage[1] = nan");
    hp_schedule_free(&s);
    hp_sched_timeline_free(&tl);
}

/* GPipe and 1F1B match (p-1)/(m+p-1) exactly at any m and any F, B, W; interleaved 1F1B matches
 * (p-1)/(v m+p-1) at F = B = W for m >= p (and its m < p form below that). */
static void test_bubble_1f1b_family_exact(void **state) {
    (void)state;
    static const int P[] = {1, 2, 3, 4, 8};
    static const double T[][3] = {{1, 1, 1}, {1, 2, 1}, {0.5, 1.5, 0.25}};
    for (size_t pi = 0; pi < 5; pi++)
        for (int m = 1; m <= 12; m++) {
            int p = P[pi];
            for (int k = 0; k < 2; k++)
                for (int t = 0; t < 3; t++) {
                    hp_sched_kind kind = k ? HP_SCHED_KIND_1F1B : HP_SCHED_KIND_GPIPE;
                    hp_sched_timeline tl;
                    sim(kind, p, m, 0, T[t][0], T[t][1], T[t][2], &tl);
                    hp_sched_bubble f = hp_schedule_bubble_formula(kind, p, m, 0, T[t][0], T[t][1], T[t][2]);
                    assert_close(f.sync, (double)(p - 1) / (m + p - 1), 0, 1e-12);
                    assert_close(tl.bubble, f.sync, 0, 1e-9);
                    assert_close(tl.bubble_span, f.span, 0, 1e-9);
                    hp_sched_timeline_free(&tl);
                }
            for (int v = 1; v <= 4; v++) {
                hp_sched_timeline tl;
                sim(HP_SCHED_KIND_INTERLEAVED_1F1B, p, m, v, 1, 1, 1, &tl);
                hp_sched_bubble f = hp_schedule_bubble_formula(HP_SCHED_KIND_INTERLEAVED_1F1B, p, m, v, 1, 1, 1);
                if (m >= p) assert_close(f.sync, (double)(p - 1) / (v * m + p - 1), 0, 1e-12);
                if (fabs(tl.bubble - f.sync) > 1e-9)
                    fail_msg("interleaved p=%d m=%d v=%d: simulated %.6f, formula %.6f", p, m, v, tl.bubble, f.sync);
                hp_sched_timeline_free(&tl);
            }
        }
}

/* ZB-H1 matches (p-1)max(F+B-W, F, B) for m >= p; ZB-V and DualPipeV match their closed forms for
 * m >= 2p at F = B >= W; and the ZB-V bubble is at most a tenth of 1F1B's (zero, with
 * overlapped steps) for m >= 2p at F = B = W. */
static void test_bubble_zero_bubble_family(void **state) {
    (void)state;
    static const int P[] = {1, 2, 3, 4, 8};
    static const double T[][3] = {{1, 1, 1}, {1, 2, 1}, {1, 1, 0.5}, {2, 1, 1}, {1, 1, 2}, {1, 2, 2}};
    for (size_t pi = 0; pi < 5; pi++) {
        int p = P[pi];
        for (int m = p; m <= 12; m++)
            for (int t = 0; t < 6; t++) {
                hp_sched_timeline tl;
                sim(HP_SCHED_KIND_ZB_H1, p, m, 0, T[t][0], T[t][1], T[t][2], &tl);
                hp_sched_bubble f = hp_schedule_bubble_formula(HP_SCHED_KIND_ZB_H1, p, m, 0, T[t][0], T[t][1], T[t][2]);
                if (fabs(tl.bubble - f.sync) > 1e-9)
                    fail_msg("zb-h1 p=%d m=%d t=%d: simulated %.6f, formula %.6f", p, m, t, tl.bubble, f.sync);
                hp_sched_timeline_free(&tl);
            }
        static const double VT[][3] = {{1, 1, 1}, {1, 1, 0.5}, {1, 1, 0.25}, {1, 1, 0}};
        for (int m = 2 * p; m <= 2 * p + 12; m++)
            for (int t = 0; t < 4; t++) {
                for (int k = 0; k < 2; k++) {
                    hp_sched_kind kind = k ? HP_SCHED_KIND_DUALPIPE_V : HP_SCHED_KIND_ZB_V;
                    hp_sched_timeline tl;
                    sim(kind, p, m, 0, VT[t][0], VT[t][1], VT[t][2], &tl);
                    hp_sched_bubble f = hp_schedule_bubble_formula(kind, p, m, 0, VT[t][0], VT[t][1], VT[t][2]);
                    if (fabs(tl.bubble - f.sync) > 1e-9 || fabs(tl.bubble_span - f.span) > 1e-9)
                        fail_msg("%s p=%d m=%d t=%d: simulated %.6f / %.6f, formula %.6f / %.6f",
                                 hp_sched_kind_name(kind), p, m, t, tl.bubble, tl.bubble_span, f.sync, f.span);
                    hp_sched_timeline_free(&tl);
                }
                if (t != 0) continue;
                /* ZB-V against 1F1B on the same model (a 1F1B stage = two chunks). */
                hp_sched_timeline zbv, base;
                sim(HP_SCHED_KIND_ZB_V, p, m, 0, 1, 1, 1, &zbv);
                sim(HP_SCHED_KIND_1F1B, p, m, 0, 2, 2, 2, &base);
                assert_true(zbv.bubble_span <= 0.1 * base.bubble_span + 1e-12);
                assert_true(zbv.bubble < base.bubble || p == 1);
                hp_sched_timeline_free(&zbv);
                hp_sched_timeline_free(&base);
            }
    }
    /* The published ratios at F = B = W: ZB-H1's bubble time is a third of 1F1B's. */
    hp_sched_bubble h1 = hp_schedule_bubble_formula(HP_SCHED_KIND_ZB_H1, 8, 32, 0, 1, 1, 1);
    hp_sched_bubble ob = hp_schedule_bubble_formula(HP_SCHED_KIND_1F1B, 8, 32, 0, 1, 1, 1);
    assert_close(h1.sync / (1 - h1.sync), ob.sync / (1 - ob.sync) / 3, 1e-12, 0);
    hp_sched_bubble u = hp_schedule_bubble_formula(HP_SCHED_KIND_USER, 8, 32, 0, 1, 1, 1);
    assert_true(isnan(u.sync) && isnan(u.span));
}

/* ---------------------------------------------------------------- text */

static void test_render_exact(void **state) {
    (void)state;
    hp_schedule s;
    build(HP_SCHED_KIND_1F1B, 2, 3, 0, &s);
    char *text;
    assert_ok(hp_schedule_render(&s, NULL, &text));
    assert_string_equal(text, "schedule 1f1b p=2 m=3 v=1\n"
                              "rank 0: F0  F1  .   .   BW0 -   F2  BW1 -   .   BW2 -\n"
                              "rank 1: .   F0  BW0 -   F1  BW1 -   F2  BW2 -   .   .\n");
    free(text);
    hp_schedule_free(&s);
    /* Stage prefixes and overlapped pairs. */
    build(HP_SCHED_KIND_DUALPIPE_V, 2, 4, 0, &s);
    assert_ok(hp_schedule_render(&s, NULL, &text));
    assert_non_null(strstr(text, "0F3&3BW1"));
    assert_non_null(strstr(text, "rank 1: .        1F0"));
    free(text);
    hp_schedule_free(&s);
    /* Times a few percent apart (measured ones) draw the columns of uniform times: no idle column
     * where the longer actions have added up to a slot. */
    build(HP_SCHED_KIND_ZB_V, 2, 8, 0, &s);
    char *uniform;
    assert_ok(hp_schedule_render(&s, NULL, &uniform));
    hp_sched_costs c = HP_SCHED_COSTS_INIT;
    c.f = 1.0, c.b = 1.05, c.w = 1.03;
    hp_sched_timeline tl;
    assert_ok(hp_schedule_simulate(&s, &c, &tl));
    assert_ok(hp_schedule_render(&s, &tl, &text));
    assert_string_equal(text, uniform);
    free(text);
    free(uniform);
    hp_sched_timeline_free(&tl);
    hp_schedule_free(&s);
}

static void test_render_parse_roundtrip(void **state) {
    (void)state;
    for (size_t k = 0; k < sizeof BUILT / sizeof BUILT[0]; k++)
        for (int p = 1; p <= 4; p++) {
            int m = 2 * p + 1;
            hp_schedule s, q;
            build(BUILT[k], p, m, BUILT[k] == HP_SCHED_KIND_INTERLEAVED_1F1B ? 3 : 0, &s);
            /* Uneven times: rounding to slots must keep the order. */
            hp_sched_costs c = HP_SCHED_COSTS_INIT;
            c.f = 1, c.b = 1.3, c.w = 0.6, c.p2p_latency = 0.2;
            hp_sched_timeline tl;
            assert_ok(hp_schedule_simulate(&s, &c, &tl));
            char *text;
            assert_ok(hp_schedule_render(&s, &tl, &text));
            hp_status st = hp_schedule_parse(text, "rendered", &q);
            if (st != HP_STATUS_OK) fail_msg("%s\n%s", text, hp_error_message());
            assert_int_equal(q.kind, HP_SCHED_KIND_USER);
            assert_int_equal(q.p, s.p);
            assert_int_equal(q.m, s.m);
            assert_int_equal(q.v, s.v);
            assert_int_equal(q.n_stages, s.n_stages);
            assert_int_equal(q.split_backward, s.split_backward);
            for (int r = 0; r < p; r++) {
                assert_int_equal(q.n_actions[r], s.n_actions[r]);
                assert_memory_equal(q.actions[r], s.actions[r], (size_t)s.n_actions[r] * sizeof(hp_sched_action));
            }
            assert_ok(hp_schedule_validate(&q, NULL, NULL, NULL));
            free(text);
            hp_sched_timeline_free(&tl);
            hp_schedule_free(&q);
            hp_schedule_free(&s);
        }
}

static void test_parse_errors(void **state) {
    (void)state;
    hp_schedule s;
    expect_error(hp_schedule_parse("rank 0: F0 X1\n", "bad.txt", &s), HP_STATUS_CORRUPT,
                 "bad.txt:1: rank 0 column 1: token 'X1'");
    expect_error(hp_schedule_parse("# c\nrank 0: F0 BW0\nrank 1: 0F0\n", "two.txt", &s), HP_STATUS_CORRUPT,
                 "two.txt:3: stage 0 appears on rank 0 and on rank 1");
    expect_error(hp_schedule_parse("rank 1: F0 BW0\n", "gap.txt", &s), HP_STATUS_CORRUPT, "gap.txt: no row for rank 0");
    expect_error(hp_schedule_parse("rank 0: F0\nrank 0: BW0\n", "dup.txt", &s), HP_STATUS_CORRUPT,
                 "dup.txt:2: rank 0 has a second row (the first is line 1)");
    expect_error(hp_schedule_parse("schedule x p=3 m=1\nrank 0: F0 BW0\n", "hdr.txt", &s), HP_STATUS_CORRUPT,
                 "hdr.txt:1: the header says p=3");
    expect_error(hp_schedule_parse("schedule x m=1\nrank 0: F0 F1\n", "hdr.txt", &s), HP_STATUS_CORRUPT,
                 "names micro-batch 1, but the header says m=1");
    expect_error(hp_schedule_parse("schedule x q=1\n", "hdr.txt", &s), HP_STATUS_CORRUPT, "header field 'q=1'");
    expect_error(hp_schedule_parse("rank 0: 0F0 2F0 0BW0 2BW0\n", "hole.txt", &s), HP_STATUS_CORRUPT,
                 "stage 1 appears on no rank");
    expect_error(hp_schedule_parse("rank 0: F0&W0\n", "pair.txt", &s), HP_STATUS_CORRUPT, "token 'F0&W0'");
    expect_error(hp_schedule_parse("hello\n", "junk.txt", &s), HP_STATUS_CORRUPT, "junk.txt:1: expected");
    expect_error(hp_schedule_parse("# nothing\n", "empty.txt", &s), HP_STATUS_CORRUPT, "no 'rank R:' rows");
    expect_error(hp_schedule_load("/nonexistent/sched.txt", &s), HP_STATUS_IO, "/nonexistent/sched.txt");

    /* A user file: 2 ranks, ZB-H1-like order written by hand, loaded from disk. */
    char path[] = "/tmp/hp_sched_XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    FILE *f = fdopen(fd, "w");
    fputs("# hand-written zero-bubble order\n"
          "schedule mine p=2 m=3\n"
          "rank 0: F0 F1 . B0 W0 F2 B1 W1 B2 W2\n"
          "rank 1: .  F0 B0 F1 B1 W0 F2 B2 W1 W2\n",
          f);
    fclose(f);
    assert_ok(hp_schedule_load(path, &s));
    remove(path);
    assert_int_equal(s.p, 2);
    assert_int_equal(s.m, 3);
    assert_true(s.split_backward);
    int peak[2];
    assert_ok(hp_schedule_validate(&s, NULL, peak, NULL));
    assert_int_equal(peak[0], 2);
    assert_int_equal(peak[1], 2);
    hp_sched_timeline tl;
    assert_ok(hp_schedule_simulate(&s, NULL, &tl));
    assert_close(tl.step_time, 10, 0, 1e-12); /* F + 9 compute slots on rank 1 */
    hp_sched_timeline_free(&tl);
    hp_schedule_free(&s);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_1f1b_p2_m4_exact),
        cmocka_unit_test(test_gpipe_exact),
        cmocka_unit_test(test_interleaved_exact),
        cmocka_unit_test(test_zb_h1_exact),
        cmocka_unit_test(test_zb_v_exact),
        cmocka_unit_test(test_dualpipe_v_exact),
        cmocka_unit_test(test_build_errors),
        cmocka_unit_test(test_validator_rejects_deadlock),
        cmocka_unit_test(test_validator_rendezvous),
        cmocka_unit_test(test_validator_memory_budget),
        cmocka_unit_test(test_validator_structure),
        cmocka_unit_test(test_grid_valid_and_peaks),
        cmocka_unit_test(test_simulated_timeline),
        cmocka_unit_test(test_bubble_1f1b_family_exact),
        cmocka_unit_test(test_bubble_zero_bubble_family),
        cmocka_unit_test(test_render_exact),
        cmocka_unit_test(test_render_parse_roundtrip),
        cmocka_unit_test(test_parse_errors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
