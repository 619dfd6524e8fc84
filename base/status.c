#include "kiln.h"

#define KILN_STR_(x) #x
#define KILN_XSTR_(x) KILN_STR_(x)

const char *kiln_status_name(kiln_status status)
{
    switch (status) {
#define KILN_STATUS_NAME_(name, value, text) \
    case KILN_##name:                         \
        return "KILN_" #name;
        KILN_STATUS_LIST(KILN_STATUS_NAME_)
#undef KILN_STATUS_NAME_
    default:
        return "KILN_UNKNOWN_STATUS";
    }
}

const char *kiln_status_description(kiln_status status)
{
    switch (status) {
#define KILN_STATUS_TEXT_(name, value, text) \
    case KILN_##name:                         \
        return text;
        KILN_STATUS_LIST(KILN_STATUS_TEXT_)
#undef KILN_STATUS_TEXT_
    default:
        return "unknown status";
    }
}

const char *kiln_version(void)
{
    return KILN_XSTR_(KILN_VERSION_MAJOR) "." KILN_XSTR_(KILN_VERSION_MINOR) "." KILN_XSTR_(
        KILN_VERSION_PATCH);
}

int kiln_version_number(void)
{
    return KILN_VERSION_NUMBER;
}
