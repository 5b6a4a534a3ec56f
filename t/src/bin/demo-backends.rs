//! The backends `scripts/demo` runs next to nginx, on fixed loopback ports
//! so that `nginx-conf/demo.conf` can name them.
//!
//! ```text
//! demo-backends --http 9081,9082,9083 --udp 9053 --flap 9083 [--up 18] [--down 12]
//! ```
//!
//! - every `--http` port serves HTTP: any request gets `200` and the body
//!   `backend <port>`; a non-HTTP payload (a stream proxy's client talking
//!   raw TCP) gets the same text; a connection that sends nothing (a health
//!   check) is just closed;
//! - every `--udp` port echoes each datagram back;
//! - the `--flap` port (one of the `--http` ports) is up for `--up` seconds,
//!   then refuses connections (its socket closed) for `--down` seconds, and
//!   so on, printing `backend <port>: down` / `backend <port>: up` when it
//!   switches.
//!
//! Every port is bound before anything runs, so a busy port fails at once
//! with a message naming it. The harness's `Backend` binds port 0, hence
//! this small std-only server. Stop it with SIGTERM or SIGINT.

use std::io::{self, BufRead, BufReader, Write};
use std::net::{Ipv4Addr, Shutdown, TcpListener, TcpStream, UdpSocket};
use std::process::ExitCode;
use std::thread;
use std::time::{Duration, Instant};

const USAGE: &str = "usage: demo-backends --http PORT[,PORT...] [--udp PORT[,PORT...]] \
                     [--flap PORT] [--up SECONDS] [--down SECONDS]";
/// How often an idle accept loop looks at its socket and the flap clock.
const TICK: Duration = Duration::from_millis(20);
/// Budget for a client to send its request.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(5);

#[derive(Debug)]
struct Args {
    http: Vec<u16>,
    udp: Vec<u16>,
    flap: Option<u16>,
    up: Duration,
    down: Duration,
}

/// When the flapping backend listens: `up` seconds on, `down` seconds off.
#[derive(Clone, Copy, Debug)]
struct Flap {
    up: Duration,
    down: Duration,
}

impl Flap {
    fn is_up(&self, elapsed: Duration) -> bool {
        let period = (self.up + self.down).as_millis();
        elapsed.as_millis() % period < self.up.as_millis()
    }
}

fn main() -> ExitCode {
    let args = match parse_args(std::env::args().skip(1)) {
        Ok(a) => a,
        Err(e) => {
            eprintln!("demo-backends: {e}\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    match run(&args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("demo-backends: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run(args: &Args) -> Result<(), String> {
    // Bind everything first: a busy port is reported before anything runs.
    let mut tcp = Vec::new();
    for &port in &args.http {
        tcp.push((port, listen(port).map_err(|e| busy("tcp", port, e))?));
    }
    let mut udp = Vec::new();
    for &port in &args.udp {
        let socket =
            UdpSocket::bind((Ipv4Addr::LOCALHOST, port)).map_err(|e| busy("udp", port, e))?;
        udp.push(socket);
    }

    let mut threads = Vec::new();
    for (port, listener) in tcp {
        let flap = (args.flap == Some(port)).then_some(Flap {
            up: args.up,
            down: args.down,
        });
        threads.push(thread::spawn(move || serve_tcp(port, listener, flap)));
    }
    for socket in udp {
        threads.push(thread::spawn(move || serve_udp(socket)));
    }

    let list = |ports: &[u16]| {
        ports
            .iter()
            .map(|p| format!("127.0.0.1:{p}"))
            .collect::<Vec<_>>()
            .join(" ")
    };
    println!("demo-backends: http on {}", list(&args.http));
    if !args.udp.is_empty() {
        println!("demo-backends: udp echo on {}", list(&args.udp));
    }
    if let Some(port) = args.flap {
        println!(
            "demo-backends: backend {port} flaps: up {} s, then down (refusing) {} s, repeatedly",
            args.up.as_secs(),
            args.down.as_secs()
        );
    }
    // The serving threads never return; joining keeps the process alive.
    for t in threads {
        let _ = t.join();
    }
    Ok(())
}

fn busy(proto: &str, port: u16, e: io::Error) -> String {
    format!(
        "cannot bind {proto} 127.0.0.1:{port}: {e} \
         (is another demo running? DEMO_PORT_OFFSET=N moves every demo port by N)"
    )
}

fn listen(port: u16) -> io::Result<TcpListener> {
    // std sets SO_REUSEADDR, so the flapping port can listen again at once.
    let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, port))?;
    listener.set_nonblocking(true)?;
    Ok(listener)
}

/// Accept loop of one TCP backend; a flapping one drops its listening
/// socket while down (connects are then refused) and listens again when up.
fn serve_tcp(port: u16, listener: TcpListener, flap: Option<Flap>) {
    let start = Instant::now();
    let mut listener = Some(listener);
    let mut rebind_error_shown = false;
    loop {
        let want_up = flap.map_or(true, |f| f.is_up(start.elapsed()));
        if want_up && listener.is_none() {
            match listen(port) {
                Ok(l) => {
                    listener = Some(l);
                    rebind_error_shown = false;
                    println!("backend {port}: up");
                }
                Err(e) if !rebind_error_shown => {
                    eprintln!("backend {port}: cannot listen again: {e} (retrying)");
                    rebind_error_shown = true;
                }
                Err(_) => {}
            }
        } else if !want_up && listener.is_some() {
            listener = None;
            let secs = flap.map_or(0, |f| f.down.as_secs());
            println!("backend {port}: down (refusing connections for {secs} s)");
        }

        if let Some(l) = &listener {
            match l.accept() {
                Ok((stream, _)) => {
                    thread::spawn(move || {
                        let _ = answer(stream, port);
                    });
                    continue;
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                Err(e) => eprintln!("backend {port}: accept: {e}"),
            }
        }
        thread::sleep(TICK);
    }
}

/// Serve one connection: an HTTP request gets a `200`, anything else the
/// plain text; nothing at all (a health check) gets nothing.
fn answer(mut stream: TcpStream, port: u16) -> io::Result<()> {
    stream.set_nonblocking(false)?;
    stream.set_read_timeout(Some(REQUEST_TIMEOUT))?;
    let mut reader = BufReader::new(stream.try_clone()?);
    let mut first = Vec::new();
    // On a timeout the bytes read so far stay in `first`: answer those.
    let _ = reader.read_until(b'\n', &mut first);
    if first.is_empty() {
        return Ok(());
    }
    let body = format!("backend {port}\n");
    let line = String::from_utf8_lossy(&first);
    if line.trim_end().contains(" HTTP/1.") {
        // Skip the header fields up to the empty line.
        loop {
            let mut field = Vec::new();
            if reader.read_until(b'\n', &mut field)? == 0 || field.trim_ascii().is_empty() {
                break;
            }
        }
        let head = format!(
            "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: {}\r\n\
             Connection: close\r\n\r\n",
            body.len()
        );
        stream.write_all(head.as_bytes())?;
        if !line.starts_with("HEAD ") {
            stream.write_all(body.as_bytes())?;
        }
    } else {
        stream.write_all(body.as_bytes())?;
    }
    stream.shutdown(Shutdown::Write)
}

/// Echo every datagram back to its sender.
fn serve_udp(socket: UdpSocket) {
    let mut buf = vec![0u8; 65536];
    loop {
        match socket.recv_from(&mut buf) {
            Ok((n, from)) => {
                let _ = socket.send_to(&buf[..n], from);
            }
            // An ICMP error queued for an earlier reply, or EINTR.
            Err(_) => continue,
        }
    }
}

fn parse_args(mut it: impl Iterator<Item = String>) -> Result<Args, String> {
    let mut args = Args {
        http: Vec::new(),
        udp: Vec::new(),
        flap: None,
        up: Duration::from_secs(18),
        down: Duration::from_secs(12),
    };
    while let Some(flag) = it.next() {
        let value = it.next().ok_or_else(|| format!("{flag} needs a value"))?;
        match flag.as_str() {
            "--http" => args.http.extend(ports(&flag, &value)?),
            "--udp" => args.udp.extend(ports(&flag, &value)?),
            "--flap" => args.flap = Some(port(&flag, &value)?),
            "--up" => args.up = seconds(&flag, &value)?,
            "--down" => args.down = seconds(&flag, &value)?,
            _ => return Err(format!("unknown argument {flag:?}")),
        }
    }
    if args.http.is_empty() {
        return Err("--http is required".into());
    }
    if let Some(p) = args.flap {
        if !args.http.contains(&p) {
            return Err(format!("--flap {p} is not one of the --http ports"));
        }
    }
    Ok(args)
}

fn port(flag: &str, value: &str) -> Result<u16, String> {
    match value.parse::<u16>() {
        Ok(p) if p > 0 => Ok(p),
        _ => Err(format!("{flag}: invalid port {value:?}")),
    }
}

fn ports(flag: &str, value: &str) -> Result<Vec<u16>, String> {
    value.split(',').map(|v| port(flag, v)).collect()
}

fn seconds(flag: &str, value: &str) -> Result<Duration, String> {
    match value.parse::<u64>() {
        Ok(s) if (1..=86400).contains(&s) => Ok(Duration::from_secs(s)),
        _ => Err(format!(
            "{flag}: invalid number of seconds {value:?} (1..86400)"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(s: &str) -> Result<Args, String> {
        parse_args(s.split_whitespace().map(String::from))
    }

    #[test]
    fn flap_schedule() {
        let f = Flap {
            up: Duration::from_secs(18),
            down: Duration::from_secs(12),
        };
        assert!(f.is_up(Duration::ZERO));
        assert!(f.is_up(Duration::from_millis(17_999)));
        assert!(!f.is_up(Duration::from_secs(18)));
        assert!(!f.is_up(Duration::from_millis(29_999)));
        assert!(f.is_up(Duration::from_secs(30)));
    }

    #[test]
    fn arguments() {
        let a = parse("--http 9081,9082 --udp 9053 --flap 9082 --up 5 --down 3").unwrap();
        assert_eq!(a.http, [9081, 9082]);
        assert_eq!(a.udp, [9053]);
        assert_eq!(a.flap, Some(9082));
        assert_eq!((a.up.as_secs(), a.down.as_secs()), (5, 3));
        assert!(parse("").is_err());
        assert!(parse("--http 0").is_err());
        assert!(parse("--http 70000").is_err());
        assert!(parse("--http 9081 --flap 9083").is_err());
        assert!(parse("--http 9081 --up 0").is_err());
        assert!(parse("--http").is_err());
        assert!(parse("--bogus 1").is_err());
    }
}
