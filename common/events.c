/* events.c — arrays of backend events (see events.h). */
#include "events.h"

#include <stdlib.h>

#include "util.h"

/* The arrays made so far, so that one call can destroy them all. */
static struct made { zl_event *e; int n; } *g_made;
static int g_n_made;

zl_event *zl_events_create(int n) {
    zl_event *e = malloc((size_t)(n > 0 ? n : 1) * sizeof(zl_event));
    struct made *m = realloc(g_made, (size_t)(g_n_made + 1) * sizeof *g_made);
    if (!e || !m) zl_fatal("out of host memory for %d events", n);
    for (int i = 0; i < n; i++) e[i] = zl_event_create();
    g_made = m;
    g_made[g_n_made++] = (struct made){e, n};
    return e;
}

void zl_events_destroy_all(void) {
    for (int k = 0; k < g_n_made; k++) {
        for (int i = 0; i < g_made[k].n; i++) zl_event_destroy(g_made[k].e[i]);
        free(g_made[k].e);
    }
    free(g_made);
    g_made = NULL, g_n_made = 0;
}
