// test_record.c — end-to-end tests of `trainbench record`: it opens a new result folder
// RESULTS/<machine-id>/<run-id>/ under a temp --results folder, prints exactly that path on
// stdout, writes a machine.json with the machine description plus run metadata (cpu, backends,
// environment, git, date, label), never reuses a folder, and answers bad flags with exit 2 and
// an uncreatable folder with exit 1. Runs BUILD/trainbench (see cli_harness.h).
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <jansson.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cli_harness.h"
#include "results/results.h"

typedef struct {
    int exit_code;  // -1 if killed by a signal
    char out[16384];  // stdout only (stderr goes to the test log)
} RunResult;

// Runs `[cd DIR &&] trainbench ARGS`, capturing stdout only.
static void run_in(RunResult* r, const char* dir, const char* args) {
    char cmd[8192];
    if (dir)
        snprintf(cmd, sizeof cmd, "cd '%s' && '%s' %s", dir, g_bin, args);
    else
        snprintf(cmd, sizeof cmd, "'%s' %s", g_bin, args);
    FILE* p = popen(cmd, "r");
    assert_non_null(p);
    size_t n = fread(r->out, 1, sizeof r->out - 1, p);
    r->out[n] = 0;
    int st = pclose(p);
    r->exit_code = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
    printf("$ trainbench %s  -> exit %d\n", args, r->exit_code);
}

static bool is_dir(const char* path) {
    struct stat sb;
    return stat(path, &sb) == 0 && S_ISDIR(sb.st_mode);
}

// Runs record into RESULTS and returns the printed folder (one line, checked) in `folder`.
static void record_ok(const char* results, const char* extra, char* folder, size_t cap) {
    RunResult r;
    char args[2048];
    snprintf(args, sizeof args, "record --results '%s' %s", results, extra ? extra : "");
    run_in(&r, NULL, args);
    if (r.exit_code != 0) printf("stdout was:\n%s\n", r.out);
    assert_int_equal(r.exit_code, 0);
    size_t len = strlen(r.out);
    assert_true(len > 1);
    assert_int_equal(r.out[len - 1], '\n');
    assert_true(strchr(r.out, '\n') == r.out + len - 1);  // exactly one line
    r.out[len - 1] = 0;
    snprintf(folder, cap, "%s", r.out);
    assert_true(is_dir(folder));
}

static json_t* load_machine_json(const char* folder) {
    char path[4200];
    snprintf(path, sizeof path, "%s/machine.json", folder);
    json_error_t err;
    json_t* root = json_load_file(path, 0, &err);
    if (!root) printf("%s: %s (line %d)\n", path, err.text, err.line);
    assert_non_null(root);
    return root;
}

static void test_record_writes_machine_json(void** s) {
    (void)s;
    char results[512], folder[4096];
    snprintf(results, sizeof results, "%s/res", g_tmp);
    record_ok(results, "--threads 2 --label 'unit test'", folder, sizeof folder);

    // folder = RESULTS/<machine-id>/<run-id>
    size_t rl = strlen(results);
    assert_memory_equal(folder, results, rl);
    assert_int_equal(folder[rl], '/');
    const char* mid = folder + rl + 1;
    const char* slash = strchr(mid, '/');
    assert_non_null(slash);
    const char* rid = slash + 1;
    assert_null(strchr(rid, '/'));
    for (const char* p = mid; p < slash; p++)  // filesystem-safe machine id
        assert_true((*p >= 'a' && *p <= 'z') || (*p >= '0' && *p <= '9') || *p == '-');
    // run id: YYYYmmddTHHMMSSZ-xxxx
    assert_true(strlen(rid) == 21 && rid[8] == 'T' && rid[15] == 'Z' && rid[16] == '-');

    json_t* m = load_machine_json(folder);
    json_t* cpu = json_object_get(m, "cpu");
    assert_true(json_is_object(cpu));
    assert_true(json_is_string(json_object_get(cpu, "model")));
    assert_true(json_integer_value(json_object_get(cpu, "logical_cores")) >= 1);
    json_t* backends = json_object_get(m, "backends");
    assert_true(json_is_array(backends) && json_array_size(backends) >= 1);
    json_t* env = json_object_get(m, "environment");
    assert_true(json_is_object(env));
    assert_non_null(json_object_get(env, "OPENBLAS_CORETYPE"));
    json_t* git = json_object_get(m, "git");
    assert_true(json_is_object(git));
    assert_true(json_is_string(json_object_get(git, "commit")));
    json_t* dirty = json_object_get(git, "dirty");
    assert_true(json_is_boolean(dirty) || json_is_null(dirty));
    const char* date = json_string_value(json_object_get(m, "date"));
    assert_non_null(date);  // YYYY-mm-ddTHH:MM:SSZ, same second as the run id
    assert_true(strlen(date) == 20 && date[4] == '-' && date[10] == 'T' && date[19] == 'Z');
    assert_memory_equal(date, rid, 4);
    assert_string_equal(json_string_value(json_object_get(m, "label")), "unit test");
    assert_int_equal(json_integer_value(json_object_get(m, "threads")), 2);
    assert_true(json_is_string(json_object_get(m, "compiler")));
    assert_true(json_is_string(json_object_get(m, "cflags")));
    assert_memory_equal(json_string_value(json_object_get(m, "machine_id")), mid, (size_t)(slash - mid));
    assert_string_equal(json_string_value(json_object_get(m, "run_id")), rid);
    json_decref(m);
}

static void test_consecutive_records_never_collide(void** s) {
    (void)s;
    char results[512];
    snprintf(results, sizeof results, "%s/many", g_tmp);
    enum { N = 6 };
    char folders[N][4096];
    for (int i = 0; i < N; i++) {
        record_ok(results, NULL, folders[i], sizeof folders[i]);
        json_t* m = load_machine_json(folders[i]);
        json_decref(m);
        for (int j = 0; j < i; j++) assert_string_not_equal(folders[i], folders[j]);
    }
    // same machine folder for all of them
    const char* a = strrchr(folders[0], '/');
    const char* b = strrchr(folders[N - 1], '/');
    assert_int_equal(a - folders[0], b - folders[N - 1]);
    assert_memory_equal(folders[0], folders[N - 1], (size_t)(a - folders[0]));
}

// machine_class groups machines of one kind (CPU, cores, memory, ISA, BLAS, environment; not
// the hostname), instance_id tells instances apart; both can be set by the user.
static void test_machine_class_and_instance_ids(void** s) {
    (void)s;
    char results[512], a[4096], b[4096], c[4096], d[4096];
    snprintf(results, sizeof results, "%s/ids", g_tmp);
    record_ok(results, NULL, a, sizeof a);
    record_ok(results, NULL, b, sizeof b);
    json_t* ma = load_machine_json(a);
    json_t* mb = load_machine_json(b);
    const char* cls = json_string_value(json_object_get(ma, "machine_class"));
    const char* inst = json_string_value(json_object_get(ma, "instance_id"));
    assert_non_null(cls);
    assert_non_null(inst);
    assert_int_equal(json_integer_value(json_object_get(ma, "schema_version")), 1);
    assert_string_equal(cls, json_string_value(json_object_get(mb, "machine_class")));
    assert_string_equal(inst, json_string_value(json_object_get(mb, "instance_id")));
    assert_string_equal(cls, json_string_value(json_object_get(ma, "machine_id")));  // the folder name
    // a threading setting that changes kernels changes the class (run with it set)
    char args[2048];
    RunResult r;
    snprintf(args, sizeof args, "record --results '%s'", results);
    char cmd[8192];
    snprintf(cmd, sizeof cmd, "OMP_NUM_THREADS=1 '%s' %s", g_bin, args);
    FILE* p = popen(cmd, "r");
    assert_non_null(p);
    size_t n = fread(r.out, 1, sizeof r.out - 1, p);
    r.out[n] = 0;
    assert_int_equal(pclose(p), 0);
    r.out[strcspn(r.out, "\n")] = 0;
    json_t* mc = load_machine_json(r.out);
    assert_string_not_equal(cls, json_string_value(json_object_get(mc, "machine_class")));
    assert_string_equal(inst, json_string_value(json_object_get(mc, "instance_id")));
    json_decref(mc);
    // user-set ids (the class is slugified: it names a folder)
    record_ok(results, "--machine-class 'CI Runner/Large' --instance-id runner-42", c, sizeof c);
    json_t* md = load_machine_json(c);
    assert_string_equal(json_string_value(json_object_get(md, "machine_class")), "ci-runner-large");
    assert_string_equal(json_string_value(json_object_get(md, "instance_id")), "runner-42");
    assert_non_null(strstr(c, "/ci-runner-large/"));
    json_decref(md);
    snprintf(cmd, sizeof cmd, "TRAINBENCH_INSTANCE_ID=env-7 '%s' %s", g_bin, args);
    p = popen(cmd, "r");
    assert_non_null(p);
    n = fread(d, 1, sizeof d - 1, p);
    d[n] = 0;
    assert_int_equal(pclose(p), 0);
    d[strcspn(d, "\n")] = 0;
    json_t* me = load_machine_json(d);
    assert_string_equal(json_string_value(json_object_get(me, "instance_id")), "env-7");
    json_decref(me);
    json_decref(ma);
    json_decref(mb);
}

// The class id is stable across versions for an unchanged machine: machine.json files recorded by
// earlier builds (tests/data/machine/: an AMD EPYC run at 38d0922, an Intel Xeon run at 0441b2b,
// before TRAINBENCH_TORCH_SQRT and TRAINBENCH_STREAM_PREFETCH were recorded) derive their own
// recorded class again, also with those variables recorded as unset; set, each makes another
// class (they change kernels and how the streams are read).
static void test_machine_class_stable_across_versions(void** s) {
    (void)s;
    static const char* const FILES[] = {"tests/data/machine/amd-epyc-2c-4ff90e89.json",
                                        "tests/data/machine/intel-r-xeon-r-processor-2c-2f910073.json"};
    for (size_t i = 0; i < sizeof FILES / sizeof FILES[0]; i++) {
        json_error_t err;
        json_t* m = json_load_file(FILES[i], 0, &err);
        if (!m) fail_msg("%s: %s", FILES[i], err.text);
        const char* recorded = json_string_value(json_object_get(m, "machine_class"));
        assert_non_null(recorded);
        char id[256], id_unset[256], id_set[256];
        machine_class_derive(m, id, sizeof id);
        printf("%s: recorded %s, derived %s\n", FILES[i], recorded, id);
        assert_string_equal(id, recorded);
        json_t* env = json_object_get(m, "environment");
        assert_non_null(env);
        static const char* const LATER[][2] = {{"TRAINBENCH_TORCH_SQRT", "mkl-avx512"},
                                                {"TRAINBENCH_STREAM_PREFETCH", "none"}};
        for (size_t k = 0; k < sizeof LATER / sizeof LATER[0]; k++) {
            json_object_set_new(env, LATER[k][0], json_null());
            machine_class_derive(m, id_unset, sizeof id_unset);
            assert_string_equal(id_unset, recorded);
            json_object_set_new(env, LATER[k][0], json_string(LATER[k][1]));
            machine_class_derive(m, id_set, sizeof id_set);
            assert_string_not_equal(id_set, recorded);
            json_object_set_new(env, LATER[k][0], json_null());
        }
        // a variable of the first version changes the class whether set or not (it was always hashed)
        json_object_set_new(env, "TRAINBENCH_TORCH_SQRT", json_null());
        json_object_del(env, "OMP_WAIT_POLICY");
        machine_class_derive(m, id_set, sizeof id_set);
        assert_string_not_equal(id_set, recorded);
        json_decref(m);
    }
}

static void test_outside_git_commit_unknown(void** s) {
    (void)s;
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "git -C '%s' rev-parse HEAD >/dev/null 2>&1", g_tmp);
    if (system(cmd) == 0) {
        printf("temp folder %s is inside a git checkout; skipped\n", g_tmp);
        return;
    }
    RunResult r;
    run_in(&r, g_tmp, "record --results nogit");
    assert_int_equal(r.exit_code, 0);
    r.out[strcspn(r.out, "\n")] = 0;
    char folder[8192];
    snprintf(folder, sizeof folder, "%s/%.4000s", g_tmp, r.out);
    json_t* m = load_machine_json(folder);
    json_t* git = json_object_get(m, "git");
    assert_string_equal(json_string_value(json_object_get(git, "commit")), "unknown");
    assert_true(json_is_null(json_object_get(git, "dirty")));
    json_decref(m);
}

static void expect_exit(const char* args, int code) {
    RunResult r;
    run_in(&r, NULL, args);
    assert_int_equal(r.exit_code, code);
    assert_string_equal(r.out, "");  // nothing on stdout: a script never captures a bogus path
}

static void test_bad_flags_exit_2(void** s) {
    (void)s;
    expect_exit("record --bogus", 2);
    expect_exit("record extra-argument", 2);
    expect_exit("record --results", 2);
    expect_exit("record --results=", 2);
    expect_exit("record --threads 0", 2);
    expect_exit("record --threads abc", 2);
    expect_exit("record --label", 2);
}

static void test_uncreatable_folder_exits_1(void** s) {
    (void)s;
    char file[512], args[1024];
    snprintf(file, sizeof file, "%s/plainfile", g_tmp);
    FILE* f = fopen(file, "w");
    assert_non_null(f);
    fclose(f);
    snprintf(args, sizeof args, "record --results '%s/sub'", file);  // under a regular file
    expect_exit(args, 1);
}

int main(int argc, char** argv) {
    (void)argc;
    if (cli_harness_setup(argv[0], "record") != 0) return 1;
    char abs_bin[PATH_MAX];  // absolute, so the binary also runs from another folder (cd)
    if (realpath(g_bin, abs_bin)) snprintf(g_bin, sizeof g_bin, "%s", abs_bin);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_record_writes_machine_json),
        cmocka_unit_test(test_consecutive_records_never_collide),
        cmocka_unit_test(test_machine_class_and_instance_ids),
        cmocka_unit_test(test_machine_class_stable_across_versions),
        cmocka_unit_test(test_outside_git_commit_unknown),
        cmocka_unit_test(test_bad_flags_exit_2),
        cmocka_unit_test(test_uncreatable_folder_exits_1),
    };
    int rc = cmocka_run_group_tests_name("record", tests, NULL, NULL);
    cli_harness_cleanup("record");
    return rc;
}
