# shellcheck shell=bash
# Where scripts/build puts things, so other scripts can find the same nginx.
#
#   source scripts/lib/layout.sh; hc_layout
#
# reads  NGINX_VERSION, NGINX_SOURCE_DIR, NGINX_PREFIX, NGINX_STOCK (all optional)
# sets   HC_ROOT HC_BUILD HC_VERSION HC_FLAVOR(default|version|custom|stock)
#        HC_TREE HC_PREFIX HC_TARGET_DIR HC_NGINX HC_MODULE
#
# default (1.28.3)   build/nginx-src/        build/nginx/        target/
# NGINX_VERSION=X    build/nginx-src-X/      build/nginx-X/      build/target-X/
# NGINX_SOURCE_DIR   build/nginx-src-custom/ build/nginx-custom/ build/target-custom/
# NGINX_STOCK=1      build/nginx-src-stock-X/ build/nginx-stock-X/ (no patch, no module:
#                    the unpatched baseline for tests and benchmarks)
# NGINX_PREFIX overrides the prefix in every case.

HC_DEFAULT_VERSION=1.28.3

hc_layout() {
    HC_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
    HC_BUILD=$HC_ROOT/build
    HC_VERSION=${NGINX_VERSION:-$HC_DEFAULT_VERSION}

    if [[ ${NGINX_STOCK:-} == 1 ]]; then
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
}
