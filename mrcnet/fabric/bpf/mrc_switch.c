// SPDX-License-Identifier: GPL-2.0
/*
 * mrc-fabric switch egress program (tc clsact egress, direct action).
 *
 * One instance is attached per link end, so each instance owns its maps: the
 * Python side finds them through the program id that tc reports and reads or
 * writes them with the bpf(2) syscall (mrcnet/fabric/bpfmap.py). No pinning,
 * so deleting the netns frees everything.
 *
 * What it emulates (PROTOCOL-NOTES.md section 6): a shallow switch egress queue
 * draining at the link rate. The queue is *virtual* (the time at which it will
 * be empty, pushed back by each frame) because the real queue sits behind us in
 * the tbf/pfifo_fast qdisc and tc egress runs before enqueue. It drains at the
 * configured rate_Bps: the link rate, or below it with the fabric's vq_drain
 * option (a margin for a shaper that falls behind on a busy machine). The
 * shaper charges a frame its length after this program (a size table on the
 * root qdisc), so a trimmed header costs it what it costs us.
 * Past the trim threshold an SRv6 frame is cut to trim_size, re-marked to the
 * trimmed DSCP and sent on the high priority band; past the ECN threshold ECT
 * frames get CE. Only the outer IPv6 payload length is fixed (Linux next hops
 * drop a packet shorter than it); inner lengths and checksums are left wrong,
 * like several real switches.
 *
 * DSCP code points come from mrcnet/constants.py through -D flags.
 */
#include <linux/bpf.h>
#include <linux/pkt_cls.h>
#include <linux/if_ether.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

#ifndef MRC_DSCP_TRIMMED
#error "compile with -DMRC_DSCP_TRIMMED=<code point>"
#endif
#ifndef MRC_DSCP_TRIMMED_LASTHOP
#error "compile with -DMRC_DSCP_TRIMMED_LASTHOP=<code point>"
#endif
#ifndef MRC_DSCP_NO_TRIM
#error "compile with -DMRC_DSCP_NO_TRIM=<code point>"
#endif
#ifndef MRC_DSCP_CONTROL
#error "compile with -DMRC_DSCP_CONTROL=<code point>"
#endif
#ifndef MRC_UDP_PORT
#error "compile with -DMRC_UDP_PORT=<port>"
#endif

#define F_ECN 1u       /* mark CE past ecn_thresh */
#define F_BLACKHOLE 2u /* drop everything, link stays up */
#define F_TRIM 4u      /* trim past trim_thresh */
#define F_LASTHOP 8u   /* a leaf's port to a host: trims are marked TRIMMED_LASTHOP */

#define PRIO_HIGH 6 /* TC_PRIO_INTERACTIVE: pfifo_fast band 0 under tbf */
#define PRIO_DATA 0 /* TC_PRIO_BESTEFFORT: band 1 */

#define NH_UDP 17
#define NH_IPV6 41
#define NH_ROUTING 43
#define ETH_HLEN_ 14
#define MAX_AHEAD_NS 1000000000ull /* cap: a queue of 1 s at the rate */

/* Layouts mirrored in mrcnet/fabric/bpfmap.py (struct formats). */
struct link_cfg {
	__u64 rate_Bps;    /* virtual queue drain rate, bytes/s; 0 = no queue */
	__u32 trim_thresh; /* bytes of virtual backlog before trimming */
	__u32 ecn_thresh;  /* bytes of virtual backlog before CE marking */
	__u32 drop_thresh; /* bytes of virtual backlog before dropping; 0 = never */
	__u32 trim_size;   /* bytes kept by a trim (from the Ethernet header) */
	__u32 loss_ppm;    /* random loss, parts per million */
	__u32 flags;       /* F_* */
};

struct link_vq {
	__u64 backlog; /* at the last frame, for readers (bpfmap.read_backlog) */
	__u64 busy_ns; /* when the virtual queue will be empty (ktime ns) */
};

struct link_counters {
	__u64 pkts;  /* frames passed to the qdisc */
	__u64 bytes; /* bytes passed to the qdisc (after trimming) */
	__u64 drops; /* dropped here: blackhole, random loss, overflow */
	__u64 trims;
	__u64 ce;
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct link_cfg);
} mrc_cfg SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct link_vq);
} mrc_vq SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct link_counters);
} mrc_cnt SEC(".maps");

static __always_inline int drop(struct link_counters *c)
{
	c->drops++;
	return TC_ACT_SHOT;
}

SEC("tc")
int mrc_egress(struct __sk_buff *skb)
{
	__u32 zero = 0;
	struct link_cfg *cfg = bpf_map_lookup_elem(&mrc_cfg, &zero);
	struct link_vq *vq = bpf_map_lookup_elem(&mrc_vq, &zero);
	struct link_counters *c = bpf_map_lookup_elem(&mrc_cnt, &zero);
	if (!cfg || !vq || !c)
		return TC_ACT_OK;

	if (cfg->flags & F_BLACKHOLE)
		return drop(c);
	if (cfg->loss_ppm && bpf_get_prandom_u32() % 1000000u < cfg->loss_ppm)
		return drop(c);

	/* Is this an IPv6 frame, and which traffic class / next header? */
	__u8 ip6[8];
	int is_ip6 = skb->protocol == bpf_htons(ETH_P_IPV6) &&
		     bpf_skb_load_bytes(skb, ETH_HLEN_, ip6, sizeof(ip6)) == 0;
	__u8 tclass = 0, nexthdr = 0;
	if (is_ip6) {
		tclass = (__u8)(((ip6[0] & 0x0f) << 4) | (ip6[1] >> 4));
		nexthdr = ip6[6];
	}
	__u8 dscp = tclass >> 2;
	int high = is_ip6 && (dscp == MRC_DSCP_CONTROL || dscp == MRC_DSCP_TRIMMED ||
			      dscp == MRC_DSCP_TRIMMED_LASTHOP);

	/* Only MRC frames are trimmed: SRv6 encapsulated (uSID: IPv6-in-IPv6, or an
	 * SRH) or bare UDP to the RoCEv2 port. Trimming a TCP segment would only
	 * turn it into a corrupt packet. */
	int trimmable = 0;
	if (is_ip6 && !high && dscp != MRC_DSCP_NO_TRIM) {
		if (nexthdr == NH_IPV6 || nexthdr == NH_ROUTING) {
			trimmable = 1;
		} else if (nexthdr == NH_UDP) {
			__be16 dport;
			if (bpf_skb_load_bytes(skb, ETH_HLEN_ + 40 + 2, &dport, 2) == 0 &&
			    dport == bpf_htons(MRC_UDP_PORT))
				trimmable = 1;
		}
	}

	__u32 len = skb->len;
	__u64 backlog = 0;
	if (cfg->rate_Bps) {
		/* The virtual queue is the time at which it will be empty: the backlog
		 * is what the rate drains from now until then. Kept as a time so that
		 * a frame's cost is added atomically: both CPUs forward into the same
		 * port, and a read-modify-write of a byte count loses increments when
		 * they do so at once (the queue then under-counts, and trims start
		 * late). Only the store that restarts an empty queue can race, and it
		 * loses at most a frame of an empty queue. */
		__u64 now = bpf_ktime_get_ns();
		__u64 busy = vq->busy_ns;
		__u64 ahead = busy > now ? busy - now : 0;
		if (ahead > MAX_AHEAD_NS)
			ahead = MAX_AHEAD_NS;
		backlog = ahead * cfg->rate_Bps / 1000000000ull;

		if (cfg->drop_thresh && backlog > cfg->drop_thresh) {
			vq->backlog = backlog;
			return drop(c);
		}
		if ((cfg->flags & F_TRIM) && trimmable && backlog + len > cfg->trim_thresh &&
		    len > cfg->trim_size) {
			if (bpf_skb_change_tail(skb, cfg->trim_size, 0) == 0) {
				__u8 tc0[2];
				if (bpf_skb_load_bytes(skb, ETH_HLEN_, tc0, 2) == 0) {
					__u8 ecn = tclass & 3;
					__u8 mark = (cfg->flags & F_LASTHOP) ? MRC_DSCP_TRIMMED_LASTHOP
									     : MRC_DSCP_TRIMMED;
					__u8 ntc = (__u8)((mark << 2) | ecn);
					tc0[0] = (tc0[0] & 0xf0) | (ntc >> 4);
					tc0[1] = (tc0[1] & 0x0f) | (__u8)(ntc << 4);
					bpf_skb_store_bytes(skb, ETH_HLEN_, tc0, 2, 0);
				}
				/* The OUTER payload length is fixed, unlike on a real switch:
				 * the next hop is a Linux router, and ip6_rcv drops a packet
				 * shorter than its payload length. The inner IPv6 and UDP
				 * lengths and the checksums stay as they were, so receivers
				 * still see a trim exactly as a real switch leaves it
				 * (trimmed DSCP, lengths larger than the frame). */
				__be16 plen = bpf_htons((__u16)(cfg->trim_size - ETH_HLEN_ - 40));
				bpf_skb_store_bytes(skb, ETH_HLEN_ + 4, &plen, 2, 0);
				c->trims++;
				high = 1;
				len = skb->len;
			}
		} else if ((cfg->flags & F_ECN) && is_ip6 && backlog > cfg->ecn_thresh &&
			   (tclass & 3) != 0 && (tclass & 3) != 3) {
			__u8 tc0[2];
			if (bpf_skb_load_bytes(skb, ETH_HLEN_, tc0, 2) == 0) {
				tc0[1] |= 0x30; /* ECN bits are the low two of the traffic class */
				bpf_skb_store_bytes(skb, ETH_HLEN_, tc0, 2, 0);
				c->ce++;
			}
		}
		__u64 cost = (__u64)len * 1000000000ull / cfg->rate_Bps;
		if (busy <= now)
			vq->busy_ns = now + cost;
		else if (ahead < MAX_AHEAD_NS) /* else saturated (only with drop=never) */
			__sync_fetch_and_add(&vq->busy_ns, cost);
		vq->backlog = backlog + len;
	}

	skb->priority = high ? PRIO_HIGH : PRIO_DATA;
	c->pkts++;
	c->bytes += len;
	return TC_ACT_OK;
}

/*
 * Host port ingress: drop MRC frames in the kernel after the packet-socket tap.
 * mrcd reads them from an AF_PACKET (ETH_P_ALL) socket, which sees the frame
 * before tc ingress; left alone, the host's IPv6 stack would answer every one
 * with an ICMP error. Counts what it drops in its own mrc_cnt.drops.
 */
SEC("classifier/host_ingress")
int mrc_host_ingress(struct __sk_buff *skb)
{
	__u32 zero = 0;
	struct link_counters *c = bpf_map_lookup_elem(&mrc_cnt, &zero);
	__u8 ip6[8];
	if (skb->protocol != bpf_htons(ETH_P_IPV6) ||
	    bpf_skb_load_bytes(skb, ETH_HLEN_, ip6, sizeof(ip6)) != 0)
		return TC_ACT_OK;
	__u8 nexthdr = ip6[6];
	int mrc = nexthdr == NH_IPV6 || nexthdr == NH_ROUTING;
	if (nexthdr == NH_UDP) {
		__be16 dport;
		if (bpf_skb_load_bytes(skb, ETH_HLEN_ + 40 + 2, &dport, 2) == 0 &&
		    dport == bpf_htons(MRC_UDP_PORT))
			mrc = 1;
	}
	if (!mrc)
		return TC_ACT_OK;
	if (c)
		c->drops++;
	return TC_ACT_SHOT;
}

char _license[] SEC("license") = "GPL";
