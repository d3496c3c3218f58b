/*
 * vmtool.c - small static helper for the VM scenarios (tests/vm/scenarios/).
 * Runs inside the initramfs, where busybox has no tcpdump, cannot set
 * UDP_ENCAP and its nc has no timeouts worth trusting.
 *
 *   vmtool encap-sock PORT
 *       Bind 0.0.0.0:PORT, set UDP_ENCAP_ESPINUDP (RFC 3948), fork into the
 *       background holding the socket, print the child's pid. Linux only
 *       decapsulates ESP-in-UDP that arrives on a socket marked like this
 *       (what charon/pluto do); without it the datagrams go unanswered.
 *   vmtool sniff IFNAME DUMP
 *       AF_PACKET sniffer until SIGTERM/SIGINT (or 600 s). Counts IPv4 UDP/4500
 *       datagrams per direction and hex-dumps the UDP payload (ESP header
 *       onwards, first 128 bytes) of the first DUMP in each direction. Also
 *       counts "leaks": outgoing IPv4 that is not UDP/4500 but has an address
 *       in 10.99.0.0/16 (the inner network), i.e. traffic that bypassed ESP.
 *       (Received plain inner packets are normal: Linux re-injects the
 *       decrypted packet on the device the ESP arrived on.)
 *   vmtool recv PORT SECONDS
 *       TCP: listen on 0.0.0.0:PORT, accept one connection, copy it to stdout
 *       until EOF. Gives up (exit 1) after SECONDS in total.
 *   vmtool send HOST PORT SECONDS
 *       TCP: connect (retrying while refused, so the receiver may start
 *       late), copy stdin, half-close, wait for the peer's EOF. Exit 1 on any
 *       error or after SECONDS in total.
 *
 * Build: gcc -O2 -Wall -static -o vmtool vmtool.c
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/if_ether.h>
#include <linux/if_packet.h>
#include <net/if.h>
#include <netinet/in.h>
#include <netinet/udp.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#ifndef UDP_ENCAP
#define UDP_ENCAP 100
#endif
#ifndef UDP_ENCAP_ESPINUDP
#define UDP_ENCAP_ESPINUDP 2
#endif

#define NAT_T_PORT 4500

static volatile sig_atomic_t stop;

static void on_signal(int sig)
{
	(void)sig;
	stop = 1;
}

static const char *deadline_what = "vmtool";
static int deadline_seconds;
static volatile long long copied; /* bytes moved so far, for the timeout message */

static void on_deadline(int sig)
{
	(void)sig;
	char msg[160];
	int n = snprintf(msg, sizeof(msg), "%s: timed out after %d s, %lld bytes copied\n",
			 deadline_what, deadline_seconds, (long long)copied);
	if (n > 0)
		(void)!write(2, msg, (size_t)n);
	_exit(1);
}

/* deadline() - end the process (exit 1, with a message) after SECONDS in total. */
static void deadline(const char *what, int seconds)
{
	deadline_what = what;
	deadline_seconds = seconds;
	struct sigaction sa = { .sa_handler = on_deadline };
	sigaction(SIGALRM, &sa, NULL);
	if (seconds > 0)
		alarm((unsigned)seconds);
}

static int encap_sock(int port)
{
	int s = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	if (s < 0) {
		perror("vmtool: socket");
		return 1;
	}
	int one = 1;
	setsockopt(s, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons(port) };
	if (bind(s, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
		perror("vmtool: bind");
		return 1;
	}
	int type = UDP_ENCAP_ESPINUDP;
	if (setsockopt(s, SOL_UDP, UDP_ENCAP, &type, sizeof(type)) < 0) {
		perror("vmtool: setsockopt UDP_ENCAP");
		return 1;
	}
	pid_t pid = fork();
	if (pid < 0) {
		perror("vmtool: fork");
		return 1;
	}
	if (pid > 0) {
		printf("%d\n", (int)pid);
		return 0;
	}
	/* Let go of the caller's stdout, or the shell's $(...) never returns. */
	setsid();
	int dn = open("/dev/null", O_RDWR);
	if (dn >= 0) {
		dup2(dn, 0);
		dup2(dn, 1);
		dup2(dn, 2);
		if (dn > 2)
			close(dn);
	}
	for (;;)
		pause();
}

static void hexdump(const unsigned char *p, size_t n)
{
	for (size_t i = 0; i < n; i += 16) {
		printf("  %04zx:", i);
		for (size_t j = i; j < i + 16 && j < n; j++)
			printf(" %02x", p[j]);
		printf("\n");
	}
}

static int sniff(const char *ifname, int dump)
{
	/* ETH_P_ALL: a protocol-specific packet socket misses outgoing frames. */
	int s = socket(AF_PACKET, SOCK_DGRAM | SOCK_CLOEXEC, htons(ETH_P_ALL));
	if (s < 0) {
		perror("vmtool: AF_PACKET");
		return 1;
	}
	struct sockaddr_ll ll = { .sll_family = AF_PACKET,
				  .sll_protocol = htons(ETH_P_ALL),
				  .sll_ifindex = (int)if_nametoindex(ifname) };
	if (!ll.sll_ifindex || bind(s, (struct sockaddr *)&ll, sizeof(ll)) < 0) {
		perror("vmtool: bind AF_PACKET");
		return 1;
	}
	struct sigaction sa = { .sa_handler = on_signal };
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGINT, &sa, NULL);
	setvbuf(stdout, NULL, _IOLBF, 0);
	long count[2] = { 0, 0 }, other = 0, leak = 0;
	const char *dir_name[2] = { "in", "out" };
	time_t end = time(NULL) + 600;
	while (!stop && time(NULL) < end) {
		struct pollfd p = { .fd = s, .events = POLLIN };
		if (poll(&p, 1, 200) <= 0)
			continue;
		unsigned char b[2048];
		struct sockaddr_ll from;
		socklen_t fl = sizeof(from);
		ssize_t n = recvfrom(s, b, sizeof(b), 0, (struct sockaddr *)&from, &fl);
		if (n < 20 || from.sll_protocol != htons(ETH_P_IP))
			continue;
		size_t ihl = (size_t)(b[0] & 15) * 4;
		int d = from.sll_pkttype == PACKET_OUTGOING;
		unsigned sport = 0, dport = 0;
		if (b[9] == IPPROTO_UDP && (size_t)n >= ihl + 8) {
			sport = (unsigned)(b[ihl] << 8 | b[ihl + 1]);
			dport = (unsigned)(b[ihl + 2] << 8 | b[ihl + 3]);
		}
		if (sport != NAT_T_PORT && dport != NAT_T_PORT) {
			other++;
			if (d && ((b[12] == 10 && b[13] == 99) || (b[16] == 10 && b[17] == 99)))
				leak++;
			continue;
		}
		if (count[d]++ < dump) {
			size_t len = (size_t)n - ihl - 8;
			printf("sniff %s #%ld %u.%u.%u.%u:%u -> %u.%u.%u.%u:%u udp payload %zu bytes\n",
			       dir_name[d], count[d], b[12], b[13], b[14], b[15], sport, b[16], b[17],
			       b[18], b[19], dport, len);
			hexdump(b + ihl + 8, len < 128 ? len : 128);
		}
	}
	printf("sniff %s: udp%d_in=%ld udp%d_out=%ld other_ipv4=%ld leak_out=%ld\n", ifname,
	       NAT_T_PORT, count[0], NAT_T_PORT, count[1], other, leak);
	return 0;
}

/* copy_fd() - copy IN to OUT until EOF. Return: 0, or -1 on an error. */
static int copy_fd(int in, int out)
{
	char buf[65536];
	for (;;) {
		ssize_t n = read(in, buf, sizeof(buf));
		if (n == 0)
			return 0;
		if (n < 0) {
			if (errno == EINTR)
				continue;
			return -1;
		}
		for (ssize_t off = 0; off < n;) {
			ssize_t w = write(out, buf + off, (size_t)(n - off));
			if (w < 0) {
				if (errno == EINTR)
					continue;
				return -1;
			}
			off += w;
		}
		copied += n;
	}
}

static int tcp_recv(int port, int seconds)
{
	deadline("vmtool recv", seconds);
	int s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	int one = 1;
	setsockopt(s, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons(port) };
	if (s < 0 || bind(s, (struct sockaddr *)&sa, sizeof(sa)) < 0 || listen(s, 1) < 0) {
		perror("vmtool recv: listen");
		return 1;
	}
	int c = accept(s, NULL, NULL);
	if (c < 0) {
		perror("vmtool recv: accept");
		return 1;
	}
	if (copy_fd(c, 1) < 0) {
		perror("vmtool recv: copy");
		return 1;
	}
	close(c);
	return 0;
}

static int tcp_send(const char *host, int port, int seconds)
{
	deadline("vmtool send", seconds);
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons(port) };
	if (inet_pton(AF_INET, host, &sa.sin_addr) != 1) {
		fprintf(stderr, "vmtool send: bad IPv4 address %s\n", host);
		return 1;
	}
	int s;
	for (;;) {
		s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
		if (s < 0) {
			perror("vmtool send: socket");
			return 1;
		}
		if (connect(s, (struct sockaddr *)&sa, sizeof(sa)) == 0)
			break;
		if (errno != ECONNREFUSED) {
			perror("vmtool send: connect");
			return 1;
		}
		close(s);
		usleep(100 * 1000); /* receiver not listening yet */
	}
	struct timespec t0, t1;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	if (copy_fd(0, s) < 0) {
		perror("vmtool send: copy");
		return 1;
	}
	/* Half-close, then wait for the receiver's EOF: only then has it read everything. */
	shutdown(s, SHUT_WR);
	char b[256];
	ssize_t n;
	while ((n = read(s, b, sizeof(b))) > 0)
		;
	if (n < 0) {
		perror("vmtool send: waiting for the receiver to close");
		return 1;
	}
	/* Connected to everything received: what vhost-counts' timed rows use. */
	clock_gettime(CLOCK_MONOTONIC, &t1);
	long long us = (t1.tv_sec - t0.tv_sec) * 1000000LL + (t1.tv_nsec - t0.tv_nsec) / 1000;
	fprintf(stderr, "vmtool send: bytes=%lld elapsed_us=%lld\n", (long long)copied, us);
	return 0;
}

int main(int argc, char **argv)
{
	if (argc == 3 && !strcmp(argv[1], "encap-sock"))
		return encap_sock(atoi(argv[2]));
	if (argc == 4 && !strcmp(argv[1], "sniff"))
		return sniff(argv[2], atoi(argv[3]));
	if (argc == 4 && !strcmp(argv[1], "recv"))
		return tcp_recv(atoi(argv[2]), atoi(argv[3]));
	if (argc == 5 && !strcmp(argv[1], "send"))
		return tcp_send(argv[2], atoi(argv[3]), atoi(argv[4]));
	fprintf(stderr, "usage: %s encap-sock PORT | sniff IFNAME DUMP | recv PORT SECONDS |"
			" send HOST PORT SECONDS\n",
		argv[0]);
	return 2;
}
