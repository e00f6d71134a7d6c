//! A network namespace of the worker's making, for a task without network that has a
//! credentials proxy: the proxy's listener is made inside it (loopback up), and each of the
//! run's sandboxes joins it. Needs root (`CAP_SYS_ADMIN`).

use std::os::fd::{AsRawFd, OwnedFd};

/// A namespace with only loopback, and a listener on 127.0.0.1 in it.
pub(crate) struct PrivateNetwork {
    /// The namespace (`/proc/thread-self/ns/net` of the thread that made it).
    pub(crate) namespace: OwnedFd,
    /// Bound to 127.0.0.1 on a free port, inside the namespace.
    pub(crate) listener: std::net::TcpListener,
}

/// Makes the namespace on a thread of its own: a namespace belongs to the thread that
/// enters it, and the thread ends right after (sockets and the descriptor keep it alive).
pub(crate) fn private_network() -> std::io::Result<PrivateNetwork> {
    std::thread::spawn(|| {
        nix::sched::unshare(nix::sched::CloneFlags::CLONE_NEWNET)?;
        loopback_up()?;
        let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
        let namespace = std::fs::File::open("/proc/thread-self/ns/net")?.into();
        Ok(PrivateNetwork { namespace, listener })
    })
    .join()
    .unwrap_or_else(|_| Err(std::io::Error::other("making a network namespace panicked")))
}

/// Brings up `lo` (a new namespace has it down, so nothing could connect to the listener).
fn loopback_up() -> std::io::Result<()> {
    use nix::libc;
    let socket = std::net::UdpSocket::bind("0.0.0.0:0")?;
    // SAFETY: `ifreq` is plain data, zeroed is valid; the name fits with its terminating NUL.
    let mut request: libc::ifreq = unsafe { std::mem::zeroed() };
    for (slot, byte) in request.ifr_name.iter_mut().zip(b"lo\0") {
        *slot = *byte as libc::c_char;
    }
    // SAFETY: a valid socket and a valid `ifreq` for SIOCGIFFLAGS / SIOCSIFFLAGS.
    unsafe {
        if libc::ioctl(socket.as_raw_fd(), libc::SIOCGIFFLAGS, &mut request) < 0 {
            return Err(std::io::Error::last_os_error());
        }
        request.ifr_ifru.ifru_flags |= libc::IFF_UP as libc::c_short;
        if libc::ioctl(socket.as_raw_fd(), libc::SIOCSIFFLAGS, &request) < 0 {
            return Err(std::io::Error::last_os_error());
        }
    }
    Ok(())
}

/// Moves the calling process into `namespace`: for the child between fork and exec.
pub(crate) fn join(namespace: std::os::fd::RawFd) -> std::io::Result<()> {
    // SAFETY: the descriptor is the run's namespace, borrowed by its sandbox, so still open.
    let namespace = unsafe { std::os::fd::BorrowedFd::borrow_raw(namespace) };
    nix::sched::setns(namespace, nix::sched::CloneFlags::CLONE_NEWNET).map_err(std::io::Error::from)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_private_network_has_a_listener_reachable_only_inside_it() {
        if !nix::unistd::geteuid().is_root() {
            // Without root no namespace can be made; the worker refuses such runs (run.rs).
            assert!(private_network().is_err());
            return;
        }
        let network = private_network().unwrap();
        let port = network.listener.local_addr().unwrap().port();
        // From the worker's own namespace the port is not this listener's.
        let outside = std::net::TcpStream::connect(("127.0.0.1", port));
        if let Ok(stream) = outside {
            network.listener.set_nonblocking(true).unwrap();
            assert!(network.listener.accept().is_err(), "reached from outside: {stream:?}");
        }
        let fd = network.namespace.as_raw_fd();
        let inside = std::thread::spawn(move || {
            join(fd).unwrap();
            std::net::TcpStream::connect(("127.0.0.1", port)).map(drop)
        })
        .join()
        .unwrap();
        assert!(inside.is_ok(), "{inside:?}");
    }
}
