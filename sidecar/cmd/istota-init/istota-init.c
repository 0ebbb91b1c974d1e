/*
 * istota-init: the pid 1 of every Istota sandbox.
 *
 *   istota-init [--protocol=1] [--forward PORT=SOCKET]... [--rlimit NAME=VALUE]...
 *               [--prlimit PATH] [--exec] -- command [args...]
 *   istota-init [--protocol=1] [--forward PORT=SOCKET]... [--rlimit NAME=VALUE]...
 *               --session FD
 *   istota-init [--protocol=1] --attach          (on the host; see "sessions" below)
 *
 * It serves each --forward as a listener on 127.0.0.1:PORT inside the sandbox's network
 * namespace and passes every connection to the Unix socket (Claude Code cannot use a Unix
 * socket itself), starts the command with the --rlimit limits, forwards SIGTERM, SIGINT,
 * SIGHUP, SIGQUIT, SIGUSR1 and SIGUSR2 to it, reaps every orphan of the sandbox, and
 * exits with the command's status (128+n when signal n ended it). Exiting as pid 1 ends
 * every process left in the sandbox.
 *
 * This is the C twin of the Go package sidecar/internal/sandbox/sandboxinit, which the
 * istota binary runs ("istota sandbox-init") when this file is missing. Both speak
 * Protocol 1 and answer every argument with the same exit status and the same messages;
 * sandboxinit's tests run one suite against both, so keep them in step. It exists because
 * it runs once per task (issue 12: a sandboxed run <= a bare run + 10 ms): a Go runtime's
 * start and exit cost several milliseconds, this costs a fraction of one.
 *
 * Where the two differ on purpose:
 *   - Sessions (--session, --attach: one sandbox serving a task's commands) are this
 *     init's alone; the Go one declares the flags, for the same usage, and refuses them.
 *   - The limits are set with setrlimit in the vforked child right before execve, so the
 *     init itself is never bound by them and no second program (util-linux prlimit, or a
 *     second Go start) runs. --prlimit is accepted as Protocol 1 defines it and ignored.
 *   - The bridge is one epoll loop over non-blocking sockets with a bounded buffer per
 *     direction, where the Go one runs goroutines.
 *
 * Only libc and Linux system calls; built static (see build.sh). Everything runs under
 * the sandbox's seccomp filter, which denies nothing used here.
 */
#define _GNU_SOURCE
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

extern char **environ;

/* Protocol is sandboxinit.Protocol: the version of the command line this init speaks. */
#define PROTOCOL "1"
#define PROTOCOL_FLAG "protocol"
/* MISMATCH is sandboxinit.MismatchMessage; the sidecar's probe looks for it. */
#define MISMATCH "sandbox init protocol mismatch"

static const char NAME[] = "istota-init";

/* USAGE is what Go's flag package prints for sandboxinit's flag set: the same flags, the
 * same help texts, the same layout. The shared tests compare the two byte for byte. */
static const char USAGE[] =
	"Usage of istota-init:\n"
	"  -attach\n"
	"    \tinternal, on the host: run the command sent on descriptor 4 in the sandbox whose session socket is descriptor 3\n"
	"  -exec\n"
	"    \tinternal: set the limits, then exec the command in place\n"
	"  -forward PORT=SOCKET\n"
	"    \tPORT=SOCKET: serve 127.0.0.1:PORT and pass each connection to the Unix socket (repeatable)\n"
	"  -prlimit PATH\n"
	"    \tPATH of util-linux prlimit, which an init may use to set the limits (istota-init sets them itself)\n"
	"  -protocol int\n"
	"    \tversion of the sidecar's command line; another than this init's is refused (default 1)\n"
	"  -rlimit NAME=VALUE\n"
	"    \tNAME=VALUE: resource limit of the command: as, nproc, nofile or cpu (repeatable)\n"
	"  -session FD\n"
	"    \tserve the commands sent over the session socket FD instead of running one command (istota-init only)\n";

/* Signals passed on to the command; SIGCHLD tells the loop that a child ended. */
static const int forwarded_signals[] = {SIGTERM, SIGINT, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2};

/* ---- messages ------------------------------------------------------------------------ */

/* Message buffers are bounded; a longer message is cut, never overflows. */
#define MSG_MAX 4096

struct msg {
	char buf[MSG_MAX];
	size_t len;
};

static void msg_add(struct msg *m, const char *s, size_t n)
{
	size_t room = sizeof(m->buf) - 1 - m->len;
	if (n > room)
		n = room;
	memcpy(m->buf + m->len, s, n);
	m->len += n;
}

static void msg_str(struct msg *m, const char *s) { msg_add(m, s, strlen(s)); }

static void msg_fmt(struct msg *m, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void msg_fmt(struct msg *m, const char *fmt, ...)
{
	char tmp[MSG_MAX];
	va_list ap;
	va_start(ap, fmt);
	int n = vsnprintf(tmp, sizeof(tmp), fmt, ap);
	va_end(ap);
	if (n > 0)
		msg_add(m, tmp, (size_t)n < sizeof(tmp) ? (size_t)n : sizeof(tmp) - 1);
}

/* msg_quote appends s the way Go's %q (strconv.Quote) writes it, for printable ASCII,
 * control bytes and invalid UTF-8; valid multi-byte UTF-8 is copied as is. */
static void msg_quote(struct msg *m, const char *s)
{
	msg_add(m, "\"", 1);
	for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
		unsigned char c = *p;
		char esc[8];
		switch (c) {
		case '"': msg_add(m, "\\\"", 2); continue;
		case '\\': msg_add(m, "\\\\", 2); continue;
		case '\a': msg_add(m, "\\a", 2); continue;
		case '\b': msg_add(m, "\\b", 2); continue;
		case '\f': msg_add(m, "\\f", 2); continue;
		case '\n': msg_add(m, "\\n", 2); continue;
		case '\r': msg_add(m, "\\r", 2); continue;
		case '\t': msg_add(m, "\\t", 2); continue;
		case '\v': msg_add(m, "\\v", 2); continue;
		}
		if (c >= 0x20 && c < 0x7f) {
			msg_add(m, (const char *)p, 1);
			continue;
		}
		if (c >= 0xc2 && c <= 0xf4) {
			/* A well-formed UTF-8 sequence: lead byte plus continuation bytes. */
			size_t need = c >= 0xf0 ? 3 : c >= 0xe0 ? 2 : 1, i;
			for (i = 1; i <= need && (p[i] & 0xc0) == 0x80; i++)
				;
			if (i == need + 1) {
				msg_add(m, (const char *)p, need + 1);
				p += need;
				continue;
			}
		}
		snprintf(esc, sizeof(esc), "\\x%02x", c);
		msg_add(m, esc, 4);
	}
	msg_add(m, "\"", 1);
}

/* msg_errno appends strerror(e) as Go's syscall.Errno spells it: the same words, lower
 * case first ("no such file or directory"). */
static void msg_errno(struct msg *m, int e)
{
	const char *s = strerror(e);
	size_t start = m->len;
	msg_str(m, s);
	if (m->len > start)
		m->buf[start] = (char)tolower((unsigned char)m->buf[start]);
}

/* msg_write writes m to stderr in one write(2), so that lines never interleave. */
static void msg_write(struct msg *m)
{
	size_t off = 0;
	while (off < m->len) {
		ssize_t n = write(STDERR_FILENO, m->buf + off, m->len - off);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return;
		off += (size_t)n;
	}
}

/* msg_start begins one of the init's own messages: "istota-init: ". */
static void msg_start(struct msg *m)
{
	m->len = 0;
	msg_str(m, NAME);
	msg_str(m, ": ");
}

static void msg_end(struct msg *m)
{
	msg_add(m, "\n", 1);
	msg_write(m);
}

/* say_errno writes one message, "istota-init: <what>: <errno's text>", with what
 * formatted like printf; errno is read first, before anything can change it. */
static void say_errno(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void say_errno(const char *fmt, ...)
{
	int e = errno;
	char what[MSG_MAX];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(what, sizeof(what), fmt, ap);
	va_end(ap);
	struct msg m;
	msg_start(&m);
	msg_str(&m, what);
	msg_str(&m, ": ");
	msg_errno(&m, e);
	msg_end(&m);
}

/* ---- arguments, as Go's flag package parses sandboxinit's flag set --------------------- */

struct forward {
	int port;
	const char *socket;
};

struct limit {
	int resource;
	uint64_t value;
};

struct options {
	bool exec_only;
	bool attach;    /* on the host: hand a command to a session (run_attach) */
	int session_fd; /* > 0: serve a session's commands (serve_session) */
	struct forward *forwards;
	size_t nforwards;
	struct limit *limits;
	size_t nlimits;
	char **argv; /* the command */
};

/* check_protocol is sandboxinit.checkProtocol: it looks at the flags before "--" only,
 * before anything is parsed, so that an init of another version names the version as the
 * cause rather than a flag it does not know. It returns false after saying why. */
static bool check_protocol(int argc, char **argv)
{
	for (int i = 0; i < argc; i++) {
		const char *a = argv[i];
		if (strcmp(a, "--") == 0)
			return true;
		if (a[0] != '-')
			continue;
		const char *name = a;
		while (*name == '-')
			name++;
		const char *eq = strchr(name, '=');
		size_t nlen = eq ? (size_t)(eq - name) : strlen(name);
		if (nlen != strlen(PROTOCOL_FLAG) || strncmp(name, PROTOCOL_FLAG, nlen) != 0)
			continue;
		const char *value;
		struct msg m;
		msg_start(&m);
		if (eq) {
			value = eq + 1;
		} else if (i + 1 == argc) {
			msg_str(&m, "flag needs an argument: -" PROTOCOL_FLAG);
			msg_end(&m);
			return false;
		} else {
			value = argv[i + 1];
		}
		if (strcmp(value, PROTOCOL) == 0)
			return true;
		msg_str(&m, MISMATCH ": the sidecar speaks version ");
		msg_quote(&m, value);
		msg_str(&m, ", this init speaks " PROTOCOL "; install the istota-init that was built with this "
			    "istota binary (they ship together in bin/<arch>/)");
		msg_end(&m);
		return false;
	}
	return true;
}

/* parse_int is strconv.Atoi: an optional sign, then decimal digits, within int64. */
static bool parse_int(const char *s, long long *out)
{
	bool neg = false;
	if (*s == '+' || *s == '-')
		neg = *s++ == '-';
	if (!*s)
		return false;
	unsigned long long v = 0;
	for (; *s; s++) {
		if (*s < '0' || *s > '9')
			return false;
		if (v > (ULLONG_MAX - 9) / 10)
			return false;
		v = v * 10 + (unsigned long long)(*s - '0');
	}
	if (v > (unsigned long long)LLONG_MAX + (neg ? 1 : 0))
		return false;
	*out = neg ? -(long long)v : (long long)v;
	return true;
}

/* parse_uint is strconv.ParseUint(s, 10, 64): decimal digits only, within uint64. */
static bool parse_uint(const char *s, uint64_t *out)
{
	if (!*s)
		return false;
	uint64_t v = 0;
	for (; *s; s++) {
		if (*s < '0' || *s > '9')
			return false;
		uint64_t d = (uint64_t)(*s - '0');
		if (v > (UINT64_MAX - d) / 10)
			return false;
		v = v * 10 + d;
	}
	*out = v;
	return true;
}

/* fail_flag prints a flag error and the usage, as Go's FlagSet.failf does (no prefix). */
static int fail_flag(struct msg *m)
{
	msg_add(m, "\n", 1);
	msg_str(m, USAGE);
	msg_write(m);
	return 2;
}

/* set_value applies one flag that takes a value; it returns false after saying why. */
static bool set_value(struct options *o, const char *name, const char *value, struct msg *err)
{
	if (strcmp(name, "forward") == 0) {
		const char *eq = strchr(value, '=');
		long long port = 0;
		bool ok = false;
		if (eq) {
			char ps[32];
			size_t n = (size_t)(eq - value);
			if (n < sizeof(ps)) {
				memcpy(ps, value, n);
				ps[n] = 0;
				ok = parse_int(ps, &port) && port >= 1 && port <= 65535 && eq[1] == '/';
			}
		}
		if (!ok) {
			msg_str(err, "want PORT=/path/to/socket, got ");
			msg_quote(err, value);
			return false;
		}
		o->forwards[o->nforwards++] = (struct forward){(int)port, eq + 1};
		return true;
	}
	if (strcmp(name, "rlimit") == 0) {
		const char *eq = strchr(value, '=');
		uint64_t v = 0;
		if (!eq || !parse_uint(eq + 1, &v) || v == 0) {
			msg_str(err, "want NAME=VALUE with a positive value, got ");
			msg_quote(err, value);
			return false;
		}
		static const struct {
			const char *name;
			int resource;
		} names[] = {{"as", RLIMIT_AS}, {"nproc", RLIMIT_NPROC}, {"nofile", RLIMIT_NOFILE}, {"cpu", RLIMIT_CPU}};
		size_t n = (size_t)(eq - value);
		for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
			if (strlen(names[i].name) == n && strncmp(names[i].name, value, n) == 0) {
				o->limits[o->nlimits++] = (struct limit){names[i].resource, v};
				return true;
			}
		}
		char lname[256];
		snprintf(lname, sizeof(lname), "%.*s", (int)(n < 255 ? n : 255), value);
		msg_str(err, "unknown limit ");
		msg_quote(err, lname);
		msg_str(err, " (as, nproc, nofile, cpu)");
		return false;
	}
	if (strcmp(name, PROTOCOL_FLAG) == 0) {
		/* Already checked by check_protocol when first given; a repeat must still be a
		 * number (strconv.ParseInt(s, 0, 64), which also takes 0x, 0o, 0b and 0
		 * prefixes). */
		char *end;
		if (!*value || isspace((unsigned char)*value)) {
			msg_str(err, "parse error");
			return false;
		}
		errno = 0;
		(void)strtoll(value, &end, 0);
		if (*end) {
			msg_str(err, "parse error");
			return false;
		}
		if (errno == ERANGE) {
			msg_str(err, "value out of range");
			return false;
		}
		return true;
	}
	if (strcmp(name, "session") == 0) {
		long long fd;
		if (!parse_int(value, &fd)) {
			msg_str(err, "parse error");
			return false;
		}
		if (fd < 3 || fd > INT_MAX) {
			msg_str(err, "want a descriptor above 2");
			return false;
		}
		o->session_fd = (int)fd;
		return true;
	}
	/* prlimit: any path. This init sets the limits itself and does not use it. */
	return true;
}

/* parse_bool is strconv.ParseBool. */
static int parse_bool(const char *s)
{
	static const char *yes[] = {"1", "t", "T", "TRUE", "true", "True"};
	static const char *no[] = {"0", "f", "F", "FALSE", "false", "False"};
	for (size_t i = 0; i < 6; i++) {
		if (strcmp(s, yes[i]) == 0)
			return 1;
		if (strcmp(s, no[i]) == 0)
			return 0;
	}
	return -1;
}

/* parse_flags follows Go's flag.FlagSet.Parse: "-name", "--name", "-name=value" or
 * "-name value"; the first argument that is not a flag, or "--", ends the flags. It
 * returns -1 when the command line is good, else the exit status after saying why. */
static int parse_flags(int argc, char **argv, struct options *o)
{
	/* At most one forward or limit per argument. */
	o->forwards = calloc((size_t)argc + 1, sizeof(*o->forwards));
	o->limits = calloc((size_t)argc + 1, sizeof(*o->limits));
	if (!o->forwards || !o->limits) {
		struct msg m;
		msg_start(&m);
		msg_errno(&m, ENOMEM);
		msg_end(&m);
		return 2;
	}
	int i = 0;
	while (i < argc) {
		const char *s = argv[i];
		size_t len = strlen(s);
		if (len < 2 || s[0] != '-')
			break;
		size_t minuses = 1;
		if (s[1] == '-') {
			minuses = 2;
			if (len == 2) {
				i++;
				break;
			}
		}
		struct msg m = {.len = 0};
		const char *name = s + minuses;
		if (!*name || *name == '-' || *name == '=') {
			msg_str(&m, "bad flag syntax: ");
			msg_str(&m, s);
			return fail_flag(&m);
		}
		i++;
		char namebuf[256];
		const char *eq = strchr(name + 1, '=');
		const char *value = NULL;
		if (eq) {
			size_t n = (size_t)(eq - name);
			if (n >= sizeof(namebuf))
				n = sizeof(namebuf) - 1;
			memcpy(namebuf, name, n);
			namebuf[n] = 0;
			name = namebuf;
			value = eq + 1;
		}
		bool known = strcmp(name, "attach") == 0 || strcmp(name, "exec") == 0 || strcmp(name, "forward") == 0 ||
			     strcmp(name, "prlimit") == 0 || strcmp(name, PROTOCOL_FLAG) == 0 ||
			     strcmp(name, "rlimit") == 0 || strcmp(name, "session") == 0;
		if (!known) {
			if (strcmp(name, "help") == 0 || strcmp(name, "h") == 0) {
				msg_str(&m, USAGE);
				msg_write(&m);
				return 2;
			}
			msg_str(&m, "flag provided but not defined: -");
			msg_str(&m, name);
			return fail_flag(&m);
		}
		if (strcmp(name, "exec") == 0 || strcmp(name, "attach") == 0) {
			int b = value ? parse_bool(value) : 1;
			if (b < 0) {
				msg_str(&m, "invalid boolean value ");
				msg_quote(&m, value);
				msg_fmt(&m, " for -%s: parse error", name);
				return fail_flag(&m);
			}
			if (name[0] == 'e')
				o->exec_only = b;
			else
				o->attach = b;
			continue;
		}
		if (!value) {
			if (i == argc) {
				msg_str(&m, "flag needs an argument: -");
				msg_str(&m, name);
				return fail_flag(&m);
			}
			value = argv[i++];
		}
		struct msg why = {.len = 0};
		if (!set_value(o, name, value, &why)) {
			why.buf[why.len] = 0;
			msg_str(&m, "invalid value ");
			msg_quote(&m, value);
			msg_str(&m, " for flag -");
			msg_str(&m, name);
			msg_str(&m, ": ");
			msg_add(&m, why.buf, why.len);
			return fail_flag(&m);
		}
	}
	o->argv = argv + i;
	if (i == argc && !o->attach && o->session_fd == 0) {
		struct msg m;
		msg_start(&m);
		msg_str(&m, "no command given after --");
		msg_end(&m);
		return 2;
	}
	return -1;
}

/* ---- finding the command ------------------------------------------------------------- */

/* find_executable is Go's exec.findExecutable: a file (not a directory) that this process
 * may execute. */
static bool find_executable(const char *p)
{
	struct stat st;
	if (stat(p, &st) != 0 || S_ISDIR(st.st_mode))
		return false;
	if (faccessat(AT_FDCWD, p, X_OK, AT_EACCESS) == 0)
		return true;
	if (errno != ENOSYS && errno != EPERM)
		return false;
	return (st.st_mode & 0111) != 0;
}

/* look_path is sandboxinit.lookPath (Go's exec.LookPath): a name with a slash is used as
 * is once it exists; else the first executable on PATH, where a hit in a relative PATH
 * entry counts as not found (Go's ErrDot). It returns NULL after saying why. */
static char *look_path(const char *name, const char *path)
{
	struct msg m;
	if (strchr(name, '/')) {
		struct stat st;
		if (stat(name, &st) != 0 && errno == ENOENT) {
			msg_start(&m);
			msg_fmt(&m, "%s: not found", name);
			msg_end(&m);
			return NULL;
		}
		return strdup(name);
	}
	while (path && *path) {
		const char *colon = strchr(path, ':');
		size_t n = colon ? (size_t)(colon - path) : strlen(path);
		const char *dir = n ? path : ".";
		size_t dlen = n ? n : 1;
		char *p = malloc(dlen + strlen(name) + 2);
		if (p) {
			sprintf(p, "%.*s/%s", (int)dlen, dir, name);
			if (find_executable(p)) {
				if (dir[0] == '/')
					return p;
				free(p);
				break; /* Go refuses a command found relative to the working directory */
			}
			free(p);
		}
		if (!colon)
			break;
		path = colon + 1;
	}
	msg_start(&m);
	msg_fmt(&m, "%s: not found on PATH", name);
	msg_end(&m);
	return NULL;
}

/* check_executable is sandboxinit.checkExecutable; it returns false after saying why p
 * cannot run: missing, not a regular file, or without any execute bit. */
static bool check_executable(const char *p)
{
	struct stat st;
	struct msg m;
	msg_start(&m);
	if (stat(p, &st) != 0) {
		msg_fmt(&m, "stat %s: ", p);
		msg_errno(&m, errno);
	} else if (!S_ISREG(st.st_mode)) {
		msg_fmt(&m, "%s is not a regular file", p);
	} else if ((st.st_mode & 0111) == 0) {
		msg_fmt(&m, "%s is not executable", p);
	} else {
		return true;
	}
	msg_end(&m);
	return false;
}

static bool set_limits(const struct options *o)
{
	for (size_t i = 0; i < o->nlimits; i++) {
		struct rlimit rl = {.rlim_cur = o->limits[i].value, .rlim_max = o->limits[i].value};
		if (setrlimit(o->limits[i].resource, &rl) != 0)
			return false;
	}
	return true;
}

/* exec_in_place is --exec (sandboxinit.execWithLimits): set the limits on this process
 * and become the command. */
static int exec_in_place(const struct options *o)
{
	char *prog = look_path(o->argv[0], getenv("PATH"));
	if (!prog)
		return 127;
	if (!check_executable(prog))
		return 126;
	if (set_limits(o))
		execve(prog, o->argv, environ);
	int e = errno;
	struct msg m;
	msg_start(&m);
	msg_str(&m, "set a resource limit or exec the command: ");
	msg_errno(&m, e);
	msg_end(&m);
	return e == ENOENT ? 127 : 126;
}

/* ---- the bridge ---------------------------------------------------------------------- */

/* Each direction of a connection holds at most BUF_SIZE bytes in flight, like io.Copy. */
#define BUF_SIZE (32 * 1024)
/* After accept fails for want of descriptors or memory, the listener rests this long. */
#define ACCEPT_PAUSE_MS 100

enum kind { K_SIGNALS, K_LISTENER, K_TCP, K_UNIX, K_SESSION, K_COMMAND };

/* A watch is what epoll hands back: which kind of descriptor became ready, and whose. */
struct watch {
	enum kind kind;
	void *owner;
};

struct listener {
	struct watch w;
	int fd;
	int port;
	const char *socket;
	bool paused;          /* not polled until resume_at (CLOCK_MONOTONIC, ms) */
	long long resume_at;
	bool accept_reported; /* its accept errors are reported once */
};

/* dir is one direction of a connection: bytes read from one socket, not yet written to
 * the other. */
struct dir {
	char buf[BUF_SIZE];
	size_t off, len;
	bool eof;  /* the source is at its end (or failed): nothing more to read */
	bool done; /* the destination was shut for writing: this direction is over */
};

struct conn {
	struct watch tcp_w, unix_w;
	int tcp, unix_fd;
	uint32_t tcp_events, unix_events; /* what each is registered for; 0 = not at all */
	struct dir up;   /* tcp -> unix */
	struct dir down; /* unix -> tcp */
	bool closed;     /* its sockets are closed; freed once the current events are handled */
	struct conn *next;
};

static int epfd = -1;
/* Closed connections wait here until the events already taken from epoll are handled:
 * one of them may still name the connection. */
static struct conn *closed_conns;

/* watch_set registers fd for events, changes what it is registered for, or removes it
 * when events is 0 (a socket polled for nothing still reports hang-ups, over and over). */
static void watch_set(int fd, struct watch *w, uint32_t *cur, uint32_t events)
{
	if (*cur == events)
		return;
	struct epoll_event ev = {.events = events, .data.ptr = w};
	int op = *cur == 0 ? EPOLL_CTL_ADD : events == 0 ? EPOLL_CTL_DEL : EPOLL_CTL_MOD;
	if (epoll_ctl(epfd, op, fd, &ev) == 0)
		*cur = events;
}

static void conn_close(struct conn *c)
{
	uint32_t none = 0;
	watch_set(c->tcp, &c->tcp_w, &c->tcp_events, none);
	watch_set(c->unix_fd, &c->unix_w, &c->unix_events, none);
	close(c->tcp);
	close(c->unix_fd);
	c->closed = true;
	c->next = closed_conns;
	closed_conns = c;
}

/* A direction moves at most this many buffers per wake-up, so that one busy connection
 * cannot starve the others (epoll is level-triggered: the rest waits for the next turn). */
#define PUMP_BUDGET 16

/* pump moves what it can from src to dst without blocking. At the source's end, or
 * when dst refuses data, it shuts dst for writing, which the far side reads as the end
 * (a half-close: the other direction goes on). */
static void pump(struct dir *d, int src, int dst)
{
	int budget = PUMP_BUDGET;
	while (!d->done) {
		if (d->len > 0) {
			ssize_t n = send(dst, d->buf + d->off, d->len, MSG_NOSIGNAL);
			if (n < 0 && errno == EINTR)
				continue;
			if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
				return;
			if (n <= 0) {
				d->len = 0;
				d->eof = true;
				continue;
			}
			d->off += (size_t)n;
			d->len -= (size_t)n;
			if (d->len == 0)
				d->off = 0;
			continue;
		}
		if (d->eof) {
			shutdown(dst, SHUT_WR);
			d->done = true;
			return;
		}
		if (budget-- == 0)
			return;
		ssize_t n = recv(src, d->buf, sizeof(d->buf), 0);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
			return;
		if (n <= 0)
			d->eof = true;
		else
			d->len = (size_t)n;
	}
}

/* conn_serve pumps both directions, then polls each socket for exactly what the
 * directions wait for; a connection whose both directions are over is closed. */
static void conn_serve(struct conn *c)
{
	pump(&c->up, c->tcp, c->unix_fd);
	pump(&c->down, c->unix_fd, c->tcp);
	if (c->up.done && c->down.done) {
		conn_close(c);
		return;
	}
	uint32_t tcp_ev = 0, unix_ev = 0;
	if (!c->up.done) {
		if (c->up.len > 0)
			unix_ev |= EPOLLOUT;
		else
			tcp_ev |= EPOLLIN;
	}
	if (!c->down.done) {
		if (c->down.len > 0)
			tcp_ev |= EPOLLOUT;
		else
			unix_ev |= EPOLLIN;
	}
	watch_set(c->tcp, &c->tcp_w, &c->tcp_events, tcp_ev);
	watch_set(c->unix_fd, &c->unix_w, &c->unix_events, unix_ev);
}

/* dial connects to the listener's Unix socket, or says why not (as Go's net.Dial words
 * it) and returns -1. A Unix stream connect never waits: it succeeds or fails at once. */
static int dial(const struct listener *l)
{
	struct msg m;
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	const char *step = "socket";
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd >= 0) {
		step = "connect";
		if (strlen(l->socket) >= sizeof(sa.sun_path)) {
			errno = EINVAL;
		} else {
			strcpy(sa.sun_path, l->socket);
			if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0)
				return fd;
		}
	}
	int e = errno;
	if (fd >= 0)
		close(fd);
	msg_start(&m);
	msg_fmt(&m, "forward to %s: dial unix %s: %s: ", l->socket, l->socket, step);
	msg_errno(&m, e);
	msg_end(&m);
	return -1;
}

static bool listener_accept(struct listener *l)
{
	for (;;) {
		int fd = accept4(l->fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
		if (fd < 0) {
			switch (errno) {
			case EAGAIN:
#if EWOULDBLOCK != EAGAIN
			case EWOULDBLOCK:
#endif
				return true;
			case EMFILE:
			case ENFILE:
			case ENOBUFS:
			case ENOMEM:
				/* Out of descriptors or memory: the waiting connections stay queued
				 * while the listener rests and open ones end. */
				if (!l->accept_reported) {
					say_errno("forward %d: accept", l->port);
					l->accept_reported = true;
				}
				return false;
			default:
				continue; /* that one connection failed (ECONNABORTED, EINTR, ...) */
			}
		}
		int u = dial(l);
		struct conn *c = u >= 0 ? calloc(1, sizeof(*c)) : NULL;
		if (!c) {
			if (u >= 0) {
				struct msg m;
				msg_start(&m);
				msg_fmt(&m, "forward %d: ", l->port);
				msg_errno(&m, ENOMEM);
				msg_end(&m);
				close(u);
			}
			close(fd);
			continue;
		}
		c->tcp = fd;
		c->unix_fd = u;
		c->tcp_w = (struct watch){K_TCP, c};
		c->unix_w = (struct watch){K_UNIX, c};
		conn_serve(c);
	}
}

/* listen_on opens 127.0.0.1:port, or says why not (as Go's net.Listen words it). */
static int listen_on(struct listener *l)
{
	const char *step = "socket";
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd >= 0) {
		/* As Go does: a port of an ended sandbox still in TIME_WAIT can be taken. */
		int one = 1;
		struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)l->port),
					 .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
		step = "setsockopt";
		if (setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) == 0) {
			step = "bind";
			if (bind(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0) {
				step = "listen";
				if (listen(fd, 4096) == 0) {
					l->fd = fd;
					return 0;
				}
			}
		}
	}
	int e = errno;
	if (fd >= 0)
		close(fd);
	struct msg m;
	msg_start(&m);
	msg_fmt(&m, "forward %d: listen tcp4 127.0.0.1:%d: %s: ", l->port, l->port, step);
	msg_errno(&m, e);
	msg_end(&m);
	return -1;
}

/* ---- descriptors --------------------------------------------------------------------- */

/* ensure_stdio opens /dev/null on any of 0, 1 and 2 that is closed (as the Go runtime does
 * at start), so that no socket of the init's lands there and reaches the command. */
static void ensure_stdio(void)
{
	for (int fd = 0; fd <= 2; fd++) {
		if (fcntl(fd, F_GETFD) < 0 && errno == EBADF) {
			int n = open("/dev/null", O_RDWR);
			if (n >= 0 && n != fd)
				close(n);
		}
	}
}

#ifndef CLOSE_RANGE_CLOEXEC
#define CLOSE_RANGE_CLOEXEC (1U << 2)
#endif

/* mark_close_on_exec sets close-on-exec on every descriptor above 2: bwrap may leave some
 * without it, and none may reach the command. */
static void mark_close_on_exec(void)
{
#ifdef SYS_close_range
	if (syscall(SYS_close_range, 3U, ~0U, CLOSE_RANGE_CLOEXEC) == 0)
		return;
#endif
	/* Kernels before 5.11: one by one. */
	DIR *d = opendir("/proc/self/fd");
	if (!d)
		return;
	int own = dirfd(d);
	struct dirent *e;
	while ((e = readdir(d)) != NULL) {
		long long fd;
		if (parse_int(e->d_name, &fd) && fd > 2 && fd != own)
			fcntl((int)fd, F_SETFD, FD_CLOEXEC);
	}
	closedir(d);
}

/* ---- the init ------------------------------------------------------------------------ */

static long long now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static int exit_code(int status)
{
	if (WIFSIGNALED(status))
		return 128 + WTERMSIG(status);
	return WEXITSTATUS(status);
}

/* start runs the command with the limits and the signal mask the init was given, and
 * returns once it has run execve: its pid, or -1 with *code set after saying why it did
 * not start.
 *
 * vfork, not fork: the child borrows the init's memory until execve instead of copying
 * its page tables, and the init stays suspended until then, so it learns the outcome
 * without a pipe. This is one process start of every task; on a VM whose page faults
 * are slow it saves most of a millisecond (BenchmarkSandboxOverhead). Until execve the
 * child only sets its own signal mask and limits (per process, not shared by vfork),
 * stores errno in err and calls _exit; every signal it could receive has its default
 * action, so no handler runs on the borrowed stack. */
static pid_t start(const struct options *o, const char *prog, char **argv, char **envp, const int *stdio,
		   const sigset_t *mask, int *code)
{
	volatile int err = 0;
	pid_t pid = vfork();
	if (pid == 0) {
		if (stdio) {
			/* A session's command leads a process group and session of its own, so
			 * that what it leaves behind can be ended with it. */
			setsid();
			for (int fd = 0; fd < 3; fd++) {
				if (dup2(stdio[fd], fd) < 0) {
					err = errno;
					_exit(127);
				}
			}
		}
		sigprocmask(SIG_SETMASK, mask, NULL);
		if (set_limits(o))
			execve(prog, argv, envp);
		err = errno;
		_exit(127);
	}
	struct msg m;
	msg_start(&m);
	if (pid < 0) {
		msg_fmt(&m, "start %s: ", argv[0]);
		msg_errno(&m, errno);
		msg_end(&m);
		*code = 126;
		return -1;
	}
	int e = err;
	if (e == 0)
		return pid;
	while (waitpid(pid, NULL, 0) < 0 && errno == EINTR)
		;
	/* The Go init words these two cases differently: with limits, its second start
	 * (--exec) fails; without, its own fork and exec does. */
	if (o->nlimits > 0)
		msg_str(&m, "set a resource limit or exec the command: ");
	else
		msg_fmt(&m, "start %s: ", argv[0]);
	msg_errno(&m, e);
	msg_end(&m);
	*code = e == ENOENT ? 127 : 126;
	return -1;
}

/* ---- sessions ------------------------------------------------------------------------ */

/*
 * A session is one task's sandbox serving every command of the task (issue 12): bwrap and
 * the init start once, while the sidecar still pulls the task's files, and each command
 * then costs one process start on each side of the sandbox instead of a whole sandbox.
 * The sidecar starts "istota-init --session FD" as pid 1 with no command, and for each
 * command runs "istota-init --attach" on the host as the process its brain starts, waits
 * for and signals. Both ends are this program, so they always speak the same version.
 *
 *   attach -> init, on the session socket (SOCK_SEQPACKET): "R" with five descriptors:
 *     the command's channel (attach keeps the other end), the request (attach's
 *     descriptor 4, written by the sidecar and never read by attach:
 *     "<argc>\0<envc>\0<cwd>\0<argv>...\0<env>...\0"), and attach's stdin, stdout and
 *     stderr, which the command gets as its own.
 *   attach -> init, on the channel: "S" and a signal number, for each forwarded signal
 *     attach receives.
 *   init -> attach, on the channel: "E" and the command's status, as the init's exit
 *     status would be for a single command (128+n for signal n); then the channel ends.
 *
 * When a command ends, what it left behind ends too: its process group, and every
 * process of the sandbox when no other command is running (kill(-1) spares pid 1). A
 * channel that ends first means attach was killed: the command is killed. The session
 * socket's end (the sidecar closed it) ends the init, and with it the sandbox.
 */

#define SESSION_FDS 5
/* A request holds a command line and an environment; execve takes no more than this. */
#define REQUEST_MAX (16 << 20)

struct command {
	struct watch w;
	int chan;        /* the attach end's channel; -1 once it has ended */
	uint32_t events; /* what chan is polled for */
	pid_t pid;       /* 0 once reaped */
	struct command *next;
};

static struct command *commands;
/* Ended commands wait here until the events already taken from epoll are handled. */
static struct command *ended_commands;

struct request {
	char *buf;
	char *cwd;
	char **argv;
	char **env;
};

/* read_request reads and splits one request, or says why not. */
static bool read_request(int fd, struct request *rq)
{
	size_t cap = 4096, len = 0;
	char *buf = malloc(cap);
	for (;;) {
		if (!buf)
			goto nomem;
		if (len == cap) {
			if (cap >= REQUEST_MAX)
				goto bad;
			cap *= 2;
			char *more = realloc(buf, cap);
			if (!more)
				goto nomem;
			buf = more;
		}
		ssize_t n = read(fd, buf + len, cap - len);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			say_errno("read the command");
			free(buf);
			return false;
		}
		if (n == 0)
			break;
		len += (size_t)n;
	}
	/* Every field ends with a NUL; count them to know where each begins. */
	{
		size_t fields = 0;
		for (size_t i = 0; i < len; i++)
			fields += buf[i] == 0;
		if (len == 0 || buf[len - 1] != 0 || fields < 4)
			goto bad;
		long long argc, envc;
		char *p = buf;
		if (!parse_int(p, &argc) || argc < 1)
			goto bad;
		p += strlen(p) + 1;
		if (!parse_int(p, &envc) || envc < 0 || (size_t)(argc + envc + 3) != fields)
			goto bad;
		p += strlen(p) + 1;
		rq->cwd = p;
		p += strlen(p) + 1;
		rq->argv = calloc((size_t)argc + 1, sizeof(char *));
		rq->env = calloc((size_t)envc + 1, sizeof(char *));
		if (!rq->argv || !rq->env) {
			free(rq->argv);
			free(rq->env);
			goto nomem;
		}
		for (long long i = 0; i < argc; i++, p += strlen(p) + 1)
			rq->argv[i] = p;
		for (long long i = 0; i < envc; i++, p += strlen(p) + 1)
			rq->env[i] = p;
		rq->buf = buf;
		return true;
	}
bad: {
	struct msg m;
	msg_start(&m);
	msg_str(&m, "malformed command from the sidecar");
	msg_end(&m);
	free(buf);
	return false;
}
nomem: {
	struct msg m;
	msg_start(&m);
	msg_str(&m, "read the command: ");
	msg_errno(&m, ENOMEM);
	msg_end(&m);
	free(buf);
	return false;
}
}

/* env_path is the PATH of an environment, as the command will see it. */
static const char *env_path(char **env)
{
	const char *path = NULL;
	for (char **e = env; *e; e++)
		if (strncmp(*e, "PATH=", 5) == 0)
			path = *e + 5; /* the last one wins, as with getenv over a Go-built list */
	return path;
}

static void send_status(int chan, int code)
{
	char out[1 + sizeof(int32_t)] = {'E'};
	int32_t c = code;
	memcpy(out + 1, &c, sizeof(c));
	while (send(chan, out, sizeof(out), MSG_NOSIGNAL) < 0 && errno == EINTR)
		;
}

/* session_start starts the command of one "R" message; fds are the five descriptors. */
static void session_start(const int *fds, const struct options *o, const sigset_t *mask)
{
	int chan = fds[0];
	const int *stdio = fds + 2;
	struct command *c = calloc(1, sizeof(*c));
	/* What the init says about this command goes to the command's stderr, where the
	 * sidecar reads it, as it does when the init runs a single command. */
	int saved = fcntl(STDERR_FILENO, F_DUPFD_CLOEXEC, 3);
	if (saved >= 0)
		dup2(stdio[2], STDERR_FILENO);
	int code = 126;
	pid_t pid = -1;
	struct request rq = {0};
	if (!c) {
		struct msg m;
		msg_start(&m);
		msg_str(&m, "start the command: ");
		msg_errno(&m, ENOMEM);
		msg_end(&m);
	} else if (read_request(fds[1], &rq)) {
		if (chdir(rq.cwd) != 0) {
			say_errno("chdir %s", rq.cwd);
		} else {
			char *prog = look_path(rq.argv[0], env_path(rq.env));
			if (!prog)
				code = 127;
			else if (o->nlimits == 0 || check_executable(prog))
				pid = start(o, prog, rq.argv, rq.env, stdio, mask, &code);
			free(prog);
		}
		free(rq.buf);
		free(rq.argv);
		free(rq.env);
	}
	if (saved >= 0) {
		dup2(saved, STDERR_FILENO);
		close(saved);
	}
	for (int i = 1; i < SESSION_FDS; i++)
		close(fds[i]);
	if (pid < 0) {
		free(c);
		send_status(chan, code);
		close(chan);
		return;
	}
	*c = (struct command){.w = {K_COMMAND, c}, .chan = chan, .pid = pid, .next = commands};
	commands = c;
	watch_set(chan, &c->w, &c->events, EPOLLIN);
}

/* session_receive takes the messages waiting on the session socket; it returns false at
 * the socket's end. */
static bool session_receive(int session, const struct options *o, const sigset_t *mask)
{
	for (;;) {
		char tag = 0;
		union {
			struct cmsghdr h;
			char buf[CMSG_SPACE(sizeof(int) * SESSION_FDS)];
		} ctl;
		struct iovec iov = {.iov_base = &tag, .iov_len = 1};
		struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctl.buf, .msg_controllen = sizeof(ctl.buf)};
		ssize_t n = recvmsg(session, &mh, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return errno == EAGAIN || errno == EWOULDBLOCK;
		if (n == 0)
			return false;
		int fds[SESSION_FDS];
		size_t nfds = 0;
		for (struct cmsghdr *h = CMSG_FIRSTHDR(&mh); h; h = CMSG_NXTHDR(&mh, h)) {
			if (h->cmsg_level != SOL_SOCKET || h->cmsg_type != SCM_RIGHTS)
				continue;
			size_t k = (h->cmsg_len - CMSG_LEN(0)) / sizeof(int);
			for (size_t i = 0; i < k; i++) {
				int fd;
				memcpy(&fd, CMSG_DATA(h) + i * sizeof(int), sizeof(fd));
				if (nfds < SESSION_FDS)
					fds[nfds++] = fd;
				else
					close(fd);
			}
		}
		if (tag == 'R' && nfds == SESSION_FDS && !(mh.msg_flags & (MSG_CTRUNC | MSG_TRUNC))) {
			session_start(fds, o, mask);
			continue;
		}
		struct msg m;
		msg_start(&m);
		msg_str(&m, "session: malformed message ignored");
		msg_end(&m);
		for (size_t i = 0; i < nfds; i++)
			close(fds[i]);
	}
}

static void command_release(struct command *c)
{
	if (c->chan >= 0) {
		watch_set(c->chan, &c->w, &c->events, 0);
		close(c->chan);
		c->chan = -1;
	}
	for (struct command **p = &commands; *p; p = &(*p)->next) {
		if (*p == c) {
			*p = c->next;
			break;
		}
	}
	c->next = ended_commands;
	ended_commands = c;
}

/* command_input handles what attach sent on a command's channel. */
static void command_input(struct command *c)
{
	for (;;) {
		char in[1 + sizeof(int32_t)];
		ssize_t n = recv(c->chan, in, sizeof(in), MSG_DONTWAIT);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
			return;
		if (n <= 0) {
			/* attach was killed (the sidecar cancelled the command): so is the command. */
			watch_set(c->chan, &c->w, &c->events, 0);
			close(c->chan);
			c->chan = -1;
			kill(-c->pid, SIGKILL);
			kill(c->pid, SIGKILL);
			return;
		}
		int32_t sig;
		if (n != (ssize_t)sizeof(in) || in[0] != 'S')
			continue;
		memcpy(&sig, in + 1, sizeof(sig));
		for (size_t i = 0; i < sizeof(forwarded_signals) / sizeof(forwarded_signals[0]); i++)
			if (forwarded_signals[i] == sig)
				kill(c->pid, sig);
	}
}

/* session_reap reaps every ended child; a command's end is reported to its attach. */
static void session_reap(void)
{
	for (;;) {
		int status;
		pid_t got = waitpid(-1, &status, WNOHANG);
		if (got < 0 && errno == EINTR)
			continue;
		if (got <= 0)
			return;
		struct command *c = commands;
		while (c && c->pid != got)
			c = c->next;
		if (!c)
			continue; /* an orphan */
		c->pid = 0;
		bool others = false;
		for (struct command *d = commands; d; d = d->next)
			others |= d->pid != 0;
		if (getpid() == 1 && !others)
			kill(-1, SIGKILL);
		else
			kill(-got, SIGKILL);
		if (c->chan >= 0)
			send_status(c->chan, exit_code(status));
		command_release(c);
	}
}

/* ---- attach -------------------------------------------------------------------------- */

/* run_attach is --attach: hand this process's command (descriptor 4) and standard
 * descriptors to the session on descriptor 3, pass on the signals it gets, and exit with
 * the command's status. */
static int run_attach(void)
{
	struct msg m;
	if (fcntl(3, F_GETFD) < 0 || fcntl(4, F_GETFD) < 0) {
		msg_start(&m);
		msg_str(&m, "attach: descriptor 3 (the session) and 4 (the command) must be open");
		msg_end(&m);
		return 126;
	}
	int sv[2];
	if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) != 0) {
		say_errno("attach: socketpair");
		return 126;
	}
	sigset_t sigs;
	sigemptyset(&sigs);
	for (size_t i = 0; i < sizeof(forwarded_signals) / sizeof(forwarded_signals[0]); i++) {
		sigaddset(&sigs, forwarded_signals[i]);
		signal(forwarded_signals[i], SIG_DFL); /* an ignored one would never be read */
	}
	sigprocmask(SIG_BLOCK, &sigs, NULL);
	int sfd = signalfd(-1, &sigs, SFD_NONBLOCK | SFD_CLOEXEC);

	int fds[SESSION_FDS] = {sv[1], 4, STDIN_FILENO, STDOUT_FILENO, STDERR_FILENO};
	union {
		struct cmsghdr h;
		char buf[CMSG_SPACE(sizeof(fds))];
	} ctl;
	memset(&ctl, 0, sizeof(ctl));
	char tag = 'R';
	struct iovec iov = {.iov_base = &tag, .iov_len = 1};
	struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctl.buf, .msg_controllen = sizeof(ctl.buf)};
	struct cmsghdr *h = CMSG_FIRSTHDR(&mh);
	h->cmsg_level = SOL_SOCKET;
	h->cmsg_type = SCM_RIGHTS;
	h->cmsg_len = CMSG_LEN(sizeof(fds));
	memcpy(CMSG_DATA(h), fds, sizeof(fds));
	ssize_t n;
	while ((n = sendmsg(3, &mh, MSG_NOSIGNAL)) < 0 && errno == EINTR)
		;
	if (n < 0) {
		say_errno("the task's sandbox has ended");
		return 126;
	}
	/* Only the channel is left: the session socket must not outlive the session. */
	close(sv[1]);
	close(3);
	close(4);
	for (;;) {
		struct pollfd p[2] = {{.fd = sv[0], .events = POLLIN}, {.fd = sfd, .events = POLLIN}};
		if (poll(p, sfd >= 0 ? 2 : 1, -1) < 0) {
			if (errno == EINTR)
				continue;
			break;
		}
		if (sfd >= 0 && p[1].revents) {
			struct signalfd_siginfo si;
			while (read(sfd, &si, sizeof(si)) == (ssize_t)sizeof(si)) {
				char out[1 + sizeof(int32_t)] = {'S'};
				int32_t sig = (int32_t)si.ssi_signo;
				memcpy(out + 1, &sig, sizeof(sig));
				send(sv[0], out, sizeof(out), MSG_NOSIGNAL | MSG_DONTWAIT);
			}
		}
		if (!p[0].revents)
			continue;
		char in[1 + sizeof(int32_t)];
		n = recv(sv[0], in, sizeof(in), MSG_DONTWAIT);
		if (n < 0 && (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK))
			continue;
		if (n == (ssize_t)sizeof(in) && in[0] == 'E') {
			int32_t code;
			memcpy(&code, in + 1, sizeof(code));
			return code;
		}
		break;
	}
	msg_start(&m);
	msg_str(&m, "the task's sandbox ended before the command did");
	msg_end(&m);
	return 128 + SIGKILL;
}

int main(int argc, char **argv)
{
	ensure_stdio();
	argc--, argv++;
	if (!check_protocol(argc, argv))
		return 2;
	struct options o = {0};
	int code = parse_flags(argc, argv, &o);
	if (code >= 0)
		return code;
	if (o.exec_only)
		return exec_in_place(&o);
	if (o.attach)
		return run_attach();
	bool session = o.session_fd > 0;
	mark_close_on_exec();

	epfd = epoll_create1(EPOLL_CLOEXEC);
	if (epfd < 0) {
		say_errno("epoll");
		return 126;
	}
	struct listener *listeners = calloc(o.nforwards + 1, sizeof(*listeners));
	if (!listeners)
		return 126;
	for (size_t i = 0; i < o.nforwards; i++) {
		struct listener *l = &listeners[i];
		*l = (struct listener){.w = {K_LISTENER, l}, .fd = -1, .port = o.forwards[i].port, .socket = o.forwards[i].socket};
		if (listen_on(l) != 0)
			return 126;
		struct epoll_event ev = {.events = EPOLLIN, .data.ptr = &l->w};
		epoll_ctl(epfd, EPOLL_CTL_ADD, l->fd, &ev);
	}

	/* Looked up here whichever way the command starts, so a missing command is 127 with
	 * our message and costs no fork. */
	char *prog = NULL;
	if (!session) {
		prog = look_path(o.argv[0], getenv("PATH"));
		if (!prog)
			return 127;
		if (o.nlimits > 0 && !check_executable(prog))
			return 126;
	}

	/* Signals are blocked before the fork so none is lost, and read from a signalfd in
	 * the loop. Blocked, they reach even a pid 1 that installed no handler. */
	sigset_t sigs, old;
	sigemptyset(&sigs);
	for (size_t i = 0; i < sizeof(forwarded_signals) / sizeof(forwarded_signals[0]); i++)
		sigaddset(&sigs, forwarded_signals[i]);
	sigaddset(&sigs, SIGCHLD);
	/* Their default action, whatever the init's parent left (nohup ignores SIGHUP): the
	 * command inherits it, since an ignored disposition survives fork and execve and a
	 * shell cannot trap what it was started ignoring; and an ignored SIGCHLD would reap
	 * the command before the init could read its status. The Go init gets the same from
	 * the runtime's handlers, which execve resets. */
	for (int sig = 1; sig < NSIG; sig++)
		if (sigismember(&sigs, sig) == 1)
			signal(sig, SIG_DFL);
	sigprocmask(SIG_BLOCK, &sigs, &old);
	int sfd = signalfd(-1, &sigs, SFD_NONBLOCK | SFD_CLOEXEC);
	if (sfd < 0) {
		say_errno("signalfd");
		return 126;
	}
	struct watch sig_w = {K_SIGNALS, NULL};
	struct epoll_event sev = {.events = EPOLLIN, .data.ptr = &sig_w};
	epoll_ctl(epfd, EPOLL_CTL_ADD, sfd, &sev);

	pid_t pid = -1;
	struct watch session_w = {K_SESSION, NULL};
	if (session) {
		struct epoll_event ev = {.events = EPOLLIN, .data.ptr = &session_w};
		if (epoll_ctl(epfd, EPOLL_CTL_ADD, o.session_fd, &ev) != 0) {
			say_errno("session %d", o.session_fd);
			return 126;
		}
	} else {
		pid = start(&o, prog, o.argv, environ, NULL, &old, &code);
		if (pid < 0)
			return code;
	}
	/* As pid 1 the init inherits every orphan in the sandbox and must reap them; a plain
	 * process (tests) waits only for its own child so it never steals another's. */
	pid_t target = getpid() == 1 ? -1 : pid;

	struct epoll_event evs[64];
	for (;;) {
		int timeout = -1;
		long long now = now_ms();
		for (size_t i = 0; i < o.nforwards; i++) {
			struct listener *l = &listeners[i];
			if (!l->paused)
				continue;
			if (now >= l->resume_at) {
				struct epoll_event ev = {.events = EPOLLIN, .data.ptr = &l->w};
				if (epoll_ctl(epfd, EPOLL_CTL_ADD, l->fd, &ev) == 0) {
					l->paused = false;
					continue;
				}
				l->resume_at = now + ACCEPT_PAUSE_MS;
			}
			int left = (int)(l->resume_at - now);
			if (timeout < 0 || left < timeout)
				timeout = left;
		}
		int n = epoll_wait(epfd, evs, 64, timeout);
		if (n < 0 && errno != EINTR) {
			/* Cannot happen with a valid epoll descriptor; pid 1 must not spin. */
			say_errno("epoll");
			return 126;
		}
		for (int i = 0; i < n; i++) {
			struct watch *w = evs[i].data.ptr;
			switch (w->kind) {
			case K_SIGNALS: {
				struct signalfd_siginfo si;
				bool child = false;
				while (read(sfd, &si, sizeof(si)) == (ssize_t)sizeof(si)) {
					if (si.ssi_signo == SIGCHLD)
						child = true;
					else if (!session)
						kill(pid, (int)si.ssi_signo);
					else
						for (struct command *c = commands; c; c = c->next)
							if (c->pid != 0)
								kill(c->pid, (int)si.ssi_signo);
				}
				if (!child)
					break;
				if (session) {
					session_reap();
					break;
				}
				for (;;) {
					int status;
					pid_t got = waitpid(target, &status, WNOHANG);
					if (got < 0 && errno == EINTR)
						continue;
					if (got < 0) {
						say_errno("wait");
						return 126;
					}
					if (got == 0)
						break;
					if (got == pid)
						/* The command's end is the sandbox's: the bridges and every
						 * process left go with this exit. */
						return exit_code(status);
				}
				break;
			}
			case K_LISTENER: {
				struct listener *l = w->owner;
				if (!listener_accept(l) && epoll_ctl(epfd, EPOLL_CTL_DEL, l->fd, NULL) == 0) {
					l->paused = true;
					l->resume_at = now_ms() + ACCEPT_PAUSE_MS;
				}
				break;
			}
			case K_TCP:
			case K_UNIX: {
				struct conn *c = w->owner;
				if (!c->closed)
					conn_serve(c);
				break;
			}
			case K_SESSION:
				if (!session_receive(o.session_fd, &o, &old))
					return 0; /* the sidecar ended the session */
				break;
			case K_COMMAND: {
				struct command *c = w->owner;
				if (c->chan >= 0)
					command_input(c);
				break;
			}
			}
		}
		while (ended_commands) {
			struct command *c = ended_commands;
			ended_commands = c->next;
			free(c);
		}
		while (closed_conns) {
			struct conn *c = closed_conns;
			closed_conns = c->next;
			free(c);
		}
	}
}
