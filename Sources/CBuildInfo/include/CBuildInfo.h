#ifndef PAIRD_CBUILDINFO_H
#define PAIRD_CBUILDINFO_H
/* The build's version string (the Debian package's: 0.1.0+git263.48e976b), or "" when the build
   was not given one (plain `swift build`): PAIRD_VERSION in the environment of `swift build`, as
   the Makefile sets it, reaches this target only (Package.swift), so a new commit relinks the
   binaries without rebuilding the rest. */
const char *paird_build_version(void);
#endif
