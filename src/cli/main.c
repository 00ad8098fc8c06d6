// main.c — argument parsing and dispatch only: finds the command and hands it argv.
#include <stdio.h>
#include <string.h>

#include "core/cli.h"
#include "core/common.h"
#include "core/threads.h"
#include "optim/optim.h"

// To add a command: write src/<name>.c exporting `const Command cmd_<name>`, declare it in
// cli.h and add one line here. README.md lists the commands.
static const Command* const COMMANDS[] = {
    &cmd_info,
    &cmd_inspect,
    &cmd_memory,
    &cmd_train,
    &cmd_gate,
    &cmd_report,
    &cmd_record,
    &cmd_conform,
    &cmd_check,
    &cmd_fingerprint,
    &cmd_run,
    &cmd_history,
    &cmd_icount,
};

static void print_help(FILE* f) {
    fprintf(f, "trainbench %s — benchmark and conformance suite for efficient NN training\n\n"
               "usage: trainbench COMMAND [OPTIONS]   (trainbench COMMAND --help for details)\n\ncommands:\n",
            TRAINBENCH_VERSION);
    for (size_t i = 0; i < ARRAY_LEN(COMMANDS); i++)
        fprintf(f, "  %-12s %s\n", COMMANDS[i]->name, COMMANDS[i]->summary);
}

static int run_command(int argc, char** argv) {
    if (argc < 2) {
        print_help(stderr);
        return 2;
    }
    const char* name = argv[1];
    if (!strcmp(name, "help") || !strcmp(name, "--help") || !strcmp(name, "-h")) {
        print_help(stdout);
        return 0;
    }
    if (!strcmp(name, "--version") || !strcmp(name, "version")) {
        printf("trainbench %s\n", TRAINBENCH_VERSION);
        return 0;
    }
    for (size_t i = 0; i < ARRAY_LEN(COMMANDS); i++) {
        if (strcmp(COMMANDS[i]->name, name) == 0) {
            for (int a = 2; a < argc; a++) {
                if (!strcmp(argv[a], "--help") || !strcmp(argv[a], "-h")) {
                    printf("usage: %s\n", COMMANDS[i]->usage);
                    return 0;
                }
            }
            return COMMANDS[i]->run(argc - 1, argv + 1);
        }
    }
    fprintf(stderr, "trainbench: unknown command '%s'\n\n", name);
    print_help(stderr);
    return 2;
}

// Every command's stdout (tables, --json) is checked once at the end: a full disk or a closed
// pipe makes the exit status non-zero even when the command itself succeeded.
int main(int argc, char** argv) {
    threads_apply_wait_policy(argv);  // may re-execute once (threads.h)
    char err[200];
    if (!optim_apply_env(err, sizeof err)) {  // torch.sqrt's MKL kernel, the streams' software prefetch
        fprintf(stderr, "trainbench: %s\n", err);
        return 2;
    }
    return close_stdout_checked(run_command(argc, argv));
}
