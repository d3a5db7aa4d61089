#include "cmosquitto.h"
#include <dlfcn.h>
#include <stddef.h>

typedef void (*pmq_cb)(struct mosquitto *, void *, int);

static struct {
    void *handle;
    const char *error;
    int (*lib_init)(void);
    struct mosquitto *(*new_)(const char *, bool, void *);
    void (*destroy)(struct mosquitto *);
    int (*will_set)(struct mosquitto *, const char *, int, const void *, int, bool);
    int (*username_pw_set)(struct mosquitto *, const char *, const char *);
    int (*connect_async)(struct mosquitto *, const char *, int, int);
    int (*reconnect_async)(struct mosquitto *);
    int (*socket)(struct mosquitto *);
    int (*loop_read)(struct mosquitto *, int);
    int (*loop_write)(struct mosquitto *, int);
    int (*loop_misc)(struct mosquitto *);
    bool (*want_write)(struct mosquitto *);
    int (*publish)(struct mosquitto *, int *, const char *, int, const void *, int, bool);
    int (*disconnect)(struct mosquitto *);
    const char *(*strerror)(int);
    const char *(*connack_string)(int);
    void (*connect_callback_set)(struct mosquitto *, pmq_cb);
    void (*disconnect_callback_set)(struct mosquitto *, pmq_cb);
    void (*user_data_set)(struct mosquitto *, void *);
    int (*tls_set)(struct mosquitto *, const char *, const char *, const char *, const char *, int (*)(char *, int, int, void *));
} lib;

#define RESOLVE(field, name) \
    do { \
        *(void **)(&lib.field) = dlsym(h, name); \
        if (!lib.field) { lib.error = "libmosquitto.so.1 has no " name; dlclose(h); return lib.error; } \
    } while (0)

/* Called on paird's one loop thread only. */
const char *pmq_load(void) {
    if (lib.handle) return NULL;
    if (lib.error) return lib.error;
    void *h = dlopen("libmosquitto.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!h) { lib.error = dlerror(); if (!lib.error) lib.error = "dlopen failed"; return lib.error; }
    RESOLVE(lib_init, "mosquitto_lib_init");
    RESOLVE(new_, "mosquitto_new");
    RESOLVE(destroy, "mosquitto_destroy");
    RESOLVE(will_set, "mosquitto_will_set");
    RESOLVE(username_pw_set, "mosquitto_username_pw_set");
    RESOLVE(connect_async, "mosquitto_connect_async");
    RESOLVE(reconnect_async, "mosquitto_reconnect_async");
    RESOLVE(socket, "mosquitto_socket");
    RESOLVE(loop_read, "mosquitto_loop_read");
    RESOLVE(loop_write, "mosquitto_loop_write");
    RESOLVE(loop_misc, "mosquitto_loop_misc");
    RESOLVE(want_write, "mosquitto_want_write");
    RESOLVE(publish, "mosquitto_publish");
    RESOLVE(disconnect, "mosquitto_disconnect");
    RESOLVE(strerror, "mosquitto_strerror");
    RESOLVE(connack_string, "mosquitto_connack_string");
    RESOLVE(connect_callback_set, "mosquitto_connect_callback_set");
    RESOLVE(disconnect_callback_set, "mosquitto_disconnect_callback_set");
    RESOLVE(user_data_set, "mosquitto_user_data_set");
    RESOLVE(tls_set, "mosquitto_tls_set");
    lib.handle = h;
    return NULL;
}

int pmq_lib_init(void) { return lib.lib_init(); }
struct mosquitto *pmq_new(const char *id, bool clean_session, void *obj) { return lib.new_(id, clean_session, obj); }
void pmq_destroy(struct mosquitto *m) { lib.destroy(m); }
int pmq_will_set(struct mosquitto *m, const char *topic, int len, const void *payload, int qos, bool retain) {
    return lib.will_set(m, topic, len, payload, qos, retain);
}
int pmq_username_pw_set(struct mosquitto *m, const char *u, const char *p) { return lib.username_pw_set(m, u, p); }
int pmq_connect_async(struct mosquitto *m, const char *host, int port, int keepalive) { return lib.connect_async(m, host, port, keepalive); }
int pmq_reconnect_async(struct mosquitto *m) { return lib.reconnect_async(m); }
int pmq_socket(struct mosquitto *m) { return lib.socket(m); }
int pmq_loop_read(struct mosquitto *m, int max_packets) { return lib.loop_read(m, max_packets); }
int pmq_loop_write(struct mosquitto *m, int max_packets) { return lib.loop_write(m, max_packets); }
int pmq_loop_misc(struct mosquitto *m) { return lib.loop_misc(m); }
bool pmq_want_write(struct mosquitto *m) { return lib.want_write(m); }
int pmq_publish(struct mosquitto *m, int *mid, const char *topic, int len, const void *payload, int qos, bool retain) {
    return lib.publish(m, mid, topic, len, payload, qos, retain);
}
int pmq_disconnect(struct mosquitto *m) { return lib.disconnect(m); }
const char *pmq_strerror(int rc) { return lib.strerror(rc); }
const char *pmq_connack_string(int rc) { return lib.connack_string(rc); }
void pmq_callbacks_set(struct mosquitto *m, pmq_cb on_connect, pmq_cb on_disconnect) {
    lib.connect_callback_set(m, on_connect);
    lib.disconnect_callback_set(m, on_disconnect);
}
void pmq_user_data_set(struct mosquitto *m, void *obj) { lib.user_data_set(m, obj); }
int pmq_tls_set(struct mosquitto *m, const char *cafile, const char *capath) { return lib.tls_set(m, cafile, capath, NULL, NULL, NULL); }
