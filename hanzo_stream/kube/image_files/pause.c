/* The pod sandbox's process (hanzo_stream/kube/images.py builds it with gcc -static).
 *
 * It holds the pod's namespaces open and does nothing else: it sleeps until SIGTERM or
 * SIGINT (exit 0), and as PID 1 of the pod it reaps any child that is handed to it, so no
 * zombie outlives its parent.
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static void stop(int sig) {
    (void)sig;
    _exit(0);
}

static void reap(int sig) {
    int saved = errno;
    (void)sig;
    while (waitpid(-1, NULL, WNOHANG) > 0) {
    }
    errno = saved;
}

static int on(int sig, void (*handler)(int), int flags) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = handler;
    sa.sa_flags = flags;
    sigemptyset(&sa.sa_mask);
    return sigaction(sig, &sa, NULL);
}

int main(int argc, char **argv) {
    (void)argv;
    if (argc > 1) {
        fprintf(stderr, "pause: takes no arguments\n");
        return 64;
    }
    if (on(SIGINT, stop, 0) || on(SIGTERM, stop, 0) ||
        on(SIGCHLD, reap, SA_NOCLDSTOP | SA_RESTART)) {
        perror("pause: sigaction");
        return 1;
    }
    for (;;)
        pause();
}
