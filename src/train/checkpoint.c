// checkpoint.c — save and load `trainbench train` checkpoints (checkpoint.h): one safetensors
// file per checkpoint folder with params, optimizer state and, as metadata, step, optimizer
// step, GradScaler state, config and records. Loading checks every metadata number and the
// config against the run before anything is used.
// Saving: the folder is built under a temporary name and renamed when complete; tensors are
// streamed from the run's buffers (no whole copy in memory).
// Not here: the records' format (train.c), the training loop, results.json.
#include <dirent.h>
#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/safetensors.h"
#include "model/hf_weights.h"
#include "optim/optim.h"
#include "train/checkpoint.h"

// The checkpoint file of folder `dir` written from the run's buffers, tensor by tensor
// (st_writer_add_ref: no copy of params or state is made).
static Status write_checkpoint_file(const char* dir, int64_t step, const CheckpointRun* c, const json_t* records) {
    char path[4400];
    snprintf(path, sizeof path, "%s/%s", dir, CHECKPOINT_FILE);
    StWriter* w = st_writer_new();
    for (size_t i = 0; i < c->table->n; i++) {
        const ParamTensor* t = &c->table->t[i];
        char name[256];
        snprintf(name, sizeof name, "param.%s", t->name);
        st_writer_add_ref(w, name, DTYPE_F32, t->shape.ndim, t->shape.dims, c->params + t->offset);
        const OptimState* os = c->mo->states[i];
        CHECK(os, "checkpoint of %s without its optimizer state (ZeRO-1: gather it first)", t->name);
        for (int k = 0; k < os->n_tensors; k++) {
            const StateTensor* st = &os->tensors[k];
            snprintf(name, sizeof name, "optim.%s.%s", t->name, st->name);
            st_writer_add_ref(w, name, st->dtype, st->shape.ndim, st->shape.dims, st->data);
        }
    }
    char buf[64];
    st_writer_meta(w, "format", CHECKPOINT_FORMAT);
    snprintf(buf, sizeof buf, "%lld", (long long)step);
    st_writer_meta(w, "step", buf);
    snprintf(buf, sizeof buf, "%lld", (long long)model_optim_steps_taken(c->mo));
    st_writer_meta(w, "optimizer_step", buf);
    snprintf(buf, sizeof buf, "%a", (double)c->scaler->scale);
    st_writer_meta(w, "scaler_scale", buf);
    snprintf(buf, sizeof buf, "%d", (int)c->scaler->growth_tracker);
    st_writer_meta(w, "scaler_growth_tracker", buf);
    snprintf(buf, sizeof buf, "%llu", (unsigned long long)c->scaler->n_skipped);
    st_writer_meta(w, "scaler_skipped", buf);
    char* cfg = json_dumps(c->config, JSON_COMPACT | JSON_SORT_KEYS);
    st_writer_meta(w, "config", cfg);
    free(cfg);
    char* rtext = json_dumps(records, JSON_COMPACT | JSON_REAL_PRECISION(17));
    st_writer_meta(w, "records", rtext);
    free(rtext);
    Status s = st_writer_save(w, path);  // atomic, streamed
    st_writer_free(w);
    return s;
}

// The transformers view of a checkpoint folder: model.safetensors (state_dict names only,
// loadable by DistilBertForSequenceClassification.load_state_dict(strict=True)) and config.json
// (from_pretrained(dir) loads the folder). Written beside checkpoint.safetensors, atomically.
static Status save_checkpoint_hf_model(const CheckpointRun* c, const char* dir) {
    char path[4400];
    snprintf(path, sizeof path, "%s/%s", dir, HF_WEIGHTS_FILE);
    Status s = hf_weights_save(c->table, c->params, path);
    if (!status_is_ok(s)) return s;
    snprintf(path, sizeof path, "%s/%s", dir, HF_CONFIG_FILE);
    return hf_config_save(c->mcfg, c->dropout, path);
}

// The folder is made complete under a temporary name, OUTPUT_DIR/checkpoint-<step>.tmp.<pid>/,
// then renamed: a kill or a full disk at any point leaves either no checkpoint-<step>/ or a
// complete one (plus a temp folder that the next run removes, remove_stale_temps).
Status checkpoint_save(const char* output_dir, int64_t step, const CheckpointRun* c, const json_t* records) {
    char dir[4200], tmp[4300], aside[4400];
    snprintf(dir, sizeof dir, "%s/checkpoint-%lld", output_dir, (long long)step);
    snprintf(tmp, sizeof tmp, "%s.tmp.%ld", dir, (long)getpid());
    Status s = remove_tree(tmp);
    if (status_is_ok(s) && mkdir(tmp, 0755) != 0)
        s = status_make(STATUS_IO, "%s: cannot create folder: %s", tmp, strerror(errno));
    if (!status_is_ok(s)) return s;
    s = write_checkpoint_file(tmp, step, c, records);
    if (status_is_ok(s)) s = save_checkpoint_hf_model(c, tmp);
    if (status_is_ok(s)) {
        fsync_dir(tmp);
        // an older checkpoint-<step>/ (a rerun into the same folder) is moved aside first:
        // rename() cannot replace a non-empty folder
        snprintf(aside, sizeof aside, "%s.old.tmp.%ld", dir, (long)getpid());
        bool moved = path_is_dir(dir) && rename(dir, aside) == 0;
        if (rename(tmp, dir) != 0) {
            s = status_make(STATUS_IO, "%s: cannot rename the complete checkpoint into place: %s", dir, strerror(errno));
            if (moved) (void)rename(aside, dir);
        } else {
            fsync_dir(output_dir);
            if (moved) (void)remove_tree(aside);
        }
    }
    if (!status_is_ok(s)) {
        (void)remove_tree(tmp);
        return s;
    }
    printf("Saving model checkpoint to %s\n", dir);
    return s;
}

// true when `name` is checkpoint-<digits>; *step its number
static bool checkpoint_dir_step(const char* name, long long* step) {
    if (strncmp(name, "checkpoint-", 11) != 0) return false;
    const char* d = name + 11;
    if (!*d || strlen(d) > 15) return false;
    for (const char* p = d; *p; p++)
        if (*p < '0' || *p > '9') return false;
    *step = atoll(d);
    return true;
}

bool checkpoint_folder_any(const char* dir, char* name, size_t cap) {
    DIR* d = opendir(dir);
    if (!d) return false;
    bool found = false;
    struct dirent* de;
    long long st;
    while (!found && (de = readdir(d)))
        if (checkpoint_dir_step(de->d_name, &st)) {
            snprintf(name, cap, "%s", de->d_name);
            found = true;
        }
    closedir(d);
    return found;
}

Status checkpoint_resolve(const char* dir, char* out, size_t cap) {
    char path[4400];
    snprintf(path, sizeof path, "%s/%s", dir, CHECKPOINT_FILE);
    if (access(path, F_OK) == 0 || !path_is_dir(dir)) {
        snprintf(out, cap, "%s", dir);
        return status_ok();
    }
    DIR* d = opendir(dir);
    if (!d) return status_make(STATUS_IO, "%s: cannot open: %s", dir, strerror(errno));
    long long best = -1;
    char best_name[256] = "";
    struct dirent* de;
    while ((de = readdir(d))) {
        long long st;
        if (!checkpoint_dir_step(de->d_name, &st) || st <= best) continue;
        snprintf(path, sizeof path, "%s/%s/%s", dir, de->d_name, CHECKPOINT_FILE);
        if (access(path, F_OK) != 0) continue;  // not a complete checkpoint
        best = st;
        snprintf(best_name, sizeof best_name, "%s", de->d_name);
    }
    closedir(d);
    if (best < 0)
        return status_make(STATUS_INVALID, "%s: holds neither %s nor a complete checkpoint-<step>/ folder", dir,
                           CHECKPOINT_FILE);
    if ((size_t)snprintf(out, cap, "%s/%s", dir, best_name) >= cap)
        return status_make(STATUS_INVALID, "%s: path too long", dir);
    return status_ok();
}

void checkpoint_backend_peek(const char* dir, char* out, size_t cap) {
    snprintf(out, cap, "%s", "");
    char ck[4400], path[4500];
    if (!status_is_ok(checkpoint_resolve(dir, ck, sizeof ck))) return;
    snprintf(path, sizeof path, "%s/%s", ck, CHECKPOINT_FILE);
    FILE* f = fopen_regular(path, NULL);
    if (!f) return;
    uint8_t len8[8];
    uint64_t n = 0;
    char* header = NULL;
    if (fread(len8, 1, sizeof len8, f) == sizeof len8) {
        for (int i = 7; i >= 0; i--) n = n << 8 | len8[i];  // little-endian u64
        if (n > 0 && n <= ST_MAX_HEADER_BYTES && (header = malloc((size_t)n)) && fread(header, 1, (size_t)n, f) != (size_t)n) {
            free(header);
            header = NULL;
        }
    }
    fclose(f);
    if (!header) return;
    json_t* h = json_loadb(header, (size_t)n, 0, NULL);
    free(header);
    const char* text = json_string_value(json_object_get(json_object_get(h, "__metadata__"), "config"));
    json_t* cfg = text ? json_loads(text, 0, NULL) : NULL;
    const char* name = json_string_value(json_object_get(cfg, "backend"));
    if (name) snprintf(out, cap, "%s", name);
    json_decref(cfg);
    json_decref(h);
}

static bool parse_i64_meta(const SafeTensors* st, const char* key, long long* out) {
    const char* v = st_meta(st, key);
    if (!v) return false;
    char* end;
    errno = 0;
    *out = strtoll(v, &end, 10);
    return errno == 0 && end != v && *end == '\0';
}

// Checkpoints written before a run setting existed lack its config key; they were made with what
// is now that setting's "off" value, so a run with that value continues them (anything else is
// refused naming the key, as for every setting): gradient_accumulation_steps 1 (before
// accumulation), dropout with all three probabilities 0 (before dropout).
static bool matches_before_key_existed(const char* key, json_t* val) {
    if (!strcmp(key, "gradient_accumulation_steps")) return json_integer_value(val) == 1 && json_is_integer(val);
    if (!strcmp(key, "dropout")) {
        static const char* const P[] = {"dropout", "attention_dropout", "seq_classif_dropout"};
        for (size_t i = 0; i < sizeof P / sizeof P[0]; i++) {
            json_t* p = json_object_get(val, P[i]);
            if (!json_is_number(p) || json_number_value(p) != 0) return false;
        }
        return true;
    }
    return false;
}

Status checkpoint_load(const char* dir, CheckpointRun* c, int64_t* step_out, json_t** records, char* path_out,
                       size_t cap) {
    char path[4300];
    snprintf(path, sizeof path, "%s/%s", dir, CHECKPOINT_FILE);
    snprintf(path_out, cap, "%s", path);
    *records = NULL;
    SafeTensors st;
    Status s = st_read(path, &st);
    if (!status_is_ok(s)) return s;
    const char* fmt = st_meta(&st, "format");
    const char* cfg_text = st_meta(&st, "config");
    const char* rec_text = st_meta(&st, "records");
    const char* scale_text = st_meta(&st, "scaler_scale");
    long long step, ostep, tracker, skipped;
    if (!fmt || strcmp(fmt, CHECKPOINT_FORMAT) != 0 || !cfg_text || !rec_text || !scale_text) {
        st_free(&st);
        return status_make(STATUS_INVALID, "%s: not a trainbench checkpoint (format %s expected)", path, CHECKPOINT_FORMAT);
    }
    // the format is ours: a bad field is named, not taken for another format
    static const char* const INTS[] = {"step", "optimizer_step", "scaler_growth_tracker", "scaler_skipped"};
    long long* const int_out[] = {&step, &ostep, &tracker, &skipped};
    for (size_t i = 0; i < ARRAY_LEN(INTS); i++)
        if (!parse_i64_meta(&st, INTS[i], int_out[i])) {
            const char* v = st_meta(&st, INTS[i]);
            Status bad = v ? status_make(STATUS_INVALID, "%s: metadata field %s must be a decimal integer (got \"%.40s\")",
                                         path, INTS[i], v)
                           : status_make(STATUS_INVALID, "%s: metadata field %s is missing", path, INTS[i]);
            st_free(&st);
            return bad;
        }
    // Every number is checked against the run it is applied to before anything is used: the
    // step indexes the data order and the records, the scaler's fields drive every later step.
    char* end = NULL;
    double scale = strtod(scale_text, &end);
    const GradScaler* sc = c->scaler;
    const long long max_step = (long long)INT32_MAX * 1024;
    const long long interval = sc->cfg.enabled ? sc->cfg.growth_interval : 1;
    s = status_ok();
    if (step < 0 || step > max_step)
        s = status_make(STATUS_INVALID, "%s: metadata field step must be in [0, %lld] (got %lld)", path, max_step, step);
    else if (skipped < 0 || skipped > step)
        s = status_make(STATUS_INVALID, "%s: metadata field scaler_skipped must be in [0, step = %lld] (got %lld)", path,
                        step, skipped);
    else if (ostep != step - skipped)
        s = status_make(STATUS_INVALID, "%s: metadata field optimizer_step must be step - scaler_skipped = %lld (got %lld)",
                        path, step - skipped, ostep);
    else if (end == scale_text || *end || !isfinite(scale) || scale < 0 || (!sc->cfg.enabled && scale != sc->scale))
        s = status_make(STATUS_INVALID, "%s: metadata field scaler_scale must be a finite number >= 0%s (got '%.60s')",
                        path, sc->cfg.enabled ? "" : " equal to 1 (this run has no loss scaling)", scale_text);
    else if (tracker < 0 || tracker >= interval)
        s = status_make(STATUS_INVALID, "%s: metadata field scaler_growth_tracker must be in [0, %lld) (got %lld)", path,
                        interval, tracker);
    if (!status_is_ok(s)) {
        st_free(&st);
        return s;
    }
    json_t* saved_cfg = json_loads(cfg_text, 0, NULL);
    const char* key;
    json_t* val;
    if (!saved_cfg) s = status_make(STATUS_INVALID, "%s: config metadata is not JSON", path);
    else {
        json_object_foreach((json_t*)c->config, key, val) {
            if (!strcmp(key, "max_steps") || !strcmp(key, "threads") || !strcmp(key, "eval_steps") ||
                !strcmp(key, "logging_steps") || !strcmp(key, "save_steps") || !strcmp(key, "output_dir") ||
                !strcmp(key, "init_from") || !strcmp(key, "ddp_ranks") || !strcmp(key, "zero_stage"))
                continue;  // may change between the two parts of a run (init_from: the weights now
                           // come from the checkpoint; the number of ranks and the ZeRO stage:
                           // the state is the same, README "Distributed")
            // with --ddp on either side the micro-batches per step (ranks x accumulation) may
            // change: the same product continues bit for bit, another one from the same state
            if (!strcmp(key, "gradient_accumulation_steps") &&
                (json_object_get(c->config, "ddp_ranks") || json_object_get(saved_cfg, "ddp_ranks")))
                continue;
            if (!json_object_get(saved_cfg, key) && matches_before_key_existed(key, val)) continue;
            if (!json_equal(val, json_object_get(saved_cfg, key))) {
                char* a = json_dumps(val, JSON_ENCODE_ANY | JSON_COMPACT);
                char* b = json_dumps(json_object_get(saved_cfg, key) ? json_object_get(saved_cfg, key) : json_null(),
                                     JSON_ENCODE_ANY | JSON_COMPACT);
                s = status_make(STATUS_INVALID, "%s: the checkpoint was made with %s=%s, this run has %s=%s", path,
                                key, b, key, a);
                free(a);
                free(b);
                break;
            }
        }
    }
    json_decref(saved_cfg);
    for (size_t i = 0; i < c->table->n && status_is_ok(s); i++) {
        const ParamTensor* t = &c->table->t[i];
        char name[256];
        snprintf(name, sizeof name, "param.%s", t->name);
        const StTensor* pt = st_find(&st, name);
        if (!pt || pt->dtype != DTYPE_F32 || pt->numel != t->numel) {
            s = status_make(STATUS_INVALID, "%s: tensor %s missing or of the wrong dtype/size", path, name);
            break;
        }
        memcpy(c->params + t->offset, pt->data, t->numel * sizeof(float));
        OptimState* os = c->mo->states[i];
        if (!os) continue;  // ZeRO-1: another rank holds this tensor's state and restores it
        for (int k = 0; k < os->n_tensors; k++) {
            StateTensor* stt = &os->tensors[k];
            snprintf(name, sizeof name, "optim.%s.%s", t->name, stt->name);
            const StTensor* ot = st_find(&st, name);
            size_t bytes = shape_numel(&stt->shape) * dtype_traits(stt->dtype)->size;
            if (!ot || ot->dtype != stt->dtype || ot->nbytes != bytes) {
                // what this run expects against what the file holds, named (e.g. an adamw_bnb_8bit
                // checkpoint from before 2026-12-03: embeddings' state then 8-bit, now 32-bit as
                // the Trainer keeps it; such a run cannot continue from it)
                char have[64] = "absent";
                if (ot) snprintf(have, sizeof have, "%s, %zu bytes", dtype_name(ot->dtype), ot->nbytes);
                s = status_make(STATUS_INVALID, "%s: optimizer state %s: this run keeps it as %s, %zu bytes; the "
                                "checkpoint holds %s (a checkpoint of another optimizer or state layout%s)", path, name,
                                dtype_name(stt->dtype), bytes, have,
                                t->is_embedding && stt->dtype == DTYPE_F32 && ot && ot->dtype == DTYPE_U8
                                    ? "; adamw_bnb_8bit runs before 2026-12-03 kept nn.Embedding state in 8 bits, "
                                      "the Trainer keeps 32: start the run again"
                                    : "");
                break;
            }
            memcpy(stt->data, ot->data, bytes);
        }
        os->step = ostep;
    }
    if (status_is_ok(s)) {
        json_t* recs = json_loads(rec_text, 0, NULL);
        if (!recs) s = status_make(STATUS_INVALID, "%s: records metadata is not JSON", path);
        *records = recs;
        c->scaler->scale = (float)scale;
        c->scaler->growth_tracker = (int32_t)tracker;
        c->scaler->n_skipped = (uint64_t)skipped;
        *step_out = step;
    }
    st_free(&st);
    return s;
}
