//! Unit tests of the metric handles and the exposition.

use super::*;
use std::time::Duration;

fn closed(metrics: &Metrics, path: RoutePath, result: ClosedResult) -> u64 {
    metrics
        .connections_closed
        .get(&ClosedLabels { path, result })
        .map_or(0, |c| c.get())
}

fn active(metrics: &Metrics, path: RoutePath) -> i64 {
    metrics
        .connections_active
        .get(&PathLabels { path })
        .map_or(0, |g| g.get())
}

fn bytes(metrics: &Metrics, path: RoutePath, direction: Direction) -> u64 {
    metrics
        .bytes
        .get(&BytesLabels { path, direction })
        .map_or(0, |c| c.get())
}

#[test]
fn connection_counts_open_close_and_bytes() {
    let metrics = Metrics::new();
    let conn = metrics.connection(RoutePath::Tunnel, Transport::H2);
    assert_eq!(active(&metrics, RoutePath::Tunnel), 1);
    conn.dial(Duration::from_millis(3));
    conn.closed(ClosedResult::Ok, 100, 2500);

    let opened = metrics
        .connections_opened
        .get(&OpenedLabels {
            path: RoutePath::Tunnel,
            transport: Transport::H2,
        })
        .map_or(0, |c| c.get());
    assert_eq!(opened, 1);
    assert_eq!(active(&metrics, RoutePath::Tunnel), 0);
    assert_eq!(closed(&metrics, RoutePath::Tunnel, ClosedResult::Ok), 1);
    assert_eq!(closed(&metrics, RoutePath::Tunnel, ClosedResult::Error), 0);
    assert_eq!(
        bytes(&metrics, RoutePath::Tunnel, Direction::ClientToBackend),
        100
    );
    assert_eq!(
        bytes(&metrics, RoutePath::Tunnel, Direction::BackendToClient),
        2500
    );
    assert_eq!(active(&metrics, RoutePath::Direct), 0);
}

#[test]
fn drop_without_closed_decrements_active_once() {
    let metrics = Metrics::new();
    let first = metrics.connection(RoutePath::Direct, Transport::None);
    let second = metrics.connection(RoutePath::Direct, Transport::None);
    assert_eq!(active(&metrics, RoutePath::Direct), 2);

    drop(first);
    assert_eq!(active(&metrics, RoutePath::Direct), 1);
    assert_eq!(closed(&metrics, RoutePath::Direct, ClosedResult::Error), 1);

    second.closed(ClosedResult::Timeout, 0, 0);
    assert_eq!(active(&metrics, RoutePath::Direct), 0);
    assert_eq!(
        closed(&metrics, RoutePath::Direct, ClosedResult::Timeout),
        1
    );
    assert_eq!(closed(&metrics, RoutePath::Direct, ClosedResult::Error), 1);

    // A handle held by a task that panics still closes, once.
    let third = metrics.connection(RoutePath::Direct, Transport::None);
    assert_eq!(active(&metrics, RoutePath::Direct), 1);
    let task = std::thread::spawn(move || {
        let _held = third;
        panic!("connection task fails");
    });
    assert!(task.join().is_err(), "the task panicked");
    assert_eq!(active(&metrics, RoutePath::Direct), 0);
    assert_eq!(closed(&metrics, RoutePath::Direct, ClosedResult::Error), 2);
}

#[test]
fn pool_refused_reload_and_route_sizes() {
    let metrics = Metrics::new();
    let pool = metrics.pool("10.0.0.1:15443");
    pool.connections_add(2);
    pool.connections_add(-1);
    pool.streams_add(5);
    let again = metrics.pool("10.0.0.1:15443");
    again.streams_add(-2);
    let labels = PeerLabels {
        peer: "10.0.0.1:15443".to_owned(),
    };
    let conns = metrics
        .tunnel_pool_connections
        .get(&labels)
        .map(|g| g.get());
    let streams = metrics.tunnel_pool_streams.get(&labels).map(|g| g.get());
    assert_eq!(conns, Some(1));
    assert_eq!(streams, Some(3));

    metrics.refused(RefusedReason::Forbidden);
    metrics.refused(RefusedReason::Forbidden);
    metrics.reload(ReloadKind::Tls, ReloadResult::Error);
    metrics.set_route_sizes(4, 17);
    let refused = metrics
        .tunnel_requests_refused
        .get(&RefusedLabels {
            reason: RefusedReason::Forbidden,
        })
        .map(|c| c.get());
    assert_eq!(refused, Some(2));
    assert_eq!(metrics.routes_services.get(), 4);
    assert_eq!(metrics.routes_backends.get(), 17);
}

#[test]
fn encode_names_metrics_and_label_values() {
    let metrics = Metrics::new();
    let conn = metrics.connection(RoutePath::Inbound, Transport::Quic);
    conn.dial(Duration::from_micros(700));
    conn.closed(ClosedResult::DialError, 1, 2);
    metrics.pool("gw.example:15443").streams_add(1);
    metrics.refused(RefusedReason::UnknownService);
    metrics.reload(ReloadKind::Routes, ReloadResult::Ok);
    metrics.set_route_sizes(1, 2);

    let text = metrics.encode();
    for needle in [
        r#"strait_connections_opened_total{path="inbound",transport="quic"} 1"#,
        r#"strait_connections_active{path="inbound"} 0"#,
        r#"strait_connections_closed_total{path="inbound",result="dial_error"} 1"#,
        r#"strait_bytes_total{path="inbound",direction="client_to_backend"} 1"#,
        r#"strait_bytes_total{path="inbound",direction="backend_to_client"} 2"#,
        "# TYPE strait_dial_duration_seconds histogram",
        r#"strait_dial_duration_seconds_bucket{le="0.0005",path="inbound"} 0"#,
        r#"strait_dial_duration_seconds_bucket{le="0.001",path="inbound"} 1"#,
        r#"strait_dial_duration_seconds_bucket{le="10.0",path="inbound"} 1"#,
        r#"strait_dial_duration_seconds_count{path="inbound"} 1"#,
        r#"strait_tunnel_pool_streams{peer="gw.example:15443"} 1"#,
        r#"strait_tunnel_requests_refused_total{reason="unknown_service"} 1"#,
        r#"strait_reloads_total{kind="routes",result="ok"} 1"#,
        "strait_routes_services 1",
        "strait_routes_backends 2",
    ] {
        assert!(text.contains(needle), "missing {needle:?} in:\n{text}");
    }
    assert!(text.ends_with("# EOF\n"), "no EOF marker:\n{text}");
}

#[test]
fn label_values_are_snake_case() {
    let all: Vec<&str> = RoutePath::ALL
        .iter()
        .map(|v| v.as_str())
        .chain(Transport::ALL.iter().map(|v| v.as_str()))
        .chain(ClosedResult::ALL.iter().map(|v| v.as_str()))
        .chain(Direction::ALL.iter().map(|v| v.as_str()))
        .chain(RefusedReason::ALL.iter().map(|v| v.as_str()))
        .chain(ReloadKind::ALL.iter().map(|v| v.as_str()))
        .chain(ReloadResult::ALL.iter().map(|v| v.as_str()))
        .chain(WriteResult::ALL.iter().map(|v| v.as_str()))
        .collect();
    for value in all {
        assert!(
            value
                .chars()
                .all(|c| c.is_ascii_lowercase() || c == '_' || c.is_ascii_digit()),
            "{value}"
        );
    }
}

#[test]
fn cluster_sync_state_is_exposed_and_forgotten() {
    let metrics = Metrics::new();
    metrics.set_cluster_sync("east-1", true, false, 0, 0);
    metrics.set_cluster_sync("west-1", false, true, 1, 3);
    // The same report twice does not count the transition twice.
    metrics.set_cluster_sync("west-1", false, true, 1, 3);
    let text = metrics.encode();
    for needle in [
        r#"strait_cluster_synced{cluster="east-1"} 1"#,
        r#"strait_cluster_stale{cluster="east-1"} 0"#,
        r#"strait_cluster_synced{cluster="west-1"} 0"#,
        r#"strait_cluster_stale{cluster="west-1"} 1"#,
        r#"strait_cluster_went_stale_total{cluster="west-1"} 1"#,
        r#"strait_cluster_watch_errors_total{cluster="west-1"} 3"#,
    ] {
        assert!(text.contains(needle), "missing {needle:?} in:\n{text}");
    }
    metrics.remove_cluster("west-1");
    assert!(!metrics.encode().contains("west-1"));
}

#[test]
fn export_status_leadership_and_writes_are_exposed() {
    let metrics = Metrics::new();
    metrics.set_export_status(true, 2, 1);
    // The same totals twice do not count twice.
    metrics.set_export_status(true, 2, 1);
    let text = metrics.encode();
    for needle in [
        "strait_export_status_leader 1",
        r#"strait_export_status_writes_total{result="ok"} 2"#,
        r#"strait_export_status_writes_total{result="error"} 1"#,
    ] {
        assert!(text.contains(needle), "missing {needle:?} in:\n{text}");
    }
    metrics.set_export_status(false, 3, 1);
    let text = metrics.encode();
    assert!(text.contains("strait_export_status_leader 0"), "{text}");
    assert!(
        text.contains(r#"strait_export_status_writes_total{result="ok"} 3"#),
        "{text}"
    );
}
