//! The query string of the module's pages (`healthcheck_status`,
//! `check_status`, `healthcheck_admin`): `key=value` pairs split on `&`,
//! percent-decoding, and how a value is shown in a 400 line.

/// The `key=value` pairs of `q`, in order: empty pairs skipped, the key
/// percent-decoded, the value raw (a page decodes only the values it
/// uses). A pair without `=` has an empty value.
pub fn pairs(q: &[u8]) -> impl Iterator<Item = (Vec<u8>, &[u8])> {
    q.split(|&b| b == b'&')
        .filter(|a| !a.is_empty())
        .map(|arg| {
            let (key, value) = match arg.iter().position(|&b| b == b'=') {
                Some(i) => (&arg[..i], &arg[i + 1..]),
                None => (arg, &arg[arg.len()..]),
            };
            (percent_decode(key), value)
        })
}

/// `%XX` to its byte and `+` to a space; a `%` not followed by two hex
/// digits stays as it is.
pub fn percent_decode(s: &[u8]) -> Vec<u8> {
    fn hex(b: u8) -> Option<u8> {
        match b {
            b'0'..=b'9' => Some(b - b'0'),
            b'a'..=b'f' => Some(b - b'a' + 10),
            b'A'..=b'F' => Some(b - b'A' + 10),
            _ => None,
        }
    }
    let mut out = Vec::with_capacity(s.len());
    let mut i = 0;
    while i < s.len() {
        match s[i] {
            b'+' => out.push(b' '),
            b'%' if i + 2 < s.len() => match (hex(s[i + 1]), hex(s[i + 2])) {
                (Some(h), Some(l)) => {
                    out.push(h << 4 | l);
                    i += 3;
                    continue;
                }
                _ => out.push(b'%'),
            },
            b => out.push(b),
        }
        i += 1;
    }
    out
}

/// A value shown inside a 400 line: printable ASCII kept, `"` and `\`
/// backslash-escaped, every other byte as `\xNN`, at most 64 input bytes
/// (an nginx -t message shows UTF-8 instead: `conf::printable`).
pub fn shown(v: &[u8]) -> String {
    const MAX: usize = 64;
    let mut s = String::new();
    for &b in v.iter().take(MAX) {
        match b {
            b'"' => s.push_str("\\\""),
            b'\\' => s.push_str("\\\\"),
            0x20..=0x7e => s.push(b as char),
            _ => s.push_str(&format!("\\x{b:02x}")),
        }
    }
    if v.len() > MAX {
        s.push_str("...");
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pairs_split_decode_keys_and_keep_values_raw() {
        let got: Vec<(Vec<u8>, &[u8])> = pairs(b"a=1&&f%6Frmat=j%73on&flag&=x").collect();
        assert_eq!(
            got,
            [
                (b"a".to_vec(), &b"1"[..]),
                (b"format".to_vec(), &b"j%73on"[..]),
                (b"flag".to_vec(), &b""[..]),
                (Vec::new(), &b"x"[..]),
            ]
        );
    }

    #[test]
    fn percent_decoding_and_shown_values() {
        assert_eq!(percent_decode(b"a%20b+c%zz%4"), b"a b c%zz%4");
        assert_eq!(shown(b"a\"b\\\x01"), "a\\\"b\\\\\\x01");
        assert_eq!(shown(&[b'x'; 70]).len(), 64 + 3);
    }
}
