// test_layout.c — the layout's architecture, checked from the source: every `#include
// "<folder>/..."` in src/<folder>/*.{c,h} points to the same folder or to a LOWER layer
// (README "Layout": cli -> {validate, train} -> results -> model -> {optim, gemm} -> core);
// folders of one layer do not include each other, so the folder graph has no cycle and no
// upward arrow. Prints the graph it found. A new folder must be given a layer here.
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/common.h"

static const struct {
    const char* folder;
    int layer;
} LAYERS[] = {
    {"core", 0}, {"gemm", 1}, {"optim", 1}, {"model", 2}, {"results", 3}, {"train", 4}, {"validate", 4}, {"cli", 5},
};

static int layer_of(const char* folder) {
    for (size_t i = 0; i < ARRAY_LEN(LAYERS); i++)
        if (!strcmp(LAYERS[i].folder, folder)) return LAYERS[i].layer;
    return -1;
}

static void test_includes_point_down(void** s) {
    (void)s;
    char src[4096];
    repo_path("src", src, sizeof src);
    bool edge[ARRAY_LEN(LAYERS)][ARRAY_LEN(LAYERS)] = {{false}};
    size_t files = 0, bad = 0;
    for (size_t f = 0; f < ARRAY_LEN(LAYERS); f++) {
        char dir[4200];
        snprintf(dir, sizeof dir, "%s/%s", src, LAYERS[f].folder);
        DIR* d = opendir(dir);
        assert_non_null(d);
        struct dirent* de;
        while ((de = readdir(d))) {
            size_t L = strlen(de->d_name);
            if (L < 3 || (strcmp(de->d_name + L - 2, ".c") && strcmp(de->d_name + L - 2, ".h"))) continue;
            char path[4500];
            snprintf(path, sizeof path, "%s/%s", dir, de->d_name);
            FILE* fp = fopen(path, "r");
            assert_non_null(fp);
            files++;
            char line[1024];
            while (fgets(line, sizeof line, fp)) {
                char target[256];
                if (sscanf(line, " #include \"%255[^/\"]/", target) != 1) continue;
                int to = layer_of(target);
                if (to < 0) {
                    printf("%s: includes from unknown folder %s (give it a layer in test_layout.c)\n", path, target);
                    bad++;
                    continue;
                }
                size_t t = 0;
                while (strcmp(LAYERS[t].folder, target)) t++;
                if (t != f) edge[f][t] = true;
                if (t != f && to >= LAYERS[f].layer) {
                    printf("%s: %s (layer %d) includes %s (layer %d): not downward\n", path, LAYERS[f].folder,
                           LAYERS[f].layer, target, to);
                    bad++;
                }
            }
            fclose(fp);
        }
        closedir(d);
    }
    printf("%zu files; folder graph:\n", files);
    for (size_t f = 0; f < ARRAY_LEN(LAYERS); f++) {
        printf("  %-8s ->", LAYERS[f].folder);
        for (size_t t = 0; t < ARRAY_LEN(LAYERS); t++)
            if (edge[f][t]) printf(" %s", LAYERS[t].folder);
        printf("\n");
    }
    assert_true(files > 30);
    assert_int_equal(bad, 0);
}

int main(void) {
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_includes_point_down)};
    return cmocka_run_group_tests_name("layout", tests, NULL, NULL);
}
