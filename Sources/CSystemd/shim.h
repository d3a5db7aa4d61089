#ifndef PAIRD_CSYSTEMD_SHIM_H
#define PAIRD_CSYSTEMD_SHIM_H
// libsystemd, as Swift sees it: sd_notify (not sd_notifyf), sd_watchdog_enabled and
// sd_journal_sendv (not the variadic sd_journal_send). Swift cannot call C variadics.
#include <sys/uio.h>
#include <systemd/sd-daemon.h>
#include <systemd/sd-journal.h>
#endif
