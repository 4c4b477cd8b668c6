/* events.c — arrays of backend events (see events.h). */
#include "events.h"

#include <stdlib.h>

#include "util.h"

zl_event *zl_events_create(int n) {
    zl_event *e = malloc((size_t)(n > 0 ? n : 1) * sizeof(zl_event));
    if (!e) zl_fatal("out of host memory for %d events", n);
    for (int i = 0; i < n; i++) e[i] = zl_event_create();
    return e;
}

void zl_events_destroy(zl_event *e, int n) {
    for (int i = 0; i < n; i++) zl_event_destroy(e[i]);
    free(e);
}
