use super::*;

// --- property tests -----------------------------------------------------------

/// Generated header fields: names and values as sent.
pub(super) type Fields = Vec<(Vec<u8>, Vec<u8>)>;

/// How the generated final response frames its body.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Kind {
    /// HEAD, 204 or 304 (with a misleading Content-Length sometimes).
    None,
    Length,
    Chunked,
    Close,
}

/// One thing wrong with a generated response, and the error it must give.
#[derive(Clone, Debug)]
pub(super) enum Fault {
    None,
    /// The first status line's version.
    Version(&'static str),
    /// The final status line's code (and what follows it).
    Status(&'static str),
    /// A line added to the final head.
    HeaderLine(&'static [u8]),
    /// Framing header lines replacing the right ones (`{n}`: the body
    /// length); `true`: the response is HTTP/1.0.
    Framing(&'static str, bool),
    /// A chunk-size line replaced.
    ChunkSize(usize, &'static str),
    /// The line end after a chunk's data replaced.
    ChunkEnd(usize, &'static str),
    /// The message cut at this fraction (per mille) of its length.
    Cut(u16),
    /// MAX_INTERIM + this many interim responses.
    Interim(usize),
}

#[derive(Clone, Debug)]
pub(super) struct Spec {
    interim: Vec<(u16, Fields)>,
    version: u8,
    status: u16,
    reason: Vec<u8>,
    /// Extra header fields (never a framing or Connection field).
    headers: Fields,
    /// Connection field value.
    connection: Option<&'static str>,
    kind: Kind,
    body: Vec<u8>,
    /// Chunk boundaries, as cut points into `body`.
    cuts: Vec<usize>,
    ext: Vec<&'static str>,
    trailers: Fields,
    /// Line ends: 0 CRLF, 1 LF, 2 both.
    eol: u8,
    /// Spaces around values.
    ows: (&'static str, &'static str),
    garbage: Vec<u8>,
    /// Chooses max_head: 0 plenty, 1 the largest bounded region exactly, 2
    /// one less, 3 anything from 32.
    max_head: (u8, usize),
    body_keep: usize,
    fault: Fault,
}

/// What a rendered response must give.
#[derive(Clone, Debug, PartialEq)]
pub(super) struct Expect {
    /// After the bytes, before eof.
    state: State,
    /// After eof.
    eof: State,
    /// For a valid response: head fields, body, trailing, reusable.
    valid: Option<Valid>,
}

#[derive(Clone, Debug, PartialEq)]
pub(super) struct Valid {
    version: u8,
    status: u16,
    reason: Vec<u8>,
    headers: Fields,
    body: Vec<u8>,
    body_len: u64,
    trailing: u64,
    reusable: bool,
}

pub(super) const CONNECTION: &[&str] = &[
    "close",
    "Close",
    "keep-alive",
    "Keep-Alive",
    "upgrade, close",
    "keep-alive, te",
    "te",
    " , CLOSE , ",
    "keep-alive,close",
    "closed",
];

pub(super) fn tchar_name() -> impl Strategy<Value = Vec<u8>> {
    "[A-Za-z0-9!#$%&'*+.^_`|~-]{1,12}"
        .prop_filter("not a framing or Connection field", |n| {
            !["content-length", "transfer-encoding", "connection"]
                .iter()
                .any(|f| n.eq_ignore_ascii_case(f))
        })
        .prop_map(String::into_bytes)
}

/// Field values: VCHAR, obs-text, SP and HTAB.
pub(super) fn value() -> impl Strategy<Value = Vec<u8>> {
    vec(
        prop_oneof![
            8 => 0x21u8..=0x7e,
            1 => 0x80u8..=0xff,
            1 => Just(b' '),
            1 => Just(b'\t'),
        ],
        0..24,
    )
}

pub(super) fn fields(max: usize) -> impl Strategy<Value = Fields> {
    vec((tchar_name(), value()), 0..max)
}

pub(super) fn fault() -> impl Strategy<Value = Fault> {
    prop_oneof![
        12 => Just(Fault::None),
        1 => prop::sample::select(vec![
            "HTTP/1.2", "HTTP/2.0", "http/1.1", "HTTP/0.9", "HTTP/1.10", "HTTP/11", "HTTP/1,1", "HTTP/", "HTTPS/1.1",
        ]).prop_map(Fault::Version),
        1 => prop::sample::select(vec!["600", "099", "101", "20x", "2000", " 200", "2", "\t200"])
            .prop_map(Fault::Status),
        1 => prop::sample::select(vec![
            &b"Bad Name: x"[..], b"X : y", b" fold", b"\tfold", b"NoColon", b": empty", b"X: \x00",
            b"X: a\x7fb", b"X: a\rb", b"Na\x01me: y", b"N@me: y",
        ]).prop_map(Fault::HeaderLine),
        1 => prop::sample::select(vec![
            ("Content-Length: {n}\r\nContent-Length: 1{n}", false),
            ("Content-Length: {n}, 1{n}", false),
            ("Content-Length: -{n}", false),
            ("Content-Length: +{n}", false),
            ("Content-Length: {n}x", false),
            ("Content-Length:", false),
            ("Content-Length: 99999999999999999999", false),
            ("Transfer-Encoding: chunked\r\nContent-Length: {n}", false),
            ("Transfer-Encoding: gzip", false),
            ("Transfer-Encoding: chunked, gzip", false),
            ("Transfer-Encoding: chunked\r\nTransfer-Encoding: chunked", false),
            ("Transfer-Encoding: ", false),
            ("Transfer-Encoding: chunked", true),
        ]).prop_map(|(t, v10)| Fault::Framing(t, v10)),
        1 => (any::<usize>(), prop::sample::select(vec!["", "g", "-1", "00000000000000001", "1 1", "\x00", ";x"]))
            .prop_map(|(i, t)| Fault::ChunkSize(i, t)),
        1 => (any::<usize>(), prop::sample::select(vec!["X", "\rX", "\n\n"]))
            .prop_map(|(i, t)| Fault::ChunkEnd(i, t)),
        2 => (0u16..1000).prop_map(Fault::Cut),
        1 => (1usize..3).prop_map(Fault::Interim),
    ]
}

pub(super) fn spec() -> impl Strategy<Value = Spec> {
    let interim = vec(
        (
            prop::sample::select(vec![100u16, 102, 103, 150, 199]),
            fields(3),
        ),
        0..=MAX_INTERIM as usize,
    );
    let status = prop_oneof![
        Just(200u16),
        200u16..=599,
        prop::sample::select(vec![201, 206, 301, 302, 404, 500, 503, 599]),
    ];
    let reason = vec(
        prop_oneof![8 => 0x20u8..=0x7e, 1 => 0x80u8..=0xff, 1 => Just(b'\t')],
        0..20,
    );
    let body = prop_oneof![vec(any::<u8>(), 0..64), vec(any::<u8>(), 0..2000)];
    let kind = prop::sample::select(vec![Kind::None, Kind::Length, Kind::Chunked, Kind::Close]);
    (
        (interim, 0u8..2, status, reason, fields(6)),
        (
            prop::option::of(prop::sample::select(CONNECTION)),
            kind,
            body,
            vec(any::<prop::sample::Index>(), 0..6),
            vec(
                prop::sample::select(vec![";a", ";a=b", " ; n=\"q v\"", ";x=1;y", "\t;e", ""]),
                1..4,
            ),
            fields(3),
        ),
        (
            0u8..3,
            prop::sample::select(vec![("", ""), (" ", ""), ("\t ", " \t"), ("", "  ")]),
            prop_oneof![3 => Just(vec![]), 1 => vec(any::<u8>(), 1..20)],
            (0u8..4, 32usize..600),
            prop::sample::select(vec![0usize, 1, 7, 64, 100_000]),
            fault(),
        ),
    )
        .prop_map(
            |(
                (interim, version, status, reason, headers),
                (connection, kind, body, cuts, ext, trailers),
                (eol, ows, garbage, max_head, body_keep, fault),
            )| {
                let mut cuts: Vec<usize> = cuts.iter().map(|i| i.index(body.len() + 1)).collect();
                cuts.sort_unstable();
                Spec {
                    interim,
                    version,
                    status,
                    reason,
                    headers,
                    connection,
                    kind,
                    body,
                    cuts,
                    ext,
                    trailers,
                    eol,
                    ows,
                    garbage,
                    max_head,
                    body_keep,
                    fault,
                }
            },
        )
}

pub(super) struct Out {
    bytes: Vec<u8>,
    eol_count: usize,
    eol: u8,
}

impl Out {
    fn eol(&mut self) {
        self.eol_count += 1;
        let lf = match self.eol {
            0 => false,
            1 => true,
            _ => self.eol_count % 2 == 0,
        };
        self.bytes
            .extend_from_slice(if lf { &b"\n"[..] } else { b"\r\n" });
    }

    fn line(&mut self, text: &[u8]) {
        self.bytes.extend_from_slice(text);
        self.eol();
    }

    fn field(&mut self, name: &[u8], value: &[u8], ows: (&str, &str)) {
        self.bytes.extend_from_slice(name);
        self.bytes.push(b':');
        self.bytes.extend_from_slice(ows.0.as_bytes());
        self.bytes.extend_from_slice(value);
        self.bytes.extend_from_slice(ows.1.as_bytes());
        self.eol();
    }

    fn len(&self) -> usize {
        self.bytes.len()
    }
}

pub(super) fn trimmed(v: &[u8]) -> Vec<u8> {
    trim(v).to_vec()
}

/// Renders a spec: the bytes, the config and what the parser must say.
pub(super) fn render(s: &Spec) -> (Vec<u8>, Config, Expect) {
    let mut s = s.clone();
    // Make the spec coherent with its fault.
    let mut head_request = false;
    match s.fault {
        Fault::Framing(_, v10) => {
            s.kind = if v10 { Kind::Chunked } else { Kind::Length };
            if v10 {
                s.version = 0;
            }
        }
        Fault::ChunkSize(..) | Fault::ChunkEnd(..) => {
            s.kind = Kind::Chunked;
            if s.body.is_empty() {
                s.body = b"x".to_vec();
            }
        }
        Fault::Interim(n) => {
            s.interim.resize(MAX_INTERIM as usize + n, (100, vec![]));
        }
        _ => {}
    }
    match s.kind {
        Kind::None => {
            s.body.clear();
            match s.status % 3 {
                0 => s.status = 204,
                1 => s.status = 304,
                _ => head_request = true,
            }
        }
        _ if s.status == 204 || s.status == 304 => s.status = 200,
        _ => {}
    }
    if s.kind == Kind::Chunked && !matches!(s.fault, Fault::Framing(..)) {
        // Transfer-Encoding in HTTP/1.0 is a framing error.
        s.version = 1;
    }
    if s.kind == Kind::Close {
        s.body.extend_from_slice(&s.garbage);
        s.garbage.clear();
    }

    let mut out = Out {
        bytes: Vec::new(),
        eol_count: 0,
        eol: s.eol,
    };
    // Regions bounded by max_head, in order, and the error past it.
    let mut regions: Vec<(usize, Invalid)> = Vec::new();

    let version_text = |v: u8| if v == 0 { "HTTP/1.0" } else { "HTTP/1.1" };
    for (i, (status, fields)) in s.interim.iter().enumerate() {
        let start = out.len();
        let version = match (&s.fault, i) {
            (Fault::Version(v), 0) => v,
            _ => version_text(s.version),
        };
        out.line(format!("{version} {status} Interim").as_bytes());
        for (n, v) in fields {
            out.field(n, v, s.ows);
        }
        out.eol();
        regions.push((out.len() - start, Invalid::HeadTooLarge));
    }

    let start = out.len();
    let version = match &s.fault {
        Fault::Version(v) if s.interim.is_empty() => v,
        _ => version_text(s.version),
    };
    out.bytes.extend_from_slice(version.as_bytes());
    out.bytes.push(b' ');
    match &s.fault {
        Fault::Status(t) => out.bytes.extend_from_slice(t.as_bytes()),
        _ => out.bytes.extend_from_slice(s.status.to_string().as_bytes()),
    }
    if !s.reason.is_empty() || s.eol == 2 {
        out.bytes.push(b' ');
    }
    out.bytes.extend_from_slice(&s.reason);
    out.eol();
    let mut headers: Fields = Vec::new();
    let mut field = |out: &mut Out, n: &[u8], v: &[u8]| {
        out.field(n, v, s.ows);
        headers.push((n.to_vec(), trimmed(v)));
    };
    for (n, v) in &s.headers {
        field(&mut out, n, v);
    }
    if let Some(c) = s.connection {
        field(&mut out, b"Connection", c.as_bytes());
    }
    if let Fault::HeaderLine(l) = &s.fault {
        out.line(l);
    }
    match (&s.fault, s.kind) {
        (Fault::Framing(t, _), _) => {
            let t = t.replace("{n}", &s.body.len().to_string());
            for l in t.split("\r\n") {
                out.line(l.as_bytes());
            }
        }
        (_, Kind::Length) => field(
            &mut out,
            b"Content-Length",
            s.body.len().to_string().as_bytes(),
        ),
        (_, Kind::Chunked) => field(&mut out, b"Transfer-Encoding", b"chunked"),
        (_, Kind::None) if s.status % 2 == 0 => field(&mut out, b"Content-Length", b"10"),
        _ => {}
    }
    out.eol();
    regions.push((out.len() - start, Invalid::HeadTooLarge));
    let head_end = out.len();

    match s.kind {
        Kind::Length | Kind::Close => out.bytes.extend_from_slice(&s.body),
        Kind::Chunked => {
            let mut chunks = Vec::new();
            let mut from = 0;
            for &to in s.cuts.iter().chain([&s.body.len()]) {
                if to > from {
                    chunks.push((from, to));
                    from = to;
                }
            }
            let n = chunks.len();
            for (k, &(from, to)) in chunks.iter().enumerate() {
                let start = out.len();
                match &s.fault {
                    Fault::ChunkSize(i, t) if i % n == k => {
                        out.bytes.extend_from_slice(t.as_bytes())
                    }
                    _ => {
                        out.bytes
                            .extend_from_slice(format!("{:x}", to - from).as_bytes());
                        out.bytes
                            .extend_from_slice(s.ext[k % s.ext.len()].as_bytes());
                    }
                }
                out.eol();
                regions.push((out.len() - start, Invalid::Chunk));
                out.bytes.extend_from_slice(&s.body[from..to]);
                match &s.fault {
                    Fault::ChunkEnd(i, t) if i % n == k => {
                        out.bytes.extend_from_slice(t.as_bytes())
                    }
                    _ => out.eol(),
                }
            }
            let start = out.len();
            out.bytes.push(b'0');
            out.eol();
            regions.push((out.len() - start, Invalid::Chunk));
            let start = out.len();
            for (n, v) in &s.trailers {
                out.field(n, v, s.ows);
            }
            out.eol();
            regions.push((out.len() - start, Invalid::HeadTooLarge));
        }
        Kind::None => {}
    }
    let end = out.len();
    let mut bytes = out.bytes;
    bytes.extend_from_slice(&s.garbage);

    let largest = regions.iter().map(|r| r.0).max().unwrap_or(0);
    let max_head = match (&s.fault, s.max_head.0) {
        (Fault::None, 1) => largest,
        (Fault::None, 2) => largest - 1,
        (Fault::None, 3) => s.max_head.1,
        _ => 1 << 20,
    };
    let config = Config {
        max_head,
        body_keep: s.body_keep,
        head_request,
        final_101: false,
    };

    let fail = |e| Expect {
        state: State::Invalid(e),
        eof: State::Invalid(e),
        valid: None,
    };
    let expect = match &s.fault {
        Fault::Version(_) => fail(Invalid::Version),
        Fault::Status(_) => fail(Invalid::StatusLine),
        Fault::HeaderLine(_) => fail(Invalid::HeaderSyntax),
        Fault::Framing(..) => fail(Invalid::Framing),
        Fault::ChunkSize(..) | Fault::ChunkEnd(..) => fail(Invalid::Chunk),
        Fault::Interim(_) => fail(Invalid::TooManyInterim),
        Fault::Cut(pm) => {
            // Within the head, or anywhere but past the framing's end.
            let limit = if matches!(s.kind, Kind::Length | Kind::Chunked) {
                end
            } else {
                head_end
            };
            let at = limit * usize::from(*pm) / 1000;
            bytes.truncate(at);
            let state = if at < head_end {
                State::NeedMore
            } else {
                State::Body
            };
            Expect {
                state,
                eof: State::Invalid(Invalid::Truncated),
                valid: None,
            }
        }
        Fault::None => match regions.iter().find(|r| r.0 > max_head) {
            Some(&(_, e)) => fail(e),
            None => {
                let keep_alive = {
                    let tokens: Vec<String> = s
                        .connection
                        .unwrap_or("")
                        .split(',')
                        .map(|t| t.trim().to_ascii_lowercase())
                        .collect();
                    !tokens.iter().any(|t| t == "close")
                        && (s.version == 1 || tokens.iter().any(|t| t == "keep-alive"))
                };
                let done = if s.kind == Kind::Close {
                    State::Body
                } else {
                    State::Complete
                };
                Expect {
                    state: done,
                    eof: State::Complete,
                    valid: Some(Valid {
                        version: s.version,
                        status: s.status,
                        reason: s.reason.clone(),
                        headers,
                        body: s.body[..s.body.len().min(s.body_keep)].to_vec(),
                        body_len: s.body.len() as u64,
                        trailing: s.garbage.len() as u64,
                        reusable: keep_alive && s.kind != Kind::Close && s.garbage.is_empty(),
                    }),
                }
            }
        },
    };
    (bytes, config, expect)
}

/// Everything a caller can observe, before and after eof.
#[derive(Clone, Debug, PartialEq)]
pub(super) struct Seen {
    state: State,
    head: Option<Head>,
    body: Vec<u8>,
    settled: bool,
    body_len: u64,
    trailing: u64,
    reusable: bool,
    eof: State,
    eof_reusable: bool,
    eof_settled: bool,
}

pub(super) fn rank(s: State) -> u8 {
    match s {
        State::NeedMore => 0,
        State::Body => 1,
        State::Complete | State::Invalid(_) => 2,
    }
}

/// Feeds `pieces`, checking the memory bound and that the state only moves
/// forward, then eof.
pub(super) fn observe<'a>(
    c: Config,
    pieces: impl IntoIterator<Item = &'a [u8]>,
) -> Result<Seen, TestCaseError> {
    let mut p = Parser::new(c);
    let bound = c.max_head + c.body_keep;
    let mut last = p.state();
    for piece in pieces {
        let s = p.feed(piece);
        prop_assert_eq!(s, p.state());
        prop_assert!(p.held() <= bound, "held {} > {}", p.held(), bound);
        prop_assert!(p.body().len() <= c.body_keep);
        prop_assert!(rank(s) >= rank(last), "{:?} after {:?}", s, last);
        if rank(last) == 2 {
            prop_assert_eq!(s, last);
        }
        last = s;
    }
    let seen = Seen {
        state: p.state(),
        head: p.head().cloned(),
        body: p.body().to_vec(),
        settled: p.body_settled(),
        body_len: p.body_len(),
        trailing: p.trailing(),
        reusable: p.reusable(),
        eof: p.eof(),
        eof_reusable: p.reusable(),
        eof_settled: p.body_settled(),
    };
    prop_assert!(rank(seen.eof) == 2);
    prop_assert!(p.held() <= bound);
    Ok(seen)
}

/// The same bytes in one piece, one byte at a time and at `cuts`.
pub(super) fn split_invariant(
    c: Config,
    bytes: &[u8],
    cuts: &[prop::sample::Index],
) -> Result<Seen, TestCaseError> {
    let whole = observe(c, [bytes])?;
    let single = observe(c, bytes.chunks(1))?;
    prop_assert_eq!(&single, &whole, "1-byte splits");
    let mut at: Vec<usize> = cuts.iter().map(|i| i.index(bytes.len() + 1)).collect();
    at.sort_unstable();
    at.push(bytes.len());
    let mut from = 0;
    let pieces: Vec<&[u8]> = at
        .iter()
        .map(|&to| {
            let p = &bytes[from..to];
            from = to;
            p
        })
        .collect();
    let split = observe(c, pieces)?;
    prop_assert_eq!(&split, &whole, "split at {:?}", at);
    Ok(whole)
}

/// HTTP-ish tokens, to reach deep states from arbitrary input.
pub(super) const PIECES: &[&[u8]] = &[
    b"HTTP/1.1 ",
    b"HTTP/1.0 ",
    b"200",
    b"100",
    b"204",
    b" OK",
    b"\r\n",
    b"\n",
    b"\r",
    b": ",
    b"X",
    b" ",
    b"\t",
    b"\x00",
    b"Content-Length: ",
    b"Transfer-Encoding: chunked",
    b"Connection: close",
    b"0",
    b"5",
    b"f",
    b";",
    b",",
    b"ffffffffffffffff",
    b"abc",
    b"\xff",
];

pub(super) fn http_ish() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        vec(any::<u8>(), 0..200),
        vec(prop::sample::select(PIECES), 0..60).prop_map(|v| v.concat()),
    ]
}

proptest! {

    #[test]
    fn generated_responses_give_the_expected_verdict(s in spec(), cuts in vec(any::<prop::sample::Index>(), 0..8)) {
        let (bytes, c, expect) = render(&s);
        let seen = split_invariant(c, &bytes, &cuts)?;
        prop_assert_eq!(seen.state, expect.state, "{:?}", String::from_utf8_lossy(&bytes));
        prop_assert_eq!(seen.eof, expect.eof);
        if let Some(v) = expect.valid {
            let head = seen.head.as_ref().expect("a head");
            prop_assert_eq!(head.version, v.version);
            prop_assert_eq!(head.status, v.status);
            prop_assert_eq!(head.reason(), &v.reason[..]);
            let headers: Fields = head.headers().map(|(n, v)| (n.to_vec(), v.to_vec())).collect();
            prop_assert_eq!(headers, v.headers);
            prop_assert_eq!(&seen.body, &v.body);
            prop_assert_eq!(seen.body_len, v.body_len);
            prop_assert_eq!(seen.trailing, v.trailing);
            prop_assert_eq!(seen.reusable, v.reusable);
            prop_assert!(!seen.eof_reusable);
            prop_assert!(seen.eof_settled);
            prop_assert_eq!(seen.settled, expect.state == State::Complete || seen.body.len() == c.body_keep);
        }
    }

    #[test]
    fn arbitrary_bytes_split_invariant_and_bounded(
        bytes in http_ish(),
        max_head in prop_oneof![0usize..64, 64usize..2048],
        body_keep in 0usize..64,
        head_request: bool,
        cuts in vec(any::<prop::sample::Index>(), 0..8),
    ) {
        split_invariant(cfg(max_head, body_keep, head_request), &bytes, &cuts)?;
    }

    #[test]
    fn mutated_responses_split_invariant_and_bounded(
        s in spec(),
        edits in vec((any::<prop::sample::Index>(), any::<u8>(), 0u8..3), 1..4),
        cuts in vec(any::<prop::sample::Index>(), 0..8),
    ) {
        let (mut bytes, c, _) = render(&s);
        for (at, b, op) in edits {
            let i = at.index(bytes.len() + 1);
            match op {
                0 if i < bytes.len() => bytes[i] = b,
                1 if i < bytes.len() => { bytes.remove(i); }
                _ => bytes.insert(i, b),
            }
        }
        split_invariant(c, &bytes, &cuts)?;
    }
}

#[test]
fn the_parser_itself_is_small() {
    // The fixed part of the memory bound (Parser's docs).
    assert!(
        std::mem::size_of::<Parser>() <= 192,
        "{}",
        std::mem::size_of::<Parser>()
    );
}
