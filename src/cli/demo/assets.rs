//! The demo cluster set, compiled into the binary so `strait demo` runs
//! anywhere: the same files as `gateway-config/demo/`.

/// `(path inside the configuration directory, contents)`.
pub(super) const FILES: &[(&str, &str)] = &[
    (
        "clusters/east-1/cluster.yaml",
        include_str!("../../../gateway-config/demo/clusters/east-1/cluster.yaml"),
    ),
    (
        "clusters/east-1/imports.yaml",
        include_str!("../../../gateway-config/demo/clusters/east-1/imports.yaml"),
    ),
    (
        "clusters/east-1/shop.yaml",
        include_str!("../../../gateway-config/demo/clusters/east-1/shop.yaml"),
    ),
    (
        "clusters/east-2/cluster.yaml",
        include_str!("../../../gateway-config/demo/clusters/east-2/cluster.yaml"),
    ),
    (
        "clusters/east-2/shop.yaml",
        include_str!("../../../gateway-config/demo/clusters/east-2/shop.yaml"),
    ),
    (
        "clusters/edge-1/cluster.yaml",
        include_str!("../../../gateway-config/demo/clusters/edge-1/cluster.yaml"),
    ),
    (
        "clusters/edge-1/db.yaml",
        include_str!("../../../gateway-config/demo/clusters/edge-1/db.yaml"),
    ),
    (
        "clusters/edge-1/shop.yaml",
        include_str!("../../../gateway-config/demo/clusters/edge-1/shop.yaml"),
    ),
    (
        "clusters/west-1/cluster.yaml",
        include_str!("../../../gateway-config/demo/clusters/west-1/cluster.yaml"),
    ),
    (
        "clusters/west-1/db.yaml",
        include_str!("../../../gateway-config/demo/clusters/west-1/db.yaml"),
    ),
    (
        "clusters/west-1/imports.yaml",
        include_str!("../../../gateway-config/demo/clusters/west-1/imports.yaml"),
    ),
    (
        "clusters/west-1/shop.yaml",
        include_str!("../../../gateway-config/demo/clusters/west-1/shop.yaml"),
    ),
    (
        "gateway.yaml",
        include_str!("../../../gateway-config/demo/gateway.yaml"),
    ),
];
