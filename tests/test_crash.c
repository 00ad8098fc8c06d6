// test_crash.c — crash and full-disk safety of `trainbench train --save-steps 1` (README
// "Safety"): the tiny preset in fp16 (so the GradScaler has state that must survive) is
// SIGKILLed at a deterministic list of points (after checkpoint K appeared, plus a delay that
// lands inside the following steps and saves); every file left must be complete or absent
// (each checkpoint-N/ loads and says step N; results.json parses; anything else is a
// NAME.tmp.<pid> of the killed process); then `--resume-from-checkpoint OUTPUT_DIR` (the newest
// complete checkpoint) must finish with a state bit-identical to an uninterrupted run:
// every parameter and optimizer-state tensor, the GradScaler's scale, growth tracker and
// skipped count, step and optimizer step, and every per-step record except its timing; no
// temp file may be left. The same for a full disk: a small tmpfs mounted here when the test
// may mount one (root), else a file-size limit (RLIMIT_FSIZE, SIGXFSZ ignored) makes the
// checkpoint write fail. TRAINBENCH_CRASH_LONG=1 (`make test-crash`) runs many more points
// and disk sizes. Runs BUILD/trainbench (the binary next to this test's build folder).
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "core/safetensors.h"
#include "cli_harness.h"

#define CHECKPOINT_FILE_NAME "checkpoint.safetensors"  // train/checkpoint.h CHECKPOINT_FILE

#define STEPS 10
static const char* const TRAIN_ARGS[] = {"train", "--model", "tiny", "--precision", "fp16", "--init-scale", "4194304",
                                         "--growth-interval", "3", "--learning-rate", "1e-3", "--max-steps", "10",
                                         "--save-steps", "1", "--logging-steps", "3", "--eval-steps", "5",
                                         "--num-train-examples", "256", "--num-eval-examples", "64", "--threads", "2",
                                         "--no-progress"};

static char g_ref[600];  // the uninterrupted run's output dir
static bool g_long;

static bool long_mode(void) {
    const char* e = getenv("TRAINBENCH_CRASH_LONG");
    return e && strcmp(e, "0") != 0 && *e;
}

// Starts `trainbench train TRAIN_ARGS --output-dir OUT [--resume-from-checkpoint RESUME]`,
// stdout+stderr to LOG; fsize_limit > 0: RLIMIT_FSIZE in the child (SIGXFSZ ignored, so a
// write past it fails with EFBIG instead of killing). Returns the pid.
static pid_t spawn_train(const char* out, const char* resume, const char* log, long fsize_limit) {
    const char* argv[64];
    size_t n = 0;
    argv[n++] = g_bin;
    for (size_t i = 0; i < ARRAY_LEN(TRAIN_ARGS); i++) argv[n++] = TRAIN_ARGS[i];
    argv[n++] = "--output-dir";
    argv[n++] = out;
    if (resume) {
        argv[n++] = "--resume-from-checkpoint";
        argv[n++] = resume;
    }
    argv[n] = NULL;
    fflush(NULL);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        int fd = open(log, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        if (fd < 0 || dup2(fd, 1) < 0 || dup2(fd, 2) < 0) _exit(127);
        if (fsize_limit > 0) {
            signal(SIGXFSZ, SIG_IGN);
            struct rlimit rl = {(rlim_t)fsize_limit, (rlim_t)fsize_limit};
            if (setrlimit(RLIMIT_FSIZE, &rl) != 0) _exit(127);
        }
        execv(g_bin, (char* const*)argv);
        _exit(127);
    }
    return pid;
}

// exit status, or 128 + signal
static int wait_rc(pid_t pid) {
    int st;
    while (waitpid(pid, &st, 0) < 0) assert_int_equal(errno, EINTR);
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

static void print_log(const char* log) {
    char buf[8192];
    FILE* f = fopen(log, "r");
    if (!f) return;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    buf[n] = 0;
    fclose(f);
    printf("---- %s\n%s----\n", log, buf);
}

static int run_train(const char* out, const char* resume, const char* log, long fsize_limit) {
    int rc = wait_rc(spawn_train(out, resume, log, fsize_limit));
    if (rc != 0) print_log(log);
    return rc;
}

static bool exists(const char* p) { return access(p, F_OK) == 0; }

static void sleep_us(long us) {
    struct timespec ts = {us / 1000000, (us % 1000000) * 1000};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

// NAME.tmp.<digits>
static bool is_temp_name(const char* name) {
    const char* t = NULL;
    for (const char* p = strstr(name, ".tmp."); p; p = strstr(p + 1, ".tmp.")) t = p;
    if (!t || !t[5]) return false;
    for (const char* p = t + 5; *p; p++)
        if (*p < '0' || *p > '9') return false;
    return true;
}

// Every entry of a (killed or failed) run's output dir is complete or a temp name; returns the
// newest complete checkpoint step (0: none). allow_temps false: no temp may be there at all.
static long check_left_files(const char* out, bool allow_temps) {
    DIR* d = opendir(out);
    if (!d) return 0;  // killed before it made the folder
    long newest = 0;
    struct dirent* de;
    while ((de = readdir(d))) {
        const char* nm = de->d_name;
        if (!strcmp(nm, ".") || !strcmp(nm, "..")) continue;
        char p[1200];
        snprintf(p, sizeof p, "%s/%s", out, nm);
        if (is_temp_name(nm)) {
            if (!allow_temps) printf("left behind: %s\n", p);
            assert_true(allow_temps);
            continue;
        }
        if (!strcmp(nm, "results.json")) {
            json_error_t err;
            json_t* j = json_load_file(p, 0, &err);
            if (!j) printf("%s: %s\n", p, err.text);
            assert_non_null(j);
            assert_true(json_is_array(json_object_get(j, "records")));
            json_decref(j);
            continue;
        }
        long step = -1;
        char extra;
        if (sscanf(nm, "checkpoint-%ld%c", &step, &extra) != 1) printf("unexpected entry %s\n", p);
        assert_true(step >= 1 && step <= STEPS);
        char f[1300];
        snprintf(f, sizeof f, "%s/%s", p, CHECKPOINT_FILE_NAME);
        SafeTensors st;
        Status s = st_read(f, &st);
        if (!status_is_ok(s)) printf("incomplete checkpoint: %s\n", s.msg);
        assert_true(status_is_ok(s));
        assert_non_null(st_meta(&st, "step"));
        assert_int_equal(atol(st_meta(&st, "step")), step);
        st_free(&st);
        DIR* c = opendir(p);  // nothing else inside (no temp file in a complete checkpoint)
        struct dirent* ce;      // but the transformers view: model.safetensors + config.json
        while ((ce = readdir(c)))
            if (ce->d_name[0] != '.' && strcmp(ce->d_name, CHECKPOINT_FILE_NAME) != 0 &&
                strcmp(ce->d_name, "model.safetensors") != 0 && strcmp(ce->d_name, "config.json") != 0) {
                printf("unexpected file in %s: %s\n", p, ce->d_name);
                fail();
            }
        closedir(c);
        if (step > newest) newest = step;
    }
    closedir(d);
    return newest;
}

// Final state of `out` equal to the uninterrupted run's, bit for bit (timings excluded).
static void assert_same_final_state(const char* out) {
    char fa[800], fb[800];
    snprintf(fa, sizeof fa, "%s/checkpoint-%d/%s", g_ref, STEPS, CHECKPOINT_FILE_NAME);
    snprintf(fb, sizeof fb, "%s/checkpoint-%d/%s", out, STEPS, CHECKPOINT_FILE_NAME);
    SafeTensors a, b;
    assert_true(status_is_ok(st_read(fa, &a)));
    assert_true(status_is_ok(st_read(fb, &b)));
    assert_int_equal(a.n_tensors, b.n_tensors);
    for (size_t i = 0; i < a.n_tensors; i++) {
        const StTensor* tb = st_find(&b, a.tensors[i].name);
        assert_non_null(tb);
        assert_int_equal(tb->nbytes, a.tensors[i].nbytes);
        if (memcmp(tb->data, a.tensors[i].data, tb->nbytes) != 0) printf("differs: %s\n", tb->name);
        assert_memory_equal(tb->data, a.tensors[i].data, tb->nbytes);
    }
    static const char* const META[] = {"step", "optimizer_step", "scaler_scale", "scaler_growth_tracker",
                                       "scaler_skipped"};
    for (size_t k = 0; k < ARRAY_LEN(META); k++) {
        assert_non_null(st_meta(&b, META[k]));
        assert_string_equal(st_meta(&a, META[k]), st_meta(&b, META[k]));
    }
    st_free(&a);
    st_free(&b);
    // results.json: every record and eval equal except the timing field
    char ra[800], rb[800];
    snprintf(ra, sizeof ra, "%s/results.json", g_ref);
    snprintf(rb, sizeof rb, "%s/results.json", out);
    json_t* ja = json_load_file(ra, 0, NULL);
    json_t* jb = json_load_file(rb, 0, NULL);
    assert_non_null(ja);
    assert_non_null(jb);
    assert_string_equal(json_string_value(json_object_get(jb, "status")), "completed");
    json_t* xa = json_object_get(ja, "records");
    json_t* xb = json_object_get(jb, "records");
    assert_int_equal(json_array_size(xa), STEPS);
    assert_int_equal(json_array_size(xb), STEPS);
    for (size_t i = 0; i < STEPS; i++) {
        json_object_del(json_array_get(xa, i), "step_time_s");
        json_object_del(json_array_get(xb, i), "step_time_s");
        if (!json_equal(json_array_get(xa, i), json_array_get(xb, i))) printf("record %zu differs\n", i + 1);
        assert_true(json_equal(json_array_get(xa, i), json_array_get(xb, i)));
    }
    assert_true(json_equal(json_object_get(ja, "evals"), json_object_get(jb, "evals")));
    json_decref(ja);
    json_decref(jb);
}

static void setup_reference(void) {
    if (g_ref[0]) return;
    char log[700];
    snprintf(g_ref, sizeof g_ref, "%s/reference", g_tmp);
    snprintf(log, sizeof log, "%s/reference.log", g_tmp);
    assert_int_equal(run_train(g_ref, NULL, log, 0), 0);
    assert_int_equal(check_left_files(g_ref, false), STEPS);
}

// Resumes `out` (from its newest complete checkpoint, or from scratch when it has none) into
// the same folder and checks the final state.
static void resume_and_compare(const char* out, long newest, const char* tag) {
    char log[800], results[900];
    snprintf(log, sizeof log, "%s.resume.log", out);
    snprintf(results, sizeof results, "%s/results.json", out);
    if (!newest && access(results, F_OK) == 0) {
        // the run stopped before its first checkpoint but recorded its results: a new run into
        // that folder is refused (nothing a user ran is lost) with no resume advice; the user
        // removes that run's results.json, then the folder takes a new run (its stale temps too)
        assert_int_equal(run_train(out, NULL, log, 0), 2);
        char text[4096] = "";
        FILE* f = fopen(log, "r");
        assert_non_null(f);
        text[fread(text, 1, sizeof text - 1, f)] = 0;
        fclose(f);
        assert_non_null(strstr(text, "saved no checkpoint to resume from"));
        assert_int_equal(unlink(results), 0);
    }
    assert_int_equal(run_train(out, newest ? out : NULL, log, 0), 0);
    assert_int_equal(check_left_files(out, false), STEPS);  // the stale temps are gone too
    assert_same_final_state(out);
    printf("%s: newest complete checkpoint %ld, resumed: final state bit-identical\n", tag, newest);
}

typedef struct {
    int after_checkpoint;  // wait until checkpoint-<this>/ exists (0: do not wait)
    long delay_us;         // then this long, then SIGKILL
} KillPoint;

static void test_sigkill_then_resume(void** s) {
    (void)s;
    setup_reference();
    static const KillPoint SHORT[] = {{0, 0}, {0, 30000}, {1, 0}, {2, 3000}, {4, 12000}, {7, 1500}};
    KillPoint pts[96];
    size_t np = 0;
    if (g_long) {
        for (int k = 0; k <= 8; k++)
            for (long d = 0; d <= 40000; d += 5000) pts[np++] = (KillPoint){k, d + 700 * k};
    } else {
        memcpy(pts, SHORT, sizeof SHORT);
        np = ARRAY_LEN(SHORT);
    }
    int killed = 0;
    for (size_t i = 0; i < np; i++) {
        char out[700], log[800], wait_for[900];
        snprintf(out, sizeof out, "%s/kill-%zu", g_tmp, i);
        snprintf(log, sizeof log, "%s/kill-%zu.log", g_tmp, i);
        snprintf(wait_for, sizeof wait_for, "%s/checkpoint-%d", out, pts[i].after_checkpoint);
        pid_t pid = spawn_train(out, NULL, log, 0);
        bool done = false;
        if (pts[i].after_checkpoint > 0)
            for (int w = 0; w < 60000 && !exists(wait_for) && !done; w++) {  // <= 60 s
                int st;
                done = waitpid(pid, &st, WNOHANG) == pid;
                sleep_us(1000);
            }
        if (!done) {
            sleep_us(pts[i].delay_us);
            kill(pid, SIGKILL);
            int rc = wait_rc(pid);
            killed += rc == 128 + SIGKILL;
        }
        long newest = check_left_files(out, true);
        char tag[64];
        snprintf(tag, sizeof tag, "kill point %zu (after checkpoint-%d + %ld us)", i, pts[i].after_checkpoint,
                 pts[i].delay_us);
        resume_and_compare(out, newest, tag);
    }
    printf("%zu kill points, %d runs really killed\n", np, killed);
    assert_true(killed > 0);
}

// The full-disk part: a tmpfs of `bytes` when we may mount one; returns false when not.
static bool mount_small_disk(const char* dir, long bytes) {
    char opts[64];
    snprintf(opts, sizeof opts, "size=%ld", bytes);
    if (mkdir(dir, 0755) != 0 && errno != EEXIST) return false;
    return mount("tmpfs", dir, "tmpfs", 0, opts) == 0;
}

static void test_full_disk_then_resume(void** s) {
    (void)s;
    setup_reference();
    static const long SHORT[] = {700 * 1024};
    long sizes[32];
    size_t ns = 0;
    if (g_long)
        for (long kb = 64; kb <= 3000; kb += 160) sizes[ns++] = kb * 1024;
    else {
        memcpy(sizes, SHORT, sizeof SHORT);
        ns = ARRAY_LEN(SHORT);
    }
    for (size_t i = 0; i < ns; i++) {
        char disk[700], out[800], log[800], moved[800];
        snprintf(disk, sizeof disk, "%s/disk-%zu", g_tmp, i);
        snprintf(out, sizeof out, "%s/out", disk);
        snprintf(log, sizeof log, "%s/disk-%zu.log", g_tmp, i);
        bool mounted = mount_small_disk(disk, sizes[i]);
        if (!mounted) {
            // no tmpfs here (not root, or no mount permission): a file-size limit below one
            // checkpoint (~278 KB) makes the first checkpoint write fail instead
            printf("full disk: cannot mount a tmpfs (%s); RLIMIT_FSIZE of 100000 bytes instead\n", strerror(errno));
            assert_int_equal(run_train(out, NULL, log, 100000), 1);
            assert_int_equal(check_left_files(out, false), 0);
            print_log(log);
            return;
        }
        int rc = run_train(out, NULL, log, 0);
        long newest = check_left_files(out, false);  // a failed save removes its temp folder
        printf("full disk of %ld KB: exit %d, newest complete checkpoint %ld\n", sizes[i] / 1024, rc, newest);
        if (newest < STEPS) assert_int_equal(rc, 1);
        // resume on a disk with room: the whole folder copied off the small disk
        snprintf(moved, sizeof moved, "%s/disk-%zu-moved", g_tmp, i);
        char cmd[2000];
        snprintf(cmd, sizeof cmd, "cp -a '%s' '%s'", out, moved);
        assert_int_equal(system(cmd), 0);
        assert_int_equal(umount2(disk, MNT_DETACH), 0);
        if (newest == STEPS) continue;  // the disk was big enough
        char tag[64];
        snprintf(tag, sizeof tag, "full disk of %ld KB", sizes[i] / 1024);
        resume_and_compare(moved, newest, tag);
    }
}

static int group_teardown(void** s) {
    (void)s;
    cli_harness_cleanup("test_crash");
    return 0;
}

int main(int argc, char** argv) {
    (void)argc;
    if (cli_harness_setup(argv[0], "test_crash")) return 1;
    g_long = long_mode();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sigkill_then_resume),
        cmocka_unit_test(test_full_disk_then_resume),
    };
    return cmocka_run_group_tests(tests, NULL, group_teardown);
}
