// icount.c — `trainbench icount --out DIR`: the instruction-count benchmarks. Runs every case
// of build/bench/trainbench-icount (bench/icount_main.c) in its own process under valgrind's
// callgrind, counting only the function icount_measure() (--toggle-collect: start-up, set-up, the
// warm-up iteration and exit are excluded, so nothing needs subtracting), and writes the
// instructions per iteration as entries icount/<case> with an "instructions" counter into
// DIR/bench.json (created, or merged into: earlier icount/ entries are replaced; the file stays
// Google Benchmark JSON). Their "real_time" is the time under valgrind (~50x slow): the
// wall-time gate ignores icount/ entries. The label names the code paths the case ran (valgrind
// hides AVX-512, so AVX2 or portable paths are counted). Single-threaded (OMP and OpenBLAS
// threads 1). Counts are deterministic for one binary on one machine class: `trainbench gate
// --metric instructions` gates them with a plain threshold. Not here: the cases (icount_main.c).
#include <regex.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/cli.h"
#include "core/common.h"
#include "results/results.h"

static int icount_main(int argc, char** argv);

const Command cmd_icount = {
    .name = "icount",
    .summary = "instruction counts per iteration under valgrind (callgrind) into DIR/bench.json",
    .usage = "trainbench icount --out DIR [--bin PATH (build/bench/trainbench-icount)] [--filter REGEX] [--iters N (5)]\n"
             "  needs valgrind (apt-get install valgrind); exit 0 written, 1 a case failed, 2 bad input",
    .run = icount_main,
};

// callgrind's "totals: N" (or "summary: N") line; -1 when absent.
static long long callgrind_total(const char* path) {
    FILE* f = fopen(path, "r");
    if (!f) return -1;
    char line[512];
    long long total = -1;
    while (fgets(line, sizeof line, f))
        if (!strncmp(line, "totals:", 7) || (total < 0 && !strncmp(line, "summary:", 8)))
            total = atoll(strchr(line, ':') + 1);
    fclose(f);
    return total;
}

static int icount_main(int argc, char** argv) {
    const char* out_dir = NULL;
    const char* bin_arg = NULL;
    const char* filter = NULL;
    long iters = 5;
    for (int i = 1; i < argc; i++) {
        if (flag_matches(argv[i], "--out")) {
            if (!flag_value(&cmd_icount, argc, argv, &i, "--out", &out_dir)) return 2;
        } else if (flag_matches(argv[i], "--bin")) {
            if (!flag_value(&cmd_icount, argc, argv, &i, "--bin", &bin_arg)) return 2;
        } else if (flag_matches(argv[i], "--filter")) {
            if (!flag_value(&cmd_icount, argc, argv, &i, "--filter", &filter)) return 2;
        } else if (flag_matches(argv[i], "--iters")) {
            if (!flag_int(&cmd_icount, argc, argv, &i, "--iters", 1, 1000000, &iters)) return 2;
        } else {
            return cli_unknown_flag(&cmd_icount, argv[i]);
        }
    }
    if (!out_dir) return cli_usage_error(&cmd_icount, "missing --out DIR (a result folder)");
    if (!path_is_dir(out_dir)) return cli_usage_error(&cmd_icount, "--out: no such folder %s", out_dir);
    char bin[4096];
    if (bin_arg) {
        snprintf(bin, sizeof bin, "%s", bin_arg);
    } else {
        ssize_t len = readlink("/proc/self/exe", bin, sizeof bin - 40);
        if (len <= 0) return user_error("icount: cannot find this program's path; pass --bin");
        bin[len] = 0;
        char* slash = strrchr(bin, '/');
        snprintf(slash ? slash + 1 : bin, 40, "bench/trainbench-icount");
    }
    if (access(bin, X_OK) != 0) return user_error("icount: %s is not built (make %s)", bin, bin);
    const char* vg_probe[] = {"valgrind", "--version", NULL};
    char vg_version[128];
    if (run_program_line(vg_probe, vg_version, sizeof vg_version, NULL) != 0)
        return user_error("icount: valgrind is not installed (apt-get install valgrind)");
    regex_t re;
    if (filter && regcomp(&re, filter, REG_EXTENDED | REG_NOSUB) != 0)
        return cli_usage_error(&cmd_icount, "--filter '%s' is not a valid POSIX extended regex", filter);

    char list_path[4200], tmp_out[4200], tmp_cg[4200], tmp_err[4200];
    snprintf(list_path, sizeof list_path, "%s/.icount-list.%ld", out_dir, (long)getpid());
    snprintf(tmp_out, sizeof tmp_out, "%s/.icount-out.%ld", out_dir, (long)getpid());
    snprintf(tmp_cg, sizeof tmp_cg, "%s/.icount-cg.%ld", out_dir, (long)getpid());
    snprintf(tmp_err, sizeof tmp_err, "%s/.icount-err.%ld", out_dir, (long)getpid());
    const char* list_argv[] = {bin, "--list", NULL};
    if (run_program(list_argv, NULL, list_path, NULL) != 0) {
        if (filter) regfree(&re);
        return user_error("icount: %s --list failed", bin);
    }
    uint8_t* list;
    size_t list_len;
    Status s = read_file(list_path, &list, &list_len);
    unlink(list_path);
    if (!status_is_ok(s)) return user_error("icount: %s", s.msg);
    // a case list is lines of names (letters, digits, / _ . : -, not starting with '-'): anything
    // else means --bin is another program, and nothing is run or written
    for (const char* line = (const char*)list; *line;) {
        const size_t n = strcspn(line, "\n");
        const bool ok = n > 0 && line[0] != '-' && strspn(line, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                                                                "0123456789/_.:-") == n;
        if (!ok) {
            if (filter) regfree(&re);
            int rc2 = user_error("icount: %s --list printed '%.*s', which is not a case name: --bin must be the "
                                 "trainbench-icount program (make %s)", bin, (int)(n > 80 ? 80 : n), line,
                                 "build/bench/trainbench-icount");
            free(list);
            return rc2;
        }
        line += n + (line[n] == '\n');
    }

    setenv("OMP_NUM_THREADS", "1", 1);
    setenv("OPENBLAS_NUM_THREADS", "1", 1);
    json_t* entries = json_array();
    int rc = 0, n_done = 0;
    char iters_s[32], cg_flag[4300];
    snprintf(iters_s, sizeof iters_s, "%ld", iters);
    snprintf(cg_flag, sizeof cg_flag, "--callgrind-out-file=%s", tmp_cg);
    for (char *save = NULL, *name = strtok_r((char*)list, "\n", &save); name; name = strtok_r(NULL, "\n", &save)) {
        if (filter && regexec(&re, name, 0, NULL, 0) != 0) continue;
        const char* vg[] = {"valgrind", "--tool=callgrind", cg_flag, "--toggle-collect=icount_measure", bin, name,
                            iters_s, NULL};
        double t0 = now_seconds();
        int prc = run_program(vg, NULL, tmp_out, tmp_err);
        double wall = now_seconds() - t0;
        long long total = prc == 0 ? callgrind_total(tmp_cg) : -1;
        char paths[256] = "";
        uint8_t* o;
        size_t ol;
        if (status_is_ok(read_file(tmp_out, &o, &ol))) {
            char* p = strstr((char*)o, "paths: ");
            if (p) snprintf(paths, sizeof paths, "%.*s", (int)strcspn(p + 7, "\n"), p + 7);
            free(o);
        }
        char full[300];
        snprintf(full, sizeof full, "icount/%s", name);
        if (total <= 0) {
            fprintf(stderr, "trainbench icount: %s failed under valgrind (exit %d; see its output below)\n", name, prc);
            uint8_t* e;
            size_t el;
            if (status_is_ok(read_file(tmp_err, &e, &el))) {
                fwrite(e, 1, el > 2000 ? 2000 : el, stderr);
                free(e);
            }
            json_array_append_new(entries, json_pack("{s:s, s:s, s:s, s:b, s:s}", "name", full, "run_name", full,
                                                     "run_type", "iteration", "error_occurred", 1, "error_message",
                                                     "failed: did not run under valgrind"));
            rc = 1;
        } else {
            double per_iter = (double)total / (double)iters;
            char label[512];
            snprintf(label, sizeof label, "valgrind callgrind (%s), AVX-512 hidden; code paths: %s", vg_version, paths);
            json_array_append_new(
                entries, json_pack("{s:s, s:s, s:s, s:i, s:i, s:i, s:I, s:f, s:f, s:s, s:f, s:s}", "name", full,
                                   "run_name", full, "run_type", "iteration", "repetitions", 1, "repetition_index", 0,
                                   "threads", 1, "iterations", (json_int_t)iters, "real_time",
                                   wall / (double)iters * 1e9, "cpu_time", wall / (double)iters * 1e9, "time_unit",
                                   "ns", "instructions", per_iter, "label", label));
            printf("icount: %-44s %16.0f instructions/iteration  (%s)\n", full, per_iter, paths);
            fflush(stdout);
        }
        n_done++;
        unlink(tmp_cg);
        unlink(tmp_out);
        unlink(tmp_err);
    }
    free(list);
    if (filter) regfree(&re);
    if (!n_done) {
        json_decref(entries);
        return user_error("icount: no case matches --filter '%s'", filter ? filter : "");
    }
    // merge into DIR/bench.json through the results module
    char path[4200];
    snprintf(path, sizeof path, "%s/bench.json", out_dir);
    json_t* root;
    s = result_json_read(path, RESULT_BENCH, false, &root, NULL);
    if (!status_is_ok(s)) {
        json_decref(entries);
        return user_error("icount: %s", s.msg);
    }
    if (!root) root = json_pack("{s:{s:s}, s:[]}", "context", "executable", "trainbench icount", "benchmarks");
    json_t* old = json_object_get(root, "benchmarks");
    json_t* merged = json_array();
    size_t i;
    json_t* e;
    json_array_foreach(old, i, e) {
        const char* n = json_string_value(json_object_get(e, "run_name"));
        if (!n) n = json_string_value(json_object_get(e, "name"));
        if (!n || strncmp(n, "icount/", 7)) json_array_append(merged, e);
    }
    json_array_extend(merged, entries);
    json_decref(entries);
    json_object_set_new(root, "benchmarks", merged);
    s = result_json_write(path, RESULT_BENCH, root);
    json_decref(root);
    if (!status_is_ok(s)) {
        fprintf(stderr, "trainbench icount: %s\n", s.msg);
        return 1;
    }
    printf("icount: %d cases into %s\n", n_done, path);
    return rc;
}
