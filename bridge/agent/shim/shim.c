/* multinetwork, compiled: the fast path of the CNI shim (bridge/agent/shim/shim.py), the shim installed by default.
 *
 * A Python start costs ~6 ms of every CNI call (docs/benchmarks.md); this program costs ~1. It forwards a
 * request exactly as the Python shim does (POST /v1/cni with the CNI_* variables byte for byte, an empty
 * line, then stdin verbatim) when the request is ordinary: a top-level "socketPath" that is a plain string,
 * no CNI_* entry with a newline or given twice, stdin within MAX_FAST_STDIN, the agent's socket there.
 * Anything else (VERSION, errors before the agent is reached, unusual configurations) goes to the Python
 * shim, installed beside this program as `.<its name>.py` and exec'd with the same arguments and the same
 * stdin (a memfd), so every error and edge case stays one implementation. Once the request is sent it is
 * answered here, and every answer is printed as the Python shim prints it, byte for byte
 * (tests/unit/agent/test_compiled_shim.py runs one table through both): its error JSON escapes what it
 * quotes the same way (Python's UTF-8 decoding with U+FFFD for what is not UTF-8, its repr() of bytes), and
 * it reads the agent's status line by the same rule.
 *
 * `podnetwork cni-agent --install` installs the binary the image's build stage made, or builds it with the
 * node's C compiler (statically: it is built in a container and runs on the node), else installs the
 * Python shim. The protocol with the agent is defined once, in bridge/agent/shim/protocol.py: the build passes
 * its constants as -D flags, and SHIM_BUILD, a hash of this file and those flags, which the binary carries
 * as a marker so that the installer takes a prebuilt one only when it matches (bridge/agent/shim/shimbuild.py):
 *     python3 -m bridge.agent.shim.shimbuild out/multinetwork
 * which runs
 *     cc -O2 -static -s -DMAX_STDIN_BYTES=8388608 -DTIMEOUT_SECONDS=300 -DCONNECT_TIMEOUT_SECONDS=10 \
 *        -DAGENT_UNAVAILABLE=102 -DIO_FAILURE=5 -DAPI_PATH='"/v1/cni"' -DHOST='"multinetwork-agent"' \
 *        -DCONTENT_TYPE='"application/x-cni-request"' -DSHIM_BUILD='"<sha256>"' -o out/multinetwork shim.c
 */
#define _GNU_SOURCE
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/un.h>
#include <unistd.h>

#ifndef MAX_STDIN_BYTES
#error "define MAX_STDIN_BYTES as bridge/agent/shim/protocol.py's"
#endif
#ifndef TIMEOUT_SECONDS
#error "define TIMEOUT_SECONDS as bridge/agent/shim/protocol.py's"
#endif
#ifndef CONNECT_TIMEOUT_SECONDS
#error "define CONNECT_TIMEOUT_SECONDS as bridge/agent/shim/protocol.py's"
#endif
#ifndef AGENT_UNAVAILABLE
#error "define AGENT_UNAVAILABLE as bridge/agent/shim/protocol.py's"
#endif
#ifndef IO_FAILURE
#error "define IO_FAILURE as bridge/agent/shim/protocol.py's"
#endif
#ifndef API_PATH
#error "define API_PATH as bridge/agent/shim/protocol.py's"
#endif
#ifndef HOST
#error "define HOST as bridge/agent/shim/protocol.py's"
#endif
#ifndef CONTENT_TYPE
#error "define CONTENT_TYPE as bridge/agent/shim/protocol.py's"
#endif
#ifndef SHIM_BUILD
#error "define SHIM_BUILD as bridge/agent/shim/shimbuild.py's build_id()"
#endif

/* Read by the installer (shimbuild.prebuilt_problem): a prebuilt binary is installed only when this is the
 * build the agent would make. `used`: kept although nothing reads it here. */
__attribute__((used)) static const char build_marker[] = "multinetwork-shim-build=" SHIM_BUILD;

#define MAX_FAST_STDIN (1 << 20)
#define NOT_REACHABLE "the multinetwork agent is not reachable"
#define NOT_OURS "it has a Transfer-Encoding, and the multinetwork agent sends a Content-Length: is another " \
                 "server listening on its socket?"

extern char **environ;

static char *in;
static size_t in_len;
/* The Python shim: `.<name>.py` beside this program (bridge/agent/node/install.py writes both). */
static char python_shim[PATH_MAX + 8];

/* Where this program is (argv[0] only without /proc), so one build serves any CNI bin dir. */
static void find_python_shim(char **argv) {
    static const char deleted[] = " (deleted)";  /* replaced by a newer install while running */
    char self[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    if (n <= 0) {
        n = argv[0] ? (ssize_t)strlen(argv[0]) : 0;
        if (n <= 0 || n >= (ssize_t)sizeof self) n = 0;
        else memcpy(self, argv[0], (size_t)n);
    }
    self[n] = '\0';
    size_t len = (size_t)n, dl = sizeof deleted - 1;
    if (len > dl && strcmp(self + len - dl, deleted) == 0) self[len - dl] = '\0';
    char *slash = strrchr(self, '/');
    if (slash) {
        *slash = '\0';
        snprintf(python_shim, sizeof python_shim, "%s/.%s.py", self, slash + 1);
    } else {
        snprintf(python_shim, sizeof python_shim, ".%s.py", self);
    }
}

/* Out of memory: what the Python shim prints when it is (its MemoryError, caught by its last resort). */
static int out_of_memory(void) {
    printf("{\"cniVersion\": \"1.1.0\", \"code\": %d, \"msg\": \"internal shim error\", \"details\": "
           "\"MemoryError()\"}\n", IO_FAILURE);
    return 1;
}

/* The Python shim, with the stdin already read: it reads at most MAX_STDIN_BYTES + 1 bytes itself, so
 * what it finds in the memfd is what it would have read. Never once the request was sent. */
static int defer(char **argv) {
    int fd = memfd_create("multinetwork-stdin", 0);
    if (fd >= 0) {
        size_t off = 0;
        while (off < in_len) {
            ssize_t w = write(fd, in + off, in_len - off);
            if (w <= 0) break;
            off += (size_t)w;
        }
        if (off == in_len && lseek(fd, 0, SEEK_SET) == 0 && dup2(fd, 0) == 0) {
            close(fd);
            execv(python_shim, argv);
        }
    }
    printf("{\"cniVersion\": \"1.1.0\", \"code\": %d, \"msg\": \"internal shim error\", \"details\": "
           "\"cannot run the Python shim %s: %s\"}\n", IO_FAILURE, python_shim, strerror(errno));
    return 1;
}

/* The value of the top-level "key": "value" of a JSON object text: as bridge/agent/shim/shim.py's
 * string_field (nested objects may hold any key; an escaped value does not count). */
static int string_field(const char *data, size_t n, const char *key, const char **value, size_t *len) {
    size_t klen = strlen(key);
    int depth = 0;
    for (size_t i = 0; i < n; i++) {
        char c = data[i];
        if (c == '"') {
            size_t start = i + 1, j = start;
            for (;;) {
                const char *q = memchr(data + j, '"', n - j);
                if (!q) return 0;
                j = (size_t)(q - data);
                size_t b = j;
                while (b > start && data[b - 1] == '\\') b--;
                if ((j - b) % 2 == 0) break;
                j++;
            }
            if (depth == 1 && j - start == klen && memcmp(data + start, key, klen) == 0) {
                size_t k = j + 1;
                while (k < n && strchr(" \t\r\n", data[k]) && data[k]) k++;
                if (k < n && data[k] == ':') {
                    k++;
                    while (k < n && strchr(" \t\r\n", data[k]) && data[k]) k++;
                    if (k >= n || data[k] != '"') return 0;
                    const char *end = memchr(data + k + 1, '"', n - k - 1);
                    if (!end || memchr(data + k + 1, '\\', (size_t)(end - data) - k - 1)) return 0;
                    *value = data + k + 1;
                    *len = (size_t)(end - data) - k - 1;
                    return 1;
                }
            }
            i = j;
            continue;
        }
        if (c == '{' || c == '[') depth++;
        else if (c == '}' || c == ']') depth--;
    }
    return 0;
}

/* One code point as the Python shim's json_string writes it: printable ASCII as is (quotes and
 * backslashes escaped), everything else as \uXXXX, above U+FFFF as a surrogate pair. */
static void json_code_point(unsigned long cp) {
    if (cp == '"' || cp == '\\') printf("\\%c", (int)cp);
    else if (cp >= 0x20 && cp < 0x7f) putchar((int)cp);
    else if (cp > 0xffff) {
        cp -= 0x10000;
        printf("\\u%04lx\\u%04lx", 0xd800 + (cp >> 10), 0xdc00 + (cp & 0x3ff));
    } else printf("\\u%04lx", cp);
}

/* `text` decoded as Python's bytes.decode("utf-8", "replace") does (each maximal invalid subpart one
 * U+FFFD, Unicode 3.9 table 3-7), written as a JSON string body. */
static void json_utf8(const unsigned char *text, size_t n) {
    size_t i = 0;
    while (i < n) {
        unsigned char c = text[i];
        int need;
        unsigned char lo = 0x80, hi = 0xbf;
        unsigned long cp;
        if (c < 0x80) { json_code_point(c); i++; continue; }
        if (c >= 0xc2 && c <= 0xdf) { need = 1; cp = c & 0x1f; }
        else if (c >= 0xe0 && c <= 0xef) {
            need = 2; cp = c & 0x0f;
            if (c == 0xe0) lo = 0xa0;
            if (c == 0xed) hi = 0x9f;
        } else if (c >= 0xf0 && c <= 0xf4) {
            need = 3; cp = c & 0x07;
            if (c == 0xf0) lo = 0x90;
            if (c == 0xf4) hi = 0x8f;
        } else { json_code_point(0xfffd); i++; continue; }
        size_t j = i + 1;
        int got = 0;
        while (got < need && j < n) {
            unsigned char d = text[j];
            if (d < (got == 0 ? lo : 0x80) || d > (got == 0 ? hi : 0xbf)) break;
            cp = (cp << 6) | (d & 0x3f);
            got++;
            j++;
        }
        json_code_point(got == need ? cp : 0xfffd);
        i = j;
    }
}

/* Python's repr() of `text` (a bytes object) as a JSON string body. */
static void json_bytes_repr(const unsigned char *text, size_t n) {
    char quote = memchr(text, '\'', n) && !memchr(text, '"', n) ? '"' : '\'';
    json_code_point('b');
    json_code_point((unsigned char)quote);
    for (size_t i = 0; i < n; i++) {
        unsigned char c = text[i];
        char escaped[5];
        if (c == (unsigned char)quote || c == '\\') snprintf(escaped, sizeof escaped, "\\%c", c);
        else if (c == '\t') snprintf(escaped, sizeof escaped, "\\t");
        else if (c == '\n') snprintf(escaped, sizeof escaped, "\\n");
        else if (c == '\r') snprintf(escaped, sizeof escaped, "\\r");
        else if (c < 0x20 || c >= 0x7f) snprintf(escaped, sizeof escaped, "\\x%02x", c);
        else snprintf(escaped, sizeof escaped, "%c", c);
        for (char *e = escaped; *e; e++) json_code_point((unsigned char)*e);
    }
    json_code_point((unsigned char)quote);
}

enum quoting { AS_TEXT, AS_REPR };

/* The Python shim's fail(): its error JSON, "details" left out when empty. */
static int fail(const char *version, size_t vlen, const char *msg, const char *details, size_t dlen,
                enum quoting quoting) {
    printf("{\"cniVersion\": \"");
    json_utf8((const unsigned char *)version, vlen);
    printf("\", \"code\": %d, \"msg\": \"", AGENT_UNAVAILABLE);
    json_utf8((const unsigned char *)msg, strlen(msg));
    printf("\"");
    if (dlen || quoting == AS_REPR) {
        printf(", \"details\": \"");
        if (quoting == AS_REPR) json_bytes_repr((const unsigned char *)details, dlen);
        else json_utf8((const unsigned char *)details, dlen);
        printf("\"");
    }
    printf("}\n");
    return 1;
}

/* What the Python shim says when the socket fails after connecting: str() of its OSError. */
static int unreachable(const char *version, size_t vlen, const char *path, size_t path_len, int err) {
    char reason[160];
    if (err == EAGAIN || err == EWOULDBLOCK) snprintf(reason, sizeof reason, "timed out");
    else snprintf(reason, sizeof reason, "[Errno %d] %s", err, strerror(err));
    size_t cap = path_len + strlen(reason) + 64;
    char *details = malloc(cap);
    if (!details) return fail(version, vlen, NOT_REACHABLE, reason, strlen(reason), AS_TEXT);
    int len = snprintf(details, cap, "%.*s: %s; is `podnetwork cni-agent` running on this node?",
                       (int)path_len, path, reason);
    return fail(version, vlen, NOT_REACHABLE, details, (size_t)len, AS_TEXT);
}

/* bytes.strip()'s whitespace. */
static int space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f'; }

/* The status line the agent sends, by the Python shim's rule: HTTP/1.<digit> <three digits>, then a
 * space or the end of the line. */
static int status_of(const char *line, size_t n) {
    if (n < 12 || memcmp(line, "HTTP/1.", 7) != 0 || line[7] < '0' || line[7] > '9' || line[8] != ' ') return -1;
    for (int k = 9; k < 12; k++)
        if (line[k] < '0' || line[k] > '9') return -1;
    if (n > 12 && line[12] != ' ') return -1;
    return (line[9] - '0') * 100 + (line[10] - '0') * 10 + (line[11] - '0');
}

/* Whether the head names a Transfer-Encoding, in any case (the agent always sends a Content-Length). */
static int transfer_encoded(const char *head, size_t n) {
    static const char name[] = "\r\ntransfer-encoding:";
    size_t k = sizeof name - 1;
    for (size_t i = 0; i + k <= n; i++) {
        size_t j = 0;
        while (j < k && (char)((head[i + j] >= 'A' && head[i + j] <= 'Z') ? head[i + j] + 32 : head[i + j]) == name[j])
            j++;
        if (j == k) return 1;
    }
    return 0;
}

int main(int argc, char **argv) {
    (void)argc;
    find_python_shim(argv);
    /* As the Python shim's sys.stdin.buffer.read(MAX_STDIN_BYTES + 1): all of it, or one byte more. */
    size_t cap = 65536, most = (size_t)MAX_STDIN_BYTES + 1;
    in = malloc(cap);
    if (!in) {
        execv(python_shim, argv);  /* nothing read yet: the Python shim reads stdin itself */
        return out_of_memory();
    }
    for (;;) {
        if (in_len == cap) {
            if (cap >= most) break;
            size_t bigger = cap * 2 > most ? most : cap * 2;
            char *grown = realloc(in, bigger);
            if (!grown) return out_of_memory();  /* handing over part of stdin would cut it */
            in = grown;
            cap = bigger;
        }
        ssize_t r = read(0, in + in_len, cap - in_len);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) break;
        in_len += (size_t)r;
    }
    const char *command = getenv("CNI_COMMAND");
    const char *path, *version = "1.1.0";
    size_t path_len, version_len = 5;
    if (in_len > MAX_FAST_STDIN || !command || strcmp(command, "VERSION") == 0 ||
        !string_field(in, in_len, "socketPath", &path, &path_len) || path_len == 0 ||
        path_len >= sizeof(((struct sockaddr_un *)0)->sun_path))
        return defer(argv);
    for (size_t i = 0; i < path_len; i++)
        if ((unsigned char)path[i] < 0x20 || (unsigned char)path[i] >= 0x80)
            return defer(argv);  /* the Python shim decodes such bytes; one rule, there */
    if (!string_field(in, in_len, "cniVersion", &version, &version_len) || version_len == 0) {
        version = "1.1.0";
        version_len = 5;
    }

    size_t env_len = 0;
    for (char **e = environ; *e; e++) {
        if (strncmp(*e, "CNI_", 4) != 0 || !strchr(*e, '=')) continue;  /* Python skips an entry without '=' */
        if (strchr(*e, '\n')) return defer(argv);
        /* A name given twice: Python keeps the first; one rule, there. */
        size_t name_len = strcspn(*e, "=");
        for (char **f = environ; f < e; f++)
            if (strncmp(*f, *e, name_len + 1) == 0) return defer(argv);
        env_len += strlen(*e) + 1;
    }
    size_t body_len = env_len + 1 + in_len;
    char head[256];
    int head_len = snprintf(head, sizeof head,
                            /* bridge/agent/shim/protocol.py request_head */
                            "POST " API_PATH " HTTP/1.1\r\nHost: " HOST "\r\nContent-Type: " CONTENT_TYPE
                            "\r\nContent-Length: %zu\r\nConnection: close\r\n\r\n", body_len);
    char *request = malloc((size_t)head_len + body_len);
    if (!request) return defer(argv);
    size_t at = (size_t)head_len;
    memcpy(request, head, at);
    for (char **e = environ; *e; e++) {
        if (strncmp(*e, "CNI_", 4) != 0 || !strchr(*e, '=')) continue;
        size_t l = strlen(*e);
        memcpy(request + at, *e, l);
        request[at + l] = '\n';
        at += l + 1;
    }
    request[at++] = '\n';
    memcpy(request + at, in, in_len);
    at += in_len;

    struct sockaddr_un addr = {.sun_family = AF_UNIX};
    memcpy(addr.sun_path, path, path_len);
    int sock = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (sock < 0) return defer(argv);
    /* A unix-socket connect() waits while the agent's listen queue is full (a stuck agent) for as long as
     * SO_SNDTIMEO allows, and for ever without it; a non-blocking connect would not wait at all (EAGAIN at
     * once), failing a healthy agent's burst. */
    struct timeval connect_timeout = {.tv_sec = CONNECT_TIMEOUT_SECONDS};
    setsockopt(sock, SOL_SOCKET, SO_SNDTIMEO, &connect_timeout, sizeof connect_timeout);
    if (connect(sock, (struct sockaddr *)&addr, sizeof addr) < 0) {
        if (errno == EAGAIN || errno == EWOULDBLOCK) {
            char details[256];
            int len = snprintf(details, sizeof details,
                               "%.*s: the agent did not accept the connection within %d s (its queue of "
                               "connections is full: it is stuck or overloaded)",
                               (int)path_len, path, CONNECT_TIMEOUT_SECONDS);
            return fail(version, version_len, NOT_REACHABLE, details, (size_t)len, AS_TEXT);
        }
        return defer(argv);  /* no agent there: the Python shim says so, in its words */
    }
    struct timeval timeout = {.tv_sec = TIMEOUT_SECONDS};  /* as the Python shim's */
    setsockopt(sock, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof timeout);
    setsockopt(sock, SOL_SOCKET, SO_SNDTIMEO, &timeout, sizeof timeout);
    for (size_t sent = 0; sent < at;) {
        ssize_t w = send(sock, request + sent, at - sent, MSG_NOSIGNAL);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) return unreachable(version, version_len, path, path_len, errno);
        sent += (size_t)w;
    }
    size_t out_cap = 65536, out_len = 0;
    char *out = malloc(out_cap);
    if (!out) return out_of_memory();  /* the request was sent: never a second one */
    for (;;) {
        ssize_t r = recv(sock, out + out_len, out_cap - out_len, 0);
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) return unreachable(version, version_len, path, path_len, errno);
        if (r == 0) break;
        out_len += (size_t)r;
        if (out_len == out_cap) {
            char *grown = realloc(out, out_cap * 2);
            if (!grown) return out_of_memory();
            out = grown;
            out_cap *= 2;
        }
    }
    char *sep = out_len ? memmem(out, out_len, "\r\n\r\n", 4) : NULL;
    char *line_end = sep ? memmem(out, (size_t)(sep - out) + 2, "\r\n", 2) : NULL;
    int status = sep ? status_of(out, (size_t)(line_end - out)) : -1;
    if (status < 0)
        return fail(version, version_len, "the agent's answer is not HTTP", out, out_len < 200 ? out_len : 200,
                    AS_REPR);
    if (transfer_encoded(out, (size_t)(sep - out)))
        return fail(version, version_len, "the agent's answer is not the agent's", NOT_OURS, strlen(NOT_OURS),
                    AS_TEXT);
    char *payload = sep + 4;
    size_t payload_len = out_len - (size_t)(payload - out);
    if (status == 200) {
        fwrite(payload, 1, payload_len, stdout);
        return 0;
    }
    size_t s = 0;
    while (s < payload_len && space(payload[s])) s++;
    if (s < payload_len && payload[s] == '{') {
        size_t e = payload_len;
        while (e > 0 && space(payload[e - 1])) e--;
        fwrite(payload, 1, e, stdout);
        fputc('\n', stdout);
        return 1;
    }
    char msg[64];
    snprintf(msg, sizeof msg, "the agent answered HTTP %d", status);
    return fail(version, version_len, msg, payload, payload_len < 200 ? payload_len : 200, AS_TEXT);
}
