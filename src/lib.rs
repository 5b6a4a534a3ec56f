//! ngx_healthcheck_module: nginx dynamic module (http + stream + vnswrr).
