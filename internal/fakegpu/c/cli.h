/* Table-driven --flag parsing shared by the fake GPU stack's programs. */
#ifndef FAKEGPU_CLI_H
#define FAKEGPU_CLI_H

#include <stddef.h>
#include <stdio.h>

enum opt_type { OPT_LONG, OPT_DOUBLE, OPT_STRING, OPT_FLAG };

struct flag {
	const char *name;
	enum opt_type type;
	void *value;
	const char *help;
};

/* Accepts --name value and --name=value; a bad flag prints why and exits with status 2. */
void cli_parse(const char *prog, const struct flag *flags, size_t n, int argc, char **argv);
void cli_usage(FILE *f, const struct flag *flags, size_t n);
__attribute__((noreturn, format(printf, 3, 4))) void cli_die(const char *prog, int status, const char *fmt, ...);

#endif
