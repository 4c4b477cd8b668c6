/* clocks.c — the clock-reading thread and the summary of its readings (clocks.h). */
#define _POSIX_C_SOURCE 200809L
#include "clocks.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "util.h" /* zl_median, zl_fatal */

/* At 20 ms, 2^20 readings are 5.8 hours; a longer run is summarized over its first 5.8 hours. */
#define MAX_READINGS (1 << 20)

static struct {
    pthread_t thread;
    atomic_int started, stop;
    int thread_running;
    zl_clock_reading *r; /* [cap], n of them read */
    int n, cap;
    int timed_steps; /* given by zl_clocks_end: the steps the readings span */
    char why[160]; /* why reading stopped before it was told to ("" if it did not) */
} g;

/* The energy over the readings from the counter's moves (clocks.h): a move seen at reading i
 * happened between t[i-1] and t[i], taken at the middle, so the mean power between the first
 * and the last move is off by at most one reading period over their distance apart. */
static void summarize_energy(const zl_clock_reading *r, int n, zl_clock_summary *s) {
    s->energy_w = s->energy_j = -1.0, s->energy_updates = -1;
    if (r[0].energy_j < 0) return; /* the device keeps no counter */
    int first = -1, last = -1, moves = 0;
    for (int i = 1; i < n; i++) {
        if (r[i].energy_j < r[i - 1].energy_j) return; /* no counter at this reading, or one that went back */
        if (r[i].energy_j > r[i - 1].energy_j) moves++, last = i, first = first < 0 ? i : first;
    }
    s->energy_updates = moves;
    if (moves < 2) return;
    double t_first = (r[first - 1].t_s + r[first].t_s) / 2, t_last = (r[last - 1].t_s + r[last].t_s) / 2;
    if (t_last <= t_first) return;
    s->energy_w = (r[last].energy_j - r[first].energy_j) / (t_last - t_first);
    s->energy_j = s->energy_w * (r[n - 1].t_s - r[0].t_s);
}

zl_clock_summary zl_clock_summarize(const zl_clock_reading *r, int n) {
    zl_clock_summary s = {.readings = n};
    double *v = malloc((size_t)n * sizeof *v);
    if (!v) zl_fatal("out of host memory summarizing %d clock readings", n);
    s.sm_mhz_min = s.sm_mhz_max = r[0].sm_mhz;
    int cap = 0, thermal = 0, hw = 0;
    for (int i = 0; i < n; i++) {
        v[i] = r[i].sm_mhz;
        if (r[i].sm_mhz < s.sm_mhz_min) s.sm_mhz_min = r[i].sm_mhz;
        if (r[i].sm_mhz > s.sm_mhz_max) s.sm_mhz_max = r[i].sm_mhz;
        if (r[i].temp_c > s.temp_c_max) s.temp_c_max = r[i].temp_c;
        cap += (r[i].reasons & ZL_CLOCK_POWER_CAP) != 0;
        thermal += (r[i].reasons & ZL_CLOCK_THERMAL) != 0;
        hw += (r[i].reasons & ZL_CLOCK_HW_SLOWDOWN) != 0;
    }
    s.sm_mhz_median = zl_median(v, (size_t)n);
    for (int i = 0; i < n; i++) v[i] = r[i].power_w;
    s.power_w_median = zl_median(v, (size_t)n);
    s.power_limit_w = r[n - 1].power_limit_w; /* the limit in force at the end */
    s.power_cap = (double)cap / n, s.thermal = (double)thermal / n, s.hw_slowdown = (double)hw / n;
    summarize_energy(r, n, &s);
    free(v);
    return s;
}

/* One reading into g.r, grown as needed; 0 when it failed (g.why says why) or the cap is hit. */
static int read_one(void) {
    if (g.n == g.cap) {
        if (g.cap == MAX_READINGS) return snprintf(g.why, sizeof g.why, "the first %d readings kept", g.cap), 0;
        int cap = g.cap ? 2 * g.cap : 4096;
        zl_clock_reading *r = realloc(g.r, (size_t)cap * sizeof *r);
        if (!r) return snprintf(g.why, sizeof g.why, "out of host memory for clock readings"), 0;
        g.r = r, g.cap = cap;
    }
    if (zl_backend_clock_read(&g.r[g.n], g.why, sizeof g.why)) return 0;
    g.n++;
    return 1;
}

/* Every period until told to stop (zl_clocks_start took the first reading). Nothing is read
 * after the stop: the GPU is idle then, and its clock climbs back to the highest. */
static void *reader(void *arg) {
    (void)arg;
    const struct timespec period = {0, ZL_CLOCK_PERIOD_MS * 1000000L};
    for (;;) {
        nanosleep(&period, NULL);
        if (atomic_load(&g.stop) || !read_one()) return NULL;
    }
}

void zl_clocks_start(void) {
    if (atomic_exchange(&g.started, 1)) return;
    g.n = 0, g.cap = 0, g.r = NULL, g.timed_steps = 0, g.why[0] = '\0';
    atomic_store(&g.stop, 0);
    /* The first reading here, between two steps: opening NVML takes milliseconds of a core the
     * rank's launches may need, so it must not fall inside a timed step. */
    g.thread_running = read_one() && !pthread_create(&g.thread, NULL, reader, NULL);
    if (g.n > 0 && !g.thread_running) zl_fatal("cannot start the clock-reading thread");
}

void zl_clocks_end(int timed_steps) {
    if (!atomic_load(&g.started) || atomic_exchange(&g.stop, 1)) return;
    if (g.thread_running) {
        pthread_join(g.thread, NULL);
        /* the window's last reading, at its end: the energy counter then covers every timed
         * step (unless reading had already stopped: then g.why says why, and no steps count) */
        if (!g.why[0] && read_one()) g.timed_steps = timed_steps;
    }
}

zl_clock_summary zl_clocks_summary(void) {
    zl_clock_summary s = {0};
    if (!atomic_load(&g.started)) {
        snprintf(s.why, sizeof s.why, "read from the end of step 1: a run of one step has none");
        return s;
    }
    zl_clocks_end(0);
    if (g.n > 0) s = zl_clock_summarize(g.r, g.n), s.energy_steps = s.energy_j >= 0 ? g.timed_steps : 0;
    snprintf(s.why, sizeof s.why, "%s", g.why); /* with readings: why they stopped before the last step */
    free(g.r), g.r = NULL;
    atomic_store(&g.started, 0);
    return s;
}
