// kiln.h and kiln_opencl.h must compile as C++ too.
#include "kiln.h"
#include "kiln_opencl.h"

int main()
{
    // Value-initialised, as C++ before C++20 writes a zeroed options struct.
    kiln_lr_schedule schedule = kiln_lr_schedule();
    schedule.struct_size = sizeof schedule;
    kiln_optimizer_options optimizer = kiln_optimizer_options();
    optimizer.struct_size = sizeof optimizer;
    optimizer.schedule = &schedule;
    kiln_compile_options co = kiln_compile_options();
    co.struct_size = sizeof co;
    co.optimizer = &optimizer;
    kiln_fit_options fit = kiln_fit_options();   // the defaults: 1 epoch, batch 32
    fit.struct_size = sizeof fit;
    return co.optimizer->schedule == &schedule && fit.epochs == 0 &&
                   kiln_version_number() == KILN_VERSION_NUMBER
               ? 0
               : 1;
}
