//! The cluster as HTTP shows it: `GET /api/v1/nodes` (admin; PROTOCOL.md
//! section 12) and the per-peer series of `/metrics`.

use std::sync::atomic::Ordering::Relaxed;

use actix_web::{web, HttpRequest, HttpResponse};
use serde_json::{json, Value};
use termesh_config::Role;

use super::auth::require;
use super::auth::respond;
use super::AppState;

pub async fn nodes(req: HttpRequest, state: web::Data<AppState>) -> HttpResponse {
    respond((|| {
        require(&req, &state.node.tokens, Role::Admin)?;
        Ok(HttpResponse::Ok().json(list(&state)))
    })())
}

/// One object per configured node, this one first.
pub fn list(state: &AppState) -> Vec<Value> {
    let node = &state.node;
    let mut out = vec![json!({
        "name": node.node,
        "http": state.http_addr.to_string(),
        "quic": state.quic_addr.map(|a| a.to_string()),
        "self": true,
        "state": "up",
        "breaker": "closed",
        "stall_ms": node.stall.total().as_millis() as u64,
        "sessions": node.dir.len(),
        "mirrors": node.mesh.mirrors.len(),
        "bytes_in": 0,
        "bytes_out": 0,
    })];
    if let Some(not_after) = cert_not_after(state) {
        let now = termesh_actors::clock::now_ms() as i64 / 1000;
        out[0]["cert_expires_at"] = json!(not_after);
        out[0]["cert_days_left"] = json!((not_after - now) / 86_400);
    }
    for peer in node.mesh.peers.all() {
        let s = &peer.stats;
        let t = s.totals();
        let mut entry = json!({
            "name": peer.entry.name,
            "http": peer.entry.http.to_string(),
            "quic": peer.entry.quic.to_string(),
            "self": false,
            "state": s.state_name(),
            "breaker": s.breaker_name(),
            "stall_ms": s.peer_stall_ms.load(Relaxed),
            "sessions": node.mesh.view.count(&peer.entry.name),
            "bytes_in": t.bytes_in,
            "bytes_out": t.bytes_out,
        });
        let rtt = s.rtt_us.load(Relaxed);
        if rtt > 0 && s.state_name() == "up" {
            entry["rtt_ms"] = json!(rtt as f64 / 1000.0);
        }
        out.push(entry);
    }
    out
}

/// When this node's mesh certificate expires (unix seconds).
fn cert_not_after(state: &AppState) -> Option<i64> {
    super::membership::lock(&state.membership)
        .as_ref()
        .and_then(|m| m.not_after)
}

/// Prometheus lines for every peer link, and the mesh certificate's expiry.
pub fn metrics(state: &AppState) -> String {
    let mut out = String::new();
    if let Some(not_after) = cert_not_after(state) {
        let name = "termesh_cert_expiry_timestamp_seconds";
        out.push_str(&format!(
            "# HELP {name} When this node's mesh certificate expires (unix seconds).\n# TYPE {name} gauge\n{name}{{node=\"{}\"}} {not_after}\n",
            state.node.node
        ));
    }
    let peers = state.node.mesh.peers.all();
    if peers.is_empty() {
        return out;
    }
    type Get = fn(&termesh_actors::cluster::peer::LinkStats) -> f64;
    let series: [(&str, &str, &str, Get); 11] = [
        (
            "termesh_peer_up",
            "gauge",
            "1 while the link to the peer is up.",
            |s| f64::from(u8::from(s.state_name() == "up")),
        ),
        (
            "termesh_peer_rtt_seconds",
            "gauge",
            "Round-trip time of the last answered ping.",
            |s| s.rtt_us.load(Relaxed) as f64 / 1e6,
        ),
        (
            "termesh_peer_links_total",
            "counter",
            "Times the link came up.",
            |s| s.ups.load(Relaxed) as f64,
        ),
        (
            "termesh_peer_request_timeouts_total",
            "counter",
            "Forwarded requests the peer did not answer in 8 s.",
            |s| s.timeouts.load(Relaxed) as f64,
        ),
        (
            "termesh_peer_breaker_trips_total",
            "counter",
            "Times the breaker dropped the link.",
            |s| s.trips.load(Relaxed) as f64,
        ),
        (
            "termesh_peer_breaker_holds_total",
            "counter",
            "Times the breaker held the link because this node was stalled.",
            |s| s.holds.load(Relaxed) as f64,
        ),
        (
            "termesh_peer_bytes_in_total",
            "counter",
            "UDP bytes received from the peer.",
            |s| s.totals().bytes_in as f64,
        ),
        (
            "termesh_peer_bytes_out_total",
            "counter",
            "UDP bytes sent to the peer.",
            |s| s.totals().bytes_out as f64,
        ),
        (
            "termesh_peer_fast_frames_total",
            "counter",
            "Output frames of typed-into sessions sent to the peer on the link's fast data stream.",
            |s| s.fast_frames.load(Relaxed) as f64,
        ),
        (
            "termesh_peer_lost_packets_total",
            "counter",
            "QUIC packets to the peer declared lost (and sent again).",
            |s| s.totals().lost_packets as f64,
        ),
        (
            "termesh_peer_path_mtu_bytes",
            "gauge",
            "The largest UDP payload the link sends now, as its path MTU search found it (0 while down).",
            |s| s.path_mtu() as f64,
        ),
    ];
    for (name, kind, help, get) in series {
        out.push_str(&format!("# HELP {name} {help}\n# TYPE {name} {kind}\n"));
        for peer in &peers {
            out.push_str(&format!(
                "{name}{{node=\"{}\",peer=\"{}\"}} {}\n",
                state.node.node,
                peer.entry.name,
                get(&peer.stats)
            ));
        }
    }
    out
}
