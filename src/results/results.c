// results.c — implementation of results.h: typed readers and writers of the result-folder
// files, schema versions, atomic writes. Not here: verdicts (gate.c), plots (report.c).
#include "results/results.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "results/stats.h"

// Version 1 (this build): every file stamped; machine.json adds machine_class and instance_id;
// conform.json is {"schema_version", "cases"} only. Version 0: the unversioned format before.
static const struct {
    const char* file;
    int version;
} KINDS[RESULT_KIND_COUNT] = {
    [RESULT_MACHINE] = {"machine.json", 1}, [RESULT_BENCH] = {"bench.json", 1},
    [RESULT_MEMORY] = {"memory.json", 1},   [RESULT_CONFORM] = {"conform.json", 1},
    [RESULT_TRAIN] = {"results.json", 1},   [RESULT_PEERS] = {"peers.json", 1},
};

#define GBENCH_VERSION_KEY "trainbench_schema_version"

int result_schema_version(ResultKind kind) { return KINDS[kind].version; }
const char* result_file_name(ResultKind kind) { return KINDS[kind].file; }

static bool is_gbench(ResultKind kind) { return kind == RESULT_BENCH || kind == RESULT_PEERS; }

int result_json_version(json_t* root, ResultKind kind) {
    json_t* v = is_gbench(kind) ? json_object_get(json_object_get(root, "context"), GBENCH_VERSION_KEY)
                                : json_object_get(root, "schema_version");
    if (!v) return 0;  // the unversioned format before version 1
    if (json_is_integer(v)) return json_integer_value(v) < 0 || json_integer_value(v) > 1000000 ? -1
                                                                                              : (int)json_integer_value(v);
    // Google Benchmark's custom context values are strings: a decimal integer, nothing else
    long n;
    if (is_gbench(kind) && json_is_string(v) && parse_long(json_string_value(v), 0, 1000000, &n)) return (int)n;
    return -1;  // a version that is not an integer
}

Status result_json_read(const char* path, ResultKind kind, bool required, json_t** out, int* version) {
    *out = NULL;
    if (version) *version = 0;
    struct stat st;
    if (stat(path, &st) != 0) {
        if (!required) return status_ok();
        return status_make(STATUS_IO, "%s: missing (a result folder holds %s)", path, KINDS[kind].file);
    }
    uint8_t* text = NULL;
    size_t text_len = 0;
    Status rs = read_file(path, &text, &text_len);  // a regular file only (a FIFO is refused, not waited on)
    if (!status_is_ok(rs)) return rs;
    json_error_t err;
    json_t* root = json_loadb((const char*)text, text_len, 0, &err);
    free(text);
    if (!root)
        return status_make(STATUS_INVALID, "%s: malformed JSON (line %d, column %d): %s", path, err.line, err.column,
                           err.text);
    int v = result_json_version(root, kind);
    if (v < 0) {
        json_decref(root);
        return status_make(STATUS_INVALID, "%s: its schema version (%s) is not a whole number >= 0%s", path,
                           is_gbench(kind) ? "context." GBENCH_VERSION_KEY : "schema_version",
                           is_gbench(kind) ? " (a decimal string, as Google Benchmark stores context values)"
                                           : " (a JSON integer)");
    }
    if (v > KINDS[kind].version) {
        json_decref(root);
        return status_make(STATUS_INVALID,
                           "%s: schema version %d of %s is not readable by this build (it reads versions 0 to %d; "
                           "written by a newer trainbench?)",
                           path, v, KINDS[kind].file, KINDS[kind].version);
    }
    if (version) *version = v;
    *out = root;
    return status_ok();
}

static void stamp(json_t* root, ResultKind kind) {
    if (is_gbench(kind)) {
        json_t* ctx = json_object_get(root, "context");
        if (!json_is_object(ctx)) {
            ctx = json_object();
            json_object_set_new(root, "context", ctx);
        }
        char v[16];
        snprintf(v, sizeof v, "%d", KINDS[kind].version);
        json_object_set_new(ctx, GBENCH_VERSION_KEY, json_string(v));
    } else {
        json_object_set_new(root, "schema_version", json_integer(KINDS[kind].version));
    }
}

Status result_json_write(const char* path, ResultKind kind, json_t* root) {
    stamp(root, kind);
    size_t flags = JSON_INDENT(kind == RESULT_TRAIN ? 1 : 2) | JSON_PRESERVE_ORDER;
    if (kind == RESULT_TRAIN) flags |= JSON_REAL_PRECISION(17);
    char* text = json_dumps(root, flags);
    CHECK(text != NULL);
    size_t len = strlen(text);
    text = xrealloc(text, len + 2);
    text[len] = '\n';
    text[len + 1] = 0;
    Status s = write_file_atomic(path, text, len + 1);
    free(text);
    return s;
}

bool result_json_print(FILE* f, ResultKind kind, json_t* root) {
    stamp(root, kind);
    char* text = json_dumps(root, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
    CHECK(text != NULL);
    bool ok = fputs(text, f) >= 0 && fputc('\n', f) != EOF && fflush(f) == 0;
    free(text);
    return ok;
}

// ---------------------------------------------------------------- bench.json

static uint64_t name_hash(const char* s) {
    uint64_t h = 1469598103934665603ull;  // FNV-1a 64
    for (; *s; s++) h = (h ^ (uint8_t)*s) * 1099511628211ull;
    return h;
}

// The slot of `name` in the index: where it is, or the empty slot where it would go.
static size_t bench_slot(const BenchFile* f, const char* name) {
    size_t mask = f->slot_cap - 1, h = (size_t)name_hash(name) & mask;
    while (f->slot[h] && strcmp(f->v[f->slot[h] - 1].name, name)) h = (h + 1) & mask;
    return h;
}

BenchEntry* bench_file_find(const BenchFile* f, const char* name) {
    if (!f->slot_cap) return NULL;
    size_t h = bench_slot(f, name);
    return f->slot[h] ? &f->v[f->slot[h] - 1] : NULL;
}

static BenchEntry* bench_get(BenchFile* f, const char* name) {
    BenchEntry* e = bench_file_find(f, name);
    if (e) return e;
    if (f->n == f->cap) {
        f->cap = f->cap ? 2 * f->cap : 16;
        f->v = xrealloc(f->v, f->cap * sizeof(BenchEntry));
    }
    if (2 * (f->n + 1) > f->slot_cap) {  // grow and rehash
        free(f->slot);
        f->slot_cap = f->slot_cap ? 2 * f->slot_cap : 64;
        f->slot = xcalloc(f->slot_cap, sizeof(size_t));
        for (size_t i = 0; i < f->n; i++) f->slot[bench_slot(f, f->v[i].name)] = i + 1;
    }
    e = &f->v[f->n];
    memset(e, 0, sizeof *e);
    e->name = xstrdup(name);
    f->slot[bench_slot(f, name)] = ++f->n;
    return e;
}

static bool unit_seconds(const char* unit, double* scale) {
    static const struct {
        const char* name;
        double s;
    } UNITS[] = {{"ns", 1e-9}, {"us", 1e-6}, {"ms", 1e-3}, {"s", 1.0}};
    for (size_t i = 0; i < ARRAY_LEN(UNITS); i++)
        if (!strcmp(unit, UNITS[i].name)) {
            *scale = UNITS[i].s;
            return true;
        }
    return false;
}

void bench_file_free(BenchFile* f) {
    for (size_t i = 0; i < f->n; i++) {
        free(f->v[i].name);
        free(f->v[i].reps);
        free(f->v[i].error);
    }
    free(f->v);
    free(f->slot);
    json_decref(f->root);
    memset(f, 0, sizeof *f);
}

Status bench_file_read(const char* path, ResultKind kind, BenchFile* out) {
    memset(out, 0, sizeof *out);
    json_t* root;
    int version;
    Status st = result_json_read(path, kind, true, &root, &version);
    if (!status_is_ok(st)) return st;
    st = bench_file_from_json(root, path, out);
    out->version = version;
    return st;
}

Status bench_file_from_json(json_t* root, const char* path, BenchFile* out) {
    memset(out, 0, sizeof *out);
    out->root = root;
    Status st = status_ok();
    json_t* arr = json_object_get(out->root, "benchmarks");
    if (!json_is_array(arr)) {
        bench_file_free(out);
        return status_make(STATUS_INVALID, "%s: no \"benchmarks\" array (expected Google Benchmark JSON)", path);
    }
    size_t i;
    json_t* e;
    json_array_foreach(arr, i, e) {
        if (!json_is_object(e)) {
            st = status_make(STATUS_INVALID, "%s: benchmarks[%zu] is not an object", path, i);
            break;
        }
        const char* rt = json_string_value(json_object_get(e, "run_type"));
        if (rt && !strcmp(rt, "aggregate")) continue;
        const char* nm = json_string_value(json_object_get(e, "run_name"));
        if (!nm) nm = json_string_value(json_object_get(e, "name"));
        if (!nm) {
            st = status_make(STATUS_INVALID, "%s: benchmarks[%zu] has no \"run_name\" or \"name\"", path, i);
            break;
        }
        char name[1024];
        snprintf(name, sizeof name, "%s", nm);
        size_t L = strlen(name);
        if (L > 10 && !strcmp(name + L - 10, "/real_time")) name[L - 10] = 0;
        json_t* err_flag = json_object_get(e, "error_occurred");
        if (err_flag && !json_is_boolean(err_flag)) {  // a failure must not pass as a success
            st = status_make(STATUS_INVALID, "%s: benchmarks[%zu] (%s): \"error_occurred\" must be true or false", path,
                             i, name);
            break;
        }
        BenchEntry* b = bench_get(out, name);
        if (json_is_true(err_flag)) {
            if (!b->error) {
                const char* msg = json_string_value(json_object_get(e, "error_message"));
                b->error = xstrdup(msg && *msg ? msg : "error_occurred without a message");
            }
            continue;
        }
        json_t* rtime = json_object_get(e, "real_time");
        const char* unit = json_string_value(json_object_get(e, "time_unit"));
        double scale;
        if (!json_is_number(rtime) || !isfinite(json_number_value(rtime)) || json_number_value(rtime) < 0) {
            st = status_make(STATUS_INVALID, "%s: benchmarks[%zu] (%s): \"real_time\" must be a number >= 0", path, i,
                             name);
            break;
        }
        if (!unit || !unit_seconds(unit, &scale)) {
            st = status_make(STATUS_INVALID,
                             "%s: benchmarks[%zu] (%s): \"time_unit\" must be one of ns, us, ms, s (got %s)", path, i,
                             name, unit ? unit : "nothing");
            break;
        }
        if (b->n == b->cap) {
            b->cap = b->cap ? 2 * b->cap : 8;
            b->reps = xrealloc(b->reps, b->cap * sizeof(BenchRep));
        }
        b->reps[b->n++] = (BenchRep){json_number_value(rtime) * scale, e};
    }
    if (!status_is_ok(st)) bench_file_free(out);
    return st;
}

void bench_file_drop_prefix(BenchFile* f, const char* prefix) {
    size_t k = 0, L = strlen(prefix);
    for (size_t i = 0; i < f->n; i++) {
        if (!strncmp(f->v[i].name, prefix, L)) {
            free(f->v[i].name);
            free(f->v[i].reps);
            free(f->v[i].error);
        } else {
            f->v[k++] = f->v[i];
        }
    }
    f->n = k;
    if (f->slot_cap) memset(f->slot, 0, f->slot_cap * sizeof(size_t));  // rebuild the index
    for (size_t i = 0; i < f->n; i++) f->slot[bench_slot(f, f->v[i].name)] = i + 1;
}

double bench_rep_value(const BenchRep* r, const char* key) {
    if (!strcmp(key, "real_time")) return r->real_time_s;
    json_t* x = json_object_get(r->raw, key);
    return json_is_number(x) ? json_number_value(x) : NAN;
}

double bench_entry_median(const BenchEntry* e, const char* key) {
    if (!e || !e->n) return NAN;
    double* v = xmalloc(e->n * sizeof(double));
    size_t n = 0;
    for (size_t i = 0; i < e->n; i++) {
        double d = bench_rep_value(&e->reps[i], key);
        if (!isnan(d)) v[n++] = d;
    }
    double m = n ? stats_median(v, n) : NAN;
    free(v);
    return m;
}

size_t bench_entry_metric(const BenchEntry* e, double* out) {
    for (size_t i = 0; i < e->n; i++) out[i] = e->reps[i].real_time_s;
    return e->n;
}

bool bench_is_roofline(const char* name) { return !strncmp(name, BENCH_ROOFLINE_PREFIX, strlen(BENCH_ROOFLINE_PREFIX)); }

double bench_entry_best(const BenchEntry* e) {
    double best = NAN;
    for (size_t i = 0; i < e->n; i++)
        if (isnan(best) || e->reps[i].real_time_s < best) best = e->reps[i].real_time_s;
    return best;
}

double bench_entry_best_value(const BenchEntry* e, const char* key) {
    if (!e) return NAN;
    size_t best = SIZE_MAX;
    for (size_t i = 0; i < e->n; i++)
        if (best == SIZE_MAX || e->reps[i].real_time_s < e->reps[best].real_time_s) best = i;
    return best == SIZE_MAX ? NAN : bench_rep_value(&e->reps[best], key);
}

const char* bench_roofline_of(const BenchEntry* e, char* buf, size_t cap) {
    const char* n = e->name;
    if (bench_is_roofline(n)) return NULL;
    for (size_t i = 0; i < e->n; i++) {
        const char* label = json_string_value(json_object_get(e->reps[i].raw, "label"));
        if (label && !strncmp(label, "roof=", 5)) {
            size_t len = strcspn(label + 5, " ");
            snprintf(buf, cap, "%s%.*s", BENCH_ROOFLINE_PREFIX, (int)len, label + 5);
            return buf;
        }
    }
    const char* probe = NULL;
    if (!strncmp(n, "gemm/", 5)) probe = strstr(n, "/bf16/") ? "dot_bf16" : "fma_f32";
    else if (!strncmp(n, "train_step/", 11)) probe = "fma_f32";
    else if (!strncmp(n, "optim/", 6) || !strncmp(n, "convert/", 8)) probe = "triad";
    if (!probe) return NULL;
    snprintf(buf, cap, "%s%s", BENCH_ROOFLINE_PREFIX, probe);
    return buf;
}

// ---------------------------------------------------------------- conform.json

void conform_file_add(ConformFile* f, const char* id, bool ok, const char* detail) {
    if (f->n == f->cap) {
        f->cap = f->cap ? 2 * f->cap : 16;
        f->cases = xrealloc(f->cases, f->cap * sizeof(ConformCase));
    }
    f->cases[f->n++] = (ConformCase){xstrdup(id), ok, xstrdup(detail ? detail : "")};
}

void conform_file_free(ConformFile* f) {
    for (size_t i = 0; i < f->n; i++) {
        free(f->cases[i].id);
        free(f->cases[i].detail);
    }
    free(f->cases);
    memset(f, 0, sizeof *f);
}

json_t* conform_file_to_json(const ConformFile* f) {
    json_t* root = json_object();
    json_object_set_new(root, "schema_version", json_integer(KINDS[RESULT_CONFORM].version));
    json_t* arr = json_array();
    for (size_t i = 0; i < f->n; i++)
        json_array_append_new(arr, json_pack("{s:s, s:b, s:s}", "id", f->cases[i].id, "ok", f->cases[i].ok, "detail",
                                             f->cases[i].detail));
    json_object_set_new(root, "cases", arr);
    return root;
}

Status conform_file_write(const char* path, const ConformFile* f) {
    json_t* root = conform_file_to_json(f);
    Status s = result_json_write(path, RESULT_CONFORM, root);
    json_decref(root);
    return s;
}

Status conform_file_read(const char* path, ConformFile* out) {
    memset(out, 0, sizeof *out);
    json_t* root;
    Status st = result_json_read(path, RESULT_CONFORM, true, &root, &out->version);
    if (!status_is_ok(st)) return st;
    json_t* cases = json_is_array(root) ? root : json_object_get(root, "cases");
    json_t* nfail = json_is_object(root) ? json_object_get(root, "failures") : NULL;
    if (json_is_array(cases)) {
        size_t i;
        json_t* c;
        json_array_foreach(cases, i, c) {
            json_t* ok = json_object_get(c, "ok");
            const char* id = json_string_value(json_object_get(c, "id"));
            if (!json_is_object(c) || !json_is_boolean(ok) || !id) {
                st = status_make(STATUS_INVALID, "%s: case %zu needs \"id\" (string) and \"ok\" (true or false)", path,
                                 i);
                break;
            }
            conform_file_add(out, id, json_is_true(ok), json_string_value(json_object_get(c, "detail")));
        }
    } else if (out->version == 0 && json_is_integer(nfail) && json_integer_value(nfail) >= 0) {
        out->legacy_count_only = true;
        out->legacy_failures = (size_t)json_integer_value(nfail);
    } else {
        st = status_make(STATUS_INVALID,
                         "%s: expected {\"cases\": [{\"id\": ..., \"ok\": true|false, \"detail\": ...}]} or {\"failures\": N}",
                         path);
    }
    json_decref(root);
    if (!status_is_ok(st)) conform_file_free(out);
    return st;
}

// ---------------------------------------------------------------- memory.json

static const char* str_or(json_t* o, const char* key, const char* dflt) {
    const char* s = json_string_value(json_object_get(o, key));
    return s ? s : dflt;
}

static Status memory_model_read(const char* path, json_t* rep, MemoryModel* m) {
    memset(m, 0, sizeof *m);
    json_t* opts = json_object_get(rep, "optimizers");
    if (!json_is_array(opts))
        return status_make(STATUS_INVALID, "%s: no \"optimizers\" array (expected `trainbench memory --json` output)",
                           path);
    m->model = xstrdup(str_or(rep, "model", ""));
    m->parameters = json_integer_value(json_object_get(rep, "parameters"));
    m->parameter_bytes = json_integer_value(json_object_get(rep, "parameter_bytes"));
    m->rows = xcalloc(json_array_size(opts) + 1, sizeof(MemoryRow));
    size_t i;
    json_t* o;
    json_array_foreach(opts, i, o) {
        const char* name = json_string_value(json_object_get(o, "optimizer"));
        json_t* est = json_object_get(o, "estimate_bytes");
        json_t* meas = json_object_get(o, "measured_bytes");
        if (!name || !json_is_integer(est) || !json_is_integer(meas) || json_integer_value(est) < 0 ||
            json_integer_value(meas) < 0)
            return status_make(STATUS_INVALID,
                               "%s: optimizers[%zu] needs \"optimizer\", \"estimate_bytes\" and \"measured_bytes\" "
                               "(integers >= 0)", path, i);
        MemoryRow* row = &m->rows[m->n++];
        *row = (MemoryRow){xstrdup(name), xstrdup(str_or(o, "variant", "")), xstrdup(str_or(o, "reference", "")),
                           json_integer_value(est), json_integer_value(meas), NULL, 0};
        json_t* pr = json_object_get(o, "zero1_per_rank");
        if (pr && !json_is_array(pr))
            return status_make(STATUS_INVALID, "%s: optimizers[%zu].zero1_per_rank must be an array (`memory --ranks R "
                                               "--zero 1`)", path, i);
        row->ranks = xcalloc(json_array_size(pr) + 1, sizeof *row->ranks);
        size_t k;
        json_t* e;
        json_array_foreach(pr, k, e) {
            json_t* re = json_object_get(e, "estimate_bytes");
            json_t* rm = json_object_get(e, "measured_bytes");
            if (!json_is_integer(re) || !json_is_integer(rm))
                return status_make(STATUS_INVALID, "%s: optimizers[%zu].zero1_per_rank[%zu] needs \"estimate_bytes\" and "
                                                   "\"measured_bytes\" (integers)", path, i, k);
            row->ranks[row->n_ranks++] = (struct MemoryRank){
                (int)json_integer_value(json_object_get(e, "rank")), (int)json_integer_value(json_object_get(e, "first_tensor")),
                (int)json_integer_value(json_object_get(e, "last_tensor")), json_integer_value(re), json_integer_value(rm)};
        }
    }
    json_t* rk = json_object_get(rep, "ranks");
    m->ranks = json_is_integer(rk) ? (int)json_integer_value(rk) : 1;
    m->zero_stage = (int)json_integer_value(json_object_get(rep, "zero_stage"));
    json_t* st = json_object_get(rep, "training_step");
    if (st) {
        json_t* est = json_object_get(json_object_get(st, "estimate"), "total_bytes");
        json_t* ws = json_object_get(st, "measured_workspace_bytes");
        if (!json_is_object(st) || !json_is_integer(est) || !json_is_integer(ws))
            return status_make(STATUS_INVALID,
                               "%s: \"training_step\" needs \"estimate\".\"total_bytes\" and \"measured_workspace_bytes\" "
                               "(integers; `trainbench memory --step`)", path);
        MemoryStep* s = &m->step;
        s->present = true;
        s->batch = json_integer_value(json_object_get(st, "batch"));
        s->seq_len = json_integer_value(json_object_get(st, "seq_len"));
        snprintf(s->precision, sizeof s->precision, "%s", str_or(st, "precision", "?"));
        snprintf(s->backend, sizeof s->backend, "%s", str_or(st, "backend", "?"));
        s->estimate_bytes = json_integer_value(est);
        s->saved_activations_bytes = json_integer_value(json_object_get(json_object_get(st, "estimate"), "saved_activations_bytes"));
        s->activation_gradient_bytes =
            json_integer_value(json_object_get(json_object_get(st, "estimate"), "activation_gradient_bytes"));
        s->measured_workspace_bytes = json_integer_value(ws);
        s->within_tolerance = json_is_true(json_object_get(st, "within_tolerance"));
        s->tol_below = json_number_value(json_object_get(json_object_get(st, "tolerance"), "below"));
        s->tol_above = json_number_value(json_object_get(json_object_get(st, "tolerance"), "above"));
        s->params_grads_bytes = json_integer_value(json_object_get(st, "params_grads_bytes"));
        s->optimizer_state_bytes = json_integer_value(json_object_get(st, "optimizer_state_bytes"));
        json_t* rss = json_object_get(st, "peak_rss_bytes");
        s->peak_rss_bytes = json_is_integer(rss) ? json_integer_value(rss) : -1;
    }
    return status_ok();
}

void memory_file_free(MemoryFile* f) {
    for (size_t k = 0; k < f->n; k++) {
        MemoryModel* m = &f->models[k];
        for (size_t i = 0; i < m->n; i++) {
            free(m->rows[i].optimizer);
            free(m->rows[i].variant);
            free(m->rows[i].reference);
            free(m->rows[i].ranks);
        }
        free(m->rows);
        free(m->model);
    }
    free(f->models);
    memset(f, 0, sizeof *f);
}

Status memory_file_read(const char* path, MemoryFile* out) {
    memset(out, 0, sizeof *out);
    json_t* root;
    Status st = result_json_read(path, RESULT_MEMORY, true, &root, &out->version);
    if (!status_is_ok(st)) return st;
    size_t n = json_is_array(root) ? json_array_size(root) : 1;
    out->models = xcalloc(n + 1, sizeof(MemoryModel));
    for (size_t i = 0; i < n && status_is_ok(st); i++) {
        st = memory_model_read(path, json_is_array(root) ? json_array_get(root, i) : root, &out->models[i]);
        out->n = i + 1;
    }
    json_decref(root);
    if (!status_is_ok(st)) memory_file_free(out);
    return st;
}

// ---------------------------------------------------------------- machine.json

const char* machine_class_of(json_t* root) {
    const char* c = json_string_value(json_object_get(root, "machine_class"));
    return c ? c : json_string_value(json_object_get(root, "machine_id"));
}

Status machine_file_read(const char* path, MachineFile* out) {
    memset(out, 0, sizeof *out);
    Status st = result_json_read(path, RESULT_MACHINE, true, &out->root, &out->version);
    if (!status_is_ok(st)) return st;
    if (!json_is_object(out->root)) {
        json_decref(out->root);
        out->root = NULL;
        return status_make(STATUS_INVALID, "%s: expected an object (`trainbench record`'s machine.json)", path);
    }
    json_t* r = out->root;
    static const char* const STRINGS[] = {"machine_id", "machine_class", "instance_id"};
    for (size_t k = 0; k < ARRAY_LEN(STRINGS); k++) {
        json_t* v = json_object_get(r, STRINGS[k]);
        if (v && !json_is_string(v)) {
            json_decref(out->root);
            out->root = NULL;
            return status_make(STATUS_INVALID, "%s: \"%s\" must be a string", path, STRINGS[k]);
        }
    }
    out->machine_id = str_or(r, "machine_id", "unknown");
    out->machine_class = machine_class_of(r) ? machine_class_of(r) : "unknown";
    out->instance_id = str_or(r, "instance_id", "unknown");
    out->run_id = str_or(r, "run_id", "unknown");
    out->commit = str_or(json_object_get(r, "git"), "commit", "unknown");
    out->date = str_or(r, "date", "");
    out->label = str_or(r, "label", "");
    return status_ok();
}

void machine_file_free(MachineFile* f) {
    json_decref(f->root);
    memset(f, 0, sizeof *f);
}

// ---------------------------------------------------------------- train results.json

Status train_file_read(const char* path, TrainFile* out) {
    memset(out, 0, sizeof *out);
    Status st = result_json_read(path, RESULT_TRAIN, true, &out->root, &out->version);
    if (!status_is_ok(st)) return st;
    out->config = json_object_get(out->root, "config");
    out->records = json_object_get(out->root, "records");
    out->evals = json_object_get(out->root, "evals");
    out->summary = json_object_get(out->root, "summary");
    if (!json_is_object(out->config) || !json_is_array(out->records) || !json_is_array(out->evals) ||
        !json_is_object(out->summary)) {
        train_file_free(out);
        return status_make(STATUS_INVALID,
                           "%s: expected `trainbench train` results: \"config\" and \"summary\" objects, \"records\" "
                           "and \"evals\" arrays",
                           path);
    }
    // what the report plots: each record's step an integer >= 1 and its numbers numbers (null: a
    // non-finite value), each eval's step >= 0 and its accuracy in [0, 1] (a wrong type is
    // malformed, never a silently dropped or misplotted point)
    static const char* const REC_NUMS[] = {"loss", "learning_rate", "loss_scale", "grad_norm", "step_time_s"};
    static const char* const EVAL_NUMS[] = {"eval_loss", "eval_accuracy", "eval_f1", "epoch"};
    const json_t* arrays[2] = {out->records, out->evals};
    for (int a = 0; a < 2; a++) {
        size_t i;
        json_t* e;
        json_array_foreach(arrays[a], i, e) {
            const char* what = a == 0 ? "records" : "evals";
            json_t* step = json_object_get(e, "step");
            const char* bad = NULL;
            if (!json_is_object(e)) bad = "is not an object";
            else if (!json_is_integer(step) || json_integer_value(step) < (a == 0 ? 1 : 0))
                bad = a == 0 ? "needs \"step\", an integer >= 1" : "needs \"step\", an integer >= 0";
            const char* const* keys = a == 0 ? REC_NUMS : EVAL_NUMS;
            const size_t nk = a == 0 ? ARRAY_LEN(REC_NUMS) : ARRAY_LEN(EVAL_NUMS);
            char msg[128];
            for (size_t k = 0; !bad && k < nk; k++) {
                json_t* v = json_object_get(e, keys[k]);
                if (v && !json_is_number(v) && !json_is_null(v)) {
                    snprintf(msg, sizeof msg, "has \"%s\" that is not a number or null", keys[k]);
                    bad = msg;
                }
            }
            json_t* acc = a == 1 ? json_object_get(e, "eval_accuracy") : NULL;
            if (!bad && json_is_number(acc) && !(json_number_value(acc) >= 0 && json_number_value(acc) <= 1))
                bad = "has \"eval_accuracy\" outside [0, 1]";
            if (bad) {
                Status bst = status_make(STATUS_INVALID, "%s: %s[%zu] %s", path, what, i, bad);
                train_file_free(out);
                return bst;
            }
        }
    }
    return status_ok();
}

void train_file_free(TrainFile* f) {
    json_decref(f->root);
    memset(f, 0, sizeof *f);
}

Status train_file_write(const char* path, const char* trainbench_version, const char* status, json_t* config,
                        json_t* records, json_t* evals, json_t* summary) {
    json_t* root = json_object();
    json_object_set_new(root, "schema_version", json_integer(KINDS[RESULT_TRAIN].version));
    json_object_set_new(root, "trainbench_version", json_string(trainbench_version));
    json_object_set_new(root, "status", json_string(status));
    json_object_set(root, "config", config);
    json_object_set(root, "records", records);
    json_object_set(root, "evals", evals);
    json_object_set(root, "summary", summary);
    Status s = result_json_write(path, RESULT_TRAIN, root);
    json_decref(root);
    return s;
}
