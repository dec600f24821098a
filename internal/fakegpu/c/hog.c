/*
 * fakegpu-hog: another process's work on a dispatcher's CPU. It names its thread
 * (prctl PR_SET_NAME, the comm the scheduler tracepoints see), pins itself to one CPU,
 * prints "ready" once both hold, and spins until --seconds have passed or it is killed.
 * The scheduling tests run it beside a pinned fakegpu-workload to preempt the dispatcher
 * with a task whose name and process they know.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <sched.h>
#include <stdio.h>
#include <string.h>
#include <sys/prctl.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"

static const char *prog = "fakegpu-hog";

static struct {
	const char *name;
	long cpu;
	double seconds;
} opt = {.name = "fakegpu-hog", .cpu = -1, .seconds = 60};

static const struct flag flags[] = {
	{"name", OPT_STRING, &opt.name, "thread name (comm) to run under, at most 15 bytes"},
	{"cpu", OPT_LONG, &opt.cpu, "pin to this CPU (-1: no pinning)"},
	{"seconds", OPT_DOUBLE, &opt.seconds, "spin this long, then exit (a bound in case the test that started it dies)"},
};

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

int main(int argc, char **argv)
{
	cli_parse(prog, flags, sizeof(flags) / sizeof(flags[0]), argc, argv);
	if (strlen(opt.name) == 0 || strlen(opt.name) > 15)
		cli_die(prog, 2, "--name %s: want 1 to 15 bytes (the kernel's comm holds 16 with the NUL)", opt.name);
	if (prctl(PR_SET_NAME, opt.name, 0, 0, 0))
		cli_die(prog, 1, "prctl(PR_SET_NAME, %s): %s", opt.name, strerror(errno));
	if (opt.cpu >= 0) {
		cpu_set_t set;
		CPU_ZERO(&set);
		CPU_SET((int)opt.cpu, &set);
		if (sched_setaffinity(0, sizeof(set), &set))
			cli_die(prog, 1, "cannot pin to CPU %ld: %s", opt.cpu, strerror(errno));
	}
	printf("ready\n");
	fflush(stdout);
	double until = now_s() + opt.seconds;
	for (;;) {
		for (int i = 0; i < 1 << 16; i++)
			__asm__ volatile("pause" ::: "memory");
		if (now_s() >= until)
			return 0;
	}
}
