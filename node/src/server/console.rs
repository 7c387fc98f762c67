//! The operator console, served by every node at `/` (and `/assets/...`):
//! the bundle built from `console/` (npm, esbuild) and committed in
//! `node/assets/console`, embedded in the binary at build time.

use actix_web::{web, HttpResponse};

const INDEX: &str = include_str!("../../assets/console/index.html");
const APP_JS: &str = include_str!("../../assets/console/app.js");
const APP_CSS: &str = include_str!("../../assets/console/app.css");

const CSP: &str = "default-src 'self'; connect-src 'self'; style-src 'self' 'unsafe-inline'; \
     img-src 'self' data:; frame-ancestors 'none'";

pub fn routes(cfg: &mut web::ServiceConfig) {
    cfg.route("/", web::get().to(index))
        .route("/assets/app.js", web::get().to(app_js))
        .route("/assets/app.css", web::get().to(app_css));
}

fn asset(content_type: &str, body: &'static str) -> HttpResponse {
    HttpResponse::Ok()
        .content_type(content_type)
        // The page talks to this node only: `connect-src 'self'` covers
        // its REST and its WebSocket (CSP 3 matches ws:/wss: of the same
        // host and port to 'self'), and no other page may frame it.
        .insert_header(("Content-Security-Policy", CSP))
        .insert_header(("X-Content-Type-Options", "nosniff"))
        .insert_header(("Cache-Control", "no-cache"))
        .body(body)
}

async fn index() -> HttpResponse {
    asset("text/html; charset=utf-8", INDEX)
}

async fn app_js() -> HttpResponse {
    asset("text/javascript; charset=utf-8", APP_JS)
}

async fn app_css() -> HttpResponse {
    asset("text/css; charset=utf-8", APP_CSS)
}
