# shellcheck shell=bash
# Where scripts/build puts things, so other scripts can find the same nginx.
#
#   source scripts/lib/layout.sh; hc_layout
#
# reads  NGINX_VERSION, NGINX_TARBALL, NGINX_SOURCE_DIR, NGINX_PREFIX,
#        NGINX_STOCK (all optional), HC_LIKE_VERSION (set by scripts/build --like)
# sets   HC_ROOT HC_BUILD HC_VERSION HC_FLAVOR(default|version|custom|stock|like)
#        HC_TREE HC_PREFIX HC_TARGET_DIR HC_NGINX HC_MODULE
#
# default (1.28.3)   build/nginx-src/        build/nginx/        target/
# NGINX_VERSION=X    build/nginx-src-X/      build/nginx-X/      build/target-X/
#                    (X may name a branch: 1.30 is 1.30.4; NGINX_TARBALL
#                    without NGINX_VERSION: the tarball's version)
# NGINX_SOURCE_DIR   build/nginx-src-custom/ build/nginx-custom/ build/target-custom/
# NGINX_STOCK=1      build/nginx-src-stock-X/ build/nginx-stock-X/ (no patch, no module:
#                    the unpatched baseline for tests and benchmarks)
# --like BIN         build/nginx-src-like-X/ build/like-X/       build/target-like-X/
#                    (X: BIN's version; HC_NGINX is BIN itself, never built)
# NGINX_PREFIX overrides the prefix in every case.

HC_DEFAULT_VERSION=1.28.3

# The release a branch name stands for (the one the project builds and
# tests); a full version as it is.
hc_full_version() {
    case $1 in
    1.30) echo 1.30.4 ;;
    1.28) echo 1.28.3 ;;
    1.26) echo 1.26.3 ;;
    1.22) echo 1.22.1 ;;
    *) echo "$1" ;;
    esac
}

# The nginx version inside a source tarball (its src/core/nginx.h); empty
# if it has none. Either layout: nginx.org's and GitHub's both keep one
# top directory.
hc_tarball_version() {
    { tar -xOf "$1" --wildcards '*/src/core/nginx.h' 2>/dev/null || true; } \
        | sed -n 's/^#define NGINX_VERSION *"\(.*\)"$/\1/p' | sed -n 1p
}

hc_layout() {
    HC_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
    HC_BUILD=$HC_ROOT/build
    if [[ -n ${NGINX_VERSION:-} ]]; then
        HC_VERSION=$(hc_full_version "$NGINX_VERSION")
    elif [[ -n ${NGINX_TARBALL:-} && -f $NGINX_TARBALL ]]; then
        HC_VERSION=$(hc_tarball_version "$NGINX_TARBALL")
        HC_VERSION=${HC_VERSION:-$HC_DEFAULT_VERSION}
    else
        HC_VERSION=$HC_DEFAULT_VERSION
    fi

    if [[ -n ${HC_LIKE_VERSION:-} ]]; then
        HC_VERSION=$HC_LIKE_VERSION
        HC_FLAVOR=like
        HC_TREE=$HC_BUILD/nginx-src-like-$HC_VERSION
        HC_PREFIX=$HC_BUILD/like-$HC_VERSION
        HC_TARGET_DIR=$HC_BUILD/target-like-$HC_VERSION
    elif [[ ${NGINX_STOCK:-} == 1 ]]; then
        HC_FLAVOR=stock
        HC_TREE=$HC_BUILD/nginx-src-stock-$HC_VERSION
        HC_PREFIX=$HC_BUILD/nginx-stock-$HC_VERSION
        HC_TARGET_DIR=$HC_BUILD/target-stock-unused
    elif [[ -n ${NGINX_SOURCE_DIR:-} ]]; then
        HC_FLAVOR=custom
        HC_TREE=$HC_BUILD/nginx-src-custom
        HC_PREFIX=$HC_BUILD/nginx-custom
        HC_TARGET_DIR=$HC_BUILD/target-custom
    elif [[ $HC_VERSION == "$HC_DEFAULT_VERSION" ]]; then
        HC_FLAVOR=default
        HC_TREE=$HC_BUILD/nginx-src
        HC_PREFIX=$HC_BUILD/nginx
        HC_TARGET_DIR=${CARGO_TARGET_DIR:-$HC_ROOT/target}
    else
        HC_FLAVOR=version
        HC_TREE=$HC_BUILD/nginx-src-$HC_VERSION
        HC_PREFIX=$HC_BUILD/nginx-$HC_VERSION
        HC_TARGET_DIR=$HC_BUILD/target-$HC_VERSION
    fi

    if [[ -n ${NGINX_PREFIX:-} ]]; then
        HC_PREFIX=$(realpath -m -- "$NGINX_PREFIX")
    fi
    HC_TARGET_DIR=$(realpath -m -- "$HC_TARGET_DIR")

    HC_NGINX=$HC_PREFIX/sbin/nginx
    HC_MODULE=$HC_PREFIX/modules/ngx_healthcheck_module.so
    if [[ $HC_FLAVOR == like ]]; then
        HC_NGINX=$HC_LIKE_BIN
    fi
}
