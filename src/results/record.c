// record.c — `trainbench record`: opens a new result folder DIR/<machine-id>/<run-id>/, writes
// its machine.json (the `trainbench info --json` description plus run metadata) atomically and
// prints the folder path as the only line on stdout, so scripts (`make run`) can capture it.
//
//   machine-id  the machine CLASS id (also stored as "machine_class"): <cpu-model-slug>-<logical
//               cores>c-<8 hex digits of FNV-1a over the class description>, e.g.
//               amd-epyc-2c-1a2b3c4d, where the class description is the CPU model, logical
//               cores, memory (GiB, rounded), ISA flags, every backend's library facts (OpenBLAS
//               core and configuration, oneDNN ISA) and the kernel-relevant environment
//               (OPENBLAS_CORETYPE, thread counts and wait policies): two machines of one kind —
//               ephemeral CI runners — share it, and so share a history and baselines. Never the
//               hostname (every VM here is called `vm`). Lowercase [a-z0-9-] only (a folder name).
//               --machine-class TEXT (or TRAINBENCH_MACHINE_CLASS) sets it, slugified.
//   instance-id "instance_id": this machine instance: 16 hex digits of FNV-1a 64 over
//               /etc/machine-id (else /var/lib/dbus/machine-id, else the hostname plus this
//               boot's /proc/sys/kernel/random/boot_id), hashed so the raw id is not published;
//               --instance-id TEXT (or TRAINBENCH_INSTANCE_ID) sets it.
//   run-id      <UTC start time YYYYmmddTHHMMSSZ>-<4 hex digits>, e.g. 20261129T221200Z-3f9a:
//               sorts by time. The folder is built as <machine-id>/.<time>.tmp.<pid>/ and renamed
//               to the run folder once machine.json is complete (renameat2 RENAME_NOREPLACE: on
//               EEXIST another suffix is tried, so a run never overwrites another, and a killed
//               record leaves no run folder without machine.json; the next record removes the
//               temp folders of dead processes).
//
// machine.json adds to info's fields: machine_id, run_id, date (UTC ISO 8601), label, git
// {commit, dirty} (from `git rev-parse HEAD` / `git status --porcelain` in the current folder,
// results/ excluded; commit "unknown" and dirty null outside a git checkout) and cflags (the
// flags this binary was compiled with; the Makefile passes them as TRAINBENCH_CFLAGS).
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <time.h>
#include <unistd.h>

#include "core/cli.h"
#include "core/common.h"
#include "core/cpu.h"
#include "results/info.h"
#include "results/results.h"

#ifndef TRAINBENCH_CFLAGS
#define TRAINBENCH_CFLAGS "unknown (built without -DTRAINBENCH_CFLAGS)"
#endif

static int record_run(int argc, char** argv);

const Command cmd_record = {
    .name = "record",
    .summary = "open a new result folder DIR/<machine-id>/<run-id>/ with machine.json; prints its path",
    .usage = "trainbench record [--results DIR (default results)] [--threads N] [--label TEXT]\n"
             "    [--machine-class TEXT (default: derived from CPU, cores, memory, ISA, BLAS, environment)]\n"
             "    [--instance-id TEXT (default: hash of /etc/machine-id)]",
    .run = record_run,
};

// Lowercase ASCII letters and digits kept, every other run of characters becomes one '-';
// no leading/trailing '-'; at most `cap - 1` characters; "unknown-cpu" when nothing is left.
static void slugify(const char* in, char* out, size_t cap) {
    size_t n = 0;
    bool dash = false;
    for (const char* p = in; *p && n + 1 < cap; p++) {
        char c = *p;
        if (c >= 'A' && c <= 'Z') c = (char)(c - 'A' + 'a');
        bool keep = (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9');
        if (keep) {
            if (dash && n > 0 && n + 2 < cap) out[n++] = '-';
            out[n++] = c;
            dash = false;
        } else {
            dash = true;
        }
    }
    out[n] = 0;
    if (n == 0) snprintf(out, cap, "unknown-cpu");
}

static uint32_t fnv1a(const char* s) {
    uint32_t h = 2166136261u;
    for (; *s; s++) h = (h ^ (uint8_t)*s) * 16777619u;
    return h;
}

static uint64_t fnv1a64(const char* s) {
    uint64_t h = 1469598103934665603ull;
    for (; *s; s++) h = (h ^ (uint8_t)*s) * 1099511628211ull;
    return h;
}

// Environment variables `info` began to record after the class description's first version:
// each enters the description only when set, so that adding one to the record does not move
// every machine where it is unset (all of them, usually) into a new class, away from its runs'
// history and baselines. (TRAINBENCH_TORCH_SQRT came with 20d2cdf; from then until this rule,
// 73fbb65 included, every machine's class id differed from its earlier runs'.)
static const char* const CLASS_ENV_WHEN_SET[] = {"TRAINBENCH_TORCH_SQRT", "TRAINBENCH_STREAM_PREFETCH"};

// The class description of an `info --json` root (see the header) and its id (results.h).
void machine_class_derive(json_t* info, char* out, size_t cap) {
    json_t* cls = json_object();
    json_t* cpu = json_object_get(info, "cpu");
    json_object_set(cls, "cpu_model", json_object_get(cpu, "model"));
    json_object_set(cls, "logical_cores", json_object_get(cpu, "logical_cores"));
    json_object_set(cls, "features", json_object_get(cpu, "features"));
    json_int_t mem = json_integer_value(json_object_get(info, "memory_bytes"));
    json_object_set_new(cls, "memory_gib", json_integer((mem + (1 << 29)) >> 30));
    json_t* libs = json_object();
    size_t i;
    json_t* b;
    json_array_foreach(json_object_get(info, "backends"), i, b)
        json_object_set(libs, json_string_value(json_object_get(b, "name")), json_object_get(b, "library"));
    json_object_set_new(cls, "libraries", libs);
    json_t* env = json_deep_copy(json_object_get(info, "environment"));
    for (size_t k = 0; env && k < sizeof CLASS_ENV_WHEN_SET / sizeof CLASS_ENV_WHEN_SET[0]; k++)
        if (json_is_null(json_object_get(env, CLASS_ENV_WHEN_SET[k]))) json_object_del(env, CLASS_ENV_WHEN_SET[k]);
    if (env) json_object_set_new(cls, "environment", env);
    json_object_set(cls, "threads", json_object_get(info, "threads"));
    char* text = json_dumps(cls, JSON_COMPACT | JSON_SORT_KEYS);
    json_decref(cls);
    CHECK(text != NULL);
    char slug[64];
    slugify(json_string_value(json_object_get(cpu, "model")), slug, sizeof slug);
    snprintf(out, cap, "%s-%lldc-%08x", slug, (long long)json_integer_value(json_object_get(cpu, "logical_cores")),
             fnv1a(text));
    free(text);
}

// First line of a small file into out; false when unreadable or empty.
static bool first_line(const char* path, char* out, size_t cap) {
    FILE* f = fopen(path, "r");
    if (!f) return false;
    bool ok = fgets(out, (int)cap, f) != NULL;
    fclose(f);
    out[strcspn(out, "\n")] = 0;
    return ok && out[0];
}

static void instance_id(char* out, size_t cap) {
    char id[512] = "";
    if (!first_line("/etc/machine-id", id, sizeof id) && !first_line("/var/lib/dbus/machine-id", id, sizeof id)) {
        char host[256] = "unknown-host", boot[128] = "";
        gethostname(host, sizeof host - 1);
        host[sizeof host - 1] = 0;
        first_line("/proc/sys/kernel/random/boot_id", boot, sizeof boot);
        snprintf(id, sizeof id, "%s/%s", host, boot);
    }
    snprintf(out, cap, "%016llx", (unsigned long long)fnv1a64(id));
}

static json_t* git_json(void) {
    json_t* g = json_object();
    char commit[128];
    bool any = false;
    const char* rev[] = {"git", "rev-parse", "HEAD", NULL};
    if (run_program_line(rev, commit, sizeof commit, &any) == 0 && commit[0]) {
        json_object_set_new(g, "commit", json_string(commit));
        char line[512];
        // results/ is excluded: result folders written by earlier runs do not make the source dirty
        const char* status[] = {"git", "status", "--porcelain", "--", ".", ":(exclude)results", NULL};
        if (run_program_line(status, line, sizeof line, &any) == 0)
            json_object_set_new(g, "dirty", json_boolean(any));
        else
            json_object_set_new(g, "dirty", json_null());
    } else {
        json_object_set_new(g, "commit", json_string("unknown"));
        json_object_set_new(g, "dirty", json_null());
    }
    return g;
}

static int record_run(int argc, char** argv) {
    const char* results = "results";
    const char* label = "";
    long threads = cpu_logical_cores();
    const char* user_class = getenv("TRAINBENCH_MACHINE_CLASS");
    const char* user_instance = getenv("TRAINBENCH_INSTANCE_ID");
    for (int i = 1; i < argc; i++) {
        if (flag_matches(argv[i], "--results")) {
            if (!flag_value(&cmd_record, argc, argv, &i, "--results", &results)) return 2;
        } else if (flag_matches(argv[i], "--label")) {
            if (!flag_value(&cmd_record, argc, argv, &i, "--label", &label)) return 2;
        } else if (flag_matches(argv[i], "--machine-class")) {
            if (!flag_value(&cmd_record, argc, argv, &i, "--machine-class", &user_class)) return 2;
        } else if (flag_matches(argv[i], "--instance-id")) {
            if (!flag_value(&cmd_record, argc, argv, &i, "--instance-id", &user_instance)) return 2;
        } else if (flag_matches(argv[i], "--threads")) {
            if (!flag_int(&cmd_record, argc, argv, &i, "--threads", 1, 1024, &threads)) return 2;
        } else {
            return cli_unknown_flag(&cmd_record, argv[i]);
        }
    }

    if (path_is_non_dir(results))  // bad input, before anything is collected: --results naming a file
        return cli_usage_error(&cmd_record, "--results %s exists and is not a folder (give a new or an existing folder)",
                               results);
    json_t* root = info_collect((int)threads);
    char mid[128], iid[128];
    if (user_class && *user_class) slugify(user_class, mid, sizeof mid);
    else machine_class_derive(root, mid, sizeof mid);
    if (user_instance && *user_instance) snprintf(iid, sizeof iid, "%s", user_instance);
    else instance_id(iid, sizeof iid);
    char machine_dir[4096];
    if ((size_t)snprintf(machine_dir, sizeof machine_dir, "%s/%s", results, mid) >= sizeof machine_dir)
        return user_error("record: --results path too long");
    Status s = make_dirs(machine_dir);
    if (!status_is_ok(s)) {
        fprintf(stderr, "trainbench record: cannot create %s: %s\n", machine_dir, s.msg);
        json_decref(root);
        return 1;
    }

    time_t now = time(NULL);
    struct tm tm;
    gmtime_r(&now, &tm);
    char stamp[32], iso[32];
    strftime(stamp, sizeof stamp, "%Y%m%dT%H%M%SZ", &tm);
    strftime(iso, sizeof iso, "%Y-%m-%dT%H:%M:%SZ", &tm);

    (void)remove_stale_temps(machine_dir);  // run folders of killed `record`s
    // machine.json is written into a temp folder that is renamed to the run folder only when
    // complete: a killed record leaves no run folder without machine.json
    char tmp_dir[4352];
    snprintf(tmp_dir, sizeof tmp_dir, "%s/.%s.tmp.%ld", machine_dir, stamp, (long)getpid());
    s = remove_tree(tmp_dir);
    if (!status_is_ok(s) || mkdir(tmp_dir, 0777) != 0) {
        fprintf(stderr, "trainbench record: cannot create %s: %s\n", tmp_dir, status_is_ok(s) ? strerror(errno) : s.msg);
        return 1;
    }
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    uint32_t seed = (uint32_t)ts.tv_nsec ^ ((uint32_t)getpid() << 16) ^ (uint32_t)getpid();
    char run_id[64], run_dir[4352];
    // run_id is chosen first (machine.json names it); the rename below retries on a clash
    seed = seed * 1664525u + 1013904223u;
    snprintf(run_id, sizeof run_id, "%s-%04x", stamp, (unsigned)(seed >> 16) & 0xffffu);

    json_object_set_new(root, "machine_id", json_string(mid));
    json_object_set_new(root, "machine_class", json_string(mid));
    json_object_set_new(root, "instance_id", json_string(iid));
    json_object_set_new(root, "run_id", json_string(run_id));
    json_object_set_new(root, "date", json_string(iso));
    json_object_set_new(root, "label", json_string(label));
    json_object_set_new(root, "git", git_json());
    json_object_set_new(root, "cflags", json_string(TRAINBENCH_CFLAGS));
    char path[4480];
    snprintf(path, sizeof path, "%s/machine.json", tmp_dir);
    bool made = false;
    for (int attempt = 0; attempt < 1000 && !made; attempt++) {
        if (attempt) {  // a new suffix per attempt (LCG step)
            seed = seed * 1664525u + 1013904223u;
            snprintf(run_id, sizeof run_id, "%s-%04x", stamp, (unsigned)(seed >> 16) & 0xffffu);
            json_object_set_new(root, "run_id", json_string(run_id));
        }
        snprintf(run_dir, sizeof run_dir, "%s/%s", machine_dir, run_id);
        if (access(run_dir, F_OK) == 0) continue;
        s = result_json_write(path, RESULT_MACHINE, root);
        if (!status_is_ok(s)) {
            fprintf(stderr, "trainbench record: cannot write %s: %s\n", path, s.msg);
            break;
        }
        fsync_dir(tmp_dir);
        // never replaces a folder (RENAME_NOREPLACE): EEXIST means another run took the id
        if (renameat2(AT_FDCWD, tmp_dir, AT_FDCWD, run_dir, RENAME_NOREPLACE) == 0) {
            made = true;
        } else if (errno != EEXIST) {
            fprintf(stderr, "trainbench record: cannot rename %s to %s: %s\n", tmp_dir, run_dir, strerror(errno));
            break;
        }
    }
    json_decref(root);
    if (!made) {
        if (status_is_ok(s)) fprintf(stderr, "trainbench record: cannot make a run folder under %s\n", machine_dir);
        (void)remove_tree(tmp_dir);
        return 1;
    }
    fsync_dir(machine_dir);
    printf("%s\n", run_dir);
    return 0;
}
