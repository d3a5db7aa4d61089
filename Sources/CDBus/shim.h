#ifndef PAIRD_CDBUS_SHIM_H
#define PAIRD_CDBUS_SHIM_H
// libdbus-1, as Swift sees it. Only non-variadic entry points are used from Swift:
// messages are built and read with DBusMessageIter, never dbus_message_append_args/get_args.
#include <dbus/dbus.h>

// The version of the libdbus the process is linked against, as one number (major*10000+minor*100+micro).
// Exists so a test can prove the module links and answers without a bus.
static inline int CDBus_linked_version(void) {
    int major = 0, minor = 0, micro = 0;
    dbus_get_version(&major, &minor, &micro);
    return major * 10000 + minor * 100 + micro;
}
#endif
