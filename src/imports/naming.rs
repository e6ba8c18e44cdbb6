//! Names and labels of the objects the import reconciler owns. The derived
//! Service is named as the mcs-api reference controller names it, so a
//! cluster that moves between implementations keeps its ClusterSetIPs'
//! Service names.

use data_encoding::BASE32HEX_NOPAD;

use crate::model::PodRef;
use crate::model::ServiceKey;

pub use crate::model::names::{
    DERIVED_SERVICE_ANNOTATION, MANAGED_BY_LABEL, MANAGED_BY_VALUE, POD_ANNOTATION,
    POD_CLUSTER_ANNOTATION,
};
/// The EndpointSlice controller label of slices Strait writes.
pub use crate::model::names::{
    ENDPOINTSLICE_MANAGED_BY_LABEL, IMPORTED_SLICE_MANAGER as ENDPOINTSLICE_MANAGED_BY_VALUE,
};
/// The field manager of every server-side apply.
pub const FIELD_MANAGER: &str = "strait";

/// `derived-` and the first ten characters of the lowercase, unpadded
/// base32hex encoding of sha256(`namespace/name`).
pub fn derived_service_name(key: &ServiceKey) -> String {
    hashed_name(&format!("{}/{}", key.namespace, key.name))
}

fn hashed_name(text: &str) -> String {
    let digest = ring::digest::digest(&ring::digest::SHA256, text.as_bytes());
    let encoded = BASE32HEX_NOPAD.encode(digest.as_ref()).to_ascii_lowercase();
    // sha256 gives 52 base32 characters: ten always exist.
    format!(
        "{}{}",
        crate::model::names::DERIVED_NAME_PREFIX,
        encoded.get(..10).unwrap_or(&encoded)
    )
}

/// The per-pod derived Service of one remote pod of a headless service:
/// `derived-` and ten characters of base32hex(sha256(`ns/name/cluster/pod`)),
/// the service-level scheme with the pod's name added.
pub fn pod_service_name(key: &ServiceKey, pod: &PodRef) -> String {
    hashed_name(&format!(
        "{}/{}/{}/{}",
        key.namespace, key.name, pod.cluster, pod.label
    ))
}

/// The name of one MCS EndpointSlice of an import: the service's name and
/// ten characters of base32hex(sha256(`ns/name/cluster/family/group`)),
/// where `group` tells apart a cluster's slices of different port sets.
pub fn mcs_slice_name(key: &ServiceKey, cluster: &str, family: &str, group: usize) -> String {
    let hashed = hashed_name(&format!(
        "{}/{}/{cluster}/{family}/{group}",
        key.namespace, key.name
    ));
    // `derived-` and ten characters; a Service name has at most 63, so the
    // slice name stays far below the 253 an object name may have.
    format!("{}-{}", key.name, hashed.trim_start_matches("derived-"))
}

/// The name of the derived Service's EndpointSlice for one address family.
pub fn gateway_slice_name(derived: &str, family: &str) -> String {
    format!("{derived}-{}", family.to_ascii_lowercase())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn derived_names_match_the_reference_controller() {
        // The reference controller's name for shop/cart, computed with Go's
        // base32.HexEncoding over sha256("shop/cart").
        let name = derived_service_name(&ServiceKey::new("shop", "cart"));
        assert_eq!(name, "derived-bsqa4s8pq5");
        assert_ne!(
            name,
            derived_service_name(&ServiceKey::new("shop", "carts"))
        );
    }
}
