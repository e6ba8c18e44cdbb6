//! What a tenant writes in its own namespace steers nobody else's traffic,
//! against real API servers, kube-proxy and CoreDNS.

use serde_json::Value;

use super::{Lab, echo_deployment, wait_until};

/// c1 exports `bank/api`; c3 imports it. A tenant of c3's namespace `aaa`
/// (which sorts before `bank`) exports a headless Service of its own pod
/// whose `exportedAnnotations` name Strait's import-port record with
/// bank/api's import port in c3. Strait drops the reserved key (its import
/// records `[]`), and every request of a c3 pod to bank/api's ClusterSetIP
/// is answered by bank/api's pod, none by the tenant's. (Before, 6 of 6
/// were answered by the tenant's pod.)
pub fn a_tenants_exported_annotations_claim_no_import_port(lab: &Lab) {
    lab.namespace("bank");
    lab.echo_service("c1", "bank", "api", 1, &[80]);
    let client = lab.client_pod("c3", "bank");
    let url = "http://api.bank.svc.clusterset.local/";
    wait_until("c3's pod reaches bank/api", 120, || {
        lab.curl("c3", "bank", client, url).is_ok()
    });
    let record = lab.field(
        "c3",
        "bank",
        &["serviceimport", "api"],
        "{.metadata.annotations.strait\\.dev/import-ports}",
    );
    let entries: Value = serde_json::from_str(&record).expect("the import-port record");
    let import_port = entries[0]["importPort"]
        .as_u64()
        .unwrap_or_else(|| panic!("an import port in {record}"));

    lab.namespace("aaa");
    let forged = format!(r#"[{{"protocol":"TCP","port":80,"importPort":{import_port}}}]"#);
    lab.apply(
        "c3",
        &format!(
            "{}---
apiVersion: v1
kind: Service
metadata: {{name: evil, namespace: aaa}}
spec:
  clusterIP: None
  selector: {{app: evil}}
  ports: [{{name: http, port: 80, targetPort: 8080}}]
---
apiVersion: multicluster.x-k8s.io/v1alpha1
kind: ServiceExport
metadata: {{name: evil, namespace: aaa}}
spec:
  exportedAnnotations:
    strait.dev/import-ports: '{forged}'
    team: aaa
",
            echo_deployment("aaa", "evil", 1)
        ),
    );
    wait_until("c3 imports aaa/evil with its own record", 120, || {
        lab.try_kubectl(
            "c3",
            &[
                "-n",
                "aaa",
                "get",
                "serviceimport",
                "evil",
                "-o",
                "jsonpath={.metadata.annotations.team} {.metadata.annotations.strait\\.dev/import-ports}",
            ],
        )
        .is_ok_and(|annotations| annotations == "aaa []")
    });
    // Long enough for every gateway replica to have read aaa's import.
    std::thread::sleep(std::time::Duration::from_secs(3));
    let answered: Vec<String> = (0..12)
        .map(|i| {
            lab.curl("c3", "bank", client, url)
                .unwrap_or_else(|e| panic!("request {i} to bank/api: {e}"))
        })
        .collect();
    assert!(
        answered.iter().all(|a| a.starts_with("bank/api-")),
        "bank/api's ClusterSetIP is answered by bank/api's pod only: {answered:#?}"
    );
}
