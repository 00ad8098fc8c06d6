// junit.h — JUnit XML reports for CI systems (GitHub Actions test reporters, GitLab's
// `artifacts:reports:junit`, Jenkins): one <testsuite> of <testcase>s with <failure>, <error> or
// <skipped>, written atomically. Used by `conform`, `check` and `gate` (--junit FILE);
// tests/run_tests.sh writes the same shape from the shell. Not here: what a case means.
#ifndef TRAINBENCH_JUNIT_H
#define TRAINBENCH_JUNIT_H

#include "core/common.h"

typedef enum { JUNIT_PASS, JUNIT_FAILURE, JUNIT_ERROR, JUNIT_SKIPPED } JUnitOutcome;

typedef struct JUnit JUnit;

JUnit* junit_new(const char* suite_name);
// One test case; message (one line, may be NULL) and detail (free text, may be NULL) go into
// the <failure>/<error>/<skipped> element. Strings are copied; text is XML-escaped and
// characters XML 1.0 forbids are replaced by '?'.
void junit_case(JUnit* j, const char* classname, const char* name, double time_s, JUnitOutcome outcome,
                const char* message, const char* detail);
// Writes the report to path atomically (temp file + rename).
Status junit_write(const JUnit* j, const char* path);
void junit_free(JUnit* j);

#endif
