//! `strait certs`: generate a CA per cluster (each trusted for its own
//! cluster's identity only) and one gateway certificate
//! per cluster, in the Kubernetes secret layout (`<cluster>/tls.crt`,
//! `tls.key`, `ca.crt`), for demos and tests.

use std::collections::BTreeSet;
use std::io::Write;
use std::path::Path;
use std::time::Duration;

use crate::model::{ClusterId, check_dns_subdomain};
use crate::tls::{MAX_TRUST_DOMAIN_LEN, cluster_set_files, write_cluster_set_valid_for};

use super::{Refused, emit};

/// Writes the certificates under `out` and lists the files written on stdout.
pub(super) fn run(
    out: &Path,
    clusterset: &str,
    clusters: &[String],
    validity: Duration,
) -> Result<(), Refused> {
    let mut stdout = std::io::stdout().lock();
    run_to(out, clusterset, clusters, validity, &mut stdout)
}

/// The shortest validity accepted: a leaf must outlive a gateway's start.
const MIN_VALIDITY: Duration = Duration::from_secs(3600);

fn run_to(
    out: &Path,
    clusterset: &str,
    clusters: &[String],
    validity: Duration,
    report: &mut dyn Write,
) -> Result<(), Refused> {
    if validity < MIN_VALIDITY {
        return Err(Refused(format!(
            "--validity {} is shorter than an hour",
            humantime::format_duration(validity)
        )));
    }
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
    write_cluster_set_valid_for(out, clusterset, &ids, validity)
        .map_err(|e| Refused(e.to_string()))?;
    let listing: String = cluster_set_files(out, &ids)
        .iter()
        .map(|file| format!("wrote {}\n", file.display()))
        .collect();
    emit(report, &listing)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tls::DEFAULT_LEAF_VALIDITY;

    #[test]
    fn leaves_are_valid_for_what_validity_says_and_an_hour_at_least() {
        let out = tempfile::tempdir().expect("tempdir");
        let week = Duration::from_secs(7 * 86_400);
        run_to(out.path(), "set", &strings(&["c1"]), week, &mut Vec::new()).expect("written");
        let material = crate::tls::TlsMaterial::load(&out.path().join("c1")).expect("loads");
        let left = material
            .not_after()
            .duration_since(std::time::SystemTime::now())
            .expect("in the future");
        assert!(
            left > week - Duration::from_secs(60) && left <= week,
            "{left:?}"
        );
        let other = tempfile::tempdir().expect("tempdir");
        let refused = run_to(
            other.path(),
            "set",
            &strings(&["c1"]),
            Duration::from_secs(60),
            &mut Vec::new(),
        )
        .expect_err("too short");
        assert_eq!(refused.0, "--validity 1m is shorter than an hour");
    }

    fn strings(values: &[&str]) -> Vec<String> {
        values.iter().map(|v| (*v).to_owned()).collect()
    }

    #[test]
    fn writes_and_lists_every_file() {
        let out = tempfile::tempdir().expect("tempdir");
        let mut report = Vec::new();
        run_to(
            out.path(),
            "set",
            &strings(&["c1", "c2"]),
            DEFAULT_LEAF_VALIDITY,
            &mut report,
        )
        .expect("written");
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
            run_to(
                out.path(),
                set,
                &strings(clusters),
                DEFAULT_LEAF_VALIDITY,
                &mut Vec::new(),
            )
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
