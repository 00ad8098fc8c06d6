// resources.h — how much memory this process may still use, and the up-front check `train`
// and `memory` make before allocating: available = the least of /proc/meminfo MemAvailable,
// the cgroup limit minus its current use (v2 memory.max - memory.current; v1
// memory.limit_in_bytes - memory.usage_in_bytes) and RLIMIT_AS minus the address space
// already mapped (/proc/self/statm). A limit that cannot be read is left out.
// Not here: what a command needs (each command estimates its own bytes).
#ifndef TRAINBENCH_RESOURCES_H
#define TRAINBENCH_RESOURCES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct {
    uint64_t bytes;        // UINT64_MAX when no limit could be read
    char source[96];       // which limit is the least, e.g. "MemAvailable", "RLIMIT_AS (ulimit -v)"
} MemAvailable;

MemAvailable memory_available(void);

// 0 when need_bytes <= available or force; else prints, for command `cmd`,
// "trainbench CMD: needs about X (WHAT) but only Y is available (SOURCE); --force runs it anyway"
// and returns 2 (the request does not fit this machine: change it or pass --force).
int memory_check(const char* cmd, uint64_t need_bytes, const char* what, bool force);

// "1.23 GB" / "456.7 MB" / "12 KB" into buf (GB = 1024^3 bytes).
const char* format_bytes_human(char* buf, size_t cap, uint64_t bytes);

#endif
