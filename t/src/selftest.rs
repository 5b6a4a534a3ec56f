//! Self-tests of the backends and clients: each mode does to a real client
//! what its documentation says. No nginx needed.

use std::io::{ErrorKind, Read, Write};
use std::net::{Ipv4Addr, TcpStream, UdpSocket};
use std::time::Duration;

use crate::*;

const SHORT: Duration = Duration::from_millis(300);
const WAIT: Duration = Duration::from_secs(5);

fn connect(port: u16) -> std::io::Result<TcpStream> {
    let s = TcpStream::connect((Ipv4Addr::LOCALHOST, port))?;
    s.set_read_timeout(Some(WAIT))?;
    Ok(s)
}

/// Read once with a short timeout; `None` means nothing happened (no data,
/// no EOF, no error) within it.
fn read_briefly(s: &mut TcpStream) -> Option<std::io::Result<usize>> {
    s.set_read_timeout(Some(SHORT)).unwrap();
    let mut buf = [0u8; 64];
    match s.read(&mut buf) {
        Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => None,
        r => Some(r),
    }
}

#[test]
fn serve_answers_http_with_port() {
    let b = Backend::start();
    let r = http_get(b.port(), "/anything").unwrap();
    assert_eq!(r.status, 200);
    assert_eq!(r.text(), b.port().to_string());
    assert_eq!(
        r.header("X-Backend-Port"),
        Some(b.port().to_string().as_str())
    );
    let head = http_request(b.port(), "HEAD", "/", &[], b"").unwrap();
    assert_eq!((head.status, head.body.len()), (200, 0));
    let post = http_request(b.port(), "POST", "/", &[], b"some body").unwrap();
    assert_eq!(post.text(), b.port().to_string());
    assert_eq!(b.accepted(), 3);
    assert_eq!(b.requests(), 3);
    assert_eq!(b.accept_times().len(), 3);
}

#[test]
fn serve_answers_raw_payload_with_port() {
    let b = Backend::start();
    assert_eq!(
        stream_roundtrip(b.port(), b"hello\n").unwrap(),
        b.port().to_string().as_bytes()
    );
    // Only capital letters: could be an HTTP method; answered after a pause.
    assert_eq!(
        stream_roundtrip(b.port(), b"PING").unwrap(),
        b.port().to_string().as_bytes()
    );
    assert_eq!(b.requests(), 2);
}

#[test]
fn serve_keeps_idle_connection_open() {
    let b = Backend::start();
    let mut c = connect(b.port()).unwrap();
    assert!(
        read_briefly(&mut c).is_none(),
        "idle connection must stay open"
    );
    wait_until(WAIT, "one open connection", || b.open_connections() == 1);
    drop(c);
    wait_until(WAIT, "connection gone after client close", || {
        b.open_connections() == 0
    });
    assert_eq!(b.requests(), 0);
}

#[test]
fn close_connections_fin_and_rst() {
    let b = Backend::start();
    let mut c = connect(b.port()).unwrap();
    wait_until(WAIT, "served connection registered", || {
        b.open_connections() == 1
    });
    b.close_connections(Close::Fin);
    assert_eq!(c.read(&mut [0u8; 8]).unwrap(), 0, "expected EOF");

    b.set_mode(Mode::Hang);
    let mut h = connect(b.port()).unwrap();
    let mut s = {
        b.set_mode(Mode::Serve);
        connect(b.port()).unwrap()
    };
    wait_until(WAIT, "hung + served connections", || {
        b.open_connections() == 2
    });
    b.close_connections(Close::Rst);
    for conn in [&mut h, &mut s] {
        let e = conn.read(&mut [0u8; 8]).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::ConnectionReset, "{e}");
    }
    wait_until(WAIT, "no connections", || b.open_connections() == 0);
}

#[test]
fn refuse_refuses_and_comes_back_on_same_port() {
    let b = Backend::start();
    let port = b.port();
    b.set_mode(Mode::Refuse);
    assert_eq!(b.mode(), Mode::Refuse);
    let e = TcpStream::connect((Ipv4Addr::LOCALHOST, port)).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::ConnectionRefused);
    // The port stays reserved while refusing: a plain bind (no
    // SO_REUSEADDR) fails. (A SO_REUSEADDR bind may share it, as Linux
    // allows for sockets that are not listening; bind to port 0 never
    // picks it.)
    let e = crate::sys::bound_tcp_socket(port, false).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::AddrInUse);
    b.set_mode(Mode::Serve);
    assert_eq!(b.port(), port);
    assert_eq!(http_get(port, "/").unwrap().text(), port.to_string());
}

#[test]
fn refuse_from_the_start() {
    let b = Backend::with_mode(Mode::Refuse);
    let e = TcpStream::connect((Ipv4Addr::LOCALHOST, b.port())).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::ConnectionRefused);
    assert_eq!(b.accepted(), 0);
}

#[test]
fn rapid_mode_switching_is_race_free() {
    let b = Backend::start();
    for _ in 0..50 {
        b.set_mode(Mode::Refuse);
        let e = TcpStream::connect((Ipv4Addr::LOCALHOST, b.port())).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::ConnectionRefused);
        b.set_mode(Mode::Serve);
        assert_eq!(http_get(b.port(), "/").unwrap().status, 200);
    }
    assert_eq!(b.requests(), 50);
}

#[test]
fn rst_resets() {
    let b = Backend::with_mode(Mode::Rst);
    let mut c = connect(b.port()).unwrap();
    let e = c.read(&mut [0u8; 8]).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::ConnectionReset, "{e}");
    assert_eq!(b.accepted(), 1);
}

#[test]
fn fin_closes() {
    let b = Backend::with_mode(Mode::Fin);
    let mut c = connect(b.port()).unwrap();
    assert_eq!(c.read(&mut [0u8; 8]).unwrap(), 0);
    assert_eq!(b.accepted(), 1);
}

#[test]
fn hang_accepts_and_stays_quiet() {
    let b = Backend::with_mode(Mode::Hang);
    let mut c = connect(b.port()).unwrap();
    c.write_all(b"GET / HTTP/1.0\r\n\r\n").unwrap();
    assert!(
        read_briefly(&mut c).is_none(),
        "hang must neither answer nor close"
    );
    wait_until(WAIT, "accepted", || b.accepted() == 1);
    assert_eq!(b.open_connections(), 1);
    assert_eq!(b.requests(), 0);
    drop(c);
    wait_until(WAIT, "hung connection dropped after peer close", || {
        b.open_connections() == 0
    });
}

#[test]
fn silent_completes_handshake_but_never_accepts() {
    let b = Backend::with_mode(Mode::Silent);
    let mut c = connect(b.port()).unwrap();
    assert!(read_briefly(&mut c).is_none());
    assert_eq!(b.accepted(), 0);
    // The queued connection is accepted (and served) once serving again.
    b.set_mode(Mode::Serve);
    c.write_all(b"GET / HTTP/1.0\r\n\r\n").unwrap();
    let mut out = String::new();
    c.read_to_string(&mut out).unwrap();
    assert!(out.starts_with("HTTP/1.1 200"), "{out}");
    assert_eq!(b.accepted(), 1);
}

#[test]
fn refuse_resets_queued_connections() {
    let b = Backend::with_mode(Mode::Silent);
    let mut c = connect(b.port()).unwrap();
    b.set_mode(Mode::Refuse);
    let e = c.read(&mut [0u8; 8]).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::ConnectionReset, "{e}");
}

#[test]
fn counters_reset() {
    let b = Backend::start();
    http_get(b.port(), "/").unwrap();
    b.reset_counters();
    assert_eq!(
        (b.accepted(), b.requests(), b.accept_times().len()),
        (0, 0, 0)
    );
}

fn udp_client(port: u16) -> UdpSocket {
    let s = UdpSocket::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
    s.set_read_timeout(Some(SHORT)).unwrap();
    s.connect((Ipv4Addr::LOCALHOST, port)).unwrap();
    s
}

#[test]
fn udp_modes() {
    let b = UdpBackend::start();
    assert_eq!(
        udp_roundtrip(b.port(), b"NGX_UDP_CHECKER").unwrap(),
        b.port().to_string().as_bytes()
    );
    assert_eq!(b.received(), 1);
    assert_eq!(b.payloads(), vec![b"NGX_UDP_CHECKER".to_vec()]);

    b.set_mode(UdpMode::Silent);
    let c = udp_client(b.port());
    c.send(b"x").unwrap();
    let e = c.recv(&mut [0u8; 64]).unwrap_err();
    assert!(
        matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut),
        "{e}"
    );
    wait_until(WAIT, "silent backend recorded the datagram", || {
        b.received() == 2
    });

    b.set_mode(UdpMode::Closed);
    let c = udp_client(b.port());
    c.send(b"y").unwrap();
    // ICMP port unreachable comes back as ECONNREFUSED on a connected socket.
    let e = c.recv(&mut [0u8; 64]).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::ConnectionRefused, "{e}");
    assert_eq!(b.received(), 2);

    b.set_mode(UdpMode::Reply);
    assert_eq!(
        udp_roundtrip(b.port(), b"z").unwrap(),
        b.port().to_string().as_bytes()
    );
    assert_eq!(b.received(), 3);
    assert_eq!(b.receive_times().len(), 3);
    b.reset_counters();
    assert_eq!(b.received(), 0);
}

#[test]
fn udp_closed_from_the_start() {
    let b = UdpBackend::with_mode(UdpMode::Closed);
    let c = udp_client(b.port());
    c.send(b"y").unwrap();
    let e = c.recv(&mut [0u8; 64]).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::ConnectionRefused, "{e}");
}

#[test]
fn free_port_is_bindable() {
    let p = free_port();
    std::net::TcpListener::bind((Ipv4Addr::LOCALHOST, p)).unwrap();
    UdpSocket::bind((Ipv4Addr::LOCALHOST, p)).unwrap();
}

#[test]
fn free_port_is_below_the_ephemeral_range_and_never_repeats() {
    let ports: Vec<u16> = (0..200).map(|_| free_port()).collect();
    let low = crate::ephemeral_low();
    assert!(ports.iter().all(|&p| p < low), "{ports:?} vs {low}");
    let mut distinct = ports.clone();
    distinct.sort_unstable();
    distinct.dedup();
    assert_eq!(distinct.len(), ports.len(), "a port handed out twice");
    // bind(0) takes ports from the ephemeral range, never these.
    let b = Backend::start();
    assert!(b.port() >= low && !ports.contains(&b.port()));
}

/// What another test process sees of a port handed out here: its byte of
/// PORT_LOCKS is locked (an open file description lock conflicts with
/// every other open of the file, in this process too), so its own
/// free_port skips it; a port nobody handed out is not locked.
#[test]
fn free_port_is_reserved_against_other_processes() {
    let p = free_port();
    let other = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(PORT_LOCKS)
        .expect("the lock file exists once a port was handed out");
    assert!(
        !crate::sys::try_lock_byte(&other, u64::from(p)).unwrap(),
        "port {p} is not reserved"
    );
    // Port 1 is below what free_port hands out: nobody locks its byte.
    assert!(crate::sys::try_lock_byte(&other, 1).unwrap());
}

#[test]
fn fd_count_of_self() {
    let before = fd_count(std::process::id()).unwrap();
    let b = Backend::start();
    assert!(fd_count(std::process::id()).unwrap() > before);
    drop(b);
}
