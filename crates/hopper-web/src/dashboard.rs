//! The web dashboard: one HTML page, one script, one stylesheet, compiled into the binary.
//!
//! The page holds no data; the script fetches everything from the API with the token the
//! user enters (kept in the tab's `sessionStorage`), so the assets need no authentication.
//! Links are built from the page's own path, so the dashboard works wherever
//! [`crate::router`] is nested.

use axum::Router;
use axum::extract::OriginalUri;
use axum::http::{HeaderValue, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;

use crate::WebState;

const INDEX_HTML: &str = include_str!("../assets/index.html");
const APP_JS: &str = include_str!("../assets/app.js");
const APP_CSS: &str = include_str!("../assets/app.css");
const FAVICON_SVG: &str = include_str!("../assets/favicon.svg");

/// The dashboard's routes.
pub(crate) fn routes() -> Router<WebState> {
    Router::new()
        .route("/", get(index))
        .route(
            "/assets/app.js",
            get(async || file(APP_JS, "text/javascript; charset=utf-8")),
        )
        .route(
            "/assets/app.css",
            get(async || file(APP_CSS, "text/css; charset=utf-8")),
        )
        .route(
            "/assets/favicon.svg",
            get(async || file(FAVICON_SVG, "image/svg+xml")),
        )
}

/// The page. Its links are absolute, built from the path it was asked for: nested at
/// `/ops/hopper`, the page is at `/ops/hopper` and its files under `/ops/hopper/assets/`.
/// (A trailing slash cannot be relied on: axum does not route `/ops/hopper/` to a nested
/// router's `/`.)
async fn index(OriginalUri(uri): OriginalUri) -> Response {
    let path = uri.path();
    let base = if path.ends_with('/') {
        path.to_owned()
    } else {
        format!("{path}/")
    };
    let page = INDEX_HTML.replace("__BASE__", &escape_html(&base));
    file(page, "text/html; charset=utf-8")
}

/// Escapes text for an HTML attribute value.
fn escape_html(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

fn file(body: impl IntoResponse, content_type: &'static str) -> Response {
    let mut response = body.into_response();
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    // Small files; always revalidate so an upgrade shows at once.
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    response
}
