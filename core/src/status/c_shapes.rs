//! `check_status` (docs/status.md, The C modules' shapes): the page of
//! yaoweibin's nginx_upstream_check_module and Tengine's, so that the
//! consumers written for them keep working (Telegraf's
//! `nginx_upstream_check` input decodes exactly this JSON):
//!
//! - JSON `{"servers": {"total": N, "generation": G, "server": [...]}}`,
//!   each row `index`, `upstream`, `name`, `status` (`"up"` or `"down"`),
//!   `rise`, `fall`, `type`, `port` (numbers unquoted), one row per line;
//! - CSV without a header, the 8 columns
//!   `index,upstream,name,status,rise,fall,type,port`;
//! - HTML with the `Check upstream server number: N, generation: G` line
//!   and the 8 columns, a down row `<tr bgcolor="#FF0000">`.
//!
//! Stream peers are listed after the http ones, as Tengine lists them.
//! `index` is the row's place among all the peers (http then stream),
//! whatever `?status=` prints, as in those modules; `total` counts the
//! rows printed. A resolved address without a slot (`unchecked`) takes
//! traffic and is `up`. Every name is escaped for its format (the C
//! modules escape nothing), and the JSON is valid under every filter
//! (yaoweibin's leaves a trailing comma).

use super::text::push_u64;
use super::{csv, html, json, Counts, Meta, PeerRow};

fn word(r: &PeerRow) -> &'static [u8] {
    if r.up || r.unchecked {
        b"up"
    } else {
        b"down"
    }
}

/// The page's head.
pub fn head(format: super::Format, meta: &Meta, counts: &Counts, out: &mut Vec<u8>) {
    use super::Format;
    match format {
        Format::Json => {
            out.extend_from_slice(b"{\"servers\": {\n  \"total\": ");
            push_u64(out, counts.total());
            out.extend_from_slice(b",\n  \"generation\": ");
            push_u64(out, meta.generation);
            out.extend_from_slice(b",\n  \"server\": [\n");
        }
        Format::Html => {
            out.extend_from_slice(
                b"<!DOCTYPE html PUBLIC \"-//W3C//DTD XHTML 1.0 Strict//EN\"\n\
                  \"http://www.w3.org/TR/xhtml1/DTD/xhtml1-strict.dtd\">\n\
                  <html xmlns=\"http://www.w3.org/1999/xhtml\">\n\
                  <head>\n  <title>Nginx http upstream check status</title>\n</head>\n\
                  <body>\n<h1>Nginx http upstream check status</h1>\n\
                  <h2>Check upstream server number: ",
            );
            push_u64(out, counts.total());
            out.extend_from_slice(b", generation: ");
            push_u64(out, meta.generation);
            out.extend_from_slice(
                b"</h2>\n<table style=\"background-color:white\" cellspacing=\"0\"        \
                  cellpadding=\"3\" border=\"1\">\n  <tr bgcolor=\"#C0C0C0\">\n    \
                  <th>Index</th>\n    <th>Upstream</th>\n    <th>Name</th>\n    \
                  <th>Status</th>\n    <th>Rise counts</th>\n    <th>Fall counts</th>\n    \
                  <th>Check type</th>\n    <th>Check port</th>\n  </tr>\n",
            );
        }
        Format::Csv | Format::Prometheus => {}
    }
}

/// One printed row; `index` is its place among all peers, `first` says
/// whether it is the first row printed.
pub fn row(format: super::Format, index: u64, first: bool, r: &PeerRow, out: &mut Vec<u8>) {
    use super::Format;
    match format {
        Format::Json => {
            if !first {
                out.extend_from_slice(b",\n");
            }
            out.extend_from_slice(b"    {\"index\": ");
            push_u64(out, index);
            out.extend_from_slice(b", \"upstream\": ");
            json::string(out, r.upstream);
            out.extend_from_slice(b", \"name\": ");
            json::string(out, r.name);
            out.extend_from_slice(b", \"status\": \"");
            out.extend_from_slice(word(r));
            out.extend_from_slice(b"\", \"rise\": ");
            push_u64(out, r.rise.into());
            out.extend_from_slice(b", \"fall\": ");
            push_u64(out, r.fall.into());
            out.extend_from_slice(b", \"type\": ");
            json::string(out, r.check_type.as_bytes());
            out.extend_from_slice(b", \"port\": ");
            push_u64(out, r.port.into());
            out.push(b'}');
        }
        Format::Csv => {
            push_u64(out, index);
            out.push(b',');
            csv::text(out, r.upstream);
            out.push(b',');
            csv::text(out, r.name);
            out.push(b',');
            out.extend_from_slice(word(r));
            out.push(b',');
            push_u64(out, r.rise.into());
            out.push(b',');
            push_u64(out, r.fall.into());
            out.push(b',');
            csv::text(out, r.check_type.as_bytes());
            out.push(b',');
            push_u64(out, r.port.into());
            out.push(b'\n');
        }
        Format::Html => {
            out.extend_from_slice(if word(r) == b"up" {
                b"  <tr>\n"
            } else {
                b"  <tr bgcolor=\"#FF0000\">\n"
            });
            let cell = |out: &mut Vec<u8>, f: &dyn Fn(&mut Vec<u8>)| {
                out.extend_from_slice(b"    <td>");
                f(out);
                out.extend_from_slice(b"</td>\n");
            };
            cell(out, &|o| push_u64(o, index));
            cell(out, &|o| html::text(o, r.upstream));
            cell(out, &|o| html::text(o, r.name));
            cell(out, &|o| o.extend_from_slice(word(r)));
            cell(out, &|o| push_u64(o, r.rise.into()));
            cell(out, &|o| push_u64(o, r.fall.into()));
            cell(out, &|o| html::text(o, r.check_type.as_bytes()));
            cell(out, &|o| push_u64(o, r.port.into()));
            out.extend_from_slice(b"  </tr>\n");
        }
        Format::Prometheus => {}
    }
}

/// The page's end; `printed` says whether any row was.
pub fn tail(format: super::Format, printed: bool, out: &mut Vec<u8>) {
    use super::Format;
    match format {
        Format::Json => {
            if printed {
                out.push(b'\n');
            }
            out.extend_from_slice(b"  ]\n}}\n");
        }
        Format::Html => out.extend_from_slice(b"</table>\n</body>\n</html>\n"),
        Format::Csv | Format::Prometheus => {}
    }
}

/// The Content-Type of a `check_status` page (the C modules' types, with
/// the charset the names' UTF-8 needs).
pub const fn content_type(format: super::Format) -> &'static str {
    use super::Format;
    match format {
        Format::Html => "text/html; charset=utf-8",
        Format::Csv => "text/plain; charset=utf-8",
        Format::Json => "application/json",
        Format::Prometheus => "text/plain; version=0.0.4; charset=utf-8",
    }
}
