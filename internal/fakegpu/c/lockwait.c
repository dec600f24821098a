/*
 * fakegpu-lockwait: a GPU-feeding thread that waits on its own process's lock, then
 * sleeps. Its main thread ("dispatcher") launches a kernel on the fake libcudart, then
 * takes a pthread mutex that one of --tokenizers threads ("tokenizer") holds, asleep,
 * for --hold-us: each of the --waits turns goes to the next tokenizer in order, and only
 * after the dispatcher saw it take the lock does it ask for it, so each turn is one
 * wait of the dispatcher in futex, ended by that tokenizer's unlock. Then it sleeps
 * --sleeps times for --sleep-us (clock_nanosleep), each ended by the timer interrupt.
 *
 * It prints one JSON report with what it measured itself: the waits (the times the
 * dispatcher blocked in a lock call that found the lock held) and those calls' time
 * from the lock call to its return, the sleeps and their time, and the tids of the
 * dispatcher and of every tokenizer.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <semaphore.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"
#include "fake_cuda.h"

#define MAX_TOKENIZERS 64

static const char *prog = "fakegpu-lockwait";

static struct {
	long tokenizers, waits, hold_us, sleeps, sleep_us, wait_timeout_ms;
	const char *wait_file;
} opt = {.tokenizers = 4, .waits = 200, .hold_us = 1000, .sleeps = 0, .sleep_us = 2000, .wait_timeout_ms = 30000};

static const struct flag flags[] = {
	{"tokenizers", OPT_LONG, &opt.tokenizers, "threads named tokenizer that take turns holding the lock (1..64)"},
	{"waits", OPT_LONG, &opt.waits, "turns: each a tokenizer holds the lock while the dispatcher asks for it"},
	{"hold-us", OPT_LONG, &opt.hold_us, "how long a tokenizer holds the lock (asleep)"},
	{"sleeps", OPT_LONG, &opt.sleeps, "clock_nanosleep calls of the dispatcher after the turns"},
	{"sleep-us", OPT_LONG, &opt.sleep_us, "length of each sleep"},
	{"wait-file", OPT_STRING, &opt.wait_file, "start gate: wait until this path exists before any CUDA call"},
	{"wait-timeout-ms", OPT_LONG, &opt.wait_timeout_ms, "give up on the gate after this long (exit status 3)"},
};

static pthread_mutex_t big_lock = PTHREAD_MUTEX_INITIALIZER;
static sem_t turns[MAX_TOKENIZERS];
static atomic_int held;   /* set by a tokenizer once it holds big_lock */
static atomic_int done;
static pid_t tokenizer_tids[MAX_TOKENIZERS];

static uint64_t now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* The calling thread's voluntary context switches: each is one time it blocked. */
static long voluntary_switches(void)
{
	struct rusage ru;
	getrusage(RUSAGE_THREAD, &ru);
	return ru.ru_nvcsw;
}

static void *tokenizer(void *arg)
{
	long k = (long)arg;
	prctl(PR_SET_NAME, "tokenizer", 0, 0, 0);
	tokenizer_tids[k] = gettid();
	for (;;) {
		while (sem_wait(&turns[k]) && errno == EINTR)
			;
		if (atomic_load(&done))
			return NULL;
		pthread_mutex_lock(&big_lock);
		atomic_store(&held, 1);
		/* Held asleep, not spinning: a tokenizer woken onto the dispatcher's CPU must
		 * give it back, or the dispatcher would only ask once the lock is free. */
		struct timespec hold = {.tv_sec = opt.hold_us / 1000000, .tv_nsec = (opt.hold_us % 1000000) * 1000};
		clock_nanosleep(CLOCK_MONOTONIC, 0, &hold, NULL);
		pthread_mutex_unlock(&big_lock);
	}
}

static void tokenize_kernel(void) {}

int main(int argc, char **argv)
{
	cli_parse(prog, flags, sizeof(flags) / sizeof(flags[0]), argc, argv);
	if (opt.tokenizers < 1 || opt.tokenizers > MAX_TOKENIZERS || opt.waits < 0 || opt.sleeps < 0 ||
	    opt.hold_us < 1 || opt.sleep_us < 1)
		cli_die(prog, 2, "want 1..%d --tokenizers, --waits and --sleeps >= 0, --hold-us and --sleep-us >= 1", MAX_TOKENIZERS);
	prctl(PR_SET_NAME, "dispatcher", 0, 0, 0);
	pthread_t threads[MAX_TOKENIZERS];
	for (long k = 0; k < opt.tokenizers; k++) {
		sem_init(&turns[k], 0, 0);
		if (pthread_create(&threads[k], NULL, tokenizer, (void *)k))
			cli_die(prog, 1, "pthread_create: %s", strerror(errno));
	}
	if (opt.wait_file) {
		uint64_t give_up = now_ns() + (uint64_t)opt.wait_timeout_ms * 1000000;
		while (access(opt.wait_file, F_OK)) {
			if (now_ns() > give_up)
				cli_die(prog, 3, "start gate %s: timed out", opt.wait_file);
			usleep(2000);
		}
	}

	dim3 one = {1, 1, 1};
	uint64_t lock_waits = 0, lock_wait_ns = 0, uncontended = 0;
	for (long i = 0; i < opt.waits; i++) {
		if (cudaLaunchKernel((const void *)tokenize_kernel, one, one, NULL, 0, 0) != cudaSuccess)
			cli_die(prog, 1, "cudaLaunchKernel failed");
		atomic_store(&held, 0);
		sem_post(&turns[i % opt.tokenizers]);
		while (!atomic_load(&held))
			__asm__ volatile("pause" ::: "memory");
		if (pthread_mutex_trylock(&big_lock) == 0) {
			uncontended++; /* the tokenizer let go before the dispatcher asked */
		} else {
			/* Counted by the thread's voluntary switches in the call, not by the
			 * failed trylock: a tokenizer that lets go between the two (the
			 * dispatcher preempted there, on a busy host) leaves a lock call that
			 * never slept, which the kernel rightly does not count as a wait. */
			long switches = voluntary_switches();
			uint64_t t0 = now_ns();
			pthread_mutex_lock(&big_lock);
			uint64_t took = now_ns() - t0;
			long blocks = voluntary_switches() - switches;
			if (blocks > 0) {
				lock_wait_ns += took;
				lock_waits += (uint64_t)blocks;
			} else {
				uncontended++;
			}
		}
		pthread_mutex_unlock(&big_lock);
	}

	if (cudaLaunchKernel((const void *)tokenize_kernel, one, one, NULL, 0, 0) != cudaSuccess)
		cli_die(prog, 1, "cudaLaunchKernel failed");
	uint64_t sleep_ns = 0;
	struct timespec nap = {.tv_sec = opt.sleep_us / 1000000, .tv_nsec = (opt.sleep_us % 1000000) * 1000};
	for (long i = 0; i < opt.sleeps; i++) {
		uint64_t t0 = now_ns();
		clock_nanosleep(CLOCK_MONOTONIC, 0, &nap, NULL);
		sleep_ns += now_ns() - t0;
	}

	/* No join: an exiting thread wakes its joiner from its own context (the futex
	 * at its tid), which would add a wait named tokenizer that no turn measured. The
	 * tokenizers, parked in sem_wait, end with the process. */
	atomic_store(&done, 1);
	printf("{\"pid\":%d,\"tid\":%d,\"lock_waits\":%llu,\"lock_wait_ns\":%llu,\"uncontended\":%llu,"
	       "\"sleeps\":%ld,\"sleep_ns\":%llu,\"tokenizer_tids\":[",
	       getpid(), gettid(), (unsigned long long)lock_waits, (unsigned long long)lock_wait_ns,
	       (unsigned long long)uncontended, opt.sleeps, (unsigned long long)sleep_ns);
	for (long k = 0; k < opt.tokenizers; k++)
		printf("%s%d", k ? "," : "", tokenizer_tids[k]);
	printf("]}\n");
	return 0;
}
