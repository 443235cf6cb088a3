//! DHCP messages on the container's interface through a packet socket.
//!
//! Why `AF_PACKET` and not a UDP socket bound to the device: while a lease
//! is being acquired the interface has no address, and when the IPAM
//! result was never applied it has none while renewing either. A UDP
//! socket then depends on the kernel's input path: a broadcast reply from
//! a server address the container has no route to is dropped by
//! reverse-path filtering (`rp_filter`, set in many container images), and
//! nothing unicast to the offered address is accepted. A packet socket
//! bound to the interface sees every IPv4 frame on it, whatever the
//! interface's addresses and the namespace's sysctls, as the reference's
//! raw client does. Sending, the kernel adds the Ethernet header; this
//! module adds IPv4 and UDP headers around the DHCP message (dhcproto
//! encodes the message itself).

use std::io;
use std::mem;
use std::net::Ipv4Addr;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::time::Instant;

use dhcproto::v4::Message;
use dhcproto::{Decodable, Encodable};

pub const CLIENT_PORT: u16 = 68;
pub const SERVER_PORT: u16 = 67;
pub const BROADCAST_MAC: [u8; 6] = [0xff; 6];
const ETH_P_IP: u16 = 0x0800;
const IPPROTO_UDP: u8 = 17;
const IPV4_HEADER_BYTES: usize = 20;
const UDP_HEADER_BYTES: usize = 8;
/// Large enough for any frame on a standard-MTU or jumbo link.
const RECEIVE_BUFFER_BYTES: usize = 9216;

/// A DHCP reply and the link-layer address it came from.
pub struct Received {
    pub message: Message,
    pub source_mac: [u8; 6],
}

/// A packet socket bound to one interface of the namespace it was made in.
pub struct PacketSocket {
    fd: OwnedFd,
    ifindex: i32,
}

fn link_address(ifindex: i32, mac: [u8; 6]) -> libc::sockaddr_ll {
    // SAFETY: sockaddr_ll is plain data; all-zero is a valid value.
    let mut address: libc::sockaddr_ll = unsafe { mem::zeroed() };
    address.sll_family = libc::AF_PACKET as u16;
    address.sll_protocol = ETH_P_IP.to_be();
    address.sll_ifindex = ifindex;
    address.sll_halen = 6;
    address.sll_addr[..6].copy_from_slice(&mac);
    address
}

impl PacketSocket {
    /// Opens the socket on interface `ifindex` of the calling thread's
    /// network namespace (it stays tied to that namespace).
    pub fn open(ifindex: u32) -> io::Result<PacketSocket> {
        let ifindex = i32::try_from(ifindex).map_err(|_| {
            io::Error::new(io::ErrorKind::InvalidInput, "interface index too large")
        })?;
        // SAFETY: plain socket(2) call; the result is checked.
        let raw = unsafe {
            libc::socket(
                libc::AF_PACKET,
                libc::SOCK_DGRAM | libc::SOCK_CLOEXEC,
                i32::from(ETH_P_IP.to_be()),
            )
        };
        if raw < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `raw` is a new descriptor owned by nothing else.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        let address = link_address(ifindex, [0; 6]);
        // SAFETY: `address` is a valid sockaddr_ll of the given size.
        let rc = unsafe {
            libc::bind(
                fd.as_raw_fd(),
                (&address as *const libc::sockaddr_ll).cast(),
                mem::size_of::<libc::sockaddr_ll>() as libc::socklen_t,
            )
        };
        if rc < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(PacketSocket { fd, ifindex })
    }

    /// Sends `message` from `source`:68 to `destination`:67 in a frame to
    /// `destination_mac`.
    pub fn send(
        &self,
        message: &Message,
        source: Ipv4Addr,
        destination: Ipv4Addr,
        destination_mac: [u8; 6],
    ) -> io::Result<()> {
        let payload = message
            .to_vec()
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e.to_string()))?;
        let packet = udp_packet(&payload, source, destination);
        let address = link_address(self.ifindex, destination_mac);
        // SAFETY: the buffer and address are valid for the lengths given.
        let sent = unsafe {
            libc::sendto(
                self.fd.as_raw_fd(),
                packet.as_ptr().cast(),
                packet.len(),
                0,
                (&address as *const libc::sockaddr_ll).cast(),
                mem::size_of::<libc::sockaddr_ll>() as libc::socklen_t,
            )
        };
        if sent < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }

    /// The next DHCP reply (UDP to port 68) that `accept` takes, or `None`
    /// once `deadline` passes. Frames this host sent and anything that is
    /// not a well-formed DHCP message are skipped.
    pub fn receive(
        &self,
        deadline: Instant,
        accept: &dyn Fn(&Message) -> bool,
    ) -> io::Result<Option<Received>> {
        let mut buffer = vec![0u8; RECEIVE_BUFFER_BYTES];
        loop {
            let now = Instant::now();
            if now >= deadline {
                return Ok(None);
            }
            let wait_ms = (deadline - now).as_millis().clamp(1, i32::MAX as u128) as i32;
            let mut poll_fd = libc::pollfd {
                fd: self.fd.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            };
            // SAFETY: one valid pollfd.
            let ready = unsafe { libc::poll(&mut poll_fd, 1, wait_ms) };
            if ready < 0 {
                let error = io::Error::last_os_error();
                if error.kind() == io::ErrorKind::Interrupted {
                    continue;
                }
                return Err(error);
            }
            if ready == 0 {
                continue;
            }
            // SAFETY: all-zero sockaddr_ll is valid; recvfrom fills it.
            let mut from: libc::sockaddr_ll = unsafe { mem::zeroed() };
            let mut from_len = mem::size_of::<libc::sockaddr_ll>() as libc::socklen_t;
            // SAFETY: buffer and address are valid for the lengths given.
            let length = unsafe {
                libc::recvfrom(
                    self.fd.as_raw_fd(),
                    buffer.as_mut_ptr().cast(),
                    buffer.len(),
                    libc::MSG_DONTWAIT,
                    (&mut from as *mut libc::sockaddr_ll).cast(),
                    &mut from_len,
                )
            };
            if length < 0 {
                let error = io::Error::last_os_error();
                if matches!(
                    error.kind(),
                    io::ErrorKind::Interrupted | io::ErrorKind::WouldBlock
                ) {
                    continue;
                }
                return Err(error);
            }
            if from.sll_pkttype == libc::PACKET_OUTGOING {
                continue;
            }
            let Some(payload) = udp_payload(&buffer[..length as usize], CLIENT_PORT) else {
                continue;
            };
            let Ok(message) = Message::from_bytes(payload) else {
                continue;
            };
            if !accept(&message) {
                continue;
            }
            let mut source_mac = [0u8; 6];
            source_mac.copy_from_slice(&from.sll_addr[..6]);
            return Ok(Some(Received {
                message,
                source_mac,
            }));
        }
    }
}

/// The Internet checksum (RFC 1071) of `data`, starting from `sum`.
fn checksum(data: &[u8], mut sum: u32) -> u16 {
    let mut chunks = data.chunks_exact(2);
    for pair in &mut chunks {
        sum += u32::from(u16::from_be_bytes([pair[0], pair[1]]));
    }
    if let [last] = chunks.remainder() {
        sum += u32::from(*last) << 8;
    }
    while sum >> 16 != 0 {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    !(sum as u16)
}

/// An IPv4 packet carrying `payload` in UDP from port 68 to port 67.
pub fn udp_packet(payload: &[u8], source: Ipv4Addr, destination: Ipv4Addr) -> Vec<u8> {
    let udp_length = (UDP_HEADER_BYTES + payload.len()) as u16;
    let total_length = IPV4_HEADER_BYTES as u16 + udp_length;
    let mut packet = Vec::with_capacity(usize::from(total_length));
    packet.extend_from_slice(&[0x45, 0x10]);
    packet.extend_from_slice(&total_length.to_be_bytes());
    packet.extend_from_slice(&[0, 0, 0, 0, 64, IPPROTO_UDP, 0, 0]);
    packet.extend_from_slice(&source.octets());
    packet.extend_from_slice(&destination.octets());
    let header_sum = checksum(&packet[..IPV4_HEADER_BYTES], 0);
    packet[10..12].copy_from_slice(&header_sum.to_be_bytes());

    let mut udp = Vec::with_capacity(usize::from(udp_length));
    udp.extend_from_slice(&CLIENT_PORT.to_be_bytes());
    udp.extend_from_slice(&SERVER_PORT.to_be_bytes());
    udp.extend_from_slice(&udp_length.to_be_bytes());
    udp.extend_from_slice(&[0, 0]);
    udp.extend_from_slice(payload);
    // The pseudo-header: addresses, protocol, UDP length.
    let mut pseudo = Vec::with_capacity(12);
    pseudo.extend_from_slice(&source.octets());
    pseudo.extend_from_slice(&destination.octets());
    pseudo.extend_from_slice(&[0, IPPROTO_UDP]);
    pseudo.extend_from_slice(&udp_length.to_be_bytes());
    let pseudo_sum: u32 = pseudo
        .chunks_exact(2)
        .map(|p| u32::from(u16::from_be_bytes([p[0], p[1]])))
        .sum();
    let mut udp_sum = checksum(&udp, pseudo_sum);
    if udp_sum == 0 {
        // 0 means "no checksum"; a computed 0 is sent as all ones.
        udp_sum = 0xffff;
    }
    udp[6..8].copy_from_slice(&udp_sum.to_be_bytes());
    packet.extend_from_slice(&udp);
    packet
}

/// The UDP payload of an IPv4 packet to `port`. Checksums are not
/// verified: frames between veths carry partial checksums.
pub fn udp_payload(packet: &[u8], port: u16) -> Option<&[u8]> {
    let first = *packet.first()?;
    if first >> 4 != 4 {
        return None;
    }
    let header_length = usize::from(first & 0x0f) * 4;
    if header_length < IPV4_HEADER_BYTES || *packet.get(9)? != IPPROTO_UDP {
        return None;
    }
    let total_length = usize::from(u16::from_be_bytes([*packet.get(2)?, *packet.get(3)?]));
    let packet = packet.get(..total_length.min(packet.len()))?;
    // Fragments (offset or more-fragments set) are not reassembled.
    if u16::from_be_bytes([*packet.get(6)?, *packet.get(7)?]) & 0x3fff != 0 {
        return None;
    }
    let udp = packet.get(header_length..)?;
    let destination_port = u16::from_be_bytes([*udp.get(2)?, *udp.get(3)?]);
    if destination_port != port {
        return None;
    }
    let udp_length = usize::from(u16::from_be_bytes([*udp.get(4)?, *udp.get(5)?]));
    if udp_length < UDP_HEADER_BYTES {
        return None;
    }
    udp.get(UDP_HEADER_BYTES..udp_length.min(udp.len()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn packet_round_trip_and_checksums() {
        let payload = b"hello dhcp";
        let packet = udp_packet(payload, Ipv4Addr::UNSPECIFIED, Ipv4Addr::BROADCAST);
        // A header with its checksum in place sums to zero.
        assert_eq!(checksum(&packet[..20], 0), 0);
        assert_eq!(packet.len(), 20 + 8 + payload.len());
        // Our own packet goes to port 67, so it is not taken as a reply.
        assert_eq!(udp_payload(&packet, CLIENT_PORT), None);
        assert_eq!(udp_payload(&packet, SERVER_PORT), Some(&payload[..]));
    }

    #[test]
    fn malformed_packets_are_skipped() {
        let packet = udp_packet(b"x", Ipv4Addr::LOCALHOST, Ipv4Addr::LOCALHOST);
        for cut in 0..packet.len() {
            // Shorter than its headers or its length fields: never a panic.
            let _ = udp_payload(&packet[..cut], SERVER_PORT);
        }
        let mut not_udp = packet.clone();
        not_udp[9] = 6;
        assert_eq!(udp_payload(&not_udp, SERVER_PORT), None);
        let mut fragment = packet;
        fragment[6] = 0x20;
        assert_eq!(udp_payload(&fragment, SERVER_PORT), None);
    }
}

#[cfg(test)]
mod decode_robustness {
    use super::*;
    use dhcproto::v4::{DhcpOption, MessageType};

    /// Replies come from the network: every truncation and byte flip of a
    /// real acknowledgement must decode or fail, never panic.
    #[test]
    fn mangled_replies_do_not_panic() {
        let mut ack = Message::new_with_id(
            7,
            Ipv4Addr::UNSPECIFIED,
            Ipv4Addr::new(192, 168, 1, 5),
            Ipv4Addr::UNSPECIFIED,
            Ipv4Addr::UNSPECIFIED,
            &[2, 0, 0, 0, 0, 1],
        );
        let opts = ack.opts_mut();
        opts.insert(DhcpOption::MessageType(MessageType::Ack));
        opts.insert(DhcpOption::SubnetMask(Ipv4Addr::new(255, 255, 255, 0)));
        opts.insert(DhcpOption::Router(vec![Ipv4Addr::new(192, 168, 1, 1)]));
        opts.insert(DhcpOption::AddressLeaseTime(120));
        opts.insert(DhcpOption::StaticRoutingTable(vec![(
            Ipv4Addr::new(10, 0, 0, 0),
            Ipv4Addr::new(10, 1, 2, 3),
        )]));
        let bytes = ack.to_vec().unwrap();
        for cut in 0..bytes.len() {
            let _ = Message::from_bytes(&bytes[..cut]);
        }
        for at in 236..bytes.len() {
            for value in [0u8, 1, 3, 4, 5, 33, 121, 255] {
                let mut mangled = bytes.clone();
                mangled[at] = value;
                let _ = Message::from_bytes(&mangled);
            }
        }
    }
}
