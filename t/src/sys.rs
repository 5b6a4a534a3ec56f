//! The few system calls std does not expose, each wrapped once.
//!
//! Every `unsafe` block of the harness lives in this file.

use std::fs::File;
use std::io;
use std::net::{Ipv4Addr, TcpListener, TcpStream};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::time::Duration;

fn check(ret: libc::c_int) -> io::Result<libc::c_int> {
    if ret < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(ret)
    }
}

fn set_int_opt(
    fd: RawFd,
    level: libc::c_int,
    name: libc::c_int,
    value: libc::c_int,
) -> io::Result<()> {
    // SAFETY: `value` is a live c_int and the length passed is its size.
    let ret = unsafe {
        libc::setsockopt(
            fd,
            level,
            name,
            (&value as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    check(ret).map(drop)
}

/// bind(2) or connect(2) (`call`) of `fd` to `ip:port`.
fn with_sockaddr_in(
    fd: RawFd,
    ip: Ipv4Addr,
    port: u16,
    call: unsafe extern "C" fn(libc::c_int, *const libc::sockaddr, libc::socklen_t) -> libc::c_int,
) -> io::Result<()> {
    let addr = libc::sockaddr_in {
        sin_family: libc::AF_INET as libc::sa_family_t,
        sin_port: port.to_be(),
        sin_addr: libc::in_addr {
            s_addr: u32::from(ip).to_be(),
        },
        sin_zero: [0; 8],
    };
    // SAFETY: `addr` is a valid sockaddr_in and the length is its size.
    let ret = unsafe {
        call(
            fd,
            (&addr as *const libc::sockaddr_in).cast(),
            std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t,
        )
    };
    check(ret).map(drop)
}

/// A TCP socket bound to `ip:port`, not yet listening, with
/// `SO_REUSEADDR` if `reuse`.
fn bound_tcp_socket_at(ip: Ipv4Addr, port: u16, reuse: bool) -> io::Result<OwnedFd> {
    // SAFETY: plain socket(2) call; the result is checked before use.
    let fd =
        check(unsafe { libc::socket(libc::AF_INET, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0) })?;
    // SAFETY: `fd` was just returned by socket(2) and is owned by nobody else.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    if reuse {
        set_int_opt(fd.as_raw_fd(), libc::SOL_SOCKET, libc::SO_REUSEADDR, 1)?;
    }
    with_sockaddr_in(fd.as_raw_fd(), ip, port, libc::bind)?;
    Ok(fd)
}

/// A TCP socket bound to `127.0.0.1:port`, not yet listening, with
/// `SO_REUSEADDR` if `reuse`.
pub(crate) fn bound_tcp_socket(port: u16, reuse: bool) -> io::Result<OwnedFd> {
    bound_tcp_socket_at(Ipv4Addr::LOCALHOST, port, reuse)
}

/// A blocking TCP connection from `src` (any port; on Linux any
/// 127.0.0.0/8 address works on loopback) to `127.0.0.1:port`.
pub(crate) fn connect_from(src: Ipv4Addr, port: u16) -> io::Result<TcpStream> {
    let fd = bound_tcp_socket_at(src, 0, false)?;
    // A blocking connect on loopback.
    with_sockaddr_in(fd.as_raw_fd(), Ipv4Addr::LOCALHOST, port, libc::connect)?;
    Ok(TcpStream::from(fd))
}

/// Listening socket on a kernel-chosen loopback port whose port stays
/// reserved even while it is "un-listened" (see [`unlisten`]).
///
/// The kernel keeps a port bound across `connect(AF_UNSPEC)` only when the
/// port was asked for explicitly at bind time. So: bind a first socket to
/// port 0 to learn a free port, bind the real socket to that port explicitly
/// while the first still holds it (both have `SO_REUSEADDR` and neither
/// listens, which Linux allows), then drop the first. No window in which
/// another process could take the port.
pub fn reserved_listener(backlog: i32) -> io::Result<TcpListener> {
    let probe = bound_tcp_socket(0, true)?;
    let port = local_port(probe.as_raw_fd())?;
    let fd = bound_tcp_socket(port, true)?;
    drop(probe);
    // SAFETY: `fd` is a valid, bound stream socket.
    check(unsafe { libc::listen(fd.as_raw_fd(), backlog) })?;
    Ok(TcpListener::from(fd))
}

fn local_port(fd: RawFd) -> io::Result<u16> {
    // SAFETY: zeroed sockaddr_in is a valid value; getsockname writes at most `len` bytes.
    let mut addr: libc::sockaddr_in = unsafe { std::mem::zeroed() };
    let mut len = std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t;
    // SAFETY: pointers to live locals with the matching length.
    let ret =
        unsafe { libc::getsockname(fd, (&mut addr as *mut libc::sockaddr_in).cast(), &mut len) };
    check(ret)?;
    Ok(u16::from_be(addr.sin_port))
}

/// Stop listening without giving up the port: `connect(AF_UNSPEC)` on a
/// listening TCP socket moves it back to CLOSE (documented in connect(2) as
/// "dissolving the association"). New connections get RST (ECONNREFUSED),
/// connections waiting in the accept queue are reset, and a later
/// [`relisten`] listens on the same port again.
pub fn unlisten(listener: &TcpListener) -> io::Result<()> {
    // SAFETY: zeroed sockaddr is valid; only sa_family (AF_UNSPEC = 0) matters.
    let mut addr: libc::sockaddr = unsafe { std::mem::zeroed() };
    addr.sa_family = libc::AF_UNSPEC as libc::sa_family_t;
    // SAFETY: pointer to a live sockaddr with its size.
    let ret = unsafe {
        libc::connect(
            listener.as_raw_fd(),
            &addr,
            std::mem::size_of::<libc::sockaddr>() as libc::socklen_t,
        )
    };
    check(ret).map(drop)
}

/// Listen again on a socket that [`unlisten`] closed.
pub fn relisten(listener: &TcpListener, backlog: i32) -> io::Result<()> {
    // SAFETY: listen(2) on a socket we own.
    check(unsafe { libc::listen(listener.as_raw_fd(), backlog) }).map(drop)
}

/// `SO_LINGER {on, 0}`: the next close of this socket sends RST instead of FIN.
pub fn set_linger_zero(stream: &TcpStream) -> io::Result<()> {
    let linger = libc::linger {
        l_onoff: 1,
        l_linger: 0,
    };
    // SAFETY: `linger` is a live struct and the length passed is its size.
    let ret = unsafe {
        libc::setsockopt(
            stream.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_LINGER,
            (&linger as *const libc::linger).cast(),
            std::mem::size_of::<libc::linger>() as libc::socklen_t,
        )
    };
    check(ret).map(drop)
}

/// Readiness reported by [`poll`] for one descriptor.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Ready {
    /// Readable (or a listener with a pending connection).
    pub readable: bool,
    /// Peer closed its side (`POLLRDHUP`), hung up or errored.
    pub closed: bool,
}

/// What to wait for on one descriptor.
#[derive(Clone, Copy, Debug)]
pub enum Interest {
    /// `POLLIN`.
    Read,
    /// Only the peer closing (`POLLRDHUP`); incoming data does not wake.
    Close,
}

/// poll(2) over `fds`; `None` waits forever. Returns one [`Ready`] per fd.
pub fn poll(fds: &[(RawFd, Interest)], timeout: Option<Duration>) -> io::Result<Vec<Ready>> {
    let mut pfds: Vec<libc::pollfd> = fds
        .iter()
        .map(|&(fd, interest)| libc::pollfd {
            fd,
            events: match interest {
                Interest::Read => libc::POLLIN,
                Interest::Close => libc::POLLRDHUP,
            },
            revents: 0,
        })
        .collect();
    let ms = timeout.map_or(-1, |t| t.as_millis().min(i32::MAX as u128) as libc::c_int);
    loop {
        // SAFETY: `pfds` is a live, correctly sized array of pollfd.
        let ret = unsafe { libc::poll(pfds.as_mut_ptr(), pfds.len() as libc::nfds_t, ms) };
        match check(ret) {
            Ok(_) => break,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        }
    }
    Ok(pfds
        .iter()
        .map(|p| Ready {
            readable: p.revents & libc::POLLIN != 0,
            closed: p.revents & (libc::POLLRDHUP | libc::POLLHUP | libc::POLLERR | libc::POLLNVAL)
                != 0,
        })
        .collect())
}

/// Send `sig` to `pid`. Errors (e.g. ESRCH) are returned, not hidden.
pub fn kill(pid: u32, sig: libc::c_int) -> io::Result<()> {
    // SAFETY: kill(2) has no memory-safety preconditions.
    check(unsafe { libc::kill(pid as libc::pid_t, sig) }).map(drop)
}

/// Ask the kernel to send `sig` to the calling process when its parent
/// thread exits. Meant for `CommandExt::pre_exec`, where only
/// async-signal-safe calls are allowed; prctl(2) is one.
pub fn set_parent_death_signal(sig: libc::c_int) -> io::Result<()> {
    // SAFETY: prctl(PR_SET_PDEATHSIG) takes the signal number as an integer.
    check(unsafe { libc::prctl(libc::PR_SET_PDEATHSIG, sig as libc::c_ulong, 0, 0, 0) }).map(drop)
}

/// Take an exclusive lock on byte `offset` of `file` if no other open file
/// description holds one (an open file description lock, `F_OFD_SETLK`:
/// it is not waited for, and it lasts until `file` is closed, at the
/// latest when the process exits); whether this one now holds it.
pub(crate) fn try_lock_byte(file: &File, offset: u64) -> io::Result<bool> {
    // SAFETY: all-zero is a valid `struct flock` (l_pid must be 0 for OFD locks).
    let mut lock: libc::flock = unsafe { std::mem::zeroed() };
    lock.l_type = libc::F_WRLCK as libc::c_short;
    lock.l_whence = libc::SEEK_SET as libc::c_short;
    lock.l_start = offset as libc::off_t;
    lock.l_len = 1;
    // SAFETY: fcntl(F_OFD_SETLK) reads the live `lock` and nothing else.
    let ret = unsafe { libc::fcntl(file.as_raw_fd(), libc::F_OFD_SETLK, &lock) };
    match check(ret) {
        Ok(_) => Ok(true),
        Err(e) if matches!(e.raw_os_error(), Some(libc::EAGAIN | libc::EACCES)) => Ok(false),
        Err(e) => Err(e),
    }
}
