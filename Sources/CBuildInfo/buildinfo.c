#include "CBuildInfo.h"

#ifndef PAIRD_VERSION
#define PAIRD_VERSION ""
#endif

const char *paird_build_version(void) { return PAIRD_VERSION; }

#ifndef PAIRD_COMMIT
#define PAIRD_COMMIT ""
#endif

const char *paird_build_commit(void) { return PAIRD_COMMIT; }
