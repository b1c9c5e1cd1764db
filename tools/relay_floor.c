/* The C relay of tools/bench_relay_floor.py (``--relay c``): the same datagram moves as the
 * Python relay (``add_reader`` -> ``recvfrom`` -> ``sendto``), with no interpreter, so that
 * the bench can say what a per-host daemon's wake-ups cost when its own work is ~nothing.
 * Built by the bench at run time (cffi, into its temporary directory); not part of mrcnet.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>

/* Side "a" (side_a != 0): datagrams from the local client on ``local_fd`` go to the peer
 * relay at ``peer``:``port`` and the peer's answers back to the client. Side "b": datagrams
 * from the peer relay go to the local echo (``local_fd`` is connected to it) and its
 * answers back to the peer. Both sockets non-blocking. Returns only on an error. */
int relay_run(int local_fd, int net_fd, int side_a, const char *peer, int port)
{
    struct sockaddr_in6 far, back;
    socklen_t back_len = 0;
    char buf[65536];
    struct epoll_event ev, evs[2];
    int ep = epoll_create1(0);

    memset(&far, 0, sizeof far);
    far.sin6_family = AF_INET6;
    far.sin6_port = htons((unsigned short)port);
    if (ep < 0 || inet_pton(AF_INET6, peer, &far.sin6_addr) != 1)
        return -1;
    ev.events = EPOLLIN;
    ev.data.fd = local_fd;
    if (epoll_ctl(ep, EPOLL_CTL_ADD, local_fd, &ev) < 0)
        return -1;
    ev.data.fd = net_fd;
    if (epoll_ctl(ep, EPOLL_CTL_ADD, net_fd, &ev) < 0)
        return -1;
    for (;;) {
        int n = epoll_wait(ep, evs, 2, -1);
        if (n < 0 && errno != EINTR)
            return -1;
        for (int i = 0; i < n; i++) {
            int fd = evs[i].data.fd;
            for (;;) {
                struct sockaddr_in6 from;
                socklen_t from_len = sizeof from;
                ssize_t len = recvfrom(fd, buf, sizeof buf, MSG_DONTWAIT,
                                       (struct sockaddr *)&from, &from_len);
                if (len < 0)
                    break;  /* EAGAIN: this socket is drained */
                if (fd == local_fd) {
                    if (side_a) {  /* from the client: remember it, on to the peer */
                        back = from;
                        back_len = from_len;
                        sendto(net_fd, buf, (size_t)len, 0, (struct sockaddr *)&far,
                               sizeof far);
                    } else if (back_len) {  /* the echo's answer: back to the peer */
                        sendto(net_fd, buf, (size_t)len, 0, (struct sockaddr *)&back,
                               back_len);
                    }
                } else if (side_a) {  /* the peer's answer: back to the client */
                    if (back_len)
                        sendto(local_fd, buf, (size_t)len, 0, (struct sockaddr *)&back,
                               back_len);
                } else {  /* from the peer: remember it, on to the echo */
                    back = from;
                    back_len = from_len;
                    send(local_fd, buf, (size_t)len, 0);
                }
            }
        }
    }
}
