// test_history.c — `trainbench history` and its change-point detection: on constructed
// histories (seeded Gaussian noise) a step of 3x the noise with 5 runs on each side is found and
// placed at the first changed run, a flat history of 50 runs gives none (rates over 200 draws,
// within the bounds history.h states); end to end: result folders added (one transaction each;
// two writers at once), listed, shown with the change point naming its run and commit, used as
// `gate --baseline history:N`; a corrupt or foreign database is refused with exit 2.
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cli_harness.h"
#include "results/history.h"

static uint64_t g_seed;
static double uniform01(void) {
    g_seed = g_seed * 6364136223846793005ull + 1442695040888963407ull;
    return ((double)(g_seed >> 11) + 0.5) / 9007199254740992.0;
}
static double gauss(void) { return sqrt(-2.0 * log(uniform01())) * cos(6.283185307179586 * uniform01()); }

static void test_change_points_on_constructed_histories(void** s) {
    (void)s;
    enum { DRAWS = 200 };
    int found = 0, exact = 0, flat_alarms = 0;
    size_t at[32];
    for (int d = 1; d <= DRAWS; d++) {
        g_seed = (uint64_t)d;
        double x[50];
        for (int i = 0; i < 10; i++) x[i] = 1.0 + 0.01 * gauss() + (i >= 5 ? 0.03 : 0.0);  // step = 3 sigma
        size_t n = history_change_points(x, 10, at, 32);
        found += n >= 1;
        exact += n == 1 && at[0] == 5;
        for (int i = 0; i < 50; i++) x[i] = 1.0 + 0.01 * gauss();
        flat_alarms += history_change_points(x, 50, at, 32) > 0;
    }
    printf("3-sigma step, 5+5 runs: found in %d of %d, exactly at run 5 in %d; flat 50 runs: %d false alarms\n", found,
           DRAWS, exact, flat_alarms);
    assert_true(found >= DRAWS * 90 / 100);
    assert_true(exact >= DRAWS * 70 / 100);
    assert_true(flat_alarms <= DRAWS * 5 / 100);
    // a big step is always found, exactly; a constant history has none
    double y[12];
    for (int i = 0; i < 12; i++) y[i] = i < 7 ? 2.0 : 3.0;
    y[3] = 2.001;
    assert_int_equal(history_change_points(y, 12, at, 32), 1);
    assert_int_equal(at[0], 7);
    for (int i = 0; i < 12; i++) y[i] = 5.0;
    assert_int_equal(history_change_points(y, 12, at, 32), 0);
}

// A result folder with machine.json (class "ci-class") and bench.json: 5 repetitions of two
// benchmarks around time_s (relative noise 1%).
static void write_run(const char* dir, int index, double time_s) {
    mkdir(dir, 0755);
    char path[1024];
    snprintf(path, sizeof path, "%s/machine.json", dir);
    FILE* f = fopen(path, "w");
    assert_non_null(f);
    fprintf(f,
            "{\"schema_version\": 1, \"machine_id\": \"ci-class\", \"machine_class\": \"ci-class\", \"instance_id\": "
            "\"i%d\", \"run_id\": \"run%02d\", \"date\": \"2026-12-01T10:%02d:00Z\", \"label\": \"\", "
            "\"git\": {\"commit\": \"commit%02d\", \"dirty\": false}}\n",
            index, index, index, index);
    fclose(f);
    snprintf(path, sizeof path, "%s/bench.json", dir);
    f = fopen(path, "w");
    assert_non_null(f);
    fprintf(f, "{\"context\": {\"trainbench_schema_version\": \"1\"}, \"benchmarks\": [");
    const char* names[] = {"optim/adamw_torch/10000", "gemm/naive/f32/nn/64x64x64"};
    for (int b = 0; b < 2; b++)
        for (int r = 0; r < 5; r++)
            fprintf(f,
                    "%s{\"name\": \"%s/real_time\", \"run_name\": \"%s/real_time\", \"run_type\": \"iteration\", "
                    "\"repetition_index\": %d, \"real_time\": %.9g, \"time_unit\": \"s\"}",
                    b || r ? "," : "", names[b], names[b], r, (b ? 2.0 : 1.0) * time_s * (1.0 + 0.01 * gauss()));
    fprintf(f, "]}\n");
    fclose(f);
}

static char g_out[65536];

static int history(const char* args) {
    char full[12416];  // "history " + the longest command line a test builds (cmd[12288])
    snprintf(full, sizeof full, "history %s", args);
    return cli_run(full, true, g_out, sizeof g_out);
}

static void test_add_list_show_and_gate(void** s) {
    (void)s;
    char db[512], dirs[12][512], args[8192];
    snprintf(db, sizeof db, "%s/h.sqlite", g_tmp);
    g_seed = 7;
    size_t len = 0;
    args[0] = 0;
    for (int i = 0; i < 12; i++) {  // a 3% step (3x the 1% noise) enters at the 7th run (commit06)
        snprintf(dirs[i], sizeof dirs[i], "%s/run%02d", g_tmp, i);
        write_run(dirs[i], i, i < 6 ? 1e-3 : 1.03e-3);
        len += (size_t)snprintf(args + len, sizeof args - len, " %s", dirs[i]);
    }
    char cmd[9000];
    snprintf(cmd, sizeof cmd, "add --db %s%s", db, args);
    assert_int_equal(history(cmd), 0);
    assert_non_null(strstr(g_out, "history: added"));
    snprintf(cmd, sizeof cmd, "add --db %s %s", db, dirs[0]);  // again: skipped, not duplicated
    assert_int_equal(history(cmd), 0);
    assert_non_null(strstr(g_out, "already stored, skipped"));
    snprintf(cmd, sizeof cmd, "list --db %s", db);
    assert_int_equal(history(cmd), 0);
    assert_non_null(strstr(g_out, "commit11"));
    assert_null(strstr(g_out, "  13  "));
    snprintf(cmd, sizeof cmd, "show 'optim/adamw' --db %s --out %s/plots", db, g_tmp);
    int rc = history(cmd);
    printf("%s\n", g_out);
    assert_int_equal(rc, 0);
    assert_non_null(strstr(g_out, "change point: run 7 (commit commit06"));
    assert_null(strstr(g_out, "gemm/naive"));  // not matched by the regex
    char path[1024];
    snprintf(path, sizeof path, "%s/plots/trend_ci-class.dat", g_tmp);
    assert_int_equal(access(path, R_OK), 0);
    // gate against the last 5 runs of the class: the same level passes, 20% slower fails
    char cand[512];
    snprintf(cand, sizeof cand, "%s/cand_same", g_tmp);
    write_run(cand, 20, 1.03e-3);
    snprintf(cmd, sizeof cmd, "gate --baseline history:5 --db %s --candidate %s", db, cand);
    rc = cli_run(cmd, true, g_out, sizeof g_out);
    printf("%s\n", g_out);
    assert_int_equal(rc, 0);
    assert_non_null(strstr(g_out, "last 5 runs of machine class ci-class"));
    snprintf(cand, sizeof cand, "%s/cand_slow", g_tmp);
    write_run(cand, 21, 1.03e-3 * 1.2);
    snprintf(cmd, sizeof cmd, "gate --baseline history:5 --db %s --candidate %s", db, cand);
    assert_int_equal(cli_run(cmd, true, g_out, sizeof g_out), 1);
    assert_non_null(strstr(g_out, "regression in optim/adamw_torch/10000"));
    snprintf(cmd, sizeof cmd, "gate --baseline history:0 --db %s --candidate %s", db, cand);
    assert_int_equal(cli_run(cmd, true, g_out, sizeof g_out), 2);
}

// Two writers at once: each add is one IMMEDIATE transaction, the other waits (busy timeout).
static void test_concurrent_writers(void** s) {
    (void)s;
    char db[512], a[512], b[512], cmd[12288];
    snprintf(db, sizeof db, "%s/c.sqlite", g_tmp);
    snprintf(a, sizeof a, "%s/ca", g_tmp);
    snprintf(b, sizeof b, "%s/cb", g_tmp);
    g_seed = 3;
    write_run(a, 1, 1e-3);
    write_run(b, 2, 1e-3);
    snprintf(cmd, sizeof cmd,
             "'%s' history add --db %s %s & p1=$!; '%s' history add --db %s %s & p2=$!; wait $p1 && wait $p2",
             g_bin, db, a, g_bin, db, b);
    assert_int_equal(system(cmd), 0);
    snprintf(cmd, sizeof cmd, "list --db %s", db);
    assert_int_equal(history(cmd), 0);
    assert_non_null(strstr(g_out, "/ca"));
    assert_non_null(strstr(g_out, "/cb"));
}

static void test_corrupt_or_foreign_database_refused(void** s) {
    (void)s;
    char db[512], cmd[2048], dir[512];
    snprintf(dir, sizeof dir, "%s/one", g_tmp);
    write_run(dir, 1, 1e-3);
    snprintf(db, sizeof db, "%s/garbage.sqlite", g_tmp);
    FILE* f = fopen(db, "w");
    assert_non_null(f);
    for (int i = 0; i < 200; i++) fputs("this is not an SQLite database ", f);
    fclose(f);
    snprintf(cmd, sizeof cmd, "add --db %s %s", db, dir);
    assert_int_equal(history(cmd), 2);
    assert_non_null(strstr(g_out, "not a readable SQLite database"));
    // another program's SQLite database: refused, and left untouched
    snprintf(db, sizeof db, "%s/foreign.sqlite", g_tmp);
    sqlite3* h;
    assert_int_equal(sqlite3_open(db, &h), SQLITE_OK);
    assert_int_equal(sqlite3_exec(h, "CREATE TABLE t(x); INSERT INTO t VALUES (1);", NULL, NULL, NULL), SQLITE_OK);
    sqlite3_close(h);
    snprintf(cmd, sizeof cmd, "add --db %s %s", db, dir);
    assert_int_equal(history(cmd), 2);
    assert_non_null(strstr(g_out, "not a trainbench history database"));
    assert_int_equal(sqlite3_open(db, &h), SQLITE_OK);
    int tables = -1;
    sqlite3_stmt* st;
    sqlite3_prepare_v2(h, "SELECT count(*) FROM sqlite_master", -1, &st, NULL);
    if (sqlite3_step(st) == SQLITE_ROW) tables = sqlite3_column_int(st, 0);
    sqlite3_finalize(st);
    sqlite3_close(h);
    assert_int_equal(tables, 1);
    snprintf(db, sizeof db, "%s/none.sqlite", g_tmp);
    snprintf(cmd, sizeof cmd, "list --db %s", db);
    assert_int_equal(history(cmd), 2);
    assert_non_null(strstr(g_out, "no history database"));
    snprintf(cmd, sizeof cmd, "add --db %s %s/missing", db, g_tmp);
    assert_int_equal(history(cmd), 2);
    assert_non_null(strstr(g_out, "does not exist"));
    assert_int_equal(history("frobnicate"), 2);
    assert_int_equal(history("show '('"), 2);
}

int main(int argc, char** argv) {
    (void)argc;
    if (cli_harness_setup(argv[0], "history") != 0) return 1;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_change_points_on_constructed_histories),
        cmocka_unit_test(test_add_list_show_and_gate),
        cmocka_unit_test(test_concurrent_writers),
        cmocka_unit_test(test_corrupt_or_foreign_database_refused),
    };
    int rc = cmocka_run_group_tests_name("history", tests, NULL, NULL);
    cli_harness_cleanup("history");
    return rc;
}
