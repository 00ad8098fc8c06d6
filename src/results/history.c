// history.c — `trainbench history add|list|show` and the history.h functions: result folders in
// one SQLite database (schema in history.h), trends per machine class, change points.
// Not here: reading result folders (results.c), gating (gate.c uses history_baseline).
#include "results/history.h"

#include <math.h>
#include <regex.h>
#include <sqlite3.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "core/cli.h"
#include "core/common.h"
#include "results/stats.h"

#define HISTORY_APP_ID 0x54424831  // "TBH1"

static const char* const SCHEMA =
    "CREATE TABLE runs(id INTEGER PRIMARY KEY, run_dir TEXT UNIQUE NOT NULL, machine_class TEXT NOT NULL,"
    " instance_id TEXT, run_id TEXT, commit_sha TEXT, date TEXT, label TEXT, added TEXT);"
    "CREATE TABLE samples(run INTEGER NOT NULL REFERENCES runs(id), bench TEXT NOT NULL, rep INTEGER NOT NULL,"
    " real_time_s REAL NOT NULL, counters TEXT, PRIMARY KEY(run, bench, rep));"
    "CREATE TABLE bench_errors(run INTEGER NOT NULL REFERENCES runs(id), bench TEXT NOT NULL, message TEXT);"
    "CREATE TABLE conform(run INTEGER NOT NULL REFERENCES runs(id), case_id TEXT, ok INTEGER, detail TEXT);"
    "CREATE TABLE memory(run INTEGER NOT NULL REFERENCES runs(id), model TEXT, optimizer TEXT, variant TEXT,"
    " estimate_bytes INTEGER, measured_bytes INTEGER);"
    "CREATE INDEX samples_bench ON samples(bench);"
    "CREATE INDEX runs_class ON runs(machine_class, date);";

static Status db_error(sqlite3* db, const char* path, const char* what) {
    return status_make(STATUS_INVALID, "%s: %s: %s", path, what, db ? sqlite3_errmsg(db) : "out of memory");
}

static int scalar_int(sqlite3* db, const char* sql, int* out) {
    sqlite3_stmt* st;
    int rc = sqlite3_prepare_v2(db, sql, -1, &st, NULL);
    if (rc != SQLITE_OK) return rc;
    rc = sqlite3_step(st);
    if (rc == SQLITE_ROW) {
        *out = sqlite3_column_int(st, 0);
        rc = SQLITE_OK;
    }
    sqlite3_finalize(st);
    return rc;
}

// Opens (create: creating an empty file's schema) and checks it is a trainbench history of a
// version this build reads. A corrupt file or another program's database is refused.
static Status db_open(const char* path, bool create, sqlite3** out) {
    *out = NULL;
    if (!create && access(path, R_OK) != 0)
        return status_make(STATUS_IO, "%s: no history database (make one with `trainbench history add DIR...`)", path);
    sqlite3* db = NULL;
    int flags = SQLITE_OPEN_READWRITE | (create ? SQLITE_OPEN_CREATE : 0);
    if (sqlite3_open_v2(path, &db, flags, NULL) != SQLITE_OK) {
        Status s = db_error(db, path, "cannot open");
        sqlite3_close(db);
        return s;
    }
    sqlite3_busy_timeout(db, 30000);
    // A writer checks (and, on an empty file, creates) the schema holding the write lock, so
    // two first writers cannot both see an empty file: the second waits and sees the schema.
    bool in_tx = create && sqlite3_exec(db, "BEGIN IMMEDIATE", NULL, NULL, NULL) == SQLITE_OK;
    int app = 0, version = 0, tables = 0;
    if ((create && !in_tx) || scalar_int(db, "PRAGMA application_id", &app) != SQLITE_OK ||
        scalar_int(db, "PRAGMA user_version", &version) != SQLITE_OK ||
        scalar_int(db, "SELECT count(*) FROM sqlite_master", &tables) != SQLITE_OK) {
        Status s = status_make(STATUS_INVALID, "%s: not a readable SQLite database (%s): refusing it", path,
                               sqlite3_errmsg(db));
        if (in_tx) sqlite3_exec(db, "ROLLBACK", NULL, NULL, NULL);
        sqlite3_close(db);
        return s;
    }
    if (tables == 0 && app == 0 && create) {  // a new file: make the schema and set the ids
        char* err = NULL;
        char sql[256];
        snprintf(sql, sizeof sql, "PRAGMA application_id = %d; PRAGMA user_version = %d;", HISTORY_APP_ID,
                 HISTORY_SCHEMA_VERSION);
        if (sqlite3_exec(db, SCHEMA, NULL, NULL, &err) != SQLITE_OK || sqlite3_exec(db, sql, NULL, NULL, &err) != SQLITE_OK) {
            Status s = status_make(STATUS_IO, "%s: cannot create the history schema: %s", path, err ? err : "?");
            sqlite3_free(err);
            sqlite3_exec(db, "ROLLBACK", NULL, NULL, NULL);
            sqlite3_close(db);
            return s;
        }
        app = HISTORY_APP_ID;
        version = HISTORY_SCHEMA_VERSION;
    }
    if (in_tx && sqlite3_exec(db, app == HISTORY_APP_ID ? "COMMIT" : "ROLLBACK", NULL, NULL, NULL) != SQLITE_OK) {
        Status s = db_error(db, path, "cannot commit the schema");
        sqlite3_close(db);
        return s;
    }
    if (app != HISTORY_APP_ID) {
        sqlite3_close(db);
        return status_make(STATUS_INVALID,
                           "%s: not a trainbench history database (SQLite application_id 0x%08x, expected 0x%08x): "
                           "refusing to touch it",
                           path, (unsigned)app, (unsigned)HISTORY_APP_ID);
    }
    if (version < 1 || version > HISTORY_SCHEMA_VERSION) {
        sqlite3_close(db);
        return status_make(STATUS_INVALID, "%s: history schema version %d; this build reads version %d", path, version,
                           HISTORY_SCHEMA_VERSION);
    }
    *out = db;
    return status_ok();
}

// ---------------------------------------------------------------- add

static Status bind_exec(sqlite3* db, sqlite3_stmt* st, const char* path) {
    int rc = sqlite3_step(st);
    sqlite3_reset(st);
    sqlite3_clear_bindings(st);
    return rc == SQLITE_DONE ? status_ok() : db_error(db, path, "insert failed");
}

// Adds one result folder in one transaction. *skipped when it was already stored.
static Status history_add_dir(sqlite3* db, const char* db_path, const char* dir, bool* skipped) {
    *skipped = false;
    char path[4200], real[4096];
    if (!path_is_dir(dir))
        return status_make(STATUS_INVALID, "result folder %s %s", dir,
                           path_not_dir_reason(dir));
    if (!realpath(dir, real)) snprintf(real, sizeof real, "%s", dir);
    MachineFile mf = {0};
    BenchFile bf = {0};
    ConformFile cf = {0};
    MemoryFile mem = {0};
    bool have_conf = false, have_mem = false;
    snprintf(path, sizeof path, "%s/machine.json", dir);
    Status s = machine_file_read(path, &mf);
    if (status_is_ok(s)) {
        snprintf(path, sizeof path, "%s/bench.json", dir);
        s = bench_file_read(path, RESULT_BENCH, &bf);
    }
    snprintf(path, sizeof path, "%s/conform.json", dir);
    if (status_is_ok(s) && access(path, R_OK) == 0) {
        s = conform_file_read(path, &cf);
        have_conf = status_is_ok(s);
    }
    snprintf(path, sizeof path, "%s/memory.json", dir);
    if (status_is_ok(s) && access(path, R_OK) == 0) {
        s = memory_file_read(path, &mem);
        have_mem = status_is_ok(s);
    }
    if (!status_is_ok(s)) goto out;

    char* err = NULL;
    if (sqlite3_exec(db, "BEGIN IMMEDIATE", NULL, NULL, &err) != SQLITE_OK) {
        s = status_make(STATUS_IO, "%s: cannot start a transaction: %s", db_path, err ? err : "?");
        sqlite3_free(err);
        goto out;
    }
    sqlite3_stmt* st = NULL;
    sqlite3_prepare_v2(db, "SELECT id FROM runs WHERE run_dir = ?", -1, &st, NULL);
    sqlite3_bind_text(st, 1, real, -1, SQLITE_TRANSIENT);
    bool exists = sqlite3_step(st) == SQLITE_ROW;
    sqlite3_finalize(st);
    if (exists) {
        *skipped = true;
        sqlite3_exec(db, "ROLLBACK", NULL, NULL, NULL);
        goto out;
    }
    char added[32];
    time_t now = time(NULL);
    struct tm tm;
    gmtime_r(&now, &tm);
    strftime(added, sizeof added, "%Y-%m-%dT%H:%M:%SZ", &tm);
    sqlite3_prepare_v2(db,
                       "INSERT INTO runs(run_dir, machine_class, instance_id, run_id, commit_sha, date, label, added)"
                       " VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                       -1, &st, NULL);
    const char* vals[] = {real, mf.machine_class, mf.instance_id, mf.run_id, mf.commit, mf.date, mf.label, added};
    for (int i = 0; i < 8; i++) sqlite3_bind_text(st, i + 1, vals[i], -1, SQLITE_TRANSIENT);
    s = bind_exec(db, st, db_path);
    sqlite3_finalize(st);
    sqlite3_int64 run = sqlite3_last_insert_rowid(db);
    if (status_is_ok(s)) {
        sqlite3_prepare_v2(db, "INSERT INTO samples VALUES (?, ?, ?, ?, ?)", -1, &st, NULL);
        sqlite3_stmt* er = NULL;
        sqlite3_prepare_v2(db, "INSERT INTO bench_errors VALUES (?, ?, ?)", -1, &er, NULL);
        for (size_t b = 0; b < bf.n && status_is_ok(s); b++) {
            const BenchEntry* e = &bf.v[b];
            for (size_t r = 0; r < e->n && status_is_ok(s); r++) {
                char* counters = json_dumps(e->reps[r].raw, JSON_COMPACT | JSON_SORT_KEYS);
                sqlite3_bind_int64(st, 1, run);
                sqlite3_bind_text(st, 2, e->name, -1, SQLITE_TRANSIENT);
                sqlite3_bind_int(st, 3, (int)r);
                sqlite3_bind_double(st, 4, e->reps[r].real_time_s);
                sqlite3_bind_text(st, 5, counters, -1, SQLITE_TRANSIENT);
                s = bind_exec(db, st, db_path);
                free(counters);
            }
            if (e->error && status_is_ok(s)) {
                sqlite3_bind_int64(er, 1, run);
                sqlite3_bind_text(er, 2, e->name, -1, SQLITE_TRANSIENT);
                sqlite3_bind_text(er, 3, e->error, -1, SQLITE_TRANSIENT);
                s = bind_exec(db, er, db_path);
            }
        }
        sqlite3_finalize(st);
        sqlite3_finalize(er);
    }
    if (status_is_ok(s) && have_conf) {
        sqlite3_prepare_v2(db, "INSERT INTO conform VALUES (?, ?, ?, ?)", -1, &st, NULL);
        for (size_t i = 0; i < cf.n && status_is_ok(s); i++) {
            sqlite3_bind_int64(st, 1, run);
            sqlite3_bind_text(st, 2, cf.cases[i].id, -1, SQLITE_TRANSIENT);
            sqlite3_bind_int(st, 3, cf.cases[i].ok);
            sqlite3_bind_text(st, 4, cf.cases[i].detail, -1, SQLITE_TRANSIENT);
            s = bind_exec(db, st, db_path);
        }
        sqlite3_finalize(st);
    }
    if (status_is_ok(s) && have_mem) {
        sqlite3_prepare_v2(db, "INSERT INTO memory VALUES (?, ?, ?, ?, ?, ?)", -1, &st, NULL);
        for (size_t k = 0; k < mem.n; k++)
            for (size_t i = 0; i < mem.models[k].n && status_is_ok(s); i++) {
                const MemoryRow* r = &mem.models[k].rows[i];
                sqlite3_bind_int64(st, 1, run);
                sqlite3_bind_text(st, 2, mem.models[k].model, -1, SQLITE_TRANSIENT);
                sqlite3_bind_text(st, 3, r->optimizer, -1, SQLITE_TRANSIENT);
                sqlite3_bind_text(st, 4, r->variant, -1, SQLITE_TRANSIENT);
                sqlite3_bind_int64(st, 5, r->estimate_bytes);
                sqlite3_bind_int64(st, 6, r->measured_bytes);
                s = bind_exec(db, st, db_path);
            }
        sqlite3_finalize(st);
    }
    if (status_is_ok(s) && sqlite3_exec(db, "COMMIT", NULL, NULL, NULL) != SQLITE_OK) s = db_error(db, db_path, "commit");
    if (!status_is_ok(s)) sqlite3_exec(db, "ROLLBACK", NULL, NULL, NULL);
out:
    machine_file_free(&mf);
    bench_file_free(&bf);
    if (have_conf) conform_file_free(&cf);
    if (have_mem) memory_file_free(&mem);
    return s;
}

// ---------------------------------------------------------------- change points

static double sse(const double* pre, const double* pre2, size_t a, size_t b) {  // [a, b)
    double n = (double)(b - a), s = pre[b] - pre[a], s2 = pre2[b] - pre2[a];
    return s2 - s * s / n;
}

#define HISTORY_CP_BETA 3.0  // penalty multiplier (history.h)

static void segment(const double* pre, const double* pre2, size_t a, size_t b, size_t n_all, size_t* at,
                    size_t* n_at, size_t max) {
    if (b - a < 6) return;  // both parts need >= 3 values
    double whole = sse(pre, pre2, a, b), best = INFINITY;
    size_t split = 0;
    for (size_t k = a + 3; k + 3 <= b; k++) {
        double rest = sse(pre, pre2, a, k) + sse(pre, pre2, k, b);
        if (rest < best) {
            best = rest;
            split = k;
        }
    }
    // Gaussian likelihood ratio with the variance unknown: m ln(RSS_whole / RSS_split) against
    // the BIC-style penalty beta ln(n) (n: the whole sequence, so every test is equally strict)
    double m = (double)(b - a);
    if (!split || !(whole > 0)) return;
    double stat = best > 0 ? m * log(whole / best) : INFINITY;
    if (!(stat > HISTORY_CP_BETA * log((double)n_all))) return;
    segment(pre, pre2, a, split, n_all, at, n_at, max);
    if (*n_at < max) at[(*n_at)++] = split;
    segment(pre, pre2, split, b, n_all, at, n_at, max);
}

size_t history_change_points(const double* x, size_t n, size_t* at, size_t max) {
    if (n < 6) return 0;
    double* pre = xcalloc(n + 1, sizeof(double));
    double* pre2 = xcalloc(n + 1, sizeof(double));
    double mean = 0;
    for (size_t i = 0; i < n; i++) mean += x[i] / (double)n;
    for (size_t i = 0; i < n; i++) {  // centred: the sums of squares stay accurate
        pre[i + 1] = pre[i] + (x[i] - mean);
        pre2[i + 1] = pre2[i] + (x[i] - mean) * (x[i] - mean);
    }
    size_t n_at = 0;
    segment(pre, pre2, 0, n, n, at, &n_at, max);
    free(pre);
    free(pre2);
    return n_at;
}

// ---------------------------------------------------------------- baseline for the gate

Status history_baseline(const char* db_path, const char* machine_class, int n, const char* exclude_dir,
                        BenchFile* out, int* used) {
    memset(out, 0, sizeof *out);
    *used = 0;
    sqlite3* db;
    Status s = db_open(db_path, false, &db);
    if (!status_is_ok(s)) return s;
    char real[4096] = "";
    if (exclude_dir && !realpath(exclude_dir, real)) snprintf(real, sizeof real, "%s", exclude_dir);
    sqlite3_stmt* st;
    sqlite3_prepare_v2(db,
                       "SELECT s.bench, s.real_time_s, s.counters FROM samples s WHERE s.run IN"
                       " (SELECT id FROM runs WHERE machine_class = ? AND run_dir != ? ORDER BY date DESC, id DESC LIMIT ?)"
                       " ORDER BY s.run, s.bench, s.rep",
                       -1, &st, NULL);
    sqlite3_bind_text(st, 1, machine_class, -1, SQLITE_TRANSIENT);
    sqlite3_bind_text(st, 2, real, -1, SQLITE_TRANSIENT);
    sqlite3_bind_int(st, 3, n);
    json_t* arr = json_array();
    while (sqlite3_step(st) == SQLITE_ROW) {
        json_t* e = json_loads((const char*)sqlite3_column_text(st, 2), 0, NULL);
        if (!json_is_object(e)) {
            json_decref(e);
            e = json_object();
        }
        json_object_set_new(e, "run_name", json_string((const char*)sqlite3_column_text(st, 0)));
        json_object_set_new(e, "name", json_string((const char*)sqlite3_column_text(st, 0)));
        json_object_set_new(e, "run_type", json_string("iteration"));
        json_object_set_new(e, "real_time", json_real(sqlite3_column_double(st, 1)));
        json_object_set_new(e, "time_unit", json_string("s"));
        json_array_append_new(arr, e);
    }
    sqlite3_finalize(st);
    // failed / unsupported benchmarks of those runs, so the sets match the candidate's
    sqlite3_prepare_v2(db,
                       "SELECT DISTINCT bench, message FROM bench_errors WHERE run IN"
                       " (SELECT id FROM runs WHERE machine_class = ? AND run_dir != ? ORDER BY date DESC, id DESC LIMIT ?)",
                       -1, &st, NULL);
    sqlite3_bind_text(st, 1, machine_class, -1, SQLITE_TRANSIENT);
    sqlite3_bind_text(st, 2, real, -1, SQLITE_TRANSIENT);
    sqlite3_bind_int(st, 3, n);
    while (sqlite3_step(st) == SQLITE_ROW)
        json_array_append_new(arr, json_pack("{s:s, s:s, s:b, s:s}", "name", (const char*)sqlite3_column_text(st, 0),
                                             "run_type", "iteration", "error_occurred", 1, "error_message",
                                             (const char*)sqlite3_column_text(st, 1)));
    sqlite3_finalize(st);
    int runs = 0;
    sqlite3_prepare_v2(db,
                       "SELECT count(*) FROM (SELECT id FROM runs WHERE machine_class = ? AND run_dir != ?"
                       " ORDER BY date DESC, id DESC LIMIT ?)",
                       -1, &st, NULL);
    sqlite3_bind_text(st, 1, machine_class, -1, SQLITE_TRANSIENT);
    sqlite3_bind_text(st, 2, real, -1, SQLITE_TRANSIENT);
    sqlite3_bind_int(st, 3, n);
    if (sqlite3_step(st) == SQLITE_ROW) runs = sqlite3_column_int(st, 0);
    sqlite3_finalize(st);
    sqlite3_close(db);
    *used = runs;
    if (runs == 0) {
        json_decref(arr);
        return status_make(STATUS_INVALID, "%s: no run of machine class %s in the history (add some with `trainbench "
                                           "history add`)", db_path, machine_class);
    }
    char origin[4200];
    snprintf(origin, sizeof origin, "%s (history of %s)", db_path, machine_class);
    return bench_file_from_json(json_pack("{s:o}", "benchmarks", arr), origin, out);
}

// ---------------------------------------------------------------- the command

static int history_main(int argc, char** argv);

const Command cmd_history = {
    .name = "history",
    .summary = "results history in SQLite: add result folders, list runs, show a benchmark's trend and change points",
    .usage = "trainbench history add DIR... [--db FILE]\n"
             "       trainbench history list [--db FILE]\n"
             "       trainbench history show BENCH_REGEX [--db FILE] [--out DIR (results/history)]\n"
             "  --db FILE  the database (default " HISTORY_DEFAULT_DB "; created by add)\n"
             "  show: per machine class, each matching benchmark's median " BENCH_METRIC_NAME " per run (by\n"
             "  date), its change points (binary segmentation, Gaussian likelihood ratio, penalty 3 ln n) naming the\n"
             "  run and commit where a step entered, and a gnuplot trend plot per machine class in --out.\n"
             "  exit 0; 1 a write failed; 2 bad input (unusable folder, foreign or corrupt database)",
    .run = history_main,
};

static int history_add(const char* db_path, char** dirs, int n) {
    for (int i = 0; i < n; i++)
        if (!path_is_dir(dirs[i]))
            return user_error("history add: result folder %s %s", dirs[i],
                              path_not_dir_reason(dirs[i]));
    char parent[4096], top[4096] = "";
    snprintf(parent, sizeof parent, "%s", db_path);
    char* slash = strrchr(parent, '/');
    if (slash) {
        *slash = 0;
        if (*parent && !status_is_ok(make_dirs_noting(parent, top, sizeof top)))
            return user_error("history add: cannot create %s", parent);
    }
    const bool existed = access(db_path, F_OK) == 0;
    sqlite3* db;
    Status s = db_open(db_path, true, &db);
    if (!status_is_ok(s)) {
        if (!existed) unlink(db_path);
        if (*parent) remove_made_dirs(parent, top);
        return user_error("history: %s", s.msg);
    }
    int rc = 0, added = 0;
    for (int i = 0; i < n; i++) {
        bool skipped;
        s = history_add_dir(db, db_path, dirs[i], &skipped);
        if (!status_is_ok(s)) {
            rc = user_error("history add: %s", s.msg);
            break;
        }
        added++;
        printf("history: %s %s\n", skipped ? "already stored, skipped:" : "added", dirs[i]);
    }
    sqlite3_close(db);
    if (rc != 0 && added == 0 && !existed) {  // refused before anything was stored: leave no empty database
        unlink(db_path);
        if (*parent) remove_made_dirs(parent, top);
    }
    return rc;
}

static int history_list(const char* db_path) {
    sqlite3* db;
    Status s = db_open(db_path, false, &db);
    if (!status_is_ok(s)) return user_error("history: %s", s.msg);
    sqlite3_stmt* st;
    sqlite3_prepare_v2(db,
                       "SELECT r.id, r.date, r.machine_class, r.commit_sha, r.label, r.run_dir,"
                       " (SELECT count(DISTINCT bench) FROM samples WHERE run = r.id)"
                       " FROM runs r ORDER BY r.machine_class, r.date, r.id",
                       -1, &st, NULL);
    printf("%4s  %-20s  %-28s  %-12s  %6s  %s\n", "id", "date", "machine class", "commit", "benchs", "folder (label)");
    while (sqlite3_step(st) == SQLITE_ROW) {
        const char* label = (const char*)sqlite3_column_text(st, 4);
        printf("%4d  %-20s  %-28s  %-12.12s  %6d  %s%s%s%s\n", sqlite3_column_int(st, 0),
               (const char*)sqlite3_column_text(st, 1), (const char*)sqlite3_column_text(st, 2),
               (const char*)sqlite3_column_text(st, 3), sqlite3_column_int(st, 6),
               (const char*)sqlite3_column_text(st, 5), label && *label ? " (" : "", label ? label : "",
               label && *label ? ")" : "");
    }
    sqlite3_finalize(st);
    sqlite3_close(db);
    return 0;
}

// "a-b c" -> safe file name part
static void file_part(const char* s, char* out, size_t cap) {
    size_t n = 0;
    for (; *s && n + 1 < cap; s++) out[n++] = (char)((*s >= 'a' && *s <= 'z') || (*s >= '0' && *s <= '9') || *s == '-' ? *s : '_');
    out[n] = 0;
}

typedef struct {
    int run;
    char date[32], commit[48];
    double median;
} Point;

static int history_show(const char* db_path, const char* pattern, const char* out_dir) {
    regex_t re;
    if (regcomp(&re, pattern, REG_EXTENDED | REG_NOSUB) != 0)
        return user_error("history show: BENCH_REGEX '%s' is not a valid POSIX extended regex", pattern);
    sqlite3* db;
    Status s = db_open(db_path, false, &db);
    if (!status_is_ok(s)) {
        regfree(&re);
        return user_error("history: %s", s.msg);
    }
    char made_top[4096] = "";  // the outermost folder made for --out, removed again when nothing matches
    Status ms = make_dirs_noting(out_dir, made_top, sizeof made_top);
    if (!status_is_ok(ms)) {
        regfree(&re);
        sqlite3_close(db);
        return user_error("history show: --out: %s", ms.msg);
    }
    const char* probe[] = {"gnuplot", "--version", NULL};
    bool have_gnuplot = run_program(probe, NULL, "/dev/null", "/dev/null") == 0;
    sqlite3_stmt* classes;
    sqlite3_prepare_v2(db, "SELECT DISTINCT machine_class FROM runs ORDER BY machine_class", -1, &classes, NULL);
    int rc = 0, shown = 0;
    while (sqlite3_step(classes) == SQLITE_ROW) {
        char cls[256];
        snprintf(cls, sizeof cls, "%s", (const char*)sqlite3_column_text(classes, 0));
        sqlite3_stmt* benches;
        sqlite3_prepare_v2(db,
                           "SELECT DISTINCT s.bench FROM samples s JOIN runs r ON r.id = s.run WHERE r.machine_class = ?"
                           " ORDER BY s.bench",
                           -1, &benches, NULL);
        sqlite3_bind_text(benches, 1, cls, -1, SQLITE_TRANSIENT);
        char* dat = NULL;
        size_t dat_len = 0;
        FILE* df = open_memstream(&dat, &dat_len);
        char* gp = NULL;
        size_t gp_len = 0;
        FILE* gf = open_memstream(&gp, &gp_len);
        int series = 0;
        while (sqlite3_step(benches) == SQLITE_ROW) {
            const char* bench = (const char*)sqlite3_column_text(benches, 0);
            if (regexec(&re, bench, 0, NULL, 0) != 0) continue;
            sqlite3_stmt* st;
            sqlite3_prepare_v2(db,
                               "SELECT r.id, r.date, r.commit_sha, s.real_time_s FROM runs r JOIN samples s ON s.run = r.id"
                               " WHERE r.machine_class = ? AND s.bench = ? ORDER BY r.date, r.id, s.rep",
                               -1, &st, NULL);
            sqlite3_bind_text(st, 1, cls, -1, SQLITE_TRANSIENT);
            sqlite3_bind_text(st, 2, bench, -1, SQLITE_TRANSIENT);
            Point* pts = NULL;
            size_t np = 0, cap = 0, nv = 0, vcap = 0;
            double* v = NULL;
            int cur = -1;
            for (bool more = sqlite3_step(st) == SQLITE_ROW;; more = sqlite3_step(st) == SQLITE_ROW) {
                int run = more ? sqlite3_column_int(st, 0) : -2;
                if (run != cur && nv) {  // close the previous run
                    pts[np - 1].median = stats_median(v, nv);
                    nv = 0;
                }
                if (!more) break;
                if (run != cur) {
                    if (np == cap) pts = xrealloc(pts, (cap = cap ? 2 * cap : 16) * sizeof(Point));
                    Point* p = &pts[np++];
                    p->run = run;
                    snprintf(p->date, sizeof p->date, "%s", (const char*)sqlite3_column_text(st, 1));
                    snprintf(p->commit, sizeof p->commit, "%s", (const char*)sqlite3_column_text(st, 2));
                    cur = run;
                }
                if (nv == vcap) v = xrealloc(v, (vcap = vcap ? 2 * vcap : 16) * sizeof(double));
                v[nv++] = sqlite3_column_double(st, 3);
            }
            sqlite3_finalize(st);
            free(v);
            double* med = xmalloc((np + 1) * sizeof(double));
            for (size_t i = 0; i < np; i++) med[i] = pts[i].median;
            size_t at[32];
            size_t nc = history_change_points(med, np, at, 32);
            printf("\n%s  [machine class %s]  %zu runs\n", bench, cls, np);
            printf("  %4s  %-20s  %-12s  %14s\n", "run", "date", "commit", "median (s)");
            size_t k = 0;
            for (size_t i = 0; i < np; i++) {
                bool step = k < nc && at[k] == i;
                printf("  %4d  %-20s  %-12.12s  %14.6g%s\n", pts[i].run, pts[i].date, pts[i].commit, pts[i].median,
                       step ? "  <- change point" : "");
                if (step) k++;
            }
            for (size_t c = 0; c < nc; c++) {
                double before = 0, after = 0;
                size_t a0 = c ? at[c - 1] : 0, a1 = at[c], a2 = c + 1 < nc ? at[c + 1] : np;
                for (size_t i = a0; i < a1; i++) before += med[i];
                for (size_t i = a1; i < a2; i++) after += med[i];
                before /= (double)(a1 - a0);
                after /= (double)(a2 - a1);
                printf("  change point: run %d (commit %.12s, %s): level %+.1f%% (%.6g -> %.6g s)\n", pts[a1].run,
                       pts[a1].commit, pts[a1].date, 100 * (after / before - 1), before, after);
            }
            if (!nc) printf("  no change point (binary segmentation, penalty 3 ln n)\n");
            fprintf(df, "# %s\n", bench);
            for (size_t i = 0; i < np; i++) fprintf(df, "%zu %.9g %d\n", i, pts[i].median, pts[i].run);
            fprintf(df, "\n\n");
            char title[256];
            size_t tl = 0;  // gnuplot text: only harmless characters (no quotes, backquotes, @, $)
            for (const char* p = bench; *p && tl + 1 < sizeof title; p++)
                title[tl++] = (char)((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') ||
                                             strchr("/_.-", *p)
                                         ? *p
                                         : '_');
            title[tl] = 0;
            fprintf(gf, "%s'trend_%s.dat' index %d using 1:2 with linespoints title '%s'", series ? ", " : "plot ",
                    "CLS", series, title);
            series++;
            shown++;
            free(med);
            free(pts);
        }
        sqlite3_finalize(benches);
        fclose(df);
        fclose(gf);
        if (series) {
            char part[256], name[600], path[4800], body_path[4800];
            file_part(cls, part, sizeof part);
            snprintf(name, sizeof name, "trend_%s", part);
            snprintf(path, sizeof path, "%s/%s.dat", out_dir, name);
            Status w = write_file_atomic(path, dat, dat_len);
            // the plot command names its data file: put the class part in
            char* cmd = xmalloc(gp_len * 2 + 1024);
            size_t cl = 0;
            for (const char* p = gp; *p;) {
                if (!strncmp(p, "CLS", 3)) {
                    cl += (size_t)sprintf(cmd + cl, "%s", part);
                    p += 3;
                } else {
                    cmd[cl++] = *p++;
                }
            }
            cmd[cl] = 0;
            char* script = NULL;
            size_t sl = 0;
            FILE* sf = open_memstream(&script, &sl);
            fprintf(sf,
                    "# trend of machine class %s — generated by `trainbench history show`; `gnuplot %s.gp` redraws it\n"
                    "set terminal pngcairo size 1000,600\nset output '%s.png.tmp'\nset key outside bottom\n"
                    "set logscale y\nset xlabel 'run (oldest first)'\nset ylabel 'median %s (s, log)'\n"
                    "set title 'history of %s'\n%s\n",
                    part, name, name, BENCH_METRIC_NAME, part, cmd);
            fclose(sf);
            free(cmd);
            snprintf(body_path, sizeof body_path, "%s/%s.gp", out_dir, name);
            if (status_is_ok(w)) w = write_file_atomic(body_path, script, sl);
            free(script);
            if (!status_is_ok(w)) {
                fprintf(stderr, "trainbench history: %s\n", w.msg);
                rc = 1;
            } else if (have_gnuplot) {
                char gpn[700], tmp[4800], png[4800];
                snprintf(gpn, sizeof gpn, "%s.gp", name);
                const char* gargv[] = {"gnuplot", gpn, NULL};
                snprintf(tmp, sizeof tmp, "%s/%s.png.tmp", out_dir, name);
                snprintf(png, sizeof png, "%s/%s.png", out_dir, name);
                if (run_program(gargv, out_dir, "/dev/null", NULL) == 0 && rename(tmp, png) == 0) {
                    printf("\nplot: %s (data %s.dat, script %s.gp)\n", png, name, name);
                } else {
                    unlink(tmp);
                    fprintf(stderr, "trainbench history: gnuplot failed on %s/%s.gp\n", out_dir, name);
                    rc = 1;
                }
            } else {
                printf("\nplot not drawn: gnuplot is not installed (data and script in %s)\n", out_dir);
            }
        }
        free(dat);
        free(gp);
    }
    sqlite3_finalize(classes);
    sqlite3_close(db);
    regfree(&re);
    if (!shown) {
        remove_made_dirs(out_dir, made_top);
        return user_error("history show: no benchmark in %s matches '%s'", db_path, pattern);
    }
    return rc;
}

static int history_main(int argc, char** argv) {
    const char* db_path = HISTORY_DEFAULT_DB;
    const char* out_dir = "results/history";
    char** pos = xmalloc((size_t)(argc + 1) * sizeof(char*));
    int npos = 0;
    for (int i = 1; i < argc; i++) {
        if (flag_matches(argv[i], "--db")) {
            if (!flag_value(&cmd_history, argc, argv, &i, "--db", &db_path)) return free(pos), 2;
        } else if (flag_matches(argv[i], "--out")) {
            if (!flag_value(&cmd_history, argc, argv, &i, "--out", &out_dir)) return free(pos), 2;
        } else if (argv[i][0] == '-' && argv[i][1] == '-') {
            free(pos);
            return cli_unknown_flag(&cmd_history, argv[i]);
        } else {
            pos[npos++] = argv[i];
        }
    }
    int rc;
    if (npos == 0) rc = cli_usage_error(&cmd_history, "missing a subcommand: add, list or show");
    else if (!strcmp(pos[0], "add"))
        rc = npos < 2 ? cli_usage_error(&cmd_history, "add needs at least one result folder") : history_add(db_path, pos + 1, npos - 1);
    else if (!strcmp(pos[0], "list"))
        rc = npos != 1 ? cli_usage_error(&cmd_history, "list takes no arguments") : history_list(db_path);
    else if (!strcmp(pos[0], "show"))
        rc = npos != 2 ? cli_usage_error(&cmd_history, "show needs one BENCH_REGEX") : history_show(db_path, pos[1], out_dir);
    else
        rc = cli_usage_error(&cmd_history, "unknown subcommand '%s' (allowed: add, list, show)", pos[0]);
    free(pos);
    return rc;
}
