// tun offloads with no I/O: the virtio-net header that tun puts in front of
// every packet once it is opened with IFF_VNET_HDR (TUNSETVNETHDRSZ 12), the
// checksum the kernel leaves for us to finish (CHECKSUM_PARTIAL), software
// segmentation of the TCP/UDP super-packets it hands us after TUNSETOFFLOAD
// (TSO4/TSO6/USO), and the reverse: coalescing decrypted inner TCP segments
// into super-packets we write to it (GRO).
//
// Read direction (tun -> peer):
//   [VnetHdr][super-packet] --segment()--> wire packets, each with complete
//   IP and L4 checksums, ready for encapsulate().
//   A gso NONE packet with NEEDS_CSUM is finished in place: finish_checksum().
// Write direction (peer -> tun):
//   decrypted packets --plan_gro()--> runs; per run of n > 1 packets,
//   patch_gro_head() rewrites the first packet's headers, and
//   [run.hdr][first packet][payload of 2]...[payload of n] is written with one
//   writev() or as one descriptor chain. A singleton goes out unchanged behind
//   a zero header.
//
// Everything here is pure: no allocation, no system call, and every byte it
// reads or writes is inside the spans it was given, whatever the input.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>

namespace esptun::datapath::offload {

/**
 * struct VnetHdr - struct virtio_net_hdr_v1 as tun reads and writes it.
 *
 * include/uapi/linux/virtio_net.h. With TUNSETVNETHDRSZ 12 the kernel reads
 * and writes the 10-byte struct virtio_net_hdr and leaves (older kernels) or
 * zeroes (newer) num_buffers: it means nothing to tun. The 16-bit fields are
 * in the tun's vnet byte order, which is little-endian unless TUNSETVNETBE
 * was used (drivers/net/tun.c tun_is_little_endian(),
 * tun_vnet_legacy_is_little_endian(): little-endian on little-endian hosts);
 * parse() and write() use little-endian.
 */
struct VnetHdr {
	static constexpr size_t kSize = 12;

	// flags
	static constexpr uint8_t kNeedsCsum = 1; ///< csum_start/csum_offset valid, checksum to finish
	static constexpr uint8_t kDataValid = 2; ///< checksum already verified (read side only)

	// gso_type
	static constexpr uint8_t kGsoNone = 0;
	static constexpr uint8_t kGsoTcpV4 = 1;
	static constexpr uint8_t kGsoUdp = 3; ///< UFO (IP fragmentation): not supported
	static constexpr uint8_t kGsoTcpV6 = 4;
	static constexpr uint8_t kGsoUdpL4 = 5;  ///< USO: one UDP datagram per segment
	static constexpr uint8_t kGsoEcn = 0x80; ///< TCP: the first segment carries CWR

	uint8_t flags = 0;
	uint8_t gso_type = 0;
	uint16_t hdr_len = 0;     ///< from the kernel: only a hint (skb_headlen())
	uint16_t gso_size = 0;    ///< L4 payload bytes per segment
	uint16_t csum_start = 0;  ///< offset of the L4 header from the start of the IP packet
	uint16_t csum_offset = 0; ///< offset of the checksum field from csum_start
	uint16_t num_buffers = 0;

	/// Reads the first kSize bytes of @in; nullopt if @in is shorter.
	static std::optional<VnetHdr> parse(std::span<const uint8_t> in) noexcept;
	/// Writes kSize bytes at the start of @out; false (nothing written) if @out is shorter.
	bool write(std::span<uint8_t> out) const noexcept;

	friend bool operator==(const VnetHdr&, const VnetHdr&) = default;
};

// ---------------------------------------------------------------------------
// Internet checksum (RFC 1071). A "sum" below is the ones' complement sum of
// the data read as big-endian 16-bit words, folded to 16 bits and not
// complemented; 0 and 0xffff both stand for zero. The value stored in a
// header is the complement of the sum.

/// Ones' complement addition of two folded sums.
constexpr uint16_t csum_add(uint16_t a, uint16_t b) noexcept {
	uint32_t s = uint32_t(a) + b;
	return uint16_t(s + (s >> 16));
}
/// Ones' complement subtraction: csum_add(csum_sub(s, x), x) == s.
constexpr uint16_t csum_sub(uint16_t a, uint16_t b) noexcept { return csum_add(a, uint16_t(~b)); }

/**
 * csum_partial() - ones' complement sum of @data, added to @initial.
 * @data:    bytes that start at an even offset from where the checksum starts
 *           (an odd tail byte counts as the high byte of a last word)
 * @initial: a sum to continue (0 to start)
 *
 * Adds 64-bit words into a wide accumulator and folds once at the end.
 * Return: the folded sum (not complemented).
 */
uint16_t csum_partial(std::span<const uint8_t> data, uint16_t initial = 0) noexcept;

/// The value to store in a checksum field covering @data: ~csum_partial(@data).
inline uint16_t internet_checksum(std::span<const uint8_t> data) noexcept {
	return uint16_t(~csum_partial(data));
}

/**
 * pseudo_sum_v4() - sum of the IPv4 pseudo-header (RFC 793 3.1, RFC 768).
 * @src, @dst: 4 bytes each, network order
 * @proto:     IP protocol number
 * @l4_len:    length of the L4 header plus payload
 */
uint16_t pseudo_sum_v4(const uint8_t* src, const uint8_t* dst, uint8_t proto, uint32_t l4_len) noexcept;

/**
 * pseudo_sum_v6() - sum of the IPv6 pseudo-header (RFC 8200 8.1).
 * @src, @dst: 16 bytes each, network order
 * @proto:     upper-layer protocol number
 * @l4_len:    upper-layer packet length
 */
uint16_t pseudo_sum_v6(const uint8_t* src, const uint8_t* dst, uint8_t proto, uint32_t l4_len) noexcept;

// ---------------------------------------------------------------------------
// Read direction: checksum completion and segmentation.

enum class Error : uint8_t {
	none,
	malformed,         ///< the header contradicts the packet, or the packet its own headers
	unsupported,       ///< valid, but not handled: UFO, IPv6 extension headers, fragments
	too_many_segments, ///< more segments than @out or @out_len has room for
	buffer_too_small,  ///< an output buffer is shorter than its segment
};

/// Name of an error for logs and tests.
const char* to_string(Error e) noexcept;

/**
 * finish_checksum() - complete the checksum of a CHECKSUM_PARTIAL packet in place.
 * @h:   the header the packet came with; gso_type must be NONE
 * @pkt: the IP packet (after the vnet header)
 *
 * The kernel leaves the checksum field holding the pseudo-header sum (not
 * complemented, including the L4 length: __tcp_v4_send_check(),
 * udp4_hwcsum() etc.) and asks for the ones' complement of the sum over
 * [csum_start, end of packet) to be stored at csum_start + csum_offset; a
 * result of 0 is stored as 0xffff (net/core/dev.c skb_checksum_help(),
 * CSUM_MANGLED_0). Without NEEDS_CSUM there is nothing to do.
 * Return: none, malformed (field outside the packet) or unsupported (GSO).
 */
Error finish_checksum(const VnetHdr& h, std::span<uint8_t> pkt) noexcept;

struct SegmentResult {
	Error error = Error::none;
	size_t count = 0; ///< segments written to out[0..count)
	bool ok() const noexcept { return error == Error::none; }
};

/**
 * segment() - split a GSO super-packet into wire packets.
 * @h:       the vnet header the packet came with
 * @pkt:     the IP packet (IPv4 or IPv6, after the vnet header)
 * @out:     one buffer per segment
 * @out_len: receives each segment's length
 *
 * TCPV4/TCPV6 (optionally with the ECN bit) and UDP_L4 are segmented into
 * packets of at most gso_size L4 payload bytes, each a full copy of the IP and
 * L4 headers (IP and TCP options included) followed by its payload, with
 * complete checksums. A gso NONE packet is copied to out[0], its checksum
 * finished if NEEDS_CSUM (callers that can should use finish_checksum() in
 * place instead). Nothing is written unless every segment fits.
 *
 * Per segment, as net/ipv4/af_inet.c inet_gso_segment(),
 * net/ipv4/tcp_offload.c tcp_gso_segment() and net/ipv4/udp_offload.c
 * __udp_gso_segment() do it: IPv4 total length, ID + i (the virtio header
 * cannot express SKB_GSO_TCP_FIXEDID, so IDs always increment) and header
 * checksum; IPv6 payload length; TCP sequence number + i * gso_size, FIN and
 * PSH only on the last segment, CWR only on the first; UDP length; the L4
 * checksum over the segment's own pseudo-header (a UDP result of 0 becomes
 * 0xffff, RFC 768). The checksum field's input value is ignored.
 *
 * hdr_len is a hint from the kernel (skb_headlen(), include/linux/virtio_net.h
 * virtio_net_hdr_from_skb()): it must not exceed the packet but is otherwise
 * unused; the header length comes from the packet. With NEEDS_CSUM,
 * csum_start must be the L4 header and csum_offset its checksum field.
 */
SegmentResult segment(const VnetHdr& h, std::span<const uint8_t> pkt, std::span<const std::span<uint8_t>> out,
                      std::span<size_t> out_len) noexcept;

// ---------------------------------------------------------------------------
// Write direction: TCP GRO.

/// Most packets merged into one super-packet. TCP GRO in the kernel is bounded
/// only by gro_max_size (64 KiB, skb_gro_receive()); 64 is UDP GRO's count
/// limit (UDP_GRO_CNT_MAX) and keeps one write's iovec short.
inline constexpr size_t kMaxGroSegments = 64;

struct GroOptions {
	/// Verify each packet's IPv4 header and TCP checksum before merging it.
	/// The merged packet goes to the kernel as CHECKSUM_PARTIAL, which it
	/// trusts, so merging unverified packets would hide corruption from the
	/// end host (the kernel's own GRO validates too: tcp4_gro_receive()).
	bool verify_checksums = true;
	size_t max_segments = kMaxGroSegments;
};

/**
 * struct GroRun - consecutive packets of a batch that form one write.
 * @first:     index of the first packet in the batch
 * @count:     packets in the run; 1 for a packet that stays as it is
 * @hdr:       the vnet header to write in front (all zero for a singleton)
 * @hdr_bytes: IP plus TCP header length; the payload of packets 2..n starts here
 * @total_len: length of the merged IP packet
 * @last_flags: TCP PSH/FIN of the last packet, for patch_gro_head()
 */
struct GroRun {
	size_t first = 0;
	size_t count = 0;
	VnetHdr hdr;
	size_t hdr_bytes = 0;
	size_t total_len = 0;
	uint8_t last_flags = 0;
};

/**
 * tcp_flow_key() - a key that is the same for every packet of one TCP flow
 * (addresses and ports, one direction) and rarely for two flows; 0 for a
 * packet GRO could not take anyway: not TCP, an IPv4 fragment, TCP behind
 * an IPv6 extension header, too short for its ports. A collision only puts
 * two flows in one group, and each keeps its order.
 */
uint64_t tcp_flow_key(std::span<const uint8_t> pkt) noexcept;

/**
 * plan_gro() - find the runs of a batch that can be written as TCP super-packets.
 * @pkts: decrypted inner IP packets in arrival order, each exactly its IP length
 * @runs: receives the runs in order; each packet is in exactly one run
 * @opt:  checks and limits
 *
 * Packets j > 0 join the run of packet 0 as net/ipv4/af_inet.c
 * inet_gro_receive(), net/ipv6/ip6_offload.c ipv6_gro_receive() and
 * net/ipv4/tcp_offload.c tcp_gro_receive() would let them (tcp_gro_receive()
 * compares the 32-bit word of data offset, flags and window, the ACK number
 * and every option byte, timestamps included):
 *  - same IP version, addresses, protocol TCP; IPv4: IHL 5, not a fragment,
 *    same TOS, TTL and DF, ID = first ID + j (or DF and the same ID);
 *    IPv6: same traffic class, flow label and hop limit, no extension header;
 *  - same ports, ACK number, window, data offset and option bytes;
 *  - flags ACK (ECE allowed if on all): no SYN, RST, URG or CWR anywhere;
 *    PSH or FIN ends the run after the packet that carries it;
 *  - sequence numbers back to back; every payload equal to the first's,
 *    except the last, which may be shorter (and then ends the run); no empty
 *    payloads;
 *  - at most @opt.max_segments packets and 65535 bytes of merged IP packet.
 * Return: the number of runs written. If @runs is shorter than @pkts it may
 * fill up; the packets after the last run are then not planned (plan them
 * in another call).
 */
size_t plan_gro(std::span<const std::span<uint8_t>> pkts, std::span<GroRun> runs,
                const GroOptions& opt = {}) noexcept;

/**
 * patch_gro_head() - rewrite the first packet of a run as the super-packet's headers.
 * @run:  a run from plan_gro() for the same batch
 * @head: the run's first packet (pkts[run.first])
 *
 * Sets the IPv4 total length and header checksum or the IPv6 payload length
 * to the merged length, ORs the last packet's PSH/FIN into the TCP flags, and
 * puts the pseudo-header sum of the merged TCP length (not complemented) in
 * the TCP checksum field: a CHECKSUM_PARTIAL packet, as tcp4_gro_complete()
 * leaves one and as tcp_gso_segment() expects it if the kernel segments it
 * again (it adjusts that sum from the merged length to each segment's).
 * A singleton is left as it is.
 * Return: false if @head does not match @run (nothing written).
 */
bool patch_gro_head(const GroRun& run, std::span<uint8_t> head) noexcept;

/// The bytes of packet @pkt (2nd or later of @run) that follow the head in the write.
inline std::span<const uint8_t> gro_payload(const GroRun& run, std::span<const uint8_t> pkt) noexcept {
	return pkt.size() >= run.hdr_bytes ? pkt.subspan(run.hdr_bytes) : std::span<const uint8_t>{};
}

} // namespace esptun::datapath::offload
