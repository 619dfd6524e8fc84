/* Private: a blocking all-reduce among the replicas of one step, for the
 * few floats layers exchange mid-step (synchronised batch normalisation's
 * per-channel sums). Unlike the reducer it is synchronous: every member
 * waits until all have contributed, and the sum (in member order, so
 * identical run to run) comes back to each. */
#ifndef KILN_COMM_COLLECTIVE_H
#define KILN_COMM_COLLECTIVE_H

#include "base/host.h"
#include "kiln.h"

#include <stddef.h>

typedef struct kiln_collective kiln_collective;

/* Up to max_members members exchanging up to max_values doubles a round. */
kiln_status kiln_collective_create(kiln_host *host, int max_members, size_t max_values,
                                   kiln_collective **out);
void kiln_collective_destroy(kiln_collective *c);  /* accepts NULL */

/* Before a step, with nobody inside: `members` take part in its rounds
 * (replicas with an empty shard do not), and a cancelled collective is
 * usable again. */
void kiln_collective_begin(kiln_collective *c, int members);
/* Every waiter returns KILN_ERROR_STOPPED (a replica failed or stalled). */
void kiln_collective_cancel(kiln_collective *c);

/* Member `member` (0 <= member < members) adds its n values; on return
 * values holds the sum over every member. KILN_ERROR_STOPPED if the round
 * was cancelled; KILN_ERROR_INVALID_ARGUMENT for a bad member or size; both
 * with a message in the calling thread's diagnostics. */
kiln_status kiln_collective_sum(kiln_collective *c, int member, double *values, size_t n);

#endif
