#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

void cli_die(const char *prog, int status, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	fprintf(stderr, "%s: ", prog);
	vfprintf(stderr, fmt, ap);
	fprintf(stderr, "\n");
	va_end(ap);
	exit(status);
}

void cli_usage(FILE *f, const struct flag *flags, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		const struct flag *fl = &flags[i];
		char def[64] = "";
		if (fl->type == OPT_LONG)
			snprintf(def, sizeof(def), " (default %ld)", *(long *)fl->value);
		else if (fl->type == OPT_DOUBLE)
			snprintf(def, sizeof(def), " (default %g)", *(double *)fl->value);
		else if (fl->type == OPT_STRING && *(const char **)fl->value)
			snprintf(def, sizeof(def), " (default %s)", *(const char **)fl->value);
		fprintf(f, "  --%-22s %s%s\n", fl->name, fl->help, def);
	}
}

void cli_parse(const char *prog, const struct flag *flags, size_t n, int argc, char **argv)
{
	for (int i = 1; i < argc; i++) {
		const char *arg = argv[i];
		if (strncmp(arg, "--", 2) != 0)
			cli_die(prog, 2, "unexpected argument %s (see --help)", arg);
		arg += 2;
		const char *eq = strchr(arg, '=');
		size_t name_len = eq ? (size_t)(eq - arg) : strlen(arg);
		const struct flag *fl = NULL;
		for (size_t k = 0; k < n; k++)
			if (strlen(flags[k].name) == name_len && strncmp(flags[k].name, arg, name_len) == 0)
				fl = &flags[k];
		if (!fl)
			cli_die(prog, 2, "unknown flag --%.*s (see --help)", (int)name_len, arg);
		if (fl->type == OPT_FLAG && !eq) {
			*(long *)fl->value = 1;
			continue;
		}
		const char *val = eq ? eq + 1 : (i + 1 < argc ? argv[++i] : NULL);
		if (!val)
			cli_die(prog, 2, "--%s needs a value", fl->name);
		char *end = NULL;
		errno = 0;
		switch (fl->type) {
		case OPT_LONG:
		case OPT_FLAG:
			*(long *)fl->value = strtol(val, &end, 0);
			break;
		case OPT_DOUBLE:
			*(double *)fl->value = strtod(val, &end);
			break;
		case OPT_STRING:
			*(const char **)fl->value = val;
			continue;
		}
		if (errno || !end || *end || end == val)
			cli_die(prog, 2, "--%s: bad number %s", fl->name, val);
	}
}
