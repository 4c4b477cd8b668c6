/* alloc.c — tracked allocator (see alloc.h). A small table of live allocations maps
 * pointers back to their category and size so frees are accounted exactly. */
#include "alloc.h"

#include <stdio.h>
#include <stdlib.h>

#include "util.h"

static const char *const cat_names[ZL_MEM_NCAT] = {
    "params_fp16", "grads_fp16",   "master_fp32", "adam_m",    "adam_v",      "grad_bucket",
    "param_gather", "activations", "scratch",     "workspace", "host_staging",
    "ckpt_staging", "host_master_fp32", "host_adam_m", "host_adam_v", "offload_staging"};

const char *zl_mem_cat_name(zl_mem_cat c) { return (unsigned)c < ZL_MEM_NCAT ? cat_names[c] : "?"; }

typedef struct {
    void *ptr;
    size_t bytes;
    zl_mem_cat cat;
} live_entry;

#define MAX_LIVE 4096 /* a stage makes a few dozen allocations; plenty of headroom */

static live_entry live[MAX_LIVE];
static int n_live;
static zl_mem_stats stats;
static zl_raw_alloc_fn raw_alloc = malloc;
static zl_raw_free_fn raw_free = free;
static zl_raw_alloc_fn pinned_alloc = malloc;
static zl_raw_free_fn pinned_free = free;
static zl_raw_alloc_fn collective_alloc; /* NULL: raw_alloc */
static zl_raw_free_fn collective_free;

void zl_mem_init(zl_raw_alloc_fn dev_alloc, zl_raw_free_fn dev_free) {
    raw_alloc = dev_alloc;
    raw_free = dev_free;
}

void zl_mem_init_pinned(zl_raw_alloc_fn host_alloc, zl_raw_free_fn host_free) {
    pinned_alloc = host_alloc;
    pinned_free = host_free;
}

void zl_mem_init_collective(zl_raw_alloc_fn dev_alloc, zl_raw_free_fn dev_free) {
    collective_alloc = dev_alloc;
    collective_free = dev_free;
}

static void *raw_alloc_for(zl_mem_cat c, size_t bytes) {
    if (zl_mem_cat_is_pinned(c)) return pinned_alloc(bytes);
    if (zl_mem_cat_is_collective(c) && collective_alloc) return collective_alloc(bytes);
    return zl_mem_cat_is_host(c) ? malloc(bytes) : raw_alloc(bytes);
}
static void raw_free_for(zl_mem_cat c, void *p) {
    if (zl_mem_cat_is_pinned(c)) pinned_free(p);
    else if (zl_mem_cat_is_collective(c) && collective_free) collective_free(p);
    else if (zl_mem_cat_is_host(c)) free(p);
    else raw_free(p);
}

static void account(zl_mem_cat c, size_t bytes, int sign) {
    if (sign > 0) {
        stats.current[c] += bytes;
        if (stats.current[c] > stats.peak[c]) stats.peak[c] = stats.current[c];
        if (zl_mem_cat_is_device(c)) {
            stats.current_total += bytes;
            if (stats.current_total > stats.peak_total) stats.peak_total = stats.current_total;
        }
    } else {
        stats.current[c] -= bytes;
        if (zl_mem_cat_is_device(c)) stats.current_total -= bytes;
    }
}

void *zl_mem_alloc(zl_mem_cat c, size_t bytes, const char *what) {
    if ((unsigned)c >= ZL_MEM_NCAT) zl_fatal("zl_mem_alloc: bad category %d for %s", (int)c, what);
    stats.allocations++;
    if (stats.frozen) {
        stats.allocations_after_freeze++;
        fprintf(stderr, "zerolab: warning: %s (%zu bytes, %s) allocated inside the step loop\n", what, bytes,
                zl_mem_cat_name(c));
    }
    if (bytes == 0) return NULL;
    if (n_live == MAX_LIVE) zl_fatal("zl_mem_alloc: more than %d live allocations (%s)", MAX_LIVE, what);
    void *p = raw_alloc_for(c, bytes);
    if (!p)
        zl_fatal("out of memory allocating %s: %zu bytes (%.3f GiB) in category %s, %.3f GiB already tracked",
                 what, bytes, bytes / 1073741824.0, zl_mem_cat_name(c), stats.current_total / 1073741824.0);
    live[n_live++] = (live_entry){p, bytes, c};
    account(c, bytes, +1);
    return p;
}

void zl_mem_free(void *p) {
    if (!p) return;
    for (int i = n_live - 1; i >= 0; i--) {
        if (live[i].ptr != p) continue;
        account(live[i].cat, live[i].bytes, -1);
        raw_free_for(live[i].cat, p);
        live[i] = live[--n_live];
        return;
    }
    zl_fatal("zl_mem_free: %p was not allocated by zl_mem_alloc", p);
}

void zl_mem_free_all(void) {
    while (n_live) zl_mem_free(live[n_live - 1].ptr);
}

void zl_mem_freeze(void) { stats.frozen = 1; }
void zl_mem_unfreeze(void) { stats.frozen = 0; }
const zl_mem_stats *zl_mem_get_stats(void) { return &stats; }

void zl_mem_reset(void) {
    if (n_live) zl_fatal("zl_mem_reset: %d allocations still live", n_live);
    stats = (zl_mem_stats){0};
}
