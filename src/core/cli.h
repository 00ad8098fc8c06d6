// cli.h — the command table shared by main.c and the per-command files, and small helpers
// for flag parsing so every command reports bad input the same way (usage on stderr, exit 2).
#ifndef TRAINBENCH_CLI_H
#define TRAINBENCH_CLI_H

#include <stdbool.h>

#define TRAINBENCH_VERSION "0.1.0"

typedef struct {
    const char* name;     // the word after `trainbench`
    const char* summary;  // one line for `trainbench help`
    const char* usage;    // full usage text for `trainbench CMD --help`
    int (*run)(int argc, char** argv);  // argv[0] is the command name; returns the exit code
} Command;

// One file per command exports its Command.
extern const Command cmd_info;
extern const Command cmd_inspect;
extern const Command cmd_train;
extern const Command cmd_memory;
extern const Command cmd_gate;
extern const Command cmd_report;
extern const Command cmd_record;
extern const Command cmd_conform;
extern const Command cmd_check;
extern const Command cmd_fingerprint;
extern const Command cmd_run;
extern const Command cmd_history;
extern const Command cmd_icount;

// Flag helpers. Each returns false after printing "trainbench CMD: ..." and the usage hint;
// the caller then returns 2.
//   flag_value: for "--name VALUE" and "--name=VALUE"; *i advances past a separate value.
bool flag_matches(const char* arg, const char* name);  // "--threads" or "--threads=..."
bool flag_value(const Command* cmd, int argc, char** argv, int* i, const char* name, const char** out);
bool flag_int(const Command* cmd, int argc, char** argv, int* i, const char* name, long min, long max, long* out);
int cli_unknown_flag(const Command* cmd, const char* arg);  // prints, returns 2
int cli_usage_error(const Command* cmd, const char* fmt, ...) __attribute__((format(printf, 2, 3)));

#endif
