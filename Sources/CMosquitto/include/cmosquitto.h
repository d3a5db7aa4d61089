#ifndef PAIRD_CMOSQUITTO_H
#define PAIRD_CMOSQUITTO_H
#include <stdbool.h>

/// libmosquitto, loaded at run time (dlopen of libmosquitto.so.1) only when paird.conf has an
/// `[MQTT]` section: paird builds and runs without it installed. The prototypes are declared
/// here, not taken from mosquitto.h (libmosquitto-dev is not needed to build). Every `pmq_`
/// function calls the library's function of the same name (`pmq_publish`: `mosquitto_publish`).
struct mosquitto;

/// Loads the library and resolves its functions, once. NULL on success; otherwise why not
/// (dlerror's text, static storage).
const char *pmq_load(void);

int pmq_lib_init(void);
struct mosquitto *pmq_new(const char *id, bool clean_session, void *obj);
void pmq_destroy(struct mosquitto *m);
int pmq_will_set(struct mosquitto *m, const char *topic, int payloadlen, const void *payload, int qos, bool retain);
int pmq_username_pw_set(struct mosquitto *m, const char *username, const char *password);
/// Non-blocking: the TCP connect is started and CONNECT queued (a host name is resolved first,
/// which may block: `Broker` is best an address).
int pmq_connect_async(struct mosquitto *m, const char *host, int port, int keepalive);
int pmq_reconnect_async(struct mosquitto *m);
int pmq_socket(struct mosquitto *m);
int pmq_loop_read(struct mosquitto *m, int max_packets);
int pmq_loop_write(struct mosquitto *m, int max_packets);
int pmq_loop_misc(struct mosquitto *m);
bool pmq_want_write(struct mosquitto *m);
int pmq_publish(struct mosquitto *m, int *mid, const char *topic, int payloadlen, const void *payload, int qos, bool retain);
int pmq_disconnect(struct mosquitto *m);
const char *pmq_strerror(int rc);
const char *pmq_connack_string(int rc);
/// `on_connect(m, obj, rc)` after the broker's CONNACK (rc 0: accepted); `on_disconnect(m, obj,
/// rc)` once the link is closed (rc 0: by paird's disconnect). Called from the calls above only.
void pmq_callbacks_set(struct mosquitto *m, void (*on_connect)(struct mosquitto *, void *, int),
                       void (*on_disconnect)(struct mosquitto *, void *, int));

/// mosquitto_user_data_set: the `obj` the callbacks are given.
void pmq_user_data_set(struct mosquitto *m, void *obj);

/// mosquitto_tls_set(m, cafile, capath, NULL, NULL, NULL): TLS, the broker's certificate checked
/// against the CAs of `cafile` (or, when NULL, of the directory `capath`) and its name against the
/// host connected to; no client certificate.
int pmq_tls_set(struct mosquitto *m, const char *cafile, const char *capath);

/// libmosquitto's MOSQ_ERR_NO_CONN: not connected.
#define PMQ_ERR_NO_CONN 4
/// libmosquitto's MOSQ_ERR_ERRNO: the error is in errno.
#define PMQ_ERR_ERRNO 14
#define PMQ_ERR_SUCCESS 0
/// libmosquitto's MOSQ_ERR_TLS: a TLS error (the handshake failed: the broker's certificate not
/// trusted, or not for that host).
#define PMQ_ERR_TLS 8

#endif
