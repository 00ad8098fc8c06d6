// cli_harness.h — shared by the tests that run the `trainbench` binary (test_cli, test_memory,
// test_train): finds BUILD/trainbench next to the test binary (so the ASan build's tests run
// the ASan binary), makes a private temp folder, and removes it at the end.
#ifndef TRAINBENCH_CLI_HARNESS_H
#define TRAINBENCH_CLI_HARNESS_H

#include <libgen.h>
#include <stdbool.h>
#include <sys/wait.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

static char g_bin[4096];  // path of the trainbench binary under test
static char g_tmp[256];   // this test's temp folder

// Returns 0, or prints why and returns 1 (binary not built, no temp folder).
static int cli_harness_setup(const char* argv0, const char* test_name) {
    char self[4096];
    snprintf(self, sizeof self, "%s", argv0);
    snprintf(g_bin, sizeof g_bin, "%s/../trainbench", dirname(self));
    if (access(g_bin, X_OK) != 0) {
        fprintf(stderr, "%s: %s not built\n", test_name, g_bin);
        return 1;
    }
    snprintf(g_tmp, sizeof g_tmp, "%s/trainbench-%s-XXXXXX", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp", test_name);
    if (!mkdtemp(g_tmp)) {
        fprintf(stderr, "%s: cannot create a temp folder under %s\n", test_name, g_tmp);
        return 1;
    }
    return 0;
}

static void cli_harness_cleanup(const char* test_name) {
    char cmd[512];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_tmp);
    if (system(cmd) != 0) fprintf(stderr, "%s: could not remove %s\n", test_name, g_tmp);
}

// Runs the shell command `cmd`, its stdout into out (NUL-terminated, truncated to out_len - 1);
// returns the exit code, or -1 when it was killed by a signal.
static int cli_capture(const char* cmd, char* out, size_t out_len) {
    FILE* p = popen(cmd, "r");
    if (!p) return -1;
    size_t n = fread(out, 1, out_len - 1, p);
    out[n] = 0;
    int st = pclose(p);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

// cli_run_in: as cli_run, with the working directory `dir` (the binary by its absolute path).
__attribute__((unused)) static int cli_run_in(const char* dir, const char* args, bool with_stderr, char* out,
                                              size_t out_len) {
    char bin[4096], cmd[16384];
    if (!realpath(g_bin, bin)) return -1;
    snprintf(cmd, sizeof cmd, "cd '%s' && %s %s %s", dir ? dir : ".", bin, args, with_stderr ? "2>&1" : "");
    int rc = cli_capture(cmd, out, out_len);
    printf("$ (cd %s) trainbench %s  -> exit %d\n", dir ? dir : ".", args, rc);
    return rc;
}

// Runs `trainbench ARGS` (stdout, plus stderr when with_stderr) into out (NUL-terminated,
// truncated to out_len - 1), prints the command line and the exit code; returns the exit
// code, or -1 when the process was killed by a signal (a crash is never an exit code).
__attribute__((unused)) static int cli_run(const char* args, bool with_stderr, char* out, size_t out_len) {
    char cmd[16384];
    snprintf(cmd, sizeof cmd, "%s %s %s", g_bin, args, with_stderr ? "2>&1" : "");
    int rc = cli_capture(cmd, out, out_len);
    printf("$ trainbench %s  -> exit %d\n", args, rc);
    return rc;
}

#endif
