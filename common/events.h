/* events.h — arrays of backend events, one per unit or per buffer slot.
 *
 * A stage names each array after the condition its events signal (grads_ready[u],
 * slot_free[k]) and creates it here, before step 1, so the step loop creates nothing; one
 * call at the end destroys every array created.
 * defines: zl_events_create, zl_events_destroy_all. */
#ifndef ZL_EVENTS_H
#define ZL_EVENTS_H

#include "../kernels/backend.h"

zl_event *zl_events_create(int n); /* n fresh events (host array; exits if out of memory) */
void zl_events_destroy_all(void);  /* every array zl_events_create made */

#endif
