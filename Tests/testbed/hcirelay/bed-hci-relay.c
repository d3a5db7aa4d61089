/* bed-hci-relay: the guest's end of a Bumble wearable that runs on the host (run-vm's
 * BED_BUMBLE_HOST=1, Tests/testbed/README.md, "Bumble on the host").
 *
 *   bed-hci-relay HCI_INDEX CONTROL_SOCKET TAKE_DEADLINE_S HEADER
 *
 * 1. Takes controller hciN from bluetoothd as bumble_wearable.py does in the guest (mgmt power
 *    off, HCIDEVDOWN, the HCI user channel; EBUSY retried every 0.3 s until the deadline).
 * 2. Connects to the host through qemu's user network (guestfwd 10.0.2.100:7000, which starts
 *    Tests/testbed/bumble_host.py for each connection): one connection carries the HCI packets
 *    (H4, as Bumble's stream transports frame them) after the line "hci ID HEADER"; a second one,
 *    after "control ID", carries the control protocol's lines.
 * 3. Serves CONTROL_SOCKET in the guest (what bedlib.Wearable and wearablectl connect to): the
 *    clients' lines go to the host in order, one client at a time; a client that leaves before
 *    its replies has them dropped, so the next client gets its own.
 * 4. Exits with the wearable's exit status (the host's last frame, 0xFF STATUS), 1 if the host
 *    went away without one. SIGTERM/SIGKILL close both connections: the host's Bumble stops.
 *
 * The host end (the wearable's stack, its logs and key store) is Bumble as in the guest; what
 * this relay changes is only where Bumble's Python runs: natively instead of under TCG. */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define AF_BLUETOOTH_ 31
#define BTPROTO_HCI_ 1
#define HCI_CHANNEL_USER_ 1
#define HCIDEVDOWN_ _IOW('H', 202, int)
struct sockaddr_hci_ { sa_family_t family; unsigned short dev; unsigned short channel; };

extern char **environ;
static const char *me = "bed-hci-relay";

static void die(const char *fmt, ...) {
	va_list ap; va_start(ap, fmt);
	fprintf(stderr, "%s: ", me); vfprintf(stderr, fmt, ap); fputc('\n', stderr);
	va_end(ap); exit(1);
}

static double now(void) {
	struct timespec ts; clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

static void run_quiet(char *const argv[]) {
	posix_spawn_file_actions_t fa; pid_t pid; int st;
	posix_spawn_file_actions_init(&fa);
	posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
	posix_spawn_file_actions_addopen(&fa, 2, "/dev/null", O_WRONLY, 0);
	if (posix_spawnp(&pid, argv[0], &fa, NULL, argv, environ) == 0) waitpid(pid, &st, 0);
	posix_spawn_file_actions_destroy(&fa);
}

static int take_controller(int idx, double deadline_s, int *tries) {
	char ibuf[16]; snprintf(ibuf, sizeof ibuf, "%d", idx);
	char *btmgmt[] = {"btmgmt", "--index", ibuf, "power", "off", NULL};
	double end = now() + deadline_s;
	for (*tries = 1;; (*tries)++) {
		run_quiet(btmgmt);
		int s = socket(AF_BLUETOOTH_, SOCK_RAW | SOCK_CLOEXEC, BTPROTO_HCI_);
		if (s < 0) die("socket(AF_BLUETOOTH): %s", strerror(errno));
		ioctl(s, HCIDEVDOWN_, idx);   /* hciconfig hciN down */
		struct sockaddr_hci_ a = {AF_BLUETOOTH_, (unsigned short)idx, HCI_CHANNEL_USER_};
		if (bind(s, (struct sockaddr *)&a, sizeof a) == 0) return s;
		int e = errno; close(s);
		if (e != EBUSY || now() > end)
			die("cannot open the HCI user channel on hci%d after %d tries: %s", idx, *tries, strerror(e));
		usleep(300000);
	}
}

static int host_connect(const char *line) {
	for (int i = 0;; i++) {
		int s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
		struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(7000)};
		inet_pton(AF_INET, "10.0.2.100", &a.sin_addr);
		if (connect(s, (struct sockaddr *)&a, sizeof a) == 0) {
			int one = 1; setsockopt(s, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
			size_t n = strlen(line);
			if (write(s, line, n) != (ssize_t)n) die("write to the host: %s", strerror(errno));
			return s;
		}
		int e = errno; close(s);
		if (i >= 50) die("cannot reach the host's Bumble at 10.0.2.100:7000 (qemu's guestfwd): %s", strerror(e));
		usleep(100000);
	}
}

static void write_all(int fd, const void *buf, size_t n, const char *what) {
	const char *p = buf;
	while (n) {
		ssize_t w = write(fd, p, n);
		if (w < 0 && errno == EINTR) continue;
		if (w <= 0) die("write to %s: %s", what, strerror(errno));
		p += w; n -= (size_t)w;
	}
}

/* the length of the H4 packet at b (n bytes there), 0 if not complete yet, -1 if unknown type */
static long h4_len(const unsigned char *b, size_t n) {
	size_t h, len;
	if (n < 1) return 0;
	switch (b[0]) {
	case 0x01: h = 4; if (n < h) return 0; len = b[3]; break;                          /* command */
	case 0x02: h = 5; if (n < h) return 0; len = b[3] | b[4] << 8; break;              /* ACL */
	case 0x03: h = 4; if (n < h) return 0; len = b[3]; break;                          /* SCO */
	case 0x04: h = 3; if (n < h) return 0; len = b[2]; break;                          /* event */
	case 0x05: h = 5; if (n < h) return 0; len = (b[3] | b[4] << 8) & 0x3fff; break;   /* ISO */
	case 0xff: h = 2; if (n < h) return 0; len = 0; break;                             /* the end: status */
	default: return -1;
	}
	return n >= h + len ? (long)(h + len) : 0;
}

int main(int argc, char **argv) {
	if (argc != 5) {
		fprintf(stderr, "usage: %s HCI_INDEX CONTROL_SOCKET TAKE_DEADLINE_S HEADER\n", me);
		return 2;
	}
	int idx = atoi(argv[1]);
	const char *path = argv[2];
	signal(SIGPIPE, SIG_IGN);
	int tries;
	int hs = take_controller(idx, atof(argv[3]), &tries);
	char id[64]; snprintf(id, sizeof id, "hci%d-%d", idx, (int)getpid());
	char *line;
	if (asprintf(&line, "hci %s %d %s\n", id, tries, argv[4]) < 0) die("asprintf");
	int tc = host_connect(line);
	free(line);
	if (asprintf(&line, "control %s\n", id) < 0) die("asprintf");
	int cc = host_connect(line);
	free(line);

	struct sockaddr_un ua = {.sun_family = AF_UNIX};
	if (strlen(path) >= sizeof ua.sun_path) die("socket path too long: %s", path);
	strcpy(ua.sun_path, path);
	unlink(path);
	int ls = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (bind(ls, (struct sockaddr *)&ua, sizeof ua) < 0 || listen(ls, 16) < 0)
		die("cannot listen on %s: %s", path, strerror(errno));

	static unsigned char in[65536 + 8], buf[4096];
	size_t inlen = 0;
	int client = -1;
	static unsigned char rep[1 << 20];
	size_t replen = 0;
	long owed = 0, dropping = 0;   /* replies the host owes the current client; to departed ones */
	for (;;) {
		struct pollfd p[5] = {{hs, POLLIN, 0}, {tc, POLLIN, 0}, {cc, POLLIN, 0},
		                      {client >= 0 ? client : ls, POLLIN, 0}};
		if (poll(p, 4, -1) < 0) { if (errno == EINTR) continue; die("poll: %s", strerror(errno)); }
		if (p[0].revents) {   /* controller → host: one packet a read, its H4 type first */
			ssize_t n = read(hs, buf, sizeof buf);
			if (n < 0 && (errno == EINTR || errno == EAGAIN)) continue;
			if (n <= 0) die("the HCI user channel on hci%d closed: %s", idx, n ? strerror(errno) : "EOF");
			write_all(tc, buf, (size_t)n, "the host's HCI connection");
		}
		if (p[1].revents) {   /* host → controller: split the stream into packets */
			ssize_t n = read(tc, in + inlen, sizeof in - inlen);
			if (n < 0 && errno == EINTR) continue;
			if (n <= 0) { fprintf(stderr, "%s: the host closed the wearable's HCI connection without its exit status\n", me); return 1; }
			inlen += (size_t)n;
			long k;
			while ((k = h4_len(in, inlen)) > 0) {
				if (in[0] == 0xff) { unlink(path); return in[1]; }
				if (write(hs, in, (size_t)k) != k) die("write to hci%d: %s", idx, strerror(errno));
				memmove(in, in + k, inlen - (size_t)k); inlen -= (size_t)k;
			}
			if (k < 0) die("unknown H4 packet type 0x%02x from the host", in[0]);
		}
		if (p[2].revents) {   /* the host's control replies, one line each */
			ssize_t n = read(cc, rep + replen, sizeof rep - replen);
			if (n < 0 && errno == EINTR) continue;
			if (n <= 0) { fprintf(stderr, "%s: the host closed the control connection\n", me); return 1; }
			replen += (size_t)n;
			char *nl;
			while ((nl = memchr(rep, '\n', replen)) != NULL) {
				size_t k = (size_t)(nl - (char *)rep) + 1;
				if (dropping > 0) dropping--;          /* a departed client's reply */
				else if (owed > 0) { owed--; if (client >= 0 && write(client, rep, k) < 0) { /* it left: its close comes next */ } }
				memmove(rep, rep + k, replen - k); replen -= k;
			}
			if (replen == sizeof rep) die("a control reply longer than %zu bytes", sizeof rep);
		}
		if (p[3].revents) {
			if (client < 0) {
				client = accept4(ls, NULL, NULL, SOCK_CLOEXEC);
			} else {
				ssize_t n = read(client, buf, sizeof buf);
				if (n <= 0) { close(client); client = -1; dropping += owed; owed = 0; continue; }
				for (ssize_t i = 0; i < n; i++) if (buf[i] == '\n') owed++;
				write_all(cc, buf, (size_t)n, "the host's control connection");
			}
		}
	}
}
