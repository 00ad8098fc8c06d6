// cli.c — flag parsing helpers shared by the command files (see cli.h).
#include "core/cli.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "core/common.h"

bool flag_matches(const char* arg, const char* name) {
    size_t n = strlen(name);
    return strncmp(arg, name, n) == 0 && (arg[n] == '\0' || arg[n] == '=');
}

int cli_usage_error(const Command* cmd, const char* fmt, ...) {
    fflush(stdout);
    fprintf(stderr, "trainbench %s: ", cmd->name);
    va_list ap;
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, "\nusage: %s\n(see `trainbench %s --help`)\n", cmd->usage, cmd->name);
    return 2;
}

int cli_unknown_flag(const Command* cmd, const char* arg) {
    return cli_usage_error(cmd, "unknown option '%s'", arg);
}

bool flag_value(const Command* cmd, int argc, char** argv, int* i, const char* name, const char** out) {
    const char* arg = argv[*i];
    size_t n = strlen(name);
    if (arg[n] == '=') {
        *out = arg + n + 1;
    } else if (*i + 1 < argc) {
        *out = argv[++*i];
        // `--output-dir --seed 3` means a forgotten value, not a folder named "--seed": a separate
        // value that looks like an option is refused (NAME=--x passes one on purpose); the *-args
        // options take argument strings, which start with "--"
        const size_t nl = strlen(name);
        const bool takes_args = nl > 5 && !strcmp(name + nl - 5, "-args");
        if (!takes_args && (*out)[0] == '-' && (*out)[1] == '-' && (*out)[2]) {
            cli_usage_error(cmd, "option %s needs a value, and the next argument is the option %s (write %s=VALUE "
                            "for a value that starts with --)", name, *out, name);
            return false;
        }
    } else {
        cli_usage_error(cmd, "option %s needs a value", name);
        return false;
    }
    if (!**out) {
        cli_usage_error(cmd, "option %s needs a non-empty value", name);
        return false;
    }
    return true;
}

bool flag_int(const Command* cmd, int argc, char** argv, int* i, const char* name, long min, long max, long* out) {
    const char* v;
    if (!flag_value(cmd, argc, argv, i, name, &v)) return false;
    if (!parse_long(v, min, max, out)) {
        cli_usage_error(cmd, "%s must be an integer in [%ld, %ld] (got '%s')", name, min, max, v);
        return false;
    }
    return true;
}
