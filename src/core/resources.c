// resources.c — available memory and the up-front memory check (resources.h).
#include "core/resources.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "core/common.h"

static bool read_u64_file(const char* path, uint64_t* out) {
    FILE* f = fopen(path, "r");
    if (!f) return false;
    char line[64] = "";
    bool ok = fgets(line, sizeof line, f) != NULL;
    fclose(f);
    if (!ok || !strncmp(line, "max", 3)) return false;  // v2 "max": no limit
    char* end;
    unsigned long long v = strtoull(line, &end, 10);
    if (end == line) return false;
    *out = v;
    return true;
}

static void take(MemAvailable* m, uint64_t bytes, const char* source) {
    if (bytes < m->bytes) {
        m->bytes = bytes;
        snprintf(m->source, sizeof m->source, "%s", source);
    }
}

// cgroup (v2, else v1) limit minus use for this process's group; false when none is set
static bool cgroup_left(uint64_t* left, const char** which) {
    FILE* f = fopen("/proc/self/cgroup", "r");
    if (!f) return false;
    char line[1024], v2[1024] = "", v1[1024] = "";
    bool have_v2 = false, have_v1 = false;
    while (fgets(line, sizeof line, f)) {
        line[strcspn(line, "\n")] = 0;
        if (!strncmp(line, "0::", 3)) {
            snprintf(v2, sizeof v2, "%s", line + 3);
            have_v2 = true;
        } else {
            char* c = strchr(line, ':');
            if (c && !strncmp(c + 1, "memory:", 7)) {
                snprintf(v1, sizeof v1, "%s", c + 8);
                have_v1 = true;
            }
        }
    }
    fclose(f);
    char pmax[1200], pcur[1200];
    uint64_t lim, cur;
    if (have_v2) {
        snprintf(pmax, sizeof pmax, "/sys/fs/cgroup%s/memory.max", v2);
        snprintf(pcur, sizeof pcur, "/sys/fs/cgroup%s/memory.current", v2);
        if (read_u64_file(pmax, &lim) && read_u64_file(pcur, &cur)) {
            *left = lim > cur ? lim - cur : 0;
            *which = "cgroup v2 memory.max - memory.current";
            return true;
        }
    }
    if (have_v1) {  // the group's own folder, or the mount root inside a cgroup namespace
        const char* dirs[2] = {v1, ""};
        for (int i = 0; i < 2; i++) {
            snprintf(pmax, sizeof pmax, "/sys/fs/cgroup/memory%s/memory.limit_in_bytes", dirs[i]);
            snprintf(pcur, sizeof pcur, "/sys/fs/cgroup/memory%s/memory.usage_in_bytes", dirs[i]);
            if (read_u64_file(pmax, &lim) && read_u64_file(pcur, &cur)) {
                if (lim >= (UINT64_C(1) << 62)) return false;  // "no limit" is a huge number in v1
                *left = lim > cur ? lim - cur : 0;
                *which = "cgroup v1 memory.limit_in_bytes - memory.usage_in_bytes";
                return true;
            }
        }
    }
    return false;
}

MemAvailable memory_available(void) {
    MemAvailable m = {UINT64_MAX, "no limit found"};
    FILE* f = fopen("/proc/meminfo", "r");
    if (f) {
        char line[256];
        unsigned long long kb;
        while (fgets(line, sizeof line, f))
            if (sscanf(line, "MemAvailable: %llu kB", &kb) == 1) take(&m, (uint64_t)kb * 1024, "MemAvailable");
        fclose(f);
    }
    uint64_t left;
    const char* which;
    if (cgroup_left(&left, &which)) take(&m, left, which);
    struct rlimit rl;
    if (getrlimit(RLIMIT_AS, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY) {
        uint64_t mapped = 0;
        FILE* s = fopen("/proc/self/statm", "r");
        unsigned long long pages;
        if (s && fscanf(s, "%llu", &pages) == 1) mapped = (uint64_t)pages * (uint64_t)sysconf(_SC_PAGESIZE);
        if (s) fclose(s);
        take(&m, (uint64_t)rl.rlim_cur > mapped ? (uint64_t)rl.rlim_cur - mapped : 0,
             "RLIMIT_AS (ulimit -v) minus the address space in use");
    }
    return m;
}

const char* format_bytes_human(char* buf, size_t cap, uint64_t bytes) {
    double b = (double)bytes;
    if (b >= 1024.0 * 1024 * 1024) snprintf(buf, cap, "%.2f GB", b / (1024.0 * 1024 * 1024));
    else if (b >= 1024.0 * 1024) snprintf(buf, cap, "%.1f MB", b / (1024.0 * 1024));
    else snprintf(buf, cap, "%.0f KB", b / 1024.0);
    return buf;
}

int memory_check(const char* cmd, uint64_t need_bytes, const char* what, bool force) {
    MemAvailable m = memory_available();
    if (force || need_bytes <= m.bytes) return 0;
    char a[32], b[32];
    fflush(stdout);
    fprintf(stderr, "trainbench %s: needs about %s (%" PRIu64 " bytes: %s) but only %s (%" PRIu64 " bytes) is "
                    "available (%s); use a smaller configuration, or --force to run it anyway\n",
            cmd, format_bytes_human(a, sizeof a, need_bytes), need_bytes, what, format_bytes_human(b, sizeof b, m.bytes),
            m.bytes, m.source);
    return 2;
}
