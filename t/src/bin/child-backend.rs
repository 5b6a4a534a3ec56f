//! A TCP backend in a process of its own, for the fault-injection tests
//! (`tests/faults.rs` starts it through `faults_net::ChildBackend`), which
//! SIGSTOP or SIGKILL it.
//!
//! ```text
//! child-backend PORT BACKLOG
//! ```
//!
//! It listens on `127.0.0.1:PORT` (0: any free port) with listen backlog
//! `BACKLOG`, prints the port it got as its first line on stdout, and then
//! answers any HTTP request `200` with the body `child`; connections that
//! send nothing (checks) are held until the peer closes them or 5 s pass.
//! It runs until killed.

use std::io::{self, Read, Write};
use std::net::{Ipv4Addr, Shutdown, TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::process::ExitCode;
use std::thread;
use std::time::Duration;

const USAGE: &str = "usage: child-backend PORT BACKLOG";

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (port, backlog) = match args.as_slice() {
        [port, backlog] => match (port.parse::<u16>(), backlog.parse::<i32>()) {
            (Ok(p), Ok(b)) => (p, b),
            _ => {
                eprintln!("{USAGE}");
                return ExitCode::from(2);
            }
        },
        _ => {
            eprintln!("{USAGE}");
            return ExitCode::from(2);
        }
    };
    let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, port)).expect("child: bind");
    // SAFETY: listen(2) again on a listening socket only changes its backlog.
    let rc = unsafe { libc::listen(listener.as_raw_fd(), backlog) };
    assert_eq!(rc, 0, "child: listen: {}", io::Error::last_os_error());
    let port = listener.local_addr().expect("child: local_addr").port();
    println!("{port}");
    io::stdout().flush().expect("child: flush");
    for conn in listener.incoming() {
        let Ok(s) = conn else { continue };
        let _ = thread::Builder::new().spawn(move || serve(s));
    }
    ExitCode::SUCCESS
}

fn serve(mut s: TcpStream) {
    let _ = s.set_read_timeout(Some(Duration::from_secs(5)));
    let mut buf = Vec::new();
    let mut chunk = [0u8; 2048];
    loop {
        match s.read(&mut chunk) {
            Ok(0) | Err(_) => return,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
        if buf.windows(4).any(|w| w == b"\r\n\r\n") {
            break;
        }
    }
    let _ = s.write_all(
        b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 5\r\n\
          Connection: close\r\n\r\nchild",
    );
    let _ = s.shutdown(Shutdown::Write);
    // Let the proxy read the response before the socket closes.
    let _ = s.read(&mut chunk);
}
