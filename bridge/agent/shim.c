/* multinetwork, compiled: the fast path of the CNI shim (bridge/agent/shim.py), for nodes with a C compiler.
 *
 * A Python start costs ~6 ms of every CNI call (docs/benchmarks.md); this program costs ~1. It forwards a
 * request exactly as the Python shim does (POST /v1/cni with the CNI_* variables byte for byte, an empty
 * line, then stdin verbatim) when the request is ordinary: a top-level "socketPath" that is a plain string,
 * no CNI_* value with a newline, stdin within MAX_FAST_STDIN, the agent's socket accepting the connection.
 * Anything else (VERSION, errors before the agent is reached, unusual configurations) goes to the Python
 * shim, exec'd with the same arguments and the same stdin (a memfd), so every error and edge case stays
 * one implementation. Once the request is sent it is answered here: the agent's answer is printed as the
 * Python shim prints it.
 *
 * Built by `podnetwork cni-agent --install --compiled-shim` where a C compiler is present (statically: it
 * is built in the agent's container and runs on the node), else the Python shim is installed:
 *     cc -O2 -static -s -DPYTHON_SHIM='"/opt/cni/bin/.multinetwork.py"' -o multinetwork shim.c
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/un.h>
#include <unistd.h>

#ifndef PYTHON_SHIM
#error "define PYTHON_SHIM, the path of the Python shim to defer to"
#endif

#define MAX_FAST_STDIN (1 << 20)
#define AGENT_UNAVAILABLE 102
#define TIMEOUT_SECONDS 300

extern char **environ;

static char *in;
static size_t in_len;

/* The Python shim, with the stdin already read (it would refuse an oversized one the same way). */
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
            execv(PYTHON_SHIM, argv);
        }
    }
    printf("{\"cniVersion\": \"1.1.0\", \"code\": 5, \"msg\": \"internal shim error\", \"details\": "
           "\"cannot run the Python shim %s: %s\"}\n", PYTHON_SHIM, strerror(errno));
    return 1;
}

/* The value of the top-level "key": "value" of a JSON object text: as bridge/agent/shim.py's
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

/* `text` as a JSON string body (quotes, backslashes and control characters escaped). */
static void json_text(FILE *f, const char *text, size_t n) {
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)text[i];
        if (c == '"' || c == '\\') fprintf(f, "\\%c", c);
        else if (c < 0x20) fprintf(f, "\\u%04x", c);
        else fputc(c, f);
    }
}

static int fail(const char *version, size_t vlen, const char *msg, const char *details, size_t dlen) {
    printf("{\"cniVersion\": \"");
    json_text(stdout, version, vlen);
    printf("\", \"code\": %d, \"msg\": \"%s\", \"details\": \"", AGENT_UNAVAILABLE, msg);
    json_text(stdout, details, dlen);
    printf("\"}\n");
    return 1;
}

int main(int argc, char **argv) {
    (void)argc;
    size_t cap = 65536;
    in = malloc(cap);
    for (;;) {
        if (!in) return defer(argv);
        ssize_t r = read(0, in + in_len, cap - in_len);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) break;
        in_len += (size_t)r;
        if (in_len == cap) {
            if (cap > MAX_FAST_STDIN) return defer(argv);
            cap *= 2;
            in = realloc(in, cap);
        }
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
        if (strncmp(*e, "CNI_", 4) != 0) continue;
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
                            "POST /v1/cni HTTP/1.1\r\nHost: multinetwork-agent\r\n"
                            "Content-Type: application/x-cni-request\r\n"
                            "Content-Length: %zu\r\nConnection: close\r\n\r\n", body_len);
    char *request = malloc((size_t)head_len + body_len);
    if (!request) return defer(argv);
    size_t at = (size_t)head_len;
    memcpy(request, head, at);
    for (char **e = environ; *e; e++) {
        if (strncmp(*e, "CNI_", 4) != 0) continue;
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
    if (sock < 0 || connect(sock, (struct sockaddr *)&addr, sizeof addr) < 0)
        return defer(argv);  /* no agent there: the Python shim says so, in its words */
    struct timeval timeout = {.tv_sec = TIMEOUT_SECONDS};  /* as the Python shim's */
    setsockopt(sock, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof timeout);
    setsockopt(sock, SOL_SOCKET, SO_SNDTIMEO, &timeout, sizeof timeout);
    for (size_t sent = 0; sent < at;) {
        ssize_t w = send(sock, request + sent, at - sent, MSG_NOSIGNAL);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) return fail(version, version_len, "the multinetwork agent is not reachable",
                                strerror(errno), strlen(strerror(errno)));
        sent += (size_t)w;
    }
    size_t out_cap = 65536, out_len = 0;
    char *out = malloc(out_cap);
    for (;;) {
        if (!out) return fail(version, version_len, "the agent's answer is too large", "", 0);
        ssize_t r = recv(sock, out + out_len, out_cap - out_len, 0);
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) return fail(version, version_len, "the multinetwork agent is not reachable",
                               strerror(errno), strlen(strerror(errno)));
        if (r == 0) break;
        out_len += (size_t)r;
        if (out_len == out_cap) {
            out_cap *= 2;
            out = realloc(out, out_cap);
        }
    }
    char *sep = out_len ? memmem(out, out_len, "\r\n\r\n", 4) : NULL;
    int status = 0;
    if (!sep || out_len < 12 || memcmp(out, "HTTP/1.", 7) != 0 || sscanf(out + 8, " %3d", &status) != 1 ||
        memmem(out, (size_t)(sep - out), "hunked", 6))
        /* Not what this agent sends (it never chunks): left to no one, said plainly. */
        return fail(version, version_len, "the agent's answer is not HTTP", out, out_len < 200 ? out_len : 200);
    char *payload = sep + 4;
    size_t payload_len = out_len - (size_t)(payload - out);
    if (status == 200) {
        fwrite(payload, 1, payload_len, stdout);
        return 0;
    }
    size_t s = 0;
    while (s < payload_len && strchr(" \t\r\n", payload[s]) && payload[s]) s++;
    if (s < payload_len && payload[s] == '{') {
        size_t e = payload_len;
        while (e > s && strchr(" \t\r\n", payload[e - 1]) && payload[e - 1]) e--;
        fwrite(payload, 1, e, stdout);
        fputc('\n', stdout);
        return 1;
    }
    char msg[64];
    snprintf(msg, sizeof msg, "the agent answered HTTP %d", status);
    return fail(version, version_len, msg, payload, payload_len < 200 ? payload_len : 200);
}
