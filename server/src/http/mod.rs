//! The HTTP transport: JSON API routes and request/response mapping, one file per resource,
//! plus the request guard (`guard`). Handlers extract, call `access`, the session core, the
//! store or the hub, and map the result; no SQL here, no hub locks held. It never calls `sse` or
//! `ws` (the application router in `app` puts the transports side by side).

mod archive;
mod auth;
mod blobs;
mod changes;
mod checkpoints;
mod csrf;
mod device;
mod export;
pub(crate) mod guard;
mod health;
mod inputs;
mod machines;
pub(crate) mod metrics;
mod notify;
mod offers;
mod recovery;
mod retention;
mod sessions;
mod setup;
mod sharing;
mod users;

use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use crate::access::AuthUser;
use crate::error::ApiError;
use crate::state::AppState;

/// The JSON API routes, relative to `/api/v1`, each registered with its description (see
/// `app::routes`).
pub(crate) fn api() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(sessions::me))
        .routes(routes!(sessions::list))
        .routes(routes!(sessions::get, sessions::delete))
        .routes(routes!(sessions::entries))
        .routes(routes!(retention::get, retention::put))
        .routes(routes!(retention::run))
        .routes(routes!(inputs::create))
        .routes(routes!(recovery::brief))
        .routes(routes!(recovery::transcript))
        .routes(routes!(export::export))
        .routes(routes!(sessions::close_bridge))
        .routes(routes!(checkpoints::list))
        .routes(routes!(checkpoints::put))
        .routes(routes!(checkpoints::get))
        .routes(routes!(checkpoints::diff))
        .routes(routes!(changes::changes))
        .routes(routes!(archive::archive))
        .routes(routes!(blobs::missing))
        .routes(routes!(blobs::get_blob, blobs::put_blob))
        .routes(routes!(auth::login))
        .routes(routes!(setup::status, setup::setup))
        .routes(routes!(auth::refresh))
        .routes(routes!(auth::logout))
        .routes(routes!(device::start))
        .routes(routes!(device::approve))
        .routes(routes!(device::deny))
        .routes(routes!(device::token))
        .routes(routes!(users::create_user))
        .routes(routes!(users::revoke_user))
        .routes(routes!(
            sharing::create_share_link,
            sharing::list_share_links
        ))
        .routes(routes!(sharing::list_members))
        .routes(routes!(sharing::redeem_share_link))
        .routes(routes!(sharing::preview_share_link))
        .routes(routes!(sharing::revoke_share_link))
        .routes(routes!(sharing::put_member, sharing::delete_member))
        .routes(routes!(offers::list_offers))
        .routes(routes!(offers::accept_offer))
        .routes(routes!(offers::decline_offer))
        .routes(routes!(notify::vapid))
        .routes(routes!(notify::list, notify::add))
        .routes(routes!(notify::remove))
        .routes(routes!(notify::list_sinks, notify::add_sink))
        .routes(routes!(notify::remove_sink))
        .routes(routes!(notify::mutes))
        .routes(routes!(notify::mute_class, notify::unmute_class))
        .routes(routes!(notify::mute_session, notify::unmute_session))
        .routes(routes!(
            notify::quiet_hours,
            notify::put_quiet_hours,
            notify::delete_quiet_hours
        ))
        .routes(routes!(notify::decide))
        .routes(routes!(notify::notification_text))
        .routes(routes!(machines::register, machines::list))
        .routes(routes!(machines::get))
        .routes(routes!(machines::credential))
        .routes(routes!(machines::start))
        .routes(routes!(machines::stop))
        .routes(routes!(machines::resume))
        .routes(routes!(machines::restore))
}

/// Answer for an unknown API route: 401 without credentials, else 404.
pub(crate) async fn not_found(_: AuthUser) -> ApiError {
    ApiError::NotFound("route")
}

/// `/healthz`, `/readyz` and `/metrics`.
pub(crate) fn health() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(health::get))
        .routes(routes!(health::ready))
        .routes(routes!(metrics::scrape))
}
