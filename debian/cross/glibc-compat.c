/* glibc-compat.c — linked into the binaries built by Debian's swiftlang (debian/cross/build-swiftlang.sh:
 * arm64, and amd64 without swift.org's Swift), not into those of the host's Swift.
 *
 * Their Swift runtime comes from Debian's swiftlang (sid), built against glibc 2.42: its
 * static libraries (swift_static) call four functions that bookworm's glibc 2.36 lacks. Each is
 * given here in terms of what 2.36 has, so the binaries need nothing newer than bookworm's libc6.
 *   __isoc23_strtol/strtoll/sscanf  C23 variants (they also accept "0b" binary prefixes; the
 *                                   runtime parses decimal environment values and /proc text)
 *   strlcpy                         BSD semantics, glibc 2.38
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

long __isoc23_strtol(const char *s, char **end, int base) { return strtol(s, end, base); }
long long __isoc23_strtoll(const char *s, char **end, int base) { return strtoll(s, end, base); }

int __isoc23_sscanf(const char *s, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int n = vsscanf(s, fmt, ap);
    va_end(ap);
    return n;
}

size_t strlcpy(char *dst, const char *src, size_t size) {
    size_t len = strlen(src);
    if (size > 0) {
        size_t n = len < size - 1 ? len : size - 1;
        memcpy(dst, src, n);
        dst[n] = '\0';
    }
    return len;
}
