//! Translation tests, cluster by cluster: the cluster properties (id,
//! network, cluster set) and how clusters are assembled into one set.

use super::*;
use crate::model::Infrastructure;

#[test]
fn cluster_id_and_network_come_from_cluster_properties_of_either_version() {
    for version in ["v1alpha1", "v1beta1"] {
        let text = [
            property(version, CLUSTER_ID_PROPERTY, "east-1.prod"),
            property(version, NETWORK_PROPERTY, "net-a"),
            property(version, CLUSTERSET_PROPERTY, "shop-set"),
        ]
        .join("---\n");
        let (cluster, found) = translate(&text);
        assert!(found.is_empty(), "{version}: {found:#?}");
        let cluster = cluster.expect("the cluster names itself");
        assert_eq!(cluster.id.as_str(), "east-1.prod", "{version}");
        assert_eq!(cluster.network.as_str(), "net-a", "{version}");
        assert_eq!(cluster.clusterset.as_deref(), Some("shop-set"));
        assert_eq!(cluster.source, FOLDER);
    }
}

#[test]
fn a_cluster_without_network_property_is_on_the_default_network() {
    let cluster = clean("");
    assert_eq!(cluster.network.as_str(), "default");
    assert_eq!(cluster.clusterset, None);
    assert!(cluster.services.is_empty() && cluster.gateways.is_empty());
}

#[test]
fn the_network_property_name_is_configurable() {
    let network_property = "network.example.com".to_owned();
    let text = [
        ID.to_owned(),
        property("v1beta1", NETWORK_PROPERTY, "ignored"),
        property("v1beta1", &network_property, "net-b"),
    ]
    .join("---\n");
    let options = TranslateOptions {
        network_property,
        ..TranslateOptions::default()
    };
    let (cluster, found) = translate_in(FOLDER, &text, &options);
    assert!(found.is_empty(), "{found:#?}");
    assert_eq!(cluster.expect("named").network.as_str(), "net-b");
}

#[test]
fn the_network_map_decides_networks_not_what_a_cluster_says() {
    let map: BTreeMap<ClusterId, NetworkId> = [("c1", "net-a"), ("c3", "net-b")]
        .into_iter()
        .map(|(c, n)| {
            (
                ClusterId::new(c).expect("id"),
                NetworkId::new(n).expect("net"),
            )
        })
        .collect();
    let options = TranslateOptions {
        networks: Some(Arc::new(map)),
        ..TranslateOptions::default()
    };
    // c1 claims net-b, which would make it a gateway of net-b for every
    // peer and admit it where net-b is: the map's net-a is used.
    let text = [
        ID.to_owned(),
        property("v1beta1", NETWORK_PROPERTY, "net-b"),
    ]
    .join("---\n");
    let (cluster, found) = translate_in(FOLDER, &text, &options);
    let cluster = cluster.expect("c1 is in the map");
    assert_eq!(cluster.network.as_str(), "net-a");
    assert!(cluster.network_attested);
    assert!(!only(&found).is_error(), "{}", found[0]);
    assert!(
        found[0].message.contains("the network map") && found[0].message.contains("\"net-a\""),
        "{}",
        found[0]
    );
    // A cluster the map does not name is left out of the set.
    let text = property("v1beta1", CLUSTER_ID_PROPERTY, "c9");
    let (cluster, found) = translate_in(FOLDER, &text, &options);
    assert!(cluster.is_none(), "an unattested cluster is left out");
    assert!(only(&found).is_error());
    assert!(
        found[0].message.contains("not in the network map"),
        "{}",
        found[0]
    );
    // Without a map a cluster's network is its own word, never attested.
    let (cluster, _) = translate(
        &[
            ID.to_owned(),
            property("v1beta1", NETWORK_PROPERTY, "net-b"),
        ]
        .join("---\n"),
    );
    let cluster = cluster.expect("named");
    assert_eq!(cluster.network.as_str(), "net-b");
    assert!(!cluster.network_attested);
}

#[test]
fn an_invalid_network_id_is_an_error_on_its_property() {
    let text = property("v1alpha1", NETWORK_PROPERTY, "Net_A");
    let at = format!("2 ClusterProperty {NETWORK_PROPERTY} spec.value");
    let cluster = expect_error(&text, &at, "invalid network id: \"Net_A\"");
    assert_eq!(cluster.network.as_str(), "default");
}

#[test]
fn invalid_cluster_ids_are_one_error_on_spec_value() {
    let at = format!("1 ClusterProperty {CLUSTER_ID_PROPERTY} spec.value");
    // Labels are at most 63 characters, so long ids have several.
    let long = format!("{}.{}.c", "a".repeat(63), "b".repeat(62));
    for (value, says) in [("East-1", "\"East-1\""), (&long, "is 128 characters")] {
        let (cluster, found) = translate(&property("v1alpha1", CLUSTER_ID_PROPERTY, value));
        assert!(cluster.is_none(), "{value} must not name a cluster");
        // The property is there: no second "not found" error.
        assert!(only(&found).is_error());
        assert_at(&found[0], &at, "invalid cluster id");
        assert!(found[0].message.contains(says), "{}", found[0]);
    }
    let longest = format!("{}.{}", "a".repeat(63), "b".repeat(63));
    assert_eq!(longest.len(), MAX_CLUSTER_ID_LEN);
    let (cluster, _) = translate(&property("v1beta1", CLUSTER_ID_PROPERTY, &longest));
    let cluster = cluster.expect("127 characters are allowed");
    assert_eq!(cluster.id.as_str(), longest);
}

/// KEP-2149's other name for the id property is read where the first is
/// absent; where both disagree, `cluster.clusterset.k8s.io` is used and
/// the other is reported.
#[test]
fn the_id_k8s_io_property_names_a_cluster_without_the_other() {
    let (cluster, found) = translate(&property("v1beta1", ALT_CLUSTER_ID_PROPERTY, "west-1"));
    assert!(found.is_empty(), "{found:#?}");
    assert_eq!(cluster.expect("named").id.as_str(), "west-1");

    let both = |alternate: &str| {
        [
            property("v1beta1", CLUSTER_ID_PROPERTY, "west-1"),
            property("v1beta1", ALT_CLUSTER_ID_PROPERTY, alternate),
        ]
        .join("---\n")
    };
    let (cluster, found) = translate(&both("west-1"));
    assert!(found.is_empty(), "they agree: {found:#?}");
    assert_eq!(cluster.expect("named").id.as_str(), "west-1");
    let (cluster, found) = translate(&both("west-2"));
    assert_eq!(cluster.expect("named").id.as_str(), "west-1");
    let warning = only(&found);
    assert!(!warning.is_error());
    assert_eq!(
        warning.object.as_deref(),
        Some(format!("ClusterProperty {ALT_CLUSTER_ID_PROPERTY}").as_str())
    );
    assert!(warning.message.contains("\"west-2\""), "{warning}");

    // Alone and invalid: one error on it, as for the other name.
    let (cluster, found) = translate(&property("v1beta1", ALT_CLUSTER_ID_PROPERTY, "West_1"));
    assert!(cluster.is_none());
    assert!(only(&found).is_error());
    assert!(
        found[0].message.contains("invalid cluster id"),
        "{}",
        found[0]
    );
}

#[test]
fn a_folder_without_cluster_id_is_an_error_naming_the_folder() {
    let (cluster, found) = translate(&svc("cart", HTTP));
    assert!(cluster.is_none());
    let error = only(&found);
    assert!(error.is_error());
    assert_eq!(error.origin, Origin::file(FOLDER));
    assert!(error.message.contains(CLUSTER_ID_PROPERTY), "{error}");
}

#[test]
fn assemble_joins_distinct_clusters() {
    let a = cluster_in("clusters/a", "a", Some("s"));
    let b = cluster_in("clusters/b", "b", None);
    let (set, errors) = assemble(vec![a, b]);
    assert!(errors.is_empty(), "distinct ids: {errors:?}");
    assert_eq!(set.clusters.len(), 2);
    let b = set.cluster("b").expect("b is in the set");
    assert_eq!(b.source, "clusters/b");
}

#[test]
fn two_folders_with_the_same_cluster_id_both_leave_the_set_and_nothing_else() {
    let a = cluster_in("clusters/a", "c1", None);
    let b = cluster_in("clusters/b", "c1", None);
    let other = cluster_in("clusters/o", "other", None);
    let (set, errors) = assemble(vec![a, b, other]);
    // Neither c1 can be told from the other: neither is used; `other` is.
    assert_eq!(
        set.clusters
            .keys()
            .map(|id| id.as_str())
            .collect::<Vec<_>>(),
        ["other"]
    );
    assert_eq!(errors.len(), 2, "one error per claimant: {errors:?}");
    let origins: Vec<&Origin> = errors.iter().map(|e| &e.origin).collect();
    assert_eq!(
        origins,
        [&Origin::file("clusters/a"), &Origin::file("clusters/b")]
    );
    for error in &errors {
        assert!(error.is_error());
        let message = &error.message;
        let names = message.contains("clusters/a")
            && message.contains("clusters/b")
            && message.contains("\"c1\"");
        assert!(names, "{error}");
        assert_eq!(error.field.as_deref(), Some("spec.value"));
        let object = format!("ClusterProperty {CLUSTER_ID_PROPERTY}");
        assert_eq!(error.object, Some(object));
        assert_eq!(error.cluster.as_deref(), Some("c1"));
    }
}

#[test]
fn a_cluster_stating_another_cluster_set_leaves_the_set_alone() {
    let a = cluster_in("clusters/a", "a", Some("blue"));
    let b = cluster_in("clusters/b", "b", None);
    let c = cluster_in("clusters/c", "c", Some("green"));
    let (set, errors) = assemble(vec![a, b, c]);
    assert_eq!(
        set.clusters
            .keys()
            .map(|id| id.as_str())
            .collect::<Vec<_>>(),
        ["a", "b"]
    );
    let error = only(&errors);
    assert_eq!(error.origin, Origin::file("clusters/c"));
    for says in ["\"green\"", "\"blue\"", "clusters/a", "left out"] {
        assert!(error.message.contains(says), "{error}: {says}");
    }
    let object = format!("ClusterProperty {CLUSTERSET_PROPERTY}");
    assert_eq!(error.object, Some(object));
}

/// Machinery a peer must never have dialled, from every Service of the
/// cluster: ClusterIPs, external IPs, load balancer addresses, and the API
/// server's own endpoints (`default/kubernetes`).
#[test]
fn machinery_holds_external_and_load_balancer_ips_and_the_api_servers_endpoints() {
    let lb = "apiVersion: v1\nkind: Service\nmetadata: {name: lb, namespace: shop}\nspec: {clusterIP: 10.96.0.9, externalIPs: [203.0.113.7], ports: [{port: 80}]}\nstatus: {loadBalancer: {ingress: [{ip: 203.0.113.8}, {hostname: lb.example.com}]}}\n";
    let api = "apiVersion: discovery.k8s.io/v1\nkind: EndpointSlice\nmetadata: {name: kubernetes, namespace: default, labels: {kubernetes.io/service-name: kubernetes}}\naddressType: IPv4\nendpoints: [{addresses: [192.0.2.10], conditions: {ready: true}}]\nports: [{name: https, port: 6443, protocol: TCP}]\n";
    let (cluster, _) = in_c1(&format!("{lb}---\n{api}"));
    let found: Vec<(String, Infrastructure)> = cluster
        .infrastructure
        .iter()
        .map(|(ip, what)| (ip.to_string(), *what))
        .collect();
    for expected in [
        ("10.96.0.9", Infrastructure::ServiceIp),
        ("192.0.2.10", Infrastructure::ApiServer),
        ("203.0.113.7", Infrastructure::ExternalIp),
        ("203.0.113.8", Infrastructure::LoadBalancerIp),
    ] {
        let expected = (expected.0.to_owned(), expected.1);
        assert!(found.contains(&expected), "{expected:?} in {found:?}");
    }
}
