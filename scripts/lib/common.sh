# shellcheck shell=bash
# Helpers shared by the scripts in scripts/, each defined once here.
#
#   source "$(dirname "${BASH_SOURCE[0]}")/lib/layout.sh"
#   source "$(dirname "${BASH_SOURCE[0]}")/lib/common.sh"
#   hc_layout
#
# messages   log MSG       "==> MSG" on stderr
#            step MSG      the same after a blank line (a stage of a long run)
#            die MSG       "scripts/NAME: error: MSG" on stderr (NAME: the
#                          running script), then exit $HC_DIE_STATUS [1]
# tools      need_tools TOOL[:PACKAGE]...  install the Debian package of each
#                          TOOL not on PATH (PACKAGE, else TOOL; root only)
#            python_env    build/py: a venv with t/py/requirements.txt (below)
#            apt_install PACKAGE...  apt-get install (root only)
#            install_without_services PACKAGE...  apt-get install with no
#                          service started by the packages' scripts (below)
#            build_nginx [stock]  scripts/build (and with `stock` the stock nginx
#                          too), unless NO_BUILD=1; then need_nginx
#            need_nginx    die unless $HC_NGINX and $HC_MODULE exist (hc_layout)
#            stock_nginx   print where NGINX_STOCK=1 scripts/build puts nginx
# ports      port_free PORT      nothing accepts on 127.0.0.1:PORT
#            pick_port VAR...    a free listening port into each VAR (below)
#            wait_port PORT [S]  until something accepts on PORT, at most S
#                          seconds [60]; false if nothing did
# numbers    now_ms        the wall clock, unix milliseconds
#            cpu_ns PID    on-CPU nanoseconds of a process; $HC_CPU_CLOCK names
#                          the source: schedstat or utime+stime
#            median D      the median of the numbers on stdin, one a line ("-"
#                          if one is "-")
# reports    shell_word WORD     WORD quoted for a shell (unquoted if it can be)
#            command_line ARG...  the command line as given (the settings that
#                          steer the scripts, the script, ARGs), quoted for a shell
# nginx      conf_head MODULE LEVEL CONNECTIONS [LINE...]  the start of an
#                          nginx.conf (below)
#            backend_conf PORT [LINE...]  a whole nginx.conf answering 200
#            quit_nginx DIR...   SIGQUIT the nginx of each prefix DIR, if running
# work dir   make_work NAME      WORK=a new ${TMPDIR:-/tmp}/NAME.XXXXXX
#            drop_work     remove WORK, or with KEEP=1 keep it and say where

HC_SCRIPT=scripts/${0##*/}
HC_DIE_STATUS=1

log() { printf '==> %s\n' "$*" >&2; }
step() { printf '\n==> %s\n' "$*" >&2; }
die() { printf '%s: error: %s\n' "$HC_SCRIPT" "$*" >&2; exit "$HC_DIE_STATUS"; }

# --- tools and binaries --------------------------------------------------------

need_tools() {
    local tool need=()
    for tool; do
        command -v "${tool%%:*}" >/dev/null || need+=("${tool#*:}")
    done
    ((${#need[@]})) || return 0
    apt_install "${need[@]}"
}

# apt_install PACKAGE...: install Debian packages (root only).
apt_install() {
    ((EUID == 0)) || die "missing packages: $* (run as root or install them)"
    log "installing $*"
    apt-get -o DPkg::Lock::Timeout=300 update -qq >/dev/null
    DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=300 \
        install -y -qq --no-install-recommends "$@" >/dev/null
}

# install_without_services PACKAGE...: install Debian packages whose
# maintainer scripts would start a system service (mariadb-server, php-fpm);
# the tests start their own instances on loopback ports. While apt runs, a
# policy-rc.d that refuses every start is put in place unless one is there
# already, and removed again afterwards.
install_without_services() {
    (($#)) || return 0
    ((EUID == 0)) || die "missing packages: $* (run as root or install them)"
    local policy=/usr/sbin/policy-rc.d placed=0
    if [[ ! -e $policy ]]; then
        printf '#!/bin/sh\n# scripts/lib/common.sh: no service starts while it installs\nexit 101\n' >"$policy"
        chmod 755 "$policy"
        placed=1
    fi
    log "(services not started)"
    local rc=0
    (apt_install "$@") || rc=$?
    ((placed)) && rm -f "$policy"
    ((rc == 0)) || die "apt-get install $* failed ($rc)"
}

# python_env: build/py, a virtual environment with t/py/requirements.txt
# (the gRPC test server's grpcio), made once and again when the file
# changes. Needs python3-venv (installed when missing, root only).
python_env() {
    local venv=$HC_ROOT/build/py req=$HC_ROOT/t/py/requirements.txt
    local stamp=$venv/.requirements
    if [[ -x $venv/bin/python3 && -f $stamp ]] && cmp -s "$req" "$stamp"; then
        return 0
    fi
    python3 -c 'import ensurepip' 2>/dev/null || apt_install python3-venv
    log "making $venv (t/py/requirements.txt)"
    rm -rf "$venv"
    python3 -m venv "$venv" || die "python3 -m venv $venv failed"
    "$venv/bin/pip" install --quiet --disable-pip-version-check -r "$req" \
        || die "pip install -r $req failed (PyPI unreachable?)"
    cp "$req" "$stamp"
}

build_nginx() {
    if [[ ${NO_BUILD:-} == 1 ]]; then
        log "NO_BUILD=1: using the binaries already in $HC_PREFIX"
    elif [[ ${1:-} == stock ]]; then
        log "building (idempotent): patched nginx + module, and stock nginx"
        scripts/build >/dev/null
        NGINX_STOCK=1 scripts/build >/dev/null
    else
        log "building (idempotent)"
        scripts/build >/dev/null
    fi
    need_nginx
}

need_nginx() {
    [[ -x $HC_NGINX && -f $HC_MODULE ]] || die "no nginx/module in $HC_PREFIX: run scripts/build"
}

stock_nginx() {
    (NGINX_STOCK=1 hc_layout && echo "$HC_NGINX")
}

# --- ports ---------------------------------------------------------------------
# pick_port VAR... sets each VAR to a port for a listener on 127.0.0.1:
#   - outside the kernel's ephemeral range (/proc/sys/net/ipv4/ip_local_port_range),
#     so that no outgoing connection (checks, proxied requests, held
#     connections: thousands a second in the benchmarks) can take it between
#     the pick and nginx's listen: 10000 up to the range's start, else 1024
#     up to it, else above the range's end;
#   - not in use: nothing accepts on it (port_free) and, where ss is there, no
#     socket of any kind or state (a UDP one, a listener on another address,
#     a TIME_WAIT) is bound to it;
#   - not picked before by this script (each VAR gets its own port).
# It assigns rather than prints, so that the picks are remembered: call it as
# `pick_port A B`, not `A=$(pick_port)`.

port_free() { ! (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

# no socket is bound to local port $1 (true when ss is missing or fails)
hc_port_unbound() {
    local out
    command -v ss >/dev/null || return 0
    out=$(ss -Htuan "( sport = :$1 )" 2>/dev/null) || return 0
    [[ -z $out ]]
}

HC_PORTS_PICKED=" "
HC_PORT_LOW=
HC_PORT_SPAN=
hc_port_range() {
    [[ -n $HC_PORT_LOW ]] && return 0
    local low=32768 high=60999
    [[ -r /proc/sys/net/ipv4/ip_local_port_range ]] &&
        read -r low high </proc/sys/net/ipv4/ip_local_port_range
    if ((low - 10000 >= 1000)); then
        HC_PORT_LOW=10000 HC_PORT_SPAN=$((low - 10000))
    elif ((low - 1024 >= 1000)); then
        HC_PORT_LOW=1024 HC_PORT_SPAN=$((low - 1024))
    elif ((65535 - high >= 1000)); then
        HC_PORT_LOW=$((high + 1)) HC_PORT_SPAN=$((65535 - high))
    else
        die "no room for listening ports outside the ephemeral range $low-$high" \
            "(/proc/sys/net/ipv4/ip_local_port_range)"
    fi
}

pick_port() { # (locals named apart from any VAR: printf -v would set them)
    local hc_var hc_p hc_try
    hc_port_range
    for hc_var; do
        for ((hc_try = 0; ; hc_try++)); do
            ((hc_try < 10000)) || die "no free port in $HC_PORT_LOW-$((HC_PORT_LOW + HC_PORT_SPAN - 1))"
            hc_p=$((HC_PORT_LOW + ((RANDOM << 15) | RANDOM) % HC_PORT_SPAN))
            [[ $HC_PORTS_PICKED == *" $hc_p "* ]] && continue
            port_free "$hc_p" && hc_port_unbound "$hc_p" && break
        done
        HC_PORTS_PICKED+="$hc_p "
        printf -v "$hc_var" '%s' "$hc_p"
    done
}

wait_port() {
    local i
    for ((i = 0; i < ${2:-60} * 10; i++)); do
        port_free "$1" || return 0
        sleep 0.1
    done
    return 1
}

# --- numbers -------------------------------------------------------------------

now_ms() { date +%s%3N; }

# /proc/PID/schedstat has ns resolution; utime+stime from /proc/PID/stat
# (fields 14 and 15, counted after the command name, which may hold spaces)
# are 1/CLK_TCK s ticks (printed with %.0f: mawk's %d stops at 2^31).
# shellcheck disable=SC2034 # HC_CPU_CLOCK: for the scripts that source this
if [[ -r /proc/self/schedstat ]]; then
    HC_CPU_CLOCK=schedstat
    cpu_ns() { awk '{ print $1 }' "/proc/$1/schedstat"; }
else
    HC_CPU_CLOCK=utime+stime
    cpu_ns() {
        awk -v hz="$(getconf CLK_TCK)" '{ sub(/.*\) /, ""); printf "%.0f\n", ($12 + $13) * 1e9 / hz }' \
            "/proc/$1/stat"
    }
fi

# median D: of the numbers on stdin, one a line (blank lines skipped): the
# middle one as it is written for an odd count, the mean of the two middle
# ones with D decimals for an even one; "-" for no numbers, or when one of
# them is "-" (a figure that could not be measured).
median() {
    sort -g | awk -v d="$1" 'NF { v[++n] = $1; if ($1 == "-") dash = 1 } END {
        if (n == 0 || dash) print "-"
        else if (n % 2) print v[(n + 1) / 2]
        else printf "%." d "f\n", (v[n / 2] + v[n / 2 + 1]) / 2 }'
}

# --- reports -------------------------------------------------------------------

# shell_word WORD: WORD quoted for a shell (as it is when nothing in it needs
# quoting)
shell_word() {
    if [[ $1 =~ ^[A-Za-z0-9_./:=,+@%-]+$ ]]; then
        printf '%s' "$1"
    else
        printf "'%s'" "${1//\'/\'\\\'\'}"
    fi
}

# command_line "$@": the command line as given, quoted for a shell, for a
# report's header: the environment settings that steer the scripts and the
# build layout (BENCH_*, NGINX_*, NO_BUILD, KEEP, CARGO_TARGET_DIR, TMPDIR,
# sorted), then the script ($0) and its arguments.
command_line() {
    local v a line=
    for v in $(compgen -e | grep -E '^(BENCH_[A-Z_]+|NGINX_[A-Z_]+|NO_BUILD|KEEP|CARGO_TARGET_DIR|TMPDIR)$' | sort); do
        line+="$v=$(shell_word "${!v}") "
    done
    line+=$(shell_word "$0")
    for a; do line+=" $(shell_word "$a")"; done
    printf '%s\n' "$line"
}

# --- nginx ---------------------------------------------------------------------

# conf_head MODULE LEVEL CONNECTIONS [LINE...]: the start of an nginx.conf
# for `nginx -p DIR/`: `load_module MODULE;` (none when MODULE is empty), the
# main-context LINEs as given, the pid file and the error log (at LEVEL) in
# DIR/logs, `events { worker_connections CONNECTIONS; }`, then `http {` and
# `access_log off;`. The caller writes the rest of the http block and its
# closing brace.
conf_head() {
    local module=$1 level=$2 connections=$3 line
    shift 3
    if [[ -n $module ]]; then echo "load_module $module;"; fi
    for line; do echo "$line"; done
    echo "pid logs/nginx.pid;"
    echo "error_log logs/error.log $level;"
    echo "events { worker_connections $connections; }"
    echo "http {"
    echo "    access_log off;"
}

# backend_conf PORT [LINE...]: a whole nginx.conf for a plain nginx (no
# module), one worker, answering `200 ok` to everything on 127.0.0.1:PORT
# over kept-alive connections; the LINEs go into its server block.
backend_conf() {
    local listen="listen 127.0.0.1:$1 backlog=4096;" line
    shift
    conf_head "" warn 4096 "worker_processes 1;"
    echo "    keepalive_requests 1000000;"
    echo "    server {"
    echo "        $listen"
    printf '%s\n' '        location / { return 200 "ok\n"; }'
    for line; do echo "        $line"; done
    echo "    }"
    echo "}"
}

quit_nginx() {
    local d
    for d; do
        if [[ -s $d/logs/nginx.pid ]]; then
            kill -QUIT "$(cat "$d/logs/nginx.pid")" 2>/dev/null || true
        fi
    done
}

# --- the work directory ----------------------------------------------------------

# readable by nginx's workers (user nobody when run as root)
make_work() {
    WORK=$(mktemp -d "${TMPDIR:-/tmp}/$1.XXXXXX")
    chmod 755 "$WORK"
}

drop_work() {
    if [[ ${KEEP:-} == 1 ]]; then
        log "kept $WORK"
    else
        rm -rf "$WORK"
    fi
}
