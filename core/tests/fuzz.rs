//! Fuzz and property tests over the public API of `healthcheck_core`
//! (docs/design.md, Tests).
//!
//! Every test checks invariants, not only "no panic": parsers are compared
//! with oracles written from the rules of docs/directives.md and docs/status.md, renderers are read back
//! with real parsers (serde_json, the csv crate, a strict Prometheus text
//! reader, an HTML cell reader), the VNSWRR ring is driven by adversarial
//! `check`/`take` answers against a model of which peers it may refuse,
//! and the rise/fall machine, the scheduler and the pointer map against
//! their documented contracts.
//!
//! Case counts:
//! - by default each test runs the count given to [`cfg`]: the whole file
//!   takes a few seconds in a debug build, so it runs in CI with
//!   `cargo test -p healthcheck-core`;
//! - `FUZZ_SCALE=k` multiplies every count by `k` (what `scripts/fuzz`
//!   does, calibrated per test so the run fits in `FUZZ_SECONDS`);
//! - `PROPTEST_CASES=n` sets every count to `n` (proptest's own variable).
//!
//! A failing case is shrunk and its seed appended to
//! `core/tests/fuzz.proptest-regressions`, which is committed: every later
//! run replays those seeds first. Inputs that once crashed something are
//! also kept as plain `#[test]`s at the end of this file.

use std::cell::RefCell;
use std::collections::{HashMap, HashSet};

use healthcheck_core::conf::{self, CheckConf, CheckType, KernelKeepalive, Reuse, VnswrrConf};
use healthcheck_core::health::{Health, Transition};
use healthcheck_core::identity::identity_hash;
use healthcheck_core::ptrmap::PtrMap;
use healthcheck_core::schedule::{self, Decision};
use healthcheck_core::status::{
    self, html, json, prom, Filter, Format, Group, Meta, PeerRow, Query, DURATION_BUCKETS_MS,
    DURATION_SLOTS, MAX_REFRESH_S,
};
use healthcheck_core::vnswrr::{Ring, RingError, Verdict, BLOCK_TTL_MS, BUILD_BUDGET, MAX_NODES};
use proptest::collection::vec;
use proptest::prelude::*;
use proptest::test_runner::FileFailurePersistence;

// ---------------------------------------------------------------------------
// Configuration
// ---------------------------------------------------------------------------

fn env_u32(name: &str) -> Option<u32> {
    std::env::var(name).ok()?.trim().parse().ok()
}

/// `cases` for CI, scaled by `FUZZ_SCALE`, or `PROPTEST_CASES` when set.
fn cfg(cases: u32) -> ProptestConfig {
    let cases = match env_u32("PROPTEST_CASES") {
        Some(n) => n,
        None => cases.saturating_mul(env_u32("FUZZ_SCALE").unwrap_or(1).max(1)),
    };
    ProptestConfig {
        cases,
        // core/tests/fuzz.rs -> core/tests/fuzz.proptest-regressions
        failure_persistence: Some(Box::new(FileFailurePersistence::WithSource(
            "proptest-regressions",
        ))),
        ..ProptestConfig::default()
    }
}

// ---------------------------------------------------------------------------
// Shared helpers
// ---------------------------------------------------------------------------

/// Pieces that break naive escapers: quotes, separators, line ends,
/// controls, markup, C1 controls, truncated and invalid UTF-8, surrogates,
/// code points past U+10FFFF, and non-ASCII text.
const HOSTILE: &[&[u8]] = &[
    b"\"",
    b"\\",
    b",",
    b"\n",
    b"\r",
    b"\r\n",
    b"\t",
    b"<",
    b">",
    b"&",
    b"'",
    b"=",
    b"+",
    b"-",
    b"@",
    b"\x00",
    b"\x1b[31m",
    b"\x7f",
    b"\xc2\x85",
    b"\xc2\x9f",
    b"\xc2",
    b"\xe2\x80",
    b"\xe2\x80\xa8",
    b"\xff",
    b"\xed\xa0\x80",
    b"\xf4\x90\x80\x80",
    b"\xf0\x9f\x92\xa9",
    "\u{e9}".as_bytes(),
    b"&amp;",
    b"</td>",
    b"<script>",
    b"{",
    b"}",
    b" ",
    b"a",
    b"%",
    b"%41",
    b"\\n",
    b"\\\"",
    b"127.0.0.1:80",
    b"[::1]:8080",
    b"unix:/tmp/x.sock",
];

fn hostile_bytes(max: usize) -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        vec(any::<u8>(), 0..max),
        vec(prop::sample::select(HOSTILE), 0..max / 2 + 1).prop_map(|v| v.concat()),
        "[a-zA-Z0-9._:/\\[\\]-]{0,30}".prop_map(String::into_bytes),
    ]
}

fn lossy(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// conf's rendering of an argument in an error message (its docs): valid
/// UTF-8 as written, invalid bytes and ASCII controls as `\xNN`.
fn conf_printable(b: &[u8]) -> String {
    let mut out = String::new();
    for chunk in b.utf8_chunks() {
        for c in chunk.valid().chars() {
            if c.is_ascii_control() {
                out.push_str(&format!("\\x{:02x}", u32::from(c)));
            } else {
                out.push(c);
            }
        }
        for x in chunk.invalid() {
            out.push_str(&format!("\\x{x:02x}"));
        }
    }
    out
}

/// A configuration error must be one line without ASCII controls.
fn assert_one_line(msg: &str) -> Result<(), TestCaseError> {
    prop_assert!(
        !msg.chars().any(|c| c.is_ascii_control()),
        "control character in {:?}",
        msg
    );
    prop_assert!(!msg.is_empty());
    Ok(())
}

/// The error quotes one of the arguments as written.
fn assert_quotes_an_arg(msg: &str, directive: &str, args: &[&[u8]]) -> Result<(), TestCaseError> {
    let quoted = args.iter().any(|a| {
        let p = conf_printable(a);
        msg.starts_with(&format!("invalid parameter \"{p}\": "))
            || msg.starts_with(&format!("invalid parameter \"{p}\" in \"{directive}\""))
            || msg.starts_with(&format!("invalid value \"{p}\" in \"{directive}\""))
    });
    prop_assert!(
        quoted || msg == format!("invalid number of arguments in \"{directive}\" directive"),
        "{:?} quotes none of {:?}",
        msg,
        args
    );
    Ok(())
}

// ---------------------------------------------------------------------------
// nginx time syntax: an oracle for canonical forms
// ---------------------------------------------------------------------------

const MS_UNITS: [(&str, u64); 6] = [
    ("w", 604_800_000),
    ("d", 86_400_000),
    ("h", 3_600_000),
    ("m", 60_000),
    ("s", 1_000),
    ("ms", 1),
];

const S_UNITS: [(&str, u64); 7] = [
    ("y", 31_536_000),
    ("M", 2_592_000),
    ("w", 604_800),
    ("d", 86_400),
    ("h", 3_600),
    ("m", 60),
    ("s", 1),
];

/// `value` written as `1d2h3m` (largest units first, zero parts left out,
/// optional spaces after a unit); `units` is MS_UNITS or S_UNITS.
fn composite(mut value: u64, units: &[(&str, u64)], spaces: bool) -> String {
    let mut out = String::new();
    for &(name, size) in units {
        let n = value / size;
        if n == 0 {
            continue;
        }
        value %= size;
        if spaces && !out.is_empty() {
            out.push(' ');
        }
        out.push_str(&format!("{n}{name}"));
    }
    if out.is_empty() {
        out = format!("0{}", units[units.len() - 1].0);
    }
    out
}

/// A written time for `interval=`/`timeout=` and the milliseconds the
/// parameter reads from it (`None`: malformed or beyond `i64::MAX`).
fn ms_text() -> impl Strategy<Value = (String, Option<u64>)> {
    let value = prop_oneof![
        Just(0u64),
        Just(1),
        Just(99),
        Just(100),
        Just(101),
        100u64..20_000,
        (1u64..100).prop_map(|s| s * 1000),
        Just(86_400_000),
        Just(86_400_001),
        Just(604_800_000),
        any::<u64>(),
    ];
    (value, 0u8..9).prop_map(|(v, form)| render_ms(v, form))
}

/// `v` ms in one of nginx's syntaxes: forms 0..=5 are valid for
/// `interval`/`timeout` (when `v < 2^50`), 6.. are not.
fn render_ms(v: u64, form: u8) -> (String, Option<u64>) {
    match form {
        0 | 1 => (v.to_string(), (v <= i64::MAX as u64).then_some(v)),
        2 => (format!("{v}ms"), (v <= i64::MAX as u64).then_some(v)),
        3 if v % 1000 == 0 => (format!("{}s", v / 1000), Some(v)),
        3 | 4 if v < 1 << 50 => (composite(v, &MS_UNITS, false), Some(v)),
        5 if v < 1 << 50 => (composite(v, &MS_UNITS, true), Some(v)),
        // Not accepted by interval/timeout.
        6 => (format!("{}m{}", v % 100 + 1, v % 60 + 1), None),
        7 => (format!("{v}s "), None),
        _ => {
            let junk = [
                "", "-1", "+1", "1.5s", "5x", "0x10", "1M", "1y", "3S", "ms", " 5",
            ];
            (junk[(v % junk.len() as u64) as usize].to_string(), None)
        }
    }
}

/// A written time in nginx's seconds syntax and its value in seconds
/// (`None`: malformed or beyond `i64::MAX`).
fn secs_text() -> impl Strategy<Value = (String, Option<u64>)> {
    let value = prop_oneof![
        Just(0u64),
        Just(1),
        Just(2),
        Just(5),
        Just(29),
        Just(30),
        Just(31),
        1u64..200,
        1u64..40_000,
        Just(32_767),
        Just(32_768),
        Just(604_800),
        Just(604_801),
        any::<u64>(),
    ];
    (value, 0u8..8).prop_map(|(v, form)| render_secs(v, form))
}

/// `v` seconds in nginx's seconds syntax: forms 0..=5 are valid (when
/// `v < 2^40`), 6.. are not.
fn render_secs(v: u64, form: u8) -> (String, Option<u64>) {
    match form {
        0 | 1 => (v.to_string(), (v <= i64::MAX as u64).then_some(v)),
        2 => (format!("{v}s"), (v <= i64::MAX as u64).then_some(v)),
        3 | 4 if v < 1 << 40 => (composite(v, &S_UNITS, form == 4), Some(v)),
        // A space right after digits closes the value as seconds.
        5 if v < 1 << 40 => (format!("{v} "), Some(v)),
        _ => {
            let junk = ["", "500ms", "1ms", "-1", "1.5", "on1", "s", "1x", "1s1m"];
            (junk[(v % junk.len() as u64) as usize].to_string(), None)
        }
    }
}

fn clean_ms(v: impl Strategy<Value = u64>) -> impl Strategy<Value = (String, Option<u64>)> {
    (v, 0u8..6).prop_map(|(v, form)| render_ms(v, form))
}

fn clean_secs(v: impl Strategy<Value = u64>) -> impl Strategy<Value = (String, Option<u64>)> {
    (v, 0u8..6).prop_map(|(v, form)| render_secs(v, form))
}

/// A decimal integer argument and its value (`None`: malformed or beyond
/// `i64::MAX`).
fn dec_text() -> impl Strategy<Value = (String, Option<u64>)> {
    let value = prop_oneof![
        Just(0u64),
        Just(1),
        Just(2),
        Just(3),
        Just(127),
        Just(128),
        Just(65_535),
        Just(65_536),
        Just(100_000),
        Just(100_001),
        Just(1_000_000),
        Just(1_000_001),
        Just(u32::MAX as u64),
        Just(u32::MAX as u64 + 1),
        1u64..300,
        any::<u64>(),
    ];
    (value, 0u8..6).prop_map(|(v, form)| match form {
        0..=2 => (v.to_string(), (v <= i64::MAX as u64).then_some(v)),
        3 => (format!("000{v}"), (v <= i64::MAX as u64).then_some(v)),
        _ => {
            let junk = ["", "+1", "-1", "1k", " 1", "1 ", "3s", "0x1", "1e3", "on"];
            (junk[(v % junk.len() as u64) as usize].to_string(), None)
        }
    })
}

// ---------------------------------------------------------------------------
// 1. conf::parse_time, parse_shm_size, parse_keepalive_requests,
//    parse_status_directive, parse_vnswrr
// ---------------------------------------------------------------------------

/// The byte alphabet of nginx times, plus a few strangers.
fn time_bytes() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        vec(any::<u8>(), 0..24),
        vec(
            prop::sample::select(b"0123456789 smhdwMy\t.-+kKgG".to_vec()),
            0..24
        ),
    ]
}

proptest! {
    #![proptest_config(cfg(2000))]

    #[test]
    fn time_never_panics_and_stays_in_range(v in time_bytes(), seconds: bool) {
        if let Some(x) = conf::parse_time(&v, seconds) {
            prop_assert!(x <= i64::MAX as u64);
            // Only digits, spaces and unit letters can make a time.
            prop_assert!(v.iter().all(|b| b"0123456789 smhdwMy".contains(b)), "{:?}", v);
            prop_assert!(v.iter().any(u8::is_ascii_digit));
            if seconds {
                prop_assert!(!v.windows(2).any(|w| w == b"ms"));
            } else {
                prop_assert!(!v.contains(&b'M') && !v.contains(&b'y'));
            }
        }
    }

    #[test]
    fn time_canonical_forms(value in any::<u64>(), seconds: bool, spaces: bool,
                            zeros in 0usize..3, trailing in prop::sample::select(vec!["", " ", "  "])) {
        // Large values (overflowing i64 once scaled) must be refused, not wrapped.
        let units: &[(&str, u64)] = if seconds { &S_UNITS } else { &MS_UNITS };
        let value = value % (i64::MAX as u64 + 1);
        let text = format!("{}{}{}", "0".repeat(zeros), composite(value, units, spaces), trailing);
        prop_assert_eq!(conf::parse_time(text.as_bytes(), seconds), Some(value), "{}", text);

        // Every unit on its own, any count: exact or refused on overflow.
        for &(name, size) in units {
            let want = value.checked_mul(size).filter(|&x| x <= i64::MAX as u64);
            prop_assert_eq!(conf::parse_time(format!("{value}{name}").as_bytes(), seconds), want);
        }
        // A bare number is seconds.
        let bare = if seconds { Some(value) } else { value.checked_mul(1000).filter(|&x| x <= i64::MAX as u64) };
        prop_assert_eq!(conf::parse_time(value.to_string().as_bytes(), seconds), bare);
    }

    #[test]
    fn time_rejects_disorder_and_strangers(a in 1u64..1000, b in 1u64..1000, i in 0usize..6, j in 0usize..6,
                                           stranger in any::<u8>(), seconds: bool) {
        let units: &[(&str, u64)] = if seconds { &S_UNITS[2..] } else { &MS_UNITS };
        let (i, j) = (i % units.len(), j % units.len());
        // Units must come from the largest to the smallest, each once.
        if i >= j {
            let text = format!("{a}{}{b}{}", units[i].0, units[j].0);
            // `1m1ms` parses `m` then `ms`: in order. `1ms1m` must not.
            prop_assert_eq!(conf::parse_time(text.as_bytes(), seconds), None, "{}", text);
        }
        if !b"0123456789 smhdwMy".contains(&stranger) {
            let mut text = format!("{a}s").into_bytes();
            text.push(stranger);
            prop_assert_eq!(conf::parse_time(&text, seconds), None);
            text.insert(0, stranger);
            prop_assert_eq!(conf::parse_time(&text[..text.len() - 1], seconds), None);
        }
    }

    #[test]
    fn shm_size_matches_the_oracle(v in prop_oneof![
            time_bytes(),
            (any::<u64>(), prop::sample::select(vec!["", "k", "K", "m", "M", "g", "G", "t", "kb", " "]),
             0u8..3).prop_map(|(n, unit, w)| {
                let n = match w { 0 => n % 5000, 1 => n % (1 << 33), _ => n };
                format!("{n}{unit}").into_bytes()
            }),
        ]) {
        let got = conf::parse_shm_size(&v);
        // Oracle: digits, then at most one of k/m/g in either case.
        let (digits, scale) = match v.split_last() {
            Some((b'k' | b'K', rest)) => (rest, 1u64 << 10),
            Some((b'm' | b'M', rest)) => (rest, 1 << 20),
            Some((b'g' | b'G', rest)) => (rest, 1 << 30),
            _ => (&v[..], 1),
        };
        let want = if !digits.is_empty() && digits.iter().all(u8::is_ascii_digit) {
            std::str::from_utf8(digits).unwrap().parse::<u128>().ok()
                .map(|n| n.saturating_mul(u128::from(scale)))
                .filter(|&n| n > 0 && n <= 1 << 32)
                .map(|n| n as u64)
        } else {
            None
        };
        match got {
            Ok(n) => prop_assert_eq!(Some(n), want),
            Err(e) => {
                prop_assert_eq!(want, None);
                let msg = e.to_string();
                assert_one_line(&msg)?;
                assert_quotes_an_arg(&msg, "check_shm_size", &[&v])?;
            }
        }
    }

    #[test]
    fn keepalive_requests_match_the_oracle(v in prop_oneof![
            dec_text().prop_map(|(t, _)| t.into_bytes()),
            time_bytes(),
        ]) {
        let want = if !v.is_empty() && v.iter().all(u8::is_ascii_digit) {
            std::str::from_utf8(&v).unwrap().parse::<u128>().ok()
                .filter(|n| (1..=1_000_000).contains(n)).map(|n| n as u32)
        } else {
            None
        };
        match conf::parse_keepalive_requests(&v) {
            Ok(n) => prop_assert_eq!(Some(n), want),
            Err(e) => {
                prop_assert_eq!(want, None);
                assert_one_line(&e.to_string())?;
                assert_quotes_an_arg(&e.to_string(), "check_keepalive_requests", &[&v])?;
            }
        }
    }

    #[test]
    fn status_directive_and_vnswrr_match_the_oracle(
        args in vec(prop_oneof![
            hostile_bytes(16),
            prop::sample::select(vec!["html", "csv", "json", "prometheus", "JSON", "Html", "json "])
                .prop_map(|s| s.as_bytes().to_vec()),
            dec_text().prop_map(|(t, _)| format!("max_init={t}").into_bytes()),
            Just(b"max_init".to_vec()),
            Just(b"MAX_INIT=1".to_vec()),
        ], 0..4)
    ) {
        let args: Vec<&[u8]> = args.iter().map(Vec::as_slice).collect();

        let want = match args.as_slice() {
            [] => Some(Format::Html),
            [a] => match *a {
                b"html" => Some(Format::Html),
                b"csv" => Some(Format::Csv),
                b"json" => Some(Format::Json),
                b"prometheus" => Some(Format::Prometheus),
                _ => None,
            },
            _ => None,
        };
        match conf::parse_status_directive(&args).map(|c| c.format) {
            Ok(f) => prop_assert_eq!(Some(f), want),
            Err(e) => {
                prop_assert_eq!(want, None);
                assert_one_line(&e.to_string())?;
                assert_quotes_an_arg(&e.to_string(), "healthcheck_status", &args)?;
            }
        }
        // The directive and `?format=` name formats the same way.
        if let [a] = args.as_slice() {
            prop_assert_eq!(
                conf::parse_status_directive(&args).ok().map(|c| c.format),
                Format::from_name(a)
            );
        }

        let mut want = Some(VnswrrConf::default());
        let mut seen = false;
        for a in &args {
            let value = a.strip_prefix(b"max_init=");
            let n = value
                .filter(|v| !v.is_empty() && v.iter().all(u8::is_ascii_digit))
                .and_then(|v| std::str::from_utf8(v).unwrap().parse::<u128>().ok())
                .filter(|&n| n <= u128::from(u32::MAX));
            match (n, seen) {
                (Some(n), false) => {
                    if let Some(w) = want.as_mut() {
                        w.max_init = n as u32;
                    }
                }
                _ => want = None,
            }
            seen |= value.is_some();
        }
        match conf::parse_vnswrr(&args) {
            Ok(v) => prop_assert_eq!(Some(v), want),
            Err(e) => {
                prop_assert_eq!(want, None);
                assert_one_line(&e.to_string())?;
                assert_quotes_an_arg(&e.to_string(), "vnswrr", &args)?;
            }
        }
    }
}

// ---------------------------------------------------------------------------
// 2. conf::parse_check
// ---------------------------------------------------------------------------

/// The first field of a generated `keepalive=` value.
#[derive(Clone, Debug)]
enum Rehandshake {
    Empty,
    On,
    Off,
    Secs(String, Option<u64>),
}

/// A later keepalive field.
#[derive(Clone, Debug)]
enum Later {
    Omitted,
    Empty,
    OnOff(&'static str),
    Value(String, Option<u64>),
}

#[derive(Clone, Debug)]
enum KeepaliveGen {
    Off,
    On,
    /// `keepalive=` (an error).
    Blank,
    Fields {
        rehandshake: Rehandshake,
        idle: Later,
        intvl: Later,
        cnt: Later,
        fifth: bool,
    },
}

impl KeepaliveGen {
    fn text(&self) -> String {
        match self {
            KeepaliveGen::Off => "off".into(),
            KeepaliveGen::On => "on".into(),
            KeepaliveGen::Blank => String::new(),
            KeepaliveGen::Fields {
                rehandshake,
                idle,
                intvl,
                cnt,
                fifth,
            } => {
                let mut fields = vec![match rehandshake {
                    Rehandshake::Empty => String::new(),
                    Rehandshake::On => "on".into(),
                    Rehandshake::Off => "off".into(),
                    Rehandshake::Secs(t, _) => t.clone(),
                }];
                let later = [idle, intvl, cnt];
                let last = later.iter().rposition(|l| !matches!(l, Later::Omitted));
                let shown = if *fifth { 3 } else { last.map_or(0, |i| i + 1) };
                for l in &later[..shown] {
                    fields.push(match l {
                        Later::Omitted | Later::Empty => String::new(),
                        Later::OnOff(s) => (*s).into(),
                        Later::Value(t, _) => t.clone(),
                    });
                }
                if *fifth {
                    fields.push("1".into());
                }
                fields.join(":")
            }
        }
    }
}

fn later(values: impl Strategy<Value = (String, Option<u64>)>) -> impl Strategy<Value = Later> {
    prop_oneof![
        3 => Just(Later::Omitted),
        1 => Just(Later::Empty),
        1 => prop::sample::select(vec!["on", "off"]).prop_map(Later::OnOff),
        // An empty written value is an empty field.
        4 => values.prop_map(|(t, v)| if t.is_empty() { Later::Empty } else { Later::Value(t, v) }),
    ]
}

fn rehandshake_secs((t, v): (String, Option<u64>)) -> Rehandshake {
    if t.is_empty() {
        Rehandshake::Empty
    } else {
        Rehandshake::Secs(t, v)
    }
}

fn keepalive_gen() -> impl Strategy<Value = KeepaliveGen> {
    let rehandshake = prop_oneof![
        Just(Rehandshake::Empty),
        Just(Rehandshake::On),
        Just(Rehandshake::Off),
        secs_text().prop_map(rehandshake_secs),
        secs_text().prop_map(rehandshake_secs),
    ];
    let small_secs = prop_oneof![
        secs_text(),
        (0u64..8).prop_map(|n| (n.to_string(), Some(n))),
    ];
    let fields = (
        rehandshake,
        later(small_secs.clone()),
        later(small_secs),
        later(dec_text()),
        prop::bool::weighted(0.05),
    )
        .prop_map(
            |(rehandshake, idle, intvl, cnt, fifth)| KeepaliveGen::Fields {
                rehandshake,
                idle,
                intvl,
                cnt,
                fifth,
            },
        );
    prop_oneof![
        1 => Just(KeepaliveGen::Off),
        2 => Just(KeepaliveGen::On),
        1 => Just(KeepaliveGen::Blank),
        6 => fields,
    ]
}

/// A near-valid `check` directive: each parameter absent or written in one
/// of its syntaxes (valid or not), plus duplicates and strangers.
#[derive(Clone, Debug)]
struct CheckGen {
    interval: Option<(String, Option<u64>)>,
    timeout: Option<(String, Option<u64>)>,
    down_interval: Option<(String, Option<u64>)>,
    jitter: Option<(String, Option<u64>)>,
    fall: Option<(String, Option<u64>)>,
    rise: Option<(String, Option<u64>)>,
    default_down: Option<&'static str>,
    check_type: Option<&'static str>,
    port: Option<(String, Option<u64>)>,
    reuse: Option<(String, Option<u64>)>,
    keepalive: Option<KeepaliveGen>,
    /// `match=` with this value (empty: an error).
    match_block: Option<&'static str>,
    /// Repeat the n-th argument (an error).
    dup: Option<usize>,
    /// An unknown or value-less argument (an error).
    stranger: Option<&'static str>,
}

impl CheckGen {
    fn args(&self) -> Vec<String> {
        let mut args = Vec::new();
        let mut push = |name: &str, v: &Option<(String, Option<u64>)>| {
            if let Some((t, _)) = v {
                args.push(format!("{name}={t}"));
            }
        };
        push("interval", &self.interval);
        push("timeout", &self.timeout);
        push("down_interval", &self.down_interval);
        push("jitter", &self.jitter);
        push("fall", &self.fall);
        push("rise", &self.rise);
        push("port", &self.port);
        push("reuse", &self.reuse);
        if let Some(v) = self.default_down {
            args.push(format!("default_down={v}"));
        }
        if let Some(v) = self.check_type {
            args.push(format!("type={v}"));
        }
        if let Some(k) = &self.keepalive {
            args.push(format!("keepalive={}", k.text()));
        }
        if let Some(m) = self.match_block {
            args.push(format!("match={m}"));
        }
        if let Some(i) = self.dup {
            if !args.is_empty() {
                let a = args[i % args.len()].clone();
                args.push(a);
            }
        }
        if let Some(s) = self.stranger {
            args.push(s.into());
        }
        args
    }

    /// The rules of docs/directives.md and docs/status.md, applied to the generated values.
    fn oracle(&self) -> Option<CheckConf> {
        if self.args().is_empty() || self.stranger.is_some() {
            return None;
        }
        if self.dup.is_some() {
            return None;
        }
        fn in_range(v: &Option<(String, Option<u64>)>, lo: u64, hi: u64) -> Option<Option<u64>> {
            match v {
                None => Some(None),
                Some((_, Some(n))) if (lo..=hi).contains(n) => Some(Some(*n)),
                Some(_) => None,
            }
        }
        let interval = in_range(&self.interval, 100, 86_400_000)?.unwrap_or(5000);
        let timeout = in_range(&self.timeout, 1, 86_400_000)?;
        let down_interval = in_range(&self.down_interval, 100, 86_400_000)?;
        let jitter = in_range(&self.jitter, 0, 86_400_000)?.unwrap_or(0);
        let fall = in_range(&self.fall, 1, 100_000)?.unwrap_or(3) as u32;
        let rise = in_range(&self.rise, 1, 100_000)?.unwrap_or(2) as u32;
        let port = in_range(&self.port, 1, 65_535)?.unwrap_or(0) as u16;
        // The C modules' spelling: default_down in any case.
        let default_down = match self.default_down.map(str::to_ascii_lowercase).as_deref() {
            None | Some("false") => false,
            Some("true") => true,
            Some(_) => return None,
        };
        let check_type = match self.check_type {
            None | Some("tcp") => CheckType::Tcp,
            Some("udp") => CheckType::Udp,
            Some("http") => CheckType::Http,
            Some("https") => CheckType::Https,
            Some("tls" | "ssl_hello") => CheckType::Tls,
            Some("mysql") => CheckType::Mysql,
            Some("ajp") => CheckType::Ajp,
            Some("fastcgi") => CheckType::Fastcgi,
            Some(_) => return None,
        };
        let match_block = match self.match_block {
            None => None,
            Some("") => return None,
            Some(m) => Some(m.as_bytes().to_vec()),
        };
        let reuse = match &self.reuse {
            None => Reuse::Off,
            Some((t, _)) if t == "off" => Reuse::Off,
            Some((t, _)) if t == "on" => Reuse::On,
            Some((_, Some(s))) if s.checked_mul(1000).is_some_and(|ms| ms <= 604_800_000) => {
                Reuse::Period { ms: s * 1000 }
            }
            Some(_) => return None,
        };
        // First-pass checks of the keepalive value.
        struct Ka {
            own: Option<u64>, // None: default; Some(MAX): off
            idle: Option<u32>,
            intvl: Option<u32>,
            cnt: Option<u32>,
        }
        let secs_field = |l: &Later, lo: u64, hi: u64| -> Result<Option<u32>, ()> {
            match l {
                Later::Omitted | Later::Empty => Ok(None),
                Later::OnOff(_) => Err(()),
                Later::Value(_, Some(n)) if (lo..=hi).contains(n) => Ok(Some(*n as u32)),
                Later::Value(..) => Err(()),
            }
        };
        // `keepalive=off` disables it; `keepalive=` is an error; with more
        // fields, a first field `off` means "no age limit".
        let ka_text = self.keepalive.as_ref().map(KeepaliveGen::text);
        let ka = match &self.keepalive {
            None | Some(KeepaliveGen::Off) => None,
            Some(_) if ka_text.as_deref() == Some("off") => None,
            Some(_) if ka_text.as_deref() == Some("") => return None,
            Some(KeepaliveGen::Blank) => return None,
            Some(KeepaliveGen::On) => Some(Ka {
                own: None,
                idle: None,
                intvl: None,
                cnt: None,
            }),
            Some(KeepaliveGen::Fields {
                rehandshake,
                idle,
                intvl,
                cnt,
                fifth,
            }) => {
                if *fifth {
                    return None;
                }
                let own = match rehandshake {
                    Rehandshake::Empty | Rehandshake::On => None,
                    Rehandshake::Off => Some(u64::MAX),
                    Rehandshake::Secs(_, Some(s))
                        if s.checked_mul(1000).is_some_and(|ms| ms <= 604_800_000) =>
                    {
                        Some(s * 1000)
                    }
                    Rehandshake::Secs(..) => return None,
                };
                Some(Ka {
                    own,
                    idle: secs_field(idle, 1, 32_767).ok()?,
                    intvl: secs_field(intvl, 1, 32_767).ok()?,
                    cnt: secs_field(cnt, 1, 127).ok()?,
                })
            }
        };

        // Second pass.
        let one_exchange = matches!(
            check_type,
            CheckType::Udp | CheckType::Mysql | CheckType::Ajp | CheckType::Fastcgi
        );
        if one_exchange && (reuse != Reuse::Off || ka.is_some()) {
            return None;
        }
        // Every interval in force (down_interval too) bounds the jitter;
        // an explicit timeout may pass them (a warning, not an error).
        let shortest = interval.min(down_interval.unwrap_or(u64::MAX));
        let timeout = match timeout {
            Some(t) => t,
            None => (shortest - shortest / 10).min(5000),
        };
        if jitter >= shortest {
            return None;
        }
        let default_period = (2 * interval).max(30_000);
        let reuse_period = match reuse {
            Reuse::Off => None,
            Reuse::On => Some(default_period),
            Reuse::Period { ms } if ms <= interval => return None,
            Reuse::Period { ms } => Some(ms),
        };
        let (keepalive, ka_period) = match ka {
            None => (None, None),
            Some(ka) => {
                let own = match ka.own {
                    None => default_period,
                    Some(ms) if ms != u64::MAX && ms <= interval => return None,
                    Some(ms) => ms,
                };
                let effective = own.min(reuse_period.unwrap_or(u64::MAX));
                let idle = match ka.idle {
                    Some(i) if u64::from(i) * 1000 >= effective => return None,
                    Some(i) => i,
                    None => {
                        let below = if effective == u64::MAX {
                            u64::MAX
                        } else {
                            (effective - 1) / 1000
                        };
                        let i = interval.div_ceil(1000).min(below).min(32_767);
                        if i == 0 {
                            return None;
                        }
                        i as u32
                    }
                };
                let intvl = ka.intvl.unwrap_or(1);
                if intvl > idle {
                    return None;
                }
                (
                    Some(KernelKeepalive {
                        idle_s: idle,
                        intvl_s: intvl,
                        cnt: ka.cnt.unwrap_or(3),
                    }),
                    Some(own),
                )
            }
        };
        let rehandshake_ms = match (reuse_period, ka_period) {
            (None, None) => None,
            (a, b) => Some(a.unwrap_or(u64::MAX).min(b.unwrap_or(u64::MAX))),
        };
        Some(CheckConf {
            interval_ms: interval,
            timeout_ms: timeout,
            down_interval_ms: down_interval,
            jitter_ms: jitter,
            fall,
            rise,
            default_down,
            check_type,
            port,
            reuse,
            keepalive,
            rehandshake_ms,
            match_block,
            // (the model never writes passive_fall: the unit tests cover it)
            passive_fall: 0,
            shared: true,
            active: true,
            mandatory: false,
            slow_start_ms: 0,
        })
    }
}

fn opt<T: std::fmt::Debug + Clone>(
    p: f64,
    s: impl Strategy<Value = T>,
) -> impl Strategy<Value = Option<T>> {
    prop::option::weighted(p, s)
}

fn check_gen() -> impl Strategy<Value = CheckGen> {
    let reuse = prop_oneof![
        1 => prop::sample::select(vec!["off", "on"]).prop_map(|s| (s.to_string(), None)),
        3 => secs_text(),
    ];
    (
        (
            opt(0.6, ms_text()),
            opt(0.4, ms_text()),
            opt(0.3, dec_text()),
            opt(0.3, dec_text()),
        ),
        (
            opt(
                0.2,
                prop::sample::select(vec!["true", "false", "TRUE", "1", "", "yes"]),
            ),
            opt(
                0.3,
                prop::sample::select(vec![
                    "tcp",
                    "tcp",
                    "udp",
                    "udp",
                    "http",
                    "TCP",
                    "",
                    "ssl_hello",
                    "https",
                    "tls",
                    "fastcgi",
                ]),
            ),
            opt(0.2, dec_text()),
            opt(0.4, reuse),
            opt(0.5, keepalive_gen()),
            opt(0.2, prop::sample::select(vec!["m", "ok", "", "a=b"])),
        ),
        (opt(0.3, ms_text()), opt(0.3, ms_text())),
        opt(0.05, any::<usize>()),
        opt(
            0.05,
            prop::sample::select(vec![
                "foo=1",
                "interval",
                "type",
                "",
                "Interval=1000",
                "check",
                "=",
                "interval =1000",
            ]),
        ),
    )
        .prop_map(
            |(
                (interval, timeout, fall, rise),
                (default_down, check_type, port, reuse, keepalive, match_block),
                (down_interval, jitter),
                dup,
                stranger,
            )| CheckGen {
                interval,
                timeout,
                down_interval,
                jitter,
                fall,
                rise,
                default_down,
                check_type,
                port,
                reuse,
                keepalive,
                match_block,
                dup,
                stranger,
            },
        )
}

/// Every value valid on its own: only the cross-parameter rules (timeout
/// below interval, periods above interval, idle below the period, intvl
/// at most idle, options for tcp and http only) decide.
fn clean_check_gen() -> impl Strategy<Value = CheckGen> {
    let interval = prop_oneof![
        100u64..3000,
        (1u64..120).prop_map(|s| s * 1000),
        100u64..=86_400_000
    ];
    let timeout = prop_oneof![1u64..3000, 1u64..200_000];
    let down_interval = prop_oneof![100u64..3000, 100u64..=86_400_000];
    let jitter = prop_oneof![0u64..3000, 0u64..200_000];
    let count = || prop_oneof![1u64..10, 1u64..=100_000].prop_map(|n| (n.to_string(), Some(n)));
    let reuse = prop_oneof![
        prop::sample::select(vec!["off", "on"]).prop_map(|s| (s.to_string(), None)),
        clean_secs(1u64..200),
        clean_secs(1u64..=604_800),
    ];
    let later_clean = |v: BoxedStrategy<(String, Option<u64>)>| {
        prop_oneof![
            Just(Later::Omitted),
            Just(Later::Empty),
            v.prop_map(|(t, v)| Later::Value(t, v)),
        ]
    };
    let fields = (
        prop_oneof![
            Just(Rehandshake::Empty),
            Just(Rehandshake::On),
            Just(Rehandshake::Off),
            clean_secs(1u64..300).prop_map(rehandshake_secs),
        ],
        later_clean(clean_secs(1u64..60).boxed()),
        later_clean(clean_secs(1u64..10).boxed()),
        later_clean((1u64..=127).prop_map(|n| (n.to_string(), Some(n))).boxed()),
    )
        .prop_map(|(rehandshake, idle, intvl, cnt)| KeepaliveGen::Fields {
            rehandshake,
            idle,
            intvl,
            cnt,
            fifth: false,
        });
    let keepalive = prop_oneof![Just(KeepaliveGen::Off), Just(KeepaliveGen::On), fields];
    (
        (
            opt(0.8, clean_ms(interval)),
            opt(0.4, clean_ms(timeout)),
            opt(0.3, count()),
            opt(0.3, count()),
        ),
        (
            opt(0.3, prop::sample::select(vec!["true", "false"])),
            opt(
                0.3,
                prop::sample::select(vec!["tcp", "tcp", "tcp", "udp", "http"]),
            ),
            opt(0.2, (1u64..=65_535).prop_map(|n| (n.to_string(), Some(n)))),
            opt(0.5, reuse),
            opt(0.6, keepalive),
            opt(0.2, prop::sample::select(vec!["m", "ok_200"])),
        ),
        (
            opt(0.3, clean_ms(down_interval)),
            opt(0.3, clean_ms(jitter)),
        ),
    )
        .prop_map(
            |(
                (interval, timeout, fall, rise),
                (default_down, check_type, port, reuse, keepalive, match_block),
                (down_interval, jitter),
            )| {
                CheckGen {
                    interval,
                    timeout,
                    down_interval,
                    jitter,
                    fall,
                    rise,
                    default_down,
                    check_type,
                    port,
                    reuse,
                    keepalive,
                    match_block,
                    dup: None,
                    stranger: None,
                }
            },
        )
}

/// Invariants of every accepted `check`.
fn assert_valid_conf(c: &CheckConf) -> Result<(), TestCaseError> {
    prop_assert!((conf::INTERVAL_MIN_MS..=conf::INTERVAL_MAX_MS).contains(&c.interval_ms));
    prop_assert!(c.timeout_ms >= 1);
    prop_assert!(c.timeout_ms <= conf::TIMEOUT_MAX_MS);
    for up in [true, false] {
        prop_assert!(c.jitter_ms < c.interval_for(up));
        prop_assert_eq!(c.period_ms(up), c.interval_for(up).max(c.timeout_ms));
    }
    prop_assert!((1..=conf::RISE_FALL_MAX).contains(&c.fall));
    prop_assert!((1..=conf::RISE_FALL_MAX).contains(&c.rise));
    if c.check_type == CheckType::Udp {
        prop_assert_eq!(c.reuse, Reuse::Off);
        prop_assert_eq!(c.keepalive, None);
    }
    match c.reuse {
        Reuse::Period { ms } => {
            prop_assert!(ms > c.interval_ms && ms <= conf::PERIOD_MAX_MS)
        }
        Reuse::On | Reuse::Off => {}
    }
    prop_assert_eq!(c.rehandshake_ms.is_some(), c.keeps_connection());
    if let Some(p) = c.rehandshake_ms {
        prop_assert!(p > c.interval_ms, "rehandshake {} <= interval", p);
        if let Some(r) = c.reuse_period_ms() {
            prop_assert!(p <= r);
        }
    }
    if let Some(k) = c.keepalive {
        prop_assert!((1..=conf::KEEPALIVE_IDLE_MAX_S).contains(&k.idle_s));
        prop_assert!(k.intvl_s >= 1 && k.intvl_s <= k.idle_s);
        prop_assert!((1..=conf::KEEPALIVE_CNT_MAX).contains(&k.cnt));
        let p = c.rehandshake_ms.unwrap_or(u64::MAX);
        prop_assert!(
            u64::from(k.idle_s) * 1000 < p,
            "idle {} >= period {}",
            k.idle_s,
            p
        );
    }
    prop_assert_eq!(
        conf::default_period_ms(c.interval_ms),
        c.interval_ms.saturating_mul(2).max(30_000)
    );
    Ok(())
}

/// Random arguments that mostly start with a real parameter name.
fn check_arg_bytes() -> impl Strategy<Value = Vec<u8>> {
    let names = prop::sample::select(vec![
        "interval=",
        "timeout=",
        "down_interval=",
        "jitter=",
        "fall=",
        "rise=",
        "default_down=",
        "type=",
        "port=",
        "reuse=",
        "keepalive=",
        "match=",
        "",
    ]);
    prop_oneof![
        hostile_bytes(24),
        (names, time_bytes()).prop_map(|(n, v)| [n.as_bytes(), &v].concat()),
        (
            Just("keepalive="),
            vec(
                prop::sample::select(b"0123456789:smhdwMyonf ".to_vec()),
                0..16
            )
        )
            .prop_map(|(n, v)| [n.as_bytes(), &v].concat()),
    ]
}

proptest! {
    #![proptest_config(cfg(1500))]

    #[test]
    fn check_matches_the_oracle(g in prop_oneof![check_gen(), clean_check_gen()], seed in any::<u64>()) {
        let mut args = g.args();
        // Any order gives the same answer.
        let n = args.len().max(1);
        args.rotate_left((seed % n as u64) as usize);
        if seed & (1 << 63) != 0 {
            args.reverse();
        }
        let bytes: Vec<&[u8]> = args.iter().map(|a| a.as_bytes()).collect();
        let got = conf::parse_check(&bytes);
        match &got {
            Ok(c) => assert_valid_conf(c)?,
            Err(e) => {
                let msg = e.to_string();
                assert_one_line(&msg)?;
                assert_quotes_an_arg(&msg, "check", &bytes)?;
            }
        }
        prop_assert_eq!(got.ok(), g.oracle(), "args {:?}", args);
    }

    #[test]
    fn check_arbitrary_args(args in vec(check_arg_bytes(), 0..7)) {
        let bytes: Vec<&[u8]> = args.iter().map(Vec::as_slice).collect();
        let got = conf::parse_check(&bytes);
        match &got {
            Ok(c) => assert_valid_conf(c)?,
            Err(e) => {
                let msg = e.to_string();
                assert_one_line(&msg)?;
                assert_quotes_an_arg(&msg, "check", &bytes)?;
            }
        }
        // Accepting does not depend on the order of the arguments.
        let mut rev = bytes.clone();
        rev.reverse();
        let again = conf::parse_check(&rev);
        prop_assert_eq!(got.is_ok(), again.is_ok());
        if let (Ok(a), Ok(b)) = (&got, &again) {
            prop_assert_eq!(a, b);
        }
    }
}

// ---------------------------------------------------------------------------
// 3. status::parse_query
// ---------------------------------------------------------------------------

fn hex(b: u8) -> Option<u8> {
    (b as char).to_digit(16).map(|d| d as u8)
}

/// Percent-decoding as documented: `%XX` (both hex digits present) is a
/// byte, `+` a space, anything else (a lone or malformed `%`) literal.
fn pct_decode(s: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    let mut rest = s;
    while let Some((&b, tail)) = rest.split_first() {
        match (b, tail) {
            (b'+', _) => {
                out.push(b' ');
                rest = tail;
            }
            (b'%', [h, l, more @ ..]) if hex(*h).is_some() && hex(*l).is_some() => {
                out.push(hex(*h).unwrap() * 16 + hex(*l).unwrap());
                rest = more;
            }
            _ => {
                out.push(b);
                rest = tail;
            }
        }
    }
    out
}

fn pct_encode(s: &[u8]) -> String {
    s.iter().map(|b| format!("%{b:02X}")).collect()
}

/// status's rendering of a query value in an error line (its docs).
fn query_printable(v: &[u8]) -> String {
    let mut s = String::new();
    for &b in v.iter().take(64) {
        match b {
            b'"' => s.push_str("\\\""),
            b'\\' => s.push_str("\\\\"),
            0x20..=0x7e => s.push(b as char),
            _ => s.push_str(&format!("\\x{b:02x}")),
        }
    }
    if v.len() > 64 {
        s.push_str("...");
    }
    s
}

/// The documented behaviour of `parse_query`.
fn query_oracle(q: &[u8]) -> Result<Query, String> {
    let (mut format, mut status, mut refresh) = (None, None, None);
    for arg in q.split(|&b| b == b'&').filter(|a| !a.is_empty()) {
        let (key, value) = match arg.splitn(2, |&b| b == b'=').collect::<Vec<_>>()[..] {
            [k, v] => (k, v),
            [k] => (k, &b""[..]),
            _ => unreachable!(),
        };
        match pct_decode(key).to_ascii_lowercase().as_slice() {
            b"format" => format = Some(pct_decode(value)),
            b"status" => status = Some(pct_decode(value)),
            b"refresh" => refresh = Some(pct_decode(value)),
            _ => {}
        }
    }
    let mut out = Query::default();
    if let Some(f) = format {
        out.format = Some(match f.as_slice() {
            b"html" => Format::Html,
            b"csv" => Format::Csv,
            b"json" => Format::Json,
            b"prometheus" => Format::Prometheus,
            _ => {
                return Err(format!(
                    "unknown format \"{}\": use html, csv, json or prometheus",
                    query_printable(&f)
                ))
            }
        });
    }
    if let Some(s) = status {
        out.filter = Some(match s.to_ascii_lowercase().as_slice() {
            b"up" => Filter::Up,
            b"down" => Filter::Down,
            _ => {
                return Err(format!(
                    "unknown status \"{}\": use up or down",
                    query_printable(&s)
                ))
            }
        });
    }
    if let Some(r) = refresh {
        if !r.is_empty() && r.len() <= 10 && r.iter().all(u8::is_ascii_digit) {
            let n: u64 = std::str::from_utf8(&r).unwrap().parse().unwrap();
            if n > 0 {
                out.refresh = Some(n.min(u64::from(MAX_REFRESH_S)) as u32);
            }
        }
    }
    Ok(out)
}

fn query_piece() -> impl Strategy<Value = String> {
    let key = prop_oneof![
        4 => prop::sample::select(vec!["format", "status", "refresh"]).prop_map(String::from),
        1 => prop::sample::select(vec!["%66ormat", "st%61tus", "Format", "x", "", "format%", "refresh+"])
            .prop_map(String::from),
    ];
    let value = prop_oneof![
        prop::sample::select(vec![
            "html",
            "csv",
            "json",
            "prometheus",
            "JSON",
            "up",
            "down",
            "UP",
            "Down",
            "dOwN",
            "0",
            "5",
            "0005",
            "3600",
            "3601",
            "4294967295",
            "99999999999",
            "1%30",
            "%",
            "%4",
            "%zz",
            "+",
            "a+b",
            "%00",
            "%22%5C",
        ])
        .prop_map(String::from),
        hostile_bytes(12).prop_map(|b| pct_encode(&b)),
        "[a-zA-Z0-9%+=._-]{0,12}",
    ];
    (key, prop::option::of(value)).prop_map(|(k, v)| match v {
        Some(v) => format!("{k}={v}"),
        None => k,
    })
}

proptest! {
    #![proptest_config(cfg(3000))]

    #[test]
    fn query_matches_the_oracle(q in prop_oneof![
            hostile_bytes(64),
            vec(query_piece(), 0..6).prop_map(|p| p.join("&").into_bytes()),
            vec(query_piece(), 0..6).prop_map(|p| p.join("&&").into_bytes()),
        ]) {
        let got = status::parse_query(&q);
        if let Err(e) = &got {
            prop_assert!(e.bytes().all(|b| (0x20..=0x7e).contains(&b)), "{:?}", e);
            prop_assert!(e.len() <= 64 * 4 + 80);
        }
        if let Ok(query) = &got {
            if let Some(r) = query.refresh {
                prop_assert!((1..=MAX_REFRESH_S).contains(&r));
            }
        }
        prop_assert_eq!(got, query_oracle(&q), "query {:?}", String::from_utf8_lossy(&q));
    }

    #[test]
    fn query_percent_decoding_round_trips(v in hostile_bytes(100), key in prop::sample::select(vec!["format", "status"])) {
        let q = format!("{key}={}", pct_encode(&v));
        match status::parse_query(q.as_bytes()) {
            Ok(query) => {
                if key == "format" {
                    prop_assert_eq!(query.format.map(|f| f.as_str().as_bytes()), Some(&v[..]));
                } else {
                    prop_assert!(v.eq_ignore_ascii_case(b"up") || v.eq_ignore_ascii_case(b"down"));
                    prop_assert_eq!(query.filter.map(|f| f.as_str().as_bytes().to_vec()),
                                    Some(v.to_ascii_lowercase()));
                }
            }
            Err(e) => {
                let name = if key == "format" { "format" } else { "status" };
                let prefix = format!("unknown {name} \"{}\": ", query_printable(&v));
                prop_assert!(e.starts_with(&prefix), "{:?} vs {:?}", e, prefix);
            }
        }
    }
}

// ---------------------------------------------------------------------------
// 4. Escapers
// ---------------------------------------------------------------------------

/// What `html::text` must show: lossy UTF-8, C0 controls other than TAB,
/// LF, CR, DEL and C1 controls as U+FFFD.
fn html_expected(b: &[u8]) -> String {
    lossy(b)
        .chars()
        .map(|c| match c {
            '\t' | '\n' | '\r' => c,
            '\0'..='\x1f' | '\x7f' | '\u{80}'..='\u{9f}' => '\u{fffd}',
            _ => c,
        })
        .collect()
}

fn html_unescape(s: &str) -> Result<String, String> {
    let mut out = String::new();
    let mut rest = s;
    while let Some(i) = rest.find(['&', '<', '>', '"', '\'']) {
        out.push_str(&rest[..i]);
        rest = &rest[i..];
        let entity = ["&amp;", "&lt;", "&gt;", "&quot;", "&#39;"]
            .into_iter()
            .find(|e| rest.starts_with(e))
            .ok_or_else(|| format!("raw markup character at {:?}", &rest[..rest.len().min(12)]))?;
        out.push(match entity {
            "&amp;" => '&',
            "&lt;" => '<',
            "&gt;" => '>',
            "&quot;" => '"',
            _ => '\'',
        });
        rest = &rest[entity.len()..];
    }
    out.push_str(rest);
    Ok(out)
}

fn prom_unescape(s: &str) -> Result<String, String> {
    let mut out = String::new();
    let mut chars = s.chars();
    while let Some(c) = chars.next() {
        match c {
            '\\' => match chars.next() {
                Some('\\') => out.push('\\'),
                Some('"') => out.push('"'),
                Some('n') => out.push('\n'),
                other => return Err(format!("bad escape \\{other:?}")),
            },
            '"' => return Err("raw quote".into()),
            '\n' => return Err("raw line feed".into()),
            c => out.push(c),
        }
    }
    Ok(out)
}

/// A CSV text cell's value as a spreadsheet-safe reader sees it.
fn csv_expected(b: &[u8]) -> String {
    let inert = matches!(b.first(), Some(b'=' | b'+' | b'-' | b'@' | b'\t' | b'\r'));
    format!("{}{}", if inert { "'" } else { "" }, lossy(b))
}

proptest! {
    #![proptest_config(cfg(1500))]

    #[test]
    fn escapers_round_trip(s in hostile_bytes(48), prefix in hostile_bytes(8)) {
        // JSON: serde_json reads back the lossy text; no raw control bytes.
        let mut out = prefix.clone();
        json::string(&mut out, &s);
        prop_assert!(out.starts_with(&prefix));
        let lit = &out[prefix.len()..];
        prop_assert!(lit.iter().all(|&b| b >= 0x20 && b != 0x7f), "{:?}", lit);
        let back: String = serde_json::from_slice(lit).map_err(|e| TestCaseError::fail(format!("{e}: {lit:?}")))?;
        prop_assert_eq!(back, lossy(&s));

        // CSV: one cell between two others, read back by the csv crate.
        let mut line = b"a,".to_vec();
        status::csv::text(&mut line, &s);
        line.extend_from_slice(b",z\n");
        prop_assert!(std::str::from_utf8(&line).is_ok());
        let mut rdr = ::csv::ReaderBuilder::new().has_headers(false).from_reader(&line[..]);
        let records: Vec<::csv::StringRecord> = rdr.records().collect::<Result<_, _>>()
            .map_err(|e| TestCaseError::fail(format!("{e}: {:?}", String::from_utf8_lossy(&line))))?;
        prop_assert_eq!(records.len(), 1);
        prop_assert_eq!(records[0].len(), 3);
        prop_assert_eq!(&records[0][0], "a");
        let cell = csv_expected(&s);
        prop_assert_eq!(&records[0][1], cell.as_str());
        prop_assert_eq!(&records[0][2], "z");

        // HTML: no raw markup, entities only, text as documented.
        let mut out = Vec::new();
        html::text(&mut out, &s);
        let text = String::from_utf8(out).map_err(|e| TestCaseError::fail(e.to_string()))?;
        prop_assert!(!text.chars().any(|c| c.is_control() && !matches!(c, '\t' | '\n' | '\r')),
                     "{:?}", text);
        prop_assert_eq!(html_unescape(&text).map_err(TestCaseError::fail)?, html_expected(&s));

        // Prometheus label value: only \\, \" and \n escaped.
        let mut out = Vec::new();
        prom::label_value(&mut out, &s);
        let text = String::from_utf8(out).map_err(|e| TestCaseError::fail(e.to_string()))?;
        prop_assert_eq!(prom_unescape(&text).map_err(TestCaseError::fail)?, lossy(&s));
    }
}

// ---------------------------------------------------------------------------
// 5. status::render, every format, arbitrary rows
// ---------------------------------------------------------------------------

/// The module's reason names, and names no reason has but a renderer must
/// survive (quotes, escapes, a spreadsheet formula, nothing).
fn reasons() -> Vec<&'static str> {
    let hostile = ["we\"ird\\\nreason", "=cmd|' /C calc'!A0", ""];
    healthcheck_core::reason::NAMES
        .iter()
        .copied()
        .chain(hostile)
        .collect()
}

const TYPES: [&str; 7] = ["tcp", "udp", "http", "https", "tls", "", "-x,\"y\"\n<b>"];

/// Whether a peer of `check_type` has the HTTP status series (full page).
fn speaks_http(check_type: &str) -> bool {
    matches!(check_type, "http" | "https")
}

#[derive(Clone, Debug)]
struct OwnedRow {
    group: Group,
    upstream: Vec<u8>,
    name: Vec<u8>,
    up: bool,
    rise: u32,
    fall: u32,
    check_type: &'static str,
    port: u16,
    delays: [i64; 4],
    checks: u64,
    fails_total: u64,
    failures: Vec<(&'static str, u64)>,
    last_failure_reason: Option<&'static str>,
    http_status: Option<u16>,
    last_change_ms: u64,
    down_since_ms: Option<u64>,
    buckets: Vec<u64>,
    sum: u64,
    count: u64,
}

fn edge_u64() -> impl Strategy<Value = u64> {
    prop_oneof![
        Just(0u64),
        Just(1),
        Just(999),
        Just(1000),
        Just(1_700_000_000_123),
        Just(u64::MAX),
        Just(i64::MAX as u64),
        0u64..10_000,
        any::<u64>(),
    ]
}

fn edge_i64() -> impl Strategy<Value = i64> {
    prop_oneof![
        Just(-1i64),
        Just(0),
        Just(i64::MIN),
        Just(i64::MAX),
        -5i64..5000,
        any::<i64>()
    ]
}

fn owned_row() -> impl Strategy<Value = OwnedRow> {
    (
        (
            prop_oneof![Just(Group::Http), Just(Group::Stream)],
            hostile_bytes(24),
            hostile_bytes(24),
            any::<bool>(),
            any::<u32>(),
            any::<u32>(),
            prop::sample::select(TYPES.to_vec()),
            any::<u16>(),
            // Any type may carry one: the renderers decide what to show.
            prop::option::of(prop_oneof![
                Just(0u16),
                Just(200),
                Just(503),
                Just(u16::MAX),
                100u16..600,
                any::<u16>(),
            ]),
        ),
        (
            proptest::array::uniform4(edge_i64()),
            edge_u64(),
            edge_u64(),
            vec((prop::sample::select(reasons()), edge_u64()), 0..8),
            prop::option::of(prop::sample::select(reasons())),
            edge_u64(),
            prop::option::of(edge_u64()),
            vec(edge_u64(), 0..DURATION_SLOTS + 3),
            edge_u64(),
            edge_u64(),
        ),
    )
        .prop_map(
            |(
                (group, upstream, name, up, rise, fall, check_type, port, http_status),
                (
                    delays,
                    checks,
                    fails_total,
                    failures,
                    last_failure_reason,
                    last_change_ms,
                    down_since_ms,
                    buckets,
                    sum,
                    count,
                ),
            )| OwnedRow {
                group,
                upstream,
                name,
                up,
                rise,
                fall,
                check_type,
                port,
                delays,
                checks,
                fails_total,
                failures,
                last_failure_reason,
                http_status,
                last_change_ms,
                down_since_ms,
                buckets,
                sum,
                count,
            },
        )
}

/// Rows as the caller passes them: `index` counts from 0 per group.
fn borrow(owned: &[OwnedRow]) -> Vec<PeerRow<'_>> {
    let mut next = [0u32; 2];
    owned
        .iter()
        .map(|o| {
            let g = usize::from(o.group == Group::Stream);
            let index = next[g];
            next[g] += 1;
            PeerRow {
                group: o.group,
                index,
                upstream: &o.upstream,
                name: &o.name,
                // Hostile bytes here too; the flags vary with other fields.
                server: &o.upstream,
                backup: o.rise % 2 == 1,
                weight: o.fall,
                disabled: o.checks % 3 == 0,
                fail_open: o.port % 2 == 1,
                unchecked: false,
                up: o.up,
                rise: o.rise,
                fall: o.fall,
                check_type: o.check_type,
                port: o.port,
                last_delay_ms: o.delays[0],
                avg_delay_ms: o.delays[1],
                min_delay_ms: o.delays[2],
                max_delay_ms: o.delays[3],
                checks: o.checks,
                fails_total: o.fails_total,
                failures_by_reason: &o.failures,
                last_failure_reason: o.last_failure_reason,
                http_status: o.http_status,
                tls_resumed: matches!(o.check_type, "https" | "tls").then_some(o.checks),
                grpc_status: o.checks.checked_rem(17).map(|c| c as u32),
                period_ms: 1000,
                shared_with: &[],
                ejected: false,
                checking: false,
                outlier: None,
                draining: false,
                slow_start_ms: None,
                effective_weight_x100: u64::from(o.fall) * 100,
                connections: None,
                sessions_shut: 0,
                last_change_ms: o.last_change_ms,
                last_duration_ms: o.sum,
                down_since_ms: o.down_since_ms,
                duration_buckets: &o.buckets,
                duration_sum_ms: o.sum,
                duration_count: o.count,
            }
        })
        .collect()
}

fn keeps(filter: Option<Filter>, up: bool) -> bool {
    match filter {
        None => true,
        Some(f) => f.keeps(up),
    }
}

/// Printed rows in printed order: http first, then stream.
fn printed<'r, 'a>(rows: &'r [PeerRow<'a>], filter: Option<Filter>) -> Vec<&'r PeerRow<'a>> {
    let mut out: Vec<_> = rows
        .iter()
        .filter(|r| r.group == Group::Http && keeps(filter, r.up))
        .collect();
    out.extend(
        rows.iter()
            .filter(|r| r.group == Group::Stream && keeps(filter, r.up)),
    );
    out
}

fn shown_last_change(r: &PeerRow) -> Option<u64> {
    (r.last_change_ms != 0).then_some(r.last_change_ms)
}

fn shown_down_since(r: &PeerRow) -> Option<u64> {
    if r.up {
        None
    } else {
        r.down_since_ms
    }
}

fn ms_as_seconds(ms: u64) -> String {
    let (s, frac) = (ms / 1000, ms % 1000);
    if frac == 0 {
        s.to_string()
    } else {
        let f = format!("{frac:03}");
        format!("{s}.{}", f.trim_end_matches('0'))
    }
}

fn render(format: Format, query: &Query, meta: &Meta, rows: &[PeerRow]) -> Vec<u8> {
    let mut out = b"PREFIX".to_vec();
    status::render_with(format, query, meta, rows, &mut out);
    assert!(out.starts_with(b"PREFIX"), "render must append");
    out.drain(..6);
    out
}

fn check_json(
    body: &[u8],
    filter: Option<Filter>,
    meta: &Meta,
    rows: &[PeerRow],
) -> Result<(), TestCaseError> {
    let v: serde_json::Value = serde_json::from_slice(body)
        .map_err(|e| TestCaseError::fail(format!("JSON does not parse: {e}")))?;
    let servers = &v["servers"];
    // The summaries, of every row whatever the filter.
    let summaries = status::summarize(rows);
    let listed = v["upstreams"].as_array().cloned().unwrap_or_default();
    prop_assert_eq!(listed.len(), summaries.len());
    for (o, u) in listed.iter().zip(&summaries) {
        prop_assert_eq!(o["group"].as_str(), Some(u.group.as_str()));
        let name = lossy(u.name);
        prop_assert_eq!(o["name"].as_str(), Some(name.as_str()));
        for (k, n) in [
            ("peers", u.peers),
            ("up", u.up),
            ("down", u.down),
            ("disabled", u.disabled),
            ("selectable", u.selectable),
        ] {
            prop_assert_eq!(o[k].as_u64(), Some(n), "{}", k);
        }
        prop_assert_eq!(o["fail_open"].as_bool(), Some(u.fail_open));
    }
    let shown = printed(rows, filter);
    let ups = shown.iter().filter(|r| r.up).count() as u64;
    prop_assert_eq!(servers["total"].as_u64(), Some(shown.len() as u64));
    prop_assert_eq!(servers["up"].as_u64(), Some(ups));
    prop_assert_eq!(servers["down"].as_u64(), Some(shown.len() as u64 - ups));
    prop_assert_eq!(servers["generation"].as_u64(), Some(meta.generation));
    let mut got = servers["http"].as_array().cloned().unwrap_or_default();
    got.extend(servers["stream"].as_array().cloned().unwrap_or_default());
    prop_assert_eq!(got.len(), shown.len());
    for (o, r) in got.iter().zip(&shown) {
        prop_assert_eq!(o["index"].as_u64(), Some(u64::from(r.index)));
        let (upstream, name) = (lossy(r.upstream), lossy(r.name));
        prop_assert_eq!(o["upstream"].as_str(), Some(upstream.as_str()));
        prop_assert_eq!(o["name"].as_str(), Some(name.as_str()));
        prop_assert_eq!(o["status"].as_str(), Some(if r.up { "up" } else { "down" }));
        prop_assert_eq!(o["rise"].as_u64(), Some(u64::from(r.rise)));
        prop_assert_eq!(o["fall"].as_u64(), Some(u64::from(r.fall)));
        prop_assert_eq!(o["type"].as_str(), Some(r.check_type));
        prop_assert_eq!(o["port"].as_u64(), Some(u64::from(r.port)));
        prop_assert_eq!(o["last_delay_ms"].as_i64(), Some(r.last_delay_ms));
        prop_assert_eq!(o["avg_delay_ms"].as_i64(), Some(r.avg_delay_ms));
        prop_assert_eq!(o["min_delay_ms"].as_i64(), Some(r.min_delay_ms));
        prop_assert_eq!(o["max_delay_ms"].as_i64(), Some(r.max_delay_ms));
        prop_assert_eq!(o["checks"].as_u64(), Some(r.checks));
        prop_assert_eq!(o["fails_total"].as_u64(), Some(r.fails_total));
        prop_assert_eq!(o["last_failure_reason"].as_str(), r.last_failure_reason);
        prop_assert_eq!(
            o.get("http_status"),
            Some(&serde_json::json!(r.http_status)),
            "a number or null"
        );
        prop_assert_eq!(o["last_change"].as_u64(), shown_last_change(r));
        prop_assert_eq!(o["down_since"].as_u64(), shown_down_since(r));
        let server = lossy(r.server);
        prop_assert_eq!(o["server"].as_str(), Some(server.as_str()));
        prop_assert_eq!(o["backup"].as_bool(), Some(r.backup));
        prop_assert_eq!(o["weight"].as_u64(), Some(u64::from(r.weight)));
        prop_assert_eq!(
            o.get("admin"),
            Some(&serde_json::json!(r.disabled.then_some("disabled")))
        );
        prop_assert_eq!(
            o.get("tls_resumed"),
            Some(&serde_json::json!(r.tls_resumed)),
            "a number or null"
        );
        prop_assert_eq!(o.get("period_ms"), Some(&serde_json::json!(r.period_ms)));
        prop_assert_eq!(
            o.get("grpc_status"),
            Some(&serde_json::json!(r.grpc_status))
        );
        prop_assert_eq!(o.get("shared_with"), Some(&serde_json::json!([])));
        prop_assert_eq!(o.get("ejections"), Some(&serde_json::json!(0)));
        prop_assert_eq!(o.get("outlier"), Some(&serde_json::Value::Null));
        prop_assert_eq!(o.as_object().map(|m| m.len()), Some(33));
    }
    // Key order (serde_json's map does not keep it): each peer is one line,
    // and a key with its `": ` cannot occur inside an escaped string.
    let text = std::str::from_utf8(body).map_err(|e| TestCaseError::fail(e.to_string()))?;
    let lines: Vec<&str> = text
        .lines()
        .filter(|l| l.starts_with("    {\"index\": "))
        .collect();
    prop_assert_eq!(lines.len(), shown.len());
    for line in lines {
        let at = |key: &str| line.find(&format!("\"{key}\": "));
        let (reason, http, change) = (
            at("last_failure_reason"),
            at("http_status"),
            at("last_change"),
        );
        prop_assert!(
            reason.is_some() && reason < http && http < change,
            "{}",
            line
        );
    }
    Ok(())
}

fn check_csv(body: &[u8], filter: Option<Filter>, rows: &[PeerRow]) -> Result<(), TestCaseError> {
    prop_assert!(std::str::from_utf8(body).is_ok());
    prop_assert!(body.ends_with(b"\n"));
    let mut rdr = ::csv::ReaderBuilder::new()
        .has_headers(true)
        .from_reader(body);
    let header = rdr
        .headers()
        .map_err(|e| TestCaseError::fail(e.to_string()))?
        .clone();
    prop_assert_eq!(
        header.iter().collect::<Vec<_>>().join(","),
        status::csv::HEADER
    );
    let records: Vec<::csv::StringRecord> = rdr
        .records()
        .collect::<Result<_, _>>()
        .map_err(|e| TestCaseError::fail(format!("CSV does not parse: {e}")))?;
    let shown = printed(rows, filter);
    prop_assert_eq!(records.len(), shown.len());
    let opt = |v: Option<u64>| v.map_or(String::new(), |v| v.to_string());
    for (rec, r) in records.iter().zip(&shown) {
        let want = [
            r.index.to_string(),
            csv_expected(r.group.as_str().as_bytes()),
            csv_expected(r.upstream),
            csv_expected(r.name),
            r.rise.to_string(),
            r.fall.to_string(),
            csv_expected(r.check_type.as_bytes()),
            r.port.to_string(),
            r.last_delay_ms.to_string(),
            r.avg_delay_ms.to_string(),
            r.min_delay_ms.to_string(),
            r.max_delay_ms.to_string(),
            (if r.up { "up" } else { "down" }).to_string(),
            r.checks.to_string(),
            r.fails_total.to_string(),
            r.last_failure_reason
                .map_or(String::new(), |s| csv_expected(s.as_bytes())),
            opt(shown_last_change(r)),
            opt(shown_down_since(r)),
            opt(r.http_status.map(u64::from)),
            csv_expected(r.server),
            r.backup.to_string(),
            r.weight.to_string(),
            (if r.disabled { "disabled" } else { "" }).to_string(),
            r.period_ms.to_string(),
            opt(r.grpc_status.map(u64::from)),
            // No check_outlier in these rows: its five cells are empty.
            String::new(),
            String::new(),
            String::new(),
            String::new(),
            String::new(),
            // Not ramping, not draining.
            String::new(),
            format!("{}.{:02}", r.weight, 0),
            String::new(),
            "0".to_string(),
        ];
        prop_assert_eq!(
            rec.iter().collect::<Vec<_>>(),
            want.iter().map(String::as_str).collect::<Vec<_>>()
        );
    }
    Ok(())
}

/// `<td ...>content</td>` cells of every data row of the page, in order.
fn html_rows(page: &str) -> Result<Vec<(bool, Vec<String>)>, String> {
    let mut rows = Vec::new();
    // Peer tables only: the upstreams table comes before the groups.
    let page = page.find("<h2 id=\"http\">").map_or(page, |i| &page[i..]);
    for body in page.split("<tbody>\n").skip(1) {
        let body = body.split("</tbody>").next().ok_or("unterminated tbody")?;
        for line in body.split("</td></tr>\n").filter(|l| !l.is_empty()) {
            let down = if line.starts_with("<tr class=\"down\">") {
                true
            } else if line.starts_with("<tr>") {
                false
            } else {
                return Err(format!("unexpected line in tbody: {line:?}"));
            };
            let cells: Vec<String> = line
                .split("</td>")
                .map(|c| {
                    c.rsplit_once('>')
                        .map_or(String::new(), |(_, t)| t.to_string())
                })
                .collect();
            rows.push((down, cells));
        }
    }
    Ok(rows)
}

fn check_html(body: &[u8], query: &Query, rows: &[PeerRow]) -> Result<(), TestCaseError> {
    let page = std::str::from_utf8(body).map_err(|e| TestCaseError::fail(e.to_string()))?;
    prop_assert!(page.starts_with("<!DOCTYPE html>\n"));
    prop_assert!(page.ends_with("</body>\n</html>\n"));
    prop_assert!(!page.contains("<script"));
    let shown = printed(rows, query.filter);
    let got = html_rows(page).map_err(TestCaseError::fail)?;
    prop_assert_eq!(got.len(), shown.len());
    for ((down, cells), r) in got.iter().zip(&shown) {
        prop_assert_eq!(*down, !r.up);
        prop_assert_eq!(cells.len(), 32, "{:?}", cells);
        prop_assert_eq!(
            html_unescape(&cells[19]).map_err(TestCaseError::fail)?,
            html_expected(r.server)
        );
        prop_assert_eq!(&cells[22], if r.disabled { "disabled" } else { "" });
        prop_assert_eq!(&cells[0], &r.index.to_string());
        prop_assert_eq!(
            html_unescape(&cells[1]).map_err(TestCaseError::fail)?,
            html_expected(r.upstream)
        );
        prop_assert_eq!(
            html_unescape(&cells[2]).map_err(TestCaseError::fail)?,
            html_expected(r.name)
        );
        prop_assert_eq!(&cells[3], if r.up { "up" } else { "down" });
        prop_assert_eq!(
            html_unescape(&cells[6]).map_err(TestCaseError::fail)?,
            html_expected(r.check_type.as_bytes())
        );
        prop_assert_eq!(
            &cells[15],
            &r.http_status.map_or(String::new(), |c| c.to_string())
        );
        prop_assert_eq!(
            &cells[16],
            &r.grpc_status.map_or(String::new(), |c| c.to_string())
        );
    }
    prop_assert!(
        shown.is_empty()
            || page.contains("<th>last failure</th><th>HTTP</th><th>gRPC</th><th>last change</th>")
    );
    match query.refresh {
        Some(n) => {
            let meta_refresh = format!("<meta http-equiv=\"refresh\" content=\"{n}\">");
            prop_assert!(page.contains(&meta_refresh));
        }
        None => prop_assert!(!page.contains("http-equiv=\"refresh\"")),
    }
    Ok(())
}

#[derive(Debug)]
struct Sample {
    name: String,
    labels: Vec<(String, String)>,
    value: String,
}

impl Sample {
    fn label(&self, name: &str) -> Option<&str> {
        self.labels
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }
}

fn metric_name_ok(n: &str) -> bool {
    let mut c = n.chars();
    c.next()
        .is_some_and(|f| f.is_ascii_alphabetic() || f == '_' || f == ':')
        && c.all(|x| x.is_ascii_alphanumeric() || x == '_' || x == ':')
}

/// A strict reader of the text exposition format 0.0.4.
fn parse_prom(body: &str) -> Result<Vec<Sample>, String> {
    let mut types: HashMap<String, String> = HashMap::new();
    let mut helps: HashSet<String> = HashSet::new();
    let mut current: Option<(String, String)> = None;
    let mut series = HashSet::new();
    let mut samples = Vec::new();
    if !body.ends_with('\n') {
        return Err("no final line feed".into());
    }
    for line in body[..body.len() - 1].split('\n') {
        if let Some(rest) = line.strip_prefix("# HELP ") {
            let name = rest.split(' ').next().unwrap_or("");
            if !metric_name_ok(name) || !helps.insert(name.to_string()) {
                return Err(format!("bad or repeated HELP: {line:?}"));
            }
            continue;
        }
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, kind) = rest.split_once(' ').ok_or("TYPE without kind")?;
            if !["counter", "gauge", "histogram", "untyped", "summary"].contains(&kind) {
                return Err(format!("bad kind {kind:?}"));
            }
            if types.insert(name.to_string(), kind.to_string()).is_some() {
                return Err(format!("repeated TYPE {name}"));
            }
            current = Some((name.to_string(), kind.to_string()));
            continue;
        }
        if line.starts_with('#') || line.is_empty() {
            return Err(format!("unexpected line {line:?}"));
        }
        let name_end = line.find(['{', ' ']).ok_or("sample without value")?;
        let name = &line[..name_end];
        if !metric_name_ok(name) {
            return Err(format!("bad metric name {name:?}"));
        }
        let mut rest = &line[name_end..];
        let mut labels = Vec::new();
        if let Some(r) = rest.strip_prefix('{') {
            rest = r;
            loop {
                if let Some(r) = rest.strip_prefix('}') {
                    rest = r;
                    break;
                }
                let (lname, r) = rest.split_once("=\"").ok_or("label without value")?;
                let mut value = String::new();
                let mut chars = r.char_indices();
                let end = loop {
                    match chars.next() {
                        None => return Err("unterminated label value".into()),
                        Some((i, '"')) => break i,
                        Some((_, '\\')) => match chars.next() {
                            Some((_, '\\')) => value.push('\\'),
                            Some((_, '"')) => value.push('"'),
                            Some((_, 'n')) => value.push('\n'),
                            other => return Err(format!("bad escape {other:?}")),
                        },
                        Some((_, c)) => value.push(c),
                    }
                };
                labels.push((lname.to_string(), value));
                rest = &r[end + 1..];
                if let Some(r) = rest.strip_prefix(',') {
                    rest = r;
                }
            }
        }
        let value = rest.strip_prefix(' ').ok_or("no space before value")?;
        if value.parse::<f64>().is_err() {
            return Err(format!("bad value {value:?}"));
        }
        let (family, kind) = current.as_ref().ok_or("sample before TYPE")?;
        let belongs = name == family
            || (kind == "histogram"
                && [
                    format!("{family}_bucket"),
                    format!("{family}_sum"),
                    format!("{family}_count"),
                ]
                .iter()
                .any(|n| n == name));
        if !belongs {
            return Err(format!("{name} outside its family ({family})"));
        }
        let mut key = labels.clone();
        key.sort();
        if !series.insert((name.to_string(), key)) {
            return Err(format!("repeated series {line:?}"));
        }
        samples.push(Sample {
            name: name.to_string(),
            labels,
            value: value.to_string(),
        });
    }
    Ok(samples)
}

fn check_prom(
    body: &[u8],
    filter: Option<Filter>,
    full: bool,
    meta: &Meta,
    rows: &[PeerRow],
) -> Result<(), TestCaseError> {
    let text = std::str::from_utf8(body).map_err(|e| TestCaseError::fail(e.to_string()))?;
    let samples = parse_prom(text).map_err(TestCaseError::fail)?;
    let shown = printed(rows, filter);
    let ups = shown.iter().filter(|r| r.up).count();
    let page = |name: &str| {
        samples
            .iter()
            .find(|s| s.name == name)
            .map(|s| s.value.clone())
    };
    prop_assert_eq!(
        page("nginx_upstream_count_total"),
        Some(shown.len().to_string())
    );
    prop_assert_eq!(page("nginx_upstream_count_up"), Some(ups.to_string()));
    prop_assert_eq!(
        page("nginx_upstream_count_down"),
        Some((shown.len() - ups).to_string())
    );
    prop_assert_eq!(
        page("nginx_upstream_count_generation"),
        Some(meta.generation.to_string())
    );

    // Per-peer samples, found by their identifying labels.
    let mut per_peer: HashMap<(String, String), Vec<&Sample>> = HashMap::new();
    for s in samples
        .iter()
        .filter(|s| s.name.starts_with("nginx_upstream_server_"))
    {
        let key = (
            s.label("upstream_type").unwrap_or("?").to_string(),
            s.label("index").unwrap_or("?").to_string(),
        );
        per_peer.entry(key).or_default().push(s);
    }
    prop_assert_eq!(per_peer.len(), shown.len());
    // The families, in order: the page's, then (with a printed peer) the
    // lean or full page's per-peer ones; http_status only with a printed
    // peer that has it (its header comes with its first sample).
    let families: Vec<&str> = text
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .map(|l| l.split(' ').next().unwrap_or(""))
        .collect();
    let mut want = vec![
        "nginx_upstream_count_total",
        "nginx_upstream_count_up",
        "nginx_upstream_count_down",
        "nginx_upstream_count_generation",
    ];
    // The per-upstream families: one sample per upstream of all the rows.
    let summaries = status::summarize(rows);
    if !summaries.is_empty() {
        want.extend(["nginx_upstream_peers_up", "nginx_upstream_fail_open"]);
    }
    // Two names that escape alike print once, with the first one's values.
    let mut seen_labels = HashSet::new();
    for u in &summaries {
        let name = lossy(u.name);
        if !seen_labels.insert((u.group, name.clone())) {
            continue;
        }
        let of = |family: &str| {
            samples
                .iter()
                .filter(|s| {
                    s.name == family
                        && s.label("upstream_type") == Some(u.group.as_str())
                        && s.label("upstream") == Some(name.as_str())
                })
                .map(|s| s.value.clone())
                .collect::<Vec<_>>()
        };
        let fail_open = if u.fail_open { "1" } else { "0" };
        prop_assert_eq!(of("nginx_upstream_peers_up"), vec![u.up.to_string()]);
        prop_assert_eq!(of("nginx_upstream_fail_open"), vec![fail_open.to_string()]);
    }
    if !shown.is_empty() {
        let s = |n: &'static str| Some(n);
        want.extend(
            [
                s("nginx_upstream_server_rise").filter(|_| full),
                s("nginx_upstream_server_fall").filter(|_| full),
                s("nginx_upstream_server_active"),
                s("nginx_upstream_server_checks_total"),
                s("nginx_upstream_server_check_failures_total"),
                s("nginx_upstream_server_last_change_timestamp_seconds").filter(|_| full),
                s("nginx_upstream_server_check_last_duration_seconds"),
                s("nginx_upstream_server_http_status")
                    .filter(|_| full && shown.iter().any(|r| speaks_http(r.check_type))),
                s("nginx_upstream_server_check_tls_resumed_total")
                    .filter(|_| shown.iter().any(|r| r.tls_resumed.is_some())),
                s("nginx_upstream_server_effective_weight").filter(|_| full),
                s("nginx_upstream_server_slow_start_remaining_seconds").filter(|_| full),
                s("nginx_upstream_server_draining").filter(|_| full),
                s("nginx_upstream_server_sessions_shut_total").filter(|_| full),
                s("nginx_upstream_server_check_duration_seconds").filter(|_| full),
            ]
            .into_iter()
            .flatten(),
        );
    }
    prop_assert_eq!(families, want);
    for r in &shown {
        let key = (r.group.as_str().to_string(), r.index.to_string());
        let ss = per_peer
            .get(&key)
            .ok_or_else(|| TestCaseError::fail(format!("no samples for {key:?}")))?;
        for s in ss {
            let (upstream, name) = (lossy(r.upstream), lossy(r.name));
            prop_assert_eq!(s.label("upstream"), Some(upstream.as_str()));
            prop_assert_eq!(s.label("name"), Some(name.as_str()));
            // Only when the server line is not the address itself.
            let server = (r.server != r.name).then(|| lossy(r.server));
            prop_assert_eq!(s.label("server"), server.as_deref());
            prop_assert_eq!(s.label("type"), Some(r.check_type));
            prop_assert_eq!(
                s.label("port").map(str::to_string),
                Some(r.port.to_string())
            );
        }
        let one = |name: &str| ss.iter().find(|s| s.name == name).map(|s| s.value.clone());
        prop_assert_eq!(
            one("nginx_upstream_server_active"),
            Some((if r.up { "1" } else { "0" }).to_string())
        );
        let (rise, fall) = if full {
            (Some(r.rise.to_string()), Some(r.fall.to_string()))
        } else {
            (None, None)
        };
        prop_assert_eq!(one("nginx_upstream_server_rise"), rise);
        prop_assert_eq!(one("nginx_upstream_server_fall"), fall);
        prop_assert_eq!(
            one("nginx_upstream_server_check_last_duration_seconds"),
            Some(ms_as_seconds(r.last_duration_ms))
        );
        prop_assert_eq!(
            one("nginx_upstream_server_checks_total"),
            Some(r.checks.to_string())
        );
        prop_assert_eq!(
            one("nginx_upstream_server_last_change_timestamp_seconds"),
            full.then(|| ms_as_seconds(shown_last_change(r).unwrap_or(0)))
        );
        // Full page, http/https peers only, 0 before the first response.
        prop_assert_eq!(
            one("nginx_upstream_server_http_status"),
            (full && speaks_http(r.check_type)).then(|| r.http_status.unwrap_or(0).to_string())
        );
        // Both pages, TLS peers only.
        prop_assert_eq!(
            one("nginx_upstream_server_check_tls_resumed_total"),
            r.tls_resumed.map(|n| n.to_string())
        );
        // Failures: one series per distinct reason, with the (saturating) sum.
        let mut want: Vec<(&str, u64)> = Vec::new();
        for &(reason, n) in r.failures_by_reason {
            match want.iter_mut().find(|(x, _)| *x == reason) {
                Some((_, sum)) => *sum = sum.saturating_add(n),
                None => want.push((reason, n)),
            }
        }
        let got: Vec<(String, String)> = ss
            .iter()
            .filter(|s| s.name == "nginx_upstream_server_check_failures_total")
            .map(|s| {
                (
                    s.label("reason").unwrap_or("?").to_string(),
                    s.value.clone(),
                )
            })
            .collect();
        let want: Vec<(String, String)> = want
            .iter()
            .map(|(r, n)| (r.to_string(), n.to_string()))
            .collect();
        prop_assert_eq!(got, want);
        if !full {
            // The lean page: no histogram, no rise/fall (checked above).
            prop_assert!(!ss.iter().any(|s| s
                .name
                .starts_with("nginx_upstream_server_check_duration_seconds")));
            continue;
        }
        // Histogram: cumulative, monotonic, capped by _count, +Inf == _count.
        let buckets: Vec<&&Sample> = ss
            .iter()
            .filter(|s| s.name == "nginx_upstream_server_check_duration_seconds_bucket")
            .collect();
        prop_assert_eq!(buckets.len(), DURATION_BUCKETS_MS.len() + 1);
        let mut last = 0u64;
        let mut cumulative = 0u64;
        for (i, b) in buckets.iter().enumerate() {
            let v: u64 = b
                .value
                .parse()
                .map_err(|_| TestCaseError::fail("bucket not an integer"))?;
            prop_assert!(v >= last, "buckets not monotonic");
            prop_assert!(v <= r.duration_count);
            last = v;
            match DURATION_BUCKETS_MS.get(i) {
                Some(&bound) => {
                    cumulative =
                        cumulative.saturating_add(r.duration_buckets.get(i).copied().unwrap_or(0));
                    prop_assert_eq!(
                        b.label("le").map(str::to_string),
                        Some(ms_as_seconds(bound))
                    );
                    prop_assert_eq!(v, cumulative.min(r.duration_count));
                }
                None => {
                    prop_assert_eq!(b.label("le"), Some("+Inf"));
                    prop_assert_eq!(v, r.duration_count);
                }
            }
        }
        prop_assert_eq!(
            one("nginx_upstream_server_check_duration_seconds_count"),
            Some(r.duration_count.to_string())
        );
        prop_assert_eq!(
            one("nginx_upstream_server_check_duration_seconds_sum"),
            Some(ms_as_seconds(r.duration_sum_ms))
        );
    }
    Ok(())
}

fn filter_strategy() -> impl Strategy<Value = Option<Filter>> {
    prop::option::of(prop_oneof![Just(Filter::Up), Just(Filter::Down)])
}

proptest! {
    #![proptest_config(cfg(150))]

    #[test]
    fn render_every_format(owned in vec(owned_row(), 0..10),
                           filter in filter_strategy(),
                           refresh in prop::option::of(prop_oneof![1u32..=3600, any::<u32>()]),
                           histogram in any::<Option<bool>>(),
                           generation in edge_u64(),
                           now_ms in edge_u64()) {
        let rows = borrow(&owned);
        let meta = Meta { generation, now_ms, dropped_events: 0, check_connections: 0 };
        for format in Format::ALL {
            let query = Query { format: Some(format), filter, refresh, histogram, c_shapes: false };
            let body = render(format, &query, &meta, &rows);
            prop_assert!(std::str::from_utf8(&body).is_ok(), "{:?} is not UTF-8", format);
            match format {
                Format::Json => check_json(&body, filter, &meta, &rows)?,
                Format::Csv => check_csv(&body, filter, &rows)?,
                Format::Html => check_html(&body, &query, &rows)?,
                Format::Prometheus => {
                    check_prom(&body, filter, histogram == Some(true), &meta, &rows)?
                }
            }
            // `render` is `render_with` without refresh and histogram.
            let mut plain = Vec::new();
            status::render(format, filter, &meta, &rows, &mut plain);
            let no_refresh = Query { refresh: None, histogram: None, ..query };
            prop_assert_eq!(plain, render(format, &no_refresh, &meta, &rows));
        }
        // The filters split the rows: up + down = all.
        let total = |f| status::Counts::of(&rows, f).total();
        prop_assert_eq!(total(Some(Filter::Up)) + total(Some(Filter::Down)), total(None));
    }

    /// The nginx handler renders a few hundred rows per event-loop turn:
    /// any split of the rows into pieces gives the one-piece page.
    #[test]
    fn stepwise_rendering_equals_one_piece(owned in vec(owned_row(), 0..12),
                                           filter in filter_strategy(),
                                           refresh in prop::option::of(1u32..=3600),
                                           histogram in any::<Option<bool>>(),
                                           mut cuts in vec(0usize..=12, 0..6),
                                           generation in edge_u64(),
                                           now_ms in edge_u64()) {
        let rows = borrow(&owned);
        let meta = Meta { generation, now_ms, dropped_events: 0, check_connections: 0 };
        // Page order: http rows, then stream rows, each in the given order.
        let ordered: Vec<PeerRow> = rows
            .iter()
            .filter(|r| r.group == Group::Http)
            .chain(rows.iter().filter(|r| r.group == Group::Stream))
            .copied()
            .collect();
        cuts.iter_mut().for_each(|c| *c = (*c).min(ordered.len()));
        cuts.sort_unstable();
        for format in Format::ALL {
            let query = Query { format: Some(format), filter, refresh, histogram, c_shapes: false };
            let whole = render(format, &query, &meta, &rows);
            let counts = status::Counts::of(&rows, filter);
            let mut out = b"PREFIX".to_vec();
            let upstreams = status::summarize(&rows);
            let mut page =
                status::Renderer::new(format, &query, &meta, counts, &upstreams, &mut out);
            for pass in 0..page.passes() {
                let mut start = 0;
                for &cut in &cuts {
                    page.rows(pass, &ordered[start..cut], &mut out);
                    start = cut;
                }
                page.rows(pass, &ordered[start..], &mut out);
            }
            page.finish(&mut out);
            prop_assert_eq!(
                String::from_utf8_lossy(&out[6..]),
                String::from_utf8_lossy(&whole),
                "{:?} cut at {:?}", format, cuts
            );
        }
    }

    #[test]
    fn duration_bucket_is_the_first_bound_not_below(ms in edge_u64()) {
        let slot = status::duration_bucket(ms);
        prop_assert!(slot < DURATION_SLOTS);
        if slot < DURATION_BUCKETS_MS.len() {
            prop_assert!(ms <= DURATION_BUCKETS_MS[slot]);
        }
        if slot > 0 {
            prop_assert!(ms > DURATION_BUCKETS_MS[slot - 1]);
        }
    }
}

// ---------------------------------------------------------------------------
// 6. The VNSWRR ring
// ---------------------------------------------------------------------------

fn ring_weights() -> impl Strategy<Value = Vec<u64>> {
    prop_oneof![
        vec(1u64..=12, 1..9),
        vec(1u64..=3, 1..80),
        // all equal: no stored ring
        (1u64..1000, 1usize..100).prop_map(|(w, n)| vec![w; n]),
        // a large common factor
        (vec(1u64..=6, 1..8), 1u64..1 << 40).prop_map(|(w, f)| w.iter().map(|x| x * f).collect()),
        vec(prop_oneof![Just(1u64), Just(7), Just(50), Just(100)], 1..30),
        Just(vec![1]),
    ]
}

/// What a selection's `check` and `take` say about one peer: 0..=3
/// usable (3: usable but `take` refuses), 4 skip, 5 skip cached.
fn verdicts() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        vec(0u8..6, 64),
        vec(prop_oneof![4 => Just(5u8), 1 => 0u8..6], 64),
        vec(prop_oneof![1 => Just(0u8), 4 => 4u8..6], 64),
        Just(vec![5u8; 64]),
        Just(vec![0u8; 64]),
    ]
}

#[derive(Clone, Debug)]
struct SelStep {
    dt: u64,
    /// `None`: same answers as the previous selection.
    verdicts: Option<Vec<u8>>,
    /// Whether the second question to a peer in one selection (sweep, then
    /// walk) gets a different answer.
    flip: bool,
}

fn sel_steps() -> impl Strategy<Value = Vec<SelStep>> {
    let dt = prop_oneof![
        Just(0u64),
        Just(1),
        Just(BLOCK_TTL_MS - 1),
        Just(BLOCK_TTL_MS),
        Just(BLOCK_TTL_MS + 1),
        0u64..3 * BLOCK_TTL_MS,
    ];
    vec(
        (
            dt,
            prop::option::weighted(0.4, verdicts()),
            prop::bool::weighted(0.2),
        )
            .prop_map(|(dt, verdicts, flip)| SelStep { dt, verdicts, flip }),
        1..50,
    )
}

#[derive(Debug, PartialEq)]
enum Event {
    Check(usize, Verdict),
    Take(usize, bool),
}

fn verdict_of(code: u8) -> Verdict {
    match code {
        0..=3 => Verdict::Usable,
        4 => Verdict::Skip,
        _ => Verdict::SkipCached,
    }
}

/// Drives a ring through `steps`, checking every selection against a model
/// of which peers it may leave out.
fn drive_ring(
    weights: &[u64],
    max_init: u32,
    random: u64,
    start: u64,
    steps: &[SelStep],
) -> Result<(), TestCaseError> {
    let mut ring = Ring::new(weights, max_init).map_err(|e| TestCaseError::fail(e.to_string()))?;
    let peers = weights.len();
    prop_assert_eq!(ring.peers(), peers);
    let g = weights.iter().fold(0, |a, &w| gcd(a, w));
    let classes = weights.iter().map(|w| w / g).collect::<HashSet<_>>().len();
    let batch = if ring.is_identity() {
        0
    } else {
        ring.max_init().min((BUILD_BUDGET / classes).max(1)).max(1)
    };
    let mut now = start;
    let mut answers = vec![0u8; 64];
    // Model: last answer of a peer was SkipCached, and when.
    let mut blocked = vec![false; peers];
    let mut blocked_at = vec![0u64; peers];
    let random_calls = RefCell::new(0u32);
    let mut built = ring.built();
    for (i, step) in steps.iter().enumerate() {
        now = now.saturating_add(step.dt);
        if let Some(v) = &step.verdicts {
            answers.clone_from(v);
        }
        let events = RefCell::new(Vec::new());
        let asked = RefCell::new(vec![0u32; peers]);
        let got = ring.select(
            now,
            || {
                *random_calls.borrow_mut() += 1;
                random
            },
            |p| {
                let mut a = asked.borrow_mut();
                a[p] += 1;
                let mut code = answers[p % 64];
                if step.flip && a[p] > 1 {
                    code = (code + 3) % 6;
                }
                let v = verdict_of(code);
                events.borrow_mut().push(Event::Check(p, v));
                v
            },
            |p| {
                let ok = answers[p % 64] != 3;
                events.borrow_mut().push(Event::Take(p, ok));
                ok
            },
        );
        let events = events.into_inner();
        let asked = asked.into_inner();
        prop_assert_eq!(
            *random_calls.borrow(),
            1,
            "random is called once, on the first selection"
        );

        // Replay the events against the model.
        let before = blocked.clone();
        let mut takes = vec![0u32; peers];
        for (k, e) in events.iter().enumerate() {
            match *e {
                Event::Check(p, v) => {
                    // A blocked peer is asked again no sooner than the TTL.
                    if blocked[p] {
                        prop_assert!(
                            blocked_at[p].saturating_add(BLOCK_TTL_MS) <= now,
                            "step {}: peer {} asked {} ms after its block",
                            i,
                            p,
                            now - blocked_at[p]
                        );
                    }
                    blocked[p] = v == Verdict::SkipCached;
                    if blocked[p] {
                        blocked_at[p] = now;
                    }
                }
                Event::Take(p, _) => {
                    takes[p] += 1;
                    prop_assert!(
                        k > 0 && events[k - 1] == Event::Check(p, Verdict::Usable),
                        "take({}) not right after a usable check",
                        p
                    );
                }
            }
        }
        prop_assert!(asked.iter().all(|&n| n <= 2), "asked {:?}", asked);
        prop_assert!(takes.iter().all(|&n| n <= 1), "takes {:?}", takes);
        let taken: Vec<usize> = events
            .iter()
            .filter_map(|e| match e {
                Event::Take(p, true) => Some(*p),
                _ => None,
            })
            .collect();
        match got {
            Some(p) => {
                prop_assert!(p < peers);
                prop_assert_eq!(&taken, &vec![p]);
                prop_assert_eq!(events.last(), Some(&Event::Take(p, true)));
            }
            None => {
                prop_assert!(taken.is_empty());
                // Refusing is only allowed when every peer was asked in
                // this selection or is blocked for less than the TTL.
                for p in 0..peers {
                    let excused = before[p] && blocked_at[p].saturating_add(BLOCK_TTL_MS) > now;
                    prop_assert!(
                        asked[p] > 0 || excused,
                        "step {}: None without asking peer {} (blocked {}, at {}, now {})",
                        i,
                        p,
                        before[p],
                        blocked_at[p],
                        now
                    );
                }
            }
        }

        // Counters and sizes.
        let s = ring.stats();
        prop_assert_eq!(s.asked + s.swept, asked.iter().sum::<u32>() as usize);
        prop_assert_eq!(ring.blocked(), blocked.iter().filter(|&&b| b).count());
        prop_assert!(ring.built() >= built && ring.built() <= ring.len());
        prop_assert_eq!(s.built, ring.built() - built);
        // At most one batch per selection, though it may walk twice.
        prop_assert!(
            s.built <= batch,
            "built {} in one selection, batch {}",
            s.built,
            batch
        );
        prop_assert!(s.visits <= 2 * ring.built().max(1));
        built = ring.built();
    }
    Ok(())
}

fn gcd(a: u64, b: u64) -> u64 {
    if b == 0 {
        a
    } else {
        gcd(b, a % b)
    }
}

proptest! {
    #![proptest_config(cfg(200))]

    // Rings up to about 2^21 nodes here (each case may build all of them
    // eagerly); the 2^24 limit itself is `ring_at_the_node_limit`.
    #[test]
    fn ring_new_matches_the_oracle(weights in prop_oneof![
            vec(prop_oneof![Just(0u64), Just(1), 1u64..100, Just(1 << 20), Just(u64::MAX),
                            Just(u64::MAX - 1), any::<u64>()], 0..6),
            ring_weights(),
        ], max_init in any::<u32>()) {
        let g = weights.iter().fold(0, |a, &w| gcd(a, w));
        let want = if weights.is_empty() {
            Err(RingError::Empty)
        } else if weights.contains(&0) {
            Err(RingError::ZeroWeight)
        } else {
            let nodes: u128 = weights.iter().map(|&w| u128::from(w / g)).sum();
            if nodes > u128::from(MAX_NODES) {
                Err(RingError::TooLarge { nodes })
            } else {
                Ok(nodes as usize)
            }
        };
        match Ring::new(&weights, max_init) {
            Ok(r) => {
                prop_assert_eq!(Ok(r.len()), want);
                prop_assert!(!r.is_empty());
                prop_assert_eq!(r.peers(), weights.len());
                prop_assert_eq!(r.is_identity(), weights.iter().all(|&w| w == weights[0]));
                let want_init = if max_init == 0 { weights.len() } else { max_init as usize }.min(r.len());
                prop_assert_eq!(r.max_init(), want_init);
                if r.is_identity() {
                    prop_assert_eq!(r.built(), r.len());
                } else {
                    prop_assert_eq!(r.built(), want_init);
                }
                for k in 0..r.built().min(64) {
                    prop_assert!(r.node(k).is_some_and(|p| p < weights.len()));
                }
                prop_assert_eq!(r.node(r.len()), None);
                prop_assert_eq!(r.blocked(), 0);
            }
            Err(e) => {
                prop_assert!(!e.to_string().is_empty());
                prop_assert_eq!(Err::<usize, _>(e), want);
            }
        }
    }

    // `now` is nginx's monotonic millisecond clock, far below u64::MAX:
    // within BLOCK_TTL_MS of u64::MAX the block deadline saturates, blocks
    // expire at once and a peer may be asked a third time in a selection.
    #[test]
    fn ring_respects_check_and_take(weights in ring_weights(),
                                    max_init in prop_oneof![Just(0u32), Just(1), Just(2), 0u32..20, Just(u32::MAX)],
                                    random in any::<u64>(),
                                    start in prop_oneof![Just(0u64), 0u64..1 << 50],
                                    steps in sel_steps()) {
        drive_ring(&weights, max_init, random, start, &steps)?;
    }
}

proptest! {
    #![proptest_config(cfg(100))]

    #[test]
    fn ring_gives_exact_shares_when_all_usable(weights in prop_oneof![
            vec(1u64..=100, 1..40),
            vec(prop_oneof![Just(1u64), Just(2), Just(97)], 1..60),
        ], max_init in prop_oneof![Just(0u32), Just(1), 1u32..100, Just(u32::MAX)], random in any::<u64>()) {
        let g = weights.iter().fold(0, |a, &w| gcd(a, w));
        let mut ring = Ring::new(&weights, max_init).unwrap();
        let n = ring.len();
        // Any window of N selections holds every peer exactly w/g times,
        // while the ring is built lazily and after.
        let mut seq = Vec::with_capacity(2 * n);
        for _ in 0..2 * n {
            let p = ring.select(0, || random, |_| Verdict::Usable, |_| true).unwrap();
            prop_assert!(ring.stats().visits == 1 && ring.stats().asked == 1, "{:?}", ring.stats());
            seq.push(p);
        }
        prop_assert_eq!(ring.built(), n);
        for w in [&seq[..n], &seq[n / 2..n / 2 + n], &seq[n..]] {
            let mut counts = vec![0u64; weights.len()];
            for &p in w {
                counts[p] += 1;
            }
            let want: Vec<u64> = weights.iter().map(|w| w / g).collect();
            prop_assert_eq!(counts, want);
        }
    }
}

// ---------------------------------------------------------------------------
// 7. health::Health::record
// ---------------------------------------------------------------------------

proptest! {
    #![proptest_config(cfg(800))]

    #[test]
    fn health_sequences(up: bool, rise0 in any::<u32>(), fall0 in any::<u32>(),
                        steps in vec((any::<bool>(), prop_oneof![1u32..6, any::<u32>()], prop_oneof![1u32..6, any::<u32>()]), 0..80)) {
        // Start from any state (a reload keeps counts), thresholds may
        // change between rounds (a reload changes them).
        let mut h = Health { up, rise: rise0, fall: fall0 };
        let mut expect_next = if up { Transition::WentDown } else { Transition::WentUp };
        for &(ok, rise_th, fall_th) in &steps {
            let before = h;
            let t = h.record(ok, rise_th, fall_th);
            if ok {
                prop_assert_eq!(h.fall, 0);
                prop_assert_eq!(h.rise, before.rise.saturating_add(1));
            } else {
                prop_assert_eq!(h.rise, 0);
                prop_assert_eq!(h.fall, before.fall.saturating_add(1));
            }
            match t {
                Some(tr) => {
                    // Transitions alternate and follow the round's result.
                    prop_assert_eq!(tr, expect_next);
                    prop_assert_eq!(tr == Transition::WentUp, ok);
                    prop_assert_eq!(h.up, ok);
                    prop_assert_ne!(before.up, h.up);
                    expect_next = if ok { Transition::WentDown } else { Transition::WentUp };
                }
                None => prop_assert_eq!(before.up, h.up),
            }
            // Reaching the threshold in the right state always flips.
            if ok && !before.up {
                prop_assert_eq!(t.is_some(), h.rise >= rise_th);
            }
            if !ok && before.up {
                prop_assert_eq!(t.is_some(), h.fall >= fall_th);
            }
        }
        // `n >= threshold` equal results always end in the matching state.
        for ok in [true, false] {
            let mut g = h;
            let th = 3;
            for _ in 0..th {
                g.record(ok, th, th);
            }
            prop_assert_eq!(g.up, ok);
        }
    }
}

// ---------------------------------------------------------------------------
// 8. schedule
// ---------------------------------------------------------------------------

/// Monotonic milliseconds as nginx has them: far from u64::MAX.
fn now_ms() -> impl Strategy<Value = u64> {
    prop_oneof![
        Just(0u64),
        0u64..1 << 20,
        0u64..1 << 50,
        Just((1 << 48) - 1)
    ]
}

fn interval_ms() -> impl Strategy<Value = u64> {
    prop_oneof![
        Just(conf::INTERVAL_MIN_MS),
        Just(conf::INTERVAL_MAX_MS),
        conf::INTERVAL_MIN_MS..=conf::INTERVAL_MAX_MS,
        100u64..5000,
    ]
}

proptest! {
    #![proptest_config(cfg(3000))]

    #[test]
    fn schedule_contracts(now in now_ms(), due in now_ms(), interval in interval_ms(),
                          index: u32, workers in prop_oneof![Just(0u32), 1u32..64, 1u32..=1024],
                          random: u64, took in 0u64..200_000) {
        let o = schedule::owner(index, workers);
        prop_assert!(o < workers.max(1));
        prop_assert_eq!(o, index % workers.max(1));

        for is_owner in [true, false] {
            let at = if is_owner { due } else { due + interval };
            match schedule::decide(now, due, is_owner, interval) {
                Decision::Run => prop_assert!(now >= at),
                Decision::WaitUntil(t) => {
                    prop_assert!(t > now);
                    prop_assert_eq!(t, at);
                    // Waking at `t` runs.
                    prop_assert_eq!(schedule::decide(t, due, is_owner, interval), Decision::Run);
                }
            }
        }
        // A non-owner never runs before the owner would.
        if schedule::decide(now, due, false, interval) == Decision::Run {
            prop_assert_eq!(schedule::decide(now, due, true, interval), Decision::Run);
        }

        let first = schedule::first_due(now, interval, random);
        prop_assert!(first >= now && first < now + interval);

        // The next lattice point is ahead of the round's start: one
        // interval on, or one interval after a start a whole interval late.
        // The next lattice point: one interval on, or one interval after a
        // start a whole interval late (a takeover).
        let start = now + took;
        let next = schedule::next_lattice(now, now, start, interval);
        prop_assert_eq!(next, if took < interval { now + interval } else { start + interval });

        // A jitter delay below the jitter, the same for every caller.
        let jitter = random % interval;
        let due = schedule::due_at(now, random, jitter);
        prop_assert!(due >= now && due - now < jitter.max(1));
        prop_assert_eq!(due, schedule::due_at(now, random, jitter));
    }

    #[test]
    fn schedule_stays_on_its_grid(due0 in now_ms(), interval in interval_ms(),
                                  jitter_pct in 0u64..100, seed: u64,
                                  rounds in vec((0u64..=100, 0u64..=150, prop::bool::weighted(0.1)), 1..40)) {
        // Each round is due on its grid point plus less than the jitter and
        // starts when due or, after an overrun, right after the previous
        // commit, plus some lateness (a busy event loop). A round that
        // starts less than an interval after it was due keeps the grid
        // (its successor's point is the next one, whatever the lateness,
        // the jitter or an overrun); one that starts a whole interval or
        // more after it (a takeover) restarts the grid from its start.
        let jitter = (interval - 1) * jitter_pct / 100;
        let mut grid = due0;
        let mut committed = 0;
        for &(late_pct, took_pct, takeover) in &rounds {
            let due = schedule::due_at(grid, seed, jitter);
            prop_assert!(due >= grid && due < grid + jitter.max(1), "due {} off grid {}", due, grid);
            let ready = due.max(committed);
            let late = if takeover {
                interval + interval * late_pct / 100
            } else {
                interval * late_pct / 400
            };
            let start = ready + late;
            committed = start + interval * took_pct / 100;
            let next = schedule::next_lattice(grid, due, start, interval);
            let want = if start - due < interval { grid + interval } else { start + interval };
            prop_assert_eq!(next, want);
            grid = want;
        }
    }

    #[test]
    fn lease_contracts(worker in 0u32..1024, other in 0u32..1024, now in 0u64..1 << 47,
                       interval in interval_ms(), timeout_frac in 0.0f64..1.0, dt in 0u64..200_000_000) {
        // A valid check: 1 <= timeout < interval.
        let timeout = ((interval as f64 * timeout_frac) as u64).clamp(1, interval - 1);
        let expiry = schedule::lease_expiry(now, timeout, interval);
        // The round's whole budget is covered, and the lease expires before
        // the next interval ends, so a non-owner looking an interval after
        // the round was due can take an abandoned round over.
        prop_assert!(expiry >= now + timeout, "expiry {} < now + timeout {}", expiry, now + timeout);
        prop_assert!(expiry < now + interval, "expiry {} >= now + interval {}", expiry, now + interval);
        let word = schedule::lease(worker, expiry);
        prop_assert_ne!(word, 0, "a held lease is never the free word");
        // The holder's slot may always claim (a respawned worker).
        prop_assert!(schedule::lease_claimable(word, now + dt, worker));
        // Another slot only once the lease expired.
        if other != worker {
            prop_assert_eq!(schedule::lease_claimable(word, now + dt, other), now + dt > expiry);
        }
        prop_assert!(schedule::lease_claimable(0, now, other));
        prop_assert!(schedule::lease_claimable(word, now + interval, other));
    }

    #[test]
    fn rehandshake_contract(age: u64, served: u32, period: u64, max_rounds in prop::option::of(any::<u32>())) {
        let want = age >= period || max_rounds.is_some_and(|n| served >= n);
        prop_assert_eq!(schedule::must_rehandshake(age, served, period, max_rounds), want);
        prop_assert!(!schedule::must_rehandshake(age.min(u64::MAX - 1), 0, u64::MAX, None));
    }
}

// ---------------------------------------------------------------------------
// 9. ptrmap::PtrMap and identity
// ---------------------------------------------------------------------------

fn keys() -> impl Strategy<Value = Vec<usize>> {
    prop_oneof![
        vec(any::<usize>(), 0..200),
        vec(
            prop_oneof![Just(0usize), Just(1), Just(usize::MAX), 0usize..64],
            0..100
        ),
        // pointers into one array: same high bits, aligned
        (
            any::<usize>(),
            prop::sample::select(vec![8usize, 16, 64, 200, 4096, 1 << 20]),
            1usize..600
        )
            .prop_map(|(base, stride, n)| {
                let base = base & !0xfff;
                (0..n)
                    .map(|i| base.wrapping_add(i.wrapping_mul(stride)))
                    .collect()
            }),
        // keys that differ only in their high bits
        (1usize..300).prop_map(|n| (0..n).map(|i| (i << 40) | 0x10).collect()),
    ]
}

proptest! {
    #![proptest_config(cfg(600))]

    #[test]
    fn ptrmap_is_a_first_wins_map(keys in keys(), probes in vec(any::<usize>(), 0..50)) {
        let pairs: Vec<(usize, u32)> = keys.iter().enumerate().map(|(i, &k)| (k, i as u32)).collect();
        let m = PtrMap::new(pairs.iter().copied());
        let mut model: HashMap<usize, u32> = HashMap::new();
        for &(k, v) in &pairs {
            if k != 0 {
                model.entry(k).or_insert(v);
            }
        }
        prop_assert_eq!(m.len(), model.len());
        prop_assert_eq!(m.is_empty(), model.is_empty());
        for &k in keys.iter().chain(&probes) {
            for probe in [k, k.wrapping_add(1), k.wrapping_sub(1), k ^ (1 << 63)] {
                prop_assert_eq!(m.get(probe), model.get(&probe).copied(), "key {:#x}", probe);
            }
        }
        prop_assert_eq!(m.get(0), None);
    }

    #[test]
    fn identity_hash_is_stable_and_separates_fields(
        a in (any::<bool>(), hostile_bytes(12), hostile_bytes(12), any::<bool>(), any::<u16>()),
        b in (any::<bool>(), hostile_bytes(12), hostile_bytes(12), any::<bool>(), any::<u16>()),
    ) {
        let h = |t: &(bool, Vec<u8>, Vec<u8>, bool, u16)| identity_hash(
            if t.0 { "http" } else { "stream" }, &t.1, &t.2, if t.3 { "tcp" } else { "udp" }, t.4);
        prop_assert_eq!(h(&a), h(&a.clone()));
        if a != b {
            prop_assert_ne!(h(&a), h(&b));
        }
        // Moving bytes from one field to the next changes the hash.
        if !a.1.is_empty() {
            let mut c = a.clone();
            let x = c.1.pop().unwrap();
            c.2.insert(0, x);
            prop_assert_ne!(h(&a), h(&c));
        }
    }
}

// ---------------------------------------------------------------------------
// Kept inputs: fixed cases at the edges the generators reach rarely.
// ---------------------------------------------------------------------------

#[test]
fn ring_at_the_node_limit() {
    // N = 2^24 exactly: the largest ring; node and position indices use all
    // 24 bits.
    let mut r = Ring::new(&[(1 << 24) - 1, 1], 0).unwrap();
    assert_eq!(r.len(), 1 << 24);
    assert_eq!(r.built(), 2);
    for _ in 0..100 {
        assert!(r.select(0, || 1, |_| Verdict::Usable, |_| true).is_some());
    }
    // Peer 1 down (blocked): every selection still answers peer 0.
    for i in 0..100u64 {
        let got = r.select(
            i,
            || 1,
            |p| {
                if p == 1 {
                    Verdict::SkipCached
                } else {
                    Verdict::Usable
                }
            },
            |_| true,
        );
        assert_eq!(got, Some(0));
    }
    assert!(matches!(
        Ring::new(&[1 << 24, 1], 0),
        Err(RingError::TooLarge { nodes }) if nodes == (1 << 24) + 1
    ));
}

#[test]
fn ring_with_huge_weights_reduces_them() {
    let r = Ring::new(&[u64::MAX, u64::MAX], 0).unwrap();
    assert!(r.is_identity());
    assert_eq!(r.len(), 2);
    let r = Ring::new(&[u64::MAX - 1, (u64::MAX - 1) / 2], 0).unwrap();
    assert_eq!(r.len(), 3);
    assert!(matches!(
        Ring::new(&[u64::MAX, 1], 0),
        Err(RingError::TooLarge { .. })
    ));
}

#[test]
fn check_edges() {
    let ok = |args: &[&str]| {
        let b: Vec<&[u8]> = args.iter().map(|a| a.as_bytes()).collect();
        conf::parse_check(&b)
    };
    // The largest interval with every keepalive default.
    let c = ok(&["interval=24h", "keepalive=on"]).unwrap();
    assert_eq!(c.keepalive.unwrap().idle_s, 32_767);
    assert_eq!(c.rehandshake_ms, Some(2 * 86_400_000));
    // keepalive=off:... has no age limit.
    let c = ok(&["keepalive=off:5:5:127"]).unwrap();
    assert_eq!(c.rehandshake_ms, Some(u64::MAX));
    // The rehandshake field in months/years is beyond 7 days.
    assert!(ok(&["keepalive=1M"]).is_err());
    assert!(ok(&["reuse=1y"]).is_err());
    // Overflow inside the seconds-to-ms conversion is refused, not wrapped.
    assert!(ok(&["reuse=9223372036854775807"]).is_err());
    assert!(ok(&["keepalive=9223372036854775807s"]).is_err());
    assert!(ok(&["interval=9223372036854775807ms"]).is_err());
    assert!(ok(&["timeout=99999999999999999999"]).is_err());
}

#[test]
fn render_huge_times() {
    // The largest timestamps render in every format (dates past year
    // 584 million, ages of 213 billion days).
    let owned = OwnedRow {
        group: Group::Http,
        upstream: b"u".to_vec(),
        name: b"n".to_vec(),
        up: false,
        rise: u32::MAX,
        fall: u32::MAX,
        check_type: "http",
        port: u16::MAX,
        delays: [i64::MIN, i64::MAX, -1, 0],
        checks: u64::MAX,
        fails_total: u64::MAX,
        failures: vec![("timeout", u64::MAX), ("timeout", u64::MAX)],
        last_failure_reason: Some("timeout"),
        http_status: Some(u16::MAX),
        last_change_ms: u64::MAX,
        down_since_ms: Some(1),
        buckets: vec![u64::MAX; DURATION_SLOTS],
        sum: u64::MAX,
        count: u64::MAX,
    };
    let rows = borrow(std::slice::from_ref(&owned));
    for now_ms in [0, u64::MAX] {
        let meta = Meta {
            generation: u64::MAX,
            now_ms,
            dropped_events: u64::MAX,
            check_connections: u64::MAX,
        };
        for format in Format::ALL {
            let query = Query {
                format: Some(format),
                filter: None,
                refresh: Some(u32::MAX),
                histogram: Some(true),
                c_shapes: false,
            };
            let body = render(format, &query, &meta, &rows);
            assert!(std::str::from_utf8(&body).is_ok());
        }
    }
}

/// `schedule::lease` keeps 16 bits of the worker slot. Slot 65535 used to
/// be stored as 65535 + 1, which shifts out to 0, so its lease word was the
/// bare expiry (the free word 0 when the expiry's low bits were 0) and the
/// slot did not recognise its own lease. A held bit now marks the lease.
/// Not reachable in nginx (at most NGX_MAX_PROCESSES = 1024 worker slots).
#[test]
fn lease_of_slot_65535() {
    let e = 1 << 48;
    assert_ne!(schedule::lease(65_535, e), 0);
    assert!(schedule::lease_claimable(
        schedule::lease(65_535, 5),
        0,
        65_535
    ));
}

/// Found by `ring_respects_check_and_take` with a one-batch bound: a
/// selection that walks twice used to build one batch per walk. Here every
/// peer was blocked at t=0; at t=500 the first sweep (SWEEP = 4) unblocks
/// four peers whose `take` refuses, the first walk builds a batch and finds
/// nothing, the final sweep unblocks the fifth peer and the second walk
/// must take it without building another batch (it reaches peer 3 through
/// the configuration-order fallback of an incomplete ring).
#[test]
fn a_selection_builds_at_most_one_batch() {
    let mut r = Ring::new(&[1, 1, 1, 1, 3], 1).unwrap();
    assert_eq!(r.max_init(), 1);
    assert_eq!(r.select(0, || 0, |_| Verdict::SkipCached, |_| true), None);
    let got = r.select(500, || 0, |_| Verdict::Usable, |p| p == 3);
    assert_eq!(got, Some(3));
    assert!(r.stats().built <= 1, "{:?}", r.stats());
}

// ---- http response parser ----
//
// healthcheck_core::http::response::Parser over arbitrary bytes, HTTP-ish
// token soup and mutated valid responses: it never panics, its verdict
// does not depend on how the bytes were split (one piece, one byte at a
// time, random cuts), its state only moves forward, eof always settles it,
// and its buffers stay within max_head + body_keep. Valid responses are
// also checked against what was rendered.

use healthcheck_core::http::response::{Config as RespConfig, Head, Parser, State};

/// What the probe engine can observe of a parser, before and after eof.
#[derive(Clone, Debug, PartialEq)]
struct RespSeen {
    state: State,
    head: Option<Head>,
    body: Vec<u8>,
    settled: bool,
    body_len: u64,
    trailing: u64,
    reusable: bool,
    eof: State,
    eof_reusable: bool,
}

fn resp_rank(s: State) -> u8 {
    match s {
        State::NeedMore => 0,
        State::Body => 1,
        State::Complete | State::Invalid(_) => 2,
    }
}

/// Feeds `pieces` to a new parser, checking the bound and the forward-only
/// state after each, then eof.
fn resp_observe<'a>(
    c: RespConfig,
    pieces: impl IntoIterator<Item = &'a [u8]>,
) -> Result<RespSeen, TestCaseError> {
    let mut p = Parser::new(c);
    let bound = c.max_head + c.body_keep;
    let mut last = p.state();
    for piece in pieces {
        let s = p.feed(piece);
        prop_assert_eq!(s, p.state());
        prop_assert!(p.held() <= bound, "held {} > {}", p.held(), bound);
        prop_assert!(p.body().len() <= c.body_keep);
        prop_assert!(resp_rank(s) >= resp_rank(last), "{:?} after {:?}", s, last);
        if resp_rank(last) == 2 {
            prop_assert_eq!(s, last);
        }
        if p.head().is_none() {
            prop_assert!(matches!(s, State::NeedMore | State::Invalid(_)));
        }
        last = s;
    }
    let mut seen = RespSeen {
        state: p.state(),
        head: p.head().cloned(),
        body: p.body().to_vec(),
        settled: p.body_settled(),
        body_len: p.body_len(),
        trailing: p.trailing(),
        reusable: p.reusable(),
        eof: State::NeedMore,
        eof_reusable: false,
    };
    seen.eof = p.eof();
    seen.eof_reusable = p.reusable();
    prop_assert_eq!(resp_rank(seen.eof), 2);
    prop_assert!(!seen.eof_reusable, "reusable after the peer closed");
    prop_assert!(p.held() <= bound);
    if seen.reusable {
        prop_assert_eq!(seen.state, State::Complete);
        prop_assert_eq!(seen.trailing, 0);
    }
    Ok(seen)
}

/// The same verdict in one piece, byte by byte and cut at `cuts`.
fn resp_split_invariant(
    c: RespConfig,
    bytes: &[u8],
    cuts: &[prop::sample::Index],
) -> Result<RespSeen, TestCaseError> {
    let whole = resp_observe(c, [bytes])?;
    let single = resp_observe(c, bytes.chunks(1))?;
    prop_assert_eq!(&single, &whole, "byte by byte");
    let mut at: Vec<usize> = cuts.iter().map(|i| i.index(bytes.len() + 1)).collect();
    at.sort_unstable();
    at.push(bytes.len());
    let mut pieces = Vec::new();
    let mut from = 0;
    for to in at {
        pieces.push(&bytes[from..to]);
        from = to;
    }
    let split = resp_observe(c, pieces.iter().copied())?;
    prop_assert_eq!(&split, &whole, "cut into {} pieces", pieces.len());
    Ok(whole)
}

fn resp_config() -> impl Strategy<Value = RespConfig> {
    (
        prop_oneof![0usize..48, 48usize..400, Just(1024), Just(1 << 20)],
        prop_oneof![Just(0usize), 1usize..16, Just(4096)],
        prop::bool::weighted(0.1),
    )
        .prop_map(|(max_head, body_keep, head_request)| RespConfig {
            max_head,
            body_keep,
            head_request,
            final_101: false,
        })
}

/// Pieces of HTTP/1.x responses and near misses.
const RESP_TOKENS: &[&[u8]] = &[
    b"HTTP/1.1 ",
    b"HTTP/1.0 ",
    b"HTTP/1.",
    b"HTTP/2 ",
    b"200",
    b"100",
    b"101",
    b"103",
    b"204",
    b"304",
    b"999",
    b" OK",
    b"\r\n",
    b"\n",
    b"\r",
    b"\r\n\r\n",
    b": ",
    b":",
    b"X-A",
    b" ",
    b"\t",
    b"\x00",
    b"\x7f",
    b"\xff",
    b"Content-Length: ",
    b"Content-Length: 5\r\n",
    b"Transfer-Encoding: chunked\r\n",
    b"Transfer-Encoding: gzip, chunked",
    b"Connection: close\r\n",
    b"Connection: keep-alive\r\n",
    b"0",
    b"5",
    b"a",
    b"F",
    b";ext=1",
    b",",
    b"ffffffffffffffff",
    b"10000000000000000",
    b"hello",
];

/// A valid response from a few choices, and its body.
fn resp_valid() -> impl Strategy<Value = (Vec<u8>, Vec<u8>, RespConfig)> {
    (
        0usize..3,
        prop::sample::select(vec![200u16, 204, 304, 404, 503]),
        any::<bool>(),
        vec(
            (
                "[A-Za-z][A-Za-z0-9-]{0,8}",
                "[ -~]{0,16}".prop_map(|v| v.trim().to_string()),
            ),
            0..4,
        ),
        0u8..3,
        vec(any::<u8>(), 0..300),
        vec(1usize..64, 1..6),
        any::<bool>(),
        resp_config(),
    )
        .prop_map(
            |(interim, status, v10, fields, framing, body, chunks, lf, mut c)| {
                let eol: &str = if lf { "\n" } else { "\r\n" };
                c.max_head = c.max_head.max(2048);
                c.head_request = false;
                let mut out = String::new();
                for _ in 0..interim {
                    out += &format!("HTTP/1.1 100 Continue{eol}X-I: 1{eol}{eol}");
                }
                let version = if v10 && framing != 1 { "1.0" } else { "1.1" };
                out += &format!("HTTP/{version} {status} Reason{eol}");
                for (n, v) in &fields {
                    let n = if ["content-length", "transfer-encoding"]
                        .contains(&n.to_ascii_lowercase().as_str())
                    {
                        "X-Renamed"
                    } else {
                        n
                    };
                    out += &format!("{n}: {v}{eol}");
                }
                let no_body = status == 204 || status == 304;
                let mut bytes;
                let body = if no_body { Vec::new() } else { body };
                match framing {
                    0 => {
                        out += &format!("Content-Length: {}{eol}{eol}", body.len());
                        bytes = out.into_bytes();
                        if !no_body {
                            bytes.extend_from_slice(&body);
                        }
                    }
                    1 => {
                        out += &format!("Transfer-Encoding: chunked{eol}{eol}");
                        bytes = out.into_bytes();
                        if !no_body {
                            let mut rest = &body[..];
                            for n in chunks.iter().cycle().take(1000) {
                                if rest.is_empty() {
                                    break;
                                }
                                let (a, b) = rest.split_at((*n).min(rest.len()));
                                bytes.extend_from_slice(
                                    format!("{:x};e=1{eol}", a.len()).as_bytes(),
                                );
                                bytes.extend_from_slice(a);
                                bytes.extend_from_slice(eol.as_bytes());
                                rest = b;
                            }
                            bytes.extend_from_slice(format!("0{eol}T: v{eol}{eol}").as_bytes());
                        }
                    }
                    _ => {
                        out += eol;
                        bytes = out.into_bytes();
                        bytes.extend_from_slice(&body);
                    }
                }
                (bytes, body, c)
            },
        )
}

/// Byte edits: overwrite, delete, insert, duplicate a range, splice a
/// token, truncate.
fn resp_mutate(bytes: &mut Vec<u8>, edits: &[(prop::sample::Index, u8, u8, usize)]) {
    for &(at, b, op, len) in edits {
        let i = at.index(bytes.len() + 1);
        match op % 6 {
            0 if i < bytes.len() => bytes[i] = b,
            1 if i < bytes.len() => {
                bytes.remove(i);
            }
            2 => bytes.insert(i, b),
            3 => {
                let end = (i + len % 64).min(bytes.len());
                let copy = bytes[i..end].to_vec();
                bytes.splice(i..i, copy);
            }
            4 => {
                let t = RESP_TOKENS[usize::from(b) % RESP_TOKENS.len()];
                bytes.splice(i..i, t.iter().copied());
            }
            _ => bytes.truncate(i),
        }
    }
}

proptest! {
    #![proptest_config(cfg(300))]

    #[test]
    fn http_response_arbitrary_bytes(
        bytes in prop_oneof![
            vec(any::<u8>(), 0..400),
            vec(prop::sample::select(RESP_TOKENS), 0..80).prop_map(|v| v.concat()),
        ],
        c in resp_config(),
        cuts in vec(any::<prop::sample::Index>(), 0..10),
    ) {
        resp_split_invariant(c, &bytes, &cuts)?;
    }

    #[test]
    fn http_response_mutated(
        (bytes, _, c) in resp_valid(),
        small in prop_oneof![Just(None), (16usize..200).prop_map(Some)],
        edits in vec((any::<prop::sample::Index>(), any::<u8>(), any::<u8>(), any::<usize>()), 0..5),
        cuts in vec(any::<prop::sample::Index>(), 0..10),
    ) {
        let mut bytes = bytes;
        resp_mutate(&mut bytes, &edits);
        let c = RespConfig { max_head: small.unwrap_or(c.max_head), ..c };
        resp_split_invariant(c, &bytes, &cuts)?;
    }

    #[test]
    fn http_response_valid_is_complete(
        (bytes, body, c) in resp_valid(),
        garbage in vec(any::<u8>(), 0..8),
        cuts in vec(any::<prop::sample::Index>(), 0..10),
    ) {
        let seen = resp_split_invariant(c, &bytes, &cuts)?;
        let head = seen.head.as_ref().expect("a final head");
        let until_close = seen.state == State::Body;
        prop_assert_eq!(if until_close { seen.eof } else { seen.state }, State::Complete);
        prop_assert!(head.status >= 200);
        prop_assert_eq!(&seen.body[..], &body[..body.len().min(c.body_keep)]);
        prop_assert_eq!(seen.body_len, body.len() as u64);
        prop_assert_eq!(seen.trailing, 0);
        prop_assert!(seen.settled || until_close);
        // Bytes after a complete response are trailing, never body, and
        // the connection is no longer reusable.
        if !until_close && !garbage.is_empty() {
            let mut more = bytes.clone();
            more.extend_from_slice(&garbage);
            let seen2 = resp_split_invariant(c, &more, &cuts)?;
            prop_assert_eq!(seen2.state, State::Complete);
            prop_assert_eq!(seen2.trailing, garbage.len() as u64);
            prop_assert!(!seen2.reusable);
            prop_assert_eq!(seen2.body, seen.body);
        }
    }
}

// ---- check_match and http request ----
//
// check_match tests parsed from arbitrary words, \xHH decoding, the built
// HTTP request, the host of a server line, evaluation of responses against
// an oracle written from the matcher's documented rules, and expect on a
// growing answer. The `regex` crate stands in for nginx's PCRE.

use healthcheck_core::http::request::{build_request, host_of_server, HttpRequest};
use healthcheck_core::matcher::{
    self, Expect, ExpectProgress, HeadView, HeaderCond, MatchBlock, RegexSet, Test,
};
use healthcheck_core::reason::Reason as MatchReason;

/// The words a test line is made of, and near misses.
fn match_word() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        2 => hostile_bytes(12),
        3 => prop::sample::select(vec![
            "status", "header", "body", "send", "expect", "!", "=", "!=", "~", "~*", "!~",
            "!~*", "200", "100", "599", "600", "099", "200-399", "399-200", "500-599", "-",
            "X-A", "x-a", "Host", "ok", "\\x41", "\\x0", "\\xzz", "", "~~",
        ])
        .prop_map(|s| s.as_bytes().to_vec()),
        1 => "[0-9]{1,4}(-[0-9]{0,4})?".prop_map(String::into_bytes),
    ]
}

/// The test stand-in for nginx's PCRE over a block's expressions; an
/// expression the `regex` crate cannot compile never matches.
struct StandIn(Vec<Option<regex::bytes::Regex>>);

impl StandIn {
    fn new(b: &MatchBlock) -> StandIn {
        StandIn(
            b.regexes()
                .map(|(_, source, caseless)| {
                    std::str::from_utf8(source).ok().and_then(|s| {
                        regex::bytes::RegexBuilder::new(s)
                            .case_insensitive(caseless)
                            .build()
                            .ok()
                    })
                })
                .collect(),
        )
    }
}

impl RegexSet for StandIn {
    fn is_match(&self, id: usize, subject: &[u8]) -> bool {
        self.0[id].as_ref().is_some_and(|r| r.is_match(subject))
    }
}

/// A header test of the oracle: (name, condition) with literal regexes.
#[derive(Clone, Debug)]
enum HeaderGen {
    Present,
    Absent,
    Eq(String),
    Ne(String),
    /// (literal, caseless, negated)
    Re(String, bool, bool),
}

#[derive(Clone, Debug)]
enum TestGen {
    Status(bool, Vec<(u16, u16)>),
    Header(String, HeaderGen),
    /// (literal, caseless, negated)
    Body(String, bool, bool),
}

impl TestGen {
    fn words(&self) -> Vec<String> {
        let re = |lit: &str| regex::escape(lit);
        let mut w = Vec::new();
        match self {
            TestGen::Status(neg, ranges) => {
                w.push("status".to_string());
                if *neg {
                    w.push("!".into());
                }
                for (lo, hi) in ranges {
                    w.push(if lo == hi {
                        lo.to_string()
                    } else {
                        format!("{lo}-{hi}")
                    });
                }
            }
            TestGen::Header(name, h) => {
                w.push("header".into());
                match h {
                    HeaderGen::Present => w.push(name.clone()),
                    HeaderGen::Absent => w.extend(["!".into(), name.clone()]),
                    HeaderGen::Eq(v) => w.extend([name.clone(), "=".into(), v.clone()]),
                    HeaderGen::Ne(v) => w.extend([name.clone(), "!=".into(), v.clone()]),
                    HeaderGen::Re(lit, ci, neg) => {
                        let op = match (neg, ci) {
                            (false, false) => "~",
                            (false, true) => "~*",
                            (true, false) => "!~",
                            (true, true) => "!~*",
                        };
                        w.extend([name.clone(), op.into(), re(lit)]);
                    }
                }
            }
            TestGen::Body(lit, ci, neg) => {
                let op = match (neg, ci) {
                    (false, false) => "~",
                    (false, true) => "~*",
                    (true, false) => "!~",
                    (true, true) => "!~*",
                };
                w.extend(["body".into(), op.into(), re(lit)]);
            }
        }
        w
    }

    /// The documented rule, on plain strings.
    fn passes(&self, status: u16, headers: &[(String, String)], body: &str) -> bool {
        let contains = |hay: &str, lit: &str, ci: bool| {
            if ci {
                hay.to_lowercase().contains(&lit.to_lowercase())
            } else {
                hay.contains(lit)
            }
        };
        match self {
            TestGen::Status(neg, ranges) => {
                ranges.iter().any(|&(lo, hi)| lo <= status && status <= hi) != *neg
            }
            TestGen::Header(name, h) => {
                let vals: Vec<&str> = headers
                    .iter()
                    .filter(|(n, _)| n.eq_ignore_ascii_case(name))
                    .map(|(_, v)| v.as_str())
                    .collect();
                match h {
                    HeaderGen::Present => !vals.is_empty(),
                    HeaderGen::Absent => vals.is_empty(),
                    HeaderGen::Eq(v) => vals.contains(&v.as_str()),
                    HeaderGen::Ne(v) => !vals.contains(&v.as_str()),
                    HeaderGen::Re(lit, ci, neg) => {
                        vals.iter().any(|x| contains(x, lit, *ci)) != *neg
                    }
                }
            }
            TestGen::Body(lit, ci, neg) => contains(body, lit, *ci) != *neg,
        }
    }
}

fn test_gen() -> impl Strategy<Value = TestGen> {
    let name = || prop::sample::select(vec!["X-A", "x-a", "X-B", "Server"]).prop_map(String::from);
    let value =
        || prop::sample::select(vec!["1", "2", "up", "UP", "down", ""]).prop_map(String::from);
    let lit =
        || prop::sample::select(vec!["up", "UP", "ok", "a.b", "(x)", "+"]).prop_map(String::from);
    let code = prop_oneof![
        100u16..=599,
        prop::sample::select(vec![200u16, 204, 301, 404, 500, 503])
    ];
    let range = (code, 0u16..120).prop_map(|(lo, w)| (lo, (lo + w).min(599)));
    prop_oneof![
        (any::<bool>(), vec(range, 1..4)).prop_map(|(n, r)| TestGen::Status(n, r)),
        (
            name(),
            prop_oneof![
                Just(HeaderGen::Present),
                Just(HeaderGen::Absent),
                value().prop_map(HeaderGen::Eq),
                value().prop_map(HeaderGen::Ne),
                (lit(), any::<bool>(), any::<bool>()).prop_map(|(l, c, n)| HeaderGen::Re(l, c, n)),
            ]
        )
            .prop_map(|(n, h)| TestGen::Header(n, h)),
        (lit(), any::<bool>(), any::<bool>()).prop_map(|(l, c, n)| TestGen::Body(l, c, n)),
    ]
}

fn response_gen() -> impl Strategy<Value = (u16, Vec<(String, String)>, String)> {
    let name = prop::sample::select(vec!["X-A", "x-a", "X-A", "X-B", "server", "Other"]);
    let value = prop::sample::select(vec!["1", "2", "up", "UP", "down", "", "a.b", "(x)+"]);
    (
        prop_oneof![
            100u16..=599,
            0u16..1000,
            prop::sample::select(vec![200u16, 204, 404, 500])
        ],
        vec(
            (name, value).prop_map(|(n, v)| (n.to_string(), v.to_string())),
            0..5,
        ),
        prop::sample::select(vec![
            "", "up", "all UP", "ok", "a.b", "axb", "(x)", "+", "down",
        ])
        .prop_map(String::from),
    )
}

fn words_of(line: &[String]) -> Vec<&[u8]> {
    line.iter().map(|w| w.as_bytes()).collect()
}

/// A request the conf parsers accept, from bytes that are mostly valid.
fn fuzz_request() -> impl Strategy<Value = HttpRequest> {
    let method = prop_oneof!["[A-Z]{1,10}".prop_map(String::into_bytes), hostile_bytes(8),];
    let uri = prop_oneof![
        "/[!-~]{0,30}".prop_map(String::into_bytes),
        hostile_bytes(16).prop_map(|v| [&b"/"[..], &v].concat()),
    ];
    let header = (
        prop_oneof![
            "[A-Za-z0-9!#$%&'*+.^_`|~-]{1,16}".prop_map(String::into_bytes),
            prop::sample::select(vec![
                "Host",
                "HOST",
                "user-agent",
                "Accept",
                "connection",
                "X"
            ])
            .prop_map(|s| s.as_bytes().to_vec()),
            hostile_bytes(10),
        ],
        hostile_bytes(20),
    );
    (method, uri, vec(header, 0..8)).prop_map(|(m, u, hs)| {
        let mut req = HttpRequest::default();
        if let Ok((m, u)) = conf::parse_http_request(&[&m, &u]) {
            (req.method, req.uri) = (m, u);
        }
        for (n, v) in hs {
            if let Ok((n, v)) = conf::parse_http_header(&[&n, &v]) {
                req.set_header(n, v);
            }
        }
        req
    })
}

/// A server line's address as nginx would accept it (no spaces, no
/// controls), or hostile bytes without CR and LF.
fn server_name() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        "[a-z0-9.-]{1,20}(:[0-9]{1,5})?".prop_map(String::into_bytes),
        "\\[[0-9a-f:]{2,20}\\](:[0-9]{1,5})?".prop_map(String::into_bytes),
        "[0-9a-f]{1,4}(:[0-9a-f]{0,4}){2,7}".prop_map(String::into_bytes),
        "unix:/[a-z/.]{1,20}".prop_map(String::into_bytes),
        hostile_bytes(24).prop_map(|v| v
            .into_iter()
            .filter(|b| !matches!(b, b'\r' | b'\n'))
            .collect()),
    ]
}

proptest! {
    #![proptest_config(cfg(800))]

    #[test]
    fn match_parse_test_never_panics(first in match_word(), rest in vec(match_word(), 0..5)) {
        let mut args: Vec<&[u8]> = vec![&first];
        args.extend(rest.iter().map(Vec::as_slice));
        match matcher::parse_test(&args) {
            Ok(t) => {
                prop_assert_eq!(t.name().as_bytes(), args[0]);
                match &t {
                    Test::Status { ranges, .. } => {
                        prop_assert!(!ranges.is_empty());
                        for &(lo, hi) in ranges {
                            prop_assert!(matcher::STATUS_MIN <= lo && lo <= hi && hi <= matcher::STATUS_MAX);
                        }
                    }
                    Test::Send(s) | Test::Expect(Expect::Prefix(s)) => prop_assert!(!s.is_empty()),
                    Test::Header { name, cond } => {
                        // A token (`header ! !` is "no header named !").
                        prop_assert!(!name.is_empty());
                        prop_assert!(name.iter().all(|&b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)));
                        if let HeaderCond::Matches(r) | HeaderCond::NotMatches(r) = cond {
                            prop_assert!(!r.source.is_empty());
                        }
                    }
                    Test::Body { regex, .. } | Test::Expect(Expect::Regex(regex)) => {
                        prop_assert!(!regex.source.is_empty())
                    }
                }
                // A block of it is valid for exactly the types it fits.
                let b = MatchBlock { name: b"m".to_vec(), tests: vec![t.clone()] };
                for ty in [CheckType::Tcp, CheckType::Udp, CheckType::Http] {
                    prop_assert_eq!(b.validate(ty).is_ok(), t.fits(ty));
                }
            }
            Err(e) => {
                assert_one_line(&e.0)?;
                let test = conf_printable(args[0]);
                let quotes = args.iter().any(|a| e.0.starts_with(&format!("invalid value \"{}\" in \"{test}\" test: ", conf_printable(a))));
                prop_assert!(
                    quotes
                        || e.0 == format!("invalid number of arguments in \"{test}\" test")
                        || e.0.starts_with(&format!("unknown test \"{test}\" in check_match")),
                    "{:?} for {:?}", e.0, args
                );
            }
        }
    }

}

proptest! {
    #![proptest_config(cfg(3000))]

    #[test]
    fn match_unescape_round_trips(v in hostile_bytes(40), forms in vec(0u8..3, 40)) {
        // Each byte written as itself (unless it is a backslash), as \xhh
        // or as \xHH.
        let mut text = Vec::new();
        for (i, &b) in v.iter().enumerate() {
            match forms.get(i).copied().unwrap_or(1) {
                0 if b != b'\\' => text.push(b),
                2 => text.extend_from_slice(format!("\\x{b:02X}").as_bytes()),
                _ => text.extend_from_slice(format!("\\x{b:02x}").as_bytes()),
            }
        }
        prop_assert_eq!(conf::unescape(&text), Ok(v));
    }

    #[test]
    fn match_unescape_every_byte(b: u8, upper: bool) {
        let t = if upper { format!("\\x{b:02X}") } else { format!("\\x{b:02x}") };
        prop_assert_eq!(conf::unescape(t.as_bytes()), Ok(vec![b]));
        // Not two hex digits after \x: an error naming the offset.
        if !b.is_ascii_hexdigit() {
            let bad = [&b"ab\\x"[..], &[b], b"0"].concat();
            prop_assert_eq!(
                conf::unescape(&bad).unwrap_err(),
                "\\x at byte 2 must be followed by two hex digits (\\x0d, \\xff)".to_string()
            );
        }
    }

}

proptest! {
    #![proptest_config(cfg(1000))]

    #[test]
    fn http_build_request_is_well_framed(req in fuzz_request(), name in server_name(),
                                         port: u16, https: bool, keep_alive: bool) {
        let (host, own_port) = host_of_server(&name);
        let default_port = if https { 443 } else { 80 };
        let port = own_port.unwrap_or(port);
        let r = build_request(&req, host, port, default_port, keep_alive);
        prop_assert!(r.ends_with(b"\r\n\r\n"));
        prop_assert_eq!(r.windows(4).position(|w| w == b"\r\n\r\n"), Some(r.len() - 4));
        let head = &r[..r.len() - 4];
        let lines: Vec<&[u8]> = head.split(|&b| b == b'\n').collect();
        for (i, l) in lines.iter().enumerate() {
            let l = if i + 1 < lines.len() { l.strip_suffix(b"\r").unwrap_or(l) } else { l };
            prop_assert!(!l.contains(&b'\r') && !l.contains(&b'\n'), "bare CR in {:?}", String::from_utf8_lossy(l));
            prop_assert!(!l.is_empty());
        }
        for l in &lines[..lines.len() - 1] {
            prop_assert!(l.ends_with(b"\r"));
        }
        let want_line = [&req.method[..], b" ", &req.uri, b" HTTP/1.1"].concat();
        prop_assert_eq!(lines[0].strip_suffix(b"\r").unwrap_or(lines[0]), &want_line[..]);
        let mut parsed: Vec<(Vec<u8>, Vec<u8>)> = Vec::new();
        for l in &lines[1..] {
            let l = l.strip_suffix(b"\r").unwrap_or(l);
            let colon = l.iter().position(|&b| b == b':');
            prop_assert!(colon.is_some());
            let c = colon.unwrap();
            prop_assert_eq!(&l[c..c + 2], b": ");
            parsed.push((l[..c].to_ascii_lowercase(), l[c + 2..].to_vec()));
        }
        let count = |n: &[u8]| parsed.iter().filter(|(x, _)| x == n).count();
        prop_assert_eq!(count(b"host"), 1);
        prop_assert_eq!(count(b"user-agent"), 1);
        prop_assert_eq!(count(b"accept"), 1);
        prop_assert_eq!(count(b"connection"), 1);
        let given = |n: &[u8]| req.headers.iter().find(|(x, _)| x.eq_ignore_ascii_case(n)).map(|(_, v)| v.clone());
        // The Host value: configured, or the host (bracketed if IPv6) and
        // the port unless it is the default.
        let mut host_value = host.to_vec();
        if host.contains(&b':') && !host.starts_with(b"[") {
            host_value = [&b"["[..], host, b"]"].concat();
        }
        if port != default_port {
            host_value.extend_from_slice(format!(":{port}").as_bytes());
        }
        let host_line = parsed.iter().find(|(n, _)| n == b"host").unwrap();
        prop_assert_eq!(&host_line.1, &given(b"host").unwrap_or(host_value));
        let conn = parsed.iter().find(|(n, _)| n == b"connection").unwrap();
        let want_conn = given(b"connection").unwrap_or_else(|| if keep_alive { b"keep-alive".to_vec() } else { b"close".to_vec() });
        prop_assert_eq!(&conn.1, &want_conn);
        prop_assert_eq!(parsed.len(), 4 + req.headers.iter().filter(|(n, _)| {
            !["host", "user-agent", "accept", "connection"].iter().any(|d| n.eq_ignore_ascii_case(d.as_bytes()))
        }).count());
    }

}

proptest! {
    #![proptest_config(cfg(3000))]

    #[test]
    fn http_host_of_server_contract(name in server_name()) {
        let (host, port) = host_of_server(&name);
        prop_assert!(port != Some(0));
        if name.is_empty() || name.starts_with(b"unix:") {
            prop_assert_eq!((host, port), (&b"localhost"[..], None));
        } else {
            prop_assert!(name.starts_with(host));
            if let Some(p) = port {
                // `:` and the port in decimal, perhaps with leading zeros.
                let rest = &name[host.len()..];
                prop_assert_eq!(rest[0], b':');
                let digits = std::str::from_utf8(&rest[1..]).unwrap();
                prop_assert!(digits.bytes().all(|b| b.is_ascii_digit()));
                prop_assert_eq!(digits.trim_start_matches('0'), p.to_string());
            }
        }
    }

}

proptest! {
    #![proptest_config(cfg(800))]

    #[test]
    fn match_evaluate_http_matches_the_oracle(tests in vec(test_gen(), 1..5), resp in response_gen()) {
        let (status, headers, body) = resp;
        let parsed: Vec<Test> = tests
            .iter()
            .map(|t| matcher::parse_test(&words_of(&t.words())).unwrap())
            .collect();
        let b = MatchBlock { name: b"m".to_vec(), tests: parsed };
        prop_assert_eq!(b.validate(CheckType::Http), Ok(()));
        let hs: Vec<(Vec<u8>, Vec<u8>)> = headers.iter().map(|(n, v)| (n.clone().into_bytes(), v.clone().into_bytes())).collect();
        let head = HeadView { status, headers: &hs };
        let got = b.evaluate_http(&head, body.as_bytes(), &StandIn::new(&b));
        let status_ok = tests.iter().filter(|t| matches!(t, TestGen::Status(..))).all(|t| t.passes(status, &headers, &body));
        let rest_ok = tests.iter().filter(|t| !matches!(t, TestGen::Status(..))).all(|t| t.passes(status, &headers, &body));
        let want = if !status_ok { Err(MatchReason::Status) } else if !rest_ok { Err(MatchReason::Mismatch) } else { Ok(()) };
        prop_assert_eq!(got, want);
        prop_assert_eq!(b.needs_body(), tests.iter().any(|t| matches!(t, TestGen::Body(..))));
        // The same through http_verdict, whatever the classes.
        let v = matcher::http_verdict(Some(&b), conf::StatusClasses::NONE, &head, body.as_bytes(), &StandIn::new(&b));
        prop_assert_eq!(v, want);
    }

}

proptest! {
    #![proptest_config(cfg(2000))]

    #[test]
    fn match_expect_literal_is_split_invariant(
        // (not empty, without rejecting cases: `expect ""` is an error)
        literal in prop_oneof![
            (any::<u8>(), hostile_bytes(8)).prop_map(|(b, v)| [vec![b], v].concat()),
            vec(any::<u8>(), 1..4),
        ],
        tail in hostile_bytes(16),
        take: bool,
        cut in 0usize..8,
    ) {
        // The answer starts with the literal, with a damaged copy, or with
        // anything.
        let answer = match (take, cut % 3) {
            (true, _) => [literal.clone(), tail].concat(),
            (false, 0) => tail,
            (false, _) => {
                let mut l = literal.clone();
                let i = cut % l.len();
                l[i] = l[i].wrapping_add(1);
                [l, tail].concat()
            }
        };
        let escaped: String = literal.iter().map(|b| format!("\\x{b:02x}")).collect();
        let t = matcher::parse_test(&[b"expect", escaped.as_bytes()]).unwrap();
        let b = MatchBlock { name: b"m".to_vec(), tests: vec![Test::Send(b"x".to_vec()), t] };
        let rx = StandIn::new(&b);
        let mut last = ExpectProgress::NeedMore;
        for n in 0..=answer.len() {
            let p = b.expect_progress(&answer[..n], &rx, false);
            match (last, p) {
                (ExpectProgress::Failed, ExpectProgress::Failed)
                | (ExpectProgress::Matched, ExpectProgress::Matched)
                | (ExpectProgress::NeedMore, _) => {}
                (a, b) => prop_assert!(false, "{:?} then {:?} at {}", a, b, n),
            }
            // NeedMore only while a proper prefix of the literal.
            prop_assert_eq!(p == ExpectProgress::NeedMore, n < literal.len() && literal.starts_with(&answer[..n]));
            // Complete: always decided.
            let done = b.expect_progress(&answer[..n], &rx, true);
            prop_assert_eq!(done == ExpectProgress::Matched, answer[..n].starts_with(&literal));
            prop_assert!(done != ExpectProgress::NeedMore);
            last = p;
        }
    }

    #[test]
    fn match_expect_regex_waits_for_the_end(lit in "[a-z+]{1,6}", answer in "[a-z+ ]{0,20}", complete: bool) {
        let source = regex::escape(&lit);
        let t = matcher::parse_test(&[b"expect", b"~", source.as_bytes()]).unwrap();
        let b = MatchBlock { name: b"m".to_vec(), tests: vec![t] };
        let p = b.expect_progress(answer.as_bytes(), &StandIn::new(&b), complete);
        let want = if answer.contains(&lit) {
            ExpectProgress::Matched
        } else if complete {
            ExpectProgress::Failed
        } else {
            ExpectProgress::NeedMore
        };
        prop_assert_eq!(p, want);
    }
}

/// Found by `http_host_of_server_contract` while it was written: a port
/// with a leading zero (`-:01`) is the port nginx reads (`ngx_atoi`: 1),
/// not dropped.
#[test]
fn http_host_of_server_leading_zero_port() {
    assert_eq!(host_of_server(b"-:01"), (&b"-"[..], Some(1)));
    assert_eq!(host_of_server(b"[::1]:0080"), (&b"[::1]"[..], Some(80)));
}

// ---------------------------------------------------------------------------
// check_state_file and healthcheck_admin: parsers of untrusted input
// ---------------------------------------------------------------------------

use healthcheck_core::admin::parse_admin_query;
use healthcheck_core::statefile::{self, Entry as SavedEntry, Named};

/// A valid state file of `entries` (identities 0..8) for `group`.
fn state_file(group: Group, entries: &[(u64, bool, u32)]) -> Vec<u8> {
    let mut out = Vec::new();
    statefile::render(
        group,
        entries.iter().map(|&(identity, up, admin)| Named {
            entry: SavedEntry {
                identity,
                up,
                admin,
                last_change: identity * 1000,
                down_since: if up { 0 } else { identity * 1000 + 1 },
            },
            upstream: b"web",
            name: b"10.0.0.1:80",
            server: b"b.test:80",
        }),
        &mut out,
    );
    out
}

/// What a reader may keep: per identity at most what the configuration
/// has, and nothing it does not have.
fn check_restored(
    r: &mut statefile::Restored,
    wanted: &HashMap<u64, usize>,
) -> Result<(), TestCaseError> {
    prop_assert!(r.kept <= wanted.values().sum::<usize>());
    prop_assert!(r.kept <= r.lines);
    let mut taken = 0;
    for (&id, &room) in wanted {
        let mut n = 0;
        while let Some(e) = r.take(id) {
            prop_assert_eq!(e.identity, id);
            prop_assert!(!(e.up && e.down_since != 0));
            n += 1;
        }
        prop_assert!(n <= room);
        taken += n;
    }
    prop_assert_eq!(taken, r.kept);
    Ok(())
}

proptest! {
    #![proptest_config(cfg(1500))]

    /// Any bytes: refused with a reason or read within the bounds; never
    /// a panic.
    #[test]
    fn state_file_any_bytes(bytes in vec(any::<u8>(), 0..400),
                            magic: bool,
                            wanted in vec((0u64..8, 1usize..3), 0..8)) {
        let wanted: HashMap<u64, usize> = wanted.into_iter().collect();
        let mut input = Vec::new();
        if magic {
            input.extend_from_slice(statefile::MAGIC.as_bytes());
            input.push(b'\n');
        }
        input.extend_from_slice(&bytes);
        if let Ok(mut r) = statefile::parse(&input, Group::Http, &wanted) {
            check_restored(&mut r, &wanted)?;
            prop_assert!(input.ends_with(b"\n"));
        }
    }

    /// A valid file with one byte changed, cut, or a line repeated: read
    /// only if still valid, and then within the bounds.
    #[test]
    fn state_file_mutations(entries in vec((0u64..8, any::<bool>(), 0u32..2), 0..12),
                            at in any::<prop::sample::Index>(),
                            byte: u8,
                            how in 0u8..3,
                            wanted in vec((0u64..8, 1usize..3), 0..8)) {
        let wanted: HashMap<u64, usize> = wanted.into_iter().collect();
        let mut f = state_file(Group::Stream, &entries);
        let i = at.index(f.len());
        match how {
            0 => f[i] = byte,
            1 => f.truncate(i),
            _ => {
                let line_start = f[..i].iter().rposition(|&b| b == b'\n').map_or(0, |p| p + 1);
                let line_end = f[i..].iter().position(|&b| b == b'\n').map_or(f.len(), |p| i + p + 1);
                let line = f[line_start..line_end].to_vec();
                f.splice(line_end..line_end, line);
            }
        }
        match statefile::parse(&f, Group::Stream, &wanted) {
            Ok(mut r) => check_restored(&mut r, &wanted)?,
            Err(e) => prop_assert!(!e.to_string().is_empty()),
        }
        // Another context's file is never taken.
        let whole = state_file(Group::Stream, &entries);
        let other = statefile::parse(&whole, Group::Http, &wanted);
        prop_assert_eq!(other.is_err(), !entries.is_empty());
    }

    /// The admin query: parsed or refused with one printable line, for
    /// any bytes around the known keys.
    #[test]
    fn admin_query_any_bytes(parts in vec(prop_oneof![
                                 Just(b"upstream=".to_vec()), Just(b"peer=".to_vec()),
                                 Just(b"server=".to_vec()), Just(b"action=".to_vec()),
                                 Just(b"group=".to_vec()), Just(b"&".to_vec()),
                                 Just(b"disable".to_vec()), Just(b"http".to_vec()),
                                 vec(any::<u8>(), 0..6)], 0..16)) {
        let q: Vec<u8> = parts.concat();
        match parse_admin_query(&q) {
            Ok(r) => {
                prop_assert!(!r.upstream.is_empty());
            }
            Err(e) => prop_assert!(
                !e.is_empty() && e.bytes().all(|b| (0x20..0x7f).contains(&b)),
                "{:?}", e
            ),
        }
    }
}

/// A hostile file of a million peer lines is read within the bounds the
/// caller sets (it is larger than `max_file_bytes` for a small
/// configuration) and, if handed over anyway, keeps only what is wanted.
#[test]
fn state_file_million_lines() {
    let line = "peer http 0000000000000001 1 0 0 0 web 10.0.0.1:80 10.0.0.1:80\n";
    let mut f = format!("{}\n", statefile::MAGIC).into_bytes();
    for _ in 0..1_000_000 {
        f.extend_from_slice(line.as_bytes());
    }
    f.extend_from_slice(b"end 1000000\n");
    assert!(f.len() > statefile::max_file_bytes(100));
    let wanted = HashMap::from([(1u64, 2usize)]);
    let mut r = statefile::parse(&f, Group::Http, &wanted).unwrap();
    assert_eq!((r.lines, r.kept), (1_000_000, 2));
    assert!(r.take(1).is_some() && r.take(1).is_some() && r.take(1).is_none());
}

// HTTP/2 client and gRPC health codec. fuzz.rs is a crate root, so a
// plain `mod h2;` would look for tests/h2.rs, which cargo would also build
// as a test of its own.
#[path = "fuzz/h2.rs"]
mod h2;

use healthcheck_core::outlier::{
    classify, evaluate, Attempt, Counters, Interval, Outcome, OutlierConf, Rule,
};

/// One `check_outlier` argument: a known parameter with a value that may
/// or may not be valid, or junk.
fn outlier_arg() -> impl Strategy<Value = Vec<u8>> {
    let names = [
        "consecutive_5xx",
        "consecutive_errors",
        "failure_percentage",
        "success_rate",
        "stdev_factor",
        "latency",
        "min_requests",
        "interval",
        "ejection",
        "max_ejection",
        "max_ejected",
        "bogus",
        "",
    ];
    let values = prop_oneof![
        (0u64..2_000_000).prop_map(|n| n.to_string()),
        (0u64..200).prop_map(|n| format!("{n}%")),
        (0u64..100_000, 0u8..9).prop_map(|(v, f)| render_ms(v, f).0),
        "[0-9]{0,2}\\.[0-9]{0,4}",
        Just("on".to_string()),
        Just("off".to_string()),
        ".{0,8}",
    ];
    prop_oneof![
        (0..names.len(), values).prop_map(move |(i, v)| format!("{}={v}", names[i]).into_bytes()),
        vec(any::<u8>(), 0..12),
    ]
}

proptest! {
    #![proptest_config(cfg(400))]

    /// Any arguments: a settings value within its documented bounds, or an
    /// error naming the directive; never a panic.
    #[test]
    fn outlier_arguments_parse_or_name_the_directive(args in vec(outlier_arg(), 0..13)) {
        let refs: Vec<&[u8]> = args.iter().map(Vec::as_slice).collect();
        match conf::parse_outlier(&refs) {
            Ok(c) => {
                prop_assert!(c.max_ejection_ms >= c.ejection_ms);
                prop_assert!((1..=100).contains(&c.max_ejected_pct));
                prop_assert!((100..=10_000).contains(&c.stdev_factor_milli));
                prop_assert!(c.interval_ms >= 1 && c.min_requests >= 1);
                prop_assert!(
                    c.consecutive_5xx > 0 || c.consecutive_errors > 0
                        || c.failure_percentage.is_some() || c.success_rate,
                    "some rule is on: {:?}", c
                );
            }
            Err(e) => prop_assert!(e.0.contains("\"check_outlier\""), "{}", e.0),
        }
    }

    /// Whatever the attempts, the counters add up: every attempt is a
    /// request, failures are the non-successes, and a consecutive rule
    /// trips only at the attempt that reaches its count.
    #[test]
    fn outlier_counters_add_up(
        attempts in vec((prop_oneof![Just(0u16), Just(200), Just(404), Just(500), Just(503)], any::<bool>(), 0u64..2000), 0..300),
        c5 in 0u32..6, ce in 0u32..6, latency in 0u64..1000,
    ) {
        let c = OutlierConf {
            consecutive_5xx: c5,
            consecutive_errors: ce,
            latency_ms: latency,
            ..OutlierConf::default()
        };
        let k = Counters::default();
        let (mut fails, mut run5, mut rune) = (0u32, 0u32, 0u32);
        for &(status, failed, t) in &attempts {
            let o = classify(&c, Attempt { status, failed, time_ms: Some(t) });
            let tripped = k.record(&c, o, t);
            match o {
                Outcome::Ok => { run5 = 0; rune = 0; }
                Outcome::Http5xx => { fails += 1; run5 += 1; }
                Outcome::Error | Outcome::Slow => { fails += 1; rune += 1; }
            }
            let want = match o {
                Outcome::Http5xx if c5 > 0 && run5 == c5 => Some(Rule::Consecutive5xx(c5)),
                Outcome::Error | Outcome::Slow if ce > 0 && rune == ce => Some(Rule::ConsecutiveErrors(ce)),
                _ => None,
            };
            prop_assert_eq!(tripped, want);
        }
        let i = k.roll(0);
        prop_assert_eq!(i.requests as usize, attempts.len());
        prop_assert_eq!(i.failures, fails);
        let v = k.view();
        prop_assert_eq!(v.requests_total as usize, attempts.len());
        prop_assert_eq!(v.failures_total, u64::from(fails));
    }

    /// The interval rules over any counts: each peer named at most once,
    /// never an ejected one or one below min_requests, with a detail that
    /// reads as documented.
    #[test]
    fn outlier_rules_judge_only_qualified_peers(
        raw in vec((0u32..400, 0u32..400, 0u32..400, any::<bool>()), 0..30),
        pct in prop::option::of(1u8..=100), rate in any::<bool>(),
        min in 1u32..50, factor in 100u32..=10_000, latency in 0u64..2,
    ) {
        let c = OutlierConf {
            failure_percentage: pct,
            success_rate: rate,
            min_requests: min,
            stdev_factor_milli: factor,
            latency_ms: latency * 300,
            ..OutlierConf::default()
        };
        let peers: Vec<Interval> = raw
            .iter()
            .map(|&(r, f, s, e)| Interval { requests: r, failures: f.min(r), slow: s.min(f.min(r)), ejected: e })
            .collect();
        let out = evaluate(&c, &peers);
        let mut seen = HashSet::new();
        for (i, rule) in out {
            prop_assert!(seen.insert(i));
            prop_assert!(!peers[i].ejected && peers[i].requests >= min);
            let d = rule.detail();
            prop_assert!(
                d.starts_with("failure rate ") || d.starts_with("success rate ") || d.starts_with("latency: "),
                "{}", d
            );
        }
    }
}
