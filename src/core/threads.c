// threads.c — implementation of threads.h (Linux: /proc/self/exe, dladdr).
#include "core/threads.h"

#include <dlfcn.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

// Set in the re-executed process, so the policy reads as ours and not as the user's.
#define POLICY_MARK "TRAINBENCH_WAIT_POLICY_SET"

void threads_apply_wait_policy(char** argv) {
    if (getenv("OMP_WAIT_POLICY") || getenv("GOMP_SPINCOUNT")) return;
    if (setenv("GOMP_SPINCOUNT", THREADS_SPINCOUNT, 1) != 0 || setenv(POLICY_MARK, "1", 1) != 0) return;
    execv("/proc/self/exe", argv);
    // exec failed (no /proc?): the runtime keeps its default; say nothing and run
    unsetenv("GOMP_SPINCOUNT");
    unsetenv(POLICY_MARK);
}

const char* threads_wait_policy(void) {
    static char buf[96];
    const char* p = getenv("OMP_WAIT_POLICY");
    const char* spin = getenv("GOMP_SPINCOUNT");
    if (p) snprintf(buf, sizeof buf, "%s (environment)", p);
    else if (spin)
        snprintf(buf, sizeof buf, "GOMP_SPINCOUNT=%s (%s)", spin, getenv(POLICY_MARK) ? "trainbench default" : "environment");
    else snprintf(buf, sizeof buf, "runtime default (spin, then sleep)");
    return buf;
}

const char* threads_openmp_runtime(void) {
    Dl_info info;
    if (dladdr((void*)omp_get_max_threads, &info) && info.dli_fname) return info.dli_fname;
    return "unknown";
}
