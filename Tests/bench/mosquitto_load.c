/* mosquitto_load.c — what loading Debian's libmosquitto costs a process, before any MQTT (issue 45,
 * BENCHMARKS §11): VmRSS, RssAnon and RssFile of a minimal C process before dlopen, after it (as
 * paird's CMosquitto does it: RTLD_NOW | RTLD_LOCAL), after mosquitto_lib_init() and after
 * mosquitto_new(); then the libraries the dlopen brought in. A benchmark: it prints, asserts nothing.
 *   cc -O1 -o /tmp/mosquitto_load Tests/bench/mosquitto_load.c -ldl && /tmp/mosquitto_load */
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

static void rss(const char *stage) {
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    printf("%-28s", stage);
    while (f && fgets(line, sizeof line, f)) {
        if (!strncmp(line, "VmRSS", 5) || !strncmp(line, "RssAnon", 7) || !strncmp(line, "RssFile", 7)) {
            char key[32]; long kb;
            if (sscanf(line, "%31[^:]: %ld", key, &kb) == 2) printf(" %s %6ld kB", key, kb);
        }
    }
    printf("\n");
    if (f) fclose(f);
}

int main(void) {
    rss("before dlopen");
    void *h = dlopen("libmosquitto.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!h) { fprintf(stderr, "mosquitto_load: %s\n", dlerror()); return 1; }
    rss("dlopen(libmosquitto.so.1)");
    int (*lib_init)(void) = (int (*)(void))dlsym(h, "mosquitto_lib_init");
    void *(*new_client)(const char *, int, void *) = (void *(*)(const char *, int, void *))dlsym(h, "mosquitto_new");
    if (!lib_init || !new_client) { fprintf(stderr, "mosquitto_load: %s\n", dlerror()); return 1; }
    lib_init();
    rss("mosquitto_lib_init()");
    if (!new_client("mosquitto_load", 1, NULL)) { fprintf(stderr, "mosquitto_load: mosquitto_new failed\n"); return 1; }
    rss("mosquitto_new()");
    FILE *maps = fopen("/proc/self/maps", "r");
    char line[512], last[512] = "";
    printf("libraries mapped:");
    while (maps && fgets(line, sizeof line, maps)) {
        char *path = strchr(line, '/');
        if (!path || !strstr(path, ".so")) continue;
        path[strcspn(path, "\n")] = 0;
        if (strcmp(path, last)) { printf(" %s", strrchr(path, '/') + 1); strcpy(last, path); }
    }
    printf("\n");
    if (maps) fclose(maps);
    return 0;
}
