/*
 * Host primitive costs for the vmirq-sim `this-host` profile (issue 16).
 *
 * Measures, on the host itself (no KVM involved), the scheduler and notification
 * primitives that the simulator's host model charges on a vCPU wakeup:
 *   wake      a thread pinned to CPU `to` blocked in read() on an eventfd, woken by a
 *             thread pinned to CPU `from` writing it: `write_ns` is the writer's write()
 *             call (the kick, paid by the sender), `wake_ns` is from just before the write
 *             to the woken thread's first instruction after read() returns.
 *   notice    the target spins on a shared word (a polling idle loop); `wake_ns` is from
 *             the writer's store to the spinner seeing it (one cache-line transfer).
 *   pollnotice the same, but the target spins the way KVM's halt-poll loop does
 *             (kvm_vcpu_halt: check, cpu_relax() = PAUSE, ktime_get(), compare with the
 *             window's end): the PAUSE may exit to the outer hypervisor (pause-loop
 *             exiting) on a nested host, and the clock read is in every iteration.
 *   timerfd   a thread on CPU `to` sleeps on a relative timerfd of `interval` us;
 *             `wake_ns` is from the timer's expiry to the thread running.
 *   timerspin the same timer, but the thread never sleeps: it spins on non-blocking
 *             read()s of the timerfd until the expiry shows (the hrtimer interrupt lands on
 *             a busy CPU, as on a vCPU thread in KVM's halt-poll loop). timerfd minus
 *             timerspin is what sleeping adds for a plain thread woken on its own CPU: the
 *             idle exit (here through the outer hypervisor), the wake-up and the context
 *             switch; the same difference for a vCPU (`vmirq kvm exits` timer loops, slept
 *             minus polled) also holds KVM's block and resume of the vCPU thread.
 *   signal    a thread on CPU `from` writes an eventfd that no thread waits on (then reads
 *             it back, untimed, to reset it): `wake_ns` and `write_ns` are the write() call
 *             alone, the part of a kick that signals without waking anybody (an irqfd write
 *             to a vCPU that polls or runs sets the interrupt pending inside it).
 * The waker waits `interval` us (busy, like `vmirq kvm wake`'s sender) after the previous
 * wake was seen before the next one, so the target really idles for about that long.
 * Output: one JSON object per line: {"mode","from","to","interval_us","samples",
 * "write_ns":[p50,min,max],"wake_ns":[p50,p90,min,max]}.
 * Build: cc -O2 -pthread primitives.c -o primitives
 * Usage: primitives MODE FROM_CPU TO_CPU INTERVAL_US SAMPLES (signal ignores TO_CPU)
 */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/prctl.h>
#include <sys/timerfd.h>
#include <time.h>
#include <unistd.h>

static uint64_t now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void pin(int cpu)
{
	cpu_set_t set;
	CPU_ZERO(&set);
	CPU_SET(cpu, &set);
	if (pthread_setaffinity_np(pthread_self(), sizeof(set), &set) != 0) {
		fprintf(stderr, "cannot pin to CPU %d\n", cpu);
		exit(2);
	}
	prctl(PR_SET_TIMERSLACK, 1UL, 0, 0, 0);
}

static void spin_until(uint64_t t)
{
	while (now_ns() < t)
		;
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
	return (x > y) - (x < y);
}

/* Shared state between the waker and the target. */
static int efd;
static int to_cpu, n_samples, warmup;
static const char *mode;
static _Atomic uint64_t posted;  /* waker's timestamp of the current wake (notice) */
static _Atomic uint64_t seen;    /* target's timestamp when it saw the wake */
static _Atomic int seq_seen;
static uint64_t *wake_ns;

static void *target(void *arg)
{
	(void)arg;
	pin(to_cpu);
	for (int i = 0; i < n_samples + warmup; i++) {
		uint64_t t;
		if (strcmp(mode, "wake") == 0) {
			uint64_t v;
			while (read(efd, &v, sizeof(v)) != sizeof(v))
				if (errno != EINTR)
					exit(3);
			t = now_ns();
		} else if (strcmp(mode, "pollnotice") == 0) {
			uint64_t stop = now_ns() + 10ull * 1000000000ull; /* never reached in a run */
			while (atomic_load_explicit(&posted, memory_order_acquire) == 0) {
				__builtin_ia32_pause();
				if (now_ns() > stop)
					exit(4);
			}
			t = now_ns();
			atomic_store(&posted, 0);
		} else {
			while (atomic_load_explicit(&posted, memory_order_acquire) == 0)
				;
			t = now_ns();
			atomic_store(&posted, 0);
		}
		atomic_store(&seen, t);
		atomic_store_explicit(&seq_seen, i + 1, memory_order_release);
	}
	return NULL;
}

static void report(const char *m, int from, int to, int interval_us, uint64_t *w, uint64_t *wr)
{
	qsort(w, n_samples, sizeof(*w), cmp_u64);
	printf("{\"mode\":\"%s\",\"from\":%d,\"to\":%d,\"interval_us\":%d,\"samples\":%d,", m, from,
	       to, interval_us, n_samples);
	if (wr) {
		qsort(wr, n_samples, sizeof(*wr), cmp_u64);
		printf("\"write_ns\":[%llu,%llu,%llu],", (unsigned long long)wr[n_samples / 2],
		       (unsigned long long)wr[0], (unsigned long long)wr[n_samples - 1]);
	}
	printf("\"wake_ns\":[%llu,%llu,%llu,%llu]}\n", (unsigned long long)w[n_samples / 2],
	       (unsigned long long)w[n_samples * 9 / 10], (unsigned long long)w[0],
	       (unsigned long long)w[n_samples - 1]);
}

static int run_timerfd(int cpu, int interval_us, int spin)
{
	pin(cpu);
	int tfd = timerfd_create(CLOCK_MONOTONIC, spin ? TFD_NONBLOCK : 0);
	if (tfd < 0)
		return 2;
	for (int i = 0; i < n_samples + warmup; i++) {
		struct itimerspec its = { 0 };
		uint64_t start = now_ns(), exp;
		its.it_value.tv_nsec = interval_us * 1000L;
		if (timerfd_settime(tfd, 0, &its, NULL) != 0)
			return 2;
		uint64_t bound = start + 10ull * 1000000000ull; /* never reached in a run */
		while (read(tfd, &exp, sizeof(exp)) != sizeof(exp)) {
			if (!spin || errno != EAGAIN || now_ns() > bound)
				return 3;
		}
		uint64_t t = now_ns();
		if (i >= warmup)
			wake_ns[i - warmup] = t - (start + (uint64_t)interval_us * 1000u);
	}
	report(spin ? "timerspin" : "timerfd", cpu, cpu, interval_us, wake_ns, NULL);
	return 0;
}

static int run_signal(int cpu, int interval_us, uint64_t *write_ns)
{
	pin(cpu);
	int fd = eventfd(0, EFD_NONBLOCK);
	if (fd < 0)
		return 2;
	for (int i = 0; i < n_samples + warmup; i++) {
		uint64_t one = 1, v;
		spin_until(now_ns() + (uint64_t)interval_us * 1000u);
		uint64_t t0 = now_ns();
		if (write(fd, &one, sizeof(one)) != sizeof(one))
			return 3;
		uint64_t t1 = now_ns();
		if (read(fd, &v, sizeof(v)) != sizeof(v))
			return 3;
		if (i >= warmup)
			wake_ns[i - warmup] = write_ns[i - warmup] = t1 - t0;
	}
	report("signal", cpu, cpu, interval_us, wake_ns, write_ns);
	return 0;
}

int main(int argc, char **argv)
{
	if (argc != 6) {
		fprintf(stderr, "usage: %s wake|notice|pollnotice|timerfd|timerspin|signal FROM_CPU TO_CPU INTERVAL_US SAMPLES\n",
			argv[0]);
		return 2;
	}
	mode = argv[1];
	int from = atoi(argv[2]);
	to_cpu = atoi(argv[3]);
	int interval_us = atoi(argv[4]);
	n_samples = atoi(argv[5]);
	if (n_samples < 10 || n_samples > 1000000 || interval_us < 1 || interval_us > 1000000)
		return 2;
	warmup = n_samples / 5;
	wake_ns = calloc(n_samples, sizeof(uint64_t));
	uint64_t *write_ns = calloc(n_samples, sizeof(uint64_t));
	if (!wake_ns || !write_ns)
		return 2;
	if (strcmp(mode, "timerfd") == 0 || strcmp(mode, "timerspin") == 0)
		return run_timerfd(to_cpu, interval_us, strcmp(mode, "timerspin") == 0);
	if (strcmp(mode, "signal") == 0)
		return run_signal(from, interval_us, write_ns);
	if (strcmp(mode, "wake") != 0 && strcmp(mode, "notice") != 0 &&
	    strcmp(mode, "pollnotice") != 0)
		return 2;
	efd = eventfd(0, 0);
	pthread_t th;
	if (pthread_create(&th, NULL, target, NULL) != 0)
		return 2;
	pin(from);
	usleep(10000);
	uint64_t deadline_ns = now_ns() + 120ull * 1000000000ull; /* bound the whole run */
	for (int i = 0; i < n_samples + warmup; i++) {
		spin_until(now_ns() + (uint64_t)interval_us * 1000u);
		uint64_t t0 = now_ns(), t1;
		if (strcmp(mode, "wake") == 0) {
			uint64_t one = 1;
			if (write(efd, &one, sizeof(one)) != sizeof(one))
				return 3;
			t1 = now_ns();
		} else {
			atomic_store_explicit(&posted, t0, memory_order_release);
			t1 = t0;
		}
		while (atomic_load_explicit(&seq_seen, memory_order_acquire) != i + 1)
			if (now_ns() > deadline_ns) {
				fprintf(stderr, "target did not wake within the run's bound\n");
				return 4;
			}
		if (i >= warmup) {
			wake_ns[i - warmup] = atomic_load(&seen) - t0;
			write_ns[i - warmup] = t1 - t0;
		}
	}
	pthread_join(th, NULL);
	report(mode, from, to_cpu, interval_us, wake_ns,
	       strcmp(mode, "wake") == 0 ? write_ns : NULL);
	return 0;
}
