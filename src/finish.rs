//! The end of a context's configuration (`init_main_conf` of http or
//! stream, after nginx built every upstream's peers): the rules across
//! directives (`healthcheck_core::conf::finish_context`), each message
//! logged where its directive was written, then the context's shared zone
//! registered with the layout those rules computed.

use core::sync::atomic::{AtomicBool, Ordering};

use healthcheck_core::conf as cc;
use healthcheck_core::status::Group;
use ngx::ffi::{ngx_conf_t, ngx_pagesize, NGX_LOG_EMERG, NGX_LOG_NOTICE, NGX_LOG_WARN};

use crate::conf::MainConf;
use crate::ffi::{log_at, ConfLoc};

/// The migration notice is logged once per process (the first load).
static MIGRATION_NOTICE: AtomicBool = AtomicBool::new(false);
use crate::shm::{self, ZonePlan};
use crate::upstream::UpstreamRef;

/// What the rules read from one upstream block.
fn facts(u: &UpstreamRef) -> cc::UpstreamFacts<'_> {
    let c = u.conf();
    cc::UpstreamFacts {
        name: u.name_bytes(),
        check: c.check.get(),
        keepalive_requests: c.keepalive_requests.get().copied(),
        peers: u
            .peers
            .iter()
            .map(|p| cc::PeerFacts {
                name: p.name_bytes(),
                port: p.port(),
                unix: p.is_unix(),
            })
            .collect(),
        http: cc::HttpDirectives {
            send: c.http.send.is_set(),
            request: c.http.request_line.is_set(),
            header: c.http.header_line.is_set(),
            expect_alive: c.http.expect_alive.is_set(),
            expect_body: c.http.expect_body.is_set(),
            fastcgi_param: c.http.fastcgi_params.is_set(),
            grpc_service: c.http.grpc_service.is_set(),
            grpc_status: c.http.grpc_status.is_set(),
            http_version: c.http.http_version.is_set(),
            http2: c.http.http_version.get() == Some(&cc::HttpVersion::Http2),
        },
        fail_open: c.fail_open.is_set(),
        tls: c.tls.facts(),
        resolve_lines: u.resolve_lines,
        outlier: c.outlier.get(),
        written: c.written,
    }
}

/// Check the context's rules, then register its zone.
///
/// # Safety
/// `cf` is the configuration of the context `group` being finished;
/// `upstreams` are its upstreams.
pub unsafe fn context(
    cf: *mut ngx_conf_t,
    group: Group,
    mcf: &mut MainConf,
    upstreams: &[UpstreamRef],
) -> Result<(), ()> {
    // SAFETY: valid during configuration.
    let log = unsafe { (*cf).log };
    for u in upstreams {
        // SAFETY: our srv conf of the block, in the configuration pool; no
        // other reference to it is live here.
        let Some(c) = (unsafe { u.conf.as_mut() }) else {
            continue;
        };
        // `check_outlier` without `check`: rows and slots, no rounds.
        if c.outlier.is_set() && !c.check.is_set() {
            c.check.value = Some(cc::CheckConf::traffic_only());
            c.check.loc = c.outlier.loc;
        }
        // `check_keepalive_time`: the line again, with it as the default
        // rehandshake period.
        if let (Some(&kt), Some(k)) = (c.keepalive_time.get(), c.check.get()) {
            if kt <= k.interval_ms {
                let msg = format!(
                    "check_keepalive_time ({kt} ms) must be greater than the check's \
                     interval ({} ms): a kept connection would serve no second round",
                    k.interval_ms
                );
                // SAFETY: valid log.
                unsafe { log_at(NGX_LOG_EMERG, log, &c.keepalive_time.loc, &msg) };
                return Err(());
            }
            let args: Vec<&[u8]> = c.check_args.iter().map(Vec::as_slice).collect();
            match cc::parse_check_with(&args, Some(kt)) {
                Ok(checked) => c.check.value = Some(checked.conf),
                Err(e) => {
                    // SAFETY: valid log.
                    unsafe { log_at(NGX_LOG_EMERG, log, &c.check.loc, &e.0) };
                    return Err(());
                }
            }
        }
        // `check_keepalive_requests n > 1` keeps an http check's
        // connection, as the C modules do.
        let kept = c
            .check
            .get()
            .and_then(|k| cc::keepalive_reuse(k, c.written, c.keepalive_requests.get().copied()));
        if let Some(mut k) = kept {
            if let Some(&kt) = c.keepalive_time.get() {
                k.rehandshake_ms = Some(kt);
            }
            c.check.value = Some(k);
        }
    }
    mcf.kept_peers = (0, ConfLoc::default());
    for u in upstreams {
        let c = u.conf();
        if c.check.get().is_some_and(|k| k.keeps_connection()) {
            if mcf.kept_peers.0 == 0 {
                mcf.kept_peers.1 = c.check.loc;
            }
            mcf.kept_peers.0 += u.peers.len();
        }
    }
    let facts: Vec<cc::UpstreamFacts<'_>> = upstreams.iter().map(facts).collect();
    mcf.migration.add(&facts);
    mcf.checked = facts
        .iter()
        .filter(|f| f.check.is_some())
        .map(|f| f.name.to_vec())
        .collect();
    // SAFETY: per the contract.
    if unsafe { gates(cf, group, mcf) }.is_err() {
        return Err(());
    }
    // SAFETY: set by nginx at start.
    let page = unsafe { ngx_pagesize };
    let blocks = mcf.matches.blocks();
    let outliers = facts
        .iter()
        .any(|f| f.outlier.is_some() && f.check.is_some());
    let finished = cc::finish_context(
        group,
        &facts,
        &blocks,
        mcf.shm_size.get().copied(),
        |n, d| shm::required_size(n, d, outliers, page),
    );
    // Where each directive was written (the indices are the facts', so
    // the upstreams').
    let loc = |at: cc::Directive| {
        let ups = |i: usize| upstreams.get(i).map(UpstreamRef::conf);
        match at {
            cc::Directive::Check(i) => ups(i).map(|c| c.check.loc),
            cc::Directive::KeepaliveRequests(i) => ups(i).map(|c| c.keepalive_requests.loc),
            cc::Directive::ShmSize => Some(mcf.shm_size.loc),
            cc::Directive::HttpSend(i) => ups(i).map(|c| c.http.send.loc),
            cc::Directive::HttpRequest(i) => ups(i).map(|c| c.http.request_line.loc),
            cc::Directive::HttpHeader(i) => ups(i).map(|c| c.http.header_line.loc),
            cc::Directive::HttpExpectAlive(i) => ups(i).map(|c| c.http.expect_alive.loc),
            cc::Directive::HttpExpectBody(i) => ups(i).map(|c| c.http.expect_body.loc),
            cc::Directive::FastcgiParam(i) => ups(i).map(|c| c.http.fastcgi_params.loc),
            cc::Directive::GrpcService(i) => ups(i).map(|c| c.http.grpc_service.loc),
            cc::Directive::GrpcStatus(i) => ups(i).map(|c| c.http.grpc_status.loc),
            cc::Directive::HttpVersion(i) => ups(i).map(|c| c.http.http_version.loc),
            cc::Directive::Match(j) => mcf.matches.loc(j),
            cc::Directive::FailOpen(i) => ups(i).map(|c| c.fail_open.loc),
            cc::Directive::Outlier(i) => ups(i).map(|c| c.outlier.loc),
            cc::Directive::Tls(i, d) => ups(i).and_then(|c| c.tls.loc(d)),
        }
        .unwrap_or_default()
    };
    for w in &finished.warnings {
        // SAFETY: valid log.
        unsafe { log_at(NGX_LOG_WARN, log, &loc(w.at), &w.error.0) };
    }
    let layout = match finished.result {
        Ok(layout) => layout,
        Err(e) => {
            // SAFETY: valid log.
            unsafe { log_at(NGX_LOG_EMERG, log, &loc(e.at), &e.error.0) };
            return Err(());
        }
    };
    let plan = ZonePlan {
        identities: layout.identities,
        initial: layout.initial,
        outlier: layout.outlier,
        outliers,
        dynamic: layout.dynamic,
        tags: layout.tags,
        group,
        state_file: mcf.state_file.get().cloned(),
    };
    // SAFETY: per the contract.
    mcf.zone = unsafe { shm::register(cf, group, layout.size, plan) }?;
    Ok(())
}

/// Once the whole configuration is read (init_module): the migration
/// notice, if it looks written for the C modules and relies on
/// `default_down`'s default (docs/migrating.md, Defaults), over the http
/// and the stream context; logged on the first load of the process only.
///
/// # Safety
/// `cycle` is the cycle being initialised, its configuration complete.
pub unsafe fn configuration_read(cycle: &ngx::ffi::ngx_cycle_t) {
    // SAFETY: per the contract; NULL without the block.
    let (http, stream) = unsafe {
        (
            crate::modules::main_conf::<MainConf>(cycle, Group::Http).as_ref(),
            crate::modules::main_conf::<MainConf>(cycle, Group::Stream).as_ref(),
        )
    };
    for (group, m) in [(Group::Http, http), (Group::Stream, stream)] {
        if let Some(m) = m {
            // SAFETY: per the contract.
            unsafe { kept_share(cycle, group, m) };
        }
    }
    let none = cc::migration::Candidates::default();
    let of = |m: Option<&MainConf>| m.map_or(&none, |m| &m.migration).clone();
    let candidates = of(http).then(&of(stream));
    let check_status = http.is_some_and(|m| m.check_status);
    // Gates whose upstream no context checks, in a configuration without a
    // stream block (which could still have had it): they answer 503.
    for (name, loc) in http.map_or(&[][..], |m| &m.gates) {
        let msg = format!(
            "\"healthcheck_gate\" names upstream \"{}\", which is no upstream with check: \
             it answers 503",
            String::from_utf8_lossy(name)
        );
        // SAFETY: the cycle's log.
        unsafe { log_at(ngx::ffi::NGX_LOG_WARN, cycle.log, loc, &msg) };
    }
    let Some(notice) = candidates.notice(check_status) else {
        return;
    };
    if !MIGRATION_NOTICE.swap(true, Ordering::Relaxed) {
        // SAFETY: the cycle's log.
        unsafe { log_at(NGX_LOG_NOTICE, cycle.log, &ConfLoc::default(), &notice) };
    }
}

/// A warning when the peers whose checks keep their connection are more,
/// per worker, than `check_max_connections` lets a worker keep.
///
/// # Safety
/// `cycle` is the cycle being initialised, its configuration complete.
unsafe fn kept_share(cycle: &ngx::ffi::ngx_cycle_t, group: Group, m: &MainConf) {
    let (kept, loc) = (m.kept_peers.0, m.kept_peers.1);
    if kept == 0 {
        return;
    }
    // SAFETY: per the contract: the core module's conf is complete.
    let workers = unsafe { crate::ffi::worker_processes(cycle) };
    let connections = cycle.connection_n as u64;
    let limit = m.max_connections.get().copied().unwrap_or_default();
    let allowed = limit.of(connections);
    let per_worker = kept.div_ceil(workers) as u64;
    if per_worker <= allowed {
        return;
    }
    let why = match limit {
        cc::ConnLimit::Share(p) => format!("{p}% of worker_connections {connections}"),
        cc::ConnLimit::Count(_) => "as set".to_string(),
    };
    let msg = format!(
        "{per_worker} peers per worker keep their check connection (reuse= or keepalive=; \
         {kept} in this {} block over {workers} worker process{}), more than \
         check_max_connections lets a worker hold ({allowed}, {why}): the others are checked \
         on a new connection each round; raise worker_connections or check_max_connections",
        group.as_str(),
        if workers == 1 { "" } else { "es" },
    );
    // SAFETY: the cycle's log.
    unsafe { log_at(NGX_LOG_WARN, cycle.log, &loc, &msg) };
}

/// The `healthcheck_gate` upstreams (kept in the http main conf) against
/// the upstreams with `check` of the contexts finished so far: a name no
/// context checks fails the configuration once every context that could
/// have it is known (the stream block, if any, may come after http).
///
/// # Safety
/// `cf` is the configuration being finished; `mcf` is the main conf of
/// `group` in it.
unsafe fn gates(cf: *mut ngx_conf_t, group: Group, mcf: &mut MainConf) -> Result<(), ()> {
    // SAFETY: per the contract.
    let cycle = unsafe { &*(*cf).cycle };
    let other = match group {
        Group::Http => Group::Stream,
        Group::Stream => Group::Http,
    };
    // SAFETY: the cycle being configured; NULL while a block is not parsed.
    let other_conf = unsafe { crate::modules::main_conf::<MainConf>(cycle, other).as_mut() };
    let (http, stream): (&mut MainConf, Option<&mut MainConf>) = match (group, other_conf) {
        (Group::Http, s) => (mcf, s),
        (Group::Stream, Some(h)) => (h, Some(mcf)),
        // No http block yet: its gates are checked when it ends.
        (Group::Stream, None) => return Ok(()),
    };
    // Every context known: the stream block is parsed, or nginx has no
    // stream module to parse one.
    let complete = stream.is_some() || crate::stream_link::stream_module().is_none();
    let stream_checked: &[Vec<u8>] = stream.as_ref().map_or(&[], |s| &s.checked);
    let http_checked = std::mem::take(&mut http.checked);
    let mut failed = false;
    http.gates.retain(|(name, loc)| {
        let known = http_checked.contains(name) || stream_checked.contains(name);
        if !known && complete {
            let msg = format!(
                "\"healthcheck_gate\" names upstream \"{}\", which is no http or stream \
                 upstream with check",
                String::from_utf8_lossy(name)
            );
            // SAFETY: valid log.
            unsafe { log_at(NGX_LOG_EMERG, (*cf).log, loc, &msg) };
            failed = true;
        }
        !known && !complete
    });
    http.checked = http_checked;
    if failed {
        Err(())
    } else {
        Ok(())
    }
}
