//! A real DNS server for the tests of `server NAME resolve`: dnsmasq
//! (Debian package `dnsmasq-base`) in the foreground as a child of the
//! test, on `127.0.0.1:<free port>`, answering names under `.test` from a
//! hosts file the test rewrites ([`Dns::set`], [`Dns::remove`]).
//!
//! dnsmasq reads nothing but that file (`--no-resolv --no-hosts
//! --conf-file=/dev/null`), forwards nothing (`--local=/test/`: a name
//! under `.test` it does not know is `NXDOMAIN`) and gives its answers a
//! TTL of 1 s. After every change the harness sends SIGHUP (dnsmasq
//! re-reads the file) and then asks the server itself, with a real A query
//! over UDP ([`Dns::query`]), until it answers the new set: once
//! [`Dns::set`] returns, every query gets the new answer.
//!
//! ```no_run
//! use std::net::Ipv4Addr;
//! use healthcheck_t::dns::Dns;
//!
//! let mut dns = Dns::start();
//! dns.set("backend.test", &[Ipv4Addr::new(127, 0, 0, 2)]);
//! let conf = format!("resolver {} valid=1s ipv6=off;", dns.addr());
//! # let _ = conf;
//! dns.stop(); // queries now go unanswered (connection refused)
//! dns.restart(); // same port, same names
//! dns.remove("backend.test"); // NXDOMAIN
//! ```
//!
//! Dropping a [`Dns`] kills dnsmasq; its directory (hosts file, log) is
//! removed unless the test is failing, when its path and the log's tail are
//! printed. `DNSMASQ_BIN` names another dnsmasq binary.

use std::collections::BTreeMap;
use std::fmt;
use std::fs;
use std::io::{self, Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpStream, UdpSocket};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU16, AtomicUsize, Ordering};
use std::thread;
use std::time::Duration;

use crate::sys;
use crate::wait::try_wait_for;

/// Environment variable naming the dnsmasq binary (default
/// `/usr/sbin/dnsmasq`, else `dnsmasq` from `PATH`).
pub const DNSMASQ_BIN_ENV: &str = "DNSMASQ_BIN";
/// How long starting, stopping and a change of the answers may take.
pub const DNS_TIMEOUT: Duration = Duration::from_secs(5);
/// Budget of one query.
const QUERY_TIMEOUT: Duration = Duration::from_millis(500);
/// How many free ports [`Dns::start`] tries before giving up.
const START_ATTEMPTS: usize = 5;
/// A name [`Dns`] asks for to learn that the server answers (never set).
const PROBE_NAME: &str = "dns-harness-probe.test";

/// What the server answered to an A query.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Answer {
    /// `NOERROR` with these A records (sorted, possibly none).
    Addrs(Vec<Ipv4Addr>),
    /// `NXDOMAIN`.
    NxDomain,
}

impl fmt::Display for Answer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Answer::Addrs(a) => write!(f, "{a:?}"),
            Answer::NxDomain => write!(f, "NXDOMAIN"),
        }
    }
}

/// A dnsmasq child process and the names it answers; see the module docs.
pub struct Dns {
    dir: PathBuf,
    port: u16,
    child: Option<Child>,
    names: BTreeMap<String, Vec<Ipv4Addr>>,
    /// SRV records by owner name (`_http._tcp.backend.test`): target,
    /// port, priority, weight ([`Dns::set_srv`]).
    srv: BTreeMap<String, Vec<(String, u16, u16, u16)>>,
}

fn dnsmasq_bin() -> PathBuf {
    match std::env::var_os(DNSMASQ_BIN_ENV) {
        Some(p) if !p.is_empty() => PathBuf::from(p),
        _ if Path::new("/usr/sbin/dnsmasq").is_file() => PathBuf::from("/usr/sbin/dnsmasq"),
        _ => PathBuf::from("dnsmasq"),
    }
}

impl Dns {
    /// Start dnsmasq with no names on a free port of `127.0.0.1`; returns
    /// once it answers queries.
    pub fn start() -> Dns {
        static N: AtomicUsize = AtomicUsize::new(0);
        let dir = std::env::temp_dir().join(format!(
            "nginx-hc-dns-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::SeqCst)
        ));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).expect("create the dnsmasq directory");
        let mut dns = Dns {
            dir,
            port: 0,
            child: None,
            names: BTreeMap::new(),
            srv: BTreeMap::new(),
        };
        dns.write_hosts();
        let mut errors = Vec::new();
        for _ in 0..START_ATTEMPTS {
            dns.port = crate::free_port();
            match dns.spawn() {
                Ok(()) => return dns,
                // Another process took the port in between: try another.
                Err(e) => errors.push(e),
            }
        }
        panic!(
            "dnsmasq did not start in {START_ATTEMPTS} attempts:\n{}",
            errors.join("\n")
        );
    }

    /// The UDP (and TCP) port it listens on.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// `127.0.0.1:PORT`, for nginx's `resolver` directive.
    pub fn addr(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// Whether dnsmasq is running (not [`Dns::stop`]ped).
    pub fn is_running(&mut self) -> bool {
        self.child
            .as_mut()
            .is_some_and(|c| matches!(c.try_wait(), Ok(None)))
    }

    /// Answer `name` with exactly `ips` (no addresses: `NXDOMAIN`, as
    /// [`Dns::remove`]); returns once the server does. If dnsmasq is
    /// stopped, the change waits for [`Dns::restart`].
    pub fn set(&mut self, name: &str, ips: &[Ipv4Addr]) {
        self.set_all(&[(name, ips)]);
    }

    /// [`Dns::set`] for several names at once: one rewrite of the hosts
    /// file and one SIGHUP, so the server switches every name to its new
    /// answer in the same moment; returns once it answers each name so.
    pub fn set_all(&mut self, changes: &[(&str, &[Ipv4Addr])]) {
        let mut names = Vec::with_capacity(changes.len());
        for &(name, ips) in changes {
            let name = name.to_ascii_lowercase();
            if ips.is_empty() {
                self.names.remove(&name);
            } else {
                let mut ips = ips.to_vec();
                ips.sort_unstable();
                ips.dedup();
                self.names.insert(name.clone(), ips);
            }
            names.push(name);
        }
        self.write_hosts();
        if self.is_running() {
            let pid = self.child.as_ref().map_or(0, Child::id);
            sys::kill(pid, libc::SIGHUP).unwrap_or_else(|e| panic!("SIGHUP dnsmasq {pid}: {e}"));
            for name in &names {
                self.wait_answer(name);
            }
        }
    }

    /// Answer SRV queries for `owner` (`_SERVICE._PROTO.NAME`) with
    /// `records` (target, port, priority, weight; none: no SRV record).
    /// dnsmasq takes SRV records from its command line only, so it is
    /// restarted on the same port (queries in between go unanswered for a
    /// moment; nginx keeps what it had); returns once it answers again.
    pub fn set_srv(&mut self, owner: &str, records: &[(&str, u16, u16, u16)]) {
        let owner = owner.to_ascii_lowercase();
        if records.is_empty() {
            self.srv.remove(&owner);
        } else {
            let recs = records
                .iter()
                .map(|&(t, port, prio, weight)| (t.to_ascii_lowercase(), port, prio, weight))
                .collect();
            self.srv.insert(owner, recs);
        }
        if self.child.is_some() {
            self.restart();
        }
    }

    /// Forget `name`: queries for it get `NXDOMAIN`.
    pub fn remove(&mut self, name: &str) {
        self.set(name, &[]);
    }

    /// What [`Dns::query`] must answer for `name` now.
    pub fn expected(&self, name: &str) -> Answer {
        match self.names.get(&name.to_ascii_lowercase()) {
            Some(ips) => Answer::Addrs(ips.clone()),
            None => Answer::NxDomain,
        }
    }

    /// One A query for `name` to the server (UDP with EDNS0; TCP if the
    /// answer comes truncated). `Err` if it is not answered within 500 ms
    /// or the answer is not `NOERROR`/`NXDOMAIN`.
    pub fn query(&self, name: &str) -> Result<Answer, String> {
        query_a(self.port, name)
    }

    /// Stop dnsmasq (SIGTERM, SIGKILL if it does not exit in time); returns
    /// once its port refuses queries. The names are kept for
    /// [`Dns::restart`].
    pub fn stop(&mut self) {
        let Some(mut child) = self.child.take() else {
            return;
        };
        let _ = sys::kill(child.id(), libc::SIGTERM);
        let exited = try_wait_for(DNS_TIMEOUT, || child.try_wait().ok().flatten());
        if exited.is_none() {
            let _ = child.kill();
            let _ = child.wait();
        }
        if let Ok(a) = self.query(PROBE_NAME) {
            panic!("dnsmasq stopped, but port {} still answers {a}", self.port);
        }
    }

    /// Start dnsmasq again on the same port with the current names (after
    /// [`Dns::stop`], or a restart of a running one); returns once it
    /// answers.
    pub fn restart(&mut self) {
        self.stop();
        self.write_hosts();
        if let Err(e) = self.spawn() {
            panic!("restarting dnsmasq on port {}: {e}", self.port);
        }
        let names: Vec<String> = self.names.keys().cloned().collect();
        for name in names {
            self.wait_answer(&name);
        }
    }

    /// dnsmasq's log (its start, every query and its answer).
    pub fn log(&self) -> String {
        let mut text = fs::read_to_string(self.dir.join("dnsmasq.log")).unwrap_or_default();
        text.push_str(&fs::read_to_string(self.dir.join("stderr.log")).unwrap_or_default());
        text
    }

    fn hosts_path(&self) -> PathBuf {
        self.dir.join("hosts")
    }

    /// Write the hosts file whole (a new file renamed over the old one, so
    /// dnsmasq never reads half of it).
    fn write_hosts(&self) {
        let mut text = String::new();
        for (name, ips) in &self.names {
            for ip in ips {
                text.push_str(&format!("{ip} {name}\n"));
            }
        }
        let tmp = self.dir.join("hosts.new");
        fs::write(&tmp, text).expect("write the dnsmasq hosts file");
        fs::rename(&tmp, self.hosts_path()).expect("rename the dnsmasq hosts file");
    }

    /// Spawn dnsmasq on `self.port` and wait until it answers; on failure
    /// the child is gone and `Err` has its output.
    fn spawn(&mut self) -> Result<(), String> {
        let bin = dnsmasq_bin();
        let stderr =
            fs::File::create(self.dir.join("stderr.log")).expect("create dnsmasq's stderr.log");
        let mut cmd = Command::new(&bin);
        cmd.args([
            "--keep-in-foreground".to_string(),
            "--no-resolv".into(),
            "--no-hosts".into(),
            format!("--addn-hosts={}", self.hosts_path().display()),
            "--listen-address=127.0.0.1".into(),
            "--bind-interfaces".into(),
            format!("--port={}", self.port),
            "--local=/test/".into(),
            "--local-ttl=1".into(),
            "--pid-file=".into(),
            format!("--log-facility={}", self.dir.join("dnsmasq.log").display()),
            "--log-queries".into(),
            "--conf-file=/dev/null".into(),
        ]);
        for (owner, recs) in &self.srv {
            for (target, port, prio, weight) in recs {
                cmd.arg(format!(
                    "--srv-host={owner},{target},{port},{prio},{weight}"
                ));
            }
        }
        // As root dnsmasq drops to `nobody`/`dip`, which may not exist
        // here; it needs no privilege after binding anyway.
        // SAFETY: geteuid(2) has no preconditions.
        if unsafe { libc::geteuid() } == 0 {
            cmd.args(["--user=root", "--group=root"]);
        }
        cmd.stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(stderr);
        // A test process that dies without dropping the Dns takes dnsmasq
        // with it (tied to the spawning thread, as for nginx).
        // SAFETY: the closure only calls prctl(2), which is async-signal-safe.
        unsafe {
            cmd.pre_exec(|| sys::set_parent_death_signal(libc::SIGTERM));
        }
        let mut child = cmd.spawn().map_err(|e| {
            format!(
                "spawn {} (Debian package dnsmasq-base; {DNSMASQ_BIN_ENV} names another): {e}",
                bin.display()
            )
        })?;
        let ready = try_wait_for(DNS_TIMEOUT, || {
            if let Ok(Some(status)) = child.try_wait() {
                return Some(Err(format!("dnsmasq exited: {status}")));
            }
            query_a(self.port, PROBE_NAME).ok().map(|_| Ok(()))
        });
        let err = match ready {
            Some(Ok(())) => {
                self.child = Some(child);
                return Ok(());
            }
            Some(Err(e)) => e,
            None => {
                let _ = child.kill();
                let _ = child.wait();
                format!(
                    "dnsmasq did not answer on port {} within {DNS_TIMEOUT:?}",
                    self.port
                )
            }
        };
        Err(format!("{err}\n--- dnsmasq output ---\n{}", self.log()))
    }

    /// Poll until the server answers `name` as [`Dns::expected`] says.
    fn wait_answer(&self, name: &str) {
        let want = self.expected(name);
        let mut last = Err("no query yet".to_string());
        let ok = try_wait_for(DNS_TIMEOUT, || {
            last = self.query(name);
            (last.as_ref() == Ok(&want)).then_some(())
        });
        if ok.is_none() {
            panic!(
                "dnsmasq on port {} did not answer {name} with {want} within {DNS_TIMEOUT:?}; \
                 last answer: {last:?}\n--- dnsmasq log (tail) ---\n{}",
                self.port,
                tail(&self.log(), 30)
            );
        }
    }
}

impl Drop for Dns {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
        if thread::panicking() {
            eprintln!(
                "dnsmasq directory kept: {}\n--- dnsmasq log (tail) ---\n{}",
                self.dir.display(),
                tail(&self.log(), 30)
            );
        } else if std::env::var_os(crate::nginx::KEEP_ENV).is_none() {
            let _ = fs::remove_dir_all(&self.dir);
        }
    }
}

fn tail(text: &str, n: usize) -> String {
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

// ---------------------------------------------------------------------------
// A queries (RFC 1035), just enough for dnsmasq's answers

const TYPE_A: u16 = 1;
const TYPE_OPT: u16 = 41;
const CLASS_IN: u16 = 1;
const FLAG_QR: u16 = 0x8000;
const FLAG_TC: u16 = 0x0200;
const FLAG_RD: u16 = 0x0100;
const RCODE_NXDOMAIN: u16 = 3;

fn next_id() -> u16 {
    static ID: AtomicU16 = AtomicU16::new(0);
    ID.fetch_add(1, Ordering::SeqCst) ^ (std::process::id() as u16)
}

/// One A query for `name` to `127.0.0.1:port`.
pub fn query_a(port: u16, name: &str) -> Result<Answer, String> {
    let id = next_id();
    let query = encode_query(id, name)?;
    let server = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
    let udp = || -> io::Result<Vec<u8>> {
        let s = UdpSocket::bind((Ipv4Addr::LOCALHOST, 0))?;
        s.set_read_timeout(Some(QUERY_TIMEOUT))?;
        s.connect(server)?;
        s.send(&query)?;
        let mut buf = vec![0u8; 65535];
        loop {
            let n = s.recv(&mut buf)?;
            // A late answer to an earlier query of this socket cannot
            // happen (a fresh socket), but check the id anyway.
            if n >= 2 && buf[..2] == id.to_be_bytes() {
                buf.truncate(n);
                return Ok(buf);
            }
        }
    };
    let reply = udp().map_err(|e| format!("UDP query for {name} to {server}: {e}"))?;
    let (answer, truncated) = decode_answer(&reply, id)?;
    if !truncated {
        return Ok(answer);
    }
    let tcp = || -> io::Result<Vec<u8>> {
        let mut s = TcpStream::connect_timeout(&server, QUERY_TIMEOUT)?;
        s.set_read_timeout(Some(QUERY_TIMEOUT))?;
        s.set_write_timeout(Some(QUERY_TIMEOUT))?;
        let mut msg = (query.len() as u16).to_be_bytes().to_vec();
        msg.extend_from_slice(&query);
        s.write_all(&msg)?;
        let mut len = [0u8; 2];
        s.read_exact(&mut len)?;
        let mut buf = vec![0u8; usize::from(u16::from_be_bytes(len))];
        s.read_exact(&mut buf)?;
        Ok(buf)
    };
    let reply = tcp().map_err(|e| format!("TCP query for {name} to {server}: {e}"))?;
    match decode_answer(&reply, id)? {
        (answer, false) => Ok(answer),
        (_, true) => Err(format!("TCP answer for {name} is truncated")),
    }
}

/// A recursive A/IN query with an EDNS0 OPT record (4096-byte answers).
fn encode_query(id: u16, name: &str) -> Result<Vec<u8>, String> {
    let mut q = Vec::with_capacity(64);
    for v in [id, FLAG_RD, 1, 0, 0, 1] {
        q.extend_from_slice(&v.to_be_bytes());
    }
    for label in name.trim_end_matches('.').split('.') {
        if label.is_empty() || label.len() > 63 {
            return Err(format!("bad DNS name {name:?}"));
        }
        q.push(label.len() as u8);
        q.extend_from_slice(label.as_bytes());
    }
    q.push(0);
    q.extend_from_slice(&TYPE_A.to_be_bytes());
    q.extend_from_slice(&CLASS_IN.to_be_bytes());
    // OPT: root owner, type 41, class = UDP payload size, TTL 0, no data.
    q.push(0);
    for v in [TYPE_OPT, 4096, 0, 0, 0] {
        q.extend_from_slice(&v.to_be_bytes());
    }
    Ok(q)
}

/// Parse an answer to query `id`: the answer and whether TC was set.
fn decode_answer(msg: &[u8], id: u16) -> Result<(Answer, bool), String> {
    let bad = |what: &str| format!("malformed DNS answer ({what}): {msg:02x?}");
    let u16_at = |i: usize| -> Result<u16, String> {
        msg.get(i..i + 2)
            .map(|b| u16::from_be_bytes([b[0], b[1]]))
            .ok_or_else(|| bad("short"))
    };
    if u16_at(0)? != id {
        return Err(bad("wrong id"));
    }
    let flags = u16_at(2)?;
    if flags & FLAG_QR == 0 {
        return Err(bad("not a response"));
    }
    let truncated = flags & FLAG_TC != 0;
    match flags & 0xf {
        0 => {}
        RCODE_NXDOMAIN => return Ok((Answer::NxDomain, truncated)),
        rcode => return Err(format!("DNS answer with rcode {rcode}")),
    }
    let (qdcount, ancount) = (u16_at(4)?, u16_at(6)?);
    let mut i = 12;
    for _ in 0..qdcount {
        i = skip_name(msg, i).ok_or_else(|| bad("question name"))? + 4;
    }
    let mut addrs = Vec::new();
    for _ in 0..ancount {
        i = skip_name(msg, i).ok_or_else(|| bad("answer name"))?;
        let (rtype, class, rdlen) = (u16_at(i)?, u16_at(i + 2)?, usize::from(u16_at(i + 8)?));
        let rdata = msg
            .get(i + 10..i + 10 + rdlen)
            .ok_or_else(|| bad("short rdata"))?;
        if rtype == TYPE_A && class == CLASS_IN && rdlen == 4 {
            addrs.push(Ipv4Addr::new(rdata[0], rdata[1], rdata[2], rdata[3]));
        }
        i += 10 + rdlen;
    }
    addrs.sort_unstable();
    Ok((Answer::Addrs(addrs), truncated))
}

/// The offset after the (possibly compressed) name at `i`.
fn skip_name(msg: &[u8], mut i: usize) -> Option<usize> {
    loop {
        let len = *msg.get(i)?;
        match len {
            0 => return Some(i + 1),
            l if l & 0xc0 == 0xc0 => return Some(i + 2),
            l => i += 1 + usize::from(l),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encodes_and_decodes() {
        let q = encode_query(0x1234, "backend.test").unwrap();
        assert_eq!(&q[..4], &[0x12, 0x34, 0x01, 0x00]);
        assert!(encode_query(1, "a..test").is_err());
        // dnsmasq's answer for two hosts-file addresses (captured).
        let reply = b"\x124\x85\x80\x00\x01\x00\x02\x00\x00\x00\x00\x07backend\x04test\x00\
            \x00\x01\x00\x01\xc0\x0c\x00\x01\x00\x01\x00\x00\x00\x01\x00\x04\x7f\x00\x00\x03\
            \xc0\x0c\x00\x01\x00\x01\x00\x00\x00\x01\x00\x04\x7f\x00\x00\x02";
        let want = vec![Ipv4Addr::new(127, 0, 0, 2), Ipv4Addr::new(127, 0, 0, 3)];
        assert_eq!(
            decode_answer(reply, 0x1234),
            Ok((Answer::Addrs(want), false))
        );
        assert!(decode_answer(reply, 0x1235).is_err());
        assert!(decode_answer(&reply[..40], 0x1234).is_err());
        let mut nx = reply[..12].to_vec();
        nx[3] = 0x83;
        nx[7] = 0;
        assert_eq!(decode_answer(&nx, 0x1234), Ok((Answer::NxDomain, false)));
    }

    /// The harness against the real dnsmasq: set, change, remove, stop,
    /// restart on the same port.
    #[test]
    fn dnsmasq_answers_what_was_set() {
        let mut dns = Dns::start();
        let (a, b, c) = (
            Ipv4Addr::new(127, 0, 0, 2),
            Ipv4Addr::new(127, 0, 0, 3),
            Ipv4Addr::new(127, 0, 0, 4),
        );
        assert_eq!(dns.query("backend.test"), Ok(Answer::NxDomain));
        dns.set("backend.test", &[b, a]);
        assert_eq!(dns.query("backend.test"), Ok(Answer::Addrs(vec![a, b])));
        dns.set("backend.test", &[c]);
        assert_eq!(dns.query("backend.test"), Ok(Answer::Addrs(vec![c])));
        let many: Vec<Ipv4Addr> = (1..=40).map(|h| Ipv4Addr::new(127, 9, 9, h)).collect();
        dns.set("many.test", &many);
        assert_eq!(dns.query("many.test"), Ok(Answer::Addrs(many)));
        dns.remove("backend.test");
        assert_eq!(dns.query("backend.test"), Ok(Answer::NxDomain));
        dns.set("backend.test", &[a]);
        let port = dns.port();
        dns.stop();
        assert!(dns.query("backend.test").is_err());
        dns.restart();
        assert_eq!(dns.port(), port);
        assert_eq!(dns.query("backend.test"), Ok(Answer::Addrs(vec![a])));
    }
}
