// junit.c — implementation of junit.h. Not here: deciding outcomes (the commands).
#include "core/junit.h"

#include <stdlib.h>
#include <string.h>

typedef struct {
    char *classname, *name, *message, *detail;
    double time_s;
    JUnitOutcome outcome;
} JUnitCase;

struct JUnit {
    char* suite;
    JUnitCase* c;
    size_t n, cap;
};

JUnit* junit_new(const char* suite_name) {
    JUnit* j = xcalloc(1, sizeof *j);
    j->suite = xstrdup(suite_name);
    return j;
}

void junit_case(JUnit* j, const char* classname, const char* name, double time_s, JUnitOutcome outcome,
                const char* message, const char* detail) {
    if (j->n == j->cap) {
        j->cap = j->cap ? 2 * j->cap : 32;
        j->c = xrealloc(j->c, j->cap * sizeof(JUnitCase));
    }
    j->c[j->n++] = (JUnitCase){xstrdup(classname), xstrdup(name), message ? xstrdup(message) : NULL,
                               detail ? xstrdup(detail) : NULL, time_s, outcome};
}

void junit_free(JUnit* j) {
    if (!j) return;
    for (size_t i = 0; i < j->n; i++) {
        free(j->c[i].classname);
        free(j->c[i].name);
        free(j->c[i].message);
        free(j->c[i].detail);
    }
    free(j->c);
    free(j->suite);
    free(j);
}

// Appends s to f, escaped for XML text and attribute values.
static void put_escaped(FILE* f, const char* s) {
    for (const unsigned char* p = (const unsigned char*)s; *p; p++) {
        switch (*p) {
        case '&': fputs("&amp;", f); break;
        case '<': fputs("&lt;", f); break;
        case '>': fputs("&gt;", f); break;
        case '"': fputs("&quot;", f); break;
        case '\'': fputs("&apos;", f); break;
        default:
            // XML 1.0 allows only tab, newline and carriage return below 0x20
            if (*p < 0x20 && *p != '\t' && *p != '\n' && *p != '\r') fputc('?', f);
            else fputc(*p, f);
        }
    }
}

Status junit_write(const JUnit* j, const char* path) {
    char* text = NULL;
    size_t len = 0;
    FILE* f = open_memstream(&text, &len);
    if (!f) return status_make(STATUS_IO, "%s: cannot build the report in memory", path);
    size_t count[4] = {0};
    for (size_t i = 0; i < j->n; i++) count[j->c[i].outcome]++;
    double total = 0;
    for (size_t i = 0; i < j->n; i++) total += j->c[i].time_s;
    fputs("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<testsuites>\n  <testsuite name=\"", f);
    put_escaped(f, j->suite);
    fprintf(f, "\" tests=\"%zu\" failures=\"%zu\" errors=\"%zu\" skipped=\"%zu\" time=\"%.6f\">\n", j->n,
            count[JUNIT_FAILURE], count[JUNIT_ERROR], count[JUNIT_SKIPPED], total);
    static const char* const TAG[] = {NULL, "failure", "error", "skipped"};
    for (size_t i = 0; i < j->n; i++) {
        const JUnitCase* c = &j->c[i];
        fputs("    <testcase classname=\"", f);
        put_escaped(f, c->classname);
        fputs("\" name=\"", f);
        put_escaped(f, c->name);
        fprintf(f, "\" time=\"%.6f\"", c->time_s);
        if (c->outcome == JUNIT_PASS) {
            fputs("/>\n", f);
            continue;
        }
        fprintf(f, ">\n      <%s message=\"", TAG[c->outcome]);
        put_escaped(f, c->message ? c->message : "");
        fputs("\">", f);
        if (c->detail) put_escaped(f, c->detail);
        fprintf(f, "</%s>\n    </testcase>\n", TAG[c->outcome]);
    }
    fputs("  </testsuite>\n</testsuites>\n", f);
    if (fclose(f) != 0) {
        free(text);
        return status_make(STATUS_IO, "%s: cannot build the report in memory", path);
    }
    Status s = write_file_atomic(path, text, len);
    free(text);
    return s;
}
