/* clocks.h — what each rank's GPU ran at through the timed steps.
 *
 * A host thread reads the device's SM clock, power and clock-event reasons (backend.h) every
 * ZL_CLOCK_PERIOD_MS from the end of step 1 to the end of the last step. A busy H100 or H200 on
 * lab-1b runs at its power limit, its SM clock well under the highest
 * (results/gpu/speed/clocks-h200/), and its GEMMs with it: the report prints each rank's median
 * clock beside its throughput, so a number from one machine is read with the clock it was
 * measured at, and the rank the others wait for shows as the one with the slowest clock. At the
 * power cap a step's time is its energy over the power the cap allows, so the board's energy
 * counter is read too, for what the timed steps cost, measured. Reading costs nothing the GPU
 * sees.
 *
 * The counter moves only every so often (every 100 ms on H100 and H200: results/gpu/speed/
 * energy-h100/, energy-h200/), so its rise from the first reading to the last covers a stretch
 * up to one move shorter or longer than the timed steps — 10 % either way over a second of
 * steps. The summary times the moves instead: the first and last move inside the readings
 * happened between the reading that saw them and the one before (20 ms apart; taken at the
 * middle), the rise between them over that time is the board's mean power, and that power over
 * the readings' span is the energy. */
#ifndef ZL_CLOCKS_H
#define ZL_CLOCKS_H

#include "../kernels/backend.h" /* zl_clock_reading, zl_backend_clock_read */

#define ZL_CLOCK_PERIOD_MS 20

/* Clock-event bits (NVML's nvmlClocksEventReason*), grouped as the report prints them. */
#define ZL_CLOCK_POWER_CAP 0x4ull           /* SW power cap: the board is at its power limit */
#define ZL_CLOCK_THERMAL (0x20ull | 0x40ull) /* SW and HW thermal slowdown */
#define ZL_CLOCK_HW_SLOWDOWN (0x8ull | 0x80ull) /* HW slowdown, HW power brake */

typedef struct {
    int readings; /* readings taken; 0 when none could be (why says why) */
    double sm_mhz_median, sm_mhz_min, sm_mhz_max;
    double power_w_median, power_limit_w, temp_c_max;
    double power_cap, thermal, hw_slowdown; /* fraction of the readings with each reason */
    double energy_w;    /* the board's mean power between the counter's first and last move, W; < 0: none */
    double energy_j;    /* energy_w over the first reading to the last, J; < 0: no counter or too few moves */
    int energy_updates; /* the counter's moves between the first reading and the last; -1: no counter
                         * (or one that went back, a driver reload); under 2: too few for a power */
    int energy_steps;   /* the steps energy_j covers: steps 2..S when reading ended with step S; else 0 */
    char why[160]; /* no readings: why; with readings: why they stopped early ("" if they did not) */
} zl_clock_summary;

/* The summary of n readings (n > 0): medians, extremes, and how often each reason was set. */
zl_clock_summary zl_clock_summarize(const zl_clock_reading *r, int n);

/* Start reading (at the end of step 1), end it with one last reading (at the end of the last
 * step: what follows — the final gather, param_hash — leaves the GPU idle and is not training;
 * timed_steps, the steps since the start, lets the summary give the energy a step), then
 * summarize (the report; it ends the reading first, with timed_steps 0, where training stopped
 * early). Without a start: readings 0 and why. */
void zl_clocks_start(void);
void zl_clocks_end(int timed_steps);
zl_clock_summary zl_clocks_summary(void);

#endif
