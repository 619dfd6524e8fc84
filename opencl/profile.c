/* KILN_PROFILE=1: every kernel and GEMM gets an event; their device times
 * are summed per name and printed when the device is closed. Off by default:
 * events cost time on some drivers. */
#include "opencl/cl_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int entry_for(kiln_profile *p, const char *name)
{
    for (int i = 0; i < p->n_entries; i++)
        if (strcmp(p->entries[i].name, name) == 0)
            return i;
    if (p->n_entries == KILN_PROFILE_ENTRIES)
        return KILN_PROFILE_ENTRIES - 1;  /* the last entry takes the overflow */
    snprintf(p->entries[p->n_entries].name, sizeof p->entries[0].name, "%s", name);
    return p->n_entries++;
}

cl_event *kiln_profile_event(kiln_device *dev, const char *name)
{
    kiln_profile *p = dev->profile;
    if (!p)
        return NULL;
    if (p->n_pending == KILN_PROFILE_PENDING)
        kiln_profile_flush(dev, 0);
    p->pending_entry[p->n_pending] = entry_for(p, name);
    p->pending[p->n_pending] = NULL;
    return &p->pending[p->n_pending++];
}

static int by_time(const void *a, const void *b)
{
    const double x = ((const kiln_profile_entry *)a)->ms, y = ((const kiln_profile_entry *)b)->ms;
    return (x < y) - (x > y);
}

void kiln_profile_flush(kiln_device *dev, int report)
{
    kiln_profile *p = dev->profile;
    if (!p)
        return;
    for (int i = 0; i < p->n_pending; i++) {
        cl_event e = p->pending[i];
        cl_ulong start = 0, end = 0;
        if (!e)
            continue;
        if (clWaitForEvents(1, &e) == CL_SUCCESS &&
            clGetEventProfilingInfo(e, CL_PROFILING_COMMAND_START, sizeof start, &start, NULL) ==
                CL_SUCCESS &&
            clGetEventProfilingInfo(e, CL_PROFILING_COMMAND_END, sizeof end, &end, NULL) ==
                CL_SUCCESS) {
            p->entries[p->pending_entry[i]].ms += (double)(end - start) * 1e-6;
            p->entries[p->pending_entry[i]].count++;
        }
        clReleaseEvent(e);
    }
    p->n_pending = 0;
    if (!report)
        return;
    qsort(p->entries, (size_t)p->n_entries, sizeof p->entries[0], by_time);
    double total = 0;
    for (int i = 0; i < p->n_entries; i++)
        total += p->entries[i].ms;
    fprintf(stderr, "kiln profile, %s: %.1f ms of device time\n", dev->label, total);
    for (int i = 0; i < p->n_entries; i++)
        fprintf(stderr, "  %6.1f%% %10.1f ms %8ld x  %s\n", 100.0 * p->entries[i].ms / total,
                p->entries[i].ms, p->entries[i].count, p->entries[i].name);
}
