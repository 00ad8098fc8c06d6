// fuzz_util.h — shared by the harnesses in tests/fuzz/: a private temp folder (removed at
// exit), writing the input to a file there (the loaders under test read paths), and running a
// command in-process with its stdout/stderr discarded. Each harness defines one
// `int fuzz_<name>(const uint8_t* data, size_t size)` (always returns 0; a crash, a sanitizer
// report or a leak is the finding), plus LLVMFuzzerTestOneInput when built by `make fuzz`
// (-DFUZZ_LIBFUZZER). tests/test_fuzz_replay.c includes every harness and replays the
// committed corpora and crash reproducers through the same functions.
#ifndef TRAINBENCH_FUZZ_UTIL_H
#define TRAINBENCH_FUZZ_UTIL_H

#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/cli.h"
#include "core/common.h"

static char fuzz_tmp_dir[256];

static void fuzz_remove_tmp(void) {
    if (fuzz_tmp_dir[0]) (void)remove_tree(fuzz_tmp_dir);
}

// The harness's private folder, made on first use.
static const char* fuzz_dir(void) {
    if (!fuzz_tmp_dir[0]) {
        snprintf(fuzz_tmp_dir, sizeof fuzz_tmp_dir, "%s/trainbench-fuzz-XXXXXX", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
        if (!mkdtemp(fuzz_tmp_dir)) ABORT("mkdtemp %s", fuzz_tmp_dir);
        atexit(fuzz_remove_tmp);
    }
    return fuzz_tmp_dir;
}

// fuzz_dir()/rel (folders made as needed); the path is written to out.
static const char* fuzz_path(char* out, size_t cap, const char* rel) {
    snprintf(out, cap, "%s/%s", fuzz_dir(), rel);
    char* slash = strrchr(out, '/');
    *slash = 0;
    CHECK(status_is_ok(make_dirs(out)));
    *slash = '/';
    return out;
}

static void fuzz_write(const char* path, const uint8_t* data, size_t size) {
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    CHECK(fd >= 0, "%s", path);
    size_t done = 0;
    while (done < size) {
        ssize_t w = write(fd, data + done, size - done);
        CHECK(w > 0, "%s", path);
        done += (size_t)w;
    }
    close(fd);
}

// cmd->run(argc, argv) with stdout and stderr sent to /dev/null meanwhile; returns its status.
static int fuzz_run_quiet(const Command* cmd, int argc, const char** argv) {
    fflush(stdout);
    fflush(stderr);
    int o = dup(1), e = dup(2), n = open("/dev/null", O_WRONLY);
    dup2(n, 1);
    dup2(n, 2);
    int rc = cmd->run(argc, (char**)argv);
    fflush(stdout);
    fflush(stderr);
    dup2(o, 1);
    dup2(e, 2);
    close(o);
    close(e);
    close(n);
    return rc;
}

#endif
