//! `strait certs`: generate a cluster set's CA and one gateway certificate
//! per cluster, in the Kubernetes secret layout (`<cluster>/tls.crt`,
//! `tls.key`, `ca.crt`), for demos and tests.

use std::collections::BTreeSet;
use std::io::Write;
use std::path::Path;

use crate::model::{ClusterId, check_dns_subdomain};
use crate::tls::{MAX_TRUST_DOMAIN_LEN, cluster_set_files, write_cluster_set};

use super::{Refused, emit};

/// Writes the certificates under `out` and lists the files written on stdout.
pub(super) fn run(out: &Path, clusterset: &str, clusters: &[String]) -> Result<(), Refused> {
    let mut stdout = std::io::stdout().lock();
    run_to(out, clusterset, clusters, &mut stdout)
}

fn run_to(
    out: &Path,
    clusterset: &str,
    clusters: &[String],
    report: &mut dyn Write,
) -> Result<(), Refused> {
    check_dns_subdomain(clusterset, MAX_TRUST_DOMAIN_LEN)
        .map_err(|e| Refused(format!("invalid cluster set id {clusterset:?}: {e}")))?;
    if clusters.is_empty() {
        return Err(Refused("no clusters given".to_owned()));
    }
    let mut ids = Vec::with_capacity(clusters.len());
    let mut seen = BTreeSet::new();
    for cluster in clusters {
        let id = ClusterId::new(cluster)
            .map_err(|e| Refused(format!("invalid cluster id {cluster:?}: {e}")))?;
        if !seen.insert(id.clone()) {
            return Err(Refused(format!("cluster {id} is listed more than once")));
        }
        ids.push(id);
    }
    write_cluster_set(out, clusterset, &ids).map_err(|e| Refused(e.to_string()))?;
    let listing: String = cluster_set_files(out, &ids)
        .iter()
        .map(|file| format!("wrote {}\n", file.display()))
        .collect();
    emit(report, &listing)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn strings(values: &[&str]) -> Vec<String> {
        values.iter().map(|v| (*v).to_owned()).collect()
    }

    #[test]
    fn writes_and_lists_every_file() {
        let out = tempfile::tempdir().expect("tempdir");
        let mut report = Vec::new();
        run_to(out.path(), "set", &strings(&["c1", "c2"]), &mut report).expect("written");
        let report = String::from_utf8(report).expect("utf-8");
        let lines: Vec<&str> = report.lines().collect();
        assert_eq!(lines.len(), 7, "{report}");
        for line in lines {
            let path = line.strip_prefix("wrote ").expect("prefix");
            assert!(Path::new(path).is_file(), "{path}");
        }
        assert!(crate::tls::TlsMaterial::load(&out.path().join("c2")).is_ok());
    }

    #[test]
    fn refuses_bad_input_before_writing() {
        let out = tempfile::tempdir().expect("tempdir");
        let refused = |set: &str, clusters: &[&str]| {
            run_to(out.path(), set, &strings(clusters), &mut Vec::new())
                .expect_err("refused")
                .0
        };
        assert!(refused("Set", &["c1"]).starts_with("invalid cluster set id \"Set\""));
        assert!(refused("set", &["c1", "C2"]).starts_with("invalid cluster id \"C2\""));
        assert_eq!(
            refused("set", &["c1", "c2", "c1"]),
            "cluster c1 is listed more than once"
        );
        assert_eq!(refused("set", &[]), "no clusters given");
        assert!(
            std::fs::read_dir(out.path())
                .expect("read dir")
                .next()
                .is_none()
        );
    }
}
