// kiln.h and kiln_opencl.h must compile as C++ too.
#include "kiln.h"
#include "kiln_opencl.h"

int main()
{
    kiln_fit_options o;
    kiln_fit_options_init(&o);
    return o.batch_size == 32 && kiln_version_number() == KILN_VERSION_NUMBER ? 0 : 1;
}
