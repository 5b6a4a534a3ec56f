
/*
 * LD_PRELOAD helper for patches/smoke-test/run: with HOOK_ON set, it sets
 * both check hooks to a function that marks every peer on port 9002 down.
 */


#include <ngx_config.h>
#include <ngx_core.h>
#include <ngx_http.h>
#include <ngx_stream.h>


static ngx_uint_t
ngx_smoke_down(ngx_str_t *name)
{
    return name->len > 5
           && ngx_strncmp(name->data + name->len - 5, ":9002", 5) == 0;
}


static ngx_uint_t
ngx_smoke_http_down(ngx_http_upstream_rr_peers_t *peers,
    ngx_http_upstream_rr_peer_t *peer)
{
    return ngx_smoke_down(&peer->name);
}


static ngx_uint_t
ngx_smoke_stream_down(ngx_stream_upstream_rr_peers_t *peers,
    ngx_stream_upstream_rr_peer_t *peer)
{
    return ngx_smoke_down(&peer->name);
}


static void __attribute__((constructor))
ngx_smoke_init(void)
{
    if (getenv("HOOK_ON") != NULL) {
        ngx_http_upstream_check_peer_down_hook = ngx_smoke_http_down;
        ngx_stream_upstream_check_peer_down_hook = ngx_smoke_stream_down;
    }
}
