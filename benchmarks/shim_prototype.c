/* A measurement prototype, not the product: the happy path of bridge/agent/shim.py in C, to measure what
   a compiled shim would gain per CNI call (benchmarks/bench_agent.py --compare-shim). It handles no error
   case the Python shim handles (see that file), and VERSION goes to the agent. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/socket.h>
#include <sys/un.h>
extern char **environ;
static char in[1 << 20], req[1 << 21], out[1 << 20];
int main(void) {
    size_t n = 0; ssize_t r;
    while ((r = read(0, in + n, sizeof in - 1 - n)) > 0) n += r;
    in[n] = 0;
    char *p = strstr(in, "\"socketPath\""); char path[108] = "/run/multinetwork/agent.sock";
    if (p) { p = strchr(p + 12, '"'); if (p) { char *e = strchr(p + 1, '"'); if (e && e - p - 1 < 107) { memcpy(path, p + 1, e - p - 1); path[e - p - 1] = 0; } } }
    char body[65536]; size_t bl = 0;
    for (char **e = environ; *e; e++) if (!strncmp(*e, "CNI_", 4)) bl += snprintf(body + bl, sizeof body - bl, "%s\n", *e);
    body[bl++] = '\n';
    size_t hl = snprintf(req, sizeof req, "POST /v1/cni HTTP/1.1\r\nHost: multinetwork-agent\r\nContent-Type: application/x-cni-request\r\nContent-Length: %zu\r\nConnection: close\r\n\r\n", bl + n);
    memcpy(req + hl, body, bl); memcpy(req + hl + bl, in, n);
    int s = socket(AF_UNIX, SOCK_STREAM, 0); struct sockaddr_un a = {.sun_family = AF_UNIX};
    strcpy(a.sun_path, path);
    if (connect(s, (struct sockaddr *)&a, sizeof a) < 0) { puts("{\"code\":102}"); return 1; }
    size_t total = hl + bl + n, sent = 0; while (sent < total) { r = write(s, req + sent, total - sent); if (r <= 0) return 1; sent += r; }
    size_t m = 0; while ((r = read(s, out + m, sizeof out - m)) > 0) m += r;
    char *b = strstr(out, "\r\n\r\n"); int status = atoi(out + 9);
    if (b) { b += 4; fwrite(b, 1, out + m - b, stdout); }
    return status == 200 ? 0 : 1;
}
