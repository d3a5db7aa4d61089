#include "CBuildInfo.h"

#ifndef PAIRD_VERSION
#define PAIRD_VERSION ""
#endif

const char *paird_build_version(void) { return PAIRD_VERSION; }
