/* kiln.h must compile alone as C99 with -pedantic -Werror. */
#include "kiln.h"

int main(void)
{
    kiln_context_options o = {.struct_size = sizeof o};
    (void)o;
    return kiln_version_number() == KILN_VERSION_NUMBER ? 0 : 1;
}
