// record.c — `trainbench record`: opens a new result folder DIR/<machine-id>/<run-id>/, writes
// its machine.json (the `trainbench info --json` description plus run metadata) atomically and
// prints the folder path as the only line on stdout, so scripts (`make run`) can capture it.
//
//   machine-id  <cpu-model-slug>-<logical cores>c-<8 hex digits of FNV-1a(hostname)>, e.g.
//               amd-epyc-9r45-2c-1a2b3c4d: lowercase [a-z0-9-] only, so it is safe as a folder
//               name; stable for one machine (same CPU, core count and hostname).
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

#ifndef TRAINBENCH_CFLAGS
#define TRAINBENCH_CFLAGS "unknown (built without -DTRAINBENCH_CFLAGS)"
#endif

static int record_run(int argc, char** argv);

const Command cmd_record = {
    .name = "record",
    .summary = "open a new result folder DIR/<machine-id>/<run-id>/ with machine.json; prints its path",
    .usage = "trainbench record [--results DIR (default results)] [--threads N] [--label TEXT]",
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

static void machine_id(char* out, size_t cap) {
    char slug[64];
    slugify(cpu_model_name(), slug, sizeof slug);
    char host[256] = "";
    if (gethostname(host, sizeof host - 1) != 0) snprintf(host, sizeof host, "unknown-host");
    host[sizeof host - 1] = 0;
    snprintf(out, cap, "%s-%dc-%08x", slug, cpu_logical_cores(), fnv1a(host));
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
    for (int i = 1; i < argc; i++) {
        if (flag_matches(argv[i], "--results")) {
            if (!flag_value(&cmd_record, argc, argv, &i, "--results", &results)) return 2;
        } else if (flag_matches(argv[i], "--label")) {
            if (!flag_value(&cmd_record, argc, argv, &i, "--label", &label)) return 2;
        } else if (flag_matches(argv[i], "--threads")) {
            if (!flag_int(&cmd_record, argc, argv, &i, "--threads", 1, 1024, &threads)) return 2;
        } else {
            return cli_unknown_flag(&cmd_record, argv[i]);
        }
    }

    char mid[128];
    machine_id(mid, sizeof mid);
    char machine_dir[4096];
    if ((size_t)snprintf(machine_dir, sizeof machine_dir, "%s/%s", results, mid) >= sizeof machine_dir)
        return user_error("record: --results path too long");
    Status s = make_dirs(machine_dir);
    if (!status_is_ok(s)) {
        fprintf(stderr, "trainbench record: cannot create %s: %s\n", machine_dir, s.msg);
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

    json_t* root = info_collect((int)threads);
    json_object_set_new(root, "machine_id", json_string(mid));
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
        char* text = json_dumps(root, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
        CHECK(text != NULL);
        size_t len = strlen(text);
        text = xrealloc(text, len + 2);
        text[len] = '\n';
        text[len + 1] = 0;
        s = write_file_atomic(path, text, len + 1);
        free(text);
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
