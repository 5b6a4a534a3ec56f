//! The `check` directive (docs/directives.md, check).
//!
//! Parsing runs in two passes. The first turns each `name=value` argument
//! into a typed value, rejecting unknown names, repeats and malformed or
//! out-of-range values; it remembers the argument each value came from.
//! The second fills in defaults and applies the cross-parameter rules in a
//! fixed order, so the order of the arguments never changes the result.
//! Every error quotes the argument whose value is wrong, as written.
//!
//! Two choices of ours:
//! - `interval`, `timeout`, `down_interval` and `jitter` accept a bare
//!   integer (milliseconds) or an nginx time that ends in a unit. `1m30`
//!   (nginx would read the trailing 30 as seconds) is rejected, because
//!   next to bare milliseconds it is ambiguous.
//! - `reuse` and the keepalive rehandshake field accept everything nginx's
//!   seconds syntax does (`w`, `M`, `y` too), bounded by [`PERIOD_MAX_MS`].

use super::time::{parse_decimal, parse_time_checked, NumError};
use super::{
    default_period_ms, printable, CheckConf, CheckType, ConfError, KernelKeepalive, Reuse,
    INTERVAL_MAX_MS, INTERVAL_MIN_MS, KEEPALIVE_CNT_MAX, KEEPALIVE_IDLE_MAX_S, PERIOD_MAX_MS,
    RISE_FALL_MAX, TIMEOUT_MAX_MS,
};

#[cfg(test)]
mod tests;

const DEFAULT_INTERVAL_MS: u64 = 5_000;
const DEFAULT_FALL: u32 = 3;
const DEFAULT_RISE: u32 = 2;
/// An omitted timeout is `min(DEFAULT_TIMEOUT_CAP_MS, interval - interval / 10)`.
const DEFAULT_TIMEOUT_CAP_MS: u64 = 5_000;
const DEFAULT_KEEPALIVE_INTVL_S: u32 = 1;
const DEFAULT_KEEPALIVE_CNT: u32 = 3;

/// Every parameter name `check` knows.
const PARAMETERS: [&str; 15] = [
    "interval",
    "fall",
    "rise",
    "timeout",
    "down_interval",
    "jitter",
    "default_down",
    "type",
    "port",
    "reuse",
    "keepalive",
    "match",
    "passive_fall",
    "shared",
    "slow_start",
];

/// The longest `slow_start`: a ramp is timed in wrapping 32-bit
/// milliseconds in the zone (`zone::Slot::up_since`).
pub const SLOW_START_MAX_MS: u64 = 86_400_000;

/// How to write a time in nginx's seconds syntax, for error messages.
const SECONDS_SYNTAX: &str = "a time in seconds (30, 30s, 5m; ms is not accepted)";

/// `invalid parameter "<arg>": <reason>`
fn invalid(arg: &[u8], reason: impl std::fmt::Display) -> ConfError {
    ConfError(format!(
        "invalid parameter \"{}\": {reason}",
        printable(arg)
    ))
}

/// Parses the arguments of the `check` directive (after the directive
/// name) into a validated [`CheckConf`] with every default filled in.
pub fn parse_check(args: &[&[u8]]) -> Result<CheckConf, ConfError> {
    parse_check_warned(args).map(|c| c.conf)
}

/// A parsed `check` and what it accepts but warns about.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Checked {
    pub conf: CheckConf,
    /// `[warn]` messages (a `timeout` not below its interval).
    pub warnings: Vec<ConfError>,
    /// Which of the parameters whose default differs from the C modules'
    /// the line writes out.
    pub written: Written,
}

/// Parameters a `check` line names, where leaving one out means something
/// a configuration written for the C modules may not expect.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Written {
    /// `default_down=` (their default is `true`, here `false`).
    pub default_down: bool,
    /// `reuse=` or `keepalive=` (even `off`): the line says whether the
    /// connection is kept, so `check_keepalive_requests` does not.
    pub connection: bool,
    /// `type=` (the C modules' default is tcp too, but a `check_http_send`
    /// beside a line without it was most likely meant for `type=http`).
    pub check_type: bool,
}

/// [`parse_check`], with the warnings of values it accepts.
pub fn parse_check_warned(args: &[&[u8]]) -> Result<Checked, ConfError> {
    parse_check_with(args, None)
}

/// [`parse_check_warned`] with `check_keepalive_time` in force: the
/// rehandshake period of `reuse=on` and of keepalive's default field
/// (instead of `max(30s, 2 * interval)`).
pub fn parse_check_with(
    args: &[&[u8]],
    keepalive_time_ms: Option<u64>,
) -> Result<Checked, ConfError> {
    if args.is_empty() {
        return Err(ConfError(
            "invalid number of arguments in \"check\" directive".into(),
        ));
    }
    let mut params = Params::default();
    for &arg in args {
        params.add(arg)?;
    }
    let written = Written {
        default_down: params.default_down.is_some(),
        connection: params.reuse.is_some() || params.keepalive.is_some(),
        check_type: params.check_type.is_some(),
    };
    let mut warnings = Vec::new();
    let conf = params.resolve(&mut warnings, keepalive_time_ms)?;
    Ok(Checked {
        conf,
        warnings,
        written,
    })
}

/// The names `type=` takes, for suggestions.
const TYPES: [&str; 11] = [
    "tcp",
    "udp",
    "http",
    "https",
    "tls",
    "ssl_hello",
    "mysql",
    "ajp",
    "fastcgi",
    "grpc",
    "grpcs",
];

/// `type=<value>`: a type of this module, a type of the C modules that is
/// written here another way (named), or the nearest name.
fn parse_type(value: &[u8]) -> Result<CheckType, String> {
    Ok(match value {
        b"tcp" => CheckType::Tcp,
        b"udp" => CheckType::Udp,
        b"http" => CheckType::Http,
        b"https" => CheckType::Https,
        // yaoweibin's and Tengine's name; here a real handshake.
        b"tls" | b"ssl_hello" => CheckType::Tls,
        b"mysql" => CheckType::Mysql,
        b"ajp" => CheckType::Ajp,
        b"fastcgi" => CheckType::Fastcgi,
        b"grpc" => CheckType::Grpc,
        b"grpcs" => CheckType::Grpcs,
        b"pop3" | b"imap" | b"smtp" => {
            let greeting = match value {
                b"pop3" => "+OK",
                b"imap" => "* OK",
                _ => "220",
            };
            return Err(format!(
                "type={} is not a type here: write type=tcp match=NAME with a block \
                 check_match NAME {{ expect \"{greeting}\"; }} (docs/migrating.md)",
                printable(value)
            ));
        }
        b"ikev2" => {
            return Err(
                "type=ikev2 is not a type here: write type=udp match=NAME with a \
                        check_match NAME { send ...; expect ...; } block carrying the IKE \
                        packet and the expected answer (docs/migrating.md)"
                    .into(),
            )
        }
        b"send" => {
            return Err(
                "type=send is not a type here: write type=tcp match=NAME with a \
                        check_match NAME { send ...; expect ...; } block (docs/migrating.md)"
                    .into(),
            )
        }
        b"http2" | b"h2" | b"h2c" => {
            return Err(format!(
                "type={} is not a type here: write type=http (or https) and \
                 check_http_version 2; (docs/directives.md, check_http_version)",
                printable(value)
            ))
        }
        b"tlsv10_hello" | b"tlsv11_hello" | b"tlsv12_hello" => {
            let version = match value {
                b"tlsv10_hello" => "TLSv1",
                b"tlsv11_hello" => "TLSv1.1",
                _ => "TLSv1.2",
            };
            return Err(format!(
                "type={} is not a type here: write type=tls and check_ssl_protocols {version}; \
                 (a real handshake)",
                printable(value)
            ));
        }
        _ => {
            let near = nearest(value, &TYPES).or_else(|| nearest_by_meaning(value));
            return Err(match near {
                Some(n) => format!(
                    "unknown type \"{}\": did you mean type={n}? (types: {})",
                    printable(value),
                    TYPES.join(", ")
                ),
                None => format!(
                    "unknown type \"{}\": the types are {}; a protocol without a type \
                     of its own is written type=tcp (or type=udp) match=NAME with a \
                     check_match NAME {{ send ...; expect ...; }} block (docs/migrating.md)",
                    printable(value),
                    TYPES.join(", ")
                ),
            });
        }
    })
}

/// The type that does the job of a protocol name other modules and
/// load balancers use, when its spelling is not near any type here.
fn nearest_by_meaning(written: &[u8]) -> Option<&'static str> {
    Some(match written.to_ascii_lowercase().as_slice() {
        b"ssl" | b"tls_hello" | b"https_hello" | b"ssl-hello" | b"ssl-hello-chk" => "tls",
        b"mariadb" | b"mysql-check" => "mysql",
        b"fcgi" | b"php" | b"php-fpm" | b"php_fpm" => "fastcgi",
        b"ajp13" | b"tomcat" => "ajp",
        b"httpchk" | b"http-check" | b"websocket" | b"ws" => "http",
        b"wss" => "https",
        b"tcp-check" | b"connect" => "tcp",
        _ => return None,
    })
}

/// The name of `names` closest to `written`: the same letters in another
/// case, or at most two edits away.
pub(crate) fn nearest<'a>(written: &[u8], names: &[&'a str]) -> Option<&'a str> {
    if let Some(n) = names
        .iter()
        .find(|n| n.as_bytes().eq_ignore_ascii_case(written))
    {
        return Some(n);
    }
    let lower = written.to_ascii_lowercase();
    names
        .iter()
        .map(|n| (edit_distance(n.as_bytes(), &lower), *n))
        .filter(|&(d, _)| d <= 2)
        .min_by_key(|&(d, _)| d)
        .map(|(_, n)| n)
}

/// Levenshtein distance (short words: names of types and directives).
fn edit_distance(a: &[u8], b: &[u8]) -> usize {
    if a.len().abs_diff(b.len()) > 2 || b.len() > 64 {
        return usize::MAX;
    }
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    for (i, &x) in a.iter().enumerate() {
        let mut cur = vec![i + 1; b.len() + 1];
        for (j, &y) in b.iter().enumerate() {
            cur[j + 1] = (prev[j] + usize::from(x != y))
                .min(prev[j + 1] + 1)
                .min(cur[j] + 1);
        }
        prev = cur;
    }
    prev[b.len()]
}

/// A parsed value and the argument it came from.
struct Given<'a, T> {
    arg: &'a [u8],
    value: T,
}

/// The first field of a keepalive value.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Rehandshake {
    /// Empty or `on`: `max(30s, 2 * interval)`.
    Default,
    /// `off`: no age limit.
    Unlimited,
    /// An explicit period in ms.
    Ms(u64),
}

/// An enabled `keepalive=` value; `None` fields take their defaults.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct KeepaliveSpec {
    rehandshake: Rehandshake,
    idle_s: Option<u32>,
    intvl_s: Option<u32>,
    cnt: Option<u32>,
}

/// The parameters given so far, each at most once.
#[derive(Default)]
struct Params<'a> {
    interval: Option<Given<'a, u64>>,
    timeout: Option<Given<'a, u64>>,
    down_interval: Option<Given<'a, u64>>,
    jitter: Option<Given<'a, u64>>,
    fall: Option<Given<'a, u32>>,
    rise: Option<Given<'a, u32>>,
    default_down: Option<Given<'a, bool>>,
    check_type: Option<Given<'a, CheckType>>,
    port: Option<Given<'a, u16>>,
    reuse: Option<Given<'a, Reuse>>,
    /// `Some(Given { value: None })` is an explicit `keepalive=off`.
    keepalive: Option<Given<'a, Option<KeepaliveSpec>>>,
    match_block: Option<Given<'a, Vec<u8>>>,
    passive_fall: Option<Given<'a, u32>>,
    shared: Option<Given<'a, bool>>,
    mandatory: Option<Given<'a, bool>>,
    slow_start: Option<Given<'a, u64>>,
}

/// Stores a parsed parameter, refusing a second occurrence.
fn store<'a, T>(
    slot: &mut Option<Given<'a, T>>,
    arg: &'a [u8],
    name: &str,
    parsed: impl FnOnce() -> Result<T, String>,
) -> Result<(), ConfError> {
    if slot.is_some() {
        return Err(invalid(arg, format!("{name} is given twice")));
    }
    let value = parsed().map_err(|reason| invalid(arg, reason))?;
    *slot = Some(Given { arg, value });
    Ok(())
}

impl<'a> Params<'a> {
    /// First pass: one `name=value` argument.
    fn add(&mut self, arg: &'a [u8]) -> Result<(), ConfError> {
        if arg == b"mandatory" {
            return store(&mut self.mandatory, arg, "mandatory", || Ok(true));
        }
        let Some(eq) = arg.iter().position(|&b| b == b'=') else {
            return Err(match PARAMETERS.iter().find(|p| p.as_bytes() == arg) {
                Some(name) => invalid(arg, format!("{name} requires a value ({name}=...)")),
                None => invalid(arg, "unknown parameter"),
            });
        };
        let (name, value) = (&arg[..eq], &arg[eq + 1..]);

        match name {
            b"interval" => store(&mut self.interval, arg, "interval", || {
                parse_millis(value, "interval", INTERVAL_MIN_MS, INTERVAL_MAX_MS)
            }),
            b"timeout" => store(&mut self.timeout, arg, "timeout", || {
                parse_millis(value, "timeout", 1, TIMEOUT_MAX_MS)
            }),
            b"down_interval" => store(&mut self.down_interval, arg, "down_interval", || {
                parse_millis(value, "down_interval", INTERVAL_MIN_MS, INTERVAL_MAX_MS)
            }),
            b"jitter" => store(&mut self.jitter, arg, "jitter", || {
                parse_millis(value, "jitter", 0, INTERVAL_MAX_MS)
            }),
            b"fall" => store(&mut self.fall, arg, "fall", || {
                parse_count(value, "fall", 1, RISE_FALL_MAX)
            }),
            b"rise" => store(&mut self.rise, arg, "rise", || {
                parse_count(value, "rise", 1, RISE_FALL_MAX)
            }),
            b"default_down" => store(&mut self.default_down, arg, "default_down", || {
                // The C modules compare case-insensitively (TRUE).
                if value.eq_ignore_ascii_case(b"true") {
                    Ok(true)
                } else if value.eq_ignore_ascii_case(b"false") {
                    Ok(false)
                } else {
                    Err("default_down must be true or false".into())
                }
            }),
            b"shared" => store(&mut self.shared, arg, "shared", || match value {
                b"on" => Ok(true),
                b"off" => Ok(false),
                _ => Err("shared must be on or off".into()),
            }),
            b"type" => store(&mut self.check_type, arg, "type", || parse_type(value)),
            b"port" => store(&mut self.port, arg, "port", || {
                parse_count(value, "port", 1, u16::MAX)
            }),
            b"reuse" => store(&mut self.reuse, arg, "reuse", || parse_reuse(value)),
            b"keepalive" => store(&mut self.keepalive, arg, "keepalive", || {
                parse_keepalive(value)
            }),
            b"match" => store(&mut self.match_block, arg, "match", || match value {
                b"" => Err("match must name a check_match block (match=NAME)".into()),
                _ => Ok(value.to_vec()),
            }),
            b"mandatory" => Err(invalid(arg, "mandatory takes no value (write mandatory)")),
            b"slow_start" => store(&mut self.slow_start, arg, "slow_start", || {
                parse_millis(value, "slow_start", 0, SLOW_START_MAX_MS)
            }),
            b"passive_fall" => store(&mut self.passive_fall, arg, "passive_fall", || {
                parse_count(value, "passive_fall", 0, RISE_FALL_MAX)
            }),
            b"unique" => Err(invalid(
                arg,
                "unique= is Tengine's: here each upstream's servers are checked for that \
                 upstream; remove the parameter (docs/migrating.md)",
            )),
            b"uri" | b"url" | b"path" => Err(invalid(
                arg,
                "the request is not a parameter of check: write check_http_request GET /path; \
                 (or check_http_send \"GET /path HTTP/1.0\\r\\n\\r\\n\";) and type=http",
            )),
            b"log_level" => Err(invalid(
                arg,
                "log_level= is not a parameter here: a peer going down is logged at warn and \
                 coming up at notice; choose what error_log keeps (docs/migrating.md)",
            )),
            _ => Err(invalid(
                arg,
                match nearest(name, &PARAMETERS) {
                    Some(n) => format!("unknown parameter (did you mean {n}=?)"),
                    None => "unknown parameter".into(),
                },
            )),
        }
    }

    /// Second pass: defaults and cross-parameter rules; what is accepted
    /// with a `[warn]` goes to `warnings`.
    fn resolve(
        self,
        warnings: &mut Vec<ConfError>,
        keepalive_time_ms: Option<u64>,
    ) -> Result<CheckConf, ConfError> {
        let interval_ms = self.interval.map_or(DEFAULT_INTERVAL_MS, |g| g.value);
        let default_period = keepalive_time_ms.unwrap_or(default_period_ms(interval_ms));
        let check_type = self.check_type.map_or(CheckType::Tcp, |g| g.value);

        if check_type == CheckType::Udp {
            if let Some(g) = self.reuse.as_ref().filter(|g| g.value != Reuse::Off) {
                return Err(invalid(g.arg, "reuse requires type=tcp or type=http"));
            }
            if let Some(g) = self.keepalive.as_ref().filter(|g| g.value.is_some()) {
                return Err(invalid(g.arg, "keepalive requires type=tcp or type=http"));
            }
        }
        if matches!(
            check_type,
            CheckType::Mysql | CheckType::Ajp | CheckType::Fastcgi
        ) {
            // One exchange per connection: the server closes (fastcgi
            // without FCGI_KEEP_CONN) or expects more (mysql, ajp).
            let t = check_type.as_str();
            if let Some(g) = self.reuse.as_ref().filter(|g| g.value != Reuse::Off) {
                return Err(invalid(
                    g.arg,
                    format!("type={t} checks use a new connection each round"),
                ));
            }
            if let Some(g) = self.keepalive.as_ref().filter(|g| g.value.is_some()) {
                return Err(invalid(
                    g.arg,
                    format!("type={t} checks use a new connection each round"),
                ));
            }
        }

        // Both intervals bound the round's budget and the jitter: a round
        // of a down peer must fit its own interval too.
        let down_interval_ms = self.down_interval.as_ref().map(|g| g.value);
        let intervals = [
            Some(("interval", interval_ms)),
            down_interval_ms.map(|ms| ("down_interval", ms)),
        ];
        let shortest_ms = interval_ms.min(down_interval_ms.unwrap_or(u64::MAX));
        let timeout_ms = match &self.timeout {
            Some(g) => {
                // As the C modules do: a round still in flight delays the
                // next, so the period stretches to the round's length.
                // Equal: a round that takes its whole timeout ends when the
                // next is due, and the next waits for it.
                for (name, ms) in intervals.iter().flatten() {
                    if g.value >= *ms {
                        let relation = if g.value > *ms { "is above" } else { "equals" };
                        warnings.push(ConfError(format!(
                            "\"check\" {} {relation} {name}={ms}: a round still in flight \
                             delays the next, so a slow peer's rounds start up to {} ms apart \
                             (docs/directives.md, check)",
                            printable(g.arg),
                            g.value
                        )));
                        break;
                    }
                }
                g.value
            }
            None => (shortest_ms - shortest_ms / 10).min(DEFAULT_TIMEOUT_CAP_MS),
        };
        let jitter_ms = match &self.jitter {
            Some(g) => {
                for (name, ms) in intervals.iter().flatten() {
                    if g.value >= *ms {
                        return Err(invalid(
                            g.arg,
                            format!("jitter must be less than {name} ({ms} ms)"),
                        ));
                    }
                }
                g.value
            }
            None => 0,
        };

        let reuse = self.reuse.as_ref().map_or(Reuse::Off, |g| g.value);
        let reuse_period_ms = match (reuse, &self.reuse) {
            (Reuse::Period { ms }, Some(g)) if ms <= interval_ms => {
                return Err(invalid(
                    g.arg,
                    format!(
                        "reuse period ({ms} ms) must be greater than interval ({interval_ms} ms)"
                    ),
                ))
            }
            (Reuse::Period { ms }, _) => Some(ms),
            (Reuse::On, _) => Some(default_period),
            (Reuse::Off, _) => None,
        };

        let (keepalive, keepalive_period_ms) = match &self.keepalive {
            Some(Given {
                arg,
                value: Some(spec),
            }) => {
                let periods = (default_period, reuse_period_ms);
                let (kernel, period) = resolve_keepalive(spec, interval_ms, periods)
                    .map_err(|reason| invalid(arg, reason))?;
                (Some(kernel), Some(period))
            }
            _ => (None, None),
        };

        let rehandshake_ms = match (reuse_period_ms, keepalive_period_ms) {
            (None, None) => None,
            (a, b) => Some(a.unwrap_or(u64::MAX).min(b.unwrap_or(u64::MAX))),
        };

        Ok(CheckConf {
            interval_ms,
            timeout_ms,
            down_interval_ms,
            jitter_ms,
            fall: self.fall.map_or(DEFAULT_FALL, |g| g.value),
            rise: self.rise.map_or(DEFAULT_RISE, |g| g.value),
            default_down: self.default_down.is_some_and(|g| g.value),
            check_type,
            port: self.port.map_or(0, |g| g.value),
            reuse,
            keepalive,
            rehandshake_ms,
            match_block: self.match_block.map(|g| g.value),
            passive_fall: self.passive_fall.map_or(0, |g| g.value),
            shared: self.shared.map_or(true, |g| g.value),
            active: true,
            mandatory: self.mandatory.is_some(),
            slow_start_ms: self.slow_start.map_or(0, |g| g.value),
        })
    }
}

/// Applies the keepalive rules that depend on `interval` and `reuse`.
/// Returns the kernel options and the period of the rehandshake field
/// (`u64::MAX` for `off`).
fn resolve_keepalive(
    spec: &KeepaliveSpec,
    interval_ms: u64,
    (default_period, reuse_period_ms): (u64, Option<u64>),
) -> Result<(KernelKeepalive, u64), String> {
    let own_period_ms = match spec.rehandshake {
        Rehandshake::Default => default_period,
        Rehandshake::Unlimited => u64::MAX,
        Rehandshake::Ms(ms) if ms <= interval_ms => {
            return Err(format!(
                "keepalive rehandshake period ({ms} ms) must be greater than interval \
                 ({interval_ms} ms)"
            ))
        }
        Rehandshake::Ms(ms) => ms,
    };
    let effective_ms = own_period_ms.min(reuse_period_ms.unwrap_or(u64::MAX));

    let (idle_s, idle_what) = match spec.idle_s {
        Some(idle) => {
            if u64::from(idle) * 1000 >= effective_ms {
                return Err(format!(
                    "keepalive idle ({idle} s) must be less than the rehandshake period \
                     ({effective_ms} ms)"
                ));
            }
            (idle, "idle")
        }
        None => {
            // ceil(interval in s), but a whole second strictly below the
            // effective period, and no more than the kernel allows.
            let below_period_s = if effective_ms == u64::MAX {
                u64::MAX
            } else {
                effective_ms.saturating_sub(1) / 1000
            };
            let idle = interval_ms
                .div_ceil(1000)
                .min(below_period_s)
                .min(u64::from(KEEPALIVE_IDLE_MAX_S));
            let idle = u32::try_from(idle).unwrap_or(KEEPALIVE_IDLE_MAX_S);
            if idle == 0 {
                return Err(format!(
                    "no positive keepalive idle fits below the rehandshake period of \
                     {effective_ms} ms"
                ));
            }
            (idle, "the computed idle")
        }
    };

    let intvl_s = spec.intvl_s.unwrap_or(DEFAULT_KEEPALIVE_INTVL_S);
    if intvl_s > idle_s {
        return Err(format!(
            "keepalive intvl ({intvl_s} s) must not exceed {idle_what} ({idle_s} s)"
        ));
    }

    let kernel = KernelKeepalive {
        idle_s,
        intvl_s,
        cnt: spec.cnt.unwrap_or(DEFAULT_KEEPALIVE_CNT),
    };
    Ok((kernel, own_period_ms))
}

/// `interval` / `timeout` / `down_interval` / `jitter`: a bare integer of
/// milliseconds, or an nginx
/// time ending in a unit (`500ms`, `3s`, `1m30s`); within `min..=max`.
fn parse_millis(value: &[u8], name: &str, min: u64, max: u64) -> Result<u64, String> {
    let parsed = if !value.is_empty() && value.iter().all(u8::is_ascii_digit) {
        parse_decimal(value)
    } else if value.last().is_some_and(u8::is_ascii_alphabetic) {
        parse_time_checked(value, false)
    } else {
        Err(NumError::Malformed)
    };
    match parsed {
        Ok(ms) if ms < min && min == 1 => Err(format!("{name} must be positive")),
        Ok(ms) if ms < min => Err(format!("{name} must be at least {min} ms")),
        Ok(ms) if ms <= max => Ok(ms),
        Ok(_) | Err(NumError::Overflow) => Err(format!("{name} must be at most {max} ms (24h)")),
        Err(NumError::Malformed) => Err(format!(
            "{name} must be milliseconds or an nginx time (500ms, 3s)"
        )),
    }
}

/// `fall`, `rise`, `port`, keepalive `cnt`: a plain decimal integer
/// within `min..=max`.
fn parse_count<T>(value: &[u8], name: &str, min: T, max: T) -> Result<T, String>
where
    T: Copy + PartialOrd + TryFrom<u64> + std::fmt::Display,
{
    let out_of_range = || format!("{name} must be from {min} to {max}");
    match parse_decimal(value) {
        Err(NumError::Malformed) => Err(format!("{name} must be a plain decimal integer")),
        Err(NumError::Overflow) => Err(out_of_range()),
        Ok(n) => T::try_from(n)
            .ok()
            .filter(|n| (min..=max).contains(n))
            .ok_or_else(out_of_range),
    }
}

/// A period in nginx's seconds syntax, returned in ms, at most
/// [`PERIOD_MAX_MS`]. `what` names the value in error messages.
fn parse_period(value: &[u8], what: &str, expected: &str) -> Result<u64, String> {
    match parse_time_checked(value, true).map(|s| s.checked_mul(1000)) {
        Ok(Some(ms)) if ms <= PERIOD_MAX_MS => Ok(ms),
        Ok(_) | Err(NumError::Overflow) => {
            Err(format!("{what} must be at most 7d ({PERIOD_MAX_MS} ms)"))
        }
        Err(NumError::Malformed) => Err(format!("{what} must be {expected}")),
    }
}

/// `reuse=off|on|<seconds-syntax time>`.
fn parse_reuse(value: &[u8]) -> Result<Reuse, String> {
    // Akvicor's module compares on and off ignoring case.
    match value.to_ascii_lowercase().as_slice() {
        b"off" => Ok(Reuse::Off),
        b"on" => Ok(Reuse::On),
        _ => {
            let expected = format!("off, on or {SECONDS_SYNTAX}");
            parse_period(value, "reuse", &expected).map(|ms| Reuse::Period { ms })
        }
    }
}

/// `keepalive=off|on|rehandshake[:idle[:intvl[:cnt]]]`; `None` for `off`.
fn parse_keepalive(value: &[u8]) -> Result<Option<KeepaliveSpec>, String> {
    const FORMAT: &str = "off, on or rehandshake[:idle[:intvl[:cnt]]]";
    match value {
        b"off" => return Ok(None),
        b"" => return Err(format!("keepalive must be {FORMAT}")),
        _ => {}
    }

    let fields: Vec<&[u8]> = value.split(|&b| b == b':').collect();
    if fields.len() > 4 {
        return Err(format!(
            "keepalive takes at most 4 fields (rehandshake:idle:intvl:cnt), not {}",
            fields.len()
        ));
    }

    let rehandshake = match fields[0] {
        b"" | b"on" => Rehandshake::Default,
        b"off" => Rehandshake::Unlimited,
        f => {
            let expected = format!("on, off or {SECONDS_SYNTAX}");
            Rehandshake::Ms(parse_period(f, "keepalive rehandshake", &expected)?)
        }
    };

    // Later fields: empty means the default; on/off are not allowed.
    let later = |index: usize, name: &str| -> Result<Option<&[u8]>, String> {
        match fields.get(index).copied() {
            None | Some(b"") => Ok(None),
            Some(b"on" | b"off") => Err(format!(
                "keepalive {name} cannot be on or off (only the first field can)"
            )),
            Some(f) => Ok(Some(f)),
        }
    };
    let seconds = |f: &[u8], name: &str| -> Result<u32, String> {
        let out_of_range =
            || format!("keepalive {name} must be from 1 to {KEEPALIVE_IDLE_MAX_S} seconds");
        match parse_time_checked(f, true) {
            Err(NumError::Malformed) => Err(format!("keepalive {name} must be {SECONDS_SYNTAX}")),
            Err(NumError::Overflow) => Err(out_of_range()),
            Ok(s) => u32::try_from(s)
                .ok()
                .filter(|s| (1..=KEEPALIVE_IDLE_MAX_S).contains(s))
                .ok_or_else(out_of_range),
        }
    };

    Ok(Some(KeepaliveSpec {
        rehandshake,
        idle_s: later(1, "idle")?.map(|f| seconds(f, "idle")).transpose()?,
        intvl_s: later(2, "intvl")?
            .map(|f| seconds(f, "intvl"))
            .transpose()?,
        cnt: later(3, "cnt")?
            .map(|f| parse_count(f, "keepalive cnt", 1, KEEPALIVE_CNT_MAX))
            .transpose()?,
    }))
}
