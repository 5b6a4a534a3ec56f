//! The single-purpose directives: `check_shm_size`,
//! `check_keepalive_requests`, `healthcheck_status` and `vnswrr`.

use super::http::invalid_value;
use super::time::{parse_decimal, parse_size, NumError};
use super::{
    printable, ConfError, ConnLimit, FailOpen, KEEPALIVE_REQUESTS_MAX, MAX_INFLIGHT_MAX,
    SHM_SIZE_MAX,
};
use crate::status::Format;

/// `check_shm_size size;`: nginx size syntax (bytes, `k`, `m`, `g`),
/// greater than 0 and at most [`SHM_SIZE_MAX`].
pub fn parse_shm_size(arg: &[u8]) -> Result<u64, ConfError> {
    const D: &str = "check_shm_size";
    match parse_size(arg) {
        Ok(0) => Err(invalid_value(D, arg, "size must be greater than 0")),
        Ok(n) if n <= SHM_SIZE_MAX => Ok(n),
        Ok(_) | Err(NumError::Overflow) => Err(invalid_value(D, arg, "size must be at most 4g")),
        Err(NumError::Malformed) => Err(invalid_value(
            D,
            arg,
            "size must be a number of bytes, optionally with a unit k, m or g (512k, 10m)",
        )),
    }
}

/// `check_keepalive_requests n;`: a decimal integer in
/// 1..=[`KEEPALIVE_REQUESTS_MAX`].
pub fn parse_keepalive_requests(arg: &[u8]) -> Result<u32, ConfError> {
    parse_decimal(arg)
        .ok()
        .and_then(|n| u32::try_from(n).ok())
        .filter(|n| (1..=KEEPALIVE_REQUESTS_MAX).contains(n))
        .ok_or_else(|| {
            invalid_value(
                "check_keepalive_requests",
                arg,
                &format!("must be a decimal integer from 1 to {KEEPALIVE_REQUESTS_MAX}"),
            )
        })
}

/// `check_keepalive_time TIME;`: nginx time syntax, from 1ms to 7 days;
/// in ms.
pub fn parse_keepalive_time(arg: &[u8]) -> Result<u64, ConfError> {
    super::time::parse_period_ms(arg).ok_or_else(|| {
        invalid_value(
            "check_keepalive_time",
            arg,
            "must be a time from 1ms to 7d (30s, 10m, 1h)",
        )
    })
}

/// `check_max_inflight N;`: a decimal integer in 0..=[`MAX_INFLIGHT_MAX`]
/// (0: no limit).
pub fn parse_max_inflight(arg: &[u8]) -> Result<u32, ConfError> {
    parse_decimal(arg)
        .ok()
        .and_then(|n| u32::try_from(n).ok())
        .filter(|n| *n <= MAX_INFLIGHT_MAX)
        .ok_or_else(|| {
            invalid_value(
                "check_max_inflight",
                arg,
                &format!("must be a decimal integer from 0 (no limit) to {MAX_INFLIGHT_MAX}"),
            )
        })
}

/// `check_state_file PATH;`: a file path, joined to nginx's `prefix`
/// when relative. Refused: an empty path, a NUL byte, a path ending in
/// `/` (a directory).
pub fn parse_state_file(arg: &[u8], prefix: &[u8]) -> Result<Vec<u8>, ConfError> {
    const D: &str = "check_state_file";
    if arg.is_empty() {
        return Err(invalid_value(D, arg, "the path is empty"));
    }
    if arg.contains(&0) {
        return Err(invalid_value(D, arg, "the path contains a NUL byte"));
    }
    if arg.ends_with(b"/") {
        return Err(invalid_value(
            D,
            arg,
            "the path names a directory, not a file",
        ));
    }
    if arg.starts_with(b"/") {
        return Ok(arg.to_vec());
    }
    let mut path = prefix.to_vec();
    if !path.is_empty() && !path.ends_with(b"/") {
        path.push(b'/');
    }
    path.extend_from_slice(arg);
    Ok(path)
}

/// `healthcheck_status [format];`: zero arguments mean HTML; a format is
/// named exactly (case-sensitive), as in `?format=`.
pub fn parse_status_directive(args: &[&[u8]]) -> Result<StatusConf, ConfError> {
    let mut conf = StatusConf::default();
    let (mut format, mut histogram) = (false, false);
    for &arg in args {
        if let Some(value) = arg.strip_prefix(b"histogram=") {
            let invalid = |reason: &str| {
                ConfError(format!(
                    "invalid parameter \"{}\" in \"healthcheck_status\" directive: {reason}",
                    printable(arg)
                ))
            };
            if histogram {
                return Err(invalid("histogram is given twice"));
            }
            histogram = true;
            conf.histogram = match value {
                b"on" => true,
                b"off" => false,
                _ => return Err(invalid("histogram must be on or off")),
            };
        } else if !format && !histogram {
            format = true;
            conf.format = Format::from_name(arg).ok_or_else(|| {
                invalid_value(
                    "healthcheck_status",
                    arg,
                    "format must be html, csv, json or prometheus",
                )
            })?;
        } else {
            return Err(ConfError(
                "invalid number of arguments in \"healthcheck_status\" directive".into(),
            ));
        }
    }
    Ok(conf)
}

/// `healthcheck_status [FORMAT] [histogram=on|off]`, or `check_status
/// [FORMAT]`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct StatusConf {
    /// The page's format when the request names none (default html).
    pub format: Format,
    /// Prometheus: the full page (rise, fall, the duration histogram)
    /// unless the request says `?histogram=off`.
    pub histogram: bool,
    /// `check_status` (and its other names): the C modules' shapes of
    /// html, csv and json.
    pub c_shapes: bool,
}

/// `check_status [html|csv|json|prometheus];` (and `l4check_status`,
/// `stream_check_status`, `tcp_check_status`, the same directive under the
/// names of the stream forks): yaoweibin's and Tengine's status page, 0 or
/// 1 argument, the format named exactly.
pub fn parse_check_status(directive: &str, args: &[&[u8]]) -> Result<StatusConf, ConfError> {
    let format = match args {
        [] => Format::Html,
        [arg] => Format::from_name(arg).ok_or_else(|| {
            invalid_value(
                directive,
                arg,
                "format must be html, csv, json or prometheus",
            )
        })?,
        _ => {
            return Err(ConfError(format!(
                "invalid number of arguments in \"{directive}\" directive"
            )))
        }
    };
    Ok(StatusConf {
        format,
        histogram: false,
        c_shapes: true,
    })
}

/// What `nginx -t` says of a directive of yaoweibin's, Tengine's or the
/// stream forks' modules that has no directive of the same name here:
/// what to write instead (docs/migrating.md lists them all).
pub fn refused_directive(name: &[u8]) -> String {
    let n = printable(name);
    let instead = match name {
        b"check_send" | b"check_expect_response" | b"check_backend_expect_alive" => {
            "write check_match NAME { send \"...\"; expect \"...\"; } in the http or stream \
             block and \"check ... match=NAME\" in the upstream"
        }
        b"check_smtp_send" | b"check_smtp_expect_alive" => {
            "write check_match NAME { send \"HELO ...\\r\\n\"; expect ~ \"^2\"; } and \
             \"check type=tcp match=NAME\""
        }
        b"check_fastcgi_params" => "the directive is check_fastcgi_param NAME VALUE;",
        b"stream_check_status" | b"l4check_status" | b"tcp_check_status" | b"check_status" => {
            "the status page is served from an http location: write check_status (or \
             healthcheck_status) in an http server or location; it lists stream peers too"
        }
        _ => "it has no equivalent here",
    };
    format!("\"{n}\" is a directive of the C health-check modules: {instead} (docs/migrating.md)")
}

/// `check_fastcgi_param NAME VALUE;`: a FastCGI parameter the check sends
/// (the name not empty; neither holds a NUL byte).
pub fn parse_fastcgi_param(args: &[&[u8]]) -> Result<(Vec<u8>, Vec<u8>), ConfError> {
    const D: &str = "check_fastcgi_param";
    let [name, value] = *args else {
        return Err(ConfError(format!(
            "invalid number of arguments in \"{D}\" directive: write {D} NAME VALUE"
        )));
    };
    if name.is_empty() {
        return Err(invalid_value(D, name, "the name is empty"));
    }
    for v in [name, value] {
        if v.contains(&0) {
            return Err(invalid_value(D, v, "a NUL byte"));
        }
    }
    Ok((name.to_vec(), value.to_vec()))
}

/// Parameters of the `vnswrr` directive.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct VnswrrConf {
    /// Ring nodes built per batch; 0 = the group's peer count.
    pub max_init: u32,
}

/// `vnswrr [max_init=n];`: `n` is a decimal integer >= 0 (0 = default).
pub fn parse_vnswrr(args: &[&[u8]]) -> Result<VnswrrConf, ConfError> {
    let invalid = |arg: &[u8], reason: &str| {
        ConfError(format!(
            "invalid parameter \"{}\" in \"vnswrr\" directive: {reason}",
            printable(arg)
        ))
    };

    let mut max_init = None;
    for &arg in args {
        let Some(value) = arg.strip_prefix(b"max_init=") else {
            return Err(invalid(arg, "the only parameter is max_init=n"));
        };
        if max_init.is_some() {
            return Err(invalid(arg, "max_init is given twice"));
        }
        let n = match parse_decimal(value) {
            Ok(n) => u32::try_from(n).map_err(|_| NumError::Overflow),
            Err(e) => Err(e),
        };
        max_init = Some(n.map_err(|e| match e {
            NumError::Malformed => invalid(arg, "max_init must be a decimal integer"),
            NumError::Overflow => invalid(arg, "max_init must be at most 4294967295"),
        })?);
    }
    Ok(VnswrrConf {
        max_init: max_init.unwrap_or(0),
    })
}

/// `check_fail_open off|on|N%;`: `on` fails open when no checked peer is
/// up, `N%` (0 to 99) when the check-up share by weight is at or below N
/// percent. 100% would never veto a peer, and is refused.
/// `check_shutdown_sessions on|off;`.
pub fn parse_shutdown_sessions(arg: &[u8]) -> Result<bool, ConfError> {
    match arg {
        b"on" => Ok(true),
        b"off" => Ok(false),
        _ => Err(invalid_value(
            "check_shutdown_sessions",
            arg,
            "must be on or off",
        )),
    }
}

pub fn parse_fail_open(args: &[&[u8]]) -> Result<FailOpen, ConfError> {
    const D: &str = "check_fail_open";
    let [arg] = args else {
        return Err(ConfError(format!(
            "invalid number of arguments in \"{D}\" directive"
        )));
    };
    const EXPECTED: &str = "must be off, on or a percentage from 0% to 99%";
    match *arg {
        b"off" => Ok(FailOpen::Off),
        b"on" => Ok(FailOpen::AtOrBelow(0)),
        _ => {
            let Some(digits) = arg.strip_suffix(b"%") else {
                return Err(invalid_value(D, arg, EXPECTED));
            };
            match parse_decimal(digits) {
                Ok(n) if n < 100 => Ok(FailOpen::AtOrBelow(n as u8)),
                Ok(_) | Err(NumError::Overflow) => Err(invalid_value(
                    D,
                    arg,
                    "at 100% the check would never keep a peer out: use at most 99%",
                )),
                Err(NumError::Malformed) => Err(invalid_value(D, arg, EXPECTED)),
            }
        }
    }
}

/// `check_max_connections N|P%;`: a count from 1 to 1,000,000 or a share
/// of `worker_connections` from 1% to 100%.
pub fn parse_max_connections(arg: &[u8]) -> Result<ConnLimit, ConfError> {
    const D: &str = "check_max_connections";
    const EXPECTED: &str =
        "must be a number of connections from 1 to 1000000 or a share of worker_connections \
         from 1% to 100%";
    let (digits, share) = match arg.strip_suffix(b"%") {
        Some(d) => (d, true),
        None => (arg, false),
    };
    match (parse_decimal(digits), share) {
        (Ok(n), true) if (1..=100).contains(&n) => Ok(ConnLimit::Share(n as u8)),
        (Ok(n), false) if (1..=1_000_000).contains(&n) => Ok(ConnLimit::Count(n as u32)),
        _ => Err(invalid_value(D, arg, EXPECTED)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn max_connections_values() {
        assert_eq!(parse_max_connections(b"50%"), Ok(ConnLimit::Share(50)));
        assert_eq!(parse_max_connections(b"100%"), Ok(ConnLimit::Share(100)));
        assert_eq!(parse_max_connections(b"1"), Ok(ConnLimit::Count(1)));
        assert_eq!(
            parse_max_connections(b"1000000"),
            Ok(ConnLimit::Count(1_000_000))
        );
        assert_eq!(ConnLimit::default().of(512), 256);
        assert_eq!(ConnLimit::Count(100).of(512), 100);
        for bad in [
            &b"0"[..],
            b"0%",
            b"101%",
            b"1000001",
            b"%",
            b"-5",
            b"",
            b"half",
        ] {
            assert_eq!(
                err(parse_max_connections(bad)),
                format!(
                    "invalid value \"{}\" in \"check_max_connections\" directive: must be a \
                     number of connections from 1 to 1000000 or a share of worker_connections \
                     from 1% to 100%",
                    String::from_utf8_lossy(bad)
                )
            );
        }
    }
    use proptest::prelude::*;

    #[test]
    fn keepalive_time_values() {
        assert_eq!(parse_keepalive_time(b"10m"), Ok(600_000));
        assert_eq!(parse_keepalive_time(b"30s"), Ok(30_000));
        for bad in [&b"0"[..], b"8d", b"x", b""] {
            assert_eq!(
                err(parse_keepalive_time(bad)),
                format!(
                    "invalid value \"{}\" in \"check_keepalive_time\" directive: must be a \
                     time from 1ms to 7d (30s, 10m, 1h)",
                    String::from_utf8_lossy(bad)
                )
            );
        }
    }

    #[test]
    fn max_inflight_values() {
        assert_eq!(parse_max_inflight(b"0"), Ok(0));
        assert_eq!(parse_max_inflight(b"1"), Ok(1));
        assert_eq!(parse_max_inflight(b"65535"), Ok(65535));
        for bad in [
            &b"65536"[..],
            b"-1",
            b"",
            b"8k",
            b"1.5",
            b"99999999999999999999",
        ] {
            assert_eq!(
                err(parse_max_inflight(bad)),
                format!(
                    "invalid value \"{}\" in \"check_max_inflight\" directive: must be a \
                     decimal integer from 0 (no limit) to 65535",
                    String::from_utf8_lossy(bad)
                )
            );
        }
    }

    #[test]
    fn fail_open_values() {
        assert_eq!(parse_fail_open(&[b"off"]), Ok(FailOpen::Off));
        assert_eq!(parse_fail_open(&[b"on"]), Ok(FailOpen::AtOrBelow(0)));
        assert_eq!(parse_fail_open(&[b"0%"]), Ok(FailOpen::AtOrBelow(0)));
        assert_eq!(parse_fail_open(&[b"25%"]), Ok(FailOpen::AtOrBelow(25)));
        assert_eq!(parse_fail_open(&[b"99%"]), Ok(FailOpen::AtOrBelow(99)));
        for bad in [&b"25"[..], b"%", b"-1%", b"1.5%", b"On", b""] {
            assert_eq!(
                err(parse_fail_open(&[bad])),
                format!(
                    "invalid value \"{}\" in \"check_fail_open\" directive: must be off, on or \
                     a percentage from 0% to 99%",
                    String::from_utf8_lossy(bad)
                )
            );
        }
        for big in [&b"100%"[..], b"250%", b"99999999999999999999999%"] {
            assert!(err(parse_fail_open(&[big]))
                .ends_with("at 100% the check would never keep a peer out: use at most 99%"));
        }
        assert_eq!(
            err(parse_fail_open(&[b"on", b"off"])),
            "invalid number of arguments in \"check_fail_open\" directive"
        );
    }

    #[test]
    fn fail_open_rule() {
        let on = FailOpen::AtOrBelow(0);
        assert!(!FailOpen::Off.applies(0, 10));
        assert!(on.applies(0, 10), "on: none up");
        assert!(!on.applies(1, 10));
        assert!(!on.applies(0, 0), "no checked peers: never");
        let q = FailOpen::AtOrBelow(25);
        assert!(q.applies(25, 100), "at the threshold");
        assert!(!q.applies(26, 100));
        assert!(q.applies(1, 4) && !q.applies(2, 4));
        assert!(q.applies(u64::MAX / 4, u64::MAX), "no overflow");
    }

    proptest! {
        #[test]
        fn fail_open_is_monotonic(pct in 0u8..100, total in 1u64..10_000, up in 0u64..10_000) {
            let up = up.min(total);
            let f = FailOpen::AtOrBelow(pct);
            // Fewer peers up never leaves fail-open; more never enters it.
            if f.applies(up, total) && up > 0 {
                prop_assert!(f.applies(up - 1, total));
            }
            if !f.applies(up, total) && up < total {
                prop_assert!(!f.applies(up + 1, total));
            }
            prop_assert_eq!(f.applies(up, total), up * 100 <= u64::from(pct) * total);
        }
    }

    fn err<T: std::fmt::Debug>(r: Result<T, ConfError>) -> String {
        r.unwrap_err().to_string()
    }

    #[test]
    fn shm_size_accepts_nginx_sizes() {
        assert_eq!(parse_shm_size(b"1"), Ok(1));
        assert_eq!(parse_shm_size(b"32k"), Ok(32 << 10));
        assert_eq!(parse_shm_size(b"1M"), Ok(1 << 20));
        assert_eq!(parse_shm_size(b"4g"), Ok(SHM_SIZE_MAX));
        assert_eq!(parse_shm_size(b"4294967296"), Ok(SHM_SIZE_MAX));
    }

    #[test]
    fn shm_size_errors() {
        assert_eq!(
            err(parse_shm_size(b"0")),
            "invalid value \"0\" in \"check_shm_size\" directive: size must be greater than 0"
        );
        assert_eq!(
            err(parse_shm_size(b"0k")),
            err(parse_shm_size(b"0")).replace("\"0\"", "\"0k\"")
        );
        assert_eq!(
            err(parse_shm_size(b"abc")),
            "invalid value \"abc\" in \"check_shm_size\" directive: \
             size must be a number of bytes, optionally with a unit k, m or g (512k, 10m)"
        );
        assert_eq!(
            err(parse_shm_size(b"4294967297")),
            "invalid value \"4294967297\" in \"check_shm_size\" directive: size must be at most 4g"
        );
        assert!(err(parse_shm_size(b"5g")).ends_with("size must be at most 4g"));
        assert!(err(parse_shm_size(b"99999999999999999999")).ends_with("size must be at most 4g"));
        assert!(err(parse_shm_size(b"")).contains("size must be a number of bytes"));
        assert!(err(parse_shm_size(b"-1")).contains("size must be a number of bytes"));
        assert!(err(parse_shm_size(b"\xff")).starts_with("invalid value \"\\xff\""));
    }

    #[test]
    fn state_file_paths() {
        assert_eq!(
            parse_state_file(b"/var/lib/x", b"/p/").unwrap(),
            b"/var/lib/x"
        );
        assert_eq!(
            parse_state_file(b"logs/hc.state", b"/p/").unwrap(),
            b"/p/logs/hc.state"
        );
        assert_eq!(parse_state_file(b"hc", b"/p").unwrap(), b"/p/hc");
        assert_eq!(
            err(parse_state_file(b"", b"/p/")),
            "invalid value \"\" in \"check_state_file\" directive: the path is empty"
        );
        assert_eq!(
            err(parse_state_file(b"/var/lib/", b"/p/")),
            "invalid value \"/var/lib/\" in \"check_state_file\" directive: the path names a \
             directory, not a file"
        );
        assert!(err(parse_state_file(b"a\0b", b"/p/")).contains("NUL byte"));
    }

    #[test]
    fn keepalive_requests() {
        assert_eq!(parse_keepalive_requests(b"1"), Ok(1));
        assert_eq!(parse_keepalive_requests(b"10"), Ok(10));
        assert_eq!(
            parse_keepalive_requests(b"1000000"),
            Ok(KEEPALIVE_REQUESTS_MAX)
        );
        assert_eq!(
            err(parse_keepalive_requests(b"0")),
            "invalid value \"0\" in \"check_keepalive_requests\" directive: \
             must be a decimal integer from 1 to 1000000"
        );
        for bad in [
            &b"1000001"[..],
            b"",
            b"-1",
            b"abc",
            b"1k",
            b"99999999999999999999",
        ] {
            assert!(
                err(parse_keepalive_requests(bad)).ends_with("from 1 to 1000000"),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn status_directive_names_formats_exactly() {
        for f in Format::ALL {
            assert_eq!(
                parse_status_directive(&[f.as_str().as_bytes()]).map(|c| c.format),
                Ok(f)
            );
        }
        for bad in [&b"JSON"[..], b"Html", b"", b"json "] {
            assert!(parse_status_directive(&[bad]).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn status_directive() {
        let f = |format| StatusConf {
            format,
            histogram: false,
            c_shapes: false,
        };
        assert_eq!(parse_status_directive(&[]), Ok(f(Format::Html)));
        assert_eq!(parse_status_directive(&[b"csv"]), Ok(f(Format::Csv)));
        assert_eq!(parse_status_directive(&[b"json"]), Ok(f(Format::Json)));
        assert_eq!(
            parse_status_directive(&[b"prometheus"]),
            Ok(f(Format::Prometheus))
        );
        assert_eq!(
            parse_status_directive(&[b"prometheus", b"histogram=on"]),
            Ok(StatusConf {
                format: Format::Prometheus,
                histogram: true,
                c_shapes: false,
            })
        );
        assert_eq!(
            parse_status_directive(&[b"histogram=on"]),
            Ok(StatusConf {
                format: Format::Html,
                histogram: true,
                c_shapes: false,
            })
        );
        assert_eq!(
            parse_status_directive(&[b"json", b"histogram=off"]),
            Ok(f(Format::Json))
        );
        assert_eq!(
            err(parse_status_directive(&[b"prometheus", b"histogram=yes"])),
            "invalid parameter \"histogram=yes\" in \"healthcheck_status\" directive: histogram must be on or off"
        );
        assert_eq!(
            err(parse_status_directive(&[b"histogram=on", b"histogram=on"])),
            "invalid parameter \"histogram=on\" in \"healthcheck_status\" directive: histogram is given twice"
        );
        assert_eq!(
            err(parse_status_directive(&[b"histogram=on", b"json"])),
            "invalid number of arguments in \"healthcheck_status\" directive"
        );
        assert_eq!(
            err(parse_status_directive(&[b"json", b"csv"])),
            "invalid number of arguments in \"healthcheck_status\" directive"
        );
        assert_eq!(
            err(parse_status_directive(&[b"xml"])),
            "invalid value \"xml\" in \"healthcheck_status\" directive: \
             format must be html, csv, json or prometheus"
        );
        assert_eq!(
            err(parse_status_directive(&[b"html", b"json"])),
            "invalid number of arguments in \"healthcheck_status\" directive"
        );
    }

    #[test]
    fn vnswrr() {
        assert_eq!(parse_vnswrr(&[]), Ok(VnswrrConf::default()));
        assert_eq!(
            parse_vnswrr(&[b"max_init=0"]),
            Ok(VnswrrConf { max_init: 0 })
        );
        assert_eq!(
            parse_vnswrr(&[b"max_init=16"]),
            Ok(VnswrrConf { max_init: 16 })
        );
        assert_eq!(
            parse_vnswrr(&[b"max_init=4294967295"]),
            Ok(VnswrrConf { max_init: u32::MAX })
        );
        assert_eq!(
            err(parse_vnswrr(&[b"max_init=abc"])),
            "invalid parameter \"max_init=abc\" in \"vnswrr\" directive: \
             max_init must be a decimal integer"
        );
        assert_eq!(
            err(parse_vnswrr(&[b"5"])),
            "invalid parameter \"5\" in \"vnswrr\" directive: the only parameter is max_init=n"
        );
        assert_eq!(
            err(parse_vnswrr(&[b"max_init=4294967296"])),
            "invalid parameter \"max_init=4294967296\" in \"vnswrr\" directive: \
             max_init must be at most 4294967295"
        );
        assert_eq!(
            err(parse_vnswrr(&[b"max_init=1", b"max_init=2"])),
            "invalid parameter \"max_init=2\" in \"vnswrr\" directive: max_init is given twice"
        );
        for bad in [
            &b"max_init="[..],
            b"max_init=-1",
            b"max_init=+1",
            b"max_init=0x10",
        ] {
            assert!(err(parse_vnswrr(&[bad])).ends_with("max_init must be a decimal integer"));
        }
        for bad in [&b"max_init"[..], b"MAX_INIT=1", b"max_init =1", b""] {
            assert!(err(parse_vnswrr(&[bad])).ends_with("the only parameter is max_init=n"));
        }
    }

    proptest! {
        #[test]
        fn never_panic(args in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..16), 0..4)) {
            let args: Vec<&[u8]> = args.iter().map(Vec::as_slice).collect();
            let _ = parse_vnswrr(&args);
            let _ = parse_status_directive(&args);
            if let Some(first) = args.first() {
                if let Ok(n) = parse_shm_size(first) {
                    prop_assert!(n > 0 && n <= SHM_SIZE_MAX);
                }
                if let Ok(n) = parse_keepalive_requests(first) {
                    prop_assert!((1..=KEEPALIVE_REQUESTS_MAX).contains(&n));
                }
            }
        }

        #[test]
        fn shm_size_units(n in 1u64..4096) {
            prop_assert_eq!(parse_shm_size(format!("{n}k").as_bytes()), Ok(n << 10));
            prop_assert_eq!(parse_shm_size(format!("{n}m").as_bytes()), Ok(n << 20));
        }
    }
}
