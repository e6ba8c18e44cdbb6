//! What a gateway says about itself to a peer gateway that asks
//! (docs/tunnel-protocol.md §11): `GET /strait.dev/about/v1` over the
//! tunnel (HTTP/2, or QUIC as the feed's request), answered with this cluster's id, its network, its
//! network map (gateway.yaml `networks`), and its clock. A peer's
//! gateway asks periodically (`src/gateway/probe.rs`) to learn that the
//! tunnel address answers a real request, how far the clocks are apart
//! and whether the two network maps agree; `strait check` reports it.
//! It also tells the asking cluster which of the services it exports this
//! cluster imports, and why not where it does not
//! ([`ImportAccount`](crate::export_status::ImportAccount)): the exporter writes that
//! into its ServiceExports' `Ready` message.
//! Nothing here steers traffic: the answer is compared, never applied.
//! Only a cluster of the set may ask, as for a `CONNECT` or the feed.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::SystemTime;

use bytes::Bytes;
use h2::server::SendResponse;
use http::{HeaderValue, Response, StatusCode};
use serde::{Deserialize, Serialize};

use crate::export_status::ImportAccount;
use crate::net::buffer::Chunk;
use crate::routing::RouteTable;
use crate::routing::inbound::known_caller;
use crate::state::GatewayState;
use crate::tls::Identity;
use crate::tunnel::ERROR_HEADER;
use crate::tunnel::quic::encode_response;

/// The path a peer asks.
pub const ABOUT_PATH: &str = "/strait.dev/about/v1";

/// The most of an answer a peer reads: a network map of a few thousand
/// clusters fits.
pub const ABOUT_LIMIT: usize = 256 << 10;

/// What a gateway says about itself. A reader ignores fields it does not
/// know: a newer gateway may say more.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct About {
    pub version: u32,
    /// The cluster the answering gateway belongs to.
    pub cluster: String,
    /// Its network, as its own cluster says (or its network map attests).
    pub network: String,
    /// Its network map (gateway.yaml `networks`) by cluster: cluster →
    /// network; empty when it has none.
    pub networks: BTreeMap<String, String>,
    /// Its clock when it answered, milliseconds since the Unix epoch.
    pub time_ms: u64,
    /// Which of the asking cluster's exports this cluster imports; absent
    /// when it does not know (it writes no imports, or has not read its
    /// namespaces yet).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub imports: Option<ImportAccount>,
}

impl About {
    /// What the gateway holding `table` and `network_map` says at `now`.
    pub fn of(
        table: &RouteTable,
        network_map: &BTreeMap<String, String>,
        now: SystemTime,
    ) -> About {
        About {
            version: 1,
            cluster: table.viewer().to_string(),
            network: table.network().to_string(),
            networks: network_map.clone(),
            time_ms: now
                .duration_since(SystemTime::UNIX_EPOCH)
                .map(|since| u64::try_from(since.as_millis()).unwrap_or(u64::MAX))
                .unwrap_or_default(),
            imports: None,
        }
    }
}

/// The answer's body for `caller`, or the status and reason of a refusal.
fn answer(caller: &Identity, state: &GatewayState) -> Result<Vec<u8>, (StatusCode, String)> {
    let table = state.routes.load();
    if let Err(refusal) = known_caller(&table, &caller.cluster, &state.inbound) {
        let refusal = super::inbound::refuse(state, caller, Some(ABOUT_PATH), refusal);
        return Err((StatusCode::FORBIDDEN, refusal.reason));
    }
    let mut about = About::of(&table, &state.network_map, SystemTime::now());
    about.imports = state
        .import_account
        .as_ref()
        .and_then(|account_of| account_of(&caller.cluster));
    serde_json::to_vec(&about).map_err(|error| {
        tracing::error!(%error, "rendering the about answer failed");
        (
            StatusCode::INTERNAL_SERVER_ERROR,
            "rendering failed".to_owned(),
        )
    })
}

/// Answers one about request over HTTP/2.
pub(super) fn serve(
    mut respond: SendResponse<Chunk>,
    caller: &Arc<Identity>,
    state: &Arc<GatewayState>,
) {
    let body = match answer(caller, state) {
        Ok(body) => body,
        Err((status, reason)) => {
            let mut response = Response::new(());
            *response.status_mut() = status;
            if let Ok(value) = HeaderValue::from_str(&reason) {
                response.headers_mut().insert(ERROR_HEADER, value);
            }
            let _ = respond.send_response(response, true);
            return;
        }
    };
    let mut response = Response::new(());
    response.headers_mut().insert(
        http::header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    if let Ok(mut send) = respond.send_response(response, false) {
        // Small: h2 holds what the peer's window does not take yet.
        let _ = send.send_data(Chunk::Shared(Bytes::from(body)), true);
    }
}

/// Answers one about request over QUIC (request frame version 4, as the
/// feed's): the response frame, then the body, then the stream's end.
pub(super) async fn serve_quic(
    mut send: quinn::SendStream,
    caller: &Arc<Identity>,
    state: &Arc<GatewayState>,
) {
    match answer(caller, state) {
        Ok(body) => {
            if send.write_all(&encode_response(200, "")).await.is_ok() {
                let _ = send.write_all(&body).await;
            }
        }
        Err((status, reason)) => {
            let _ = send
                .write_all(&encode_response(status.as_u16(), &reason))
                .await;
        }
    }
    let _ = send.finish();
}
