//! Who is on the other end of a loopback connection: the uid owning the connecting socket,
//! asked of the kernel's socket diagnostics (`NETLINK_SOCK_DIAG`) for that one socket.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};

use netlink_packet_core::{NLM_F_REQUEST, NetlinkHeader, NetlinkMessage, NetlinkPayload};
use netlink_packet_sock_diag::SockDiagMessage;
use netlink_packet_sock_diag::constants::{AF_INET, IPPROTO_TCP};
use netlink_packet_sock_diag::inet::{ExtensionFlags, InetRequest, SocketId, StateFlags};
use netlink_sys::{Socket, SocketAddr as NetlinkAddr, protocols::NETLINK_SOCK_DIAG};

/// The uid owning the socket at `peer` connected to 127.0.0.1:`port`; `None` when the kernel
/// knows no such connection (or cannot be asked).
pub(crate) fn owner_of(peer: SocketAddr, port: u16) -> Option<u32> {
    let SocketAddr::V4(peer) = peer else { return None };
    let socket_id = SocketId {
        source_port: peer.port(),
        destination_port: port,
        source_address: IpAddr::V4(*peer.ip()),
        destination_address: IpAddr::V4(Ipv4Addr::LOCALHOST),
        interface_id: 0,
        // Any socket with these addresses (the kernel's INET_DIAG_NOCOOKIE).
        cookie: [0xff; 8],
    };
    let request = InetRequest {
        family: AF_INET,
        protocol: IPPROTO_TCP,
        extensions: ExtensionFlags::empty(),
        states: StateFlags::all(),
        socket_id,
    };
    let mut header = NetlinkHeader::default();
    header.flags = NLM_F_REQUEST;
    let mut message = NetlinkMessage::new(header, SockDiagMessage::InetRequest(request).into());
    message.finalize();
    let mut bytes = vec![0; message.buffer_len()];
    message.serialize(&mut bytes);

    let mut socket = Socket::new(NETLINK_SOCK_DIAG).ok()?;
    socket.bind_auto().ok()?;
    socket.connect(&NetlinkAddr::new(0, 0)).ok()?;
    socket.send(&bytes, 0).ok()?;
    let mut answer = Vec::with_capacity(8192);
    socket.recv(&mut answer, 0).ok()?;
    match NetlinkMessage::<SockDiagMessage>::deserialize(&answer).ok()?.payload {
        NetlinkPayload::InnerMessage(SockDiagMessage::InetResponse(response)) => Some(response.header.uid),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_owner_of_a_loopback_connection_is_its_creator() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let client = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
        let (_, peer) = listener.accept().unwrap();
        assert_eq!(owner_of(peer, port), Some(nix::unistd::geteuid().as_raw()));
        assert_eq!(owner_of(peer, port.wrapping_add(1)), None, "a connection to another port");
        drop(client);
    }
}
