// stream_prefetch.c — the process's stream prefetch policy (stream_prefetch.h): chosen by CPU
// vendor before main runs, overridable by TRAINBENCH_STREAM_PREFETCH.
#include "core/stream_prefetch.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/cpu.h"

StreamPrefetch stream_prefetch_policy = STREAM_PREFETCH_LINES;

const char* stream_prefetch_name(StreamPrefetch p) {
    return p == STREAM_PREFETCH_PAGES ? "pages" : p == STREAM_PREFETCH_LINES ? "lines" : "none";
}

void stream_prefetch_set(StreamPrefetch p) { stream_prefetch_policy = p; }

StreamPrefetch stream_prefetch_default(void) {
    return cpu_features()->intel ? STREAM_PREFETCH_PAGES : STREAM_PREFETCH_LINES;
}

bool stream_prefetch_apply_env(char* err, size_t cap) {
    const char* v = getenv("TRAINBENCH_STREAM_PREFETCH");
    if (!v || !*v) return true;
    if (!strcmp(v, "pages")) stream_prefetch_policy = STREAM_PREFETCH_PAGES;
    else if (!strcmp(v, "lines")) stream_prefetch_policy = STREAM_PREFETCH_LINES;
    else if (!strcmp(v, "none")) stream_prefetch_policy = STREAM_PREFETCH_NONE;
    else if (!strcmp(v, "auto")) stream_prefetch_policy = stream_prefetch_default();
    else {
        snprintf(err, cap, "TRAINBENCH_STREAM_PREFETCH='%.40s' is not a policy (allowed: pages, lines, none, auto)", v);
        return false;
    }
    return true;
}

// The vendor's default before main (and before any library user's first step): Intel's
// streamer restarts at each page (the page kick helps there), AMD's Zen 4 wants lines.
__attribute__((constructor)) static void stream_prefetch_init(void) { stream_prefetch_policy = stream_prefetch_default(); }
